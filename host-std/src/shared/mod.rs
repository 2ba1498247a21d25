//! A simulated device shared by processes (issue 20; spec §9 co-location; public ABI §3
//! "Process lifetime"): `NRT_DMEM_DEVICE=sim:trn2@prod` opens (or creates) the device named
//! `prod`, a file `nrt-dmem-prod.shm` under `$NRT_DMEM_SHM_DIR` (default `/dev/shm`) that
//! every process using the name maps.
//!
//! The file holds the pools (a [`SimDevice`], the project's genalloc placement), who owns each
//! allocation, which process holds which cores, and sysfs-like counters; docs/SHARED_DEVICE.md
//! gives the layout and the protocol. In short:
//!
//! - Joining, creating and re-creating the file happen under an `flock` of the whole file.
//! - Every allocator operation runs under a process-shared **robust** pthread mutex: a
//!   process that dies holding it hands the next locker `EOWNERDEAD`, who checks the pools
//!   ([`SimDevice::check_pools`]), rebuilds the counters from the ownership table and carries
//!   on, or refuses the device for good ([`layout::POISONED`]) when they do not add up.
//! - Each process holds an open-file-description lock on one byte for its slot. The kernel
//!   drops it when the process dies, however it dies, so a dead process is recognised
//!   without its help and whatever pid it had (no pid-reuse confusion). Its allocations and
//!   cores are reclaimed by the next process that looks: every participant's reaper thread
//!   (every 100 ms), and before any refusal for lack of memory, cores or slots.
//! - The driver's rules: allocations belong to the process that made them (a free or copy of
//!   another's handle is `EINVAL`), cores are exclusive (`EBUSY`, naming the holder's pid), at
//!   most 16 processes per device (`EBUSY`).
//!
//! Device bytes are not shared: each process backs the addresses it owns with its own
//! lazily committed memory, as each process of the real driver maps only its own buffers.

pub mod layout;
pub mod reader;

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use nrt_core::driver::{errno, AllocRequest, DeviceInfo, Driver, Errno, FreeHistogram, PoolStats};
use nrt_core::sim::{Placement, Preset, SimConfig, SimDevice, HOST_PA_BASE, MAX_CARVE_NODES};

use crate::backing::HostReservation;
use layout::{Owner, OwnerTable, Readable, CATEGORIES, CORES, MAX_PROCESSES, SLOT_FREE, SLOT_LIVE};

/// Longest device name accepted.
pub const MAX_NAME_LEN: usize = 32;
/// The variable naming the directory of shared device files (default [`DEFAULT_DIR`]).
pub const DIR_VAR: &str = "NRT_DMEM_SHM_DIR";
/// Where shared device files live by default.
pub const DEFAULT_DIR: &str = "/dev/shm";
/// How often each participant looks for dead processes to reclaim.
pub const REAP_INTERVAL: Duration = Duration::from_millis(100);
/// `mem_alloc_category_t` CONTIGUOUS_SCRATCHPAD_DEVICE (public ABI §3).
const CATEGORY_CONTIGUOUS_SCRATCHPAD: u8 = 19;
/// `mem_alloc_category_t` TENSORS_DEVICE (public ABI §3): the allocations [`HOLD_VAR`] delays.
const CATEGORY_TENSORS_DEVICE: u8 = 9;
/// Test hook: a device tensor allocation sleeps this many milliseconds holding the device lock, so a test
/// can kill the process there (the "killed holding the lock" fault).
pub const HOLD_VAR: &str = "NRT_DMEM_SHARED_HOLD_LOCK_MS";

/// A shared device's name: 1 to [`MAX_NAME_LEN`] of `[A-Za-z0-9_.-]`, not starting with `.`
/// (so never a path, `.` or `..`). `Copy`, so configurations stay `Copy`.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct SharedName {
    bytes: [u8; MAX_NAME_LEN],
    len: u8,
}

impl SharedName {
    /// Validates a name; the error says what is wrong.
    pub fn parse(s: &str) -> Result<Self, &'static str> {
        if s.is_empty() {
            return Err("the shared device name after `@` is empty");
        }
        if s.len() > MAX_NAME_LEN {
            return Err("the shared device name is longer than 32 characters");
        }
        if s.contains('/') || s.contains('\\') {
            return Err("the shared device name holds a path separator");
        }
        if s.starts_with('.') {
            return Err("the shared device name starts with `.`");
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            return Err("the shared device name may hold only letters, digits, `_`, `-` and `.`");
        }
        let mut bytes = [0; MAX_NAME_LEN];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Ok(SharedName {
            bytes,
            len: s.len() as u8,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Only ASCII was ever stored (`parse`).
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl std::fmt::Debug for SharedName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for SharedName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The directory of shared device files: `$NRT_DMEM_SHM_DIR`, else `/dev/shm`.
pub fn shm_dir() -> PathBuf {
    std::env::var_os(DIR_VAR)
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_DIR), PathBuf::from)
}

/// File name prefix and suffix of shared device files.
pub const FILE_PREFIX: &str = "nrt-dmem-";
/// See [`FILE_PREFIX`].
pub const FILE_SUFFIX: &str = ".shm";

/// The file of device `name` in [`shm_dir`].
pub fn device_path(name: &SharedName) -> PathBuf {
    shm_dir().join(format!("{FILE_PREFIX}{name}{FILE_SUFFIX}"))
}

/// Why a shared device could not be opened or used: a message for a person and the errno.
#[derive(Debug, Clone, thiserror::Error)]
#[error("shared device {name}: {message}")]
pub struct SharedError {
    /// The device name.
    pub name: String,
    /// What went wrong.
    pub message: String,
    /// The errno (the driver's where there is one: `EBUSY`, `EACCES`, `EINVAL`, `EIO`).
    pub errno: Errno,
}

/// What a process asks of a shared device when it joins.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct JoinRequest {
    /// The device geometry (must match a device that has live processes).
    pub config: SimConfig,
    /// Physical cores to claim, one bit per core, per device.
    pub cores: [u32; layout::MAX_DEVICES],
}

/// The mapping of a shared device file.
struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory valid until `Drop`; what is inside is reached
// only through atomics (the readable prefix) or with the process-shared lock held.
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from offset 0.
    fn map(fd: RawFd, len: usize, writable: bool) -> Result<Self, Errno> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of a file we hold open, at an address of the
        // kernel's choosing: it aliases no Rust object.
        let p = unsafe { libc::mmap(core::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(last_errno());
        }
        Ok(Mapping {
            base: p.cast(),
            len,
        })
    }

    fn readable(&self) -> &Readable {
        // SAFETY: the mapping is at least `readable_size()` bytes (checked by every opener),
        // page-aligned, and `Readable` is all atomics, valid for any bytes and for
        // concurrent access by other processes.
        unsafe { &*self.base.cast::<Readable>() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `map`, unmapped only here.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn last_errno() -> Errno {
    Errno::new(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(errno::EIO.raw()),
    )
}

/// Opens `path` with `flags` (`O_CLOEXEC | O_NOFOLLOW` added), creating it 0600.
fn open_file(path: &Path, flags: i32) -> Result<OwnedFd, Errno> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| errno::EINVAL)?;
    // SAFETY: `c` is a NUL-terminated path; the result is a new fd we own or -1.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An open-file-description lock on byte `byte` (`F_OFD_SETLK`): `Ok(false)` when another
/// description holds it.
fn ofd_lock(fd: RawFd, byte: u64, write: bool) -> Result<bool, Errno> {
    // SAFETY: an all-zero `flock` is a valid value; the fields that matter are set below.
    let mut fl: libc::flock = unsafe { core::mem::zeroed() };
    fl.l_type = if write { libc::F_WRLCK } else { libc::F_UNLCK } as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = byte as libc::off_t;
    fl.l_len = 1;
    // SAFETY: `fl` is a valid `flock` the call reads and writes for its duration.
    let r = unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl) };
    if r == 0 {
        return Ok(true);
    }
    match last_errno() {
        e if e.raw() == libc::EAGAIN || e.raw() == libc::EACCES => Ok(false),
        e => Err(e),
    }
}

