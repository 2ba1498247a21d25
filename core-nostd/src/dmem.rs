//! The host device-memory allocator (spec §3): allocator tiers, `dmem_alloc_internal` with the
//! category tables, the aligned-alloc emulation, free / acquire, and the weak ref lists.
//!
//! Invariant (ARCHITECTURE.md principle 4): every live `dmem_t` came through the driver, is
//! booked in its device's ledger under its usage type, and is on exactly one allocator's list
//! (or, after its allocator was destroyed while others still reference it, on none). Every
//! failure path restores the ledger, the arenas and the driver to their state before the call.
// Pointer arguments of this module's safe API are arena handles (`dmem_t`, allocator,
// tensor slots): each is checked with `Arena::is_live` before it is dereferenced, so a
// stale or foreign pointer is an error, not undefined behaviour.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use core::ptr::{addr_of_mut, null_mut, NonNull};
use core::sync::atomic::{AtomicPtr, Ordering};

use crate::abi::tables::{category_for, CATEGORY_INVALID};
use crate::abi::*;
use crate::arena::GiveBack;
use crate::cstr::{c_name, copy_c_name};
use crate::ctx::Nrt;
use crate::driver::{errno, AllocRequest, Errno};
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{self, DmemHandle, Dropped, HandleKind};
use crate::list::{allocator_list, ListError, WeakIndex};

/// `DMEM_ACTION_*` of `dml_add_entry`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Alloc,
    Free,
}

/// Arguments of one allocation (`dmem_alloc_internal`'s parameter list, spec §3.2).
#[derive(Copy, Clone, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AllocArgs<'h> {
    /// Bytes.
    pub size: u64,
    /// Alignment (0 = none; else a power of two).
    pub align: u64,
    /// Raw `dma_mem_location_t` value (checked).
    pub loc: u32,
    /// HBM channel: where a device allocation goes; recorded (`tdram_channel`) for a host one.
    pub hbm_idx: u32,
    /// Raw `dma_mem_usage_type_t` value (checked).
    pub usage: u32,
    /// What it is for; kept (truncated to [`HINT_LEN`](crate::config::HINT_LEN)−1 bytes) for OOM reports.
    pub hint: &'h str,
}

impl<'h> AllocArgs<'h> {
    /// A device (TONGA_DRAM) allocation.
    pub fn device(size: u64, hbm_idx: u32, usage: dma_mem_usage_type_t, hint: &'h str) -> Self {
        AllocArgs {
            size,
            align: 0,
            loc: dma_mem_location_t::TONGA_DRAM as u32,
            hbm_idx,
            usage: usage as u32,
            hint,
        }
    }
    /// A host DMA (HOST_DRAM) allocation.
    pub fn host(size: u64, usage: dma_mem_usage_type_t, hint: &'h str) -> Self {
        AllocArgs {
            size,
            align: 0,
            loc: dma_mem_location_t::HOST_DRAM as u32,
            hbm_idx: 0,
            usage: usage as u32,
            hint,
        }
    }
    /// With an alignment.
    pub fn aligned(mut self, align: u64) -> Self {
        self.align = align;
        self
    }
}

/// A `dmem_t` pointer: the core's own name for a dmem, and the [`crate::raw`] API's. The
/// safe API names dmems by [`DmemHandle`].
pub type Dmem = *mut dmem_t;

/// What [`Nrt::dmem_info`] reports of a live dmem: the fields fixed at allocation, copied
/// out under a pin (so they are never read from a slot someone else reuses).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DmemInfo {
    /// Bytes requested.
    pub size: u64,
    /// Alignment requested (0 = none).
    pub align: u64,
    /// Device physical address of the driver block (`_pa`).
    pub pa: u64,
    /// The aligned-alloc emulation's offset into the block (0 when the driver aligned).
    pub align_offset: u64,
    /// Bytes booked in the ledger (`size + align_offset`).
    pub allocated_size: u64,
    /// The driver's handle of the block.
    pub mem_handle: u64,
    /// Raw `dma_mem_location_t`.
    pub mem_type: u32,
    /// Raw `dma_mem_usage_type_t`.
    pub mem_usage_type: u32,
    /// HBM channel.
    pub tdram_channel: u32,
    /// Device.
    pub device_id: u32,
    /// Physical core on the device.
    pub nc_id: u32,
    /// Owners right now (libnrt's `ref_count`).
    pub ref_count: u32,
}

/// A pinned dmem ([`Nrt::dmem_pin`]): the object stays whole until this drops.
pub(crate) struct DmemPin<'a> {
    pub(crate) m: Dmem,
    refs: &'a core::sync::atomic::AtomicU64,
}

