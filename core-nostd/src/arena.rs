//! Slab pools: where every `dmem_t`, `model_t`, tensor, ref node and hint string of the core
//! comes from (no heap; docs/ARCHITECTURE.md, "Inside the core").
//!
//! An [`Arena`] is a header (valid when all-zero: no slots) bound once to zeroed storage the
//! integrator sized ([`crate::config::Capacity`]), so the storage lives in
//! `.bss` or a zeroed allocation and costs nothing until a slot is touched. A full arena is its
//! own error ([`ArenaFull`]), distinct from device out-of-memory, and names the setting that
//! raises it. Freeing checks ownership and liveness, so a double free or a foreign pointer is
//! reported instead of corrupting the pool.
//!
//! # Shards
//!
//! The slots are cut into up to [`MAX_SHARDS`] contiguous shards, each with its own lock and
//! books ([`ShardBooks`]: fresh cursor, free stack, quarantine, live count, peak) on its own
//! cache lines. An allocation names the shard it prefers (the caller's logical or physical
//! core), so calls on different cores take different locks and write different lines; a
//! full shard borrows from the others before the arena reports [`ArenaFull`]. A slot is
//! freed through the shard that owns its index, whoever allocated it. Statistics are summed
//! over the shards (the peak is the sum of the shards' peaks: an upper bound of the arena's
//! true high-water mark, equal to it while one shard is in use).

use crate::atomic::AtomicU64;
use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use crate::abi::meta::ZeroValid;
use crate::sync::DataLock;

pub use crate::error::ArenaFull;

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

/// How many releases a freed slot waits (in its shard) before it can be handed out again.
/// Callers name slots by bare pointer, so a slot that is reused at once makes a stale pointer
/// (a second free, a use after free) alias the new occupant and pass every liveness check.
/// The quarantine keeps the last `QUARANTINE` freed slots of each shard out of circulation,
/// so such a pointer is reported (`NotLive`) unless that many other slots of its shard were
/// freed in between. Handle-named slots do not depend on it (their generation is checked).
pub const QUARANTINE: usize = 64;

pub use crate::config::MAX_SHARDS;

/// Where the next shard to come into use starts handing out never-used slots. A new state
/// block often lands at the address of the one just freed (a runtime closed and initialised
/// again); if its arenas started at slot 0 too, a pointer kept from the old runtime would name
/// the new runtime's first allocations. Each shard instance starts somewhere else instead
/// (golden-ratio steps, so consecutive instances are far apart for any length). Touched once
/// per shard, at its first allocation, never on the per-call path after that.
static FRESH_START: AtomicU32 = AtomicU32::new(0);

/// The step between consecutive shards' fresh starts (2^32 / φ, odd).
const FRESH_STEP: u32 = 0x9E37_79B9;

/// The books of one shard, guarded by the shard's lock (the lock holds them). Public
/// so the loom model (`core-nostd/tests/loom.rs`) drives the very code the arena runs.
#[derive(Debug)]
pub struct ShardBooks {
    /// This shard's free stack (`len` entries of the arena's free-stack storage).
    free: *mut u32,
    /// First slot index of the shard.
    start: u32,
    /// Slots in the shard.
    len: u32,
    /// 1 once `fresh_start` was drawn.
    drawn: u32,
    /// Slots handed out at least once (fresh slots are taken from here first).
    bump: u32,
    /// Offset of the first fresh slot in the shard.
    fresh_start: u32,
    /// Entries on the free stack.
    top: u32,
    /// Live slots right now.
    live: u32,
    /// High-water mark of `live`.
    peak: u32,
    /// Slot index + 1 of the last take when it raised `peak` (0 otherwise), so a cancel of
    /// that slot lowers it again.
    peak_raiser: u32,
    /// Oldest entry of the quarantine ring.
    q_head: u32,
    /// Entries in the quarantine ring.
    q_len: u32,
    /// Slots freed by the last [`QUARANTINE`] releases, oldest first from `q_head`.
    quarantine: [u32; QUARANTINE],
    /// Fresh slots (counted like `bump`) already announced to the arena's [`InUse`] hook
    /// (`len` once known to have none).
    shown: u32,
}

// SAFETY: the only non-Send member is `free`, a pointer into storage that lives as long as
// the arena holding these books; it is reached only through `&mut ShardBooks`, i.e. by the
// holder of the shard lock, from whichever thread that is.
unsafe impl Send for ShardBooks {}
// SAFETY: all-zero is the books of an empty, unbound shard (null stack, no slots).
unsafe impl ZeroValid for ShardBooks {}

impl ShardBooks {
    /// Books of a shard of `len` slots from index `start`, all fresh.
    ///
    /// # Safety
    /// `free` points at `len` writable `u32`s used by nobody else, valid as long as the books.
    pub unsafe fn new(free: *mut u32, start: u32, len: u32) -> Self {
        ShardBooks {
            free,
            start,
            len,
            drawn: 0,
            bump: 0,
            fresh_start: 0,
            top: 0,
            live: 0,
            peak: 0,
            peak_raiser: 0,
            q_head: 0,
            q_len: 0,
            quarantine: [0; QUARANTINE],
            shown: 0,
        }
    }

    /// These books with their fresh cursor fixed at offset `at` (instead of drawn from the
    /// process-wide sequence at the first take): for models that must replay deterministically.
    pub fn with_fresh_start(mut self, at: u32) -> Self {
        self.fresh_start = if self.len == 0 { 0 } else { at % self.len };
        self.drawn = 1;
        self
    }

    /// Whether slot `index` belongs to this shard.
    pub fn owns(&self, index: u32) -> bool {
        index.wrapping_sub(self.start) < self.len
    }

    /// Live slots of the shard.
    pub fn live(&self) -> u32 {
        self.live
    }

    /// Takes a slot off the books: a fresh one (first when `fresh_first`, or when the free
    /// stack is empty), else the most recently aged free one, else — only when `quarantined`
    /// — the oldest quarantined one. `None` when the shard has nothing of that kind.
    #[inline]
    pub fn take(&mut self, fresh_first: bool, quarantined: bool) -> Option<u32> {
        if self.drawn == 0 {
            self.draw();
        }
        self.take_drawn(fresh_first, quarantined)
    }

