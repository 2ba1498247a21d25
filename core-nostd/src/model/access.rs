//! The model domain's raw accessors (spec §4.3–§4.6, §5): the rest of `model/` is
//! `#![deny(unsafe_code)]`, so every raw access a model needs is made and argued here, the one
//! file of the domain where `unsafe` is allowed.
//!
//! A model slot (`model_t` in the `models` arena) is in one of three states, and each has
//! its own type:
//!
//! - **building**: a [`Fresh`] slot, not yet live, that only the loading call can reach. It
//!   is written through `&mut model_t` (safe: `Fresh` derefs), its IO table through
//!   [`Nrt::model_io_mut`].
//! - **resident**: linked into its core's `model_db` by [`ModelDbGuard::insert`], which
//!   publishes the slot. From then on its members are fixed (the loader wrote them before
//!   publishing) except the two atomics (`ref_count`, `exec_count`) and the embedded
//!   `ht_node`, whose `next` the unlink of a neighbour in the same bucket rewrites under
//!   `model_db_lock`. It is reached only through a [`ModelRef`], a counted reference taken
//!   under the lock ([`ModelDbGuard::lookup`]); its getters read single members by raw
//!   projection, never through a `&model_t` (which would claim `ht_node` immutable too).
//! - **drained**: unlinked under the lock ([`ModelDbGuard::unlink`]) and drained of its
//!   references ([`UnlinkedModel::drain`]): a [`DrainedModel`], the unload's alone, written
//!   through `&mut model_t` until [`DrainedModel::release`] gives the slot back.
//!
//! Beside the model: the cores' exec slots with `tpb_t.h_running_model` ([`ExecHold`]), the
//! mem_ref sets of a model's subgraphs (`mem_ref_set_*`, their contents touched only under
//! the set arena's shard lock) and the scratchpad cleanup records ([`Nrt::cleanup_record`]).

use core::ptr::{addr_of, addr_of_mut, NonNull};

use crate::atomic::AtomicU64;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::abi::*;
use crate::arena::Chain;
use crate::arena::Fresh;
use crate::arena::GiveBack;
use crate::cstr::c_name;
use crate::ctx::*;
use crate::error::{Error, Result};
use crate::handle::ModelHandle;
use crate::ht;
use crate::model::{IoUsage, ModelIo, ModelIoEntry, IO_DIMS_MAX};
use crate::sync::MutexGuard;

/// container_of(node) → model: the `ht_node_t` sits at `model_t+7496` (spec §4.4). Address
/// arithmetic only.
fn model_of(node: *mut ht_node_t) -> *mut model_t {
    node.wrapping_byte_sub(core::mem::offset_of!(model_t, ht_node))
        .cast::<model_t>()
}

/// A core's `model_db` (spec §4.3) with `model_db_lock` held: the table is read and written
/// only by the holder of that lock, and every method borrows from the guard, so nothing
/// learnt from the table outlives the lock except what it counts for itself (a
/// [`ModelRef`]'s reference, an [`UnlinkedModel`]'s removal).
#[must_use = "the model_db lock is released when the guard is dropped"]
pub(crate) struct ModelDbGuard<'a> {
    st: &'a CoreState,
    /// The table: non-null and the header of a live `model_dbs` slot, checked under the lock.
    db: *mut ht_t,
    _lock: MutexGuard<'a>,
}

impl<'a> Nrt<'a> {
    /// The `model_db` of core `tpb` with its lock held ([`ModelDbGuard`]). `None` for a
    /// pointer that is not a core of this runtime's tree, and for a core without a table
    /// (never brought up, or torn down by `close`, which clears the field under this lock):
    /// the model paths report that as `Closed`.
    pub(crate) fn model_db_lock(&self, tpb: *const tpb_t) -> Option<ModelDbGuard<'a>> {
        let t = self.tree_tpb(tpb)?;
        // SAFETY: `t` is a `tpb_t` of the context tree (re-derived from its coordinates:
        // in bounds, aligned), which lives as long as the state block (`'a`). The lock word
        // is atomic, so a shared reference to it is sound whoever else spins on it.
        let lock = unsafe { &*addr_of!((*t).model_db_lock) }.lock();
        // SAFETY: the field is written in two places: `teardown_cores` clears it under this
        // lock, which we hold, so that store does not overlap this load; `init_cores` sets it
        // without the lock, under the `Exclusive` token (the gate shut and drained), and every
        // caller of this accessor is a step of a gated call or of `close` after its own
        // `init_cores` finished (`unload_all_models`), so that store does not overlap either.
        // That second half is the crate-internal contract `tpb_allocator` also rests on; storing
        // the table under the lock in `init_cores` would remove it. A plain read of a
        // pointer-sized field: no reference to the `tpb_t` is made.
        let db = unsafe { addr_of!((*t).model_db).read() };
        // The table must be a live slot of this runtime's `model_dbs` (its header is the slot's
        // first member): anything else is refused, not walked.
        if !self.st.model.model_dbs.is_live(db.cast::<ModelDb>()) {
            return None;
        }
        Some(ModelDbGuard {
            st: self.st,
            db,
            _lock: lock,
        })
    }
}

