//! The state block's storage (spec §1): the zero-valid and thread-safety promises of
//! [`CoreState`] and its pools, its heap and static constructors, and the binding of its
//! arenas to their storage.

use super::super::*;

// SAFETY: both members are ZeroValid abi structs.
unsafe impl ZeroValid for UlibSet {}
// SAFETY: repr(C) of an array of `virtual_core_t` (a ZeroValid abi struct) and four u32s:
// all-zero is the empty table (no core owned).
unsafe impl ZeroValid for VcoreTable {}

// SAFETY: the state is only reached through the `&'static CoreState` that `bind` returns once
// (CoreState is Sync); the storage only through that state's arenas.
unsafe impl<const B: usize> Sync for StaticState<B> {}

impl<const B: usize> StaticState<B> {
    /// All zero (a `static` of it is `.bss`).
    pub const fn new() -> Self {
        // SAFETY: all-zero is valid for every member: MaybeUninit contents, a zero flag.
        unsafe { core::mem::MaybeUninit::<Self>::zeroed().assume_init() }
    }

    /// Binds the state block to the storage for `caps`, once, and returns it. Errors: `caps`
    /// out of range or needing more than `B` bytes (`InvalidArgument`), or already bound.
    pub fn bind(&'static self, caps: &Capacity) -> Result<&'static CoreState> {
        caps.check().map_err(Error::InvalidCapacity)?;
        if Plan::of(caps).total > B {
            return Err(Error::InvalidArgument(InvalidArg::StaticStorageTooSmall));
        }
        if self
            .bound
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(Error::InvalidArgument(InvalidArg::StaticStateBound));
        }
        // SAFETY: the flag made this the only caller ever to get here, so nobody references
        // the state or the storage; both are all-zero (a fresh static), which is a valid
        // CoreState (ZeroValid); the storage is 64-aligned (repr), B >= the plan's total,
        // and static, so it outlives the state.
        unsafe {
            let st = &mut *self.state.get().cast::<CoreState>();
            let _ = st.bind_storage(self.storage.get().cast(), caps, None);
            Ok(&*st)
        }
    }
}

impl<const B: usize> Default for StaticState<B> {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every member is zero-valid: the abi structs by their own ZeroValid impls, the pools
// by theirs (below), the plain-integer tables trivially, a zero lock is unlocked, state 0 is
// UNINIT, a null `ctx` is an unbound block (only bound blocks are handed out: `StaticState::bind`,
// `with_storage`) and a null `owned` owns nothing (a `None` `owned_free`: a null fn pointer).
unsafe impl ZeroValid for CoreState {}
// SAFETY: arenas and side tables are zero-valid (unbound: no slots) and so are atomics.
unsafe impl ZeroValid for crate::ctx::state::dmem::DmemPool {}
// SAFETY: arenas and side tables only (unbound when zero).
unsafe impl ZeroValid for crate::ctx::state::model::ModelPool {}
// SAFETY: arenas and side tables (unbound when zero) and an array of locks (a zero
// `CoreLock` holds an unlocked `nrt_mutex_t`).
unsafe impl ZeroValid for crate::ctx::state::tensor::TensorPool {}
// SAFETY: `oom.last` and `oom.channel` are MaybeUninit, only read after `set` became true (a
// zero `bool` is false); a zero `nrt_mutex_t` is unlocked, so the `lock_api::Mutex` around it,
// a raw lock and an UnsafeCell of zero-valid data, is zero-valid too.
unsafe impl ZeroValid for crate::ctx::state::ledger::LedgerPool {}
// SAFETY: repr(C) of integers and integer arrays: all-zero is an empty entry.
unsafe impl ZeroValid for crate::ctx::state::model::ModelIoEntry {}
// Not over-aligned: `Box::new_zeroed` of an alignment above the allocator's minimum memsets
// the whole block instead of taking calloc's lazily zeroed pages (`sync::LINE_STRIDE`).
const _: () = assert!(core::mem::align_of::<CoreState>() <= 16);
// SAFETY: all shared mutation goes through atomics, the nrt_mutex_t locks placed where libnrt
// places them, or the arenas' own locks; raw pointers inside point into this same block.
unsafe impl Sync for CoreState {}
// SAFETY: as above; the state owns no thread-bound resource.
unsafe impl Send for CoreState {}

impl CoreState {
    /// Bytes of one `CoreState` header (the fixed part: the arena headers, the logical-core
    /// table, the device geometry); the context region and the arenas' storage come on top
    /// ([`Self::storage_bytes`]). Untouched pages cost nothing.
    pub const BYTES: usize = core::mem::size_of::<Self>();

    /// Bytes of storage a state block of capacity `caps` needs: its context region for
    /// `caps.devices` devices ([`Self::context_layout`]) and its arenas (0 for a capacity
    /// [`Capacity::check`] refuses).
    pub const fn storage_bytes(caps: &Capacity) -> usize {
        match caps.check() {
            Ok(()) => Plan::of(caps).total,
            Err(_) => 0,
        }
    }

