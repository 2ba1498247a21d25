//! # nrt-firmware
//!
//! A firmware-style image over `nrt-core`: `#![no_std]`, `#![no_main]`, its own panic handler,
//! linked `-nostartfiles -nostdlib -static` for the host target and entered at its own
//! `_start`; it talks to Linux only through raw syscalls (`write`, `getrusage`, `exit_group`).
//!
//! That it links at all is the proof that nothing in the core's dependency graph needs `std`
//! (a std crate would bring a second `panic_impl` and `libc`), and by default it allocates
//! nothing on a heap (it has no global allocator): the core's state ([`CoreState`], the
//! context tree sized for the profile's devices and every arena) and the simulated device ([`SimDevice`]) are
//! zero-valid `.bss` statics that cost memory only where they are touched.
//!
//! The run: bring up a simulated trn2, load three models onto logical core 0, allocate device
//! tensors on logical cores 0 and 1, unload one model and check exactly its bytes went; then
//! the bad inputs — a full arena, an OOM during a load (rolled back), an unknown handle, a
//! double free — each must give its own error and change nothing; then `close`, and the ledger,
//! the driver's pools and every arena must be empty. It prints a short report and exits 0, or 1
//! on any discrepancy (101 on a panic). `--arenas` adds the per-arena table; built with the
//! `log` feature, `--log-level=LEVEL` shows nrt-core's own log lines on stderr. Built with the
//! `heap` feature, the image has a `#[global_allocator]` and also runs a second runtime from
//! nrt-core's boxed constructors beside the static one (`src/heap.rs`).
//!
//! Build and run it with `cargo xtask firmware` (`--report`, `--json` for the footprint).
#![no_std]
#![no_main]

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!(
    "nrt-firmware is a host stand-in for a bare-metal image: it needs x86_64 Linux (raw syscalls)"
);

#[cfg(feature = "heap")]
mod heap;
#[cfg(feature = "log")]
mod logger;
mod mem;
mod out;
mod rt;

use core::fmt::{self, Write};
use core::mem::size_of;

use nrt_core::abi::*;
use nrt_core::cell::ZeroedCell;
use nrt_core::ctx::ContextLayout;
use nrt_core::dmem::AllocArgs;
use nrt_core::model::{ModelAlloc, ModelSpec, SbufCarveout, TensorDecl};
use nrt_core::sim::{Preset, SimConfig};
use nrt_core::tensor::Placement;
use nrt_core::{CoreSel, CoreState, Error, InitOptions, LogicalCore, Nrt, StaticState};
use nrt_core::{HandleError, HandleFault, HandleKind, ModelHandle, TensorHandle};

use out::{Mib, Out};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The image's capacity profile (the integrator sizes the storage): one device by default
/// (`.bss` and peak RSS within the 4 MiB each `cargo xtask firmware` enforces), the 32-device sizing with the
/// `full` feature.
mod profile {
    use nrt_core::sim::SimDevice;
    use nrt_core::Capacity;

    /// The arenas' capacities.
    #[cfg(not(feature = "full"))]
    pub const CAPS: Capacity = Capacity::ONE_DEVICE;
    /// The simulated device: one device, 1 024 nodes per pool.
    #[cfg(not(feature = "full"))]
    pub type Sim = SimDevice<1, 1024>;
    /// The profile's name in the report.
    #[cfg(not(feature = "full"))]
    pub const NAME: &str = "one-device";

    /// The arenas' capacities.
    #[cfg(feature = "full")]
    pub const CAPS: Capacity = Capacity::DEFAULT;
    /// The simulated device: 32 devices, 16 384 nodes per pool (the std shim's default of
    /// one node per small-object page is 4.3 GB: address space for a mapping, not a `.bss`
    /// within the small code model's 2 GiB reach).
    #[cfg(feature = "full")]
    pub type Sim = SimDevice<32, 16384>;
    /// The profile's name in the report.
    #[cfg(feature = "full")]
    pub const NAME: &str = "32-device";
}
use profile::{Sim, CAPS};