// A pin is one count in the reference word: a copy would unpin twice.
static_assertions::assert_not_impl_any!(DmemPin<'static>: Clone, Copy);

impl Drop for DmemPin<'_> {
    #[inline]
    fn drop(&mut self) {
        handle::unpin(self.refs);
    }
}

impl<'a> Nrt<'a> {
    // The public dmem API: each call passes the state gate ([`Nrt::enter`]), so it fails with
    // `Closed` instead of racing `close`'s teardown of the allocators and arenas.

    /// `dmem_allocator_create` (spec §3.1): a GLOBAL or MODEL allocator for `pcore`, with its
    /// dummy head/tail wired and its lock initialised. `pcore` must be the `pcore` of an
    /// attached core's `tpb_t`: any other pointer is refused without being dereferenced.
    ///
    /// Fails with [`Error::Closed`] / [`Error::Uninitialized`] outside `init`…`close`.
    pub fn dmem_allocator_create(
        &self,
        pcore: *mut physical_core_t,
        ty: dmem_allocator_type_t,
    ) -> Result<*mut dmem_allocator_t> {
        let _call = self.enter()?;
        let al = self.dmem_allocator_create_inner(pcore, ty)?;
        self.set_caller_owned(al, true);
        Ok(al)
    }

    /// `dmem_allocator_destroy` (spec §5.4): drops the allocator's reference on every dmem on
    /// its list — one call reclaims a model's whole footprint — and releases the allocator.
    /// A dmem still referenced elsewhere (a shared page) survives, detached, until its last
    /// `dmem_free`.
    ///
    /// Only an allocator made with [`Self::dmem_allocator_create`] can be destroyed here. The
    /// runtime's own (a core's GLOBAL allocator, which backs its tensors, scratchpad pages and
    /// ext-isa copy; a loaded model's MODEL allocators) are refused with NRT_INVALID: the
    /// runtime destroys them itself, at unload and close, and would otherwise destroy a slot
    /// that someone else had been given meanwhile.
    ///
    /// The caller must not destroy an allocator while another of its threads allocates from
    /// it or walks it (as with libnrt, whose allocator is freed under the caller's feet): the
    /// allocator's slot is released and may be handed out again, and a call that resolved it
    /// before the release would reach the new occupant. A call made after the destroy
    /// returned is refused ("allocator is not live").
    ///
    /// Fails with [`Error::Closed`] / [`Error::Uninitialized`] outside `init`…`close`.
    pub fn dmem_allocator_destroy(&self, al: *mut dmem_allocator_t) -> Result<()> {
        let _call = self.enter()?;
        if self.st.allocators.is_live(al) && !self.is_caller_owned(al) {
            return Err(Error::InvalidArgument(InvalidArg::RuntimeOwnedAllocator));
        }
        self.dmem_allocator_destroy_inner(al, GiveBack::Release)
    }

    /// Marks whether `al` (a live allocator) was made through the public API.
    fn set_caller_owned(&self, al: *mut dmem_allocator_t, caller: bool) {
        if let Some(f) = self
            .st
            .allocators
            .index_of(al)
            .and_then(|i| self.st.caller_allocators.flag(i))
        {
            f.store(caller as u8, Ordering::Release);
        }
    }

    /// Whether `al` was made through the public API (see [`Self::set_caller_owned`]).
    fn is_caller_owned(&self, al: *mut dmem_allocator_t) -> bool {
        self.st
            .allocators
            .index_of(al)
            .and_then(|i| self.st.caller_allocators.flag(i))
            .is_some_and(|f| f.load(Ordering::Acquire) == 1)
    }

    /// `dmem_alloc` (align 0) / `dmem_alloc_aligned` → `dmem_alloc_internal` (spec §3.2).
    ///
    /// Checks every argument, books the allocation in the ledger, links it before `al`'s dummy
    /// tail and, with `ref_list`, records it in that weak index. On any error nothing changes.
    ///
    /// Fails with [`Error::Closed`] / [`Error::Uninitialized`] outside `init`…`close`.
    pub fn dmem_alloc(
        &self,
        al: *mut dmem_allocator_t,
        a: &AllocArgs<'_>,
        ref_list: Option<*mut dmem_list_t>,
    ) -> Result<DmemHandle> {
        let _call = self.enter()?;
        let m = self.dmem_alloc_inner(al, a, ref_list)?;
        Ok(self.dmem_handle_of_owned(m))
    }

