//! A fake kernel driver behind the [`Sys`] signatures (docs/STYLE.md #14, after vfio-ioctls'
//! `vfio_syscall`): it decodes the public ABI §3 commands, keeps allocations (sparse bytes, a
//! first-fit pool per HBM channel with the 16 MiB firmware carve-out), returns `ENOMEM` when a
//! pool is full, and can pretend to be an older driver that does not know MEM_ALLOC_V2MT64 (or
//! V2MT), DRIVER_INFO_GET or DUMP_MEM_CHUNKS. Public so integration tests can drive
//! [`crate::NeuronDriver`] through it; it never touches a real device.
//!
//! Quirks of the real driver it reproduces: a bad handle or an out-of-bounds copy is `EINVAL`;
//! an aligned *host* allocation is refused; `nc_id` ≥ 8 is `EINVAL`; a MEM_ALLOC number whose
//! encoded size the driver does not know is `EINVAL` (an unknown number is `ENOTTY`); and
//! MEM_GET_EXTENDED_INFO on a bad handle returns a *positive* `EINVAL` from the ioctl.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use nix::errno::Errno;
use nrt_core::driver::feature;
use zerocopy::{FromBytes, IntoBytes};

use super::abi::*;
use super::Sys;

/// Bytes the firmware keeps at the start of every HBM channel (public ABI §3).
pub const FAKE_CARVE_OUT: u64 = 16 << 20;
/// The fake driver's page size: sizes are rounded up to it.
pub const FAKE_PAGE: u64 = 4096;
/// Base of the host DMA "physical" range the fake hands out.
pub const FAKE_HOST_PA_BASE: u64 = 0x1_0000_0000_0000;

/// The newest MEM_ALLOC variant a fake driver knows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FakeGeneration {
    /// Knows V2MT64, V2MT and V2 (current drivers).
    V2Mt64,
    /// Knows V2MT and V2; rejects the 56-byte V2MT64.
    V2Mt,
    /// Knows only V2; rejects V2MT64 and V2MT.
    V2,
}

/// One emulated device.
#[derive(Clone, Debug)]
pub struct FakeDevice {
    /// `DEVICE_BASIC_INFO.architecture` (2, 3, 4).
    pub arch: u32,
    /// Board revision.
    pub revision: u32,
    /// `DRIVER_INFO_GET.feature_flags1`.
    pub feature_flags: u64,
    /// HBM channels (pools).
    pub hbm_channels: u32,
    /// Usable bytes per channel (after the carve-out).
    pub hbm_capacity: u64,
    /// Bytes of host DMA memory.
    pub host_capacity: u64,
    /// Which MEM_ALLOC variants the driver knows.
    pub generation: FakeGeneration,
    /// Errno for a MEM_ALLOC variant the driver does not know (`EINVAL` like the real driver's
    /// size dispatch; `ENOTTY` for a driver without the number at all).
    pub reject_errno: Errno,
    /// Whether DRIVER_INFO_GET exists (else `ENOTTY`).
    pub driver_info: bool,
    /// Whether DUMP_MEM_CHUNKS exists (else `ENOTTY`).
    pub dump_mem_chunks: bool,
}

impl FakeDevice {
    /// A current trn2 device (v3, 4 × 24 GiB, all features).
    pub fn trn2() -> Self {
        FakeDevice {
            arch: 3,
            revision: 0,
            feature_flags: feature::MEM_ALLOC_TYPE
                | feature::MEM_ALLOC64
                | feature::CONTIGUOUS_SCRATCHPAD,
            hbm_channels: 4,
            hbm_capacity: (24 << 30) - FAKE_CARVE_OUT,
            host_capacity: 8 << 30,
            generation: FakeGeneration::V2Mt64,
            reject_errno: Errno::EINVAL,
            driver_info: true,
            dump_mem_chunks: true,
        }
    }

    /// A current trn1 device (v2, 2 × 16 GiB).
    pub fn trn1() -> Self {
        FakeDevice {
            arch: 2,
            hbm_channels: 2,
            hbm_capacity: (16 << 30) - FAKE_CARVE_OUT,
            ..Self::trn2()
        }
    }

