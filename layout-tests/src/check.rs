//! The ABI conformance checker (issue 8): hold an ELF's DWARF against the project's layouts,
//! fact by fact.
//!
//! For every struct and enum in `nrt_core::abi` the DWARF type of the same name is compared —
//! byte size, member offsets and sizes, array bounds, enumerator values — and each fact is
//! reported `PASS`, `FAIL` (expected vs found), `MISSING`, `FINDING` or `INFO`. The category
//! tables (spec §3.3) are read from their `.rodata` symbols when present.
//!
//! ## What fails
//!
//! A fact is **pinned** when `layout-facts.toml` states it, and pinned facts come from that file
//! alone: each struct's size; each listed member's offset, size and element count *where the
//! file states them* (a member with an offset only, such as `ht_node_t.val`, has only its offset
//! checked); each enum's stated size, member count and values; the three `[tables]`. Type names
//! of members are never compared, and types the file does not list (`nrt_mutex_t`) are never
//! pinned. Everything else the Rust tables place is **chosen**.
//!
//! * A pinned fact that differs is `FAIL`; a pinned fact the DWARF lacks is `MISSING`; both make
//!   the exit code 1. Each failing struct also names its first differing member, by offset.
//! * A chosen fact that differs or is missing is a `FINDING`: reported, never failing (libnrt
//!   is free to have put its members elsewhere). `--strict` makes findings fail too (`FAIL`),
//!   which is how the self-check of the project's own header is run.
//! * Reserved spans are not libnrt members; with `--all` each is reported `INFO` with the DWARF
//!   members that occupy those bytes, as are DWARF members and enumerators the tables lack.
//! * A category-table symbol that is absent is `MISSING` ("not present") but never fails (a
//!   build may not keep local symbols); present, every byte is compared with `[tables]` and the
//!   first differing index reported.
//!
//! ## Modes
//!
//! * default — every pinned fact listed; chosen facts evaluated and tallied in one line.
//! * `--pinned` — pinned facts only: what v2 states, nothing of the Rust tables.
//! * `--all` — every fact listed, chosen ones included, plus the `INFO` lines above.

use std::path::Path;

use std::collections::BTreeMap;

use nrt_core::abi::{
    self,
    meta::{EnumInfo, StructInfo},
    tables,
};
use serde::Serialize;

use crate::dwarf::{self, DEnum, DStruct, DwarfError, Extract, Request};
use crate::facts::{EnumFact, FieldFact, Pins, StructFact, TABLE_SYMBOLS};

/// Which facts to evaluate and list.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Pinned facts listed; chosen facts tallied.
    #[default]
    Default,
    /// Pinned facts only.
    Pinned,
    /// Everything, chosen facts and `INFO` lines included.
    All,
}

/// Checker options.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckOptions {
    /// Which facts to evaluate and list.
    pub mode: Mode,
    /// Findings (chosen-fact mismatches) fail too.
    pub strict: bool,
}

/// The verdict on one fact.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// DWARF agrees.
    Pass,
    /// DWARF disagrees on a pinned fact (or on any fact with `--strict`).
    Fail,
    /// DWARF lacks the type, member, enumerator or symbol.
    Missing,
    /// DWARF disagrees on a chosen fact: reported, not a failure.
    Finding,
    /// Context (`--all`): what libnrt has where the project keeps reserved bytes, or members the
    /// project does not model.
    Info,
}

impl Status {
    /// Upper-case label.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Missing => "MISSING",
            Status::Finding => "FINDING",
            Status::Info => "INFO",
        }
    }
}