/// The core's whole state and its arenas' storage, zero-initialised, so it lands in `.bss`
/// (docs/ARCHITECTURE.md principle 2), sized for [`CAPS`] at compile time; bound once in `run`.
static STATE: StaticState<{ CoreState::storage_bytes(&CAPS) }> = StaticState::new();

/// The simulated device, zero-initialised in `.bss`, taken once as `&'static mut` (no
/// `static mut`): [`nrt_core::sim::SimDevice::init`] takes `&mut self` once before the device
/// is shared.
static SIM: ZeroedCell<Sim> = ZeroedCell::new();

/// Bytes of plain host memory for VIRTUAL tensors (`.bss`, placed by the carve allocator).
const HOST_POOL_BYTES: usize = 256 << 10;
/// Host memory for VIRTUAL tensors: nrt-core's heap-free `HostMem`.
static HOST_POOL: nrt_core::tensor::ArenaHostMem<HOST_POOL_BYTES, 64> =
    nrt_core::tensor::ArenaHostMem::new();

const DEV: dma_mem_location_t = dma_mem_location_t::TONGA_DRAM;
const HOST: dma_mem_location_t = dma_mem_location_t::HOST_DRAM;

const fn alloc(
    usage: dma_mem_usage_type_t,
    location: dma_mem_location_t,
    size: u64,
    align: u64,
    hint: &'static str,
) -> ModelAlloc<'static> {
    ModelAlloc {
        usage,
        location,
        size,
        align,
        hint,
    }
}

use dma_mem_usage_type_t::{
    DMA_MEM_USAGE_TYPE_DMA_RING as DMA_RING, DMA_MEM_USAGE_TYPE_INSTR_PE as INSTR_PE,
    DMA_MEM_USAGE_TYPE_IO as IO, DMA_MEM_USAGE_TYPE_TENSOR as TENSOR,
    DMA_MEM_USAGE_TYPE_WEIGHT as WEIGHT,
};

/// The EVTACCEL SBUF carveout CAYMAN models declare (spec §8).
const EVTACCEL: SbufCarveout = SbufCarveout {
    ty: kbin_sb_carveout_type_t::KBIN_SB_CARVEOUT_TYPE_EVTACCEL as u32,
    partition_start: constants::EVTACCEL_PARTITION_START,
    partition_count: constants::EVTACCEL_PARTITION_COUNT,
    offset: constants::EVTACCEL_PARTITION_BYTE_OFFSET,
    size: constants::EVTACCEL_SIZE,
};

static ENCODER_ALLOCS: [ModelAlloc<'static>; 4] = [
    alloc(WEIGHT, DEV, 24 * MIB, 0, "encoder.weights"),
    alloc(INSTR_PE, DEV, 512 * KIB, 4096, "encoder.instr"),
    alloc(DMA_RING, DEV, 64 * KIB, 0, "encoder.qPoolIO0"),
    alloc(IO, HOST, 16 * KIB, 0, "encoder.ioq"),
];
static DECODER_ALLOCS: [ModelAlloc<'static>; 3] = [
    alloc(WEIGHT, DEV, 48 * MIB, 0, "decoder.weights"),
    alloc(INSTR_PE, DEV, MIB, 4096, "decoder.instr"),
    alloc(DMA_RING, DEV, 128 * KIB, 0, "decoder.qPoolIO0"),
];
static CLASSIFIER_ALLOCS: [ModelAlloc<'static>; 2] = [
    alloc(WEIGHT, DEV, 6 * MIB, 0, "classifier.weights"),
    alloc(INSTR_PE, DEV, 256 * KIB, 4096, "classifier.instr"),
];
/// A manifest whose last allocation cannot fit a 24 GiB HBM channel: the load must fail with
/// `DeviceOom` after its first allocations succeeded, and roll them back.
static OVERSIZED_ALLOCS: [ModelAlloc<'static>; 3] = [
    alloc(WEIGHT, DEV, 4 * MIB, 0, "oversized.small"),
    alloc(INSTR_PE, DEV, 256 * KIB, 4096, "oversized.instr"),
    alloc(WEIGHT, DEV, 64 * GIB, 0, "oversized.weights"),
];

