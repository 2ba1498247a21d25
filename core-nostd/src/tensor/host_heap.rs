//! Host memory for VIRTUAL tensors (spec §7.1): the integrator's [`HostMem`] provider and
//! the heap-free [`ArenaHostMem`] over a static byte array.

use core::ptr::NonNull;

use crate::abi::*;

/// Plain host memory for VIRTUAL tensors (malloc in the std shim, a static pool in firmware).
pub trait HostMem: Sync {
    /// `size` bytes aligned to 64, zeroed; `None` when exhausted.
    fn alloc(&self, size: usize) -> Option<NonNull<u8>>;
    /// Returns memory from [`HostMem::alloc`].
    ///
    /// # Safety
    /// `p` came from `alloc(size)` of this provider and is not used afterwards.
    unsafe fn free(&self, p: NonNull<u8>, size: usize);
}

/// A heap-free [`HostMem`] for `no_std` integrators: VIRTUAL tensor bytes carved out of a
/// fixed byte array (`BYTES`), placed by the same [`crate::carve::Carve`] allocator the sim
/// uses (`NODES` blocks of metadata, kept out of the byte array). Valid when all-zero, so it
/// can be a `static`; it initialises itself on first use.
#[repr(C)]
pub struct ArenaHostMem<const BYTES: usize, const NODES: usize> {
    lock: nrt_mutex_t,
    carve: core::cell::UnsafeCell<crate::carve::Carve<NODES>>,
    bytes: core::cell::UnsafeCell<[u8; BYTES]>,
}

// SAFETY: all members are zero-valid: an unlocked lock, a not-yet-initialised carve (it checks
// `is_initialized`), and bytes.
unsafe impl<const BYTES: usize, const NODES: usize> crate::abi::meta::ZeroValid
    for ArenaHostMem<BYTES, NODES>
{
}
// SAFETY: the carve is only touched under `lock`; handed-out byte ranges are disjoint.
unsafe impl<const BYTES: usize, const NODES: usize> Sync for ArenaHostMem<BYTES, NODES> {}

/// Bytes in front of every block: the carve id that frees it.
const ARENA_HDR: usize = 64;

impl<const BYTES: usize, const NODES: usize> ArenaHostMem<BYTES, NODES> {
    /// An empty pool (usable as a `static` initialiser).
    pub const fn new() -> Self {
        ArenaHostMem {
            lock: nrt_mutex_t::new(),
            carve: core::cell::UnsafeCell::new(crate::carve::Carve::new()),
            bytes: core::cell::UnsafeCell::new([0; BYTES]),
        }
    }

    /// Bytes still free.
    pub fn free_bytes(&self) -> u64 {
        let _g = self.lock.lock();
        // SAFETY: carve under lock.
        let c = unsafe { &*self.carve.get() };
        if c.is_initialized() {
            c.free_bytes()
        } else {
            BYTES as u64
        }
    }
}

impl<const BYTES: usize, const NODES: usize> Default for ArenaHostMem<BYTES, NODES> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const BYTES: usize, const NODES: usize> HostMem for ArenaHostMem<BYTES, NODES> {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        let want = size.checked_add(ARENA_HDR)? as u64;
        let _g = self.lock.lock();
        // SAFETY: the carve is only reached under `lock`.
        let c = unsafe { &mut *self.carve.get() };
        if !c.is_initialized() {
            c.init(0, BYTES as u64 & !63, 64).ok()?;
        }
        let b = c.alloc(want, 64).ok()?;
        let base = self.bytes.get() as *mut u8;
        // SAFETY: [b.addr, b.addr + want) lies inside the byte array (carve over 0..BYTES) and
        // is ours alone until freed; the header slot is 8-byte aligned (64-byte blocks).
        unsafe {
            let p = base.add(b.addr as usize);
            core::ptr::write_bytes(p, 0, want as usize);
            (p as *mut u64).write(b.id.raw());
            NonNull::new(p.add(ARENA_HDR))
        }
    }

    unsafe fn free(&self, p: NonNull<u8>, _size: usize) {
        let base = self.bytes.get() as *mut u8 as usize;
        let addr = (p.as_ptr() as usize).wrapping_sub(ARENA_HDR);
        if addr < base || addr >= base + BYTES {
            return; // not ours: ignore rather than corrupt
        }
        let _g = self.lock.lock();
        // SAFETY: caller contract: `p` came from `alloc`, so its header holds the carve id.
        let raw = unsafe { (addr as *const u64).read() };
        if let Some(id) = crate::carve::CarveId::from_raw(raw) {
            // SAFETY: carve under lock; a stale id is refused by its generation check.
            let _ = unsafe { &mut *self.carve.get() }.free(id);
        }
    }
}
