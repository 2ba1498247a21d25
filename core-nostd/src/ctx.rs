//! The process-global context tree `tdrv_ctx → mla[32] → tpb[8]` (spec §1): its state block,
//! the [`Nrt`] handle every operation goes through, bring-up (`db_tdrv_ctx_init`), the resolver
//! (`db_physical_core_get_mla_and_tpb`, §1.1) and teardown (`tdrv_destroy`, §12).
//!
//! [`CoreState`] is a header bound to its storage: the context region (the `tdrv_ctx_t`
//! holding `Capacity::devices` devices, [`ContextLayout`]) and every static arena. Both are
//! valid when all-zero, so they live in `.bss` (firmware, [`StaticState`]) or in a zeroed
//! allocation (independent instances for Rust users, tests and the C ABI singleton), never on
//! the stack.

use crate::atomic::AtomicU64;
use core::cell::UnsafeCell;
use core::ptr::{addr_of_mut, null_mut};
use core::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};

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
mod bind;
mod guards;
mod lifecycle;
mod model_access;
mod tensor_access;

pub(crate) use bind::{Binder, Part};
pub(crate) use guards::*;
pub(crate) use model_access::*;
pub(crate) use tensor_access::{
    BindChunk, BoundTensors, Last, StorageMem, StorageOwner, StorageRef, TensorRef,
};

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
    /// its own cache line: allocations on different cores never meet here.
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

/// Blocks the driver refused to free (`memory_free` failed) since `init`: it still holds
/// them. All-zero is none.
#[derive(Default)]
pub(crate) struct DriverKeptBooks {
    blocks: AtomicU64,
    bytes: AtomicU64,
}

