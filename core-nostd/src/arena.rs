//! Static slab pools: where every `dmem_t`, `model_t`, tensor, ref node and hint string of the
//! core comes from (no heap; ARCHITECTURE.md "arena").
//!
//! An [`Arena`] is valid when all-zero, so it lives in `.bss` or a zeroed allocation and costs
//! nothing until a slot is touched. A full arena is its own error ([`ArenaFull`]), distinct from
//! device out-of-memory. Freeing checks ownership and liveness, so a double free or a foreign
//! pointer is reported instead of corrupting the pool.

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::abi::meta::ZeroValid;
use crate::abi::nrt_mutex_t;

/// The arena had no free slot.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ArenaFull {
    /// Which arena (for the message).
    pub arena: &'static str,
    /// Its capacity.
    pub capacity: usize,
}

/// Why a slot could not be released.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ReleaseError {
    /// The pointer is not a slot of this arena.
    Foreign,
    /// The slot is not live (already freed, or never handed out).
    NotLive,
}

/// How a slot goes back to its arena: [`Arena::release`] when its pointer was given out (it
/// waits out the quarantine), [`Arena::cancel`] when a failed call is undoing what nobody else
/// saw (a rolled-back model load's heaps, a failed staging's copies).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GiveBack {
    /// Through the quarantine.
    Release,
    /// Straight back, as if never handed out.
    Cancel,
}

/// How many releases a freed slot waits before it can be handed out again. Callers name
/// slots by bare pointer, so a slot that is reused at once makes a stale pointer (a second
/// free, a use after free) alias the new occupant and pass every liveness check. The
/// quarantine keeps the last `QUARANTINE` freed slots out of circulation, so such a pointer
/// is reported (`NotLive`) unless that many other slots were freed in between. 64 slots keep
/// the reuse footprint small: 12 KiB of `dmem_t`s.
pub const QUARANTINE: usize = 64;

/// Where the next arena to come into use starts handing out never-used slots. A new state
/// block often lands at the address of the one just freed (a runtime closed and initialised
/// again); if its arenas started at slot 0 too, a pointer kept from the old runtime would name
/// the new runtime's first allocations. Each arena instance starts somewhere else instead
/// (golden-ratio steps, so consecutive instances are far apart for any `N`).
static FRESH_START: AtomicU32 = AtomicU32::new(0);

/// The step between consecutive arenas' fresh starts (2^32 / φ, odd).
const FRESH_STEP: u32 = 0x9E37_79B9;

/// A pool of `N` zero-initialised `T` slots. A freed slot goes through a quarantine of
/// [`QUARANTINE`] releases before it is reused (most recently aged first, for locality).
#[repr(C)]
pub struct Arena<T, const N: usize> {
    lock: nrt_mutex_t,
    /// Slots handed out at least once (fresh slots are taken from here first).
    bump: UnsafeCell<u32>,
    /// Index of the first fresh slot (fresh slots go `fresh_start`, `fresh_start + 1`, … mod
    /// `N`), drawn from [`FRESH_START`] at the arena's first allocation.
    fresh_start: UnsafeCell<u32>,
    /// Number of indices on the free stack.
    free_top: UnsafeCell<u32>,
    /// Live slots right now.
    live_count: UnsafeCell<u32>,
    /// High-water mark of live slots.
    peak: UnsafeCell<u32>,
    /// Slot index + 1 of the last `alloc` when that alloc raised `peak` (0 otherwise), so
    /// [`Arena::cancel`] of that slot can lower it again.
    peak_raiser: UnsafeCell<u32>,
    /// Oldest entry of the quarantine ring.
    quarantine_head: UnsafeCell<u32>,
    /// Entries in the quarantine ring.
    quarantine_len: UnsafeCell<u32>,
    /// Slots freed by the last [`QUARANTINE`] releases, oldest first from `quarantine_head`.
    quarantine: UnsafeCell<[u32; QUARANTINE]>,
    /// Freed slots past their quarantine, most recently aged on top.
    free: UnsafeCell<[u32; N]>,
    /// 1 while a slot is handed out; written under `lock`, read lock-free by `is_live`.
    live: [AtomicU8; N],
    slots: [UnsafeCell<T>; N],
}

