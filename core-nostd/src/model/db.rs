//! The per-core model database (spec §4.3, §4.4): `add_model`, the handle lookup with its
//! reference, `remove_model`'s unlink-then-drain, and the queries over resident models.

use super::access::{DrainedModel, ModelRef};
use super::{ModelInfo, ModelIo};
use crate::abi::*;
use crate::arena::Fresh;
use crate::ctx::{InCall, InFlight, Nrt};
use crate::dmem::DmemEntry;
use crate::error::{Error, Result};
use crate::handle::{HandleKind, ModelHandle};
use crate::vcore::LogicalCore;

impl<'a> Nrt<'a> {
    /// `add_model` (spec §4.3): publishes the building model and links it into the core's
    /// `model_db` through its embedded node; a handle already present is `DuplicateModel`
    /// (NRT_INVALID_HANDLE); a core torn down by `close` (no table) is `Closed`. On error the
    /// model comes back unpublished and the caller rolls the load back.
    pub(super) fn add_model(
        &self,
        tpb: *mut tpb_t,
        m: Fresh<'a, model_t>,
    ) -> core::result::Result<(), (Error, Fresh<'a, model_t>)> {
        match self.model_db_lock(tpb) {
            Some(mut db) => db.insert(m),
            None => Err((Error::Closed, m)),
        }
    }

    /// Resolves the core part of a model handle: its epoch must be this runtime's, and its
    /// logical core one this runtime owns (whose first physical core's `model_db` holds the
    /// model: no scan over the cores). Whether the model is still there is for the lookup
    /// under the `model_db` lock ([`Self::get_model_ref_count`], [`Self::remove_model`]).
    pub(super) fn model_tpb(
        &self,
        call: &impl InCall,
        h: ModelHandle,
    ) -> Result<(*mut tpb_t, LogicalCore)> {
        self.check_epoch(h.0, HandleKind::Model)?;
        if h.0.generation == constants::MODEL_HANDLE_RESERVED {
            return Err(Error::forged(HandleKind::Model));
        }
        let vnc = h.core();
        let v = self
            .vtpb_get_virtual_core(call, vnc)
            .map_err(|_| Error::forged(HandleKind::Model))?;
        let tpb = self.tpb(v.tpbs[0].device_id, v.tpbs[0].device_tpb_idx)?;
        Ok((tpb, vnc))
    }

