//! Host memory for VIRTUAL tensors (spec §7.1): the integrator's [`HostMem`] provider trait
//! and two heap-free providers over a fixed byte array, for `no_std` integrators.
//!
//! * [`ArenaHostMem`] places blocks with the core's own [`crate::carve::Carve`] (TLSF, node
//!   table outside the bytes, generation-checked ids): the default.
//! * `HeapHostMem` (feature `heap-host-mem`) places them with `linked_list_allocator::Heap`,
//!   kept as the measured peer: see the figures beside [`ArenaHostMem`] and
//!   `docs/PERFORMANCE.md`.
//!
//! Both hold their allocator in the lock that guards it ([`crate::sync::DataLock`]) and put a
//! 64-byte header in front of every block, in the bytes they hand out ranges of
//! (`HostBytes`, the one place that turns a placed range into a pointer). Both refuse a free
//! of a pointer that is not a live block of theirs (a double free, a foreign pointer): the
//! carve by its id's generation, the heap by its live-block bitmap.
//!
//! This is a mechanism module: the raw byte ranges it hands out are the one thing here that
//! needs `unsafe`, and `tensor` (which only calls [`HostMem`]) stays `deny(unsafe_code)`.

#[cfg(feature = "heap-host-mem")]
use core::alloc::Layout;
use core::cell::UnsafeCell;
use core::ptr::NonNull;

use crate::carve::{Carve, CarveId};
use crate::sync::DataLock;

/// Plain host memory for VIRTUAL tensors (malloc in the std shim, a static pool in firmware;
/// spec §7.1 `NRT_TENSOR_PLACEMENT_VIRTUAL`).
pub trait HostMem: Sync {
    /// `size` bytes aligned to 64, zeroed; `None` when exhausted.
    fn alloc(&self, size: usize) -> Option<NonNull<u8>>;
    /// Returns memory from [`HostMem::alloc`].
    ///
    /// # Safety
    /// `p` came from `alloc(size)` of this provider and is not used afterwards.
    unsafe fn free(&self, p: NonNull<u8>, size: usize);
}

/// Bytes in front of every block of the pools here: what frees it (the carve id, or the
/// heap layout's size). 64, so the body keeps the block's 64-byte alignment.
const HDR: usize = 64;

/// Alignment of every block and body (the [`HostMem`] promise).
const ALIGN: usize = 64;

/// The byte array a pool hands out ranges of: shared between the pool (which writes a
/// block's header and zeroes it, under the pool's lock) and the tensors (which own a block's
/// body until it is freed). Valid when all-zero.
#[repr(C, align(64))]
struct HostBytes<const N: usize>(UnsafeCell<[u8; N]>);

// SAFETY: the array is only written through [`HostBytes::hand_out`] (a range the pool's
// allocator has just placed for the caller alone, under the pool's lock), through the block
// bodies handed out (each owned by one tensor storage until it is freed: disjoint ranges) and
// through [`HostBytes::header`] reads of a block being freed (the `HostMem::free` contract:
// the block is the caller's and no longer used). No two threads reach one byte unsynchronised.
unsafe impl<const N: usize> Sync for HostBytes<N> {}

impl<const N: usize> HostBytes<N> {
    const fn new() -> Self {
        HostBytes(UnsafeCell::new([0; N]))
    }

    fn base(&self) -> *mut u8 {
        self.0.get().cast()
    }

    /// Zeroes block `[at, at + len)` of the array, writes `word` in its header and returns its
    /// body (`at + HDR`); `None` (nothing written) for a range that is not inside the array,
    /// not 64-aligned or shorter than a header.
    ///
    /// # Safety
    /// The range was placed for the caller by the pool's allocator (under the pool's lock) and
    /// nobody else reaches it until it is freed.
    unsafe fn hand_out(&self, at: usize, len: usize, word: u64) -> Option<NonNull<u8>> {
        if len < HDR || !at.is_multiple_of(ALIGN) || at.checked_add(len)? > N {
            return None;
        }
        // SAFETY: `[at, at + len)` lies inside the array (checked above), which lives as long
        // as `self`; the caller's contract makes it ours alone, so the writes race nothing.
        // The header word is 8-aligned: the array is 64-aligned and so is `at`.
        unsafe {
            let p = self.base().add(at);
            core::ptr::write_bytes(p, 0, len);
            p.cast::<u64>().write(word);
            NonNull::new(p.add(HDR))
        }
    }