// SAFETY: slot hand-out is serialised by `lock`; a slot's contents are only reached through
// the pointer returned by `alloc`, whose users synchronise among themselves.
unsafe impl<T: Send, const N: usize> Sync for Arena<T, N> {}
// SAFETY: as above; the arena owns plain data.
unsafe impl<T: Send, const N: usize> Send for Arena<T, N> {}
// SAFETY: every member is zero-valid: a zero lock is unlocked, zero counters mean "empty",
// and the slots hold `T: ZeroValid`.
unsafe impl<T: ZeroValid, const N: usize> ZeroValid for Arena<T, N> {}

/// Statistics of an arena.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ArenaStats {
    /// Capacity in slots.
    pub capacity: usize,
    /// Live slots.
    pub live: usize,
    /// High-water mark.
    pub peak: usize,
    /// Bytes the arena occupies.
    pub bytes: usize,
}

/// A slot type named by generation-checked handles ([`crate::handle`]): resolvers on other
/// threads read its generation and reference words at any time, atomically and without a
/// pin, so the arena's allocation must never write those bytes non-atomically
/// ([`Arena::alloc_handle`] zeroes the rest of the slot and leaves them alone).
///
/// # Safety
/// `GEN` is the offset of a `u32` (4-aligned) and `REFS` the offset of an `AtomicU64` inside
/// `T`, both in bounds and not overlapping, and every access to either, by anyone, is atomic.
pub unsafe trait Generational: ZeroValid {
    /// Offset of the generation word.
    const GEN: usize;
    /// Offset of the reference word.
    const REFS: usize;
}

// SAFETY: `generation` is a u32 at offset 68 and `ref_count` an AtomicU64 at 128 (pinned by
// the layout asserts of `abi::types`); the core reaches `generation` only through
// `Arena::words` (atomically) and `ref_count` only as the atomic it is.
unsafe impl Generational for crate::abi::dmem_t {
    const GEN: usize = core::mem::offset_of!(crate::abi::dmem_t, generation);
    const REFS: usize = core::mem::offset_of!(crate::abi::dmem_t, ref_count);
}

// SAFETY: as for `dmem_t`: `generation` u32 @44, `ref_count` AtomicU64 @64, reached only
// atomically.
unsafe impl Generational for crate::abi::nrt_tensor_t {
    const GEN: usize = core::mem::offset_of!(crate::abi::nrt_tensor_t, generation);
    const REFS: usize = core::mem::offset_of!(crate::abi::nrt_tensor_t, ref_count);
}

impl<T: Generational, const N: usize> Arena<T, N> {
    /// The generation and reference words of slot `p` (a slot of this arena, live or not).
    ///
    /// # Safety
    /// `p` points at a slot of this arena (as `index_of` or `slot` confirm).
    #[inline]
    pub(crate) unsafe fn words(&self, p: *const T) -> (&AtomicU32, &AtomicU64) {
        // SAFETY: per the trait contract both offsets are in bounds and aligned for their
        // atomic types, and every access to those bytes is atomic, so viewing them as
        // atomics is sound; the slot lives as long as the arena `self` borrows.
        unsafe {
            (
                AtomicU32::from_ptr((p as *mut u8).add(T::GEN) as *mut u32),
                &*((p as *const u8).add(T::REFS) as *const AtomicU64),
            )
        }
    }

