//! [`Models`]: the runtime's model calls (spec §4, §5), a view borrowed from [`Nrt::models`]:
//! load, unload, the model database's reads and the execution seam.

use super::*;
use crate::ctx::Nrt;
use crate::dmem::DmemEntry;
use crate::error::Result;
use crate::handle::ModelHandle;

/// The runtime's models (spec §4, §5): [`Nrt::models`]. A reference to the runtime view.
#[derive(Copy, Clone)]
pub struct Models<'n, 'a>(pub(crate) &'n Nrt<'a>);

impl<'a> Nrt<'a> {
    /// The model calls (spec §4, §5).
    #[inline]
    pub fn models(&self) -> Models<'_, 'a> {
        Models(self)
    }
}

impl<'a> Models<'_, 'a> {
    /// Footprint of a resident model (spec §4.4 lookup + reference, §5). `Closed` /
    /// `Uninitialized` outside an initialised runtime.
    #[doc(alias = "model_info")]
    #[inline]
    pub fn info(&self, h: ModelHandle) -> Result<ModelInfo> {
        self.0.model_info(h)
    }

    /// Calls `f(subgraph, dmem)` on every dmem of a resident model's MODEL heaps, one heap per
    /// subgraph (spec §5.2). `Closed` / `Uninitialized` outside an initialised runtime.
    #[doc(alias = "for_each_model_dmem")]
    #[inline]
    pub fn for_each_dmem(&self, h: ModelHandle, f: impl FnMut(u32, &DmemEntry<'_>)) -> Result<()> {
        self.0.for_each_model_dmem(h, f)
    }

    /// Handles of the models resident on logical core `vnc` (the core's `model_db`, spec
    /// §4.3): writes up to `out.len()` of them and returns how many there are. `Closed` /
    /// `Uninitialized` outside an initialised runtime (the table only exists while it is).
    #[doc(alias = "models_on")]
    #[inline]
    pub fn on_core(&self, vnc: LogicalCore, out: &mut [ModelHandle]) -> Result<usize> {
        self.0.models_on(vnc, out)
    }

    /// Calls `f` on each declared input, then each output, of a resident model, in the order
    /// the model declared them: what `nrt_get_model_tensor_info` reports (name, usage, size,
    /// dtype, shape). Holds a reference on the model meanwhile (an unload waits). A stale,
    /// forged or foreign handle is [`Error::InvalidHandle`](crate::Error::InvalidHandle); `Closed` / `Uninitialized`
    /// outside an initialised runtime.
    #[doc(alias = "for_each_model_io")]
    #[inline]
    pub fn for_each_io(&self, h: ModelHandle, f: impl FnMut(&ModelIo<'_>)) -> Result<()> {
        self.0.for_each_model_io(h, f)
    }

    /// The logical core of a resident model (`nrt_get_model_info`'s `vnc`), checking that
    /// the model is still loaded: a stale, forged or foreign handle is
    /// [`Error::InvalidHandle`](crate::Error::InvalidHandle).
    #[doc(alias = "model_core")]
    #[inline]
    pub fn core(&self, h: ModelHandle) -> Result<LogicalCore> {
        self.0.model_core(h)
    }

    /// The exec seam (spec §4.6): takes a reference on `h` (so an unload waits), then each of
    /// its physical cores in order (one model executes at a time per core), and marks it
    /// `h_running_model`. Dropping the guard undoes all three.
    ///
    /// The guard stays on the calling thread (not `Send`), which each core records: with a
    /// thread token (`crate::sync::set_thread_token_hook`) a call of this thread that would
    /// wait for the execution — `exec_begin` or an execution on one of its cores, an unload
    /// of `h`, `close` — is refused at once with [`Error::WouldDeadlock`](crate::Error::WouldDeadlock).
    /// Another thread's wait for a core is bounded (`crate::sync::wait_bounded`): `Timeout`
    /// naming the core when the wait hook gives up. An execution held too long, or whose
    /// guard was leaked, is ended by [`Self::revoke_exec`].
    #[inline]
    pub fn exec_begin(&self, h: ModelHandle) -> Result<ExecGuard<'a>> {
        self.0.exec_begin(h)
    }

    /// Ends the execution that holds physical core `core`, whoever began it and whether or
    /// not its guard still lives (spec §4.6): frees each of its cores (their
    /// `h_running_model` cleared) and releases the model reference it held, so executions on
    /// those cores, an unload of the model and `close` work again. The recovery for an
    /// [`ExecGuard`](super::ExecGuard) that was leaked or is held past any reasonable time (a
    /// watchdog's call). Returns the model whose execution it ended; `None` when no execution
    /// holds the core (or one ended meanwhile). `CoreOutOfRange` for a core that is not
    /// present; `Closed` / `Uninitialized` outside an initialised runtime — also while
    /// `close` waits for the execution's model: that wait gives up with `Timeout` and leaves
    /// the runtime initialised, so the recovery is `close` → `Timeout` → `revoke_exec` →
    /// `close`.
    ///
    /// Memory-safe with the guard alive: the guard then holds nothing — its drop releases
    /// nothing, [`ExecGuard::check`](super::ExecGuard::check) and an execution binding
    /// through it answer [`Error::ExecRevoked`](crate::Error::ExecRevoked) — but the work it
    /// stands for is not stopped: a new execution may use the cores while it goes on.
    #[inline]
    pub fn revoke_exec(&self, core: crate::PhysicalCore) -> Result<Option<ModelHandle>> {
        self.0.revoke_exec(core)
    }

    /// Loads a model onto logical core `vnc` (spec §5): builds one MODEL heap per subgraph in
    /// an mr_set slot and moves it into the `model_t` (zeroing the slot), validates the SBUF
    /// carveout on CAYMAN, makes the allocations, claims scratchpad pages, stages GPSIMD
    /// libraries on SUNDA, and `add_model`s it. All-or-nothing: on any failure the ledger's
    /// bytes, every allocator and every arena's slots are as before. The model's own heaps go
    /// straight back, not through the quarantines (nobody saw them); scratchpad pages and the
    /// shared ext-isa copy, which others could see once claimed, go through them. High-water marks — the ledger's
    /// peaks, an arena's peak — may remember the attempt, as the driver's peak counters do.
    #[doc(alias = "load_model")]
    #[inline]
    pub fn load(&self, vnc: LogicalCore, spec: &ModelSpec<'_>) -> Result<ModelHandle> {
        self.0.load_model(vnc, spec)
    }

    /// Unloads `h` (`nrt_unload`): `remove_model` (waits for in-flight executions), then
    /// `model_free` (spec §4.5, §5.4). No other model's memory changes. `Closed` /
    /// `Uninitialized` outside an initialised runtime (spec §7.2 state gate). A handle
    /// already unloaded (at any age), forged, or of another runtime is
    /// [`Error::InvalidHandle`](crate::Error::InvalidHandle) and nothing changes; of two racing unloads of one model,
    /// exactly one unloads it.
    ///
    /// The wait for the model's references is bounded (`crate::sync::wait_bounded`): when it
    /// gives up, `Timeout` names the model, which stays loaded (an
    /// [`ExecGuard`](super::ExecGuard) held past the bound or leaked keeps it so:
    /// [`Self::revoke_exec`] ends such an execution). A thread that unloads from a callback on
    /// the model ([`Self::for_each_dmem`], [`Self::for_each_io`]) or while its own execution
    /// of the model holds a core would wait for itself: with a thread token
    /// (`crate::sync::set_thread_token_hook`) it is refused at once with `WouldDeadlock`,
    /// else the bounded wait gives up.
    ///
    /// [`Error::DriverKept`](crate::Error::DriverKept) when the driver refused to free some of the model's memory: the
    /// model is unloaded, the driver still holds those blocks ([`crate::Nrt::driver_kept`]).
    #[doc(alias = "unload_model")]
    #[inline]
    pub fn unload(&self, h: ModelHandle) -> Result<()> {
        self.0.unload_model(h)
    }
}
