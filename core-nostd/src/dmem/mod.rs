//! The host device-memory allocator (spec §3): allocator tiers, `dmem_alloc_internal` with the
//! category tables, the aligned-alloc emulation, free / acquire, and the weak ref lists.
//!
//! Invariant (docs/ARCHITECTURE.md principle 4): every live `dmem_t` came through the driver, is
//! booked in its device's ledger under its usage type, and is on exactly one allocator's list
//! (or, after its allocator was destroyed while others still reference it, on none). Every
//! failure path restores the ledger, the arenas and the driver to their state before the call.
//!
//! This file holds the request and report types, the dmem pin and the public gated API;
//! the other jobs have a file each: `access` (the raw accessors: the allocator tier's create,
//! destroy, list and books, the weak GC indexes, and every read and write of a `dmem_t` slot's
//! fields), `alloc` (`dmem_alloc_internal`: the category
//! tables, the ledger booking and the aligned-alloc emulation) and `free` (references,
//! free and finalize). The domain's pool of arenas is declared with the state block, in
//! `ctx/state/dmem.rs`.
// The safe API names dmems and allocators by generation-checked handles; the pointer
// arguments left (a weak index `dmem_list_t`, the raw layer's allocator) are arena slots,
// each checked with `Arena::is_live` before it is dereferenced, so a stale or foreign
// pointer is an error, not undefined behaviour.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
#![deny(unsafe_code)]

// The domain's raw accessors: the one file of `dmem/` where `unsafe` is allowed, each block
// argued (docs/UNSAFE.md).
#[allow(unsafe_code)]
mod access;
mod alloc;
mod free;
mod view;

pub use alloc::align_offset;
pub use view::DeviceMemory;

use core::sync::atomic::Ordering;

use crate::abi::*;
use crate::arena::GiveBack;
use crate::cstr::c_name;
use crate::ctx::{InCall, Nrt};
use crate::error::{Error, InvalidArg, Result};
use crate::handle::{self, AllocatorHandle, DmemHandle, Dropped, HandleKind};

/// `DMEM_ACTION_*` of `dml_add_entry`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Alloc,
    Free,
}

/// A dmem an allocation just made ([`Nrt::dmem_alloc_named`]): its pointer and its handle's
/// words.
pub(crate) struct NewDmem {
    /// The dmem.
    pub(crate) m: Dmem,
    /// Its arena slot.
    pub(crate) index: u32,
    /// The generation it was published with.
    pub(crate) generation: u32,
}

/// What one dmem books in its device's ledger (the ledger's `Nrt::dml_book`): the fields of
/// the dmem that place its bytes.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Booking {
    /// Device (of the tree).
    pub(crate) dev: u32,
    /// Physical core on the device (`nc_id`).
    pub(crate) nc: u32,
    /// Raw `dma_mem_usage_type_t`.
    pub(crate) usage: u32,
    /// HBM channel (`tdram_channel`).
    pub(crate) channel: u32,
    /// Bytes booked (`allocated_size`).
    pub(crate) bytes: u64,
    /// Host DMA memory (booked in the host rows).
    pub(crate) host: bool,
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

/// What [`DeviceMemory::allocator_usage`](crate::dmem::DeviceMemory::allocator_usage) reports
/// of an allocator: the dmems on its list and their allocated bytes (spec §3.1).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AllocatorUsage {
    /// Dmems on the allocator's list.
    pub dmems: u64,
    /// Their allocated bytes (`allocated_size`, alignment padding included).
    pub bytes: u64,
}

/// What [`DeviceMemory::info`](crate::dmem::DeviceMemory::info) reports of a live dmem: the fields fixed at allocation, copied
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