    /// The array offset of the block whose body is `p`: `None` for a pointer whose block
    /// would not start inside the array on a 64-byte boundary (address arithmetic only).
    fn block_of(&self, p: NonNull<u8>) -> Option<usize> {
        let at = (p.as_ptr() as usize)
            .checked_sub(self.base() as usize)?
            .checked_sub(HDR)?;
        (at.is_multiple_of(ALIGN) && at + HDR <= N).then_some(at)
    }

    /// The header word of block `at` ([`Self::block_of`]).
    ///
    /// # Safety
    /// `at` is a block the caller is freeing: handed out by [`Self::hand_out`] and, by the
    /// `HostMem::free` contract, no longer used by anyone, so nothing writes its header now.
    unsafe fn header(&self, at: usize) -> u64 {
        debug_assert!(at.is_multiple_of(ALIGN) && at + 8 <= N);
        // SAFETY: in bounds and 8-aligned (what `block_of` checked); the contract above
        // excludes a concurrent write.
        unsafe { self.base().add(at).cast::<u64>().read() }
    }
}

/// A heap-free [`HostMem`] for `no_std` integrators: VIRTUAL tensor bytes carved out of a
/// fixed byte array (`BYTES`), placed by the same [`crate::carve::Carve`] allocator the sim
/// uses (`NODES` blocks of metadata, kept out of the byte array). Valid when all-zero, so it
/// can be a `static`; it initialises itself on first use. A free of a pointer that is not a
/// live block (a double free, a foreign or stale pointer) changes nothing: the header's carve
/// id is generation-checked.
///
/// The default over `HeapHostMem` (feature `heap-host-mem`), by measurement:
/// `./target/release/nrt-bench --host-mem --json` (both pools through `HostMem`, repetitions
/// alternating, medians of CPU time; 5 runs on a busy shared 2-core machine, load ≈ 9): on
/// the VIRTUAL tensor mix the heap took 1.26–1.34× the carve's time per alloc or free
/// (carve 213–301 ns, heap 278–384 ns, zeroing included), and on 64 B–4 KiB tensors 1.95–2.07×
/// (carve 44–57 ns, heap 92–114 ns). A first-fit hole list walks every hole in front of the
/// fit, which long-lived tensors among short-lived ones keep long; the carve's TLSF index
/// finds a fit in constant time. See docs/PERFORMANCE.md.
#[repr(C)]
pub struct ArenaHostMem<const BYTES: usize, const NODES: usize> {
    carve: DataLock<Carve<NODES>>,
    bytes: HostBytes<BYTES>,
}

// SAFETY: all members are zero-valid: an unlocked `DataLock` (all-zero, checked in `sync`)
// around a not-yet-initialised carve (the carve's own `ZeroValid`: it checks
// `is_initialized`), and bytes.
unsafe impl<const BYTES: usize, const NODES: usize> crate::abi::meta::ZeroValid
    for ArenaHostMem<BYTES, NODES>
{
}

impl<const BYTES: usize, const NODES: usize> ArenaHostMem<BYTES, NODES> {
    /// An empty pool (usable as a `static` initialiser).
    pub const fn new() -> Self {
        ArenaHostMem {
            carve: DataLock::new(Carve::new()),
            bytes: HostBytes::new(),
        }
    }

    /// Bytes still free.
    pub fn free_bytes(&self) -> u64 {
        let c = self.carve.lock();
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
        let want = size.checked_add(HDR)? as u64;
        let mut c = self.carve.lock();
        if !c.is_initialized() {
            c.init(0, BYTES as u64 & !(ALIGN as u64 - 1), ALIGN as u64)
                .ok()?;
        }
        let b = c.alloc(want, ALIGN as u64).ok()?;
        // SAFETY: the carve spans `[0, BYTES)` of the array and has just placed
        // `[b.addr, b.addr + want)` for this call alone (it hands out disjoint live ranges,
        // and its state is ours under the lock `c` holds).
        let p = unsafe {
            self.bytes
                .hand_out(b.addr as usize, want as usize, b.id.raw())
        };
        if p.is_none() {
            // Cannot happen (the carve only places ranges inside itself); give it back.
            let _ = c.free(b.id);
        }
        p
    }