impl<'a> ModelDbGuard<'a> {
    /// Whether a model of id `id` is linked. libnrt's `ht_find` polarity (0 = found, spec §4.3
    /// QUIRK) stays inside this call.
    pub(crate) fn contains(&self, id: u32) -> bool {
        // SAFETY: `db` is a live, initialised `ModelDb` (checked in `model_db_lock`) whose
        // buckets and chains are read and written only by holders of `model_db_lock`, which
        // this guard is; its chains link only the nodes `insert` linked (models of this
        // runtime's arena, live until `unlink` removes them), so the walk reads valid nodes.
        unsafe { ht::ht_find(self.db, id as u64, None) == 0 }
    }

    /// `get_model_ref_count` (spec §4.4): the model of id `id` with a reference taken under
    /// the lock, so an unload that unlinks it later waits for the reference to go. `None`
    /// when no model of that id is linked.
    pub(crate) fn lookup(&self, id: u32) -> Option<ModelRef<'a>> {
        // SAFETY: as `contains`.
        let node = unsafe { ht::find(self.db, id as u64) }?;
        let m = model_of(node);
        // Every linked node is the `ht_node` of a live model slot (only `insert` links, and
        // only slots of this arena; `unlink` removes a model before its slot goes back): a
        // pointer that is not one would be a broken table, refused rather than followed.
        if !self.st.model.models.is_live(m) {
            return None;
        }
        let m = NonNull::new(m)?;
        // SAFETY: `m` is a live model slot (checked above) that stays live while the lock is
        // held (its unlink needs the lock, its release the unlink and the drain); `ref_count`
        // is an atomic member, read and written only atomically, so a shared reference to it
        // alone is sound while other threads update it.
        let refs = unsafe { &*addr_of!((*m.as_ptr()).ref_count) };
        // Taken under the lock: an unlink, which also needs the lock, comes after this count,
        // and its drain waits for it.
        refs.fetch_add(1, Ordering::AcqRel);
        Some(ModelRef { st: self.st, m })
    }

    /// `add_model` (spec §4.3): publishes the building model `m` (it becomes live) and links
    /// it through its embedded node under its handle. A handle already present is
    /// `DuplicateModel`; a slot of another runtime's arena is refused. On error the model is
    /// handed back unpublished, for the caller's rollback.
    pub(crate) fn insert(
        &mut self,
        m: Fresh<'a, model_t>,
    ) -> core::result::Result<(), (Error, Fresh<'a, model_t>)> {
        if !self.st.model.models.owns(m.as_ptr()) {
            return Err((Error::InvalidModel("not a model slot of this runtime"), m));
        }
        let id = m.h_model.id;
        // ht_find != 0 means "absent, safe to insert" (spec §4.3 QUIRK), kept in `contains`.
        if self.contains(id) {
            return Err((Error::DuplicateModel(id), m));
        }
        let p = m.publish().as_ptr();
        // SAFETY: `db` as in `contains`, and `&mut self` makes this the only use of the guard.
        // `p` is a model slot of this runtime's arena (checked above), just published by us:
        // its `ht_node` is in no chain (a slot's node leaves its table at `unlink`, before the
        // slot can be released and taken again), and it stays valid memory as long as the
        // arena. From here on the node's members are written only under this lock.
        unsafe {
            ht::ht_insert(
                self.db,
                id as u64,
                addr_of_mut!((*p).ht_node),
                p.cast::<core::ffi::c_void>(),
            );
        }
        Ok(())
    }

    /// `remove_model`'s unlink (spec §4.5): takes the model of id `id` out of the table, so
    /// no new lookup can reference it. `None` when no such model is linked. The caller drains
    /// it after releasing the lock ([`UnlinkedModel::drain`]).
    pub(crate) fn unlink(&mut self, id: u32) -> Option<UnlinkedModel<'a>> {
        if !self.contains(id) {
            return None;
        }
        // SAFETY: as `contains`; `&mut self` makes this the only use of the guard.
        let node = unsafe { ht::ht_remove(self.db, id as u64) };
        let m = model_of(node);
        if !self.st.model.models.is_live(m) {
            // Not reachable with a table only `insert` filled; a broken node is dropped from
            // the table (done above) but not treated as a model.
            return None;
        }
        Some(UnlinkedModel {
            st: self.st,
            m: NonNull::new(m)?,
        })
    }

    /// Links again a model [`Self::unlink`] took out of this table and whose drain gave up
    /// (the unload failed: the model stays resident). A model of that id already linked (not
    /// reachable: ids are unique) leaves the model out, said loudly.
    pub(crate) fn relink(&mut self, u: UnlinkedModel<'a>) {
        let p = u.m.as_ptr();
        // SAFETY: `p` is a live, published model slot of this runtime's arena (the unlink
        // checked it, and nothing released it: the `UnlinkedModel` is its only claim); its
        // `h_model` is fixed.
        let id = unsafe { addr_of!((*p).h_model).read() }.id;
        if self.contains(id) {
            error!(
                "unload: model {} cannot be linked again: its id is taken",
                id
            );
            return;
        }
        // SAFETY: `db` as in `contains`, and `&mut self` makes this the only use of the guard.
        // The node left this table at the unlink and is in no chain; the slot stays valid
        // memory as long as the arena.
        unsafe {
            ht::ht_insert(
                self.db,
                id as u64,
                addr_of_mut!((*p).ht_node),
                p.cast::<core::ffi::c_void>(),
            );
        }
    }

    /// The id of a linked model that some call holds a reference on (`None`: every model
    /// is idle).
    pub(crate) fn busy_model(&self) -> Option<u32> {
        let mut busy = None;
        // SAFETY: as `contains`; each linked node is the `ht_node` of a live model slot (only
        // `insert` and `relink` link, and only such slots), whose `ref_count` is an atomic,
        // read atomically.
        unsafe {
            ht::for_each(self.db, |node| {
                let m = model_of(node);
                if busy.is_none()
                    && self.st.model.models.is_live(m)
                    && (*addr_of!((*m).ref_count)).load(Ordering::Acquire) != 0
                {
                    busy = Some((*node).key as u32);
                }
            })
        }
        busy
    }

    /// Calls `f` on the id of every linked model (bucket order). `f` cannot reach the table:
    /// it is handed ids, not nodes.
    pub(crate) fn for_each_id(&self, mut f: impl FnMut(u32)) {
        // SAFETY: as `contains`; the closure only reads each node's key, under the lock.
        unsafe { ht::for_each(self.db, |node| f((*node).key as u32)) }
    }
}

