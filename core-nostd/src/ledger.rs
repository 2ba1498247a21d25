//! The per-device usage ledger `mla.dmem_logger` (spec §3.4, §7.4): bookkeeping on every alloc
//! and free, peaks like the driver's sysfs counters, logical-core memory stats, and the OOM
//! dump — written without heap into any `core::fmt::Write`.
//!
//! The reading calls that return a value (cells, snapshots, totals, dumps) pass the state
//! gate's read side (`Nrt::inspect`): they answer for a live runtime and for a closed one
//! (whose ledger `close` keeps, zeroed, until the next `init`), and 0 before the first `init`
//! and while `init` or `close` is at work. The ones that return a `Result` are API calls and
//! answer `Uninitialized` / `Closed` as every API call does (docs/STATES.md); [`Inspector`]
//! reads them from a closed runtime.
// Pointer arguments (a core's `tpb_t`, dmems, sets) are never dereferenced here: they go to
// the accessors of the modules that own the memory (`ctx`, `arena`), which re-derive or check
// them (`Nrt::scratchpad_lock`, `Nrt::dmem_fixed`, `Arena::with_live`), so a stale or foreign
// pointer is an error or a no-op, not undefined behaviour (docs/UNSAFE.md).
#![deny(unsafe_code)]

mod view;

pub use view::{Ledger, LedgerSnapshot};

use crate::atomic::AtomicU64;
use core::fmt::{self, Write};
use core::sync::atomic::Ordering;

use crate::abi::tables::{aggr_index, category_for};
use crate::abi::*;
use crate::cstr::{c_name, mb, Printable};
use crate::ctx::{DevExt, DmemFixed, InCall, Nrt};
use crate::device::PhysicalCore;
use crate::dmem::{Action, Booking};
use crate::error::{Error, Result};
use crate::oom::{write_free_histogram, write_hbm_line};
use crate::vcore::LogicalCore;

const TOTAL: usize = constants::USAGE_TYPE_MAX_INDEX;

/// A column of the per-core ledger (`memory_usage_nc[nc][usage]`, spec §3.4): one usage type's
/// bytes, or the per-core total that libnrt keeps at index 22 (`DMA_MEM_USAGE_TYPE_MAX`), named
/// rather than a magic number.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum UsageSel {
    /// The bytes booked under one usage type.
    Usage(dma_mem_usage_type_t),
    /// Every usage type's bytes together (the ledger's index 22).
    Total,
}

impl UsageSel {
    /// The ledger column: the usage type's value, or 22 for the total.
    pub const fn index(self) -> usize {
        match self {
            UsageSel::Usage(u) => u as usize,
            UsageSel::Total => TOTAL,
        }
    }
    /// The column at ledger index `i` (0..=21 a usage type, 22 the total); `None` past it.
    pub fn from_index(i: usize) -> Option<Self> {
        if i == TOTAL {
            return Some(UsageSel::Total);
        }
        u32::try_from(i)
            .ok()
            .and_then(dma_mem_usage_type_t::from_raw)
            .map(UsageSel::Usage)
    }
}

impl From<dma_mem_usage_type_t> for UsageSel {
    fn from(u: dma_mem_usage_type_t) -> Self {
        UsageSel::Usage(u)
    }
}

/// Device-wide aggregates of one device (`dma_mem_log_t`'s totals, spec §3.4), as
/// [`Ledger::device_totals`](crate::ledger::Ledger::device_totals) returns them.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DeviceTotals {
    /// Device (HBM) bytes booked on the device.
    pub device_bytes: u64,
    /// Host DMA bytes booked to the device.
    pub host_bytes: u64,
    /// High-water mark of `device_bytes`.
    pub device_peak: u64,
    /// High-water mark of `host_bytes`.
    pub host_peak: u64,
    /// Device allocations refused for want of HBM (OOMs).
    pub device_ooms: u64,
}

/// Used / limit of a logical core (`nrt_get_vnc_memory_stats`, spec §7.4).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct VncMemoryStats {
    /// Device bytes booked to the logical core's physical cores (`[nc][22]` summed).
    pub bytes_used: u64,
    /// HBM capacity attributed to the logical core.
    pub bytes_limit: u64,
    /// The sum of the physical cores' high-water marks (the driver keeps peaks per core, as
    /// its sysfs counters do). For a logical core of two cores whose peaks came at different
    /// times this is an upper bound on the high-water mark of `bytes_used`, not that mark.
    pub bytes_peak: u64,
}

