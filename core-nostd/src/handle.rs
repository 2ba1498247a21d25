//! Typed, generation-checked handles (docs/STYLE.md #16): how the safe API names
//! the dmems, tensors, tensor sets, allocators and models it hands out ([`DmemHandle`],
//! [`TensorHandle`], [`SetHandle`], [`AllocatorHandle`], [`ModelHandle`]), and the pin protocol that makes a handle used on one
//! thread while another frees it an error or a completed operation, never a use after free.
//!
//! # What a handle is
//!
//! A dmem, tensor, set or allocator handle is `(index, generation, epoch)`: the object's arena
//! slot, the slot's generation when the object was made (the ABI's `dmem_t.generation` @68 /
//! `nrt_tensor_t.generation` @44; a set slot's own word; an allocator slot's side-table word), and the runtime's epoch, a process-wide counter bumped by every `init` (so a handle
//! of another runtime, of a closed one, or of this one before it was initialised again never
//! matches: state blocks can be freed and re-allocated at the same address, the epoch cannot
//! repeat). Generations are odd while an object lives in the slot and even while it is free;
//! every object's lifetime moves the slot's generation on by two.
//!
//! A model handle is `(logical core, H_MODEL id, epoch)` instead ([`ModelHandle`]): model ids
//! are never reused (spec §4.2), so the id plays the generation's part, and the model's
//! `ref_count` (libnrt's unload drain, spec §4.4–§4.5) is its pin.
//!
//! **Wrap bound.** A generation is 32 bits, so a handle kept while one slot is reused 2³¹
//! times (every object in between allocated *and* freed in that same slot) names the
//! 2³¹-th next occupant. The epoch is 32 bits too: 2³² `init`s in one process wrap it (0 is
//! skipped: it means "not initialised"). Below those bounds a stale handle is always refused.
//!
//! # The pin protocol
//!
//! The slot's 64-bit reference word (the ABI `ref_count`) counts *owners* in its low 32 bits
//! (libnrt's reference count: what `dmem_acquire_reference` adds and `dmem_free` drops; 1 for
//! a tensor) and *pins* in its high 32 bits (calls using the object right now).
//!
//! * **publish** (allocation): the slot is free, its word is 0, so nobody touches it. The
//!   allocator writes the fields, then the new (odd) generation, then word = 1 (Release).
//! * **pin** (resolve a handle): generation must equal the handle's; then CAS word → word +
//!   [`PIN`] only while the owner count is non-zero; then the generation is read again and
//!   must still match, else unpin and refuse. A pin keeps the object from being finalised,
//!   so the slot cannot be reused under the caller; the re-check proves the pinned object is
//!   the one the handle names (a pinned object's generation cannot move).
//! * **free** (drop an owner): pinned, CAS the owner count down by one. Exactly one of any
//!   number of racing frees takes it from 1 to 0; the others find 0 and are refused (a double
//!   free). Nobody can pin an object with no owners.
//! * **finalise**: the free that dropped the last owner waits until its own pin is the only
//!   one left ([`wait_drained`]), so every call that pinned before is done; then it alone
//!   tears the object down, retires the generation (odd → even) and gives the slot back.
//!
//! The generation and the word are the only bytes a resolver reads without a pin, and they
//! are only ever accessed atomically: the arena's allocation zeroes every other byte of a
//! slot but leaves these two ([`crate::arena::Generational`]). The protocol's functions are
//! generic over [`crate::loom::Atomic`] (the generation a `u32` word, the reference word a
//! `u64`), so loom checks them as written (`core-nostd/tests/loom.rs`: `pin_vs_two_frees`,
//! `stale_handle_never_reaches_the_reused_slot`, `shared_owners_elect_one_last_free`).
#![deny(unsafe_code)]

use core::fmt;

use crate::loom::{Atomic, Ordering};

/// One pin in the reference word.
pub const PIN: u64 = 1 << 32;
/// The owner count's bits of the reference word.
pub const OWNERS: u64 = PIN - 1;