/// Whether some open file description holds a lock on byte `byte` (`F_OFD_GETLK`): the
/// liveness test of a slot. Works on a read-only descriptor.
pub(crate) fn ofd_locked(fd: RawFd, byte: u64) -> Result<bool, Errno> {
    // SAFETY: as in `ofd_lock`.
    let mut fl: libc::flock = unsafe { core::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = byte as libc::off_t;
    fl.l_len = 1;
    // SAFETY: as in `ofd_lock`.
    let r = unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut fl) };
    if r != 0 {
        return Err(last_errno());
    }
    Ok(fl.l_type != libc::F_UNLCK as i16)
}

/// The liveness byte of slot `s` (bytes past the end of the file: locks need no data).
pub(crate) const fn live_byte(s: usize) -> u64 {
    layout::file_size() as u64 + s as u64
}

fn flock(fd: RawFd, op: i32) -> Result<(), Errno> {
    // SAFETY: `flock` on an fd we hold; no memory is passed.
    if unsafe { libc::flock(fd, op) } != 0 {
        Err(last_errno())
    } else {
        Ok(())
    }
}

/// Checks a header against what this build expects; the message names the mismatch.
pub(crate) fn check_header(h: &layout::Header, file_len: u64) -> Result<(), String> {
    let magic = h.magic.load(Ordering::Acquire);
    if magic != layout::MAGIC {
        return Err(format!(
            "not a shared device file (magic {magic:#018x}, expected {:#018x})",
            layout::MAGIC
        ));
    }
    let v = h.version.load(Ordering::Acquire);
    if v != layout::LAYOUT_VERSION {
        return Err(format!(
            "the file has layout version {v}, this build uses version {} (made by another \
             nrt-dmem version: stop its processes and remove the file)",
            layout::LAYOUT_VERSION
        ));
    }
    let want = layout::file_size() as u64;
    if h.file_size.load(Ordering::Acquire) != want || file_len != want {
        return Err(format!(
            "the file is {file_len} bytes and its header says {}, expected {want} (corrupted \
             or truncated)",
            h.file_size.load(Ordering::Acquire)
        ));
    }
    if h.readable_size.load(Ordering::Acquire) != layout::readable_size() as u64 {
        return Err("the header's readable size is wrong (corrupted)".into());
    }
    let devices = h.devices.load(Ordering::Acquire);
    if devices == 0 || devices as usize > layout::MAX_DEVICES {
        return Err(format!("the header names {devices} devices (corrupted)"));
    }
    Ok(())
}

/// The per-process state of a joined shared device.
struct Inner {
    name: String,
    path: PathBuf,
    fd: OwnedFd,
    map: Mapping,
    slot: usize,
    pid: u32,
    devices: u32,
    info: Vec<DeviceInfo>,
    channels: u32,
    channel_size: u64,
    /// This process's bytes behind the addresses it owns (one reservation per device).
    backing: Vec<HostReservation>,
    hold_ms: u64,
}

/// The device lock held; derefs to nothing, gives the parts.
struct Locked<'a> {
    inner: &'a Inner,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: the mutex was initialised by the file's creator and is held by this
        // thread (taken in `Inner::lock`).
        unsafe { libc::pthread_mutex_unlock(self.inner.mutex()) };
    }
}

