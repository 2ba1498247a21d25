//! The spec's layout facts (`layout-tests/facts/layout-facts.toml`, docs/SPEC.md) and what
//! they pin.
//!
//! The file is vendored byte for byte (a test pins its SHA-256) and compiled in, so the DWARF checker knows, fact by fact, which sizes, offsets,
//! array bounds and enum values the spec states (`observed`/`inferred`: must match) and which are
//! the project's own choice (`chosen`: a mismatch is a finding).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use nrt_core::abi::{
    self,
    meta::{FieldInfo, StructInfo},
    tables,
};
use serde::Deserialize;

/// The vendored `layout-facts.toml` text (libnrt 2.31.24.0, x86-64).
pub const VENDORED: &str = include_str!("../facts/layout-facts.toml");

/// The whole facts file.
#[derive(Clone, Debug, Deserialize)]
pub struct Facts {
    /// `[[struct]]` tables.
    #[serde(rename = "struct", default)]
    pub structs: Vec<StructFact>,
    /// `[[enum]]` tables.
    #[serde(rename = "enum", default)]
    pub enums: Vec<EnumFact>,
    /// `[constants]`: integers, or arrays of integers.
    #[serde(default)]
    pub constants: BTreeMap<String, toml::Value>,
    /// `[outcomes]`: status names per error path (spec §3.2, §4.3, §7.2).
    #[serde(default)]
    pub outcomes: BTreeMap<String, String>,
    /// `[tables]` (v2): the three 23-byte `.rodata` category tables, by short name
    /// (`host_category`, `device_category`, `aggr_index`; spec §3.3).
    #[serde(default)]
    pub tables: BTreeMap<String, Vec<u8>>,
}

/// The `.rodata` symbol of each `[tables]` entry (spec §3.3).
pub const TABLE_SYMBOLS: [(&str, &str); 3] = [
    ("host_category", "dmem_usage_type_to_host_category"),
    ("device_category", "dmem_usage_type_to_device_category"),
    ("aggr_index", "dmem_usage_type_to_aggr_index"),
];

/// The project's bytes for a `[tables]` key ([`TABLE_SYMBOLS`]).
pub fn project_table(key: &str) -> Option<&'static [u8; 23]> {
    match key {
        "host_category" => Some(&tables::DMEM_USAGE_TYPE_TO_HOST_CATEGORY),
        "device_category" => Some(&tables::DMEM_USAGE_TYPE_TO_DEVICE_CATEGORY),
        "aggr_index" => Some(&tables::DMEM_USAGE_TYPE_TO_AGGR_INDEX),
        _ => None,
    }
}

/// One `[[struct]]`: a pinned size and the members the spec places.
#[derive(Clone, Debug, Deserialize)]
pub struct StructFact {
    /// libnrt's type name.
    pub name: String,
    /// `sizeof`, always pinned.
    pub size: usize,
    /// Spec section.
    pub section: String,
    /// `observed` unless stated (`inferred` for sizes derived by division).
    #[serde(default)]
    pub provenance: Option<String>,
    /// Members the spec states something about.
    #[serde(default)]
    pub fields: Vec<FieldFact>,
}

/// One member fact; each present attribute is pinned.
#[derive(Clone, Debug, Deserialize)]
pub struct FieldFact {
    /// Member name.
    pub name: String,
    /// Byte offset, when the spec states it.
    #[serde(default)]
    pub offset: Option<usize>,
    /// Byte size, when stated.
    #[serde(default)]
    pub size: Option<usize>,
    /// Element count of an array member, when stated.
    #[serde(default)]
    pub count: Option<usize>,
    /// `observed` or `inferred`.
    pub provenance: String,
}

/// One `[[enum]]`: the member values the spec states.
#[derive(Clone, Debug, Deserialize)]
pub struct EnumFact {
    /// libnrt's type name.
    pub name: String,
    /// `sizeof`, when stated.
    #[serde(default)]
    pub size: Option<usize>,
    /// Spec section.
    pub section: String,
    /// Number of members, when stated.
    #[serde(default)]
    pub count: Option<usize>,
    /// `observed` unless stated.
    #[serde(default)]
    pub provenance: Option<String>,
    /// `NAME = value` for every pinned member.
    #[serde(default)]
    pub members: BTreeMap<String, i64>,
}