/// A counted reference on a resident model (spec §4.4 `get_model_ref_count`): taken under
/// `model_db_lock` by [`ModelDbGuard::lookup`], given back when dropped. While it lives the
/// model cannot be drained, so its slot is neither released nor rewritten.
pub(crate) struct ModelRef<'a> {
    st: &'a CoreState,
    m: NonNull<model_t>,
}

// SAFETY: the reference is an atomic count (dropping it on another thread is one atomic
// decrement, what an async completion of an execution does); the getters read members that
// are fixed while the model is resident, and the state block is `Sync`.
unsafe impl Send for ModelRef<'_> {}

impl Drop for ModelRef<'_> {
    fn drop(&mut self) {
        // The last touch of the model: once the count falls, an unload's drain may see zero and
        // free the slot.
        self.refs().fetch_sub(1, Ordering::AcqRel);
    }
}

/// Getters for `model_t` members that are fixed while a model is resident: read by raw
/// projection, one member at a time.
macro_rules! fixed_members {
    ($( $(#[$doc:meta])* $name:ident: $ty:ty; )*) => {
        $(
            $(#[$doc])*
            pub(crate) fn $name(&self) -> $ty {
                // SAFETY: `m` is a live model slot while this reference is counted (the unload's
                // drain waits for it before the slot is freed). The member was written by the
                // loader through its `Fresh` before `insert` published the slot (under the
                // model_db lock, which the lookup that made this reference took after it), and
                // is written again only through a `DrainedModel`, which cannot exist while
                // this reference is counted. A plain read of one member: no `&model_t` is
                // made, so `ht_node`, which a neighbour's unlink writes, is not covered.
                unsafe { addr_of!((*self.m.as_ptr()).$name).read() }
            }
        )*
    };
}

impl<'a> ModelRef<'a> {
    /// The reference a [`ModelRef`] on `m` counted and then forgot.
    ///
    /// # Safety
    ///
    /// `m` is a model slot of `st`'s arena on which a `ModelRef` counted a reference that
    /// was forgotten (not dropped), and no other `from_counted` call takes that reference.
    unsafe fn from_counted(st: &'a CoreState, m: NonNull<model_t>) -> Self {
        ModelRef { st, m }
    }

    /// One more reference on `m`, which a counted reference keeps live.
    ///
    /// # Safety
    ///
    /// `m` is a model slot of `st`'s arena on which some reference is counted, and stays
    /// counted until this call returns.
    unsafe fn count_another(st: &'a CoreState, m: NonNull<model_t>) -> Self {
        let r = ModelRef { st, m };
        r.refs().fetch_add(1, Ordering::AcqRel);
        r
    }

    fn refs(&self) -> &AtomicU64 {
        // SAFETY: a live slot while this reference is counted (see `fixed_members`);
        // `ref_count` is an atomic, accessed only atomically, and the reference covers it
        // alone.
        unsafe { &*addr_of!((*self.m.as_ptr()).ref_count) }
    }

    /// The model's `exec_count` (executions begun).
    pub(crate) fn exec_count(&self) -> &AtomicU64 {
        // SAFETY: as `refs`.
        unsafe { &*addr_of!((*self.m.as_ptr()).exec_count) }
    }

    /// References held by others (this one excluded).
    pub(crate) fn other_refs(&self) -> u64 {
        self.refs().load(Ordering::Acquire).saturating_sub(1)
    }

    fixed_members! {
        /// Subgraphs.
        num_subgraphs: u32;
        /// Declared inputs.
        num_inputs: u32;
        /// 1 when the model uses its core's shared ext-isa copy.
        ulib_is_shared: u8;
        /// The MODEL allocator of each subgraph (null past `num_subgraphs`).
        sg_allocators: [*mut dmem_allocator_t; 8];
        /// The model's scratchpad cleanup record.
        scratchpad_cleanup_info: *mut tdrv_scratchpad_cleanup_info_t;
    }

    /// The model's IO table (its side-table chain, `CoreState::model_io`), borrowed from this
    /// reference.
    fn io_chain(&self) -> Option<&Chain> {
        let table = self
            .st
            .model
            .models
            .side_entry(&self.st.model.model_io, self.m.as_ptr());
        // SAFETY: `m` is a live slot of `models` (see `fixed_members`), so `side_entry`
        // resolved its own entry of `model_io` (bound with the arena's capacity), which is
        // null only for an unbound table. The entry is written only through
        // `Nrt::model_io_mut` (which takes the slot's `Fresh` by `&mut`, so never while the
        // slot is live) and by `DrainedModel::release` (once no reference is left); this
        // counted reference keeps the slot live (and so the entry unwritten) for as long as
        // the borrow.
        unsafe { table.as_ref() }
    }

    /// One IO entry as the public view lends it (`k`: its index in the table).
    fn io_view<'s>(&self, k: usize, io: &'s ModelIoEntry) -> ModelIo<'s> {
        ModelIo {
            name: c_name(&io.name),
            usage: if k < self.num_inputs() as usize {
                IoUsage::Input
            } else {
                IoUsage::Output
            },
            size: io.size,
            dtype: io.dtype,
            shape: &io.shape[..(io.ndim as usize).min(IO_DIMS_MAX)],
        }
    }

    /// Calls `f` on each entry of the model's IO table, in order (one walk of the chain).
    pub(crate) fn for_each_io(&self, mut f: impl FnMut(&ModelIo<'_>)) {
        if let Some(c) = self.io_chain() {
            for (k, io) in self.st.model.io_chunks.chain_iter(c).enumerate() {
                f(&self.io_view(k, io));
            }
        }
    }
}

/// A model unlinked from its `model_db` (no new lookup can reference it) whose in-flight
/// references may still be out. [`Self::drain`] waits them out.
#[must_use = "an unlinked model must be drained and freed"]
pub(crate) struct UnlinkedModel<'a> {
    st: &'a CoreState,
    m: NonNull<model_t>,
}

impl<'a> UnlinkedModel<'a> {
    /// `remove_model`'s drain (spec §4.5: `while (ref_count != 0) _mm_pause()`): waits until
    /// every reference taken before the unlink is dropped. Call it with no lock held that an
    /// execution of this model may wait for.
    ///
    /// Bounded (`crate::sync::wait_bounded`): when the wait gives up, the model comes back
    /// with the error, still unlinked and referenced, for the caller to link again
    /// ([`ModelDbGuard::relink`]).
    pub(crate) fn drain(self) -> core::result::Result<DrainedModel<'a>, (Error, Self)> {
        // SAFETY: `m` is a live model slot (checked at the unlink) that nothing releases but
        // the `DrainedModel` made below; `ref_count` is an atomic, accessed only atomically.
        let refs = unsafe { &*addr_of!((*self.m.as_ptr()).ref_count) };
        let what = crate::sync::WaitFor::ModelDrain {
            // SAFETY: as above; `h_model` is fixed while the model is resident or unlinked.
            model: unsafe { addr_of!((*self.m.as_ptr()).h_model).read() }.id,
        };
        if let Err(e) = crate::model::drain_bounded(refs, what) {
            return Err((e, self));
        }
        Ok(DrainedModel {
            st: self.st,
            m: self.m,
        })
    }
}