    /// `dmem_acquire_reference` (spec §3.2): one more owner of a shared dmem (each owner
    /// frees it once with [`Self::dmem_free`]).
    ///
    /// A stale, forged or foreign handle is [`Error::InvalidHandle`]. Fails with
    /// [`Error::Closed`] / [`Error::Uninitialized`] outside `init`…`close`.
    pub fn dmem_acquire_reference(&self, h: DmemHandle) -> Result<()> {
        let _call = self.enter()?;
        let p = self.dmem_pin(h)?;
        // SAFETY: `p.m` is pinned: a slot of the dmem arena that stays whole.
        let (_, refs) = unsafe { self.st.dmems.words(p.m) };
        if handle::add_owner(refs) {
            Ok(())
        } else {
            Err(Error::stale(HandleKind::Dmem))
        }
    }

    /// `dmem_free` (spec §3.2): drops one owner; the last one unmaps and frees the driver
    /// memory, books the free in the ledger, unlinks from the allocator and releases the node
    /// (after any call using the dmem on another thread has finished with it). A dmem with no
    /// owner left — a double free, at any age — is [`Error::InvalidHandle`], as is a forged or
    /// foreign handle; nothing of anyone else's is freed.
    ///
    /// Fails with [`Error::Closed`] / [`Error::Uninitialized`] outside `init`…`close`.
    pub fn dmem_free(&self, h: DmemHandle) -> Result<()> {
        let _call = self.enter()?;
        let p = self.dmem_pin(h)?;
        self.dmem_free_pinned(p)
    }

    /// Like [`Self::dmem_free`], but refuses a dmem that is not on `al`'s list.
    ///
    /// Fails with [`Error::Closed`] / [`Error::Uninitialized`] outside `init`…`close`.
    pub fn dmem_free_in(&self, al: *mut dmem_allocator_t, h: DmemHandle) -> Result<()> {
        let _call = self.enter()?;
        let p = self.dmem_pin(h)?;
        // SAFETY: pinned slot; the field is accessed atomically (see dmem_release_ref).
        if unsafe { AtomicPtr::from_ptr(addr_of_mut!((*p.m).allocator)).load(Ordering::Acquire) }
            != al
        {
            return Err(Error::ForeignDmem);
        }
        self.dmem_free_pinned(p)
    }

    /// The fields of a live dmem fixed at its allocation (see [`DmemInfo`]).
    pub fn dmem_info(&self, h: DmemHandle) -> Result<DmemInfo> {
        let _call = self.enter()?;
        let p = self.dmem_pin(h)?;
        let m = p.m;
        // SAFETY: pinned: these fields were written before the dmem was published and are
        // not written again until it is finalised, which waits for this pin.
        unsafe {
            Ok(DmemInfo {
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
            })
        }
    }

    /// The handle of a dmem met while walking an allocator ([`Self::allocator_for_each`]):
    /// `None` for a `dmem_t` that is not a live slot of this runtime's arena.
    pub fn dmem_handle_of(&self, d: &dmem_t) -> Option<DmemHandle> {
        let m = d as *const dmem_t;
        let index = self.st.dmems.index_of(m)? as u32;
        // SAFETY: a slot of the dmem arena (index_of checked it); the words are atomics.
        let (gen, refs) = unsafe { self.st.dmems.words(m) };
        let generation = gen.load(Ordering::Acquire);
        if generation & 1 == 0 || refs.load(Ordering::Acquire) & handle::OWNERS == 0 {
            return None;
        }
        Some(DmemHandle(handle::Raw {
            index,
            generation,
            epoch: self.epoch(),
        }))
    }

    /// The handle of dmem `m`, which the caller owns (it was just allocated, or the caller
    /// holds an owner reference), so its generation cannot move under this call.
    pub(crate) fn dmem_handle_of_owned(&self, m: Dmem) -> DmemHandle {
        DmemHandle(self.owned_handle(&self.st.dmems, m))
    }

