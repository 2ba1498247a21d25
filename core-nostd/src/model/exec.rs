//! The exec seam (spec §4.6): one model executes at a time per physical core, holding a
//! model reference, and the declared IO an execution binds.

use super::access::ExecHold;
use super::{IoUsage, ModelIo};
use crate::abi::*;
use crate::ctx::Nrt;
use crate::error::Result;
use crate::handle::ModelHandle;

/// Executing: holds the model reference and every physical core's exec lock (spec §4.6).
/// Dropping it clears each core's `h_running_model` and releases its exec lock, then the
/// model reference: once the reference is dropped, `close` may finish and a later `init`
/// rewrite the cores (their locks included), so nothing of the runtime is touched after it.
pub struct ExecGuard<'a> {
    hold: ExecHold<'a>,
}

impl ExecGuard<'_> {
    /// The `h_model` of the model being executed (spec §4.6), read by value: a `&model_t`
    /// would cover its embedded `ht_node`, which the unload of another model in the same
    /// `model_db` bucket rewrites while this execution runs.
    pub fn h_model(&self) -> H_MODEL {
        self.hold.model().h_model()
    }

    /// Calls `f` on each declared input (`output == false`) or output of the model being
    /// executed, in declaration order.
    pub(crate) fn for_each_io(&self, output: bool, mut f: impl FnMut(&ModelIo<'_>)) {
        let want = if output {
            IoUsage::Output
        } else {
            IoUsage::Input
        };
        self.hold.model().for_each_io(|io| {
            if io.usage == want {
                f(io)
            }
        });
    }

    /// The arena shard of the model's first physical core.
    pub(crate) fn shard(&self) -> usize {
        let p = self.hold.model().pcore();
        crate::ctx::core_shard(p.device_id, p.device_tpb_idx)
    }
}

impl<'a> Nrt<'a> {
    /// The body of [`crate::model::Models::exec_begin`].
    pub(crate) fn exec_begin(&self, h: ModelHandle) -> Result<ExecGuard<'a>> {
        let call = self.enter()?;
        let (tpb0, vnc) = self.model_tpb(&call, h)?;
        let m = self.get_model_ref_count(tpb0, h.h_model())?;
        let v = *self.vtpb_get_virtual_core(&call, vnc)?;
        let mut g = ExecGuard {
            hold: ExecHold::new(m),
        };
        for j in 0..v.num_tpbs.min(2) as usize {
            let (dev, core) = (v.tpbs[j].device_id, v.tpbs[j].device_tpb_idx);
            let tpb = self.tpb(dev, core)?;
            g.hold.lock_core(self, j, tpb)?;
        }
        g.hold
            .model()
            .exec_count()
            .fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        Ok(g)
    }
}