    /// Like [`Arena::alloc_fresh_first`] (or [`Arena::alloc`] when `fresh_first` is false),
    /// for handle-named slots: zeroes every byte of the slot except its generation and
    /// reference words, which concurrent resolvers may be loading, and which are free-state
    /// values already (an even generation, a zero word). Returns the slot and its index.
    pub fn alloc_handle(
        &self,
        name: &'static str,
        fresh_first: bool,
    ) -> Result<(NonNull<T>, u32), ArenaFull> {
        let (p, idx) = self.take_slot(name, fresh_first)?;
        let base = p as *mut u8;
        let (lo, hi) = if T::GEN < T::REFS {
            ((T::GEN, 4), (T::REFS, 8))
        } else {
            ((T::REFS, 8), (T::GEN, 4))
        };
        // SAFETY: the slot is not live (it was free or fresh), so nobody else references its
        // other bytes; the three spans are in bounds (trait contract) and skip exactly the
        // two atomic words; zero bytes there are valid (T: ZeroValid).
        unsafe {
            core::ptr::write_bytes(base, 0, lo.0);
            core::ptr::write_bytes(base.add(lo.0 + lo.1), 0, hi.0 - (lo.0 + lo.1));
            let end = hi.0 + hi.1;
            core::ptr::write_bytes(base.add(end), 0, core::mem::size_of::<T>() - end);
        }
        self.live[idx].store(1, Ordering::Release);
        // SAFETY: UnsafeCell::get never returns null.
        Ok((unsafe { NonNull::new_unchecked(p) }, idx as u32))
    }

    /// The slot at `index` (live or not), or `None` past the arena.
    #[inline]
    pub(crate) fn slot(&self, index: u32) -> Option<*mut T> {
        self.slots.get(index as usize).map(|s| s.get())
    }
}

impl<T: ZeroValid, const N: usize> Arena<T, N> {
    /// Bytes one arena occupies (for footprint reports).
    pub const BYTES: usize = core::mem::size_of::<Self>();

    /// Takes a zeroed slot (most recently freed first: keeps the touched footprint small).
    pub fn alloc(&self, name: &'static str) -> Result<NonNull<T>, ArenaFull> {
        self.alloc_impl(name, false)
    }

    /// Takes a zeroed slot, preferring never-used slots over freed ones, so a stale pointer to
    /// a freed slot stays detectably dead for as long as possible (caller-visible handles).
    pub fn alloc_fresh_first(&self, name: &'static str) -> Result<NonNull<T>, ArenaFull> {
        self.alloc_impl(name, true)
    }

    fn alloc_impl(&self, name: &'static str, fresh_first: bool) -> Result<NonNull<T>, ArenaFull> {
        let (p, idx) = self.take_slot(name, fresh_first)?;
        // SAFETY: the slot is not live (it was free or fresh), so nobody else references it;
        // zero bytes are a valid T (T: ZeroValid).
        unsafe { core::ptr::write_bytes(p, 0, 1) };
        // Published after the zeroing: whoever sees it live sees a zeroed slot.
        self.live[idx].store(1, Ordering::Release);
        // SAFETY: UnsafeCell::get never returns null.
        Ok(unsafe { NonNull::new_unchecked(p) })
    }

