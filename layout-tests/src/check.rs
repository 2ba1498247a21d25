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
//! A fact is **pinned** when the spec states it ([`crate::facts::Pins`]: observed/inferred
//! members, sizes and values listed in `layout-facts.toml`). Everything else is **chosen** — the
//! project placed it.
//!
//! * A pinned fact that differs is `FAIL`; a pinned fact the DWARF lacks is `MISSING`; both make
//!   the exit code 1.
//! * A chosen fact that differs or is missing is a `FINDING`: reported, never failing (libnrt
//!   is free to have put its members elsewhere). `--strict` makes findings fail too (`FAIL`),
//!   which is how the self-check of the project's own header is run.
//! * Reserved spans are not libnrt members; with `--all` each is reported `INFO` with the DWARF
//!   members that occupy those bytes, as are DWARF members and enumerators the tables lack.
//! * A category-table symbol that is absent is `MISSING` but never fails (a build may not keep
//!   local symbols); bytes that differ fail only at the pinned indices (`host[18..=21] = 20`).
//!
//! ## Modes
//!
//! * default — every pinned fact listed; chosen facts evaluated and tallied in one line.
//! * `--pinned` — pinned facts only.
//! * `--all` — every fact listed, chosen ones included, plus the `INFO` lines above.

use std::path::Path;

use nrt_core::abi::{self, meta::StructInfo, tables};
use serde::Serialize;

use crate::dwarf::{self, DStruct, DwarfError, Extract, Request};
use crate::facts::Pins;

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
    /// The project's byte.
    pub expected: u8,
    /// The ELF's byte.
    pub found: u8,
    /// Pinned by the spec.
    pub pinned: bool,
}

/// One category table read from `.rodata`.
#[derive(Clone, Debug, Serialize)]
pub struct TableResult {
    /// Symbol name.
    pub symbol: String,
    /// The project's bytes.
    pub expected: Vec<u8>,
    /// The bytes found (`None` = no such symbol).
    pub found: Option<Vec<u8>>,
    /// Indices the spec pins.
    pub pinned_indices: Vec<usize>,
    /// Bytes that differ.
    pub diffs: Vec<TableDiff>,
    /// The verdict.
    pub status: Status,
    /// Counts towards exit code 1.
    pub fails: bool,
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
    /// Split-DWARF skeleton units skipped.
    pub skeleton_units: usize,
    /// Listed facts, in table order.
    pub facts: Vec<Fact>,
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

/// What one pass over the DWARF must fetch for a check.
pub fn request() -> Request {
    Request {
        structs: abi::STRUCTS.iter().map(|s| s.name.to_string()).collect(),
        enums: abi::ENUMS.iter().map(|e| e.name.to_string()).collect(),
        aliases: dwarf::table_aliases(),
        symbols: TABLES
            .iter()
            .map(|(n, b, _)| (n.to_string(), b.len()))
            .collect(),
    }
}

/// The tables the checker looks for: symbol, expected bytes, whether the spec pins the sentinel
/// at `host_category_invalid_usage_indices`.
const TABLES: [(&str, &[u8; 23], bool); 3] = [
    (
        "dmem_usage_type_to_host_category",
        &tables::DMEM_USAGE_TYPE_TO_HOST_CATEGORY,
        true,
    ),
    (
        "dmem_usage_type_to_device_category",
        &tables::DMEM_USAGE_TYPE_TO_DEVICE_CATEGORY,
        false,
    ),
    (
        "dmem_usage_type_to_aggr_index",
        &tables::DMEM_USAGE_TYPE_TO_AGGR_INDEX,
        false,
    ),
];

fn struct_facts(
    s: &StructInfo,
    d: Option<&DStruct>,
    pins: &Pins,
    j: &Judge,
    mode: Mode,
    out: &mut Vec<Fact>,
) {
    let size_section = pins.struct_size(s);
    let size_prov = match (&size_section, pins.facts().struct_fact(s.name)) {
        (Some(_), Some(sf)) => sf.provenance.clone().unwrap_or_else(|| "observed".into()),
        (Some(_), None) => "inferred".into(),
        (None, _) => "chosen".into(),
    };
    let section = size_section
        .clone()
        .unwrap_or_else(|| s.section.to_string());
    let any_pinned = size_section.is_some() || s.fields.iter().any(|f| pins.field(s, f.name).any());
    let Some(d) = d else {
        out.push(j.fact(
            s.name.to_string(),
            "type",
            any_pinned,
            &size_prov,
            &section,
            "struct".into(),
            None,
            None,
        ));
        return;
    };
    let note = d.via.as_ref().map(|v| format!("found as {v}"));
    out.push(j.fact(
        s.name.to_string(),
        "size",
        size_section.is_some(),
        &size_prov,
        &section,
        // What the spec states where it states it (else the tables): the DWARF is compared
        // with the spec itself, not only with the tables that produced the build.
        pins.expected_size(s).to_string(),
        d.size.map(|v| v.to_string()),
        note,
    ));
    for f in s.fields {
        let subject = format!("{}.{}", s.name, f.name);
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
                    .map(|m| {
                        format!(
                            "{}@{}({})",
                            m.name.as_deref().unwrap_or("<anon>"),
                            m.offset.map_or("?".into(), |v| v.to_string()),
                            m.size.map_or("?".into(), |v| v.to_string())
                        )
                    })
                    .collect();
                let found = if inside.is_empty() {
                    "no DWARF member here".to_string()
                } else {
                    inside.join(" ")
                };
                out.push(j.info(
                    subject,
                    "reserved",
                    s.section,
                    format!("{lo}..{hi}: {found}"),
                ));
            }
            continue;
        }
        let p = pins.field(s, f.name);
        let prov = f.provenance.as_str();
        let Some(m) = d.member(f.name) else {
            out.push(j.fact(
                subject,
                "member",
                p.any(),
                prov,
                &section,
                format!("@{} size {}", f.offset, f.size),
                None,
                None,
            ));
            continue;
        };
        out.push(j.fact(
            subject.clone(),
            "offset",
            p.offset,
            prov,
            &section,
            pins.expected_offset(s, f).to_string(),
            m.offset.map(|v| v.to_string()),
            None,
        ));
        out.push(j.fact(
            subject.clone(),
            "member size",
            p.size,
            prov,
            &section,
            pins.expected_member_size(s, f).to_string(),
            m.size.map(|v| v.to_string()),
            None,
        ));
        if f.ndims > 0 || !m.dims.is_empty() {
            out.push(j.fact(
                subject,
                "bounds",
                p.bounds,
                prov,
                &section,
                dims(f.dims()),
                Some(dims(&m.dims)),
                None,
            ));
        }
    }
    if mode == Mode::All {
        for m in &d.members {
            let known = m.name.as_deref().is_some_and(|n| s.field(n).is_some());
            if known {
                continue;
            }
            let mut decl = format!("{} {}", m.type_name, m.name.as_deref().unwrap_or("<anon>"));
            decl.push_str(&m.dims.iter().map(|x| format!("[{x}]")).collect::<String>());
            out.push(j.info(
                format!("{}.{}", s.name, m.name.as_deref().unwrap_or("<anon>")),
                "extra",
                s.section,
                format!(
                    "{decl} @{} size {}",
                    m.offset.map_or("?".into(), |v| v.to_string()),
                    m.size.map_or("?".into(), |v| v.to_string())
                ),
            ));
        }
    }
}