    /// The slot the shard's next [`Self::take_drawn`] without quarantined slots would hand
    /// out, if any (no change to the books).
    #[inline]
    fn peek_drawn(&self, fresh_first: bool) -> Option<u32> {
        if self.bump < self.len && (fresh_first || self.top == 0) {
            Some(self.start + self.fresh_offset(self.bump))
        } else if self.top > 0 {
            // SAFETY: top - 1 < len, and `free` holds len entries (constructor contract).
            Some(unsafe { *self.free.add(self.top as usize - 1) })
        } else {
            None
        }
    }

    /// [`Self::take`] once the fresh start is drawn.
    #[inline]
    fn take_drawn(&mut self, fresh_first: bool, quarantined: bool) -> Option<u32> {
        let idx = if self.bump < self.len && (fresh_first || self.top == 0) {
            let j = self.bump;
            self.bump = j + 1;
            self.start + self.fresh_offset(j)
        } else if self.top > 0 {
            self.top -= 1;
            // SAFETY: top < len, and `free` holds len entries (constructor contract).
            unsafe { *self.free.add(self.top as usize) }
        } else if quarantined {
            self.pop_oldest()?
        } else {
            return None;
        };
        self.live += 1;
        if self.live > self.peak {
            self.peak = self.live;
            self.peak_raiser = idx + 1;
        } else {
            self.peak_raiser = 0;
        }
        Some(idx)
    }

    /// Draws the shard's fresh start from the process-wide sequence ([`FRESH_START`]): once,
    /// at the shard's first take (an empty shard draws nothing).
    #[cold]
    #[inline(never)]
    fn draw(&mut self) {
        if self.len > 0 {
            // The counter's value as a fraction of 2^32, scaled to the shard: consecutive
            // shards land about len / φ apart whatever len is.
            let x = FRESH_START.fetch_add(FRESH_STEP, Ordering::Relaxed);
            self.fresh_start = ((u64::from(x) * u64::from(self.len)) >> 32) as u32;
            self.drawn = 1;
        }
    }

    /// The offset in the shard of the `j`-th fresh slot, `(fresh_start + j) % len` for
    /// `j < len`: `fresh_start < len`, so one subtraction wraps it.
    #[inline]
    fn fresh_offset(&self, j: u32) -> u32 {
        let o = self.fresh_start + j;
        if o >= self.len {
            o - self.len
        } else {
            o
        }
    }

    /// A live slot of this shard was released: it enters the quarantine (the oldest
    /// quarantined slot moves to the free stack when the ring is full).
    #[inline]
    pub fn put(&mut self, index: u32) {
        self.live -= 1;
        if self.q_len as usize == QUARANTINE {
            // The newest entry takes the oldest one's place, which then heads the ring.
            let head = self.q_head as usize % QUARANTINE;
            let aged = core::mem::replace(&mut self.quarantine[head], index);
            self.q_head = (self.q_head + 1) % QUARANTINE as u32;
            self.push_free(aged);
        } else {
            self.quarantine[(self.q_head + self.q_len) as usize % QUARANTINE] = index;
            self.q_len += 1;
        }
    }

    /// The take that handed out `index` is undone: a fresh slot becomes fresh again, another
    /// goes on top of the free stack; the live count, and the peak if that take raised it,
    /// are restored.
    pub fn cancel(&mut self, index: u32) {
        if self.bump > 0 && index == self.start + self.fresh_offset(self.bump - 1) {
            self.bump -= 1;
        } else {
            self.push_free(index);
        }
        self.live -= 1;
        if self.peak_raiser == index + 1 {
            self.peak -= 1;
            self.peak_raiser = 0;
        }
    }

    /// Pushes a free index: the stack and the ring hold distinct free indices of this shard,
    /// which has `len` slots, so the stack never overflows.
    #[inline]
    fn push_free(&mut self, index: u32) {
        if self.top < self.len {
            // SAFETY: top < len, and `free` holds len entries (constructor contract).
            unsafe { *self.free.add(self.top as usize) = index };
            self.top += 1;
        }
    }

    fn pop_oldest(&mut self) -> Option<u32> {
        if self.q_len == 0 {
            return None;
        }
        let i = self.quarantine[self.q_head as usize];
        self.q_head = (self.q_head + 1) % QUARANTINE as u32;
        self.q_len -= 1;
        Some(i)
    }
}

/// One shard: its lock holding its books, after [`crate::sync::LINE_STRIDE`] bytes of padding
/// (the pair of lines adjacent-line prefetchers pull together), so no shard's lock or books
/// share a written line with the previous shard's. Padding, not `align(128)`: an over-aligned
/// member would over-align `CoreState`, and `Box::new_zeroed` would then memset it instead of
/// taking calloc's lazily zeroed pages (`sync::LINE_STRIDE`).
#[repr(C)]
struct Shard {
    _pad: [u8; crate::sync::LINE_STRIDE],
    books: DataLock<ShardBooks>,
}

/// `ceil(2^63 / per)`, the reciprocal [`shard_index`] multiplies by, for `per >= 1` slots
/// per shard (0 for 0: every index then maps to shard 0).
const fn shard_recip(per: u32) -> u64 {
    if per == 0 {
        0
    } else {
        (1u64 << 63).div_ceil(per as u64)
    }
}

/// `index / per` for `recip = shard_recip(per)`, by one multiplication: exact for every
/// `index < 2^31` and `1 <= per < 2^31` (with `c = ceil(2^63 / per)`, `c * per` exceeds
/// `2^63` by less than `per <= 2^(63 - 31)`, which is Lemire, Kaser and Kurz's condition
/// for `floor(index * c / 2^63)` to be the quotient of every 31-bit index). Slot indices
/// are below `cap < 2^31` (`Arena::bind`).
#[inline]
fn shard_index(index: u32, recip: u64) -> usize {
    ((u128::from(recip) * u128::from(index)) >> 63) as usize
}

/// Bytes `n` rounded up to the storage alignment.
const fn up(n: usize) -> usize {
    n.div_ceil(STORAGE_ALIGN) * STORAGE_ALIGN
}

/// Alignment of arena storage (and of each arena's parts within it).
pub const STORAGE_ALIGN: usize = 64;

/// A per-slot side table (`table[i]` for slot `i` of its arena): for state that has no room
/// in the slot type's own bytes (a tensor's name text, a model's IO table). Bound with its
/// arena; all-zero is an unbound, empty table.
pub struct SideTable<U> {
    ptr: *mut U,
    len: usize,
}

