//! The process-global context tree `tdrv_ctx → mla[32] → tpb[8]` (spec §1): its state block,
//! the [`Nrt`] handle every operation goes through, bring-up (`db_tdrv_ctx_init`), the resolver
//! (`db_physical_core_get_mla_and_tpb`, §1.1) and teardown (`tdrv_destroy`, §12).
//!
//! [`CoreState`] holds the 18.9 MB `tdrv_ctx_t` plus every static arena; it is valid when
//! all-zero, so it lives in `.bss` (firmware, the C ABI singleton) or in a zeroed allocation
//! (independent instances for Rust users and tests) and is never built on the stack.

use core::cell::UnsafeCell;
use core::ptr::{addr_of_mut, null_mut};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::abi::meta::ZeroValid;
use crate::abi::*;
use crate::arena::{Arena, GiveBack, SideTable};
use crate::config::*;
use crate::driver::{errno, DeviceInfo, Driver};
use crate::error::{Error, InvalidArg, Result};
use crate::ht::{self, HtBuckets};
use crate::sync::ShardedGate;
use crate::vcore::{VcoreOptions, VcoreTable};

/// Geometry of one attached device, as the driver reported it at bring-up.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DevGeom {
    /// `al_hal_tpb_arch_type_t` value.
    pub arch: u32,
    /// Physical cores.
    pub cores: u32,
    /// HBM channels.
    pub channels: u32,
    /// 1 when the driver honours an alignment.
    pub aligned_alloc: u32,
    /// Bytes per HBM channel.
    pub channel_size: u64,
    /// Host DMA bytes.
    pub host_capacity: u64,
    /// Driver feature bits.
    pub features: u64,
    /// Allocation granule.
    pub page_size: u64,
}

impl DevGeom {
    fn from_info(i: &DeviceInfo) -> Self {
        DevGeom {
            arch: i.arch as u32,
            cores: i.cores_per_device,
            channels: i.hbm_channels,
            aligned_alloc: i.supports_aligned_alloc as u32,
            channel_size: i.hbm_channel_size,
            host_capacity: i.host_dma_capacity,
            features: i.feature_flags,
            page_size: i.page_size,
        }
    }
    /// The arch as an enum (INVALID for an unknown value).
    pub fn arch(&self) -> al_hal_tpb_arch_type_t {
        al_hal_tpb_arch_type_t::from_raw(self.arch)
            .unwrap_or(al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_INVALID)
    }
    /// The HBM channel that serves core `tpb` (public ABI §3 "HBM ↔ core").
    pub fn default_hbm(&self, tpb: u32) -> u32 {
        let channels = self.channels.max(1);
        let per = self.cores.max(1).div_ceil(channels).max(1);
        (tpb / per).min(channels - 1)
    }
}

/// Runtime-wide settings chosen at bring-up (spec §8, §9).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Settings {
    /// Scratchpad page size when not contiguous.
    pub scratchpad_page_size: u64,
    /// `experimental_contiguous_scratchpad` (spec §8).
    pub contiguous_scratchpad: u32,
    /// Reserved.
    pub _pad: u32,
}

/// A GPSIMD library set with room for its `ucode_lib_info_t` array (spec §6).
#[repr(C)]
pub struct UlibSet {
    /// The set header libnrt points at.
    pub info: ucode_lib_set_info_t,
    /// Per-library info (`info.libs` points here).
    pub libs: [ucode_lib_info_t; constants::ULIB_MAX_LIBS],
}
// SAFETY: both members are ZeroValid abi structs.
unsafe impl ZeroValid for UlibSet {}

impl UlibSet {
    /// The address of the set's header (`info`, its first member: repr(C) puts it at offset
    /// 0), what libnrt's callers hold. Address only.
    pub(crate) fn info_ptr(set: *mut UlibSet) -> *mut ucode_lib_set_info_t {
        set.cast()
    }

    /// The set whose header `info` is ([`Self::info_ptr`] undone). Address only.
    pub(crate) fn from_info_ptr(info: *mut ucode_lib_set_info_t) -> *mut UlibSet {
        info.cast()
    }
}
const _: () = assert!(core::mem::offset_of!(UlibSet, info) == 0);

