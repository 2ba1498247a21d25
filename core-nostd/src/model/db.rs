//! The per-core model database (spec §4.3, §4.4): `add_model`, the handle lookup with its
//! reference, `remove_model`'s unlink-then-drain, and the queries over resident models.

use core::ptr::addr_of_mut;
use core::sync::atomic::Ordering;

use super::{drain, ModelInfo, ModelIo, ModelIoTable, MODEL_IO_MAX};
use crate::abi::*;
use crate::ctx::{InCall, InFlight, Nrt};
use crate::error::{Error, Result};
use crate::handle::{HandleKind, ModelHandle};
use crate::ht;
use crate::vcore::LogicalCore;

impl<'a> Nrt<'a> {
    /// The IO table of model slot `m` (of this runtime's model arena; a pointer the arena does
    /// not own yields the last slot's table, which no caller reaches: they pass live models).
    pub(crate) fn model_io_table(&self, m: *mut model_t) -> *mut ModelIoTable {
        self.st.model.models.side_entry(&self.st.model.model_io, m)
    }

    /// `add_model` (spec §4.3): links the model into the core's `model_db` through its embedded
    /// node; a handle already present is `DuplicateModel` (NRT_INVALID_HANDLE); a core torn
    /// down by `close` (null table) is `Closed`, and the caller rolls the load back.
    pub(super) fn add_model(&self, tpb: *mut tpb_t, m: *mut model_t) -> Result<()> {
        // SAFETY: resolved tpb; model_db guarded by model_db_lock, checked non-null under it.
        unsafe {
            let _g = (*tpb).model_db_lock.lock();
            if (*tpb).model_db.is_null() {
                return Err(Error::Closed);
            }
            let id = (*m).h_model.id as u64;
            // ht_find != 0 means "absent, safe to insert" (spec §4.3 QUIRK).
            if ht::ht_find((*tpb).model_db, id, None) != 0 {
                ht::ht_insert(
                    (*tpb).model_db,
                    id,
                    addr_of_mut!((*m).ht_node),
                    m as *mut core::ffi::c_void,
                );
                Ok(())
            } else {
                Err(Error::DuplicateModel((*m).h_model.id))
            }
        }
    }

