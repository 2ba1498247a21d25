//! The simulated Neuron device: a [`Driver`] that carves memory the way the kernel driver does
//! (public ABI §3 "How the driver carves memory"), so code that works on it works against
//! `/dev/neuron<N>`.
//!
//! Per device: one [`Carve`] pool per HBM channel, minus a 16 MiB firmware carve-out at the
//! start of the channel, plus a separate small-object pool (the top 1 GiB of the channel) for
//! requests ≤ 512 KiB that falls back to the main pool when full; and one host DMA pool with its
//! own capacity. Requests are rounded up to the 4 KiB page. Errors are errno values exactly as
//! the driver returns them.
//!
//! # Placement
//!
//! By default ([`Placement::Genalloc`]) HBM requests are placed as the driver's genalloc pools
//! place them, address for address: first fit, aligned first fit, fallback between the
//! small-object and main pools in both directions, the contiguous scratchpad at fixed offsets
//! below the main pool's end (docs/PLACEMENT.md lists the rules and their driver source lines;
//! `tests/genalloc_diff.rs` checks them against a page-bitmap model). [`Placement::Tlsf`] is
//! the faster TLSF good-fit carve with this simulator's earlier routing.
//!
//! # Address map (per device)
//!
//! ```text
//! HBM channel c:  pa = c * channel_size + offset
//!   [0, 16 MiB)                          firmware carve-out (never handed out)
//!   [16 MiB, channel_size - small)       main pool
//!   [channel_size - small, channel_size) small-object pool (small = min(1 GiB, channel_size / 4))
//! host DMA pool:  pa = HOST_PA_BASE + offset, offset < host_dma_capacity
//! ```
//!
//! # Bytes
//!
//! The core simulator has no memory of its own. [`SimDevice::set_backing`] gives a device a
//! byte range laid out as all HBM channels back to back (`channels * channel_size` bytes, so an
//! HBM address *is* its backing offset) followed by the host pool (`host_dma_capacity` bytes);
//! [`SimDevice::backing_len`] says how many bytes that is (≈ 104 GiB for trn2: the std shim
//! maps it with `MAP_NORESERVE`, so only touched pages cost memory). Without a backing,
//! `copy_in`/`copy_out`/`fill` return `EOPNOTSUPP` after their bounds checks.
//!
//! # Footprint
//!
//! Each pool's metadata is a fixed node array ([`MAIN_NODES`], [`SMALL_NODES`], [`HOST_NODES`]
//! = 262 146 nodes of 56 B each: one per page of the 1 GiB small-object pool, so that pool
//! holds every pattern the driver's does and every pool at least 131 072 live allocations; the
//! genalloc placement's address treaps live in the same nodes, plus a fixed 130 KiB bucket
//! index per pool, so nothing grows with the channel size). A [`SimDevice`] for 32 devices × 4
//! channels is ~4.2 GB of *zero-valid* memory: a zeroed mapping or a `.bss` static costs
//! nothing until a pool is used, [`SimDevice::init`] touches a few hundred bytes per pool, and
//! nodes are taken in order, so the memory in use follows the allocations live at the peak.

use crate::atomic::AtomicU64;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::abi::al_hal_tpb_arch_type_t;
use crate::abi::meta::ZeroValid;
use crate::abi::nrt_mutex_t;
use crate::carve::{Carve, CarveBlock, CarveError, CarveId, Policy};
use crate::device::Geometry;
use crate::driver::{
    errno, feature, AllocRequest, DeviceInfo, Driver, Errno, FreeHistogram, PoolStats,
};

mod config;
mod driver_impl;
mod hooks;

pub use config::{parse_device_spec, Placement, Preset, SimConfig, SimMemInfo};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

pub use crate::device::{
    DEFAULT_HOST_DMA_CAPACITY, FIRMWARE_CARVEOUT, MAX_DEVICES, MAX_HBM_CHANNELS, PAGE_SIZE,
};
pub use crate::driver::SMALL_OBJECT_MAX;
/// Size of the small-object pool at the top of a full-size channel (public ABI §3); shrunk
/// to a quarter of the channel for test geometries ([`SimConfig::channel_size_override`]).
pub const SMALL_REGION_SIZE: u64 = GIB;
/// Physical address of the first host DMA pool byte (its own range, far above any HBM).
pub const HOST_PA_BASE: u64 = 1 << 48;
/// `nc_id` must be below this (range checked, not a placement; public ABI §3).
pub const MAX_NC_ID: u32 = 8;
/// Smallest channel size accepted as an override (carve-out + small pool + main pool).
pub const MIN_CHANNEL_SIZE: u64 = 32 * MIB;
/// Largest channel or host-pool size accepted (keeps HBM addresses below [`HOST_PA_BASE`]).
pub const MAX_POOL_SIZE: u64 = 1 << 44;
/// Default node capacity of each pool (main HBM, small-object, host DMA): the `NODES`
/// parameter of [`SimDevice`] (the integrator sizes it). One node per page of the 1 GiB
/// small-object pool, plus two: every block, free or used, covers at least a page, so that
/// pool holds any allocation pattern the driver's holds (262 144 live 4 KiB allocations), and
/// every other pool at least 131 072 live allocations whatever the pattern. Nodes cost memory
/// only once used.
pub const DEFAULT_NODES: usize = (1 << 18) + 2;
/// Node capacity of each main HBM pool of the default [`SimDevice`].
pub const MAIN_NODES: usize = DEFAULT_NODES;
/// Node capacity of each small-object pool of the default [`SimDevice`].
pub const SMALL_NODES: usize = DEFAULT_NODES;
/// Node capacity of each host DMA pool of the default [`SimDevice`].
pub const HOST_NODES: usize = DEFAULT_NODES;
/// Carves per device ([`SimDevice::handle_key`]): a main and a small-object pool per HBM
/// channel, then the host pool.
pub const CARVES_PER_DEVICE: u32 = 2 * MAX_HBM_CHANNELS + 1;
/// Node indices of any carve are below this ([`SimDevice::handle_key`]).
pub const MAX_CARVE_NODES: u32 = DEFAULT_NODES as u32 + 1;
/// The first allocation category byte that is not a category (`mem_alloc_category_t` MAX,
/// public ABI §3): refused with `EINVAL`.
pub const CATEGORY_MAX: u8 = 20;