// SAFETY: repr(C) of an array of `virtual_core_t` (a ZeroValid abi struct) and four u32s:
// all-zero is the empty table (no core owned).
unsafe impl ZeroValid for VcoreTable {}

/// A model_db table (`ht_t` + buckets).
pub type ModelDb = HtBuckets<MODEL_DB_BUCKETS>;
/// A 1024-bucket mem_ref_set (spec §5.2 `ht_init(&mr_set->mem_ref_set, 0x400, …)`).
pub type MemRefSet = HtBuckets<{ constants::MEM_REF_SET_BUCKETS }>;

/// Offset of `tpb_t.scratchpad`.
const TPB_SCRATCHPAD: usize = core::mem::offset_of!(tpb_t, scratchpad);

/// Runtime lifecycle (`NRT_STATE_*`).
pub const STATE_UNINIT: u32 = 0;
/// Initialised.
pub const STATE_INIT: u32 = 1;
/// Closed.
pub const STATE_CLOSED: u32 = 2;

mod access;
mod guards;
mod lifecycle;

pub(crate) use guards::*;

/// Per-device state the project keeps beside `mla_t`: libnrt's 590 008 bytes leave 11 bytes
/// of gaps, so the peaks and the host DMA ledger (like the driver's sysfs `total`/`peak`
/// counters) and the device-wide totals live here (spec §3.4; facts v2 `mla_t`,
/// `dma_mem_log_t`). Valid when all-zero; guarded by the device's `dmem_logger.lock`.
#[repr(C)]
pub(crate) struct DevExt {
    /// High-water mark of `dmem_logger.memory_usage_nc[nc][usage]`.
    pub(crate) dmem_peak_nc: [[AtomicU64; 23]; 8],
    /// Host DMA bytes per (core, usage) (libnrt books those apart from `memory_usage_nc`).
    pub(crate) host_usage_nc: [[AtomicU64; 23]; 8],
    /// High-water mark of `host_usage_nc`.
    pub(crate) host_peak_nc: [[AtomicU64; 23]; 8],
    /// Device bytes per (core, HBM channel): `dma_mem_log_t.memory_usage[4]` kept per core
    /// and summed on read (`ledger_hbm`), so cores on different channels share no counter.
    pub(crate) hbm_nc: [crate::ledger::CoreChannels; 8],
    /// The ledger lock of each core: held by every update of that core's rows and by readers
    /// that want one core's rows consistent (each row sums to its `[nc][22]`). Per core, on
    /// its own cache line: allocations on different cores never meet here (issue 16 item 7).
    pub(crate) ledger_locks: [crate::ledger::CoreLock; 8],
    /// High-water mark of the device's HBM bytes (the sum of its cores' `[nc][22]`; see
    /// `dml_add_entry` for how exact it is under concurrent allocation).
    pub(crate) peak_device_bytes: AtomicU64,
    /// High-water mark of the device's host DMA bytes (likewise).
    pub(crate) peak_host_bytes: AtomicU64,
    /// Device OOMs seen.
    pub(crate) oom_count: AtomicU64,
}

/// Per-core state the project keeps beside `tpb_t`, whose 24 members leave 8 bytes of gaps
/// (spec §2; facts v2 `tpb_t`, `tpb_sunda_t`). Valid when all-zero.
#[repr(C)]
pub(crate) struct CoreExt {
    /// The core's `physical_core_t` (what its GLOBAL allocator and dmems point at); written
    /// at bring-up under `init_lock`, read-only afterwards.
    pub(crate) pcore: UnsafeCell<physical_core_t>,
    /// 1 between bring-up and teardown of the core.
    pub(crate) is_init: AtomicU8,
    /// Held by an execution on this core (spec §7.2: one execution per core at a time).
    pub(crate) exec_lock: nrt_mutex_t,
    /// Executions run on this core.
    pub(crate) exec_count: AtomicU64,
    /// Times the ext-isa library was staged on this core (spec §6).
    pub(crate) ulib_stage_count: AtomicU32,
    /// Models using the staged ext-isa library (under `sunda.ulib_staging_lock`).
    pub(crate) ulib_users: AtomicU32,
}

