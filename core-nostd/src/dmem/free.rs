//! A dmem's lifetime after allocation (spec §3.2): references, free, unlink and finalize,
//! and the teardown's reclaim of leftovers.

use core::ptr::{addr_of_mut, null_mut};
use core::sync::atomic::{AtomicPtr, Ordering};

use super::{Action, Dmem};
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
        // SAFETY: live slot of the dmem arena.
        let (_, refs) = unsafe { self.st.dmem.dmems.words(m) };
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
        // SAFETY: caller checked that `m` is a slot of the dmem arena.
        let (_, refs) = unsafe { self.st.dmem.dmems.words(m) };
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

    /// A dmem whose last owner is gone and whose pins have drained: unlinks it from its
    /// allocator (under the allocator's lock, so a concurrent walk never sees a freed node)
    /// and returns everything to the driver, the ledger and the arenas.
    pub(super) fn dmem_unlink_and_finalize(&self, call: &impl InCall, m: Dmem, how: GiveBack) {
        // SAFETY: nobody else uses `m` any more (drained), except an allocator destroy that
        // may detach it concurrently: `allocator` is read/written atomically for that, and is
        // null once detached.
        unsafe {
            let al_slot = AtomicPtr::from_ptr(addr_of_mut!((*m).allocator));
            loop {
                let al = al_slot.load(Ordering::Acquire);
                if al.is_null() {
                    break;
                }
                let g = (*al).lock.lock();
                if al_slot.load(Ordering::Acquire) != al {
                    drop(g);
                    continue; // detached meanwhile: retry on the new state
                }
                // `allocator` non-null under its lock means linked: a refusal is a corrupt
                // list, said loudly; the dmem is finalised either way (nothing else holds it).
                if let Err(e) = Self::list_unlink(al, m) {
                    error!("dmem_free: {}: the dmem is finalised off-list", e);
                    al_slot.store(null_mut(), Ordering::Release);
                }
                drop(g);
                break;
            }
            self.dmem_finalize(call, m, how);
        }
    }

    /// Returns an unlinked, unreferenced dmem to the driver, ledger and arenas.
    ///
    /// # Safety
    /// `m` is live, unlinked and its reference word reached zero with no pin left (we are the
    /// only user).
    pub(super) unsafe fn dmem_finalize(&self, call: &impl InCall, m: Dmem, how: GiveBack) {
        // SAFETY: caller contract.
        unsafe {
            let dev = (*m).device_id;
            if !(*m)._va.is_null() {
                let _ = self.drv.memory_unmap(dev, (*m).mem_handle);
            }
            self.st.live_handles.remove(dev, (*m).mem_handle);
            match self.drv.memory_free(dev, (*m).mem_handle) {
                Ok(()) => self.dml_add_entry(call, self.mla_ptr(dev), Action::Free, m),
                Err(e) => {
                    // The driver still holds the block: the ledger keeps it booked (it
                    // stays true about device memory), the runtime's figures count it and
                    // the call reports it.
                    let bytes = (*m).allocated_size;
                    error!(
                        "dmem_free: the driver refused to free {} bytes (handle {:#x}): {}",
                        bytes,
                        (*m).mem_handle,
                        e
                    );
                    self.st.driver_kept.note(bytes);
                    call.note_kept(bytes, e);
                }
            }
            (*m).hint = null_mut();
            // The slot reads as free before it can be handed out again.
            handle::retire(self.st.dmem.dmems.words(m).0);
            let _ = self.st.dmem.dmems.give_back(m, how);
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
            let m = m.as_ptr();
            // SAFETY: the gate is shut and every allocator is gone, so `m` is detached
            // (unlinked) and no other thread holds or pins it: dropping its last references is
            // ours.
            unsafe {
                self.st.dmem.dmems.words(m).1.store(0, Ordering::Release);
                self.dmem_finalize(ex, m, GiveBack::Release);
            }
        }
        before
    }
}
