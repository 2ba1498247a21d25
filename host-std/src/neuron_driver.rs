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
mod tests {
    use super::*;
    use crate::ioctl::fake::{FakeDevice, FakeGeneration, FakeSys, FAKE_CARVE_OUT};
    use nrt_core::driver::errno;

    const GIB: u64 = 1 << 30;

    fn req(size: u64, hbm: u32) -> AllocRequest {
        AllocRequest {
            size,
            align: 0,
            host: false,
            hbm_idx: hbm,
            region: 0,
            nc_id: 0,
            category: 9,
        }
    }

    fn open(devs: Vec<FakeDevice>) -> NeuronDriver<FakeSys> {
        NeuronDriver::open_with(FakeSys::new(devs)).expect("fake devices open")
    }

    #[test]
    fn discovery_counts_consecutive_nodes_and_derives_geometry() {
        let drv = open(vec![FakeDevice::trn2(), FakeDevice::trn1()]);
        assert_eq!(drv.device_count(), 2);
        assert_eq!(drv.sys().open_fds(), 2);
        let i = drv.device_info(0).unwrap();
        assert_eq!(i.arch, al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_CAYMAN);
        assert_eq!(
            (i.cores_per_device, i.hbm_channels, i.hbm_channel_size),
            (8, 4, 24 * GIB)
        );
        assert_ne!(i.feature_flags & feature::MEM_ALLOC64, 0);
        assert_eq!(i.default_hbm_for_core(5), 2);
        let j = drv.device_info(1).unwrap();
        assert_eq!(j.arch, al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_SUNDA);
        assert_eq!(
            (j.cores_per_device, j.hbm_channels, j.hbm_channel_size),
            (2, 2, 16 * GIB)
        );
        assert_eq!(drv.device_info(2), Err(errno::ENODEV));
        assert_eq!(drv.device_path(1), Some(Path::new("/dev/neuron1")));
        assert_eq!(drv.revision(0), Some(0));
        assert!(drv.has_driver_info(0));
        // One DEVICE_BASIC_INFO and one DRIVER_INFO_GET per device.
        assert_eq!(drv.sys().call_count(NEURON_IOCTL_DEVICE_BASIC_INFO), 2);
        assert_eq!(drv.sys().call_count(NEURON_IOCTL_DRIVER_INFO_GET), 2);
    }

