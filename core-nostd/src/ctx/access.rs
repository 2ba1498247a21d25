//! The [`Nrt`] view's accessors into the context tree (spec §1, §1.1): every raw pointer
//! a behaviour module needs is resolved and checked here, so those modules stay safe code.

use super::*;
use crate::arena::GiveBack;
use crate::ht;

pub(super) mod bind;
pub(super) mod guards;
mod storage;

pub use storage::StorageFree;

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
        host: &'a dyn crate::host_heap::HostMem,
    ) -> Self {
        Nrt {
            st,
            drv,
            host: Some(host),
        }
    }

    /// The host-memory provider this view binds (None: VIRTUAL tensors unsupported).
    pub fn host_mem(&self) -> Option<&'a dyn crate::host_heap::HostMem> {
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
        if drv == addr(self.drv) && host == self.host.map_or(0, addr) {
            return Ok(());
        }
        self.check_bound_other(drv)
    }

    /// [`Self::check_bound`] when this view is not the bound one: fine while nothing is bound.
    #[cold]
    #[inline(never)]
    fn check_bound_other(&self, drv: usize) -> Result<()> {
        if drv == 0 {
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
    #[inline]
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
    pub(crate) fn tree_tpb(&self, tpb: *const tpb_t) -> Option<*mut tpb_t> {
        let (d, t) = self.tpb_coords(tpb);
        (d < self.ctx_devices() && t < constants::TPBS_PER_MLA as u32).then(|| self.tpb_ptr(d, t))
    }

    /// The index of device `mla` in the tree (address arithmetic, no dereference), `None` for
    /// a pointer that is not exactly an `mla_t` of the tree.
    #[inline]
    #[cfg(test)]
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

    /// [`Self::dmem_fixed`] without the shard lock, for callers that own `m` (the tensor IO
    /// steps, whose storage holds its dmem's reference; `dml_add_entry` by pointer), so it is
    /// neither released nor handed out again during the read. A pointer that is not a live
    /// slot reads as `None`; the ownership is the crate-internal contract of this function.
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
    pub(crate) fn dev_geom(&self, call: &impl InCall, dev: u32) -> DevGeom {
        *self.dev_geom_ref(call, dev)
    }

    /// [`Self::dev_geom`] by reference, borrowed for as long as the token `_call` (the hot
    /// path reads a few fields without copying the whole geometry).
    #[inline]
    pub(crate) fn dev_geom_ref<'c, C: InCall>(&self, _call: &'c C, dev: u32) -> &'c DevGeom
    where
        'a: 'c,
    {
        const NONE: &DevGeom = &DevGeom::NONE;
        let st: &'a CoreState = self.st;
        if dev as usize >= constants::MAX_MLA_PER_PROCESS {
            return NONE;
        }
        // SAFETY: written only by `init` (and zeroed by it on re-init), with `init_lock` held
        // and the gate shut and drained, through the raw cell between its steps, each under
        // `&mut` of its `Exclusive` token. The token `_call` is an in-flight guard (the gate is
        // open: `init` is not writing, and cannot start before the guard drops) or `init` /
        // `close`'s own `Exclusive` (borrowed here, so no write can take it as `&mut` while
        // the reference lives). The reference lives no longer than that borrow.
        unsafe { &(*st.geom.get())[dev as usize] }
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

    /// `init`'s writes of the tree (spec §1): the settings, each attached device's `mla_t`
    /// (geometry, routing, the core map) and the flat physical-core index. Under `init`'s
    /// token `_ex`.
    pub(crate) fn tree_attach(
        &self,
        _ex: &mut Exclusive<'_>,
        opts: &InitOptions,
        n: u32,
        infos: &[Option<crate::driver::DeviceInfo>; constants::MAX_MLA_PER_PROCESS],
    ) -> Result<()> {
        // SAFETY: `_ex` is `init`'s token: the state is not INIT, `init_lock` is held and the
        // gate shut and drained, so nothing else touches the tree.
        unsafe {
            *self.st.settings.get() = Settings {
                scratchpad_page_size: opts
                    .scratchpad_page_size
                    .filter(|p| *p > 0)
                    .unwrap_or(DEFAULT_SCRATCHPAD_PAGE_SIZE),
                contiguous_scratchpad: opts.contiguous_scratchpad as u32,
                _pad: 0,
            };
            *self.num_mla_ptr() = n;
            let tail = self.ctx_tail();
            for (d, info) in infos.iter().enumerate().take(n as usize) {
                let info = info.as_ref().ok_or(Error::Driver(errno::ENODEV))?;
                let mut geom = DevGeom::from_info(info);
                // What the driver says once of the device's address map and copy buffers,
                // read at bring-up like its geometry: the allocation path checks and records
                // them on every call.
                geom.hbm_window = self.drv.pa_window(d as u32, false);
                geom.host_window = self.drv.pa_window(d as u32, true);
                let cores = info.cores_per_device.min(constants::TPBS_PER_MLA as u32) as usize;
                for (nc, b) in geom.copy_buf.iter_mut().enumerate().take(cores) {
                    *b = self.drv.get_copy_buf(d as u32, nc as u32);
                }
                (*self.st.geom.get())[d] = geom;
                self.st.dmem.clear_align_latch(d as u32);
                let mla = self.mla_ptr(d as u32);
                (*mla).device = d as u64;
                (*mla).mla_idx = d as u32;
                (*mla).device_id = d as u32;
                (*mla).host_device_id = d as u32;
                (*mla).dmem_logger.mla_idx = d as u32;
                (*mla).is_used = 1;
                for t in 0..info.cores_per_device.min(constants::TPBS_PER_MLA as u32) {
                    (*mla).tpb_map.map[t as usize] = 1;
                    // The flat physical-core index libnrt keeps beside the tree (spec §1).
                    let k = (*tail).num_ptpb as usize;
                    if k < (*tail).ptpbs.len() {
                        (*tail).ptpbs[k].tpb_idx = t;
                        (*tail).ptpbs[k].mla = mla;
                        (*tail).num_ptpb += 1;
                    }
                }
            }
            (*tail).target = infos[0].map(|i| i.arch as u32).unwrap_or(0);
            let mut map = [0u32; 32];
            if self.drv.host_device_id_rid_map(&mut map).is_err() {
                // Identity fallback (spec §1: single-device routing is the identity).
                for (i, m) in map.iter_mut().enumerate() {
                    *m = i as u32;
                }
            }
            (*tail).host_did_to_rid_map = map;
            (*tail).host_did_to_rid_map_size = n;
            for d in 0..n {
                (*self.mla_ptr(d)).routing_id = map[d as usize];
            }
        }
        Ok(())
    }

    /// Forgets the device geometry of an earlier bring-up (a re-init after close), under
    /// `init`'s token `_ex`.
    pub(crate) fn reset_geometry(&self, _ex: &mut Exclusive<'_>) {
        // SAFETY: `_ex` is `init`'s token (init_lock held, the gate shut and drained): nobody
        // reads the geometry now.
        unsafe {
            *self.st.geom.get() = [DevGeom::default(); constants::MAX_MLA_PER_PROCESS];
        }
    }

    /// Resets the context tree and its per-device and per-core side tables to all-zero
    /// (UNINIT): the first member, the devices the runtime attached (`num_mla`), the tail and
    /// their side state; devices never attached were never written and stay zero. Records the
    /// bytes it zeroed ([`CoreState::reinit_bytes`]).
    /// Under `init`'s token `_ex`: `init_lock` held and the gate shut and drained (or never
    /// open), so nobody uses the tree.
    pub(crate) fn zero_tree(&self, _ex: &mut Exclusive<'_>) {
        use core::mem::size_of;
        let l = self.st.ctx_layout;
        // The one user the token does not exclude: an `ExecGuard` whose execution was revoked,
        // dropped on its own thread. It touches its cores' slots only inside this gate.
        crate::sync::gate_close(&self.st.exec_gate, crate::sync::relax);
        // SAFETY: per the token and the exec gate (shut above) nobody reads or writes the
        // region now; every range below lies in the bound region (`num_mla` never exceeds
        // `devices`: `init` clamps it), and all-zero is its valid unused state (ZeroValid
        // members, atomics, unlocked locks).
        unsafe {
            let used = (*self.num_mla_ptr()).min(l.devices) as usize;
            let base = self.st.ctx;
            let mla_at = core::mem::offset_of!(tdrv_ctx_t, mla);
            let parts = [
                (0, mla_at + used * size_of::<mla_t>()),
                (l.tail, size_of::<CtxTail>()),
                (l.dev_ext, used * size_of::<DevExt>()),
                (
                    l.core_ext,
                    used * constants::TPBS_PER_MLA * size_of::<CoreExt>(),
                ),
            ];
            let mut zeroed = 0;
            for (at, len) in parts {
                core::ptr::write_bytes(base.add(at), 0, len);
                zeroed += len;
            }
            self.st.reinit_bytes.store(zeroed, Ordering::Relaxed);
        }
        crate::sync::gate_open(&self.st.exec_gate);
    }

    /// Brings up core `(d, t)` (spec §1, §5.1): its index, its `physical_core_t`, its GLOBAL
    /// allocator, its model_db and its scratchpad. Under `init`'s token `ex`.
    pub(crate) fn core_bring_up(
        &self,
        ex: &mut Exclusive<'_>,
        d: u32,
        t: u32,
        g: &DevGeom,
    ) -> Result<()> {
        let tpb = self.tpb_ptr(d, t);
        // SAFETY: bring-up under init_lock (the token `ex`); tpb is in-bounds.
        unsafe {
            (*tpb).idx = t as i32;
            let pcore = self.pcore_ptr(d, t);
            (*pcore).device_id = d;
            (*pcore).device_tpb_idx = t;
            (*tpb).tpb_allocator = self.allocator_create(
                &*ex,
                pcore,
                dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_GLOBAL,
            )?;
            self.allocator_mark_core(&*ex, (*tpb).tpb_allocator);
            let db = self.st.model.alloc_model_db()?;
            ht::ht_init(addr_of_mut!((*db).hdr), MODEL_DB_BUCKETS);
            (*tpb).model_db = addr_of_mut!((*db).hdr);
            self.tdrv_scratchpad_init(ex, tpb, g);
        }
        self.core_ext(d, t).is_init.store(1, Ordering::Release);
        Ok(())
    }

    /// Frees what [`Self::core_bring_up`] built for core `(d, t)` (its GLOBAL allocator and
    /// model_db), under `init` / `close`'s token `ex`.
    pub(crate) fn core_tear_down(&self, ex: &Exclusive<'_>, d: u32, t: u32) {
        let tpb = self.tpb_ptr(d, t);
        // SAFETY: teardown is single-threaded (`ex`: close / init hold init_lock).
        unsafe {
            if !(*tpb).tpb_allocator.is_null() {
                let _ = self.allocator_destroy(ex, (*tpb).tpb_allocator, GiveBack::Release);
                (*tpb).tpb_allocator = null_mut();
            }
            // Cleared under model_db_lock: a lookup holding the lock sees either the
            // table or null, never a released slot.
            let db = {
                let _l = (*tpb).model_db_lock.lock();
                core::mem::replace(&mut (*tpb).model_db, null_mut())
            };
            if !db.is_null() {
                self.st.model.release_model_db(db as *const ModelDb);
            }
            self.core_ext(d, t).is_init.store(0, Ordering::Release);
        }
    }
    /// [`Self::num_devices`] for the runtime's steps, read under their gate token `_call`
    /// ([`InCall`]).
    pub(crate) fn attached_devices(&self, _call: &impl InCall) -> u32 {
        // SAFETY: written only by `init` (and zeroed by `zero_tree` in `init`), with the gate
        // shut and drained, between its steps. The token `_call` is an in-flight guard (the
        // gate is open: no such write is under way) or `init` / `close`'s own `Exclusive`
        // (this read is one of its steps). A copy of one field: no reference to the tree is
        // made.
        unsafe { *self.num_mla_ptr() }
    }

    /// `db_physical_core_get_mla_and_tpb` (spec §1.1): where libnrt asserts a live device and
    /// a mapped core, this returns [`Error::CoreOutOfRange`].
    pub(crate) fn db_physical_core_get_mla_and_tpb(
        &self,
        pc: &physical_core_t,
    ) -> Result<(*mut mla_t, *mut tpb_t)> {
        let (d, t) = (pc.device_id, pc.device_tpb_idx);
        if d >= self.ctx_devices() || t as usize >= constants::TPBS_PER_MLA {
            return Err(Error::CoreOutOfRange { device: d, tpb: t });
        }
        let mla = self.mla_ptr(d);
        // SAFETY: in-bounds; is_used/tpb_map are written at bring-up before use.
        unsafe {
            if (*mla).is_used == 0 || (*mla).tpb_map.map[t as usize] == 0 {
                return Err(Error::CoreOutOfRange { device: d, tpb: t });
            }
        }
        Ok((mla, self.tpb_ptr(d, t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Preset, SimConfig, SimDevice};

    /// The accessors that replaced the behaviour modules' raw dereferences (docs/UNSAFE.md)
    /// take any pointer: one that is not a core, device or dmem of this tree is refused, and
    /// booking it changes nothing.
    #[test]
    fn accessors_refuse_pointers_outside_the_tree() {
        let st = CoreState::new_boxed();
        let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, 1)).unwrap();
        let n = Nrt::new(&st, &*sim);
        n.init(&InitOptions::default()).unwrap();
        let tpb = n.tpb(0, 0).unwrap();
        let inside = tpb.cast::<u8>().wrapping_add(8).cast::<tpb_t>();
        let mut foreign = [0u64; 8];
        let foreign_tpb = foreign.as_mut_ptr().cast::<tpb_t>();
        assert!(n.scratchpad_lock(tpb).is_some());
        assert!(n.scratchpad_lock(inside).is_none(), "not a tpb_t's start");
        assert!(n.scratchpad_lock(foreign_tpb).is_none());
        assert!(n.ulib_cache_lock(foreign_tpb).is_none());
        let call = n.enter().unwrap();
        assert!(n.tpb_allocator(&call, foreign_tpb).is_null());
        assert!(
            !n.tpb_allocator(&call, tpb).is_null(),
            "core 0's GLOBAL allocator"
        );
        assert_eq!(n.mla_index(n.mla_ptr(0)), Some(0));
        assert_eq!(n.mla_index(foreign.as_ptr().cast()), None);

        let foreign_dmem = foreign.as_ptr().cast::<dmem_t>();
        assert!(n.dmem_fixed(foreign_dmem).is_none());
        let before = n.ledger_snapshot(0);
        n.dml_add_entry(
            &call,
            n.mla_ptr(0),
            crate::dmem::Action::Alloc,
            foreign_dmem,
        );
        assert_eq!(n.ledger_snapshot(0), before, "a foreign dmem books nothing");

        // A live dmem reads back as allocated; once freed it is refused.
        let args = crate::dmem::AllocArgs::device(
            4096,
            0,
            dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_GENERIC,
            "probe",
        );
        let m = n
            .dmem_alloc_internal(&call, n.tpb_allocator(&call, tpb), &args, None)
            .unwrap()
            .m;
        let d = n.dmem_fixed(m).unwrap();
        assert_eq!((d.device_id, d.allocated_size, d.refs), (0, 4096, 1));
        assert_eq!(crate::cstr::c_name(&d.hint), "probe");
        n.dmem_free_owned(&call, m).unwrap();
        assert!(n.dmem_fixed(m).is_none(), "freed: no longer live");
        drop(call);
        n.close().unwrap();
    }

    /// Each pool binds its arenas from the same `parts` list that sized its region: for the
    /// default, the one-device and an odd little capacity, every arena holds exactly what its
    /// `Capacity` field asks for (a part bound out of order, or refused, would leave an arena
    /// at another size or unbound, and fail `bind_storage`'s debug assertion first).
    #[test]
    fn every_arena_holds_what_its_capacity_asks() {
        let odd = Capacity {
            devices: 2,
            dmems: 7,
            allocators: 17,
            models: 3,
            io_chunks: 4,
            mr_sets: 5,
            ulib_sets: 1,
            tensors: 9,
            storages: 11,
            sets: 2,
            set_chunks: 6,
            bind_chunks: 7,
            shards: 3,
        };
        for caps in [Capacity::DEFAULT, Capacity::ONE_DEVICE, odd] {
            let st = CoreState::with_capacity(&caps).unwrap();
            let got = st.arena_stats().map(|(name, s)| (name, s.capacity));
            let (d, m, mr) = (caps.dmems, caps.models, caps.mr_sets);
            let want = [
                ("dmem_t", d),
                ("dmem_allocator_t", caps.allocators),
                ("dmem_ref_node_t", d),
                ("dmem_list_t", mr),
                ("model_t", m),
                ("model io chunk", caps.io_chunks),
                ("model_db", caps.devices * constants::TPBS_PER_MLA as u32),
                ("mem_ref_set", mr),
                ("mem_ref_node", d),
                ("tdrv_scratchpad_cleanup_info_t", m),
                ("ulib_set", caps.ulib_sets),
                ("nrt_tensor_t", caps.tensors),
                ("nrt_tensor_storage_t", caps.storages),
                ("tensor_set", caps.sets),
                ("tensor set chunk", caps.set_chunks),
                ("bound tensor chunk", caps.bind_chunks),
            ]
            .map(|(name, n)| (name, n as usize));
            assert_eq!(got, want, "{caps:?}");
        }
    }

    /// A compact context (one device) keeps `num_mla` and `mla[0]` at libnrt's offsets from
    /// the published address, puts the members after `mla[32]` right after `mla[0]` instead
    /// of at libnrt's offset, and costs one device's bytes; a 32-device context is libnrt's
    /// `tdrv_ctx_t` whole, tail at libnrt's offsets.
    #[test]
    fn a_compact_context_keeps_libnrt_offsets_for_the_devices_it_holds() {
        use core::mem::{offset_of, size_of};
        for (caps, devices) in [(Capacity::ONE_DEVICE, 1u32), (Capacity::DEFAULT, 32)] {
            let st = CoreState::with_capacity(&caps).unwrap();
            let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn2, 1)).unwrap();
            let n = Nrt::new(&st, &*sim);
            n.init(&InitOptions::default()).unwrap();
            let base = st.context_addr() as usize;
            let l = st.context_layout();
            assert_eq!(l.devices, devices);
            assert_eq!(
                n.mla_ptr(0) as usize - base,
                offset_of!(tdrv_ctx_t, mla),
                "mla[0] at libnrt's offset"
            );
            let tail = n.ctx_tail() as usize - base;
            assert_eq!(tail, l.tail);
            if devices == 32 {
                assert!(l.is_full());
                assert_eq!(tail, offset_of!(tdrv_ctx_t, num_ptpb));
            } else {
                assert!(!l.is_full());
                assert_eq!(tail, offset_of!(tdrv_ctx_t, mla) + size_of::<mla_t>());
                assert!(l.bytes < size_of::<tdrv_ctx_t>() / 16, "{l:?}");
            }
            let call = n.enter().unwrap();
            let cores = n.dev_geom(&call, 0).cores;
            // SAFETY: a gated call is in flight, so `init` / `close`, the only writers of the
            // tree, are not running; copies of plain fields.
            let (num_mla, used, idx, num_ptpb, first) = unsafe {
                let m = n.mla_ptr(0);
                let t = n.ctx_tail();
                (
                    *n.num_mla_ptr(),
                    (*m).is_used,
                    (*m).mla_idx,
                    (*t).num_ptpb,
                    (*t).ptpbs[0].mla,
                )
            };
            assert_eq!((num_mla, used, idx), (1, 1, 0));
            assert_eq!((num_ptpb, first), (cores, n.mla_ptr(0)));
            // Resolving a device the context does not hold is refused, not read.
            let far = physical_core_t::new(devices, 0);
            assert!(n.db_physical_core_get_mla_and_tpb(&far).is_err());
            drop(call);
            n.close().unwrap();
        }
        assert!(
            CoreState::storage_bytes(&Capacity::DEFAULT)
                - CoreState::storage_bytes(&Capacity {
                    devices: 1,
                    ..Capacity::DEFAULT
                })
                >= 31 * size_of::<mla_t>()
        );
    }

    /// A re-initialisation zeroes the devices the closed runtime attached, the first member,
    /// the tail and their side state, not the 32-device context the block holds.
    #[test]
    fn a_reinit_zeroes_only_the_devices_that_were_used() {
        use core::mem::size_of;
        let st = CoreState::with_capacity(&Capacity::DEFAULT).unwrap();
        assert!(st.context_layout().is_full());
        let per_device = size_of::<mla_t>()
            + size_of::<DevExt>()
            + constants::TPBS_PER_MLA * size_of::<CoreExt>();
        let fixed = core::mem::offset_of!(tdrv_ctx_t, mla) + size_of::<CtxTail>();
        assert_eq!(st.reinit_bytes(), 0, "no re-initialisation yet");
        for devices in [1u32, 2, 1] {
            let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, devices)).unwrap();
            let n = Nrt::new(&st, &*sim);
            n.init(&InitOptions::default()).unwrap();
            n.close().unwrap();
            // The next init zeroes what this runtime used.
            let next = SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, 1)).unwrap();
            let m = Nrt::new(&st, &*next);
            m.init(&InitOptions::default()).unwrap();
            assert_eq!(
                st.reinit_bytes(),
                fixed + devices as usize * per_device,
                "after a runtime of {devices} device(s)"
            );
            assert!(st.reinit_bytes() < st.context_layout().bytes / 8);
            m.close().unwrap();
        }
    }

    /// The logical-core table `init` writes under its token: each owned core's physical cores
    /// point back at its entry (spec §9).
    #[test]
    fn physical_cores_point_at_their_logical_core() {
        let st = CoreState::new_boxed();
        let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn2, 1)).unwrap();
        let n = Nrt::new(&st, &*sim);
        n.init(&InitOptions::default()).unwrap();
        let g = n.enter().unwrap();
        let vc = n.vcores(&g);
        assert!(vc.num_owned > 0);
        let entry = n.vcore_entry_ptrs();
        for k in 0..vc.num_owned as usize {
            let v = &vc.owned[k];
            assert_eq!(v.vtpb_idx as usize, k);
            for p in v.cores() {
                assert_eq!(p.vcore, entry(k));
                // SAFETY: a gated call is in flight (`g`), so `init` / `close`, the only
                // writers of the cell, are not running.
                let back = unsafe { (*n.pcore_ptr(p.device_id, p.device_tpb_idx)).vcore };
                assert_eq!(back, entry(k));
            }
        }
        drop(g);
        n.close().unwrap();
    }
}