    unsafe fn free(&self, p: NonNull<u8>, _size: usize) {
        let Some(at) = self.bytes.block_of(p) else {
            return; // not ours: ignore rather than corrupt
        };
        let mut c = self.carve.lock();
        // SAFETY: the `HostMem::free` contract: `p` came from `alloc`, so `at` is its block,
        // which nobody uses any more.
        let raw = unsafe { self.bytes.header(at) };
        // A stale or foreign id is refused by the carve's generation check; an id of another
        // live block (a header the caller overwrote) is refused by the address check.
        if let Some(id) = CarveId::from_raw(raw) {
            if c.lookup(id).is_ok_and(|b| b.addr == at as u64) {
                let _ = c.free(id);
            }
        }
    }
}

#[cfg(feature = "heap-host-mem")]
/// [`HostMem`] over `linked_list_allocator::Heap`, the measured peer: the same
/// fixed byte array and 64-byte header as [`ArenaHostMem`], placed first-fit by the crate's
/// hole list. The first `BYTES / 512` bytes (rounded up to 64) hold a bitmap of live block
/// starts (one bit per 64-byte unit), which is what refuses a double or foreign free: the
/// hole list itself would accept one and corrupt. Valid as a `static`; it initialises itself
/// on first use.
pub struct HeapHostMem<const BYTES: usize> {
    heap: DataLock<HeapState>,
    bytes: HostBytes<BYTES>,
}

#[cfg(feature = "heap-host-mem")]
/// [`HeapHostMem`]'s heap under its lock, with the live-block bitmap that lock guards.
struct HeapLocked<'g> {
    state: lock_api::MutexGuard<'g, crate::sync::RawSpin, HeapState>,
    map: &'g mut [u8],
}

#[cfg(feature = "heap-host-mem")]
struct HeapState {
    heap: linked_list_allocator::Heap,
    /// Offset of the heap's first byte in the array (after the bitmap); 0 before `init`.
    heap_at: usize,
}

#[cfg(feature = "heap-host-mem")]
impl<const BYTES: usize> HeapHostMem<BYTES> {
    /// Bitmap bytes: one bit per 64-byte unit of the array, rounded up to 64 bytes.
    const MAP: usize = (BYTES / ALIGN).div_ceil(8).next_multiple_of(ALIGN);

    /// An empty pool (usable as a `static` initialiser).
    pub const fn new() -> Self {
        HeapHostMem {
            heap: DataLock::new(HeapState {
                heap: linked_list_allocator::Heap::empty(),
                heap_at: 0,
            }),
            bytes: HostBytes::new(),
        }
    }

    /// Bytes still free.
    pub fn free_bytes(&self) -> u64 {
        let h = self.heap.lock();
        if h.heap_at == 0 {
            BYTES.saturating_sub(Self::MAP) as u64
        } else {
            h.heap.free() as u64
        }
    }

    /// The heap with its lock held, and the live bitmap: the bitmap bytes are reached only
    /// through a [`HeapLocked`], made only here with the lock taken, so only under that lock.
    fn lock(&self) -> HeapLocked<'_> {
        let state = self.heap.lock();
        // SAFETY: `[0, MAP)` of the array is never inside the heap (which starts at `MAP`,
        // `init`) nor handed out, so nothing but a `HeapLocked` reaches it; one exists only
        // while `self.heap`'s lock is held (it holds the guard beside the borrow, and this
        // module never splits the two), so two of these borrows never overlap.
        let map =
            unsafe { core::slice::from_raw_parts_mut(self.bytes.base(), Self::MAP.min(BYTES)) };
        HeapLocked { state, map }
    }

    fn init(&self, h: &mut HeapState) -> Option<()> {
        if h.heap_at != 0 {
            return Some(());
        }
        let len = BYTES.checked_sub(Self::MAP)? & !(ALIGN - 1);
        if len < HDR + ALIGN {
            return None;
        }
        // SAFETY: `[MAP, MAP + len)` lies inside the array, which lives as long as `self`
        // (the heap is in `self`), is used by nothing else (never handed out before `init`,
        // the bitmap sits in front of it), and `init` runs once (`heap_at` becomes non-zero).
        unsafe { h.heap.init(self.bytes.base().add(Self::MAP), len) };
        h.heap_at = Self::MAP;
        Some(())
    }
}

