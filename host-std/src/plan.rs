//! Will it fit? [`plan`]: a dry run of the real load path on a scratch
//! simulated device of the requested kind — never a real device.
//!
//! The models load in order through [`ModelFile::load_without_weights`] (`nrt_load`'s load of
//! the footprint, the weights not written: a scratch device's contents are never read),
//! each onto its `model@core` placement or, by default, libnrt's `vnc = -1` rule (the first
//! visible logical core with no model, else the one with the fewest, lowest index on a tie).
//! With IO tensors asked for, each model's inputs and outputs are then allocated as DEVICE
//! tensors on its core, as the documented application flow does (`ffi/examples/doc_flow.c`).
//! The scratch runtime takes [`PlanRequest::runtime`] (what `nrt_init` would read from the
//! environment) with the request's device and logical-core settings on top.
//!
//! A step is all-or-nothing: a model whose load or tensors fail for want of room leaves the
//! device as it was (the core rolls the load back; the plan frees the tensors it made and
//! unloads the model), and the plan goes on with the next model, as an application that skips
//! a model would. A model the runtime refuses for another reason is [`PlanError::Refused`].
//!
//! The plan is exact for everything the simulated device models (placement: docs/PLACEMENT.md)
//! because it *is* that device's run. Every model says what it needs by usage type. A model
//! refused for want of device memory names the channel and gets a [`Verdict`] — full,
//! fragmented, hopeless — from what it needs on the channel against the channel's free bytes
//! and blocks, never from which of its allocations happened to fail. For the first device OOM
//! the plan also says how many bytes were missing (the failing request against the largest
//! block that would have held a request like it at the moment of the failure,
//! [`Ledger::last_oom_channel`](nrt_core::Ledger::last_oom_channel)) and which changes make the model fit, each tried on a fresh
//! scratch device: another logical core, another LNC size, leaving out models resident on its
//! core.
#![deny(unsafe_code)]

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nrt_core::abi::{dma_mem_location_t, dma_mem_usage_type_t};
use nrt_core::driver::PoolStats;
use nrt_core::oom::{FailingChannel, OomCause};
use nrt_core::sim::SimDevice;
use nrt_core::tensor::Placement;
use nrt_core::ModelHandle;
use nrt_core::{CoreSel, LogicalCore, Nrt, TensorHandle};
use nrt_neff::ReadOptions;
use serde::Serialize;

use crate::config::{ConfigError, DeviceChoice, Overrides, RuntimeConfig};
use crate::model_file::{first_free_core, LoadError, ModelFile};
use crate::runtime::{HostRuntime, StartError};
use crate::HostSim;

mod figures;
mod verdict;
mod whatif;

use figures::{core_plan, hbm_plan, oom_figures};
use verdict::{channel_refusal, needs, shared_pieces, stages_gpsimd, Measure, Measurer};
use whatif::what_ifs;

/// Where a model comes from.
#[derive(Clone, Debug)]
pub enum ModelSource {
    /// A file on disk (NEFF or manifest); its path is its label.
    Path(PathBuf),
    /// Bytes already read (NEFF or manifest), with a label for messages and placements.
    Bytes {
        /// What to call it.
        label: String,
        /// The file's bytes.
        bytes: Vec<u8>,
    },
}

impl ModelSource {
    fn label(&self) -> String {
        match self {
            ModelSource::Path(p) => p.display().to_string(),
            ModelSource::Bytes { label, .. } => label.clone(),
        }
    }
}

/// One model of a plan.
#[derive(Clone, Debug)]
pub struct PlanModel {
    /// The file.
    pub source: ModelSource,
    /// Also allocate the model's IO tensors (inputs and outputs) as DEVICE tensors on its core.
    pub tensors: bool,
}