    /// Takes a free slot off the books (not yet zeroed, not yet marked live).
    #[inline]
    fn take_slot(
        &self,
        name: &'static str,
        fresh_first: bool,
    ) -> Result<(*mut T, usize), ArenaFull> {
        let _g = self.lock.lock();
        // SAFETY: the counters and stacks are only touched with `lock` held.
        let (bump, fresh_start, top, live_count, q_head, q_len) = unsafe {
            (
                &mut *self.bump.get(),
                &mut *self.fresh_start.get(),
                &mut *self.free_top.get(),
                &mut *self.live_count.get(),
                &mut *self.quarantine_head.get(),
                &mut *self.quarantine_len.get(),
            )
        };
        if *bump == 0 {
            // The counter's value as a fraction of 2^32, scaled to N: consecutive arenas land
            // about N / φ apart whatever N is (taking the low bits instead would step by
            // FRESH_STEP mod N, only 57 for a 128-slot arena).
            let x = FRESH_START.fetch_add(FRESH_STEP, Ordering::Relaxed);
            *fresh_start = ((u64::from(x) * N as u64) >> 32) as u32;
        }
        let fresh_left = (*bump as usize) < N;
        let idx = if fresh_left && (fresh_first || *top == 0) {
            *bump += 1;
            (*fresh_start as usize + *bump as usize - 1) % N
        } else if *top > 0 {
            *top -= 1;
            // SAFETY: lock held (see above).
            unsafe { (*self.free.get())[*top as usize] as usize }
        } else {
            // Every other slot is live: the oldest quarantined one, rather than a false "full".
            // SAFETY: lock held (see above).
            let ring = unsafe { &*self.quarantine.get() };
            match ring_pop_oldest(ring, q_head, q_len) {
                Some(i) => i as usize,
                None => {
                    return Err(ArenaFull {
                        arena: name,
                        capacity: N,
                    })
                }
            }
        };
        *live_count += 1;
        // SAFETY: lock held (see above).
        unsafe {
            let (peak, raiser) = (&mut *self.peak.get(), &mut *self.peak_raiser.get());
            *raiser = 0;
            if *live_count > *peak {
                *peak = *live_count;
                *raiser = idx as u32 + 1;
            }
        }
        Ok((self.slots[idx].get(), idx))
    }

    /// The slot index of `p`, when it points at a slot of this arena (live or not).
    pub(crate) fn index_of(&self, p: *const T) -> Option<usize> {
        let base = self.slots.as_ptr() as usize;
        let addr = p as usize;
        let sz = core::mem::size_of::<UnsafeCell<T>>().max(1);
        if addr < base || addr >= base + N * sz || !(addr - base).is_multiple_of(sz) {
            return None;
        }
        Some((addr - base) / sz)
    }

    /// The entry of a per-slot side table (`table[i]` for slot `i`) that belongs to `p`: for
    /// state that has no room in `T`'s own bytes (a tensor's name text, a model's IO table).
    /// A pointer this arena does not own yields the last entry; callers pass live slots.
    pub(crate) fn side_entry<U>(&self, table: &UnsafeCell<[U; N]>, p: *const T) -> *mut U {
        const { assert!(N > 0, "a side table needs an arena with slots") };
        let i = self.index_of(p).unwrap_or(N - 1);
        // SAFETY: an in-bounds projection of the table (`i < N`); no reference is created.
        unsafe { core::ptr::addr_of_mut!((*table.get())[i]) }
    }

    /// Whether `p` points at a slot of this arena, live or not (no dereference).
    pub fn owns(&self, p: *const T) -> bool {
        self.index_of(p).is_some()
    }

    /// Whether `p` is a live slot of this arena (used to validate pointers from callers).
    pub fn is_live(&self, p: *const T) -> bool {
        match self.index_of(p) {
            Some(i) => self.live[i].load(Ordering::Acquire) == 1,
            None => false,
        }
    }

    /// Returns a slot. The caller must no longer use `p` afterwards.
    pub fn release(&self, p: *const T) -> Result<(), ReleaseError> {
        let i = self.index_of(p).ok_or(ReleaseError::Foreign)?;
        let _g = self.lock.lock();
        // SAFETY: lock held.
        let (top, live_count, q_head, q_len) = unsafe {
            (
                &mut *self.free_top.get(),
                &mut *self.live_count.get(),
                &mut *self.quarantine_head.get(),
                &mut *self.quarantine_len.get(),
            )
        };
        if self.live[i].load(Ordering::Acquire) != 1 {
            return Err(ReleaseError::NotLive);
        }
        self.live[i].store(0, Ordering::Release);
        *live_count -= 1;
        // SAFETY: lock held; the stack and the ring hold distinct free indices, so the stack
        // never exceeds N and the ring never exceeds QUARANTINE.
        unsafe {
            let ring = &mut *self.quarantine.get();
            if *q_len as usize == QUARANTINE {
                // The oldest quarantined slot has waited long enough.
                if let Some(aged) = ring_pop_oldest(ring, q_head, q_len) {
                    (*self.free.get())[*top as usize] = aged;
                    *top += 1;
                }
            }
            ring[(*q_head + *q_len) as usize % QUARANTINE] = i as u32;
            *q_len += 1;
        }
        Ok(())
    }