/// One checked fact.
#[derive(Clone, Debug, Serialize)]
pub struct Fact {
    /// `tpb_t`, `tpb_t.model_db`, `dma_mem_usage_type_t.DMA_MEM_USAGE_TYPE_MAX`.
    pub subject: String,
    /// `type`, `size`, `offset`, `member size`, `bounds`, `member`, `value`, `count`,
    /// `reserved`, `extra`.
    pub fact: &'static str,
    /// Stated by the spec.
    pub pinned: bool,
    /// `observed`, `inferred`, `chosen`, `reserved`.
    pub provenance: String,
    /// Spec section.
    pub section: String,
    /// What the project's tables say.
    pub expected: String,
    /// What the DWARF says (`None` = missing).
    pub found: Option<String>,
    /// The verdict.
    pub status: Status,
    /// Counts towards exit code 1.
    pub fails: bool,
    /// Extra context (`found as tpb_t.sunda`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One byte that differs in a category table.
#[derive(Clone, Debug, Serialize)]
pub struct TableDiff {
    /// Usage-type index.
    pub index: usize,
    /// The byte the facts (or, for a chosen table, the project) state.
    pub expected: u8,
    /// The ELF's byte (`None`: the symbol is shorter than the table).
    pub found: Option<u8>,
    /// Pinned by the facts.
    pub pinned: bool,
}

/// One category table read from `.rodata`.
#[derive(Clone, Debug, Serialize)]
pub struct TableResult {
    /// Symbol name.
    pub symbol: String,
    /// The facts' `[tables]` key (`host_category`, `device_category`, `aggr_index`).
    pub table: String,
    /// Every byte is pinned by the facts' `[tables]` (else the project's bytes, chosen).
    pub pinned: bool,
    /// The bytes expected.
    pub expected: Vec<u8>,
    /// The bytes found (`None` = no such symbol).
    pub found: Option<Vec<u8>>,
    /// The first index that differs.
    pub first_diff: Option<usize>,
    /// Bytes that differ.
    pub diffs: Vec<TableDiff>,
    /// The verdict.
    pub status: Status,
    /// Counts towards exit code 1.
    pub fails: bool,
}

/// The first member of a struct that fails, by offset.
#[derive(Clone, Debug, Serialize)]
pub struct FirstDifference {
    /// The struct.
    #[serde(rename = "struct")]
    pub strukt: String,
    /// The member.
    pub member: String,
    /// `offset`, `member size`, `count`, `member`, …
    pub fact: &'static str,
    /// Expected value.
    pub expected: String,
    /// Found value (`None` = missing).
    pub found: Option<String>,
}

/// Chosen facts evaluated but not listed (default mode).
#[derive(Copy, Clone, Debug, Default, Serialize)]
pub struct Tally {
    /// Evaluated.
    pub checked: usize,
    /// DWARF agrees.
    pub agree: usize,
    /// DWARF differs.
    pub differ: usize,
    /// DWARF lacks it.
    pub missing: usize,
}

/// Status counts over listed facts and tables.
#[derive(Copy, Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// `PASS`.
    pub pass: usize,
    /// `FAIL`.
    pub fail: usize,
    /// `MISSING`.
    pub missing: usize,
    /// `FINDING`.
    pub finding: usize,
    /// `INFO`.
    pub info: usize,
    /// Facts and tables that count towards exit code 1.
    pub failing: usize,
}

/// The checker's result.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The ELF checked.
    pub elf: String,
    /// Mode used.
    pub mode: Mode,
    /// `--strict`.
    pub strict: bool,
    /// DWARF units read.
    pub units: usize,
    /// Of those, type units.
    pub type_units: usize,
    /// DWARF versions read.
    pub dwarf_versions: Vec<u16>,
    /// Compressed debug sections read, with their format.
    pub compressed: BTreeMap<String, String>,
    /// Split-DWARF skeleton units skipped.
    pub skeleton_units: usize,
    /// Listed facts: per struct (facts order, then the tables'), pinned then chosen.
    pub facts: Vec<Fact>,
    /// Per struct with a failing member fact, the first failing member by offset.
    pub first_differences: Vec<FirstDifference>,
    /// Category tables.
    pub tables: Vec<TableResult>,
    /// Chosen facts evaluated but not listed (default mode).
    pub chosen: Tally,
    /// Counts.
    pub summary: Summary,
    /// 0 = nothing fails, 1 = something fails.
    pub exit_code: i32,
}

fn dims(d: &[impl std::fmt::Display]) -> String {
    if d.is_empty() {
        return "scalar".into();
    }
    d.iter().map(|x| format!("[{x}]")).collect()
}

struct Judge {
    strict: bool,
}

