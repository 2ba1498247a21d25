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
//! = 16 384 nodes of 56 B each, so at least 8 191 live allocations per pool whatever the
//! pattern; the genalloc placement's address treaps live in the same nodes, plus a fixed
//! 132 KiB bucket index per pool, so nothing grows with the channel size). A [`SimDevice`] for
//! 32 devices × 4 channels is ~306 MB of
//! *zero-valid* memory:
//! `Box::new_zeroed` or a `.bss` static costs nothing until a pool is used, and
//! [`SimDevice::init`] touches a few hundred bytes per pool.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::abi::al_hal_tpb_arch_type_t;
use crate::abi::meta::ZeroValid;
use crate::abi::nrt_mutex_t;
use crate::carve::{Carve, CarveBlock, CarveError, CarveId, Policy};
use crate::device::Geometry;
use crate::driver::{
    errno, feature, AllocRequest, DeviceInfo, Driver, Errno, FreeHistogram, PoolStats,
};

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
/// parameter of [`SimDevice`] (issue 16 item 4: the integrator sizes it).
pub const DEFAULT_NODES: usize = 16384;
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
pub const MAX_CARVE_NODES: u32 = 16384 + 1;
/// The first allocation category byte that is not a category (`mem_alloc_category_t` MAX,
/// public ABI §3): refused with `EINVAL`.
pub const CATEGORY_MAX: u8 = 20;

// Handle layout (public ABI §3: opaque non-zero u64):
// bits 0..18 node index, 18..23 device, 23..27 pool, 27..59 generation, 59..64 tag.
const H_INDEX_BITS: u32 = 18;
const H_DEV_SHIFT: u32 = 18;
const H_POOL_SHIFT: u32 = 23;
const H_GEN_SHIFT: u32 = 27;
const H_TAG_SHIFT: u32 = 59;
const H_TAG: u64 = 0b10110;
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
};

/// A simulated instance type (public ABI §4 "Devices").
#[repr(u8)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Preset {
    /// inf2: SUNDA (NeuronCore-v2), 2 cores, 2 × 16 GiB, HBM i ↔ core i.
    Inf2 = 1,
    /// trn1: SUNDA (NeuronCore-v2), 2 cores, 2 × 16 GiB, HBM i ↔ core i.
    Trn1 = 2,
    /// trn2: CAYMAN (NeuronCore-v3), 8 cores, 4 × 24 GiB, HBM i shared by cores 2i, 2i+1.
    Trn2 = 3,
    /// trn3: MARIANA (NeuronCore-v4), 8 cores, 4 × 36 GiB = 144 GiB.
    Trn3 = 4,
}

impl Preset {
    /// Every preset, in declaration order.
    pub const ALL: [Preset; 4] = [Preset::Inf2, Preset::Trn1, Preset::Trn2, Preset::Trn3];

    /// Parses `inf2`, `trn1`, `trn2` or `trn3`, ignoring ASCII case.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
    }

    /// The lower-case instance name.
    pub const fn name(self) -> &'static str {
        match self {
            Preset::Inf2 => "inf2",
            Preset::Trn1 => "trn1",
            Preset::Trn2 => "trn2",
            Preset::Trn3 => "trn3",
        }
    }

    const fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Preset::Inf2),
            2 => Some(Preset::Trn1),
            3 => Some(Preset::Trn2),
            4 => Some(Preset::Trn3),
            _ => None,
        }
    }

    /// The driver feature bits this preset reports by default (`DRIVER_INFO_GET.feature_flags1`,
    /// public ABI §3): MEM_ALLOC_TYPE | MEM_ALLOC64 everywhere, plus CONTIGUOUS_SCRATCHPAD on
    /// v3+ (trn2, trn3), whose scratchpad uses it (spec §8).
    pub const fn default_feature_flags(self) -> u64 {
        let common = feature::MEM_ALLOC_TYPE | feature::MEM_ALLOC64;
        match self {
            Preset::Inf2 | Preset::Trn1 => common,
            Preset::Trn2 | Preset::Trn3 => common | feature::CONTIGUOUS_SCRATCHPAD,
        }
    }

    /// Geometry and features of one device of this preset with the default host DMA capacity
    /// (public ABI §3 "per channel sizes", §4 "Devices").
    pub const fn device_info(self) -> DeviceInfo {
        use al_hal_tpb_arch_type_t::*;
        let (arch, g) = match self {
            Preset::Inf2 | Preset::Trn1 => (AL_HAL_TPB_ARCH_TYPE_SUNDA, Geometry::V2),
            Preset::Trn2 => (AL_HAL_TPB_ARCH_TYPE_CAYMAN, Geometry::V3),
            Preset::Trn3 => (AL_HAL_TPB_ARCH_TYPE_MARIANA, Geometry::V4),
        };
        DeviceInfo {
            arch,
            cores_per_device: g.cores_per_device,
            hbm_channels: g.hbm_channels,
            hbm_channel_size: g.hbm_channel_size,
            host_dma_capacity: DEFAULT_HOST_DMA_CAPACITY,
            feature_flags: self.default_feature_flags(),
            supports_aligned_alloc: true,
            page_size: PAGE_SIZE,
        }
    }
}

/// Parses a device spec: a preset name, optionally followed by `x<count>` (`trn2` → 1 device,
/// `inf2x2` → 2, `TRN2X16` → 16). The count must be in `1..=32`.
pub fn parse_device_spec(s: &str) -> Option<(Preset, u32)> {
    let s = s.trim();
    if let Some(p) = Preset::parse(s) {
        return Some((p, 1));
    }
    let at = s.find(['x', 'X'])?;
    let preset = Preset::parse(&s[..at])?;
    let digits = &s[at + 1..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u32 = digits.parse().ok()?;
    (1..=MAX_DEVICES).contains(&n).then_some((preset, n))
}

/// How the simulated device places HBM allocations inside a pool (docs/PLACEMENT.md).
#[repr(u8)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Placement {
    /// The kernel driver's genalloc placement, address for address (public ABI §3 "How the
    /// driver carves memory"; aws-neuron-driver `neuron_mempool.c` `mc_alloc_internal`):
    /// page-granular first fit, aligned first fit above the page, the small-object pool with
    /// fallback both ways, the contiguous scratchpad at fixed offsets below the main pool's
    /// end, alignments above `INT_MAX` and sizes above `INT64_MAX` refused with `EINVAL`.
    /// Every search is O(log blocks) ([`Policy::FirstFit`]).
    #[default]
    Genalloc = 0,
    /// The TLSF good-fit carve ([`Policy::GoodFit`]): O(1)-class work, addresses that differ
    /// from the driver's, and this simulator's earlier routing (a request above
    /// [`SMALL_OBJECT_MAX`] never falls back to the small-object pool; the contiguous
    /// scratchpad is placed like any request).
    Tlsf = 1,
}

impl Placement {
    /// Parses `genalloc` or `tlsf`, ignoring ASCII case.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            t if t.eq_ignore_ascii_case("genalloc") => Some(Placement::Genalloc),
            t if t.eq_ignore_ascii_case("tlsf") => Some(Placement::Tlsf),
            _ => None,
        }
    }

    /// The carve policy of the HBM pools.
    const fn policy(self) -> Policy {
        match self {
            Placement::Genalloc => Policy::FirstFit,
            Placement::Tlsf => Policy::GoodFit,
        }
    }
}

/// How to build a [`SimDevice`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SimConfig {
    /// Instance type.
    pub preset: Preset,
    /// Devices, `1..=32`.
    pub devices: u32,
    /// Whether MEM_ALLOC honours an alignment (spec §3.2 `ndl_supports_align`); when false
    /// the driver refuses `align != 0` with `EINVAL` and the runtime emulates alignment.
    pub aligned_alloc: bool,
    /// Bytes of host DMA memory per device (page multiple, ≤ 16 TiB).
    pub host_dma_capacity: u64,
    /// Driver feature bits; `None` = the preset's [`Preset::default_feature_flags`].
    pub feature_flags: Option<u64>,
    /// Shrinks every HBM channel to this many bytes (page multiple, ≥ 32 MiB) for tests that
    /// need a real backing; the 16 MiB carve-out stays, the small pool becomes a quarter of
    /// the channel.
    pub channel_size_override: Option<u64>,
    /// HBM placement: the driver's ([`Placement::Genalloc`], the default) or the fast TLSF
    /// carve.
    pub placement: Placement,
}

