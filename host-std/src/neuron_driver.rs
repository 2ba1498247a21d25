//! [`NeuronDriver`]: the [`Driver`] portal over the kernel driver's `/dev/neuron<N>` nodes
//! (public ABI §3), through the syscall layer [`Sys`].
//!
//! Bring-up: devices are the consecutive nodes `/dev/neuron0, /dev/neuron1, …` that open;
//! DEVICE_BASIC_INFO gives the architecture and DRIVER_INFO_GET the feature bits.
//!
//! Known difference from libnrt: every node is opened (and so the process attached to every
//! device), whatever cores the process will use, and one node that fails to open fails the
//! whole bring-up. libnrt opens only the devices holding its visible cores, so on a host where
//! some device already has its 16 processes (`EBUSY`, public ABI §4) libnrt still starts and
//! this does not. A container that exposes only `/dev/neuron3` is likewise seen as having no
//! device (discovery stops at the first missing index). The core
//! count and HBM geometry are not reported by any ioctl of the public table, so they are derived
//! from the architecture with public ABI §4 ([`Geometry::for_arch`]).
//!
//! Allocation tries MEM_ALLOC_V2MT64 first when the driver announces `MEM_ALLOC64` (or when it
//! has no DRIVER_INFO_GET to ask), and falls back to MEM_ALLOC_V2MT and then MEM_ALLOC_V2 while
//! an older driver rejects the larger struct (`EINVAL` from its size dispatch, or `ENOTTY`).
//! The first variant that succeeds is remembered per device; after that its errors are final.
//! Only V2MT64 announces ≥ 4 GiB support, so a ≥ 4 GiB request on an older driver is refused
//! with `EINVAL` before it reaches the driver (the reason the 56-byte variant exists).

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

use nix::errno::Errno;
use nrt_core::abi::al_hal_tpb_arch_type_t;
use nrt_core::driver::{feature, AllocRequest, DeviceInfo, Driver, Errno as DrvErrno, PoolStats};

use crate::error::{drv, Error, Result};
use crate::ioctl::abi::*;
use crate::ioctl::{ioctl_arg, RealSys, Sys};

/// Device nodes are `/dev/neuron0`, `/dev/neuron1`, … (public ABI §3, one node per device).
pub const DEVICE_PATH_PREFIX: &str = "/dev/neuron";
pub use nrt_core::device::{
    Geometry, DEFAULT_HOST_DMA_CAPACITY as HOST_DMA_CAPACITY, FIRMWARE_CARVEOUT, MAX_DEVICES,
    PAGE_SIZE,
};
/// Default bytes per MEM_BUF_COPY64 call in `copy_in` / `copy_out`.
pub const DEFAULT_COPY_CHUNK: u64 = 8 << 20;
/// The largest chunk one MEM_BUF_COPY64 call can move: the driver's device-memory copy loop
/// keeps the size in a `u32` (`ncdev_mem_buf_copy`), so 4 GiB or more would be cut short
/// without an error. 2 GiB keeps well clear of that.
pub const MAX_COPY_CHUNK: u64 = 1 << 31;
/// Sizes from here on need MEM_ALLOC_V2MT64 (public ABI §3).
pub const FOUR_GIB: u64 = 4 << 30;

/// The MEM_ALLOC variants, newest first (public ABI §3).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum AllocVariant {
    /// MEM_ALLOC_V2MT64 (56 B, ≥ 4 GiB capable).
    V2Mt64 = 0,
    /// MEM_ALLOC_V2MT (48 B, carries the category).
    V2Mt = 1,
    /// MEM_ALLOC_V2 (40 B, no category).
    V2 = 2,
}

impl AllocVariant {
    /// The command number.
    pub const fn cmd(self) -> u64 {
        match self {
            AllocVariant::V2Mt64 => NEURON_IOCTL_MEM_ALLOC_V2MT64,
            AllocVariant::V2Mt => NEURON_IOCTL_MEM_ALLOC_V2MT,
            AllocVariant::V2 => NEURON_IOCTL_MEM_ALLOC_V2,
        }
    }

    /// The next older variant.
    pub const fn older(self) -> Option<AllocVariant> {
        match self {
            AllocVariant::V2Mt64 => Some(AllocVariant::V2Mt),
            AllocVariant::V2Mt => Some(AllocVariant::V2),
            AllocVariant::V2 => None,
        }
    }

