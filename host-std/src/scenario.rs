//! Scenarios: an ordered list of runtime operations with expectations, read from a TOML file
//! (`nrt-dmem run <scenario.toml>`, documented in `docs/SCENARIOS.md`), and the [`Session`] that
//! carries them out on a [`HostRuntime`] — the same workbench the demo uses.
//!
//! A scenario names the device, the logical-core size and the visible cores, then lists
//! `[[step]]` tables, each with exactly one action key (`load`, `unload`, `alloc_tensor`,
//! `free_tensor`, `execute`, `expect`, `reset_peak`, `fail_next_alloc`, `close`, `repeat`).
//! Every problem in the file is reported with its file, line, column and field
//! ([`ScenarioError`]); running it yields a [`RunReport`] whose failures name the step and line.
#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nrt_core::abi::tables::category_for;
use nrt_core::abi::{dma_mem_location_t, dma_mem_usage_type_t, mem_alloc_category_t, NRT_STATUS};
use nrt_core::cstr::Printable;
use nrt_core::ledger::MonitorClass;
use nrt_core::model::ModelSpec;
use nrt_core::tensor::Placement;
use nrt_core::{CoreSel, LogicalCore, Nrt};
use nrt_core::{ModelHandle, TensorHandle};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

use crate::config::{parse_visible_cores, DeviceChoice, Overrides, RuntimeConfig};
use crate::manifest::{parse_usage, Manifest};
use crate::runtime::{HostRuntime, StartError};

// ---------------------------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------------------------

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

/// A size in a scenario file: an integer or a string with a unit (see [`parse_size`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Size(u64);

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
struct Nth(u64);

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
struct Status(NRT_STATUS);

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

// ---------------------------------------------------------------------------------------------
// Memory categories
// ---------------------------------------------------------------------------------------------

/// What an `expect.category` names: a neuron-monitor class, the DMA rings, one usage type, or
/// the total.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Category {
    /// A neuron-monitor class of a core ([`MonitorClass`]: through each usage type's device
    /// category; `runtime_memory` includes the DMA rings, as neuron-monitor's per-core report
    /// does).
    Class(MonitorClass),
    /// The driver's `dma_rings` counter (device category DMA_RINGS_DEVICE: usage types
    /// DMA_RING, DMA_RING_SPILL, DMA_RING_IO, DMA_RING_COLLECTIVES).
    DmaRings,
    /// One `dma_mem_usage_type_t`.
    Usage(dma_mem_usage_type_t),
    /// Every category.
    Total,
}

/// The per-core classes in report order, with neuron-monitor's names (device side), and the
/// DMA rings last: neuron-monitor folds them into `runtime_memory`; the text reports show them
/// again on their own row ([`REPORT_ROWS`]).
pub const DEVICE_CLASSES: [(&str, Category); 6] = [
    ("tensors", Category::Class(MonitorClass::Tensors)),
    ("constants", Category::Class(MonitorClass::Constants)),
    ("model_code", Category::Class(MonitorClass::ModelCode)),
    (
        "model_shared_scratchpad",
        Category::Class(MonitorClass::ModelSharedScratchpad),
    ),
    (
        "runtime_memory",
        Category::Class(MonitorClass::RuntimeMemory),
    ),
    ("dma_rings", Category::DmaRings),
];

/// The rows of a core's text report, with their labels: every class at its full value, as
/// `stats --json` and scenario expectations count it (`runtime_memory` includes the rings),
/// then the rings as a part of `runtime_memory`.
pub const REPORT_ROWS: [(&str, Category); 6] = [
    DEVICE_CLASSES[0],
    DEVICE_CLASSES[1],
    DEVICE_CLASSES[2],
    DEVICE_CLASSES[3],
    DEVICE_CLASSES[4],
    ("  of which dma_rings", Category::DmaRings),
];

