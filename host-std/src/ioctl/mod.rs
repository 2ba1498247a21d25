//! The kernel driver boundary (public ABI §3): argument structs and command numbers ([`abi`]),
//! the syscall layer ([`Sys`], real [`RealSys`]) and a fake driver ([`fake::FakeSys`]) with the
//! same signatures, so everything above is testable without hardware (docs/STYLE.md #14).

pub mod abi;
pub mod fake;

use std::ffi::CString;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use zerocopy::{FromBytes, IntoBytes};

/// The three system calls the driver backend needs. Implemented by [`RealSys`] (libc) and by
/// [`fake::FakeSys`] (an in-process emulation of the kernel driver).
pub trait Sys: Send + Sync {
    /// `open(path, O_RDWR | O_CLOEXEC)`.
    fn open(&self, path: &Path) -> Result<RawFd, Errno>;

    /// `ioctl(fd, cmd, arg)`; returns the (non-negative) return value of the call.
    ///
    /// # Safety
    ///
    /// `arg` must be valid for reads and writes of the argument struct `cmd` takes (public ABI
    /// §3) for the duration of the call, and every user address inside that struct (handle
    /// out-pointers, copy buffers, dump arrays) must be valid for what the command does with it.
    unsafe fn ioctl(&self, fd: RawFd, cmd: u64, arg: *mut u8) -> Result<i32, Errno>;

    /// `close(fd)`.
    fn close(&self, fd: RawFd) -> Result<(), Errno>;
}

/// `Sys` through a pointer to one: every call goes to the pointee (one body for each pointer
/// type instead of a hand-copied impl per type).
macro_rules! forward_sys {
    ($($ptr:ty),+) => {$(
        impl<T: Sys + ?Sized> Sys for $ptr {
            fn open(&self, path: &Path) -> Result<RawFd, Errno> {
                (**self).open(path)
            }
            unsafe fn ioctl(&self, fd: RawFd, cmd: u64, arg: *mut u8) -> Result<i32, Errno> {
                // SAFETY: the pointee's `ioctl` has the same contract, which our caller keeps.
                unsafe { (**self).ioctl(fd, cmd, arg) }
            }
            fn close(&self, fd: RawFd) -> Result<(), Errno> {
                (**self).close(fd)
            }
        }
    )+};
}

forward_sys!(&T, std::sync::Arc<T>);

/// Issues `cmd` with `arg` as its argument struct.
///
/// # Safety
///
/// `T` must be the struct `cmd` takes, and every user address inside `arg` must be valid for
/// what the command does with it (see [`Sys::ioctl`]).
pub unsafe fn ioctl_arg<S: Sys + ?Sized, T: IntoBytes + FromBytes>(
    sys: &S,
    fd: RawFd,
    cmd: u64,
    arg: &mut T,
) -> Result<i32, Errno> {
    let p = arg.as_mut_bytes().as_mut_ptr();
    // SAFETY: `p` points to a live, exclusively borrowed `T` (the struct `cmd` takes, by the
    // caller's contract); embedded addresses are the caller's responsibility.
    unsafe { sys.ioctl(fd, cmd, p) }
}

/// `errno` after a failed call. A value nix has no name for (a kernel-internal code such as
/// ENOTSUPP, 524) would become `UnknownErrno`, which is 0: "no error" to every caller of the
/// `Driver` portal. It is reported as `EIO` instead, with the raw value in the log.
fn last_errno() -> Errno {
    let raw = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    match Errno::from_raw(raw) {
        Errno::UnknownErrno => {
            log::debug!(target: "nrt_dmem::driver", "errno {raw} has no name; reported as EIO");
            Errno::EIO
        }
        e => e,
    }
}

/// The real system calls, through libc.
#[derive(Copy, Clone, Debug, Default)]
pub struct RealSys;

impl Sys for RealSys {
    fn open(&self, path: &Path) -> Result<RawFd, Errno> {
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
        // SAFETY: `c` is a NUL-terminated string that outlives the call; open has no other
        // memory effects.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            Err(last_errno())
        } else {
            Ok(fd)
        }
    }

    unsafe fn ioctl(&self, fd: RawFd, cmd: u64, arg: *mut u8) -> Result<i32, Errno> {
        // SAFETY: the caller guarantees `arg` (and the addresses inside it) are valid for the
        // command (this method's contract); the kernel validates `fd` and `cmd`.
        let r = unsafe { libc::ioctl(fd, cmd as nix::sys::ioctl::ioctl_num_type, arg) };
        if r < 0 {
            Err(last_errno())
        } else {
            Ok(r)
        }
    }

    fn close(&self, fd: RawFd) -> Result<(), Errno> {
        // SAFETY: closing a descriptor has no memory effects; the caller owns `fd`.
        let r = unsafe { libc::close(fd) };
        if r < 0 {
            Err(last_errno())
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod errno_tests {
    use super::*;

    #[test]
    fn an_errno_without_a_name_is_eio_not_zero() {
        for (raw, want) in [(22, Errno::EINVAL), (524, Errno::EIO), (0, Errno::EIO)] {
            // SAFETY: this thread's errno cell; written, then read back by `last_errno`.
            unsafe { *libc::__errno_location() = raw };
            assert_eq!(last_errno(), want, "errno {raw}");
        }
    }
}