fn enum_facts(ex: &Extract, pins: &Pins, j: &Judge, mode: Mode, out: &mut Vec<Fact>) {
    for e in abi::ENUMS {
        let section = pins.enum_section(e.name).unwrap_or(e.section).to_string();
        let listed = pins.facts().enum_fact(e.name);
        let prov = |pinned: bool| {
            if pinned {
                listed
                    .and_then(|l| l.provenance.clone())
                    .unwrap_or_else(|| "observed".into())
            } else {
                "chosen".into()
            }
        };
        let Some(d) = ex.enums.get(e.name) else {
            out.push(j.fact(
                e.name.to_string(),
                "type",
                listed.is_some(),
                &prov(listed.is_some()),
                &section,
                "enum".into(),
                None,
                None,
            ));
            continue;
        };
        let size_pinned = pins.enum_size(e.name).is_some();
        out.push(j.fact(
            e.name.to_string(),
            "size",
            size_pinned,
            &prov(size_pinned),
            &section,
            pins.enum_size(e.name).unwrap_or(e.size).to_string(),
            d.size.map(|v| v.to_string()),
            None,
        ));
        let count_pinned = pins.enum_count(e.name).is_some();
        out.push(
            j.fact(
                e.name.to_string(),
                "count",
                count_pinned,
                &prov(count_pinned),
                &section,
                pins.enum_count(e.name)
                    .unwrap_or(e.members.len())
                    .to_string(),
                Some(d.members.len().to_string()),
                None,
            ),
        );
        for (n, v) in e.members {
            let pinned = pins.enum_member(e.name, n);
            let found = d
                .members
                .iter()
                .find(|(dn, _)| dn == n)
                .map(|(_, dv)| dv.to_string());
            out.push(j.fact(
                format!("{}.{}", e.name, n),
                "value",
                pinned,
                &prov(pinned),
                &section,
                pins.expected_enum_value(e.name, n, *v).to_string(),
                found,
                None,
            ));
        }
        if mode == Mode::All {
            for (dn, dv) in &d.members {
                if !e.members.iter().any(|(n, _)| n == dn) {
                    let ours = e
                        .members
                        .iter()
                        .find(|(_, v)| v == dv)
                        .map_or("no member".to_string(), |(n, _)| format!("ours: {n}"));
                    out.push(j.info(
                        format!("{}.{}", e.name, dn),
                        "extra",
                        &section,
                        format!("{dn} = {dv} ({ours})"),
                    ));
                }
            }
        }
    }
}

