//! The driver portal (spec §3.2's `ndl_*` calls): the only way the core reaches device memory.
//!
//! Implemented by the simulated device ([`crate::sim`]) and, in `nrt-host`, by the real
//! `/dev/neuron<N>` ioctl backend. Errors are errno values exactly as the kernel returns them
//! (`ENOMEM` for an exhausted pool, `EINVAL` for a bad argument, …). All methods take `&self`:
//! drivers serialise internally, so the core can call them from several threads.

use crate::abi::al_hal_tpb_arch_type_t;

pub use crate::error::{errno, Errno};

/// Driver feature bits (`DRIVER_INFO_GET.feature_flags1`, public ioctl ABI).
pub mod feature {
    /// dma-buf export.
    pub const DMABUF: u64 = 1 << 0;
    /// Asynchronous DMA.
    pub const ASYNC_DMA: u64 = 1 << 1;
    /// Batched DMA queue init.
    pub const BATCH_DMAQ_INIT: u64 = 1 << 2;
    /// Large core maps.
    pub const BIG_CORE_MAPS: u64 = 1 << 3;
    /// MEM_ALLOC carries a category (`mem_type`).
    pub const MEM_ALLOC_TYPE: u64 = 1 << 4;
    /// HBM scrub.
    pub const HBM_SCRUB: u64 = 1 << 5;
    /// MEM_ALLOC supports ≥ 4 GiB (V2MT64).
    pub const MEM_ALLOC64: u64 = 1 << 6;
    /// Contiguous scratchpad (the spec's "driver-feature 0x80", §8).
    pub const CONTIGUOUS_SCRATCHPAD: u64 = 1 << 7;
}

/// What the runtime learns about one device at bring-up.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DeviceInfo {
    /// Core generation.
    pub arch: al_hal_tpb_arch_type_t,
    /// Physical NeuronCores on the device (≤ 8).
    pub cores_per_device: u32,
    /// HBM channels (pools) on the device.
    pub hbm_channels: u32,
    /// Bytes per HBM channel, before the firmware carve-out.
    pub hbm_channel_size: u64,
    /// Bytes of host DMA memory the driver will hand this process.
    pub host_dma_capacity: u64,
    /// `feature::*` bits.
    pub feature_flags: u64,
    /// Whether MEM_ALLOC honours an alignment (spec §3.2 `ndl_supports_align`).
    pub supports_aligned_alloc: bool,
    /// Allocation granule: sizes are rounded up to it.
    pub page_size: u64,
}

/// Largest page size a driver may declare (1 GiB).
pub const PAGE_SIZE_MAX: u64 = 1 << 30;

impl DeviceInfo {
    /// Checks what a driver said about a device before anything uses it: 1..=8 cores, at most
    /// the ABI's HBM channels (`MAX_HBM_CHANNELS`, spec §3.4), a page size that is a power of
    /// two up to [`PAGE_SIZE_MAX`], and channel bytes whose total fits 64 bits. The error
    /// names the field and the value.
    pub fn check(&self) -> Result<(), crate::error::Error> {
        use crate::abi::constants::{MAX_HBM_CHANNELS, TPBS_PER_MLA};
        let bad = |what, value: u64| Err(crate::error::Error::BadDriver { what, value });
        if self.cores_per_device == 0 || self.cores_per_device as usize > TPBS_PER_MLA {
            return bad(
                "device_info: cores_per_device outside 1..=8",
                self.cores_per_device.into(),
            );
        }
        if self.hbm_channels as usize > MAX_HBM_CHANNELS {
            return bad(
                "device_info: more HBM channels than the ABI holds (4)",
                self.hbm_channels.into(),
            );
        }
        if !self.page_size.is_power_of_two() || self.page_size > PAGE_SIZE_MAX {
            return bad(
                "device_info: page size not a power of two up to 1 GiB",
                self.page_size,
            );
        }
        if self
            .hbm_channel_size
            .checked_mul(self.hbm_channels.into())
            .is_none()
        {
            return bad(
                "device_info: HBM channels' total bytes overflow 64 bits",
                self.hbm_channel_size,
            );
        }
        Ok(())
    }