    const fn from_u8(v: u8) -> AllocVariant {
        match v {
            0 => AllocVariant::V2Mt64,
            1 => AllocVariant::V2Mt,
            _ => AllocVariant::V2,
        }
    }
}

/// What this process allocated (for the host pool and the no-DUMP_MEM_CHUNKS fallback).
#[derive(Copy, Clone, Debug)]
struct OwnAlloc {
    host: bool,
    hbm: u32,
    size: u64,
}

struct DeviceState {
    path: PathBuf,
    fd: RawFd,
    info: DeviceInfo,
    revision: u32,
    driver_info: bool,
    /// The variant to try first (an `AllocVariant` as u8).
    variant: AtomicU8,
    /// Whether `variant` has succeeded once.
    confirmed: AtomicBool,
    own: Mutex<HashMap<u64, OwnAlloc>>,
}

impl DeviceState {
    fn own(&self) -> MutexGuard<'_, HashMap<u64, OwnAlloc>> {
        self.own.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The most chunks a DUMP_MEM_CHUNKS reply may claim for one channel: one per 4 KiB page of
/// a 64 GiB channel (larger than any Neuron device's), 24 bytes each at most 384 MiB.
pub const MAX_DUMP_CHUNKS: u32 = 1 << 24;

/// The real driver portal: `/dev/neuron<N>` through the syscall layer `S`.
pub struct NeuronDriver<S: Sys = RealSys> {
    sys: S,
    devices: Vec<DeviceState>,
    copy_chunk: u64,
}

fn node_path(i: u32) -> PathBuf {
    PathBuf::from(format!("{DEVICE_PATH_PREFIX}{i}"))
}

/// A non-zero ioctl return is a failure: the driver's MEM_GET_EXTENDED_INFO returns a
/// *positive* `EINVAL` for a bad handle, and a short `copy_to_user` returns a byte count.
fn check(r: core::result::Result<i32, Errno>) -> core::result::Result<(), Errno> {
    match r? {
        0 => Ok(()),
        n => match Errno::from_raw(n) {
            Errno::UnknownErrno => Err(Errno::EFAULT),
            e => Err(e),
        },
    }
}

impl NeuronDriver<RealSys> {
    /// Opens every Neuron device of this machine (`/dev/neuron0 ..`).
    ///
    /// Without hardware this fails with [`Error::NoDevice`], which names `/dev/neuron0` and the
    /// simulated device (`NRT_DMEM_DEVICE=sim:trn2`).
    pub fn open() -> Result<Self> {
        Self::open_with(RealSys)
    }
}

impl<S: Sys> NeuronDriver<S> {
    /// Opens every device the syscall layer `sys` shows (`/dev/neuron0 ..`, consecutive).
    pub fn open_with(sys: S) -> Result<Self> {
        let mut drv = NeuronDriver {
            sys,
            devices: Vec::new(),
            copy_chunk: DEFAULT_COPY_CHUNK,
        };
        for i in 0..MAX_DEVICES {
            let path = node_path(i);
            let fd = match drv.sys.open(&path) {
                Ok(fd) => fd,
                Err(Errno::ENOENT | Errno::ENODEV | Errno::ENXIO) if i > 0 => break,
                Err(source @ (Errno::ENOENT | Errno::ENODEV | Errno::ENXIO)) => {
                    return Err(Error::NoDevice { path, source })
                }
                Err(source) => return Err(Error::Open { path, source }),
            };
            match drv.bring_up(path, fd) {
                Ok(d) => drv.devices.push(d),
                Err(e) => {
                    let _ = drv.sys.close(fd);
                    return Err(e); // `drv` drops and closes the devices before this one
                }
            }
        }
        log::info!(
            "nrt-host: {} Neuron device(s) opened ({})",
            drv.devices.len(),
            drv.devices.first().map_or("-", |d| d.info.arch.name())
        );
        Ok(drv)
    }