// Handle layout (public ABI §3: opaque non-zero u64):
// bits 0..19 node index, 19..24 device, 24..28 pool, 28..60 generation, 60..64 tag.
const H_INDEX_BITS: u32 = 19;
const H_DEV_SHIFT: u32 = 19;
const H_POOL_SHIFT: u32 = 24;
const H_GEN_SHIFT: u32 = 28;
const H_TAG_SHIFT: u32 = 60;
const H_TAG: u64 = 0b1011;
const H_INDEX_MASK: u64 = (1 << H_INDEX_BITS) - 1;
const H_DEV_MASK: u64 = ((1 << (H_POOL_SHIFT - H_DEV_SHIFT)) - 1) << H_DEV_SHIFT;
const H_POOL_MASK: u64 = (1 << (H_GEN_SHIFT - H_POOL_SHIFT)) - 1;
const H_TAG_MASK: u64 = !0 << H_TAG_SHIFT;
/// Set in the pool field of host and scratchpad handles, clear in main and small-object ones.
const H_NOT_HBM_BIT: u64 = (POOL_HOST as u64) << H_POOL_SHIFT;
const POOL_HOST: u32 = 2 * MAX_HBM_CHANNELS;

const _: () = {
    assert!(MAIN_NODES < MAX_CARVE_NODES as usize);
    assert!(SMALL_NODES < MAX_CARVE_NODES as usize);
    assert!(HOST_NODES < MAX_CARVE_NODES as usize);
    assert!(MAIN_NODES < 1 << H_INDEX_BITS);
    assert!(SMALL_NODES < 1 << H_INDEX_BITS);
    assert!(HOST_NODES < 1 << H_INDEX_BITS);
    assert!((MAX_DEVICES as u64) <= 1 << (H_POOL_SHIFT - H_DEV_SHIFT));
    assert!(((POOL_HOST + MAX_HBM_CHANNELS) as u64) < 1 << (H_GEN_SHIFT - H_POOL_SHIFT));
    assert!(H_GEN_SHIFT + 32 == H_TAG_SHIFT);
    // Pool codes: main `c`, small-object `MAX_HBM_CHANNELS + c`, then `POOL_HOST` and up in a
    // field of `2 * POOL_HOST` values, so one bit (`H_NOT_HBM_BIT`) tells main and
    // small-object codes from all others, and `code % MAX_HBM_CHANNELS` is the channel of both.
    assert!(MAX_HBM_CHANNELS.is_power_of_two() && POOL_HOST == 2 * MAX_HBM_CHANNELS);
    assert!(1 << (H_GEN_SHIFT - H_POOL_SHIFT) == 2 * POOL_HOST as u64);
};

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
enum Pool {
    Main(u32),
    Small(u32),
    Host,
    /// A contiguous-scratchpad block of HBM `c`'s main pool (genalloc placement).
    Scratch(u32),
}

impl Pool {
    const fn code(self) -> u32 {
        match self {
            Pool::Main(c) => c,
            Pool::Small(c) => MAX_HBM_CHANNELS + c,
            Pool::Host => POOL_HOST,
            Pool::Scratch(c) => POOL_HOST + 1 + c,
        }
    }
    const fn from_code(v: u32) -> Option<Self> {
        if v < MAX_HBM_CHANNELS {
            Some(Pool::Main(v))
        } else if v < POOL_HOST {
            Some(Pool::Small(v - MAX_HBM_CHANNELS))
        } else if v == POOL_HOST {
            Some(Pool::Host)
        } else if v <= POOL_HOST + MAX_HBM_CHANNELS {
            Some(Pool::Scratch(v - POOL_HOST - 1))
        } else {
            None
        }
    }
}

/// One HBM channel's pools (the driver keeps a mempool per channel); guarded by its
/// [`Part`]'s lock.
struct ChannelState<const NODES: usize> {
    main: Carve<NODES>,
    small: Carve<NODES>,
    /// Bytes of contiguous scratchpad carved below the main pool's end (the driver's
    /// `mempool.scratchpad_size`).
    scratchpad: u64,
    /// `memory_alloc` calls for this channel since `init` (counted under its lock, so the
    /// hot path pays no extra atomic read-modify-write).
    alloc_calls: u64,
}

/// A device's host DMA pool; guarded by its [`Part`]'s lock.
struct HostState<const NODES: usize> {
    host: Carve<NODES>,
    /// `memory_alloc` calls for the host pool since `init`.
    alloc_calls: u64,
}

/// A piece of a device with its own lock, on its own cache lines: each HBM channel and the
/// host pool, so calls for different channels (logical cores on different HBMs) never meet
/// on a lock or a hot cache line. No call takes two parts' locks. The lock
/// comes after a cache line of padding, so it never shares a line with the previous part's
/// state (padding, not alignment: see `sync::LINE_STRIDE`).
#[repr(C)]
struct Part<S> {
    _pad: [u8; 64],
    lock: nrt_mutex_t,
    state: UnsafeCell<S>,
}

