//! The allocator tier (spec §3.1): GLOBAL and MODEL allocators, their dmem lists and books,
//! their walks and checks, and the weak GC indexes (`dmem_list_t`) that reference dmems.

use core::ptr::{addr_of_mut, null_mut, NonNull};
use core::sync::atomic::{AtomicPtr, Ordering};

use super::Dmem;
use crate::abi::*;
use crate::arena::GiveBack;
use crate::ctx::{InCall, Nrt};
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{self, Dropped};
use crate::list::{allocator_list, ListError, WeakIndex};
use crate::sync::{reentry_key, WaitFor};

impl<'a> Nrt<'a> {
    /// Marks whether `al` (a live allocator) was made through the public API.
    pub(super) fn set_caller_owned(&self, al: *mut dmem_allocator_t, caller: bool) {
        if let Some(f) = self
            .st
            .dmem
            .allocators
            .index_of(al)
            .and_then(|i| self.st.dmem.caller_allocators.flag(i))
        {
            f.store(caller as u8, Ordering::Release);
        }
    }

    /// Whether `al` was made through the public API (see [`Self::set_caller_owned`]).
    pub(super) fn is_caller_owned(&self, al: *mut dmem_allocator_t) -> bool {
        self.st
            .dmem
            .allocators
            .index_of(al)
            .and_then(|i| self.st.dmem.caller_allocators.flag(i))
            .is_some_and(|f| f.load(Ordering::Acquire) == 1)
    }

    /// [`Self::dmem_allocator_create`] as a step of a gated call or of `init` (`_call`),
    /// without marking the allocator the caller's (the runtime's own allocators).
    pub(crate) fn allocator_create(
        &self,
        _call: &impl InCall,
        pcore: *mut physical_core_t,
        ty: dmem_allocator_type_t,
    ) -> Result<*mut dmem_allocator_t> {
        let (dev, core) = self
            .tree_pcore(pcore)
            .ok_or(Error::InvalidArgument(InvalidArg::PcoreNotInTree))?;
        self.tpb(dev, core)?; // attached
        let al = self.st.dmem.allocators.alloc("dmem_allocator_t")?.as_ptr();
        // SAFETY: fresh zeroed slot owned by us (no other thread can reach it yet, so its
        // list is ours without the lock).
        unsafe {
            (*al).r#type = ty as u32;
            (*al).pcore = pcore;
            allocator_list(al).init();
        }
        Ok(al)
    }

    /// [`Self::dmem_allocator_destroy`] as a step of a gated call or of `close` (`call`),
    /// for any live allocator (the runtime's own too). `how` says how the slots go back:
    /// [`GiveBack::Cancel`] only for a rollback of allocations nobody else saw.
    pub(crate) fn allocator_destroy(
        &self,
        call: &impl InCall,
        al: *mut dmem_allocator_t,
        how: GiveBack,
    ) -> Result<()> {
        if !self.st.dmem.allocators.is_live(al) {
            return Err(Error::InvalidArgument(InvalidArg::AllocatorNotLive));
        }
        loop {
            // SAFETY: `al` is live; the list is only modified under its lock. A linked dmem
            // is not finalised yet (finalising unlinks it under this lock first).
            let (first, pinned) = unsafe {
                let _g = (*al).lock.lock();
                let Some(n) = allocator_list(al).first() else {
                    break;
                };
                let n = n.as_ptr();
                // Pinned before it is detached, so it stays whole however a racing free goes.
                // No pin when its last owner is already gone: that free finalises it, and
                // finds it detached.
                let pinned = handle::add_pin_if_owned(self.st.dmem.dmems.words(n).1);
                // Detach: the allocator no longer owns it. The first node of the list is
                // linked, so this cannot be refused; if it were (a corrupt list), stop here
                // rather than loop on it: the allocator is still released below.
                if let Err(e) = Self::list_unlink(al, n) {
                    error!(
                        "dmem_allocator_destroy: {}; the rest of the list is abandoned",
                        e
                    );
                    if pinned {
                        handle::unpin(self.st.dmem.dmems.words(n).1);
                    }
                    break;
                }
                (n, pinned)
            };
            if pinned {
                // SAFETY: a slot of the dmem arena, pinned above.
                let refs = unsafe { self.st.dmem.dmems.words(first).1 };
                match handle::drop_owner(refs) {
                    Dropped::Last => {
                        handle::wait_drained(refs, 1, crate::sync::relax);
                        self.dmem_unlink_and_finalize(call, first, how);
                    }
                    _ => handle::unpin(refs),
                }
            }
        }
        self.set_caller_owned(al, false);
        self.st
            .dmem
            .allocators
            .give_back(al, how)
            .map_err(|_| Error::InvalidArgument(InvalidArg::AllocatorNotLive))
    }