/// A model that is out of its `model_db` and has no reference left (spec §4.5): the unload's
/// alone, written through `&mut model_t` until [`Self::release`] gives its slot back.
#[must_use = "a drained model's slot goes back only through `release`"]
pub(crate) struct DrainedModel<'a> {
    st: &'a CoreState,
    m: NonNull<model_t>,
}

impl DrainedModel<'_> {
    /// Gives the slot back to the model arena (through its quarantine: handles of the model
    /// were out).
    /// Its IO table's chunks go back first.
    pub(crate) fn release(self) {
        let table = self
            .st
            .model
            .models
            .side_entry(&self.st.model.model_io, self.m.as_ptr());
        // SAFETY: `m` is a live slot of `models` (the unlink checked it), so this is its own
        // entry of `model_io` (null only when unbound); no reference of the model is left
        // (the drain), so no `ModelRef` reads the entry, and this token, made once per unlink
        // and consumed here, is the only writer.
        if let Some(c) = unsafe { table.as_mut() } {
            self.st.model.io_chunks.chain_clear(c);
        }
        let _ = self.st.model.models.release(self.m.as_ptr());
    }
}

impl core::ops::Deref for DrainedModel<'_> {
    type Target = model_t;
    fn deref(&self) -> &model_t {
        // SAFETY: as `deref_mut`, shared.
        unsafe { self.m.as_ref() }
    }
}