impl DriverKeptBooks {
    /// One more block of `bytes` kept.
    pub(crate) fn note(&self, bytes: u64) {
        self.blocks.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    /// `(blocks, bytes)`.
    pub(crate) fn get(&self) -> (u64, u64) {
        (
            self.blocks.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
    /// Back to none (a new `init`).
    pub(crate) fn reset(&self) {
        self.blocks.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
    }
}

/// The driver handles of live dmems, as a set of keys (`handle ^ device << 59`) in
/// [`LIVE_HANDLE_SLOTS`] slots, each key in one of the [`LIVE_HANDLE_PROBES`] slots after its
/// hash: a new handle is looked for in those slots only (one or two cache lines). A key finds
/// no free slot when the set is crowded, and is then not recorded: the check misses it (a
/// duplicate of it goes unnoticed) but never refuses a handle that is not in use, since a
/// found key is confirmed among the live dmems. All-zero is empty.
pub(crate) struct LiveHandles {
    slots: [AtomicU64; LIVE_HANDLE_SLOTS],
}

/// Slots of [`LiveHandles`] (32 KiB).
pub(crate) const LIVE_HANDLE_SLOTS: usize = 1 << 12;
/// Slots a key may sit in, from its hash on.
pub(crate) const LIVE_HANDLE_PROBES: usize = 16;

impl LiveHandles {
    /// The key of `(dev, handle)` (0, the empty slot, is never a key: handle 0 is refused
    /// before anything is recorded).
    fn key(dev: u32, handle: u64) -> u64 {
        handle ^ (u64::from(dev) << 59)
    }
    fn probe(&self, key: u64) -> impl Iterator<Item = &AtomicU64> {
        let h = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize;
        (0..LIVE_HANDLE_PROBES).map(move |i| &self.slots[(h + i) % LIVE_HANDLE_SLOTS])
    }
    /// Whether a live dmem may hold `handle` on `dev` (a key collision is possible only
    /// between handles that use their top five bits).
    pub(crate) fn maybe(&self, dev: u32, handle: u64) -> bool {
        let key = Self::key(dev, handle);
        key != 0 && self.probe(key).any(|s| s.load(Ordering::Acquire) == key)
    }
    /// A dmem holding `handle` on `dev` is published.
    pub(crate) fn add(&self, dev: u32, handle: u64) {
        let key = Self::key(dev, handle);
        if key == 0 {
            return;
        }
        // A read first: a failed compare-exchange still takes the line.
        for s in self.probe(key) {
            if s.load(Ordering::Relaxed) == 0
                && s.compare_exchange(0, key, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
        }
    }
    /// That dmem is finalised.
    pub(crate) fn remove(&self, dev: u32, handle: u64) {
        let key = Self::key(dev, handle);
        if key == 0 {
            return;
        }
        for s in self.probe(key) {
            if s.load(Ordering::Relaxed) == key
                && s.compare_exchange(key, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
        }
    }
    /// Empty (a new `init`).
    pub(crate) fn clear(&self) {
        for s in &self.slots {
            s.store(0, Ordering::Relaxed);
        }
    }
}

/// What the driver refused to free (its `memory_free` failed) since the runtime's `init`, and
/// still holds: [`Nrt::driver_kept`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DriverKept {
    /// Blocks.
    pub blocks: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// The members `tdrv_ctx_t` places after `mla[32]` (spec §1; facts v2 `tdrv_ctx_t`), in
/// libnrt's order and spacing: in a context of 32 devices they lie at libnrt's offsets, in a
/// compact one right after the last device ([`ContextLayout::tail`]). Valid when all-zero.
#[repr(C)]
pub struct CtxTail {
    /// `tdrv_ctx_t.num_ptpb`: entries of `ptpbs` in use.
    pub num_ptpb: u32,
    _reserved_4: [u8; 4],
    /// `tdrv_ctx_t.ptpbs`: the flat physical-core index.
    pub ptpbs: [ptpb_info_t; 256],
    /// `tdrv_ctx_t.host_did_to_rid_map`: host device id → routing id.
    pub host_did_to_rid_map: [u32; 32],
    /// `tdrv_ctx_t.host_did_to_rid_map_size`.
    pub host_did_to_rid_map_size: u32,
    _reserved_4236: [u8; 4],
    /// `tdrv_ctx_t.reservation_id`.
    pub reservation_id: u64,
    /// `tdrv_ctx_t.pod_type`.
    pub pod_type: u32,
    /// `tdrv_ctx_t.pod_sz`.
    pub pod_sz: u32,
    /// `tdrv_ctx_t.pod_node_id`.
    pub pod_node_id: u32,
    /// `tdrv_ctx_t.pod_mode`.
    pub pod_mode: u32,
    /// `tdrv_ctx_t.target`: the arch of device 0.
    pub target: u32,
    _reserved_4268: [u8; 124],
}

/// Offset of `mla[0]` in `tdrv_ctx_t`.
const MLA_AT: usize = core::mem::offset_of!(tdrv_ctx_t, mla);
/// Offset of the first member after `mla[32]` in `tdrv_ctx_t`.
const TAIL_AT: usize = core::mem::offset_of!(tdrv_ctx_t, num_ptpb);

// The tail mirrors libnrt's members after `mla[32]` byte for byte.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(offset_of!(tdrv_ctx_t, num_mla) == 0);
    assert!(TAIL_AT == MLA_AT + constants::MAX_MLA_PER_PROCESS * size_of::<mla_t>());
    assert!(TAIL_AT + size_of::<CtxTail>() == size_of::<tdrv_ctx_t>());
    assert!(core::mem::align_of::<CtxTail>() <= 8);
    assert!(TAIL_AT + offset_of!(CtxTail, ptpbs) == offset_of!(tdrv_ctx_t, ptpbs));
    assert!(
        TAIL_AT + offset_of!(CtxTail, host_did_to_rid_map)
            == offset_of!(tdrv_ctx_t, host_did_to_rid_map)
    );
    assert!(
        TAIL_AT + offset_of!(CtxTail, host_did_to_rid_map_size)
            == offset_of!(tdrv_ctx_t, host_did_to_rid_map_size)
    );
    assert!(
        TAIL_AT + offset_of!(CtxTail, reservation_id) == offset_of!(tdrv_ctx_t, reservation_id)
    );
    assert!(TAIL_AT + offset_of!(CtxTail, pod_type) == offset_of!(tdrv_ctx_t, pod_type));
    assert!(TAIL_AT + offset_of!(CtxTail, pod_mode) == offset_of!(tdrv_ctx_t, pod_mode));
    assert!(TAIL_AT + offset_of!(CtxTail, target) == offset_of!(tdrv_ctx_t, target));
};

/// Where the parts of a state block's context region lie, for the number of devices it holds
/// (`Capacity::devices`, spec §1). The region starts the storage (64-aligned) and is the
/// address C publishes as `tdrv_ctx_0` ([`CoreState::context_addr`]):
///
/// - `tdrv_ctx_t.num_mla` and `mla[0..devices]` at libnrt's offsets, so a debugger reading
///   them with libnrt's DWARF finds them;
/// - the members libnrt places after `mla[32]` ([`CtxTail`]) at [`Self::tail`]: libnrt's
///   offset for 32 devices (the region is then exactly libnrt's `tdrv_ctx_t`), right after
///   `mla[devices - 1]` for a compact profile (where libnrt's DWARF does not find them);
/// - the project's per-device and per-core side state (`DevExt`, `CoreExt`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ContextLayout {
    /// Devices (`mla_t` slots) the context holds.
    pub devices: u32,
    /// Offset of [`CtxTail`] (`num_ptpb` onwards).
    pub tail: usize,
    /// Offset of the per-device side state.
    pub dev_ext: usize,
    /// Offset of the per-core side state.
    pub core_ext: usize,
    /// Bytes of the region (a multiple of 64).
    pub bytes: usize,
}

impl ContextLayout {
    /// The layout for `devices` devices (1..=32; clamped into that range).
    pub const fn of(devices: u32) -> ContextLayout {
        use core::mem::size_of;
        let n = if devices == 0 {
            1
        } else if devices as usize > constants::MAX_MLA_PER_PROCESS {
            constants::MAX_MLA_PER_PROCESS
        } else {
            devices as usize
        };
        let tail = MLA_AT + n * size_of::<mla_t>();
        let dev_ext = (tail + size_of::<CtxTail>()).next_multiple_of(64);
        let core_ext = (dev_ext + n * size_of::<DevExt>()).next_multiple_of(64);
        let bytes =
            (core_ext + n * constants::TPBS_PER_MLA * size_of::<CoreExt>()).next_multiple_of(64);
        ContextLayout {
            devices: n as u32,
            tail,
            dev_ext,
            core_ext,
            bytes,
        }
    }

    /// Whether the region is libnrt's whole `tdrv_ctx_t` (32 devices: every member at
    /// libnrt's offset).
    pub const fn is_full(&self) -> bool {
        self.tail == TAIL_AT
    }
}

const _: () = assert!(ContextLayout::of(32).is_full());
const _: () = assert!(core::mem::align_of::<DevExt>() <= 64);
const _: () = assert!(core::mem::align_of::<CoreExt>() <= 64);

/// Everything the core owns: the context tree and all static arenas. Valid when all-zero;
/// reachable only bound to its storage ([`StaticState::bind`], [`CoreState::with_storage`]).
#[repr(C)]
pub struct CoreState {
    /// The context region in the storage ([`ContextLayout`]): `tdrv_ctx_t`'s first member and
    /// `mla[0..devices]` at libnrt's offsets, the members libnrt places after `mla[32]`
    /// ([`CtxTail`]), then the per-device and per-core side state. Null until bound.
    pub(crate) ctx: *mut u8,
    /// Where the parts of the context region lie (all-zero until bound).
    pub(crate) ctx_layout: ContextLayout,
    /// Bytes the last re-initialisation zeroed ([`CoreState::reinit_bytes`]).
    pub(crate) reinit_bytes: AtomicUsize,
    pub(crate) geom: UnsafeCell<[DevGeom; constants::MAX_MLA_PER_PROCESS]>,
    pub(crate) vc: UnsafeCell<VcoreTable>,
    pub(crate) settings: UnsafeCell<Settings>,
    pub(crate) state: AtomicU32,
    /// The driver this block was initialised with (its address; 0 while not initialised):
    /// every call through an [`Nrt`] over another driver is refused. Written
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
    /// What threads hold while they run callbacks or keep an exec lock past a call
    /// ([`crate::sync::Reentry`]): the calls that would wait for their own thread are refused.
    pub(crate) reentry: crate::sync::Reentry,
    /// What the driver refused to free since `init` ([`Nrt::driver_kept`]).
    pub(crate) driver_kept: DriverKeptBooks,
    /// The driver handles of live dmems ([`LiveHandles`]).
    pub(crate) live_handles: LiveHandles,
    /// The ledger's own state beside the tree's rows: the last device OOM
    /// ([`crate::ledger::LedgerPool`]).
    pub(crate) ledger: crate::ledger::LedgerPool,
    /// The capacities the arenas were bound with (all-zero until bound).
    pub(crate) caps: Capacity,
    /// The storage, when this block owns it (`owned_bytes` bytes, given back on drop by
    /// `owned_free`); null for storage the integrator owns (a `StaticState`).
    pub(crate) owned: *mut u8,
    pub(crate) owned_bytes: usize,
    pub(crate) owned_free: Option<StorageFree>,
    /// The dmem domain's arenas (spec §3): dmems, allocators, weak GC indexes.
    pub(crate) dmem: crate::dmem::DmemPool,
    /// The model domain's arenas (spec §4, §5, §6): models, model_dbs, mem_ref sets, ulib sets.
    pub(crate) model: crate::model::ModelPool,
    /// The tensor domain's arenas (spec §7): tensors, storages, sets, the execute data locks.
    pub(crate) tensor: crate::tensor::TensorPool,
}

/// Where each part of a state block's storage starts, for a [`Capacity`]: the context region
/// ([`ContextLayout`]) first, then the pools' regions, their own `parts` lists summed, the
/// lists their `bind` methods then hand out (one computation for both sizing and binding, so
/// the two cannot disagree).
#[derive(Copy, Clone, Debug)]
struct Plan {
    /// The context region (at offset 0).
    ctx: ContextLayout,
    /// Offsets of the dmem, model and tensor regions.
    at: [usize; 3],
    /// Their sizes.
    bytes: [usize; 3],
    total: usize,
}

impl Plan {
    /// The layout for `c` (which [`Capacity::check`] accepted: no overflow at 2^24 slots).
    const fn of(c: &Capacity) -> Plan {
        let ctx = ContextLayout::of(c.devices);
        let bytes = [
            Part::total(&crate::dmem::DmemPool::parts(c)),
            Part::total(&crate::model::ModelPool::parts(c)),
            Part::total(&crate::tensor::TensorPool::parts(c)),
        ];
        let at0 = ctx.bytes;
        Plan {
            ctx,
            at: [at0, at0 + bytes[0], at0 + bytes[0] + bytes[1]],
            bytes,
            total: at0 + bytes[0] + bytes[1] + bytes[2],
        }
    }
}

/// Zeroed storage for one [`CoreState`], its context tree and its arenas in a `static`
/// (firmware without a heap: it lands in `.bss`), sized at compile time for a [`Capacity`]:
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
            let _ = st.bind_storage(self.storage.get().cast(), caps, None);
            Ok(&*st)
        }
    }
}

