//! The ABI conformance checker: hold an ELF's DWARF against the project's layouts,
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

mod facts;
mod text;

use facts::{
    chosen_enum_facts, chosen_struct_facts, pinned_enum_facts, pinned_struct_facts, Judge,
};

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

/// The first failing member of each struct, by offset (the checker names the first
/// differing member).
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
