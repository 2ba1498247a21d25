//! The process-global context tree `tdrv_ctx → mla[32] → tpb[8]` (spec §1): its state block,
//! the [`Nrt`] handle every operation goes through, the state gate and the resolver
//! (`db_physical_core_get_mla_and_tpb`, §1.1). The data the block embeds for each domain is
//! declared in `state` (one file per domain); bring-up (`db_tdrv_ctx_init`) and teardown
//! (`tdrv_destroy`, §12), which call into the domains, are `crate::lifecycle`'s. `ctx` imports
//! no domain.
//!
//! [`CoreState`] is a header bound to its storage: the context region (the `tdrv_ctx_t`
//! holding `Capacity::devices` devices, [`ContextLayout`]) and every static arena. Both are
//! valid when all-zero, so they live in `.bss` (firmware, [`StaticState`]) or in a zeroed
//! allocation (independent instances for Rust users, tests and the C ABI singleton), never on
//! the stack.
//!
//! Every raw access to the tree and the block's storage is in `access` (and its children:
//! the lock guards, the storage binder, the storage itself); the rest of `ctx` is safe code.

#![deny(unsafe_code)]

use crate::atomic::AtomicU64;
use core::cell::UnsafeCell;
use core::ptr::{addr_of_mut, null_mut};
use core::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};

use crate::abi::meta::ZeroValid;
use crate::abi::*;
use crate::arena::{Arena, SideTable};
use crate::config::*;
use crate::driver::{errno, DeviceInfo, Driver};
use crate::error::{Error, InvalidArg, Result};
use crate::ht::HtBuckets;
use crate::sync::ShardedGate;
use state::vcore::{VcoreOptions, VcoreTable};

/// Geometry of one attached device, as the driver reported it at bring-up.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
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
    /// The driver's physical-address window of the device's HBM, `[base, base + bytes)`
    /// ([`crate::driver::Driver::pa_window`]); `None`: the driver states none.
    pub hbm_window: Option<(u64, u64)>,
    /// The same for the device's host DMA pool.
    pub host_window: Option<(u64, u64)>,
    /// Each core's copy buffer (`Driver::get_copy_buf`), recorded in its dmems' `cpy_buf` (0
    /// past the device's cores).
    pub copy_buf: [u64; constants::TPBS_PER_MLA],
}

impl Default for DevGeom {
    fn default() -> Self {
        Self::NONE
    }
}

impl DevGeom {
    /// No device: every figure zero, no window ([`Default`] as a constant).
    pub const NONE: DevGeom = DevGeom {
        arch: 0,
        cores: 0,
        channels: 0,
        aligned_alloc: 0,
        channel_size: 0,
        host_capacity: 0,
        features: 0,
        page_size: 0,
        hbm_window: None,
        host_window: None,
        copy_buf: [0; constants::TPBS_PER_MLA],
    };

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
            hbm_window: None,
            host_window: None,
            copy_buf: [0; constants::TPBS_PER_MLA],
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

/// A model_db table (`ht_t` + buckets).
pub type ModelDb = HtBuckets<MODEL_DB_BUCKETS>;
/// A 1024-bucket mem_ref_set (spec §5.2 `ht_init(&mr_set->mem_ref_set, 0x400, …)`).
pub type MemRefSet = HtBuckets<{ constants::MEM_REF_SET_BUCKETS }>;

/// Offset of `tpb_t.scratchpad`.
const TPB_SCRATCHPAD: usize = core::mem::offset_of!(tpb_t, scratchpad);

/// The runtime's lifecycle state ([`Nrt::lifecycle`]; libnrt's `NRT_STATE_*`, spec §7.2).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Lifecycle {
    /// Before the first `init` (and while a failed `init` is undone).
    Uninit,
    /// Initialised: calls are let in.
    Init,
    /// Closed: calls fail with `Closed` until the next `init`.
    Closed,
}