impl Category {
    /// Parses a class name (`tensors`, `constants`, `model_code`, `model_shared_scratchpad`,
    /// `runtime_memory`, `dma_rings`/`dma_buffers`), `total`, or a usage type by name
    /// (`DMA_RING`, `DMA_MEM_USAGE_TYPE_WEIGHT`). A usage name this project used before it
    /// took libnrt's enum is refused with the name to use now, and so is a bare number.
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        if t == "total" {
            return Ok(Category::Total);
        }
        if t == "dma_buffers" {
            return Ok(Category::DmaRings);
        }
        if let Some((_, c)) = DEVICE_CLASSES.iter().find(|(n, _)| *n == t) {
            return Ok(*c);
        }
        // Scenario files carry no format version, and the usage numbers changed when the
        // project took libnrt's enum (3 was CONSTANTS, now INSTR_POOL): a number is refused
        // rather than read with a meaning its author may not have meant.
        if let Ok(v) = t.parse::<u32>() {
            let now = dma_mem_usage_type_t::from_raw(v).map_or(String::new(), |u| {
                format!(" ({v} is {} now)", u.short_name())
            });
            return Err(format!(
                "a usage number is not accepted in a scenario: the numbers are libnrt 2.31's \
                 since the usage types were renumbered{now}; write the usage's name"
            ));
        }
        parse_usage(s).map(Category::Usage)
    }

    /// Device bytes of this category in a breakdown (`[usage]`, index 22 = total).
    pub fn of(self, device: &[u64; 23]) -> u64 {
        match self {
            Category::Total => device[22],
            Category::Usage(u) => device[u as usize],
            Category::Class(c) => c.of(device),
            Category::DmaRings => dma_mem_usage_type_t::all()
                .filter(|u| {
                    category_for(dma_mem_location_t::TONGA_DRAM, *u)
                        == mem_alloc_category_t::DMA_RINGS_DEVICE as u8
                })
                .map(|u| device[u as usize])
                .sum(),
        }
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Category::Total => f.write_str("total"),
            Category::Usage(u) => f.write_str(u.short_name()),
            Category::Class(c) => f.write_str(c.name()),
            Category::DmaRings => f.write_str("dma_rings"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The file format (raw) and its validated form
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    description: Option<String>,
    device: Option<Spanned<String>>,
    lnc_size: Option<Spanned<u32>>,
    visible_cores: Option<Spanned<VisibleRaw>>,
    num_cores: Option<Spanned<u32>>,
    #[serde(default)]
    step: Vec<Spanned<RawStep>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum VisibleRaw {
    Int(u32),
    Str(String),
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStep {
    // actions
    load: Option<Spanned<String>>,
    unload: Option<Spanned<String>>,
    alloc_tensor: Option<Spanned<String>>,
    free_tensor: Option<Spanned<String>>,
    execute: Option<Spanned<String>>,
    expect: Option<RawExpect>,
    reset_peak: Option<Spanned<i64>>,
    fail_next_alloc: Option<Spanned<Nth>>,
    close: Option<Spanned<bool>>,
    repeat: Option<Spanned<u64>>,
    snapshot: Option<Spanned<String>>,
    // arguments
    core: Option<Spanned<i64>>,
    #[serde(rename = "as")]
    as_name: Option<Spanned<String>>,
    placement: Option<Spanned<String>>,
    size: Option<Spanned<Size>>,
    inputs: Option<Spanned<BTreeMap<String, String>>>,
    outputs: Option<Spanned<BTreeMap<String, String>>>,
    check: Option<Spanned<bool>>,
    #[serde(rename = "do")]
    body: Option<Vec<Spanned<RawStep>>>,
    note: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    status: Option<Spanned<Status>>,
    message_contains: Option<Spanned<String>>,
    core: Option<Spanned<i64>>,
    used_bytes: Option<Spanned<Size>>,
    used_at_most: Option<Spanned<Size>>,
    used_at_least: Option<Spanned<Size>>,
    peak_bytes: Option<Spanned<Size>>,
    peak_at_most: Option<Spanned<Size>>,
    peak_at_least: Option<Spanned<Size>>,
    category: Option<Spanned<String>>,
    bytes: Option<Spanned<Size>>,
    bytes_at_most: Option<Spanned<Size>>,
    bytes_at_least: Option<Spanned<Size>>,
    models_on_core: Option<Spanned<u64>>,
    model: Option<Spanned<String>>,
    model_bytes: Option<Spanned<Size>>,
    driver_bytes: Option<Spanned<Size>>,
    unchanged_since: Option<Spanned<String>>,
}

/// A bad scenario (or manifest it names): where, which field, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line (0 when the whole file is at fault, e.g. it cannot be read).
    pub line: usize,
    /// 1-based column (0 when unknown).
    pub column: usize,
    /// The field (key) at fault, when one is.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
    /// The offending source line, for display.
    pub source_line: Option<String>,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
            if self.column > 0 {
                write!(f, ":{}", self.column)?;
            }
        }
        f.write_str(": ")?;
        if let Some(k) = &self.field {
            write!(f, "field `{k}`: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(l) = &self.source_line {
            write!(f, "\n  {:>4} | {}", self.line, l)?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioError {}

/// Line/column lookup over a source text.
struct Src<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Src<'_> {
    fn line_col(&self, offset: usize) -> (usize, usize) {
        // A span always starts on a character boundary; step back to one anyway rather than
        // panic on a surprise.
        let mut off = offset.min(self.text.len());
        while !self.text.is_char_boundary(off) {
            off -= 1;
        }
        let before = &self.text[..off];
        let line = before.matches('\n').count() + 1;
        let col = before.rfind('\n').map_or(off, |p| off - p - 1) + 1;
        (line, col)
    }
    fn line_text(&self, line: usize) -> Option<String> {
        self.text
            .lines()
            .nth(line.checked_sub(1)?)
            .map(|l| l.trim_end().to_string())
    }
    fn err(
        &self,
        span: std::ops::Range<usize>,
        field: Option<&str>,
        msg: impl Into<String>,
    ) -> ScenarioError {
        let (line, column) = self.line_col(span.start);
        ScenarioError {
            file: self.file.to_path_buf(),
            line,
            column,
            field: field.map(str::to_string),
            message: msg.into(),
            source_line: self.line_text(line),
        }
    }
    /// A TOML/serde error with its span, naming the key written on that line when the message
    /// does not already.
    fn toml_err(&self, e: &toml::de::Error) -> ScenarioError {
        let msg = e.message().trim().replace('\n', "; ");
        match e.span() {
            Some(span) => {
                let (line, column) = self.line_col(span.start);
                let text = self.line_text(line);
                let field = if msg.contains("field `") {
                    None
                } else {
                    text.as_deref()
                        .and_then(|l| l.split_once('='))
                        .map(|(k, _)| k.trim().trim_matches('"').to_string())
                        .filter(|k| !k.is_empty() && !k.starts_with('['))
                };
                ScenarioError {
                    file: self.file.to_path_buf(),
                    line,
                    column,
                    field,
                    message: msg,
                    source_line: text,
                }
            }
            None => ScenarioError {
                file: self.file.to_path_buf(),
                line: 0,
                column: 0,
                field: None,
                message: msg,
                source_line: None,
            },
        }
    }
}

/// A loaded manifest, shared by the steps that name it.
pub type ManifestRef = Rc<Manifest>;

/// Bounds on a figure: exact, at most, at least (any combination).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Bound {
    /// Must equal.
    pub exact: Option<u64>,
    /// Must not exceed.
    pub at_most: Option<u64>,
    /// Must reach.
    pub at_least: Option<u64>,
}

impl Bound {
    fn is_set(&self) -> bool {
        self.exact.is_some() || self.at_most.is_some() || self.at_least.is_some()
    }
    /// Why `v` misses the bound, if it does.
    pub fn check(&self, v: u64) -> Option<String> {
        let show = |b: u64| format!("{} ({b} B)", fmt_bytes(b));
        if let Some(e) = self.exact {
            if v != e {
                return Some(format!("is {}, expected {}", show(v), show(e)));
            }
        }
        if let Some(m) = self.at_most {
            if v > m {
                return Some(format!("is {}, expected at most {}", show(v), show(m)));
            }
        }
        if let Some(m) = self.at_least {
            if v < m {
                return Some(format!("is {}, expected at least {}", show(v), show(m)));
            }
        }
        None
    }
}

/// What an `expect` step checks.
#[derive(Clone, Debug, Default)]
pub struct Expect {
    /// Status of the previous step.
    pub status: Option<NRT_STATUS>,
    /// Text the previous step's error message must contain.
    pub message_contains: Option<String>,
    /// Logical core the memory figures are about.
    pub core: Option<i64>,
    /// Device bytes used on the core.
    pub used: Bound,
    /// Peak device bytes on the core.
    pub peak: Bound,
    /// Device bytes of one category on the core.
    pub category: Option<(Category, Bound)>,
    /// Models resident on the core.
    pub models_on_core: Option<u64>,
    /// A model's device footprint.
    pub model: Option<(String, Bound)>,
    /// Bytes the driver holds (all pools of all devices).
    pub driver_bytes: Option<Bound>,
    /// The core's device bytes, category by category, equal those of this snapshot.
    pub unchanged_since: Option<String>,
}

/// One operation of a scenario.
#[derive(Clone, Debug)]
pub enum Action {
    /// Load a manifest onto a logical core under a name.
    Load {
        /// The manifest file (resolved against the scenario's directory).
        path: PathBuf,
        /// The parsed manifest.
        manifest: ManifestRef,
        /// Logical core.
        core: i64,
        /// Name for later steps.
        name: String,
    },
    /// Unload a model by name.
    Unload {
        /// The name given at load.
        name: String,
    },
    /// Allocate a named tensor.
    AllocTensor {
        /// Name.
        name: String,
        /// Placement.
        placement: Placement,
        /// Logical core.
        core: i64,
        /// Bytes.
        size: u64,
    },
    /// Free a named tensor.
    FreeTensor {
        /// Name.
        name: String,
    },
    /// Execute a model: declared tensor → scenario tensor (the rest are created for the call).
    Execute {
        /// Model name.
        model: String,
        /// Declared input name → scenario tensor name.
        inputs: Vec<(String, String)>,
        /// Declared output name → scenario tensor name.
        outputs: Vec<(String, String)>,
        /// Write input bytes and verify the outputs read back.
        check: bool,
    },
    /// Check the previous step's status and/or memory figures.
    Expect(Box<Expect>),
    /// Reset a logical core's peaks to the current values.
    ResetPeak {
        /// Logical core.
        core: i64,
    },
    /// Make the Nth device allocation from now fail with ENOMEM (simulated device only).
    FailNextAlloc {
        /// 1 = the next one.
        nth: u64,
    },
    /// `nrt_close`: tear everything down.
    Close,
    /// Remember every logical core's usage under a name (for `expect.unchanged_since`).
    Snapshot {
        /// Name.
        name: String,
    },
    /// Run `steps` `times` times.
    Repeat {
        /// Iterations.
        times: u64,
        /// The body.
        steps: Vec<Step>,
    },
}

/// A step with its place in the file.
#[derive(Clone, Debug)]
pub struct Step {
    /// 1-based line of the step's `[[step]]` header (or its first key).
    pub line: usize,
    /// The operation.
    pub action: Action,
    /// A free-text note printed with the step.
    pub note: Option<String>,
}

/// A parsed, validated scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The file it came from.
    pub path: PathBuf,
    /// Its name (default: the file stem).
    pub name: String,
    /// Free-text description.
    pub description: Option<String>,
    /// `device = "sim:trn2"`.
    pub device: Option<DeviceChoice>,
    /// `lnc_size = 2`.
    pub lnc_size: Option<u32>,
    /// `visible_cores = "0-3"` as `(first, count)`.
    pub visible_cores: Option<(u32, u32)>,
    /// `num_cores = 2`.
    pub num_cores: Option<u32>,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Where the core-count settings (`lnc_size`, `visible_cores`, `num_cores`) are written:
    /// they are checked when the runtime starts, against the device, so their errors are
    /// located afterwards ([`Scenario::setting_error`]).
    setting_at: Vec<SettingAt>,
}

/// A core-count setting's place in the file: an error template without its message.
#[derive(Clone, Debug)]
struct SettingAt {
    key: &'static str,
    line: usize,
    column: usize,
    source_line: Option<String>,
}

const ACTIONS: &str = "load, unload, alloc_tensor, free_tensor, execute, expect, reset_peak, \
                       fail_next_alloc, snapshot, close, repeat";

impl Scenario {
    /// Reads and validates a scenario file, loading every manifest it names.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
            field: None,
            message: format!("cannot read scenario: {e}"),
            source_line: None,
        })?;
        Self::parse(path, &text)
    }

    /// Parses scenario text; `path` names it in errors and anchors relative manifest paths.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ScenarioError> {
        let src = Src { file: path, text };
        let raw: RawScenario = toml::from_str(text).map_err(|e| src.toml_err(&e))?;
        let device = match &raw.device {
            None => None,
            Some(d) => Some(
                DeviceChoice::parse(d.get_ref())
                    .map_err(|e| src.err(d.span(), Some("device"), e.reason))?,
            ),
        };
        let visible_cores = match &raw.visible_cores {
            None => None,
            Some(v) => Some(match v.get_ref() {
                VisibleRaw::Int(n) => (*n, 1),
                VisibleRaw::Str(s) => parse_visible_cores(s)
                    .map_err(|e| src.err(v.span(), Some("visible_cores"), e.reason))?,
            }),
        };
        if raw.step.is_empty() {
            return Err(ScenarioError {
                file: path.to_path_buf(),
                line: 0,
                column: 0,
                field: Some("step".into()),
                message: "the scenario has no [[step]] tables".into(),
                source_line: None,
            });
        }
        let at = |key: &'static str, span: Option<std::ops::Range<usize>>| {
            span.map(|span| {
                let e = src.err(span, None, "");
                SettingAt {
                    key,
                    line: e.line,
                    column: e.column,
                    source_line: e.source_line,
                }
            })
        };
        let setting_at = [
            at("lnc_size", raw.lnc_size.as_ref().map(Spanned::span)),
            at(
                "visible_cores",
                raw.visible_cores.as_ref().map(Spanned::span),
            ),
            at("num_cores", raw.num_cores.as_ref().map(Spanned::span)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut cache: BTreeMap<PathBuf, ManifestRef> = BTreeMap::new();
        let steps = raw
            .step
            .into_iter()
            .map(|s| convert_step(&src, dir, &mut cache, s))
            .collect::<Result<Vec<_>, _>>()?;
        let name = raw
            .name
            .or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "scenario".into());
        Ok(Scenario {
            path: path.to_path_buf(),
            name,
            description: raw.description,
            device,
            lnc_size: raw.lnc_size.map(|v| v.into_inner()),
            visible_cores,
            num_cores: raw.num_cores.map(|v| v.into_inner()),
            steps,
            setting_at,
        })
    }

    /// `message` located at the first of `keys` this scenario sets: how a core-count error
    /// found when the runtime starts points back at the line that caused it. `None` when the
    /// scenario sets none of them (the value came from the environment or a flag).
    pub fn setting_error(&self, keys: &[&str], message: &str) -> Option<ScenarioError> {
        let at = self.setting_at.iter().find(|a| keys.contains(&a.key))?;
        Some(ScenarioError {
            file: self.path.clone(),
            line: at.line,
            column: at.column,
            field: Some(at.key.to_string()),
            message: message.to_string(),
            source_line: at.source_line.clone(),
        })
    }

    /// Operations the scenario performs, with repeats expanded (for the progress bar).
    pub fn total_operations(&self) -> u64 {
        fn count(steps: &[Step]) -> u64 {
            steps
                .iter()
                .map(|s| match &s.action {
                    Action::Repeat { times, steps } => times.saturating_mul(count(steps)),
                    _ => 1,
                })
                .fold(0u64, u64::saturating_add)
        }
        count(&self.steps)
    }

    /// Whether any step repeats.
    pub fn has_repeat(&self) -> bool {
        self.steps
            .iter()
            .any(|s| matches!(s.action, Action::Repeat { .. }))
    }

    /// Applies the scenario's device and core settings to `cfg` (which the caller builds from
    /// the environment and then overrides with flags).
    pub fn overrides(&self) -> Overrides {
        Overrides {
            device: self.device,
            lnc_size: self.lnc_size,
            visible_cores: self.visible_cores,
            num_cores: self.num_cores,
        }
    }
}