impl Locked<'_> {
    /// The shared `SimDevice`: `sim_offset()` is page-aligned inside the mapping and holds a
    /// `SimDevice` the creator initialised (zero-valid in any case). It is reached by any
    /// process only with the device lock held, which a `Locked` holds: no other process
    /// mutates it now, and this process's threads reach it through the same lock.
    fn sim_ptr(&self) -> *mut SimDevice {
        // SAFETY: the offset is inside the mapping (`layout` sizes the file to hold it).
        unsafe {
            self.inner
                .map
                .base
                .add(layout::sim_offset())
                .cast::<SimDevice>()
        }
    }

    fn sim(&self) -> &SimDevice {
        // SAFETY: see `sim_ptr`: a valid, initialised `SimDevice` behind the held lock.
        unsafe { &*self.sim_ptr() }
    }

    #[allow(clippy::mut_from_ref)]
    fn sim_mut(&self) -> &mut SimDevice {
        // SAFETY: see `sim_ptr`; exclusive because the lock is held and no `&SimDevice` from
        // `sim()` is alive across a call of this (both are used only for one statement).
        unsafe { &mut *self.sim_ptr() }
    }

    /// The owner record of key `(carve, index)` on device `dev`.
    #[allow(clippy::mut_from_ref)]
    fn owner(&self, dev: u32, carve: u32, index: u32) -> Option<&mut Owner> {
        if dev >= self.inner.devices
            || carve >= nrt_core::sim::CARVES_PER_DEVICE
            || index >= MAX_CARVE_NODES
        {
            return None;
        }
        let table = layout::owners_offset() + dev as usize * size_of::<OwnerTable>();
        let off = table
            + (carve as usize * MAX_CARVE_NODES as usize + index as usize) * size_of::<Owner>();
        // SAFETY: `off` is inside the owners region (bounds checked above), aligned to 8
        // (tables and records are multiples of 8 from a page-aligned base), and `Owner` is
        // plain integers. Owner records are touched only under the device lock, which we
        // hold, and each call makes one short-lived reference.
        Some(unsafe { &mut *self.inner.map.base.add(off).cast::<Owner>() })
    }

    fn r(&self) -> &Readable {
        self.inner.map.readable()
    }

    /// Books `size` bytes (`add` or not) for `slot` on `(dev, nc, cat)` under the seqlock.
    fn book(&self, slot: usize, dev: u32, nc: u8, cat: u8, size: u64, add: bool) {
        let (d, c, k) = (dev as usize, nc as usize % CORES, cat as usize % CATEGORIES);
        let r = self.r();
        r.header.seq.fetch_add(1, Ordering::AcqRel);
        fence(Ordering::Release);
        let ctr = &r.counters[d][c][k];
        let u = &r.procs[slot].usage[d][c][k];
        if add {
            let t = ctr.total.load(Ordering::Relaxed).saturating_add(size);
            ctr.total.store(t, Ordering::Relaxed);
            ctr.peak.fetch_max(t, Ordering::Relaxed);
            u.fetch_add(size, Ordering::Relaxed);
            r.procs[slot].allocations.fetch_add(1, Ordering::Relaxed);
        } else {
            let t = ctr.total.load(Ordering::Relaxed).saturating_sub(size);
            ctr.total.store(t, Ordering::Relaxed);
            let v = u.load(Ordering::Relaxed).saturating_sub(size);
            u.store(v, Ordering::Relaxed);
            let a = r.procs[slot].allocations.load(Ordering::Relaxed);
            r.procs[slot]
                .allocations
                .store(a.saturating_sub(1), Ordering::Relaxed);
        }
        ctr.present.store(size, Ordering::Relaxed);
        r.header.seq.fetch_add(1, Ordering::Release);
    }

    /// Frees every allocation of `slot` and empties the slot (its process closed or died).
    /// Touches only records whose owner is `slot`. Returns the bytes returned.
    fn reclaim(&self, slot: usize) -> u64 {
        let mut bytes = 0;
        for dev in 0..self.inner.devices {
            for carve in 0..nrt_core::sim::CARVES_PER_DEVICE {
                for index in 1..MAX_CARVE_NODES {
                    let Some(o) = self.owner(dev, carve, index) else {
                        continue;
                    };
                    if o.slot as usize != slot + 1 {
                        continue;
                    }
                    let rec = *o;
                    *o = Owner::default();
                    if self.sim().memory_free(dev, rec.handle).is_err() {
                        log::warn!(
                            target: "nrt_host::shared",
                            "{}: reclaim: the pools did not know handle {:#x}",
                            self.inner.name, rec.handle
                        );
                    }
                    self.book(slot, dev, rec.nc, rec.category, rec.size, false);
                    bytes += rec.size;
                }
            }
        }
        let p = &self.r().procs[slot];
        for c in &p.cores {
            c.store(0, Ordering::Relaxed);
        }
        for d in &p.usage {
            for c in d {
                for k in c {
                    k.store(0, Ordering::Relaxed);
                }
            }
        }
        p.allocations.store(0, Ordering::Relaxed);
        p.pid.store(0, Ordering::Relaxed);
        p.state.store(SLOT_FREE, Ordering::Release);
        bytes
    }

    /// Reclaims every slot whose process is dead (its liveness lock is free). Returns how
    /// many were reclaimed.
    fn reap(&self) -> usize {
        let mut n = 0;
        for s in 0..MAX_PROCESSES {
            if s == self.inner.slot {
                continue;
            }
            let p = &self.r().procs[s];
            if p.state.load(Ordering::Acquire) != SLOT_LIVE {
                continue;
            }
            if ofd_locked(self.inner.fd.as_raw_fd(), live_byte(s)) != Ok(false) {
                continue;
            }
            let pid = p.pid.load(Ordering::Relaxed);
            let bytes = self.reclaim(s);
            self.r().header.reclaimed.fetch_add(1, Ordering::Relaxed);
            log::info!(
                target: "nrt_host::shared",
                "{}: process {pid} is gone; reclaimed its {bytes} bytes and its cores",
                self.inner.name
            );
            n += 1;
        }
        n
    }

    /// After a holder died: check the pools, reconcile them with the ownership table, and
    /// recount the counters from the table; poison the device if the pools are damaged.
    ///
    /// Every update writes the pools and the table in an order that leaves at most one
    /// mismatch at any key, and recovery settles each the one safe way: a live allocation
    /// nobody owns was being allocated or freed by the dead holder (a handle is handed out
    /// only after its record is written), so it is freed; a record whose allocation is gone
    /// was being freed, so it is cleared. Nothing another live process owns is touched.
    fn recover(&self) {
        let r = self.r();
        let dead = r
            .procs
            .iter()
            .enumerate()
            .find(|(s, p)| {
                p.state.load(Ordering::Relaxed) == SLOT_LIVE
                    && *s != self.inner.slot
                    && ofd_locked(self.inner.fd.as_raw_fd(), live_byte(*s)) == Ok(false)
            })
            .map_or(0, |(_, p)| p.pid.load(Ordering::Relaxed));
        self.sim_mut().reset_locks();
        let checked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.sim().check_pools()));
        let why = match checked {
            Err(_) => Some("the pools are damaged (their check failed hard)".to_string()),
            Ok(Err(e)) => Some(format!("the pools are inconsistent ({e})")),
            Ok(Ok(())) => None,
        };
        let why = why.and_then(|why| match self.rebuild() {
            Ok(n) => {
                log::warn!(
                    target: "nrt_host::shared",
                    "{}: process {dead} died inside a pool update and {why}; the pools were \
                     rebuilt from the ownership table ({n} allocation(s) re-created at their \
                     addresses, their owners' handles kept)",
                    self.inner.name
                );
                None
            }
            Err(e) => Some(format!("{why}, and rebuilding them failed ({e})")),
        });
        if let Some(why) = why {
            r.header.poisoned_by.store(dead, Ordering::Relaxed);
            r.header.poisoned.store(layout::POISONED, Ordering::Release);
            log::error!(
                target: "nrt_host::shared",
                "{}: process {dead} died holding the device lock and {why}; the device is \
                 refused from now on",
                self.inner.name
            );
            return;
        }
        let seq = r.header.seq.load(Ordering::Relaxed);
        r.header.seq.store(seq | 1, Ordering::Release);
        for d in &r.counters {
            for c in d {
                for k in c {
                    k.total.store(0, Ordering::Relaxed);
                }
            }
        }
        for p in &r.procs {
            p.allocations.store(0, Ordering::Relaxed);
            for d in &p.usage {
                for c in d {
                    for k in c {
                        k.store(0, Ordering::Relaxed);
                    }
                }
            }
        }
        let (mut freed, mut cleared) = (0, 0);
        for dev in 0..self.inner.devices {
            for carve in 0..nrt_core::sim::CARVES_PER_DEVICE {
                for index in 1..MAX_CARVE_NODES {
                    let Some(o) = self.owner(dev, carve, index) else {
                        continue;
                    };
                    let live = self.sim().live_handle(dev, carve, index);
                    let owned = o.slot != 0 && o.slot as usize <= MAX_PROCESSES;
                    match (live, owned) {
                        (Some(h), true) if h == o.handle => {}
                        (Some(h), _) => {
                            // Allocated or being freed by the dead holder, and not (any more)
                            // recorded: nobody else can hold the handle.
                            let _ = self.sim().memory_free(dev, h);
                            *o = Owner::default();
                            freed += 1;
                            continue;
                        }
                        (None, true) => {
                            *o = Owner::default();
                            cleared += 1;
                            continue;
                        }
                        (None, false) => continue,
                    }
                    let (d, c, k) = (
                        dev as usize,
                        o.nc as usize % CORES,
                        o.category as usize % CATEGORIES,
                    );
                    let t = r.counters[d][c][k]
                        .total
                        .fetch_add(o.size, Ordering::Relaxed)
                        + o.size;
                    r.counters[d][c][k].peak.fetch_max(t, Ordering::Relaxed);
                    let p = &r.procs[o.slot as usize - 1];
                    p.usage[d][c][k].fetch_add(o.size, Ordering::Relaxed);
                    p.allocations.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        r.header.seq.store((seq | 1) + 1, Ordering::Release);
        log::warn!(
            target: "nrt_host::shared",
            "{}: process {dead} died holding the device lock; the pools are consistent \
             ({freed} unrecorded allocation(s) freed, {cleared} stale record(s) cleared), the \
             counters were recounted",
            self.inner.name
        );
    }

    /// Re-creates the pools from the ownership table: a fresh `SimDevice` of the header's
    /// configuration, every owned allocation placed again at its address
    /// ([`SimDevice::place_at`]), each record moved to its new handle's key with the handle
    /// its owner holds kept as `alias`. Returns the allocations re-created.
    fn rebuild(&self) -> Result<usize, String> {
        let h = &self.r().header;
        let preset = Preset::ALL
            .into_iter()
            .find(|p| *p as u32 == h.preset.load(Ordering::Relaxed))
            .ok_or("the header names no preset")?;
        let mut cfg = SimConfig::new(preset, h.devices.load(Ordering::Relaxed));
        cfg.channel_size_override = Some(h.channel_size.load(Ordering::Relaxed));
        cfg.host_dma_capacity = h.host_capacity.load(Ordering::Relaxed);
        cfg.aligned_alloc = h.aligned_alloc.load(Ordering::Relaxed) != 0;
        cfg.placement = if h.placement.load(Ordering::Relaxed) == Placement::Tlsf as u32 {
            Placement::Tlsf
        } else {
            Placement::Genalloc
        };
        let mut live = Vec::new();
        for dev in 0..self.inner.devices {
            for carve in 0..nrt_core::sim::CARVES_PER_DEVICE {
                for index in 1..MAX_CARVE_NODES {
                    let Some(o) = self.owner(dev, carve, index) else {
                        continue;
                    };
                    if o.slot != 0 && o.slot as usize <= MAX_PROCESSES {
                        live.push((dev, carve, *o));
                    }
                    *o = Owner::default();
                }
            }
        }
        self.sim_mut()
            .init(&cfg)
            .map_err(|e| format!("the header's configuration was refused (errno {e})"))?;
        for (dev, carve, rec) in &live {
            let scratch = rec.category == CATEGORY_CONTIGUOUS_SCRATCHPAD;
            let new = self
                .sim()
                .place_at(*dev, *carve, rec.pa, rec.size, scratch)
                .map_err(|_| format!("records overlap at {:#x}", rec.pa))?;
            let (k, i) = self
                .sim()
                .handle_key(*dev, new)
                .map_err(|e| e.to_string())?;
            let o = self
                .owner(*dev, k, i)
                .ok_or("a new handle outside the table")?;
            *o = Owner {
                handle: new,
                alias: if rec.alias != 0 {
                    rec.alias
                } else {
                    rec.handle
                },
                ..*rec
            };
        }
        guarded(|| self.sim().check_pools().map_err(|_| errno::EIO))
            .map_err(|_| "the rebuilt pools fail their check".to_string())?;
        Ok(live.len())
    }

    fn poisoned(&self) -> Result<(), Errno> {
        if self.r().header.poisoned.load(Ordering::Acquire) == layout::POISONED {
            log::error!(
                target: "nrt_host::shared",
                "{}: the device is inconsistent since process {} died mid-update; remove {} \
                 once no process uses it",
                self.inner.name,
                self.r().header.poisoned_by.load(Ordering::Relaxed),
                self.inner.path.display()
            );
            Err(errno::EIO)
        } else {
            Ok(())
        }
    }

    /// The record of a handle this process owns, or `EINVAL` (never touches another's). The
    /// record's `handle` is the pools' current one (after a rebuild, not the caller's).
    fn mine(&self, dev: u32, handle: u64) -> Result<&mut Owner, Errno> {
        let me = (self.inner.slot + 1) as u8;
        let (carve, index) = self.sim().handle_key(dev, handle)?;
        let o = self.owner(dev, carve, index).ok_or(errno::EINVAL)?;
        if o.slot == me && o.handle == handle && o.alias == 0 {
            return Ok(o);
        }
        // A handle from before a rebuild: its record moved to the new handle's key.
        for carve in 0..nrt_core::sim::CARVES_PER_DEVICE {
            for index in 1..MAX_CARVE_NODES {
                if let Some(o) = self.owner(dev, carve, index) {
                    if o.slot == me && o.alias == handle {
                        return Ok(o);
                    }
                }
            }
        }
        Err(errno::EINVAL)
    }
}

/// Runs `f` on simulator state that came from another process: a panic (state damaged in a
/// way the checks missed) becomes `EIO` instead of unwinding into the caller.
fn guarded<R>(f: impl FnOnce() -> Result<R, Errno>) -> Result<R, Errno> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(Err(errno::EIO))
}