    /// The HBM channel that serves physical core `tpb_idx` (public ABI §3 "HBM ↔ core"):
    /// v2 (SUNDA) core i → HBM i; v3+ cores 2i and 2i+1 share HBM i.
    pub fn default_hbm_for_core(&self, tpb_idx: u32) -> u32 {
        let channels = self.hbm_channels.max(1);
        let cores = self.cores_per_device.max(1);
        let per = cores.div_ceil(channels).max(1);
        (tpb_idx / per).min(channels - 1)
    }
}

/// One MEM_ALLOC request (the arguments of `ndl_memory_alloc`, spec §3.2 step 4).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AllocRequest {
    /// Bytes requested.
    pub size: u64,
    /// Alignment in bytes (0 = the driver's natural alignment).
    pub align: u64,
    /// Host DMA memory (true) or device HBM (false).
    pub host: bool,
    /// HBM channel (ignored for host memory).
    pub hbm_idx: u32,
    /// DRAM region; 0 on current devices.
    pub region: u32,
    /// Core the allocation is accounted to (range checked, not a placement).
    pub nc_id: u32,
    /// The driver category byte (`mem_alloc_category_t`).
    pub category: u8,
}

/// Requests of at most this many bytes (after page rounding) go to an HBM channel's
/// small-object region first (public ABI §3 "How the driver carves memory").
pub const SMALL_OBJECT_MAX: u64 = 512 * 1024;

/// Free blocks of one region by size class: class `i` counts the free blocks of
/// `[2^(12+i), 2^(13+i))` bytes (4 KiB and up; the last class is open-ended), so a reader sees
/// at a glance whether the free bytes are one block or a thousand slivers (public
/// ABI §6 "users cannot see the largest free block").
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FreeHistogram {
    /// Free blocks per class.
    pub blocks: [u32; FreeHistogram::CLASSES],
    /// Free bytes per class.
    pub bytes: [u64; FreeHistogram::CLASSES],
}

impl FreeHistogram {
    /// Classes: 4 KiB (2^12) up to 2^36 = 64 GiB and above.
    pub const CLASSES: usize = 25;
    /// log2 of the smallest class's lower bound.
    pub const MIN_LOG2: u32 = 12;

    /// The class of a free block of `size` bytes (blocks under 4 KiB count in class 0).
    pub const fn class_of(size: u64) -> usize {
        let log2 = if size == 0 {
            0
        } else {
            63 - size.leading_zeros()
        };
        let c = log2.saturating_sub(Self::MIN_LOG2) as usize;
        if c >= Self::CLASSES {
            Self::CLASSES - 1
        } else {
            c
        }
    }

    /// The lower bound of class `i` in bytes.
    pub const fn class_min(i: usize) -> u64 {
        1u64 << (Self::MIN_LOG2 as usize + i)
    }

    /// Counts one free block.
    pub fn add(&mut self, size: u64) {
        let c = Self::class_of(size);
        self.blocks[c] = self.blocks[c].saturating_add(1);
        self.bytes[c] = self.bytes[c].saturating_add(size);
    }

    /// Free blocks in all classes.
    pub fn total_blocks(&self) -> u64 {
        self.blocks.iter().map(|b| u64::from(*b)).sum()
    }

    /// Free bytes in all classes.
    pub fn total_bytes(&self) -> u64 {
        self.bytes.iter().fold(0, |a, b| a.saturating_add(*b))
    }
}