impl SimConfig {
    /// The preset's real geometry: aligned alloc on, 8 GiB host DMA pool, default features.
    pub const fn new(preset: Preset, devices: u32) -> Self {
        SimConfig {
            preset,
            devices,
            aligned_alloc: true,
            host_dma_capacity: DEFAULT_HOST_DMA_CAPACITY,
            feature_flags: None,
            channel_size_override: None,
            placement: Placement::Genalloc,
        }
    }

    /// A scaled-down geometry for tests that need bytes: 64 MiB channels (16 MiB carve-out,
    /// 32 MiB main pool, 16 MiB small pool) and a 32 MiB host pool, so a backing is
    /// `channels * 64 MiB + 32 MiB`.
    pub const fn scaled_down(preset: Preset, devices: u32) -> Self {
        SimConfig {
            host_dma_capacity: 32 * MIB,
            channel_size_override: Some(64 * MIB),
            ..Self::new(preset, devices)
        }
    }
}

/// Where a live allocation sits (the `MEM_GET_EXTENDED_INFO` view, public ABI §3).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SimMemInfo {
    /// Physical address.
    pub pa: u64,
    /// Bytes (rounded up to the page).
    pub size: u64,
    /// Host DMA pool (true) or HBM.
    pub host: bool,
    /// HBM channel (0 for host memory).
    pub hbm_idx: u32,
    /// Whether it came from the small-object pool.
    pub small_pool: bool,
}

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
/// on a lock or a hot cache line (issue 16 item 7). No call takes two parts' locks. The lock
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
    fn with<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        let _g = self.lock.lock();
        // SAFETY: the part's lock is held for the whole call, so this is the only reference
        // to the state (every other path takes the same lock or has `&mut self`).
        f(unsafe { &mut *self.state.get() })
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
    ///    has no room.
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
            match r {
                Err(CarveError::OutOfSpace | CarveError::NodesExhausted) => continue,
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
/// Sized by the integrator (issue 16 item 4): `DEVICES` device slots (1..=32) and `NODES`
/// nodes per pool (each device has 4 main + 4 small-object + 1 host pool; at least
/// `NODES / 2 - 1` live allocations per pool whatever the pattern). The defaults are the
/// 32-device, 16 384-node simulator; `SimDevice<1, 1024>` is a one-device profile of about
/// 0.8 MB.
pub struct SimDevice<const DEVICES: usize = 32, const NODES: usize = DEFAULT_NODES> {
    slots: [DeviceSlot<NODES>; DEVICES],
    device_count: u32,
    preset: u8,
    channels: u32,
    channel_size: u64,
    host_capacity: u64,
    /// [`Placement`] as its discriminant.
    placement: u8,
    aligned_alloc: AtomicU32,
    feature_flags: AtomicU64,
    /// `memory_alloc` calls naming no attached device or no channel of one (the others are
    /// counted per channel and host pool, [`ChannelState`], [`HostState`]).
    stray_alloc_calls: AtomicU64,
    /// Fault: the allocation call that brings this from 1 to 0 fails.
    fail_countdown: AtomicU64,
    /// Fault: bit `c` set → every allocation of category `c` fails.
    fail_categories: AtomicU64,
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
    /// 2..2^18 nodes per pool (its 18 index bits).
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

    /// Fault injection: the `n`th `memory_alloc` call from now (1-based) fails with `ENOMEM`
    /// (unless it is refused earlier for bad arguments); `n == 0` disarms.
    pub fn fail_nth_alloc(&self, n: u64) {
        self.fail_countdown.store(n, Ordering::Release);
    }

    /// Fault injection: every allocation of driver category `category` (public ABI §3
    /// `mem_alloc_category_t`) fails with `ENOMEM` until [`SimDevice::clear_faults`].
    pub fn fail_category(&self, category: u8) {
        if category < 64 {
            self.fail_categories
                .fetch_or(1 << category, Ordering::AcqRel);
        }
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        self.fail_countdown.store(0, Ordering::Release);
        self.fail_categories.store(0, Ordering::Release);
    }

    /// `memory_alloc` calls since `init` (failed ones included).
    pub fn alloc_calls(&self) -> u64 {
        let channels = self.channels as usize;
        self.slots[..self.device_count as usize].iter().fold(
            self.stray_alloc_calls.load(Ordering::Acquire),
            |n, slot| {
                slot.channels[..channels]
                    .iter()
                    .map(|p| p.with(|st| st.alloc_calls))
                    .sum::<u64>()
                    + slot.host.with(|st| st.alloc_calls)
                    + n
            },
        )
    }

    /// Grants or withdraws aligned-alloc support (spec §3.2 `ndl_supports_align`): without it
    /// `align != 0` is `EINVAL` and [`DeviceInfo::supports_aligned_alloc`] is false.
    pub fn set_aligned_alloc(&self, on: bool) {
        self.aligned_alloc.store(u32::from(on), Ordering::Release);
    }

    /// Clears driver feature bits (`feature::*`, public ABI §3).
    pub fn clear_feature_flags(&self, bits: u64) {
        self.feature_flags.fetch_and(!bits, Ordering::AcqRel);
    }

    /// Sets driver feature bits (`feature::*`, public ABI §3).
    pub fn set_feature_flags(&self, bits: u64) {
        self.feature_flags.fetch_or(bits, Ordering::AcqRel);
    }

    /// Where a live allocation sits (`MEM_GET_EXTENDED_INFO`, public ABI §3); `EINVAL` for a
    /// bad or stale handle.
    pub fn memory_info(&self, dev: u32, handle: u64) -> Result<SimMemInfo, Errno> {
        let (pool, id) = self.decode(dev, handle)?;
        self.with_block(dev, pool, id, |_, b| {
            let (host, hbm_idx, small_pool) = match pool {
                Pool::Main(c) | Pool::Scratch(c) => (false, c, false),
                Pool::Small(c) => (false, c, true),
                Pool::Host => (true, 0, false),
            };
            Ok(SimMemInfo {
                pa: b.addr,
                size: b.size,
                host,
                hbm_idx,
                small_pool,
            })
        })
    }

    /// Where a handle's record lives in a per-carve table: `(carve, node index)` with `carve`
    /// in `0..CARVES_PER_DEVICE` (HBM `c`'s main pool is `c`, its small-object region
    /// `MAX_HBM_CHANNELS + c`, the host pool `2 * MAX_HBM_CHANNELS`) and the node index below
    /// [`MAX_CARVE_NODES`]. Two live handles of one device never share a key, so a table
    /// indexed by it can say who owns each allocation (the shared device, docs/SHARED_DEVICE.md).
    /// `EINVAL` for a handle this simulator never minted (no pool lookup: a stale handle maps
    /// to the key its node had).
    pub fn handle_key(&self, dev: u32, handle: u64) -> Result<(u32, u32), Errno> {
        let (pool, id) = self.decode(dev, handle)?;
        let carve = match pool {
            Pool::Main(c) | Pool::Scratch(c) => c,
            Pool::Small(c) => MAX_HBM_CHANNELS + c,
            Pool::Host => POOL_HOST,
        };
        Ok((carve, id.index()))
    }

    /// The handle of the live allocation at key `(carve, index)` ([`SimDevice::handle_key`]),
    /// if there is one: what a table of owners indexed by that key is reconciled against.
    /// A contiguous-scratchpad block is named as a plain main-pool one (the pool cannot tell
    /// them apart), so freeing it does not shrink the scratchpad's recorded size.
    pub fn live_handle(&self, dev: u32, carve: u32, index: u32) -> Option<u64> {
        let (pool, id) = if carve < MAX_HBM_CHANNELS {
            let id = self.with_channel(dev, carve, |st| st.main.id_at(index).ok_or(errno::EINVAL));
            (Pool::Main(carve), id)
        } else if carve < POOL_HOST {
            let c = carve - MAX_HBM_CHANNELS;
            let id = self.with_channel(dev, c, |st| st.small.id_at(index).ok_or(errno::EINVAL));
            (Pool::Small(c), id)
        } else if carve == POOL_HOST {
            let id = self.with_host(dev, |st| st.host.id_at(index).ok_or(errno::EINVAL));
            (Pool::Host, id)
        } else {
            return None;
        };
        Some(Self::encode(dev, pool, id.ok()?))
    }

    /// Re-creates one allocation at exactly `[addr, addr + size)` of carve `carve`
    /// ([`SimDevice::handle_key`] numbering; `scratch` marks a contiguous-scratchpad block of
    /// a main pool, which grows the recorded scratchpad) and returns its new handle: how pools
    /// damaged in shared memory are rebuilt from an ownership table after a fresh
    /// [`SimDevice::init`]. `EINVAL` when the range is not free (the table itself is wrong).
    pub fn place_at(
        &self,
        dev: u32,
        carve: u32,
        addr: u64,
        size: u64,
        scratch: bool,
    ) -> Result<u64, Errno> {
        if carve < self.channels {
            let pool = if scratch {
                Pool::Scratch(carve)
            } else {
                Pool::Main(carve)
            };
            self.with_channel(dev, carve, |st| {
                let b = st.main.alloc_at(addr, size).map_err(|_| errno::EINVAL)?;
                if scratch {
                    st.scratchpad += b.size;
                }
                Ok(Self::encode(dev, pool, b.id))
            })
        } else if (MAX_HBM_CHANNELS..MAX_HBM_CHANNELS + self.channels).contains(&carve) {
            let c = carve - MAX_HBM_CHANNELS;
            self.with_channel(dev, c, |st| {
                let b = st.small.alloc_at(addr, size).map_err(|_| errno::EINVAL)?;
                Ok(Self::encode(dev, Pool::Small(c), b.id))
            })
        } else if carve == POOL_HOST {
            self.with_host(dev, |st| {
                let b = st.host.alloc_at(addr, size).map_err(|_| errno::EINVAL)?;
                Ok(Self::encode(dev, Pool::Host, b.id))
            })
        } else {
            Err(errno::EINVAL)
        }
    }

    /// Verifies every pool's invariants ([`Carve::check`], O(nodes)) and the simulator's own
    /// fields: for state that came from outside the process (a shared mapping), before it is
    /// trusted. The check indexes nodes as the carve does, so state corrupted badly enough
    /// can make it panic: a caller reading untrusted bytes runs it behind `catch_unwind`.
    pub fn check_pools(&self) -> Result<(), &'static str> {
        if self.device_count as usize > DEVICES || self.preset().is_none() {
            return Err("device count or preset out of range");
        }
        if self.channels == 0 || self.channels > MAX_HBM_CHANNELS {
            return Err("HBM channel count out of range");
        }
        for slot in &self.slots[..self.device_count as usize] {
            for part in &slot.channels[..self.channels as usize] {
                part.with(|st| {
                    st.main.check()?;
                    st.small.check()?;
                    if st.scratchpad > st.main.capacity() {
                        return Err("contiguous scratchpad larger than its pool");
                    }
                    Ok(())
                })?;
            }
            slot.host.with(|st| st.host.check())?;
            if !slot.backing.is_null() {
                return Err("a backing pointer in state that must have none");
            }
        }
        Ok(())
    }

    /// Makes `dst` a copy of this simulator: settings, faults cleared, every device's pools
    /// (each part copied under its lock), no backing (set one with
    /// [`SimDevice::set_backing`]). A plan runs on such a copy of a shared device (issue 19
    /// item 2: a snapshot, never the live pools). Only the attached devices' pools are copied
    /// (~7.4 MB each). Each channel's figures are those of one moment; a device's channels
    /// may be of moments apart (the shared device holds its process-shared lock around the
    /// whole copy, so nothing changes there meanwhile).
    pub fn copy_to(&self, dst: &mut Self) {
        for d in 0..(self.device_count as usize).min(DEVICES) {
            let (src, out) = (&self.slots[d], &mut dst.slots[d]);
            for (sp, op) in src.channels.iter().zip(out.channels.iter_mut()) {
                let o = op.state.get_mut();
                // SAFETY: under the source part's lock nothing mutates its state while it is
                // read; `ChannelState` is integers and integer arrays (no heap ownership, no
                // `Drop`), so a bitwise copy is a valid value and the old `o` needs no drop.
                sp.with(|st| unsafe { core::ptr::copy_nonoverlapping(st as *const _, o, 1) });
            }
            let o = out.host.state.get_mut();
            // SAFETY: as above, for the host part's `HostState`.
            src.host
                .with(|st| unsafe { core::ptr::copy_nonoverlapping(st as *const _, o, 1) });
            out.backing = core::ptr::null_mut();
            out.backing_len = 0;
        }
        dst.device_count = self.device_count;
        dst.preset = self.preset;
        dst.channels = self.channels;
        dst.channel_size = self.channel_size;
        dst.host_capacity = self.host_capacity;
        dst.placement = self.placement;
        *dst.aligned_alloc.get_mut() = self.aligned_alloc.load(Ordering::Acquire);
        *dst.feature_flags.get_mut() = self.feature_flags.load(Ordering::Acquire);
        *dst.stray_alloc_calls.get_mut() = 0;
        *dst.fail_countdown.get_mut() = 0;
        *dst.fail_categories.get_mut() = 0;
    }

    /// Forces every part lock open: for a simulator in memory shared by processes, after a
    /// process died holding the outer lock (and so perhaps one of these). `&mut self` proves
    /// no call is running in this process; run [`SimDevice::check_pools`] afterwards.
    pub fn reset_locks(&mut self) {
        for slot in &mut self.slots {
            for part in &mut slot.channels {
                part.lock = nrt_mutex_t::new();
            }
            slot.host.lock = nrt_mutex_t::new();
        }
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
    fn alloc_block(&self, dev: u32, req: &AllocRequest) -> Result<(u64, u64), Errno> {
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
                let small = if size <= SMALL_OBJECT_MAX {
                    match st.small.alloc(size, req.align) {
                        Ok(b) => Some(b),
                        Err(CarveError::OutOfSpace | CarveError::NodesExhausted) => None,
                        Err(e) => return Err(e.errno()),
                    }
                } else {
                    None
                };
                match small {
                    Some(b) => (Pool::Small(c), Ok(b)),
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
                    // Space may be left, but the pool cannot track another allocation: the
                    // driver answers ENOMEM all the same.
                    warn!(
                        "nd{}: {} pool {:?} tracks no more allocations (its node array is full)",
                        dev,
                        if req.host { "host DMA" } else { "HBM" },
                        pool
                    );
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

    fn encode(dev: u32, pool: Pool, id: CarveId) -> u64 {
        (H_TAG << H_TAG_SHIFT)
            | ((id.generation() as u64) << H_GEN_SHIFT)
            | ((pool.code() as u64) << H_POOL_SHIFT)
            | ((dev as u64) << H_DEV_SHIFT)
            | id.index() as u64
    }

    /// Splits a handle, checking everything that does not need the pool (`EINVAL`).
    fn decode(&self, dev: u32, handle: u64) -> Result<(Pool, CarveId), Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        if handle >> H_TAG_SHIFT != H_TAG {
            return Err(errno::EINVAL);
        }
        let field = |shift: u32, bits: u32| ((handle >> shift) & ((1 << bits) - 1)) as u32;
        if field(H_DEV_SHIFT, H_POOL_SHIFT - H_DEV_SHIFT) != dev {
            return Err(errno::EINVAL);
        }
        let pool = Pool::from_code(field(H_POOL_SHIFT, H_GEN_SHIFT - H_POOL_SHIFT))
            .ok_or(errno::EINVAL)?;
        if let Pool::Main(c) | Pool::Small(c) | Pool::Scratch(c) = pool {
            if c >= self.channels {
                return Err(errno::EINVAL);
            }
        }
        let id = CarveId::from_parts(field(0, H_INDEX_BITS), field(H_GEN_SHIFT, 32))
            .ok_or(errno::EINVAL)?;
        Ok((pool, id))
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

impl<const DEVICES: usize, const NODES: usize> Driver for SimDevice<DEVICES, NODES> {
    fn device_count(&self) -> u32 {
        self.device_count
    }

    fn device_info(&self, dev: u32) -> Result<DeviceInfo, Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        let preset = self.preset().ok_or(errno::ENODEV)?;
        let mut info = preset.device_info();
        info.hbm_channel_size = self.channel_size;
        info.host_dma_capacity = self.host_capacity;
        info.feature_flags = self.feature_flags.load(Ordering::Acquire);
        info.supports_aligned_alloc = self.aligned_alloc.load(Ordering::Acquire) != 0;
        Ok(info)
    }

    fn memory_alloc(&self, dev: u32, req: &AllocRequest) -> Result<u64, Errno> {
        self.alloc_block(dev, req).map(|(h, _)| h)
    }

    /// The carve already knows the address: one lock instead of alloc + get_pa's two.
    fn memory_alloc_pa(&self, dev: u32, req: &AllocRequest) -> Result<(u64, u64), Errno> {
        self.alloc_block(dev, req)
    }

    fn memory_get_pa(&self, dev: u32, handle: u64) -> Result<u64, Errno> {
        self.memory_info(dev, handle).map(|i| i.pa)
    }

    fn memory_free(&self, dev: u32, handle: u64) -> Result<(), Errno> {
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

    fn copy_in(&self, dev: u32, handle: u64, offset: u64, src: &[u8]) -> Result<(), Errno> {
        let (pool, id) = self.decode(dev, handle)?;
        self.with_block(dev, pool, id, |st, b| {
            let p = self.window(st, pool, b, offset, src.len() as u64)?;
            // SAFETY: `window` checked `[p, p + len)` lies inside the block's backing, which
            // nothing else accesses (set_backing's contract) while we hold the lock of the
            // part that owns the block (so nobody frees or re-carves it meanwhile); `src` is a
            // distinct Rust slice, so the ranges do not overlap.
            unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
            Ok(())
        })
    }

    fn copy_out(&self, dev: u32, handle: u64, offset: u64, dst: &mut [u8]) -> Result<(), Errno> {
        let (pool, id) = self.decode(dev, handle)?;
        self.with_block(dev, pool, id, |st, b| {
            let p = self.window(st, pool, b, offset, dst.len() as u64)?;
            // SAFETY: as in `copy_in`; `dst` is an exclusive Rust slice outside the backing.
            unsafe { core::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) };
            Ok(())
        })
    }

    fn fill(&self, dev: u32, handle: u64, offset: u64, len: u64, value: u8) -> Result<(), Errno> {
        let (pool, id) = self.decode(dev, handle)?;
        self.with_block(dev, pool, id, |st, b| {
            let p = self.window(st, pool, b, offset, len)?;
            let n = usize::try_from(len).map_err(|_| errno::EFAULT)?;
            // SAFETY: `window` checked `[p, p + len)` lies inside the block's backing, which
            // only we access while the lock of the part that owns the block is held.
            unsafe { core::ptr::write_bytes(p, value, n) };
            Ok(())
        })
    }

    fn pool_stats(&self, dev: u32, host: bool, hbm_idx: u32) -> Result<PoolStats, Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        if !host && hbm_idx >= self.channels {
            return Err(errno::EINVAL);
        }
        if host {
            return Ok(self.slots[dev as usize]
                .host
                .with(|st| st.host.stats().into()));
        }
        self.with_channel(dev, hbm_idx, |st| {
            Ok(hbm_stats(&st.main, &st.small, 0, self.genalloc()))
        })
    }

    /// Exact: every free block of the channel's main pool and small-object region, under the
    /// channel's lock (one moment), by size class.
    fn free_histogram(
        &self,
        dev: u32,
        hbm_idx: u32,
    ) -> Result<(FreeHistogram, FreeHistogram), Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        if hbm_idx >= self.channels {
            return Err(errno::EINVAL);
        }
        self.with_channel(dev, hbm_idx, |st| {
            let (mut main, mut small) = (FreeHistogram::default(), FreeHistogram::default());
            st.main.for_each_block(|b| {
                if !b.used {
                    main.add(b.size);
                }
            });
            st.small.for_each_block(|b| {
                if !b.used {
                    small.add(b.size);
                }
            });
            Ok((main, small))
        })
    }

    /// Exact: the largest request each region's carve would grant at `align`
    /// ([`Carve::largest_aligned`]), under the channel's lock, so the figures are those of one
    /// moment. `EINVAL` for an alignment that is not a power of two or a bad channel.
    fn hbm_stats_aligned(&self, dev: u32, hbm_idx: u32, align: u64) -> Result<PoolStats, Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        if hbm_idx >= self.channels || (align != 0 && !align.is_power_of_two()) {
            return Err(errno::EINVAL);
        }
        self.with_channel(dev, hbm_idx, |st| {
            Ok(hbm_stats(&st.main, &st.small, align, self.genalloc()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::boxed::Box;
    use std::vec;
    use std::vec::Vec;

    fn req(size: u64) -> AllocRequest {
        AllocRequest {
            size,
            align: 0,
            host: false,
            hbm_idx: 0,
            region: 0,
            nc_id: 0,
            category: 9, // TENSORS_DEVICE
        }
    }

    fn host_req(size: u64) -> AllocRequest {
        AllocRequest {
            host: true,
            category: 2, // TENSORS_HOST
            ..req(size)
        }
    }

    /// Test-only builders for requests.
    trait With {
        fn hbm(self, v: u32) -> Self;
        fn align(self, v: u64) -> Self;
        fn nc(self, v: u32) -> Self;
        fn region(self, v: u32) -> Self;
        fn cat(self, v: u8) -> Self;
    }

    impl With for AllocRequest {
        fn hbm(self, v: u32) -> Self {
            AllocRequest { hbm_idx: v, ..self }
        }
        fn align(self, v: u64) -> Self {
            AllocRequest { align: v, ..self }
        }
        fn nc(self, v: u32) -> Self {
            AllocRequest { nc_id: v, ..self }
        }
        fn region(self, v: u32) -> Self {
            AllocRequest { region: v, ..self }
        }
        fn cat(self, v: u8) -> Self {
            AllocRequest {
                category: v,
                ..self
            }
        }
    }

    fn sim(cfg: SimConfig) -> Box<SimDevice> {
        SimDevice::new_boxed(&cfg).unwrap()
    }

    #[test]
    fn an_empty_hbm_is_not_fragmented_and_a_holed_one_is() {
        let d = sim(SimConfig::new(Preset::Trn2, 1));
        let s = d.pool_stats(0, false, 0).unwrap();
        assert!(
            s.largest_free < s.free,
            "the small-object region is apart: {s:?}"
        );
        assert_eq!(s.fragmentation_permille(), 0, "{s:?}");
        // Three 1 GiB blocks in the main pool, the middle one freed: a 1 GiB hole apart from
        // the big free block.
        let hs: Vec<u64> = (0..3)
            .map(|_| d.memory_alloc(0, &req(1 << 30)).unwrap())
            .collect();
        d.memory_free(0, hs[1]).unwrap();
        let s = d.pool_stats(0, false, 0).unwrap();
        assert_eq!(s.fragmented_free, 1 << 30, "{s:?}");
        assert!(s.fragmentation_permille() > 0);
    }

    /// The footprint the module docs and docs/PLACEMENT.md state: no page-sized state, 56 B
    /// per node, and per pool a fixed 132 KiB first-fit bucket index (16 384 roots and the
    /// 16-ary summary): about 305.6 MB.
    #[test]
    fn the_simulator_footprint_is_as_documented() {
        let n = core::mem::size_of::<SimDevice>();
        std::eprintln!("size_of::<SimDevice>() = {n}");
        assert!((300_000_000..310_000_000).contains(&n), "{n}");
    }

    #[test]
    fn presets_have_the_public_geometry() {
        for (p, arch, cores, ch, cs) in [
            (
                Preset::Inf2,
                al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_SUNDA,
                2,
                2,
                16 * GIB,
            ),
            (
                Preset::Trn1,
                al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_SUNDA,
                2,
                2,
                16 * GIB,
            ),
            (
                Preset::Trn2,
                al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_CAYMAN,
                8,
                4,
                24 * GIB,
            ),
            (
                Preset::Trn3,
                al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_MARIANA,
                8,
                4,
                36 * GIB,
            ),
        ] {
            let s = sim(SimConfig::new(p, 2));
            let i = s.device_info(1).unwrap();
            assert_eq!(
                (
                    i.arch,
                    i.cores_per_device,
                    i.hbm_channels,
                    i.hbm_channel_size
                ),
                (arch, cores, ch, cs)
            );
            assert_eq!(i.page_size, PAGE_SIZE);
            assert_eq!(i.host_dma_capacity, DEFAULT_HOST_DMA_CAPACITY);
            assert!(i.supports_aligned_alloc);
            assert_eq!(s.device_info(2), Err(errno::ENODEV));
            for c in 0..ch {
                let st = s.pool_stats(1, false, c).unwrap();
                assert_eq!(st.capacity, cs - FIRMWARE_CARVEOUT);
                assert_eq!(
                    (st.free, st.largest_free),
                    (st.capacity, cs - FIRMWARE_CARVEOUT - GIB)
                );
            }
            assert_eq!(s.pool_stats(1, false, ch), Err(errno::EINVAL));
            assert_eq!(
                s.pool_stats(0, true, 0).unwrap().capacity,
                DEFAULT_HOST_DMA_CAPACITY
            );
            assert_eq!(s.backing_len(0), ch as u64 * cs + DEFAULT_HOST_DMA_CAPACITY);
        }
        let t2 = Preset::Trn2.device_info();
        let hbm: Vec<u32> = (0..8).map(|c| t2.default_hbm_for_core(c)).collect();
        assert_eq!(hbm, [0, 0, 1, 1, 2, 2, 3, 3]);
        let t1 = Preset::Trn1.device_info();
        assert_eq!(
            (t1.default_hbm_for_core(0), t1.default_hbm_for_core(1)),
            (0, 1)
        );
        assert_eq!(Preset::Trn3.device_info().hbm_channel_size * 4, 144 * GIB);
    }

    #[test]
    fn feature_flags_default_and_clear() {
        let f3 = feature::MEM_ALLOC_TYPE | feature::MEM_ALLOC64 | feature::CONTIGUOUS_SCRATCHPAD;
        for p in [Preset::Trn2, Preset::Trn3] {
            assert_eq!(
                sim(SimConfig::new(p, 1))
                    .device_info(0)
                    .unwrap()
                    .feature_flags,
                f3
            );
        }
        let s = sim(SimConfig::new(Preset::Trn2, 1));
        s.clear_feature_flags(feature::CONTIGUOUS_SCRATCHPAD);
        assert_eq!(
            s.device_info(0).unwrap().feature_flags,
            feature::MEM_ALLOC_TYPE | feature::MEM_ALLOC64
        );
        s.set_feature_flags(feature::DMABUF);
        assert_ne!(s.device_info(0).unwrap().feature_flags & feature::DMABUF, 0);
        let cfg = SimConfig {
            feature_flags: Some(0),
            ..SimConfig::new(Preset::Trn2, 1)
        };
        assert_eq!(sim(cfg).device_info(0).unwrap().feature_flags, 0);
    }

    #[test]
    fn parsing() {
        assert_eq!(Preset::parse("trn2"), Some(Preset::Trn2));
        assert_eq!(Preset::parse("TRN2"), Some(Preset::Trn2));
        assert_eq!(Preset::parse("Inf2"), Some(Preset::Inf2));
        assert_eq!(Preset::parse("trn4"), None);
        assert_eq!(parse_device_spec("trn2"), Some((Preset::Trn2, 1)));
        assert_eq!(parse_device_spec("trn2x4"), Some((Preset::Trn2, 4)));
        assert_eq!(parse_device_spec("inf2x2"), Some((Preset::Inf2, 2)));
        assert_eq!(parse_device_spec("TRN1X32"), Some((Preset::Trn1, 32)));
        for bad in [
            "trn2x0", "trn2x33", "trn2x", "x2", "trn2x+1", "trn2x1x", "", "trn5x2",
        ] {
            assert_eq!(parse_device_spec(bad), None, "{bad}");
        }
    }

    #[test]
    fn init_rejects_bad_configs() {
        // SAFETY: `SimDevice` is `ZeroValid`.
        let mut s: Box<SimDevice> = unsafe { Box::<SimDevice>::new_zeroed().assume_init() };
        assert_eq!(s.device_count(), 0);
        assert_eq!(s.memory_alloc(0, &req(4096)), Err(errno::ENODEV));
        assert_eq!(s.init(&SimConfig::new(Preset::Trn2, 0)), Err(errno::EINVAL));
        assert_eq!(
            s.init(&SimConfig::new(Preset::Trn2, 33)),
            Err(errno::EINVAL)
        );
        for cs in [16 * MIB, 64 * MIB + 1, 1 << 45] {
            let cfg = SimConfig {
                channel_size_override: Some(cs),
                ..SimConfig::new(Preset::Trn2, 1)
            };
            assert_eq!(s.init(&cfg), Err(errno::EINVAL));
        }
        for host in [0, 100] {
            let cfg = SimConfig {
                host_dma_capacity: host,
                ..SimConfig::new(Preset::Trn2, 1)
            };
            assert_eq!(s.init(&cfg), Err(errno::EINVAL));
        }
        assert_eq!(s.init(&SimConfig::new(Preset::Trn2, 32)), Ok(()));
        assert_eq!(s.device_count(), 32);
        let h = s.memory_alloc(31, &req(1).hbm(3)).unwrap();
        assert_eq!(s.memory_get_pa(31, h), Ok(3 * 24 * GIB + 24 * GIB - GIB));
    }

    #[test]
    fn carve_out_page_rounding_and_placement() {
        let s = sim(SimConfig::new(Preset::Trn2, 1));
        let cs = 24 * GIB;
        // large requests: main pool, right after the carve-out
        let a = s
            .memory_alloc(0, &req(SMALL_OBJECT_MAX + 1).hbm(2))
            .unwrap();
        assert_eq!(s.memory_get_pa(0, a), Ok(2 * cs + FIRMWARE_CARVEOUT));
        let i = s.memory_info(0, a).unwrap();
        assert_eq!(
            (i.size, i.host, i.hbm_idx, i.small_pool),
            (SMALL_OBJECT_MAX + PAGE_SIZE, false, 2, false)
        );
        // small requests: the top 1 GiB, page rounded
        let b = s.memory_alloc(0, &req(1)).unwrap();
        let c = s.memory_alloc(0, &req(SMALL_OBJECT_MAX)).unwrap();
        assert_eq!(s.memory_get_pa(0, b), Ok(cs - GIB));
        assert_eq!(s.memory_get_pa(0, c), Ok(cs - GIB + PAGE_SIZE));
        assert!(s.memory_info(0, b).unwrap().small_pool);
        assert_eq!(s.memory_info(0, b).unwrap().size, PAGE_SIZE);
        // host pool in its own range
        let h = s.memory_alloc(0, &host_req(100)).unwrap();
        assert_eq!(s.memory_get_pa(0, h), Ok(HOST_PA_BASE));
        let st = s.pool_stats(0, false, 0).unwrap();
        assert_eq!(st.allocations, 2);
        assert_eq!(
            st.free,
            cs - FIRMWARE_CARVEOUT - PAGE_SIZE - SMALL_OBJECT_MAX
        );
        assert_eq!(s.pool_stats(0, true, 0).unwrap().allocations, 1);
        for x in [a, b, c] {
            s.memory_free(0, x).unwrap();
        }
        s.memory_free(0, h).unwrap();
        let st = s.pool_stats(0, false, 2).unwrap();
        assert_eq!((st.free, st.allocations), (st.capacity, 0));
    }

    /// Every figure of `pool_stats` / `hbm_stats_aligned` is what the allocator grants at
    /// this moment: at `align`, the largest request above [`SMALL_OBJECT_MAX`] is
    /// `largest_free` (it succeeds, one page more fails), and the largest small request is
    /// `largest_request` (the small-object region or the main pool). Leaves the pool as found.
    fn assert_largest_is_exact(s: &SimDevice, hbm: u32, align: u64) {
        let st = s.hbm_stats_aligned(0, hbm, align).unwrap();
        let r = |n: u64| req(n).hbm(hbm).align(align);
        let big = st.largest_free;
        if big > SMALL_OBJECT_MAX {
            let h = s.memory_alloc(0, &r(big));
            assert!(h.is_ok(), "largest {big} at align {align} refused: {st:?}");
            s.memory_free(0, h.unwrap()).unwrap();
        }
        let over = big.max(SMALL_OBJECT_MAX) + PAGE_SIZE;
        assert_eq!(s.memory_alloc(0, &r(over)), Err(errno::ENOMEM), "{st:?}");
        let small = st.largest_request().min(SMALL_OBJECT_MAX);
        if small > 0 {
            let h = s.memory_alloc(0, &r(small));
            assert!(h.is_ok(), "small {small} at align {align} refused: {st:?}");
            s.memory_free(0, h.unwrap()).unwrap();
            if small < SMALL_OBJECT_MAX {
                let e = s.memory_alloc(0, &r(small + PAGE_SIZE));
                assert_eq!(e, Err(errno::ENOMEM), "{st:?}");
            }
        }
        assert_eq!(s.hbm_stats_aligned(0, hbm, align), Ok(st), "left as found");
    }

    #[test]
    fn the_largest_free_block_is_allocatable_on_every_preset_and_one_page_more_is_not() {
        for p in Preset::ALL {
            let s = sim(SimConfig::new(p, 1));
            let channels = s.device_info(0).unwrap().hbm_channels;
            for c in 0..channels {
                let st = s.pool_stats(0, false, c).unwrap();
                let main = s.channel_size() - FIRMWARE_CARVEOUT - GIB;
                assert_eq!(
                    (st.largest_free, st.small_object_free),
                    (main, GIB),
                    "{p:?}"
                );
                assert_eq!(st.small_object_largest_free, GIB);
                for align in [0, 1 << 21, 1 << 30] {
                    assert_largest_is_exact(&s, c, align);
                }
            }
        }
    }

    /// The free-block histogram (issue 19 item 3) is every free block of the channel, by size
    /// class, in both placements: its bytes are the pool's free bytes, and the main pool's
    /// largest block sits in its top non-empty class.
    #[test]
    fn the_free_block_histogram_is_every_free_block_by_size_class() {
        for placement in [Placement::Genalloc, Placement::Tlsf] {
            let s = sim(SimConfig {
                placement,
                ..SimConfig::scaled_down(Preset::Trn1, 1)
            });
            let mut live = Vec::new();
            let mut x = 0x9e37_79b9_u64;
            for i in 0..400u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let size = PAGE_SIZE << (x % 9);
                if i % 3 == 2 && !live.is_empty() {
                    let h = live.swap_remove((x % live.len() as u64) as usize);
                    s.memory_free(0, h).unwrap();
                } else if let Ok(h) = s.memory_alloc(0, &req(size)) {
                    live.push(h);
                }
                let st = s.pool_stats(0, false, 0).unwrap();
                let (main, small) = s.free_histogram(0, 0).unwrap();
                assert_eq!(
                    main.total_bytes() + small.total_bytes(),
                    st.free,
                    "{placement:?} step {i}"
                );
                if st.largest_free > 0 && st.largest_free > st.small_object_largest_free {
                    let top = (0..FreeHistogram::CLASSES)
                        .rev()
                        .find(|c| main.blocks[*c] > 0)
                        .unwrap();
                    assert_eq!(
                        top,
                        FreeHistogram::class_of(st.largest_free),
                        "{placement:?} step {i}"
                    );
                }
            }
            assert_eq!(s.free_histogram(0, 9), Err(errno::EINVAL));
            let classes = [(0, 0), (4096, 0), (8191, 0), (8192, 1), (1 << 30, 18)];
            for (size, class) in classes {
                assert_eq!(FreeHistogram::class_of(size), class, "{size}");
            }
            assert_eq!(
                FreeHistogram::class_of(u64::MAX),
                FreeHistogram::CLASSES - 1
            );
            assert_eq!(s.free_histogram(7, 0), Err(errno::ENODEV));
        }
    }

    /// Issue 21's trn2 report, under the TLSF placement (whose routing never sends a request
    /// above 512 KiB to the small-object region): after a big tensor the main pool keeps
    /// 512 MiB and the 1 GiB small-object region is untouched; the largest free block is
    /// 512 MiB (not 1 GiB), and a 768 MiB request fails as that says.
    #[test]
    fn a_full_main_pool_does_not_borrow_the_small_object_regions_figure() {
        let s = sim(SimConfig {
            placement: Placement::Tlsf,
            ..SimConfig::new(Preset::Trn2, 1)
        });
        let st = s.pool_stats(0, false, 0).unwrap();
        let h = s
            .memory_alloc(0, &req(st.largest_free - 512 * MIB))
            .unwrap();
        let st = s.pool_stats(0, false, 0).unwrap();
        assert_eq!(st.free, 512 * MIB + GIB);
        assert_eq!(st.largest_free, 512 * MIB);
        assert_eq!(
            (st.small_object_free, st.small_object_largest_free),
            (GIB, GIB)
        );
        assert_eq!(s.memory_alloc(0, &req(768 * MIB)), Err(errno::ENOMEM));
        assert_largest_is_exact(&s, 0, 0);
        s.memory_free(0, h).unwrap();
        // the alignment-aware figures agree with the allocator too (aligned first fit)
        let g = s.memory_alloc(0, &req(3 * MIB)).unwrap();
        assert_eq!(s.memory_get_pa(0, g), Ok(FIRMWARE_CARVEOUT));
        let st = s.hbm_stats_aligned(0, 0, 1 << 30).unwrap();
        assert_eq!(
            st.largest_free,
            24 * GIB - 2 * GIB,
            "from the first 1 GiB boundary"
        );
        assert_largest_is_exact(&s, 0, 1 << 30);
        assert_eq!(s.hbm_stats_aligned(0, 0, 3), Err(errno::EINVAL));
        assert_eq!(s.hbm_stats_aligned(0, 4, 0), Err(errno::EINVAL));
    }

    /// The same state under the driver's placement: a request above 512 KiB falls back to
    /// the small-object region (`mc_alloc_internal`'s `alt_pool`), so the 768 MiB request
    /// succeeds there and the largest free block says 1 GiB; the stats agree with it.
    #[test]
    fn under_genalloc_a_large_request_falls_back_to_the_small_object_region() {
        let s = sim(SimConfig::new(Preset::Trn2, 1));
        assert_eq!(s.placement(), Placement::Genalloc);
        let st = s.pool_stats(0, false, 0).unwrap();
        s.memory_alloc(0, &req(st.largest_free - 512 * MIB))
            .unwrap();
        let st = s.pool_stats(0, false, 0).unwrap();
        assert_eq!((st.free, st.largest_free), (512 * MIB + GIB, GIB));
        assert_largest_is_exact(&s, 0, 0);
        let h = s.memory_alloc(0, &req(768 * MIB)).unwrap();
        let i = s.memory_info(0, h).unwrap();
        assert!(i.small_pool);
        assert_eq!(i.pa, 23 * GIB, "the small-object region's first page");
        assert_eq!(s.pool_stats(0, false, 0).unwrap().largest_free, 512 * MIB);
        assert_largest_is_exact(&s, 0, 0);
        assert_largest_is_exact(&s, 0, 1 << 21);
    }

    /// Driver-exact refusals: alignments above `INT_MAX` and sizes above `INT64_MAX` are
    /// `EINVAL` under genalloc (`mc_alloc_internal`), `ENOMEM` / honoured under TLSF.
    #[test]
    fn genalloc_refuses_what_the_driver_refuses() {
        let g = sim(SimConfig::new(Preset::Trn2, 1));
        let t = sim(SimConfig {
            placement: Placement::Tlsf,
            ..SimConfig::new(Preset::Trn2, 1)
        });
        assert_eq!(
            g.memory_alloc(0, &req(MIB).align(1 << 31)),
            Err(errno::EINVAL)
        );
        assert!(g.memory_alloc(0, &req(MIB).align(1 << 30)).is_ok());
        assert!(t.memory_alloc(0, &req(MIB).align(1 << 31)).is_ok());
        assert_eq!(g.memory_alloc(0, &req(1 << 63)), Err(errno::EINVAL));
        assert_eq!(t.memory_alloc(0, &req(1 << 63)), Err(errno::ENOMEM));
        assert_eq!(g.memory_alloc(0, &req(i64::MAX as u64)), Err(errno::ENOMEM));
        // an alignment at or below the page is a plain request
        let a = g
            .memory_alloc(0, &req(SMALL_OBJECT_MAX + 1).align(PAGE_SIZE))
            .unwrap();
        assert_eq!(g.memory_get_pa(0, a), Ok(FIRMWARE_CARVEOUT));
    }

    /// The contiguous scratchpad under genalloc: fixed blocks growing down from the main
    /// pool's end, each adjacent to the last, no fallback, and the driver's bookkeeping on
    /// free (`get_offset_for_scratchpad_alloc`, `mc_free`).
    #[test]
    fn contiguous_scratchpad_grows_down_from_the_main_pools_end() {
        let s = sim(SimConfig::scaled_down(Preset::Trn2, 1));
        let main_end = 64 * MIB - 16 * MIB; // channel 0: 16 MiB small region at the top
        let sp = |n| req(n).cat(CATEGORY_CONTIGUOUS_SCRATCHPAD);
        let a = s.memory_alloc(0, &sp(4 * MIB)).unwrap();
        let b = s.memory_alloc(0, &sp(2 * MIB)).unwrap();
        assert_eq!(s.memory_get_pa(0, a), Ok(main_end - 4 * MIB));
        assert_eq!(s.memory_get_pa(0, b), Ok(main_end - 6 * MIB));
        assert!(!s.memory_info(0, a).unwrap().small_pool);
        // an ordinary block right below the scratchpad: the next page is taken
        let fill = s
            .memory_alloc(0, &req(main_end - 6 * MIB - FIRMWARE_CARVEOUT))
            .unwrap();
        assert_eq!(s.memory_alloc(0, &sp(PAGE_SIZE)), Err(errno::ENOMEM));
        s.memory_free(0, fill).unwrap();
        // freed from the bottom, the scratchpad shrinks and its next page goes back there
        s.memory_free(0, b).unwrap();
        let c = s.memory_alloc(0, &sp(MIB)).unwrap();
        assert_eq!(s.memory_get_pa(0, c), Ok(main_end - 5 * MIB));
        // freed out of order (the driver logs it): the scratchpad size drops by 4 MiB to
        // 1 MiB, so the next block goes at 2 MiB below the end, inside the freed range ...
        s.memory_free(0, a).unwrap();
        let d = s.memory_alloc(0, &sp(MIB)).unwrap();
        assert_eq!(s.memory_get_pa(0, d), Ok(main_end - 2 * MIB));
        // ... and one whose fixed range covers the live `c` is refused
        assert_eq!(s.memory_alloc(0, &sp(4 * MIB)), Err(errno::ENOMEM));
        s.memory_free(0, c).unwrap();
        s.memory_free(0, d).unwrap();
        let e = s.memory_alloc(0, &sp(MIB)).unwrap();
        assert_eq!(
            s.memory_get_pa(0, e),
            Ok(main_end - MIB),
            "all freed: back at the end"
        );
        // the whole main pool, and no byte more
        s.memory_free(0, e).unwrap();
        assert_eq!(
            s.memory_alloc(0, &sp(main_end - FIRMWARE_CARVEOUT + PAGE_SIZE)),
            Err(errno::ENOMEM)
        );
        let all = s
            .memory_alloc(0, &sp(main_end - FIRMWARE_CARVEOUT))
            .unwrap();
        assert_eq!(s.memory_get_pa(0, all), Ok(FIRMWARE_CARVEOUT));
        s.memory_free(0, all).unwrap();
        assert_eq!(s.pool_stats(0, false, 0).unwrap().allocations, 0);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Alloc { pages: u64, align_log2: u8 },
        Free(usize),
        Check { align_log2: u8 },
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            // small (≤ 512 KiB) and large requests, some aligned
            3 => (1u64..=128, prop_oneof![Just(0u8), 13u8..22])
                .prop_map(|(pages, align_log2)| Op::Alloc { pages, align_log2 }),
            3 => (129u64..3072, prop_oneof![Just(0u8), 13u8..24])
                .prop_map(|(pages, align_log2)| Op::Alloc { pages, align_log2 }),
            4 => any::<usize>().prop_map(Op::Free),
            1 => prop_oneof![Just(0u8), 13u8..25].prop_map(|align_log2| Op::Check { align_log2 }),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 64, ..proptest::prelude::ProptestConfig::default()
        })]
        /// Issue 21's property, over random alloc/free sequences on a scaled-down channel
        /// (32 MiB main pool, 16 MiB small-object region): `largest_free` is always
        /// allocatable and one page more never is, for sizes above the small-object threshold;
        /// the same at the alignments the sequence uses; and small requests get exactly what
        /// `largest_request` says.
        #[test]
        fn largest_free_block_is_always_exactly_allocatable(
            ops in proptest::collection::vec(op(), 1..120),
        ) {
            let s = sim(SimConfig::scaled_down(Preset::Trn1, 1));
            let mut live: Vec<u64> = Vec::new();
            for op in ops {
                let check_align = match op {
                    Op::Alloc { pages, align_log2 } => {
                        let align = if align_log2 == 0 { 0 } else { 1u64 << align_log2 };
                        match s.memory_alloc(0, &req(pages * PAGE_SIZE).align(align)) {
                            Ok(h) => live.push(h),
                            Err(e) => proptest::prop_assert_eq!(e, errno::ENOMEM),
                        }
                        align
                    }
                    Op::Free(k) => {
                        if !live.is_empty() {
                            let h = live.swap_remove(k % live.len());
                            s.memory_free(0, h).unwrap();
                        }
                        0
                    }
                    Op::Check { align_log2 } => if align_log2 == 0 { 0 } else { 1u64 << align_log2 },
                };
                assert_largest_is_exact(&s, 0, 0);
                if check_align != 0 {
                    assert_largest_is_exact(&s, 0, check_align);
                }
            }
        }
    }

    #[test]
    fn small_pool_falls_back_to_main_then_enomem() {
        let s = sim(SimConfig::scaled_down(Preset::Trn1, 1));
        let cs = 64 * MIB;
        let small = cs / 4; // 16 MiB
        let n = small / SMALL_OBJECT_MAX;
        let mut hs: Vec<u64> = (0..n)
            .map(|_| s.memory_alloc(0, &req(SMALL_OBJECT_MAX)).unwrap())
            .collect();
        for h in &hs {
            assert!(s.memory_info(0, *h).unwrap().small_pool);
        }
        // small pool full → the main pool
        let f = s.memory_alloc(0, &req(4096)).unwrap();
        let i = s.memory_info(0, f).unwrap();
        assert!(!i.small_pool);
        assert_eq!(i.pa, FIRMWARE_CARVEOUT);
        hs.push(f);
        // fill the main pool
        let main = cs - FIRMWARE_CARVEOUT - small - PAGE_SIZE;
        hs.push(s.memory_alloc(0, &req(main)).unwrap());
        assert_eq!(s.memory_alloc(0, &req(4096)), Err(errno::ENOMEM));
        assert_eq!(
            s.memory_alloc(0, &req(SMALL_OBJECT_MAX + 1)),
            Err(errno::ENOMEM)
        );
        let st = s.pool_stats(0, false, 0).unwrap();
        assert_eq!((st.free, st.largest_free), (0, 0));
        // the other channel is untouched
        assert!(s.memory_alloc(0, &req(4096).hbm(1)).is_ok());
        // and memory comes back
        s.memory_free(0, hs[3]).unwrap();
        assert!(s.memory_alloc(0, &req(SMALL_OBJECT_MAX)).is_ok());
        // a request larger than any pool (above INT64_MAX the driver says EINVAL)
        assert_eq!(s.memory_alloc(0, &req(u64::MAX)), Err(errno::EINVAL));
        assert_eq!(s.memory_alloc(0, &req(u64::MAX >> 1)), Err(errno::ENOMEM));
        assert_eq!(s.memory_alloc(0, &req(1 << 40)), Err(errno::ENOMEM));
        // host pool exhaustion
        assert!(s.memory_alloc(0, &host_req(32 * MIB)).is_ok());
        assert_eq!(s.memory_alloc(0, &host_req(1)), Err(errno::ENOMEM));
    }

    #[test]
    fn alignment_rules() {
        let s = sim(SimConfig::new(Preset::Trn2, 1));
        // aligned host allocations are refused
        assert_eq!(
            s.memory_alloc(0, &host_req(4096).align(4096)),
            Err(errno::EINVAL)
        );
        // aligned device allocations are honoured
        let _pad = s.memory_alloc(0, &req(MIB)).unwrap();
        let a = s.memory_alloc(0, &req(MIB).align(1 << 30)).unwrap();
        assert_eq!(s.memory_get_pa(0, a).unwrap() % (1 << 30), 0);
        let b = s.memory_alloc(0, &req(4096).align(1 << 16)).unwrap();
        assert_eq!(s.memory_get_pa(0, b).unwrap() % (1 << 16), 0);
        assert_eq!(
            s.memory_alloc(0, &req(4096).align(3000)),
            Err(errno::EINVAL)
        );
        // withdrawn support: EINVAL for align != 0, plain requests still work
        s.set_aligned_alloc(false);
        assert!(!s.device_info(0).unwrap().supports_aligned_alloc);
        assert_eq!(
            s.memory_alloc(0, &req(4096).align(4096)),
            Err(errno::EINVAL)
        );
        assert!(s.memory_alloc(0, &req(4096)).is_ok());
        let cfg = SimConfig {
            aligned_alloc: false,
            ..SimConfig::new(Preset::Trn1, 1)
        };
        assert!(!sim(cfg).device_info(0).unwrap().supports_aligned_alloc);
    }

    #[test]
    fn bad_arguments() {
        let s = sim(SimConfig::new(Preset::Trn1, 1));
        assert_eq!(s.memory_alloc(1, &req(4096)), Err(errno::ENODEV));
        assert_eq!(s.memory_alloc(0, &req(0)), Err(errno::EINVAL));
        assert_eq!(s.memory_alloc(0, &req(4096).nc(8)), Err(errno::EINVAL));
        assert!(s.memory_alloc(0, &req(4096).nc(7)).is_ok());
        assert_eq!(s.memory_alloc(0, &req(4096).hbm(2)), Err(errno::EINVAL));
        assert!(s.memory_alloc(0, &host_req(4096).hbm(9)).is_ok());
        assert_eq!(s.memory_alloc(0, &req(4096).region(1)), Err(errno::EINVAL));
        assert_eq!(s.memory_alloc(0, &req(4096).cat(20)), Err(errno::EINVAL));
        assert_eq!(s.pool_stats(1, false, 0), Err(errno::ENODEV));
        assert_eq!(s.memory_free(1, 1), Err(errno::ENODEV));
        assert_eq!(s.alloc_calls(), 8);
    }

    #[test]
    fn stale_and_foreign_handles_are_einval() {
        let s = sim(SimConfig::new(Preset::Trn2, 2));
        let h = s.memory_alloc(0, &req(8192)).unwrap();
        assert_ne!(h, 0);
        assert_eq!(
            s.memory_free(1, h),
            Err(errno::EINVAL),
            "another device's handle"
        );
        assert_eq!(s.memory_get_pa(1, h), Err(errno::EINVAL));
        s.memory_free(0, h).unwrap();
        assert_eq!(s.memory_free(0, h), Err(errno::EINVAL), "double free");
        assert_eq!(s.memory_get_pa(0, h), Err(errno::EINVAL), "stale");
        // the slot is reused with a new generation: the old handle stays stale
        let h2 = s.memory_alloc(0, &req(8192)).unwrap();
        assert_ne!(h2, h);
        assert_eq!(s.memory_free(0, h), Err(errno::EINVAL));
        assert_eq!(s.copy_in(0, h, 0, &[1]), Err(errno::EINVAL));
        for junk in [
            0u64,
            1,
            u64::MAX,
            h2 ^ (1 << 20),
            h2 ^ (0xF << H_POOL_SHIFT),
            h2 + 1,
        ] {
            assert_eq!(s.memory_free(0, junk), Err(errno::EINVAL), "{junk:#x}");
        }
        assert_eq!(s.memory_free(0, h2), Ok(()));
    }

    #[test]
    fn fault_injection_and_call_count() {
        let s = sim(SimConfig::new(Preset::Trn2, 1));
        s.fail_nth_alloc(3);
        assert!(s.memory_alloc(0, &req(4096)).is_ok());
        assert!(s.memory_alloc(0, &req(4096)).is_ok());
        assert_eq!(s.memory_alloc(0, &req(4096)), Err(errno::ENOMEM));
        assert!(s.memory_alloc(0, &req(4096)).is_ok());
        assert_eq!(s.alloc_calls(), 4);
        s.fail_category(10); // CONSTANTS_DEVICE
        assert_eq!(s.memory_alloc(0, &req(4096).cat(10)), Err(errno::ENOMEM));
        assert_eq!(s.memory_alloc(0, &req(4096).cat(10)), Err(errno::ENOMEM));
        assert!(s.memory_alloc(0, &req(4096).cat(9)).is_ok());
        s.fail_nth_alloc(1);
        s.clear_faults();
        assert!(s.memory_alloc(0, &req(4096).cat(10)).is_ok());
        assert_eq!(s.alloc_calls(), 8);
        assert_eq!(s.pool_stats(0, false, 0).unwrap().allocations, 5);
    }

    #[test]
    fn copies_are_bounds_checked_and_use_the_backing() {
        let mut s = sim(SimConfig::scaled_down(Preset::Trn1, 2));
        let h = s.memory_alloc(1, &req(10_000).hbm(1)).unwrap();
        let hh = s.memory_alloc(1, &host_req(5000)).unwrap();
        // no backing: bounds first, then EOPNOTSUPP
        assert_eq!(s.copy_in(1, h, 0, &[1, 2, 3]), Err(errno::EOPNOTSUPP));
        assert_eq!(s.copy_in(1, h, 12_288, &[1]), Err(errno::EFAULT));
        let len = s.backing_len(1);
        assert_eq!(len, 2 * 64 * MIB + 32 * MIB);
        let mut mem = vec![0u8; len as usize];
        // SAFETY: `mem` outlives every use below (the simulator is dropped first... or the
        // backing is removed before `mem` is) and is accessed only through the simulator.
        unsafe {
            assert_eq!(
                s.set_backing(1, mem.as_mut_ptr(), len - 1),
                Err(errno::EINVAL)
            );
            assert_eq!(s.set_backing(2, mem.as_mut_ptr(), len), Err(errno::ENODEV));
            s.set_backing(1, mem.as_mut_ptr(), len).unwrap();
        }
        s.copy_in(1, h, 100, b"hello").unwrap();
        let mut out = [0u8; 5];
        s.copy_out(1, h, 100, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        // the whole rounded allocation is addressable, one byte more is not
        assert_eq!(s.copy_in(1, h, 12_287, &[7]), Ok(()));
        assert_eq!(s.copy_in(1, h, 12_287, &[7, 7]), Err(errno::EFAULT));
        assert_eq!(s.copy_out(1, h, u64::MAX, &mut out), Err(errno::EFAULT));
        assert_eq!(s.fill(1, h, 0, 12_289, 0), Err(errno::EFAULT));
        s.fill(1, h, 0, 4, 0xAB).unwrap();
        s.copy_out(1, h, 0, &mut out).unwrap();
        assert_eq!(out, [0xAB, 0xAB, 0xAB, 0xAB, 0]);
        // host pool bytes sit after the channels
        s.copy_in(1, hh, 1, b"host").unwrap();
        let pa = s.memory_get_pa(1, h).unwrap();
        let removed = {
            // SAFETY: removing the backing (null) has no requirement.
            unsafe { s.set_backing(1, core::ptr::null_mut(), 0) }
        };
        removed.unwrap();
        assert_eq!(&mem[pa as usize + 100..pa as usize + 105], b"hello");
        assert_eq!(
            pa,
            64 * MIB + 48 * MIB,
            "channel 1's small pool (16 MiB at the top)"
        );
        let host_off = 2 * 64 * MIB as usize;
        assert_eq!(&mem[host_off + 1..host_off + 5], b"host");
        assert_eq!(s.copy_in(1, h, 0, &[1]), Err(errno::EOPNOTSUPP));
        // device 0 never had a backing
        let d0 = s.memory_alloc(0, &req(4096)).unwrap();
        assert_eq!(s.copy_in(0, d0, 0, &[1]), Err(errno::EOPNOTSUPP));
    }

    #[test]
    fn concurrent_allocations_from_two_threads() {
        let s = sim(SimConfig::scaled_down(Preset::Trn2, 1));
        std::thread::scope(|t| {
            for hbm in 0..2 {
                let s = &*s;
                t.spawn(move || {
                    for _ in 0..200 {
                        let h = s.memory_alloc(0, &req(8192).hbm(hbm)).unwrap();
                        s.memory_free(0, h).unwrap();
                    }
                });
            }
        });
        assert_eq!(s.alloc_calls(), 400);
        assert_eq!(s.pool_stats(0, false, 0).unwrap().allocations, 0);
    }
}
