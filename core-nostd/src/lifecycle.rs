//! Bring-up (`db_tdrv_ctx_init`, spec §1) and teardown (`tdrv_destroy`, spec §12) of a
//! runtime: the steps above the domains, which call into each of them (logical cores, dmem,
//! models, tensors, scratchpads, GPSIMD libraries) under the state block's `init_lock`.

#![deny(unsafe_code)]

use core::sync::atomic::Ordering;

use crate::abi::*;
use crate::ctx::{
    addr, Exclusive, InCall, InitOptions, Nrt, ReopenOnDrop, STATE_CLOSED, STATE_INIT,
};
use crate::driver::errno;
use crate::error::{Error, Result};

/// What `init` or `close` answer if the [`Exclusive`] token is refused: they hold this
/// runtime's `init_lock` and have just shut the gate, so it is not refused.
const NOT_EXCLUSIVE: Error = Error::Unsupported("init or close without the runtime to itself");

impl Nrt<'_> {
    /// `db_tdrv_ctx_init` + `tdrv_init` (spec §1, §5.1): attaches every device the driver
    /// exposes, builds each core's GLOBAL allocator, model_db and scratchpad, the routing map,
    /// and the logical-core table (spec §9). Fails cleanly (nothing left allocated).
    pub fn init(&self, opts: &InitOptions) -> Result<()> {
        let mut lock = self.st.init_lock.lock();
        if self.state_word() == STATE_INIT {
            self.check_bound()?;
            return Err(Error::AlreadyInitialized);
        }
        // Readers of a closed runtime (`inspect`) are let out before the tree is rewritten;
        // the gate opens again however this returns.
        let _reopen = ReopenOnDrop(&self.st.active_calls);
        self.st.active_calls.close_bounded()?;
        let mut ex = self.exclusive(&mut lock).ok_or(NOT_EXCLUSIVE)?;
        self.st.driver_kept.reset();
        if self.st.dmem.dmems().stats().live == 0 {
            self.st.live_handles.clear();
        }
        if self.state_word() == STATE_CLOSED {
            // Re-init after close: start again from the all-zero tree.
            self.zero_tree(&mut ex);
            self.reset_geometry(&mut ex);
        }
        let n = self
            .drv
            .device_count()
            .min(constants::MAX_MLA_PER_PROCESS as u32);
        // The state block holds a context and model_dbs for `caps.devices` devices: the rest
        // are not attached (like devices past 32), and the log says which setting would
        // attach them.
        let cap = self.st.caps.devices.min(self.ctx_devices());
        if n > cap {
            warn!(
                "init: attaching {} of {} device(s): raise Capacity.devices",
                cap, n
            );
        }
        let n = n.min(cap);
        if n == 0 {
            return Err(Error::NoDevices);
        }
        let mut infos = [None; constants::MAX_MLA_PER_PROCESS];
        for (d, slot) in infos.iter_mut().enumerate().take(n as usize) {
            let info = self.drv.device_info(d as u32).map_err(Error::Driver)?;
            // What the driver says is checked before anything is sized from it.
            if let Err(e) = info.check() {
                error!("init: device {}: {}", d, e);
                return Err(e);
            }
            *slot = Some(info);
        }
        self.tree_attach(&mut ex, opts, n, &infos)?;
        let r = self
            .vcores_init(&opts.vcores, &mut ex)
            .and_then(|_| self.init_cores(n, &mut ex));
        if let Err(e) = r {
            self.teardown_cores(&ex);
            // Still under init_lock: reset to the all-zero UNINIT tree.
            self.zero_tree(&mut ex);
            return Err(e);
        }
        // Handles of any earlier runtime in this block (or anywhere) never match this one.
        self.st
            .epoch
            .store(crate::handle::next_epoch(), Ordering::Release);
        // Bound from here until the next init: views over other resources are refused.
        self.st.bound_drv.store(addr(self.drv), Ordering::Relaxed);
        self.st
            .bound_host
            .store(self.host.map_or(0, addr), Ordering::Relaxed);
        // Calls are let in when `_reopen` opens the gate.
        self.st.state.store(STATE_INIT, Ordering::Release);
        info!("nrt-core initialised: {} device(s)", n);
        Ok(())
    }

    fn init_cores(&self, n: u32, ex: &mut Exclusive<'_>) -> Result<()> {
        for d in 0..n {
            let g = self.dev_geom(&*ex, d);
            for t in 0..g.cores {
                self.core_bring_up(ex, d, t, &g)?;
            }
        }
        Ok(())
    }

    /// Frees what `init_cores` built for every core (GLOBAL allocators, model_dbs).
    fn teardown_cores(&self, ex: &Exclusive<'_>) {
        for d in 0..self.attached_devices(ex) {
            for t in 0..constants::TPBS_PER_MLA as u32 {
                self.core_tear_down(ex, d, t);
            }
        }
    }

    /// `tdrv_destroy` (spec §12): unloads every model (draining in-flight executions), frees
    /// every tensor set and every tensor, the scratchpad pages, the shared ext-isa copies and
    /// the GLOBAL allocators, and reclaims what the dmem API left behind. Afterwards the driver
    /// holds no memory of this runtime.
    ///
    /// Deliberate difference: libnrt's teardown leaves no tree behind; this keeps the tree's
    /// devices and ledger (all zero by then) readable until the next [`Nrt::init`], which
    /// clears it, so a closed runtime can still be inspected (`driver_pool_bytes_in_use`, the
    /// ledger, the last OOM). The C library clears its `tdrv_ctx_0` pointer at `nrt_close`,
    /// as libnrt does. The per-core GLOBAL allocators and model databases are gone, and every gated call
    /// fails with `Closed`.
    ///
    /// Calls racing `close` either complete before the teardown starts (close first waits for
    /// every API call in flight, see `Nrt::enter`) or fail with `Closed`. Executions and
    /// `ExecGuard`s hold a model reference, which close drains before it tears anything down
    /// (spec §4.5). Both waits are bounded (`crate::sync::wait_bounded`): when one gives up,
    /// `close` returns `Timeout` naming what it waited for (the calls in flight, or a model
    /// still referenced: an `ExecGuard` held past the bound or leaked, which
    /// `Models::revoke_exec` ends) and the runtime stays initialised, unchanged. A thread that
    /// runs a model or allocator callback, or whose own execution holds a core, would wait
    /// for itself: with a thread token (`crate::sync::set_thread_token_hook`) it is refused at
    /// once with `WouldDeadlock`.
    ///
    /// [`Error::DriverKept`] when the driver refused to free blocks of this runtime since
    /// `init` (during the close or before): the runtime is closed, and the driver still holds
    /// them ([`Nrt::driver_kept`]; the ledger keeps them booked).
    pub fn close(&self) -> Result<()> {
        // From a callback: refused before `init_lock`, which an `init` or `close` waiting for
        // this callback's call holds.
        if let Some(key) = self.st.reentry.mine() {
            return Err(Error::WouldDeadlock(crate::sync::reentry_key::wait_for(
                key,
            )));
        }
        let mut lock = self.st.init_lock.lock();
        self.check_bound()?;
        if self.state_word() != STATE_INIT {
            return Err(if self.state_word() == STATE_CLOSED {
                Error::Closed
            } else {
                Error::Uninitialized
            });
        }
        // An execution the calling thread began would be waited for below.
        self.refuse_own_exec_any()?;
        // New API calls fail from here on; wait for the ones already past the gate, then for
        // the model references (executions, guards) still out.
        self.st.state.store(STATE_CLOSED, Ordering::Release);
        let reopen = |e: Error| {
            self.st.state.store(STATE_INIT, Ordering::Release);
            self.st.active_calls.open();
            warn!("close: {}; the runtime stays initialised", e);
            e
        };
        self.st.active_calls.close_bounded().map_err(reopen)?;
        let ex = self
            .exclusive(&mut lock)
            .ok_or(NOT_EXCLUSIVE)
            .map_err(reopen)?;
        for vnc in (0..self.owned_vnc_count(&ex)).map(crate::vcore::LogicalCore::new) {
            let Ok(v) = self.vtpb_get_virtual_core(&ex, vnc) else {
                continue;
            };
            let Ok(tpb) = self.tpb(v.tpbs[0].device_id, v.tpbs[0].device_tpb_idx) else {
                continue;
            };
            self.wait_models_idle(tpb).map_err(reopen)?;
        }
        // No call is in flight: from here no handle of this runtime resolves again.
        self.st.epoch.store(0, Ordering::Release);
        self.unload_all_models(&ex);
        self.free_all_sets();
        self.free_all_tensors(&ex);
        for d in 0..self.attached_devices(&ex) {
            for t in 0..self.dev_geom(&ex, d).cores {
                let tpb = self.tpb_ptr(d, t);
                self.tdrv_scratchpad_free(&ex, tpb);
                self.ulib_free_shared(&ex, tpb);
            }
        }
        self.teardown_cores(&ex);
        let leftover = self.reclaim_leftover_dmems(&ex);
        if leftover > 0 {
            warn!(
                "close: freed {} allocation(s) still held through the dmem API",
                leftover
            );
        }
        // Readers of the closed runtime are welcome again (API calls see CLOSED and fail).
        self.st.active_calls.open();
        info!("nrt-core closed");
        // Closed either way; what the driver still holds of this runtime is said.
        match self.st.driver_kept.get() {
            (0, _) => Ok(()),
            (blocks, bytes) => Err(Error::DriverKept {
                blocks: u32::try_from(blocks).unwrap_or(u32::MAX),
                bytes,
                errno: ex.kept().get().errno.unwrap_or(errno::EIO),
            }),
        }
    }
}
