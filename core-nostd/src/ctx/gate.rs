//! The runtime's lifecycle state and the state gate (spec §7.2), and what a runtime reads of
//! its devices and driver outside any domain. Bring-up and teardown, which call into the
//! domains, are `crate::lifecycle`'s.

use super::*;

impl<'a> Nrt<'a> {
    /// The runtime's lifecycle state (libnrt's `NRT_STATE_*`, spec §7.2).
    pub fn lifecycle(&self) -> Lifecycle {
        match self.state_word() {
            STATE_INIT => Lifecycle::Init,
            STATE_CLOSED => Lifecycle::Closed,
            _ => Lifecycle::Uninit,
        }
    }

    /// The state word itself (`STATE_*`).
    pub(crate) fn state_word(&self) -> u32 {
        self.st.state.load(Ordering::Acquire)
    }

    /// The state gate of the public API (spec §7.2): `Uninitialized` before init, `Closed` after.
    pub fn check_state(&self) -> Result<()> {
        match self.state_word() {
            STATE_INIT => Ok(()),
            STATE_CLOSED => Err(Error::Closed),
            _ => Err(Error::Uninitialized),
        }
    }

    /// The state gate plus the in-flight count (spec §7.2, §12; [`gate_enter`], which loom
    /// checks): either this call finds the gate shut (and fails, touching nothing) or `close`
    /// sees the call and waits for its guard to drop before tearing down. It never blocks, so
    /// a gated call made from inside another cannot deadlock with `close`; but made after
    /// `close` began it fails, so a call's own sub-steps take the guard this returns instead
    /// of entering again ([`InCall`]; `execute`'s copies).
    #[inline]
    pub(crate) fn enter(&self) -> Result<InFlight<'a>> {
        self.pass_gate(false)
    }

    /// The gate for reading the runtime's state (the inspection calls): like [`Self::enter`],
    /// but a closed runtime may be read too. `close` keeps the tree (zeroed ledger included)
    /// until the next `init`, and reopens the gate once its teardown is done; `init` shuts it
    /// and waits for readers before rewriting the tree. So a reader sees a whole runtime, live
    /// or closed, or gets "not initialised" while `init` or `close` is at work.
    pub(crate) fn inspect(&self) -> Result<InFlight<'a>> {
        self.pass_gate(true)
    }

    /// [`Self::enter`] (`closed_readable` false) and [`Self::inspect`] (true).
    #[inline(always)]
    fn pass_gate(&self, closed_readable: bool) -> Result<InFlight<'a>> {
        let Some(shard) = self.st.active_calls.enter() else {
            return Err(Error::Closed);
        };
        let g = InFlight {
            active: &self.st.active_calls,
            shard,
            kept: core::cell::Cell::new(Kept::default()),
        };
        self.check_bound()?;
        match self.st.state.load(Ordering::Acquire) {
            STATE_INIT => Ok(g),
            STATE_CLOSED if closed_readable => Ok(g),
            STATE_CLOSED => Err(Error::Closed),
            _ => Err(Error::Uninitialized),
        }
    }

    /// Devices attached (`tdrv_ctx.num_mla`); 0 while the runtime is not initialised.
    pub fn num_devices(&self) -> u32 {
        match self.inspect() {
            Ok(call) => self.attached_devices(&call),
            Err(_) => 0,
        }
    }

    /// `(device, core)` when `p` is the `pcore` of one of the runtime's cores (address
    /// arithmetic only: a foreign pointer is never dereferenced).
    pub(crate) fn tree_pcore(&self, p: *const physical_core_t) -> Option<(u32, u32)> {
        let first = self.core_ext_base() as usize;
        let addr = (p as usize).checked_sub(first)?;
        let (i, rest) = (
            addr / core::mem::size_of::<CoreExt>(),
            addr % core::mem::size_of::<CoreExt>(),
        );
        if rest != core::mem::offset_of!(CoreExt, pcore)
            || i >= self.ctx_devices() as usize * constants::TPBS_PER_MLA
        {
            return None;
        }
        let (d, t) = (
            (i / constants::TPBS_PER_MLA) as u32,
            (i % constants::TPBS_PER_MLA) as u32,
        );
        core::ptr::eq(self.pcore_ptr(d, t).cast_const(), p).then_some((d, t))
    }

    /// Resolves `(device, core)` to its `tpb_t`, checked.
    pub(crate) fn tpb(&self, dev: u32, tpb: u32) -> Result<*mut tpb_t> {
        let pc = physical_core_t::new(dev, tpb);
        self.db_physical_core_get_mla_and_tpb(&pc).map(|(_, t)| t)
    }

    /// The body of [`crate::dmem::DeviceMemory::core_allocator`].
    pub(crate) fn core_allocator(&self, dev: u32, core: u32) -> Result<*mut dmem_allocator_t> {
        let _g = self.enter()?;
        let tpb = self.tpb(dev, core)?;
        let al = self.tpb_allocator(&_g, tpb);
        if al.is_null() {
            return Err(Error::CoreOutOfRange {
                device: dev,
                tpb: core,
            });
        }
        Ok(al)
    }

    /// The driver's statistics of a pool, checked ([`crate::driver::PoolStats::check`]):
    /// `Driver(errno)` when it refuses, `BadDriver` when what it says cannot be.
    pub fn pool_stats_checked(
        &self,
        dev: u32,
        host: bool,
        hbm: u32,
    ) -> Result<crate::driver::PoolStats> {
        let s = self.drv.pool_stats(dev, host, hbm).map_err(Error::Driver)?;
        s.check()?;
        Ok(s)
    }

    /// What the driver refused to free since the runtime's `init` (its `memory_free`
    /// failed): blocks it still holds, which the ledger keeps booked. Readable after `close`
    /// (until the next `init`); `Uninitialized` before the first `init`.
    pub fn driver_kept(&self) -> Result<DriverKept> {
        let _call = self.inspect()?;
        let (blocks, bytes) = self.st.driver_kept.get();
        Ok(DriverKept { blocks, bytes })
    }

    /// Bytes in use in the driver's pools of the attached devices (every HBM channel and the
    /// host DMA pool, spec §3.2): a per-driver figure, `capacity - free` of each pool, so it counts
    /// what every client of that driver holds, not only this runtime
    /// ([`Self::runtime_bytes_in_use`] is this runtime's). Readable while up and after
    /// `close`. Errors: the gate's (`Uninitialized` before the first `init` or while `init`
    /// or `close` is at work), the driver's refusal of a pool's statistics (`Driver`), and
    /// statistics that cannot be, such as more free bytes than capacity (`BadDriver`,
    /// [`Self::pool_stats_checked`]).
    pub fn driver_pool_bytes_in_use(&self) -> Result<u64> {
        let call = self.inspect()?;
        let mut used: u64 = 0;
        for d in 0..self.attached_devices(&call) {
            let g = self.dev_geom(&call, d);
            let pools = (0..g.channels).map(|h| (false, h)).chain([(true, 0)]);
            for (host, h) in pools {
                let s = self.pool_stats_checked(d, host, h)?;
                used = used.saturating_add(s.used());
            }
        }
        Ok(used)
    }
}