fn table_results(ex: &Extract, pins: &Pins, opts: &CheckOptions) -> Vec<TableResult> {
    let pinned_idx = pins.host_invalid_indices();
    let sentinel = pins.sentinel();
    TABLES
        .iter()
        .map(|(name, expected, host)| {
            let pinned_indices: Vec<usize> = if *host && sentinel.is_some() {
                pinned_idx.clone()
            } else {
                Vec::new()
            };
            let found = ex.symbols.get(*name).cloned();
            let mut diffs = Vec::new();
            if let Some(f) = &found {
                for (i, (e, g)) in expected.iter().zip(f.iter()).enumerate() {
                    let pinned = pinned_indices.contains(&i);
                    if e != g && (pinned || opts.mode != Mode::Pinned) {
                        diffs.push(TableDiff {
                            index: i,
                            expected: *e,
                            found: *g,
                            pinned,
                        });
                    }
                }
            }
            let (status, fails) = match &found {
                None => (Status::Missing, false),
                Some(_) if diffs.is_empty() => (Status::Pass, false),
                Some(_) if diffs.iter().any(|d| d.pinned) || opts.strict => (Status::Fail, true),
                Some(_) => (Status::Finding, false),
            };
            TableResult {
                symbol: name.to_string(),
                expected: expected.to_vec(),
                found,
                pinned_indices,
                diffs,
                status,
                fails,
            }
        })
        .collect()
}

/// Builds the report from an extraction (the part of [`check`] that needs no file).
pub fn evaluate(elf: &str, ex: &Extract, pins: &Pins, opts: &CheckOptions) -> Report {
    let j = Judge {
        strict: opts.strict,
    };
    let mut all = Vec::new();
    for s in abi::STRUCTS {
        struct_facts(s, ex.structs.get(s.name), pins, &j, opts.mode, &mut all);
    }
    enum_facts(ex, pins, &j, opts.mode, &mut all);
    let mut chosen = Tally::default();
    let mut facts = Vec::new();
    for f in all {
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
            facts.push(f);
        }
    }
    let tables = table_results(ex, pins, opts);
    let mut summary = Summary::default();
    let statuses = facts
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
        skeleton_units: ex.skeleton_units,
        facts,
        tables,
        chosen,
        summary,
        exit_code: i32::from(summary.failing > 0),
    }
}

/// Checks the ELF at `elf` against the project's layouts (issue 8). `Err` means the file could
/// not be checked at all (not ELF, no DWARF, stripped, split DWARF, malformed: exit code 2).
pub fn check(elf: &Path, opts: &CheckOptions) -> Result<Report, DwarfError> {
    let pins = Pins::vendored().map_err(|detail| DwarfError::Malformed {
        path: elf.to_path_buf(),
        detail: format!("built-in layout facts: {detail}"),
    })?;
    let ex = dwarf::extract(elf, &request())?;
    Ok(evaluate(&elf.display().to_string(), &ex, &pins, opts))
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
        let mut o = format!(
            "nrt-layout check {} — {}{} ({} DWARF units{})\n\n",
            self.elf,
            mode,
            if self.strict { ", strict" } else { "" },
            self.units,
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
        o.push_str("\ncategory tables (spec §3.3):\n");
        for t in &self.tables {
            match &t.found {
                None => o.push_str(&format!(
                    "{:<8} {:<width$} symbol not in the ELF's symbol tables (not a failure)\n",
                    t.status.as_str(),
                    t.symbol
                )),
                Some(found) => {
                    o.push_str(&format!(
                        "{:<8} {:<width$} found {}\n",
                        t.status.as_str(),
                        t.symbol,
                        bytes(found)
                    ));
                    for d in &t.diffs {
                        o.push_str(&format!(
                            "{:<8}   [{}] expected {}, found {}{}\n",
                            "",
                            d.index,
                            d.expected,
                            d.found,
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