impl Lifecycle {
    /// libnrt's `NRT_STATE_*` value.
    pub const fn to_c(self) -> u32 {
        match self {
            Lifecycle::Uninit => STATE_UNINIT,
            Lifecycle::Init => STATE_INIT,
            Lifecycle::Closed => STATE_CLOSED,
        }
    }
}

/// Runtime lifecycle (`NRT_STATE_*`).
pub const STATE_UNINIT: u32 = 0;
/// Initialised.
pub const STATE_INIT: u32 = 1;
/// Closed.
pub const STATE_CLOSED: u32 = 2;

// The domain's raw accessors: the one part of `ctx` where `unsafe` is allowed, each block
// argued (docs/UNSAFE.md).
#[allow(unsafe_code)]
mod access;
mod gate;
pub(crate) mod state;

pub(crate) use access::bind::{Binder, Part};
pub(crate) use access::guards::*;
pub use access::StorageFree;

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
    pub(crate) hbm_nc: [state::ledger::CoreChannels; 8],
    /// The ledger lock of each core: held by every update of that core's rows and by readers
    /// that want one core's rows consistent (each row sums to its `[nc][22]`). Per core, on
    /// its own cache line: allocations on different cores never meet here.
    pub(crate) ledger_locks: [state::ledger::CoreLock; 8],
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
    /// The execution holding this core, if any (spec §4.6, §7.2: one execution per core at a
    /// time): taken by `exec_begin`, freed by the guard's drop or `Models::revoke_exec`.
    pub(crate) exec: crate::sync::ExecSlot,
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

/// The driver handles of live dmems, exactly: a chained hash table keyed by (device, driver
/// handle) whose entries are the dmems' own arena slots. Every live dmem has one driver handle,
/// so a link per dmem slot ([`Capacity::dmems`]) holds every entry there can be: the table
/// never fills and never forgets a handle. Its buckets (one per [`LIVE_LOAD`] dmem slots,
/// rounded up to a power of two) each carry a lock bit: an insertion with its duplicate check, or a removal, is one
/// locked step on one bucket, and lookups of different buckets never meet. All-zero is an
/// unbound table (every lookup empty, every claim refused); bound, all-zero is empty.
///
/// The table keeps no keys: a chain member's key is its dmem's own (`mem_handle`,
/// `device_id`), which the caller's key test reads (`holds(dev, handle, slot)`: whether the
/// dmem of `slot` holds `handle` on `dev`). The test is asked only about slots in the table,
/// under their bucket's lock, and a slot's key must be in its dmem from its claim to its
/// removal.
pub(crate) struct LiveHandles {
    /// Per bucket: the slot + 1 of the chain's first dmem (0: empty chain), or [`LIVE_LOCK`]
    /// alone while a thread works on the chain (that thread holds the head meanwhile).
    buckets: SideTable<AtomicU32>,
    /// Per dmem slot, while the slot's dmem is in the table: the next slot of its chain (+ 1;
    /// 0 ends it). Read and written only under its bucket's lock. A `u32` per slot, so the
    /// ones a run of operations touches stay in cache.
    links: SideTable<AtomicU32>,
}

/// Dmem slots per [`LiveHandles`] bucket (rounded to a power of two of buckets): a full
/// arena's chains average this long, and the buckets take a quarter of a `u32` per dmem
/// slot (32 KiB for [`Capacity::DEFAULT`]), so the ones a run of allocations touches stay in
/// cache.
const LIVE_LOAD: usize = 4;

/// The lock bit of a [`LiveHandles`] bucket.
const LIVE_LOCK: u32 = 1 << 31;

impl LiveHandles {
    /// The link of the slot a chain word names (slot + 1; 0 names none), with that slot.
    #[inline]
    fn link(&self, at: u32) -> Option<(u32, &AtomicU32)> {
        let slot = (at as usize).checked_sub(1)?;
        Some((slot as u32, self.links.entry(slot)?))
    }