/// Everything the core owns: the context tree and all static arenas. Valid when all-zero.
#[repr(C)]
pub struct CoreState {
    pub(crate) ctx: UnsafeCell<tdrv_ctx_t>,
    /// Per-device side state; rewritten (zeroed) only by `zero_tree`, under its contract.
    pub(crate) dev_ext: UnsafeCell<[DevExt; constants::MAX_MLA_PER_PROCESS]>,
    /// Per-core side state; rewritten (zeroed) only by `zero_tree`, under its contract.
    pub(crate) core_ext:
        UnsafeCell<[[CoreExt; constants::TPBS_PER_MLA]; constants::MAX_MLA_PER_PROCESS]>,
    pub(crate) geom: UnsafeCell<[DevGeom; constants::MAX_MLA_PER_PROCESS]>,
    pub(crate) vc: UnsafeCell<VcoreTable>,
    pub(crate) settings: UnsafeCell<Settings>,
    pub(crate) state: AtomicU32,
    /// The driver this block was initialised with (its address; 0 while not initialised):
    /// every call through an [`Nrt`] over another driver is refused (issue 16 item 2). Written
    /// by `init` only, beside `state`, so the gate reads it from the line it reads anyway.
    pub(crate) bound_drv: AtomicUsize,
    /// The host-memory provider it was initialised with (address; 0 for none).
    pub(crate) bound_host: AtomicUsize,
    /// This runtime's epoch ([`crate::handle`]): a process-unique value taken at each `init`,
    /// 0 while not initialised. Every handle carries the epoch it was made in.
    pub(crate) epoch: AtomicU32,
    /// The in-flight gate ([`Nrt::enter`], `sync::ShardedGate`): per shard, calls past the
    /// gate plus `sync::GATE_CLOSED` once `close` shut it; `close` waits for every shard's
    /// count to drain.
    pub(crate) active_calls: ShardedGate,
    pub(crate) init_lock: nrt_mutex_t,
    /// Held by executions while they move their data (`execute`): the simulated stand-in for
    /// spec §7.1's DMA ordering, so an execution's inputs are never read while another
    /// execution, on any core, is writing them. Striped by tensor storage
    /// ([`crate::tensor::ExecDataGuard`]): an execution takes the stripes of the storages it
    /// binds, so executions sharing a tensor serialise and independent ones (one per core)
    /// rarely meet (issue 16 item 7).
    pub(crate) exec_data_locks: [crate::ledger::CoreLock; crate::tensor::EXEC_DATA_STRIPES],
    /// The last device OOM (spec §3.2 `dml_driver_dump`), in the lock that guards it (issue
    /// 17: a lock that holds its data). The core's own `nrt_mutex_t` rather than a
    /// [`crate::sync::DataLock`]: its holder writes the OOM table, which asks the driver for
    /// pool figures, and this lock's waits relax instead of spinning.
    pub(crate) oom: lock_api::Mutex<nrt_mutex_t, LastOom>,
    /// The capacities the arenas were bound with (all-zero until bound).
    pub(crate) caps: Capacity,
    /// The storage, when this block owns it (a heap allocation of `owned_bytes`, freed on
    /// drop); null for storage the integrator owns (a `StaticState`).
    pub(crate) owned: *mut u8,
    pub(crate) owned_bytes: usize,
    pub(crate) dmems: Arena<dmem_t>,
    pub(crate) allocators: Arena<dmem_allocator_t>,
    /// Per `allocators` slot: 1 when the allocator was made through the public
    /// `dmem_allocator_create` (the caller's to destroy), 0 when the runtime owns it (a core's
    /// GLOBAL allocator, a model's MODEL allocators).
    pub(crate) caller_allocators: SideTable<AtomicU8>,
    /// Per device: 1 once aligned allocation is known to be unsupported (the device said so
    /// at bring-up, or the driver refused an aligned request) and the one-shot WARN is out:
    /// the latch of spec §3.2's `ndl_supports_align`. Cleared by `init`.
    pub(crate) align_unsupported: [AtomicU8; constants::MAX_MLA_PER_PROCESS],
    pub(crate) ref_nodes: Arena<dmem_ref_node_t>,
    pub(crate) dmem_lists: Arena<dmem_list_t>,
    pub(crate) models: Arena<model_t>,
    /// Per `models` slot: the model's IO table ([`crate::model::ModelIoEntry`]).
    pub(crate) model_io: SideTable<crate::model::ModelIoTable>,
    pub(crate) model_dbs: Arena<ModelDb>,
    pub(crate) mem_ref_sets: Arena<MemRefSet>,
    pub(crate) mem_ref_nodes: Arena<ht_node_t>,
    pub(crate) sp_cleanup: Arena<tdrv_scratchpad_cleanup_info_t>,
    pub(crate) ulib_sets: Arena<UlibSet>,
    pub(crate) tensors: Arena<nrt_tensor_t>,
    /// Per `tensors` slot: the tensor's name text (`nrt_tensor_t.name` points here).
    pub(crate) tensor_names: SideTable<[u8; crate::tensor::TENSOR_NAME_MAX + 1]>,
    pub(crate) storages: Arena<nrt_tensor_storage_t>,
    /// Tensor sets ([`crate::tensor::SetSlot`]), named by `SetHandle`s.
    pub(crate) sets: Arena<crate::tensor::SetSlot>,
}