impl Inner {
    fn mutex(&self) -> *mut libc::pthread_mutex_t {
        // SAFETY: `lock_offset()` is a page inside the mapping reserved for the mutex.
        unsafe { self.map.base.add(layout::lock_offset()).cast() }
    }

    fn lock(&self) -> Result<Locked<'_>, Errno> {
        // SAFETY: the mutex was initialised process-shared and robust by the file's creator
        // (`init_file`) and lives for as long as the mapping.
        let r = unsafe { libc::pthread_mutex_lock(self.mutex()) };
        if r == 0 {
            return Ok(Locked { inner: self });
        }
        if r == libc::EOWNERDEAD {
            // SAFETY: we hold the mutex in the EOWNERDEAD state; marking it consistent is
            // what the protocol asks before the state is repaired (`recover`).
            unsafe { libc::pthread_mutex_consistent(self.mutex()) };
            let g = Locked { inner: self };
            g.recover();
            return Ok(g);
        }
        // ENOTRECOVERABLE (a holder died and its successor did not repair it) or EINVAL:
        // the pools cannot be reached safely; say so on every call.
        log::error!(
            target: "nrt_host::shared",
            "{}: the device lock cannot be taken (errno {r}); remove {} once no process uses it",
            self.name,
            self.path.display()
        );
        Err(errno::EIO)
    }

    /// Bytes behind `[pa, pa + len)` of device `dev` in this process's backing.
    fn window(&self, dev: u32, pa: u64, host: bool, len: u64) -> Result<*mut u8, Errno> {
        let b = self.backing.get(dev as usize).ok_or(errno::ENODEV)?;
        let off = if host {
            self.channels as u64 * self.channel_size + (pa - HOST_PA_BASE)
        } else {
            pa
        };
        if off.checked_add(len).is_none_or(|e| e > b.len()) {
            return Err(errno::EFAULT);
        }
        let off = usize::try_from(off).map_err(|_| errno::EFAULT)?;
        // SAFETY: `off + len <= b.len()`: inside the reservation.
        Ok(unsafe { b.as_ptr().add(off) })
    }

    /// Runs a copy on the live allocation `handle` (owned by this process) at
    /// `[offset, offset + len)`, with the lock held.
    fn with_window(
        &self,
        dev: u32,
        handle: u64,
        offset: u64,
        len: u64,
        f: impl FnOnce(*mut u8),
    ) -> Result<(), Errno> {
        let g = self.lock()?;
        g.poisoned()?;
        guarded(|| {
            let real = g.mine(dev, handle)?.handle;
            let info = g.sim().memory_info(dev, real)?;
            let end = offset.checked_add(len).ok_or(errno::EFAULT)?;
            if end > info.size {
                return Err(errno::EFAULT);
            }
            let p = self.window(dev, info.pa, info.host, info.size)?;
            // SAFETY: `offset + len <= info.size` and `[p, p + info.size)` is in the backing.
            f(unsafe { p.add(offset as usize) });
            Ok(())
        })
    }
}