    /// The table's storage parts for `c`, in the order [`Self::bind`] takes them: buckets
    /// (the power of two at or above `c.dmems`), then one link per dmem slot.
    pub(crate) const fn parts(c: &Capacity) -> [Part; 2] {
        let d = c.dmems as usize;
        [
            Part::side_table::<AtomicU32>(d.div_ceil(LIVE_LOAD).next_power_of_two()),
            Part::side_table::<AtomicU32>(d),
        ]
    }

    /// Binds the table to its region (`b`), as [`Self::parts`] lays it out.
    pub(crate) fn bind(&mut self, b: &mut Binder, c: &Capacity) {
        let [buckets, links] = Self::parts(c);
        b.side_table(&mut self.buckets, buckets);
        b.side_table(&mut self.links, links);
    }

    /// The bucket of `(dev, handle)` (the table's buckets are a power of two).
    #[inline]
    fn bucket(&self, dev: u32, handle: u64) -> Option<&AtomicU32> {
        let n = self.buckets.entries();
        // The handle mixed by one multiply (the bucket comes from product bits 32 and up),
        // plus the device: the same handle on d devices, d up to the bucket count, lands in d
        // different buckets.
        let h = (handle.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32).wrapping_add(u64::from(dev));
        self.buckets.entry(h as usize & n.wrapping_sub(1))
    }

    /// One try at bucket `b`'s lock: the chain's head (slot + 1, 0 for none), or `None` when
    /// the bucket is held. One swap: while the bucket is held its word is only
    /// the lock bit to everyone else (the holder keeps the head it took and stores the new one
    /// to unlock), so a failed try writing [`LIVE_LOCK`] over it changes nothing.
    #[inline]
    fn try_lock(b: &AtomicU32) -> Option<u32> {
        let w = b.swap(LIVE_LOCK, Ordering::Acquire);
        (w & LIVE_LOCK == 0).then_some(w)
    }

    /// Takes bucket `b`'s lock, waiting while another thread holds it; returns the chain's
    /// head. Waiters read the word until it is unlocked and only then try the swap, so they
    /// do not keep writing the holder's cache line. A chain is held for a walk of at most the
    /// table's links, so the wait is bounded by that.
    #[cold]
    #[inline(never)]
    fn lock_contended(b: &AtomicU32) -> u32 {
        let mut spins = 0u32;
        loop {
            if b.load(Ordering::Relaxed) & LIVE_LOCK == 0 {
                if let Some(w) = Self::try_lock(b) {
                    return w;
                }
            }
            crate::sync::relax(spins);
            spins = spins.saturating_add(1);
        }
    }

    /// Records that the dmem of arena slot `slot` holds `handle` on `dev`, unless a live dmem
    /// holds it already: `false` then (nothing recorded), and for a slot past the table.
    /// `holds` is the key test ([`LiveHandles`]); the dmem of `slot` must hold the key
    /// already, as it does until its [`Self::remove`].
    #[inline]
    pub(crate) fn claim(
        &self,
        dev: u32,
        handle: u64,
        slot: usize,
        holds: impl Fn(u32, u64, u32) -> bool,
    ) -> bool {
        if slot >= self.links.entries() {
            return false;
        }
        let Some(b) = self.bucket(dev, handle) else {
            return false;
        };
        match Self::try_lock(b) {
            Some(head) => self.claim_locked(b, head, dev, handle, slot, &holds),
            None => self.claim_contended(dev, handle, slot, &holds),
        }
    }

    /// [`Self::claim`] waiting for a bucket another thread holds.
    #[cold]
    #[inline(never)]
    fn claim_contended(
        &self,
        dev: u32,
        handle: u64,
        slot: usize,
        holds: &impl Fn(u32, u64, u32) -> bool,
    ) -> bool {
        let Some(b) = self.bucket(dev, handle) else {
            return false;
        };
        let head = Self::lock_contended(b);
        self.claim_locked(b, head, dev, handle, slot, holds)
    }