impl Facts {
    /// Parses a facts file: syntax and types only. Anything that checks against the facts loads
    /// them through [`Facts::load`], which also refuses a file that contradicts itself.
    pub fn parse(text: &str) -> Result<Facts, String> {
        toml::from_str(text).map_err(|e| format!("layout-facts.toml: {e}"))
    }

    /// Parses and [validates](Facts::validate) a facts file: the one way the checker, the
    /// header and the C cross-check load facts. The error lists every contradiction.
    pub fn load(text: &str) -> Result<Facts, String> {
        let facts = Facts::parse(text)?;
        let errs = facts.validate();
        if errs.is_empty() {
            return Ok(facts);
        }
        Err(format!(
            "layout-facts.toml contradicts itself ({} problem{}): {}",
            errs.len(),
            if errs.len() == 1 { "" } else { "s" },
            errs.join("; ")
        ))
    }

    /// The compiled-in vendored facts ([`Facts::load`]ed once).
    pub fn vendored() -> Result<&'static Facts, String> {
        static CELL: OnceLock<Result<Facts, String>> = OnceLock::new();
        CELL.get_or_init(|| Facts::load(VENDORED))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Every way the file contradicts itself (empty = consistent), each naming the struct, enum
    /// or table and the members involved. Facts can be wrong about libnrt; these cannot be
    /// right about anything:
    ///
    /// * a struct or enum listed twice, a member listed twice in one struct;
    /// * a zero-sized struct; a member that starts at or ends past its struct's size;
    /// * two members whose stated byte ranges overlap, or that start at the same offset (a
    ///   member without a stated size occupies at least its first byte);
    /// * an array `count` of 0, or one that does not divide the member's stated size;
    /// * an enum whose `count` is smaller than the members it lists, two enumerators with the
    ///   same name (TOML refuses that itself), an enum size other than 1, 2, 4 or 8;
    /// * a `[tables]` entry that is not one of the three tables, or whose length is not
    ///   `usage_type_count` (or the usage enum's member count);
    /// * a `host_category_invalid_usage_indices` index whose `host_category` byte is not
    ///   `category_invalid_sentinel`.
    pub fn validate(&self) -> Vec<String> {
        let mut errs = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for s in &self.structs {
            if !seen.insert(s.name.as_str()) {
                errs.push(format!("struct {}: listed twice", s.name));
            }
            s.validate(&mut errs);
        }
        let mut seen = std::collections::BTreeSet::new();
        for e in &self.enums {
            if !seen.insert(e.name.as_str()) {
                errs.push(format!("enum {}: listed twice", e.name));
            }
            if let Some(z) = e.size.filter(|z| ![1, 2, 4, 8].contains(z)) {
                errs.push(format!("enum {}: size {z} is not 1, 2, 4 or 8", e.name));
            }
            if let Some(c) = e.count.filter(|c| *c < e.members.len()) {
                errs.push(format!(
                    "enum {}: count {c} but {} members listed",
                    e.name,
                    e.members.len()
                ));
            }
        }
        self.validate_tables(&mut errs);
        errs
    }

    fn validate_tables(&self, errs: &mut Vec<String>) {
        let want_len = self
            .constants
            .get("usage_type_count")
            .and_then(value_u64)
            .and_then(|n| usize::try_from(n).ok())
            .or_else(|| {
                self.enum_fact("dma_mem_usage_type_t")
                    .map(EnumFact::whole_count)
            });
        for (name, bytes) in &self.tables {
            if !TABLE_SYMBOLS.iter().any(|(n, _)| n == name) {
                errs.push(format!(
                    "table {name}: not one of {}",
                    TABLE_SYMBOLS.map(|(n, _)| n).join(", ")
                ));
            }
            if let Some(n) = want_len.filter(|n| *n != bytes.len()) {
                errs.push(format!(
                    "table {name}: {} bytes, but there are {n} usage types",
                    bytes.len()
                ));
            }
        }
        let (Some(host), Some(sentinel)) = (
            self.tables.get("host_category"),
            self.constants
                .get("category_invalid_sentinel")
                .and_then(value_u64),
        ) else {
            return;
        };
        if let Some(toml::Value::Array(idx)) =
            self.constants.get("host_category_invalid_usage_indices")
        {
            for i in idx.iter().filter_map(value_u64) {
                let byte = usize::try_from(i).ok().and_then(|i| host.get(i));
                if byte.map(|b| u64::from(*b)) != Some(sentinel) {
                    errs.push(format!(
                        "table host_category: [{i}] is {}, but host_category_invalid_usage_indices \
                         puts the sentinel {sentinel} there",
                        byte.map_or("past the end".to_string(), |b| b.to_string())
                    ));
                }
            }
        }
    }