/// Allocation: the slot is free (generation even, word 0, nobody else touches either), its
/// other fields are written. Publishes the object: the next odd generation, then one owner.
/// Returns the object's generation. The generation is stored first, so a resolver whose pin
/// reads the owner count sees it (the re-check in [`pin`] relies on that).
#[inline]
pub fn publish<G: Atomic<Int = u32>, R: Atomic<Int = u64>>(gen: &G, refs: &R) -> u32 {
    let cur = gen.load(Ordering::Acquire);
    // Even while free; an odd value (never left by `retire`) still moves on to a new one.
    let g = cur.wrapping_add(if cur & 1 == 0 { 1 } else { 2 });
    gen.store(g, Ordering::Release);
    refs.store(1, Ordering::Release);
    g
}

/// Resolves a handle of generation `want`: `true` when the object it names is now pinned
/// (the caller must [`unpin`] it), `false` when it is gone (freed, being freed, or never
/// was). Never pins an object without owners, and never leaves a pin behind on refusal.
#[inline]
pub fn pin<G: Atomic<Int = u32>, R: Atomic<Int = u64>>(gen: &G, refs: &R, want: u32) -> bool {
    if want & 1 == 0 || gen.load(Ordering::Acquire) != want {
        return false;
    }
    if !add_pin_if_owned(refs) {
        return false;
    }
    // Pinned something live. It is the handle's object only if the generation still matches
    // (a pinned object's generation cannot move; a newer occupant's is different).
    if gen.load(Ordering::Acquire) != want {
        unpin(refs);
        return false;
    }
    true
}

/// Pins whatever object has owners in this slot right now, without a generation check:
/// `false` (nothing changed) when it has none. For the runtime's own walks, which reach the
/// object through a structure that cannot hold a finalised one (an allocator's list, under
/// its lock); a handle is resolved with [`pin`].
#[inline]
pub fn add_pin_if_owned<R: Atomic<Int = u64>>(refs: &R) -> bool {
    // First try as if the object had one owner and no pins (the common case): no load
    // before the compare-exchange, which returns the real value when the guess is wrong.
    let mut w = 1;
    loop {
        if w & OWNERS == 0 {
            return false;
        }
        match refs.compare_exchange_weak(w, w + PIN, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(now) => w = now,
        }
    }
}

/// Ends a pin taken by [`pin`]. Never finalises: the free that dropped the last owner keeps
/// its own pin and waits for this one ([`wait_drained`]).
#[inline]
pub fn unpin<R: Atomic<Int = u64>>(refs: &R) {
    refs.fetch_sub(PIN, Ordering::AcqRel);
}

/// What dropping an owner did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// There was no owner left to drop: a double free (nothing changed).
    NoOwner,
    /// One owner fewer; others remain.
    Shared,
    /// That was the last owner: the caller must [`wait_drained`] and finalise.
    Last,
}

/// Drops one owner of an object the caller has pinned (a free through a handle). Exactly
/// one of racing frees of the last owner gets [`Dropped::Last`].
#[inline]
pub fn drop_owner<R: Atomic<Int = u64>>(refs: &R) -> Dropped {
    // First try the common case, one owner and the caller's pin, without a load first.
    let mut w = 1 + PIN;
    loop {
        if w & OWNERS == 0 {
            return Dropped::NoOwner;
        }
        match refs.compare_exchange_weak(w, w - 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                return if w & OWNERS == 1 {
                    Dropped::Last
                } else {
                    Dropped::Shared
                }
            }
            Err(now) => w = now,
        }
    }
}

/// Adds an owner to an object the caller has pinned (`dmem_acquire_reference`): `false` when
/// its last owner went meanwhile (it is being freed; nothing changed).
#[inline]
pub fn add_owner<R: Atomic<Int = u64>>(refs: &R) -> bool {
    let mut w = refs.load(Ordering::Acquire);
    loop {
        if w & OWNERS == 0 {
            return false;
        }
        match refs.compare_exchange_weak(w, w + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(now) => w = now,
        }
    }
}

/// The free through a handle in its common case, one step: the caller's pin is the only one
/// and its owner the last, so the word goes straight from one owner and one pin to 0, as
/// [`drop_owner`] then [`wait_drained`]`(refs, 1, …)` would leave it. `false` (nothing
/// changed) in any other case, which those two handle.
#[inline]
pub fn release_sole_pinned<R: Atomic<Int = u64>>(refs: &R) -> bool {
    loop {
        match refs.compare_exchange_weak(1 + PIN, 0, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            // A spurious failure: the word is still the sole case.
            Err(now) if now == 1 + PIN => {}
            Err(_) => return false,
        }
    }
}