impl<S> Part<S> {
    /// Runs `f` on the part's state with its lock held.
    #[inline(always)]
    fn with<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        let _g = self.lock.lock();
        // SAFETY: the part's lock is held for the whole call, so this is the only reference
        // to the state (every other path takes the same lock or has `&mut self`).
        f(unsafe { &mut *self.state.get() })
    }

    /// [`Part::with`] for a small `f` that captures little: an uncontended lock is taken
    /// inline and `f` runs here; a contended one sends the whole call out of line
    /// ([`Part::with_contended`]), so the fast path has no call between the caller's values
    /// and `f`.
    #[inline(always)]
    fn with_split<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        match self.lock.try_lock() {
            // SAFETY: the part's lock is held (by `_g`) for the whole call, so this is the
            // only reference to the state (every other path takes the same lock or has
            // `&mut self`).
            Some(_g) => f(unsafe { &mut *self.state.get() }),
            None => self.with_contended(f),
        }
    }

    /// [`Part::with_split`] when the lock was held: waits for it, then runs `f`.
    #[cold]
    #[inline(never)]
    fn with_contended<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        self.with(f)
    }
}

/// The driver's `mem_alloc_category_t` CONTIGUOUS_SCRATCHPAD_DEVICE (public ABI §3).
const CATEGORY_CONTIGUOUS_SCRATCHPAD: u8 = 19;
/// The driver refuses aligned requests above `INT_MAX` (`mc_alloc_internal`).
const MAX_ALIGN: u64 = i32::MAX as u64;

impl<const NODES: usize> ChannelState<NODES> {
    /// The driver's HBM placement for a page-rounded request (aws-neuron-driver 2.24
    /// `neuron_mempool.c` `mc_alloc_internal`; docs/PLACEMENT.md):
    ///
    /// 1. CONTIGUOUS_SCRATCHPAD_DEVICE: exactly `[end - scratchpad - size, end - scratchpad)`
    ///    of the main pool, `end` its end (`get_offset_for_scratchpad_alloc` +
    ///    `gen_pool_fixed_alloc`), no fallback; success grows the scratchpad by `size`.
    /// 2. Otherwise the pool is the small-object region for `size <= SMALL_OBJECT_MAX`, else
    ///    the main pool, and the other one is the fallback (`alt_pool`), tried when the first
    ///    has no room. A pool out of nodes refuses instead ([`CarveError::NodesExhausted`]:
    ///    the driver has no such limit and would have placed the request there).
    /// 3. `align > PAGE_SIZE`: aligned first fit (`gen_pool_first_fit_align`, aligned on the
    ///    absolute address), `EINVAL` above `INT_MAX`; else first fit (`gen_pool_first_fit`).
    fn genalloc_place(
        &mut self,
        req: &AllocRequest,
        size: u64,
    ) -> Result<(Pool, Result<CarveBlock, CarveError>), Errno> {
        let c = req.hbm_idx as usize;
        if req.category == CATEGORY_CONTIGUOUS_SCRATCHPAD {
            let main = &mut self.main;
            let r = (main.base() + main.capacity())
                .checked_sub(self.scratchpad)
                .and_then(|end| end.checked_sub(size))
                .filter(|&at| at >= main.base())
                .ok_or(CarveError::OutOfSpace)
                .and_then(|at| main.alloc_at(at, size));
            if r.is_ok() {
                self.scratchpad += size;
            }
            return Ok((Pool::Scratch(c as u32), r));
        }
        let align = if req.align > PAGE_SIZE { req.align } else { 0 };
        if align > MAX_ALIGN {
            return Err(errno::EINVAL);
        }
        let small_first = size <= SMALL_OBJECT_MAX;
        let mut r = Err(CarveError::OutOfSpace);
        for small in [small_first, !small_first] {
            r = if small {
                self.small.alloc(size, align)
            } else {
                self.main.alloc(size, align)
            };
            let pool = if small {
                Pool::Small(c as u32)
            } else {
                Pool::Main(c as u32)
            };
            // Only a pool with no room sends the request on (`alt_pool`). One whose node
            // array is full refuses it: the driver has no such limit and would have placed
            // it here, so the other pool would be a placement the driver never makes.
            match r {
                Err(CarveError::OutOfSpace) => continue,
                _ => return Ok((pool, r)),
            }
        }
        Ok((Pool::Main(c as u32), r))
    }
}

/// Everything one device owns.
struct DeviceSlot<const NODES: usize> {
    channels: [Part<ChannelState<NODES>>; MAX_HBM_CHANNELS as usize],
    host: Part<HostState<NODES>>,
    /// The device's bytes ([`SimDevice::set_backing`]); written only through `&mut self`.
    backing: *mut u8,
    backing_len: u64,
}