/// A per-usage breakdown of one logical core: `[usage]` current and peak, device and host.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct UsageBreakdown {
    /// Device bytes per usage type; index 22 is the total.
    pub device: [u64; 23],
    /// Device peak per usage type.
    pub device_peak: [u64; 23],
    /// Host DMA bytes per usage type; index 22 is the total.
    pub host: [u64; 23],
    /// Host peak per usage type.
    pub host_peak: [u64; 23],
}

impl UsageBreakdown {
    /// Device bytes per aggregate class (index = [`mem_aggr_index_t`], the 12 classes of
    /// `dmem_usage_type_to_aggr_index`, spec §3.3).
    pub fn device_by_aggr(&self) -> [u64; mem_aggr_index_t::COUNT] {
        roll_up_aggr(&self.device)
    }
    /// Host bytes per aggregate class.
    pub fn host_by_aggr(&self) -> [u64; mem_aggr_index_t::COUNT] {
        roll_up_aggr(&self.host)
    }
    /// Device bytes per driver category (index = [`mem_alloc_category_t`], the byte of
    /// `dmem_usage_type_to_device_category`: what the driver's sysfs counters show).
    pub fn device_by_category(&self) -> [u64; CATEGORY_COUNT] {
        roll_up_category(&self.device, dma_mem_location_t::TONGA_DRAM)
    }
    /// Host bytes per driver category (`dmem_usage_type_to_host_category`).
    pub fn host_by_category(&self) -> [u64; CATEGORY_COUNT] {
        roll_up_category(&self.host, dma_mem_location_t::HOST_DRAM)
    }
}

/// Driver categories, `mem_alloc_category_t` 0..=20 (20 = MAX, the sentinel).
pub const CATEGORY_COUNT: usize = 21;

/// Bytes of a `[usage]` row per aggregate class (index = [`mem_aggr_index_t`]; through
/// `dmem_usage_type_to_aggr_index`, spec §3.3).
pub fn roll_up_aggr(v: &[u64; 23]) -> [u64; mem_aggr_index_t::COUNT] {
    let mut out = [0u64; mem_aggr_index_t::COUNT];
    for u in dma_mem_usage_type_t::all() {
        out[aggr_index(u) as usize] += v[u as usize];
    }
    out
}

/// Bytes of a `[usage]` row per driver category at `loc` (index = [`mem_alloc_category_t`];
/// through `dmem_usage_type_to_{host,device}_category`, spec §3.3).
pub fn roll_up_category(v: &[u64; 23], loc: dma_mem_location_t) -> [u64; CATEGORY_COUNT] {
    let mut out = [0u64; CATEGORY_COUNT];
    for u in dma_mem_usage_type_t::all() {
        out[(category_for(loc, u) as usize).min(CATEGORY_COUNT - 1)] += v[u as usize];
    }
    out
}

/// neuron-monitor's classes of a core's device memory (`neuroncore_memory_usage`, public
/// interfaces §5), each the driver device categories it sums: what `stats --json` and the
/// scenario expectations call `tensors`, `constants`, `model_code`, `model_shared_scratchpad`
/// and `runtime_memory` (everything else: notifications, DMA rings, collectives, private
/// scratchpad, driver memory).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MonitorClass {
    /// TENSORS_DEVICE.
    Tensors,
    /// CONSTANTS_DEVICE.
    Constants,
    /// CODE_DEVICE.
    ModelCode,
    /// SCRATCHPAD_DEVICE and CONTIGUOUS_SCRATCHPAD_DEVICE.
    ModelSharedScratchpad,
    /// Every other device category.
    RuntimeMemory,
}

