//! A dmem's lifetime after allocation (spec §3.2): references, free, unlink and finalize,
//! and the teardown's reclaim of leftovers.

use super::Dmem;
use crate::arena::GiveBack;
use crate::ctx::{Exclusive, InCall, Nrt};
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{self, Dropped};

impl<'a> Nrt<'a> {
    /// [`Self::dmem_acquire_reference`] as a step of a gated call (`_call`), through a
    /// pointer whose owner reference the caller holds (the runtime's own calls).
    pub(crate) fn dmem_acquire_owned(&self, _call: &impl InCall, m: Dmem) -> Result<()> {
        if !self.st.dmem.dmems.is_live(m) {
            return Err(self.not_live(m));
        }
        let Some((_, refs)) = self.st.dmem.dmems.words_of(m) else {
            return Err(self.not_live(m));
        };
        if handle::add_owner(refs) {
            Ok(())
        } else {
            Err(Error::DoubleFree)
        }
    }

    /// [`Self::dmem_free`] as a step of a gated call (`call`), through a pointer whose owner
    /// reference the caller holds (the runtime's own calls).
    pub(crate) fn dmem_free_owned(&self, call: &impl InCall, m: Dmem) -> Result<()> {
        if !self.st.dmem.dmems.is_live(m) {
            return Err(self.not_live(m));
        }
        self.allocator_reachable(self.allocator_of(m))?;
        if self.dmem_release_ref(call, m, GiveBack::Release) {
            Ok(())
        } else {
            Err(Error::DoubleFree)
        }
    }

    /// Why `m` is not a live dmem: a slot of the dmem arena that is free (a double free, or a
    /// use after free), or no dmem of this runtime at all.
    pub(crate) fn not_live(&self, m: Dmem) -> Error {
        if self.st.dmem.dmems.owns(m) {
            Error::DoubleFree
        } else {
            Error::InvalidArgument(InvalidArg::ForeignDmemPointer)
        }
    }

    /// Drops one owner reference the caller holds (no pin); the last one waits for the
    /// calls that pinned the dmem to finish, then unlinks and finalises it. `false` when
    /// there was no owner left to drop (nothing changed).
    pub(crate) fn dmem_release_ref(&self, call: &impl InCall, m: Dmem, how: GiveBack) -> bool {
        let Some((_, refs)) = self.st.dmem.dmems.words_of(m) else {
            return false;
        };
        match handle::drop_owner(refs) {
            Dropped::NoOwner => false,
            Dropped::Shared => true,
            Dropped::Last => {
                handle::wait_drained(refs, 0, crate::sync::relax);
                self.dmem_unlink_and_finalize(call, m, how);
                true
            }
        }
    }

    /// `close`'s last sweep (spec §12: afterwards the driver holds nothing of this runtime).
    /// Releases what an integrator left behind through the public dmem calls: allocators it
    /// created and never destroyed (with every dmem on them), then dmems it still referenced
    /// (`dmem_acquire_reference`) after their allocator went. Returns how many dmems were
    /// reclaimed. Only for `close` (its token `ex`), once the gate is shut: nothing else can
    /// reach them.
    pub(crate) fn reclaim_leftover_dmems(&self, ex: &Exclusive<'_>) -> usize {
        let before = self.st.dmem.dmems.stats().live;
        for al in self.st.dmem.allocators.live_slots() {
            let _ = self.allocator_destroy(ex, al.as_ptr(), GiveBack::Release);
        }
        for m in self.st.dmem.dmems.live_slots() {
            self.dmem_reclaim(ex, m.as_ptr());
        }
        before
    }
}