static MODELS: [ModelSpec<'static>; 3] = [
    ModelSpec {
        name: "encoder",
        subgraphs: 2,
        allocations: &ENCODER_ALLOCS,
        subgraph_ends: &[],
        gpsimd_libs: None,
        scratchpad_bytes: 8 * MIB,
        sbuf_carveout: Some(EVTACCEL),
        inputs: &[TensorDecl::new("tokens", 64 * KIB)],
        outputs: &[TensorDecl::new("hidden", 4 * MIB)],
    },
    ModelSpec {
        sbuf_carveout: Some(EVTACCEL),
        ..plain("decoder", &DECODER_ALLOCS)
    },
    plain("classifier", &CLASSIFIER_ALLOCS),
];

static OVERSIZED: ModelSpec<'static> = plain("oversized", &OVERSIZED_ALLOCS);

/// A one-subgraph model that makes `allocations` and nothing else (no libraries, scratchpad,
/// carveout or declared IO).
const fn plain(
    name: &'static str,
    allocations: &'static [ModelAlloc<'static>],
) -> ModelSpec<'static> {
    ModelSpec {
        name,
        subgraphs: 1,
        allocations,
        subgraph_ends: &[],
        gpsimd_libs: None,
        scratchpad_bytes: 0,
        sbuf_carveout: None,
        inputs: &[],
        outputs: &[],
    }
}

/// Logical core the three models share.
const MODEL_VNC: LogicalCore = LogicalCore::FIRST;
/// The two logical cores that get device tensors.
const TENSOR_VNCS: [LogicalCore; 2] = [LogicalCore::new(0), LogicalCore::new(1)];
/// The model unloaded mid-run (index into [`MODELS`]).
const UNLOADED: usize = 1;

/// Everything observable that a failed call must leave unchanged.
#[derive(PartialEq, Eq)]
struct Snapshot {
    ledger: nrt_core::LedgerSnapshot,
    driver_bytes: Result<u64, Error>,
    arena_live: [usize; CoreState::ARENA_COUNT],
    models: usize,
}

struct Run {
    nrt: Nrt<'static>,
    out: Out<4096>,
    fails: u32,
}

/// Entry from `_start`; returns the exit code.
fn run(args: &rt::Args) -> i32 {
    #[cfg(feature = "heap")]
    heap::init();
    #[cfg(feature = "log")]
    logger::init(args.value("--log-level"));
    let mut out = Out::<4096>::new(1);
    let Some(sim) = SIM.take() else {
        let _ = writeln!(
            out,
            "nrt-firmware: FAIL the simulated device was already taken"
        );
        return 1;
    };
    let state = match STATE.bind(&CAPS) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(out, "nrt-firmware: FAIL state bind: {e}");
            return 1;
        }
    };
    let cfg = SimConfig::new(Preset::Trn2, 1);
    if let Err(e) = sim.init(&cfg) {
        let _ = writeln!(out, "nrt-firmware: FAIL simulator init: errno {e}");
        return 1;
    }
    let sim: &'static Sim = sim;
    let mut r = Run {
        nrt: Nrt::with_host(state, sim, &HOST_POOL),
        out,
        fails: 0,
    };
    r.header(sim);
    match r.scenario() {
        Ok(()) => {}
        Err(e) => r.fail(format_args!("unexpected error: {e}")),
    }
    #[cfg(feature = "heap")]
    if let Err(e) = r.second_instance() {
        r.fail(format_args!("heap: unexpected error: {e}"));
    }
    r.teardown();
    if args.has("--arenas") {
        r.arena_table();
    }
    let rss = rt::peak_rss_kib();
    let _ = writeln!(
        r.out,
        "  peak RSS      {rss} KiB (getrusage of this process)"
    );
    if r.fails == 0 {
        let _ = writeln!(r.out, "nrt-firmware: OK");
        0
    } else {
        let _ = writeln!(r.out, "nrt-firmware: FAILED ({} discrepancies)", r.fails);
        1
    }
}