/// Where each arena's storage starts in a state block's storage region, for a [`Capacity`]
/// (one computation for both sizing and binding, so the two cannot disagree).
#[derive(Copy, Clone, Debug)]
struct Plan {
    at: [usize; 16],
    total: usize,
}

impl Plan {
    /// The layout for `c` (which [`Capacity::check`] accepted: no overflow at 2^24 slots).
    const fn of(c: &Capacity) -> Plan {
        let (d, al, m, mr, u, t, s) = (
            c.dmems as usize,
            c.allocators as usize,
            c.models as usize,
            c.mr_sets as usize,
            c.ulib_sets as usize,
            c.tensors as usize,
            c.storages as usize,
        );
        let sets = c.sets as usize;
        let dbs = c.devices as usize * constants::TPBS_PER_MLA;
        let sizes = [
            Arena::<dmem_t>::storage_bytes(d),
            Arena::<dmem_allocator_t>::storage_bytes(al),
            SideTable::<AtomicU8>::bytes(al),
            Arena::<dmem_ref_node_t>::storage_bytes(d),
            Arena::<dmem_list_t>::storage_bytes(mr),
            Arena::<model_t>::storage_bytes(m),
            SideTable::<crate::model::ModelIoTable>::bytes(m),
            Arena::<ModelDb>::storage_bytes(dbs),
            Arena::<MemRefSet>::storage_bytes(mr),
            Arena::<ht_node_t>::storage_bytes(d),
            Arena::<tdrv_scratchpad_cleanup_info_t>::storage_bytes(m),
            Arena::<UlibSet>::storage_bytes(u),
            Arena::<nrt_tensor_t>::storage_bytes(t),
            SideTable::<[u8; crate::tensor::TENSOR_NAME_MAX + 1]>::bytes(t),
            Arena::<nrt_tensor_storage_t>::storage_bytes(s),
            Arena::<crate::tensor::SetSlot>::storage_bytes(sets),
        ];
        let mut at = [0; 16];
        let mut total = 0;
        let mut i = 0;
        while i < sizes.len() {
            at[i] = total;
            total += sizes[i];
            i += 1;
        }
        Plan { at, total }
    }
}

/// Zeroed storage for one [`CoreState`] and its arenas in a `static` (firmware without a
/// heap: it lands in `.bss`), sized at compile time for a [`Capacity`]:
/// `static STATE: StaticState<{ CoreState::storage_bytes(&CAPS) }> = StaticState::new();`
/// then [`StaticState::bind`] once at startup.
#[repr(C, align(64))]
pub struct StaticState<const B: usize> {
    state: UnsafeCell<core::mem::MaybeUninit<CoreState>>,
    storage: UnsafeCell<core::mem::MaybeUninit<[u8; B]>>,
    bound: AtomicU8,
}