    #[test]
    fn no_device_is_one_clear_error_naming_the_node_and_the_simulator() {
        let e = NeuronDriver::open_with(FakeSys::new(vec![]))
            .err()
            .expect("no devices");
        assert!(matches!(e, Error::NoDevice { .. }), "{e:?}");
        assert_eq!(e.errno(), Some(Errno::ENOENT));
        let msg = e.to_string();
        assert!(msg.contains("/dev/neuron0"), "{msg}");
        assert!(msg.contains("NRT_DMEM_DEVICE=sim:trn2"), "{msg}");
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn unsupported_arch_and_failed_bring_up_close_every_descriptor() {
        let mut inf1 = FakeDevice::trn2();
        inf1.arch = 1;
        let fake = FakeSys::new(vec![FakeDevice::trn2(), inf1]);
        let e = NeuronDriver::open_with(fake).err().unwrap();
        assert!(matches!(e, Error::UnsupportedArch { arch: 1, .. }), "{e:?}");
        assert!(e.to_string().contains("/dev/neuron1"));

        let fake = FakeSys::new(vec![FakeDevice::trn2()]);
        fake.inject(NEURON_IOCTL_DEVICE_BASIC_INFO, Errno::EIO);
        let drv = NeuronDriver::open_with(fake);
        let e = drv.err().unwrap();
        assert!(
            matches!(
                e,
                Error::Ioctl {
                    name: "DEVICE_BASIC_INFO",
                    source: Errno::EIO,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("0x40084e64"), "{e}");
    }

    #[test]
    fn drop_closes_descriptors_and_the_driver_frees_the_process_memory() {
        let fake = FakeSys::new(vec![FakeDevice::trn2(), FakeDevice::trn2()]);
        {
            let drv = NeuronDriver::open_with(&fake).unwrap();
            drv.memory_alloc(0, &req(4096, 0)).unwrap();
            drv.memory_alloc(1, &req(4096, 3)).unwrap();
            assert_eq!((fake.open_fds(), fake.live_allocations()), (2, 2));
        }
        assert_eq!((fake.open_fds(), fake.live_allocations()), (0, 0));
    }

    #[test]
    fn alloc_copy_pa_free_round_trip() {
        let drv = open(vec![FakeDevice::trn2()]);
        let h = drv.memory_alloc(0, &req(10_000, 1)).unwrap();
        assert_ne!(h, 0);
        assert_eq!(drv.alloc_variant(0), Some(AllocVariant::V2Mt64));
        let pa = drv.memory_get_pa(0, h).unwrap();
        let ch1 = 24 * GIB; // channel 1 starts after channel 0 in the fake's address plan
        assert_eq!(pa, ch1 + FAKE_CARVE_OUT);
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        drv.copy_in(0, h, 100, &data).unwrap();
        let mut back = vec![0u8; 5000];
        drv.copy_out(0, h, 100, &mut back).unwrap();
        assert_eq!(back, data);
        // Empty copies are no-ops, not ioctls.
        let n = drv.sys().call_count(NEURON_IOCTL_MEM_BUF_COPY64);
        drv.copy_in(0, h, 0, &[]).unwrap();
        assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_BUF_COPY64), n);
        drv.memory_free(0, h).unwrap();
        assert_eq!(drv.sys().live_allocations(), 0);
        assert_eq!(drv.memory_free(0, h), Err(errno::EINVAL));
    }

    #[test]
    fn copies_are_chunked_and_fill_stages_once_per_chunk() {
        let mut drv = open(vec![FakeDevice::trn2()]);
        drv.set_copy_chunk(1000);
        let h = drv.memory_alloc(0, &req(8192, 0)).unwrap();
        let data: Vec<u8> = (0..4500u32).map(|i| (i % 251) as u8).collect();
        drv.copy_in(0, h, 7, &data).unwrap();
        assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_BUF_COPY64), 5);
        let mut back = vec![0u8; 4500];
        drv.copy_out(0, h, 7, &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_BUF_COPY64), 10);
        drv.fill(0, h, 2000, 2500, 0xab).unwrap();
        assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_BUF_COPY64), 13);
        let mut back = vec![0u8; 8192];
        drv.copy_out(0, h, 0, &mut back).unwrap();
        assert!(back[2000..4500].iter().all(|&b| b == 0xab));
        assert_eq!(back[1999], data[1992]);
        assert_eq!(back[4500], data[4493]);
    }

    #[test]
    fn fallback_chain_v2mt64_to_v2mt_to_v2_is_remembered() {
        // No DRIVER_INFO_GET and only V2: probe V2MT64 → V2MT → V2 once.
        let mut old = FakeDevice::trn2().older(FakeGeneration::V2, Errno::ENOTTY);
        old.driver_info = false;
        let drv = open(vec![old]);
        assert!(!drv.has_driver_info(0));
        assert_eq!(drv.alloc_variant(0), None);
        let h = drv.memory_alloc(0, &req(4096, 0)).unwrap();
        assert_eq!(drv.alloc_variant(0), Some(AllocVariant::V2));
        let f = drv.sys();
        assert_eq!(f.call_count(NEURON_IOCTL_MEM_ALLOC_V2MT64), 1);
        assert_eq!(f.call_count(NEURON_IOCTL_MEM_ALLOC_V2MT), 1);
        assert_eq!(f.call_count(NEURON_IOCTL_MEM_ALLOC_V2), 1);
        drv.memory_alloc(0, &req(4096, 0)).unwrap();
        assert_eq!(f.call_count(NEURON_IOCTL_MEM_ALLOC_V2MT64), 1);
        assert_eq!(f.call_count(NEURON_IOCTL_MEM_ALLOC_V2), 2);
        drv.memory_free(0, h).unwrap();

        // A driver that claims MEM_ALLOC64 but rejects the 56-byte struct by size (EINVAL).
        let mut liar = FakeDevice::trn2().older(FakeGeneration::V2Mt, Errno::EINVAL);
        liar.feature_flags |= feature::MEM_ALLOC64;
        let drv = open(vec![liar]);
        drv.memory_alloc(0, &req(4096, 0)).unwrap();
        assert_eq!(drv.alloc_variant(0), Some(AllocVariant::V2Mt));
        assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_ALLOC_V2MT64), 1);

        // No MEM_ALLOC64 bit: V2MT is tried first, V2MT64 never.
        let drv = open(vec![
            FakeDevice::trn2().older(FakeGeneration::V2Mt, Errno::EINVAL)
        ]);
        drv.memory_alloc(0, &req(4096, 0)).unwrap();
        assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_ALLOC_V2MT64), 0);
        assert_eq!(drv.alloc_variant(0), Some(AllocVariant::V2Mt));
    }

    #[test]
    fn an_einval_for_another_reason_does_not_turn_native_alignment_off() {
        // This driver refuses 4 GiB and more (no MEM_ALLOC_V2MT64) with EINVAL. An aligned
        // request of that size must not make the core conclude that alignment itself is
        // unsupported (spec §3.2's latch): later aligned requests stay native.
        use nrt_core::abi::dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR as TENSOR;
        use nrt_core::dmem::AllocArgs;
        let drv = open(vec![
            FakeDevice::trn2().older(FakeGeneration::V2Mt, Errno::EINVAL)
        ]);
        let st = nrt_core::CoreState::new_boxed();
        let n = nrt_core::Nrt::new(&st, &drv);
        n.init(&nrt_core::InitOptions::default()).unwrap();
        let al = n.core_allocator(0, 0).unwrap();
        let used = || {
            let s = drv.pool_stats(0, false, 0).unwrap();
            s.capacity - s.free
        };
        let small = AllocArgs::device(64 << 10, 0, TENSOR, "s").aligned(64 << 10);
        let big = AllocArgs::device(4 * GIB, 0, TENSOR, "big").aligned(64 << 10);
        assert_eq!(
            n.dmem_alloc(al, &big, None),
            Err(nrt_core::Error::Driver(errno::EINVAL))
        );
        let u0 = used();
        let m = n.dmem_alloc(al, &small, None).unwrap();
        assert_eq!(used() - u0, 64 << 10, "still native: no over-allocation");
        assert_eq!(n.dmem_info(m).unwrap().align_offset, 0);
        n.dmem_free(m).unwrap();
        n.close().unwrap();
    }

    /// The fake, except that DUMP_MEM_CHUNKS leaves the entries uncopied and returns the
    /// uncopied byte count, as the driver does when `copy_to_user` falls short.
    struct ShortCopy(FakeSys);

    impl Sys for ShortCopy {
        fn open(&self, p: &Path) -> core::result::Result<RawFd, Errno> {
            self.0.open(p)
        }
        unsafe fn ioctl(
            &self,
            fd: RawFd,
            cmd: u64,
            arg: *mut u8,
        ) -> core::result::Result<i32, Errno> {
            // SAFETY: forwarded under this method's own contract.
            let r = unsafe { self.0.ioctl(fd, cmd, arg) };
            if cmd == NEURON_IOCTL_DUMP_MEM_CHUNKS && r.is_ok() {
                // SAFETY: `arg` is the DUMP_MEM_CHUNKS header (the command's argument).
                let h: DumpMemChunks = unsafe { std::ptr::read_unaligned(arg.cast()) };
                if h.num_entries_in > 0 && h.num_entries_out > 0 {
                    let n = h.num_entries_out as usize * size_of::<MemChunkInfo>();
                    // SAFETY: `data` holds `num_entries_in` >= `num_entries_out` entries.
                    unsafe { std::ptr::write_bytes(h.data as *mut u8, 0, n) };
                    return Ok(n as i32);
                }
            }
            r
        }
        fn close(&self, fd: RawFd) -> core::result::Result<(), Errno> {
            self.0.close(fd)
        }
    }

    #[test]
    fn a_short_copy_of_the_chunk_list_is_an_error_not_zeroed_chunks() {
        let drv =
            NeuronDriver::open_with(ShortCopy(FakeSys::new(vec![FakeDevice::trn2()]))).unwrap();
        let a = drv.memory_alloc(0, &req(1 << 20, 0)).unwrap();
        assert_eq!(drv.dump_mem_chunks(0, 0), Err(Errno::EFAULT));
        drv.memory_free(0, a).unwrap();
    }

    #[test]
    fn a_copy_chunk_stays_below_what_the_driver_can_count() {
        let mut drv = open(vec![FakeDevice::trn2()]);
        drv.set_copy_chunk(4 * GIB);
        assert_eq!(drv.copy_chunk, MAX_COPY_CHUNK);
        drv.set_copy_chunk(0);
        assert_eq!(drv.copy_chunk, 1);
    }

    #[test]
    fn four_gib_needs_v2mt64() {
        let drv = open(vec![
            FakeDevice::trn2().older(FakeGeneration::V2Mt, Errno::EINVAL)
        ]);
        let n = drv.sys().calls().len();
        assert_eq!(drv.memory_alloc(0, &req(5 * GIB, 0)), Err(errno::EINVAL));
        assert_eq!(drv.sys().calls().len(), n, "refused before the driver");

        let drv = open(vec![FakeDevice::trn2()]);
        let h = drv.memory_alloc(0, &req(5 * GIB, 0)).unwrap();
        drv.copy_in(0, h, 9 * GIB / 2, b"far").unwrap();
        let mut b = [0u8; 3];
        drv.copy_out(0, h, 9 * GIB / 2, &mut b).unwrap();
        assert_eq!(&b, b"far");
        assert_eq!(drv.copy_in(0, h, 5 * GIB - 1, b"xy"), Err(errno::EINVAL));
    }

    #[test]
    fn enomem_when_the_channel_is_full() {
        let drv = open(vec![FakeDevice::trn2().with_hbm_capacity(1 << 20)]);
        let a = drv.memory_alloc(0, &req(512 << 10, 2)).unwrap();
        assert_eq!(drv.memory_alloc(0, &req(768 << 10, 2)), Err(errno::ENOMEM));
        // Other channels are separate pools.
        let b = drv.memory_alloc(0, &req(768 << 10, 3)).unwrap();
        assert_eq!(
            drv.alloc_variant(0),
            Some(AllocVariant::V2Mt64),
            "ENOMEM is not a fallback"
        );
        drv.memory_free(0, a).unwrap();
        let c = drv.memory_alloc(0, &req(768 << 10, 2)).unwrap();
        for h in [b, c] {
            drv.memory_free(0, h).unwrap();
        }
    }

    #[test]
    fn bad_handles_bad_devices_and_bad_arguments() {
        let drv = open(vec![FakeDevice::trn2()]);
        // A bad argument before any success tries every variant, then reports EINVAL, and
        // does not pin a variant.
        let mut r = req(4096, 0);
        r.nc_id = 9;
        assert_eq!(drv.memory_alloc(0, &r), Err(errno::EINVAL));
        assert_eq!(drv.alloc_variant(0), None);
        assert_eq!(drv.memory_alloc(0, &req(4096, 7)), Err(errno::EINVAL)); // hbm 7 of 4
        let h = drv.memory_alloc(0, &req(4096, 0)).unwrap();
        assert_eq!(drv.alloc_variant(0), Some(AllocVariant::V2Mt64));
        // After confirmation, EINVAL is final: exactly one more V2MT64 call, no fallback.
        let before = drv.sys().call_count(NEURON_IOCTL_MEM_ALLOC_V2MT);
        assert_eq!(drv.memory_alloc(0, &r), Err(errno::EINVAL));
        assert_eq!(drv.sys().call_count(NEURON_IOCTL_MEM_ALLOC_V2MT), before);

        let bad = 0xdead_beef;
        assert_eq!(drv.memory_free(0, bad), Err(errno::EINVAL));
        // MEM_GET_EXTENDED_INFO answers a bad handle with a positive EINVAL.
        assert_eq!(drv.memory_get_pa(0, bad), Err(errno::EINVAL));
        assert_eq!(drv.copy_in(0, bad, 0, b"x"), Err(errno::EINVAL));
        assert_eq!(drv.copy_out(0, h, 4090, &mut [0u8; 8]), Err(errno::EINVAL));
        assert_eq!(drv.copy_in(0, h, u64::MAX, b"x"), Err(errno::EINVAL));
        assert_eq!(drv.memory_alloc(3, &req(4096, 0)), Err(errno::ENODEV));
        assert_eq!(drv.copy_in(3, h, 0, b"x"), Err(errno::ENODEV));
        assert_eq!(drv.pool_stats(0, false, 4), Err(errno::EINVAL));
        // Injected driver errors come through unchanged.
        drv.sys().inject(NEURON_IOCTL_MEM_BUF_COPY64, Errno::ENOTTY);
        assert_eq!(drv.copy_in(0, h, 0, b"x"), Err(errno::ENOTTY));
        // Host memory: an aligned host allocation is refused by the driver.
        let mut hr = req(4096, 0);
        hr.host = true;
        hr.align = 1 << 20;
        assert_eq!(drv.memory_alloc(0, &hr), Err(errno::EINVAL));
        hr.align = 0;
        let hh = drv.memory_alloc(0, &hr).unwrap();
        assert!(drv.memory_get_pa(0, hh).unwrap() >= crate::ioctl::fake::FAKE_HOST_PA_BASE);
    }

    #[test]
    fn pool_stats_from_dump_mem_chunks() {
        let drv = open(vec![FakeDevice::trn2()]);
        let cap = 24 * GIB - FIRMWARE_CARVEOUT;
        let s = drv.pool_stats(0, false, 0).unwrap();
        assert_eq!(s, PoolStats::one_region(cap, cap, cap, 0));
        let a = drv.memory_alloc(0, &req(1 << 20, 0)).unwrap();
        let b = drv.memory_alloc(0, &req(3 << 20, 0)).unwrap();
        let _c = drv.memory_alloc(0, &req(1000, 0)).unwrap(); // rounds to one page
        drv.memory_free(0, b).unwrap();
        let s = drv.pool_stats(0, false, 0).unwrap();
        assert_eq!(s.allocations, 2);
        assert_eq!(s.free, cap - (1 << 20) - 4096);
        assert_eq!(s.largest_free, s.free - (3 << 20)); // the tail beats the 3 MiB hole
        assert!(drv.sys().call_count(NEURON_IOCTL_DUMP_MEM_CHUNKS) >= 4);
        // Other channels are untouched; the host pool counts this process's allocations.
        assert_eq!(drv.pool_stats(0, false, 1).unwrap().free, cap);
        let mut hr = req(10_000, 0);
        hr.host = true;
        drv.memory_alloc(0, &hr).unwrap();
        let h = drv.pool_stats(0, true, 0).unwrap();
        assert_eq!(
            (h.capacity, h.free, h.allocations),
            (HOST_DMA_CAPACITY, HOST_DMA_CAPACITY - 12288, 1)
        );
        drv.memory_free(0, a).unwrap();
    }

    #[test]
    fn pool_stats_without_dump_mem_chunks_count_own_allocations() {
        let mut d = FakeDevice::trn1();
        d.dump_mem_chunks = false;
        let drv = open(vec![d]);
        let cap = 16 * GIB - FIRMWARE_CARVEOUT;
        drv.memory_alloc(0, &req(8192, 1)).unwrap();
        let s = drv.pool_stats(0, false, 1).unwrap();
        assert_eq!((s.capacity, s.free, s.allocations), (cap, cap - 8192, 1));
        assert_eq!(drv.pool_stats(0, false, 0).unwrap().allocations, 0);
    }

    #[test]
    fn concurrent_allocations_from_two_threads() {
        let drv = open(vec![FakeDevice::trn2()]);
        let handles: Vec<u64> = std::thread::scope(|s| {
            let t: Vec<_> = (0..2u32)
                .map(|i| {
                    let drv = &drv;
                    s.spawn(move || {
                        (0..50)
                            .map(|_| drv.memory_alloc(0, &req(4096, i)).unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            t.into_iter().flat_map(|t| t.join().unwrap()).collect()
        });
        let mut uniq = handles.clone();
        uniq.sort_unstable();
        uniq.dedup();
        assert_eq!(uniq.len(), 100);
        for h in handles {
            drv.memory_free(0, h).unwrap();
        }
        assert_eq!(drv.sys().live_allocations(), 0);
    }

    /// Runs against real hardware only when `/dev/neuron0` exists.
    #[test]
    fn real_device_when_present() {
        if !Path::new("/dev/neuron0").exists() {
            let e = NeuronDriver::open()
                .err()
                .expect("no device node, so open fails");
            assert!(matches!(e, Error::NoDevice { .. }), "{e:?}");
            assert!(
                e.to_string().contains("/dev/neuron0") && e.to_string().contains(crate::SIM_HINT)
            );
            eprintln!("real_device_when_present: skipped (no /dev/neuron0)");
            return;
        }
        let drv = NeuronDriver::open().expect("open /dev/neuron*");
        assert!(drv.device_count() >= 1);
        let info = drv.device_info(0).unwrap();
        eprintln!("real device 0: {info:?}");
        let h = drv.memory_alloc(0, &req(1 << 20, 0)).unwrap();
        assert_ne!(drv.memory_get_pa(0, h).unwrap(), 0);
        let data: Vec<u8> = (0..65536u32).map(|i| (i * 13) as u8).collect();
        drv.copy_in(0, h, 4096, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        drv.copy_out(0, h, 4096, &mut back).unwrap();
        assert_eq!(back, data);
        let s = drv.pool_stats(0, false, 0).unwrap();
        assert!(s.allocations >= 1 && s.free < s.capacity);
        drv.memory_free(0, h).unwrap();
    }

    /// A trn2 driver that answers with what a test chooses: DUMP_MEM_CHUNKS claims `count`
    /// chunks of `sizes`, MEM_ALLOC_V2MT64 succeeds for any size.
    struct Hostile {
        count: u32,
        sizes: Vec<u64>,
        handles: std::sync::atomic::AtomicU64,
    }

    fn hostile(count: u32, sizes: Vec<u64>) -> NeuronDriver<Hostile> {
        NeuronDriver::open_with(Hostile {
            count,
            sizes,
            handles: std::sync::atomic::AtomicU64::new(0x40),
        })
        .unwrap()
    }

    impl Sys for Hostile {
        fn open(&self, p: &Path) -> Result<RawFd, Errno> {
            if p == Path::new("/dev/neuron0") {
                Ok(7)
            } else {
                Err(Errno::ENOENT)
            }
        }
        unsafe fn ioctl(&self, _fd: RawFd, cmd: u64, arg: *mut u8) -> Result<i32, Errno> {
            use crate::ioctl::abi::*;
            use zerocopy::IntoBytes;
            // SAFETY: the caller passes the struct `cmd` takes (Sys contract); the dump array
            // is written only when it has room for every entry, as `num_entries_in` says.
            unsafe {
                match cmd {
                    NEURON_IOCTL_DEVICE_BASIC_INFO => {
                        let v = DeviceBasicInfo {
                            architecture: 3,
                            revision: 0,
                        };
                        std::ptr::copy_nonoverlapping(v.as_bytes().as_ptr(), arg, 8);
                        Ok(0)
                    }
                    NEURON_IOCTL_DUMP_MEM_CHUNKS => {
                        let mut h: DumpMemChunks = std::ptr::read_unaligned(arg.cast());
                        h.num_entries_out = self.count;
                        if h.num_entries_in as usize >= self.sizes.len() && h.data != 0 {
                            for (i, s) in self.sizes.iter().enumerate() {
                                let e = MemChunkInfo::new(i as u64 * 4096, *s, 9);
                                std::ptr::write_unaligned((h.data as *mut MemChunkInfo).add(i), e);
                            }
                        }
                        std::ptr::write_unaligned(arg.cast(), h);
                        Ok(0)
                    }
                    NEURON_IOCTL_MEM_ALLOC_V2MT64 => {
                        let a: MemAllocV2Mt64 = std::ptr::read_unaligned(arg.cast());
                        let h = self.handles.fetch_add(0x40, Ordering::Relaxed);
                        std::ptr::write_unaligned(a.mem_handle as *mut u64, h);
                        Ok(0)
                    }
                    _ => Err(Errno::ENOTTY),
                }
            }
        }
        fn close(&self, _fd: RawFd) -> Result<(), Errno> {
            Ok(())
        }
    }

    #[test]
    fn hostile_driver_replies_are_errors_or_clamped_not_panics() {
        // Chunk sizes whose sum overflows: the channel reads as full.
        let half = u64::MAX / 2 + 1;
        let s = hostile(2, vec![half, half])
            .pool_stats(0, false, 0)
            .unwrap();
        assert_eq!((s.free, s.largest_free, s.allocations), (0, 0, 2));
        // A chunk count no channel can hold: refused, nothing reserved for it.
        assert_eq!(
            hostile(u32::MAX, vec![]).pool_stats(0, false, 0),
            Err(drv(Errno::EOVERFLOW))
        );
        // A driver that "succeeds" at host allocations no page count can hold, twice: this
        // process's own ledger of them saturates instead of overflowing.
        let d = hostile(0, vec![]);
        let mut r = req(u64::MAX, 0);
        r.host = true;
        let a = d.memory_alloc(0, &r).unwrap();
        let b = d.memory_alloc(0, &r).unwrap();
        assert_ne!(a, b);
        let s = d.pool_stats(0, true, 0).unwrap();
        assert_eq!((s.free, s.allocations), (0, 2));
    }
}