impl Run {
    fn fail(&mut self, what: fmt::Arguments<'_>) {
        self.fails += 1;
        let _ = writeln!(self.out, "  FAIL          {what}");
    }

    fn check(&mut self, ok: bool, what: fmt::Arguments<'_>) {
        if !ok {
            self.fail(what);
        }
    }

    fn snapshot(&self) -> Snapshot {
        let mut arena_live = [0; CoreState::ARENA_COUNT];
        for (l, (_, s)) in arena_live.iter_mut().zip(self.nrt.state().arena_stats()) {
            *l = s.live;
        }
        let mut on = [ModelHandle::from_parts(0, 0, 0); CAPS.models as usize];
        Snapshot {
            ledger: self.nrt.ledger().snapshot(0),
            driver_bytes: self.nrt.driver_pool_bytes_in_use(),
            arena_live,
            models: self
                .nrt
                .models()
                .on_core(MODEL_VNC, &mut on)
                .unwrap_or(usize::MAX),
        }
    }

    fn header(&mut self, sim: &Sim) {
        let g = self.nrt.driver().device_info(0);
        let _ = writeln!(
            self.out,
            "nrt-firmware: no_std/no_main image, nrt-core over a simulated {} ({} device)",
            sim.preset().map(Preset::name).unwrap_or("?"),
            self.nrt.driver().device_count()
        );
        if let Ok(g) = g {
            let _ = writeln!(
                self.out,
                "  device        {} cores, {} HBM channels x {} GiB, {} GiB host DMA",
                g.cores_per_device,
                g.hbm_channels,
                g.hbm_channel_size / GIB,
                g.host_dma_capacity / GIB
            );
        }
        let _ = writeln!(
            self.out,
            "  static state  {} profile: CoreState {} B + context {} B + arenas {} B + SimDevice {} B in .bss (zero pages until touched)",
            profile::NAME,
            CoreState::BYTES,
            ContextLayout::of(CAPS.devices).bytes,
            CoreState::storage_bytes(&CAPS) - ContextLayout::of(CAPS.devices).bytes,
            size_of::<Sim>()
        );
    }