// SAFETY: the state is only reached through the `&'static CoreState` that `bind` returns once
// (CoreState is Sync); the storage only through that state's arenas.
unsafe impl<const B: usize> Sync for StaticState<B> {}

impl<const B: usize> StaticState<B> {
    /// All zero (a `static` of it is `.bss`).
    pub const fn new() -> Self {
        // SAFETY: all-zero is valid for every member: MaybeUninit contents, a zero flag.
        unsafe { core::mem::MaybeUninit::<Self>::zeroed().assume_init() }
    }

    /// Binds the state block to the storage for `caps`, once, and returns it. Errors: `caps`
    /// out of range or needing more than `B` bytes (`InvalidArgument`), or already bound.
    pub fn bind(&'static self, caps: &Capacity) -> Result<&'static CoreState> {
        caps.check().map_err(Error::InvalidCapacity)?;
        if Plan::of(caps).total > B {
            return Err(Error::InvalidArgument(InvalidArg::StaticStorageTooSmall));
        }
        if self
            .bound
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(Error::InvalidArgument(InvalidArg::StaticStateBound));
        }
        // SAFETY: the flag made this the only caller ever to get here, so nobody references
        // the state or the storage; both are all-zero (a fresh static), which is a valid
        // CoreState (ZeroValid); the storage is 64-aligned (repr), B >= the plan's total,
        // and static, so it outlives the state.
        unsafe {
            let st = &mut *self.state.get().cast::<CoreState>();
            st.bind_storage(self.storage.get().cast(), caps);
            Ok(&*st)
        }
    }
}

impl<const B: usize> Default for StaticState<B> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every member is zero-valid: the abi structs, arenas and side tables by their own
// ZeroValid impls (unbound: no slots), the plain-integer tables trivially, a zero lock is
// unlocked, state 0 is UNINIT, a null `owned` owns nothing, and `oom.last` is a MaybeUninit
// only read after `set` became true (a zero `bool` is false; a zero `nrt_mutex_t` is unlocked,
// so the `lock_api::Mutex` around it, a raw lock and an UnsafeCell of zero-valid data, is
// zero-valid too).
unsafe impl ZeroValid for CoreState {}
// Not over-aligned: `Box::new_zeroed` of an alignment above the allocator's minimum memsets
// the whole 47 MB block instead of taking calloc's lazily zeroed pages (`sync::LINE_STRIDE`).
const _: () = assert!(core::mem::align_of::<CoreState>() <= 16);
// SAFETY: all shared mutation goes through atomics, the nrt_mutex_t locks placed where libnrt
// places them, or the arenas' own locks; raw pointers inside point into this same block.
unsafe impl Sync for CoreState {}
// SAFETY: as above; the state owns no thread-bound resource.
unsafe impl Send for CoreState {}

impl CoreState {
    /// Bytes of one `CoreState` header (the fixed part: the ABI context, the per-device and
    /// per-core side state, the arena headers); the arenas' storage comes on top
    /// ([`Self::storage_bytes`]). Untouched pages cost nothing.
    pub const BYTES: usize = core::mem::size_of::<Self>();

    /// Bytes of arena storage a state block of capacity `caps` needs (0 for a capacity
    /// [`Capacity::check`] refuses).
    pub const fn storage_bytes(caps: &Capacity) -> usize {
        match caps.check() {
            Ok(()) => Plan::of(caps).total,
            Err(_) => 0,
        }
    }