#[cfg(feature = "heap-host-mem")]
impl<const BYTES: usize> Default for HeapHostMem<BYTES> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "heap-host-mem")]
impl<const BYTES: usize> HostMem for HeapHostMem<BYTES> {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        let layout = Layout::from_size_align(size.checked_add(HDR)?, ALIGN).ok()?;
        let mut h = self.lock();
        self.init(&mut h.state)?;
        let b = h.state.heap.allocate_first_fit(layout).ok()?;
        let at = (b.as_ptr() as usize).wrapping_sub(self.bytes.base() as usize);
        // SAFETY: the heap spans `[MAP, BYTES)` of the array and has just placed `layout`
        // bytes at `at` for this call alone (disjoint from every live block; its state is
        // ours under the lock `h` holds).
        let p = unsafe { self.bytes.hand_out(at, layout.size(), layout.size() as u64) };
        match p {
            Some(p) => {
                let unit = at / ALIGN;
                h.map[unit / 8] |= 1 << (unit % 8);
                Some(p)
            }
            None => {
                // SAFETY: `b` was placed by this heap with `layout` just now, and never used.
                unsafe { h.state.heap.deallocate(b, layout) };
                None
            }
        }
    }

    unsafe fn free(&self, p: NonNull<u8>, _size: usize) {
        let Some(at) = self.bytes.block_of(p) else {
            return; // not ours: ignore rather than corrupt
        };
        let mut h = self.lock();
        let unit = at / ALIGN;
        if h.map[unit / 8] & (1 << (unit % 8)) == 0 {
            return; // not a live block: a double or foreign free, refused
        }
        h.map[unit / 8] &= !(1 << (unit % 8));
        // SAFETY: the `HostMem::free` contract: `p` came from `alloc`, so `at` is its block
        // (the bitmap confirms a live block starts there), which nobody uses any more.
        let len = unsafe { self.bytes.header(at) } as usize;
        let Ok(layout) = Layout::from_size_align(len, ALIGN) else {
            return;
        };
        // SAFETY: `at` is a live block of this heap (its bit was set by `alloc`, which wrote
        // the layout's size in its header), now cleared, so it is deallocated once with the
        // layout it was allocated with; `block_of` keeps `at` inside the array.
        unsafe {
            let b = NonNull::new_unchecked(self.bytes.base().add(at));
            h.state.heap.deallocate(b, layout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both pools: 64-aligned zeroed blocks, all bytes back after frees, and a double or
    /// foreign free changes nothing (spec §7.1 VIRTUAL tensors).
    fn pool_contract(m: &dyn HostMem, free_bytes: &dyn Fn() -> u64) {
        let before = free_bytes();
        let a = m.alloc(100).unwrap();
        let b = m.alloc(4000).unwrap();
        assert_eq!(a.as_ptr() as usize % 64, 0);
        assert_eq!(b.as_ptr() as usize % 64, 0);
        // SAFETY: `a` holds 100 bytes from `alloc(100)`.
        let bytes = unsafe { core::slice::from_raw_parts_mut(a.as_ptr(), 100) };
        assert!(bytes.iter().all(|&x| x == 0), "zeroed");
        bytes.fill(0xab);
        // SAFETY: from `alloc(100)`, not used afterwards.
        unsafe { m.free(a, 100) };
        let after_one = free_bytes();
        // A second free of `a` (a double free) and a pointer that is no block are refused.
        // SAFETY: the pools check both; this is what the test proves.
        unsafe { m.free(a, 100) };
        // SAFETY: as above: inside the pool, but not a block start.
        unsafe { m.free(NonNull::new(b.as_ptr().wrapping_add(64)).unwrap(), 1) };
        assert_eq!(free_bytes(), after_one, "a refused free changes nothing");
        // Reuse comes back zeroed.
        let c = m.alloc(100).unwrap();
        // SAFETY: 100 bytes from `alloc(100)`.
        assert!(unsafe { core::slice::from_raw_parts(c.as_ptr(), 100) }
            .iter()
            .all(|&x| x == 0));
        // SAFETY: from `alloc`, not used afterwards.
        unsafe {
            m.free(c, 100);
            m.free(b, 4000);
        }
        assert_eq!(free_bytes(), before, "every byte back");
        assert!(m.alloc(1 << 20).is_none(), "larger than the pool");
    }

    #[test]
    fn carve_pool_keeps_the_host_mem_contract() {
        static P: ArenaHostMem<{ 64 << 10 }, 16> = ArenaHostMem::new();
        pool_contract(&P, &|| P.free_bytes());
    }

    #[cfg(feature = "heap-host-mem")]
    #[test]
    fn heap_pool_keeps_the_host_mem_contract() {
        static P: HeapHostMem<{ 64 << 10 }> = HeapHostMem::new();
        pool_contract(&P, &|| P.free_bytes());
    }
}