    /// Undoes the `alloc` that handed out `p`, for a call that fails before anyone else saw
    /// the slot: the slot goes back where it came from (a fresh slot becomes fresh again,
    /// another goes on top of the free stack) without waiting out the quarantine, which only
    /// guards slots whose pointers were given out. The live count, and the peak if that alloc
    /// raised it, are restored, so a failed call leaves the arena as it found it.
    pub fn cancel(&self, p: *const T) -> Result<(), ReleaseError> {
        let i = self.index_of(p).ok_or(ReleaseError::Foreign)?;
        let _g = self.lock.lock();
        if self.live[i].load(Ordering::Acquire) != 1 {
            return Err(ReleaseError::NotLive);
        }
        self.live[i].store(0, Ordering::Release);
        // SAFETY: lock held; the slot is neither fresh, nor on the stack, nor in the ring, so
        // returning it keeps the stack within N entries.
        unsafe {
            let (bump, fresh_start) = (&mut *self.bump.get(), *self.fresh_start.get());
            let newest_fresh = (fresh_start as usize + (*bump as usize).wrapping_sub(1)) % N;
            if *bump > 0 && i == newest_fresh {
                *bump -= 1;
            } else {
                let top = &mut *self.free_top.get();
                (*self.free.get())[*top as usize] = i as u32;
                *top += 1;
            }
            *self.live_count.get() -= 1;
            if *self.peak_raiser.get() == i as u32 + 1 {
                *self.peak.get() -= 1;
                *self.peak_raiser.get() = 0;
            }
        }
        Ok(())
    }

    /// Returns `p` the way `how` says (see [`GiveBack`]).
    pub fn give_back(&self, p: *const T, how: GiveBack) -> Result<(), ReleaseError> {
        match how {
            GiveBack::Release => self.release(p),
            GiveBack::Cancel => self.cancel(p),
        }
    }

    /// Current statistics.
    pub fn stats(&self) -> ArenaStats {
        let _g = self.lock.lock();
        // SAFETY: lock held.
        unsafe {
            ArenaStats {
                capacity: N,
                live: *self.live_count.get() as usize,
                peak: *self.peak.get() as usize,
                bytes: Self::BYTES,
            }
        }
    }

    /// The slots live at the moment each is looked at (lock-free; for sweeps when no other
    /// thread allocates or frees, so the answer cannot go stale under the caller).
    pub fn live_slots(&self) -> impl Iterator<Item = NonNull<T>> + '_ {
        self.live
            .iter()
            .zip(&self.slots)
            .filter(|(l, _)| l.load(Ordering::Acquire) == 1)
            // SAFETY: UnsafeCell::get never returns null.
            .map(|(_, s)| unsafe { NonNull::new_unchecked(s.get()) })
    }

    /// Calls `f` on every live slot (under the arena lock; `f` must not call back into it).
    pub fn for_each_live(&self, mut f: impl FnMut(NonNull<T>)) {
        let _g = self.lock.lock();
        for (i, l) in self.live.iter().enumerate() {
            if l.load(Ordering::Acquire) == 1 {
                // SAFETY: UnsafeCell::get never returns null.
                f(unsafe { NonNull::new_unchecked(self.slots[i].get()) });
            }
        }
    }
}