impl MonitorClass {
    /// All five, in neuron-monitor's order.
    pub const ALL: [MonitorClass; 5] = [
        MonitorClass::Constants,
        MonitorClass::ModelCode,
        MonitorClass::ModelSharedScratchpad,
        MonitorClass::RuntimeMemory,
        MonitorClass::Tensors,
    ];
    /// neuron-monitor's JSON name.
    pub const fn name(self) -> &'static str {
        match self {
            MonitorClass::Tensors => "tensors",
            MonitorClass::Constants => "constants",
            MonitorClass::ModelCode => "model_code",
            MonitorClass::ModelSharedScratchpad => "model_shared_scratchpad",
            MonitorClass::RuntimeMemory => "runtime_memory",
        }
    }
    /// The class of a usage type's device bytes (through its device category byte).
    pub const fn of_usage(u: dma_mem_usage_type_t) -> MonitorClass {
        use mem_alloc_category_t::*;
        match mem_alloc_category_t::from_raw(category_for(dma_mem_location_t::TONGA_DRAM, u) as u32)
        {
            Some(TENSORS_DEVICE) => MonitorClass::Tensors,
            Some(CONSTANTS_DEVICE) => MonitorClass::Constants,
            Some(CODE_DEVICE) => MonitorClass::ModelCode,
            Some(SCRATCHPAD_DEVICE | CONTIGUOUS_SCRATCHPAD_DEVICE) => {
                MonitorClass::ModelSharedScratchpad
            }
            _ => MonitorClass::RuntimeMemory,
        }
    }
    /// The class's bytes in a `[usage]` row of device bytes.
    pub fn of(self, device: &[u64; 23]) -> u64 {
        dma_mem_usage_type_t::all()
            .filter(|u| MonitorClass::of_usage(*u) as u8 == self as u8)
            .map(|u| device[u as usize])
            .sum()
    }
}

/// The reads of a runtime that also answer once it is closed ([`Nrt::inspector`]).
///
/// The API calls of [`Nrt`] answer `Closed` after `close`, as libnrt's do (docs/STATES.md).
/// `close` keeps the tree and its zeroed ledger (peaks included) until the next `init`, and a
/// report of what a closed runtime left behind (`nrt-dmem stats` after a scenario that closes)
/// reads it through these: a live runtime, or a closed one until the next `init`;
/// `Uninitialized` before the first `init` and while `init` is at work.
#[derive(Copy, Clone)]
pub struct Inspector<'a>(Nrt<'a>);

impl<'a> Nrt<'a> {
    /// The reads that also answer for a closed runtime ([`Inspector`]).
    pub fn inspector(&self) -> Inspector<'a> {
        Inspector(*self)
    }
}

impl Inspector<'_> {
    /// [`Ledger::memory_stats`](crate::ledger::Ledger::memory_stats), also after `close`.
    #[doc(alias = "dmem_get_memory_stats")]
    pub fn memory_stats(&self, vnc: LogicalCore) -> Result<VncMemoryStats> {
        let call = self.0.inspect()?;
        self.0.vnc_memory_stats(&call, vnc)
    }

    /// [`Ledger::logical_core_usage`](crate::ledger::Ledger::logical_core_usage), also after `close`.
    #[doc(alias = "vnc_usage")]
    pub fn logical_core_usage(&self, vnc: LogicalCore) -> Result<UsageBreakdown> {
        let call = self.0.inspect()?;
        self.0.vnc_breakdown(&call, vnc)
    }

    /// [`Nrt::logical_core_entry`], also after `close`.
    #[doc(alias = "virtual_core")]
    pub fn logical_core_entry(&self, vnc: LogicalCore) -> Result<virtual_core_t> {
        let call = self.0.inspect()?;
        self.0.vtpb_get_virtual_core(&call, vnc).copied()
    }
}

/// Adds to a counter and raises its high-water mark. Caller holds the core's ledger lock, so
/// plain loads and stores suffice: one lock acquisition replaces three read-modify-writes per
/// update.
#[inline]
fn add_locked(cur: &AtomicU64, peak: &AtomicU64, delta: u64) {
    let now = cur.load(Ordering::Relaxed).wrapping_add(delta);
    cur.store(now, Ordering::Relaxed);
    if now > peak.load(Ordering::Relaxed) {
        peak.store(now, Ordering::Relaxed);
    }
}

/// Takes from a counter (caller holds the core's ledger lock).
#[inline]
fn sub_locked(cur: &AtomicU64, delta: u64) {
    cur.store(
        cur.load(Ordering::Relaxed).wrapping_sub(delta),
        Ordering::Relaxed,
    );
}

/// The sum of every core's `[nc][22]` (relaxed loads; no lock).
#[inline]
fn core_totals(rows: &[[AtomicU64; 23]; 8]) -> u64 {
    rows.iter().map(|r| r[TOTAL].load(Ordering::Relaxed)).sum()
}