/// What to plan.
#[derive(Clone, Debug)]
pub struct PlanRequest {
    /// The models, in load order.
    pub models: Vec<PlanModel>,
    /// The device: `sim:trn2`, `sim:trn1x2`, … (`NRT_DMEM_DEVICE`'s syntax; `neuron` is
    /// refused: a plan never allocates on a real device; a shared device, `sim:trn2@NAME`, is
    /// planned on a snapshot of it, `shared::snapshot_pools`).
    pub device: String,
    /// LNC size (`NEURON_RT_VIRTUAL_CORE_SIZE`); `None` = `runtime`'s.
    pub lnc_size: Option<u32>,
    /// Visible logical cores `(first, count)` (`NEURON_RT_VISIBLE_CORES`); `None` = `runtime`'s.
    pub visible_cores: Option<(u32, u32)>,
    /// The first N logical cores, 0 = all (`NEURON_RT_NUM_CORES`); `None` = `runtime`'s.
    pub num_cores: Option<u32>,
    /// Every other setting the runtime takes — arena capacities (`NRT_DMEM_MAX_MODELS`, …),
    /// the simulated channel size, the scratchpad page size, the contiguous scratchpad — so
    /// that the plan runs under the configuration the real load would:
    /// [`RuntimeConfig::from_env`] is what `nrt_init` uses. Its device is replaced by
    /// `device`, and its logical-core settings by the three fields above where they are set.
    pub runtime: RuntimeConfig,
    /// `MODEL@CORE` placements: MODEL is a model's label (its path as given), file name or
    /// model name; every model it names goes to logical core CORE (an index into the visible
    /// cores, as `nrt_load`'s `vnc`).
    pub placements: Vec<(String, i64)>,
    /// Models whose IO tensors are also allocated (as with [`PlanModel::tensors`]), named as
    /// in `placements`: label, file name or model name.
    pub tensors_for: Vec<String>,
    /// How NEFFs are read (`allow_legacy_neff`).
    pub read_options: ReadOptions,
    /// Look for what would make the first failing model fit (extra scratch runs).
    pub what_ifs: bool,
}

impl Default for PlanRequest {
    fn default() -> Self {
        PlanRequest {
            models: Vec::new(),
            device: "sim:trn2".into(),
            lnc_size: None,
            visible_cores: None,
            num_cores: None,
            runtime: RuntimeConfig::default(),
            placements: Vec::new(),
            tensors_for: Vec::new(),
            read_options: ReadOptions::default(),
            what_ifs: true,
        }
    }
}

/// Why no plan could be made (bad input; a model that does not fit is a plan, not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The device string is not a device (the runtime's message).
    #[error(transparent)]
    Device(#[from] ConfigError),
    /// `neuron`: a plan never allocates on a real device.
    #[error("plans run on a simulated device only (sim:inf2|trn1|trn2|trn3[xN]), not on `neuron`")]
    RealDevice,
    /// A shared device by name (`sim:trn2@prod`) that could not be read, or that a process
    /// of the plan's configuration would not be admitted to: a core another live process
    /// holds, another geometry than its live processes', 16 processes (the join's own
    /// message, docs/SHARED_DEVICE.md).
    #[error("{0}")]
    SharedDevice(String),
    /// The runtime refused the configuration (LNC size, visible cores: the runtime's message).
    #[error("{0}")]
    Config(String),
    /// A model file could not be read or was refused: the file, the header gate that refused
    /// it (neff-format §3) when one did, and the public status.
    #[error("{file}: {}", refusal(.error))]
    Model {
        /// The file's label.
        file: String,
        /// Why.
        error: LoadError,
    },
    /// The runtime refused a model for a reason other than space — a logical core it may not
    /// use, a NEFF its load-time gates refuse — with the runtime's message. A plan answers
    /// whether models fit; a model the runtime would never load is bad input, not a fit.
    #[error("{file}: refused on logical core {core}: {error}")]
    Refused {
        /// The model's label.
        file: String,
        /// The logical core it was loaded on.
        core: i64,
        /// The runtime's message.
        error: String,
    },
    /// A `MODEL@CORE` placement names no model of the plan.
    #[error(
        "placement `{0}@…` names no model of the plan (give its path, file name or model name)"
    )]
    UnknownPlacement(String),
    /// A `tensors_for` key names no model of the plan.
    #[error("`{0}` names no model of the plan (give its path, file name or model name)")]
    UnknownModel(String),
    /// No models.
    #[error("nothing to plan: give at least one model file")]
    NoModels,
}

/// A model file's refusal as the plan names it: the reader's message with the gate that
/// refused it and the status the runtime's `nrt_load` would return (as `neff inspect` shows).
fn refusal(e: &LoadError) -> String {
    let status = e.status();
    match e {
        LoadError::Neff(n) => match n.gate() {
            Some(g) => format!(
                "NEFF refused by the {g} gate ({status:?}, {}): {}",
                status as u32,
                n.message()
            ),
            None => format!(
                "NEFF refused ({status:?}, {}): {}",
                status as u32,
                n.message()
            ),
        },
        e => format!("{e} ({status:?}, {})", status as u32),
    }
}

