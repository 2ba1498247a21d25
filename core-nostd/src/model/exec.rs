//! The exec seam (spec §4.6): one model executes at a time per physical core, holding a
//! model reference, and the declared IO an execution binds.

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::{IoUsage, ModelIo, IO_DIMS_MAX};
use crate::abi::*;
use crate::cstr::c_name;
use crate::ctx::Nrt;
use crate::error::Result;
use crate::handle::ModelHandle;
use crate::sync::MutexGuard;

/// Executing: holds the model reference and every physical core's exec lock (spec §4.6).
pub struct ExecGuard<'a> {
    model: *mut model_t,
    tpbs: [*mut tpb_t; 2],
    _locks: [Option<MutexGuard<'a>>; 2],
}

// SAFETY: the guard holds spin locks (releasable from any thread) and raw pointers into the
// context tree, which is Sync; dropping it on another thread is what an async completion does.
unsafe impl Send for ExecGuard<'_> {}

impl ExecGuard<'_> {
    /// The model being executed.
    pub fn model(&self) -> &model_t {
        // SAFETY: the guard holds a reference: the model cannot be freed meanwhile.
        unsafe { &*self.model }
    }
}

impl Drop for ExecGuard<'_> {
    fn drop(&mut self) {
        for t in self.tpbs.iter().filter(|t| !t.is_null()) {
            // SAFETY: resolved core whose exec lock we hold.
            unsafe { (**t).h_running_model = H_MODEL { id: 0 } };
        }
        // The exec locks go first, the model reference last: once the reference is dropped,
        // `close` may finish and a later `init` rewrite the cores (their locks included), so
        // nothing of the runtime is touched after it.
        for l in &mut self._locks {
            drop(l.take());
        }
        // SAFETY: we took this reference in exec_begin.
        unsafe { (*self.model).ref_count.fetch_sub(1, Ordering::AcqRel) };
    }
}

impl<'a> Nrt<'a> {
    /// The exec seam (spec §4.6): takes a reference on `h` (so an unload waits), then each of
    /// its physical cores' exec locks in order (one model executes at a time per core), and
    /// marks it `h_running_model`. Dropping the guard undoes all three.
    pub fn exec_begin(&self, h: ModelHandle) -> Result<ExecGuard<'a>> {
        let call = self.enter()?;
        let (tpb0, vnc) = self.model_tpb(&call, h)?;
        let m = self.get_model_ref_count(tpb0, h.h_model())?;
        let v = *self.vtpb_get_virtual_core(&call, vnc)?;
        let mut g = ExecGuard {
            model: m,
            tpbs: [null_mut(); 2],
            _locks: [None, None],
        };
        for j in 0..v.num_tpbs.min(2) as usize {
            let tpb = self.tpb(v.tpbs[j].device_id, v.tpbs[j].device_tpb_idx)?;
            // SAFETY: resolved tpb that lives as long as `'a`.
            let ext = self.core_ext(v.tpbs[j].device_id, v.tpbs[j].device_tpb_idx);
            g._locks[j] = Some(ext.exec_lock.lock());
            ext.exec_count.fetch_add(1, Ordering::Relaxed);
            // SAFETY: under this core's exec lock.
            unsafe { (*tpb).h_running_model = h.h_model() };
            g.tpbs[j] = tpb;
        }
        // SAFETY: we hold a reference.
        unsafe { (*m).exec_count.fetch_add(1, Ordering::Relaxed) };
        Ok(g)
    }

    /// Declared input (`output == false`) or output `i` of the model an execution holds.
    pub(crate) fn model_io<'s>(
        &self,
        g: &'s ExecGuard<'_>,
        output: bool,
        i: usize,
    ) -> Option<ModelIo<'s>> {
        let m = g.model();
        let (start, n) = if output {
            (m.num_inputs as usize, m.num_outputs as usize)
        } else {
            (0, m.num_inputs as usize)
        };
        if i >= n {
            return None;
        }
        // SAFETY: the guard holds a reference, so the model's IO entries (written before it
        // was published) are not rewritten while `'s` lives.
        unsafe { self.io_entry(m, start + i) }
    }

    /// Entry `k` of a referenced model's IO table (inputs first, then outputs).
    ///
    /// # Safety
    /// The caller holds a reference on `m` for `'s` (the table is not rewritten meanwhile).
    pub(super) unsafe fn io_entry<'s>(&self, m: &'s model_t, k: usize) -> Option<ModelIo<'s>> {
        // SAFETY: caller contract; the table belongs to `m`'s slot.
        let table = unsafe { &*self.model_io_table(m as *const model_t as *mut model_t) };
        let io = table.get(k)?;
        Some(ModelIo {
            name: c_name(&io.name),
            usage: if k < m.num_inputs as usize {
                IoUsage::Input
            } else {
                IoUsage::Output
            },
            size: io.size,
            dtype: io.dtype,
            shape: &io.shape[..(io.ndim as usize).min(IO_DIMS_MAX)],
        })
    }
}