    /// Resolves and pins `h` (the pin protocol of [`crate::handle`]): the dmem cannot be
    /// finalised, nor its slot reused, until the pin drops.
    pub(crate) fn dmem_pin(&self, h: DmemHandle) -> Result<DmemPin<'a>> {
        self.check_epoch(h.0, HandleKind::Dmem)?;
        let (m, refs) = self
            .st
            .dmems
            .pin(h.0.index, h.0.generation, HandleKind::Dmem)?;
        Ok(DmemPin { m, refs })
    }

    /// A free through a handle, once pinned: drops one owner; the last one waits for every
    /// other pin to go, then unlinks and finalises.
    fn dmem_free_pinned(&self, p: DmemPin<'_>) -> Result<()> {
        match handle::drop_owner(p.refs) {
            Dropped::NoOwner => Err(Error::stale(HandleKind::Dmem)),
            Dropped::Shared => Ok(()),
            Dropped::Last => {
                let (m, refs) = (p.m, p.refs);
                // The pin is handed over to the drain: it is the last one left.
                core::mem::forget(p);
                handle::wait_drained(refs, 1, crate::sync::relax);
                self.dmem_unlink_and_finalize(m, GiveBack::Release);
                Ok(())
            }
        }
    }

    /// [`Self::dmem_allocator_create`] without the gate (the runtime's own calls).
    pub(crate) fn dmem_allocator_create_inner(
        &self,
        pcore: *mut physical_core_t,
        ty: dmem_allocator_type_t,
    ) -> Result<*mut dmem_allocator_t> {
        let (dev, core) = self
            .tree_pcore(pcore)
            .ok_or(Error::InvalidArgument(InvalidArg::PcoreNotInTree))?;
        self.tpb(dev, core)?; // attached
        let al = self.st.allocators.alloc("dmem_allocator_t")?.as_ptr();
        // SAFETY: fresh zeroed slot owned by us (no other thread can reach it yet, so its
        // list is ours without the lock).
        unsafe {
            (*al).r#type = ty as u32;
            (*al).pcore = pcore;
            allocator_list(al).init();
        }
        Ok(al)
    }

    /// [`Self::dmem_allocator_destroy`] without the gate (the runtime's own calls).
    /// `how` says how the slots go back: [`GiveBack::Cancel`] only for a rollback of
    /// allocations nobody else saw.
    pub(crate) fn dmem_allocator_destroy_inner(
        &self,
        al: *mut dmem_allocator_t,
        how: GiveBack,
    ) -> Result<()> {
        if !self.st.allocators.is_live(al) {
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
                let pinned = handle::add_pin_if_owned(self.st.dmems.words(n).1);
                // Detach: the allocator no longer owns it. The first node of the list is
                // linked, so this cannot be refused; if it were (a corrupt list), stop here
                // rather than loop on it: the allocator is still released below.
                if let Err(e) = Self::list_unlink(al, n) {
                    error!(
                        "dmem_allocator_destroy: {}; the rest of the list is abandoned",
                        e
                    );
                    if pinned {
                        handle::unpin(self.st.dmems.words(n).1);
                    }
                    break;
                }
                (n, pinned)
            };
            if pinned {
                // SAFETY: a slot of the dmem arena, pinned above.
                let refs = unsafe { self.st.dmems.words(first).1 };
                match handle::drop_owner(refs) {
                    Dropped::Last => {
                        handle::wait_drained(refs, 1, crate::sync::relax);
                        self.dmem_unlink_and_finalize(first, how);
                    }
                    _ => handle::unpin(refs),
                }
            }
        }
        self.set_caller_owned(al, false);
        self.st
            .allocators
            .give_back(al, how)
            .map_err(|_| Error::InvalidArgument(InvalidArg::AllocatorNotLive))
    }

    /// [`Self::dmem_alloc`] without the gate (the runtime's own calls).
    pub(crate) fn dmem_alloc_inner(
        &self,
        al: *mut dmem_allocator_t,
        a: &AllocArgs<'_>,
        ref_list: Option<*mut dmem_list_t>,
    ) -> Result<Dmem> {
        // 1. arguments (no side effects yet)
        if ref_list.is_some_and(|l| !self.st.dmem_lists.is_live(l)) {
            return Err(Error::InvalidArgument(InvalidArg::RefListNotLive));
        }
        if a.size == 0 {
            return Err(Error::ZeroSize);
        }
        if a.align != 0 && !a.align.is_power_of_two() {
            return Err(Error::BadAlignment(a.align));
        }
        if a.size.checked_add(a.align).is_none() {
            return Err(Error::SizeOverflow {
                size: a.size,
                extra: a.align,
            });
        }
        let loc = match dma_mem_location_t::from_raw(a.loc) {
            Some(l) if l != dma_mem_location_t::DMA_MEM_LOC_INVALID => l,
            _ => return Err(Error::InvalidLocation(a.loc)),
        };
        let usage = match dma_mem_usage_type_t::from_raw(a.usage) {
            Some(u) if u != dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_MAX => u,
            _ => return Err(Error::InvalidUsage(a.usage)),
        };
        let host = loc == dma_mem_location_t::HOST_DRAM;
        // 2. byte-category: host vs device table; 20 ⇒ usage invalid here.
        let cat = category_for(loc, usage);
        if cat == CATEGORY_INVALID {
            return Err(Error::UsageInvalidForLocation { usage, loc });
        }
        if !self.st.allocators.is_live(al) {
            return Err(Error::InvalidArgument(InvalidArg::AllocatorNotLive));
        }
        // SAFETY: live allocator; pcore was set at creation and points into the tree.
        let pcore = unsafe { (*al).pcore };
        if pcore.is_null() {
            return Err(Error::InvalidArgument(InvalidArg::AllocatorWithoutCore));
        }
        // SAFETY: pcore points into the context tree (a tpb's or model's physical_core_t).
        let (mla, tpb) = self.db_physical_core_get_mla_and_tpb(unsafe { &*pcore })?;
        // SAFETY: resolved pointers are in-bounds and initialised.
        let (dev, nc_id) = unsafe { ((*mla).mla_idx, (*tpb).idx as u32) };
        let g = self.dev_geom(dev);
        // Recorded for host allocations too (`tdram_channel`, spec §3.2 step 5): libnrt passes
        // the core's default HBM whatever the location. So it is checked for them too: a
        // channel that does not exist would show in the trace line and the OOM table.
        let hbm = a.hbm_idx;
        if hbm >= g.channels {
            return Err(Error::HbmOutOfRange {
                hbm,
                channels: g.channels,
            });
        }
        let mut emulate = a.align != 0 && !self.aligned_alloc_supported(dev, &g);
        if host && a.align != 0 && !emulate {
            // The driver's host pool refuses aligned requests (public ABI §3); said here, with
            // a clear message, instead of as the driver's bare EINVAL.
            return Err(Error::InvalidArgument(InvalidArg::AlignedHostAlloc));
        }
        // 3. metadata from the arenas (before touching the driver, so a full arena is its own
        //    error and needs no driver rollback). The generation and reference words are left
        //    alone: resolvers of old handles may be reading them.
        let shard = crate::ctx::core_shard(dev, nc_id);
        let m = self
            .st
            .dmems
            .alloc_handle("dmem_t", false, shard)?
            .0
            .as_ptr();
        let ref_node = match ref_list {
            Some(_) => match self.st.ref_nodes.alloc_in(shard, "dmem_ref_node_t") {
                Ok(n) => n.as_ptr(),
                Err(e) => {
                    let _ = self.st.dmems.cancel(m);
                    return Err(e.into());
                }
            },
            None => null_mut(),
        };
        // Neither slot was seen outside this call: cancelled, not released (spec-free
        // bookkeeping, but a failed call must leave the arenas as it found them).
        let undo_meta = || {
            if !ref_node.is_null() {
                let _ = self.st.ref_nodes.cancel(ref_node);
            }
            let _ = self.st.dmems.cancel(m);
        };
        // 4. carve: natively aligned, or the over-allocate-and-offset emulation
        let req = |emulate: bool| AllocRequest {
            // Cannot overflow: size + align was checked above.
            size: if emulate { a.size + a.align } else { a.size },
            align: if emulate { 0 } else { a.align },
            host,
            hbm_idx: hbm,
            region: 0,
            nc_id,
            category: cat,
        };
        // ndl_memory_alloc + ndl_memory_get_pa (steps 4–5)
        let mut r = self.drv.memory_alloc_pa(dev, &req(emulate));
        if r == Err(errno::EINVAL) && a.align != 0 && !emulate && !host {
            // Perhaps the driver refuses aligned requests after all (the device said it took
            // them). EINVAL has other causes, so the emulation is tried once, and only its
            // success latches "unsupported" (as `ndl_supports_align` does). Its out-of-memory
            // is reported as such; any other refusal keeps the driver's first answer.
            match self.drv.memory_alloc_pa(dev, &req(true)) {
                Ok(ok) => {
                    self.latch_aligned_alloc_unsupported(dev);
                    emulate = true;
                    r = Ok(ok);
                }
                Err(errno::ENOMEM) => {
                    // The emulated request is the one that ran out of memory.
                    emulate = true;
                    r = Err(errno::ENOMEM);
                }
                Err(_) => {}
            }
        }
        let (handle, pa) = match r {
            Ok(r) => r,
            Err(e) => {
                undo_meta();
                return Err(self.alloc_failed(dev, nc_id, hbm, a, usage, host, emulate, e));
            }
        };
        // 5. fields
        // SAFETY: `m` is a fresh zeroed slot owned by this call.
        unsafe {
            copy_c_name(&mut (*m).hint_buf, a.hint);
            (*m).mem_handle = handle;
            (*m)._pa = pa;
            (*m)._va = null_mut();
            (*m).size = a.size;
            (*m).align = a.align;
            (*m).align_offset = if emulate {
                align_offset(pa, a.align)
            } else {
                0
            };
            (*m).allocated_size = a.size + (*m).align_offset;
            (*m).mem_type = loc as u32;
            (*m).mem_usage_type = usage as u32;
            (*m).tdram_channel = hbm;
            (*m).pcore = pcore;
            (*m).nc_id = nc_id;
            (*m).device_id = dev;
            (*m).hint = addr_of_mut!((*m).hint_buf) as *mut core::ffi::c_char;
            (*m).cpy_buf = self.drv.get_copy_buf(dev, nc_id) as usize as *mut core::ffi::c_void;
        }
        // Last: publishes the fields above to readers of live slots (the OOM dump) and to
        // resolvers of the new handle (generation, then one owner).
        // SAFETY: `m` is a slot of the dmem arena.
        let (gen, refs) = unsafe { self.st.dmems.words(m) };
        handle::publish(gen, refs);
        // 6. ledger + trace
        self.dml_add_entry(mla, Action::Alloc, m);
        // 7. link before dummy_tail
        // SAFETY: live allocator, its lock held for the call; `m` is a live dmem.
        let linked = unsafe {
            let _g = (*al).lock.lock();
            Self::list_insert_tail(al, m)
        };
        if let Err(e) = linked {
            // A fresh slot starts zeroed, so unlinked: a refusal means the arena handed out a
            // node that is still on some allocator's list. Undo everything (the dmem was never
            // on this list and its handle was never returned) and refuse the call.
            error!("dmem_alloc: {}: the fresh dmem slot is already linked", e);
            if !ref_node.is_null() {
                let _ = self.st.ref_nodes.cancel(ref_node);
            }
            // SAFETY: `m` is not on `al`'s list, its one owner is this call and no handle of
            // it was handed out, so nothing else holds or pins it.
            unsafe {
                self.st.dmems.words(m).1.store(0, Ordering::Release);
                self.dmem_finalize(m, GiveBack::Cancel);
            }
            return Err(Error::ForeignDmem);
        }
        // 8. weak GC index
        if let Some(list) = ref_list {
            // SAFETY: ref_node is a fresh slot (zeroed: unlinked); the list is a live index
            // (checked in step 1) that belongs to the caller, who serialises its use.
            let pushed = unsafe {
                (*ref_node).dmem = m;
                WeakIndex::new(NonNull::new_unchecked(list))
                    .push_back(NonNull::new_unchecked(ref_node))
            };
            if let Err(e) = pushed {
                // Only a fresh node can be pushed, and it is unlinked: record the refusal; the
                // dmem stays allocated (on its allocator), only its weak entry is dropped.
                error!("dmem_alloc: {}: the weak index entry is dropped", e);
                let _ = self.st.ref_nodes.cancel(ref_node);
            }
        }
        Ok(m)
    }

    /// Whether device `dev` takes aligned requests natively (spec §3.2 `ndl_supports_align`).
    /// The first time it is found not to, one WARN is logged and the answer is latched.
    pub(crate) fn aligned_alloc_supported(&self, dev: u32, g: &crate::ctx::DevGeom) -> bool {
        if g.aligned_alloc == 0 {
            self.latch_aligned_alloc_unsupported(dev);
            return false;
        }
        self.st
            .align_unsupported
            .get(dev as usize)
            .is_none_or(|l| l.load(Ordering::Relaxed) == 0)
    }

    /// Latches "no aligned allocation" for `dev`, with the one-shot WARN.
    fn latch_aligned_alloc_unsupported(&self, dev: u32) {
        let Some(latch) = self.st.align_unsupported.get(dev as usize) else {
            return;
        };
        if latch.load(Ordering::Relaxed) == 0 && latch.swap(1, Ordering::Relaxed) == 0 {
            warn!(
                "nd{}: the driver does not support aligned allocations; aligned requests are \
                 over-allocated by their alignment and offset",
                dev
            );
        }
    }

    /// Classifies a driver failure (spec §3.2 GOTCHA): device ENOMEM → `DeviceOom`
    /// (NRT_RESOURCE, with the ledger dump recorded), host ENOMEM → `HostOom`
    /// (NRT_FAIL_HOST_MEM_ALLOC), anything else → `Driver(errno)`.
    #[allow(clippy::too_many_arguments)]
    fn alloc_failed(
        &self,
        dev: u32,
        nc: u32,
        hbm: u32,
        a: &AllocArgs<'_>,
        usage: dma_mem_usage_type_t,
        host: bool,
        emulated: bool,
        e: Errno,
    ) -> Error {
        if e != errno::ENOMEM {
            return Error::Driver(e);
        }
        if host {
            let err = Error::HostOom {
                size: a.size,
                dma: true,
            };
            error!("{}", err);
            return err;
        }
        // Device OOMs only, as `device_totals` reports them.
        self.dev_ext(dev).oom_count.fetch_add(1, Ordering::Relaxed);
        let err = Error::DeviceOom {
            size: a.size,
            align: a.align,
            device: dev,
            nc,
            hbm,
            usage,
            emulated: emulated && a.align != 0,
        };
        error!("{}", err);
        self.record_oom(err);
        err
    }

    /// [`Self::dmem_acquire_reference`] without the gate, through a pointer whose owner
    /// reference the caller holds (the runtime's own calls, [`crate::raw`]).
    pub(crate) fn dmem_acquire_reference_inner(&self, m: Dmem) -> Result<()> {
        if !self.st.dmems.is_live(m) {
            return Err(self.not_live(m));
        }
        // SAFETY: live slot of the dmem arena.
        let (_, refs) = unsafe { self.st.dmems.words(m) };
        if handle::add_owner(refs) {
            Ok(())
        } else {
            Err(Error::DoubleFree)
        }
    }

    /// [`Self::dmem_free`] without the gate, through a pointer whose owner reference the
    /// caller holds (the runtime's own calls, [`crate::raw`]).
    pub(crate) fn dmem_free_inner(&self, m: Dmem) -> Result<()> {
        if !self.st.dmems.is_live(m) {
            return Err(self.not_live(m));
        }
        if self.dmem_release_ref(m, GiveBack::Release) {
            Ok(())
        } else {
            Err(Error::DoubleFree)
        }
    }

    /// Why `m` is not a live dmem: a slot of the dmem arena that is free (a double free, or a
    /// use after free), or no dmem of this runtime at all.
    pub(crate) fn not_live(&self, m: Dmem) -> Error {
        if self.st.dmems.owns(m) {
            Error::DoubleFree
        } else {
            Error::InvalidArgument(InvalidArg::ForeignDmemPointer)
        }
    }

    /// Drops one owner reference the caller holds (no pin); the last one waits for the
    /// calls that pinned the dmem to finish, then unlinks and finalises it. `false` when
    /// there was no owner left to drop (nothing changed).
    pub(crate) fn dmem_release_ref(&self, m: Dmem, how: GiveBack) -> bool {
        // SAFETY: caller checked that `m` is a slot of the dmem arena.
        let (_, refs) = unsafe { self.st.dmems.words(m) };
        match handle::drop_owner(refs) {
            Dropped::NoOwner => false,
            Dropped::Shared => true,
            Dropped::Last => {
                handle::wait_drained(refs, 0, crate::sync::relax);
                self.dmem_unlink_and_finalize(m, how);
                true
            }
        }
    }

    /// A dmem whose last owner is gone and whose pins have drained: unlinks it from its
    /// allocator (under the allocator's lock, so a concurrent walk never sees a freed node)
    /// and returns everything to the driver, the ledger and the arenas.
    fn dmem_unlink_and_finalize(&self, m: Dmem, how: GiveBack) {
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
            self.dmem_finalize(m, how);
        }
    }

    /// Returns an unlinked, unreferenced dmem to the driver, ledger and arenas.
    ///
    /// # Safety
    /// `m` is live, unlinked and its reference word reached zero with no pin left (we are the
    /// only user).
    unsafe fn dmem_finalize(&self, m: Dmem, how: GiveBack) {
        // SAFETY: caller contract.
        unsafe {
            let dev = (*m).device_id;
            if !(*m)._va.is_null() {
                let _ = self.drv.memory_unmap(dev, (*m).mem_handle);
            }
            let _ = self.drv.memory_free(dev, (*m).mem_handle);
            self.dml_add_entry(self.mla_ptr(dev), Action::Free, m);
            (*m).hint = null_mut();
            // The slot reads as free before it can be handed out again.
            handle::retire(self.st.dmems.words(m).0);
            let _ = self.st.dmems.give_back(m, how);
        }
    }

    /// `close`'s last sweep (spec §12: afterwards the driver holds nothing of this runtime).
    /// Releases what an integrator left behind through the public dmem calls: allocators it
    /// created and never destroyed (with every dmem on them), then dmems it still referenced
    /// (`dmem_acquire_reference`) after their allocator went. Returns how many dmems were
    /// reclaimed. Only for `close`, once the gate is shut: nothing else can reach them.
    pub(crate) fn reclaim_leftover_dmems(&self) -> usize {
        let before = self.st.dmems.stats().live;
        for al in self.st.allocators.live_slots() {
            let _ = self.dmem_allocator_destroy_inner(al.as_ptr(), GiveBack::Release);
        }
        for m in self.st.dmems.live_slots() {
            let m = m.as_ptr();
            // SAFETY: the gate is shut and every allocator is gone, so `m` is detached
            // (unlinked) and no other thread holds or pins it: dropping its last references is
            // ours.
            unsafe {
                self.st.dmems.words(m).1.store(0, Ordering::Release);
                self.dmem_finalize(m, GiveBack::Release);
            }
        }
        before
    }

    /// Number of dmems on `al`'s list and their allocated bytes; `(0, 0)` for an allocator that is
    /// not live, and outside `init`…`close`.
    pub fn allocator_usage(&self, al: *mut dmem_allocator_t) -> (u64, u64) {
        let Ok(_call) = self.enter() else {
            return (0, 0);
        };
        if !self.st.allocators.is_live(al) {
            return (0, 0);
        }
        // SAFETY: live allocator; counters are maintained under its lock.
        unsafe {
            let _g = (*al).lock.lock();
            ((*al).count, (*al).bytes)
        }
    }

    /// Calls `f` on every dmem of `al` under its list lock, which is not reentrant: `f` must
    /// not allocate from, free into, measure ([`Self::allocator_usage`]) or walk `al` (that
    /// call would wait for the lock forever). `Closed` /
    /// `Uninitialized` outside `init`…`close`; an allocator that is not live has no dmems.
    pub fn allocator_for_each(
        &self,
        al: *mut dmem_allocator_t,
        f: impl FnMut(&dmem_t),
    ) -> Result<()> {
        let _call = self.enter()?;
        self.allocator_for_each_inner(al, f);
        Ok(())
    }

    /// [`Self::allocator_for_each`] without the gate (the runtime's own calls).
    pub(crate) fn allocator_for_each_inner(
        &self,
        al: *mut dmem_allocator_t,
        mut f: impl FnMut(&dmem_t),
    ) {
        if !self.st.allocators.is_live(al) {
            return;
        }
        // SAFETY: live allocator, walked under its lock; its linked dmems are live (a dmem is
        // unlinked under this lock before it is finalised).
        unsafe {
            let _g = (*al).lock.lock();
            for n in allocator_list(al).iter() {
                f(n.as_ref());
            }
        }
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
        if !self.st.allocators.is_live(al) {
            return Err(Error::InvalidArgument(InvalidArg::AllocatorNotLive));
        }
        // SAFETY: live allocator, checked under its lock.
        unsafe {
            let _g = (*al).lock.lock();
            // More than the arena's slots cannot be linked: refused without a walk, so a
            // corrupt count does not make a cycle a long walk.
            let len = match usize::try_from((*al).count) {
                Ok(n) if n <= self.st.dmems.capacity() => n,
                _ => return Ok(Err(ListError::Broken)),
            };
            Ok(allocator_list(al).check(len))
        }
    }

    /// Whether `h` names a live dmem of this runtime (it may be freed the moment after).
    pub fn dmem_is_live(&self, h: DmemHandle) -> bool {
        let Ok(_call) = self.enter() else {
            return false;
        };
        self.dmem_pin(h).is_ok()
    }

    /// `list_insert_before(&al->dummy_tail, m)` and the allocator's books. A dmem that is
    /// already on a list is refused ([`ListError::AlreadyLinked`]), changing nothing.
    ///
    /// # Safety
    /// `al` live, its lock held; `m` a live dmem.
    unsafe fn list_insert_tail(
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
    unsafe fn list_unlink(
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
        Ok(self.st.dmem_lists.alloc("dmem_list_t")?.as_ptr())
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
            let _ = self.st.ref_nodes.give_back(n.as_ptr(), how);
        });
        let _ = self.st.dmem_lists.give_back(list, how);
    }
}

/// The aligned-alloc emulation's offset, reproduced exactly (spec §3.2):
/// `((pa + alignment) & -alignment) - pa`. Quirk kept: an already aligned `pa` gets a full
/// `alignment` of offset, not 0 — the over-allocation of `size + alignment` covers it.
pub const fn align_offset(pa: u64, alignment: u64) -> u64 {
    (pa.wrapping_add(alignment) & alignment.wrapping_neg()).wrapping_sub(pa)
}

/// The hint of a dmem as text.
pub fn dmem_hint(m: &dmem_t) -> &str {
    c_name(&m.hint_buf)
}

#[cfg(test)]
mod tests {
    use super::align_offset;

    #[test]
    fn align_offset_quirk() {
        assert_eq!(
            align_offset(0x1000, 0x1000),
            0x1000,
            "aligned pa gets a full alignment"
        );
        assert_eq!(align_offset(0x1001, 0x1000), 0xfff);
        assert_eq!(align_offset(0x1fff, 0x1000), 1);
        assert_eq!(align_offset(0x10_0040, 64), 64);
    }
}