// SAFETY: a null pointer and length 0 are the unbound table.
unsafe impl<U> ZeroValid for SideTable<U> {}
// SAFETY: the table only hands out raw pointers (whose users synchronise as the slot's users
// do) and, for atomics, shared references to `Sync` atomics.
unsafe impl<U: Send> Sync for SideTable<U> {}
// SAFETY: as above; it owns plain data in storage that lives as long as its owner.
unsafe impl<U: Send> Send for SideTable<U> {}

impl<U> SideTable<U> {
    /// Storage bytes of a table of `n` entries.
    pub const fn bytes(n: usize) -> usize {
        up(n * core::mem::size_of::<U>())
    }

    /// Binds the table to `n` entries at `base`.
    ///
    /// # Safety
    /// `base` is aligned for `U`, points at [`Self::bytes`]`(n)` zeroed bytes used by nobody
    /// else, valid as long as `self`; all-zero bytes are a valid `U` (the entry of an unused
    /// slot); nobody else references `self` now.
    pub(crate) unsafe fn bind(&mut self, base: *mut u8, n: usize) {
        self.ptr = base.cast();
        self.len = n;
    }

    /// Entries the table was bound to (0: unbound).
    pub(crate) fn entries(&self) -> usize {
        self.len
    }
}

/// A side-table entry made only of atomics, so a shared reference to it may be handed to any
/// thread at any time (the crate-internal `SideTable::entry`).
///
/// # Safety
/// All-zero bytes are a valid `Self`, and every field is an atomic (or a struct of them)
/// that every access treats as such.
pub unsafe trait AtomicEntry: Sync {}

// SAFETY: an atomic byte; zero is valid.
unsafe impl AtomicEntry for AtomicU8 {}
// SAFETY: an atomic word; zero is valid.
unsafe impl AtomicEntry for core::sync::atomic::AtomicU32 {}

impl<U: AtomicEntry> SideTable<U> {
    /// Entry `i` of a table of atomics, `None` past the table.
    #[inline]
    pub(crate) fn entry(&self, i: usize) -> Option<&U> {
        // SAFETY: in bounds of the bound storage (zero-valid atomics, `AtomicEntry`), which
        // lives as long as `self`; atomics are only ever accessed atomically.
        (i < self.len).then(|| unsafe { &*self.ptr.add(i) })
    }
}

impl SideTable<AtomicU8> {
    /// Entry `i` of a table of flags.
    pub(crate) fn flag(&self, i: usize) -> Option<&AtomicU8> {
        // SAFETY: in bounds of the bound storage (zero-valid atomics), which lives as long
        // as `self`; atomics are only ever accessed atomically.
        (i < self.len).then(|| unsafe { &*self.ptr.add(i) })
    }
}

/// A pool of zero-initialised `T` slots in storage bound once by `Arena::bind` (crate-internal:
/// `CoreState` binds its arenas). A freed slot goes through its shard's quarantine of
/// [`QUARANTINE`] releases before it is reused (most recently aged first, for locality).
#[repr(C)]
pub struct Arena<T> {
    shards: [Shard; MAX_SHARDS],
    /// `cap` slots (null until bound).
    slots: *mut UnsafeCell<T>,
    /// `cap` flags, 1 while a slot is handed out; written under the owning shard's lock,
    /// read lock-free by `is_live`.
    live: *const AtomicU8,
    cap: u32,
    /// Shards in use.
    nshards: u32,
    /// `ceil(2^63 / per)` for `per` slots per shard (the last shard may be shorter): slot
    /// `i`'s shard is `i * shard_recip >> 63` ([`shard_index`]).
    shard_recip: u64,
    /// The setting that raises the capacity (for [`ArenaFull`]).
    setting: Option<&'static str>,
    /// Told about never-used slots as they come into use ([`InUse`]).
    in_use: Option<InUse>,
}

/// Told `(address, bytes)` of a run of an arena's never-used slots as they come into use, in
/// runs of about [`IN_USE_RUN`] bytes, once each: how a state block whose storage is a large
/// reservation (the std shim's) puts the slots in use, and only those, into core dumps.
pub type InUse = fn(*const u8, usize);

/// Bytes of slots an [`InUse`] hook is told about at a time (at least one slot).
pub const IN_USE_RUN: usize = 64 << 10;

// SAFETY: slot hand-out is serialised by the shard locks; a slot's contents are only reached
// through the pointer returned by `alloc`, whose users synchronise among themselves; the
// storage pointers are written once by `bind` (through `&mut self`) and read-only after.
unsafe impl<T: Send> Sync for Arena<T> {}
// SAFETY: as above; the arena owns plain data.
unsafe impl<T: Send> Send for Arena<T> {}
// SAFETY: every member is zero-valid: zero locks are unlocked, zero books and null pointers
// with capacity 0 are an unbound arena (every alloc is `ArenaFull`, every pointer foreign).
unsafe impl<T: ZeroValid> ZeroValid for Arena<T> {}

/// Statistics of an arena.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ArenaStats {
    /// Capacity in slots.
    pub capacity: usize,
    /// Live slots.
    pub live: usize,
    /// High-water mark (summed over the shards, see the module docs).
    pub peak: usize,
    /// Bytes the arena occupies (header and storage).
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

impl<T: Generational> Arena<T> {
    /// The `(index, generation)` a handle of slot `p` carries, read now, for a slot the
    /// caller owns (just made, or held by an owner reference), whose generation therefore
    /// cannot move under the call. A pointer this arena does not own yields `(u32::MAX, 0)`:
    /// an index past any arena and an even generation, which every resolver refuses.
    pub(crate) fn handle_words_of(&self, p: *const T) -> (u32, u32) {
        let Some(index) = self.index_of(p) else {
            return (u32::MAX, 0);
        };
        // SAFETY: `index_of` confirmed `p` is a slot of this arena.
        let (gen, _) = unsafe { self.words(p) };
        (index as u32, gen.load(Ordering::Acquire))
    }

    /// Resolves handle words `(index, generation)` of a slot of this arena and pins the
    /// object they name ([`crate::handle::pin`]): the slot and a reference to its word,
    /// which the caller must [`crate::handle::unpin`]. An index past the arena or an even
    /// generation is `Forged`; a slot whose object is gone (or was never this one) is
    /// `Stale`. The epoch is the caller's to check first.
    #[inline]
    pub(crate) fn pin(
        &self,
        index: u32,
        generation: u32,
        kind: crate::handle::HandleKind,
    ) -> Result<(*mut T, &AtomicU64), crate::handle::HandleError> {
        use crate::handle::{HandleError, HandleFault};
        let forged = HandleError {
            kind,
            fault: HandleFault::Forged,
        };
        let p = self.slot(index).ok_or(forged)?;
        if generation & 1 == 0 {
            return Err(forged);
        }
        // SAFETY: `p` is a slot of this arena (`slot` bounds-checked the index).
        let (gen, refs) = unsafe { self.words(p) };
        if crate::handle::pin(gen, refs, generation) {
            Ok((p, refs))
        } else {
            Err(HandleError {
                kind,
                fault: HandleFault::Stale,
            })
        }
    }

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