    /// [`Self::claim`] with bucket `b` locked (`head`: its chain).
    #[inline]
    fn claim_locked(
        &self,
        b: &AtomicU32,
        head: u32,
        dev: u32,
        handle: u64,
        slot: usize,
        holds: &impl Fn(u32, u64, u32) -> bool,
    ) -> bool {
        let mut at = head;
        // At most one step per link: a chain is never longer than the table.
        let mut left = self.links.entries();
        while at != 0 && left != 0 {
            let Some((s, l)) = self.link(at) else {
                break;
            };
            if holds(dev, handle, s) {
                b.store(head, Ordering::Release);
                return false;
            }
            at = l.load(Ordering::Relaxed);
            left -= 1;
        }
        let Some(mine) = self.links.entry(slot) else {
            // Not reached: `claim` checked the slot against the table.
            b.store(head, Ordering::Release);
            return false;
        };
        mine.store(head, Ordering::Relaxed);
        // Unlocks and publishes the new head (`slot + 1 < LIVE_LOCK`: a side table has fewer
        // than 2^31 entries).
        b.store(slot as u32 + 1, Ordering::Release);
        true
    }

    /// The dmem that holds `handle` on `dev` is finalised: its entry goes (nothing changes
    /// when the table does not hold it). A key is in the table once at most ([`Self::claim`]),
    /// so the entry found is that dmem's. `holds` is the key test ([`LiveHandles`]).
    #[inline]
    pub(crate) fn remove(&self, dev: u32, handle: u64, holds: impl Fn(u32, u64, u32) -> bool) {
        let Some(b) = self.bucket(dev, handle) else {
            return;
        };
        match Self::try_lock(b) {
            Some(head) => self.remove_locked(b, head, dev, handle, &holds),
            None => self.remove_contended(dev, handle, &holds),
        }
    }

    /// [`Self::remove`] waiting for a bucket another thread holds.
    #[cold]
    #[inline(never)]
    fn remove_contended(&self, dev: u32, handle: u64, holds: &impl Fn(u32, u64, u32) -> bool) {
        let Some(b) = self.bucket(dev, handle) else {
            return;
        };
        let head = Self::lock_contended(b);
        self.remove_locked(b, head, dev, handle, holds);
    }

    /// [`Self::remove`] with bucket `b` locked (`head`: its chain). The head is tried on its
    /// own first: chains are short until the arena is nearly full, so the entry is usually
    /// there.
    #[inline]
    fn remove_locked(
        &self,
        b: &AtomicU32,
        head: u32,
        dev: u32,
        handle: u64,
        holds: &impl Fn(u32, u64, u32) -> bool,
    ) {
        let Some((s, first)) = self.link(head) else {
            b.store(head, Ordering::Release);
            return;
        };
        let next = first.load(Ordering::Relaxed);
        if holds(dev, handle, s) {
            b.store(next, Ordering::Release);
            return;
        }
        let mut prev = first;
        let mut at = next;
        // At most one step per link, the head's included: a chain is never longer than the
        // table.
        for _ in 1..self.links.entries() {
            let Some((s, l)) = self.link(at) else {
                break;
            };
            let next = l.load(Ordering::Relaxed);
            if holds(dev, handle, s) {
                prev.store(next, Ordering::Relaxed);
                break;
            }
            prev = l;
            at = next;
        }
        b.store(head, Ordering::Release);
    }