impl<const B: usize> Default for StaticState<B> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every member is zero-valid: the abi structs by their own ZeroValid impls, the pools
// by theirs (below), the plain-integer tables trivially, a zero lock is unlocked, state 0 is
// UNINIT, a null `ctx` is an unbound block (only bound blocks are handed out: `StaticState::bind`,
// `with_storage`) and a null `owned` owns nothing (a `None` `owned_free`: a null fn pointer).
unsafe impl ZeroValid for CoreState {}
// SAFETY: arenas and side tables are zero-valid (unbound: no slots) and so are atomics.
unsafe impl ZeroValid for crate::dmem::DmemPool {}
// SAFETY: arenas and side tables only (unbound when zero).
unsafe impl ZeroValid for crate::model::ModelPool {}
// SAFETY: arenas and side tables (unbound when zero) and an array of locks (a zero
// `CoreLock` holds an unlocked `nrt_mutex_t`).
unsafe impl ZeroValid for crate::tensor::TensorPool {}
// SAFETY: `oom.last` and `oom.channel` are MaybeUninit, only read after `set` became true (a
// zero `bool` is false); a zero `nrt_mutex_t` is unlocked, so the `lock_api::Mutex` around it,
// a raw lock and an UnsafeCell of zero-valid data, is zero-valid too.
unsafe impl ZeroValid for crate::ledger::LedgerPool {}
// SAFETY: repr(C) of integers and integer arrays: all-zero is an empty entry.
unsafe impl ZeroValid for crate::model::ModelIoEntry {}
// Not over-aligned: `Box::new_zeroed` of an alignment above the allocator's minimum memsets
// the whole block instead of taking calloc's lazily zeroed pages (`sync::LINE_STRIDE`).
const _: () = assert!(core::mem::align_of::<CoreState>() <= 16);
// SAFETY: all shared mutation goes through atomics, the nrt_mutex_t locks placed where libnrt
// places them, or the arenas' own locks; raw pointers inside point into this same block.
unsafe impl Sync for CoreState {}
// SAFETY: as above; the state owns no thread-bound resource.
unsafe impl Send for CoreState {}