    /// Like [`Arena::alloc_fresh_first_in`] (or [`Arena::alloc_in`] when `fresh_first` is
    /// false), for handle-named slots: zeroes every byte of the slot except its generation and
    /// reference words, which concurrent resolvers may be loading, and which are free-state
    /// values already (an even generation, a zero word). Returns the slot and its index.
    pub fn alloc_handle(
        &self,
        name: &'static str,
        fresh_first: bool,
        shard: usize,
    ) -> Result<(NonNull<T>, u32), ArenaFull> {
        // The common case in one locked step on the preferred shard; everything else (another
        // shard, quarantined slots, a fresh run to announce, a shard's first take, a full
        // arena) in cold calls.
        if let Some(first) = self.preferred(shard) {
            // SAFETY: `first < nshards <= MAX_SHARDS` (`bind` clamps it), so it indexes
            // `shards`.
            let s = unsafe { self.shards.get_unchecked(first) };
            let mut b = s.books.lock();
            if b.drawn != 0 {
                match b.take_drawn(fresh_first, false) {
                    Some(i) if b.bump <= b.shown => {
                        let next = b.peek_drawn(fresh_first);
                        drop(b);
                        let out = self.hand_out(i as usize);
                        // The shard's next take writes that slot in full; a slot back from
                        // the quarantine has gone cold meanwhile, so it is fetched now,
                        // while the caller works, instead of stalling that take.
                        if let Some(n) = next {
                            self.prefetch_slot(n as usize);
                        }
                        return Ok(out);
                    }
                    Some(i) => return self.alloc_handle_announce(b, i as usize),
                    None => {}
                }
            }
        }
        self.alloc_handle_slow(name, fresh_first, shard)
    }

    /// [`Self::alloc_handle`] when its take must tell the [`InUse`] hook about a fresh run
    /// first (`b`: the locked books that handed out slot `i`).
    #[cold]
    #[inline(never)]
    fn alloc_handle_announce(
        &self,
        mut b: lock_api::MutexGuard<'_, crate::sync::RawSpin, ShardBooks>,
        i: usize,
    ) -> Result<(NonNull<T>, u32), ArenaFull> {
        self.announce(&mut b);
        drop(b);
        Ok(self.hand_out(i))
    }

    /// [`Self::alloc_handle`] past its first try: [`Self::take_slot_slow`] from the top.
    #[cold]
    #[inline(never)]
    fn alloc_handle_slow(
        &self,
        name: &'static str,
        fresh_first: bool,
        shard: usize,
    ) -> Result<(NonNull<T>, u32), ArenaFull> {
        let (_, i) = self.take_slot_slow(name, fresh_first, shard, false)?;
        Ok(self.hand_out(i))
    }

