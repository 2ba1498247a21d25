//! The layout report: every struct, enum, constant and category table as this project
//! reproduces them (spec §1–§10, facts in `layout-facts.toml`).
//!
//! `cargo xtask layout --json` prints [`json`]; `cargo xtask layout` prints [`summary`].

use nrt_core::abi::{
    self,
    meta::{FieldInfo, Provenance, StructInfo},
    tables,
};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

/// A JSON object whose keys keep the order given (enum members in value order, constants in
/// table order) without turning on serde_json's `preserve_order` for the whole workspace.
#[derive(Clone, Debug)]
pub struct OrderedMap<V>(pub Vec<(String, V)>);

impl<V: Serialize> Serialize for OrderedMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct LayoutReport {
    /// Every ABI struct, in `abi::STRUCTS` order.
    pub structs: Vec<StructEntry>,
    /// Every ABI enum, in `abi::ENUMS` order.
    pub enums: Vec<EnumEntry>,
    /// `layout-facts.toml [constants]`, as the project defines them.
    pub constants: OrderedMap<serde_json::Value>,
    /// The three usage-indexed byte tables (spec §3.3).
    pub tables: Tables,
}

/// One struct.
#[derive(Clone, Debug, Serialize)]
pub struct StructEntry {
    /// Type name.
    pub name: &'static str,
    /// `sizeof`.
    pub size: usize,
    /// `alignof`.
    pub align: usize,
    /// Spec section.
    pub section: &'static str,
    /// Members sorted by offset, tiling `0..size`.
    pub fields: Vec<FieldEntry>,
}

/// One member.
#[derive(Clone, Debug, Serialize)]
pub struct FieldEntry {
    /// Member name.
    pub name: &'static str,
    /// Byte offset.
    pub offset: usize,
    /// Byte size.
    pub size: usize,
    /// `observed` | `inferred` | `chosen` | `reserved`.
    pub provenance: &'static str,
    /// C spelling of the type (`uint64_t[8][23]`).
    pub c_type: String,
    /// Element count (1 for a scalar, 0 for a flexible array).
    pub count: usize,
}

/// One enum.
#[derive(Clone, Debug, Serialize)]
pub struct EnumEntry {
    /// Type name.
    pub name: &'static str,
    /// `sizeof`.
    pub size: usize,
    /// Spec section.
    pub section: &'static str,
    /// `NAME: value`, in value order.
    pub members: OrderedMap<i64>,
}

/// The category tables (spec §3.3), 23 bytes each, indexed by `dma_mem_usage_type_t`.
#[derive(Clone, Debug, Serialize)]
pub struct Tables {
    /// `dmem_usage_type_to_host_category`.
    pub host_category: Vec<u8>,
    /// `dmem_usage_type_to_device_category`.
    pub device_category: Vec<u8>,
    /// `map_dmem_usage_type_to_aggr_index`'s table.
    pub aggr_index: Vec<u8>,
}

fn field_entry(f: &FieldInfo) -> FieldEntry {
    FieldEntry {
        name: f.name,
        offset: f.offset,
        size: f.size,
        provenance: f.provenance.as_str(),
        c_type: crate::c_type(f),
        count: f.count(),
    }
}

/// Builds the report from `nrt_core::abi`.
pub fn build() -> LayoutReport {
    let structs = abi::STRUCTS
        .iter()
        .map(|s| {
            let mut fields: Vec<FieldEntry> = s.fields.iter().map(field_entry).collect();
            fields.sort_by_key(|f| f.offset);
            StructEntry {
                name: s.name,
                size: s.size,
                align: s.align,
                section: s.section,
                fields,
            }
        })
        .collect();
    let enums = abi::ENUMS
        .iter()
        .map(|e| EnumEntry {
            name: e.name,
            size: e.size,
            section: e.section,
            members: OrderedMap(e.members.iter().map(|(n, v)| (n.to_string(), *v)).collect()),
        })
        .collect();
    let mut constants: Vec<(String, serde_json::Value)> = tables::constants::ALL
        .iter()
        .map(|(n, v)| (n.to_string(), serde_json::Value::from(*v)))
        .collect();
    constants.push((
        "host_category_invalid_usage_indices".into(),
        serde_json::Value::from(tables::constants::HOST_CATEGORY_INVALID_USAGE_INDICES.to_vec()),
    ));
    LayoutReport {
        structs,
        enums,
        constants: OrderedMap(constants),
        tables: Tables {
            host_category: tables::DMEM_USAGE_TYPE_TO_HOST_CATEGORY.to_vec(),
            device_category: tables::DMEM_USAGE_TYPE_TO_DEVICE_CATEGORY.to_vec(),
            aggr_index: tables::DMEM_USAGE_TYPE_TO_AGGR_INDEX.to_vec(),
        },
    }
}