    fn scenario(&mut self) -> Result<(), Error> {
        let n = self.nrt;
        n.init(&InitOptions::default())?;
        let _ = writeln!(
            self.out,
            "  init          LNC {}, {} logical cores; driver holds {} after bring-up",
            n.logical_core_size(),
            n.visible_logical_core_count(),
            Mib(n.driver_pool_bytes_in_use()?)
        );

        // Three models on one logical core.
        let mut handles = [ModelHandle::from_parts(0, 0, 0); 3];
        let mut bytes = [0u64; 3];
        for (i, spec) in MODELS.iter().enumerate() {
            let before = n.driver_pool_bytes_in_use()?;
            handles[i] = n.models().load(MODEL_VNC, spec)?;
            let info = n.models().info(handles[i])?;
            bytes[i] = info.bytes;
            let _ = writeln!(
                self.out,
                "  load          {:<10} h{} on vnc {}: {} model heap, driver +{}",
                spec.name,
                handles[i].h_model().id,
                MODEL_VNC,
                Mib(info.bytes),
                Mib(n.driver_pool_bytes_in_use()? - before)
            );
        }
        let mut on = [ModelHandle::from_parts(0, 0, 0); 8];
        let resident = n.models().on_core(MODEL_VNC, &mut on)?;
        self.check(
            resident == 3,
            format_args!("{resident} models resident on vnc {MODEL_VNC}, expected 3"),
        );

        // Device tensors on two logical cores.
        // A never-issued handle until each slot is filled.
        let mut tensors = [TensorHandle::from_parts(0, 0, 0); 2];
        for (t, vnc) in tensors.iter_mut().zip(TENSOR_VNCS) {
            let name = if vnc == LogicalCore::FIRST {
                "input0"
            } else {
                "output0"
            };
            *t = n
                .tensors()
                .allocate(Placement::Device, vnc.into(), 4 * MIB, Some(name))?;
            let info = n.tensors().device_allocation_info(*t)?;
            let pc = n.physical_cores(vnc)?[0];
            let booked = n.ledger().device(pc, TENSOR);
            self.check(
                booked >= 4 * MIB,
                format_args!("tensor on vnc {vnc}: only {booked} B booked as TENSOR"),
            );
            let _ = writeln!(
                self.out,
                "  tensor        {:<10} vnc {} = nd{}:nc{}, HBM {}, pa {:#x}, {}",
                name,
                vnc,
                pc.device,
                pc.core,
                info.hbm_index,
                info.physical_address,
                Mib(info.size)
            );
        }
        // A VIRTUAL tensor: plain host bytes from a static arena (no heap), written and read back.
        let v = n
            .tensors()
            .allocate(Placement::Virtual, CoreSel::Any, 4096, Some("scratch"))?;
        n.tensors().write(v, &[0xa5; 64], 100)?;
        let mut back = [0u8; 64];
        n.tensors().read(v, &mut back, 100)?;
        self.check(
            back == [0xa5; 64],
            format_args!("VIRTUAL tensor bytes did not round-trip"),
        );
        n.tensors().free(v)?;
        self.check(
            HOST_POOL.free_bytes() == HOST_POOL_BYTES as u64,
            format_args!("VIRTUAL tensor memory not returned to the static pool"),
        );
        let _ = writeln!(
            self.out,
            "  tensor        scratch    VIRTUAL, 4 KiB from a static pool: bytes round-trip, freed"
        );
        // One is freed here, the other is left for `close` to reclaim.
        n.tensors().free(tensors[0])?;

        // Unload one model: exactly its bytes go, the others stay.
        let h = handles[UNLOADED];
        let others: [_; 2] = [n.models().info(handles[0])?, n.models().info(handles[2])?];
        let before = n.driver_pool_bytes_in_use()?;
        n.models().unload(h)?;
        let freed = before - n.driver_pool_bytes_in_use()?;
        self.check(
            freed == bytes[UNLOADED],
            format_args!(
                "unload h{} freed {freed} B, its model heap held {} B",
                h.h_model().id,
                bytes[UNLOADED]
            ),
        );
        self.check(
            n.models().info(handles[0])? == others[0] && n.models().info(handles[2])? == others[1],
            format_args!("unloading h{} changed another model", h.h_model().id),
        );
        let resident = n.models().on_core(MODEL_VNC, &mut on)?;
        self.check(
            resident == 2,
            format_args!("{resident} models resident after unload, expected 2"),
        );
        let _ = writeln!(
            self.out,
            "  unload        {:<10} h{}: driver -{} (exactly its heap), {} models left",
            MODELS[UNLOADED].name,
            h.h_model().id,
            Mib(freed),
            resident
        );

        self.bad_full_arena()?;
        self.bad_oom_during_load()?;
        self.bad_unknown_handle(h)?;
        self.bad_double_free()?;
        Ok(())
    }

    /// Takes every `nrt_tensor_t` slot: the next allocation must be `ArenaFull` naming the
    /// arena (not a device OOM) and change nothing; then every slot is returned.
    fn bad_full_arena(&mut self) -> Result<(), Error> {
        let n = self.nrt;
        let mut taken = [TensorHandle::from_parts(0, 0, 0); CAPS.tensors as usize];
        let mut count = 0;
        let err = loop {
            match n.tensors().allocate_empty(Some("filler")) {
                Ok(t) if count < taken.len() => {
                    taken[count] = t;
                    count += 1;
                }
                Ok(t) => {
                    n.tensors().free(t)?;
                    break None;
                }
                Err(e) => break Some(e),
            }
        };
        let before = self.snapshot();
        let again = n.tensors().allocate(
            Placement::Device,
            LogicalCore::FIRST.into(),
            MIB,
            Some("late"),
        );
        let unchanged = self.snapshot() == before;
        for t in &taken[..count] {
            n.tensors().free(*t)?;
        }
        let ok = matches!(err, Some(Error::ArenaFull(a)) if a.arena == "nrt_tensor_t" && a.capacity == (CAPS.tensors as usize))
            && count + 1 == (CAPS.tensors as usize) // one slot is held by the tensor `close` frees
            && matches!(again, Err(Error::ArenaFull(_)))
            && unchanged;
        self.check(
            ok,
            format_args!(
                "full arena: {count} tensors then {err:?}; a device tensor then {again:?}; \
                 state unchanged: {unchanged}"
            ),
        );
        if let Some(e) = err {
            let _ = writeln!(self.out, "  full arena    after {count} tensors: {e}");
        }
        self.bad_full_arena_during_load()
    }

