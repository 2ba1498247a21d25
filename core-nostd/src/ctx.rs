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

/// One public API call in flight (spec §7.2 state gate, §12 teardown): holds a count that
/// `close` waits on before it tears anything down. Taken by [`Nrt::enter`]; dropping it ends
/// the call.
#[must_use = "the call is in flight only while the guard lives"]
pub(crate) struct InFlight<'a> {
    active: &'a ShardedGate,
    shard: usize,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.active.exit(self.shard);
    }
}

/// Opens the gate `init` shut, on whichever path `init` returns.
struct ReopenOnDrop<'a>(&'a ShardedGate);

impl Drop for ReopenOnDrop<'_> {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Proof that `init` or `close` has the runtime to itself (spec §12; issue 17 item 2's gate
/// token for the tables only those two rewrite): `init_lock` is held (the borrow of its guard
/// is the lifetime) and the in-flight gate is shut and drained, so no API call and no reader
/// of a closed runtime is in flight. Made only by [`Exclusive::new`], inside `init` and
/// `close`, once the gate is shut; there is one `init_lock`, so at most one token exists.
/// Accessors that hand out `&mut` to those tables take `&mut Exclusive`, so two such borrows
/// cannot overlap.
pub(crate) struct Exclusive<'g> {
    _init_lock: core::marker::PhantomData<&'g mut ()>,
}

impl<'g> Exclusive<'g> {
    /// The token of the caller that holds `init_lock` (`lock`) and has shut and drained the
    /// gate (`active_calls.close`). Private to this module: `init` and `close` are its only
    /// callers, each right after it shut the gate.
    fn new(_lock: &'g mut crate::sync::MutexGuard<'_>) -> Self {
        Exclusive {
            _init_lock: core::marker::PhantomData,
        }
    }
}

/// A core's scratchpad (spec §8) with its lock held: the page table and page count, which
/// only the holder of `scratchpad.lock` reads or writes, borrowed from the guard (so no
/// borrow outlives the lock). The page size and mode are written by bring-up alone
/// ([`Nrt::scratchpad_setup`], under the [`Exclusive`] token) and read as copies.
pub(crate) struct ScratchpadGuard<'a> {
    sp: *mut tdrv_scratchpad_t,
    _lock: crate::sync::MutexGuard<'a>,
}

impl ScratchpadGuard<'_> {
    /// Bytes per page.
    pub(crate) fn page_size(&self) -> u64 {
        // SAFETY: `sp` is a scratchpad of the tree (see `Nrt::scratchpad_lock`); `page_size`
        // is written only under the `Exclusive` token, never while a guard exists.
        unsafe { core::ptr::addr_of!((*self.sp).page_size).read() }
    }

    /// Whether the pages are contiguous (laid out in reverse, spec §8).
    pub(crate) fn is_contiguous(&self) -> bool {
        // SAFETY: as `page_size`.
        unsafe { core::ptr::addr_of!((*self.sp).is_contiguous).read() != 0 }
    }

    /// `(num_pages, pages)`, for reading and writing.
    pub(crate) fn table(&mut self) -> (&mut u32, &mut [tdrv_scratchpad_page_t]) {
        // SAFETY: `sp` points into the context tree, which lives as long as the state block
        // the guard borrows (`'a`), and is rewritten whole only by `zero_tree` under the
        // `Exclusive` token, when no guard exists. These two fields are read and written only
        // by the holder of `scratchpad.lock`, which this guard is, and the borrows are tied to
        // `&mut self`, so they end before the guard releases the lock and never overlap each
        // other or a `view`. Disjoint from the lock word and from `page_size` /
        // `is_contiguous`, which other threads read unlocked.
        unsafe {
            (
                &mut *core::ptr::addr_of_mut!((*self.sp).num_pages),
                &mut *core::ptr::addr_of_mut!((*self.sp).pages),
            )
        }
    }

    /// `(num_pages, pages)`, for reading.
    pub(crate) fn view(&self) -> (u32, &[tdrv_scratchpad_page_t]) {
        // SAFETY: as `table`, shared: no `&mut` from `table` can be live while `&self` is.
        unsafe {
            (
                core::ptr::addr_of!((*self.sp).num_pages).read(),
                &*core::ptr::addr_of!((*self.sp).pages),
            )
        }
    }
}

/// A core's cached ext-isa library set (`tpb_sunda_t.ulib_set_info_extisa_only`, spec §6) with
/// `ulib_staging_lock` held: the pointer is read and written only by the lock's holder.
pub(crate) struct UlibCacheGuard<'a> {
    slot: *mut *mut ucode_lib_set_info_t,
    _lock: crate::sync::MutexGuard<'a>,
}

impl UlibCacheGuard<'_> {
    /// The cached set (null: none staged).
    pub(crate) fn cached(&mut self) -> &mut *mut ucode_lib_set_info_t {
        // SAFETY: `slot` is the field of a `tpb_sunda_t` of the tree (see
        // `Nrt::ulib_cache_lock`), which lives as long as the state block the guard borrows
        // and is zeroed only by `zero_tree` under the `Exclusive` token, when no guard exists;
        // only the holder of `ulib_staging_lock` (this guard) touches the field, and the borrow
        // is tied to `&mut self`, so it ends before the lock is released.
        unsafe { &mut *self.slot }
    }
}

/// The members of a `dmem_t` that are fixed from its publication to its release (spec §3.1,
/// §3.2 step 5), copied out: what the ledger books and the OOM dump lists.
#[derive(Copy, Clone, Debug)]
pub(crate) struct DmemFixed {
    pub(crate) pa: u64,
    pub(crate) align_offset: u64,
    pub(crate) allocated_size: u64,
    pub(crate) mem_handle: u64,
    pub(crate) device_id: u32,
    pub(crate) nc_id: u32,
    pub(crate) mem_type: u32,
    pub(crate) mem_usage_type: u32,
    pub(crate) tdram_channel: u32,
    pub(crate) hint: [u8; 48],
    /// The reference word as read with the rest (0: no owner left).
    pub(crate) refs: u64,
}