    /// An older driver: knows at most `generation`, reports no MEM_ALLOC64 bit.
    pub fn older(mut self, generation: FakeGeneration, reject_errno: Errno) -> Self {
        self.generation = generation;
        self.reject_errno = reject_errno;
        self.feature_flags &= !feature::MEM_ALLOC64;
        if generation == FakeGeneration::V2 {
            self.feature_flags &= !feature::MEM_ALLOC_TYPE;
        }
        self
    }

    /// Usable bytes per HBM channel.
    pub fn with_hbm_capacity(mut self, bytes: u64) -> Self {
        self.hbm_capacity = bytes;
        self
    }

    fn channel_base(&self, hbm: u32) -> u64 {
        // Channels laid out back to back, each with its carve-out first.
        hbm as u64 * (self.hbm_capacity + FAKE_CARVE_OUT) + FAKE_CARVE_OUT
    }

    fn knows(&self, v: FakeGeneration) -> bool {
        use FakeGeneration::*;
        matches!(
            (self.generation, v),
            (V2Mt64, _) | (V2Mt, V2Mt) | (V2Mt, V2) | (V2, V2)
        )
    }
}

/// One ioctl the fake saw.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FakeCall {
    /// Device index.
    pub dev: u32,
    /// Command number.
    pub cmd: u64,
    /// What it returned.
    pub result: Result<i32, Errno>,
}

#[derive(Clone, Debug)]
struct FakeAlloc {
    dev: u32,
    host: bool,
    hbm: u32,
    pa: u64,
    size: u64,
    mem_type: u32,
    /// Written pages by page index; unwritten pages read as zeros (so GiB-sized allocations
    /// cost nothing).
    data: HashMap<u64, Box<[u8]>>,
}

#[derive(Default)]
struct FakeState {
    next_fd: RawFd,
    fds: HashMap<RawFd, u32>,
    next_handle: u64,
    allocs: HashMap<u64, FakeAlloc>,
    calls: Vec<FakeCall>,
    inject: Vec<(u64, Errno)>,
}

/// The fake driver: a [`Sys`] whose device nodes are `/dev/neuron0 ..` for its devices.
pub struct FakeSys {
    devices: Vec<FakeDevice>,
    state: Mutex<FakeState>,
}

impl FakeSys {
    /// A fake with these devices (`/dev/neuron0 ..`); no devices means no node exists.
    pub fn new(devices: Vec<FakeDevice>) -> Self {
        FakeSys {
            devices,
            state: Mutex::new(FakeState {
                next_fd: 100,
                next_handle: 0xffff_8880_0000_0000,
                ..FakeState::default()
            }),
        }
    }

    fn st(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every ioctl so far, in order.
    pub fn calls(&self) -> Vec<FakeCall> {
        self.st().calls.clone()
    }

    /// How many times `cmd` was issued.
    pub fn call_count(&self, cmd: u64) -> usize {
        self.st().calls.iter().filter(|c| c.cmd == cmd).count()
    }

    /// Live allocations on all devices.
    pub fn live_allocations(&self) -> usize {
        self.st().allocs.len()
    }

    /// Descriptors currently open.
    pub fn open_fds(&self) -> usize {
        self.st().fds.len()
    }

    /// Makes the next issue of `cmd` fail with `e` (one shot; several stack in order).
    pub fn inject(&self, cmd: u64, e: Errno) {
        self.st().inject.push((cmd, e));
    }

    fn dev_index(&self, path: &Path) -> Result<u32, Errno> {
        let s = path.to_str().ok_or(Errno::ENOENT)?;
        let n: u32 = s
            .strip_prefix("/dev/neuron")
            .and_then(|n| n.parse().ok())
            .ok_or(Errno::ENOENT)?;
        if (n as usize) < self.devices.len() {
            Ok(n)
        } else {
            Err(Errno::ENOENT)
        }
    }
}

/// Reads the argument struct `T` from `arg`.
///
/// # Safety
/// `arg` must be valid for reads of `size_of::<T>()` bytes.
unsafe fn read_arg<T: FromBytes>(arg: *const u8) -> T {
    // SAFETY: the caller guarantees `size_of::<T>()` readable bytes; `T: FromBytes` accepts
    // any bit pattern, and `read_unaligned` has no alignment requirement.
    unsafe { core::ptr::read_unaligned(arg as *const T) }
}

/// Writes the argument struct `v` back to `arg`.
///
/// # Safety
/// `arg` must be valid for writes of `size_of::<T>()` bytes.
unsafe fn write_arg<T: IntoBytes + zerocopy::Immutable>(arg: *mut u8, v: &T) {
    let b = v.as_bytes();
    // SAFETY: the caller guarantees `b.len()` writable bytes at `arg`; `b` is a separate
    // local value, so the ranges do not overlap.
    unsafe { core::ptr::copy_nonoverlapping(b.as_ptr(), arg, b.len()) }
}

fn round_up(v: u64, a: u64) -> Option<u64> {
    Some(v.checked_add(a - 1)? & !(a - 1))
}

impl FakeSys {
    /// First fit in `[base, base + capacity)` among the live chunks of one pool.
    /// `pool` is (device, host, hbm); `range` is (base, capacity).
    fn first_fit(
        st: &FakeState,
        (dev, host, hbm): (u32, bool, u32),
        (base, cap): (u64, u64),
        size: u64,
        align: u64,
    ) -> Option<u64> {
        let mut taken: Vec<(u64, u64)> = st
            .allocs
            .values()
            .filter(|a| a.dev == dev && a.host == host && (host || a.hbm == hbm))
            .map(|a| (a.pa, a.size))
            .collect();
        taken.sort_unstable();
        let mut cursor = base;
        for (pa, sz) in taken.into_iter().chain(core::iter::once((base + cap, 0))) {
            let start = round_up(cursor, align)?;
            if start.checked_add(size)? <= pa {
                return Some(start);
            }
            cursor = cursor.max(pa + sz);
        }
        None
    }