    /// Binds the context region and every pool's arenas to their regions of `base` (each
    /// pool's `bind` walks the same `parts` list that sized its region). Returns whether every part was bound exactly (by
    /// construction it is; a refused part leaves its arena unbound: full, not unsound).
    ///
    /// # Safety
    /// `base` is 64-aligned and points at `storage_bytes(caps)` zeroed bytes used by nobody
    /// else and valid as long as `self`; `caps` passed [`Capacity::check`]; the block was
    /// never bound or used (nobody else references it).
    unsafe fn bind_storage(
        &mut self,
        base: *mut u8,
        caps: &Capacity,
        in_use: Option<crate::arena::InUse>,
    ) -> bool {
        let p = Plan::of(caps);
        self.ctx = base;
        self.ctx_layout = p.ctx;
        // The context region is what debuggers and core-file readers walk from `tdrv_ctx_0`.
        if let Some(hook) = in_use {
            hook(base, p.ctx.bytes);
        }
        // SAFETY: the regions lie one after another inside the storage (`p.total` =
        // `storage_bytes(caps)` bytes, contract), each a sum of multiples of 64, so each
        // starts 64-aligned, in bounds and disjoint from the others; zeroed, unshared and
        // valid as long as `self`, whose pools are the only ones given these binders.
        let (mut d, mut m, mut t, mut h) = unsafe {
            (
                Binder::new(base.add(p.at[0]), p.bytes[0], in_use),
                Binder::new(base.add(p.at[1]), p.bytes[1], in_use),
                Binder::new(base.add(p.at[2]), p.bytes[2], in_use),
                Binder::new(base.add(p.at[3]), p.bytes[3], in_use),
            )
        };
        self.dmem.bind(&mut d, caps);
        self.model.bind(&mut m, caps);
        self.tensor.bind(&mut t, caps);
        self.live_handles.bind(&mut h, caps);
        self.caps = *caps;
        let bound = d.finish() & m.finish() & t.finish() & h.finish();
        debug_assert!(bound, "a pool's bind does not follow its parts list");
        bound
    }

    /// The capacities this block was bound with.
    pub fn capacity(&self) -> Capacity {
        self.caps
    }

    /// The address of this block's context tree (the `tdrv_ctx_t` libnrt's `tdrv_ctx_0`
    /// points at, spec §1), for a C library to publish where debuggers and `nrt-dmem inspect`
    /// look for it. It holds [`Self::context_layout`]`.devices` devices: all of libnrt's
    /// `tdrv_ctx_t` for 32, its first member and `mla[0..devices]` otherwise. Only an address:
    /// nothing may read or write the tree through it.
    pub fn context_addr(&self) -> *const tdrv_ctx_t {
        self.ctx.cast_const().cast()
    }

    /// Where the parts of this block's context region lie ([`ContextLayout`], spec §1).
    pub fn context_layout(&self) -> ContextLayout {
        self.ctx_layout
    }

    /// Bytes the last re-initialisation ([`Nrt::init`] after [`Nrt::close`], spec §1, §12)
    /// zeroed of the context region: the first member, the devices that runtime attached, the tail and
    /// their side state, not the devices it never used (0 before any re-initialisation).
    pub fn reinit_bytes(&self) -> usize {
        self.reinit_bytes.load(Ordering::Relaxed)
    }

    /// A zeroed state on the heap with [`Capacity::DEFAULT`] (feature `alloc`): an
    /// independent instance for each call, for tests, the std shim or a hypervisor with a
    /// global allocator (firmware without a heap uses a [`StaticState`]). Never built on the
    /// stack.
    #[cfg(any(test, feature = "alloc"))]
    pub fn new_boxed() -> alloc::boxed::Box<Self> {
        match Self::with_capacity(&Capacity::DEFAULT) {
            Ok(b) => b,
            // DEFAULT passes `check` (a const assertion in config.rs), so only the allocation
            // can fail, and that is the global allocator's error, as for any Box.
            Err(_) => alloc::alloc::handle_alloc_error(core::alloc::Layout::new::<Self>()),
        }
    }

