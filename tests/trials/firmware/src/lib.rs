//! An outside integrator, `no_std`: a firmware-style integrator of `nrt-core`,
//! written as an outside user would, with no `unsafe` (`#![forbid(unsafe_code)]`): the state
//! block is a `.bss` [`StaticState`] sized for the one-device [`Capacity::ONE_DEVICE`] and bound
//! once, the simulated device a `.bss` static taken once through
//! [`nrt_core::cell::ZeroedCell`], VIRTUAL tensor bytes come from a static
//! [`ArenaHostMem`], and the run is init → load a model → tensor write/read → ledger → close
//! back to 0 bytes.
//!
//! It is a library rather than a `#![no_main]` image, so it has no `#[panic_handler]` or entry
//! glue at all: `firmware/` (`cargo xtask firmware`) is the linked image; this crate is what an
//! integrator's code looks like, and `tests/bring_up.rs` runs it.
#![no_std]
#![forbid(unsafe_code)]

use core::fmt::Write;

use nrt_core::abi::dma_mem_location_t::TONGA_DRAM;
use nrt_core::abi::dma_mem_usage_type_t::{self, DMA_MEM_USAGE_TYPE_WEIGHT as WEIGHT};
use nrt_core::cell::ZeroedCell;
use nrt_core::model::{ModelAlloc, ModelSpec};
use nrt_core::sim::{Preset, SimConfig, SimDevice};
use nrt_core::tensor::{ArenaHostMem, Placement};
use nrt_core::PhysicalCore;
use nrt_core::{
    Capacity, CoreSel, CoreState, Error, InitOptions, LogicalCore, Nrt, StaticState, UsageSel,
};

/// The capacities this firmware chooses: one device, the arenas sized for it.
const CAPS: Capacity = Capacity::ONE_DEVICE;
/// The runtime's state block and its arena storage, all-zero in `.bss` until bound.
static STATE: StaticState<{ CoreState::storage_bytes(&CAPS) }> = StaticState::new();
/// The simulated device (one device, 1 024 nodes per pool), all-zero in `.bss` until
/// [`SimDevice::init`].
static SIM: ZeroedCell<SimDevice<1, 1024>> = ZeroedCell::new();
/// Host bytes for VIRTUAL tensors: 64 KiB in at most 16 blocks, no heap.
static HOST: ArenaHostMem<{ 64 << 10 }, 16> = ArenaHostMem::new();

/// Weight bytes the trial's model books.
pub const WEIGHT_BYTES: u64 = 8 << 20;

static ALLOCS: [ModelAlloc<'static>; 1] = [ModelAlloc {
    usage: WEIGHT,
    location: TONGA_DRAM,
    size: WEIGHT_BYTES,
    align: 0,
    hint: "trial.weights",
}];

/// What the run observed, for the test to hold against what it expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// The bytes read back from the tensor.
    pub read_back: [u8; 5],
    /// WEIGHT bytes booked to logical core 0's first physical core while the model was loaded.
    pub weights_booked: u64,
    /// That core's total column at the same time.
    pub core_total: u64,
    /// Bytes the driver held after `close`.
    pub driver_bytes_after_close: u64,
    /// That core's total column after `close`.
    pub core_total_after_close: u64,
}

/// Why the trial could not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrialError {
    /// [`run`] was called a second time: the statics are taken once.
    AlreadyRan,
    /// The runtime refused a call.
    Nrt(Error),
}

impl From<Error> for TrialError {
    fn from(e: Error) -> Self {
        TrialError::Nrt(e)
    }
}

/// The bring-up, once per process; `log` gets one line per step.
pub fn run(log: &mut dyn Write) -> Result<Report, TrialError> {
    let Some(sim) = SIM.take() else {
        return Err(TrialError::AlreadyRan);
    };
    let state = STATE.bind(&CAPS)?;
    sim.init(&SimConfig::new(Preset::Trn2, 1))
        .map_err(Error::Driver)?;
    let sim: &'static SimDevice<1, 1024> = sim;
    let nrt = Nrt::with_host(state, sim, &HOST);
    nrt.init(&InitOptions::default())?;
    let _ = writeln!(log, "init: {} device(s)", nrt.num_devices());

    let spec = ModelSpec {
        name: "trial",
        subgraphs: 1,
        allocations: &ALLOCS,
        ..Default::default()
    };
    let model = nrt.models().load(LogicalCore::FIRST, &spec)?;
    let _ = writeln!(log, "loaded model h{}", model.h_model().id);

    let t = nrt
        .tensors()
        .allocate(Placement::Virtual, CoreSel::Any, 4096, Some("x"))?;
    nrt.tensors().write(t, b"hello", 0)?;
    let mut read_back = [0u8; 5];
    nrt.tensors().read(t, &mut read_back, 0)?;
    nrt.tensors().free(t)?;

    let core = nrt.logical_core_entry(LogicalCore::FIRST)?.tpbs[0];
    let (dev, tpb) = (core.device_id, core.device_tpb_idx);
    let weights_booked = nrt.ledger().device(PhysicalCore::new(dev, tpb), WEIGHT);
    let core_total = nrt
        .ledger()
        .device(PhysicalCore::new(dev, tpb), UsageSel::Total);
    let _ = writeln!(
        log,
        "ledger nd{dev}:nc{tpb}: {weights_booked} B {} of {core_total} B",
        dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_WEIGHT.short_name()
    );

    nrt.close()?; // unloads the model too
    let report = Report {
        read_back,
        weights_booked,
        core_total,
        driver_bytes_after_close: nrt.driver_pool_bytes_in_use()?,
        core_total_after_close: nrt
            .ledger()
            .device(PhysicalCore::new(dev, tpb), UsageSel::Total),
    };
    let _ = writeln!(
        log,
        "closed: the driver holds {} B",
        report.driver_bytes_after_close
    );
    Ok(report)
}