impl CoreState {
    /// Bytes of one `CoreState` header (the fixed part: the arena headers, the logical-core
    /// table, the device geometry); the context region and the arenas' storage come on top
    /// ([`Self::storage_bytes`]). Untouched pages cost nothing.
    pub const BYTES: usize = core::mem::size_of::<Self>();

    /// Bytes of storage a state block of capacity `caps` needs: its context region for
    /// `caps.devices` devices ([`Self::context_layout`]) and its arenas (0 for a capacity
    /// [`Capacity::check`] refuses).
    pub const fn storage_bytes(caps: &Capacity) -> usize {
        match caps.check() {
            Ok(()) => Plan::of(caps).total,
            Err(_) => 0,
        }
    }

    /// Binds the context region and every pool's arenas to their regions of `base` (each
    /// pool's `bind` walks the same `parts` list that sized its region). Returns whether every part was bound exactly (by
    /// construction it is; a refused part leaves its arena unbound: full, not unsound).
    ///
    /// # Safety
    /// `base` is 64-aligned and points at `storage_bytes(caps)` zeroed bytes used by nobody
    /// else and valid as long as `self`; `caps` passed [`Capacity::check`]; the block was
    /// never bound or used (nobody else references it).
    unsafe fn bind_storage(
        &mut self,
        base: *mut u8,
        caps: &Capacity,
        in_use: Option<crate::arena::InUse>,
    ) -> bool {
        let p = Plan::of(caps);
        self.ctx = base;
        self.ctx_layout = p.ctx;
        // The context region is what debuggers and core-file readers walk from `tdrv_ctx_0`.
        if let Some(hook) = in_use {
            hook(base, p.ctx.bytes);
        }
        // SAFETY: the regions lie one after another inside the storage (`p.total` =
        // `storage_bytes(caps)` bytes, contract), each a sum of multiples of 64, so each
        // starts 64-aligned, in bounds and disjoint from the others; zeroed, unshared and
        // valid as long as `self`, whose pools are the only ones given these binders.
        let (mut d, mut m, mut t) = unsafe {
            (
                Binder::new(base.add(p.at[0]), p.bytes[0], in_use),
                Binder::new(base.add(p.at[1]), p.bytes[1], in_use),
                Binder::new(base.add(p.at[2]), p.bytes[2], in_use),
            )
        };
        self.dmem.bind(&mut d, caps);
        self.model.bind(&mut m, caps);
        self.tensor.bind(&mut t, caps);
        self.caps = *caps;
        let bound = d.finish() & m.finish() & t.finish();
        debug_assert!(bound, "a pool's bind does not follow its parts list");
        bound
    }

