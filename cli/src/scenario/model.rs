//! The validated scenario: its settings and steps (what [`super::schema`] produces from a file
//! and [`super::runner`] carries out).

use std::path::PathBuf;
use std::rc::Rc;

use nrt_core::abi::NRT_STATUS;
use nrt_core::tensor::Placement;

use nrt_host::config::{DeviceChoice, Overrides};
use nrt_host::manifest::Manifest;

use super::category::Category;
use super::schema::ScenarioError;
use super::units::fmt_bytes;

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
    pub(super) fn is_set(&self) -> bool {
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
    pub(super) setting_at: Vec<SettingAt>,
}

/// A core-count setting's place in the file: an error template without its message.
#[derive(Clone, Debug)]
pub(super) struct SettingAt {
    pub(super) key: &'static str,
    pub(super) line: usize,
    pub(super) column: usize,
    pub(super) source_line: Option<String>,
}

impl Scenario {
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
