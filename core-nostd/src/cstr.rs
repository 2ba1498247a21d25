//! Fixed-size, NUL-padded name fields (hints, model and tensor names) and the MB figures of
//! the reports: the few text helpers the core's structs need, in one place.
#![deny(unsafe_code)]

use core::fmt::{self, Write as _};

/// Copies `s` into the all-zero field `dst` as a NUL-terminated, NUL-padded C string,
/// truncated at a character boundary to `dst.len() - 1` bytes.
///
/// Every caller fills a fresh (zeroed) arena slot, so only the text is written: the padding
/// and terminator are already there. On the `dmem_alloc` path this halves the hint's cost.
#[inline]
pub(crate) fn copy_c_name(dst: &mut [u8], s: &str) {
    debug_assert!(
        dst.iter().all(|b| *b == 0),
        "copy_c_name needs a zeroed field"
    );
    let mut n = s.len().min(dst.len().saturating_sub(1));
    while n > 0 && !s.is_char_boundary(n) {
        n -= 1;
    }
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// The text of a NUL-padded name field (`"?"` when it is not UTF-8).
pub fn c_name(b: &[u8]) -> &str {
    let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
    core::str::from_utf8(&b[..end]).unwrap_or("?")
}

/// Caller-supplied text (a hint, a model or tensor name) as a report shows it: control
/// characters are escaped as Rust escapes them (`\n`, `\u{1b}`), so a name can neither forge
/// report lines nor send terminal escape sequences. Everything else is shown as is. Honours
/// width, fill and alignment (`{:<22}`) like `str`, counted in shown characters.
#[derive(Copy, Clone, Debug)]
pub struct Printable<'a>(pub &'a str);

impl fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.0.chars().any(char::is_control) {
            return f.pad(self.0);
        }
        let len: usize = self
            .0
            .chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_debug().count()
                } else {
                    1
                }
            })
            .sum();
        let gap = f.width().map_or(0, |w| w.saturating_sub(len));
        let (before, after) = match f.align() {
            Some(fmt::Alignment::Right) => (gap, 0),
            Some(fmt::Alignment::Center) => (gap / 2, gap - gap / 2),
            _ => (0, gap),
        };
        let fill = f.fill();
        for _ in 0..before {
            f.write_char(fill)?;
        }
        for c in self.0.chars() {
            if c.is_control() {
                for e in c.escape_debug() {
                    f.write_char(e)?;
                }
            } else {
                f.write_char(c)?;
            }
        }
        for _ in 0..after {
            f.write_char(fill)?;
        }
        Ok(())
    }
}

/// Bytes as libnrt's reports print them: MB (2^20) with three decimals (`%.3f`).
pub(crate) fn mb(b: u64) -> Fixed3 {
    Fixed3(b, 1 << 20)
}

/// `num / unit` with three decimals, rounded as `%.3f` rounds the exact quotient (half to
/// even), computed in integers so that no float formatting is linked into an image. Honours
/// width and alignment (`{:>10}`); a precision is not meaningful for it.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Fixed3(pub(crate) u64, pub(crate) u64);

impl fmt::Display for Fixed3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = u128::from(self.1.max(1));
        let q = u128::from(self.0) * 1000;
        let (mut whole, rem) = (q / unit, q % unit);
        if rem * 2 > unit || (rem * 2 == unit && whole % 2 == 1) {
            whole += 1;
        }
        // "18446744073709551615.000" is the longest text: 24 bytes.
        let mut buf = StackText::<32>::new();
        let _ = write!(buf, "{}.{:03}", whole / 1000, whole % 1000);
        f.pad(buf.as_str())
    }
}

/// A small text buffer on the stack (writes past its end are cut off).
struct StackText<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> StackText<N> {
    fn new() -> Self {
        StackText {
            buf: [0; N],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        // Only whole `&str`s are appended (`write_str` refuses what does not fit whole).
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl<const N: usize> fmt::Write for StackText<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self
            .len
            .checked_add(s.len())
            .filter(|e| *e <= N)
            .ok_or(fmt::Error)?;
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The integer MB text is what `%.3f` (and Rust's float formatting) prints of the exact
    /// quotient, ties included, at any width.
    #[test]
    fn mb_text_matches_float_formatting_without_floats() {
        extern crate std;
        use std::format;
        let mib = 1u64 << 20;
        for b in [
            0,
            1,
            524,
            525,
            1536,
            mib - 1,
            mib,
            mib + 524_288,
            3 * mib / 2048,
            65536 * mib,
            24 << 30,
            (1 << 53) - 1,
        ] {
            let want = format!("{:.3}", b as f64 / mib as f64);
            assert_eq!(format!("{}", mb(b)), want, "{b}");
            assert_eq!(
                format!("{:>12}", mb(b)),
                format!("{:>12.3}", b as f64 / mib as f64)
            );
        }
        // 0.0005 MB exactly (a tie) rounds to even, as `%.3f` does.
        assert_eq!(format!("{}", Fixed3(1, 2000)), "0.000");
        assert_eq!(format!("{}", Fixed3(3, 2000)), "0.002");
        assert_eq!(
            format!("{}", mb(u64::MAX)).len(),
            "17592186044416.000".len()
        );
    }

    #[test]
    fn names_round_trip_and_truncate_at_a_character() {
        let mut b = [0u8; 6];
        copy_c_name(&mut b, "abé€");
        assert_eq!(c_name(&b), "abé", "cut before the 3-byte €, NUL-padded");
        assert_eq!(b[4..], [0, 0]);
        let mut b = [0u8; 6];
        copy_c_name(&mut b, "xy");
        assert_eq!(c_name(&b), "xy");
        assert_eq!(b[2..], [0; 4]);
    }

    #[test]
    fn printable_escapes_controls_and_keeps_the_layout() {
        extern crate std;
        use std::format;
        assert_eq!(format!("{}", Printable("résumé")), "résumé");
        assert_eq!(
            format!("{}", Printable("a\nb\x1b[2J\t")),
            "a\\nb\\u{1b}[2J\\t"
        );
        // Width counts the shown characters, whatever the text holds.
        assert_eq!(format!("[{:<6}]", Printable("ab")), "[ab    ]");
        assert_eq!(format!("[{:>6}]", Printable("a\nb")), "[  a\\nb]");
        assert_eq!(format!("[{:-^8}]", Printable("\n")), "[---\\n---]");
        assert_eq!(format!("[{:<2}]", Printable("a\u{7}")), "[a\\u{7}]");
    }
}