    fn alloc(&self, st: &mut FakeState, dev: u32, a: &MemAllocV2Mt) -> Result<u64, Errno> {
        let (size, align, host_memory, hbm) = (a.size, a.align, a.host_memory, a.dram_channel);
        let (nc_id, mem_type) = (a.nc_id, a.mem_type);
        let d = &self.devices[dev as usize];
        let host = host_memory != 0;
        if size == 0 || nc_id >= 8 || (!host && hbm >= d.hbm_channels) || mem_type > 20 {
            return Err(Errno::EINVAL);
        }
        if !align.is_power_of_two() && align != 0 {
            return Err(Errno::EINVAL);
        }
        if host && align > FAKE_PAGE {
            return Err(Errno::EINVAL); // aligned host allocations are refused (public ABI §3)
        }
        let size = round_up(size, FAKE_PAGE).ok_or(Errno::EINVAL)?;
        let align = align.max(FAKE_PAGE);
        let (base, cap) = if host {
            (FAKE_HOST_PA_BASE, d.host_capacity)
        } else {
            (d.channel_base(hbm), d.hbm_capacity)
        };
        let pa =
            Self::first_fit(st, (dev, host, hbm), (base, cap), size, align).ok_or(Errno::ENOMEM)?;
        st.next_handle += 0x40;
        let h = st.next_handle;
        st.allocs.insert(
            h,
            FakeAlloc {
                dev,
                host,
                hbm,
                pa,
                size,
                mem_type,
                data: HashMap::new(),
            },
        );
        Ok(h)
    }