    /// Takes every `dmem_allocator_t` slot, then loads a model: the load needs a MODEL
    /// allocator after it has taken its `model_t`, so it fails half-way with the allocator
    /// arena's own error and must roll back to exactly the state before.
    fn bad_full_arena_during_load(&mut self) -> Result<(), Error> {
        let n = self.nrt;
        // The fillers name core 0's physical core, as its GLOBAL allocator does (an allocator
        // must name a core of the context tree); they are never allocated from.
        let pcore = nrt_core::PhysicalCore::new(0, 0);
        // Placeholder bits (a handle no call accepts) for the slots not filled.
        let mut fillers = [nrt_core::AllocatorHandle::from_bits(0); CAPS.allocators as usize];
        let mut count = 0;
        let err = loop {
            if count == fillers.len() {
                break None;
            }
            match n
                .dmem()
                .allocator_create(pcore, dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_MODEL)
            {
                Ok(al) => {
                    fillers[count] = al;
                    count += 1;
                }
                Err(e) => break Some(e),
            }
        };
        let before = self.snapshot();
        let r = n.models().load(MODEL_VNC, &MODELS[2]);
        let unchanged = self.snapshot() == before;
        for al in &fillers[..count] {
            n.dmem().allocator_destroy(*al)?;
        }
        let ok = matches!(err, Some(Error::ArenaFull(a)) if a.arena == "dmem_allocator_t")
            && matches!(r, Err(Error::ArenaFull(a)) if a.arena == "dmem_allocator_t")
            && unchanged;
        self.check(
            ok,
            format_args!(
                "full arena during load: {count} allocators then {err:?}; load {r:?}; \
                 state unchanged: {unchanged}"
            ),
        );
        if let Err(Error::ArenaFull(a)) = r {
            let _ = writeln!(
                self.out,
                "  full in load  {}: arena `{}` full ({} slots) mid-load: rolled back",
                MODELS[2].name, a.arena, a.capacity
            );
        }
        Ok(())
    }

    /// A load whose last allocation cannot fit: `DeviceOom`, and the ledger, the driver, the
    /// arenas and the model_db exactly as before (the first allocations were rolled back).
    fn bad_oom_during_load(&mut self) -> Result<(), Error> {
        let n = self.nrt;
        let before = self.snapshot();
        let r = n.models().load(MODEL_VNC, &OVERSIZED);
        let unchanged = self.snapshot() == before;
        let ok = matches!(r, Err(Error::DeviceOom { size, .. }) if size == 64 * GIB)
            && n.ledger().last_oom() == r.err()
            && unchanged;
        self.check(
            ok,
            format_args!("OOM during load: {r:?}; state unchanged: {unchanged}"),
        );
        if let Err(e) = r {
            let _ = writeln!(self.out, "  OOM in load   {e}: rolled back");
        }
        Ok(())
    }

    /// The unloaded handle and one never minted: a stale model handle, nothing changes.
    fn bad_unknown_handle(&mut self, unloaded: ModelHandle) -> Result<(), Error> {
        let n = self.nrt;
        let before = self.snapshot();
        let twice = n.models().unload(unloaded);
        let (vnc, _, epoch) = unloaded.to_parts();
        let never = n
            .models()
            .info(ModelHandle::from_parts(vnc, u32::MAX, epoch));
        let unchanged = self.snapshot() == before;
        let stale = Error::InvalidHandle(HandleError {
            kind: HandleKind::Model,
            fault: HandleFault::Stale,
        });
        self.check(
            twice == Err(stale) && never.err() == Some(stale) && unchanged,
            format_args!(
                "unknown handle: {twice:?} / {:?}; state unchanged: {unchanged}",
                never.err()
            ),
        );
        if let Err(e) = twice {
            let _ = writeln!(self.out, "  unknown       {e}");
        }
        Ok(())
    }