/// Device bytes per usage type (libnrt's names, `DMA_MEM_USAGE_TYPE_` dropped), non-zero only.
pub type UsageBytes = Vec<(String, u64)>;

/// What happened to one model.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ModelPlan {
    /// Its label (path as given).
    pub file: String,
    /// Its model name.
    pub name: String,
    /// Logical core it was (or would have been) loaded on.
    pub core: i64,
    /// Whether it fits (loaded, and its tensors allocated when asked for).
    pub fits: bool,
    /// Device bytes it holds: its MODEL heaps' dmems plus `tensor_bytes`; 0 when it does not
    /// fit (what it asks for is `needed`).
    pub device_bytes: u64,
    /// Bytes its IO tensors asked for (`tensor_allocate`'s sizes; the driver rounds each up to
    /// its page, which the HBM figures show).
    pub tensor_bytes: u64,
    /// Device bytes it asks for by usage type, from its spec whether or not it fits (before
    /// page rounding): its allocations over all subgraphs, its scratchpad (`SCRATCHPAD`: pages
    /// its core's models share), its GPSIMD libraries where the device stages them
    /// (`UCODE_LIB`) and, when asked for, its IO tensors (`TENSOR`).
    pub needed: UsageBytes,
    /// The sum of `needed`.
    pub needed_bytes: u64,
    /// Why it does not fit.
    pub error: Option<String>,
    /// For a device OOM: the channel that refused it and the verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Refusal>,
}

/// Why an HBM channel refused a model, decided from what the model needs on the channel and
/// the channel's free bytes and blocks, both as they were before its load (the load rolls
/// back, so they are the channel's figures after it): not from the order in which the file
/// lists its allocations, so a NEFF and the manifest it was packed from get one verdict.
#[derive(Copy, Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Fewer bytes free on the channel than the model needs there: something must leave it.
    Full,
    /// Enough bytes free on the channel in total, but not in blocks that hold the model's
    /// allocations (or none at an allocation's alignment): a load order or placement that
    /// leaves larger blocks, or fewer models, would let it fit.
    Fragmented,
    /// The model does not fit on its core of an empty device: nothing on this channel makes
    /// it fit.
    Hopeless,
    /// The channel has the bytes and a free block holding the refused request: the driver
    /// refused for another reason (its allocation metadata, an injected fault).
    DriverRefused,
}

/// The allocation an HBM channel refused.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RefusedRequest {
    /// Its usage type.
    pub usage: String,
    /// Bytes (page-rounded), in the request's own terms.
    pub size: u64,
    /// Alignment asked for (0 = the page).
    pub align: u64,
    /// The runtime emulated the alignment (spec §3.2): the driver was asked for
    /// `size + align` bytes.
    pub emulated: bool,
}

/// The channel that refused a model and the verdict ([`Verdict`]).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Refusal {
    /// Device.
    pub device: u32,
    /// HBM channel: the channel of the allocation that failed.
    pub hbm: u32,
    /// The allocation that failed (which one depends on the file's order; the verdict does
    /// not).
    pub request: RefusedRequest,
    /// Bytes the model takes on this channel as the driver holds them (page-rounded, with the
    /// bytes an emulated alignment adds), the scratchpad pages and shared GPSIMD library its
    /// core already had not counted: measured by loading it alone on its core of a fresh
    /// private device of the plan's geometry. `None` when that could not be measured.
    pub needed: Option<u64>,
    /// Bytes free on the channel before the load (every process's allocations taken).
    pub free: u64,
    /// The channel's largest free block before the load (the largest request above 512 KiB
    /// that would succeed).
    pub largest_free: u64,
    /// For a request aligned above the page: the largest request at its alignment the channel
    /// would have granted before the load, in the request's terms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_free_at_align: Option<u64>,
    /// Bytes free on this channel of an empty device.
    pub empty_free: u64,
    /// Full, fragmented, hopeless or refused by the driver.
    pub verdict: Verdict,
    /// The verdict as one English line (`nd0 HBM 0 is full: 1.07 GiB free, 2.40 GiB needed
    /// there`).
    pub summary: String,
}

/// A model that did not fit although its channel had the bytes ([`Verdict::Fragmented`]).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Fragmentation {
    /// Index of the model in the request.
    pub model: usize,
    /// Its label.
    pub file: String,
    /// The channel's figures and the verdict.
    #[serde(flatten)]
    pub refusal: Refusal,
}

