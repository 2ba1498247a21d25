//! The shared device file's mapping and its locks: `open(2)`, `mmap(2)`, the whole-file
//! `flock` and the per-slot open-file-description liveness locks.

use std::cell::UnsafeCell;
use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

use nrt_core::driver::{errno, Errno};

use super::layout::{self, Readable};

/// The mapping of a shared device file.
pub(super) struct Mapping {
    base: *mut u8,
    len: usize,
    /// Its entry in [`REGIONS`] (`None`: the table was full; the mapping is then unguarded).
    region: Option<usize>,
}

/// A mapping the `SIGBUS` handler knows: a file truncated under a process that maps it makes
/// any access past the new end fault; the handler puts zero-filled private pages there
/// instead (so the access completes and the process lives) and marks the mapping, which
/// every later use checks.
struct Region {
    start: AtomicUsize,
    len: AtomicUsize,
    faulted: AtomicBool,
}

const REGION_SLOTS: usize = 64;
#[allow(clippy::declare_interior_mutable_const)]
const NO_REGION: Region = Region {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    faulted: AtomicBool::new(false),
};
static REGIONS: [Region; REGION_SLOTS] = [NO_REGION; REGION_SLOTS];

/// The `SIGBUS` action before ours, restored for a fault outside every region.
struct OldAction(UnsafeCell<libc::sigaction>);
// SAFETY: written once inside `INSTALL` before the handler that reads it is installed, read
// only afterwards.
unsafe impl Sync for OldAction {}
// SAFETY: an all-zero `sigaction` is a valid value (SIG_DFL, empty mask).
static OLD_ACTION: OldAction = OldAction(UnsafeCell::new(unsafe { core::mem::zeroed() }));
static INSTALL: Once = Once::new();

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid `siginfo_t` to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for r in &REGIONS {
        let (start, len) = (
            r.start.load(Ordering::Acquire),
            r.len.load(Ordering::Acquire),
        );
        if start != 0 && start != usize::MAX && addr.wrapping_sub(start) < len {
            let page = addr & !(PAGE - 1);
            // SAFETY: replaces pages of our own mapping `[page, start + len)` with private
            // zero pages (async-signal-safe: one system call); nothing else is touched.
            unsafe {
                libc::mmap(
                    page as *mut libc::c_void,
                    start + len - page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            r.faulted.store(true, Ordering::Release);
            return;
        }
    }
    // Not a shared device's fault: the previous action takes it when the access repeats.
    // SAFETY: `OLD_ACTION` was filled before this handler was installed.
    unsafe { libc::sigaction(libc::SIGBUS, OLD_ACTION.0.get(), core::ptr::null_mut()) };
}

const PAGE: usize = 4096;

fn install_handler() {
    INSTALL.call_once(|| {
        // SAFETY: an all-zero `sigaction` is valid; the fields that matter are set below.
        let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
        sa.sa_sigaction = on_sigbus as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
        // SAFETY: installs a handler that only reads atomics and calls mmap/sigaction; the old
        // action is stored where the handler reads it, before the handler can run.
        unsafe {
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGBUS, &sa, OLD_ACTION.0.get());
        }
    });
}

// SAFETY: the mapping is plain shared memory valid until `Drop`; what is inside is reached
// only through atomics (the readable prefix) or with the process-shared lock held.
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from offset 0.
    pub(super) fn map(fd: RawFd, len: usize, writable: bool) -> Result<Self, Errno> {
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
        install_handler();
        let region = REGIONS.iter().position(|r| {
            r.start
                .compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        if let Some(i) = region {
            REGIONS[i].faulted.store(false, Ordering::Relaxed);
            REGIONS[i].len.store(len, Ordering::Release);
            REGIONS[i].start.store(p as usize, Ordering::Release);
        }
        Ok(Mapping {
            base: p.cast(),
            len,
            region,
        })
    }

    /// Whether an access faulted because the file shrank under the mapping (the pages past
    /// its end now read as zeros: nothing read from it since can be trusted).
    pub(super) fn faulted(&self) -> bool {
        self.region
            .is_some_and(|i| REGIONS[i].faulted.load(Ordering::Acquire))
    }

    /// The mapping's first byte (page-aligned; `len` bytes follow while `self` lives).
    pub(super) fn base(&self) -> *mut u8 {
        self.base
    }

    pub(super) fn readable(&self) -> &Readable {
        // SAFETY: the mapping is at least `readable_size()` bytes (checked by every opener),
        // page-aligned, and `Readable` is all atomics, valid for any bytes and for
        // concurrent access by other processes.
        unsafe { &*self.base.cast::<Readable>() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(i) = self.region {
            REGIONS[i].len.store(0, Ordering::Release);
            REGIONS[i].start.store(0, Ordering::Release);
        }
        // SAFETY: exactly the mapping made in `map`, unmapped only here.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

pub(super) fn last_errno() -> Errno {
    Errno::new(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(errno::EIO.raw()),
    )
}

/// Opens `path` with `flags` (`O_CLOEXEC | O_NOFOLLOW` added), creating it 0600.
pub(super) fn open_file(path: &Path, flags: i32) -> Result<OwnedFd, Errno> {
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
pub(super) fn ofd_lock(fd: RawFd, byte: u64, write: bool) -> Result<bool, Errno> {
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

pub(super) fn flock(fd: RawFd, op: i32) -> Result<(), Errno> {
    // SAFETY: `flock` on an fd we hold; no memory is passed.
    if unsafe { libc::flock(fd, op) } != 0 {
        Err(last_errno())
    } else {
        Ok(())
    }
}