/// Occupancy of one driver pool (an HBM channel or the host DMA pool).
///
/// What succeeds, read from these figures (public ABI §3: requests of at most
/// [`SMALL_OBJECT_MAX`] try the small-object region first and fall back to the main pool;
/// larger ones go to the main pool only): an unaligned request of `n` page-rounded bytes
/// succeeds now iff `n <= largest_free`, or `n <= SMALL_OBJECT_MAX` and
/// `n <= small_object_largest_free` — iff `n <= largest_request()`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PoolStats {
    /// Bytes the pool manages (its small-object region included).
    pub capacity: u64,
    /// Bytes free (its small-object region included).
    pub free: u64,
    /// The largest free block of the main pool: the largest request of more than
    /// [`SMALL_OBJECT_MAX`] that would succeed right now (page-rounded, at the driver's own
    /// page alignment, carve-outs excluded). The small-object region's blocks never count:
    /// they serve no request that large.
    pub largest_free: u64,
    /// Live allocations.
    pub allocations: u64,
    /// Free bytes outside the largest free block of their region: `free - largest_free` for
    /// one region; a pool with a separate small-object region (the simulated driver's) counts
    /// each region against its own largest block, so an empty pool has none.
    pub fragmented_free: u64,
    /// Bytes free in the channel's small-object region (part of `free`); 0 for a pool without
    /// one, or a driver that does not tell it apart.
    pub small_object_free: u64,
    /// The largest free block of the small-object region, which serves only requests of at
    /// most [`SMALL_OBJECT_MAX`]; 0 as for `small_object_free`.
    pub small_object_largest_free: u64,
}

impl PoolStats {
    /// Checks what a driver said about a pool before anything uses it: free ≤ capacity, and
    /// each part of free (largest block, fragments, the small-object region and its largest
    /// block) ≤ what contains it. The error names the field and the value.
    pub fn check(&self) -> Result<(), crate::error::Error> {
        let bad = |what, value| Err(crate::error::Error::BadDriver { what, value });
        if self.free > self.capacity {
            return bad("pool_stats: free bytes above capacity", self.free);
        }
        if self.largest_free > self.free {
            return bad(
                "pool_stats: largest free block above free bytes",
                self.largest_free,
            );
        }
        if self.fragmented_free > self.free {
            return bad(
                "pool_stats: fragmented bytes above free bytes",
                self.fragmented_free,
            );
        }
        if self.small_object_free > self.free {
            return bad(
                "pool_stats: small-object free bytes above free bytes",
                self.small_object_free,
            );
        }
        if self.small_object_largest_free > self.small_object_free {
            return bad(
                "pool_stats: small-object largest block above its free bytes",
                self.small_object_largest_free,
            );
        }
        Ok(())
    }

    /// Bytes in use (`capacity - free`), for statistics that passed [`Self::check`].
    pub const fn used(&self) -> u64 {
        self.capacity.saturating_sub(self.free)
    }

    /// The statistics of a one-region pool.
    pub const fn one_region(capacity: u64, free: u64, largest_free: u64, allocations: u64) -> Self {
        PoolStats {
            capacity,
            free,
            largest_free,
            allocations,
            fragmented_free: free.saturating_sub(largest_free),
            small_object_free: 0,
            small_object_largest_free: 0,
        }
    }

    /// The largest request of any size these figures say would succeed (see the type's docs):
    /// the main pool's largest block, or the small-object region's, capped at the largest
    /// request that region serves ([`SMALL_OBJECT_MAX`]).
    pub fn largest_request(&self) -> u64 {
        self.largest_free
            .max(self.small_object_largest_free.min(SMALL_OBJECT_MAX))
    }

    /// External fragmentation in per mille: `1000 * fragmented_free / free` (for one region,
    /// `1000 * (1 - largest_free / free)`).
    pub fn fragmentation_permille(&self) -> u32 {
        if self.free == 0 {
            0
        } else {
            // Capped: a driver that reports more fragmented than free bytes reads as 1000 ‰.
            (self.fragmented_free.min(self.free) as u128 * 1000 / self.free as u128) as u32
        }
    }
}