    fn bring_up(&self, path: PathBuf, fd: RawFd) -> Result<DeviceState> {
        let ioctl_err = |name, cmd, source| Error::Ioctl {
            path: path.clone(),
            name,
            cmd,
            source,
        };
        let mut basic = DeviceBasicInfo::default();
        // SAFETY: DEVICE_BASIC_INFO takes a `DeviceBasicInfo` with no embedded addresses.
        check(unsafe { ioctl_arg(&self.sys, fd, NEURON_IOCTL_DEVICE_BASIC_INFO, &mut basic) })
            .map_err(|e| ioctl_err("DEVICE_BASIC_INFO", NEURON_IOCTL_DEVICE_BASIC_INFO, e))?;
        let arch = al_hal_tpb_arch_type_t::from_raw(basic.architecture);
        let (arch, geo) = match arch.and_then(|a| Some((a, Geometry::for_arch(a)?))) {
            Some(x) => x,
            None => {
                return Err(Error::UnsupportedArch {
                    path,
                    arch: basic.architecture,
                });
            }
        };

        let mut di = DriverInfo::default();
        // SAFETY: DRIVER_INFO_GET takes a `DriverInfo` with no embedded addresses.
        let (flags, driver_info) =
            match check(unsafe { ioctl_arg(&self.sys, fd, NEURON_IOCTL_DRIVER_INFO_GET, &mut di) })
            {
                Ok(()) => (di.feature_flags1, true),
                // A driver older than DRIVER_INFO_GET: no feature bits to go by.
                Err(Errno::ENOTTY | Errno::EINVAL) => (0, false),
                Err(e) => {
                    return Err(ioctl_err(
                        "DRIVER_INFO_GET",
                        NEURON_IOCTL_DRIVER_INFO_GET,
                        e,
                    ))
                }
            };
        // MEM_ALLOC64 says V2MT64 works; without DRIVER_INFO_GET probe from the newest.
        let first = if !driver_info || flags & feature::MEM_ALLOC64 != 0 {
            AllocVariant::V2Mt64
        } else {
            AllocVariant::V2Mt
        };
        log::debug!(
            "{}: arch {} rev {} features {flags:#x}{}",
            path.display(),
            arch.name(),
            basic.revision,
            if driver_info {
                ""
            } else {
                " (no DRIVER_INFO_GET)"
            }
        );
        Ok(DeviceState {
            path,
            fd,
            info: DeviceInfo {
                arch,
                cores_per_device: geo.cores_per_device,
                hbm_channels: geo.hbm_channels,
                hbm_channel_size: geo.hbm_channel_size,
                host_dma_capacity: HOST_DMA_CAPACITY,
                feature_flags: flags,
                supports_aligned_alloc: true, // every variant we issue (V2 and newer) has `align`
                page_size: PAGE_SIZE,
            },
            revision: basic.revision,
            driver_info,
            variant: AtomicU8::new(first as u8),
            confirmed: AtomicBool::new(false),
            own: Mutex::new(HashMap::new()),
        })
    }

    /// Bytes per MEM_BUF_COPY64 call in `copy_in` / `copy_out`, between 1 and
    /// [`MAX_COPY_CHUNK`].
    pub fn set_copy_chunk(&mut self, bytes: u64) {
        self.copy_chunk = bytes.clamp(1, MAX_COPY_CHUNK);
    }

    /// The syscall layer.
    pub fn sys(&self) -> &S {
        &self.sys
    }

    /// The node of device `dev`.
    pub fn device_path(&self, dev: u32) -> Option<&Path> {
        self.devices.get(dev as usize).map(|d| d.path.as_path())
    }

    /// `DEVICE_BASIC_INFO.revision` of device `dev`.
    pub fn revision(&self, dev: u32) -> Option<u32> {
        self.devices.get(dev as usize).map(|d| d.revision)
    }

    /// Whether device `dev`'s driver answered DRIVER_INFO_GET.
    pub fn has_driver_info(&self, dev: u32) -> bool {
        self.devices
            .get(dev as usize)
            .is_some_and(|d| d.driver_info)
    }

    /// The MEM_ALLOC variant device `dev` is known to accept (`None` until one succeeded).
    pub fn alloc_variant(&self, dev: u32) -> Option<AllocVariant> {
        let d = self.devices.get(dev as usize)?;
        d.confirmed
            .load(Ordering::Acquire)
            .then(|| AllocVariant::from_u8(d.variant.load(Ordering::Acquire)))
    }