/// A dmem as a walk hands it to its callback ([`DeviceMemory::allocator_for_each`],
/// [`crate::model::Models::for_each_dmem`]): read under its allocator's lock, which keeps it
/// linked and whole while the callback runs (spec §3.1).
#[derive(Copy, Clone, Debug)]
pub struct DmemEntry<'w> {
    /// Its handle (live after the walk only while someone owns the dmem).
    pub handle: DmemHandle,
    /// The allocator it is on.
    pub allocator: Option<AllocatorHandle>,
    /// Its fields fixed at allocation, and its owners now.
    pub info: DmemInfo,
    /// Its hint (`hint_buf`).
    pub hint: &'w str,
}

/// A pinned dmem ([`Nrt::dmem_pin`]): the object stays whole until this drops.
pub(crate) struct DmemPin<'a> {
    pub(crate) m: Dmem,
    refs: &'a crate::atomic::AtomicU64,
}

// A pin is one count in the reference word: a copy would unpin twice.
static_assertions::assert_not_impl_any!(DmemPin<'static>: Clone, Copy);

impl Drop for DmemPin<'_> {
    #[inline]
    fn drop(&mut self) {
        handle::unpin(self.refs);
    }
}

/// A pinned allocator ([`Nrt::allocator_pin`]): it cannot be destroyed, nor its slot reused,
/// until this drops.
/// A core's GLOBAL allocator is not pinned (`refs` is `None`): only `close` destroys it, and the
/// state gate keeps `close` out while the call runs.
pub(crate) struct AllocatorPin<'a> {
    pub(crate) al: *mut dmem_allocator_t,
    /// Its side words, found while resolving the handle.
    pub(crate) words: &'a crate::ctx::state::dmem::AllocatorWords,
    refs: Option<&'a crate::atomic::AtomicU64>,
}

// A pin is one count in the reference word: a copy would unpin twice.
static_assertions::assert_not_impl_any!(AllocatorPin<'static>: Clone, Copy);

impl Drop for AllocatorPin<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(refs) = self.refs {
            handle::unpin(refs);
        }
    }
}

impl<'a> Nrt<'a> {
    // The public dmem API: each call passes the state gate ([`Nrt::enter`]), so it fails with
    // `Closed` instead of racing `close`'s teardown of the allocators and arenas.

    /// The body of [`crate::dmem::DeviceMemory::allocator_create`].
    pub(crate) fn dmem_allocator_create(
        &self,
        pcore: *mut physical_core_t,
        ty: dmem_allocator_type_t,
    ) -> Result<*mut dmem_allocator_t> {
        let call = self.enter()?;
        let al = self.allocator_create(&call, pcore, ty)?;
        self.set_caller_owned(al, true);
        Ok(al)
    }

    /// The body of the raw `dmem_allocator_destroy` ([`crate::raw`]): `al` by pointer.
    pub(crate) fn dmem_allocator_destroy(&self, al: *mut dmem_allocator_t) -> Result<()> {
        let call = self.enter()?;
        if self.st.dmem.allocators.is_live(al) && !self.is_caller_owned(al) {
            return Err(Error::InvalidArgument(InvalidArg::RuntimeOwnedAllocator));
        }
        self.allocator_reachable(al)?;
        self.allocator_destroy(&call, al, GiveBack::Release)?;
        call.kept_result()
    }

    /// The body of [`crate::dmem::DeviceMemory::allocator_create`].
    pub(crate) fn dmem_allocator_create_handle(
        &self,
        core: crate::device::PhysicalCore,
        ty: dmem_allocator_type_t,
    ) -> Result<AllocatorHandle> {
        let call = self.enter()?;
        self.tpb(core.device, core.core)?; // attached, in range
        let pcore = self.pcore_ptr(core.device, core.core);
        let al = self.allocator_create(&call, pcore, ty)?;
        self.set_caller_owned(al, true);
        Ok(self.allocator_handle_owned(al))
    }