    /// The capacities this block was bound with.
    pub fn capacity(&self) -> Capacity {
        self.caps
    }

    /// The address of this block's context tree (the `tdrv_ctx_t` libnrt's `tdrv_ctx_0`
    /// points at, spec §1), for a C library to publish where debuggers and `nrt-dmem inspect`
    /// look for it. It holds [`Self::context_layout`]`.devices` devices: all of libnrt's
    /// `tdrv_ctx_t` for 32, its first member and `mla[0..devices]` otherwise. Only an address:
    /// nothing may read or write the tree through it.
    pub fn context_addr(&self) -> *const tdrv_ctx_t {
        self.ctx.cast_const().cast()
    }

    /// Where the parts of this block's context region lie ([`ContextLayout`], spec §1).
    pub fn context_layout(&self) -> ContextLayout {
        self.ctx_layout
    }

    /// Bytes the last re-initialisation ([`Nrt::init`] after [`Nrt::close`], spec §1, §12)
    /// zeroed of the context region: the first member, the devices that runtime attached, the tail and
    /// their side state, not the devices it never used (0 before any re-initialisation).
    pub fn reinit_bytes(&self) -> usize {
        self.reinit_bytes.load(Ordering::Relaxed)
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
    /// storage is one zeroed allocation, freed with the state. It is taken from the global
    /// allocator's `alloc_zeroed` at the allocator's natural alignment and aligned inside, so a
    /// large one comes as lazily zeroed pages (calloc's fresh mapping) and costs memory only
    /// as slots are used. `InvalidArgument` naming the field for a capacity
    /// [`Capacity::check`] refuses.
    #[cfg(any(test, feature = "alloc"))]
    pub fn with_capacity(caps: &Capacity) -> Result<alloc::boxed::Box<Self>> {
        caps.check().map_err(Error::InvalidCapacity)?;
        let bytes = Plan::of(caps)
            .total
            .max(1)
            .checked_add(STORAGE_SLACK)
            .ok_or(Error::InvalidArgument(InvalidArg::CapacityTooLarge))?;
        let layout = core::alloc::Layout::from_size_align(bytes, 16)
            .map_err(|_| Error::InvalidArgument(InvalidArg::CapacityTooLarge))?;
        // SAFETY: non-zero size.
        let raw = unsafe { alloc::alloc::alloc_zeroed(layout) };
        if raw.is_null() {
            alloc::alloc::handle_alloc_error(layout);
        }
        /// Frees what `with_capacity` allocated.
        unsafe fn free_heap(p: *mut u8, bytes: usize) {
            if let Ok(layout) = core::alloc::Layout::from_size_align(bytes, 16) {
                // SAFETY: `p` and `bytes` are what `with_capacity` got from `alloc_zeroed` with
                // this layout (the contract of `owned_free`).
                unsafe { alloc::alloc::dealloc(p, layout) };
            }
        }
        // SAFETY: `raw` is `bytes` zeroed bytes of ours, freed by `free_heap` with the same
        // size.
        unsafe { Self::with_storage(caps, raw, bytes, free_heap, None) }
    }

    /// A zeroed state on the heap (feature `alloc`) whose arenas live in storage the caller
    /// provides and the state owns: `bytes` zeroed bytes at `base` (at least
    /// [`Self::storage_bytes`]`(caps) + 63`, any alignment: the arenas start at the first
    /// 64-aligned byte), given back with `free(base, bytes)` when the state drops. The std
    /// shim maps it with `MAP_NORESERVE`, so capacity that is never used costs address space
    /// only; `in_use`, when given, is told about each arena's slots as they come into use
    /// ([`crate::arena::InUse`]: the shim puts them, and only them, into core dumps).
    /// `InvalidArgument` for a capacity [`Capacity::check`] refuses or storage that is too
    /// small; the storage is freed on error too.
    ///
    /// # Safety
    /// `base` points at `bytes` zeroed bytes, writable, used by nobody else and valid until
    /// `free(base, bytes)`, which must release exactly them.
    #[cfg(any(test, feature = "alloc"))]
    pub unsafe fn with_storage(
        caps: &Capacity,
        base: *mut u8,
        bytes: usize,
        free: StorageFree,
        in_use: Option<crate::arena::InUse>,
    ) -> Result<alloc::boxed::Box<Self>> {
        let fits = caps.check().map_err(Error::InvalidCapacity).and_then(|()| {
            let need = Plan::of(caps).total.max(1);
            let pad = base.align_offset(64);
            match need.checked_add(pad) {
                Some(n) if n <= bytes => Ok(pad),
                _ => Err(Error::InvalidArgument(InvalidArg::StaticStorageTooSmall)),
            }
        });
        let pad = match fits {
            Ok(pad) => pad,
            Err(e) => {
                // SAFETY: the caller's storage, released as its contract says.
                unsafe { free(base, bytes) };
                return Err(e);
            }
        };
        // SAFETY: CoreState is ZeroValid.
        let mut st = unsafe { alloc::boxed::Box::<Self>::new_zeroed().assume_init() };
        st.owned = base;
        st.owned_bytes = bytes;
        st.owned_free = Some(free);
        // SAFETY: `base + pad` is 64-aligned with at least the plan's size of zeroed bytes
        // behind it (checked above), owned by `st` (released in its Drop, after every use);
        // `caps` passed check; `st` is fresh and unshared.
        let _ = unsafe { st.bind_storage(base.add(pad), caps, in_use) };
        Ok(st)
    }

    /// Number of static arenas in a `CoreState` (the length of [`Self::arena_stats`]).
    pub const ARENA_COUNT: usize = crate::dmem::DmemPool::ARENAS
        + crate::model::ModelPool::ARENAS
        + crate::tensor::TensorPool::ARENAS;

    /// Per-arena occupancy, for footprint reports.
    pub fn arena_stats(&self) -> [(&'static str, crate::arena::ArenaStats); Self::ARENA_COUNT] {
        let (d, m, t) = (self.dmem.stats(), self.model.stats(), self.tensor.stats());
        let mut out = [("", crate::arena::ArenaStats::default()); Self::ARENA_COUNT];
        for (o, s) in out.iter_mut().zip(d.into_iter().chain(m).chain(t)) {
            *o = s;
        }
        out
    }
}

#[cfg(any(test, feature = "alloc"))]
impl Drop for CoreState {
    fn drop(&mut self) {
        if let (false, Some(free)) = (self.owned.is_null(), self.owned_free) {
            // SAFETY: `owned` and `owned_bytes` are the storage `with_storage` was given with
            // `free` (its contract); `&mut self` proves nobody uses the arenas any more.
            unsafe { free(self.owned, self.owned_bytes) };
        }
    }
}

/// How a state block gives back storage it owns ([`CoreState::with_storage`]): called once
/// with the base and length it was given.
pub type StorageFree = unsafe fn(*mut u8, usize);

/// Bytes [`CoreState::with_capacity`] adds to a plan so that it can align the arenas inside
/// an allocation of the allocator's natural alignment.
#[cfg(any(test, feature = "alloc"))]
const STORAGE_SLACK: usize = 64;

/// The arena shard calls on physical core `(dev, tpb)` prefer: one per
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
/// Resources are bound once: [`Nrt::init`] records the driver and the host
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

    /// Each pool binds its arenas from the same `parts` list that sized its region: for the
    /// default, the one-device and an odd little capacity, every arena holds exactly what its
    /// `Capacity` field asks for (a part bound out of order, or refused, would leave an arena
    /// at another size or unbound, and fail `bind_storage`'s debug assertion first).
    #[test]
    fn every_arena_holds_what_its_capacity_asks() {
        let odd = Capacity {
            devices: 2,
            dmems: 7,
            allocators: 17,
            models: 3,
            io_chunks: 4,
            mr_sets: 5,
            ulib_sets: 1,
            tensors: 9,
            storages: 11,
            sets: 2,
            set_chunks: 6,
            bind_chunks: 7,
            shards: 3,
        };
        for caps in [Capacity::DEFAULT, Capacity::ONE_DEVICE, odd] {
            let st = CoreState::with_capacity(&caps).unwrap();
            let got = st.arena_stats().map(|(name, s)| (name, s.capacity));
            let (d, m, mr) = (caps.dmems, caps.models, caps.mr_sets);
            let want = [
                ("dmem_t", d),
                ("dmem_allocator_t", caps.allocators),
                ("dmem_ref_node_t", d),
                ("dmem_list_t", mr),
                ("model_t", m),
                ("model io chunk", caps.io_chunks),
                ("model_db", caps.devices * constants::TPBS_PER_MLA as u32),
                ("mem_ref_set", mr),
                ("mem_ref_node", d),
                ("tdrv_scratchpad_cleanup_info_t", m),
                ("ulib_set", caps.ulib_sets),
                ("nrt_tensor_t", caps.tensors),
                ("nrt_tensor_storage_t", caps.storages),
                ("tensor_set", caps.sets),
                ("tensor set chunk", caps.set_chunks),
                ("bound tensor chunk", caps.bind_chunks),
            ]
            .map(|(name, n)| (name, n as usize));
            assert_eq!(got, want, "{caps:?}");
        }
    }

    /// A compact context (one device) keeps `num_mla` and `mla[0]` at libnrt's offsets from
    /// the published address, puts the members after `mla[32]` right after `mla[0]` instead
    /// of at libnrt's offset, and costs one device's bytes; a 32-device context is libnrt's
    /// `tdrv_ctx_t` whole, tail at libnrt's offsets.
    #[test]
    fn a_compact_context_keeps_libnrt_offsets_for_the_devices_it_holds() {
        use core::mem::{offset_of, size_of};
        for (caps, devices) in [(Capacity::ONE_DEVICE, 1u32), (Capacity::DEFAULT, 32)] {
            let st = CoreState::with_capacity(&caps).unwrap();
            let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn2, 1)).unwrap();
            let n = Nrt::new(&st, &*sim);
            n.init(&InitOptions::default()).unwrap();
            let base = st.context_addr() as usize;
            let l = st.context_layout();
            assert_eq!(l.devices, devices);
            assert_eq!(
                n.mla_ptr(0) as usize - base,
                offset_of!(tdrv_ctx_t, mla),
                "mla[0] at libnrt's offset"
            );
            let tail = n.ctx_tail() as usize - base;
            assert_eq!(tail, l.tail);
            if devices == 32 {
                assert!(l.is_full());
                assert_eq!(tail, offset_of!(tdrv_ctx_t, num_ptpb));
            } else {
                assert!(!l.is_full());
                assert_eq!(tail, offset_of!(tdrv_ctx_t, mla) + size_of::<mla_t>());
                assert!(l.bytes < size_of::<tdrv_ctx_t>() / 16, "{l:?}");
            }
            let call = n.enter().unwrap();
            let cores = n.dev_geom(&call, 0).cores;
            // SAFETY: a gated call is in flight, so `init` / `close`, the only writers of the
            // tree, are not running; copies of plain fields.
            let (num_mla, used, idx, num_ptpb, first) = unsafe {
                let m = n.mla_ptr(0);
                let t = n.ctx_tail();
                (
                    *n.num_mla_ptr(),
                    (*m).is_used,
                    (*m).mla_idx,
                    (*t).num_ptpb,
                    (*t).ptpbs[0].mla,
                )
            };
            assert_eq!((num_mla, used, idx), (1, 1, 0));
            assert_eq!((num_ptpb, first), (cores, n.mla_ptr(0)));
            // Resolving a device the context does not hold is refused, not read.
            let far = physical_core_t::new(devices, 0);
            assert!(n.db_physical_core_get_mla_and_tpb(&far).is_err());
            drop(call);
            n.close().unwrap();
        }
        assert!(
            CoreState::storage_bytes(&Capacity::DEFAULT)
                - CoreState::storage_bytes(&Capacity {
                    devices: 1,
                    ..Capacity::DEFAULT
                })
                >= 31 * size_of::<mla_t>()
        );
    }

    /// A re-initialisation zeroes the devices the closed runtime attached, the first member,
    /// the tail and their side state, not the 32-device context the block holds.
    #[test]
    fn a_reinit_zeroes_only_the_devices_that_were_used() {
        use core::mem::size_of;
        let st = CoreState::with_capacity(&Capacity::DEFAULT).unwrap();
        assert!(st.context_layout().is_full());
        let per_device = size_of::<mla_t>()
            + size_of::<DevExt>()
            + constants::TPBS_PER_MLA * size_of::<CoreExt>();
        let fixed = core::mem::offset_of!(tdrv_ctx_t, mla) + size_of::<CtxTail>();
        assert_eq!(st.reinit_bytes(), 0, "no re-initialisation yet");
        for devices in [1u32, 2, 1] {
            let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, devices)).unwrap();
            let n = Nrt::new(&st, &*sim);
            n.init(&InitOptions::default()).unwrap();
            n.close().unwrap();
            // The next init zeroes what this runtime used.
            let next = SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, 1)).unwrap();
            let m = Nrt::new(&st, &*next);
            m.init(&InitOptions::default()).unwrap();
            assert_eq!(
                st.reinit_bytes(),
                fixed + devices as usize * per_device,
                "after a runtime of {devices} device(s)"
            );
            assert!(st.reinit_bytes() < st.context_layout().bytes / 8);
            m.close().unwrap();
        }
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