    /// Asks the CPU to bring slot `i`'s bytes into cache (a hint: no access is made, and an
    /// index past the arena is ignored).
    #[inline(always)]
    fn prefetch_slot(&self, i: usize) {
        #[cfg(target_arch = "x86_64")]
        if i < self.cap as usize {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let p = self.slots.wrapping_add(i).cast::<i8>();
            let mut off = 0;
            while off < core::mem::size_of::<UnsafeCell<T>>() {
                // SAFETY: SSE is in the x86_64 baseline, and a prefetch is a hint: it reads
                // nothing the program sees and never faults, whatever the address.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off)) };
                off += 64;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = i;
    }

    /// Hands out slot `i`, just taken off the books: zeroes all but its generation and
    /// reference words (see [`Self::alloc_handle`]) and marks it live.
    #[inline]
    fn hand_out(&self, i: usize) -> (NonNull<T>, u32) {
        // SAFETY: a shard's books only hold indices of its range, below cap.
        let p = unsafe { (*self.slots.add(i)).get() };
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
        self.live_flag(i).store(1, Ordering::Release);
        // SAFETY: a slot pointer of bound storage is never null.
        (unsafe { NonNull::new_unchecked(p) }, i as u32)
    }

    /// [`Self::words`] for any pointer: the generation and reference words of the slot `p`
    /// points at (live or not), `None` when `p` is not a slot of this arena. Safe: both words
    /// are atomics that every access treats as such ([`Generational`]), in storage that lives
    /// as long as the arena.
    #[inline]
    pub(crate) fn words_of(&self, p: *const T) -> Option<(&AtomicU32, &AtomicU64)> {
        self.index_of(p)?;
        // SAFETY: `index_of` confirmed `p` is a slot of this arena.
        Some(unsafe { self.words(p) })
    }
}

impl<T: ZeroValid> Arena<T> {
    /// Bytes of the arena header (the storage comes on top: [`Self::storage_bytes`]).
    pub const HEADER_BYTES: usize = core::mem::size_of::<Self>();

    /// The slot at `index` (live or not), or `None` past the arena.
    #[inline]
    pub(crate) fn slot(&self, index: u32) -> Option<*mut T> {
        // SAFETY: in bounds of the bound storage (index < cap); no reference is created.
        (index < self.cap).then(|| unsafe { (*self.slots.add(index as usize)).get() })
    }

    /// Storage bytes of an arena of `cap` slots: the slots, their live flags and the free
    /// stacks, each rounded up to [`STORAGE_ALIGN`].
    pub const fn storage_bytes(cap: usize) -> usize {
        up(cap * core::mem::size_of::<UnsafeCell<T>>()) + up(cap) + up(cap * 4)
    }

    /// Binds the arena to `cap` slots at `base`, cut into up to `shards` shards (at least
    /// one slot each). `setting` names what raises the capacity, for [`ArenaFull`].
    ///
    /// # Safety
    /// `base` is [`STORAGE_ALIGN`]-aligned, points at [`Self::storage_bytes`]`(cap)` zeroed
    /// bytes used by nobody else and valid as long as `self`; `cap < 2^31`;
    /// `align_of::<T>() <= STORAGE_ALIGN`; the arena was never bound or used.
    pub(crate) unsafe fn bind(
        &mut self,
        base: *mut u8,
        cap: usize,
        shards: usize,
        setting: &'static str,
        in_use: Option<InUse>,
    ) {
        const { assert!(core::mem::align_of::<T>() <= STORAGE_ALIGN) };
        let n = shards.clamp(1, MAX_SHARDS).min(cap.max(1));
        let per = cap.div_ceil(n).max(1);
        // SAFETY: the three parts are in bounds of the storage (storage_bytes), aligned
        // (each offset is a multiple of STORAGE_ALIGN); zero bytes are valid for each.
        unsafe {
            self.slots = base.cast();
            let live = base.add(up(cap * core::mem::size_of::<UnsafeCell<T>>()));
            self.live = live.cast();
            let free = live.add(up(cap)).cast::<u32>();
            for (s, shard) in self.shards.iter_mut().enumerate().take(n) {
                let start = (s * per).min(cap);
                let len = per.min(cap - start);
                *shard.books.get_mut() = ShardBooks::new(free.add(start), start as u32, len as u32);
            }
        }
        self.cap = cap as u32;
        self.shard_recip = shard_recip(per as u32);
        self.nshards = n as u32;
        self.setting = Some(setting);
        self.in_use = in_use;
    }

    /// Capacity in slots.
    pub fn capacity(&self) -> usize {
        self.cap as usize
    }

    /// Bytes the arena occupies: header and storage (for footprint reports).
    pub fn bytes(&self) -> usize {
        Self::HEADER_BYTES + Self::storage_bytes(self.cap as usize)
    }

    fn live_flag(&self, index: usize) -> &AtomicU8 {
        // SAFETY: callers pass index < cap (a slot index); the flags are zero-valid atomics
        // in storage that lives as long as `self`, only ever accessed atomically.
        unsafe { &*self.live.add(index) }
    }

    /// The shard that owns slot `index` (`index < cap`).
    #[inline]
    fn shard_of(&self, index: usize) -> &Shard {
        &self.shards[shard_index(index as u32, self.shard_recip).min(MAX_SHARDS - 1)]
    }

    #[cold]
    #[inline(never)]
    fn full(&self, name: &'static str) -> ArenaFull {
        ArenaFull {
            arena: name,
            capacity: self.cap as usize,
            setting: self.setting.unwrap_or(""),
        }
    }

    /// Takes a zeroed slot (most recently freed first: keeps the touched footprint small),
    /// from shard 0 when it has one.
    pub fn alloc(&self, name: &'static str) -> Result<NonNull<T>, ArenaFull> {
        self.alloc_impl(name, false, 0)
    }

    /// Takes a zeroed slot, preferring shard `shard` (modulo the shard count): calls for
    /// different cores pass different shards and do not contend.
    pub fn alloc_in(&self, shard: usize, name: &'static str) -> Result<NonNull<T>, ArenaFull> {
        self.alloc_impl(name, false, shard)
    }

    /// Takes a zeroed slot, preferring never-used slots over freed ones, so a stale pointer to
    /// a freed slot stays detectably dead for as long as possible (caller-visible handles).
    pub fn alloc_fresh_first(&self, name: &'static str) -> Result<NonNull<T>, ArenaFull> {
        self.alloc_impl(name, true, 0)
    }

    /// [`Self::alloc_fresh_first`], preferring shard `shard` (see [`Self::alloc_in`]).
    pub fn alloc_fresh_first_in(
        &self,
        shard: usize,
        name: &'static str,
    ) -> Result<NonNull<T>, ArenaFull> {
        self.alloc_impl(name, true, shard)
    }

    fn alloc_impl(
        &self,
        name: &'static str,
        fresh_first: bool,
        shard: usize,
    ) -> Result<NonNull<T>, ArenaFull> {
        let (p, idx) = self.take_slot(name, fresh_first, shard)?;
        // SAFETY: the slot is not live (it was free or fresh), so nobody else references it;
        // zero bytes are a valid T (T: ZeroValid).
        unsafe { core::ptr::write_bytes(p, 0, 1) };
        // Published after the zeroing: whoever sees it live sees a zeroed slot.
        self.live_flag(idx).store(1, Ordering::Release);
        // SAFETY: a slot pointer of bound storage is never null.
        Ok(unsafe { NonNull::new_unchecked(p) })
    }

    /// Takes a zeroed slot that is not yet handed out ([`Fresh`]): the caller writes it
    /// through `&mut T`, then publishes it (it becomes live) or drops it (it goes back as
    /// [`GiveBack::Cancel`] would send it, as if never taken).
    pub fn alloc_fresh(&self, name: &'static str) -> Result<Fresh<'_, T>, ArenaFull> {
        self.alloc_fresh_in(0, false, name)
    }

    /// [`Self::alloc_fresh`], preferring shard `shard` (see [`Self::alloc_in`]) and, when
    /// `fresh_first`, never-used slots (see [`Self::alloc_fresh_first`]).
    pub fn alloc_fresh_in(
        &self,
        shard: usize,
        fresh_first: bool,
        name: &'static str,
    ) -> Result<Fresh<'_, T>, ArenaFull> {
        let (p, idx) = self.take_slot(name, fresh_first, shard)?;
        // SAFETY: the slot is not live (it was free or fresh), so nobody else references it;
        // zero bytes are a valid T (T: ZeroValid).
        unsafe { core::ptr::write_bytes(p, 0, 1) };
        Ok(Fresh {
            arena: self,
            // SAFETY: a slot pointer of bound storage is never null.
            p: unsafe { NonNull::new_unchecked(p) },
            idx,
        })
    }

    /// Runs `f` on live slot `p` with its shard's lock held, so the slot can be neither
    /// released nor handed out again while `f` runs (`None`: `p` is not a live slot of this
    /// arena). `f` must not call back into this arena (the shard lock is not reentrant).
    pub(crate) fn with_live<R>(&self, p: *const T, f: impl FnOnce(NonNull<T>) -> R) -> Option<R> {
        let i = self.index_of(p)?;
        let _b = self.shard_of(i).books.lock();
        if self.live_flag(i).load(Ordering::Acquire) != 1 {
            return None;
        }
        // SAFETY: `index_of` confirmed a slot of the bound storage; never null.
        Some(f(unsafe {
            NonNull::new_unchecked((*self.slots.add(i)).get())
        }))
    }

    /// Takes a free slot off the books (not yet zeroed, not yet marked live): the preferred
    /// shard first, then the others; quarantined slots only when no shard has another.
    #[inline]
    fn take_slot(
        &self,
        name: &'static str,
        fresh_first: bool,
        shard: usize,
    ) -> Result<(*mut T, usize), ArenaFull> {
        if let Some(first) = self.preferred(shard) {
            if let Some(got) = self.take_from(first, fresh_first, false) {
                return Ok(got);
            }
            return self.take_slot_slow(name, fresh_first, first, true);
        }
        self.take_slot_slow(name, fresh_first, shard, false)
    }

    /// The shard an allocation preferring `shard` tries first: `shard` modulo the shard
    /// count (divided only when out of range), `None` for an unbound arena.
    #[inline]
    fn preferred(&self, shard: usize) -> Option<usize> {
        let n = self.nshards as usize;
        if shard < n {
            Some(shard)
        } else if n == 0 {
            None
        } else {
            Some(shard % n)
        }
    }

    /// [`Self::take_slot`] past its first try: the preferred shard (`shard` modulo the shard
    /// count) and then the others, without quarantined slots and then with them. `tried`:
    /// the preferred shard, in range, was already asked for an unquarantined slot.
    #[cold]
    #[inline(never)]
    fn take_slot_slow(
        &self,
        name: &'static str,
        fresh_first: bool,
        shard: usize,
        tried: bool,
    ) -> Result<(*mut T, usize), ArenaFull> {
        let n = self.nshards as usize;
        if n == 0 {
            return Err(self.full(name));
        }
        let first = shard % n;
        for quarantined in [false, true] {
            let skip = usize::from(tried && !quarantined);
            for k in skip..n {
                if let Some(got) = self.take_from((first + k) % n, fresh_first, quarantined) {
                    return Ok(got);
                }
            }
        }
        Err(self.full(name))
    }

    /// One take from shard `s`'s books, under its lock (`None`: the shard has no slot of
    /// that kind, or no shard `s`).
    #[inline]
    fn take_from(&self, s: usize, fresh_first: bool, quarantined: bool) -> Option<(*mut T, usize)> {
        let mut b = self.shards.get(s)?.books.lock();
        let i = b.take(fresh_first, quarantined)?;
        if b.bump > b.shown {
            self.announce(&mut b);
        }
        // SAFETY: a shard's books only hold indices of its range, below cap.
        Some((unsafe { (*self.slots.add(i as usize)).get() }, i as usize))
    }

    /// Tells the [`InUse`] hook about the shard's fresh slots from `shown` on, in whole runs
    /// of [`IN_USE_RUN`] bytes past `bump` (each run once: `shown` advances past it).
    #[cold]
    #[inline(never)]
    fn announce(&self, b: &mut ShardBooks) {
        let Some(hook) = self.in_use else {
            // No hook: nothing is ever to be told, so no fresh slot calls here again.
            b.shown = b.len;
            return;
        };
        let size = core::mem::size_of::<UnsafeCell<T>>().max(1);
        let run = (IN_USE_RUN / size).max(1) as u32;
        let upto = b.bump.div_ceil(run).saturating_mul(run).min(b.len);
        // The fresh cursor walks `start + (fresh_start + j) % len`: at most two spans.
        let mut j = b.shown;
        while j < upto {
            let off = (b.fresh_start + j) % b.len.max(1);
            let n = (upto - j).min(b.len - off);
            let first = (b.start + off) as usize;
            // In bounds of the bound storage: `first + n <= start + len <= cap`; no
            // reference is made.
            hook(
                self.slots.wrapping_add(first).cast::<u8>(),
                n as usize * size,
            );
            j += n;
        }
        b.shown = upto;
    }

    /// The slot index of `p`, when it points at a slot of this arena (live or not).
    #[inline]
    pub(crate) fn index_of(&self, p: *const T) -> Option<usize> {
        let sz = core::mem::size_of::<UnsafeCell<T>>().max(1);
        // An address below the storage wraps to an offset past it (the storage ends below
        // the top of the address space), so one comparison bounds both sides.
        let off = (p as usize).wrapping_sub(self.slots as usize);
        let i = off / sz;
        (i < self.cap as usize && i * sz == off).then_some(i)
    }

    /// The entry of a per-slot side table that belongs to `p`. A pointer this arena does not
    /// own yields the last entry (or null for an empty table); callers pass live slots.
    pub(crate) fn side_entry<U>(&self, table: &SideTable<U>, p: *const T) -> *mut U {
        if table.len == 0 {
            return core::ptr::null_mut();
        }
        let i = self.index_of(p).unwrap_or(table.len - 1).min(table.len - 1);
        // SAFETY: an in-bounds projection of the table (`i < len`); no reference is created.
        unsafe { table.ptr.add(i) }
    }

    /// Whether `p` points at a slot of this arena, live or not (no dereference).
    pub fn owns(&self, p: *const T) -> bool {
        self.index_of(p).is_some()
    }

    /// Whether `p` is a live slot of this arena (used to validate pointers from callers).
    pub fn is_live(&self, p: *const T) -> bool {
        match self.index_of(p) {
            Some(i) => self.live_flag(i).load(Ordering::Acquire) == 1,
            None => false,
        }
    }

    /// Returns a slot through its shard's quarantine. The caller must no longer use `p`.
    pub fn release(&self, p: *const T) -> Result<(), ReleaseError> {
        self.give_back(p, GiveBack::Release)
    }

    /// Undoes the `alloc` that handed out `p`, for a call that fails before anyone else saw
    /// the slot: the slot goes back where it came from (a fresh slot becomes fresh again,
    /// another goes on top of its shard's free stack) without waiting out the quarantine,
    /// which only guards slots whose pointers were given out. The live count, and the peak if
    /// that alloc raised it, are restored, so a failed call leaves the arena as it found it.
    pub fn cancel(&self, p: *const T) -> Result<(), ReleaseError> {
        self.give_back(p, GiveBack::Cancel)
    }

    /// Returns `p` the way `how` says (see [`GiveBack`]), through the shard that owns it:
    /// the liveness check and the flag's clearing happen under that shard's lock, so of two
    /// racing frees exactly one succeeds.
    #[inline]
    pub fn give_back(&self, p: *const T, how: GiveBack) -> Result<(), ReleaseError> {
        let Some(i) = self.index_of(p) else {
            return Err(ReleaseError::Foreign);
        };
        let flag = self.live_flag(i);
        let mut b = self.shard_of(i).books.lock();
        if flag.load(Ordering::Acquire) != 1 {
            return Err(ReleaseError::NotLive);
        }
        // `shard_of` divides exactly, so the shard owns the slot.
        debug_assert!(b.owns(i as u32));
        flag.store(0, Ordering::Release);
        match how {
            GiveBack::Release => b.put(i as u32),
            GiveBack::Cancel => b.cancel(i as u32),
        }
        Ok(())
    }

    /// Current statistics (each shard read under its lock, summed).
    pub fn stats(&self) -> ArenaStats {
        let (mut live, mut peak) = (0usize, 0usize);
        for s in self.shards.iter().take(self.nshards as usize) {
            let b = s.books.lock();
            live += b.live as usize;
            peak += b.peak as usize;
        }
        ArenaStats {
            capacity: self.cap as usize,
            live,
            peak,
            bytes: self.bytes(),
        }
    }

    /// The slots live at the moment each is looked at (for sweeps when no other thread
    /// allocates or frees, so the answer cannot go stale under the caller). Only the slots a
    /// shard ever handed out are looked at, so a sweep costs what was used, not the capacity.
    pub fn live_slots(&self) -> impl Iterator<Item = NonNull<T>> + '_ {
        let ranges: [UsedRange; MAX_SHARDS] = core::array::from_fn(|s| {
            if s < self.nshards as usize {
                UsedRange::of(&self.shards[s].books.lock())
            } else {
                UsedRange::EMPTY
            }
        });
        self.live_in(ranges)
    }

    /// The live slots among `ranges` (each shard's used range), in shard order.
    fn live_in(&self, ranges: [UsedRange; MAX_SHARDS]) -> impl Iterator<Item = NonNull<T>> + '_ {
        ranges
            .into_iter()
            .flat_map(UsedRange::indices)
            .filter(|&i| i < self.cap as usize && self.live_flag(i).load(Ordering::Acquire) == 1)
            // SAFETY: in bounds of the bound storage (checked above); a slot pointer is
            // never null.
            .map(|i| unsafe { NonNull::new_unchecked((*self.slots.add(i)).get()) })
    }

