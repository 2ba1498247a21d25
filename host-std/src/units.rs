//! Byte counts as people read them, the one formatter of the CLI's tables and the plan's
//! English lines.

/// A byte count for people: `0 B`, `512 KiB`, `312.5 MiB`, `1.50 GiB` (binary units).
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, unit) in UNITS {
        if b >= unit {
            let v = b as f64 / unit as f64;
            return if b.is_multiple_of(unit) {
                format!("{} {name}", b / unit)
            } else if v >= 100.0 {
                format!("{v:.1} {name}")
            } else {
                format!("{v:.2} {name}")
            };
        }
    }
    format!("{b} B")
}