    /// The driver's dispatch.
    ///
    /// # Safety
    /// As [`Sys::ioctl`].
    unsafe fn dispatch(
        &self,
        st: &mut FakeState,
        dev: u32,
        cmd: u64,
        arg: *mut u8,
    ) -> Result<i32, Errno> {
        let d = &self.devices[dev as usize];
        if let Some(i) = st.inject.iter().position(|(c, _)| *c == cmd) {
            return Err(st.inject.remove(i).1);
        }
        match cmd {
            NEURON_IOCTL_DEVICE_BASIC_INFO => {
                let v = DeviceBasicInfo {
                    architecture: d.arch,
                    revision: d.revision,
                };
                // SAFETY: DEVICE_BASIC_INFO takes a `DeviceBasicInfo` (caller's contract).
                unsafe { write_arg(arg, &v) };
                Ok(0)
            }
            NEURON_IOCTL_DEVICE_INFO => {
                let mut v = DeviceInfoArg::default();
                v.basic = DeviceBasicInfo {
                    architecture: d.arch,
                    revision: d.revision,
                };
                // SAFETY: DEVICE_INFO takes a `DeviceInfoArg` (caller's contract).
                unsafe { write_arg(arg, &v) };
                Ok(0)
            }
            NEURON_IOCTL_DRIVER_INFO_GET if d.driver_info => {
                let v = DriverInfo {
                    basic: DeviceBasicInfo {
                        architecture: d.arch,
                        revision: d.revision,
                    },
                    version: 0,
                    size: core::mem::size_of::<DriverInfo>() as u32,
                    feature_flags1: d.feature_flags,
                };
                // SAFETY: DRIVER_INFO_GET takes a `DriverInfo` (caller's contract).
                unsafe { write_arg(arg, &v) };
                Ok(0)
            }
            NEURON_IOCTL_MEM_ALLOC_V2MT64
            | NEURON_IOCTL_MEM_ALLOC_V2MT
            | NEURON_IOCTL_MEM_ALLOC_V2 => {
                let (a, gen) = match cmd {
                    NEURON_IOCTL_MEM_ALLOC_V2MT64 => {
                        // SAFETY: this command takes a `MemAllocV2Mt64` (caller's contract).
                        let a: MemAllocV2Mt64 = unsafe { read_arg(arg) };
                        (a.v2mt, FakeGeneration::V2Mt64)
                    }
                    NEURON_IOCTL_MEM_ALLOC_V2MT => {
                        // SAFETY: this command takes a `MemAllocV2Mt` (caller's contract).
                        (
                            unsafe { read_arg::<MemAllocV2Mt>(arg) },
                            FakeGeneration::V2Mt,
                        )
                    }
                    _ => {
                        // SAFETY: this command takes a `MemAllocV2` (caller's contract).
                        let a: MemAllocV2 = unsafe { read_arg(arg) };
                        let cat = if a.host_memory != 0 { 0 } else { 7 }; // UNKNOWN_HOST / _DEVICE
                        (a.to_v2mt(cat), FakeGeneration::V2)
                    }
                };
                if !d.knows(gen) {
                    return Err(d.reject_errno);
                }
                if a.mem_handle == 0 {
                    return Err(Errno::EFAULT);
                }
                let h = self.alloc(st, dev, &a)?;
                // SAFETY: `mem_handle` is the caller's address of a writable `u64` (contract of
                // MEM_ALLOC, public ABI §3).
                unsafe { core::ptr::write_unaligned(a.mem_handle as *mut u64, h) };
                Ok(0)
            }
            NEURON_IOCTL_MEM_FREE => {
                // SAFETY: MEM_FREE takes a `MemFree` (caller's contract).
                let a: MemFree = unsafe { read_arg(arg) };
                match st.allocs.get(&a.mem_handle) {
                    Some(x) if x.dev == dev => {
                        st.allocs.remove(&a.mem_handle);
                        Ok(0)
                    }
                    _ => Err(Errno::EINVAL),
                }
            }
            NEURON_IOCTL_MEM_BUF_COPY64 => {
                // SAFETY: MEM_BUF_COPY64 takes a `MemBufCopy64` (caller's contract).
                let a: MemBufCopy64 = unsafe { read_arg(arg) };
                let Some(x) = st.allocs.get_mut(&a.mem_handle).filter(|x| x.dev == dev) else {
                    return Err(Errno::EINVAL);
                };
                let end = a.offset.checked_add(a.size).ok_or(Errno::EINVAL)?;
                if end > x.size {
                    return Err(Errno::EINVAL);
                }
                let n = a.size as usize;
                let to_dev = a.copy_to_mem_handle != 0;
                let mut done = 0usize;
                while done < n {
                    let pos = a.offset + done as u64;
                    let (page, in_page) = (pos / FAKE_PAGE, (pos % FAKE_PAGE) as usize);
                    let k = (n - done).min(FAKE_PAGE as usize - in_page);
                    // SAFETY: `buffer` is the caller's address of `size` bytes, readable for a
                    // copy to the device and writable for a copy from it (MEM_BUF_COPY64
                    // contract); `done + k <= size`, and the fake's pages are its own memory.
                    unsafe {
                        let user = (a.buffer as *mut u8).add(done);
                        if to_dev {
                            let p = x
                                .data
                                .entry(page)
                                .or_insert_with(|| vec![0; FAKE_PAGE as usize].into());
                            core::ptr::copy_nonoverlapping(user, p.as_mut_ptr().add(in_page), k);
                        } else if let Some(p) = x.data.get(&page) {
                            core::ptr::copy_nonoverlapping(p.as_ptr().add(in_page), user, k);
                        } else {
                            core::ptr::write_bytes(user, 0, k);
                        }
                    }
                    done += k;
                }
                Ok(0)
            }
            NEURON_IOCTL_MEM_GET_EXTENDED_INFO => {
                // SAFETY: MEM_GET_EXTENDED_INFO takes a `MemGetExtendedInfo` (caller's contract).
                let mut a: MemGetExtendedInfo = unsafe { read_arg(arg) };
                if a.version != MEM_GET_EXTENDED_INFO_VERSION {
                    return Err(Errno::EINVAL);
                }
                let Some(x) = st.allocs.get(&a.mem_handle).filter(|x| x.dev == dev) else {
                    // The real driver returns a positive EINVAL here (a missing minus sign).
                    return Ok(Errno::EINVAL as i32);
                };
                a.host_memory = x.host as u32;
                a.pa = x.pa;
                a.size = x.size;
                a.pid = std::process::id() as u64;
                a.mmap_offset = x.pa;
                // SAFETY: as the read above.
                unsafe { write_arg(arg, &a) };
                Ok(0)
            }
            NEURON_IOCTL_DUMP_MEM_CHUNKS if d.dump_mem_chunks => {
                // SAFETY: DUMP_MEM_CHUNKS takes a `DumpMemChunks` header (caller's contract).
                let mut a: DumpMemChunks = unsafe { read_arg(arg) };
                if a.hbm_index >= d.hbm_channels {
                    return Err(Errno::EINVAL);
                }
                let mut chunks: Vec<MemChunkInfo> = st
                    .allocs
                    .values()
                    .filter(|x| x.dev == dev && !x.host && x.hbm == a.hbm_index)
                    .map(|x| MemChunkInfo::new(x.pa, x.size, x.mem_type))
                    .collect();
                chunks.sort_unstable_by_key(|c| c.pa);
                a.num_entries_out = chunks.len() as u32;
                // SAFETY: as the read above.
                unsafe { write_arg(arg, &a) };
                if (a.num_entries_in as usize) < chunks.len() {
                    // As the driver: the header (with the count) is back, the entries are
                    // not, and the answer is EAGAIN ("call again with room for them").
                    return Err(Errno::EAGAIN);
                }
                if !chunks.is_empty() {
                    let b = chunks.as_bytes();
                    // SAFETY: `data` is the caller's array of `num_entries_in` entries
                    // (DUMP_MEM_CHUNKS contract), and `b` fits in it.
                    unsafe {
                        core::ptr::copy_nonoverlapping(b.as_ptr(), a.data as *mut u8, b.len())
                    };
                }
                Ok(0)
            }
            _ => Err(Errno::ENOTTY),
        }
    }
}

impl Sys for FakeSys {
    fn open(&self, path: &Path) -> Result<RawFd, Errno> {
        let dev = self.dev_index(path)?;
        let mut st = self.st();
        st.next_fd += 1;
        let fd = st.next_fd;
        st.fds.insert(fd, dev);
        Ok(fd)
    }

    unsafe fn ioctl(&self, fd: RawFd, cmd: u64, arg: *mut u8) -> Result<i32, Errno> {
        let mut st = self.st();
        let dev = *st.fds.get(&fd).ok_or(Errno::EBADF)?;
        if arg.is_null() {
            return Err(Errno::EFAULT);
        }
        // SAFETY: forwarded contract of `Sys::ioctl`.
        let result = unsafe { self.dispatch(&mut st, dev, cmd, arg) };
        st.calls.push(FakeCall { dev, cmd, result });
        result
    }

    fn close(&self, fd: RawFd) -> Result<(), Errno> {
        let mut st = self.st();
        let dev = st.fds.remove(&fd).ok_or(Errno::EBADF)?;
        // Closing the last descriptor frees the process's allocations on that device.
        if !st.fds.values().any(|&d| d == dev) {
            st.allocs.retain(|_, a| a.dev != dev);
        }
        Ok(())
    }
}