    fn dev(&self, dev: u32) -> core::result::Result<&DeviceState, DrvErrno> {
        self.devices.get(dev as usize).ok_or(drv(Errno::ENODEV))
    }

    fn issue_alloc(
        &self,
        fd: RawFd,
        v: AllocVariant,
        a: &MemAllocV2Mt,
    ) -> core::result::Result<(), Errno> {
        // SAFETY (all three): the struct is the one `v.cmd()` takes, and its only embedded
        // address, `mem_handle`, points at the caller's live `u64`.
        check(match v {
            AllocVariant::V2Mt64 => {
                let mut x = MemAllocV2Mt64::from_v2mt(a);
                // SAFETY: see above.
                unsafe { ioctl_arg(&self.sys, fd, v.cmd(), &mut x) }
            }
            AllocVariant::V2Mt => {
                let mut x = *a;
                // SAFETY: see above.
                unsafe { ioctl_arg(&self.sys, fd, v.cmd(), &mut x) }
            }
            AllocVariant::V2 => {
                let mut x = MemAllocV2::from_v2mt(a);
                // SAFETY: see above.
                unsafe { ioctl_arg(&self.sys, fd, v.cmd(), &mut x) }
            }
        })
    }

    /// The chunks DUMP_MEM_CHUNKS lists for one HBM channel (every process's, public ABI §3).
    /// A reply claiming more than [`MAX_DUMP_CHUNKS`] chunks is `EOVERFLOW`.
    pub fn dump_mem_chunks(
        &self,
        dev: u32,
        hbm: u32,
    ) -> core::result::Result<Vec<MemChunkInfo>, Errno> {
        let d = self.devices.get(dev as usize).ok_or(Errno::ENODEV)?;
        // The driver copies the header back (with `num_entries_out`) and answers EAGAIN when
        // `num_entries_in` is smaller than the count (`ncdev_dump_mem_chunks`): that answer
        // means "here is the count, call again with room for it", not a failure.
        let count_known = |r: core::result::Result<i32, Errno>| match r {
            Ok(0) | Err(Errno::EAGAIN) => Ok(()),
            // A positive return is copy_to_user's count of uncopied bytes, not an errno.
            Ok(_) => Err(Errno::EFAULT),
            Err(e) => Err(e),
        };
        let mut hdr = DumpMemChunks::new(hbm, 0, 0);
        // SAFETY: the header with `num_entries_in = 0` carries no address the driver uses.
        count_known(unsafe { ioctl_arg(&self.sys, d.fd, NEURON_IOCTL_DUMP_MEM_CHUNKS, &mut hdr) })?;
        // Chunks may come and go between the calls: retry a few times with room to spare.
        for _ in 0..4 {
            // A channel holds at most one chunk per page of its capacity; a count beyond any
            // real channel is a broken reply, not a reason to reserve gigabytes.
            if hdr.num_entries_out > MAX_DUMP_CHUNKS {
                return Err(Errno::EOVERFLOW);
            }
            let want = hdr.num_entries_out as usize + 16;
            let mut buf = vec![MemChunkInfo::default(); want];
            hdr = DumpMemChunks::new(hbm, want as u32, buf.as_mut_ptr() as u64);
            // SAFETY: `data` points at `want` writable entries, as `num_entries_in` says.
            count_known(unsafe {
                ioctl_arg(&self.sys, d.fd, NEURON_IOCTL_DUMP_MEM_CHUNKS, &mut hdr)
            })?;
            if hdr.num_entries_out as usize <= want {
                buf.truncate(hdr.num_entries_out as usize);
                return Ok(buf);
            }
        }
        Err(Errno::EAGAIN)
    }

    /// Stats from this process's own allocations (the host pool, and HBM channels when the
    /// driver has no DUMP_MEM_CHUNKS): other processes' use is invisible here.
    fn own_stats(d: &DeviceState, host: bool, hbm: u32, capacity: u64) -> PoolStats {
        let own = d.own();
        let mine = own
            .values()
            .filter(|a| a.host == host && (host || a.hbm == hbm));
        let (used, n) = mine.fold((0u64, 0u64), |(u, n), a| (u.saturating_add(a.size), n + 1));
        let free = capacity.saturating_sub(used);
        PoolStats::one_region(capacity, free, free, n)
    }

