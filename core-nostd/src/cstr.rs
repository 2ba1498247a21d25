//! Fixed-size, NUL-padded name fields (hints, model and tensor names) and the MB figures of
//! the reports: the few text helpers the core's structs need, in one place.
#![deny(unsafe_code)]

use core::fmt::{self, Write as _};

/// Copies `s` into the all-zero field `dst` as a NUL-terminated, NUL-padded C string,
/// truncated at a character boundary to `dst.len() - 1` bytes.
///
/// Every caller fills a fresh (zeroed) arena slot, so only the text is written: the padding
/// and terminator are already there. On the `dmem_alloc` path this halves the hint's cost.
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

/// Bytes as libnrt's reports print them: MB (2^20) as a float.
pub(crate) fn mb(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