/// The driver portal libnrt calls (spec §3.2).
///
/// # Your own driver
///
/// Ten methods are required; the rest have defaults. A skeleton for a guest that reaches its
/// device through hypercalls (for MMIO, `call` would write a doorbell register and read the
/// reply): every call fails with `EOPNOTSUPP` until the transport is wired, which the runtime
/// reports as a driver error at `init`, having taken nothing.
///
/// ```
/// use nrt_core::driver::{errno, AllocRequest, DeviceInfo, Driver, Errno, PoolStats};
/// use nrt_core::{CoreState, Error, InitOptions, Nrt};
///
/// /// The devices a hypervisor lends this guest, one hypercall per driver operation.
/// struct HypercallDriver {
///     devices: u32,
/// }
///
/// /// Operation numbers of the (made-up) hypercall interface.
/// enum Op { Info = 1, Alloc, GetPa, Free, CopyIn, CopyOut, Stats }
///
/// impl HypercallDriver {
///     /// One hypercall: `op` and its arguments in registers, a 64-bit result or an errno.
///     /// Wire it to your transport (`vmcall`/`hvc`, or a doorbell and a reply register).
///     fn call(&self, _op: Op, _args: &[u64]) -> Result<u64, Errno> {
///         Err(errno::EOPNOTSUPP)
///     }
/// }
///
/// impl Driver for HypercallDriver {
///     fn device_count(&self) -> u32 {
///         self.devices
///     }
///     fn device_info(&self, dev: u32) -> Result<DeviceInfo, Errno> {
///         // A real driver decodes the reply (or a shared page) into a `DeviceInfo`.
///         self.call(Op::Info, &[dev.into()])?;
///         Err(errno::EOPNOTSUPP)
///     }
///     fn memory_alloc(&self, dev: u32, req: &AllocRequest) -> Result<u64, Errno> {
///         let host = u64::from(req.host);
///         let args = [dev.into(), req.size, req.align, host, req.hbm_idx.into(), req.category.into()];
///         self.call(Op::Alloc, &args)
///     }
///     fn memory_get_pa(&self, dev: u32, handle: u64) -> Result<u64, Errno> {
///         self.call(Op::GetPa, &[dev.into(), handle])
///     }
///     fn memory_free(&self, dev: u32, handle: u64) -> Result<(), Errno> {
///         self.call(Op::Free, &[dev.into(), handle]).map(drop)
///     }
///     fn copy_in(&self, dev: u32, handle: u64, offset: u64, src: &[u8]) -> Result<(), Errno> {
///         let buf = [src.as_ptr() as u64, src.len() as u64];
///         self.call(Op::CopyIn, &[dev.into(), handle, offset, buf[0], buf[1]]).map(drop)
///     }
///     fn copy_out(&self, dev: u32, handle: u64, offset: u64, dst: &mut [u8]) -> Result<(), Errno> {
///         let buf = [dst.as_mut_ptr() as u64, dst.len() as u64];
///         self.call(Op::CopyOut, &[dev.into(), handle, offset, buf[0], buf[1]]).map(drop)
///     }
///     fn pool_stats(&self, dev: u32, host: bool, hbm_idx: u32) -> Result<PoolStats, Errno> {
///         self.call(Op::Stats, &[dev.into(), host.into(), hbm_idx.into()])?;
///         Err(errno::EOPNOTSUPP)
///     }
/// }
///
/// let drv = HypercallDriver { devices: 1 };
/// let state = CoreState::new_boxed(); // or a zeroed `static` (crate README)
/// let nrt = Nrt::new(&state, &drv);
/// let r = nrt.init(&InitOptions::default());
/// assert_eq!(r, Err(Error::Driver(errno::EOPNOTSUPP)));
/// assert_eq!(nrt.driver_pool_bytes_in_use(), Err(Error::Uninitialized)); // never up
/// ```
pub trait Driver: Sync {
    /// Devices this driver exposes (≤ 32).
    fn device_count(&self) -> u32;
    /// Geometry and features of device `dev`.
    fn device_info(&self, dev: u32) -> Result<DeviceInfo, Errno>;
    /// `ndl_memory_alloc`: carves memory and returns an opaque non-zero handle.
    fn memory_alloc(&self, dev: u32, req: &AllocRequest) -> Result<u64, Errno>;
    /// `ndl_memory_alloc` followed by `ndl_memory_get_pa` (spec §3.2 steps 4–5): the handle and
    /// physical address of a new allocation. If the address cannot be read the allocation is
    /// freed again. A driver that learns the address while carving overrides this.
    fn memory_alloc_pa(&self, dev: u32, req: &AllocRequest) -> Result<(u64, u64), Errno> {
        let h = self.memory_alloc(dev, req)?;
        match self.memory_get_pa(dev, h) {
            Ok(pa) => Ok((h, pa)),
            Err(e) => {
                let _ = self.memory_free(dev, h);
                Err(e)
            }
        }
    }
    /// `ndl_memory_get_pa`: the physical (device) address of an allocation.
    fn memory_get_pa(&self, dev: u32, handle: u64) -> Result<u64, Errno>;
    /// `ndl_memory_free`.
    fn memory_free(&self, dev: u32, handle: u64) -> Result<(), Errno>;
    /// `ndl_memory_unmap`: drops a host mapping made of the allocation (no-op when none).
    fn memory_unmap(&self, _dev: u32, _handle: u64) -> Result<(), Errno> {
        Ok(())
    }
    /// `ndl_get_copy_buf`: the per-core staging buffer cookie recorded in `dmem_t.cpy_buf`.
    /// Asked once per core at bring-up (`init`).
    fn get_copy_buf(&self, _dev: u32, nc_id: u32) -> u64 {
        0x1000 + nc_id as u64
    }
    /// MEM_BUF_COPY to the device: `src` → allocation bytes `[offset, offset+len)`.
    fn copy_in(&self, dev: u32, handle: u64, offset: u64, src: &[u8]) -> Result<(), Errno>;
    /// MEM_BUF_COPY from the device: allocation bytes `[offset, offset+len)` → `dst`.
    fn copy_out(&self, dev: u32, handle: u64, offset: u64, dst: &mut [u8]) -> Result<(), Errno>;
    /// Fills allocation bytes `[offset, offset+len)` with `value` (memset on device).
    fn fill(&self, dev: u32, handle: u64, offset: u64, len: u64, value: u8) -> Result<(), Errno> {
        fill_by_copies(self, dev, handle, offset, len, &[value; 256])
    }
    /// Occupancy of an HBM channel (`host == false`) or the host DMA pool.
    fn pool_stats(&self, dev: u32, host: bool, hbm_idx: u32) -> Result<PoolStats, Errno>;
    /// [`Driver::pool_stats`] of HBM `hbm_idx` with `largest_free` and
    /// `small_object_largest_free` measured for requests aligned to `align` (a power of two;
    /// 0 = the page): the largest such request each region would grant now (public ABI §3
    /// "alignment above the page size uses an aligned first-fit"). A diagnostics call for the
    /// OOM report. The default knows only page alignment and answers `EOPNOTSUPP` above it.
    fn hbm_stats_aligned(&self, dev: u32, hbm_idx: u32, align: u64) -> Result<PoolStats, Errno> {
        let page = self.device_info(dev)?.page_size;
        if align <= page {
            self.pool_stats(dev, false, hbm_idx)
        } else {
            Err(errno::EOPNOTSUPP)
        }
    }
    /// The free blocks of HBM channel `hbm_idx` by size class: `(main pool, small-object
    /// region)`. A diagnostics call for `stats` and the OOM report; the
    /// default answers `EOPNOTSUPP` (a driver that cannot list its free blocks).
    fn free_histogram(
        &self,
        dev: u32,
        hbm_idx: u32,
    ) -> Result<(FreeHistogram, FreeHistogram), Errno> {
        let _ = (dev, hbm_idx);
        Err(errno::EOPNOTSUPP)
    }
    /// The physical-address window of device `dev`'s HBM (`host == false`) or host DMA pool:
    /// `(base, bytes)`. When the driver states one, every allocation it returns must lie in
    /// it (the runtime refuses one that does not); `None` (the default): no window is checked.
    /// Asked once per device and pool at bring-up (`init`): a window is fixed while the
    /// runtime is up.
    fn pa_window(&self, _dev: u32, _host: bool) -> Option<(u64, u64)> {
        None
    }
    /// The host-device-id → routing-id map (spec §1); `EOPNOTSUPP` makes the runtime fall back
    /// to the identity.
    fn host_device_id_rid_map(&self, _out: &mut [u32; 32]) -> Result<(), Errno> {
        Err(errno::EOPNOTSUPP)
    }
}

