//! How a state block's storage is cut between the domain pools' arenas: each
//! pool lists its storage [`Part`]s once, in a `const fn parts(&Capacity)`, and that one list
//! both sizes the block ([`CoreState::storage_bytes`], a `StaticState`'s const size) and binds
//! it (the pool's `bind`, which hands each part to its arena through a [`Binder`]). The
//! binder is the only code that touches the raw storage, so the pools bind their own arenas
//! in safe code and cannot reach past their region.

use super::super::*;
use crate::arena::{InUse, STORAGE_ALIGN};

/// One part of a pool's storage: an arena of `len` slots in `shards` shards, or a side table
/// of `len` entries, with its size in bytes (what the type itself says it needs).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Part {
    bytes: usize,
    len: usize,
    shards: usize,
    setting: &'static str,
}

impl Part {
    /// An [`Arena`] of `len` slots cut into up to `shards` shards; `setting` names what raises
    /// its capacity (for [`crate::arena::ArenaFull`]).
    pub(crate) const fn arena<T: ZeroValid>(
        len: usize,
        shards: usize,
        setting: &'static str,
    ) -> Part {
        Part {
            bytes: Arena::<T>::storage_bytes(len),
            len,
            shards,
            setting,
        }
    }

    /// A [`SideTable`] of `len` entries (one per slot of its arena).
    pub(crate) const fn side_table<U>(len: usize) -> Part {
        Part {
            bytes: SideTable::<U>::bytes(len),
            len,
            shards: 0,
            setting: "",
        }
    }

    /// Bytes of a pool's parts together (each a multiple of [`STORAGE_ALIGN`], so laid one
    /// after another every part stays aligned).
    pub(crate) const fn total<const N: usize>(parts: &[Part; N]) -> usize {
        let mut total = 0;
        let mut i = 0;
        while i < N {
            total += parts[i].bytes;
            i += 1;
        }
        total
    }
}

/// A pool's region of a state block's storage, handed to its arenas part after part, in the
/// order of the pool's `parts` list. Made only by `CoreState::bind_storage` (one per pool, for
/// that pool's `bind`), so every arena it binds is a member of the state block that owns the
/// storage. A part that does not fit what is left, is not what its target's type needs, or is
/// offered to an arena that is already bound is refused: the arena stays unbound (every
/// allocation from it is `ArenaFull`, no pointer is its slot) and [`Binder::finish`] says so.
pub(crate) struct Binder {
    base: *mut u8,
    len: usize,
    at: usize,
    refused: bool,
    /// Given to every arena bound ([`InUse`]).
    in_use: Option<InUse>,
}

impl Binder {
    /// The region of `len` bytes at `base`; `in_use` is told about each arena's slots as
    /// they come into use.
    ///
    /// # Safety
    /// `base` is [`STORAGE_ALIGN`]-aligned and points at `len` zeroed bytes that nobody else
    /// uses, valid as long as the state block whose pools this binder is given to.
    pub(in crate::ctx) unsafe fn new(base: *mut u8, len: usize, in_use: Option<InUse>) -> Self {
        Binder {
            base,
            len,
            at: 0,
            refused: false,
            in_use,
        }
    }

    /// The next `p.bytes` of the region, if they fit and are aligned; `None` (and the binder
    /// marked refused) otherwise. `bytes` is what the target's type needs for `p`.
    fn take(&mut self, p: &Part, bytes: usize) -> Option<*mut u8> {
        let fits = p.bytes == bytes
            && p.len < 1 << 31
            && self.at.is_multiple_of(STORAGE_ALIGN)
            && self.len - self.at >= bytes;
        if !fits {
            self.refused = true;
            return None;
        }
        // In bounds: `at + bytes <= len` (checked above).
        let at = self.base.wrapping_add(self.at);
        self.at += bytes;
        Some(at)
    }

    /// Binds arena `a` to part `p` (the next part of the region).
    pub(crate) fn arena<T: ZeroValid>(&mut self, a: &mut Arena<T>, p: Part) {
        if a.capacity() != 0 {
            self.refused = true;
            return;
        }
        let Some(at) = self.take(&p, Arena::<T>::storage_bytes(p.len)) else {
            return;
        };
        // SAFETY: `at` is the start of `storage_bytes(p.len)` bytes of this binder's region
        // (`take` checked they fit and that `at` is STORAGE_ALIGN-aligned: the region is, and
        // every part before it is a multiple of STORAGE_ALIGN), zeroed and used by nobody else
        // (`new`'s contract; `take` hands each byte out once), valid as long as the state block
        // whose member `a` is (`new`'s contract: a binder only reaches its own block's pools);
        // `p.len < 2^31` (checked); the arena asserts its slot alignment at compile time; and
        // `a` was never bound (capacity 0) so never used (an unbound arena hands out nothing).
        unsafe { a.bind(at, p.len, p.shards, p.setting, self.in_use) };
    }

    /// Binds side table `t` to part `p` (the next part of the region).
    pub(crate) fn side_table<U: ZeroValid>(&mut self, t: &mut SideTable<U>, p: Part) {
        const { assert!(core::mem::align_of::<U>() <= STORAGE_ALIGN) };
        if t.entries() != 0 {
            self.refused = true;
            return;
        }
        let Some(at) = self.take(&p, SideTable::<U>::bytes(p.len)) else {
            return;
        };
        // SAFETY: as in `arena`: `bytes(p.len)` zeroed, unshared bytes of this region at an
        // address aligned for `U` (STORAGE_ALIGN, which the const assertion says is enough),
        // valid as long as `t`'s state block; all-zero is a valid `U` (`U: ZeroValid`); `t` is
        // unbound (length 0) and borrowed mutably, so nobody else references it.
        unsafe { t.bind(at, p.len) };
    }

    /// True when every part was bound and the region was used exactly.
    pub(in crate::ctx) fn finish(self) -> bool {
        !self.refused && self.at == self.len
    }
}