/// After [`Dropped::Last`]: waits until the only pins left are the caller's own `own` (0 for
/// a free through an owned raw pointer, 1 through a handle), calling `relax` between looks,
/// then clears the word. When it returns, every call that pinned the object has ended and
/// none can pin it any more: the caller alone may tear it down.
#[inline]
pub fn wait_drained<R: Atomic<Int = u64>>(refs: &R, own: u64, mut relax: impl FnMut(u32)) {
    let mut i = 0u32;
    while refs.load(Ordering::Acquire) != own * PIN {
        relax(i);
        i = i.saturating_add(1);
    }
    refs.store(0, Ordering::Release);
}

/// Finalisation, last step before the slot goes back to its arena: the generation goes from
/// the object's odd value to the next even one, so the slot reads as free.
#[inline]
pub fn retire<G: Atomic<Int = u32>>(gen: &G) {
    gen.store(
        gen.load(Ordering::Acquire).wrapping_add(1),
        Ordering::Release,
    );
}

/// What kind of object a handle names (for messages and matching).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum HandleKind {
    /// A [`DmemHandle`].
    Dmem,
    /// A [`TensorHandle`].
    Tensor,
    /// A [`ModelHandle`].
    Model,
    /// A [`SetHandle`].
    Set,
    /// An [`AllocatorHandle`].
    Allocator,
}

/// Why a handle was refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum HandleFault {
    /// A handle of this runtime whose object is gone: freed (a double free, a use after
    /// free), being freed right now, or bits that name no object of this runtime.
    Stale,
    /// A handle of another runtime instance, of this one before it was closed, or of this
    /// one before it was initialised again (its epoch is not the runtime's).
    Foreign,
    /// Bits no handle ever had: a slot index past the arena, or an even (free) generation.
    Forged,
}

/// A refused handle: which kind, and why (`Error::InvalidHandle`, NRT_INVALID).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HandleError {
    /// What the handle was for.
    pub kind: HandleKind,
    /// Why it was refused.
    pub fault: HandleFault,
}

impl fmt::Display for HandleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            HandleKind::Dmem => "dmem",
            HandleKind::Tensor => "tensor",
            HandleKind::Model => "model",
            HandleKind::Set => "tensor set",
            HandleKind::Allocator => "allocator",
        };
        match self.fault {
            HandleFault::Stale if self.kind == HandleKind::Model => write!(
                f,
                "model handle names no loaded model (already unloaded, being unloaded, or \
                 never loaded)"
            ),
            HandleFault::Stale => write!(
                f,
                "{kind} handle names no live {kind} (already freed, being freed, or never made)"
            ),
            HandleFault::Foreign => write!(
                f,
                "{kind} handle belongs to another runtime (another instance, or before this one \
                 was closed or initialised again)"
            ),
            HandleFault::Forged => write!(f, "{kind} handle was never issued (forged bits)"),
        }
    }
}

// What the README promises of the handles: plain values any thread may hold and compare.
static_assertions::assert_impl_all!(
    DmemHandle: Copy,
    Send,
    Sync,
    Eq,
    core::hash::Hash,
    fmt::Debug
);
static_assertions::assert_impl_all!(
    TensorHandle: Copy,
    Send,
    Sync,
    Eq,
    core::hash::Hash,
    fmt::Debug
);
static_assertions::assert_impl_all!(
    AllocatorHandle: Copy,
    Send,
    Sync,
    Eq,
    core::hash::Hash,
    fmt::Debug
);
static_assertions::assert_impl_all!(HandleError: Copy, Send, Sync, Eq, fmt::Display);

/// The three words of a handle.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Raw {
    pub(crate) index: u32,
    pub(crate) generation: u32,
    pub(crate) epoch: u32,
}