impl Nrt<'_> {
    /// `dml_add_entry` by pointer (spec §3.2 step 6): resolves device `mla` in the tree and
    /// reads `m`'s booking, then [`Self::dml_book`]. A pointer outside the tree, or a dmem that
    /// is not live, books nothing. The dmem path books through `dml_book` directly, with
    /// what it holds already.
    #[cfg(test)]
    pub(crate) fn dml_add_entry(
        &self,
        call: &impl InCall,
        mla: *mut mla_t,
        action: Action,
        m: *const dmem_t,
    ) {
        // The device is resolved, not trusted: a pointer outside the tree books nothing, as
        // does a dmem that is not live (the caller owns `m`: `owned_dmem_fixed`).
        let (Some(dev), Some(d)) = (self.mla_index(mla), self.owned_dmem_fixed(m)) else {
            return;
        };
        self.dml_book(
            call,
            &Booking {
                dev,
                nc: d.nc_id,
                usage: d.mem_usage_type,
                channel: d.tdram_channel,
                bytes: d.allocated_size,
                host: d.mem_type == dma_mem_location_t::HOST_DRAM as u32,
            },
            action,
        );
    }

    /// `dml_add_entry` (spec §3.2 step 6): books a dmem (`b`) in its device's ledger (`[nc][usage]` and
    /// `[nc][22]`, device or host side), updates peaks and aggregates, and emits the trace line.
    ///
    /// Deliberate difference: spec §3.4 books every byte in `memory_usage_nc`. Host DMA bytes
    /// go to the project's own `host_usage_nc` rows instead (in the per-device side table
    /// `DevExt`, see docs/LAYOUT.md), so `memory_usage_nc`, its `[nc][22]` total and the `used` of
    /// `nrt_get_vnc_memory_stats` are HBM bytes, the figure users compare with an HBM limit.
    /// The host figures are reported next to them (`ledger_host`, `vnc_usage`, the OOM table).
    ///
    /// No device-wide counter is written: the update takes only its core's
    /// lock and touches only its core's rows and per-channel figures, so allocations on
    /// different cores share no lock and no hot cache line. The device totals are sums of the
    /// cores' `[nc][22]` taken on read. The device peaks are raised after an allocation to the
    /// sum of every core's `[nc][22]` as this call reads them (other cores' rows are only
    /// loaded): exact while one core of the device allocates at a time; with allocations
    /// and frees racing on several cores, the peak can be off by the bytes of the updates in
    /// flight during that read.
    ///
    /// The caller holds the booking already (the dmem path: the allocation it just made, the
    /// dmem it finalises), so nothing is resolved again: `b.dev` is a device of the tree (the
    /// caller resolved it); the core and usage are clamped into the rows.
    #[inline(always)]
    pub(crate) fn dml_book(&self, call: &impl InCall, b: &Booking, action: Action) {
        let dev = b.dev;
        let nc = (b.nc as usize).min(constants::TPBS_PER_MLA - 1);
        let usage = (b.usage as usize).min(TOTAL - 1);
        let bytes = b.bytes;
        let host = b.host;
        let ext = self.dev_ext(dev);
        let (rows, peaks, total_peak) = if host {
            (&ext.host_usage_nc, &ext.host_peak_nc, &ext.peak_host_bytes)
        } else {
            (
                self.ledger_rows(dev),
                &ext.dmem_peak_nc,
                &ext.peak_device_bytes,
            )
        };
        // `memory_usage[4]`: device bytes per HBM channel (spec §3.4), kept per core.
        let channel = (!host)
            .then(|| ext.hbm_nc[nc].0.get(b.channel as usize))
            .flatten();
        let g = ext.ledger_locks[nc].0.lock();
        match action {
            Action::Alloc => {
                add_locked(&rows[nc][usage], &peaks[nc][usage], bytes);
                add_locked(&rows[nc][TOTAL], &peaks[nc][TOTAL], bytes);
                if let Some(c) = channel {
                    c.store(c.load(Ordering::Relaxed) + bytes, Ordering::Relaxed);
                }
            }
            Action::Free => {
                sub_locked(&rows[nc][usage], bytes);
                sub_locked(&rows[nc][TOTAL], bytes);
                if let Some(c) = channel {
                    sub_locked(c, bytes);
                }
            }
        }
        drop(g);
        if action == Action::Alloc {
            let sum = core_totals(rows);
            if sum > total_peak.load(Ordering::Relaxed) {
                total_peak.fetch_max(sum, Ordering::Relaxed);
            }
        }
        // The trace line's figures are gathered in a cold call, only when trace logging is
        // on: this is the allocation hot path, and its bookings stay in registers.
        if crate::fmt::trace_enabled() {
            self.trace_usage(
                call,
                dev,
                b.channel,
                bytes,
                rows[nc][TOTAL].load(Ordering::Relaxed),
            );
        }
    }

    /// The `MEM_USAGE` trace line of one booking (spec §3.2 step 6).
    #[cold]
    #[inline(never)]
    fn trace_usage(&self, call: &impl InCall, dev: u32, channel: u32, bytes: u64, core_total: u64) {
        trace!(
            "MEM_USAGE: {} bytes, channel {}, total ({}/{})",
            bytes,
            channel,
            core_total,
            self.dev_geom(call, dev).channel_size
        );
    }

    /// Bytes this runtime holds (spec §3.4): its ledger's device (HBM) and host DMA bytes over
    /// every attached device, a per-runtime figure (another runtime or process on the same
    /// driver is not counted; [`Nrt::driver_pool_bytes_in_use`] is the driver's). 0 after
    /// `close` (readable then). Errors: the gate's (`Uninitialized` before the first `init`
    /// or while `init` or `close` is at work).
    pub fn runtime_bytes_in_use(&self) -> Result<u64> {
        let call = self.inspect()?;
        let mut held: u64 = 0;
        for dev in 0..self.attached_devices(&call) {
            let host = core_totals(&self.dev_ext(dev).host_usage_nc);
            held = held
                .saturating_add(core_totals(self.ledger_rows(dev)))
                .saturating_add(host);
        }
        Ok(held)
    }

    /// The body of [`crate::ledger::Ledger::device_totals`].
    pub(crate) fn device_totals(&self, dev: u32) -> Result<DeviceTotals> {
        let call = self.inspect()?;
        if dev >= self.attached_devices(&call) {
            return Err(Error::DeviceOutOfRange(dev));
        }
        let ext = self.dev_ext(dev);
        let l = |a: &AtomicU64| a.load(Ordering::Acquire);
        Ok(DeviceTotals {
            device_bytes: core_totals(self.ledger_rows(dev)),
            host_bytes: core_totals(&ext.host_usage_nc),
            device_peak: l(&ext.peak_device_bytes),
            host_peak: l(&ext.peak_host_bytes),
            device_ooms: l(&ext.oom_count),
        })
    }

    /// The body of [`crate::ledger::Ledger::hbm`].
    pub(crate) fn ledger_hbm(&self, dev: u32) -> [u64; constants::MAX_HBM_CHANNELS] {
        let mut out = [0; constants::MAX_HBM_CHANNELS];
        let Ok(call) = self.inspect() else {
            return out;
        };
        if dev >= self.attached_devices(&call) {
            return out;
        }
        // Summed over the cores' per-channel figures (each core's own, `dml_add_entry`).
        for core in &self.dev_ext(dev).hbm_nc {
            for (o, c) in out.iter_mut().zip(&core.0) {
                *o += c.load(Ordering::Relaxed);
            }
        }
        out
    }

    /// The body of [`crate::ledger::Ledger::device`].
    pub(crate) fn ledger_device(&self, dev: u32, tpb: u32, usage: impl Into<UsageSel>) -> u64 {
        self.ledger_cell(dev, tpb, usage.into().index(), false)
    }

    /// The body of [`crate::ledger::Ledger::host`].
    pub(crate) fn ledger_host(&self, dev: u32, tpb: u32, usage: impl Into<UsageSel>) -> u64 {
        self.ledger_cell(dev, tpb, usage.into().index(), true)
    }

    /// One ledger cell, bounds-checked (0 outside the ledger, or while the runtime is not
    /// initialised).
    fn ledger_cell(&self, dev: u32, tpb: u32, usage: usize, host: bool) -> u64 {
        let Ok(call) = self.inspect() else {
            return 0;
        };
        if dev >= self.attached_devices(&call)
            || tpb as usize >= constants::TPBS_PER_MLA
            || usage > TOTAL
        {
            return 0;
        }
        let rows = if host {
            &self.dev_ext(dev).host_usage_nc
        } else {
            self.ledger_rows(dev)
        };
        rows[tpb as usize][usage].load(Ordering::Acquire)
    }

    /// The body of [`crate::ledger::Ledger::snapshot`].
    pub(crate) fn ledger_snapshot(&self, dev: u32) -> ([[u64; 23]; 8], [[u64; 23]; 8]) {
        match self.inspect() {
            Ok(call) => self.read_ledger(&call, dev),
            Err(_) => ([[0; 23]; 8], [[0; 23]; 8]),
        }
    }

    /// [`Self::ledger_snapshot`] as a step of a gated call (`call`).
    fn read_ledger(&self, call: &impl InCall, dev: u32) -> ([[u64; 23]; 8], [[u64; 23]; 8]) {
        let mut d = [[0u64; 23]; 8];
        let mut h = [[0u64; 23]; 8];
        if dev >= self.attached_devices(call) {
            return (d, h);
        }
        let ext = self.dev_ext(dev);
        let rows = self.ledger_rows(dev);
        let host = &ext.host_usage_nc;
        for nc in 0..8 {
            let _g = ext.ledger_locks[nc].0.lock();
            for u in 0..23 {
                d[nc][u] = rows[nc][u].load(Ordering::Relaxed);
                h[nc][u] = host[nc][u].load(Ordering::Relaxed);
            }
        }
        (d, h)
    }

    /// Calls `f(row, ext, nc)` (`row`: the core's `memory_usage_nc[nc]`) for each physical
    /// core of logical core `vnc`, with that
    /// core's ledger lock held: one consistent reading (or peak reset) per core.
    fn for_each_vnc_core(
        &self,
        call: &impl InCall,
        vnc: LogicalCore,
        f: impl FnMut(&[AtomicU64; 23], &DevExt, usize),
    ) -> Result<()> {
        self.for_each_core_locked(self.vcore_tpbs(call, vnc)?, f);
        Ok(())
    }

    /// [`Self::for_each_vnc_core`] over physical cores already resolved.
    fn for_each_core_locked(
        &self,
        cores: &[physical_core_t],
        mut f: impl FnMut(&[AtomicU64; 23], &DevExt, usize),
    ) {
        for pc in cores {
            let rows = self.ledger_rows(pc.device_id);
            let ext = self.dev_ext(pc.device_id);
            let nc = (pc.device_tpb_idx as usize).min(constants::TPBS_PER_MLA - 1);
            let _g = ext.ledger_locks[nc].0.lock();
            f(&rows[nc], ext, nc);
        }
    }

    /// The body of [`crate::ledger::Ledger::logical_core_usage`].
    pub(crate) fn vnc_usage(&self, vnc: LogicalCore) -> Result<UsageBreakdown> {
        let call = self.enter()?;
        self.vnc_breakdown(&call, vnc)
    }

    /// [`Self::vnc_usage`] as a step of a gated call (`call`).
    fn vnc_breakdown(&self, call: &impl InCall, vnc: LogicalCore) -> Result<UsageBreakdown> {
        let mut b = UsageBreakdown::default();
        self.for_each_vnc_core(call, vnc, |row, ext, nc| {
            for (u, cell) in row.iter().enumerate() {
                b.device[u] += cell.load(Ordering::Acquire);
                b.device_peak[u] += ext.dmem_peak_nc[nc][u].load(Ordering::Acquire);
                b.host[u] += ext.host_usage_nc[nc][u].load(Ordering::Acquire);
                b.host_peak[u] += ext.host_peak_nc[nc][u].load(Ordering::Acquire);
            }
        })?;
        Ok(b)
    }

    /// The body of [`crate::ledger::Ledger::memory_stats`].
    pub(crate) fn dmem_get_memory_stats(&self, vnc: LogicalCore) -> Result<VncMemoryStats> {
        let call = self.enter()?;
        self.vnc_memory_stats(&call, vnc)
    }

    /// [`Self::dmem_get_memory_stats`] as a step of a gated call (`call`).
    pub(crate) fn vnc_memory_stats(
        &self,
        call: &impl InCall,
        vnc: LogicalCore,
    ) -> Result<VncMemoryStats> {
        let mut s = VncMemoryStats::default();
        let cores = self.vcore_tpbs(call, vnc)?;
        self.for_each_core_locked(cores, |row, ext, nc| {
            s.bytes_used += row[TOTAL].load(Ordering::Acquire);
            s.bytes_peak += ext.dmem_peak_nc[nc][TOTAL].load(Ordering::Acquire);
        });
        let channel = |pc: &physical_core_t| {
            let g = self.dev_geom(call, pc.device_id);
            (pc.device_id, g.default_hbm(pc.device_tpb_idx))
        };
        for (i, pc) in cores.iter().enumerate() {
            if !cores[..i].iter().any(|q| channel(q) == channel(pc)) {
                s.bytes_limit += self.dev_geom(call, pc.device_id).channel_size;
            }
        }
        Ok(s)
    }

    /// The body of [`crate::ledger::Ledger::reset_peak`].
    pub(crate) fn reset_peak(&self, vnc: LogicalCore) -> Result<()> {
        let call = self.enter()?;
        self.for_each_vnc_core(&call, vnc, |row, ext, nc| {
            for (u, cell) in row.iter().enumerate() {
                let d = cell.load(Ordering::Acquire);
                ext.dmem_peak_nc[nc][u].store(d, Ordering::Release);
                let h = ext.host_usage_nc[nc][u].load(Ordering::Acquire);
                ext.host_peak_nc[nc][u].store(h, Ordering::Release);
            }
        })
    }

    /// Remembers the last device OOM for [`Self::last_oom`] and captures the OOM table of its
    /// device as it is at this moment (`dml_driver_dump`, spec §3.2), before any caller rolls
    /// back what it had allocated.
    pub(crate) fn record_oom(&self, call: &impl InCall, e: Error) {
        let dev = match e {
            Error::DeviceOom { device, .. } => device,
            _ => 0,
        };
        let channel = self.failing_channel(call, dev, &e);
        let mut rec = self.st.ledger.oom.lock();
        rec.record(e, channel);
        // The table is written with the lock held (dump_ledger does not take it), so a reader
        // sees the error and its table together.
        let mut w = FixedWriter {
            buf: &mut rec.dump,
            len: 0,
        };
        let _ = self.write_ledger(call, &mut w, dev, Some(&e), 5);
        rec.dump_len = w.len;
    }

    /// The body of [`crate::ledger::Ledger::last_oom_dump`].
    pub(crate) fn last_oom_dump(&self, w: &mut dyn Write) -> fmt::Result {
        let rec = self.st.ledger.oom.lock();
        if !rec.set {
            return Ok(());
        }
        w.write_str(rec.dump_text())
    }

    /// The body of [`crate::ledger::Ledger::last_oom_channel`].
    pub(crate) fn last_oom_channel(&self) -> Option<crate::oom::FailingChannel> {
        self.st.ledger.oom.lock().channel()
    }

    /// The body of [`crate::ledger::Ledger::last_oom`].
    pub(crate) fn last_oom(&self) -> Option<Error> {
        self.st.ledger.oom.lock().error()
    }

    /// The body of [`crate::ledger::Ledger::dump`].
    pub(crate) fn dump_ledger(
        &self,
        w: &mut dyn Write,
        dev: u32,
        failed: Option<&Error>,
        top: usize,
    ) -> fmt::Result {
        match self.inspect() {
            Ok(call) => self.write_ledger(&call, w, dev, failed, top),
            Err(e) => writeln!(w, "no OOM table: {e}"),
        }
    }

    /// [`Self::dump_ledger`] as a step of a gated call (`call`: the OOM path, inside the
    /// failing call).
    fn write_ledger(
        &self,
        call: &impl InCall,
        w: &mut dyn Write,
        dev: u32,
        failed: Option<&Error>,
        top: usize,
    ) -> fmt::Result {
        if dev >= self.attached_devices(call) {
            return writeln!(w, "ND {dev}: not attached");
        }
        let failing = failed.and_then(|e| self.failing_channel(call, dev, e));
        if let Some(e) = failed {
            writeln!(w, "{e}")?;
        }
        if let Some(c) = &failing {
            writeln!(w, "{}", c.cause)?;
        }
        let g = self.dev_geom(call, dev);
        writeln!(
            w,
            "ND {} memory usage ({} HBM x {}MB, {} cores):",
            dev,
            g.channels,
            mb(g.channel_size),
            g.cores
        )?;
        writeln!(
            w,
            "  {:<6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
            "core",
            "total",
            "model code",
            "tensors",
            "constants",
            "shared scr",
            "dma rings",
            "collectives",
            "runtime"
        )?;
        let (rows, _) = self.read_ledger(call, dev);
        use mem_alloc_category_t::*;
        for (nc, r) in rows.iter().enumerate().take(g.cores as usize) {
            // Columns by the driver category of each usage (dmem_usage_type_to_device_category).
            let by = roll_up_category(r, dma_mem_location_t::TONGA_DRAM);
            let at = |c: mem_alloc_category_t| by[c as usize];
            let code = at(CODE_DEVICE);
            let rings = at(DMA_RINGS_DEVICE);
            let coll = at(COLLECTIVES_DEVICE);
            let tens = at(TENSORS_DEVICE);
            let cons = at(CONSTANTS_DEVICE);
            let scr = at(SCRATCHPAD_DEVICE) + at(CONTIGUOUS_SCRATCHPAD_DEVICE);
            let runtime = r[TOTAL] - code - rings - coll - tens - cons - scr;
            writeln!(
                w,
                "  NC {:<3} {:>10}MB {:>10}MB {:>10}MB {:>10}MB {:>10}MB {:>10}MB {:>10}MB {:>10}MB",
                nc,
                mb(r[TOTAL]),
                mb(code),
                mb(tens),
                mb(cons),
                mb(scr),
                mb(rings),
                mb(coll),
                mb(runtime)
            )?;
        }
        for h in 0..g.channels {
            match &failing {
                Some(c) if c.hbm == h => write_hbm_line(w, h, &c.shown, c.shown_align)?,
                _ => {
                    if let Ok(s) = self.pool_stats_checked(dev, false, h) {
                        write_hbm_line(w, h, &s, 0)?;
                    }
                }
            }
            if let Ok((main, small)) = self.drv.free_histogram(dev, h) {
                write_free_histogram(w, &main, &small)?;
            }
        }
        // The largest live allocations, found with a fixed-size selection (no heap). Each
        // entry is copied while the arena lock keeps its slot from being released or reused,
        // and only once the dmem is published (see `TopEntry::read`).
        let top = top.min(TOP_MAX);
        let mut best = [TopEntry::EMPTY; TOP_MAX];
        self.for_each_dmem_fixed(|d| {
            let Some(e) = TopEntry::of(&d, dev) else {
                return;
            };
            if let Some(min_i) = (0..top).min_by_key(|i| best[*i].size) {
                if e.size > best[min_i].size {
                    best[min_i] = e;
                }
            }
        });
        best[..top].sort_unstable_by_key(|b| core::cmp::Reverse(b.size));
        if best.iter().take(top).any(|b| b.size > 0) {
            writeln!(w, "  largest live allocations:")?;
        }
        for e in best.iter().take(top).filter(|e| e.size > 0) {
            let usage = dma_mem_usage_type_t::from_raw(e.usage)
                .map(|u| u.short_name())
                .unwrap_or("?");
            let loc = if e.mem_type == dma_mem_location_t::HOST_DRAM as u32 {
                "host"
            } else {
                "hbm"
            };
            writeln!(
                w,
                "    {:>10}MB  NC {} {} {} usage {:<20} {}",
                mb(e.size),
                e.nc_id,
                loc,
                e.channel,
                usage,
                Printable(c_name(&e.hint))
            )?;
        }
        Ok(())
    }
}

/// How many of the largest live allocations an OOM dump can list.
const TOP_MAX: usize = 16;

/// One line of the OOM dump's "largest live allocations", copied out of its `dmem_t`.
#[derive(Copy, Clone)]
struct TopEntry {
    size: u64,
    nc_id: u32,
    mem_type: u32,
    channel: u32,
    usage: u32,
    hint: [u8; 48],
}

impl TopEntry {
    const EMPTY: TopEntry = TopEntry {
        size: 0,
        nc_id: 0,
        mem_type: 0,
        channel: 0,
        usage: 0,
        hint: [0; 48],
    };

    /// The dump's line for dmem `d` when it has an owner and belongs to device `dev`.
    fn of(d: &DmemFixed, dev: u32) -> Option<TopEntry> {
        (d.refs != 0 && d.device_id == dev).then_some(TopEntry {
            size: d.allocated_size,
            nc_id: d.nc_id,
            mem_type: d.mem_type,
            channel: d.tdram_channel,
            usage: d.mem_usage_type,
            hint: d.hint,
        })
    }
}

/// A `fmt::Write` into a fixed buffer that keeps what fits and drops the rest (no heap).
struct FixedWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl Write for FixedWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}