fn convert_step(
    src: &Src<'_>,
    dir: &Path,
    cache: &mut BTreeMap<PathBuf, ManifestRef>,
    s: Spanned<RawStep>,
) -> Result<Step, ScenarioError> {
    let span = s.span();
    let (line, _) = src.line_col(span.start);
    let r = s.into_inner();
    let step_err = |msg: String| ScenarioError {
        file: src.file.to_path_buf(),
        line,
        column: 0,
        field: None,
        message: msg,
        source_line: src.line_text(line),
    };
    let mut present: Vec<&str> = Vec::new();
    for (k, on) in [
        ("load", r.load.is_some()),
        ("unload", r.unload.is_some()),
        ("alloc_tensor", r.alloc_tensor.is_some()),
        ("free_tensor", r.free_tensor.is_some()),
        ("execute", r.execute.is_some()),
        ("expect", r.expect.is_some()),
        ("reset_peak", r.reset_peak.is_some()),
        ("fail_next_alloc", r.fail_next_alloc.is_some()),
        ("close", r.close.is_some()),
        ("repeat", r.repeat.is_some()),
        ("snapshot", r.snapshot.is_some()),
    ] {
        if on {
            present.push(k);
        }
    }
    let action = match present.as_slice() {
        [] => {
            return Err(step_err(format!(
                "step has no action: give exactly one of {ACTIONS}"
            )))
        }
        [_] => present[0],
        many => {
            return Err(step_err(format!(
                "step has {} actions ({}): give exactly one per [[step]]",
                many.len(),
                many.join(", ")
            )))
        }
    };
    // Arguments an action does not take are mistakes worth naming.
    let allowed: &[&str] = match action {
        "load" => &["core", "as"],
        "alloc_tensor" => &["core", "placement", "size"],
        "execute" => &["inputs", "outputs", "check"],
        "repeat" => &["do"],
        _ => &[],
    };
    for (k, sp) in [
        ("core", r.core.as_ref().map(|v| v.span())),
        ("as", r.as_name.as_ref().map(|v| v.span())),
        ("placement", r.placement.as_ref().map(|v| v.span())),
        ("size", r.size.as_ref().map(|v| v.span())),
        ("inputs", r.inputs.as_ref().map(|v| v.span())),
        ("outputs", r.outputs.as_ref().map(|v| v.span())),
        ("check", r.check.as_ref().map(|v| v.span())),
    ] {
        if let Some(sp) = sp {
            if !allowed.contains(&k) {
                return Err(src.err(sp, Some(k), format!("`{action}` steps do not take `{k}`")));
            }
        }
    }
    if r.body.is_some() && action != "repeat" {
        return Err(step_err(format!(
            "`{action}` steps do not take `do` (only `repeat` does)"
        )));
    }
    let core = r.core.as_ref().map_or(0, |c| *c.get_ref());
    let name_of = |v: &Spanned<String>, field: &str| -> Result<String, ScenarioError> {
        let n = v.get_ref().trim();
        if n.is_empty() {
            Err(src.err(v.span(), Some(field), "must not be empty"))
        } else {
            Ok(n.to_string())
        }
    };
    let action = match action {
        "load" => {
            let p = r.load.as_ref().ok_or_else(|| step_err("load".into()))?;
            let rel = PathBuf::from(p.get_ref());
            let full = if rel.is_absolute() {
                rel
            } else {
                dir.join(rel)
            };
            let manifest = match cache.get(&full) {
                Some(m) => m.clone(),
                None => {
                    let m = Rc::new(Manifest::from_path(&full).map_err(|e| {
                        let msg = e.to_string();
                        let shown = full.display().to_string();
                        let msg = if msg.contains(&shown) {
                            msg
                        } else {
                            format!("{shown}: {msg}")
                        };
                        src.err(p.span(), Some("load"), msg)
                    })?);
                    cache.insert(full.clone(), m.clone());
                    m
                }
            };
            let name = match &r.as_name {
                Some(a) => name_of(a, "as")?,
                None => manifest.name.clone(),
            };
            Action::Load {
                path: full,
                manifest,
                core,
                name,
            }
        }
        "unload" => Action::Unload {
            name: name_of(
                r.unload.as_ref().ok_or_else(|| step_err("unload".into()))?,
                "unload",
            )?,
        },
        "alloc_tensor" => {
            let n = r
                .alloc_tensor
                .as_ref()
                .ok_or_else(|| step_err("alloc_tensor".into()))?;
            let placement = match &r.placement {
                None => Placement::Device,
                Some(p) => match p.get_ref().trim().to_ascii_lowercase().as_str() {
                    "device" => Placement::Device,
                    "host" => Placement::Host,
                    "virtual" => Placement::Virtual,
                    other => {
                        return Err(src.err(
                            p.span(),
                            Some("placement"),
                            format!("{other:?} is not a placement (device, host or virtual)"),
                        ))
                    }
                },
            };
            let size = r
                .size
                .as_ref()
                .ok_or_else(|| step_err("field `size` is required for `alloc_tensor`".into()))?;
            Action::AllocTensor {
                name: name_of(n, "alloc_tensor")?,
                placement,
                core,
                size: size.get_ref().0,
            }
        }
        "free_tensor" => Action::FreeTensor {
            name: name_of(
                r.free_tensor
                    .as_ref()
                    .ok_or_else(|| step_err("free_tensor".into()))?,
                "free_tensor",
            )?,
        },
        "execute" => Action::Execute {
            model: name_of(
                r.execute
                    .as_ref()
                    .ok_or_else(|| step_err("execute".into()))?,
                "execute",
            )?,
            inputs: r
                .inputs
                .map(|m| m.into_inner().into_iter().collect())
                .unwrap_or_default(),
            outputs: r
                .outputs
                .map(|m| m.into_inner().into_iter().collect())
                .unwrap_or_default(),
            check: r.check.is_none_or(|c| c.into_inner()),
        },
        "expect" => Action::Expect(Box::new(convert_expect(
            src,
            line,
            r.expect.unwrap_or_default(),
        )?)),
        "reset_peak" => Action::ResetPeak {
            core: r.reset_peak.map_or(0, |c| c.into_inner()),
        },
        "fail_next_alloc" => Action::FailNextAlloc {
            nth: r.fail_next_alloc.map_or(1, |n| n.into_inner().0),
        },
        "snapshot" => Action::Snapshot {
            name: name_of(
                r.snapshot
                    .as_ref()
                    .ok_or_else(|| step_err("snapshot".into()))?,
                "snapshot",
            )?,
        },
        "close" => {
            let c = r.close.ok_or_else(|| step_err("close".into()))?;
            if !*c.get_ref() {
                return Err(src.err(
                    c.span(),
                    Some("close"),
                    "write `close = true` (or leave the step out)",
                ));
            }
            Action::Close
        }
        "repeat" => {
            let t = r.repeat.ok_or_else(|| step_err("repeat".into()))?;
            let body = r.body.unwrap_or_default();
            if body.is_empty() {
                return Err(src.err(
                    t.span(),
                    Some("repeat"),
                    "a `repeat` step needs its body as [[step.do]] tables",
                ));
            }
            let steps = body
                .into_iter()
                .map(|s| convert_step(src, dir, cache, s))
                .collect::<Result<Vec<_>, _>>()?;
            Action::Repeat {
                times: t.into_inner(),
                steps,
            }
        }
        _ => return Err(step_err(format!("unknown action (give one of {ACTIONS})"))),
    };
    Ok(Step {
        line,
        action,
        note: r.note,
    })
}