    /// Calls `f` on every live slot, with every shard's lock held (`f` must not call back
    /// into the arena).
    pub fn for_each_live(&self, mut f: impl FnMut(NonNull<T>)) {
        self.for_each_live_while(|p| {
            f(p);
            true
        });
    }

    /// Calls `f` on live slots, with every shard's lock held, until it returns `false` (`f`
    /// must not call back into the arena).
    fn for_each_live_while(&self, mut f: impl FnMut(NonNull<T>) -> bool) {
        let guards: [_; MAX_SHARDS] = core::array::from_fn(|s| {
            (s < self.nshards as usize).then(|| self.shards[s].books.lock())
        });
        let ranges = core::array::from_fn(|s| {
            guards[s]
                .as_ref()
                .map_or(UsedRange::EMPTY, |b| UsedRange::of(b))
        });
        for p in self.live_in(ranges) {
            if !f(p) {
                break;
            }
        }
    }

    /// Teardown's sweep: until no slot is live, takes up to 64 live slots under the shard
    /// locks and calls `f` on each with the locks released (so `f` may free it through the
    /// arena). `f` must leave its slot not live, or the sweep meets it again.
    pub fn drain_live(&self, mut f: impl FnMut(NonNull<T>)) {
        let mut live = [NonNull::<T>::dangling(); 64];
        loop {
            let mut n = 0;
            self.for_each_live_while(|p| {
                live[n] = p;
                n += 1;
                n < live.len()
            });
            if n == 0 {
                return;
            }
            for &p in &live[..n] {
                f(p);
            }
        }
    }
}