    /// A zeroed state on the heap whose arenas hold `caps` (feature `alloc`); the arena
    /// storage is one zeroed allocation, freed with the state. It is taken from the global
    /// allocator's `alloc_zeroed` at the allocator's natural alignment and aligned inside, so a
    /// large one comes as lazily zeroed pages (calloc's fresh mapping) and costs memory only
    /// as slots are used. `InvalidArgument` naming the field for a capacity
    /// [`Capacity::check`] refuses.
    #[cfg(any(test, feature = "alloc"))]
    pub fn with_capacity(caps: &Capacity) -> Result<alloc::boxed::Box<Self>> {
        caps.check().map_err(Error::InvalidCapacity)?;
        let bytes = Plan::of(caps)
            .total
            .max(1)
            .checked_add(STORAGE_SLACK)
            .ok_or(Error::InvalidArgument(InvalidArg::CapacityTooLarge))?;
        let layout = core::alloc::Layout::from_size_align(bytes, 16)
            .map_err(|_| Error::InvalidArgument(InvalidArg::CapacityTooLarge))?;
        // SAFETY: non-zero size.
        let raw = unsafe { alloc::alloc::alloc_zeroed(layout) };
        if raw.is_null() {
            alloc::alloc::handle_alloc_error(layout);
        }
        /// Frees what `with_capacity` allocated.
        unsafe fn free_heap(p: *mut u8, bytes: usize) {
            if let Ok(layout) = core::alloc::Layout::from_size_align(bytes, 16) {
                // SAFETY: `p` and `bytes` are what `with_capacity` got from `alloc_zeroed` with
                // this layout (the contract of `owned_free`).
                unsafe { alloc::alloc::dealloc(p, layout) };
            }
        }
        // SAFETY: `raw` is `bytes` zeroed bytes of ours, freed by `free_heap` with the same
        // size.
        unsafe { Self::with_storage(caps, raw, bytes, free_heap, None) }
    }

    /// A zeroed state on the heap (feature `alloc`) whose arenas live in storage the caller
    /// provides and the state owns: `bytes` zeroed bytes at `base` (at least
    /// [`Self::storage_bytes`]`(caps) + 63`, any alignment: the arenas start at the first
    /// 64-aligned byte), given back with `free(base, bytes)` when the state drops. The std
    /// shim maps it with `MAP_NORESERVE`, so capacity that is never used costs address space
    /// only; `in_use`, when given, is told about each arena's slots as they come into use
    /// ([`crate::arena::InUse`]: the shim puts them, and only them, into core dumps).
    /// `InvalidArgument` for a capacity [`Capacity::check`] refuses or storage that is too
    /// small; the storage is freed on error too.
    ///
    /// # Safety
    /// `base` points at `bytes` zeroed bytes, writable, used by nobody else and valid until
    /// `free(base, bytes)`, which must release exactly them.
    #[cfg(any(test, feature = "alloc"))]
    pub unsafe fn with_storage(
        caps: &Capacity,
        base: *mut u8,
        bytes: usize,
        free: StorageFree,
        in_use: Option<crate::arena::InUse>,
    ) -> Result<alloc::boxed::Box<Self>> {
        let fits = caps.check().map_err(Error::InvalidCapacity).and_then(|()| {
            let need = Plan::of(caps).total.max(1);
            let pad = base.align_offset(64);
            match need.checked_add(pad) {
                Some(n) if n <= bytes => Ok(pad),
                _ => Err(Error::InvalidArgument(InvalidArg::StaticStorageTooSmall)),
            }
        });
        let pad = match fits {
            Ok(pad) => pad,
            Err(e) => {
                // SAFETY: the caller's storage, released as its contract says.
                unsafe { free(base, bytes) };
                return Err(e);
            }
        };
        // SAFETY: CoreState is ZeroValid.
        let mut st = unsafe { alloc::boxed::Box::<Self>::new_zeroed().assume_init() };
        st.owned = base;
        st.owned_bytes = bytes;
        st.owned_free = Some(free);
        // SAFETY: `base + pad` is 64-aligned with at least the plan's size of zeroed bytes
        // behind it (checked above), owned by `st` (released in its Drop, after every use);
        // `caps` passed check; `st` is fresh and unshared.
        let _ = unsafe { st.bind_storage(base.add(pad), caps, in_use) };
        Ok(st)
    }

    /// Number of static arenas in a `CoreState` (the length of [`Self::arena_stats`]).
    pub const ARENA_COUNT: usize = crate::ctx::state::dmem::DmemPool::ARENAS
        + crate::ctx::state::model::ModelPool::ARENAS
        + crate::ctx::state::tensor::TensorPool::ARENAS;

    /// Per-arena occupancy, for footprint reports.
    pub fn arena_stats(&self) -> [(&'static str, crate::arena::ArenaStats); Self::ARENA_COUNT] {
        let (d, m, t) = (self.dmem.stats(), self.model.stats(), self.tensor.stats());
        let mut out = [("", crate::arena::ArenaStats::default()); Self::ARENA_COUNT];
        for (o, s) in out.iter_mut().zip(d.into_iter().chain(m).chain(t)) {
            *o = s;
        }
        out
    }
}

#[cfg(any(test, feature = "alloc"))]
impl Drop for CoreState {
    fn drop(&mut self) {
        if let (false, Some(free)) = (self.owned.is_null(), self.owned_free) {
            // SAFETY: `owned` and `owned_bytes` are the storage `with_storage` was given with
            // `free` (its contract); `&mut self` proves nobody uses the arenas any more.
            unsafe { free(self.owned, self.owned_bytes) };
        }
    }
}

/// How a state block gives back storage it owns ([`CoreState::with_storage`]): called once
/// with the base and length it was given.
pub type StorageFree = unsafe fn(*mut u8, usize);