impl core::ops::DerefMut for DrainedModel<'_> {
    fn deref_mut(&mut self) -> &mut model_t {
        // SAFETY: `m` is a live, initialised model slot (checked at the unlink; released only
        // by `release`, which consumes this token). Nobody else references it: it was unlinked
        // under `model_db_lock`, so no lookup finds it and no neighbour's unlink writes its
        // `ht_node` (it is in no chain); every reference taken before the unlink is dropped
        // (the drain saw `ref_count` at 0 with Acquire, and each holder's last access was its
        // Release decrement); an `UnlinkedModel` is made once per unlink, so this token is
        // the only one for the slot. `&mut self` makes this the only borrow of it.
        unsafe { self.m.as_mut() }
    }
}

/// An execution's hold on its model and cores (spec §4.6), what an `ExecGuard` keeps: the
/// execution's ticket, its model's handle and its cores. The counted model reference is the
/// hold's only until its first core is taken; from then on that core's slot
/// ([`crate::sync::ExecSlot`]) owns it, and whoever frees that slot — this hold's drop or
/// `Models::revoke_exec` — releases it, once ([`Nrt::exec_end`]). While a slot names this
/// ticket, its core's `tpb_t.h_running_model` names the model.
///
/// Not `Send`: an execution belongs to the thread that began it, which the slots record, so
/// a call of that thread that would wait for the execution is refused at once.
pub(crate) struct ExecHold<'a> {
    nrt: Nrt<'a>,
    ticket: u64,
    handle: ModelHandle,
    /// The thread that began the execution ([`crate::sync::thread_token`]).
    token: usize,
    /// The execution's cores `(device, core)`, in order (`u32::MAX` past the last).
    cores: [(u32, u32); 2],
    /// Cores taken so far (in order).
    taken: usize,
    /// The model reference, until the first core's slot takes it.
    model: Option<ModelRef<'a>>,
    _thread: core::marker::PhantomData<*const ()>,
}

impl Drop for ExecHold<'_> {
    fn drop(&mut self) {
        if self.taken == 0 {
            // The reference is still the hold's: it drops with the field.
            return;
        }
        // Inside the exec gate `zero_tree` shuts. Shut means `init` is rewriting the tree, so
        // this runtime was closed (every model drained) or never initialised: no slot names
        // this execution any more (it was revoked), and there is nothing to release.
        let gate = &self.nrt.st.exec_gate;
        if !crate::sync::gate_enter(gate) {
            return;
        }
        let _ = self.nrt.exec_end(self.ticket, self.cores);
        crate::sync::gate_exit(gate);
    }
}

impl<'a> ExecHold<'a> {
    /// A hold of a new execution of `model` (named `handle`) on `cores`, none taken yet.
    pub(crate) fn new(
        nrt: Nrt<'a>,
        model: ModelRef<'a>,
        handle: ModelHandle,
        cores: [(u32, u32); 2],
    ) -> Self {
        ExecHold {
            nrt,
            ticket: crate::sync::next_exec_ticket(),
            handle,
            token: crate::sync::thread_token(),
            cores,
            taken: 0,
            model: Some(model),
            _thread: core::marker::PhantomData,
        }
    }

    /// The model's handle.
    pub(crate) fn handle(&self) -> ModelHandle {
        self.handle
    }