    /// Frees a dmem twice: the second is a stale handle (`InvalidHandle`), and the ledger is
    /// not debited twice.
    fn bad_double_free(&mut self) -> Result<(), Error> {
        let n = self.nrt;
        let before = self.snapshot();
        let al = n.dmem().core_allocator(nrt_core::PhysicalCore::new(0, 1))?;
        let m = n.dmem().alloc(
            al,
            &AllocArgs::device(64 * KIB, 0, TENSOR, "fw.twice"),
            None,
        )?;
        n.dmem().free(m)?;
        let second = n.dmem().free(m);
        let unchanged = self.snapshot() == before;
        self.check(
            matches!(second, Err(Error::InvalidHandle(_))) && unchanged,
            format_args!("double free: {second:?}; state unchanged: {unchanged}"),
        );
        if let Err(e) = second {
            let _ = writeln!(self.out, "  double free   {e}");
        }
        Ok(())
    }

    /// `close`, then everything must be back to empty.
    fn teardown(&mut self) {
        let n = self.nrt;
        if let Err(e) = n.close() {
            self.fail(format_args!("close: {e}"));
        }
        let after_close = n.models().load(MODEL_VNC, &MODELS[0]);
        self.check(
            after_close == Err(Error::Closed),
            format_args!("load after close: {after_close:?}, expected Closed"),
        );
        let in_use = n.driver_pool_bytes_in_use();
        self.check(
            in_use == Ok(0),
            format_args!("driver pools after close: {in_use:?}, expected 0 B in use"),
        );
        let in_use = in_use.unwrap_or(u64::MAX);
        let drv = n.driver();
        let mut pools = 0;
        for dev in 0..drv.device_count() {
            let channels = drv.device_info(dev).map(|i| i.hbm_channels).unwrap_or(0);
            for (host, hbm) in (0..channels).map(|h| (false, h)).chain([(true, 0)]) {
                match drv.pool_stats(dev, host, hbm) {
                    Ok(s) if s.free == s.capacity && s.allocations == 0 && s.capacity > 0 => {
                        pools += 1
                    }
                    r => self.fail(format_args!(
                        "pool nd{dev} {} {hbm} not empty after close: {r:?}",
                        if host { "host" } else { "HBM" }
                    )),
                }
            }
        }
        let nrt_core::LedgerSnapshot {
            device: dev_rows,
            host: host_rows,
        } = n.ledger().snapshot(0);
        let ledger_zero = dev_rows
            .iter()
            .chain(host_rows.iter())
            .flatten()
            .all(|b| *b == 0);
        self.check(ledger_zero, format_args!("ledger not zero after close"));
        let mut arenas = 0;
        for (name, s) in n.state().arena_stats() {
            if s.live == 0 {
                arenas += 1;
            } else {
                self.fail(format_args!("arena {name}: {} live after close", s.live));
            }
        }
        let _ = writeln!(
            self.out,
            "  teardown      close: driver holds {in_use} B, {pools} pools empty, ledger {}, {arenas}/{} arenas empty",
            if ledger_zero { "zero" } else { "NOT zero" },
            CoreState::ARENA_COUNT
        );
    }

    fn arena_table(&mut self) {
        let _ = writeln!(
            self.out,
            "  arenas        {:<26} {:>6} {:>6} {:>10}",
            "name", "slots", "peak", "bytes"
        );
        let mut total = 0;
        for (name, s) in self.nrt.state().arena_stats() {
            total += s.bytes;
            let _ = writeln!(
                self.out,
                "                {:<26} {:>6} {:>6} {:>10}",
                name, s.capacity, s.peak, s.bytes
            );
        }
        let _ = writeln!(
            self.out,
            "                {:<26} {:>6} {:>6} {:>10}",
            "(all arenas)", "", "", total
        );
    }
}