/// The simulated device set (public ABI §3–§4; see the module docs). Valid when all-zero
/// (an uninitialised simulator exposes no device); set up with [`SimDevice::init`].
///
/// Sized by the integrator: `DEVICES` device slots (1..=32) and `NODES`
/// nodes per pool (each device has 4 main + 4 small-object + 1 host pool; at least
/// `NODES / 2 - 1` live allocations per pool whatever the pattern, and one per node when the
/// pool has no more pages than nodes). The defaults are the 32-device simulator with
/// [`DEFAULT_NODES`] per pool; `SimDevice<1, 1024>` is a one-device profile of about 0.8 MB.
// `repr(C)`, the settings first: every call reads them, and at the front they sit at small
// offsets from `self` rather than after the gigabytes of slots. Every part's lock follows a
// cache line of padding ([`Part`]), so none shares a line with them.
#[repr(C)]
pub struct SimDevice<const DEVICES: usize = 32, const NODES: usize = DEFAULT_NODES> {
    device_count: u32,
    channels: u32,
    channel_size: u64,
    host_capacity: u64,
    /// Fault: the allocation call that brings this from 1 to 0 fails.
    fail_countdown: AtomicU64,
    /// Fault: bit `c` set → every allocation of category `c` fails.
    fail_categories: AtomicU64,
    /// `memory_alloc` calls naming no attached device or no channel of one (the others are
    /// counted per channel and host pool, [`ChannelState`], [`HostState`]).
    stray_alloc_calls: AtomicU64,
    feature_flags: AtomicU64,
    aligned_alloc: AtomicU32,
    preset: u8,
    /// [`Placement`] as its discriminant.
    placement: u8,
    slots: [DeviceSlot<NODES>; DEVICES],
}

// SAFETY: every member is zero-valid: the locks are unlocked when zero, atomics and integers
// are zero, the carves are `ZeroValid` (uninitialised), the backing pointer is null (none).
// `device_count == 0` makes every driver call return ENODEV until `init`.
unsafe impl<const D: usize, const N: usize> ZeroValid for SimDevice<D, N> {}
// Not over-aligned (see `sync::LINE_STRIDE`): `new_boxed` must get calloc's lazily zeroed
// pages for its 191 MB.
const _: () = assert!(core::mem::align_of::<SimDevice>() <= 16);
// SAFETY: all mutable per-device state (carves) is reached only with its part's lock held
// (or through `&mut self`); the backing pointer and the rest are atomics or written only
// through `&mut self`. The backing memory is, by `set_backing`'s contract, usable from any thread.
unsafe impl<const D: usize, const N: usize> Sync for SimDevice<D, N> {}
// SAFETY: as above; the raw backing pointer is not tied to the creating thread.
unsafe impl<const D: usize, const N: usize> Send for SimDevice<D, N> {}

fn carve_errno(e: CarveError) -> Errno {
    e.errno()
}

impl<const DEVICES: usize, const NODES: usize> SimDevice<DEVICES, NODES> {
    /// The parameters are in range: 1..=32 devices (the handle encoding's 5 device bits),
    /// 2..2^19 nodes per pool (its 19 index bits).
    const PARAMS_OK: () = {
        assert!(DEVICES >= 1 && DEVICES <= MAX_DEVICES as usize);
        assert!(NODES >= 2 && NODES < 1 << H_INDEX_BITS);
    };

    /// Sets the simulator up (or resets it) for `cfg`: every pool empty, faults cleared, the
    /// call counter at 0, backings forgotten. `EINVAL` for a device count outside
    /// `1..=DEVICES` or a bad size override.
    pub fn init(&mut self, cfg: &SimConfig) -> Result<(), Errno> {
        #[allow(clippy::let_unit_value)]
        let () = Self::PARAMS_OK;
        if cfg.devices == 0 || cfg.devices as usize > DEVICES {
            return Err(errno::EINVAL);
        }
        let info = cfg.preset.device_info();
        let cs = cfg.channel_size_override.unwrap_or(info.hbm_channel_size);
        if !cs.is_multiple_of(PAGE_SIZE) || !(MIN_CHANNEL_SIZE..=MAX_POOL_SIZE).contains(&cs) {
            return Err(errno::EINVAL);
        }
        let host = cfg.host_dma_capacity;
        if !host.is_multiple_of(PAGE_SIZE) || !(PAGE_SIZE..=MAX_POOL_SIZE).contains(&host) {
            return Err(errno::EINVAL);
        }
        let small = small_region(cs);
        for (d, slot) in self.slots.iter_mut().enumerate() {
            if d as u32 >= cfg.devices {
                break;
            }
            for c in 0..info.hbm_channels {
                let st = slot.channels[c as usize].state.get_mut();
                let ch = c as u64 * cs;
                let policy = cfg.placement.policy();
                st.main
                    .init_with(
                        ch + FIRMWARE_CARVEOUT,
                        cs - FIRMWARE_CARVEOUT - small,
                        PAGE_SIZE,
                        policy,
                    )
                    .map_err(carve_errno)?;
                st.small
                    .init_with(ch + cs - small, small, PAGE_SIZE, policy)
                    .map_err(carve_errno)?;
                st.scratchpad = 0;
                st.alloc_calls = 0;
            }
            let hs = slot.host.state.get_mut();
            hs.host
                .init(HOST_PA_BASE, host, PAGE_SIZE)
                .map_err(carve_errno)?;
            hs.alloc_calls = 0;
            slot.backing = core::ptr::null_mut();
            slot.backing_len = 0;
        }
        self.device_count = cfg.devices;
        self.preset = cfg.preset as u8;
        self.channels = info.hbm_channels;
        self.channel_size = cs;
        self.host_capacity = host;
        self.placement = cfg.placement as u8;
        *self.aligned_alloc.get_mut() = u32::from(cfg.aligned_alloc);
        *self.feature_flags.get_mut() = cfg.feature_flags.unwrap_or(info.feature_flags);
        *self.stray_alloc_calls.get_mut() = 0;
        *self.fail_countdown.get_mut() = 0;
        *self.fail_categories.get_mut() = 0;
        Ok(())
    }

