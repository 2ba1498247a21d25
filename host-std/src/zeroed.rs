//! [`ZeroedBox`]: a large zero-valid value in its own anonymous mapping, for the simulated
//! device's metadata (a [`nrt_core::sim::SimDevice`] is gigabytes of node arrays, of which
//! only the nodes in use are ever touched).
//!
//! `Box::new_zeroed` would do natively (calloc maps fresh zero pages), but under valgrind
//! `calloc` writes every byte of the allocation; a mapping made here is zero pages the kernel
//! commits one at a time, whoever runs the process.

use core::ptr::NonNull;

use nix::errno::Errno;
use nrt_core::abi::meta::ZeroValid;

use crate::error::{Error, Result};

/// A `T` in an anonymous `MAP_NORESERVE` mapping of its own, all-zero when made, dropped and
/// unmapped with the box. Kept out of core dumps when asked ([`ZeroedBox::new_undumped`]):
/// the simulated driver's state is kernel memory on real hardware.
pub struct ZeroedBox<T: ZeroValid> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: the box owns its `T` exclusively, like `Box<T>`.
unsafe impl<T: ZeroValid + Send> Send for ZeroedBox<T> {}
// SAFETY: `&ZeroedBox<T>` only gives `&T`, like `&Box<T>`.
unsafe impl<T: ZeroValid + Sync> Sync for ZeroedBox<T> {}

impl<T: ZeroValid> ZeroedBox<T> {
    /// An all-zero `T` (valid: `T: ZeroValid`) in a fresh mapping; [`Error::Reserve`] when
    /// the address space cannot hold it.
    pub fn new() -> Result<Self> {
        Self::map(false)
    }

    /// [`ZeroedBox::new`], with the mapping excluded from core dumps (`MADV_DONTDUMP`).
    pub fn new_undumped() -> Result<Self> {
        Self::map(true)
    }

    fn map(undumped: bool) -> Result<Self> {
        let len = size_of::<T>().max(1);
        let err = |source| Error::Reserve {
            len: len as u64,
            source,
        };
        const { assert!(align_of::<T>() <= 4096, "a mapping is page-aligned") };
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing: it aliases
        // no Rust object and involves no fd.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(err(Errno::last()));
        }
        let ptr = NonNull::new(p.cast::<T>()).ok_or_else(|| err(Errno::ENOMEM))?;
        let b = ZeroedBox { ptr, len };
        if undumped {
            // SAFETY: advice on exactly our own mapping; it changes no byte of it.
            if unsafe { libc::madvise(p, len, libc::MADV_DONTDUMP) } != 0 {
                log::debug!("MADV_DONTDUMP refused: {}", Errno::last());
            }
        }
        Ok(b)
    }
}

impl<T: ZeroValid> core::ops::Deref for ZeroedBox<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the mapping holds a valid `T` (zero-valid when made, then only written
        // through `&mut T`) for as long as the box lives, and is page-aligned.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: ZeroValid> core::ops::DerefMut for ZeroedBox<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as `deref`; `&mut self` makes this the only reference.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T: ZeroValid> Drop for ZeroedBox<T> {
    fn drop(&mut self) {
        // SAFETY: the `T` is valid and dropped once, here; then exactly the mapping `map`
        // made is unmapped, and nothing refers to it any more (`&mut self`).
        unsafe {
            core::ptr::drop_in_place(self.ptr.as_ptr());
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

impl<T: ZeroValid> core::fmt::Debug for ZeroedBox<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "ZeroedBox<{}>({:p})",
            core::any::type_name::<T>(),
            self.ptr
        )
    }
}