/// The slots one shard has handed out at least once: `start + (first + j) % len` for
/// `j < count` (its fresh cursor's range; freed slots come back from inside it).
#[derive(Copy, Clone)]
struct UsedRange {
    start: u32,
    len: u32,
    first: u32,
    count: u32,
}

impl UsedRange {
    const EMPTY: UsedRange = UsedRange {
        start: 0,
        len: 0,
        first: 0,
        count: 0,
    };

    fn of(b: &ShardBooks) -> Self {
        UsedRange {
            start: b.start,
            len: b.len,
            first: b.fresh_start,
            count: b.bump.min(b.len),
        }
    }

    fn indices(self) -> impl Iterator<Item = usize> {
        (0..self.count)
            .map(move |j| (self.start + (self.first.wrapping_add(j)) % self.len.max(1)) as usize)
    }
}

/// A zeroed slot taken by [`Arena::alloc_fresh`] and not yet handed out: its one reference.
/// The slot is not live, so no liveness check passes for it and no other allocation can take
/// it; [`Fresh::publish`] makes it live, dropping it puts it back untouched.
#[must_use = "a fresh slot goes back to its arena unless published"]
pub struct Fresh<'a, T: ZeroValid> {
    arena: &'a Arena<T>,
    p: NonNull<T>,
    idx: usize,
}

impl<T: ZeroValid> Fresh<'_, T> {
    /// The slot's address (no reference is made): for pointers the slot stores to itself.
    pub fn as_ptr(&self) -> *mut T {
        self.p.as_ptr()
    }

    /// Hands the slot out: it becomes live (Release: whoever sees it live sees what was
    /// written through this `Fresh`), and the caller names it by the pointer returned.
    pub fn publish(self) -> NonNull<T> {
        self.arena.live_flag(self.idx).store(1, Ordering::Release);
        let p = self.p;
        core::mem::forget(self);
        p
    }
}

impl<T: ZeroValid> core::ops::Deref for Fresh<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the slot is zeroed (a valid T), in bound storage that outlives `'a`, and
        // unreachable by anyone else until published (not live, not on any free stack).
        unsafe { self.p.as_ref() }
    }
}

impl<T: ZeroValid> core::ops::DerefMut for Fresh<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as `deref`; `&mut self` makes this the only reference.
        unsafe { self.p.as_mut() }
    }
}

impl<T: ZeroValid> Drop for Fresh<'_, T> {
    fn drop(&mut self) {
        // Never live: straight back to where it came from, books as before the take.
        self.arena
            .shard_of(self.idx)
            .books
            .lock()
            .cancel(self.idx as u32);
    }
}

