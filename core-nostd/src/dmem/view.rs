//! [`DeviceMemory`]: the runtime's device-memory calls (spec §3), a view borrowed from
//! [`Nrt::dmem`]: allocator tiers, alloc / free / acquire, and the walks and checks of an
//! allocator's list.

use super::*;
use crate::device::PhysicalCore;
use crate::handle::{AllocatorHandle, DmemHandle};
use crate::list::ListError;

/// The runtime's device memory (spec §3): [`Nrt::dmem`]. A reference to the runtime view
/// (one word to make and pass), valid while the `Nrt` it borrows lives.
#[derive(Copy, Clone)]
pub struct DeviceMemory<'n, 'a>(pub(crate) &'n Nrt<'a>);

impl<'a> Nrt<'a> {
    /// The device-memory calls (spec §3).
    #[inline]
    pub fn dmem(&self) -> DeviceMemory<'_, 'a> {
        DeviceMemory(self)
    }
}

impl<'a> DeviceMemory<'_, 'a> {
    /// The GLOBAL allocator (`tpb_allocator`, spec §5.1) of physical core `core`. The
    /// runtime owns it (it lives until `close`; [`Self::allocator_destroy`] refuses it).
    #[inline]
    pub fn core_allocator(&self, core: PhysicalCore) -> Result<AllocatorHandle> {
        self.0.core_allocator_handle(core)
    }

    /// The physical core allocator `al` allocates for (spec §3.1: its `pcore`). A destroyed,
    /// forged or foreign handle is [`Error::InvalidHandle`].
    #[inline]
    pub fn allocator_core(&self, al: AllocatorHandle) -> Result<PhysicalCore> {
        self.0.dmem_allocator_core(al)
    }

    /// The handle of allocator `al` (a `dmem_allocator_t` the raw or C API names by pointer)
    /// when it is a live allocator of this runtime right now; `None` otherwise. Safe for any
    /// pointer: it is only compared with the allocator arena's bounds, never dereferenced.
    #[inline]
    pub fn allocator_handle_of(&self, al: *const dmem_allocator_t) -> Option<AllocatorHandle> {
        self.0.allocator_handle_of(al)
    }

    /// Whether `al` names a live allocator of this runtime (it may be destroyed the moment
    /// after).
    #[inline]
    pub fn allocator_is_live(&self, al: AllocatorHandle) -> bool {
        self.0.with_allocator(al, |_| Ok(())).is_ok()
    }

    /// The dmems on `al`'s list and their allocated bytes ([`AllocatorUsage`]).
    /// `InvalidHandle` for an allocator that is not live, `Closed` / `NotInitialized` outside
    /// `init`…`close`, `WouldDeadlock` when the calling thread walks `al`, `Timeout` when the
    /// wait for its lock gives up ([`Self::allocator_for_each`]).
    #[inline]
    pub fn allocator_usage(&self, al: AllocatorHandle) -> Result<AllocatorUsage> {
        self.0.with_allocator(al, |p| {
            let (dmems, bytes) = self.0.allocator_usage(p);
            Ok(AllocatorUsage { dmems, bytes })
        })
    }

    /// Calls `f` on every dmem of `al` under its list lock, which is not reentrant: a call
    /// from `f` that allocates from, frees into, measures ([`Self::allocator_usage`]) or walks
    /// `al` is refused at once with [`Error::WouldDeadlock`] when a thread token is installed
    /// (`crate::sync::set_thread_token_hook`), else when its bounded wait for the lock gives
    /// up ([`Error::Timeout`]). `Closed` / `Uninitialized` outside `init`…`close`; a
    /// destroyed, forged or foreign handle is [`Error::InvalidHandle`]. The allocator cannot
    /// be destroyed during the walk (such a destroy is refused).
    #[inline]
    pub fn allocator_for_each(
        &self,
        al: AllocatorHandle,
        mut f: impl FnMut(&DmemEntry<'_>),
    ) -> Result<()> {
        self.0.with_allocator(al, |p| {
            self.0
                .allocator_for_each(p, |d| f(&self.0.dmem_entry(p, d)))
        })
    }

    /// Walks `al`'s list under its lock and checks it ([`crate::list::List::check`]): every
    /// link symmetric, and as many dmems as the allocator's own count says. The outer error is
    /// the call's (`Closed`, `Uninitialized`, [`Error::InvalidHandle`]), the inner one the
    /// list's.
    #[inline]
    pub fn allocator_check(
        &self,
        al: AllocatorHandle,
    ) -> Result<core::result::Result<(), ListError>> {
        self.0.with_allocator(al, |p| self.0.allocator_check(p))
    }

    /// `dmem_allocator_create` (spec §3.1): a GLOBAL or MODEL allocator for physical core
    /// `core` (which must be attached), with its dummy head/tail wired and its lock
    /// initialised. The caller owns it: [`Self::allocator_destroy`] releases it.
    ///
    /// Fails with [`Error::Closed`] / [`Error::Uninitialized`] outside `init`…`close`.
    #[doc(alias = "dmem_allocator_create")]
    #[inline]
    pub fn allocator_create(
        &self,
        core: PhysicalCore,
        ty: dmem_allocator_type_t,
    ) -> Result<AllocatorHandle> {
        self.0.dmem_allocator_create_handle(core, ty)
    }

    /// `dmem_allocator_destroy` (spec §5.4): drops the allocator's reference on every dmem on
    /// its list — one call reclaims a model's whole footprint — and releases the allocator.
    /// A dmem still referenced elsewhere (a shared page) survives, detached, until its last
    /// `dmem_free`.
    ///
    /// Only an allocator made with [`Self::allocator_create`] can be destroyed here. The
    /// runtime's own (a core's GLOBAL allocator, which backs its tensors, scratchpad pages and
    /// ext-isa copy; a loaded model's MODEL allocators) are refused with NRT_INVALID: the
    /// runtime destroys them itself, at unload and close, and would otherwise destroy a slot
    /// that someone else had been given meanwhile.
    ///
    /// A destroy while another call uses the allocator (an allocation from it, a walk of it,
    /// another destroy) is refused with NRT_INVALID (`AllocatorInUse`) and changes nothing;
    /// once a destroy has claimed the allocator, every later call through its handle (or a
    /// copy of it, at any age) is [`Error::InvalidHandle`].
    ///
    /// Fails with [`Error::Closed`] / [`Error::Uninitialized`] outside `init`…`close`.
    #[doc(alias = "dmem_allocator_destroy")]
    #[inline]
    pub fn allocator_destroy(&self, al: AllocatorHandle) -> Result<()> {
        self.0.dmem_allocator_destroy_handle(al)
    }

    /// `dmem_alloc` (align 0) / `dmem_alloc_aligned` → `dmem_alloc_internal` (spec §3.2).
    ///
    /// Checks every argument, books the allocation in the ledger, links it before `al`'s dummy
    /// tail and, with `ref_list`, records it in that weak index. On any error nothing changes.
    ///
    /// Fails with [`Error::Closed`] / [`Error::Uninitialized`] outside `init`…`close`.
    #[doc(alias = "dmem_alloc")]
    #[inline]
    pub fn alloc(
        &self,
        al: AllocatorHandle,
        a: &AllocArgs<'_>,
        ref_list: Option<*mut dmem_list_t>,
    ) -> Result<DmemHandle> {
        self.0.dmem_alloc_in(al, a, ref_list)
    }

    /// `dmem_acquire_reference` (spec §3.2): one more owner of a shared dmem (each owner
    /// frees it once with [`Self::free`]).
    ///
    /// A stale, forged or foreign handle is [`Error::InvalidHandle`]. Fails with
    /// [`Error::Closed`] / [`Error::Uninitialized`] outside `init`…`close`.
    #[doc(alias = "dmem_acquire_reference")]
    #[inline]
    pub fn acquire_reference(&self, h: DmemHandle) -> Result<()> {
        self.0.dmem_acquire_reference(h)
    }

    /// `dmem_free` (spec §3.2): drops one owner; the last one unmaps and frees the driver
    /// memory, books the free in the ledger, unlinks from the allocator and releases the node
    /// (after any call using the dmem on another thread has finished with it). A dmem with no
    /// owner left — a double free, at any age — is [`Error::InvalidHandle`], as is a forged or
    /// foreign handle; nothing of anyone else's is freed.
    ///
    /// Fails with [`Error::Closed`] / [`Error::Uninitialized`] outside `init`…`close`.
    #[doc(alias = "dmem_free")]
    #[inline]
    pub fn free(&self, h: DmemHandle) -> Result<()> {
        self.0.dmem_free(h)
    }

    /// Like [`Self::free`], but refuses a dmem that is not on `al`'s list.
    ///
    /// Fails with [`Error::Closed`] / [`Error::Uninitialized`] outside `init`…`close`.
    #[doc(alias = "dmem_free_in")]
    #[inline]
    pub fn free_in(&self, al: AllocatorHandle, h: DmemHandle) -> Result<()> {
        self.0.with_allocator(al, |p| self.0.dmem_free_in(p, h))
    }

    /// The fields of a live dmem fixed at its allocation (see [`DmemInfo`]).
    #[doc(alias = "dmem_info")]
    #[inline]
    pub fn info(&self, h: DmemHandle) -> Result<DmemInfo> {
        self.0.dmem_info(h)
    }

    /// The handle of a dmem met while walking an allocator ([`Self::allocator_for_each`]):
    /// `None` for a `dmem_t` that is not a live slot of this runtime's arena.
    #[doc(alias = "dmem_handle_of")]
    #[inline]
    pub fn handle_of(&self, d: &dmem_t) -> Option<DmemHandle> {
        self.0.dmem_handle_of(d)
    }

    /// Whether `h` names a live dmem of this runtime (it may be freed the moment after).
    #[doc(alias = "dmem_is_live")]
    #[inline]
    pub fn is_live(&self, h: DmemHandle) -> bool {
        self.0.dmem_is_live(h)
    }
}