/// Takes the oldest entry of a quarantine ring (`head`, `len` as the arena keeps them).
fn ring_pop_oldest(ring: &[u32; QUARANTINE], head: &mut u32, len: &mut u32) -> Option<u32> {
    if *len == 0 {
        return None;
    }
    let i = ring[*head as usize];
    *head = (*head + 1) % QUARANTINE as u32;
    *len -= 1;
    Some(i)
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::boxed::Box;

    fn arena<const N: usize>() -> Box<Arena<u64, N>> {
        // SAFETY: Arena<u64, N> is ZeroValid.
        unsafe { Box::<Arena<u64, N>>::new_zeroed().assume_init() }
    }

    #[test]
    fn full_double_free_and_foreign_are_errors() {
        let a = arena::<2>();
        let p = a.alloc("t").unwrap();
        let q = a.alloc("t").unwrap();
        assert_eq!(
            a.alloc("t"),
            Err(ArenaFull {
                arena: "t",
                capacity: 2
            })
        );
        assert_eq!(a.release(p.as_ptr()), Ok(()));
        assert_eq!(a.release(p.as_ptr()), Err(ReleaseError::NotLive));
        let x = 5u64;
        assert_eq!(a.release(&x), Err(ReleaseError::Foreign));
        assert!(a.is_live(q.as_ptr()));
        assert!(!a.is_live(p.as_ptr()));
        let r = a.alloc("t").unwrap();
        assert_eq!(
            r, p,
            "with every other slot live, the quarantined slot is reused"
        );
        assert_eq!(a.stats().live, 2);
        assert_eq!(a.stats().peak, 2);
    }

    #[test]
    fn a_new_arena_starts_handing_out_elsewhere() {
        // Two arenas in turn, as two runtimes' state blocks at one address would be: the
        // second one's first slots are not the first one's.
        let first_four = |a: &Arena<u64, 8192>| -> std::vec::Vec<usize> {
            (0..4)
                .map(|_| {
                    a.index_of(a.alloc_fresh_first("t").unwrap().as_ptr())
                        .unwrap()
                })
                .collect()
        };
        let a = arena::<8192>();
        let first_a = first_four(&a);
        let b = arena::<8192>();
        let first_b = first_four(&b);
        assert!(
            first_a.iter().all(|i| !first_b.contains(i)),
            "{first_a:?} {first_b:?}"
        );
        // Fresh slots are still consecutive (mod N), and every one is reachable.
        let c = arena::<4>();
        let mut got: std::vec::Vec<usize> = (0..4)
            .map(|_| c.index_of(c.alloc("t").unwrap().as_ptr()).unwrap())
            .collect();
        got.sort();
        assert_eq!(got, [0, 1, 2, 3]);
    }

    #[test]
    fn a_freed_slot_waits_out_the_quarantine() {
        let a = arena::<256>();
        let p = a.alloc("t").unwrap().as_ptr();
        a.release(p).unwrap();
        // A stale pointer stays detectably dead while others come and go…
        for _ in 0..QUARANTINE - 1 {
            let q = a.alloc("t").unwrap().as_ptr();
            assert_ne!(q, p);
            assert!(!a.is_live(p));
            a.release(q).unwrap();
        }
        assert_eq!(a.release(p), Err(ReleaseError::NotLive));
        // …and after QUARANTINE releases the slot is back, most recently aged first.
        let q = a.alloc("t").unwrap().as_ptr();
        a.release(q).unwrap();
        assert_eq!(a.alloc("t").unwrap().as_ptr(), p);
    }

    #[test]
    fn a_cancelled_alloc_leaves_the_arena_as_it_was() {
        let a = arena::<256>();
        let kept = a.alloc("t").unwrap().as_ptr();
        let stale = a.alloc("t").unwrap().as_ptr();
        a.release(stale).unwrap();
        let before = a.stats();
        // Many failed calls in a row: each cancels its slot. None of them goes through the
        // quarantine, so the stale pointer stays detectably dead however many there are.
        for _ in 0..4 * QUARANTINE {
            let p = a.alloc("t").unwrap().as_ptr();
            assert_ne!(p, stale);
            assert_eq!(a.cancel(p), Ok(()));
            assert!(!a.is_live(p));
            assert_eq!(a.stats(), before, "live count and peak restored");
        }
        assert_eq!(a.release(stale), Err(ReleaseError::NotLive));
        // A fresh slot becomes fresh again: the next alloc gets the same one.
        let p = a.alloc("t").unwrap().as_ptr();
        a.cancel(p).unwrap();
        assert_eq!(a.alloc("t").unwrap().as_ptr(), p);
        // A slot from the free stack goes back on top of it.
        let b = arena::<256>();
        let x = b.alloc("t").unwrap().as_ptr();
        b.release(x).unwrap();
        for _ in 0..QUARANTINE {
            let q = b.alloc("t").unwrap().as_ptr();
            b.release(q).unwrap();
        }
        let peak = b.stats().peak;
        assert_eq!(b.alloc("t").unwrap().as_ptr(), x, "aged out onto the stack");
        b.cancel(x).unwrap();
        assert_eq!(
            b.alloc("t").unwrap().as_ptr(),
            x,
            "back on top of the stack"
        );
        assert_eq!(b.stats().peak, peak);
        // A slot that is not live, or not ours, is refused.
        assert_eq!(a.cancel(kept), Ok(()));
        assert_eq!(a.cancel(kept), Err(ReleaseError::NotLive));
        assert_eq!(a.cancel(&5u64), Err(ReleaseError::Foreign));
    }

    #[test]
    fn alloc_handle_zeroes_all_but_the_resolver_words() {
        use crate::abi::dmem_t;
        // One slot, so the second allocation is the first one's slot again.
        // SAFETY: Arena<dmem_t, 1> is ZeroValid.
        let a = unsafe { Box::<Arena<dmem_t, 1>>::new_zeroed().assume_init() };
        let (p, i) = a.alloc_handle("d", false).unwrap();
        let p = p.as_ptr();
        // SAFETY: a slot of `a`.
        let (gen, refs) = unsafe { a.words(p) };
        gen.store(0x1234_5677, Ordering::Relaxed);
        refs.store(0xdead_beef_0000_0000, Ordering::Relaxed);
        // SAFETY: the slot is ours; every byte but the two words is plain data.
        unsafe {
            let b = p as *mut u8;
            for off in (0..core::mem::size_of::<dmem_t>()).filter(|o| {
                !(<dmem_t as Generational>::GEN..<dmem_t as Generational>::GEN + 4).contains(o)
                    && !(<dmem_t as Generational>::REFS..<dmem_t as Generational>::REFS + 8)
                        .contains(o)
            }) {
                b.add(off).write(0xa5);
            }
        }
        a.cancel(p).unwrap();
        let (q, j) = a.alloc_handle("d", false).unwrap();
        assert_eq!((q.as_ptr(), j), (p, i), "the same slot again");
        assert_eq!(gen.load(Ordering::Relaxed), 0x1234_5677, "generation kept");
        assert_eq!(
            refs.load(Ordering::Relaxed),
            0xdead_beef_0000_0000,
            "word kept"
        );
        // SAFETY: the slot is ours.
        let bytes = unsafe {
            core::slice::from_raw_parts(q.as_ptr() as *const u8, core::mem::size_of::<dmem_t>())
        };
        let nonzero = bytes.iter().filter(|b| **b != 0).count();
        assert_eq!(
            nonzero,
            4 + 4,
            "only the two words' own non-zero bytes remain"
        );
    }

    #[test]
    fn every_slot_is_usable_whatever_the_quarantine_holds() {
        let a = arena::<8>();
        for round in 0..50 {
            let ps: std::vec::Vec<_> = (0..8).map(|_| a.alloc("t").unwrap().as_ptr()).collect();
            assert!(a.alloc("t").is_err(), "round {round}: 9th slot");
            let mut sorted = ps.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), 8, "round {round}: a slot handed out twice");
            for p in ps.iter().take(1 + round % 8) {
                a.release(*p).unwrap();
            }
            for p in ps.iter().skip(1 + round % 8) {
                a.release(*p).unwrap();
            }
            assert_eq!(a.stats().live, 0);
        }
    }
}