    fn copy(
        &self,
        dev: u32,
        handle: u64,
        offset: u64,
        buf: *mut u8,
        len: usize,
        to_dev: bool,
    ) -> core::result::Result<(), DrvErrno> {
        let d = self.dev(dev)?;
        offset.checked_add(len as u64).ok_or(drv(Errno::EINVAL))?;
        let mut done = 0usize;
        while done < len {
            let n = (len - done).min(self.copy_chunk.min(usize::MAX as u64) as usize);
            // `buf + done .. + n` stays inside the caller's slice.
            let mut a = MemBufCopy64::new(
                handle,
                buf as u64 + done as u64,
                n as u64,
                offset + done as u64,
                to_dev,
            );
            // SAFETY: `buffer` addresses `n` bytes inside the caller's slice, readable for
            // copy_in and exclusively borrowed (writable) for copy_out.
            check(unsafe { ioctl_arg(&self.sys, d.fd, NEURON_IOCTL_MEM_BUF_COPY64, &mut a) })
                .map_err(drv)?;
            done += n;
        }
        Ok(())
    }
}

impl<S: Sys> Drop for NeuronDriver<S> {
    fn drop(&mut self) {
        // Closing the last descriptor makes the driver free this process's allocations.
        for d in &self.devices {
            if let Err(e) = self.sys.close(d.fd) {
                log::warn!("{}: close failed: {e}", d.path.display());
            }
        }
    }
}

impl<S: Sys> Driver for NeuronDriver<S> {
    fn device_count(&self) -> u32 {
        self.devices.len() as u32
    }

    fn device_info(&self, dev: u32) -> core::result::Result<DeviceInfo, DrvErrno> {
        Ok(self.dev(dev)?.info)
    }

    fn memory_alloc(&self, dev: u32, req: &AllocRequest) -> core::result::Result<u64, DrvErrno> {
        let d = self.dev(dev)?;
        let mut handle: u64 = 0;
        let a = MemAllocV2Mt::new(
            req.size,
            req.align,
            if req.host {
                HOST_MEMORY_HOST
            } else {
                HOST_MEMORY_DEVICE
            },
            if req.host { 0 } else { req.hbm_idx },
            req.region,
            req.nc_id,
            req.category as u32,
            &mut handle as *mut u64 as u64,
        );
        let confirmed = d.confirmed.load(Ordering::Acquire);
        let mut v = AllocVariant::from_u8(d.variant.load(Ordering::Acquire));
        loop {
            if req.size >= FOUR_GIB && v != AllocVariant::V2Mt64 {
                log::warn!(
                    "{}: {} B needs MEM_ALLOC_V2MT64, which this driver lacks",
                    d.path.display(),
                    req.size
                );
                return Err(drv(Errno::EINVAL));
            }
            match self.issue_alloc(d.fd, v, &a) {
                Ok(()) => break,
                Err(e @ (Errno::ENOTTY | Errno::EINVAL)) if !confirmed => match v.older() {
                    Some(o) => {
                        log::debug!("{}: {v:?} refused ({e}); trying {o:?}", d.path.display());
                        v = o;
                    }
                    None => return Err(drv(e)),
                },
                Err(e) => return Err(drv(e)),
            }
        }
        if !confirmed {
            d.variant.store(v as u8, Ordering::Release);
            d.confirmed.store(true, Ordering::Release);
            log::debug!("{}: MEM_ALLOC variant {v:?}", d.path.display());
        }
        if handle == 0 {
            return Err(drv(Errno::EIO)); // the driver claimed success without a handle
        }
        // What the driver carved (page-rounded); a size no page count can hold is kept as
        // asked rather than overflowing (a driver that "succeeds" at that is broken anyway).
        let size = req
            .size
            .checked_next_multiple_of(PAGE_SIZE)
            .unwrap_or(req.size);
        d.own().insert(
            handle,
            OwnAlloc {
                host: req.host,
                hbm: req.hbm_idx,
                size,
            },
        );
        Ok(handle)
    }