/// A shared simulated device as this process sees it: a [`Driver`].
pub struct SharedDevice {
    inner: Arc<Inner>,
    stop: Option<mpsc::Sender<()>>,
    reaper: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for SharedDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedDevice")
            .field("name", &self.inner.name)
            .field("slot", &self.inner.slot)
            .finish()
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl SharedDevice {
    /// Opens device `name` (creating it, or re-creating a stale one), takes a process slot
    /// and claims `req.cores`. Refusals: `EBUSY` (16 processes, a core another process holds
    /// — the message names its pid — or a live device of another geometry), `EACCES`
    /// (permission), `EINVAL` (a file of another layout version or a corrupted one), `EIO`
    /// (a poisoned device).
    pub fn open(name: &SharedName, req: &JoinRequest) -> Result<Self, SharedError> {
        let path = device_path(name);
        let fail = |errno: Errno, message: String| SharedError {
            name: name.to_string(),
            message,
            errno,
        };
        let fd = open_file(&path, libc::O_RDWR | libc::O_CREAT).map_err(|e| {
            let what = if e.raw() == libc::EACCES || e.raw() == libc::EPERM {
                "permission denied"
            } else {
                "cannot open"
            };
            fail(
                e,
                format!(
                    "{what}: {} ({})",
                    path.display(),
                    std::io::Error::from_raw_os_error(e.raw())
                ),
            )
        })?;
        flock(fd.as_raw_fd(), libc::LOCK_EX)
            .map_err(|e| fail(e, format!("cannot lock {}", path.display())))?;
        // The flock is dropped with `fd` on every early return (and explicitly below).
        let r = Self::join(name, &path, fd, req);
        r.map_err(|(e, m)| fail(e, m))
    }

    fn join(
        name: &SharedName,
        path: &Path,
        fd: OwnedFd,
        req: &JoinRequest,
    ) -> Result<Self, (Errno, String)> {
        let raw = fd.as_raw_fd();
        // SAFETY: `fstat` fills the zeroed struct for an fd we hold.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(raw, &mut st) } != 0 {
            return Err((last_errno(), format!("cannot stat {}", path.display())));
        }
        let size = layout::file_size();
        let fresh = st.st_size == 0;
        if fresh {
            // SAFETY: `ftruncate` on an fd we hold open for writing.
            if unsafe { libc::ftruncate(raw, size as libc::off_t) } != 0 {
                return Err((last_errno(), format!("cannot size {}", path.display())));
            }
        } else if st.st_size < layout::readable_size() as i64 {
            return Err((
                errno::EINVAL,
                format!(
                    "{} is {} bytes, too short for a shared device (corrupted)",
                    path.display(),
                    st.st_size
                ),
            ));
        }
        let map_len = if fresh {
            size
        } else {
            size.min(st.st_size as usize)
        };
        let map = Mapping::map(raw, map_len, true)
            .map_err(|e| (e, format!("cannot map {}", path.display())))?;
        if !fresh {
            check_header(&map.readable().header, st.st_size as u64)
                .map_err(|m| (errno::EINVAL, format!("{}: {m}", path.display())))?;
        }
        let devices = req.config.devices;
        let mut inner = Inner {
            name: name.to_string(),
            path: path.to_path_buf(),
            fd,
            map,
            slot: usize::MAX, // not joined yet: no slot is "ours" while admitting
            pid: std::process::id(),
            devices,
            info: Vec::new(),
            channels: 0,
            channel_size: 0,
            backing: Vec::new(),
            hold_ms: std::env::var(HOLD_VAR)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0),
        };
        let h = &inner.map.readable().header;
        let live_others = !fresh && h.ready.load(Ordering::Acquire) == 1 && {
            (0..MAX_PROCESSES).any(|s| {
                h_slot_live(&inner, s) && ofd_locked(inner.fd.as_raw_fd(), live_byte(s)) == Ok(true)
            })
        };
        if !live_others {
            if !fresh {
                log::info!(
                    target: "nrt_host::shared",
                    "{name}: every process of {} is gone (or it never finished initialising): \
                     re-creating it rather than trusting it",
                    path.display()
                );
            }
            init_file(&inner, &req.config)?;
        } else {
            let same = h.preset.load(Ordering::Acquire) == req.config.preset as u32
                && h.devices.load(Ordering::Acquire) == req.config.devices
                && h.channel_size.load(Ordering::Acquire)
                    == req
                        .config
                        .channel_size_override
                        .unwrap_or(req.config.preset.device_info().hbm_channel_size)
                && h.host_capacity.load(Ordering::Acquire) == req.config.host_dma_capacity;
            if !same {
                return Err((
                    errno::EBUSY,
                    format!(
                        "in use as a {}x{} (channel {} B) by live processes; this process asks \
                         for {}x{}",
                        Preset::ALL
                            .iter()
                            .find(|p| **p as u32 == h.preset.load(Ordering::Relaxed))
                            .map_or("?", |p| p.name()),
                        h.devices.load(Ordering::Relaxed),
                        h.channel_size.load(Ordering::Relaxed),
                        req.config.preset.name(),
                        req.config.devices
                    ),
                ));
            }
        }
        // Join under the device lock.
        let slot;
        let info;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let r = Self::admit(&inner, path, raw, fresh, live_others, req);
            match r {
                Ok(s) => {
                    slot = s.0;
                    info = s.1;
                    break;
                }
                // A process that is gone (no such pid) but whose liveness lock the kernel has
                // not dropped yet (its file is released a moment after its death): wait for
                // it rather than refuse for lack of what it held.
                Err((e, _)) if e == errno::EBUSY && attempt < 100 && inner.any_dying() => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(e),
            }
        }
        inner.info = info;
        Self::finish(name, inner, slot, raw)
    }

    /// Admits this process under the device lock: checks a file we did not create, reaps the
    /// dead, takes a free slot and the requested cores. Returns the slot and the devices' info.
    fn admit(
        inner: &Inner,
        path: &Path,
        raw: RawFd,
        fresh: bool,
        live_others: bool,
        req: &JoinRequest,
    ) -> Result<(usize, Vec<DeviceInfo>), (Errno, String)> {
        let devices = req.config.devices;
        {
            let g = inner
                .lock()
                .map_err(|e| (e, "cannot take the device lock".to_string()))?;
            g.poisoned().map_err(|e| {
                (
                    e,
                    format!(
                        "inconsistent since process {} died mid-update; remove {} once no process \
                         uses it",
                        g.r().header.poisoned_by.load(Ordering::Relaxed),
                        path.display()
                    ),
                )
            })?;
            if !fresh && live_others {
                // A file we did not just create: check the pools before trusting them. Their
                // own locks are only ever taken under the device lock, which we hold, so none
                // is legitimately held now: force them open first, so a damaged lock word
                // cannot make the check spin.
                g.sim_mut().reset_locks();
                let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    g.sim().check_pools()
                }));
                match checked {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        return Err((
                            errno::EINVAL,
                            format!("{}: corrupted pools ({e})", path.display()),
                        ))
                    }
                    Err(_) => {
                        return Err((
                            errno::EINVAL,
                            format!(
                                "{}: corrupted pools (their check failed hard)",
                                path.display()
                            ),
                        ))
                    }
                }
            }
            g.reap();
            let free = (0..MAX_PROCESSES).find(|&s| {
                g.r().procs[s].state.load(Ordering::Acquire) == SLOT_FREE
                    && ofd_locked(raw, live_byte(s)) == Ok(false)
            });
            let Some(s) = free else {
                return Err((
                    errno::EBUSY,
                    format!(
                        "already has {MAX_PROCESSES} processes (the driver admits at most \
                         {MAX_PROCESSES} per device): {}",
                        pids(g.r())
                    ),
                ));
            };
            // Cores: exclusive to one process.
            for (dev, &want) in req.cores.iter().enumerate().take(devices as usize) {
                for (t, p) in g.r().procs.iter().enumerate() {
                    if t == s || p.state.load(Ordering::Acquire) != SLOT_LIVE {
                        continue;
                    }
                    let held = p.cores[dev].load(Ordering::Acquire) & want;
                    if held != 0 {
                        return Err((
                            errno::EBUSY,
                            format!(
                                "NeuronCore {} of nd{dev} is held by process {} (cores are \
                                 exclusive to one process)",
                                held.trailing_zeros(),
                                p.pid.load(Ordering::Relaxed)
                            ),
                        ));
                    }
                }
            }
            // Liveness first, then the slot becomes visible as live.
            match ofd_lock(raw, live_byte(s), true) {
                Ok(true) => {}
                Ok(false) => {
                    return Err((
                        errno::EBUSY,
                        "a dead slot's liveness lock is still held (retry)".into(),
                    ))
                }
                Err(e) => return Err((e, "cannot take the slot's liveness lock".into())),
            }
            let p = &g.r().procs[s];
            p.pid.store(inner.pid, Ordering::Relaxed);
            p.joined_at.store(unix_now(), Ordering::Relaxed);
            p.allocations.store(0, Ordering::Relaxed);
            for (dev, c) in p.cores.iter().enumerate() {
                c.store(req.cores.get(dev).copied().unwrap_or(0), Ordering::Relaxed);
            }
            p.state.store(SLOT_LIVE, Ordering::Release);
            let i: Result<Vec<_>, _> = (0..devices).map(|d| g.sim().device_info(d)).collect();
            let info = i.map_err(|e| (e, "device info".to_string()))?;
            Ok((s, info))
        }
    }

    /// The rest of joining, outside the device lock: this process's backing, the reaper.
    fn finish(
        name: &SharedName,
        mut inner: Inner,
        slot: usize,
        raw: RawFd,
    ) -> Result<Self, (Errno, String)> {
        let devices = inner.devices;
        inner.slot = slot;
        inner.channels = inner.info[0].hbm_channels;
        inner.channel_size = inner.info[0].hbm_channel_size;
        let backing_len =
            inner.channels as u64 * inner.channel_size + inner.info[0].host_dma_capacity;
        for _ in 0..devices {
            match HostReservation::reserve(backing_len) {
                Ok(r) => inner.backing.push(r),
                Err(e) => {
                    if let Ok(g) = inner.lock() {
                        g.reclaim(slot);
                    }
                    return Err((errno::ENOMEM, e.to_string()));
                }
            }
        }
        let _ = flock(raw, libc::LOCK_UN);
        log::debug!(target: "nrt_host::shared", "{name}: joined as slot {slot} (pid {})", inner.pid);
        let inner = Arc::new(inner);
        let (tx, rx) = mpsc::channel::<()>();
        let weak = Arc::downgrade(&inner);
        let reaper = std::thread::Builder::new()
            .name("nrt-shared-reaper".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(REAP_INTERVAL) {
                    let Some(inner) = weak.upgrade() else { return };
                    if inner.any_dead() {
                        if let Ok(g) = inner.lock() {
                            g.reap();
                        }
                    }
                }
            })
            .ok();
        Ok(SharedDevice {
            inner,
            stop: Some(tx),
            reaper,
        })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The shared file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// This process's slot (0..16).
    pub fn slot(&self) -> usize {
        self.inner.slot
    }

    /// The device-wide figures now (a consistent read of the counters).
    pub fn snapshot(&self) -> reader::Snapshot {
        reader::Snapshot::read(self.inner.map.readable(), self.inner.fd.as_raw_fd())
    }

    /// Reclaims dead processes now (what the reaper thread does every [`REAP_INTERVAL`]).
    pub fn reap_now(&self) -> usize {
        self.inner.lock().map_or(0, |g| g.reap())
    }

    /// Checks the pools against the ownership table (tests, the soak's checker): every
    /// pool's invariants hold, every owned allocation is live in the pools, no two overlap,
    /// and the pools hold no allocation nobody owns. Returns the live allocations and bytes.
    pub fn audit(&self) -> Result<(u64, u64), String> {
        let g = self.inner.lock().map_err(|e| format!("lock: errno {e}"))?;
        let r = guarded(|| {
            g.sim().check_pools().map_err(|_| errno::EIO)?;
            Ok(())
        });
        r.map_err(|_| "pool invariants broken".to_string())?;
        let mut ranges = Vec::new();
        let mut in_pools = 0u64;
        for dev in 0..self.inner.devices {
            for c in 0..self.inner.channels {
                in_pools += g
                    .sim()
                    .pool_stats(dev, false, c)
                    .map_or(0, |s| s.allocations);
            }
            in_pools += g
                .sim()
                .pool_stats(dev, true, 0)
                .map_or(0, |s| s.allocations);
            for carve in 0..nrt_core::sim::CARVES_PER_DEVICE {
                for index in 1..MAX_CARVE_NODES {
                    let Some(o) = g.owner(dev, carve, index) else {
                        continue;
                    };
                    if o.slot == 0 {
                        continue;
                    }
                    let info = g.sim().memory_info(dev, o.handle).map_err(|e| {
                        format!("owned handle {:#x} not live (errno {e})", o.handle)
                    })?;
                    if info.size != o.size {
                        return Err(format!("handle {:#x}: size disagrees", o.handle));
                    }
                    ranges.push((dev, info.pa, info.size));
                }
            }
        }
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            if w[0].0 == w[1].0 && w[0].1 + w[0].2 > w[1].1 {
                return Err(format!("overlap at {:#x} on nd{}", w[1].1, w[1].0));
            }
        }
        if ranges.len() as u64 != in_pools {
            return Err(format!(
                "the pools hold {in_pools} allocations, the ownership table {}",
                ranges.len()
            ));
        }
        Ok((in_pools, ranges.iter().map(|r| r.2).sum()))
    }
}