/// Forwards [`Driver`] methods to a field that is a driver, inside an `impl Driver for …`
/// block: `forward_driver!(field => method, method, …)`, or `forward_driver!(field => all)`
/// for every method (one place instead of hand-forwarded impls). A wrapper
/// that changes some calls writes those itself and forwards the rest.
///
/// ```
/// use nrt_core::driver::Driver;
/// use nrt_core::sim::SimDevice;
///
/// /// Counts allocations, forwards everything else.
/// struct Counting {
///     inner: Box<SimDevice>,
///     allocs: core::sync::atomic::AtomicU32,
/// }
///
/// impl Driver for Counting {
///     nrt_core::forward_driver!(inner => device_count, device_info, memory_get_pa,
///         memory_free, copy_in, copy_out, pool_stats);
///     fn memory_alloc(
///         &self,
///         dev: u32,
///         req: &nrt_core::driver::AllocRequest,
///     ) -> Result<u64, nrt_core::driver::Errno> {
///         self.allocs.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
///         self.inner.memory_alloc(dev, req)
///     }
/// }
/// ```
#[macro_export]
macro_rules! forward_driver {
    ($to:ident => all) => {
        $crate::forward_driver!($to => device_count, device_info, memory_alloc, memory_alloc_pa,
            memory_get_pa, memory_free, memory_unmap, get_copy_buf, copy_in, copy_out, fill,
            pool_stats, hbm_stats_aligned, free_histogram, pa_window, host_device_id_rid_map);
    };
    ($to:ident => $($m:ident),+ $(,)?) => {
        $( $crate::forward_driver!(@one $to $m); )+
    };
    (@one $to:ident device_count) => {
        fn device_count(&self) -> u32 {
            $crate::driver::Driver::device_count(&*self.$to)
        }
    };
    (@one $to:ident device_info) => {
        fn device_info(
            &self,
            dev: u32,
        ) -> ::core::result::Result<$crate::driver::DeviceInfo, $crate::driver::Errno> {
            $crate::driver::Driver::device_info(&*self.$to, dev)
        }
    };
    (@one $to:ident memory_alloc) => {
        fn memory_alloc(
            &self,
            dev: u32,
            req: &$crate::driver::AllocRequest,
        ) -> ::core::result::Result<u64, $crate::driver::Errno> {
            $crate::driver::Driver::memory_alloc(&*self.$to, dev, req)
        }
    };
    (@one $to:ident memory_alloc_pa) => {
        fn memory_alloc_pa(
            &self,
            dev: u32,
            req: &$crate::driver::AllocRequest,
        ) -> ::core::result::Result<(u64, u64), $crate::driver::Errno> {
            $crate::driver::Driver::memory_alloc_pa(&*self.$to, dev, req)
        }
    };
    (@one $to:ident memory_get_pa) => {
        fn memory_get_pa(
            &self,
            dev: u32,
            handle: u64,
        ) -> ::core::result::Result<u64, $crate::driver::Errno> {
            $crate::driver::Driver::memory_get_pa(&*self.$to, dev, handle)
        }
    };
    (@one $to:ident memory_free) => {
        fn memory_free(
            &self,
            dev: u32,
            handle: u64,
        ) -> ::core::result::Result<(), $crate::driver::Errno> {
            $crate::driver::Driver::memory_free(&*self.$to, dev, handle)
        }
    };
    (@one $to:ident memory_unmap) => {
        fn memory_unmap(
            &self,
            dev: u32,
            handle: u64,
        ) -> ::core::result::Result<(), $crate::driver::Errno> {
            $crate::driver::Driver::memory_unmap(&*self.$to, dev, handle)
        }
    };
    (@one $to:ident get_copy_buf) => {
        fn get_copy_buf(&self, dev: u32, nc_id: u32) -> u64 {
            $crate::driver::Driver::get_copy_buf(&*self.$to, dev, nc_id)
        }
    };
    (@one $to:ident copy_in) => {
        fn copy_in(
            &self,
            dev: u32,
            handle: u64,
            offset: u64,
            src: &[u8],
        ) -> ::core::result::Result<(), $crate::driver::Errno> {
            $crate::driver::Driver::copy_in(&*self.$to, dev, handle, offset, src)
        }
    };
    (@one $to:ident copy_out) => {
        fn copy_out(
            &self,
            dev: u32,
            handle: u64,
            offset: u64,
            dst: &mut [u8],
        ) -> ::core::result::Result<(), $crate::driver::Errno> {
            $crate::driver::Driver::copy_out(&*self.$to, dev, handle, offset, dst)
        }
    };
    (@one $to:ident fill) => {
        fn fill(
            &self,
            dev: u32,
            handle: u64,
            offset: u64,
            len: u64,
            value: u8,
        ) -> ::core::result::Result<(), $crate::driver::Errno> {
            $crate::driver::Driver::fill(&*self.$to, dev, handle, offset, len, value)
        }
    };
    (@one $to:ident pool_stats) => {
        fn pool_stats(
            &self,
            dev: u32,
            host: bool,
            hbm_idx: u32,
        ) -> ::core::result::Result<$crate::driver::PoolStats, $crate::driver::Errno> {
            $crate::driver::Driver::pool_stats(&*self.$to, dev, host, hbm_idx)
        }
    };
    (@one $to:ident hbm_stats_aligned) => {
        fn hbm_stats_aligned(
            &self,
            dev: u32,
            hbm_idx: u32,
            align: u64,
        ) -> ::core::result::Result<$crate::driver::PoolStats, $crate::driver::Errno> {
            $crate::driver::Driver::hbm_stats_aligned(&*self.$to, dev, hbm_idx, align)
        }
    };
    (@one $to:ident free_histogram) => {
        fn free_histogram(
            &self,
            dev: u32,
            hbm_idx: u32,
        ) -> ::core::result::Result<
            ($crate::driver::FreeHistogram, $crate::driver::FreeHistogram),
            $crate::driver::Errno,
        > {
            $crate::driver::Driver::free_histogram(&*self.$to, dev, hbm_idx)
        }
    };
    (@one $to:ident pa_window) => {
        fn pa_window(&self, dev: u32, host: bool) -> ::core::option::Option<(u64, u64)> {
            $crate::driver::Driver::pa_window(&*self.$to, dev, host)
        }
    };
    (@one $to:ident host_device_id_rid_map) => {
        fn host_device_id_rid_map(
            &self,
            out: &mut [u32; 32],
        ) -> ::core::result::Result<(), $crate::driver::Errno> {
            $crate::driver::Driver::host_device_id_rid_map(&*self.$to, out)
        }
    };
}

