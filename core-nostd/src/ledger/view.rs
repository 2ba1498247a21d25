//! [`Ledger`]: the runtime's usage ledger and statistics (spec §3.4, §10), a view borrowed
//! from [`Nrt::ledger`].

use super::*;

/// The runtime's usage ledger and statistics (spec §3.4, §10): [`Nrt::ledger`]. A reference
/// to the runtime view.
#[derive(Copy, Clone)]
pub struct Ledger<'n, 'a>(pub(crate) &'n Nrt<'a>);

impl<'a> Nrt<'a> {
    /// The ledger and statistics reads (spec §3.4, §10).
    #[inline]
    pub fn ledger(&self) -> Ledger<'_, 'a> {
        Ledger(self)
    }
}

impl<'a> Ledger<'_, 'a> {
    /// Device-wide aggregates of `dev` (spec §3.4). `Uninitialized` / `Closed` outside an
    /// initialised runtime, `DeviceOutOfRange` for a device that is not attached.
    #[inline]
    pub fn device_totals(&self, dev: u32) -> Result<DeviceTotals> {
        self.0.device_totals(dev)
    }

    /// Device bytes per HBM channel of `dev` (`dma_mem_log_t.memory_usage[4]`, spec §3.4);
    /// all zero for a device that is not attached, or while the runtime is not initialised.
    #[doc(alias = "ledger_hbm")]
    #[inline]
    pub fn hbm(&self, dev: u32) -> [u64; constants::MAX_HBM_CHANNELS] {
        self.0.ledger_hbm(dev)
    }

    /// Device bytes booked to physical core `core` under `usage` (a usage type, or
    /// [`UsageSel::Total`]).
    #[doc(alias = "ledger_device")]
    #[inline]
    pub fn device(&self, core: PhysicalCore, usage: impl Into<UsageSel>) -> u64 {
        self.0.ledger_device(core.device, core.core, usage)
    }

    /// Host DMA bytes booked to physical core `core` under `usage` (a usage type, or
    /// [`UsageSel::Total`]).
    #[doc(alias = "ledger_host")]
    #[inline]
    pub fn host(&self, core: PhysicalCore, usage: impl Into<UsageSel>) -> u64 {
        self.0.ledger_host(core.device, core.core, usage)
    }

    /// The whole ledger of one device ([`LedgerSnapshot`]), each core's rows read under that
    /// core's ledger lock (consistent per core: every row sums to its `[nc][22]`). All zero for
    /// a device that is not attached, or while the runtime is not initialised.
    #[doc(alias = "ledger_snapshot")]
    #[inline]
    pub fn snapshot(&self, dev: u32) -> LedgerSnapshot {
        let (device, host) = self.0.ledger_snapshot(dev);
        LedgerSnapshot { device, host }
    }

    /// Per-usage breakdown of logical core `vnc` (sum over its physical cores). `Closed`
    /// after `close` (docs/STATES.md); [`Inspector::logical_core_usage`] reads a closed runtime.
    #[doc(alias = "vnc_usage")]
    #[inline]
    pub fn logical_core_usage(&self, vnc: LogicalCore) -> Result<UsageBreakdown> {
        self.0.vnc_usage(vnc)
    }

    /// `dmem_get_memory_stats` (spec §7.4): used = Σ `[nc][22]` over the logical core's
    /// physical cores (on every HBM); limit = `aws_hal_get_hbm_size()` of the HBM they
    /// allocate from by default, each HBM counted once. The limit does not depend on the LNC
    /// size: at LNC 1 on trn2 each of the two cores on an HBM reports that whole HBM (they
    /// share it, first come first served). Allocations placed on other HBMs (`hbm_idx`) count
    /// as used, so used can exceed the limit.
    ///
    /// `Closed` after `close`, as `nrt_get_vnc_memory_stats` (docs/STATES.md);
    /// [`Inspector::memory_stats`] reads a closed runtime.
    #[doc(alias = "dmem_get_memory_stats")]
    #[inline]
    pub fn memory_stats(&self, vnc: LogicalCore) -> Result<VncMemoryStats> {
        self.0.dmem_get_memory_stats(vnc)
    }

    /// Resets every peak of logical core `vnc` to its current value (CUDA-style
    /// `reset_peak_memory_stats`). Under the ledger lock no update can slip between the load
    /// of a row and the store of its peak.
    #[inline]
    pub fn reset_peak(&self, vnc: LogicalCore) -> Result<()> {
        self.0.reset_peak(vnc)
    }

    /// Writes the OOM table captured when the last device OOM happened (what libnrt dumps and
    /// writes to a file on `ENOMEM`); nothing when there was none.
    #[inline]
    pub fn last_oom_dump(&self, w: &mut dyn Write) -> fmt::Result {
        self.0.last_oom_dump(w)
    }

    /// The failing channel of the most recent device OOM, measured at the moment of the
    /// failure (what the OOM table's "why" line says, as figures): its HBM, its figures in the
    /// request's terms and the cause. `None` when there was no device OOM, or its channel
    /// could not be measured.
    #[inline]
    pub fn last_oom_channel(&self) -> Option<crate::oom::FailingChannel> {
        self.0.last_oom_channel()
    }

    /// The most recent device OOM of this runtime, if any.
    #[inline]
    pub fn last_oom(&self) -> Option<Error> {
        self.0.last_oom()
    }

    /// `dml_dump` / `dml_log_dev_mem` (spec §3.4): the utilisation table of device `dev` —
    /// one row per core with total and the categories users know from libnrt's OOM reports —
    /// followed by the `top` largest live allocations with their hints. Heap-free.
    #[doc(alias = "dump_ledger")]
    #[inline]
    pub fn dump(
        &self,
        w: &mut dyn Write,
        dev: u32,
        failed: Option<&Error>,
        top: usize,
    ) -> fmt::Result {
        self.0.dump_ledger(w, dev, failed, top)
    }
}

/// One device's ledger ([`Ledger::snapshot`], spec §3.4): bytes per `[physical core][usage]`,
/// column 22 the core's total.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LedgerSnapshot {
    /// Device memory (`memory_usage_nc`).
    pub device: [[u64; 23]; 8],
    /// Host DMA memory, booked apart as libnrt does.
    pub host: [[u64; 23]; 8],
}