    /// A zeroed simulator on the heap, initialised for `cfg`, of any size (feature `alloc`;
    /// never built on the stack).
    #[cfg(any(test, feature = "alloc"))]
    pub fn new_boxed_sized(cfg: &SimConfig) -> Result<alloc::boxed::Box<Self>, Errno> {
        let b = alloc::boxed::Box::<Self>::new_zeroed();
        // SAFETY: `SimDevice` is `ZeroValid`: all-zero bytes are its uninitialised state.
        let mut b = unsafe { b.assume_init() };
        b.init(cfg)?;
        Ok(b)
    }

    /// The preset the simulator was initialised with (`None` before `init`).
    pub fn preset(&self) -> Option<Preset> {
        Preset::from_u8(self.preset)
    }

    /// The HBM placement the simulator was initialised with.
    pub fn placement(&self) -> Placement {
        if self.placement == Placement::Tlsf as u8 {
            Placement::Tlsf
        } else {
            Placement::Genalloc
        }
    }

    fn genalloc(&self) -> bool {
        self.placement == Placement::Genalloc as u8
    }

    /// Bytes per HBM channel (after any override).
    pub fn channel_size(&self) -> u64 {
        self.channel_size
    }

    /// Bytes a backing for device `dev` must have: all HBM channels back to back, then the
    /// host pool (0 for a device that does not exist).
    pub fn backing_len(&self, dev: u32) -> u64 {
        if dev >= self.device_count {
            return 0;
        }
        self.channels as u64 * self.channel_size + self.host_capacity
    }

