//! The [`Nrt`] view's accessors into the context tree (spec §1, §1.1): every raw pointer
//! a behaviour module needs is resolved and checked here, so those modules stay safe code.

use super::*;

impl<'a> Nrt<'a> {
    /// Binds a state block to a driver, with no host-memory provider (VIRTUAL tensors are
    /// refused as `Unsupported`).
    pub fn new(st: &'a CoreState, drv: &'a dyn Driver) -> Self {
        Nrt {
            st,
            drv,
            host: None,
        }
    }

    /// Binds a state block to a driver and the host-memory provider of its VIRTUAL tensors:
    /// they are allocated from and freed to `host`, and `close` returns their bytes to it.
    pub fn with_host(
        st: &'a CoreState,
        drv: &'a dyn Driver,
        host: &'a dyn crate::tensor::HostMem,
    ) -> Self {
        Nrt {
            st,
            drv,
            host: Some(host),
        }
    }

    /// The host-memory provider this view binds (None: VIRTUAL tensors unsupported).
    pub fn host_mem(&self) -> Option<&'a dyn crate::tensor::HostMem> {
        self.host
    }

    /// `Ok` when this view names the driver and host provider its state block was
    /// initialised with (or the block is not initialised: nothing is bound yet);
    /// `MissingHostProvider` for a view of the right driver without the provider,
    /// `ForeignResources` otherwise.
    #[inline]
    pub(crate) fn check_bound(&self) -> Result<()> {
        let drv = self.st.bound_drv.load(Ordering::Relaxed);
        let host = self.st.bound_host.load(Ordering::Relaxed);
        if drv == 0 || (drv == addr(self.drv) && host == self.host.map_or(0, addr)) {
            Ok(())
        } else if drv == addr(self.drv) && self.host.is_none() {
            Err(Error::MissingHostProvider)
        } else {
            Err(Error::ForeignResources)
        }
    }

    /// The driver.
    pub fn driver(&self) -> &'a dyn Driver {
        self.drv
    }

    /// The state block.
    pub fn state(&self) -> &'a CoreState {
        self.st
    }

    /// Devices the context region holds (`mla_t` slots, 1..=32).
    #[inline]
    pub(crate) fn ctx_devices(&self) -> u32 {
        self.st.ctx_layout.devices
    }

    /// `tdrv_ctx_t.num_mla`, the region's first member.
    pub(crate) fn num_mla_ptr(&self) -> *mut u32 {
        self.st.ctx.cast()
    }

    /// The members libnrt places after `mla[32]` ([`CtxTail`], where [`ContextLayout::tail`]
    /// says). Address only.
    pub(crate) fn ctx_tail(&self) -> *mut CtxTail {
        self.st.ctx.wrapping_add(self.st.ctx_layout.tail).cast()
    }

    /// Raw pointer to `mla[dev]` (address only, no check: callers check
    /// `dev < ctx_devices()` before dereferencing).
    pub(crate) fn mla_ptr(&self, dev: u32) -> *mut mla_t {
        self.st
            .ctx
            .wrapping_add(core::mem::offset_of!(tdrv_ctx_t, mla))
            .wrapping_add(dev as usize * core::mem::size_of::<mla_t>())
            .cast()
    }

    /// The last device index of the region, for the clamping accessors.
    #[inline]
    fn last_dev(&self, dev: u32) -> usize {
        (dev as usize).min(self.ctx_devices().max(1) as usize - 1)
    }

    /// The project's side state of device `dev` (clamped in range: callers check).
    pub(crate) fn dev_ext(&self, dev: u32) -> &'a DevExt {
        let p = self
            .st
            .ctx
            .wrapping_add(self.st.ctx_layout.dev_ext)
            .cast::<DevExt>()
            .wrapping_add(self.last_dev(dev));
        // SAFETY: in the bound context region (an index below `devices`, 64-aligned start,
        // `DevExt`'s alignment is at most 64), valid as long as the state (`'a`); the entries
        // are written only by `zero_tree`, whose contract excludes every user of the runtime
        // (so no reference handed out here is live then).
        unsafe { &*p }
    }

    /// The project's side state of core `(dev, tpb)` (indices clamped in range: callers check).
    pub(crate) fn core_ext(&self, dev: u32, tpb: u32) -> &'a CoreExt {
        let i = self.last_dev(dev) * constants::TPBS_PER_MLA
            + (tpb as usize).min(constants::TPBS_PER_MLA - 1);
        let p = self
            .st
            .ctx
            .wrapping_add(self.st.ctx_layout.core_ext)
            .cast::<CoreExt>()
            .wrapping_add(i);
        // SAFETY: as `dev_ext`: in the bound region, below `devices * 8` entries; rewritten
        // only by `zero_tree` under its contract.
        unsafe { &*p }
    }

    /// The first per-core side-state entry (address only).
    pub(crate) fn core_ext_base(&self) -> *const CoreExt {
        self.st.ctx.wrapping_add(self.st.ctx_layout.core_ext).cast()
    }

    /// The `physical_core_t` of core `(dev, tpb)`, which its GLOBAL allocator and dmems point
    /// at (no check beyond clamping).
    pub(crate) fn pcore_ptr(&self, dev: u32, tpb: u32) -> *mut physical_core_t {
        self.core_ext(dev, tpb).pcore.get()
    }

    /// `(device, core)` of a `tpb_t` of this runtime's tree, by address arithmetic (no
    /// dereference; `(devices, 8)`, out of range, for a pointer outside the tree).
    pub(crate) fn tpb_coords(&self, tpb: *const tpb_t) -> (u32, u32) {
        let out = (self.ctx_devices(), constants::TPBS_PER_MLA as u32);
        let first = self.mla_ptr(0) as usize;
        let Some(addr) = (tpb as usize).checked_sub(first) else {
            return out;
        };
        let (d, rest) = (
            addr / core::mem::size_of::<mla_t>(),
            addr % core::mem::size_of::<mla_t>(),
        );
        let Some(within) = rest.checked_sub(core::mem::offset_of!(mla_t, _tpbs)) else {
            return out;
        };
        let t = within / core::mem::size_of::<tpb_t>();
        if d >= self.ctx_devices() as usize
            || t >= constants::TPBS_PER_MLA
            || within % core::mem::size_of::<tpb_t>() != 0
        {
            return out;
        }
        (d as u32, t as u32)
    }

    /// The project's side state of a resolved `tpb_t` ([`Self::tpb_coords`]).
    pub(crate) fn tpb_ext(&self, tpb: *const tpb_t) -> &'a CoreExt {
        let (d, t) = self.tpb_coords(tpb);
        self.core_ext(d, t)
    }

    /// The HBM channel that serves a resolved `tpb_t` (public ABI §3 "HBM ↔ core").
    pub(crate) fn tpb_default_hbm(&self, call: &impl InCall, tpb: *const tpb_t) -> u32 {
        let (d, t) = self.tpb_coords(tpb);
        self.dev_geom(call, d).default_hbm(t)
    }

    /// Raw pointer to `mla[dev]._tpbs[tpb]` (address only, no check: callers check the
    /// indices before dereferencing).
    pub(crate) fn tpb_ptr(&self, dev: u32, tpb: u32) -> *mut tpb_t {
        self.mla_ptr(dev)
            .cast::<u8>()
            .wrapping_add(core::mem::offset_of!(mla_t, _tpbs))
            .wrapping_add(tpb as usize * core::mem::size_of::<tpb_t>())
            .cast()
    }

    /// The `tpb_t` of this runtime's tree that `tpb` points at, re-derived from the tree by
    /// its coordinates ([`Self::tpb_coords`]: address arithmetic, no dereference), or `None`
    /// for a pointer that is not exactly a core of the tree. What the accessors below take
    /// instead of trusting a caller's pointer.
    pub(super) fn tree_tpb(&self, tpb: *const tpb_t) -> Option<*mut tpb_t> {
        let (d, t) = self.tpb_coords(tpb);
        (d < self.ctx_devices() && t < constants::TPBS_PER_MLA as u32).then(|| self.tpb_ptr(d, t))
    }

    /// The index of device `mla` in the tree (address arithmetic, no dereference), `None` for
    /// a pointer that is not exactly an `mla_t` of the tree.
    #[inline]
    pub(crate) fn mla_index(&self, mla: *const mla_t) -> Option<u32> {
        let off = (mla as usize).checked_sub(self.mla_ptr(0) as usize)?;
        let sz = core::mem::size_of::<mla_t>();
        (off % sz == 0 && off / sz < self.ctx_devices() as usize).then_some((off / sz) as u32)
    }

    /// Device `dev`'s `dmem_logger.memory_usage_nc` (spec §3.4), the ledger's device rows
    /// (`dev` clamped in range: callers check).
    #[inline]
    pub(crate) fn ledger_rows(&self, dev: u32) -> &'a [[AtomicU64; 23]; 8] {
        let mla = self.mla_ptr(self.last_dev(dev) as u32);
        // SAFETY: `mla` is a device of the tree (in bounds, aligned), which lives as long as
        // the state block (`'a`). The rows are atomics, read and written only atomically, and
        // rewritten wholesale only by `zero_tree`, whose contract (the `Exclusive` token's
        // conditions) excludes every user of the runtime, so no reference handed out here is
        // live then; the reference covers the rows alone, not the other `mla_t` members
        // that bring-up writes.
        unsafe { &*core::ptr::addr_of!((*mla).dmem_logger.memory_usage_nc) }
    }

    /// The fixed members of dmem `m` ([`DmemFixed`]), read under its arena shard's lock;
    /// `None` when `m` is not a live, published dmem of this runtime. Safe for any pointer.
    pub(crate) fn dmem_fixed(&self, m: *const dmem_t) -> Option<DmemFixed> {
        let arena = self.st.dmem.dmems();
        // SAFETY: `with_live` holds `m`'s shard lock and confirmed a live slot of `arena`.
        arena
            .with_live(m, |p| unsafe { DmemFixed::read(arena, p.as_ptr()) })
            .flatten()
    }

    /// [`Self::dmem_fixed`] without the shard lock, for the ledger's booking on the
    /// allocation hot path (`dml_add_entry`; the lock cost the dmem path about 8 %). Its two
    /// callers own `m`: `dmem_alloc` after publishing it (its one owner reference, not yet
    /// returned), and `dmem_finalize` before retiring it (the last reference gone, the slot
    /// given back only after this). A pointer that is not a live slot reads as `None`; the
    /// ownership is the crate-internal contract of this function.
    #[inline]
    pub(crate) fn owned_dmem_fixed(&self, m: *const dmem_t) -> Option<DmemFixed> {
        if !self.st.dmem.dmems().is_live(m) {
            return None;
        }
        // SAFETY: `is_live` confirmed a live slot of the dmem arena; the caller owns it (the
        // contract above), so it is neither released nor handed out again during the read.
        unsafe { DmemFixed::read(self.st.dmem.dmems(), m) }
    }

    /// Calls `f` with the fixed members of every live, published dmem, with every shard
    /// lock of the dmem arena held (`f` must not allocate or free dmems).
    pub(crate) fn for_each_dmem_fixed(&self, mut f: impl FnMut(DmemFixed)) {
        let arena = self.st.dmem.dmems();
        arena.for_each_live(|p| {
            // SAFETY: a live slot of `arena`, whose shard lock `for_each_live` holds.
            if let Some(d) = unsafe { DmemFixed::read(arena, p.as_ptr()) } {
                f(d);
            }
        });
    }

    /// The four dmems of live GPSIMD library set `set` (scratch space, ucode table, extram,
    /// libraries: spec §6), `None` for a pointer that is not a live set.
    pub(crate) fn ulib_set_dmems(&self, set: *const UlibSet) -> Option<[*mut dmem_t; 4]> {
        self.st.model.ulib_sets().with_live(set, |p| {
            // SAFETY: a live slot, which its shard lock (held by `with_live`) keeps from being
            // released or handed out again; a set's members are written only through its
            // `Fresh` before it is published (`ulib_alloc_and_stage`) and never after, so this
            // shared read races no write.
            let info = unsafe { &p.as_ref().info };
            [
                info.scratch_space,
                info.ucode_table,
                info.extram,
                info.lib_dmem,
            ]
        })
    }

    /// The scratchpad of core `tpb` with its lock held ([`ScratchpadGuard`]), `None` for a
    /// pointer that is not a core of the tree.
    pub(crate) fn scratchpad_lock(&self, tpb: *const tpb_t) -> Option<ScratchpadGuard<'a>> {
        let sp = self
            .tree_tpb(tpb)
            .map(|t| t.wrapping_byte_add(TPB_SCRATCHPAD))?;
        let sp = sp.cast::<tdrv_scratchpad_t>();
        // SAFETY: `sp` is the scratchpad of a `tpb_t` inside the context tree (in bounds,
        // aligned), which lives as long as the state block (`'a`); the lock word is an
        // atomic, so a shared reference to it is sound whoever else spins on it.
        let lock = unsafe { &*core::ptr::addr_of!((*sp).lock) }.lock();
        Some(ScratchpadGuard { sp, _lock: lock })
    }

    /// Bring-up of core `tpb`'s scratchpad settings (`tdrv_scratchpad_init`'s stores, spec
    /// §8): the page size and mode, and no page in use. Nothing for a pointer outside the tree.
    pub(crate) fn scratchpad_setup(
        &self,
        _ex: &mut Exclusive<'_>,
        tpb: *const tpb_t,
        page_size: u64,
        contiguous: bool,
    ) {
        let Some(t) = self.tree_tpb(tpb) else {
            return;
        };
        let sp = t
            .wrapping_byte_add(TPB_SCRATCHPAD)
            .cast::<tdrv_scratchpad_t>();
        // SAFETY: `sp` is a scratchpad of the tree (in bounds, aligned); the `Exclusive`
        // token proves no API call is in flight, so nobody reads these fields (the unlocked
        // readers of `page_size` run inside gated calls) or holds the scratchpad lock.
        unsafe {
            (*sp).page_size = page_size;
            (*sp).is_contiguous = contiguous as u8;
            (*sp).num_pages = 0;
        }
    }

    /// The ext-isa cache of core `tpb` with `ulib_staging_lock` held ([`UlibCacheGuard`]),
    /// `None` for a pointer that is not a core of the tree.
    pub(crate) fn ulib_cache_lock(&self, tpb: *const tpb_t) -> Option<UlibCacheGuard<'a>> {
        let sunda = self
            .tree_tpb(tpb)?
            .wrapping_byte_add(core::mem::offset_of!(tpb_t, sunda))
            .cast::<tpb_sunda_t>();
        // SAFETY: `sunda` is the `tpb_sunda_t` of a `tpb_t` of the tree (in bounds, aligned),
        // which lives as long as the state block; the lock word is an atomic.
        let lock = unsafe { &*core::ptr::addr_of!((*sunda).ulib_staging_lock) }.lock();
        let slot = sunda
            .wrapping_byte_add(core::mem::offset_of!(
                tpb_sunda_t,
                ulib_set_info_extisa_only
            ))
            .cast();
        Some(UlibCacheGuard { slot, _lock: lock })
    }

    /// The GLOBAL allocator (`tpb_allocator`, spec §5.1) of core `tpb`; null for a core
    /// without one (not brought up, torn down) or a pointer outside the tree. Read under the
    /// gate token `_call` ([`InCall`]).
    pub(crate) fn tpb_allocator(
        &self,
        _call: &impl InCall,
        tpb: *const tpb_t,
    ) -> *mut dmem_allocator_t {
        let Some(t) = self.tree_tpb(tpb) else {
            return null_mut();
        };
        // SAFETY: `t` is a `tpb_t` of the tree (in bounds, aligned). The field is written
        // only by `init_cores` and `teardown_cores`, inside `init` / `close` with the gate
        // shut and drained. The token `_call` is either an in-flight guard (so the gate is
        // open and neither of them is writing) or `init` / `close`'s own `Exclusive`, whose
        // steps run one after another on its thread, never during one of those writes. A
        // plain copy: no reference outlives the read.
        unsafe { core::ptr::addr_of!((*t).tpb_allocator).read() }
    }

    /// The logical-core table (spec §9) for `init` to write, under its [`Exclusive`] token.
    pub(crate) fn vcores_mut<'x>(&'x self, _ex: &'x mut Exclusive<'_>) -> &'x mut VcoreTable {
        // SAFETY: the table lives in the state block (`'a`, which outlives `'x`). Every other
        // reference to it comes from `vcores`, tied to the borrow of a gate token: an
        // in-flight guard (none exists while the gate is shut and drained, which this token
        // proves) or this very `Exclusive`, which is borrowed mutably for `'x`, so no shared
        // borrow of it, and no reference from `vcores`, is live while this `&mut` is.
        unsafe { &mut *self.st.vc.get() }
    }

    /// The logical-core table (spec §9), read under the gate token `_call` ([`InCall`]): an
    /// in-flight call (`init` and `close` rewrite the table only with the gate shut and
    /// drained, so not while the guard lives) or `init` / `close` between their writes.
    pub(crate) fn vcores<'g>(&'g self, _call: &'g impl InCall) -> &'g VcoreTable {
        // SAFETY: the table lives in the state block (`'a`, which outlives `'g`); it is
        // written only through `vcores_mut`, which needs `&mut Exclusive`. While `_call` is
        // borrowed for `'g` that cannot happen: an in-flight guard means the gate is open, so
        // no `Exclusive` exists; an `Exclusive` token borrowed shared here cannot also be
        // borrowed mutably. So no `&mut` is live while this shared reference is.
        unsafe { &*self.st.vc.get() }
    }

    /// The address of entry `k` of the logical-core table (clamped in range; no dereference):
    /// what `physical_core_t.vcore` stores (spec §9).
    pub(crate) fn vcore_entry_ptrs(&self) -> impl Fn(usize) -> *mut virtual_core_t {
        let base = self
            .st
            .vc
            .get()
            .wrapping_byte_add(core::mem::offset_of!(VcoreTable, owned))
            .cast::<virtual_core_t>();
        move |k| base.wrapping_add(k.min(MAX_VCORES - 1))
    }

    /// The `physical_core_t` of core `(dev, tpb)` for `init` to write, under its
    /// [`Exclusive`] token (indices clamped: callers check).
    pub(crate) fn pcore_mut<'x>(
        &'x self,
        _ex: &'x mut Exclusive<'_>,
        dev: u32,
        tpb: u32,
    ) -> &'x mut physical_core_t {
        // SAFETY: the cell lives in the state block; it is written only through this
        // accessor (the token excludes every gated call, and with it every reader through
        // a dmem's or allocator's `pcore` pointer), and the token's mutable borrow makes this
        // the only reference while it lives.
        unsafe { &mut *self.pcore_ptr(dev, tpb) }
    }

    /// Geometry of device `dev` (zeroed when not attached, or while the runtime is not
    /// initialised: `init` and `close` rewrite it, so it is read inside the state gate).
    pub fn geom(&self, dev: u32) -> DevGeom {
        match self.inspect() {
            Ok(call) => self.dev_geom(&call, dev),
            Err(_) => DevGeom::default(),
        }
    }

    /// [`Self::geom`] for the runtime's steps, read under their gate token `_call`
    /// ([`InCall`]).
    pub(crate) fn dev_geom(&self, _call: &impl InCall, dev: u32) -> DevGeom {
        if dev as usize >= constants::MAX_MLA_PER_PROCESS {
            return DevGeom::default();
        }
        // SAFETY: written only by `init` (and zeroed by it on re-init), with `init_lock` held
        // and the gate shut and drained, through the raw cell between its steps. The token
        // `_call` is an in-flight guard (the gate is open: `init` is not writing) or `init` /
        // `close`'s own `Exclusive` (this read is one of its steps, not during a write). A
        // copy: no reference outlives the read.
        unsafe { (*self.st.geom.get())[dev as usize] }
    }

    /// The runtime-wide settings (spec §8, §9) for the runtime's steps, read under their gate
    /// token `_call` ([`InCall`]), as [`Self::dev_geom`].
    pub(crate) fn settings(&self, _call: &impl InCall) -> Settings {
        // SAFETY: written only by `init`, with `init_lock` held and the gate shut and drained,
        // before any step that reads it. The token `_call` is an in-flight guard (the gate is
        // open, so `init` is not writing) or `init` / `close`'s own `Exclusive` (this read is
        // one of its steps, after the write). A copy: no reference outlives the read.
        unsafe { *self.st.settings.get() }
    }

    /// The runtime's epoch (0 while not initialised).
    #[inline]
    pub(crate) fn epoch(&self) -> u32 {
        self.st.epoch.load(Ordering::Acquire)
    }

    /// The handle words of slot `p` of `arena`, which the caller owns
    /// ([`crate::arena::Arena::handle_words_of`]), in this runtime's epoch.
    #[inline]
    pub(crate) fn owned_handle<T: crate::arena::Generational>(
        &self,
        arena: &crate::arena::Arena<T>,
        p: *const T,
    ) -> crate::handle::Raw {
        let (index, generation) = arena.handle_words_of(p);
        crate::handle::Raw {
            index,
            generation,
            epoch: self.epoch(),
        }
    }

    /// Refuses a handle made in another epoch (another runtime, or this one before `close`
    /// or re-`init`).
    #[inline]
    pub(crate) fn check_epoch(
        &self,
        h: crate::handle::Raw,
        kind: crate::handle::HandleKind,
    ) -> Result<()> {
        let e = self.epoch();
        if e == 0 || h.epoch != e {
            return Err(Error::foreign(kind));
        }
        Ok(())
    }
}