/// A copy of device `name`'s pools as they are now, taken under its lock without joining it
/// (no slot, no cores), with its counters: what `plan --device sim:…@name` plans on (issue 19
/// item 2: a plan runs on a snapshot, never on the live pools, so processes that allocate
/// meanwhile neither disturb it nor are disturbed).
pub fn snapshot_pools(
    name: &SharedName,
) -> Result<(Box<SimDevice>, reader::Snapshot), SharedError> {
    let path = device_path(name);
    let fail = |errno: Errno, message: String| SharedError {
        name: name.to_string(),
        message,
        errno,
    };
    let fd = open_file(&path, libc::O_RDWR).map_err(|e| {
        let what = if e.raw() == libc::ENOENT {
            "no such shared device (no process has opened it)"
        } else if e.raw() == libc::EACCES || e.raw() == libc::EPERM {
            "permission denied"
        } else {
            "cannot open"
        };
        fail(e, format!("{what}: {}", path.display()))
    })?;
    // SAFETY: `fstat` fills a zeroed struct for an fd we hold.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(fail(
            last_errno(),
            format!("cannot stat {}", path.display()),
        ));
    }
    if (st.st_size as u64) != layout::file_size() as u64 {
        return Err(fail(
            errno::EINVAL,
            format!(
                "{}: {} bytes, not a shared device of this version",
                path.display(),
                st.st_size
            ),
        ));
    }
    let map = Mapping::map(fd.as_raw_fd(), layout::file_size(), true)
        .map_err(|e| fail(e, format!("cannot map {}", path.display())))?;
    check_header(&map.readable().header, st.st_size as u64)
        .map_err(|m| fail(errno::EINVAL, format!("{}: {m}", path.display())))?;
    if map.readable().header.ready.load(Ordering::Acquire) != 1 {
        return Err(fail(errno::EBUSY, "still being created".into()));
    }
    let devices = map.readable().header.devices.load(Ordering::Acquire);
    let inner = Inner {
        name: name.to_string(),
        path: path.clone(),
        fd,
        map,
        slot: usize::MAX,
        pid: std::process::id(),
        devices,
        info: Vec::new(),
        channels: 0,
        channel_size: 0,
        backing: Vec::new(),
        hold_ms: 0,
    };
    let g = inner
        .lock()
        .map_err(|e| fail(e, "cannot take the device lock".into()))?;
    g.poisoned()
        .map_err(|e| fail(e, "inconsistent since a process died mid-update".into()))?;
    // As in `admit`: no pool lock is legitimately held while we hold the device lock.
    g.sim_mut().reset_locks();
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.sim().check_pools()));
    if !matches!(checked, Ok(Ok(()))) {
        return Err(fail(
            errno::EINVAL,
            format!("{}: corrupted pools", path.display()),
        ));
    }
    let b = Box::<SimDevice>::new_zeroed();
    // SAFETY: a zeroed `SimDevice` is its valid uninitialised state (`ZeroValid`).
    let mut copy = unsafe { b.assume_init() };
    g.sim().copy_to(&mut copy);
    let snap = reader::Snapshot::read(g.r(), inner.fd.as_raw_fd());
    drop(g);
    Ok((copy, snap))
}