fn convert_expect(src: &Src<'_>, line: usize, e: RawExpect) -> Result<Expect, ScenarioError> {
    let sz = |v: &Option<Spanned<Size>>| v.as_ref().map(|s| s.get_ref().0);
    let mut x = Expect {
        status: e.status.as_ref().map(|s| s.get_ref().0),
        message_contains: e.message_contains.map(|s| s.into_inner()),
        core: e.core.as_ref().map(|c| *c.get_ref()),
        used: Bound {
            exact: sz(&e.used_bytes),
            at_most: sz(&e.used_at_most),
            at_least: sz(&e.used_at_least),
        },
        peak: Bound {
            exact: sz(&e.peak_bytes),
            at_most: sz(&e.peak_at_most),
            at_least: sz(&e.peak_at_least),
        },
        category: None,
        models_on_core: e.models_on_core.as_ref().map(|m| *m.get_ref()),
        model: None,
        driver_bytes: sz(&e.driver_bytes).map(|b| Bound {
            exact: Some(b),
            ..Default::default()
        }),
        unchanged_since: e.unchanged_since.as_ref().map(|n| n.get_ref().clone()),
    };
    let cat_bound = Bound {
        exact: sz(&e.bytes),
        at_most: sz(&e.bytes_at_most),
        at_least: sz(&e.bytes_at_least),
    };
    match &e.category {
        Some(c) => {
            let cat = Category::parse(c.get_ref()).map_err(|why| {
                src.err(
                    c.span(),
                    Some("category"),
                    format!(
                        "{:?} is not a category (tensors, constants, model_code, \
                         model_shared_scratchpad, runtime_memory, dma_rings, total, or a usage \
                         type such as DMA_RING): {why}",
                        c.get_ref()
                    ),
                )
            })?;
            if !cat_bound.is_set() {
                return Err(src.err(
                    c.span(),
                    Some("category"),
                    "give `bytes`, `bytes_at_most` or `bytes_at_least` with `category`",
                ));
            }
            x.category = Some((cat, cat_bound));
        }
        None if cat_bound.is_set() => {
            let sp = e
                .bytes
                .as_ref()
                .or(e.bytes_at_most.as_ref())
                .or(e.bytes_at_least.as_ref())
                .map_or(0..0, |s| s.span());
            return Err(src.err(sp, Some("bytes"), "`bytes*` needs a `category`"));
        }
        None => {}
    }
    match (&e.model, &e.model_bytes) {
        (Some(m), Some(b)) => {
            x.model = Some((
                m.get_ref().clone(),
                Bound {
                    exact: Some(b.get_ref().0),
                    ..Default::default()
                },
            ))
        }
        (Some(m), None) => {
            return Err(src.err(m.span(), Some("model"), "give `model_bytes` with `model`"))
        }
        (None, Some(b)) => {
            return Err(src.err(
                b.span(),
                Some("model_bytes"),
                "give `model` with `model_bytes`",
            ))
        }
        (None, None) => {}
    }
    let needs_core = x.used.is_set()
        || x.peak.is_set()
        || x.category.is_some()
        || x.models_on_core.is_some()
        || x.unchanged_since.is_some();
    if needs_core && x.core.is_none() {
        return Err(ScenarioError {
            file: src.file.to_path_buf(),
            line,
            column: 0,
            field: Some("expect.core".into()),
            message: "memory figures of a core need `core` (the logical core index)".into(),
            source_line: src.line_text(line),
        });
    }
    let anything = x.status.is_some()
        || x.message_contains.is_some()
        || needs_core
        || x.model.is_some()
        || x.driver_bytes.is_some();
    if !anything {
        return Err(ScenarioError {
            file: src.file.to_path_buf(),
            line,
            column: 0,
            field: Some("expect".into()),
            message:
                "expects nothing: give `status`, or a figure such as `used_at_most` with `core`"
                    .into(),
            source_line: src.line_text(line),
        });
    }
    Ok(x)
}

// ---------------------------------------------------------------------------------------------
// The session: a runtime plus named models and tensors
// ---------------------------------------------------------------------------------------------

/// A model loaded by a session.
#[derive(Clone)]
pub struct LoadedModel {
    /// The name steps use.
    pub name: String,
    /// Its handle.
    pub handle: ModelHandle,
    /// Logical core.
    pub core: i64,
    /// Its manifest.
    pub manifest: ManifestRef,
}

/// A tensor allocated by a session.
#[derive(Clone)]
pub struct NamedTensor {
    /// Name.
    pub name: String,
    /// The tensor.
    pub tensor: TensorHandle,
    /// Placement.
    pub placement: Placement,
    /// Logical core.
    pub core: i64,
    /// Bytes.
    pub size: u64,
}

/// Why a session operation failed.
#[derive(Debug, Clone)]
pub enum StepError {
    /// The runtime refused (carries an `NRT_STATUS`).
    Nrt(nrt_core::Error),
    /// The scenario asked for something that does not exist (unknown name, …).
    Usage(String),
    /// Execution ran but the bytes read back are wrong.
    Check(String),
}

impl StepError {
    /// The status the runtime returned (`None` for scenario mistakes).
    pub fn status(&self) -> Option<NRT_STATUS> {
        match self {
            StepError::Nrt(e) => Some(e.status()),
            _ => None,
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::Nrt(e) => write!(f, "{} ({}): {e}", e.status().name(), e.status() as u32),
            StepError::Usage(m) | StepError::Check(m) => f.write_str(m),
        }
    }
}

impl From<nrt_core::Error> for StepError {
    fn from(e: nrt_core::Error) -> Self {
        StepError::Nrt(e)
    }
}

/// The OOM table libnrt writes on a device OOM, as text: the table the core captured at the
/// moment of the failure (headed by the failure, with the 5 largest live allocations).
pub fn oom_dump_text(nrt: &Nrt<'_>, err: &nrt_core::Error) -> Option<(u32, String)> {
    let nrt_core::Error::DeviceOom { device, .. } = *err else {
        return None;
    };
    let mut s = String::new();
    nrt.last_oom_dump(&mut s).ok()?;
    Some((device, s))
}