/// One logical core after placement.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct CorePlan {
    /// Logical index.
    pub index: i64,
    /// Its physical cores, `nd<D>:nc<C>`.
    pub physical: Vec<String>,
    /// Models on it.
    pub models: usize,
    /// Device bytes used (`dmem_get_memory_stats`).
    pub used: u64,
    /// HBM attributed to it: the size of each HBM channel its physical cores draw from
    /// (`dmem_get_memory_stats`' `bytes_limit`).
    pub limit: u64,
    /// What it can still allocate: `limit - used` (0 when over), capped by the free bytes of
    /// the HBM channels it draws from (each physical core's channel,
    /// `DevGeom::default_hbm`, public ABI §3 "HBM ↔ core"; [`HbmPlan::free`]). A channel's
    /// free bytes are shared by every logical core (and, on a shared device, every process)
    /// drawing from it, so the headrooms of cores on one channel do not add up.
    pub headroom: u64,
    /// Device bytes by usage.
    pub usage: UsageBytes,
}

/// One block of an HBM channel, address-ordered: what the SVG draws.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Block {
    /// Offset in the channel.
    pub offset: u64,
    /// The model of the plan it belongs to (its index in [`Plan::models`]: its MODEL heaps,
    /// its IO tensors); none for what the runtime holds per core (scratchpad pages, the shared
    /// GPSIMD library, …) and for other processes' blocks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<usize>,
    /// Bytes (page-rounded, as the driver holds them).
    pub size: u64,
    /// Usage type; on a shared device, another process's block is `other processes: ` and
    /// its driver category as the shared file records it (`tensors`, `model_code`, …,
    /// `shared::layout::category_name`).
    pub usage: String,
    /// In the small-object region.
    pub small_object: bool,
    /// On a shared device: the pid of the other process holding the block (none for the
    /// plan's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_pid: Option<u32>,
}

/// One HBM channel after placement.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct HbmPlan {
    /// Device.
    pub device: u32,
    /// Channel.
    pub hbm: u32,
    /// Bytes the channel has.
    pub channel_size: u64,
    /// Bytes the pool manages (small-object region included).
    pub capacity: u64,
    /// Bytes in use: those booked to it in the plan's ledger (`memory_usage[hbm]`), plus, on
    /// a shared device, the page-rounded blocks other processes hold on it. `used + free` is
    /// `capacity` but for the page rounding of the plan's own requests.
    pub used: u64,
    /// Bytes free: the headroom (every process's allocations taken).
    pub free: u64,
    /// The largest free block (the largest request above 512 KiB that would succeed).
    pub largest_free: u64,
    /// Bytes free in the small-object region.
    pub small_object_free: u64,
    /// The small-object region's largest free block.
    pub small_object_largest_free: u64,
    /// Device bytes by usage (from the live allocations, other processes' included).
    pub usage: UsageBytes,
    /// The live allocations, address-ordered (other processes' included).
    pub blocks: Vec<Block>,
}

/// The first model that does not fit, and why.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Failure {
    /// Index of the model in the request.
    pub model: usize,
    /// Its label.
    pub file: String,
    /// Logical core.
    pub core: i64,
    /// The error.
    pub error: String,
    /// For a device OOM: the figures at the moment of the failure.
    pub oom: Option<OomFigures>,
    /// What would make it fit (tried on fresh scratch devices).
    pub what_ifs: Vec<WhatIf>,
}

/// A device OOM's figures at the moment of the failure, in the failing request's terms (the
/// model's earlier allocations still held: they depend on the order of its allocations; the
/// verdict does not, [`ModelPlan::refusal`]).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct OomFigures {
    /// Device.
    pub device: u32,
    /// HBM channel.
    pub hbm: u32,
    /// Usage type of the failing request.
    pub usage: String,
    /// Bytes the request needed (page-rounded), in its own terms: without the alignment an
    /// emulated alignment adds (the "why" line gives the driver's figure).
    pub requested: u64,
    /// The largest request like it that would have succeeded.
    pub largest_block: u64,
    /// Bytes missing: `requested - largest_block`.
    pub missing: u64,
    /// Bytes free on the channel then.
    pub channel_free: u64,
    /// The request (with the bytes an emulated alignment adds) is larger than anything the
    /// channel holds even when empty (its main pool, after the firmware carve-out; the
    /// small-object region is smaller): nothing makes it fit.
    pub larger_than_channel: bool,
    /// The OOM report's "why" line.
    pub why: String,
}