    /// Binds every arena to its part of `base`.
    ///
    /// # Safety
    /// `base` is 64-aligned and points at `storage_bytes(caps)` zeroed bytes used by nobody
    /// else and valid as long as `self`; `caps` passed [`Capacity::check`]; the block was
    /// never bound or used (nobody else references it).
    unsafe fn bind_storage(&mut self, base: *mut u8, caps: &Capacity) {
        let p = Plan::of(caps);
        let (d, al, m, mr, u, t, s) = (
            caps.dmems as usize,
            caps.allocators as usize,
            caps.models as usize,
            caps.mr_sets as usize,
            caps.ulib_sets as usize,
            caps.tensors as usize,
            caps.storages as usize,
        );
        let dbs = caps.devices as usize * constants::TPBS_PER_MLA;
        let sh = caps.shards as usize;
        // SAFETY: each part starts at its planned offset inside the storage (every offset is a
        // multiple of 64, the plan's sizes are the parts' own `storage_bytes`), so the parts
        // are aligned, in bounds and disjoint; zeroed and valid as long as `self` (contract).
        unsafe {
            let at = |i: usize| base.add(p.at[i]);
            self.dmems
                .bind(at(0), d, sh, "Capacity.dmems (NRT_DMEM_MAX_DMEMS)");
            self.allocators.bind(at(1), al, sh, "Capacity.allocators");
            self.caller_allocators.bind(at(2), al);
            self.ref_nodes
                .bind(at(3), d, sh, "Capacity.dmems (NRT_DMEM_MAX_DMEMS)");
            self.dmem_lists
                .bind(at(4), mr, 1, "Capacity.mr_sets (NRT_DMEM_MAX_MODELS)");
            self.models
                .bind(at(5), m, 1, "Capacity.models (NRT_DMEM_MAX_MODELS)");
            self.model_io.bind(at(6), m);
            self.model_dbs.bind(at(7), dbs, 1, "Capacity.devices");
            self.mem_ref_sets
                .bind(at(8), mr, 1, "Capacity.mr_sets (NRT_DMEM_MAX_MODELS)");
            self.mem_ref_nodes
                .bind(at(9), d, sh, "Capacity.dmems (NRT_DMEM_MAX_DMEMS)");
            self.sp_cleanup
                .bind(at(10), m, 1, "Capacity.models (NRT_DMEM_MAX_MODELS)");
            self.ulib_sets.bind(at(11), u, 1, "Capacity.ulib_sets");
            self.tensors
                .bind(at(12), t, sh, "Capacity.tensors (NRT_DMEM_MAX_TENSORS)");
            self.tensor_names.bind(at(13), t);
            self.storages
                .bind(at(14), s, sh, "Capacity.storages (NRT_DMEM_MAX_TENSORS)");
            self.sets.bind(
                at(15),
                caps.sets as usize,
                1,
                "Capacity.sets (NRT_DMEM_MAX_SETS)",
            );
        }
        self.caps = *caps;
    }

    /// The capacities this block was bound with.
    pub fn capacity(&self) -> Capacity {
        self.caps
    }

    /// A zeroed state on the heap with [`Capacity::DEFAULT`] (feature `alloc`): an
    /// independent instance for each call, for tests, the std shim or a hypervisor with a
    /// global allocator (firmware without a heap uses a [`StaticState`]). Never built on the
    /// stack.
    #[cfg(any(test, feature = "alloc"))]
    pub fn new_boxed() -> alloc::boxed::Box<Self> {
        match Self::with_capacity(&Capacity::DEFAULT) {
            Ok(b) => b,
            // DEFAULT passes `check` (a const assertion in config.rs), so only the allocation
            // can fail, and that is the global allocator's error, as for any Box.
            Err(_) => alloc::alloc::handle_alloc_error(core::alloc::Layout::new::<Self>()),
        }
    }