    /// Number of dmems on `al`'s list and their allocated bytes; `(0, 0)` for an allocator that is
    /// not live, outside `init`…`close`, and when the calling thread walks `al` or the wait
    /// for its lock gives up ([`Self::allocator_for_each`]).
    pub fn allocator_usage(&self, al: *mut dmem_allocator_t) -> (u64, u64) {
        let Ok(_call) = self.enter() else {
            return (0, 0);
        };
        if !self.st.dmem.allocators.is_live(al) || self.allocator_reachable(al).is_err() {
            return (0, 0);
        }
        // SAFETY: live allocator; counters are maintained under its lock.
        unsafe {
            let Ok(_g) = (*al).lock.lock_bounded(WaitFor::AllocatorLock) else {
                return (0, 0);
            };
            ((*al).count, (*al).bytes)
        }
    }

    /// Calls `f` on every dmem of `al` under its list lock, which is not reentrant: a call
    /// from `f` that allocates from, frees into, measures ([`Self::allocator_usage`]) or walks
    /// `al` is refused at once with [`Error::WouldDeadlock`] when a thread token is installed
    /// (`crate::sync::set_thread_token_hook`), else when its bounded wait for the lock gives
    /// up ([`Error::Timeout`]). `Closed` / `Uninitialized` outside `init`…`close`; an
    /// allocator that is not live has no dmems.
    pub fn allocator_for_each(
        &self,
        al: *mut dmem_allocator_t,
        f: impl FnMut(&dmem_t),
    ) -> Result<()> {
        let call = self.enter()?;
        self.allocator_walk(&call, al, f)
    }

    /// [`Self::allocator_for_each`] as a step of a gated call (`_call`).
    pub(crate) fn allocator_walk(
        &self,
        _call: &impl InCall,
        al: *mut dmem_allocator_t,
        mut f: impl FnMut(&dmem_t),
    ) -> Result<()> {
        if !self.st.dmem.allocators.is_live(al) {
            return Ok(());
        }
        let key = reentry_key::allocator(al as usize);
        self.st.reentry.refuse(key, WaitFor::AllocatorLock)?;
        let _counted = self.st.reentry.walk();
        // SAFETY: live allocator, walked under its lock; its linked dmems are live (a dmem is
        // unlinked under this lock before it is finalised).
        unsafe {
            let _g = (*al).lock.lock_bounded(WaitFor::AllocatorLock)?;
            let _walking = self.st.reentry.hold(key);
            for n in allocator_list(al).iter() {
                f(n.as_ref());
            }
        }
        Ok(())
    }

    /// Refuses a call that would wait for `al`'s lock while its own thread walks `al`
    /// ([`Self::allocator_for_each`]): `WouldDeadlock` when the thread token shows it, else a
    /// bounded probe of the lock (`Timeout` when it gives up). Nothing is held afterwards. A
    /// null or dead allocator passes (the call refuses it itself), and so does any allocator
    /// while no walk is in progress (its lock is then held only for sections of the core).
    pub(crate) fn allocator_reachable(&self, al: *mut dmem_allocator_t) -> Result<()> {
        if !self.st.reentry.walking() || al.is_null() || !self.st.dmem.allocators.is_live(al) {
            return Ok(());
        }
        self.st
            .reentry
            .refuse(reentry_key::allocator(al as usize), WaitFor::AllocatorLock)?;
        // SAFETY: a live allocator slot; only its lock word (an atomic) is touched.
        let lock = unsafe { &*core::ptr::addr_of!((*al).lock) };
        drop(lock.lock_bounded(WaitFor::AllocatorLock)?);
        Ok(())
    }