/// One alternative tried for the first failure.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct WhatIf {
    /// What was changed.
    pub change: String,
    /// Whether the failing model (and every model before it) then fits.
    pub fits: bool,
    /// Why not, when it does not.
    pub detail: Option<String>,
}

/// A plan.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Plan {
    /// The device (`sim:trn2`).
    pub device: String,
    /// LNC size in force.
    pub lnc_size: u32,
    /// Each model, in load order.
    pub models: Vec<ModelPlan>,
    /// Each visible logical core.
    pub cores: Vec<CorePlan>,
    /// Each HBM channel.
    pub hbm: Vec<HbmPlan>,
    /// The first model that does not fit.
    pub first_failure: Option<Failure>,
    /// Every model that did not fit although its channel had enough free bytes in total, but
    /// not in blocks (or at alignments) that hold its allocations.
    pub fragmentation: Vec<Fragmentation>,
    /// Planned against a shared device: the note saying it was a snapshot, and of what.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

impl Plan {
    /// Whether every model fits.
    pub fn all_fit(&self) -> bool {
        self.models.iter().all(|m| m.fits)
    }
}

/// A parsed model of the request. Models given by the same source share one parse.
struct Parsed {
    label: String,
    file: Rc<ModelFile>,
    tensors: bool,
}

/// The request's model files, each distinct source read and parsed once (the what-if replays
/// load the models again). A NEFF is read as a stream and holds no weight bytes: the plan's
/// loads check where each weight would go but copy nothing.
#[derive(Default)]
struct Parses<'r> {
    by_path: HashMap<PathBuf, Rc<ModelFile>>,
    /// Byte sources by length and hash; a hit is confirmed byte for byte.
    by_bytes: HashMap<(usize, u64), Vec<ParsedBytes<'r>>>,
}

/// A byte source and its parse.
type ParsedBytes<'r> = (&'r [u8], Rc<ModelFile>);

impl<'r> Parses<'r> {
    fn get(
        &mut self,
        source: &'r ModelSource,
        opts: &ReadOptions,
    ) -> Result<Rc<ModelFile>, LoadError> {
        match source {
            ModelSource::Path(p) => {
                let key = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
                if let Some(f) = self.by_path.get(&key) {
                    return Ok(Rc::clone(f));
                }
                let f = Rc::new(ModelFile::from_path(p, opts)?);
                self.by_path.insert(key, Rc::clone(&f));
                Ok(f)
            }
            ModelSource::Bytes { bytes, .. } => {
                let mut h = DefaultHasher::new();
                bytes.hash(&mut h);
                let seen = self.by_bytes.entry((bytes.len(), h.finish())).or_default();
                if let Some((_, f)) = seen.iter().find(|(b, _)| *b == bytes.as_slice()) {
                    return Ok(Rc::clone(f));
                }
                let f = Rc::new(ModelFile::parse(bytes, opts)?);
                seen.push((bytes.as_slice(), Rc::clone(&f)));
                Ok(f)
            }
        }
    }
}

/// A model of the plan that fits: its index, logical core, handle and IO tensors.
struct Owned {
    model: usize,
    core: i64,
    handle: ModelHandle,
    tensors: Vec<TensorHandle>,
}

/// A device OOM and its failing channel's figures at the moment of the failure.
type OomAt = (nrt_core::Error, Option<FailingChannel>);

/// The plan's first failure as the loop records it: the model's index, its core, the error,
/// the OOM and the model's measure.
type FirstFailure = (usize, i64, String, Option<OomAt>, Option<Measure>);

/// What one step did on a scratch device.
enum Step {
    Fit {
        handle: ModelHandle,
        tensors: Vec<TensorHandle>,
        tensor_bytes: u64,
    },
    Failed {
        error: String,
        oom: Option<OomAt>,
        /// Refused for a reason other than space ([`out_of_space`] says no).
        refused: bool,
    },
}

/// Whether the runtime's error `e` means "no room" (`NRT_RESOURCE`: device memory, an arena,
/// the driver's ENOMEM; `NRT_FAIL_HOST_MEM_ALLOC`): the failures a plan reports as "does not
/// fit". Every other error is a refusal.
fn out_of_space(e: &nrt_core::Error) -> bool {
    use nrt_core::abi::NRT_STATUS;
    matches!(
        e.status(),
        NRT_STATUS::NRT_RESOURCE | NRT_STATUS::NRT_FAIL_HOST_MEM_ALLOC
    )
}