    /// The body of [`crate::dmem::DeviceMemory::allocator_destroy`]: refused while another
    /// call uses the allocator (it is claimed before anything changes, so no call can start
    /// on it meanwhile and none is cut off in the middle).
    pub(crate) fn dmem_allocator_destroy_handle(&self, h: AllocatorHandle) -> Result<()> {
        let call = self.enter()?;
        let p = self.allocator_pin(h)?;
        let al = p.al;
        if !self.is_caller_owned(al) {
            return Err(Error::InvalidArgument(InvalidArg::RuntimeOwnedAllocator));
        }
        self.allocator_reachable(al)?;
        self.allocator_claim(p)?;
        self.allocator_destroy(&call, al, GiveBack::Release)?;
        call.kept_result()
    }

    /// The body of [`crate::dmem::DeviceMemory::core_allocator`].
    pub(crate) fn core_allocator_handle(
        &self,
        core: crate::device::PhysicalCore,
    ) -> Result<AllocatorHandle> {
        // The GLOBAL allocator lives until `close`; `core_allocator` passes the gate, and a
        // handle read after a `close` is of the old epoch, refused everywhere.
        let al = self.core_allocator(core.device, core.core)?;
        Ok(self.allocator_handle_owned(al))
    }

    /// The body of [`crate::dmem::DeviceMemory::allocator_core`].
    pub(crate) fn dmem_allocator_core(
        &self,
        h: AllocatorHandle,
    ) -> Result<crate::device::PhysicalCore> {
        let _call = self.enter()?;
        let p = self.allocator_pin(h)?;
        let (device, core) = self.allocator_pcore(p.al)?;
        Ok(crate::device::PhysicalCore { device, core })
    }

    /// The body of [`crate::dmem::DeviceMemory::alloc`].
    #[inline]
    pub(crate) fn dmem_alloc_in(
        &self,
        h: AllocatorHandle,
        a: &AllocArgs<'_>,
        ref_list: Option<*mut dmem_list_t>,
    ) -> Result<DmemHandle> {
        let call = self.enter()?;
        let p = self.allocator_pin(h)?;
        let n = self.dmem_alloc_named(&call, p.al, Some(p.words), a, ref_list)?;
        Ok(self.new_dmem_handle(&n))
    }

    /// Runs `f` on the allocator `h` names, pinned for the call (so it is not destroyed
    /// under `f`).
    #[inline]
    pub(crate) fn with_allocator<R>(
        &self,
        h: AllocatorHandle,
        f: impl FnOnce(*mut dmem_allocator_t) -> Result<R>,
    ) -> Result<R> {
        let _call = self.enter()?;
        let p = self.allocator_pin(h)?;
        f(p.al)
    }

    /// The body of the raw `dmem_alloc` ([`crate::raw`]): `al` by pointer.
    pub(crate) fn dmem_alloc(
        &self,
        al: *mut dmem_allocator_t,
        a: &AllocArgs<'_>,
        ref_list: Option<*mut dmem_list_t>,
    ) -> Result<DmemHandle> {
        let call = self.enter()?;
        let n = self.dmem_alloc_internal(&call, al, a, ref_list)?;
        Ok(self.new_dmem_handle(&n))
    }

    /// The handle of a dmem this call just made: its slot and the generation it was
    /// published with (not read back: by then a walker could have found it, and another
    /// thread freed it and its slot taken a new dmem).
    #[inline(always)]
    fn new_dmem_handle(&self, n: &NewDmem) -> DmemHandle {
        DmemHandle(handle::Raw {
            index: n.index,
            generation: n.generation,
            epoch: self.epoch(),
        })
    }

    /// The body of [`crate::dmem::DeviceMemory::acquire_reference`].
    pub(crate) fn dmem_acquire_reference(&self, h: DmemHandle) -> Result<()> {
        let _call = self.enter()?;
        let p = self.dmem_pin(h)?;
        if handle::add_owner(p.refs) {
            Ok(())
        } else {
            Err(Error::stale(HandleKind::Dmem))
        }
    }

