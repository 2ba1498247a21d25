//! Scenario units: byte sizes (`64 MiB`, `1.5 GiB`) and how they print, the `fail_next_alloc`
//! count, and NRT statuses by name or number (docs/SCENARIOS.md).

use std::fmt;

use nrt_core::abi::NRT_STATUS;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// Parses a byte count: an integer (`4096`) or a number with a unit — `B`, `KiB`, `MiB`,
/// `GiB`, `TiB` (powers of 1024) or `KB`, `MB`, `GB`, `TB` (powers of 1000); `1.5 GiB` is fine
/// (a fraction of a larger unit is rounded to the nearest byte), `1.5 B` is not.
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: String = num.chars().filter(|c| *c != '_').collect();
    if num.is_empty() {
        return None;
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult);
    }
    if mult == 1 {
        return None; // a fraction of a byte
    }
    let f: f64 = num.parse().ok()?;
    let v = f * mult as f64;
    (f.is_finite() && v >= 0.0 && v < u64::MAX as f64).then_some(v.round() as u64)
}

pub use nrt_host::units::fmt_bytes;

/// A size in a scenario file: an integer or a string with a unit (see [`parse_size`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Size(pub(super) u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte count: an integer or a string like \"64 MiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom(format!("size {v} is negative")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v).map(Size).ok_or_else(|| {
                    E::custom(format!(
                        "{v:?} is not a size (use bytes, or a number with B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// `fail_next_alloc = true` (the next one) or `= N` (the Nth from now).
#[derive(Copy, Clone, Debug)]
pub(super) struct Nth(pub(super) u64);

impl<'de> Deserialize<'de> for Nth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Nth;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true (the next allocation) or N >= 1 (the Nth allocation from now)")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Nth, E> {
                Ok(Nth(u64::from(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Nth, E> {
                u64::try_from(v)
                    .ok()
                    .filter(|n| *n >= 1)
                    .map(Nth)
                    .ok_or_else(|| E::custom(format!("{v} is not >= 1")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Nth, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
        }
        d.deserialize_any(V)
    }
}

/// A status in an `expect` step: `"NRT_RESOURCE"`, `"RESOURCE"` or `4`.
#[derive(Copy, Clone, Debug)]
pub(super) struct Status(pub(super) NRT_STATUS);

/// Parses a status name (with or without `NRT_`, any case) or number.
pub fn parse_status(s: &str) -> Option<NRT_STATUS> {
    let t = s.trim();
    if let Ok(v) = t.parse::<u32>() {
        return NRT_STATUS::from_raw(v);
    }
    let body = t
        .get(..4)
        .filter(|p| p.eq_ignore_ascii_case("NRT_"))
        .map_or(t, |_| &t[4..]);
    let body = if body.eq_ignore_ascii_case("OK") {
        "SUCCESS"
    } else {
        body
    };
    NRT_STATUS::INFO
        .members
        .iter()
        .find(|(n, _)| n[4..].eq_ignore_ascii_case(body))
        .and_then(|(_, v)| NRT_STATUS::from_raw(*v as u32))
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Status;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a status name like \"NRT_RESOURCE\" or its number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Status, E> {
                u32::try_from(v)
                    .ok()
                    .and_then(NRT_STATUS::from_raw)
                    .map(Status)
                    .ok_or_else(|| E::custom(format!("{v} is not an NRT_STATUS value")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Status, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(-1))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Status, E> {
                parse_status(v).map(Status).ok_or_else(|| {
                    E::custom(format!(
                        "{v:?} is not an NRT_STATUS (NRT_SUCCESS, NRT_INVALID, NRT_RESOURCE, …)"
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64 MiB"), Some(64 << 20));
        assert_eq!(parse_size("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_size("2 GB"), Some(2_000_000_000));
        assert_eq!(parse_size("1_024 KiB"), Some(1 << 20));
        assert_eq!(parse_size("12 parsecs"), None);
        assert_eq!(parse_size("1.5 B"), None, "a fraction of a byte");
        assert_eq!(parse_size("1.5"), None);
        assert_eq!(parse_size("0.5 KiB"), Some(512));
        assert_eq!(parse_size(""), None);
        assert_eq!(fmt_bytes(0), "0 B");
        assert_eq!(fmt_bytes(64 << 20), "64 MiB");
        assert_eq!(fmt_bytes(3 << 29), "1.50 GiB");
    }

    #[test]
    fn statuses_parse_by_name_or_number() {
        assert_eq!(parse_status("NRT_RESOURCE"), Some(NRT_STATUS::NRT_RESOURCE));
        assert_eq!(parse_status("resource"), Some(NRT_STATUS::NRT_RESOURCE));
        assert_eq!(parse_status("4"), Some(NRT_STATUS::NRT_RESOURCE));
        assert_eq!(parse_status("ok"), Some(NRT_STATUS::NRT_SUCCESS));
        assert_eq!(parse_status("NRT_BOGUS"), None);
    }
}