    /// Gives device `dev` bytes: `[base, base + len)` holds all HBM channels back to back
    /// (HBM address = offset) followed by the host pool. A null `base` removes the backing.
    /// `ENODEV` for a bad device, `EINVAL` when `len < backing_len(dev)`.
    ///
    /// # Safety
    /// Unless `base` is null, `base` must be valid for reads and writes of `len` bytes from any
    /// thread, and nothing else may access those bytes, for as long as this simulator may use
    /// them: until the backing is replaced or removed, `init` runs again, or the simulator is
    /// dropped.
    pub unsafe fn set_backing(&mut self, dev: u32, base: *mut u8, len: u64) -> Result<(), Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        if !base.is_null() && len < self.backing_len(dev) {
            return Err(errno::EINVAL);
        }
        let slot = &mut self.slots[dev as usize];
        slot.backing = base;
        slot.backing_len = if base.is_null() { 0 } else { len };
        Ok(())
    }

    /// The kernel's checks of a MEM_ALLOC request and the injected faults, in that order;
    /// returns the page-rounded size.
    fn check_alloc(&self, req: &AllocRequest, fire: bool) -> Result<u64, Errno> {
        if req.size == 0
            || req.nc_id >= MAX_NC_ID
            || req.region != 0
            || req.category >= CATEGORY_MAX
            || (req.align != 0 && !req.align.is_power_of_two())
        {
            return Err(errno::EINVAL);
        }
        if req.host {
            if req.align != 0 {
                return Err(errno::EINVAL); // the host pool refuses aligned requests
            }
        } else {
            if req.hbm_idx >= self.channels {
                return Err(errno::EINVAL);
            }
            if req.align != 0 && self.aligned_alloc.load(Ordering::Acquire) == 0 {
                return Err(errno::EINVAL);
            }
        }
        if self.genalloc() && req.size > i64::MAX as u64 {
            return Err(errno::EINVAL); // `mc_alloc_internal`: size > INT64_MAX
        }
        let category_fault = req.category < 64
            && self.fail_categories.load(Ordering::Acquire) >> req.category & 1 != 0;
        if fire || category_fault {
            return Err(errno::ENOMEM);
        }
        // Page rounding; a size that cannot be rounded is larger than any pool.
        req.size
            .checked_add(PAGE_SIZE - 1)
            .map(|s| s & !(PAGE_SIZE - 1))
            .ok_or(errno::ENOMEM)
    }

    /// MEM_ALLOC: carves the request from its pool; returns `(handle, physical address)`.
    ///
    /// The common request (HBM of an attached device, natural alignment, no scratchpad, no
    /// fault armed) is answered here after a few combined tests; every other one goes through
    /// [`SimDevice::alloc_checked`], the kernel's checks in order, and a refusal by the pool
    /// through [`SimDevice::alloc_refused`].
    #[inline(always)]
    fn alloc_block(&self, dev: u32, req: &AllocRequest) -> Result<(u64, u64), Errno> {
        // What `check_alloc` and the fault switches pass without a word: HBM at the natural
        // alignment in region 0 (one test for the three), a core in range, a category below
        // the scratchpad's (so below `CATEGORY_MAX`), a size in `1..=i64::MAX` (page rounding
        // cannot overflow, genalloc's `INT64_MAX` test passes), a channel and device that
        // exist, and no fault armed (no countdown to step, no category bit). The request's
        // own tests are combined without short-circuits: one branch for them.
        let args_plain = ((req.align | req.region as u64 | req.host as u64) == 0)
            & (req.nc_id < MAX_NC_ID)
            & (req.category < CATEGORY_CONTIGUOUS_SCRATCHPAD)
            & (req.size.wrapping_sub(1) < i64::MAX as u64);
        if !args_plain
            || req.hbm_idx >= self.channels
            || dev >= self.device_count
            || (self.fail_countdown.load(Ordering::Acquire)
                | self.fail_categories.load(Ordering::Acquire))
                != 0
        {
            return self.alloc_checked(dev, req);
        }
        let c = req.hbm_idx;
        let (size, small) = Self::plain_placement(req);
        // The handle's tag, device and pool bits from the pool chosen here: the carve's
        // answer only adds the node's index and generation.
        let pool = if small { Pool::Small(c) } else { Pool::Main(c) };
        let prefix = Self::pool_prefix(dev, pool);
        self.channel_part(dev, c).with(|st| {
            st.alloc_calls += 1;
            let carve = if small { &mut st.small } else { &mut st.main };
            match carve.alloc(size, 0) {
                Ok(b) => Ok((prefix | Self::id_bits(b.id), b.addr)),
                Err(e) => self.alloc_refused(dev, req, st, e),
            }
        })
    }

    /// HBM channel `c` of device `dev`, both known to exist (`dev < device_count <= DEVICES`,
    /// `c < channels <= MAX_HBM_CHANNELS`): the remainders leave the indices unchanged and
    /// spare the hot paths the bounds checks.
    #[inline(always)]
    fn channel_part(&self, dev: u32, c: u32) -> &Part<ChannelState<NODES>> {
        &self.slots[dev as usize % DEVICES].channels[(c % MAX_HBM_CHANNELS) as usize]
    }

    /// A plain HBM request's page-rounded size, and whether its first pool is the
    /// small-object region: both placements try that region first for a small request and
    /// the main pool first for a larger one; only the fallback differs (`alloc_refused`).
    /// For a request that passed [`SimDevice::alloc_block`]'s plain test (its size is at most
    /// `i64::MAX`, so the rounding cannot overflow).
    #[inline(always)]
    fn plain_placement(req: &AllocRequest) -> (u64, bool) {
        let size = (req.size + (PAGE_SIZE - 1)) & !(PAGE_SIZE - 1);
        (size, size <= SMALL_OBJECT_MAX)
    }

    /// The rest of a plain HBM request whose first pool refused it with `e`: the fallback
    /// pool when the placement has one (a full small-object region falls back to the main
    /// pool; under genalloc a full main pool falls back to the small-object region too), then
    /// the refusal as [`SimDevice::placed`] reports it. Called with the channel's lock held,
    /// for a request that passed [`SimDevice::alloc_block`]'s plain test; its rounded size and
    /// first pool are derived again here ([`SimDevice::plain_placement`]) rather than kept
    /// live across the hot path's carve call.
    #[cold]
    #[inline(never)]
    fn alloc_refused(
        &self,
        dev: u32,
        req: &AllocRequest,
        st: &mut ChannelState<NODES>,
        e: CarveError,
    ) -> Result<(u64, u64), Errno> {
        let c = req.hbm_idx;
        let (size, small_first) = Self::plain_placement(req);
        let (pool, r) = match e {
            CarveError::OutOfSpace if small_first => (Pool::Main(c), st.main.alloc(size, 0)),
            CarveError::OutOfSpace if self.genalloc() => (Pool::Small(c), st.small.alloc(size, 0)),
            e if small_first => (Pool::Small(c), Err(e)),
            e => (Pool::Main(c), Err(e)),
        };
        self.placed(dev, req, size, pool, r, || {
            hbm_stats(&st.main, &st.small, req.align, self.genalloc())
        })
    }

    /// MEM_ALLOC with every check of the kernel, in its order: the device, the arguments
    /// ([`SimDevice::check_alloc`]), the injected faults, then the placement.
    #[cold]
    #[inline(never)]
    fn alloc_checked(&self, dev: u32, req: &AllocRequest) -> Result<(u64, u64), Errno> {
        // Only touch the countdown (a CAS) when a fault is armed.
        let fire = self.fail_countdown.load(Ordering::Acquire) != 0
            && self
                .fail_countdown
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1))
                == Ok(1);
        if dev >= self.device_count || (!req.host && req.hbm_idx >= self.channels) {
            self.stray_alloc_calls.fetch_add(1, Ordering::AcqRel);
            return Err(if dev >= self.device_count {
                errno::ENODEV
            } else {
                self.check_alloc(req, fire).err().unwrap_or(errno::EINVAL)
            });
        }
        let slot = &self.slots[dev as usize];
        if req.host {
            return slot.host.with(|st| {
                st.alloc_calls += 1;
                let size = self.check_alloc(req, fire)?;
                let r = st.host.alloc(size, 0);
                self.placed(dev, req, size, Pool::Host, r, || st.host.stats().into())
            });
        }
        slot.channels[req.hbm_idx as usize].with(|st| {
            st.alloc_calls += 1;
            let size = self.check_alloc(req, fire)?;
            let (pool, r) = if self.genalloc() {
                st.genalloc_place(req, size)?
            } else {
                let c = req.hbm_idx;
                // As under genalloc: only a full small-object pool falls back to the main
                // pool; one out of nodes refuses (`placed` logs it).
                let small = if size <= SMALL_OBJECT_MAX {
                    match st.small.alloc(size, req.align) {
                        Err(CarveError::OutOfSpace) => None,
                        r => Some(r),
                    }
                } else {
                    None
                };
                match small {
                    Some(r) => (Pool::Small(c), r),
                    None => (Pool::Main(c), st.main.alloc(size, req.align)),
                }
            };
            self.placed(dev, req, size, pool, r, || {
                hbm_stats(&st.main, &st.small, req.align, self.genalloc())
            })
        })
    }

    /// The answer to a MEM_ALLOC the pool of part `pool` placed (`r`): the handle and address,
    /// or the driver's errno (an out-of-memory logged with `stats()`, the pool's figures).
    fn placed(
        &self,
        dev: u32,
        req: &AllocRequest,
        size: u64,
        pool: Pool,
        r: Result<CarveBlock, CarveError>,
        stats: impl FnOnce() -> PoolStats,
    ) -> Result<(u64, u64), Errno> {
        {
            match r {
                Ok(b) => Ok((Self::encode(dev, pool, b.id), b.addr)),
                Err(CarveError::NodesExhausted) => {
                    // Space may be left, but the pool cannot track another allocation. The
                    // driver has no such limit; refusing (with its out-of-memory errno) and
                    // saying so keeps the limit from ever changing a placement silently
                    // (docs/PLACEMENT.md "Limits").
                    let (kind, c) = match pool {
                        Pool::Main(c) => ("main", c),
                        Pool::Small(c) => ("small-object", c),
                        Pool::Scratch(c) => ("main (contiguous scratchpad)", c),
                        Pool::Host => ("host DMA", 0),
                    };
                    if req.host {
                        warn!(
                            "nd{}: the {} pool tracks no more allocations (its node array of {} \
                             is full, a limit of the simulator the driver does not have): {} \
                             bytes refused with ENOMEM, not placed in another pool",
                            dev, kind, NODES, size
                        );
                    } else {
                        warn!(
                            "nd{}: HBM {} {} pool tracks no more allocations (its node array of \
                             {} is full, a limit of the simulator the driver does not have): {} \
                             bytes refused with ENOMEM, not placed in another pool",
                            dev, c, kind, NODES, size
                        );
                    }
                    Err(errno::ENOMEM)
                }
                Err(e) => {
                    if e.errno() == errno::ENOMEM {
                        self.oom_log(dev, req, size, stats());
                    }
                    Err(e.errno())
                }
            }
        }
    }

    /// Runs `f` on HBM channel `c` of device `dev` with its lock held (`ENODEV` / `EINVAL`
    /// for a device or channel that does not exist).
    fn with_channel<R>(
        &self,
        dev: u32,
        c: u32,
        f: impl FnOnce(&mut ChannelState<NODES>) -> Result<R, Errno>,
    ) -> Result<R, Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        if c >= self.channels {
            return Err(errno::EINVAL);
        }
        self.slots[dev as usize].channels[c as usize].with(f)
    }

    /// Runs `f` on the host DMA pool of device `dev` with its lock held (`ENODEV` for a
    /// device that does not exist).
    fn with_host<R>(
        &self,
        dev: u32,
        f: impl FnOnce(&mut HostState<NODES>) -> Result<R, Errno>,
    ) -> Result<R, Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        self.slots[dev as usize].host.with(f)
    }

    /// Runs `f(slot, block)` on live allocation `id` of `pool` on device `dev` (`EINVAL` when
    /// it is not live), with the lock of the part that holds it kept for the whole call: the
    /// block cannot be freed or re-carved meanwhile.
    fn with_block<R>(
        &self,
        dev: u32,
        pool: Pool,
        id: CarveId,
        f: impl FnOnce(&DeviceSlot<NODES>, CarveBlock) -> Result<R, Errno>,
    ) -> Result<R, Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        let slot = &self.slots[dev as usize];
        let found = |b: Result<CarveBlock, CarveError>| b.map_err(|_| errno::EINVAL);
        match pool {
            Pool::Host => slot.host.with(|st| f(slot, found(st.host.lookup(id))?)),
            Pool::Main(c) | Pool::Scratch(c) => {
                self.with_channel(dev, c, |st| f(slot, found(st.main.lookup(id))?))
            }
            Pool::Small(c) => self.with_channel(dev, c, |st| f(slot, found(st.small.lookup(id))?)),
        }
    }

    /// MEM_FREE of any handle: decoded in full, then freed from its pool under that part's
    /// lock (`EINVAL` for a handle that names no live allocation of device `dev`).
    #[cold]
    #[inline(never)]
    fn free_decoded(&self, dev: u32, handle: u64) -> Result<(), Errno> {
        let (pool, id) = self.decode(dev, handle)?;
        if let Pool::Host = pool {
            return self.slots[dev as usize]
                .host
                .with(|st| st.host.free(id).map(|_| ()).map_err(|_| errno::EINVAL));
        }
        let (Pool::Main(c) | Pool::Small(c) | Pool::Scratch(c)) = pool else {
            return Err(errno::EINVAL);
        };
        self.with_channel(dev, c, |st| {
            match pool {
                Pool::Main(_) | Pool::Host => st.main.free(id),
                Pool::Small(_) => st.small.free(id),
                Pool::Scratch(_) => {
                    let b = st.main.free(id).map_err(|_| errno::EINVAL)?;
                    let sp = &mut st.scratchpad;
                    let bottom = st.main.base() + st.main.capacity() - *sp;
                    if b.addr != bottom {
                        // The driver logs and carries on (`mc_free`): the scratchpad shrinks
                        // by this block all the same.
                        warn!(
                            "nd{}: contiguous scratchpad: freeing page with pa {:#x}, expected \
                             page with pa {:#x} to be freed first",
                            dev, b.addr, bottom
                        );
                    }
                    *sp = sp.saturating_sub(b.size);
                    Ok(b)
                }
            }
            .map(|_| ())
            .map_err(|_| errno::EINVAL)
        })
    }

    /// The tag and device bits of every handle of device `dev`.
    #[inline]
    const fn handle_prefix(dev: u32) -> u64 {
        (H_TAG << H_TAG_SHIFT) | ((dev as u64) << H_DEV_SHIFT)
    }

    /// The tag, device and pool bits of the handles of `pool` on device `dev`.
    #[inline]
    const fn pool_prefix(dev: u32, pool: Pool) -> u64 {
        Self::handle_prefix(dev) | ((pool.code() as u64) << H_POOL_SHIFT)
    }

    /// The node index and generation bits of a handle for `id`.
    #[inline]
    const fn id_bits(id: CarveId) -> u64 {
        ((id.generation() as u64) << H_GEN_SHIFT) | id.index() as u64
    }

    #[inline]
    fn encode(dev: u32, pool: Pool, id: CarveId) -> u64 {
        Self::pool_prefix(dev, pool) | Self::id_bits(id)
    }

    /// Splits a handle, checking everything that does not need the pool (`EINVAL`).
    fn decode(&self, dev: u32, handle: u64) -> Result<(Pool, CarveId), Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        // Tag and device in one test.
        if handle & (H_TAG_MASK | H_DEV_MASK) != Self::handle_prefix(dev) {
            return Err(errno::EINVAL);
        }
        let pool = Pool::from_code(((handle >> H_POOL_SHIFT) & H_POOL_MASK) as u32)
            .ok_or(errno::EINVAL)?;
        if let Pool::Main(c) | Pool::Small(c) | Pool::Scratch(c) = pool {
            if c >= self.channels {
                return Err(errno::EINVAL);
            }
        }
        let id = Self::handle_id(handle).ok_or(errno::EINVAL)?;
        Ok((pool, id))
    }

    /// The pool node a handle names: its index and generation fields (`None` for a node
    /// index no pool has).
    #[inline]
    fn handle_id(handle: u64) -> Option<CarveId> {
        CarveId::from_parts(
            (handle & H_INDEX_MASK) as u32,
            (handle >> H_GEN_SHIFT) as u32,
        )
    }

    /// Validates a copy window of block `b` of `pool` and returns a pointer to its first
    /// backing byte.
    fn window(
        &self,
        st: &DeviceSlot<NODES>,
        pool: Pool,
        b: CarveBlock,
        offset: u64,
        len: u64,
    ) -> Result<*mut u8, Errno> {
        let end = offset.checked_add(len).ok_or(errno::EFAULT)?;
        if end > b.size {
            return Err(errno::EFAULT);
        }
        if st.backing.is_null() {
            return Err(errno::EOPNOTSUPP);
        }
        let boff = match pool {
            Pool::Host => self.channels as u64 * self.channel_size + (b.addr - HOST_PA_BASE),
            _ => b.addr,
        };
        let start = boff.checked_add(offset).ok_or(errno::EFAULT)?;
        if start.checked_add(len).is_none_or(|e| e > st.backing_len) {
            return Err(errno::EFAULT);
        }
        let start = usize::try_from(start).map_err(|_| errno::EFAULT)?;
        // SAFETY: `start + len <= backing_len`, and `set_backing`'s contract makes the whole
        // `[backing, backing + backing_len)` range one valid allocation.
        Ok(unsafe { st.backing.add(start) })
    }

    fn oom_log(&self, dev: u32, req: &AllocRequest, size: u64, stats: PoolStats) {
        warn!(
            "nd{}: {} out of memory: total {} occupied {} needed {} align {} available {} \
             (largest free block {}, small-object region {} free, largest {})",
            dev,
            if req.host { "host DMA pool" } else { "HBM" },
            stats.capacity,
            stats.capacity - stats.free,
            size,
            req.align,
            stats.free,
            stats.largest_free,
            stats.small_object_free,
            stats.small_object_largest_free
        );
    }
}