/// Writes the OOM table to its file ([`crate::runtime::oom_report_path`]) and returns the path.
pub fn write_oom_file(nrt: &Nrt<'_>, err: &nrt_core::Error) -> Option<std::io::Result<PathBuf>> {
    let (device, text) = oom_dump_text(nrt, err)?;
    Some(crate::runtime::write_oom_report(device, &text))
}

/// A model's device and host bytes per usage type (`[22]` = total): `(device, host)`.
pub type Footprint = ([u64; 23], [u64; 23]);

/// The sum of per-subgraph footprints: a model's whole footprint.
pub fn total_footprint(per: &[Footprint]) -> Footprint {
    let mut total = ([0u64; 23], [0u64; 23]);
    for (dev, host) in per {
        for u in 0..23 {
            total.0[u] += dev[u];
            total.1[u] += host[u];
        }
    }
    total
}

/// A runtime with the models and tensors a scenario (or the demo) made, by name.
pub struct Session {
    rt: HostRuntime,
    models: Vec<LoadedModel>,
    tensors: Vec<NamedTensor>,
    /// Where the last OOM table was written (or why it could not be).
    pub last_oom_file: Option<Result<PathBuf, String>>,
    snapshots: BTreeMap<String, Vec<[u64; 23]>>,
}

const CHUNK: usize = 64 << 10;

fn pattern_chunk(seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9) | 1;
    (0..CHUNK)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

/// The bytes written at chunk `i` of input `k`: the seeded pattern stamped with `i`, so a
/// misplaced chunk is caught too.
fn stamped(base: &[u8], i: u64, len: usize) -> Vec<u8> {
    let mut c = base[..len].to_vec();
    for (d, s) in c.iter_mut().zip(i.to_le_bytes()) {
        *d ^= s;
    }
    c
}

impl Session {
    /// Starts a runtime for `cfg`.
    pub fn start(cfg: RuntimeConfig) -> Result<Self, StartError> {
        Ok(Session {
            rt: HostRuntime::start(cfg)?,
            models: Vec::new(),
            tensors: Vec::new(),
            last_oom_file: None,
            snapshots: BTreeMap::new(),
        })
    }

    /// The runtime.
    pub fn runtime(&self) -> &HostRuntime {
        &self.rt
    }

