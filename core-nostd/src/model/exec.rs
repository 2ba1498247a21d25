//! The exec seam (spec §4.6): one model executes at a time per physical core, holding a
//! model reference, and the declared IO an execution binds; an execution's end, by its
//! guard or revoked ([`crate::model::Models::revoke_exec`]).

use super::access::ExecHold;
use super::{IoUsage, ModelIo};
use crate::abi::*;
use crate::ctx::{InCall, Nrt};
use crate::device::PhysicalCore;
use crate::error::{Error, Result};
use crate::handle::ModelHandle;
use crate::sync::WaitFor;

/// Executing (spec §4.6): the execution holds its model referenced and each of its physical
/// cores (their `h_running_model` naming the model). Dropping it ends the execution: the
/// cores are freed, then the model reference released (from then on `close` may finish).
///
/// The guard stays on the thread that began the execution (it is not `Send`, like a
/// `MutexGuard`): with a thread token (`crate::sync::set_thread_token_hook`) a call of that
/// thread that would wait for the execution — an execution on one of its cores, an unload of
/// its model, `close` — is refused at once with [`Error::WouldDeadlock`].
///
/// [`crate::model::Models::revoke_exec`] ends an execution whose guard was leaked or is held
/// too long, from any thread; the guard then holds nothing: its drop releases nothing
/// again, and [`Self::check`] says [`Error::ExecRevoked`].
pub struct ExecGuard<'a> {
    hold: ExecHold<'a>,
}

impl ExecGuard<'_> {
    /// The `h_model` of the model being executed (spec §4.6), by value from the handle the
    /// execution began with: it reads nothing of the model (which a revoked execution no
    /// longer holds).
    pub fn h_model(&self) -> H_MODEL {
        self.hold.handle().h_model()
    }

    /// `Ok` while the execution holds its cores; [`Error::ExecRevoked`] (naming its first
    /// core) once [`crate::model::Models::revoke_exec`] ended it; `Closed` / `Uninitialized`
    /// outside an initialised runtime (spec §4.6).
    pub fn check(&self) -> Result<()> {
        let _call = self.hold.nrt().enter()?;
        self.hold.check()
    }

    /// Calls `f` on each declared input (`output == false`) or output of the model being
    /// executed, in declaration order, through a reference of its own on the model, taken
    /// while the execution still holds its cores. `ExecRevoked` when it was revoked.
    pub(crate) fn for_each_io(
        &self,
        _call: &impl InCall,
        output: bool,
        mut f: impl FnMut(&ModelIo<'_>),
    ) -> Result<()> {
        let want = if output {
            IoUsage::Output
        } else {
            IoUsage::Input
        };
        self.hold.model_ref()?.for_each_io(|io| {
            if io.usage == want {
                f(io)
            }
        });
        Ok(())
    }

    /// The arena shard of the execution's first physical core.
    pub(crate) fn shard(&self) -> usize {
        let (d, i) = self.hold.first_core();
        crate::ctx::core_shard(d, i)
    }
}