    fn memory_get_pa(&self, dev: u32, handle: u64) -> core::result::Result<u64, DrvErrno> {
        let d = self.dev(dev)?;
        let mut a = MemGetExtendedInfo {
            mem_handle: handle,
            version: MEM_GET_EXTENDED_INFO_VERSION,
            ..Default::default()
        };
        // SAFETY: MEM_GET_EXTENDED_INFO takes this struct, which carries no address.
        check(unsafe { ioctl_arg(&self.sys, d.fd, NEURON_IOCTL_MEM_GET_EXTENDED_INFO, &mut a) })
            .map_err(drv)?;
        Ok(a.pa)
    }

    fn memory_free(&self, dev: u32, handle: u64) -> core::result::Result<(), DrvErrno> {
        let d = self.dev(dev)?;
        let mut a = MemFree { mem_handle: handle };
        // SAFETY: MEM_FREE takes this struct, which carries no address.
        check(unsafe { ioctl_arg(&self.sys, d.fd, NEURON_IOCTL_MEM_FREE, &mut a) }).map_err(drv)?;
        d.own().remove(&handle);
        Ok(())
    }

    fn copy_in(
        &self,
        dev: u32,
        handle: u64,
        offset: u64,
        src: &[u8],
    ) -> core::result::Result<(), DrvErrno> {
        // The driver only reads through `buffer` when copying to the device.
        self.copy(
            dev,
            handle,
            offset,
            src.as_ptr() as *mut u8,
            src.len(),
            true,
        )
    }

    fn copy_out(
        &self,
        dev: u32,
        handle: u64,
        offset: u64,
        dst: &mut [u8],
    ) -> core::result::Result<(), DrvErrno> {
        self.copy(dev, handle, offset, dst.as_mut_ptr(), dst.len(), false)
    }

    fn fill(
        &self,
        dev: u32,
        handle: u64,
        offset: u64,
        len: u64,
        value: u8,
    ) -> core::result::Result<(), DrvErrno> {
        // One staging buffer of up to a copy chunk instead of the trait's 256-byte steps.
        let buf = vec![value; len.min(self.copy_chunk).max(1) as usize];
        nrt_core::driver::fill_by_copies(self, dev, handle, offset, len, &buf)
    }

    /// HBM channels: from DUMP_MEM_CHUNKS (every process's chunks). `capacity` is the channel
    /// minus the 16 MiB carve-out and `free` is it minus the listed chunks. The dump gives no
    /// channel base address, so `largest_free` is the larger of the biggest gap between listed
    /// chunks and the space outside their span counted as one block (an upper bound; the
    /// driver's 1 GiB small-object pool is not told apart). Without DUMP_MEM_CHUNKS, and for
    /// the host pool, the stats count only this process's allocations.
    fn pool_stats(
        &self,
        dev: u32,
        host: bool,
        hbm_idx: u32,
    ) -> core::result::Result<PoolStats, DrvErrno> {
        let d = self.dev(dev)?;
        if host {
            return Ok(Self::own_stats(d, true, 0, d.info.host_dma_capacity));
        }
        if hbm_idx >= d.info.hbm_channels {
            return Err(drv(Errno::EINVAL));
        }
        let capacity = d.info.hbm_channel_size - FIRMWARE_CARVEOUT;
        let mut chunks = match self.dump_mem_chunks(dev, hbm_idx) {
            Ok(c) => c,
            Err(Errno::ENOTTY | Errno::EINVAL | Errno::EPERM | Errno::EACCES) => {
                return Ok(Self::own_stats(d, false, hbm_idx, capacity))
            }
            Err(e) => return Err(drv(e)),
        };
        chunks.sort_unstable_by_key(|c| c.pa);
        // Saturating throughout: the sizes and addresses are the driver's word.
        let used = chunks.iter().fold(0u64, |u, c| u.saturating_add(c.size));
        let free = capacity.saturating_sub(used);
        let mut inner_max = 0u64;
        let mut inner_sum = 0u64;
        for w in chunks.windows(2) {
            let gap = w[1].pa.saturating_sub(w[0].pa.saturating_add(w[0].size));
            inner_max = inner_max.max(gap);
            inner_sum = inner_sum.saturating_add(gap);
        }
        let outside = free.saturating_sub(inner_sum);
        Ok(PoolStats::one_region(
            capacity,
            free,
            inner_max.max(outside).min(free),
            chunks.len() as u64,
        ))
    }
}

#[cfg(test)]
mod tests;