/// Fills `[offset, offset+len)` of an allocation by repeated [`Driver::copy_in`] of `pattern`
/// (a buffer of the fill byte, any length ≥ 1): the one loop behind every `fill` that has no
/// device memset.
pub fn fill_by_copies<D: Driver + ?Sized>(
    drv: &D,
    dev: u32,
    handle: u64,
    offset: u64,
    len: u64,
    pattern: &[u8],
) -> Result<(), Errno> {
    if pattern.is_empty() {
        return Err(errno::EINVAL);
    }
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(pattern.len() as u64) as usize;
        drv.copy_in(dev, handle, offset + done, &pattern[..n])?;
        done += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{errno, Errno, PoolStats};

    #[test]
    fn an_errno_keeps_its_number_and_says_its_name() {
        extern crate std;
        use std::format;
        assert_eq!(errno::ENOMEM.raw(), 12);
        assert_eq!(Errno::new(22), errno::EINVAL);
        assert_eq!(i32::from(errno::ENODEV), 19);
        assert_eq!(Errno::from(95).name(), "EOPNOTSUPP");
        assert_eq!(format!("{}", errno::ENOMEM), "12 (ENOMEM)");
        assert_eq!(format!("{:?}", errno::EINVAL), "EINVAL(22)");
        // A number the table does not name is still itself, not a named errno.
        assert_eq!(format!("{}", Errno::new(524)), "524 (E?)");
        assert_eq!(
            format!("{}", crate::Error::Driver(errno::EIO)),
            "driver error 5 (EIO)"
        );
    }

    #[test]
    fn fragmentation_is_a_per_mille_and_survives_an_inconsistent_driver() {
        let s = |free, largest_free| PoolStats::one_region(1000, free, largest_free, 1);
        assert_eq!(s(0, 0).fragmentation_permille(), 0);
        assert_eq!(s(400, 400).fragmentation_permille(), 0);
        assert_eq!(s(400, 100).fragmentation_permille(), 750);
        // A driver reporting a largest free block above the free total reads as 0 ‰.
        assert_eq!(s(400, 900).fragmentation_permille(), 0);
    }
}
