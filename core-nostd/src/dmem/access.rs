//! The dmem domain's raw accessors (spec §3.1, §3.2): the allocator tier (GLOBAL and MODEL
//! allocators, their dmem lists and books, their walks and checks), the weak GC indexes
//! (`dmem_list_t`) that reference dmems, and every read and write of a `dmem_t` slot's fields.
//! The rest of `dmem/` is `#![deny(unsafe_code)]`: this is the one file of the domain where
//! `unsafe` is allowed.
//!
//! Eight accessors rest on a crate-internal contract that their callers in `dmem/` keep, as
//! `owned_dmem_fixed` does for tensor IO: [`Nrt::allocator_core`] ("`pinned` is `al`'s own
//! words, its pin held"), [`Nrt::dmem_write_request`],
//! [`Nrt::dmem_write_handle`] and [`Nrt::dmem_write_answer`] ("`m` is a fresh slot this call
//! owns"), [`Nrt::dmem_holds_key`] ("`slot` is in the set of live handles, under its bucket's
//! lock"), [`Nrt::allocator_link`] ("`al` resolved live in this call, `m` just made"),
//! [`Nrt::dmem_cancel_unlinked`] ("`m` is unlinked, its one owner is this call, no handle of
//! it was handed out") and [`Nrt::dmem_reclaim`] ("the gate is shut and every allocator is
//! gone").

use core::ptr::{addr_of, addr_of_mut, null_mut, NonNull};
use core::sync::atomic::{AtomicPtr, Ordering};

use super::{Action, AllocArgs, AllocatorPin, Booking, Dmem, DmemEntry, DmemInfo, DmemPin};
use crate::abi::*;
use crate::arena::GiveBack;
use crate::ctx::state::dmem::AllocatorWords;
use crate::ctx::{InCall, Nrt};
use crate::driver::Errno;
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{self, AllocatorHandle, Dropped, HandleKind};
use crate::list::{allocator_list, ListError, WeakIndex};
use crate::sync::{reentry_key, WaitFor};

// SAFETY: two atomics; all-zero bytes are an even generation and an empty word (a free slot).
unsafe impl crate::abi::meta::ZeroValid for AllocatorWords {}
// SAFETY: only atomics, and every access to them is atomic.
unsafe impl crate::arena::AtomicEntry for AllocatorWords {}