/// Small-object pool size for a channel: 1 GiB, or a quarter of a scaled-down channel.
const fn small_region(channel_size: u64) -> u64 {
    let q = (channel_size / 4) & !(PAGE_SIZE - 1);
    if q < SMALL_REGION_SIZE {
        q
    } else {
        SMALL_REGION_SIZE
    }
}

/// One HBM's figures from its main pool and its small-object region, with the largest
/// blocks measured for requests aligned to `align` (0 = the page). `largest_free` is the
/// largest request above [`SMALL_OBJECT_MAX`] that succeeds: the main pool's block, or the
/// larger of both regions' when such a request falls back to the small-object region
/// (`big_falls_back`, the driver's `alt_pool`, docs/PLACEMENT.md). The small-object region's
/// own figures are reported apart. Each region's fragmentation is measured against its own
/// largest (unaligned) block.
fn hbm_stats<const NODES: usize>(
    main: &Carve<NODES>,
    small: &Carve<NODES>,
    align: u64,
    big_falls_back: bool,
) -> PoolStats {
    let (m, s) = (main.stats(), small.stats());
    let (largest_main, largest_small) = if align <= PAGE_SIZE {
        (m.largest_free, s.largest_free)
    } else {
        (main.largest_aligned(align), small.largest_aligned(align))
    };
    PoolStats {
        capacity: m.capacity + s.capacity,
        free: m.free + s.free,
        largest_free: if big_falls_back {
            largest_main.max(largest_small)
        } else {
            largest_main
        },
        allocations: m.live_allocations + s.live_allocations,
        fragmented_free: (m.free - m.largest_free) + (s.free - s.largest_free),
        small_object_free: s.free,
        small_object_largest_free: largest_small,
    }
}

impl SimDevice {
    /// A zeroed default-sized simulator (32 devices, [`DEFAULT_NODES`] nodes per pool) on the
    /// heap, initialised for `cfg` (feature `alloc`; never built on the stack). Other sizes:
    /// [`SimDevice::new_boxed_sized`].
    #[cfg(any(test, feature = "alloc"))]
    pub fn new_boxed(cfg: &SimConfig) -> Result<alloc::boxed::Box<Self>, Errno> {
        Self::new_boxed_sized(cfg)
    }
}

#[cfg(test)]
mod tests;