macro_rules! handle_type {
    ($(#[$m:meta])* $name:ident, $kind:expr) => {
        $(#[$m])*
        #[derive(Copy, Clone, PartialEq, Eq, Hash)]
        pub struct $name(pub(crate) Raw);

        impl $name {
            /// What kind of object this names.
            pub const KIND: HandleKind = $kind;

            /// The handle's words `(index, generation, epoch)` (for logs, or to pass it
            /// through a C API as plain integers).
            pub const fn to_parts(self) -> (u32, u32, u32) {
                (self.0.index, self.0.generation, self.0.epoch)
            }

            /// A handle from its words. Safe for any bits: a handle that was never issued
            /// resolves to nothing and every call refuses it.
            pub const fn from_parts(index: u32, generation: u32, epoch: u32) -> Self {
                $name(Raw {
                    index,
                    generation,
                    epoch,
                })
            }

            /// The handle as one `u128` (`index | generation << 32 | epoch << 64`).
            pub const fn to_bits(self) -> u128 {
                self.0.index as u128
                    | (self.0.generation as u128) << 32
                    | (self.0.epoch as u128) << 64
            }

            /// [`Self::to_bits`] backwards; any bits are safe (see [`Self::from_parts`]).
            pub const fn from_bits(b: u128) -> Self {
                Self::from_parts(b as u32, (b >> 32) as u32, (b >> 64) as u32)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    concat!(stringify!($name), "({}g{}e{})"),
                    self.0.index, self.0.generation, self.0.epoch
                )
            }
        }

        #[cfg(feature = "defmt")]
        impl defmt::Format for $name {
            fn format(&self, f: defmt::Formatter<'_>) {
                // defmt's format string must be a literal: the type name is an argument.
                defmt::write!(
                    f,
                    "{=str}({}g{}e{})",
                    stringify!($name),
                    self.0.index,
                    self.0.generation,
                    self.0.epoch
                )
            }
        }
    };
}

handle_type!(
    /// A device or host DMA allocation (`dmem_t`) of one runtime, as the safe API names it:
    /// `Copy + Send + Sync`; a stale, forged or foreign one is refused at any age
    /// (`Error::InvalidHandle`). See the module docs for the protocol and the wrap bound.
    DmemHandle,
    HandleKind::Dmem
);

handle_type!(
    /// A tensor (`nrt_tensor_t`, slices included) of one runtime, as the safe API names it:
    /// `Copy + Send + Sync`; a stale, forged or foreign one is refused at any age
    /// (`Error::InvalidHandle`). See the module docs for the protocol and the wrap bound.
    TensorHandle,
    HandleKind::Tensor
);

handle_type!(
    /// A tensor set (`nrt_tensor_set_t`: name → tensor, spec §7.3) of one runtime, as the
    /// safe API names it: `Copy + Send + Sync`; a stale, forged or foreign one is refused at
    /// any age (`Error::InvalidHandle`). See the module docs for the protocol and the wrap
    /// bound.
    SetHandle,
    HandleKind::Set
);

handle_type!(
    /// A dmem allocator (`dmem_allocator_t`, spec §3.1: a core's GLOBAL allocator, or one made
    /// with `DeviceMemory::allocator_create`) of one runtime, as the safe API names it:
    /// `Copy + Send + Sync`; a destroyed, forged or foreign one is refused at any age
    /// (`Error::InvalidHandle`). Its generation and reference words live in a side table of
    /// the allocator arena (the ABI struct has no room for them); the protocol and the wrap
    /// bound are the module docs'.
    AllocatorHandle,
    HandleKind::Allocator
);

handle_type!(
    /// A resident model of one runtime (spec §4), as the safe API names it: `Copy + Send +
    /// Sync`. Its words are `(logical core, H_MODEL id, epoch)`: the core says whose
    /// `model_db` to look in (no scan over the cores), the id is the `H_MODEL` the ABI stores
    /// (`model_t.h_model`, the `model_db` key, `tpb.h_running_model`) and logs print, and the
    /// epoch refuses a handle of another runtime or of this one before `close` / re-`init`.
    ///
    /// Models are not named through an arena generation: their ids come from the
    /// process-wide `tdrv_get_unique_h_model` counter (spec §4.2), which never hands an id
    /// out twice below 2³² loads, so a handle whose id is not in its core's `model_db` is
    /// stale (unloaded, at any age) or forged, and is refused (`Error::InvalidHandle`,
    /// NRT_INVALID_HANDLE). The pin is the `model_t.ref_count` libnrt's unload drains
    /// (spec §4.4–§4.5), taken under the `model_db` lock.
    ModelHandle,
    HandleKind::Model
);

impl ModelHandle {
    /// The `H_MODEL` the ABI stores for this model (and logs print).
    pub const fn h_model(self) -> crate::abi::H_MODEL {
        crate::abi::H_MODEL {
            id: self.0.generation,
        }
    }

    /// The logical core the model was loaded on (spec §9).
    pub const fn core(self) -> crate::device::LogicalCore {
        crate::device::LogicalCore::new(self.0.index)
    }
}

/// The process-wide epoch counter: every `init` takes the next value (never 0).
static EPOCH: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

/// The next runtime epoch (process-unique below 2³² inits; never 0).
pub(crate) fn next_epoch() -> u32 {
    loop {
        let e = EPOCH.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if e != 0 {
            return e;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atomic::AtomicU64;
    use core::sync::atomic::AtomicU32;

    /// The one-step free takes only the sole case (one owner, the caller's pin alone) and
    /// leaves the word as `drop_owner` + `wait_drained` would; any other word is untouched.
    #[test]
    fn the_sole_pinned_owner_is_released_in_one_step() {
        let (g, r) = (AtomicU32::new(0), AtomicU64::new(0));
        let a = publish(&g, &r);
        assert!(pin(&g, &r, a));
        assert!(pin(&g, &r, a), "a second pin");
        assert!(!release_sole_pinned(&r), "another call has it pinned");
        assert_eq!(r.load(Ordering::Acquire), 1 + 2 * PIN);
        unpin(&r);
        assert!(add_owner(&r));
        assert!(!release_sole_pinned(&r), "another owner");
        assert_eq!(drop_owner(&r), Dropped::Shared);
        assert!(release_sole_pinned(&r));
        assert_eq!(r.load(Ordering::Acquire), 0, "drained: no owner, no pin");
        assert!(!pin(&g, &r, a), "no new pins");
        assert!(!release_sole_pinned(&r), "nothing left to release");
    }

    #[test]
    fn lifecycle_of_one_slot() {
        let (g, r) = (AtomicU32::new(0), AtomicU64::new(0));
        let a = publish(&g, &r);
        assert_eq!(a, 1);
        assert!(pin(&g, &r, a));
        assert!(!pin(&g, &r, a + 2), "a future generation");
        assert!(!pin(&g, &r, a + 1), "an even generation");
        assert_eq!(drop_owner(&r), Dropped::Last);
        assert!(!pin(&g, &r, a), "no owners: no new pins");
        assert_eq!(drop_owner(&r), Dropped::NoOwner, "double free");
        wait_drained(&r, 1, |_| panic!("only our pin"));
        retire(&g);
        assert_eq!(g.load(Ordering::Acquire), 2);
        assert!(!pin(&g, &r, a));
        let b = publish(&g, &r);
        assert_eq!(b, 3);
        assert!(!pin(&g, &r, a), "the old handle never names the new object");
        // Wrap: odd u32::MAX retires to 0, publishes 1.
        let (g, r) = (AtomicU32::new(u32::MAX - 1), AtomicU64::new(0));
        assert_eq!(publish(&g, &r), u32::MAX);
        r.store(0, Ordering::Release);
        retire(&g);
        assert_eq!(publish(&g, &r), 1);
    }

    #[test]
    fn shared_owners() {
        let (g, r) = (AtomicU32::new(0), AtomicU64::new(0));
        let a = publish(&g, &r);
        assert!(pin(&g, &r, a));
        assert!(add_owner(&r));
        unpin(&r);
        assert!(pin(&g, &r, a));
        assert_eq!(drop_owner(&r), Dropped::Shared);
        unpin(&r);
        assert!(pin(&g, &r, a));
        assert_eq!(drop_owner(&r), Dropped::Last);
        assert!(!add_owner(&r));
    }

    #[test]
    fn epochs_are_distinct_and_nonzero() {
        let a = next_epoch();
        let b = next_epoch();
        assert!(a != 0 && b != 0 && a != b);
    }
}