    /// The core runtime view.
    pub fn nrt(&self) -> Nrt<'_> {
        self.rt.nrt()
    }

    /// Loaded models, in load order.
    pub fn models(&self) -> &[LoadedModel] {
        &self.models
    }

    /// Live named tensors.
    pub fn tensors(&self) -> &[NamedTensor] {
        &self.tensors
    }

    /// A loaded model by name.
    pub fn model(&self, name: &str) -> Result<&LoadedModel, StepError> {
        self.models
            .iter()
            .find(|m| m.name == name)
            .ok_or_else(|| StepError::Usage(format!("no model named `{name}` is loaded")))
    }

    fn note_error(&mut self, e: StepError) -> StepError {
        if let StepError::Nrt(err) = &e {
            if let Some(r) = write_oom_file(&self.rt.nrt(), err) {
                let r = r.map_err(|io| io.to_string());
                match &r {
                    Ok(p) => {
                        log::info!(target: "nrt_dmem::oom", "OOM table written to {}", p.display())
                    }
                    Err(io) => {
                        log::warn!(target: "nrt_dmem::oom", "could not write the OOM table: {io}")
                    }
                }
                self.last_oom_file = Some(r);
            }
        }
        e
    }

    /// Loads `manifest` onto logical core `core` as `name`.
    pub fn load(
        &mut self,
        manifest: &ManifestRef,
        core: i64,
        name: &str,
    ) -> Result<ModelHandle, StepError> {
        if self.models.iter().any(|m| m.name == name) {
            return Err(StepError::Usage(format!(
                "a model named `{name}` is already loaded (give the load another `as`)"
            )));
        }
        let storage = manifest.spec();
        let spec: ModelSpec<'_> = storage.as_spec();
        let r = self.rt.nrt().load_model(LogicalCore::from_c(core), &spec);
        match r {
            Ok(h) => {
                log::info!(target: "nrt_dmem::session", "loaded {name} on core {core} (handle {})", h.h_model().id);
                self.models.push(LoadedModel {
                    name: name.to_string(),
                    handle: h,
                    core,
                    manifest: manifest.clone(),
                });
                Ok(h)
            }
            Err(e) => Err(self.note_error(e.into())),
        }
    }

    /// Unloads a model by name.
    pub fn unload(&mut self, name: &str) -> Result<(), StepError> {
        let i = self
            .models
            .iter()
            .position(|m| m.name == name)
            .ok_or_else(|| StepError::Usage(format!("no model named `{name}` is loaded")))?;
        let h = self.models[i].handle;
        self.rt.nrt().unload_model(h)?;
        self.models.remove(i);
        Ok(())
    }

    /// Allocates a named tensor.
    pub fn alloc_tensor(
        &mut self,
        name: &str,
        placement: Placement,
        core: i64,
        size: u64,
    ) -> Result<TensorHandle, StepError> {
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(StepError::Usage(format!(
                "a tensor named `{name}` already exists"
            )));
        }
        let r = self
            .rt
            .nrt()
            .tensor_allocate(placement, CoreSel::from_c(core), size, Some(name));
        match r {
            Ok(t) => {
                self.tensors.push(NamedTensor {
                    name: name.to_string(),
                    tensor: t,
                    placement,
                    core,
                    size,
                });
                Ok(t)
            }
            Err(e) => Err(self.note_error(e.into())),
        }
    }

    /// Frees a named tensor.
    pub fn free_tensor(&mut self, name: &str) -> Result<(), StepError> {
        let i = self
            .tensors
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| StepError::Usage(format!("no tensor named `{name}`")))?;
        self.rt.nrt().tensor_free(self.tensors[i].tensor)?;
        self.tensors.remove(i);
        Ok(())
    }

    fn tensor(&self, name: &str) -> Result<&NamedTensor, StepError> {
        self.tensors
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| StepError::Usage(format!("no tensor named `{name}`")))
    }

    /// Executes `model`: binds each declared input/output to the named tensor `bind` gives for
    /// it, or to a device tensor created for this call on the model's core; with `check`,
    /// writes a pattern into every input first and verifies that each output reads back as the
    /// model's data path defines (output k = input k's bytes, zero-filled past them). Returns
    /// the bytes written to inputs.
    pub fn execute(
        &mut self,
        model: &str,
        inputs: &[(String, String)],
        outputs: &[(String, String)],
        check: bool,
    ) -> Result<u64, StepError> {
        let m = self.model(model)?.clone();
        let spec = &*m.manifest;
        for (decl, _) in inputs {
            if !spec.inputs.iter().any(|d| &d.name == decl) {
                return Err(StepError::Usage(format!(
                    "model `{model}` declares no input `{decl}`"
                )));
            }
        }
        for (decl, _) in outputs {
            if !spec.outputs.iter().any(|d| &d.name == decl) {
                return Err(StepError::Usage(format!(
                    "model `{model}` declares no output `{decl}`"
                )));
            }
        }
        let nrt = self.rt.nrt();
        let mut created: Vec<TensorHandle> = Vec::new();
        let mut sets = Vec::new();
        let result = (|| -> Result<u64, StepError> {
            let ins = nrt.set_create()?;
            sets.push(ins);
            let outs = nrt.set_create()?;
            sets.push(outs);
            let mut in_list = Vec::new();
            let mut out_list = Vec::new();
            for (set, decls, binds, list) in [
                (ins, &spec.inputs, inputs, &mut in_list),
                (outs, &spec.outputs, outputs, &mut out_list),
            ] {
                for d in decls {
                    let t = match binds.iter().find(|(k, _)| *k == d.name) {
                        Some((_, tn)) => self.tensor(tn)?.tensor,
                        None => {
                            let t = nrt.tensor_allocate(
                                Placement::Device,
                                CoreSel::from_c(m.core),
                                d.size,
                                Some(&d.name),
                            )?;
                            created.push(t);
                            t
                        }
                    };
                    nrt.set_add(set, &d.name, t)?;
                    list.push((t, nrt.tensor_get_size(t)?));
                }
            }
            let mut written = 0u64;
            if check {
                for (k, (t, size)) in in_list.iter().enumerate() {
                    let base = pattern_chunk(k as u32 + 1);
                    let mut off = 0u64;
                    while off < *size {
                        let n = (*size - off).min(CHUNK as u64) as usize;
                        nrt.tensor_write(*t, &stamped(&base, off / CHUNK as u64, n), off)?;
                        off += n as u64;
                    }
                    written += size;
                }
            }
            self.rt.execute(m.handle, ins, outs)?;
            if check {
                let mut buf = vec![0u8; CHUNK];
                for (k, (t, size)) in out_list.iter().enumerate() {
                    let in_size = in_list.get(k).map_or(0, |x| x.1);
                    let base = pattern_chunk(k as u32 + 1);
                    let mut off = 0u64;
                    while off < *size {
                        let n = (*size - off).min(CHUNK as u64) as usize;
                        nrt.tensor_read(*t, &mut buf[..n], off)?;
                        let want: Vec<u8> = if off >= in_size {
                            vec![0; n]
                        } else {
                            let mut w = stamped(&base, off / CHUNK as u64, n);
                            let keep = (in_size - off).min(n as u64) as usize;
                            w[keep..].fill(0);
                            w
                        };
                        if let Some(p) = buf[..n].iter().zip(&want).position(|(a, b)| a != b) {
                            let name = spec.outputs.get(k).map_or("?", |d| d.name.as_str());
                            return Err(StepError::Check(format!(
                                "output `{name}` byte {} reads {:#04x}, expected {:#04x}",
                                off + p as u64,
                                buf[p],
                                want[p]
                            )));
                        }
                        off += n as u64;
                    }
                }
            }
            Ok(written)
        })();
        for s in sets {
            let _ = nrt.set_destroy(s);
        }
        for t in created {
            let _ = nrt.tensor_free(t);
        }
        result.map_err(|e| self.note_error(e))
    }

    /// Device bytes of a loaded model's MODEL heaps, per usage (`[22]` = total), and its host
    /// bytes per usage.
    pub fn footprint(&self, h: ModelHandle) -> Result<Footprint, StepError> {
        Ok(total_footprint(&self.subgraph_footprints(h)?))
    }

    /// [`Self::footprint`] of each subgraph's MODEL heap (spec §5.2), in subgraph order.
    pub fn subgraph_footprints(&self, h: ModelHandle) -> Result<Vec<Footprint>, StepError> {
        let subgraphs = self.rt.nrt().model_info(h)?.subgraphs as usize;
        let mut per: Vec<Footprint> = vec![([0; 23], [0; 23]); subgraphs];
        self.rt.nrt().for_each_model_dmem(h, |sg, d| {
            let sg = sg as usize;
            if per.len() <= sg {
                per.resize(sg + 1, ([0; 23], [0; 23]));
            }
            let u = (d.mem_usage_type as usize).min(21);
            let (dev, host) = &mut per[sg];
            let row = if d.mem_type == dma_mem_location_t::HOST_DRAM as u32 {
                host
            } else {
                dev
            };
            row[u] += d.allocated_size;
            row[22] += d.allocated_size;
        })?;
        Ok(per)
    }

    /// Records every logical core's device usage under `name`.
    pub fn snapshot(&mut self, name: &str) {
        let nrt = self.rt.nrt();
        let rows = (0..nrt.visible_vnc_count() as i64)
            .map(|v| {
                nrt.inspector()
                    .vnc_usage(LogicalCore::from_c(v))
                    .map(|u| u.device)
                    .unwrap_or([0; 23])
            })
            .collect();
        self.snapshots.insert(name.to_string(), rows);
    }

    /// Closes the runtime (every model, tensor and shared resource goes back to the driver).
    pub fn close(&mut self) -> Result<(), StepError> {
        self.models.clear();
        self.tensors.clear();
        self.rt.close()?;
        Ok(())
    }

    /// Bytes the driver still holds for this runtime.
    pub fn driver_bytes(&self) -> u64 {
        self.rt.nrt().driver_bytes_in_use()
    }

    /// Checks an expectation's memory figures now; returns what missed.
    pub fn check_figures(&self, x: &Expect) -> Vec<String> {
        let mut out = Vec::new();
        let nrt = self.rt.nrt();
        // Expectations may follow a `close` step: they read what the runtime left.
        let ins = nrt.inspector();
        if let Some(core) = x.core {
            let stats = ins.dmem_get_memory_stats(LogicalCore::from_c(core));
            let usage = ins.vnc_usage(LogicalCore::from_c(core));
            match (stats, usage) {
                (Ok(s), Ok(u)) => {
                    if let Some(why) = x.used.check(s.bytes_used) {
                        out.push(format!("core {core} used bytes {why}"));
                    }
                    if let Some(why) = x.peak.check(s.bytes_peak) {
                        out.push(format!("core {core} peak bytes {why}"));
                    }
                    if let Some((cat, b)) = &x.category {
                        if let Some(why) = b.check(cat.of(&u.device)) {
                            out.push(format!("core {core} {cat} bytes {why}"));
                        }
                    }
                }
                (Err(e), _) | (_, Err(e)) => {
                    if x.used.is_set() || x.peak.is_set() || x.category.is_some() {
                        out.push(format!("core {core}: {e}"));
                    }
                }
            }
            if let Some(snap) = &x.unchanged_since {
                let now = ins.vnc_usage(LogicalCore::from_c(core)).map(|u| u.device);
                match (self.snapshots.get(snap), now) {
                    (None, _) => out.push(format!("no snapshot named `{snap}` was taken")),
                    (Some(rows), Ok(now)) => match rows.get(core as usize) {
                        Some(then) if *then == now => {}
                        Some(then) => {
                            let diffs: Vec<String> = dma_mem_usage_type_t::all()
                                .filter(|u| then[*u as usize] != now[*u as usize])
                                .map(|u| {
                                    format!(
                                        "{} {} → {}",
                                        u.short_name(),
                                        fmt_bytes(then[u as usize]),
                                        fmt_bytes(now[u as usize])
                                    )
                                })
                                .collect();
                            out.push(format!(
                                "core {core} changed since snapshot `{snap}`: {}",
                                diffs.join(", ")
                            ));
                        }
                        None => out.push(format!("core {core} was not in snapshot `{snap}`")),
                    },
                    (Some(_), Err(e)) => out.push(format!("core {core}: {e}")),
                }
            }
            if let Some(n) = x.models_on_core {
                match nrt.models_on(LogicalCore::from_c(core), &mut []) {
                    Ok(have) if have as u64 == n => {}
                    Ok(have) => out.push(format!(
                        "core {core} has {have} models resident, expected {n}"
                    )),
                    Err(e) => out.push(format!("core {core}: {e}")),
                }
            }
        }
        if let Some((name, b)) = &x.model {
            match self.model(name).and_then(|m| self.footprint(m.handle)) {
                Ok((dev, _)) => {
                    if let Some(why) = b.check(dev[22]) {
                        out.push(format!("model `{name}` device footprint {why}"));
                    }
                }
                Err(e) => out.push(format!("model `{name}`: {e}")),
            }
        }
        if let Some(b) = &x.driver_bytes {
            if let Some(why) = b.check(self.driver_bytes()) {
                out.push(format!("driver bytes in use {why}"));
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/// One thing that went wrong in a run.
#[derive(Clone, Debug)]
pub struct Failure {
    /// Step label (`3`, `4.2`), with the iteration for repeated steps.
    pub step: String,
    /// Line in the scenario file.
    pub line: usize,
    /// Why.
    pub reason: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The reason quotes names from the scenario: shown escaped wherever it is printed.
        write!(
            f,
            "step {} (line {}): {}",
            self.step,
            self.line,
            Printable(&self.reason)
        )
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// Operations performed (repeats expanded).
    pub operations: u64,
    /// Expectations checked.
    pub expectations: u64,
    /// What failed.
    pub failures: Vec<Failure>,
    /// Whether the run stopped before the last step (an unexpected failure).
    pub stopped: bool,
    /// OOM tables written.
    pub oom_files: Vec<PathBuf>,
}

impl RunReport {
    /// Whether every expectation held and nothing failed unexpectedly.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// How a run reports as it goes.
pub struct RunOptions<'a> {
    /// Where step lines go (`None` = silent).
    pub out: Option<&'a mut dyn Write>,
    /// Style step results with ANSI colour.
    pub color: bool,
    /// Called after every operation with the count done so far.
    pub progress: Option<&'a mut dyn FnMut(u64)>,
}

struct Runner<'a, 'o> {
    s: &'a mut Session,
    opts: RunOptions<'o>,
    report: RunReport,
}

fn paint(on: bool, style: anstyle::Style, text: &str) -> String {
    if on {
        format!("{}{text}{}", style.render(), style.render_reset())
    } else {
        text.to_string()
    }
}

const GREEN: anstyle::Style =
    anstyle::Style::new().fg_color(Some(anstyle::Color::Ansi(anstyle::AnsiColor::Green)));
const RED: anstyle::Style = anstyle::Style::new()
    .fg_color(Some(anstyle::Color::Ansi(anstyle::AnsiColor::Red)))
    .bold();
const DIM: anstyle::Style = anstyle::Style::new().dimmed();

impl Runner<'_, '_> {
    fn say(&mut self, line: &str) {
        if let Some(o) = self.opts.out.as_mut() {
            let _ = writeln!(o, "{line}");
        }
    }

    fn tick(&mut self) {
        self.report.operations += 1;
        if let Some(p) = self.opts.progress.as_mut() {
            p(self.report.operations);
        }
    }

    fn fail(&mut self, label: &str, line: usize, reason: String) {
        self.report.failures.push(Failure {
            step: label.to_string(),
            line,
            reason,
        });
    }

    /// Runs `steps`; returns false to stop the whole run.
    fn run_steps(
        &mut self,
        steps: &[Step],
        prefix: &str,
        iteration: Option<u64>,
        quiet: bool,
    ) -> bool {
        let mut i = 0;
        while i < steps.len() {
            let step = &steps[i];
            let label = match iteration {
                Some(it) => format!("{prefix}{} (iteration {})", i + 1, it + 1),
                None => format!("{prefix}{}", i + 1),
            };
            let next_expect_status = match steps.get(i + 1).map(|s| &s.action) {
                Some(Action::Expect(x)) if x.status.is_some() || x.message_contains.is_some() => {
                    Some(&**x)
                }
                _ => None,
            };
            if let Action::Repeat { times, steps: body } = &step.action {
                let text = format!("repeat {times} × {} steps", body.len());
                let before = self.report.failures.len();
                for it in 0..*times {
                    if !self.run_steps(body, &format!("{}.", label), Some(it), true) {
                        return false;
                    }
                    if self.report.failures.len() > before {
                        break;
                    }
                }
                let ok = self.report.failures.len() == before;
                self.line(&label, step, &text, ok, None, quiet);
                i += 1;
                continue;
            }
            if let Action::Expect(x) = &step.action {
                // An expect with a status right after a step is consumed with it (below); one
                // here checks figures only — or a status with nothing before it.
                self.tick();
                self.report.expectations += 1;
                let mut why = self.s.check_figures(x);
                if x.status.is_some_and(|s| s != NRT_STATUS::NRT_SUCCESS) {
                    why.insert(
                        0,
                        "expects a failure status, but no step precedes it".into(),
                    );
                }
                let ok = why.is_empty();
                let text = describe_expect(x);
                self.line(&label, step, &text, ok, why.first().cloned(), quiet);
                for w in why {
                    self.fail(&label, step.line, w);
                }
                i += 1;
                continue;
            }
            self.tick();
            let (text, result) = self.perform(&step.action);
            let oom = self.s.last_oom_file.take();
            let mut detail: Option<String> = None;
            if let Some(Ok(p)) = &oom {
                self.report.oom_files.push(p.clone());
            }
            match (result, next_expect_status) {
                (Ok(extra), None) => {
                    self.line(&label, step, &format!("{text}{extra}"), true, None, quiet);
                    i += 1;
                }
                (Err(e), None) => {
                    let reason = format!("{text}: unexpected failure: {e}");
                    detail = Some(e.to_string());
                    self.line(&label, step, &text, false, detail.clone(), quiet);
                    self.print_oom(&oom);
                    self.fail(&label, step.line, reason);
                    return false;
                }
                (r, Some(x)) => {
                    // The next step is this step's status expectation.
                    self.tick();
                    self.report.expectations += 1;
                    let xline = steps[i + 1].line;
                    let xlabel = match iteration {
                        Some(it) => format!("{prefix}{} (iteration {})", i + 2, it + 1),
                        None => format!("{prefix}{}", i + 2),
                    };
                    let got = match &r {
                        Ok(_) => NRT_STATUS::NRT_SUCCESS,
                        Err(e) => match e.status() {
                            Some(s) => s,
                            None => {
                                // A scenario mistake is never an expected status.
                                self.line(&label, step, &text, false, Some(e.to_string()), quiet);
                                self.fail(&label, step.line, format!("{text}: {e}"));
                                return false;
                            }
                        },
                    };
                    let mut why = Vec::new();
                    if let Some(want) = x.status {
                        if want != got {
                            why.push(format!(
                                "status is {} ({}), expected {} ({}){}",
                                got.name(),
                                got as u32,
                                want.name(),
                                want as u32,
                                match &r {
                                    Err(e) => format!(": {e}"),
                                    Ok(_) => String::new(),
                                }
                            ));
                        }
                    }
                    if let Some(want) = &x.message_contains {
                        let msg = r.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
                        if !msg.contains(want.as_str()) {
                            why.push(format!("message {msg:?} does not contain {want:?}"));
                        }
                    }
                    why.extend(self.s.check_figures(x));
                    let shown = match &r {
                        Ok(extra) => format!("{text}{extra}"),
                        Err(e) => format!("{text} → {}", e.status().map_or("?", |s| s.name())),
                    };
                    let ok = why.is_empty();
                    self.line(&label, step, &shown, true, None, quiet);
                    self.print_oom(&oom);
                    self.line(
                        &xlabel,
                        &steps[i + 1],
                        &describe_expect(x),
                        ok,
                        why.first().cloned(),
                        quiet,
                    );
                    for w in why {
                        self.fail(&xlabel, xline, w);
                    }
                    i += 2;
                }
            }
            let _ = detail;
        }
        true
    }

    fn print_oom(&mut self, oom: &Option<Result<PathBuf, String>>) {
        match oom {
            Some(Ok(p)) => {
                let t = format!("         OOM table written to {}", p.display());
                self.say(&t)
            }
            Some(Err(e)) => {
                let t = format!("         could not write the OOM table: {e}");
                self.say(&t)
            }
            None => {}
        }
    }

    fn line(
        &mut self,
        label: &str,
        step: &Step,
        text: &str,
        ok: bool,
        why: Option<String>,
        quiet: bool,
    ) {
        if quiet && ok {
            return;
        }
        let c = self.opts.color;
        let mark = if ok {
            paint(c, GREEN, "ok  ")
        } else {
            paint(c, RED, "FAIL")
        };
        let loc = paint(c, DIM, &format!("line {:>3}", step.line));
        // The text, note and reason carry names from the scenario file: shown escaped.
        let mut l = format!("  {mark} {label:>5}  {loc}  {}", Printable(text));
        if let Some(n) = &step.note {
            let n = format!("# {}", Printable(n));
            let _ = write!(l, "  {}", paint(c, DIM, &n));
        }
        self.say(&l);
        if let Some(w) = why {
            let t = format!("             {}", paint(c, RED, &Printable(&w).to_string()));
            self.say(&t);
        }
    }

    /// Does one action: `(description, Ok(extra text) | Err)`.
    fn perform(&mut self, a: &Action) -> (String, Result<String, StepError>) {
        match a {
            Action::Load {
                path,
                manifest,
                core,
                name,
            } => {
                let file = path.file_name().map_or_else(
                    || path.display().to_string(),
                    |f| f.to_string_lossy().into_owned(),
                );
                let text = format!("load {file} → core {core} as `{name}`");
                let r = self.s.load(manifest, *core, name).and_then(|h| {
                    let (d, _) = self.s.footprint(h)?;
                    Ok(format!(" ({} on device)", fmt_bytes(d[22])))
                });
                (text, r)
            }
            Action::Unload { name } => {
                let text = format!("unload `{name}`");
                let before = self.s.model(name).ok().map(|m| m.core).and_then(|c| {
                    self.s
                        .nrt()
                        .dmem_get_memory_stats(LogicalCore::from_c(c))
                        .ok()
                        .map(|st| (c, st.bytes_used))
                });
                let r = self.s.unload(name).map(|_| match before {
                    Some((c, b)) => {
                        let after = self
                            .s
                            .nrt()
                            .dmem_get_memory_stats(LogicalCore::from_c(c))
                            .map_or(b, |s| s.bytes_used);
                        format!(" (core {c}: {} freed)", fmt_bytes(b.saturating_sub(after)))
                    }
                    None => String::new(),
                });
                (text, r)
            }
            Action::AllocTensor {
                name,
                placement,
                core,
                size,
            } => (
                format!(
                    "alloc_tensor `{name}` {} {} on core {core}",
                    fmt_bytes(*size),
                    format!("{placement:?}").to_lowercase()
                ),
                self.s
                    .alloc_tensor(name, *placement, *core, *size)
                    .map(|_| String::new()),
            ),
            Action::FreeTensor { name } => (
                format!("free_tensor `{name}`"),
                self.s.free_tensor(name).map(|_| String::new()),
            ),
            Action::Execute {
                model,
                inputs,
                outputs,
                check,
            } => {
                let r = self.s.execute(model, inputs, outputs, *check).map(|w| {
                    if *check {
                        format!(": {} in, outputs verified", fmt_bytes(w))
                    } else {
                        String::new()
                    }
                });
                (format!("execute `{model}`"), r)
            }
            Action::ResetPeak { core } => (
                format!("reset_peak core {core}"),
                self.s
                    .nrt()
                    .reset_peak(LogicalCore::from_c(*core))
                    .map(|_| String::new())
                    .map_err(StepError::from),
            ),
            Action::FailNextAlloc { nth } => {
                let text =
                    format!("fail_next_alloc (allocation #{nth} from now fails with ENOMEM)");
                let r = match self.s.runtime().sim() {
                    Some(sim) => {
                        sim.fail_nth_alloc(*nth);
                        Ok(String::new())
                    }
                    None => Err(StepError::Usage(
                        "fail_next_alloc needs the simulated device (device = \"sim:…\")".into(),
                    )),
                };
                (text, r)
            }
            Action::Close => {
                let r = self
                    .s
                    .close()
                    .map(|_| format!(": driver holds {}", fmt_bytes(self.s.driver_bytes())));
                ("close".into(), r)
            }
            Action::Snapshot { name } => {
                self.s.snapshot(name);
                (format!("snapshot `{name}`"), Ok(String::new()))
            }
            Action::Expect(_) | Action::Repeat { .. } => (String::new(), Ok(String::new())),
        }
    }
}

fn describe_expect(x: &Expect) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(s) = x.status {
        parts.push(format!("status {}", s.name()));
    }
    if let Some(m) = &x.message_contains {
        parts.push(format!("message contains {m:?}"));
    }
    let b = |name: &str, b: &Bound, parts: &mut Vec<String>| {
        if let Some(v) = b.exact {
            parts.push(format!("{name} = {}", fmt_bytes(v)));
        }
        if let Some(v) = b.at_most {
            parts.push(format!("{name} ≤ {}", fmt_bytes(v)));
        }
        if let Some(v) = b.at_least {
            parts.push(format!("{name} ≥ {}", fmt_bytes(v)));
        }
    };
    if let Some(c) = x.core {
        b(&format!("core {c} used"), &x.used, &mut parts);
        b(&format!("core {c} peak"), &x.peak, &mut parts);
        if let Some((cat, bd)) = &x.category {
            b(&format!("core {c} {cat}"), bd, &mut parts);
        }
        if let Some(n) = x.models_on_core {
            parts.push(format!("core {c} models = {n}"));
        }
        if let Some(snap) = &x.unchanged_since {
            parts.push(format!("core {c} unchanged since `{snap}`"));
        }
    }
    if let Some((m, bd)) = &x.model {
        b(&format!("`{m}` footprint"), bd, &mut parts);
    }
    if let Some(bd) = &x.driver_bytes {
        b("driver bytes", bd, &mut parts);
    }
    format!("expect {}", parts.join(", "))
}

/// Runs a scenario's steps on `session`. Failed expectations are collected and the run goes
/// on; a step that fails without an `expect.status` right after it stops the run.
pub fn run(scenario: &Scenario, session: &mut Session, opts: RunOptions<'_>) -> RunReport {
    let mut r = Runner {
        s: session,
        opts,
        report: RunReport::default(),
    };
    let done = r.run_steps(&scenario.steps, "", None, false);
    r.report.stopped = !done;
    r.report
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

    #[test]
    fn categories_parse() {
        assert_eq!(
            Category::parse("tensors"),
            Ok(Category::Class(MonitorClass::Tensors))
        );
        assert_eq!(
            Category::parse("DMA_RING"),
            Ok(Category::Usage(
                dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_DMA_RING
            ))
        );
        assert_eq!(
            Category::parse("dma_mem_usage_type_tensor"),
            Ok(Category::Usage(
                dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR
            ))
        );
        // Numbers changed meaning with the renumbering: refused, naming what the number is now.
        let e = Category::parse("3").unwrap_err();
        assert!(e.contains("3 is INSTR_POOL now"), "{e}");
        assert_eq!(Category::parse("total"), Ok(Category::Total));
        assert!(Category::parse("nonsense").is_err());
        // An old project name is refused with its replacement, never taken as an alias.
        let e = Category::parse("SHARED_SCRATCHPAD").unwrap_err();
        assert!(e.contains("use SCRATCHPAD"), "{e}");
    }

    fn parse_err(text: &str) -> ScenarioError {
        Scenario::parse(Path::new("t.toml"), text).unwrap_err()
    }

    #[test]
    fn errors_name_line_and_field() {
        let e = parse_err(
            "device = \"sim:trn2\"\n[[step]]\nalloc_tensor = \"a\"\nsize = \"12 parsecs\"\n",
        );
        assert_eq!((e.line, e.field.as_deref()), (4, Some("size")), "{e}");
        let e = parse_err("[[step]]\nalloc_tensor = \"a\"\ncore = \"x\"\nsize = 1\n");
        assert_eq!((e.line, e.field.as_deref()), (3, Some("core")), "{e}");
        let e = parse_err("[[step]]\nalloc_tensor = \"a\"\nbogus = 1\n");
        assert_eq!(e.line, 3, "{e}");
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = parse_err("[[step]]\nunload = \"a\"\nfree_tensor = \"b\"\n");
        assert!(e.message.contains("2 actions"), "{e}");
        let e = parse_err("device = \"gpu\"\n[[step]]\nclose = true\n");
        assert_eq!((e.line, e.field.as_deref()), (1, Some("device")), "{e}");
        let e = parse_err("[[step]]\nexpect.used_at_most = \"1 GiB\"\n");
        assert_eq!(e.field.as_deref(), Some("expect.core"), "{e}");
        let e = parse_err("[[step]]\nexpect.status = \"NRT_NOPE\"\n");
        assert_eq!(
            (e.line, e.field.as_deref()),
            (2, Some("expect.status")),
            "{e}"
        );
        let e = parse_err("[[step]]\nunload = \"a\"\ncore = 1\n");
        assert_eq!((e.line, e.field.as_deref()), (3, Some("core")), "{e}");
        let e = parse_err("[[step]\n");
        assert_eq!(e.line, 1, "{e}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for text in [
            "",
            "\u{feff}",
            "ünïcödé = \"é\"\n[[step]]\nclose = \"ja\"\n",
            "[[step]]\nalloc_tensor = \"é\"\nsize = \"½ GiB\"\n",
            "[[step]]\nrepeat = 3\n",
            "[[step]]\nexpect = 3\n",
            "[[step]]\nfail_next_alloc = 0\n",
            "[[step]]\nexpect.status = -1\n",
            "[[step]]\nload = \"/nonexistent/ü.json\"\n",
            "visible_cores = \"5-2\"\n[[step]]\nclose = true\n",
            "[[step]]\nalloc_tensor = \"\"\nsize = 1\n",
        ] {
            let e = Scenario::parse(Path::new("g.toml"), text).unwrap_err();
            assert!(!e.message.is_empty(), "{text:?}");
        }
    }

    #[test]
    fn repeat_bodies_and_counts() {
        let s = Scenario::parse(
            Path::new("t.toml"),
            "[[step]]\nrepeat = 30\n[[step.do]]\nalloc_tensor = \"x\"\nsize = \"1 MiB\"\n[[step.do]]\nfree_tensor = \"x\"\n[[step]]\nexpect.driver_bytes = 0\n",
        )
        .unwrap();
        assert_eq!(s.total_operations(), 61);
        assert!(s.has_repeat());
        assert_eq!(s.steps[1].line, 8);
    }
}