impl Judge {
    fn verdict(&self, pinned: bool, expected: &str, found: Option<&str>) -> (Status, bool) {
        match found {
            None => (Status::Missing, pinned || self.strict),
            Some(f) if f == expected => (Status::Pass, false),
            Some(_) if pinned || self.strict => (Status::Fail, true),
            Some(_) => (Status::Finding, false),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn fact(
        &self,
        subject: String,
        fact: &'static str,
        pinned: bool,
        provenance: &str,
        section: &str,
        expected: String,
        found: Option<String>,
        note: Option<String>,
    ) -> Fact {
        let (status, fails) = self.verdict(pinned, &expected, found.as_deref());
        Fact {
            subject,
            fact,
            pinned,
            provenance: provenance.to_string(),
            section: section.to_string(),
            expected,
            found,
            status,
            fails,
            note,
        }
    }

    fn info(&self, subject: String, fact: &'static str, section: &str, found: String) -> Fact {
        Fact {
            subject,
            fact,
            pinned: false,
            provenance: "reserved".into(),
            section: section.to_string(),
            expected: "-".into(),
            found: Some(found),
            status: Status::Info,
            fails: false,
            note: None,
        }
    }
}

/// What one pass over the DWARF must fetch for a check against `pins`: every struct and enum
/// the facts or the tables name, the aliases of types libnrt leaves anonymous, and the three
/// category-table symbols.
pub fn request(pins: &Pins) -> Request {
    let facts = pins.facts();
    let mut structs: Vec<String> = facts.structs.iter().map(|s| s.name.clone()).collect();
    for s in abi::STRUCTS {
        if !structs.iter().any(|n| n == s.name) {
            structs.push(s.name.to_string());
        }
    }
    let mut enums: Vec<String> = facts.enums.iter().map(|e| e.name.clone()).collect();
    for e in abi::ENUMS {
        if !enums.iter().any(|n| n == e.name) {
            enums.push(e.name.to_string());
        }
    }
    Request {
        structs,
        enums,
        aliases: dwarf::table_aliases(),
        anonymous_aliases: dwarf::facts_aliases(facts),
        symbols: TABLE_SYMBOLS
            .iter()
            .map(|(key, sym)| {
                let len = facts.tables.get(*key).map_or(23, Vec::len);
                (sym.to_string(), len)
            })
            .collect(),
    }
}

/// The project's own table bytes, compared (as chosen facts) when the facts lack a table.
fn project_table(key: &str) -> &'static [u8] {
    match key {
        "host_category" => &tables::DMEM_USAGE_TYPE_TO_HOST_CATEGORY,
        "device_category" => &tables::DMEM_USAGE_TYPE_TO_DEVICE_CATEGORY,
        _ => &tables::DMEM_USAGE_TYPE_TO_AGGR_INDEX,
    }
}

fn at(m: &dwarf::DMember) -> String {
    format!(
        "@{} size {}",
        m.offset.map_or("?".into(), |v| v.to_string()),
        m.size.map_or("?".into(), |v| v.to_string())
    )
}

/// The facts v2 pins for one struct, and nothing else: its size, and per listed member the
/// offset, size and element count *where stated*. A member without a stated size (or count)
/// has none checked; the type names of members are never compared.
fn pinned_struct_facts(
    sf: &StructFact,
    d: Option<&DStruct>,
    j: &Judge,
    out: &mut Vec<(Fact, u64)>,
) {
    let prov = sf.provenance.clone().unwrap_or_else(|| "observed".into());
    let Some(d) = d else {
        out.push((
            j.fact(
                sf.name.clone(),
                "type",
                true,
                &prov,
                &sf.section,
                "struct".into(),
                None,
                None,
            ),
            0,
        ));
        return;
    };
    let note = d.via.as_ref().map(|v| format!("found as {v}"));
    out.push((
        j.fact(
            sf.name.clone(),
            "size",
            true,
            &prov,
            &sf.section,
            sf.size.to_string(),
            d.size.map(|v| v.to_string()),
            note,
        ),
        0,
    ));
    let mut fields: Vec<&FieldFact> = sf.fields.iter().collect();
    fields.sort_by_key(|f| f.offset.unwrap_or(usize::MAX));
    for ff in fields {
        let subject = format!("{}.{}", sf.name, ff.name);
        let key = ff.offset.unwrap_or(usize::MAX) as u64;
        let fact = |what, expected: String, found: Option<String>, note| {
            j.fact(
                subject.clone(),
                what,
                true,
                &ff.provenance,
                &sf.section,
                expected,
                found,
                note,
            )
        };
        let Some(m) = d.member(&ff.name) else {
            let expected = match (ff.offset, ff.size) {
                (Some(o), Some(z)) => format!("@{o} size {z}"),
                (Some(o), None) => format!("@{o}"),
                _ => "member".into(),
            };
            out.push((fact("member", expected, None, None), key));
            continue;
        };
        if let Some(o) = ff.offset {
            out.push((
                fact(
                    "offset",
                    o.to_string(),
                    m.offset.map(|v| v.to_string()),
                    None,
                ),
                key,
            ));
        }
        if let Some(z) = ff.size {
            out.push((
                fact(
                    "member size",
                    z.to_string(),
                    m.size.map(|v| v.to_string()),
                    None,
                ),
                key,
            ));
        }
        if let Some(c) = ff.count {
            let n: u64 = m.dims.iter().product();
            let found = if m.dims.is_empty() {
                "scalar".to_string()
            } else {
                n.to_string()
            };
            let shape = (m.dims.len() > 1).then(|| format!("bounds {}", dims(&m.dims)));
            out.push((fact("count", c.to_string(), Some(found), shape), key));
        }
    }
}

/// The facts v2 pins for one enum: its size where stated, its member count, every listed value.
fn pinned_enum_facts(ef: &EnumFact, d: Option<&DEnum>, j: &Judge, out: &mut Vec<(Fact, u64)>) {
    let prov = ef.provenance.clone().unwrap_or_else(|| "observed".into());
    let fact = |subject: String, what, expected: String, found: Option<String>| {
        (
            j.fact(
                subject,
                what,
                true,
                &prov,
                &ef.section,
                expected,
                found,
                None,
            ),
            0,
        )
    };
    let Some(d) = d else {
        out.push(fact(ef.name.clone(), "type", "enum".into(), None));
        return;
    };
    if let Some(z) = ef.size {
        out.push(fact(
            ef.name.clone(),
            "size",
            z.to_string(),
            d.size.map(|v| v.to_string()),
        ));
    }
    out.push(fact(
        ef.name.clone(),
        "count",
        ef.whole_count().to_string(),
        Some(d.members.len().to_string()),
    ));
    let mut members: Vec<(&String, &i64)> = ef.members.iter().collect();
    members.sort_by_key(|(n, v)| (**v, n.as_str()));
    for (n, v) in members {
        let found = d
            .members
            .iter()
            .find(|(dn, _)| dn == n)
            .map(|(_, dv)| dv.to_string());
        out.push(fact(
            format!("{}.{n}", ef.name),
            "value",
            v.to_string(),
            found,
        ));
    }
}

/// The project's own placements that the facts do not pin ("chosen"), compared with the Rust
/// tables: findings, never failures unless `--strict`. With `--all`, reserved spans and DWARF
/// members the tables lack are listed as `INFO`.
fn chosen_struct_facts(
    s: &StructInfo,
    sf: Option<&StructFact>,
    d: Option<&DStruct>,
    j: &Judge,
    mode: Mode,
    out: &mut Vec<(Fact, u64)>,
) {
    let chosen = |subject: String, what, expected: String, found: Option<String>, note| {
        j.fact(
            subject, what, false, "chosen", s.section, expected, found, note,
        )
    };
    let Some(d) = d else {
        if sf.is_none() {
            out.push((
                chosen(s.name.to_string(), "type", "struct".into(), None, None),
                0,
            ));
        }
        return;
    };
    if sf.is_none() {
        let note = d.via.as_ref().map(|v| format!("found as {v}"));
        out.push((
            chosen(
                s.name.to_string(),
                "size",
                s.size.to_string(),
                d.size.map(|v| v.to_string()),
                note,
            ),
            0,
        ));
    }
    for f in s.fields {
        let subject = format!("{}.{}", s.name, f.name);
        let key = f.offset as u64;
        if crate::is_reserved(f) {
            if mode == Mode::All {
                let (lo, hi) = (f.offset as u64, (f.offset + f.size) as u64);
                let inside: Vec<String> = d
                    .members
                    .iter()
                    .filter(|m| {
                        let o = m.offset.unwrap_or(u64::MAX);
                        let e = o.saturating_add(m.size.unwrap_or(0));
                        o < hi && e > lo
                    })
                    .map(|m| format!("{}{}", m.name.as_deref().unwrap_or("<anon>"), at(m)))
                    .collect();
                let found = if inside.is_empty() {
                    "no DWARF member here".to_string()
                } else {
                    inside.join(" ")
                };
                out.push((
                    j.info(
                        subject,
                        "reserved",
                        s.section,
                        format!("{lo}..{hi}: {found}"),
                    ),
                    key,
                ));
            }
            continue;
        }
        let ff = sf.and_then(|sf| sf.field(f.name));
        let Some(m) = d.member(f.name) else {
            if ff.is_none() {
                let expected = format!("@{} size {}", f.offset, f.size);
                out.push((chosen(subject, "member", expected, None, None), key));
            }
            continue;
        };
        if ff.and_then(|ff| ff.offset).is_none() {
            let found = m.offset.map(|v| v.to_string());
            out.push((
                chosen(subject.clone(), "offset", f.offset.to_string(), found, None),
                key,
            ));
        }
        if ff.and_then(|ff| ff.size).is_none() {
            let found = m.size.map(|v| v.to_string());
            out.push((
                chosen(
                    subject.clone(),
                    "member size",
                    f.size.to_string(),
                    found,
                    None,
                ),
                key,
            ));
        }
        // The shape (`[8][23]` vs `[23][8]`) is the project's even where v2 pins the count.
        if f.ndims > 0 || !m.dims.is_empty() {
            let found = Some(dims(&m.dims));
            out.push((chosen(subject, "bounds", dims(f.dims()), found, None), key));
        }
    }
    if mode == Mode::All {
        for m in &d.members {
            let known = m.name.as_deref().is_some_and(|n| {
                s.field(n).is_some() || sf.is_some_and(|sf| sf.field(n).is_some())
            });
            if known {
                continue;
            }
            let name = m.name.as_deref().unwrap_or("<anon>");
            let mut decl = format!("{} {name}", m.type_name);
            decl.push_str(&m.dims.iter().map(|x| format!("[{x}]")).collect::<String>());
            out.push((
                j.info(
                    format!("{}.{name}", s.name),
                    "extra",
                    s.section,
                    format!("{decl} {}", at(m)),
                ),
                m.offset.unwrap_or(0),
            ));
        }
    }
}

fn chosen_enum_facts(
    e: &EnumInfo,
    ef: Option<&EnumFact>,
    d: Option<&DEnum>,
    j: &Judge,
    mode: Mode,
    out: &mut Vec<(Fact, u64)>,
) {
    let chosen = |subject: String, what, expected: String, found: Option<String>| {
        (
            j.fact(
                subject, what, false, "chosen", e.section, expected, found, None,
            ),
            0,
        )
    };
    let Some(d) = d else {
        if ef.is_none() {
            out.push(chosen(e.name.to_string(), "type", "enum".into(), None));
        }
        return;
    };
    if ef.and_then(|ef| ef.size).is_none() {
        out.push(chosen(
            e.name.to_string(),
            "size",
            e.size.to_string(),
            d.size.map(|v| v.to_string()),
        ));
    }
    if ef.is_none() {
        out.push(chosen(
            e.name.to_string(),
            "count",
            e.members.len().to_string(),
            Some(d.members.len().to_string()),
        ));
    }
    for (n, v) in e.members {
        if ef.is_some_and(|ef| ef.members.contains_key(*n)) {
            continue;
        }
        let found = d
            .members
            .iter()
            .find(|(dn, _)| dn == n)
            .map(|(_, dv)| dv.to_string());
        out.push(chosen(
            format!("{}.{n}", e.name),
            "value",
            v.to_string(),
            found,
        ));
    }
    if mode == Mode::All {
        for (dn, dv) in &d.members {
            let known = e.members.iter().any(|(n, _)| n == dn)
                || ef.is_some_and(|ef| ef.members.contains_key(dn));
            if !known {
                let ours = e
                    .members
                    .iter()
                    .find(|(_, v)| v == dv)
                    .map_or("no member".to_string(), |(n, _)| format!("ours: {n}"));
                out.push((
                    j.info(
                        format!("{}.{dn}", e.name),
                        "extra",
                        e.section,
                        format!("{dn} = {dv} ({ours})"),
                    ),
                    0,
                ));
            }
        }
    }
}

/// The category tables, byte by byte: against v2's `[tables]` (pinned) where the facts have
/// the table, else against the project's bytes (chosen). An absent symbol is `MISSING`, never a
/// failure: a build may not keep local symbols.
fn table_results(ex: &Extract, pins: &Pins, opts: &CheckOptions) -> Vec<TableResult> {
    let facts = pins.facts();
    let mut out = Vec::new();
    for (key, symbol) in TABLE_SYMBOLS {
        let (expected, pinned) = match facts.tables.get(key) {
            Some(b) => (b.clone(), true),
            None if opts.mode == Mode::Pinned => continue,
            None => (project_table(key).to_vec(), false),
        };
        let found = ex.symbols.get(symbol).cloned();
        let mut diffs = Vec::new();
        if let Some(f) = &found {
            for (i, e) in expected.iter().enumerate() {
                match f.get(i) {
                    Some(g) if g == e => {}
                    g => diffs.push(TableDiff {
                        index: i,
                        expected: *e,
                        found: g.copied(),
                        pinned,
                    }),
                }
            }
        }
        let (status, fails) = match &found {
            None => (Status::Missing, false),
            Some(_) if diffs.is_empty() => (Status::Pass, false),
            Some(_) if pinned || opts.strict => (Status::Fail, true),
            Some(_) => (Status::Finding, false),
        };
        out.push(TableResult {
            symbol: symbol.to_string(),
            table: key.to_string(),
            pinned,
            expected,
            first_diff: diffs.first().map(|d| d.index),
            found,
            diffs,
            status,
            fails,
        });
    }
    out
}

/// The first failing member of each struct, by offset (issue 15: "name the first differing
/// member").
fn first_differences(facts: &[(Fact, u64)]) -> Vec<FirstDifference> {
    let mut out: Vec<FirstDifference> = Vec::new();
    let mut best: BTreeMap<String, (u64, usize)> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for (i, (f, key)) in facts.iter().enumerate() {
        if !f.fails {
            continue;
        }
        let Some((strukt, _member)) = f.subject.split_once('.') else {
            continue;
        };
        let entry = best.entry(strukt.to_string()).or_insert_with(|| {
            order.push(strukt.to_string());
            (u64::MAX, usize::MAX)
        });
        if *key < entry.0 {
            *entry = (*key, i);
        }
    }
    for strukt in order {
        let Some((_, i)) = best.get(&strukt) else {
            continue;
        };
        let Some((f, _)) = facts.get(*i) else {
            continue;
        };
        let member = f.subject.split_once('.').map_or("", |(_, m)| m).to_string();
        out.push(FirstDifference {
            strukt,
            member,
            fact: f.fact,
            expected: f.expected.clone(),
            found: f.found.clone(),
        });
    }
    out
}

/// Builds the report from an extraction (the part of [`check`] that needs no file).
///
/// Pinned facts come from the facts file alone; chosen ones from the
/// Rust tables, for what the facts leave open (not in `--pinned`).
pub fn evaluate(elf: &str, ex: &Extract, pins: &Pins, opts: &CheckOptions) -> Report {
    let j = Judge {
        strict: opts.strict,
    };
    let facts = pins.facts();
    let mut all: Vec<(Fact, u64)> = Vec::new();
    let mut names: Vec<&str> = facts.structs.iter().map(|s| s.name.as_str()).collect();
    names.extend(
        abi::STRUCTS
            .iter()
            .map(|s| s.name)
            .filter(|n| facts.struct_fact(n).is_none()),
    );
    for name in names {
        let sf = facts.struct_fact(name);
        let d = ex.structs.get(name);
        if let Some(sf) = sf {
            pinned_struct_facts(sf, d, &j, &mut all);
        }
        if opts.mode != Mode::Pinned {
            if let Some(s) = abi::struct_info(name) {
                chosen_struct_facts(s, sf, d, &j, opts.mode, &mut all);
            }
        }
    }
    let mut enum_names: Vec<&str> = facts.enums.iter().map(|e| e.name.as_str()).collect();
    enum_names.extend(
        abi::ENUMS
            .iter()
            .map(|e| e.name)
            .filter(|n| facts.enum_fact(n).is_none()),
    );
    for name in enum_names {
        let ef = facts.enum_fact(name);
        let d = ex.enums.get(name);
        if let Some(ef) = ef {
            pinned_enum_facts(ef, d, &j, &mut all);
        }
        if opts.mode != Mode::Pinned {
            if let Some(e) = abi::ENUMS.iter().find(|e| e.name == name) {
                chosen_enum_facts(e, ef, d, &j, opts.mode, &mut all);
            }
        }
    }
    let first = first_differences(&all);
    let mut chosen = Tally::default();
    let mut listed_facts = Vec::new();
    for (f, _) in all {
        let listed = match opts.mode {
            Mode::All => true,
            Mode::Pinned => f.pinned,
            Mode::Default => f.pinned || f.fails,
        };
        if !f.pinned && f.status != Status::Info && opts.mode != Mode::Pinned {
            chosen.checked += 1;
            match f.status {
                Status::Pass => chosen.agree += 1,
                Status::Missing => chosen.missing += 1,
                _ => chosen.differ += 1,
            }
        }
        if listed {
            listed_facts.push(f);
        }
    }
    let tables = table_results(ex, pins, opts);
    let mut summary = Summary::default();
    let statuses = listed_facts
        .iter()
        .map(|f| (f.status, f.fails))
        .chain(tables.iter().map(|t| (t.status, t.fails)));
    for (st, fails) in statuses {
        match st {
            Status::Pass => summary.pass += 1,
            Status::Fail => summary.fail += 1,
            Status::Missing => summary.missing += 1,
            Status::Finding => summary.finding += 1,
            Status::Info => summary.info += 1,
        }
        summary.failing += usize::from(fails);
    }
    Report {
        elf: elf.to_string(),
        mode: opts.mode,
        strict: opts.strict,
        units: ex.units,
        type_units: ex.type_units,
        dwarf_versions: ex.dwarf_versions.iter().copied().collect(),
        compressed: ex.compressed.clone(),
        skeleton_units: ex.skeleton_units,
        facts: listed_facts,
        first_differences: first,
        tables,
        chosen,
        summary,
        exit_code: i32::from(summary.failing > 0),
    }
}

/// Checks the ELF at `elf` against the vendored facts and the project's layouts. `Err` means
/// the file could not be checked at all (not ELF, no DWARF, stripped, split DWARF, malformed:
/// exit code 2).
pub fn check(elf: &Path, opts: &CheckOptions) -> Result<Report, DwarfError> {
    let pins = Pins::vendored().map_err(|detail| DwarfError::Malformed {
        path: elf.to_path_buf(),
        detail: format!("built-in layout facts: {detail}"),
    })?;
    check_with(elf, opts, &pins)
}

/// [`check`] against explicit facts (`nrt-layout check --facts FILE`); load them with
/// [`crate::facts::Facts::load`] so a self-contradicting file is refused first.
pub fn check_with(elf: &Path, opts: &CheckOptions, pins: &Pins) -> Result<Report, DwarfError> {
    let ex = dwarf::extract(elf, &request(pins))?;
    Ok(evaluate(&elf.display().to_string(), &ex, pins, opts))
}

fn bytes(b: &[u8]) -> String {
    let parts: Vec<String> = b.iter().map(|x| x.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

impl Report {
    /// Human-readable report: one line per listed fact, then tables, tally and summary.
    pub fn to_text(&self) -> String {
        let mode = match self.mode {
            Mode::Default => "pinned facts, chosen facts tallied",
            Mode::Pinned => "pinned facts only",
            Mode::All => "all facts",
        };
        let versions: Vec<String> = self.dwarf_versions.iter().map(|v| v.to_string()).collect();
        let mut read = format!(
            "{} DWARF units, {} of them type units; DWARF {}",
            self.units,
            self.type_units,
            versions.join("+")
        );
        for (sec, how) in &self.compressed {
            read.push_str(&format!("; {sec} {how}-compressed"));
        }
        let mut o = format!(
            "nrt-layout check {} — {}{} ({}{})\n\n",
            self.elf,
            mode,
            if self.strict { ", strict" } else { "" },
            read,
            if self.skeleton_units > 0 {
                format!(
                    ", {} split-DWARF skeleton units skipped",
                    self.skeleton_units
                )
            } else {
                String::new()
            }
        );
        let width = self
            .facts
            .iter()
            .map(|f| f.subject.len())
            .chain(self.tables.iter().map(|t| t.symbol.len()))
            .max()
            .unwrap_or(0);
        for f in &self.facts {
            let what = match (&f.found, f.status) {
                (_, Status::Info) => f.found.clone().unwrap_or_default(),
                (None, _) => format!("expected {}, not in DWARF", f.expected),
                (Some(found), _) => format!("expected {}, found {}", f.expected, found),
            };
            let mut line = format!(
                "{:<8} {:<width$} {:<12} {}",
                f.status.as_str(),
                f.subject,
                f.fact,
                what
            );
            if f.status != Status::Info {
                line.push_str(&format!("  [{} §{}]", f.provenance, f.section));
            }
            if let Some(n) = &f.note {
                line.push_str(&format!("  ({n})"));
            }
            o.push_str(line.trim_end());
            o.push('\n');
        }
        if !self.first_differences.is_empty() {
            o.push_str("\nfirst differing member per struct:\n");
            for d in &self.first_differences {
                o.push_str(&format!(
                    "FIRST    {}: `{}` ({} expected {}, found {})\n",
                    d.strukt,
                    d.member,
                    d.fact,
                    d.expected,
                    d.found.as_deref().unwrap_or("nothing")
                ));
            }
        }
        o.push_str("\ncategory tables (spec §3.3):\n");
        for t in &self.tables {
            let against = if t.pinned {
                "v2 [tables]"
            } else {
                "the project's bytes, chosen"
            };
            match &t.found {
                None => o.push_str(&format!(
                    "{:<8} {:<width$} not present: the symbol is not in the ELF's symbol tables (not a failure)\n",
                    t.status.as_str(),
                    t.symbol
                )),
                Some(found) => {
                    let first = match t.first_diff {
                        Some(i) => format!("; first differing index [{i}]"),
                        None => String::new(),
                    };
                    o.push_str(&format!(
                        "{:<8} {:<width$} {} bytes against {against}{first}: found {}\n",
                        t.status.as_str(),
                        t.symbol,
                        t.expected.len(),
                        bytes(found)
                    ));
                    for d in &t.diffs {
                        o.push_str(&format!(
                            "{:<8}   [{}] expected {}, found {}{}\n",
                            "",
                            d.index,
                            d.expected,
                            d.found
                                .map_or("nothing (symbol too short)".into(), |b| b.to_string()),
                            if d.pinned { " (pinned)" } else { " (chosen)" }
                        ));
                    }
                }
            }
        }
        if self.mode == Mode::Default {
            o.push_str(&format!(
                "\nchosen facts (not failures): {} checked — {} agree, {} differ, {} missing; \
                 `--all` lists them\n",
                self.chosen.checked, self.chosen.agree, self.chosen.differ, self.chosen.missing
            ));
        }
        let s = &self.summary;
        o.push_str(&format!(
            "\nsummary: {} PASS, {} FAIL, {} MISSING, {} FINDING, {} INFO — {} (exit {})\n",
            s.pass,
            s.fail,
            s.missing,
            s.finding,
            s.info,
            if self.exit_code == 0 { "OK" } else { "FAILED" },
            self.exit_code
        ));
        o
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