/// The report as pretty JSON (`cargo xtask layout --json`).
pub fn json() -> String {
    // Serialising plain data with string keys cannot fail; fall back to an error object anyway.
    serde_json::to_string_pretty(&build()).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// Per-struct member counts by provenance.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Observed + inferred members (the spec's).
    pub pinned: usize,
    /// Of those, read from libnrt's DWARF / disassembly / `.rodata`.
    pub observed: usize,
    /// Of those, following from an observed fact by ABI rules.
    pub inferred: usize,
    /// Members this project placed.
    pub chosen: usize,
    /// Reserved spans.
    pub reserved: usize,
    /// Bytes covered by pinned members.
    pub pinned_bytes: usize,
}

/// Counts `s`'s members by provenance.
pub fn counts(s: &StructInfo) -> Counts {
    let mut c = Counts::default();
    for f in s.fields {
        match f.provenance {
            Provenance::Observed | Provenance::Inferred => {
                c.pinned += 1;
                c.pinned_bytes += f.size;
                if f.provenance == Provenance::Observed {
                    c.observed += 1;
                } else {
                    c.inferred += 1;
                }
            }
            Provenance::Chosen => c.chosen += 1,
            Provenance::Reserved => c.reserved += 1,
        }
    }
    c
}

/// `18884656` → `18 884 656` (the spec's spelling of sizes).
pub fn grouped(n: usize) -> String {
    let digits = n.to_string();
    // The leading group holds 1–3 digits, every later one exactly 3.
    let head = match digits.len() % 3 {
        0 => 3.min(digits.len()),
        r => r,
    };
    let mut out = String::from(&digits[..head]);
    let mut rest = &digits[head..];
    while !rest.is_empty() {
        out.push(' ');
        out.push_str(&rest[..3]);
        rest = &rest[3..];
    }
    out
}

/// The compact one-screen overview (`cargo xtask layout`).
pub fn summary() -> String {
    let mut o = String::new();
    o.push_str(&format!(
        "nrt-dmem layouts: libnrt 2.31.24.0, x86-64 — {} structs, {} enums, 3 category tables\n\n",
        abi::STRUCTS.len(),
        abi::ENUMS.len()
    ));
    o.push_str(&format!(
        "{:<36} {:>12} {:>5} {:>6}   {:>6} {:>6} {:>8}\n",
        "struct", "size", "align", "spec", "pinned", "chosen", "reserved"
    ));
    for s in abi::STRUCTS {
        let c = counts(s);
        o.push_str(&format!(
            "{:<36} {:>12} {:>5} {:>6}   {:>6} {:>6} {:>8}\n",
            s.name,
            grouped(s.size),
            s.align,
            format!("§{}", s.section),
            c.pinned,
            c.chosen,
            c.reserved
        ));
    }
    let enums: Vec<String> = abi::ENUMS
        .iter()
        .map(|e| format!("{}({})", e.name, e.members.len()))
        .collect();
    // Wrap the enum list so the summary stays within one screen's width.
    let mut line = String::from("\nenums:");
    for e in enums {
        if line.len() + e.len() > 98 {
            o.push_str(&line);
            o.push('\n');
            line = String::from("      ");
        }
        line.push(' ');
        line.push_str(&e);
    }
    o.push_str(&line);
    o.push('\n');
    o.push_str(&format!(
        "tables (§3.3): host_category, device_category, aggr_index — 23 bytes each, libnrt's; \
         host{:?} = {} (pinned)\n",
        tables::constants::HOST_CATEGORY_INVALID_USAGE_INDICES,
        tables::CATEGORY_INVALID
    ));
    o.push_str(&format!(
        "constants: {} (see --json)\n",
        tables::constants::ALL.len() + 1
    ));
    o.push_str(
        "pinned = observed/inferred members (the spec's offsets); chosen = placed by this project\n\
         inside the pinned size; reserved = bytes kept uninterpreted.\n\
         Details: docs/LAYOUT.md, `cargo xtask layout --json`, ffi/include/nrt_layout.h\n",
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_grouped_like_the_spec() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1 000");
        assert_eq!(grouped(39320), "39 320");
        assert_eq!(grouped(18884656), "18 884 656");
    }

    #[test]
    fn counts_cover_every_member() {
        for s in abi::STRUCTS {
            let c = counts(s);
            assert_eq!(
                c.pinned + c.chosen + c.reserved,
                s.fields.len(),
                "{}",
                s.name
            );
        }
    }
}