/// A scratch device with the steps run on it.
struct Scratch {
    rt: HostRuntime,
}

/// The models `key` names: by label (path as given), file name or stem, or model name.
fn named(parsed: &[Parsed], key: &str) -> Vec<usize> {
    (0..parsed.len())
        .filter(|&i| {
            let p = &parsed[i];
            p.label == key || p.file.name() == key || is_file_name(&p.label, key)
        })
        .collect()
}

fn is_file_name(label: &str, key: &str) -> bool {
    Path::new(label).file_name().is_some_and(|f| f == key)
        || Path::new(label).file_stem().is_some_and(|f| f == key)
}

/// Parses the plan's device string: a simulated device only.
pub fn parse_plan_device(s: &str) -> Result<DeviceChoice, PlanError> {
    let t = s.trim();
    match DeviceChoice::parse(t)? {
        DeviceChoice::Neuron => Err(PlanError::RealDevice),
        d => Ok(d),
    }
}

/// A scratch runtime for `cfg`: on a fresh simulated device, or on a private copy of `base`
/// (the snapshot of a shared device the plan runs against).
fn start(cfg: RuntimeConfig, base: Option<&SimDevice>) -> Result<Scratch, PlanError> {
    let rt = match base {
        Some(b) => HostSim::from_snapshot(b)
            .map_err(|e| StartError::Build(e.into()))
            .and_then(|sim| HostRuntime::start_on(cfg, sim)),
        None => HostRuntime::start(cfg),
    };
    rt.map(|rt| Scratch { rt }).map_err(|e| match e {
        StartError::Init(e) => PlanError::Config(e.to_string()),
        e => PlanError::Config(e.to_string()),
    })
}

impl Scratch {
    /// Loads `p` on `core` (with its tensors): all-or-nothing.
    fn step(&self, p: &Parsed, core: i64, allow_legacy: bool) -> Step {
        let nrt = self.rt.nrt();
        let failed = |e: &nrt_core::Error, error: String| Step::Failed {
            error,
            oom: matches!(e, nrt_core::Error::DeviceOom { .. })
                .then(|| (*e, nrt.ledger().last_oom_channel())),
            refused: !out_of_space(e),
        };
        // The scratch device's contents are never read: the weights are checked, not copied.
        let at = LogicalCore::from_c(core);
        let handle = match p.file.load_without_weights(&nrt, at, allow_legacy) {
            Ok(h) => h,
            Err(LoadError::Core(e)) => return failed(&e, LoadError::Core(e).to_string()),
            Err(e) => {
                return Step::Failed {
                    error: e.to_string(),
                    oom: None,
                    refused: true,
                }
            }
        };
        let mut tensors = Vec::new();
        let mut tensor_bytes = 0;
        if p.tensors {
            for t in p.file.tensor_info() {
                match nrt.tensors().allocate(
                    Placement::Device,
                    CoreSel::from_c(core),
                    t.size,
                    Some(&t.name),
                ) {
                    Ok(h) => {
                        tensors.push(h);
                        tensor_bytes += t.size;
                    }
                    Err(e) => {
                        let r = failed(&e, format!("tensor {}: {e}", t.name));
                        self.undo(handle, &tensors);
                        return r;
                    }
                }
            }
        }
        Step::Fit {
            handle,
            tensors,
            tensor_bytes,
        }
    }

    fn undo(&self, handle: ModelHandle, tensors: &[TensorHandle]) {
        let nrt = self.rt.nrt();
        for t in tensors {
            if let Err(e) = nrt.tensors().free(*t) {
                log::warn!(target: "nrt_dmem::plan", "freeing a scratch tensor: {e}");
            }
        }
        if let Err(e) = nrt.models().unload(handle) {
            log::warn!(target: "nrt_dmem::plan", "unloading a scratch model: {e}");
        }
    }
}

fn usage_name(u: u32) -> String {
    dma_mem_usage_type_t::from_raw(u)
        .map_or_else(|| format!("usage {u}"), |u| u.short_name().to_string())
}

fn usage_list(dev: &[u64; 23]) -> UsageBytes {
    (0..22u32)
        .filter(|&u| dev[u as usize] != 0)
        .map(|u| (usage_name(u), dev[u as usize]))
        .collect()
}