/// `K` entries of a [`Chain`]: the slot type of the arena a chain draws from. Valid when
/// all-zero (no next chunk, zeroed entries).
#[repr(C)]
pub struct Chunk<E, const K: usize> {
    /// Slot index + 1 of the next chunk of the chain (0: the last).
    next: u32,
    _pad: u32,
    entries: [E; K],
}

// SAFETY: integers and an array of `E`, each valid all-zero.
unsafe impl<E: ZeroValid, const K: usize> ZeroValid for Chunk<E, K> {}

/// A growable list of entries in chunks of a chunk arena (`Arena<Chunk<E, K>>`): what a model's
/// IO table, a tensor set's entries and an execution's bound tensors are, so none of them has a
/// fixed length and memory grows with what is stored. All-zero is the empty chain.
///
/// A chain owns its chunks the way a `Box` owns its value: it is not `Copy` or `Clone`, its
/// chunks are on no other chain, and they are reached only through it (shared access through
/// `&Chain`, exclusive through `&mut Chain`). It is always used with the one arena its chunks
/// came from (a crate-internal contract: each chain lives in one place that names one arena),
/// and given back with [`Arena::chain_clear`]; dropping a non-empty chain leaks its chunks
/// (they stay allocated), nothing worse.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Chain {
    /// Slot index + 1 of the first chunk (0: empty).
    first: u32,
    /// Slot index + 1 of the last chunk.
    last: u32,
    /// Entries in the chain.
    len: u32,
}

// SAFETY: three integers; zero is the empty chain.
unsafe impl ZeroValid for Chain {}

impl Chain {
    /// An empty chain.
    pub const EMPTY: Chain = Chain {
        first: 0,
        last: 0,
        len: 0,
    };

    /// Entries in the chain.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the chain holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<E: ZeroValid, const K: usize> Arena<Chunk<E, K>> {
    /// The chunk at slot `idx1 - 1` (`idx1` as a chain stores it), if that is a slot.
    fn chunk(&self, idx1: u32) -> Option<*mut Chunk<E, K>> {
        let i = idx1.checked_sub(1)?;
        // SAFETY: in bounds of the bound storage (`i < cap`); no reference is created.
        (i < self.cap).then(|| unsafe { (*self.slots.add(i as usize)).get() })
    }

    /// Appends a zeroed entry to `c` and returns it, taking a new chunk (from shard `shard`)
    /// when the last one is full. [`ArenaFull`] (naming `name`) leaves `c` as it was.
    pub fn chain_push<'c>(
        &self,
        c: &'c mut Chain,
        shard: usize,
        name: &'static str,
    ) -> Result<&'c mut E, ArenaFull> {
        let at = c.len as usize % K;
        if at == 0 || c.last == 0 {
            let (p, idx) = self.take_slot(name, false, shard)?;
            // SAFETY: the slot is not live (it was free or fresh), so nobody references it;
            // zero bytes are a valid chunk (ZeroValid).
            unsafe { core::ptr::write_bytes(p, 0, 1) };
            self.live_flag(idx).store(1, Ordering::Release);
            let idx1 = idx as u32 + 1;
            match self.chunk(c.last) {
                // SAFETY: `c.last` is a chunk of this chain, which `&mut c` owns exclusively.
                Some(last) => unsafe { (*last).next = idx1 },
                None => c.first = idx1,
            }
            c.last = idx1;
        }
        let last = self.chunk(c.last).ok_or_else(|| self.full(name))?;
        c.len += 1;
        // SAFETY: the chain's last chunk, owned by the chain and so reached only through
        // `&mut c` for `'c`; `at < K`. The entry is zero (a new chunk, or past the old length:
        // `chain_clear` hands chunks back and new ones are zeroed).
        Ok(unsafe { &mut *core::ptr::addr_of_mut!((*last).entries[at]) })
    }

    /// Where entry `i` of `c` is (no reference is made), if `c` has it.
    fn chain_entry(&self, c: &Chain, i: usize) -> Option<*mut E> {
        if i >= c.len as usize {
            return None;
        }
        let mut idx1 = c.first;
        for _ in 0..i / K {
            let p = self.chunk(idx1)?;
            // SAFETY: a chunk of this chain, which `c` owns; `next` is written only through
            // `&mut Chain`, which no one holds while `c` is borrowed.
            idx1 = unsafe { (*p).next };
        }
        let p = self.chunk(idx1)?;
        // SAFETY: an in-bounds projection (`i % K < K`) of a chunk slot; no reference is made.
        Some(unsafe { core::ptr::addr_of_mut!((*p).entries[i % K]) })
    }

    /// Entry `i` of `c`.
    pub fn chain_get<'c>(&self, c: &'c Chain, i: usize) -> Option<&'c E> {
        let e = self.chain_entry(c, i)?;
        // SAFETY: an entry of the chain `c`, shared for `'c` (written only through `&mut Chain`).
        Some(unsafe { &*e })
    }

    /// Entry `i` of `c`, to write.
    pub fn chain_get_mut<'c>(&self, c: &'c mut Chain, i: usize) -> Option<&'c mut E> {
        let e = self.chain_entry(c, i)?;
        // SAFETY: an entry of the chain `&mut c` owns exclusively for `'c`.
        Some(unsafe { &mut *e })
    }

    /// The entries of `c`, in order.
    pub fn chain_iter<'c>(&'c self, c: &'c Chain) -> impl Iterator<Item = &'c E> + 'c {
        let mut idx1 = c.first;
        let mut left = c.len as usize;
        core::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            let p = self.chunk(idx1)?;
            let n = left.min(K);
            left -= n;
            // SAFETY: a chunk of this chain (shared through `&c`); the first `n <= K` entries
            // are the chain's.
            let chunk = unsafe { &*p };
            idx1 = chunk.next;
            Some(chunk.entries[..n].iter())
        })
        .flatten()
    }

    /// Gives every chunk of `c` back (straight to the free stacks: their addresses never
    /// leave the chain) and leaves `c` empty.
    pub fn chain_clear(&self, c: &mut Chain) {
        let mut idx1 = c.first;
        let mut chunks = (c.len as usize).div_ceil(K);
        while chunks > 0 {
            let Some(p) = self.chunk(idx1) else {
                break;
            };
            // SAFETY: a chunk of this chain, which `&mut c` owns.
            idx1 = unsafe { (*p).next };
            let _ = self.give_back(p, GiveBack::Cancel);
            chunks -= 1;
        }
        *c = Chain::EMPTY;
    }
}

#[cfg(test)]
mod tests;