impl<'a> Nrt<'a> {
    /// The body of [`crate::model::Models::exec_begin`].
    pub(crate) fn exec_begin(&self, h: ModelHandle) -> Result<ExecGuard<'a>> {
        let call = self.enter()?;
        let (tpb0, vnc) = self.model_tpb(&call, h)?;
        let m = self.get_model_ref_count(tpb0, h.h_model())?;
        let v = *self.vtpb_get_virtual_core(&call, vnc)?;
        let n = v.num_tpbs.min(2) as usize;
        let mut cores = [(u32::MAX, u32::MAX); 2];
        for (c, p) in cores.iter_mut().zip(&v.tpbs[..n]) {
            *c = (p.device_id, p.device_tpb_idx);
        }
        let mut g = ExecGuard {
            hold: ExecHold::new(*self, m, h, cores),
        };
        for _ in 0..n {
            g.hold.lock_next_core()?;
        }
        // Counted once every core is taken, through a reference of its own (a revoke may end
        // the execution the moment it began: then it is not counted).
        if let Ok(m) = g.hold.model_ref() {
            m.exec_count()
                .fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        }
        Ok(g)
    }

    /// The body of [`crate::model::Models::revoke_exec`].
    pub(crate) fn revoke_exec(&self, core: PhysicalCore) -> Result<Option<ModelHandle>> {
        let _call = self.enter()?;
        self.tpb(core.device, core.core)?;
        let held = self.core_ext(core.device, core.core).exec.get();
        if held.ticket == 0 {
            return Ok(None);
        }
        let Some(ended) = self.exec_end(held.ticket, held.cores) else {
            // Ended meanwhile by its guard or another revoke.
            return Ok(None);
        };
        let (index, id, epoch) = ended.handle;
        warn!(
            "revoke_exec: ended the execution of model {} on device {} core {}",
            id, core.device, core.core
        );
        Ok(Some(ModelHandle::from_parts(index, id, epoch)))
    }

    /// `WouldDeadlock` when the calling thread began an execution of model `h` that still
    /// holds a core (one of its logical core's): an unload of the model would wait for that
    /// execution, which only the thread itself (or a revoke) can end. Never without a thread
    /// token.
    pub(crate) fn refuse_own_exec_of(&self, call: &impl InCall, h: ModelHandle) -> Result<()> {
        if crate::sync::thread_token() == 0 {
            return Ok(());
        }
        let v = *self.vtpb_get_virtual_core(call, h.core())?;
        v.tpbs[..v.num_tpbs.min(2) as usize]
            .iter()
            .try_for_each(|p| self.refuse_own_exec_on(p.device_id, p.device_tpb_idx, Some(h)))
    }

    /// `WouldDeadlock` when the calling thread began an execution that still holds a core of
    /// the runtime: `close` would wait for it. Never without a thread token. Under
    /// `init_lock` (the tree is not rewritten meanwhile).
    pub(crate) fn refuse_own_exec_any(&self) -> Result<()> {
        if crate::sync::thread_token() == 0 {
            return Ok(());
        }
        for d in 0..self.ctx_devices() {
            for i in 0..constants::TPBS_PER_MLA as u32 {
                self.refuse_own_exec_on(d, i, None)?;
            }
        }
        Ok(())
    }

    /// `WouldDeadlock` when core `(d, i)`'s slot names an execution the calling thread began
    /// (of model `h`, when given).
    fn refuse_own_exec_on(&self, d: u32, i: u32, h: Option<ModelHandle>) -> Result<()> {
        let rec = self.core_ext(d, i).exec.get();
        if rec.mine() && h.is_none_or(|h| rec.handle.1 == h.h_model().id) {
            return Err(Error::WouldDeadlock(WaitFor::ModelDrain {
                model: rec.handle.1,
            }));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctx::CoreState;
    use crate::model::{ModelSpec, TensorDecl};
    use crate::sim::{Preset, SimConfig, SimDevice};

    /// A revoked execution lends no model: binding through its guard is `ExecRevoked`, and
    /// the reference a bind took of its own goes back with it.
    #[test]
    fn a_revoked_execution_binds_nothing() {
        let st = CoreState::new_boxed();
        let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, 1)).unwrap();
        let n = Nrt::new(&st, &*sim);
        n.init(&crate::InitOptions::default()).unwrap();
        let ins = [TensorDecl::new("in", 64)];
        let spec = ModelSpec {
            name: "m",
            subgraphs: 1,
            inputs: &ins,
            ..Default::default()
        };
        let h = n.load_model(crate::LogicalCore::new(0), &spec).unwrap();
        let core = PhysicalCore::new(0, 0);
        let g = n.exec_begin(h).unwrap();
        let call = n.enter().unwrap();
        let mut seen = 0;
        g.for_each_io(&call, false, |_| seen += 1).unwrap();
        assert_eq!(seen, 1);
        assert_eq!(
            n.model_info(h).unwrap().ref_count,
            1,
            "the bind's went back"
        );
        assert_eq!(n.revoke_exec(core), Ok(Some(h)));
        assert_eq!(
            g.for_each_io(&call, false, |_| seen += 1),
            Err(Error::ExecRevoked { device: 0, core: 0 })
        );
        assert_eq!(seen, 1);
        drop(call);
        assert_eq!(n.model_info(h).unwrap().ref_count, 0);
        drop(g);
        assert_eq!(
            n.model_info(h).unwrap().ref_count,
            0,
            "nothing released twice"
        );
        n.unload_model(h).unwrap();
        n.close().unwrap();
    }
}