    /// The runtime the execution runs in.
    pub(crate) fn nrt(&self) -> Nrt<'a> {
        self.nrt
    }

    /// The execution's first core.
    pub(crate) fn first_core(&self) -> (u32, u32) {
        self.cores[0]
    }

    /// `Ok` while the execution holds its first core; `ExecRevoked` naming it once
    /// `Models::revoke_exec` ended the execution (or before it was taken). Call it inside a
    /// gated call.
    pub(crate) fn check(&self) -> Result<()> {
        let (d, i) = self.cores[0];
        if self.taken > 0
            && d < self.nrt.ctx_devices()
            && self.nrt.core_ext(d, i).exec.held_by(self.ticket)
        {
            return Ok(());
        }
        Err(Error::ExecRevoked { device: d, core: i })
    }

    /// A reference of its own on the model, taken while the execution holds its first core
    /// (under that slot's lock, so the reference the slot owns is not released meanwhile);
    /// `ExecRevoked` once the execution was ended. Call it inside a gated call.
    pub(crate) fn model_ref(&self) -> Result<ModelRef<'a>> {
        let (d, i) = self.cores[0];
        let revoked = Error::ExecRevoked { device: d, core: i };
        if self.taken == 0 || d >= self.nrt.ctx_devices() {
            return Err(revoked);
        }
        let st = self.nrt.st;
        self.nrt
            .core_ext(d, i)
            .exec
            .with_held(self.ticket, |rec| {
                let m = NonNull::new(rec.model)?;
                // SAFETY: the slot names this execution and its lock is held, so the
                // reference it owns on `m` (moved there by `lock_next_core`) is counted and
                // stays so meanwhile (`exec_end` takes the record out under this lock before
                // it releases the reference): `m` is a live model slot of this runtime, and
                // one more count is a reference of its own.
                Some(unsafe { ModelRef::count_another(st, m) })
            })
            .flatten()
            .ok_or(revoked)
    }

    /// Takes the hold's next core (one model executes at a time per core), counts the
    /// execution on the core and marks the model `h_running_model`; the first core's slot
    /// takes the model reference. Inside a gated call. `CoreOutOfRange`, and nothing taken,
    /// for a core that is not present; `WouldDeadlock` at once when the calling thread's own
    /// execution holds the core (with a thread token), else `Timeout` when the bounded wait
    /// gives up; `ExecRevoked` when the execution was revoked while it waited for this core.
    pub(crate) fn lock_next_core(&mut self) -> Result<()> {
        let j = self.taken;
        let Some(&(d, i)) = self.cores.get(j) else {
            return Err(Error::CoreOutOfRange {
                device: u32::MAX,
                tpb: u32::MAX,
            });
        };
        let tpb = self.nrt.tpb(d, i)?;
        let Some(t) = self.nrt.tree_tpb(tpb) else {
            return Err(Error::CoreOutOfRange { device: d, tpb: i });
        };
        let running = running_model(t);
        let id = self.handle.h_model().id;
        let rec = crate::sync::ExecRecord {
            ticket: self.ticket,
            token: self.token,
            model: match (&self.model, j) {
                (Some(m), 0) => m.m.as_ptr(),
                _ => core::ptr::null_mut(),
            },
            handle: self.handle.to_parts(),
            cores: self.cores,
        };
        let slot = &self.nrt.core_ext(d, i).exec;
        let what = crate::sync::WaitFor::ExecLock { device: d, core: i };
        let take = || slot.try_take(&rec, || running.store(id, Ordering::Relaxed));
        if let Err(holder) = take() {
            if holder.mine() {
                return Err(Error::WouldDeadlock(what));
            }
            crate::sync::wait_bounded(what, || take().is_ok())?;
        }
        self.taken = j + 1;
        self.nrt
            .core_ext(d, i)
            .exec_count
            .fetch_add(1, Ordering::Relaxed);
        if j == 0 {
            // The slot owns the reference from here ([`Nrt::exec_end`] releases it); the
            // model is not touched through this one again.
            core::mem::forget(self.model.take());
        } else if let Err(e) = self.check() {
            // Revoked while this core was awaited: the core goes back at once.
            let _ = self.nrt.exec_slot_end(self.ticket, (d, i));
            return Err(e);
        }
        Ok(())
    }
}

/// `tpb_t.h_running_model` of core `t` (a `tpb_t` of the tree), viewed as the atomic it is
/// used as.
fn running_model<'a>(t: *mut tpb_t) -> &'a AtomicU32 {
    // SAFETY: `t` is a `tpb_t` of the tree (re-derived from its coordinates by the callers),
    // which lives as long as the state block; `h_running_model` is a 4-byte, 4-aligned
    // `H_MODEL { id: u32 }`. It is accessed only through this view, atomically, except by
    // `zero_tree`, which no access overlaps: the callers are gated calls (`init` drains them
    // before it rewrites the tree) or an `ExecHold`'s drop inside the exec gate `zero_tree`
    // shuts.
    unsafe { AtomicU32::from_ptr(addr_of_mut!((*t).h_running_model).cast::<u32>()) }
}

impl<'a> Nrt<'a> {
    /// Frees core `(d, i)`'s slot if execution `ticket` holds it, clearing the core's
    /// `h_running_model` first: the freed record, `None` when the slot names another
    /// execution or none. Inside a gated call or the exec gate.
    pub(crate) fn exec_slot_end(
        &self,
        ticket: u64,
        (d, i): (u32, u32),
    ) -> Option<crate::sync::ExecRecord> {
        if d >= self.ctx_devices() || i as usize >= constants::TPBS_PER_MLA {
            return None;
        }
        let running = running_model(self.tpb_ptr(d, i));
        self.core_ext(d, i)
            .exec
            .end(ticket, || running.store(0, Ordering::Relaxed))
    }

    /// Ends execution `ticket` on `cores` (spec §4.6), whoever calls: frees each core's slot
    /// that still names it, the first core first, and, when this call freed the first core,
    /// releases the model reference that slot owned. The first core's record when this call
    /// ended the execution; `None` when it had ended already (a racing drop or revoke did the
    /// releasing, exactly once). Inside a gated call or the exec gate.
    pub(crate) fn exec_end(
        &self,
        ticket: u64,
        cores: [(u32, u32); 2],
    ) -> Option<crate::sync::ExecRecord> {
        let won = self.exec_slot_end(ticket, cores[0]);
        let _ = self.exec_slot_end(ticket, cores[1]);
        let rec = won?;
        if let Some(m) = NonNull::new(rec.model) {
            // SAFETY: `rec` is the record this call took out of the first core's slot under
            // its lock (the ticket matched), so no other call got it: the slot owned a
            // reference counted on `m` (moved there by `lock_next_core`, which forgot its
            // `ModelRef`), and this is the one place it is released. A counted reference
            // keeps the slot live, so `m` is a live model slot of this runtime.
            drop(unsafe { ModelRef::from_counted(self.st, m) });
        }
        Some(rec)
    }
}

const _: () =
    assert!(core::mem::size_of::<H_MODEL>() == 4 && core::mem::align_of::<H_MODEL>() == 4);

