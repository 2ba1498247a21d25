//! Fixed-size, NUL-padded name fields (hints, model and tensor names) and the MB figures of
//! the reports: the few text helpers the core's structs need, in one place.
#![deny(unsafe_code)]

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
}