    /// A zeroed state on the heap whose arenas hold `caps` (feature `alloc`); the arena
    /// storage is one zeroed allocation, freed with the state. `InvalidArgument` naming the
    /// field for a capacity [`Capacity::check`] refuses.
    #[cfg(any(test, feature = "alloc"))]
    pub fn with_capacity(caps: &Capacity) -> Result<alloc::boxed::Box<Self>> {
        caps.check().map_err(Error::InvalidCapacity)?;
        let bytes = Plan::of(caps).total.max(1);
        let layout = core::alloc::Layout::from_size_align(bytes, 64)
            .map_err(|_| Error::InvalidArgument(InvalidArg::CapacityTooLarge))?;
        // SAFETY: CoreState is ZeroValid.
        let mut st = unsafe { alloc::boxed::Box::<Self>::new_zeroed().assume_init() };
        // SAFETY: non-zero size.
        let base = unsafe { alloc::alloc::alloc_zeroed(layout) };
        if base.is_null() {
            alloc::alloc::handle_alloc_error(layout);
        }
        st.owned = base;
        st.owned_bytes = bytes;
        // SAFETY: a fresh zeroed 64-aligned allocation of the plan's size, owned by `st` (freed
        // in its Drop, after every use); `caps` passed check; `st` is fresh and unshared.
        unsafe { st.bind_storage(base, caps) };
        Ok(st)
    }

    /// Number of static arenas in a `CoreState` (the length of [`Self::arena_stats`]).
    pub const ARENA_COUNT: usize = 13;

    /// Per-arena occupancy, for footprint reports.
    pub fn arena_stats(&self) -> [(&'static str, crate::arena::ArenaStats); Self::ARENA_COUNT] {
        [
            ("dmem_t", self.dmems.stats()),
            ("dmem_allocator_t", self.allocators.stats()),
            ("dmem_ref_node_t", self.ref_nodes.stats()),
            ("dmem_list_t", self.dmem_lists.stats()),
            ("model_t", self.models.stats()),
            ("model_db", self.model_dbs.stats()),
            ("mem_ref_set", self.mem_ref_sets.stats()),
            ("mem_ref_node", self.mem_ref_nodes.stats()),
            ("tdrv_scratchpad_cleanup_info_t", self.sp_cleanup.stats()),
            ("ulib_set", self.ulib_sets.stats()),
            ("nrt_tensor_t", self.tensors.stats()),
            ("nrt_tensor_storage_t", self.storages.stats()),
            ("tensor_set", self.sets.stats()),
        ]
    }
}

#[cfg(any(test, feature = "alloc"))]
impl Drop for CoreState {
    fn drop(&mut self) {
        if !self.owned.is_null() {
            if let Ok(layout) = core::alloc::Layout::from_size_align(self.owned_bytes, 64) {
                // SAFETY: `owned` came from `alloc_zeroed(layout)` in `with_capacity` (same
                // size and alignment); `&mut self` proves nobody uses the arenas any more.
                unsafe { alloc::alloc::dealloc(self.owned, layout) };
            }
        }
    }
}

/// The arena shard calls on physical core `(dev, tpb)` prefer (issue 16 item 7): one per
/// core, so calls on different cores of a device take different shard locks.
#[inline]
pub(crate) fn core_shard(dev: u32, tpb: u32) -> usize {
    dev as usize * constants::TPBS_PER_MLA + tpb as usize
}

/// Bring-up options (the environment of spec §9, already parsed by the caller).
#[derive(Copy, Clone, Debug, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct InitOptions {
    /// Logical cores: size, visible range, core count.
    pub vcores: VcoreOptions,
    /// Scratchpad page size (default [`DEFAULT_SCRATCHPAD_PAGE_SIZE`]).
    pub scratchpad_page_size: Option<u64>,
    /// `experimental_contiguous_scratchpad` (spec §8).
    pub contiguous_scratchpad: bool,
}

/// The runtime: a view binding the state block to its driver and, optionally, the host-memory
/// provider of VIRTUAL tensors. Cheap to copy; every operation of the core is a method on it.
///
/// Resources are bound once (issue 16 item 2): [`Nrt::init`] records the driver and the host
/// provider of the view it runs on, and until the next `init` every call through a view over
/// another driver or provider is refused ([`Error::ForeignResources`]), so frees can never
/// go to a driver or heap that did not hand the memory out. The lifetime `'a` ties the
/// borrowed resources to every view.
#[derive(Copy, Clone)]
pub struct Nrt<'a> {
    pub(crate) st: &'a CoreState,
    pub(crate) drv: &'a dyn Driver,
    pub(crate) host: Option<&'a dyn crate::tensor::HostMem>,
}