    /// Empty (a new `init` with no dmem live: every entry left would be stale). Buckets that
    /// are already empty are only read, so untouched storage stays untouched.
    pub(crate) fn clear(&self) {
        for i in 0..self.buckets.entries() {
            if let Some(b) = self.buckets.entry(i) {
                if b.load(Ordering::Relaxed) != 0 {
                    b.store(0, Ordering::Relaxed);
                }
            }
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
    /// What threads hold while they run callbacks ([`crate::sync::Reentry`]): the calls that
    /// would wait for their own thread are refused (executions are recorded in their cores'
    /// `ExecSlot`s instead).
    pub(crate) reentry: crate::sync::Reentry,
    /// The gate an `ExecGuard`'s drop passes to touch its cores' slots, shut by `zero_tree`
    /// while it rewrites them (`sync::gate_enter` protocol on one word): a guard whose
    /// execution was revoked may be dropped while `init` rewrites the tree.
    pub(crate) exec_gate: AtomicU32,
    /// What the driver refused to free since `init` ([`Nrt::driver_kept`]).
    pub(crate) driver_kept: DriverKeptBooks,
    /// The driver handles of live dmems ([`LiveHandles`]).
    pub(crate) live_handles: LiveHandles,
    /// The ledger's own state beside the tree's rows: the last device OOM
    /// ([`state::ledger::LedgerPool`]).
    pub(crate) ledger: state::ledger::LedgerPool,
    /// The capacities the arenas were bound with (all-zero until bound).
    pub(crate) caps: Capacity,
    /// The storage, when this block owns it (`owned_bytes` bytes, given back on drop by
    /// `owned_free`); null for storage the integrator owns (a `StaticState`).
    pub(crate) owned: *mut u8,
    pub(crate) owned_bytes: usize,
    pub(crate) owned_free: Option<StorageFree>,
    /// The dmem domain's arenas (spec §3): dmems, allocators, weak GC indexes.
    pub(crate) dmem: state::dmem::DmemPool,
    /// The model domain's arenas (spec §4, §5, §6): models, model_dbs, mem_ref sets, ulib sets.
    pub(crate) model: state::model::ModelPool,
    /// The tensor domain's arenas (spec §7): tensors, storages, sets, the execute data locks.
    pub(crate) tensor: state::tensor::TensorPool,
}

/// Where each part of a state block's storage starts, for a [`Capacity`]: the context region
/// ([`ContextLayout`]) first, then the pools' regions, their own `parts` lists summed, the
/// lists their `bind` methods then hand out (one computation for both sizing and binding, so
/// the two cannot disagree).
#[derive(Copy, Clone, Debug)]
struct Plan {
    /// The context region (at offset 0).
    ctx: ContextLayout,
    /// Offsets of the dmem, model and tensor regions, and of the live-handle table's.
    at: [usize; 4],
    /// Their sizes.
    bytes: [usize; 4],
    total: usize,
}

impl Plan {
    /// The layout for `c` (which [`Capacity::check`] accepted: no overflow at 2^24 slots).
    const fn of(c: &Capacity) -> Plan {
        let ctx = ContextLayout::of(c.devices);
        let bytes = [
            Part::total(&state::dmem::DmemPool::parts(c)),
            Part::total(&state::model::ModelPool::parts(c)),
            Part::total(&state::tensor::TensorPool::parts(c)),
            Part::total(&LiveHandles::parts(c)),
        ];
        let at0 = ctx.bytes;
        let at = [
            at0,
            at0 + bytes[0],
            at0 + bytes[0] + bytes[1],
            at0 + bytes[0] + bytes[1] + bytes[2],
        ];
        Plan {
            ctx,
            at,
            bytes,
            total: at[3] + bytes[3],
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
    pub(crate) host: Option<&'a dyn crate::host_heap::HostMem>,
}

/// The address of a borrowed resource (the data pointer: vtables are not unique).
pub(crate) fn addr<T: ?Sized>(r: &T) -> usize {
    (r as *const T).cast::<()>() as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The set of live handles keeps every key it was given however its chains share
    /// buckets: a held key is refused, a removed one (head, middle or tail of its chain) can
    /// be claimed again, and removing a key it does not hold changes nothing.
    #[test]
    fn live_handles_are_exact_along_shared_chains() {
        let st = CoreState::with_capacity(&Capacity {
            dmems: 16,
            ..Capacity::ONE_DEVICE
        })
        .unwrap();
        let t = &st.live_handles;
        assert_eq!(t.buckets.entries(), 4, "a bucket per four dmem slots");
        // Sixteen keys over four buckets: chains of four on average.
        let key = |i: usize| {
            (
                0xb000_0000_0000_0000 | (i as u64) << 28 | i as u64,
                i as u32 % 2,
            )
        };
        // Every bucket is shared: each holds at least two of the keys.
        for b in 0..4 {
            let at = t.buckets.entry(b).unwrap() as *const AtomicU32;
            let keys = (0..16)
                .filter(|&i| core::ptr::eq(t.bucket(key(i).1, key(i).0).unwrap(), at))
                .count();
            assert!(keys >= 2, "bucket {b} holds {keys} keys");
        }
        // One handle on as many devices as there are buckets: as many buckets.
        for i in 0..16 {
            let h = key(i).0;
            for (d, e) in (0..4u32).flat_map(|d| (0..d).map(move |e| (d, e))) {
                assert!(!core::ptr::eq(
                    t.bucket(d, h).unwrap(),
                    t.bucket(e, h).unwrap()
                ));
            }
        }
        // The key test reads the key table, as the dmem side reads a slot's dmem.
        let holds = |d: u32, h: u64, s: u32| key(s as usize) == (h, d);
        for i in 0..16 {
            let (h, d) = key(i);
            assert!(t.claim(d, h, i, holds), "key {i} is new");
        }
        for i in 0..16 {
            let (h, d) = key(i);
            assert!(!t.claim(d, h, (i + 1) % 16, holds), "key {i} is held");
            assert!(!t.claim(d ^ 1, h, 16, holds), "slot 16 is past the table");
        }
        // Out of every chain, in an order that takes heads, middles and tails.
        for i in [5, 0, 15, 7, 10] {
            let (h, d) = key(i);
            t.remove(d, h, holds);
            assert!(t.claim(d, h, i, holds), "key {i} was removed");
            t.remove(d, h, holds);
        }
        for i in 0..16 {
            let (h, d) = key(i);
            let removed = [5, 0, 15, 7, 10].contains(&i);
            assert_eq!(t.claim(d, h, i, holds), removed, "key {i}");
        }
        t.remove(0, 0x1234, holds);
        t.remove(key(3).1 ^ 1, key(3).0, holds);
        assert!(
            !t.claim(key(3).1, key(3).0, 3, holds),
            "the same handle on another device is another key"
        );
        t.clear();
        assert!(t.claim(key(3).1, key(3).0, 3, holds), "cleared");
    }

    /// Threads claiming and removing keys that share buckets never lose or duplicate one.
    #[test]
    fn live_handles_hold_under_racing_chain_edits() {
        extern crate std;
        let st = CoreState::with_capacity(&Capacity {
            dmems: 16,
            ..Capacity::ONE_DEVICE
        })
        .unwrap();
        let t = &st.live_handles;
        let key = |slot: usize| 0xb000_0000_0000_0000 | (slot as u64) << 28 | slot as u64;
        // Slot `s` holds key `s` on device 0 (slots 8 and up are never claimed).
        let holds = move |d: u32, h: u64, s: u32| d == 0 && h == key(s as usize);
        std::thread::scope(|s| {
            for slot in 0..8usize {
                s.spawn(move || {
                    let h = key(slot);
                    for _ in 0..20_000 {
                        assert!(t.claim(0, h, slot, holds), "slot {slot}'s key is not held");
                        assert!(!t.claim(0, h, slot + 8, holds), "slot {slot}'s key is held");
                        t.remove(0, h, holds);
                    }
                });
            }
        });
        for slot in 0..8usize {
            assert!(t.claim(0, key(slot), slot, holds), "left empty");
        }
    }
}