    /// The body of [`crate::dmem::DeviceMemory::free`].
    pub(crate) fn dmem_free(&self, h: DmemHandle) -> Result<()> {
        let call = self.enter()?;
        let p = self.dmem_pin(h)?;
        self.dmem_free_pinned(&call, p)?;
        call.kept_result()
    }

    /// The body of [`crate::dmem::DeviceMemory::free_in`].
    pub(crate) fn dmem_free_in(&self, al: *mut dmem_allocator_t, h: DmemHandle) -> Result<()> {
        let call = self.enter()?;
        let p = self.dmem_pin(h)?;
        if self.dmem_allocator_of(&p) != al {
            return Err(Error::ForeignDmem);
        }
        self.dmem_free_pinned(&call, p)?;
        call.kept_result()
    }

    /// The body of [`crate::dmem::DeviceMemory::info`].
    pub(crate) fn dmem_info(&self, h: DmemHandle) -> Result<DmemInfo> {
        let _call = self.enter()?;
        let p = self.dmem_pin(h)?;
        Ok(self.dmem_info_of(&p))
    }

    /// The body of [`crate::dmem::DeviceMemory::handle_of`].
    pub(crate) fn dmem_handle_of(&self, d: &dmem_t) -> Option<DmemHandle> {
        let m = d as *const dmem_t;
        let index = self.st.dmem.dmems.index_of(m)? as u32;
        let (gen, refs) = self.st.dmem.dmems.words_of(m)?;
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
    #[inline(always)]
    pub(crate) fn dmem_handle_of_owned(&self, m: Dmem) -> DmemHandle {
        DmemHandle(self.owned_handle(&self.st.dmem.dmems, m))
    }

    /// Resolves and pins `h` (the pin protocol of [`crate::handle`]): the dmem cannot be
    /// finalised, nor its slot reused, until the pin drops.
    pub(crate) fn dmem_pin(&self, h: DmemHandle) -> Result<DmemPin<'a>> {
        self.check_epoch(h.0, HandleKind::Dmem)?;
        let (m, refs) = self
            .st
            .dmem
            .dmems
            .pin(h.0.index, h.0.generation, HandleKind::Dmem)?;
        Ok(DmemPin { m, refs })
    }

    /// A free through a handle, once pinned: drops one owner; the last one waits for every
    /// other pin to go, then unlinks and finalises.
    #[inline(always)]
    fn dmem_free_pinned(&self, call: &impl InCall, p: DmemPin<'_>) -> Result<()> {
        // The last owner's free takes the allocator's lock: refused before anything changes
        // when the calling thread walks that allocator.
        self.allocator_reachable(self.allocator_of(p.m))?;
        if handle::release_sole_pinned(p.refs) {
            // The last owner and the only pin, dropped and drained in one step: the pin went
            // with the owner.
            let m = p.m;
            core::mem::forget(p);
            self.dmem_unlink_and_finalize(call, m, GiveBack::Release);
            return Ok(());
        }
        match handle::drop_owner(p.refs) {
            Dropped::NoOwner => Err(Error::stale(HandleKind::Dmem)),
            Dropped::Shared => Ok(()),
            Dropped::Last => {
                let (m, refs) = (p.m, p.refs);
                // The pin is handed over to the drain: it is the last one left.
                core::mem::forget(p);
                handle::wait_drained(refs, 1, crate::sync::relax);
                self.dmem_unlink_and_finalize(call, m, GiveBack::Release);
                Ok(())
            }
        }
    }

    /// The body of [`crate::dmem::DeviceMemory::is_live`].
    pub(crate) fn dmem_is_live(&self, h: DmemHandle) -> bool {
        let Ok(_call) = self.enter() else {
            return false;
        };
        self.dmem_pin(h).is_ok()
    }
}

/// The hint of a dmem as text.
pub(crate) fn dmem_hint(m: &dmem_t) -> &str {
    c_name(&m.hint_buf)
}