fn h_slot_live(inner: &Inner, s: usize) -> bool {
    inner.map.readable().procs[s].state.load(Ordering::Acquire) == SLOT_LIVE
}

fn pids(r: &Readable) -> String {
    let v: Vec<String> = r
        .procs
        .iter()
        .filter(|p| p.state.load(Ordering::Relaxed) == SLOT_LIVE)
        .map(|p| p.pid.load(Ordering::Relaxed).to_string())
        .collect();
    format!("pids {}", v.join(", "))
}

impl Inner {
    /// Whether some other slot is live, its liveness lock still held, but its pid gone: a
    /// process that just died, whose lock the kernel is about to drop. (A pid in another pid
    /// namespace also looks gone: then the caller waits a second for nothing.)
    fn any_dying(&self) -> bool {
        let r = self.map.readable();
        (0..MAX_PROCESSES).any(|s| {
            s != self.slot
                && h_slot_live(self, s)
                && ofd_locked(self.fd.as_raw_fd(), live_byte(s)) == Ok(true)
                && {
                    let pid = r.procs[s].pid.load(Ordering::Relaxed) as libc::pid_t;
                    // SAFETY: signal 0 only checks that the pid exists; nothing is sent.
                    pid > 0
                        && unsafe { libc::kill(pid, 0) } != 0
                        && last_errno().raw() == libc::ESRCH
                }
        })
    }

    /// Whether some other slot looks live but its process is gone (no lock needed).
    fn any_dead(&self) -> bool {
        (0..MAX_PROCESSES).any(|s| {
            s != self.slot
                && h_slot_live(self, s)
                && ofd_locked(self.fd.as_raw_fd(), live_byte(s)) == Ok(false)
        })
    }
}

/// Initialises (or re-initialises) the whole file for `cfg`. Runs under the file's `flock`
/// with no live process: nothing else reads the private part.
fn init_file(inner: &Inner, cfg: &SimConfig) -> Result<(), (Errno, String)> {
    let h = &inner.map.readable().header;
    h.ready.store(0, Ordering::Release);
    // SAFETY: with no live process and the flock held, nothing else touches the file's bytes
    // beyond readers of the (all-atomic) readable prefix; zeroing the private part (lock page,
    // owner tables, pools) is writing plain memory we mapped read-write, and all-zero is the
    // empty state of every structure in it.
    unsafe {
        let start = layout::lock_offset();
        // Only pages that may have been touched need zeroing; on a fresh sparse file they are
        // zero already, so this is cheap the first time.
        libc::madvise(
            inner.map.base.add(start).cast(),
            layout::file_size() - start,
            libc::MADV_REMOVE,
        );
        core::ptr::write_bytes(inner.map.base.add(start), 0, 4096);
    }
    let r = inner.map.readable();
    for p in &r.procs {
        p.state.store(SLOT_FREE, Ordering::Relaxed);
        p.pid.store(0, Ordering::Relaxed);
        p.allocations.store(0, Ordering::Relaxed);
        for c in &p.cores {
            c.store(0, Ordering::Relaxed);
        }
        for d in &p.usage {
            for c in d {
                for k in c {
                    k.store(0, Ordering::Relaxed);
                }
            }
        }
    }
    for d in &r.counters {
        for c in d {
            for k in c {
                k.total.store(0, Ordering::Relaxed);
                k.present.store(0, Ordering::Relaxed);
                k.peak.store(0, Ordering::Relaxed);
            }
        }
    }
    // The robust, process-shared mutex.
    // SAFETY: attribute and mutex calls on memory we own exclusively right now (see above);
    // the attribute object lives on the stack for the calls' duration.
    unsafe {
        let mut attr: libc::pthread_mutexattr_t = core::mem::zeroed();
        libc::pthread_mutexattr_init(&mut attr);
        libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
        libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
        let rc = libc::pthread_mutex_init(inner.mutex(), &attr);
        libc::pthread_mutexattr_destroy(&mut attr);
        if rc != 0 {
            return Err((Errno::new(rc), "cannot initialise the device lock".into()));
        }
    }
    // SAFETY: exclusive as above; `SimDevice` is zero-valid and the region was zeroed.
    let sim = unsafe { &mut *inner.map.base.add(layout::sim_offset()).cast::<SimDevice>() };
    sim.init(cfg)
        .map_err(|e| (e, "the device configuration was refused".to_string()))?;
    let info = cfg.preset.device_info();
    h.magic.store(layout::MAGIC, Ordering::Relaxed);
    h.version.store(layout::LAYOUT_VERSION, Ordering::Relaxed);
    h.file_size
        .store(layout::file_size() as u64, Ordering::Relaxed);
    h.readable_size
        .store(layout::readable_size() as u64, Ordering::Relaxed);
    h.preset.store(cfg.preset as u32, Ordering::Relaxed);
    h.devices.store(cfg.devices, Ordering::Relaxed);
    h.channel_size.store(
        cfg.channel_size_override.unwrap_or(info.hbm_channel_size),
        Ordering::Relaxed,
    );
    h.host_capacity
        .store(cfg.host_dma_capacity, Ordering::Relaxed);
    h.placement.store(cfg.placement as u32, Ordering::Relaxed);
    h.aligned_alloc
        .store(u32::from(cfg.aligned_alloc), Ordering::Relaxed);
    h.seq.store(0, Ordering::Relaxed);
    h.epoch.fetch_add(1, Ordering::Relaxed);
    h.poisoned.store(0, Ordering::Relaxed);
    h.poisoned_by.store(0, Ordering::Relaxed);
    h.ready.store(1, Ordering::Release);
    Ok(())
}