    /// container_of(node) → model (ht_node at model_t+7496, spec §4.4).
    fn model_of(node: *mut ht_node_t) -> *mut model_t {
        (node as *mut u8).wrapping_sub(core::mem::offset_of!(model_t, ht_node)) as *mut model_t
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
    pub(super) fn get_model_ref_count(&self, tpb: *mut tpb_t, h: H_MODEL) -> Result<*mut model_t> {
        // SAFETY: resolved tpb; under model_db_lock, the table checked non-null under it.
        unsafe {
            let _g = (*tpb).model_db_lock.lock();
            if (*tpb).model_db.is_null() {
                return Err(Error::Closed);
            }
            let node =
                ht::find((*tpb).model_db, h.id as u64).ok_or(Error::stale(HandleKind::Model))?;
            let m = Self::model_of(node);
            (*m).ref_count.fetch_add(1, Ordering::AcqRel);
            Ok(m)
        }
    }

    /// `remove_model` (spec §4.5): unlinks `h` from the lookup first (no new execution can
    /// acquire it), then drains until every in-flight user has released it. A table torn
    /// down by `close` is `Closed`.
    pub(super) fn remove_model(&self, tpb: *mut tpb_t, h: H_MODEL) -> Result<*mut model_t> {
        // SAFETY: resolved tpb; the table under model_db_lock (checked non-null under it), the
        // drain on an atomic.
        unsafe {
            let node = {
                let _g = (*tpb).model_db_lock.lock();
                if (*tpb).model_db.is_null() {
                    return Err(Error::Closed);
                }
                if ht::ht_find((*tpb).model_db, h.id as u64, None) != 0 {
                    return Err(Error::stale(HandleKind::Model));
                }
                ht::ht_remove((*tpb).model_db, h.id as u64)
            };
            let m = Self::model_of(node);
            drain(&(*m).ref_count);
            Ok(m)
        }
    }

    /// Footprint of a resident model (spec §4.4 lookup + reference, §5). `Closed` /
    /// `Uninitialized` outside an initialised runtime.
    pub fn model_info(&self, h: ModelHandle) -> Result<ModelInfo> {
        self.with_model(h, |call, m, vnc, refs| {
            let scratchpad_pages = self
                .cleanup_claim(m.scratchpad_cleanup_info)
                .map_or(0, |(_, pages)| pages);
            let mut info = ModelInfo {
                handle: h.h_model().id,
                vnc,
                scratchpad_pages,
                shared_ulib: m.ulib_is_shared != 0,
                subgraphs: m.num_subgraphs,
                ref_count: refs,
                ..Default::default()
            };
            for al in m.sg_allocators {
                self.allocator_walk(call, al, |d| {
                    info.allocations += 1;
                    info.bytes += d.allocated_size;
                    if d.mem_type == dma_mem_location_t::TONGA_DRAM as u32 {
                        info.by_usage[(d.mem_usage_type as usize).min(21)] += d.allocated_size;
                        info.by_usage[22] += d.allocated_size;
                    }
                });
            }
            info
        })
    }

    /// Calls `f(subgraph, dmem)` on every dmem of a resident model's MODEL heaps, one heap per
    /// subgraph (spec §5.2). `Closed` / `Uninitialized` outside an initialised runtime.
    pub fn for_each_model_dmem(
        &self,
        h: ModelHandle,
        mut f: impl FnMut(u32, &dmem_t),
    ) -> Result<()> {
        self.with_model(h, |call, m, _, _| {
            let n = (m.num_subgraphs as usize).min(m.sg_allocators.len());
            for (sg, al) in m.sg_allocators[..n].iter().enumerate() {
                self.allocator_walk(call, *al, |d| f(sg as u32, d));
            }
        })
    }

    /// Runs `f` inside the state gate on a resident model while holding a reference on it (so
    /// an unload waits): `f(the call's gate token, model, logical core, references held by
    /// others)`.
    fn with_model<R>(
        &self,
        h: ModelHandle,
        f: impl FnOnce(&InFlight<'_>, &model_t, LogicalCore, u64) -> R,
    ) -> Result<R> {
        let call = self.enter()?;
        let (tpb, vnc) = self.model_tpb(&call, h)?;
        let m = self.get_model_ref_count(tpb, h.h_model())?;
        // SAFETY: we hold a reference: the model is not freed until we drop it below.
        let r = unsafe { f(&call, &*m, vnc, (*m).ref_count.load(Ordering::Acquire) - 1) };
        // SAFETY: the reference taken above.
        unsafe { (*m).ref_count.fetch_sub(1, Ordering::AcqRel) };
        Ok(r)
    }

    /// Handles of the models resident on logical core `vnc` (the core's `model_db`, spec
    /// §4.3): writes up to `out.len()` of them and returns how many there are. `Closed` /
    /// `Uninitialized` outside an initialised runtime (the table only exists while it is).
    pub fn models_on(&self, vnc: LogicalCore, out: &mut [ModelHandle]) -> Result<usize> {
        let call = self.enter()?;
        let v = self.vtpb_get_virtual_core(&call, vnc)?;
        let (index, epoch) = (vnc.index().unwrap_or(u32::MAX), self.epoch());
        let tpb = self.tpb(v.tpbs[0].device_id, v.tpbs[0].device_tpb_idx)?;
        let mut n = 0;
        // SAFETY: resolved tpb; the table is read under model_db_lock, and only when teardown
        // has not cleared it (a close racing this call leaves it null).
        unsafe {
            let _g = (*tpb).model_db_lock.lock();
            if (*tpb).model_db.is_null() {
                return Err(Error::Closed);
            }
            ht::for_each((*tpb).model_db, |node| {
                if n < out.len() {
                    out[n] = ModelHandle::from_parts(index, (*node).key as u32, epoch);
                }
                n += 1;
            });
        }
        Ok(n)
    }

    /// Calls `f` on each declared input, then each output, of a resident model, in the order
    /// the model declared them: what `nrt_get_model_tensor_info` reports (name, usage, size,
    /// dtype, shape). Holds a reference on the model meanwhile (an unload waits). A stale,
    /// forged or foreign handle is [`Error::InvalidHandle`]; `Closed` / `Uninitialized`
    /// outside an initialised runtime.
    pub fn for_each_model_io(&self, h: ModelHandle, mut f: impl FnMut(&ModelIo<'_>)) -> Result<()> {
        self.with_model(h, |_, m, _, _| {
            let n = (m.num_inputs + m.num_outputs) as usize;
            for k in 0..n.min(MODEL_IO_MAX) {
                // SAFETY: `with_model` holds a reference on `m` for the whole closure.
                if let Some(io) = unsafe { self.io_entry(m, k) } {
                    f(&io);
                }
            }
        })
    }

    /// The logical core of a resident model (`nrt_get_model_info`'s `vnc`), checking that
    /// the model is still loaded: a stale, forged or foreign handle is
    /// [`Error::InvalidHandle`].
    pub fn model_core(&self, h: ModelHandle) -> Result<LogicalCore> {
        self.with_model(h, |_, _, vnc, _| vnc)
    }
}