impl DmemFixed {
    /// Copies the fixed members of `m`, or `None` when `m` is not published (its generation
    /// is even: not yet written, or being finalised).
    ///
    /// # Safety
    /// `m` is a live slot of the dmem arena that is neither released nor handed out again
    /// during the call: the lock of its shard is held (by [`Arena::with_live`] or
    /// [`Arena::for_each_live`]), or the caller owns the dmem (see
    /// [`Nrt::owned_dmem_fixed`]).
    #[inline]
    unsafe fn read(arena: &Arena<dmem_t>, m: *const dmem_t) -> Option<DmemFixed> {
        // SAFETY: `m` is a slot of `arena` (contract).
        let (gen, refs) = unsafe { arena.words(m) };
        let refs = refs.load(Ordering::Acquire);
        if gen.load(Ordering::Acquire) & 1 == 0 {
            return None;
        }
        // SAFETY: `dmem_alloc` writes these members before `handle::publish` stores the odd
        // generation (Release), which the load above read (Acquire), so the writes are
        // visible; nobody writes them again until the slot is zeroed by a later allocation,
        // which needs the slot released first, which the contract excludes. Plain field reads through a raw pointer: no reference to the whole `dmem_t`
        // (whose list links other threads write) is made.
        unsafe {
            Some(DmemFixed {
                pa: core::ptr::addr_of!((*m)._pa).read(),
                align_offset: core::ptr::addr_of!((*m).align_offset).read(),
                allocated_size: core::ptr::addr_of!((*m).allocated_size).read(),
                mem_handle: core::ptr::addr_of!((*m).mem_handle).read(),
                device_id: core::ptr::addr_of!((*m).device_id).read(),
                nc_id: core::ptr::addr_of!((*m).nc_id).read(),
                mem_type: core::ptr::addr_of!((*m).mem_type).read(),
                mem_usage_type: core::ptr::addr_of!((*m).mem_usage_type).read(),
                tdram_channel: core::ptr::addr_of!((*m).tdram_channel).read(),
                hint: core::ptr::addr_of!((*m).hint_buf).read(),
                refs,
            })
        }
    }
}

/// The last device OOM of a runtime, as `CoreState::oom` guards it: all-zero is "none yet".
pub(crate) struct LastOom {
    /// True once `last` and `channel` hold values (MaybeUninit keeps all-zero valid).
    pub(crate) set: bool,
    /// The error.
    pub(crate) last: core::mem::MaybeUninit<Error>,
    /// The failing channel's figures at the moment of the OOM.
    pub(crate) channel: core::mem::MaybeUninit<Option<crate::oom::FailingChannel>>,
    /// The OOM table as it was then; `dump_len` bytes of it are written.
    pub(crate) dump: [u8; OOM_DUMP_BYTES],
    /// Bytes of `dump` in use.
    pub(crate) dump_len: usize,
}

impl LastOom {
    /// Records `e` and its failing channel (the table is written into `dump` by the caller).
    pub(crate) fn record(&mut self, e: Error, channel: Option<crate::oom::FailingChannel>) {
        self.last.write(e);
        self.channel.write(channel);
        self.set = true;
    }

    /// The last OOM, if one was recorded.
    pub(crate) fn error(&self) -> Option<Error> {
        // SAFETY: `set` becomes true only in `record`, after `last` was written.
        self.set.then(|| unsafe { self.last.assume_init() })
    }

    /// The failing channel of the last OOM (`None` also when there was none).
    pub(crate) fn channel(&self) -> Option<crate::oom::FailingChannel> {
        // SAFETY: `set` becomes true only in `record`, after `channel` was written.
        self.set
            .then(|| unsafe { self.channel.assume_init() })
            .flatten()
    }

    /// The OOM table text captured with the last OOM ("" when none).
    pub(crate) fn dump_text(&self) -> &str {
        let bytes = &self.dump[..self.dump_len.min(OOM_DUMP_BYTES)];
        match core::str::from_utf8(bytes) {
            Ok(t) => t,
            // Truncated inside a character: keep the valid prefix.
            Err(e) => core::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
        }
    }
}

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

impl<'a> Nrt<'a> {
    /// Binds a state block to a driver, with no host-memory provider (VIRTUAL tensors are
    /// refused as `Unsupported`).
    pub fn new(st: &'a CoreState, drv: &'a dyn Driver) -> Self {
        Nrt {
            st,
            drv,
            host: None,
        }
    }

    /// Binds a state block to a driver and the host-memory provider of its VIRTUAL tensors:
    /// they are allocated from and freed to `host`, and `close` returns their bytes to it.
    pub fn with_host(
        st: &'a CoreState,
        drv: &'a dyn Driver,
        host: &'a dyn crate::tensor::HostMem,
    ) -> Self {
        Nrt {
            st,
            drv,
            host: Some(host),
        }
    }