    /// Walks `al`'s list under its lock and checks it ([`crate::list::List::check`]): every
    /// link symmetric, and as many dmems as the allocator's own count says. The outer error is
    /// the call's (`Closed`, `Uninitialized`, an allocator that is not live), the inner one
    /// the list's.
    pub fn allocator_check(
        &self,
        al: *mut dmem_allocator_t,
    ) -> Result<core::result::Result<(), ListError>> {
        let _call = self.enter()?;
        if !self.st.dmem.allocators.is_live(al) {
            return Err(Error::InvalidArgument(InvalidArg::AllocatorNotLive));
        }
        self.allocator_reachable(al)?;
        // SAFETY: live allocator, checked under its lock.
        unsafe {
            let _g = (*al).lock.lock_bounded(WaitFor::AllocatorLock)?;
            // More than the arena's slots cannot be linked: refused without a walk, so a
            // corrupt count does not make a cycle a long walk.
            let len = match usize::try_from((*al).count) {
                Ok(n) if n <= self.st.dmem.dmems.capacity() => n,
                _ => return Ok(Err(ListError::Broken)),
            };
            Ok(allocator_list(al).check(len))
        }
    }

    /// `list_insert_before(&al->dummy_tail, m)` and the allocator's books. A dmem that is
    /// already on a list is refused ([`ListError::AlreadyLinked`]), changing nothing.
    ///
    /// # Safety
    /// `al` live, its lock held; `m` a live dmem.
    pub(super) unsafe fn list_insert_tail(
        al: *mut dmem_allocator_t,
        m: Dmem,
    ) -> core::result::Result<(), ListError> {
        // SAFETY: `al` live with its lock held, so its list is ours; `m` is live and guarded by
        // the same lock once linked (caller contract).
        unsafe {
            allocator_list(al).push_back(NonNull::new_unchecked(m))?;
            AtomicPtr::from_ptr(addr_of_mut!((*m).allocator)).store(al, Ordering::Release);
            (*al).count += 1;
            (*al).bytes += (*m).allocated_size;
        }
        Ok(())
    }

    /// Unlinks `m` from `al` and takes it off the allocator's books. A dmem on no list is
    /// refused ([`ListError::NotLinked`]), changing nothing.
    ///
    /// # Safety
    /// `al` live, its lock held; `m` a live dmem whose `allocator` is `al` (so if linked, it
    /// is on `al`'s list).
    pub(super) unsafe fn list_unlink(
        al: *mut dmem_allocator_t,
        m: Dmem,
    ) -> core::result::Result<(), ListError> {
        // SAFETY: caller contract, as in `list_insert_tail`.
        unsafe {
            allocator_list(al).remove(NonNull::new_unchecked(m))?;
            AtomicPtr::from_ptr(addr_of_mut!((*m).allocator)).store(null_mut(), Ordering::Release);
            (*al).count -= 1;
            (*al).bytes -= (*m).allocated_size;
        }
        Ok(())
    }

    /// A weak GC index (`dmem_list_t`) from the arena.
    pub(crate) fn dmem_list_new(&self) -> Result<*mut dmem_list_t> {
        Ok(self.st.dmem.dmem_lists.alloc("dmem_list_t")?.as_ptr())
    }

    /// Releases a weak index and its nodes (not the dmems: the list does not own them).
    pub(crate) fn dmem_list_destroy(&self, list: *mut dmem_list_t, how: GiveBack) {
        if list.is_null() {
            return;
        }
        // SAFETY: non-null, a live index whose nodes came from `ref_nodes` and are owned by
        // it; the caller (model free) is its only user now.
        let mut index = unsafe { WeakIndex::new(NonNull::new_unchecked(list)) };
        index.drain(|n| {
            let _ = self.st.dmem.ref_nodes.give_back(n.as_ptr(), how);
        });
        let _ = self.st.dmem.dmem_lists.give_back(list, how);
    }
}