impl<'a> Nrt<'a> {
    /// The IO table of building model `m` (its side-table chain, `CoreState::model_io`), for
    /// the loader to fill before publishing, or a failed load to clear. `None` for a slot of
    /// another runtime's arena.
    pub(crate) fn model_io_mut<'f>(&self, m: &'f mut Fresh<'a, model_t>) -> Option<&'f mut Chain> {
        if !self.st.model.models.owns(m.as_ptr()) {
            return None;
        }
        let table = self
            .st
            .model
            .models
            .side_entry(&self.st.model.model_io, m.as_ptr());
        // SAFETY: `m` is a slot of `models` (checked above), so `side_entry` resolved its own
        // entry of `model_io` (bound with the arena's capacity; null only when unbound). The
        // entry is read only through a `ModelRef` of the live slot and written only here and
        // by `DrainedModel::release`; the slot is not live while its `Fresh` exists (so no
        // `ModelRef` or `DrainedModel` of it exists: the previous occupant's were gone before
        // its release), and the `Fresh` is borrowed mutably for `'f`, so this is the only
        // reference to the entry while it lives.
        unsafe { table.as_mut() }
    }

    /// A new, empty mem_ref set (spec §5.2 `ht_init(&mr_set->mem_ref_set, 0x400, …)`): its
    /// header's address, as `model_t.sg_mem_ref_sets` stores it.
    pub(crate) fn mem_ref_set_new(&self) -> Result<*mut ht_t> {
        let mut set = self.st.model.mem_ref_sets.alloc_fresh("mem_ref_set")?;
        set.init();
        // The header is the set's first member (`ht.rs` asserts it).
        Ok(set.publish().cast::<ht_t>().as_ptr())
    }

    /// Adds `dmem` to mem_ref set `set` under `key` (a node of `buf_size` bytes, key type 1:
    /// a hashed string). A pointer that is not a live set of this runtime is refused and
    /// nothing changes (`InvalidModel`); a full node arena is `ArenaFull`.
    pub(crate) fn mem_ref_set_add(
        &self,
        set: *mut ht_t,
        key: u64,
        buf_size: u64,
        dmem: *mut dmem_t,
    ) -> Result<()> {
        let mut node = self.st.model.mem_ref_nodes.alloc_fresh("mem_ref_node")?;
        node.buf_size = buf_size;
        node.key_type = 1; // string key (hashed)
        let node = node.publish();
        let linked = self
            .st
            .model
            .mem_ref_sets
            .with_live(set.cast::<MemRefSet>(), |s| {
                // SAFETY: `s` is a live set of this runtime whose shard lock `with_live` holds.
                // A set's header, buckets and linked nodes are touched only inside `with_live` on
                // this arena (here and in `mem_ref_set_free`) or through its `Fresh` before it
                // was published (`mem_ref_set_new`), so the lock serialises every access. `node`
                // was just taken and published by us: linked nowhere, and valid as long as the
                // arena; from now on it is reached only through the set.
                unsafe { ht::ht_insert(s.as_ptr().cast::<ht_t>(), key, node.as_ptr(), dmem.cast()) }
            });
        if linked.is_none() {
            // Seen by nobody: back as if never taken.
            let _ = self.st.model.mem_ref_nodes.cancel(node.as_ptr());
            return Err(Error::InvalidModel("mem_ref set is not live"));
        }
        Ok(())
    }

    /// Frees mem_ref set `set`: gives back every node, empties it, then gives the set back
    /// (`how`: [`GiveBack::Release`] at unload, [`GiveBack::Cancel`] in a load's rollback).
    /// Nothing for a pointer that is not a live set.
    pub(crate) fn mem_ref_set_free(&self, set: *mut ht_t, how: GiveBack) {
        let set = set.cast::<MemRefSet>();
        let emptied = self.st.model.mem_ref_sets.with_live(set, |s| {
            let ht = s.as_ptr().cast::<ht_t>();
            // SAFETY: as in `mem_ref_set_add`: a live set under its shard lock, whose chains
            // link only nodes `mem_ref_set_add` linked. `drain` unlinks each node and reads
            // its `next` before the closure gives it back, so no node is read after its
            // release, and a later call finds an empty set rather than released nodes.
            unsafe {
                ht::drain(ht, |n| {
                    let _ = self.st.model.mem_ref_nodes.give_back(n, how);
                });
            }
        });
        if emptied.is_some() {
            let _ = self.st.model.mem_ref_sets.give_back(set, how);
        }
    }

    /// Scratchpad cleanup record `c`'s claim on its first core (libnrt's `pcores[0]`,
    /// `sizes[0]`, `num_entries`), copied out; `None` for a pointer that is not a live record.
    pub(crate) fn cleanup_record(
        &self,
        c: *const tdrv_scratchpad_cleanup_info_t,
    ) -> Option<CleanupRecord> {
        self.st.model.sp_cleanup.with_live(c, |p| {
            // SAFETY: a live slot, which its shard lock (held by `with_live`) keeps from being
            // released or handed out again. A record's members are written only through its
            // `Fresh` by the loader, before it is published, and never after, so this shared
            // read races no write.
            let r = unsafe { p.as_ref() };
            CleanupRecord {
                pcore: r.pcores[0],
                bytes: r.sizes[0],
                entries: r.num_entries,
            }
        })
    }
}