    /// The host-memory provider this view binds (None: VIRTUAL tensors unsupported).
    pub fn host_mem(&self) -> Option<&'a dyn crate::tensor::HostMem> {
        self.host
    }

    /// `Ok` when this view names the driver and host provider its state block was
    /// initialised with (or the block is not initialised: nothing is bound yet).
    #[inline]
    pub(crate) fn check_bound(&self) -> Result<()> {
        let drv = self.st.bound_drv.load(Ordering::Relaxed);
        let host = self.st.bound_host.load(Ordering::Relaxed);
        if drv == 0 || (drv == addr(self.drv) && host == self.host.map_or(0, addr)) {
            Ok(())
        } else {
            Err(Error::ForeignResources)
        }
    }

    /// The driver.
    pub fn driver(&self) -> &'a dyn Driver {
        self.drv
    }

    /// The state block.
    pub fn state(&self) -> &'a CoreState {
        self.st
    }

    pub(crate) fn ctx(&self) -> *mut tdrv_ctx_t {
        self.st.ctx.get()
    }

    /// Raw pointer to `mla[dev]` (no check).
    pub(crate) fn mla_ptr(&self, dev: u32) -> *mut mla_t {
        // SAFETY: in-bounds projection of the context; callers check `dev < 32`.
        unsafe { addr_of_mut!((*self.ctx()).mla[dev as usize]) }
    }

    /// The project's side state of device `dev` (`dev < 32`, else device 0's: callers check).
    pub(crate) fn dev_ext(&self, dev: u32) -> &'a DevExt {
        // SAFETY: in-bounds; the table is written only by `zero_tree`, whose contract excludes
        // every user of the runtime (so no reference handed out here is live then).
        unsafe { &(*self.st.dev_ext.get())[(dev as usize).min(constants::MAX_MLA_PER_PROCESS - 1)] }
    }

    /// The project's side state of core `(dev, tpb)` (indices clamped in range: callers check).
    pub(crate) fn core_ext(&self, dev: u32, tpb: u32) -> &'a CoreExt {
        // SAFETY: in-bounds; the table is written only by `zero_tree`, whose contract excludes
        // every user of the runtime (so no reference handed out here is live then).
        unsafe {
            &(*self.st.core_ext.get())[(dev as usize).min(constants::MAX_MLA_PER_PROCESS - 1)]
                [(tpb as usize).min(constants::TPBS_PER_MLA - 1)]
        }
    }

    /// The `physical_core_t` of core `(dev, tpb)`, which its GLOBAL allocator and dmems point
    /// at (no check beyond clamping).
    pub(crate) fn pcore_ptr(&self, dev: u32, tpb: u32) -> *mut physical_core_t {
        self.core_ext(dev, tpb).pcore.get()
    }

    /// `(device, core)` of a `tpb_t` of this runtime's tree, by address arithmetic (no
    /// dereference; `(32, 8)`, out of range, for a pointer outside the tree).
    pub(crate) fn tpb_coords(&self, tpb: *const tpb_t) -> (u32, u32) {
        let out = (
            constants::MAX_MLA_PER_PROCESS as u32,
            constants::TPBS_PER_MLA as u32,
        );
        let first = self.mla_ptr(0) as usize;
        let Some(addr) = (tpb as usize).checked_sub(first) else {
            return out;
        };
        let (d, rest) = (
            addr / core::mem::size_of::<mla_t>(),
            addr % core::mem::size_of::<mla_t>(),
        );
        let Some(within) = rest.checked_sub(core::mem::offset_of!(mla_t, _tpbs)) else {
            return out;
        };
        let t = within / core::mem::size_of::<tpb_t>();
        if d >= constants::MAX_MLA_PER_PROCESS
            || t >= constants::TPBS_PER_MLA
            || within % core::mem::size_of::<tpb_t>() != 0
        {
            return out;
        }
        (d as u32, t as u32)
    }

    /// The project's side state of a resolved `tpb_t` ([`Self::tpb_coords`]).
    pub(crate) fn tpb_ext(&self, tpb: *const tpb_t) -> &'a CoreExt {
        let (d, t) = self.tpb_coords(tpb);
        self.core_ext(d, t)
    }

    /// The HBM channel that serves a resolved `tpb_t` (public ABI §3 "HBM ↔ core").
    pub(crate) fn tpb_default_hbm(&self, tpb: *const tpb_t) -> u32 {
        let (d, t) = self.tpb_coords(tpb);
        self.dev_geom(d).default_hbm(t)
    }

    /// Raw pointer to `mla[dev]._tpbs[tpb]` (no check).
    pub(crate) fn tpb_ptr(&self, dev: u32, tpb: u32) -> *mut tpb_t {
        // SAFETY: in-bounds projection; callers check the indices.
        unsafe { addr_of_mut!((*self.mla_ptr(dev))._tpbs[tpb as usize]) }
    }

    /// The `tpb_t` of this runtime's tree that `tpb` points at, re-derived from the tree by
    /// its coordinates ([`Self::tpb_coords`]: address arithmetic, no dereference), or `None`
    /// for a pointer that is not exactly a core of the tree. What the accessors below take
    /// instead of trusting a caller's pointer.
    fn tree_tpb(&self, tpb: *const tpb_t) -> Option<*mut tpb_t> {
        let (d, t) = self.tpb_coords(tpb);
        (d < constants::MAX_MLA_PER_PROCESS as u32 && t < constants::TPBS_PER_MLA as u32)
            .then(|| self.tpb_ptr(d, t))
    }

    /// The index of device `mla` in the tree (address arithmetic, no dereference), `None` for
    /// a pointer that is not exactly an `mla_t` of the tree.
    #[inline]
    pub(crate) fn mla_index(&self, mla: *const mla_t) -> Option<u32> {
        let off = (mla as usize).checked_sub(self.mla_ptr(0) as usize)?;
        let sz = core::mem::size_of::<mla_t>();
        (off % sz == 0 && off / sz < constants::MAX_MLA_PER_PROCESS).then_some((off / sz) as u32)
    }

    /// Device `dev`'s `dmem_logger.memory_usage_nc` (spec §3.4), the ledger's device rows
    /// (`dev` clamped in range: callers check).
    #[inline]
    pub(crate) fn ledger_rows(&self, dev: u32) -> &'a [[AtomicU64; 23]; 8] {
        let mla = self.mla_ptr((dev as usize).min(constants::MAX_MLA_PER_PROCESS - 1) as u32);
        // SAFETY: `mla` is a device of the tree (in bounds, aligned), which lives as long as
        // the state block (`'a`). The rows are atomics, read and written only atomically, and
        // rewritten wholesale only by `zero_tree`, whose contract (the `Exclusive` token's
        // conditions) excludes every user of the runtime, so no reference handed out here is
        // live then; the reference covers the rows alone, not the other `mla_t` members
        // that bring-up writes.
        unsafe { &*core::ptr::addr_of!((*mla).dmem_logger.memory_usage_nc) }
    }

    /// The fixed members of dmem `m` ([`DmemFixed`]), read under its arena shard's lock;
    /// `None` when `m` is not a live, published dmem of this runtime. Safe for any pointer.
    pub(crate) fn dmem_fixed(&self, m: *const dmem_t) -> Option<DmemFixed> {
        let arena = &self.st.dmems;
        // SAFETY: `with_live` holds `m`'s shard lock and confirmed a live slot of `arena`.
        arena
            .with_live(m, |p| unsafe { DmemFixed::read(arena, p.as_ptr()) })
            .flatten()
    }

    /// [`Self::dmem_fixed`] without the shard lock, for the ledger's booking on the
    /// allocation hot path (`dml_add_entry`; the lock cost the dmem path about 8 %). Its two
    /// callers own `m`: `dmem_alloc` after publishing it (its one owner reference, not yet
    /// returned), and `dmem_finalize` before retiring it (the last reference gone, the slot
    /// given back only after this). A pointer that is not a live slot reads as `None`; the
    /// ownership is the crate-internal contract of this function.
    #[inline]
    pub(crate) fn owned_dmem_fixed(&self, m: *const dmem_t) -> Option<DmemFixed> {
        if !self.st.dmems.is_live(m) {
            return None;
        }
        // SAFETY: `is_live` confirmed a live slot of the dmem arena; the caller owns it (the
        // contract above), so it is neither released nor handed out again during the read.
        unsafe { DmemFixed::read(&self.st.dmems, m) }
    }

    /// Calls `f` with the fixed members of every live, published dmem, with every shard
    /// lock of the dmem arena held (`f` must not allocate or free dmems).
    pub(crate) fn for_each_dmem_fixed(&self, mut f: impl FnMut(DmemFixed)) {
        let arena = &self.st.dmems;
        arena.for_each_live(|p| {
            // SAFETY: a live slot of `arena`, whose shard lock `for_each_live` holds.
            if let Some(d) = unsafe { DmemFixed::read(arena, p.as_ptr()) } {
                f(d);
            }
        });
    }

    /// The four dmems of live GPSIMD library set `set` (scratch space, ucode table, extram,
    /// libraries: spec §6), `None` for a pointer that is not a live set.
    pub(crate) fn ulib_set_dmems(&self, set: *const UlibSet) -> Option<[*mut dmem_t; 4]> {
        self.st.ulib_sets.with_live(set, |p| {
            // SAFETY: a live slot, which its shard lock (held by `with_live`) keeps from being
            // released or handed out again; a set's members are written only through its
            // `Fresh` before it is published (`ulib_alloc_and_stage`) and never after, so this
            // shared read races no write.
            let info = unsafe { &p.as_ref().info };
            [
                info.scratch_space,
                info.ucode_table,
                info.extram,
                info.lib_dmem,
            ]
        })
    }

    /// The scratchpad of core `tpb` with its lock held ([`ScratchpadGuard`]), `None` for a
    /// pointer that is not a core of the tree.
    pub(crate) fn scratchpad_lock(&self, tpb: *const tpb_t) -> Option<ScratchpadGuard<'a>> {
        let sp = self
            .tree_tpb(tpb)
            .map(|t| t.wrapping_byte_add(TPB_SCRATCHPAD))?;
        let sp = sp.cast::<tdrv_scratchpad_t>();
        // SAFETY: `sp` is the scratchpad of a `tpb_t` inside the context tree (in bounds,
        // aligned), which lives as long as the state block (`'a`); the lock word is an
        // atomic, so a shared reference to it is sound whoever else spins on it.
        let lock = unsafe { &*core::ptr::addr_of!((*sp).lock) }.lock();
        Some(ScratchpadGuard { sp, _lock: lock })
    }

    /// Bring-up of core `tpb`'s scratchpad settings (`tdrv_scratchpad_init`'s stores, spec
    /// §8): the page size and mode, and no page in use. Nothing for a pointer outside the tree.
    pub(crate) fn scratchpad_setup(
        &self,
        _ex: &mut Exclusive<'_>,
        tpb: *const tpb_t,
        page_size: u64,
        contiguous: bool,
    ) {
        let Some(t) = self.tree_tpb(tpb) else {
            return;
        };
        let sp = t
            .wrapping_byte_add(TPB_SCRATCHPAD)
            .cast::<tdrv_scratchpad_t>();
        // SAFETY: `sp` is a scratchpad of the tree (in bounds, aligned); the `Exclusive`
        // token proves no API call is in flight, so nobody reads these fields (the unlocked
        // readers of `page_size` run inside gated calls) or holds the scratchpad lock.
        unsafe {
            (*sp).page_size = page_size;
            (*sp).is_contiguous = contiguous as u8;
            (*sp).num_pages = 0;
        }
    }

    /// The ext-isa cache of core `tpb` with `ulib_staging_lock` held ([`UlibCacheGuard`]),
    /// `None` for a pointer that is not a core of the tree.
    pub(crate) fn ulib_cache_lock(&self, tpb: *const tpb_t) -> Option<UlibCacheGuard<'a>> {
        let sunda = self
            .tree_tpb(tpb)?
            .wrapping_byte_add(core::mem::offset_of!(tpb_t, sunda))
            .cast::<tpb_sunda_t>();
        // SAFETY: `sunda` is the `tpb_sunda_t` of a `tpb_t` of the tree (in bounds, aligned),
        // which lives as long as the state block; the lock word is an atomic.
        let lock = unsafe { &*core::ptr::addr_of!((*sunda).ulib_staging_lock) }.lock();
        let slot = sunda
            .wrapping_byte_add(core::mem::offset_of!(
                tpb_sunda_t,
                ulib_set_info_extisa_only
            ))
            .cast();
        Some(UlibCacheGuard { slot, _lock: lock })
    }

    /// The GLOBAL allocator (`tpb_allocator`, spec §5.1) of core `tpb`; null for a core
    /// without one (not brought up, torn down) or a pointer outside the tree.
    ///
    /// For the runtime's own steps, which run inside a gated call or in `init` / `close`
    /// (the same contract as [`Self::attached_devices`]).
    pub(crate) fn tpb_allocator(&self, tpb: *const tpb_t) -> *mut dmem_allocator_t {
        let Some(t) = self.tree_tpb(tpb) else {
            return null_mut();
        };
        // SAFETY: `t` is a `tpb_t` of the tree (in bounds, aligned). The field is written
        // only by `init_cores` and `teardown_cores`, inside `init` / `close` with the gate
        // shut and drained; every caller of this function is a step of a gated call or of
        // `init` / `close` itself, so no write overlaps this read.
        unsafe { core::ptr::addr_of!((*t).tpb_allocator).read() }
    }

    /// The logical-core table (spec §9) for `init` to write, under its [`Exclusive`] token.
    pub(crate) fn vcores_mut<'x>(&'x self, _ex: &'x mut Exclusive<'_>) -> &'x mut VcoreTable {
        // SAFETY: the table lives in the state block (`'a`, which outlives `'x`). Every other
        // reference to it comes from `vcores` (tied to an in-flight guard: none exists while
        // the gate is shut and drained, which the token proves) or `vcores_in_call` (steps of
        // a gated call, or of `init` / `close` outside this borrow); the token is borrowed
        // mutably for `'x`, so this `&mut` is the only reference while it lives.
        unsafe { &mut *self.st.vc.get() }
    }

    /// The logical-core table (spec §9), read inside the gated call `_g` proves is in flight:
    /// `init` and `close` rewrite it only with the gate shut and drained, so not while `_g`
    /// lives.
    pub(crate) fn vcores<'g>(&'g self, _g: &'g InFlight<'_>) -> &'g VcoreTable {
        self.vcores_in_call()
    }

    /// [`Self::vcores`] for the runtime's own steps that hold no guard of their own: every
    /// caller is a step of a gated call (its caller holds the guard) or of `init` / `close`
    /// outside [`Self::vcores_mut`]'s borrow. Until the steps take the gate token (issue 17
    /// item 2), that contract is what makes this read sound.
    pub(crate) fn vcores_in_call(&self) -> &VcoreTable {
        // SAFETY: the table lives in the state block; it is written only through
        // `vcores_mut`, whose borrow of the `Exclusive` token excludes every gated call and
        // every step outside it (see the contract above), so no `&mut` is live while this
        // shared reference is.
        unsafe { &*self.st.vc.get() }
    }

    /// The address of entry `k` of the logical-core table (clamped in range; no dereference):
    /// what `physical_core_t.vcore` stores (spec §9).
    pub(crate) fn vcore_entry_ptrs(&self) -> impl Fn(usize) -> *mut virtual_core_t {
        let base = self
            .st
            .vc
            .get()
            .wrapping_byte_add(core::mem::offset_of!(VcoreTable, owned))
            .cast::<virtual_core_t>();
        move |k| base.wrapping_add(k.min(MAX_VCORES - 1))
    }

    /// The `physical_core_t` of core `(dev, tpb)` for `init` to write, under its
    /// [`Exclusive`] token (indices clamped: callers check).
    pub(crate) fn pcore_mut<'x>(
        &'x self,
        _ex: &'x mut Exclusive<'_>,
        dev: u32,
        tpb: u32,
    ) -> &'x mut physical_core_t {
        // SAFETY: the cell lives in the state block; it is written only through this
        // accessor (the token excludes every gated call, and with it every reader through
        // a dmem's or allocator's `pcore` pointer), and the token's mutable borrow makes this
        // the only reference while it lives.
        unsafe { &mut *self.pcore_ptr(dev, tpb) }
    }

    /// Geometry of device `dev` (zeroed when not attached, or while the runtime is not
    /// initialised: `init` and `close` rewrite it, so it is read inside the state gate).
    pub fn geom(&self, dev: u32) -> DevGeom {
        match self.inspect() {
            Ok(_g) => self.dev_geom(dev),
            Err(_) => DevGeom::default(),
        }
    }

    /// [`Self::geom`] without the gate: for the runtime's own steps (which run inside a gated
    /// call, or in `init` / `close` themselves).
    pub(crate) fn dev_geom(&self, dev: u32) -> DevGeom {
        if dev as usize >= constants::MAX_MLA_PER_PROCESS {
            return DevGeom::default();
        }
        // SAFETY: written only by `init` (under init_lock, before state becomes INIT), which no
        // caller of this function overlaps (see `attached_devices`).
        unsafe { (*self.st.geom.get())[dev as usize] }
    }

    pub(crate) fn settings(&self) -> Settings {
        // SAFETY: written only during bring-up.
        unsafe { *self.st.settings.get() }
    }

    /// The runtime's epoch (0 while not initialised).
    #[inline]
    pub(crate) fn epoch(&self) -> u32 {
        self.st.epoch.load(Ordering::Acquire)
    }

    /// The handle words of slot `p` of `arena`, which the caller owns
    /// ([`crate::arena::Arena::handle_words_of`]), in this runtime's epoch.
    #[inline]
    pub(crate) fn owned_handle<T: crate::arena::Generational>(
        &self,
        arena: &crate::arena::Arena<T>,
        p: *const T,
    ) -> crate::handle::Raw {
        let (index, generation) = arena.handle_words_of(p);
        crate::handle::Raw {
            index,
            generation,
            epoch: self.epoch(),
        }
    }

    /// Refuses a handle made in another epoch (another runtime, or this one before `close`
    /// or re-`init`).
    #[inline]
    pub(crate) fn check_epoch(
        &self,
        h: crate::handle::Raw,
        kind: crate::handle::HandleKind,
    ) -> Result<()> {
        let e = self.epoch();
        if e == 0 || h.epoch != e {
            return Err(Error::foreign(kind));
        }
        Ok(())
    }

    /// Lifecycle state (`STATE_*`).
    pub fn lifecycle(&self) -> u32 {
        self.st.state.load(Ordering::Acquire)
    }

    /// The state gate of the public API (spec §7.2): `Uninitialized` before init, `Closed` after.
    pub fn check_state(&self) -> Result<()> {
        match self.lifecycle() {
            STATE_INIT => Ok(()),
            STATE_CLOSED => Err(Error::Closed),
            _ => Err(Error::Uninitialized),
        }
    }

    /// The state gate plus the in-flight count (spec §7.2, §12; [`gate_enter`], which loom
    /// checks): either this call finds the gate shut (and fails, touching nothing) or `close`
    /// sees the call and waits for its guard to drop before tearing down. It never blocks, so
    /// a gated call made from inside another cannot deadlock with `close`; but made after
    /// `close` began it fails, so a call's own sub-steps use ungated inner functions
    /// (`execute`'s copies).
    pub(crate) fn enter(&self) -> Result<InFlight<'a>> {
        self.pass_gate(false)
    }

    /// The gate for reading the runtime's state (the inspection calls): like [`Self::enter`],
    /// but a closed runtime may be read too. `close` keeps the tree (zeroed ledger included)
    /// until the next `init`, and reopens the gate once its teardown is done; `init` shuts it
    /// and waits for readers before rewriting the tree. So a reader sees a whole runtime, live
    /// or closed, or gets "not initialised" while `init` or `close` is at work.
    pub(crate) fn inspect(&self) -> Result<InFlight<'a>> {
        self.pass_gate(true)
    }

    /// [`Self::enter`] (`closed_readable` false) and [`Self::inspect`] (true).
    #[inline(always)]
    fn pass_gate(&self, closed_readable: bool) -> Result<InFlight<'a>> {
        let Some(shard) = self.st.active_calls.enter() else {
            return Err(Error::Closed);
        };
        let g = InFlight {
            active: &self.st.active_calls,
            shard,
        };
        self.check_bound()?;
        match self.st.state.load(Ordering::Acquire) {
            STATE_INIT => Ok(g),
            STATE_CLOSED if closed_readable => Ok(g),
            STATE_CLOSED => Err(Error::Closed),
            _ => Err(Error::Uninitialized),
        }
    }

    /// Devices attached (`tdrv_ctx.num_mla`); 0 while the runtime is not initialised.
    pub fn num_devices(&self) -> u32 {
        match self.inspect() {
            Ok(_g) => self.attached_devices(),
            Err(_) => 0,
        }
    }

    /// [`Self::num_devices`] without the gate (see [`Self::dev_geom`]).
    pub(crate) fn attached_devices(&self) -> u32 {
        // SAFETY: written only by `init` and `close`, which no caller of this function
        // overlaps: it runs inside a gated call or in `init` / `close` themselves.
        unsafe { (*self.ctx()).num_mla }
    }

    /// `db_physical_core_get_mla_and_tpb` (spec §1.1): where libnrt asserts a live device and
    /// a mapped core, this returns [`Error::CoreOutOfRange`].
    pub(crate) fn db_physical_core_get_mla_and_tpb(
        &self,
        pc: &physical_core_t,
    ) -> Result<(*mut mla_t, *mut tpb_t)> {
        let (d, t) = (pc.device_id, pc.device_tpb_idx);
        if d as usize >= constants::MAX_MLA_PER_PROCESS || t as usize >= constants::TPBS_PER_MLA {
            return Err(Error::CoreOutOfRange { device: d, tpb: t });
        }
        let mla = self.mla_ptr(d);
        // SAFETY: in-bounds; is_used/tpb_map are written at bring-up before use.
        unsafe {
            if (*mla).is_used == 0 || (*mla).tpb_map.map[t as usize] == 0 {
                return Err(Error::CoreOutOfRange { device: d, tpb: t });
            }
        }
        Ok((mla, self.tpb_ptr(d, t)))
    }

    /// `(device, core)` when `p` is the `pcore` of one of the runtime's cores (address
    /// arithmetic only: a foreign pointer is never dereferenced).
    pub(crate) fn tree_pcore(&self, p: *const physical_core_t) -> Option<(u32, u32)> {
        let first = self.st.core_ext.get() as usize;
        let addr = (p as usize).checked_sub(first)?;
        let (i, rest) = (
            addr / core::mem::size_of::<CoreExt>(),
            addr % core::mem::size_of::<CoreExt>(),
        );
        if rest != core::mem::offset_of!(CoreExt, pcore)
            || i >= constants::MAX_MLA_PER_PROCESS * constants::TPBS_PER_MLA
        {
            return None;
        }
        let (d, t) = (
            (i / constants::TPBS_PER_MLA) as u32,
            (i % constants::TPBS_PER_MLA) as u32,
        );
        core::ptr::eq(self.pcore_ptr(d, t).cast_const(), p).then_some((d, t))
    }

    /// Resolves `(device, core)` to its `tpb_t`, checked.
    pub(crate) fn tpb(&self, dev: u32, tpb: u32) -> Result<*mut tpb_t> {
        let pc = physical_core_t::new(dev, tpb);
        self.db_physical_core_get_mla_and_tpb(&pc).map(|(_, t)| t)
    }

    /// The GLOBAL allocator (`tpb_allocator`, spec §5.1) of physical core `(dev, core)`.
    pub fn core_allocator(&self, dev: u32, core: u32) -> Result<*mut dmem_allocator_t> {
        let _g = self.enter()?;
        let tpb = self.tpb(dev, core)?;
        // SAFETY: resolved tpb; set at bring-up.
        let al = unsafe { (*tpb).tpb_allocator };
        if al.is_null() {
            return Err(Error::CoreOutOfRange {
                device: dev,
                tpb: core,
            });
        }
        Ok(al)
    }

    /// `db_tdrv_ctx_init` + `tdrv_init` (spec §1, §5.1): attaches every device the driver
    /// exposes, builds each core's GLOBAL allocator, model_db and scratchpad, the routing map,
    /// and the logical-core table (spec §9). Fails cleanly (nothing left allocated).
    pub fn init(&self, opts: &InitOptions) -> Result<()> {
        let mut lock = self.st.init_lock.lock();
        if self.lifecycle() == STATE_INIT {
            self.check_bound()?;
            return Err(Error::AlreadyInitialized);
        }
        // Readers of a closed runtime (`inspect`) are let out before the tree is rewritten;
        // the gate opens again however this returns.
        self.st.active_calls.close(crate::sync::relax);
        let _reopen = ReopenOnDrop(&self.st.active_calls);
        let mut ex = Exclusive::new(&mut lock);
        if self.lifecycle() == STATE_CLOSED {
            // Re-init after close: start again from the all-zero tree.
            // SAFETY: init_lock held, the runtime is closed and the gate shut and drained:
            // nobody reads or uses the tree.
            unsafe {
                self.zero_tree();
                *self.st.geom.get() = [DevGeom::default(); constants::MAX_MLA_PER_PROCESS];
            }
        }
        let n = self
            .drv
            .device_count()
            .min(constants::MAX_MLA_PER_PROCESS as u32);
        // The state block holds model_dbs for `caps.devices` devices: the rest are not
        // attached (like devices past 32), and the log says which setting would attach them.
        let cap = self.st.caps.devices;
        if n > cap {
            warn!(
                "init: attaching {} of {} device(s): raise Capacity.devices",
                cap, n
            );
        }
        let n = n.min(cap);
        if n == 0 {
            return Err(Error::Driver(errno::ENODEV));
        }
        let mut infos = [None; constants::MAX_MLA_PER_PROCESS];
        for (d, slot) in infos.iter_mut().enumerate().take(n as usize) {
            let info = self.drv.device_info(d as u32).map_err(Error::Driver)?;
            if info.cores_per_device == 0
                || info.cores_per_device as usize > constants::TPBS_PER_MLA
            {
                return Err(Error::Driver(errno::EINVAL));
            }
            *slot = Some(info);
        }
        // SAFETY: state is UNINIT and init_lock is held: nothing else touches the tree.
        unsafe {
            *self.st.settings.get() = Settings {
                scratchpad_page_size: opts
                    .scratchpad_page_size
                    .filter(|p| *p > 0)
                    .unwrap_or(DEFAULT_SCRATCHPAD_PAGE_SIZE),
                contiguous_scratchpad: opts.contiguous_scratchpad as u32,
                _pad: 0,
            };
            let ctx = self.ctx();
            (*ctx).num_mla = n;
            for (d, info) in infos.iter().enumerate().take(n as usize) {
                let info = info.as_ref().ok_or(Error::Driver(errno::ENODEV))?;
                (*self.st.geom.get())[d] = DevGeom::from_info(info);
                self.st.align_unsupported[d].store(0, Ordering::Relaxed);
                let mla = self.mla_ptr(d as u32);
                (*mla).device = d as u64;
                (*mla).mla_idx = d as u32;
                (*mla).device_id = d as u32;
                (*mla).host_device_id = d as u32;
                (*mla).dmem_logger.mla_idx = d as u32;
                (*mla).is_used = 1;
                for t in 0..info.cores_per_device.min(constants::TPBS_PER_MLA as u32) {
                    (*mla).tpb_map.map[t as usize] = 1;
                    // The flat physical-core index libnrt keeps beside the tree (spec §1).
                    let k = (*ctx).num_ptpb as usize;
                    if k < (*ctx).ptpbs.len() {
                        (*ctx).ptpbs[k].tpb_idx = t;
                        (*ctx).ptpbs[k].mla = mla;
                        (*ctx).num_ptpb += 1;
                    }
                }
            }
            (*ctx).target = infos[0].map(|i| i.arch as u32).unwrap_or(0);
            let mut map = [0u32; 32];
            if self.drv.host_device_id_rid_map(&mut map).is_err() {
                // Identity fallback (spec §1: single-device routing is the identity).
                for (i, m) in map.iter_mut().enumerate() {
                    *m = i as u32;
                }
            }
            (*ctx).host_did_to_rid_map = map;
            (*ctx).host_did_to_rid_map_size = n;
            for d in 0..n {
                (*self.mla_ptr(d)).routing_id = map[d as usize];
            }
        }
        let r = self
            .vcores_init(&opts.vcores, &mut ex)
            .and_then(|_| self.init_cores(n, &mut ex));
        if let Err(e) = r {
            self.teardown_cores();
            // SAFETY: still under init_lock; reset to the all-zero UNINIT tree.
            unsafe { self.zero_tree() };
            return Err(e);
        }
        // Handles of any earlier runtime in this block (or anywhere) never match this one.
        self.st
            .epoch
            .store(crate::handle::next_epoch(), Ordering::Release);
        // Bound from here until the next init: views over other resources are refused.
        self.st.bound_drv.store(addr(self.drv), Ordering::Relaxed);
        self.st
            .bound_host
            .store(self.host.map_or(0, addr), Ordering::Relaxed);
        // Calls are let in when `_reopen` opens the gate.
        self.st.state.store(STATE_INIT, Ordering::Release);
        info!("nrt-core initialised: {} device(s)", n);
        Ok(())
    }

    /// Resets the context tree and its per-device and per-core side tables to all-zero
    /// (UNINIT).
    ///
    /// # Safety
    /// Nobody may use the tree: `init_lock` held and the gate shut and drained (or never open).
    unsafe fn zero_tree(&self) {
        // SAFETY: per the contract nobody reads or writes these blocks now, and all-zero is
        // their valid unused state (ZeroValid members, atomics, unlocked locks).
        unsafe {
            core::ptr::write_bytes(self.ctx() as *mut u8, 0, core::mem::size_of::<tdrv_ctx_t>());
            core::ptr::write_bytes(self.st.dev_ext.get(), 0, 1);
            core::ptr::write_bytes(self.st.core_ext.get(), 0, 1);
        }
    }

    fn init_cores(&self, n: u32, ex: &mut Exclusive<'_>) -> Result<()> {
        for d in 0..n {
            let g = self.dev_geom(d);
            for t in 0..g.cores {
                let tpb = self.tpb_ptr(d, t);
                // SAFETY: bring-up under init_lock; tpb is in-bounds.
                unsafe {
                    (*tpb).idx = t as i32;
                    let pcore = self.pcore_ptr(d, t);
                    (*pcore).device_id = d;
                    (*pcore).device_tpb_idx = t;
                    (*tpb).tpb_allocator = self.dmem_allocator_create_inner(
                        pcore,
                        dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_GLOBAL,
                    )?;
                    let db = self.st.model_dbs.alloc("model_db")?.as_ptr();
                    ht::ht_init(addr_of_mut!((*db).hdr), MODEL_DB_BUCKETS);
                    (*tpb).model_db = addr_of_mut!((*db).hdr);
                    self.tdrv_scratchpad_init(ex, tpb, &g);
                    self.core_ext(d, t).is_init.store(1, Ordering::Release);
                }
            }
        }
        Ok(())
    }

    /// Frees what `init_cores` built for every core (GLOBAL allocators, model_dbs).
    fn teardown_cores(&self) {
        for d in 0..self.attached_devices() {
            for t in 0..constants::TPBS_PER_MLA as u32 {
                let tpb = self.tpb_ptr(d, t);
                // SAFETY: teardown is single-threaded by contract (close/init hold init_lock).
                unsafe {
                    if !(*tpb).tpb_allocator.is_null() {
                        let _ = self
                            .dmem_allocator_destroy_inner((*tpb).tpb_allocator, GiveBack::Release);
                        (*tpb).tpb_allocator = null_mut();
                    }
                    // Cleared under model_db_lock: a lookup holding the lock sees either the
                    // table or null, never a released slot.
                    let db = {
                        let _l = (*tpb).model_db_lock.lock();
                        core::mem::replace(&mut (*tpb).model_db, null_mut())
                    };
                    if !db.is_null() {
                        let _ = self.st.model_dbs.release(db as *const ModelDb);
                    }
                    self.core_ext(d, t).is_init.store(0, Ordering::Release);
                }
            }
        }
    }

    /// `tdrv_destroy` (spec §12): unloads every model (draining in-flight executions), frees
    /// every tensor set and every tensor, the scratchpad pages, the shared ext-isa copies and the GLOBAL allocators,
    /// and reclaims what the dmem API left behind. Afterwards the driver holds no memory of
    /// this runtime.
    ///
    /// Deliberate difference: libnrt clears `tdrv_ctx_0` here; this keeps the tree's devices
    /// and ledger (all zero by then) readable until the next [`Nrt::init`], which clears it,
    /// so a closed runtime can still be inspected (`driver_bytes_in_use`, the ledger, the last
    /// OOM). The per-core GLOBAL allocators and model databases are gone, and every gated call
    /// fails with `Closed`.
    ///
    /// Calls racing `close` either complete before the teardown starts (close first waits for
    /// every API call in flight, see `Nrt::enter`) or fail with `Closed`. Executions hold a
    /// model reference, which the unload drains (spec §4.5): a thread must not call `close`
    /// while it holds an [`crate::model::ExecGuard`] itself, or it waits for itself forever.
    pub fn close(&self) -> Result<()> {
        let _g = self.st.init_lock.lock();
        self.check_bound()?;
        if self.lifecycle() != STATE_INIT {
            return Err(if self.lifecycle() == STATE_CLOSED {
                Error::Closed
            } else {
                Error::Uninitialized
            });
        }
        // New API calls fail from here on; wait for the ones already past the gate, then for
        // in-flight executions (drained in remove_model).
        self.st.state.store(STATE_CLOSED, Ordering::Release);
        self.st.active_calls.close(crate::sync::relax);
        // No call is in flight: from here no handle of this runtime resolves again.
        self.st.epoch.store(0, Ordering::Release);
        self.unload_all_models();
        self.free_all_sets();
        self.free_all_tensors();
        for d in 0..self.attached_devices() {
            for t in 0..self.dev_geom(d).cores {
                let tpb = self.tpb_ptr(d, t);
                self.tdrv_scratchpad_free(tpb);
                self.ulib_free_shared(tpb);
            }
        }
        self.teardown_cores();
        let leftover = self.reclaim_leftover_dmems();
        if leftover > 0 {
            warn!(
                "close: freed {} allocation(s) still held through the dmem API",
                leftover
            );
        }
        // Readers of the closed runtime are welcome again (API calls see CLOSED and fail).
        self.st.active_calls.open();
        info!("nrt-core closed");
        Ok(())
    }

    /// Total bytes the driver still holds for this runtime, over every pool of every device.
    pub fn driver_bytes_in_use(&self) -> u64 {
        let mut used = 0;
        for d in 0..self.attached_devices() {
            let g = self.dev_geom(d);
            for h in 0..g.channels {
                if let Ok(s) = self.drv.pool_stats(d, false, h) {
                    used += s.capacity - s.free;
                }
            }
            if let Ok(s) = self.drv.pool_stats(d, true, 0) {
                used += s.capacity - s.free;
            }
        }
        used
    }
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
        assert!(n.tpb_allocator(foreign_tpb).is_null());
        assert!(!n.tpb_allocator(tpb).is_null(), "core 0's GLOBAL allocator");
        assert_eq!(n.mla_index(n.mla_ptr(0)), Some(0));
        assert_eq!(n.mla_index(foreign.as_ptr().cast()), None);

        let foreign_dmem = foreign.as_ptr().cast::<dmem_t>();
        assert!(n.dmem_fixed(foreign_dmem).is_none());
        let before = n.ledger_snapshot(0);
        n.dml_add_entry(n.mla_ptr(0), crate::dmem::Action::Alloc, foreign_dmem);
        assert_eq!(n.ledger_snapshot(0), before, "a foreign dmem books nothing");

        // A live dmem reads back as allocated; once freed it is refused.
        let args = crate::dmem::AllocArgs::device(
            4096,
            0,
            dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_GENERIC,
            "probe",
        );
        let m = n
            .dmem_alloc_inner(n.tpb_allocator(tpb), &args, None)
            .unwrap();
        let d = n.dmem_fixed(m).unwrap();
        assert_eq!((d.device_id, d.allocated_size, d.refs), (0, 4096, 1));
        assert_eq!(crate::cstr::c_name(&d.hint), "probe");
        n.dmem_free_inner(m).unwrap();
        assert!(n.dmem_fixed(m).is_none(), "freed: no longer live");
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