impl Drop for SharedDevice {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.reaper.take() {
            let _ = t.join();
        }
        // Close: whatever the runtime did not free goes back, the cores and slot are released.
        let left = self.inner.lock().map_or(0, |g| {
            let n = g.reclaim(self.inner.slot);
            // Released before the device lock, so no newcomer sees the slot free but locked.
            let _ = ofd_lock(self.inner.fd.as_raw_fd(), live_byte(self.inner.slot), false);
            n
        });
        if left > 0 {
            log::debug!(target: "nrt_host::shared", "{}: close returned {left} bytes", self.inner.name);
        }
        let _ = ofd_lock(self.inner.fd.as_raw_fd(), live_byte(self.inner.slot), false);
    }
}

impl Driver for SharedDevice {
    fn device_count(&self) -> u32 {
        self.inner.devices
    }

    fn device_info(&self, dev: u32) -> Result<DeviceInfo, Errno> {
        self.inner
            .info
            .get(dev as usize)
            .copied()
            .ok_or(errno::ENODEV)
    }

    fn memory_alloc(&self, dev: u32, req: &AllocRequest) -> Result<u64, Errno> {
        self.memory_alloc_pa(dev, req).map(|(h, _)| h)
    }

    fn memory_alloc_pa(&self, dev: u32, req: &AllocRequest) -> Result<(u64, u64), Errno> {
        let inner = &*self.inner;
        for attempt in 0..2 {
            let g = inner.lock()?;
            g.poisoned()?;
            if inner.hold_ms > 0 && req.category == CATEGORY_TENSORS_DEVICE {
                std::thread::sleep(Duration::from_millis(inner.hold_ms));
            }
            let r = guarded(|| {
                let (h, pa) = g.sim().memory_alloc_pa(dev, req)?;
                let info = g.sim().memory_info(dev, h)?;
                let (carve, index) = g.sim().handle_key(dev, h)?;
                let Some(o) = g.owner(dev, carve, index) else {
                    let _ = g.sim().memory_free(dev, h);
                    return Err(errno::EINVAL);
                };
                *o = Owner {
                    handle: h,
                    size: info.size,
                    pa: info.pa,
                    alias: 0,
                    slot: (inner.slot + 1) as u8,
                    category: req.category,
                    nc: req.nc_id as u8,
                    _pad: [0; 5],
                };
                g.book(
                    inner.slot,
                    dev,
                    req.nc_id as u8,
                    req.category,
                    info.size,
                    true,
                );
                Ok((h, pa))
            });
            match r {
                // Before refusing for lack of memory: reclaim the dead, then try once more.
                Err(e) if e == errno::ENOMEM && attempt == 0 && g.reap() > 0 => continue,
                r => return r,
            }
        }
        Err(errno::ENOMEM)
    }

    fn memory_get_pa(&self, dev: u32, handle: u64) -> Result<u64, Errno> {
        let g = self.inner.lock()?;
        g.poisoned()?;
        guarded(|| {
            let real = g.mine(dev, handle)?.handle;
            g.sim().memory_get_pa(dev, real)
        })
    }

    fn memory_free(&self, dev: u32, handle: u64) -> Result<(), Errno> {
        let g = self.inner.lock()?;
        g.poisoned()?;
        guarded(|| {
            let rec = *g.mine(dev, handle)?;
            g.sim().memory_free(dev, rec.handle)?;
            *g.mine(dev, handle)? = Owner::default();
            g.book(self.inner.slot, dev, rec.nc, rec.category, rec.size, false);
            Ok(())
        })
    }

    fn copy_in(&self, dev: u32, handle: u64, offset: u64, src: &[u8]) -> Result<(), Errno> {
        self.inner
            .with_window(dev, handle, offset, src.len() as u64, |p| {
                // SAFETY: `with_window` checked `[p, p + len)` lies in this process's backing of
                // an allocation it owns, with the device lock held; `src` is a distinct slice.
                unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) }
            })
    }

    fn copy_out(&self, dev: u32, handle: u64, offset: u64, dst: &mut [u8]) -> Result<(), Errno> {
        let len = dst.len();
        let out = dst.as_mut_ptr();
        self.inner
            .with_window(dev, handle, offset, len as u64, |p| {
                // SAFETY: as in `copy_in`; `dst` is an exclusive slice outside the backing.
                unsafe { core::ptr::copy_nonoverlapping(p, out, len) }
            })
    }

    fn fill(&self, dev: u32, handle: u64, offset: u64, len: u64, value: u8) -> Result<(), Errno> {
        let n = usize::try_from(len).map_err(|_| errno::EFAULT)?;
        self.inner.with_window(dev, handle, offset, len, |p| {
            // SAFETY: as in `copy_in`.
            unsafe { core::ptr::write_bytes(p, value, n) }
        })
    }

    fn pool_stats(&self, dev: u32, host: bool, hbm_idx: u32) -> Result<PoolStats, Errno> {
        let g = self.inner.lock()?;
        g.poisoned()?;
        guarded(|| g.sim().pool_stats(dev, host, hbm_idx))
    }

    fn hbm_stats_aligned(&self, dev: u32, hbm_idx: u32, align: u64) -> Result<PoolStats, Errno> {
        let g = self.inner.lock()?;
        g.poisoned()?;
        guarded(|| g.sim().hbm_stats_aligned(dev, hbm_idx, align))
    }

    fn free_histogram(
        &self,
        dev: u32,
        hbm_idx: u32,
    ) -> Result<(FreeHistogram, FreeHistogram), Errno> {
        let g = self.inner.lock()?;
        g.poisoned()?;
        guarded(|| g.sim().free_histogram(dev, hbm_idx))
    }
}

/// The physical cores a process with `vcores` owns on `devices` devices of `info`'s kind,
/// one bit per core per device (spec §9: the owned slice of logical cores, each
/// `lnc` physical cores wide). `None` when the configuration is invalid (bring-up then
/// reports it).
pub fn claimed_cores(
    info: &DeviceInfo,
    devices: u32,
    vcores: &nrt_core::vcore::VcoreOptions,
) -> Option<[u32; layout::MAX_DEVICES]> {
    let cpd = info.cores_per_device;
    let lnc = nrt_core::vcore::parse_vnc_config(info.arch, cpd, vcores.lnc_size).ok()?;
    let total = devices * (cpd / lnc);
    let (first, count) = nrt_core::vcore::visible_slice(vcores, total).ok()?;
    let mut out = [0u32; layout::MAX_DEVICES];
    for p in first * lnc..(first + count) * lnc {
        let (d, c) = ((p / cpd) as usize, p % cpd);
        *out.get_mut(d)? |= 1 << c;
    }
    Some(out)
}