    /// `get_model_ref_count` (spec §4.4): looks `h` up and takes a reference under the lock,
    /// so an in-flight unload cannot free it. A table torn down by `close` is `Closed`.
    pub(super) fn get_model_ref_count(&self, tpb: *mut tpb_t, h: H_MODEL) -> Result<ModelRef<'a>> {
        self.model_db_lock(tpb)
            .ok_or(Error::Closed)?
            .lookup(h.id)
            .ok_or(Error::stale(HandleKind::Model))
    }

    /// `remove_model` (spec §4.5): unlinks `h` from the lookup first (no new execution can
    /// acquire it), then, with the lock released, drains until every in-flight user has
    /// released it. A table torn down by `close` is `Closed`.
    ///
    /// The drain is bounded: when it gives up (`Timeout`), the model is linked again and
    /// stays resident, as if the unload had not been called.
    pub(super) fn remove_model(&self, tpb: *mut tpb_t, h: H_MODEL) -> Result<DrainedModel<'a>> {
        let unlinked = self
            .model_db_lock(tpb)
            .ok_or(Error::Closed)?
            .unlink(h.id)
            .ok_or(Error::stale(HandleKind::Model))?;
        match unlinked.drain() {
            Ok(d) => Ok(d),
            Err((e, u)) => {
                match self.model_db_lock(tpb) {
                    Some(mut db) => db.relink(u),
                    // Not reachable inside a gated call (close waits for it); the model
                    // stays out of every table and its memory held.
                    None => error!("unload: model {} has no table to go back to", h.id),
                }
                Err(e)
            }
        }
    }

    /// Waits (bounded) until no model on core `tpb` is referenced: `close`'s drain before it
    /// tears anything down, so a model held past the bound (a leaked `ExecGuard`) fails the
    /// close with `Timeout` naming it and leaves the runtime as it was.
    pub(crate) fn wait_models_idle(&self, tpb: *mut tpb_t) -> Result<()> {
        let Some(first) = self.model_db_lock(tpb).and_then(|db| db.busy_model()) else {
            return Ok(());
        };
        let mut busy = Some(first);
        let r =
            crate::sync::wait_bounded(crate::sync::WaitFor::ModelDrain { model: first }, || {
                busy = self.model_db_lock(tpb).and_then(|db| db.busy_model());
                busy.is_none()
            });
        r.map_err(|_| {
            Error::Timeout(crate::sync::WaitFor::ModelDrain {
                model: busy.unwrap_or(first),
            })
        })
    }

    /// The body of [`crate::model::Models::info`].
    pub(crate) fn model_info(&self, h: ModelHandle) -> Result<ModelInfo> {
        self.with_model(h, |call, m, vnc, refs| {
            let scratchpad_pages = self
                .cleanup_claim(m.scratchpad_cleanup_info())
                .map_or(0, |(_, pages)| pages);
            let mut info = ModelInfo {
                handle: h.h_model().id,
                vnc,
                scratchpad_pages,
                shared_ulib: m.ulib_is_shared() != 0,
                subgraphs: m.num_subgraphs(),
                ref_count: refs,
                ..Default::default()
            };
            for al in m.sg_allocators() {
                self.allocator_walk(call, al, |d| {
                    info.allocations += 1;
                    info.bytes += d.allocated_size;
                    if d.mem_type == dma_mem_location_t::TONGA_DRAM as u32 {
                        info.by_usage[(d.mem_usage_type as usize).min(21)] += d.allocated_size;
                        info.by_usage[22] += d.allocated_size;
                    }
                })?;
            }
            Ok(info)
        })?
    }

    /// The body of [`crate::model::Models::for_each_dmem`].
    pub(crate) fn for_each_model_dmem(
        &self,
        h: ModelHandle,
        mut f: impl FnMut(u32, &DmemEntry<'_>),
    ) -> Result<()> {
        self.with_model(h, |call, m, _, _| {
            let allocators = m.sg_allocators();
            let n = (m.num_subgraphs() as usize).min(allocators.len());
            for (sg, al) in allocators[..n].iter().enumerate() {
                self.allocator_walk(call, *al, |d| f(sg as u32, &self.dmem_entry(*al, d)))?;
            }
            Ok(())
        })?
    }

    /// Runs `f` inside the state gate on a resident model while holding a reference on it (so
    /// an unload waits): `f(the call's gate token, model, logical core, references held by
    /// others)`. While `f` runs, the thread is recorded as holding the model
    /// ([`crate::sync::Reentry`]): an unload of it or a `close` from `f` is refused at once.
    fn with_model<R>(
        &self,
        h: ModelHandle,
        f: impl FnOnce(&InFlight<'_>, &ModelRef<'a>, LogicalCore, u64) -> R,
    ) -> Result<R> {
        let call = self.enter()?;
        let (tpb, vnc) = self.model_tpb(&call, h)?;
        let m = self.get_model_ref_count(tpb, h.h_model())?;
        let _held = self
            .st
            .reentry
            .hold(crate::sync::reentry_key::model(h.h_model().id));
        Ok(f(&call, &m, vnc, m.other_refs()))
    }

    /// The body of [`crate::model::Models::on_core`].
    pub(crate) fn models_on(&self, vnc: LogicalCore, out: &mut [ModelHandle]) -> Result<usize> {
        let call = self.enter()?;
        let v = self.vtpb_get_virtual_core(&call, vnc)?;
        let (index, epoch) = (vnc.index().unwrap_or(u32::MAX), self.epoch());
        let tpb = self.tpb(v.tpbs[0].device_id, v.tpbs[0].device_tpb_idx)?;
        let mut n = 0;
        // Read under model_db_lock, and only while teardown has not cleared the table (a
        // close racing this call leaves none).
        let db = self.model_db_lock(tpb).ok_or(Error::Closed)?;
        db.for_each_id(|id| {
            if n < out.len() {
                out[n] = ModelHandle::from_parts(index, id, epoch);
            }
            n += 1;
        });
        Ok(n)
    }

    /// The body of [`crate::model::Models::for_each_io`].
    pub(crate) fn for_each_model_io(
        &self,
        h: ModelHandle,
        mut f: impl FnMut(&ModelIo<'_>),
    ) -> Result<()> {
        self.with_model(h, |_, m, _, _| m.for_each_io(&mut f))
    }

    /// The body of [`crate::model::Models::core`].
    pub(crate) fn model_core(&self, h: ModelHandle) -> Result<LogicalCore> {
        self.with_model(h, |_, _, vnc, _| vnc)
    }
}