/// The address of a borrowed resource (the data pointer: vtables are not unique).
fn addr<T: ?Sized>(r: &T) -> usize {
    (r as *const T).cast::<()>() as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Preset, SimConfig, SimDevice};

    /// The accessors that replaced the behaviour modules' raw dereferences (docs/UNSAFE.md)
    /// take any pointer: one that is not a core, device or dmem of this tree is refused, and
    /// booking it changes nothing.
    #[test]
    fn accessors_refuse_pointers_outside_the_tree() {
        let st = CoreState::new_boxed();
        let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, 1)).unwrap();
        let n = Nrt::new(&st, &*sim);
        n.init(&InitOptions::default()).unwrap();
        let tpb = n.tpb(0, 0).unwrap();
        let inside = tpb.cast::<u8>().wrapping_add(8).cast::<tpb_t>();
        let mut foreign = [0u64; 8];
        let foreign_tpb = foreign.as_mut_ptr().cast::<tpb_t>();
        assert!(n.scratchpad_lock(tpb).is_some());
        assert!(n.scratchpad_lock(inside).is_none(), "not a tpb_t's start");
        assert!(n.scratchpad_lock(foreign_tpb).is_none());
        assert!(n.ulib_cache_lock(foreign_tpb).is_none());
        let call = n.enter().unwrap();
        assert!(n.tpb_allocator(&call, foreign_tpb).is_null());
        assert!(
            !n.tpb_allocator(&call, tpb).is_null(),
            "core 0's GLOBAL allocator"
        );
        assert_eq!(n.mla_index(n.mla_ptr(0)), Some(0));
        assert_eq!(n.mla_index(foreign.as_ptr().cast()), None);

        let foreign_dmem = foreign.as_ptr().cast::<dmem_t>();
        assert!(n.dmem_fixed(foreign_dmem).is_none());
        let before = n.ledger_snapshot(0);
        n.dml_add_entry(
            &call,
            n.mla_ptr(0),
            crate::dmem::Action::Alloc,
            foreign_dmem,
        );
        assert_eq!(n.ledger_snapshot(0), before, "a foreign dmem books nothing");

        // A live dmem reads back as allocated; once freed it is refused.
        let args = crate::dmem::AllocArgs::device(
            4096,
            0,
            dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_GENERIC,
            "probe",
        );
        let m = n
            .dmem_alloc_internal(&call, n.tpb_allocator(&call, tpb), &args, None)
            .unwrap();
        let d = n.dmem_fixed(m).unwrap();
        assert_eq!((d.device_id, d.allocated_size, d.refs), (0, 4096, 1));
        assert_eq!(crate::cstr::c_name(&d.hint), "probe");
        n.dmem_free_owned(&call, m).unwrap();
        assert!(n.dmem_fixed(m).is_none(), "freed: no longer live");
        drop(call);
        n.close().unwrap();
    }

    /// The logical-core table `init` writes under its token: each owned core's physical cores
    /// point back at its entry (spec §9).
    #[test]
    fn physical_cores_point_at_their_logical_core() {
        let st = CoreState::new_boxed();
        let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn2, 1)).unwrap();
        let n = Nrt::new(&st, &*sim);
        n.init(&InitOptions::default()).unwrap();
        let g = n.enter().unwrap();
        let vc = n.vcores(&g);
        assert!(vc.num_owned > 0);
        let entry = n.vcore_entry_ptrs();
        for k in 0..vc.num_owned as usize {
            let v = &vc.owned[k];
            assert_eq!(v.vtpb_idx as usize, k);
            for p in v.cores() {
                assert_eq!(p.vcore, entry(k));
                // SAFETY: a gated call is in flight (`g`), so `init` / `close`, the only
                // writers of the cell, are not running.
                let back = unsafe { (*n.pcore_ptr(p.device_id, p.device_tpb_idx)).vcore };
                assert_eq!(back, entry(k));
            }
        }
        drop(g);
        n.close().unwrap();
    }
}