/// A scratchpad cleanup record's claim on its first core, as [`Nrt::cleanup_record`] copies
/// it.
#[derive(Copy, Clone, Debug)]
pub(crate) struct CleanupRecord {
    /// `pcores[0]`: the core whose pages the model holds.
    pub(crate) pcore: *mut physical_core_t,
    /// `sizes[0]`: bytes claimed there.
    pub(crate) bytes: u64,
    /// `num_entries`.
    pub(crate) entries: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{Preset, SimConfig, SimDevice};

    /// The model accessors take any pointer: one that is not a core, table, set or record of
    /// this runtime is refused and changes nothing.
    #[test]
    fn model_accessors_refuse_pointers_outside_the_tree() {
        let st = CoreState::new_boxed();
        let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, 1)).unwrap();
        let n = Nrt::new(&st, &*sim);
        n.init(&InitOptions::default()).unwrap();
        let tpb = n.tpb(0, 0).unwrap();
        let inside = tpb.cast::<u8>().wrapping_add(8).cast::<tpb_t>();
        let mut foreign = [0u64; 8];
        let foreign_tpb = foreign.as_mut_ptr().cast::<tpb_t>();
        assert!(n.model_db_lock(tpb).is_some());
        assert!(n.model_db_lock(inside).is_none(), "not a tpb_t's start");
        assert!(n.model_db_lock(foreign_tpb).is_none());
        assert!(n.model_db_lock(core::ptr::null()).is_none());

        // A model slot of another runtime is refused, handed back unpublished.
        let other = CoreState::new_boxed();
        let stranger = other.model.models.alloc_fresh("model_t").unwrap();
        let (e, stranger) = n.model_db_lock(tpb).unwrap().insert(stranger).unwrap_err();
        assert_eq!(e, Error::InvalidModel("not a model slot of this runtime"));
        drop(stranger);
        assert_eq!(other.model.models.stats().live, 0, "went back unpublished");

        // A set or record pointer that is not live: refused, no node taken.
        let nodes = st.model.mem_ref_nodes.stats().live;
        let foreign_set = foreign.as_mut_ptr().cast::<ht_t>();
        assert!(n
            .mem_ref_set_add(foreign_set, 1, 8, core::ptr::null_mut())
            .is_err());
        assert_eq!(
            st.model.mem_ref_nodes.stats().live,
            nodes,
            "the node went back"
        );
        n.mem_ref_set_free(foreign_set, GiveBack::Cancel);
        assert!(n.cleanup_record(foreign.as_ptr().cast()).is_none());

        // A live set: filled, freed, then refused.
        let set = n.mem_ref_set_new().unwrap();
        n.mem_ref_set_add(set, 7, 64, core::ptr::null_mut())
            .unwrap();
        n.mem_ref_set_add(set, 9, 64, core::ptr::null_mut())
            .unwrap();
        assert_eq!(st.model.mem_ref_nodes.stats().live, nodes + 2);
        n.mem_ref_set_free(set, GiveBack::Release);
        assert_eq!(
            st.model.mem_ref_nodes.stats().live,
            nodes,
            "its nodes went back"
        );
        assert!(n.mem_ref_set_add(set, 1, 8, core::ptr::null_mut()).is_err());

        n.close().unwrap();
        assert!(n.model_db_lock(tpb).is_none(), "torn down by close");
    }

    /// An execution's hold: the core names the running model and the model counts one more
    /// reference until the guard is dropped, then both go (spec §4.6).
    #[test]
    fn an_execution_marks_its_core_and_holds_a_reference_until_dropped() {
        let st = CoreState::new_boxed();
        let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, 1)).unwrap();
        let n = Nrt::new(&st, &*sim);
        n.init(&InitOptions::default()).unwrap();
        let spec = crate::model::ModelSpec {
            name: "m",
            subgraphs: 1,
            ..Default::default()
        };
        let h = n.load_model(crate::LogicalCore::new(0), &spec).unwrap();
        let tpb = n.tpb(0, 0).unwrap();
        // SAFETY: one thread: no exec lock is held while the field is read.
        let running = || unsafe { addr_of!((*tpb).h_running_model).read().id };
        assert_eq!(running(), 0);
        let g = n.exec_begin(h).unwrap();
        assert_eq!(running(), h.h_model().id);
        assert_eq!(g.h_model().id, h.h_model().id);
        assert_eq!(
            n.model_info(h).unwrap().ref_count,
            1,
            "the guard's reference"
        );
        drop(g);
        assert_eq!(running(), 0, "cleared with the exec lock");
        assert_eq!(n.model_info(h).unwrap().ref_count, 0);
        let db = n.model_db_lock(tpb).unwrap();
        assert!(db.contains(h.h_model().id));
        drop(db);
        n.unload_model(h).unwrap();
        assert!(!n.model_db_lock(tpb).unwrap().contains(h.h_model().id));
        n.close().unwrap();
    }
}