impl<'a> Nrt<'a> {
    /// The handle words of allocator slot `al` (live or not); `None` for a pointer that is
    /// not a slot of the allocator arena.
    #[inline]
    fn allocator_words(&self, al: *const dmem_allocator_t) -> Option<&'a AllocatorWords> {
        let st: &'a crate::ctx::CoreState = self.st;
        let i = st.dmem.allocators.index_of(al)?;
        st.dmem.allocator_words.entry(i)
    }

    /// The handle of live allocator `al`, which the caller keeps alive for the call (a
    /// runtime-owned one it just resolved, or one it just made). A pointer that is not an
    /// allocator slot yields a handle every resolver refuses.
    pub(crate) fn allocator_handle_owned(&self, al: *const dmem_allocator_t) -> AllocatorHandle {
        let st: &'a crate::ctx::CoreState = self.st;
        let (index, generation) = match (st.dmem.allocators.index_of(al), self.allocator_words(al))
        {
            (Some(i), Some(w)) => (i as u32, w.gen.load(Ordering::Acquire)),
            _ => (u32::MAX, 0),
        };
        AllocatorHandle(handle::Raw {
            index,
            generation,
            epoch: self.epoch(),
        })
    }

    /// The handle of `al` if it is a live allocator of this runtime right now (it may be
    /// destroyed the moment after: the handle is then refused).
    pub(crate) fn allocator_handle_of(
        &self,
        al: *const dmem_allocator_t,
    ) -> Option<AllocatorHandle> {
        let w = self.allocator_words(al)?;
        let generation = w.gen.load(Ordering::Acquire);
        if generation & 1 == 0 || w.refs.load(Ordering::Acquire) & handle::OWNERS == 0 {
            return None;
        }
        Some(AllocatorHandle(handle::Raw {
            index: self.st.dmem.allocators.index_of(al)? as u32,
            generation,
            epoch: self.epoch(),
        }))
    }

    /// Resolves and pins `h` (the pin protocol of [`crate::handle`]): the allocator cannot be
    /// destroyed, nor its slot reused, until the pin drops. Called inside a gated call (the
    /// caller holds an [`InCall`]): a core's GLOBAL allocator, which only `close` destroys, is
    /// resolved by its generation alone, without a pin.
    #[inline]
    pub(super) fn allocator_pin(&self, h: AllocatorHandle) -> Result<AllocatorPin<'a>> {
        self.check_epoch(h.0, HandleKind::Allocator)?;
        let st: &'a crate::ctx::CoreState = self.st;
        let forged = Error::forged(HandleKind::Allocator);
        if h.0.generation & 1 == 0 {
            return Err(forged);
        }
        let al = st.dmem.allocators.slot(h.0.index).ok_or(forged)?;
        let w = st
            .dmem
            .allocator_words
            .entry(h.0.index as usize)
            .ok_or(forged)?;
        // `stable` is written before the generation is published and cleared only by a
        // destroy, which for a GLOBAL allocator runs under `close`'s exclusive token.
        if w.gen.load(Ordering::Acquire) == h.0.generation && w.stable.load(Ordering::Acquire) == 1
        {
            return Ok(AllocatorPin {
                al,
                words: w,
                refs: None,
            });
        }
        if handle::pin(&w.gen, &w.refs, h.0.generation) {
            Ok(AllocatorPin {
                al,
                words: w,
                refs: Some(&w.refs),
            })
        } else {
            Err(Error::stale(HandleKind::Allocator))
        }
    }

    /// The public destroy's claim on a pinned allocator: takes its one owner and the caller's
    /// pin in one step, so no call can pin it any more. Refused (`AllocatorInUse`, nothing
    /// changed) while any other call has it pinned: an allocation, a walk, or another destroy.
    pub(super) fn allocator_claim(&self, p: AllocatorPin<'_>) -> Result<()> {
        let Some(refs) = p.refs else {
            // Unpinned: a core's GLOBAL allocator, the runtime's.
            return Err(Error::InvalidArgument(InvalidArg::RuntimeOwnedAllocator));
        };
        let claimed = refs
            .compare_exchange(1 + handle::PIN, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if claimed {
            // The pin went with the owner.
            core::mem::forget(p);
            Ok(())
        } else {
            Err(Error::InvalidArgument(InvalidArg::AllocatorInUse))
        }
    }

    /// The physical core allocator `al` (pinned by the caller) allocates for: the
    /// `(device, core)` [`AllocatorWords::core`] holds, resolved at its creation.
    pub(super) fn allocator_pcore(&self, al: *mut dmem_allocator_t) -> Result<(u32, u32)> {
        let core = self
            .allocator_words(al)
            .ok_or(Error::InvalidArgument(InvalidArg::AllocatorWithoutCore))?
            .core
            .load(Ordering::Acquire);
        Ok((core >> 16, core & 0xffff))
    }

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
        if let Some(w) = self.allocator_words(al) {
            w.stable.store(0, Ordering::Release);
            w.core.store(dev << 16 | core, Ordering::Release);
            handle::publish(&w.gen, &w.refs);
        }
        Ok(al)
    }

    /// Marks `al` a core's GLOBAL allocator (`tpb_allocator`), made by `init` (`_ex`: its
    /// exclusive token, so no call is in flight): it lives until `close`, so a gated call
    /// resolves its handle without a pin ([`Self::allocator_pin`]).
    pub(crate) fn allocator_mark_core(&self, _ex: &impl InCall, al: *mut dmem_allocator_t) {
        if let Some(w) = self.allocator_words(al) {
            w.stable.store(1, Ordering::Release);
        }
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
        let words = self.allocator_words(al);
        if let Some(w) = words {
            // No new pins through handles; those in flight finish first (the public destroy
            // claimed the owner already, refusing while any was in flight).
            if handle::drop_owner(&w.refs) != Dropped::NoOwner {
                handle::wait_drained(&w.refs, 0, crate::sync::relax);
            }
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
        if let Some(w) = words {
            w.stable.store(0, Ordering::Release);
            handle::retire(&w.gen);
        }
        self.st
            .dmem
            .allocators
            .give_back(al, how)
            .map_err(|_| Error::InvalidArgument(InvalidArg::AllocatorNotLive))
    }

    /// The body of [`crate::dmem::DeviceMemory::allocator_usage`].
    pub(crate) fn allocator_usage(&self, al: *mut dmem_allocator_t) -> (u64, u64) {
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

    /// The body of [`crate::dmem::DeviceMemory::allocator_for_each`].
    pub(crate) fn allocator_for_each(
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
    #[inline]
    pub(crate) fn allocator_reachable(&self, al: *mut dmem_allocator_t) -> Result<()> {
        if !self.st.reentry.walking() {
            return Ok(());
        }
        self.allocator_reachable_walking(al)
    }

    /// [`Self::allocator_reachable`] while some thread walks an allocator.
    #[cold]
    #[inline(never)]
    fn allocator_reachable_walking(&self, al: *mut dmem_allocator_t) -> Result<()> {
        if al.is_null() || !self.st.dmem.allocators.is_live(al) {
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

    /// The body of [`crate::dmem::DeviceMemory::allocator_check`].
    pub(crate) fn allocator_check(
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
    #[inline(always)]
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
    #[inline(always)]
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

    /// The core allocator `al` allocates for: its `physical_core_t` and the `(device, core)`
    /// it was resolved to in the context tree at creation ([`AllocatorWords::core`]). A call
    /// from a thread that walks `al` is refused. With `pinned` `None`, `al` is any pointer and
    /// one that is not a live allocator is refused; `Some` is `al`'s own words, which this
    /// call found resolving `al`'s handle and whose pin it holds (or `al` is runtime-owned),
    /// so `al` is live (the caller's contract).
    #[inline]
    pub(super) fn allocator_core(
        &self,
        al: *mut dmem_allocator_t,
        pinned: Option<&AllocatorWords>,
    ) -> Result<AllocatorCore> {
        let w = match pinned {
            // Resolved through its handle by this call, and pinned (or runtime-owned).
            Some(w) => w,
            None => match self.allocator_words(al) {
                Some(w) if self.st.dmem.allocators.is_live(al) => w,
                _ => return Err(Error::InvalidArgument(InvalidArg::AllocatorNotLive)),
            },
        };
        // Its own thread walking `al` would hold the lock the alloc path's link takes.
        if self.st.reentry.walking() {
            self.st
                .reentry
                .refuse(reentry_key::allocator(al as usize), WaitFor::AllocatorLock)?;
        }
        // SAFETY: a live allocator (checked above, or by the pin `pinned` comes with); pcore
        // was set at creation, before it was published.
        let pcore = unsafe { (*al).pcore };
        if pcore.is_null() {
            return Err(Error::InvalidArgument(InvalidArg::AllocatorWithoutCore));
        }
        let core = w.core.load(Ordering::Acquire);
        Ok(AllocatorCore {
            pcore,
            dev: core >> 16,
            nc_id: core & 0xffff,
        })
    }

    /// Writes the fields of fresh dmem `m` (spec §3.2 step 5) that the request fixes, before
    /// the driver is asked (so they need not be held across its call). Contract: `m` is a
    /// fresh zeroed slot of the dmem arena that this call owns (just taken with
    /// `alloc_handle`, not yet published); if the call fails, the slot goes back unpublished
    /// and is zeroed again when next taken.
    #[inline(always)]
    pub(super) fn dmem_write_request(&self, m: Dmem, f: &DmemFields<'_, '_>) {
        // SAFETY: `m` is a fresh zeroed slot owned by this call (contract).
        unsafe {
            crate::cstr::copy_c_name(&mut (*m).hint_buf, f.a.hint);
            (*m).size = f.a.size;
            (*m).align = f.a.align;
            (*m).mem_type = f.loc as u32;
            (*m).mem_usage_type = f.usage as u32;
            (*m).tdram_channel = f.hbm;
            (*m).pcore = f.pcore;
            (*m).nc_id = f.nc_id;
            (*m).device_id = f.dev;
            (*m).hint = addr_of_mut!((*m).hint_buf) as *mut core::ffi::c_char;
            (*m).cpy_buf = f.copy_buf as usize as *mut core::ffi::c_void;
        }
    }

    /// Writes the driver's handle into fresh dmem `m`, before the set of live handles is asked
    /// to claim it: a slot in that set has its key (`mem_handle`, `device_id`, the latter
    /// from [`Self::dmem_write_request`]) in its fields ([`Self::dmem_holds_key`]). Contract:
    /// as [`Self::dmem_write_request`], which ran first on `m`.
    #[inline(always)]
    pub(super) fn dmem_write_handle(&self, m: Dmem, handle: u64) {
        // SAFETY: `m` is a fresh slot owned by this call (contract), not yet in the set of
        // live handles, so no other thread reads it.
        unsafe { (*m).mem_handle = handle };
    }

    /// Writes the rest of the driver's answer into dmem `m` ([`Self::dmem_write_request`] and
    /// [`Self::dmem_write_handle`] wrote the other fields) and publishes it: generation, then
    /// one owner. `allocated` is its `size + align_offset`. Returns the generation its
    /// handles carry. Contract: as [`Self::dmem_write_request`], which ran first on `m`.
    #[inline(always)]
    pub(super) fn dmem_write_answer(
        &self,
        m: Dmem,
        pa: u64,
        align_offset: u64,
        allocated: u64,
    ) -> u32 {
        // SAFETY: `m` is a fresh slot owned by this call (contract); its request fields are
        // written. `mem_handle` is not written again: walkers of the set of live handles may
        // be reading it.
        unsafe {
            (*m)._pa = pa;
            (*m).align_offset = align_offset;
            (*m).allocated_size = allocated;
        }
        // Last: publishes the fields above.
        // SAFETY: `m` is a slot of the dmem arena.
        let (gen, refs) = unsafe { self.st.dmem.dmems.words(m) };
        handle::publish(gen, refs)
    }

    /// Links live dmem `m` before `al`'s dummy tail, under `al`'s lock. Contract: `al` was
    /// resolved live by [`Self::allocator_core`] in this call, and `m` is the dmem this call
    /// just made and published (the alloc path's last steps; not checked again here, to keep
    /// the path at its cost).
    #[inline(always)]
    pub(super) fn allocator_link(&self, al: *mut dmem_allocator_t, m: Dmem) -> Result<()> {
        // SAFETY: live allocator (contract), its lock held for the link; `m` is a live dmem.
        unsafe {
            let _g = (*al).lock.lock_bounded(WaitFor::AllocatorLock)?;
            Self::list_insert_tail(al, m).map_err(|e| {
                // A fresh slot starts zeroed, so unlinked: a refusal means the arena handed
                // out a node that is still on some allocator's list.
                error!("dmem_alloc: {}: the fresh dmem slot is already linked", e);
                Error::ForeignDmem
            })
        }
    }

    /// Undoes a dmem that was never linked and whose handle was never returned: drops its one
    /// owner and finalises it. Contract: `m` is not on any allocator's list, its one owner is
    /// this call, and no handle of it was handed out, so nothing else holds or pins it.
    pub(super) fn dmem_cancel_unlinked(&self, call: &impl InCall, m: Dmem) {
        // SAFETY: the contract above: nothing else holds or pins `m`.
        unsafe {
            self.st.dmem.dmems.words(m).1.store(0, Ordering::Release);
            self.dmem_finalize(call, m, GiveBack::Cancel);
        }
    }

    /// `close`'s release of a dmem left behind. Contract: the gate is shut and every allocator
    /// is gone, so `m` (a live slot) is detached and no other thread holds or pins it.
    pub(super) fn dmem_reclaim(&self, ex: &crate::ctx::Exclusive<'_>, m: Dmem) {
        if !self.st.dmem.dmems.is_live(m) {
            return;
        }
        // SAFETY: the contract above: dropping its last references is ours.
        unsafe {
            self.st.dmem.dmems.words(m).1.store(0, Ordering::Release);
            self.dmem_finalize(ex, m, GiveBack::Release);
        }
    }

    /// Pushes fresh weak-index node `node` naming `m` onto the live index `list` (which the
    /// caller checked live and serialises). A node or list that is not a live slot is refused.
    pub(super) fn weak_index_push(
        &self,
        list: *mut dmem_list_t,
        node: *mut dmem_ref_node_t,
        m: Dmem,
    ) -> core::result::Result<(), ListError> {
        if !self.st.dmem.dmem_lists.is_live(list) || !self.st.dmem.ref_nodes.is_live(node) {
            return Err(ListError::NotLinked);
        }
        // SAFETY: `node` is a live slot handed to this call (a fresh one is zeroed: unlinked);
        // the list is a live index that belongs to the caller, who serialises its use.
        unsafe {
            (*node).dmem = m;
            WeakIndex::new(NonNull::new_unchecked(list)).push_back(NonNull::new_unchecked(node))
        }
    }

    /// The allocator whose list holds `m` (null once detached). Contract: `m` is pinned or
    /// owned by the caller.
    pub(crate) fn allocator_of(&self, m: Dmem) -> *mut dmem_allocator_t {
        // SAFETY: a slot of the dmem arena the caller pins or owns; the field is accessed
        // atomically (see `dmem_release_ref`).
        unsafe { AtomicPtr::from_ptr(addr_of_mut!((*m).allocator)).load(Ordering::Acquire) }
    }

    /// The allocator a pinned dmem is on (null once detached).
    pub(super) fn dmem_allocator_of(&self, p: &DmemPin<'_>) -> *mut dmem_allocator_t {
        // SAFETY: pinned slot; the field is accessed atomically (see dmem_unlink_and_finalize).
        unsafe { AtomicPtr::from_ptr(addr_of_mut!((*p.m).allocator)).load(Ordering::Acquire) }
    }

    /// The fields of a pinned dmem fixed at its allocation.
    pub(super) fn dmem_info_of(&self, p: &DmemPin<'_>) -> DmemInfo {
        // SAFETY: pinned: these fields were written before the dmem was published and are
        // not written again until it is finalised, which waits for this pin.
        unsafe { dmem_info_raw(p.m) }
    }

    /// A dmem a walk found on `al`'s list, under that allocator's lock, as its callback sees it
    /// ([`DmemEntry`]).
    pub(crate) fn dmem_entry<'w>(
        &self,
        al: *const dmem_allocator_t,
        d: &'w dmem_t,
    ) -> DmemEntry<'w> {
        let m = core::ptr::from_ref(d).cast_mut();
        DmemEntry {
            // Linked under the walk's lock: its slot is not reused before it is unlinked.
            handle: self.dmem_handle_of_owned(m),
            allocator: self.allocator_handle_of(al),
            // SAFETY: `d` is a live dmem borrowed for the walk; its fixed fields are not
            // written while it is linked, and `ref_count` is read atomically.
            info: unsafe { dmem_info_raw(m) },
            hint: super::dmem_hint(d),
        }
    }

    /// A dmem whose last owner is gone and whose pins have drained: unlinks it from its
    /// allocator (under the allocator's lock, so a concurrent walk never sees a freed node)
    /// and returns everything to the driver, the ledger and the arenas.
    #[inline(always)]
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

    /// Whether the dmem of arena slot `slot` holds driver handle `handle` on device `dev`: the
    /// key test of the set of live handles ([`crate::ctx::LiveHandles`]). Contract: `slot` is
    /// in that set and the caller holds its bucket's lock (the set asks only about its chain
    /// members).
    #[inline(always)]
    pub(super) fn dmem_holds_key(&self, dev: u32, handle: u64, slot: u32) -> bool {
        let Some(m) = self.st.dmem.dmems.slot(slot) else {
            return false;
        };
        // SAFETY: a slot of the dmem arena, read through raw pointers (no reference: other
        // fields of a live dmem change meanwhile). The slot is in the set, so its key fields
        // were written before its claim (`device_id` by `dmem_write_request`, `mem_handle` by
        // `dmem_write_handle`), which the bucket lock orders before this read (the claim's
        // unlock is a Release store, our lock an Acquire swap), and they are not written
        // again until after its removal: the slot is zeroed only when handed out again, after
        // `give_back`, which follows the removal (the arena shard's lock, taken by both
        // `give_back` and the take before the zeroing, orders them).
        unsafe {
            addr_of!((*m).mem_handle).read() == handle && addr_of!((*m).device_id).read() == dev
        }
    }

    /// A block the driver refused to free: it still holds it, so the ledger keeps it booked
    /// (it stays true about device memory), the runtime's figures count it and the call
    /// reports it.
    #[cold]
    #[inline(never)]
    fn driver_kept_block(&self, call: &impl InCall, bytes: u64, handle: u64, e: Errno) {
        error!(
            "dmem_free: the driver refused to free {} bytes (handle {:#x}): {}",
            bytes, handle, e
        );
        self.st.driver_kept.note(bytes);
        call.note_kept(bytes, e);
    }

    /// Returns an unlinked, unreferenced dmem to the driver, ledger and arenas.
    ///
    /// # Safety
    /// `m` is live, unlinked and its reference word reached zero with no pin left (we are the
    /// only user).
    #[inline(always)]
    pub(super) unsafe fn dmem_finalize(&self, call: &impl InCall, m: Dmem, how: GiveBack) {
        // SAFETY: caller contract.
        unsafe {
            let dev = (*m).device_id;
            if !(*m)._va.is_null() {
                let _ = self.drv.memory_unmap(dev, (*m).mem_handle);
            }
            self.st
                .live_handles
                .remove(dev, (*m).mem_handle, |d, h, s| self.dmem_holds_key(d, h, s));
            match self.drv.memory_free(dev, (*m).mem_handle) {
                // The booking `dml_add_entry` would read back: the dmem's own fields, fixed
                // since its allocation resolved `dev` in the tree.
                Ok(()) => self.dml_book(call, &booking_raw(m), Action::Free),
                Err(e) => self.driver_kept_block(call, (*m).allocated_size, (*m).mem_handle, e),
            }
            (*m).hint = null_mut();
            // The slot reads as free before it can be handed out again.
            handle::retire(self.st.dmem.dmems.words(m).0);
            let _ = self.st.dmem.dmems.give_back(m, how);
        }
    }
}

/// The core an allocator allocates for ([`Nrt::allocator_core`]).
pub(super) struct AllocatorCore {
    /// The allocator's `physical_core_t` (in the context tree).
    pub(super) pcore: *mut physical_core_t,
    /// Its device index.
    pub(super) dev: u32,
    /// Its core on the device.
    pub(super) nc_id: u32,
}

/// What [`Nrt::dmem_write_request`] writes into a fresh dmem (spec §3.2 step 5).
pub(super) struct DmemFields<'r, 'h> {
    /// The request (size, align, hint).
    pub(super) a: &'r AllocArgs<'h>,
    /// Host or device memory.
    pub(super) loc: dma_mem_location_t,
    /// The usage type.
    pub(super) usage: dma_mem_usage_type_t,
    /// The HBM channel.
    pub(super) hbm: u32,
    /// The allocator's core.
    pub(super) pcore: *mut physical_core_t,
    /// Its core on the device.
    pub(super) nc_id: u32,
    /// Its device.
    pub(super) dev: u32,
    /// The core's copy buffer (`cpy_buf`, from the driver at bring-up).
    pub(super) copy_buf: u64,
}

/// The ledger booking of dmem `m` (what `dml_add_entry` reads back): its own fields, fixed
/// since its allocation resolved its device in the tree.
///
/// # Safety
/// `m` is a dmem whose fields are written and not being written (owned by the caller, or
/// drained).
#[inline(always)]
unsafe fn booking_raw(m: *const dmem_t) -> Booking {
    // SAFETY: the caller's contract.
    unsafe {
        Booking {
            dev: (*m).device_id,
            nc: (*m).nc_id,
            usage: (*m).mem_usage_type,
            channel: (*m).tdram_channel,
            bytes: (*m).allocated_size,
            host: (*m).mem_type == dma_mem_location_t::HOST_DRAM as u32,
        }
    }
}

/// A dmem's fields fixed at its allocation, and its owners now.
///
/// # Safety
/// `m` is a live dmem whose fixed fields are not being written (pinned, or linked under its
/// allocator's lock).
unsafe fn dmem_info_raw(m: *const dmem_t) -> DmemInfo {
    // SAFETY: the caller's contract.
    unsafe {
        DmemInfo {
            size: (*m).size,
            align: (*m).align,
            pa: (*m)._pa,
            align_offset: (*m).align_offset,
            allocated_size: (*m).allocated_size,
            mem_handle: (*m).mem_handle,
            mem_type: (*m).mem_type,
            mem_usage_type: (*m).mem_usage_type,
            tdram_channel: (*m).tdram_channel,
            device_id: (*m).device_id,
            nc_id: (*m).nc_id,
            ref_count: ((*m).ref_count.load(Ordering::Acquire) & handle::OWNERS) as u32,
        }
    }
}