    /// The `[[struct]]` entry for `name`.
    pub fn struct_fact(&self, name: &str) -> Option<&StructFact> {
        self.structs.iter().find(|s| s.name == name)
    }

    /// The `[[enum]]` entry for `name`.
    pub fn enum_fact(&self, name: &str) -> Option<&EnumFact> {
        self.enums.iter().find(|e| e.name == name)
    }
}

impl EnumFact {
    /// The member count the facts pin: `count` when given (the enum is listed in part),
    /// else the number of listed members (the enum is listed whole).
    pub fn whole_count(&self) -> usize {
        self.count.unwrap_or(self.members.len())
    }
}

impl StructFact {
    /// The member fact for `name`.
    pub fn field(&self, name: &str) -> Option<&FieldFact> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// [`Facts::validate`] for one struct.
    fn validate(&self, errs: &mut Vec<String>) {
        let s = &self.name;
        if self.size == 0 {
            errs.push(format!("struct {s}: size 0"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for f in &self.fields {
            let m = &f.name;
            if !seen.insert(m.as_str()) {
                errs.push(format!("struct {s}: member {m} listed twice"));
            }
            if let Some(o) = f.offset.filter(|o| *o >= self.size) {
                errs.push(format!(
                    "struct {s}: member {m} at offset {o} is past the struct's size {}",
                    self.size
                ));
            } else if let Some(end) = f.end().filter(|e| *e > self.size) {
                errs.push(format!(
                    "struct {s}: member {m} ends at {end}, past the struct's size {}",
                    self.size
                ));
            }
            match (f.count, f.size) {
                (Some(0), _) => errs.push(format!("struct {s}: member {m} has count 0")),
                (Some(c), Some(z)) if z % c != 0 => errs.push(format!(
                    "struct {s}: member {m} has count {c}, which does not divide its size {z}"
                )),
                _ => {}
            }
        }
        // Overlaps: every pair of placed members (fields are few; quadratic is fine).
        let placed: Vec<&FieldFact> = self.fields.iter().filter(|f| f.offset.is_some()).collect();
        for (i, a) in placed.iter().enumerate() {
            for b in &placed[i + 1..] {
                if a.overlaps(b) {
                    errs.push(format!(
                        "struct {s}: members {} ({}) and {} ({}) overlap",
                        a.name,
                        a.span(),
                        b.name,
                        b.span()
                    ));
                }
            }
        }
    }
}

impl FieldFact {
    /// One past the last byte, when both offset and size are stated.
    pub fn end(&self) -> Option<usize> {
        self.offset?.checked_add(self.size?)
    }

    /// `[lo, hi)` of the bytes this fact claims: a member without a stated size claims at least
    /// its first byte.
    fn claimed(&self) -> Option<(usize, usize)> {
        let lo = self.offset?;
        Some((lo, lo.saturating_add(self.size.unwrap_or(1).max(1))))
    }

    fn overlaps(&self, other: &FieldFact) -> bool {
        match (self.claimed(), other.claimed()) {
            (Some((a0, a1)), Some((b0, b1))) => a0 < b1 && b0 < a1,
            _ => false,
        }
    }

    fn span(&self) -> String {
        match (self.offset, self.size) {
            (Some(o), Some(z)) => format!("bytes {o}..{}", o.saturating_add(z)),
            (Some(o), None) => format!("at {o}"),
            _ => "unplaced".into(),
        }
    }
}

/// Which attributes of one member are pinned by the spec.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldPins {
    /// The offset is the spec's.
    pub offset: bool,
    /// The byte size is the spec's.
    pub size: bool,
    /// The array bounds (element count) are the spec's.
    pub bounds: bool,
}

impl FieldPins {
    /// Any attribute pinned.
    pub fn any(self) -> bool {
        self.offset || self.size || self.bounds
    }
}

/// What is pinned, derived from the facts and the Rust tables together.
///
/// * A member whose Rust provenance is `Observed`/`Inferred` is pinned whole (offset, size,
///   bounds): the project claims it is the spec's.
/// * Any attribute the facts file lists for a member is pinned, whatever the Rust provenance
///   (e.g. `tpb_t.pooling_q7_nrtucode_core` has a chosen offset but an observed count of 8).
/// * A struct's size is pinned when the facts list the struct, or when a pinned member embeds it
///   by value with a stated size (`tpb_t.sunda` pins `tpb_sunda_t` at 2960, `tpb_t.model_db_lock`
///   pins `nrt_mutex_t` at 40).
#[derive(Clone, Debug)]
pub struct Pins {
    facts: Facts,
}

impl Pins {
    /// Pins from the compiled-in facts.
    pub fn vendored() -> Result<Pins, String> {
        Ok(Pins {
            facts: Facts::vendored()?.clone(),
        })
    }

    /// Pins from an explicit facts file.
    pub fn new(facts: Facts) -> Pins {
        Pins { facts }
    }

    /// The facts these pins come from.
    pub fn facts(&self) -> &Facts {
        &self.facts
    }

    /// The spec section that pins `s`'s size, or `None` when the size is the project's choice.
    pub fn struct_size(&self, s: &StructInfo) -> Option<String> {
        self.size_fact(s).map(|(_, section)| section.to_string())
    }

    /// The size the spec states for `s` and the section stating it: its own `[[struct]]`
    /// entry, or the stated size of a member that embeds it by value (an array member states
    /// the size of the whole array).
    fn size_fact(&self, s: &StructInfo) -> Option<(usize, &str)> {
        if let Some(f) = self.facts.struct_fact(s.name) {
            return Some((f.size, &f.section));
        }
        for parent in abi::STRUCTS {
            let Some(pf) = self.facts.struct_fact(parent.name) else {
                continue;
            };
            for field in parent.fields.iter().filter(|f| f.c_base == s.name) {
                if let Some(size) = pf.field(field.name).and_then(|ff| ff.size) {
                    return Some((size / field.count().max(1), &pf.section));
                }
            }
        }
        None
    }

    /// Which attributes of `s.field` are pinned.
    pub fn field(&self, s: &StructInfo, field: &str) -> FieldPins {
        let mut p = FieldPins::default();
        if let Some(f) = s.field(field) {
            if crate::is_pinned(f) {
                p = FieldPins {
                    offset: true,
                    size: true,
                    bounds: true,
                };
            }
        }
        if let Some(ff) = self
            .facts
            .struct_fact(s.name)
            .and_then(|sf| sf.field(field))
        {
            p.offset |= ff.offset.is_some();
            p.size |= ff.size.is_some();
            p.bounds |= ff.count.is_some();
        }
        p
    }

    /// `sizeof(s)` as the spec states it (its own `[[struct]]` entry, or the stated size of a
    /// member that embeds it by value), else the tables' value. The header's asserts and the
    /// DWARF check expect this, so each of them compares what was built against the spec
    /// itself, not against the tables that produced it.
    pub fn expected_size(&self, s: &StructInfo) -> usize {
        self.size_fact(s).map_or(s.size, |(size, _)| size)
    }

    /// `offsetof(s, f)` as the spec states it, else the tables' value.
    pub fn expected_offset(&self, s: &StructInfo, f: &FieldInfo) -> usize {
        self.field_fact(s, f)
            .and_then(|ff| ff.offset)
            .unwrap_or(f.offset)
    }

    /// The byte size of member `f` of `s` as the spec states it, else the tables' value.
    pub fn expected_member_size(&self, s: &StructInfo, f: &FieldInfo) -> usize {
        self.field_fact(s, f)
            .and_then(|ff| ff.size)
            .unwrap_or(f.size)
    }

    /// The value of `enum_name::member` as the spec states it, else `table_value`.
    pub fn expected_enum_value(&self, enum_name: &str, member: &str, table_value: i64) -> i64 {
        self.facts
            .enum_fact(enum_name)
            .and_then(|e| e.members.get(member).copied())
            .unwrap_or(table_value)
    }

    fn field_fact(&self, s: &StructInfo, f: &FieldInfo) -> Option<&FieldFact> {
        self.facts
            .struct_fact(s.name)
            .and_then(|sf| sf.field(f.name))
    }

    /// `true` when the facts pin `enum_name::member`.
    pub fn enum_member(&self, enum_name: &str, member: &str) -> bool {
        self.facts
            .enum_fact(enum_name)
            .is_some_and(|e| e.members.contains_key(member))
    }

    /// The pinned `sizeof` of an enum.
    pub fn enum_size(&self, enum_name: &str) -> Option<usize> {
        self.facts.enum_fact(enum_name).and_then(|e| e.size)
    }

    /// The pinned member count of an enum ([`EnumFact::whole_count`]).
    pub fn enum_count(&self, enum_name: &str) -> Option<usize> {
        self.facts.enum_fact(enum_name).map(EnumFact::whole_count)
    }

    /// The spec section of an enum, when the facts list it.
    pub fn enum_section(&self, enum_name: &str) -> Option<&str> {
        self.facts.enum_fact(enum_name).map(|e| e.section.as_str())
    }

    /// Indices of the host category table pinned to the sentinel (spec §3.3: `[18, 19, 20, 21]`).
    pub fn host_invalid_indices(&self) -> Vec<usize> {
        match self
            .facts
            .constants
            .get("host_category_invalid_usage_indices")
        {
            Some(toml::Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_integer())
                .filter_map(|v| usize::try_from(v).ok())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The pinned sentinel byte (spec §3.2: 20).
    pub fn sentinel(&self) -> Option<u8> {
        self.facts
            .constants
            .get("category_invalid_sentinel")
            .and_then(|v| v.as_integer())
            .and_then(|v| u8::try_from(v).ok())
    }
}

fn value_u64(v: &toml::Value) -> Option<u64> {
    v.as_integer().and_then(|i| u64::try_from(i).ok())
}

/// Every disagreement between `facts` and the project's tables (empty = all facts hold): struct
/// sizes, each listed member's offset/size/count and provenance, enum sizes/counts/values, and
/// every constant (both ways). Spec: all sections; this is the "Rust" one of the three proofs.
pub fn verify_tables(facts: &Facts) -> Vec<String> {
    let mut errs = Vec::new();
    for sf in &facts.structs {
        let Some(s) = abi::struct_info(&sf.name) else {
            errs.push(format!("struct {}: not in abi::STRUCTS", sf.name));
            continue;
        };
        if s.size != sf.size {
            errs.push(format!(
                "{}: size {} in the tables, {} in the facts",
                sf.name, s.size, sf.size
            ));
        }
        for ff in &sf.fields {
            let Some(f) = s.field(&ff.name) else {
                errs.push(format!(
                    "{}.{}: no such member in the tables",
                    sf.name, ff.name
                ));
                continue;
            };
            let at = format!("{}.{}", sf.name, ff.name);
            if let Some(o) = ff.offset {
                if f.offset != o {
                    errs.push(format!(
                        "{at}: offset {} in the tables, {o} in the facts",
                        f.offset
                    ));
                }
                if f.provenance.as_str() != ff.provenance {
                    errs.push(format!(
                        "{at}: provenance {} in the tables, {} in the facts",
                        f.provenance.as_str(),
                        ff.provenance
                    ));
                }
            }
            if let Some(z) = ff.size {
                if f.size != z {
                    errs.push(format!(
                        "{at}: size {} in the tables, {z} in the facts",
                        f.size
                    ));
                }
            }
            if let Some(c) = ff.count {
                if f.count() != c {
                    errs.push(format!(
                        "{at}: count {} in the tables, {c} in the facts",
                        f.count()
                    ));
                }
            }
        }
    }
    for ef in &facts.enums {
        let Some(e) = abi::ENUMS.iter().find(|e| e.name == ef.name) else {
            errs.push(format!("enum {}: not in abi::ENUMS", ef.name));
            continue;
        };
        if let Some(z) = ef.size {
            if e.size != z {
                errs.push(format!(
                    "{}: size {} in the tables, {z} in the facts",
                    ef.name, e.size
                ));
            }
        }
        // An enum the facts list without a `count` is listed whole (the spec names every
        // member); one listed in part says how many members there are instead.
        let c = ef.whole_count();
        if e.members.len() != c {
            let extra: Vec<&str> = e
                .members
                .iter()
                .map(|(n, _)| *n)
                .filter(|n| !ef.members.contains_key(*n))
                .collect();
            errs.push(format!(
                "{}: {} members in the tables, {c} in the facts{}",
                ef.name,
                e.members.len(),
                if ef.count.is_none() && !extra.is_empty() {
                    format!(" (which list it whole; not in them: {})", extra.join(", "))
                } else {
                    String::new()
                }
            ));
        }
        for (n, v) in &ef.members {
            match e.members.iter().find(|(m, _)| m == n) {
                None => errs.push(format!("{}.{n}: no such member in the tables", ef.name)),
                Some((_, t)) if t != v => errs.push(format!(
                    "{}.{n}: {t} in the tables, {v} in the facts",
                    ef.name
                )),
                Some(_) => {}
            }
        }
    }
    for (name, v) in &facts.constants {
        if let toml::Value::Array(items) = v {
            let want: Vec<Option<u64>> = items.iter().map(value_u64).collect();
            match name.as_str() {
                "host_category_invalid_usage_indices" => {
                    let have: Vec<Option<u64>> =
                        tables::constants::HOST_CATEGORY_INVALID_USAGE_INDICES
                            .iter()
                            .map(|i| Some(*i as u64))
                            .collect();
                    if have != want {
                        errs.push(format!(
                            "constant {name}: {have:?} in the tables, {want:?} in the facts"
                        ));
                    }
                    for i in want.iter().flatten() {
                        let byte = usize::try_from(*i)
                            .ok()
                            .and_then(|i| tables::DMEM_USAGE_TYPE_TO_HOST_CATEGORY.get(i));
                        if byte != Some(&tables::CATEGORY_INVALID) {
                            errs.push(format!(
                                "host_category[{i}] is {byte:?}, the facts pin the sentinel {}",
                                tables::CATEGORY_INVALID
                            ));
                        }
                    }
                }
                _ => errs.push(format!(
                    "constant {name}: array constant the checker does not know"
                )),
            }
            continue;
        }
        match tables::constants::ALL.iter().find(|(n, _)| n == name) {
            None => errs.push(format!("constant {name}: not in tables::constants::ALL")),
            Some((_, t)) if Some(*t) != value_u64(v) => errs.push(format!(
                "constant {name}: {t} in the tables, {v} in the facts"
            )),
            Some(_) => {}
        }
    }
    for (key, symbol) in TABLE_SYMBOLS {
        let Some(have) = project_table(key) else {
            continue;
        };
        match facts.tables.get(key) {
            None => errs.push(format!("table {key} ({symbol}): not in the facts")),
            Some(want) => {
                if let Some(i) =
                    (0..want.len().max(have.len())).find(|&i| want.get(i) != have.get(i))
                {
                    errs.push(format!(
                        "table {key} ({symbol})[{i}]: {:?} in the tables, {:?} in the facts",
                        have.get(i),
                        want.get(i)
                    ));
                }
            }
        }
    }
    for key in facts.tables.keys() {
        if project_table(key).is_none() {
            errs.push(format!("table {key}: in the facts but not in the tables"));
        }
    }
    for (n, _) in tables::constants::ALL {
        if !facts.constants.contains_key(*n) {
            errs.push(format!("constant {n}: in the tables but not in the facts"));
        }
    }
    errs
}