/// The plan of `req`. Bad input is an error; models that do not fit are in the plan.
pub fn plan(req: &PlanRequest) -> Result<Plan, PlanError> {
    let device = parse_plan_device(&req.device)?;
    if req.models.is_empty() {
        return Err(PlanError::NoModels);
    }
    let mut parsed = Vec::with_capacity(req.models.len());
    let mut parses = Parses::default();
    for m in &req.models {
        let label = m.source.label();
        let file = parses
            .get(&m.source, &req.read_options)
            .map_err(|error| PlanError::Model {
                file: label.clone(),
                error,
            })?;
        parsed.push(Parsed {
            label,
            file,
            tensors: m.tensors,
        });
    }
    let mut placed: Vec<Option<i64>> = vec![None; parsed.len()];
    for (key, core) in &req.placements {
        let hits = named(&parsed, key);
        if hits.is_empty() {
            return Err(PlanError::UnknownPlacement(key.clone()));
        }
        for i in hits {
            placed[i] = Some(*core);
        }
    }
    for key in &req.tensors_for {
        let hits = named(&parsed, key);
        if hits.is_empty() {
            return Err(PlanError::UnknownModel(key.clone()));
        }
        for i in hits {
            parsed[i].tensors = true;
        }
    }
    let mut cfg = req.runtime;
    cfg.apply(&Overrides {
        device: Some(device),
        lnc_size: req.lnc_size,
        visible_cores: req.visible_cores,
        num_cores: req.num_cores,
    });
    let allow_legacy = req.read_options.allow_legacy_neff;
    // A shared device: plan on the device a process of `cfg` joining it now would find, a
    // copy of its pools taken under its lock with the join's own checks (docs/PLAN.md).
    let shared = match device {
        DeviceChoice::Shared {
            preset,
            devices,
            placement,
            name,
        } => {
            let join = crate::shared::JoinRequest::for_runtime(preset, devices, placement, &cfg);
            let snap = crate::shared::snapshot_pools(&name, &join)
                .map_err(|e| PlanError::SharedDevice(e.to_string()))?;
            Some(snap)
        }
        _ => None,
    };
    let snapshot = shared.as_ref().map(snapshot_note);
    let base = shared.as_ref().map(|s| &*s.pools);
    let resident = shared.as_ref().map_or(&[][..], |s| &s.resident[..]);
    let s = start(cfg, base)?;
    let nrt = s.rt.nrt();

    let mut models = Vec::with_capacity(parsed.len());
    let mut landed: Vec<Option<i64>> = Vec::with_capacity(parsed.len());
    let mut owned = Vec::new();
    let mut first: Option<FirstFailure> = None;
    let mut frag = Vec::new();
    let mut measurer = Measurer::new(&cfg, allow_legacy);
    let sunda = stages_gpsimd(&nrt, 0);
    for (i, p) in parsed.iter().enumerate() {
        let core = placed[i].unwrap_or_else(|| first_free_core(&nrt));
        let needed = needs(p, sunda);
        let needed_bytes = needed.iter().fold(0u64, |a, (_, b)| a.saturating_add(*b));
        match s.step(p, core, allow_legacy) {
            Step::Fit {
                handle,
                tensors,
                tensor_bytes,
            } => {
                let mut b = 0;
                let _ = nrt.models().for_each_dmem(handle, |_, e| {
                    let d = &e.info;
                    if d.mem_type == dma_mem_location_t::TONGA_DRAM as u32 {
                        b += d.size;
                    }
                });
                owned.push(Owned {
                    model: i,
                    core,
                    handle,
                    tensors,
                });
                landed.push(Some(core));
                models.push(ModelPlan {
                    file: p.label.clone(),
                    name: p.file.name().to_string(),
                    core,
                    fits: true,
                    device_bytes: b + tensor_bytes,
                    tensor_bytes,
                    needed,
                    needed_bytes,
                    error: None,
                    refusal: None,
                });
            }
            Step::Failed { error, refused, .. } if refused => {
                return Err(PlanError::Refused {
                    file: p.label.clone(),
                    core,
                    error,
                });
            }
            Step::Failed { error, oom, .. } => {
                landed.push(None);
                // The load rolled back: the device is as it was before it.
                let (measure, refusal) = match &oom {
                    Some((e @ nrt_core::Error::DeviceOom { device, hbm, .. }, ch)) => {
                        let shared = shared_pieces(&nrt, p, core);
                        let m = measurer.measure(p, core, *device, *hbm, shared);
                        (m, channel_refusal(&nrt, e, ch.as_ref(), m.as_ref()))
                    }
                    _ => (None, None),
                };
                if let Some(r) = refusal
                    .as_ref()
                    .filter(|r| r.verdict == Verdict::Fragmented)
                {
                    frag.push(Fragmentation {
                        model: i,
                        file: p.label.clone(),
                        refusal: r.clone(),
                    });
                }
                models.push(ModelPlan {
                    file: p.label.clone(),
                    name: p.file.name().to_string(),
                    core,
                    fits: false,
                    device_bytes: 0,
                    tensor_bytes: 0,
                    needed,
                    needed_bytes,
                    error: Some(error.clone()),
                    refusal,
                });
                if first.is_none() {
                    first = Some((i, core, error, oom, measure));
                }
            }
        }
    }

    let hbm = hbm_plan(&s.rt, &owned, resident);
    let cores = (0..i64::from(nrt.visible_logical_core_count()))
        .map(|v| core_plan(&nrt, v, &hbm))
        .collect();
    let visible = i64::from(nrt.visible_logical_core_count());
    let lnc = nrt.logical_core_size();
    let first_failure = first.map(|(i, core, error, oom, measure)| {
        let oom = oom.and_then(|(e, ch)| {
            let most = match (measure, e) {
                (Some(m), _) => m.most,
                (None, nrt_core::Error::DeviceOom { device, .. }) => nrt.geom(device).channel_size,
                (None, _) => 0,
            };
            oom_figures(&e, ch.as_ref(), most)
        });
        // Nothing makes a hopeless model fit: no what-ifs for it.
        let hopeless = oom.as_ref().is_some_and(|o| o.larger_than_channel)
            || models[i]
                .refusal
                .as_ref()
                .is_some_and(|r| r.verdict == Verdict::Hopeless);
        let what_ifs = if req.what_ifs && oom.is_some() && !hopeless {
            let ctx = Replay {
                cfg: &cfg,
                base,
                shared: shared.as_ref(),
                parsed: &parsed,
                landed: &landed,
                allow_legacy,
            };
            what_ifs(&ctx, i, core, visible, lnc)
        } else {
            Vec::new()
        };
        Failure {
            model: i,
            file: parsed[i].label.clone(),
            core,
            error,
            oom,
            what_ifs,
        }
    });
    Ok(Plan {
        device: device.to_string(),
        lnc_size: lnc,
        models,
        cores,
        hbm,
        first_failure,
        fragmentation: frag,
        snapshot,
    })
}

/// The plan's note on the shared device snapshot it ran on: the live processes and their
/// bytes, or that a joiner re-creates the file; the dead processes left out.
fn snapshot_note(snap: &crate::shared::PoolSnapshot) -> String {
    let mut note = format!(
        "planned on a snapshot of shared device `{}` taken under its lock: ",
        snap.name
    );
    if snap.recreated {
        note.push_str(
            "no live process, so a process joining now re-creates it and this plan starts from \
             an empty device",
        );
    } else {
        note.push_str(&format!(
            "{} process(es) holding {} resident",
            snap.live.len(),
            fmt(snap.live.iter().map(|p| p.total_bytes()).sum())
        ));
    }
    if !snap.dead.is_empty() {
        note.push_str(&format!(
            "; left out the {} of {} dead process(es){} (the file is unchanged)",
            fmt(snap.dead.iter().map(|p| p.total_bytes()).sum()),
            snap.dead.len(),
            if snap.recreated {
                ""
            } else {
                ", as a process joining now reclaims them first"
            }
        ));
    }
    note.push_str(if snap.recreated {
        "; what processes joining after it allocate is not in this plan"
    } else {
        "; what they allocate or free after it is not in this plan"
    });
    note
}

fn fmt(b: u64) -> String {
    let mib = b as f64 / (1u64 << 20) as f64;
    format!("{mib:.3} MiB")
}

/// What a replay on a fresh scratch device needs: the configuration, the models and where
/// each landed in the plan (`None`: it did not fit).
struct Replay<'a> {
    cfg: &'a RuntimeConfig,
    base: Option<&'a SimDevice>,
    /// The shared device's snapshot `base` is the pools of, when planning on one.
    shared: Option<&'a crate::shared::PoolSnapshot>,
    parsed: &'a [Parsed],
    landed: &'a [Option<i64>],
    allow_legacy: bool,
}
