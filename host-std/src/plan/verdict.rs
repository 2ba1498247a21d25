//! The plan's diagnosis of a model: what it asks for by usage type (from its spec, whether or
//! not it fits) and, for a device OOM, the verdict on the channel that refused it
//! ([`Verdict`]). The verdict compares what the model needs on the channel with the channel's
//! free bytes and blocks before its load; it never depends on which allocation of the model
//! happened to fail, so the order in which a file lists its allocations does not change it
//! (a NEFF and the manifest it was packed from get the same one).
//!
//! What a model needs on a channel is measured, not re-derived: the model is loaded alone on
//! its core of a fresh private device of the plan's geometry, the pieces a load shares on a
//! core (scratchpad pages, the shared GPSIMD library, spec §6, §8) that its core already had
//! loaded first, and the channel's free bytes before and after are compared. The core's own
//! load path does the page rounding, the alignment emulation and the choice of channel.

use nrt_core::abi::al_hal_tpb_arch_type_t;
use nrt_core::model::ModelSpec;
use nrt_core::oom::FailedRequest;
use nrt_core::ulib::UlibRequest;
use nrt_core::PhysicalCore;

use super::*;

/// Calls `g` with the spec the model's load gives the core; `None` when a NEFF's cannot be
/// built (its load refuses it then).
fn with_spec<R>(f: &ModelFile, g: impl FnOnce(&ModelSpec<'_>) -> R) -> Option<R> {
    match f {
        ModelFile::Manifest(m) => Some(g(&m.spec().as_spec())),
        ModelFile::Neff(n) => n.spec().ok().map(|s| g(&s.as_spec())),
    }
}

/// Device bytes `p` asks for by usage type ([`ModelPlan::needed`]): its allocations over all
/// subgraphs, its scratchpad, its GPSIMD libraries when the device stages them (`sunda`, spec
/// §6) and its IO tensors when the plan allocates them. Before page rounding.
pub(super) fn needs(p: &Parsed, sunda: bool) -> UsageBytes {
    use dma_mem_usage_type_t as U;
    let mut by = [0u64; 23];
    let mut add = |u: U, b: u64| {
        let slot = &mut by[(u as usize).min(21)];
        *slot = slot.saturating_add(b);
    };
    with_spec(&p.file, |s| {
        for a in (0..s.subgraphs as usize).flat_map(|i| s.subgraph_allocations(i)) {
            if a.location == dma_mem_location_t::TONGA_DRAM {
                add(a.usage, a.size);
            }
        }
        add(U::DMA_MEM_USAGE_TYPE_SCRATCHPAD, s.scratchpad_bytes);
        if let Some(l) = s.gpsimd_libs.filter(|_| sunda) {
            let each = l.lib_bytes().unwrap_or(l.bytes);
            add(
                U::DMA_MEM_USAGE_TYPE_UCODE_LIB,
                each.saturating_mul(u64::from(l.count)),
            );
        }
    });
    if p.tensors {
        for t in p.file.tensor_info() {
            add(U::DMA_MEM_USAGE_TYPE_TENSOR, t.size);
        }
    }
    usage_list(&by)
}

/// Whether device `dev` stages GPSIMD libraries (SUNDA, spec §6).
pub(super) fn stages_gpsimd(nrt: &Nrt<'_>, dev: u32) -> bool {
    nrt.geom(dev).arch() == al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_SUNDA
}

/// What a model's load would find already there on its first physical core and reuse
/// instead of allocating: the scratchpad pages it claims (spec §8: a core's models share
/// them) and the shared ext-ISA library (spec §6: one copy per core).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct SharedPieces {
    /// Bytes of the scratchpad pages it claims that exist.
    scratchpad_bytes: u64,
    /// The shared library request, when the core has its copy staged.
    ulib: Option<(u32, u64)>,
}

/// The [`SharedPieces`] model `p` would reuse on logical core `core` of `nrt`.
pub(super) fn shared_pieces(nrt: &Nrt<'_>, p: &Parsed, core: i64) -> SharedPieces {
    let Some(pc) = nrt
        .logical_core_entry(LogicalCore::from_c(core))
        .ok()
        .and_then(|v| v.cores().first().copied())
    else {
        return SharedPieces::default();
    };
    let (dev, tpb) = (pc.device_id, pc.device_tpb_idx);
    let (page, have) = nrt
        .scratchpad_info(PhysicalCore::new(dev, tpb))
        .map_or((1, 0), |s| (s.page_size, s.pages));
    let page = page.max(1);
    let staged = nrt
        .ulib_shared_stats(PhysicalCore::new(dev, tpb))
        .is_ok_and(|s| s.stages > 0);
    with_spec(&p.file, |s| SharedPieces {
        // A core's pages are claimed from the first one on, so those it has are a prefix.
        scratchpad_bytes: s.scratchpad_bytes.div_ceil(page).min(u64::from(have)) * page,
        ulib: s
            .gpsimd_libs
            .filter(|l| l.count == 1 && staged)
            .map(|l| (l.count, l.bytes)),
    })
    .unwrap_or_default()
}

/// A model measured on a fresh private device ([`Measurer`]).
#[derive(Copy, Clone, Debug)]
pub(super) struct Measure {
    /// The channel's free bytes on the empty device.
    pub(super) empty_free: u64,
    /// The largest request the empty channel takes (its main pool's extent after the
    /// firmware carve-out; the small-object region is smaller).
    pub(super) most: u64,
    /// Whether the model fits on its core of the empty device; `None`: it failed for
    /// another reason than room on a device.
    pub(super) fits_empty: Option<bool>,
    /// Bytes it takes on the channel beyond its core's [`SharedPieces`] ([`Refusal::needed`]).
    pub(super) needed: Option<u64>,
}

/// What one load on a measuring device did.
enum Took {
    /// It fit, taking these bytes on the channel.
    Bytes(u64),
    /// A device OOM.
    NoRoom,
    /// Another failure.
    Unknown,
}

/// Measures models on fresh private devices of the plan's geometry, each (model, core,
/// channel, shared pieces) once.
pub(super) struct Measurer {
    cfg: RuntimeConfig,
    allow_legacy: bool,
    cache: HashMap<MeasureKey, Option<Measure>>,
}

/// What a measure depends on: the model's parse (its `Rc`'s address) and whether its tensors
/// are allocated, its logical core, the channel (device, HBM) and its core's shared pieces.
type MeasureKey = (usize, bool, i64, u32, u32, SharedPieces);

impl Measurer {
    /// A measurer for plans under `cfg` (a shared device is measured on a private device of
    /// its geometry: its contents are the plan's subject, not its size).
    pub(super) fn new(cfg: &RuntimeConfig, allow_legacy: bool) -> Self {
        let mut cfg = *cfg;
        if let DeviceChoice::Shared {
            preset,
            devices,
            placement,
            ..
        } = cfg.device
        {
            cfg.device = DeviceChoice::Sim {
                preset,
                devices,
                placement,
            };
        }
        Measurer {
            cfg,
            allow_legacy,
            cache: HashMap::new(),
        }
    }

    /// Model `p` on logical core `core`, seen from HBM `hbm` of device `dev`, with `shared`
    /// already on its core.
    pub(super) fn measure(
        &mut self,
        p: &Parsed,
        core: i64,
        dev: u32,
        hbm: u32,
        shared: SharedPieces,
    ) -> Option<Measure> {
        let key = (
            Rc::as_ptr(&p.file) as usize,
            p.tensors,
            core,
            dev,
            hbm,
            shared,
        );
        if let Some(m) = self.cache.get(&key) {
            return *m;
        }
        let m = self.measure_uncached(p, core, dev, hbm, shared);
        self.cache.insert(key, m);
        m
    }

    fn measure_uncached(
        &self,
        p: &Parsed,
        core: i64,
        dev: u32,
        hbm: u32,
        shared: SharedPieces,
    ) -> Option<Measure> {
        let (empty, channel_size, took) = self.load_alone(self.cfg, p, core, dev, hbm, shared)?;
        let (fits_empty, needed) = match took {
            Took::Bytes(b) => (Some(true), Some(b)),
            Took::Unknown => (None, None),
            // It does not fit on an empty channel: measured on a device whose channels are
            // large enough to hold it (address space only: nothing is written).
            Took::NoRoom => {
                let larger = demand_bound(p)
                    .and_then(|b| b.checked_mul(2))
                    .and_then(|b| b.checked_add(channel_size))
                    .and_then(|b| b.checked_next_multiple_of(1 << 20))
                    .filter(|&b| b <= nrt_core::sim::MAX_POOL_SIZE);
                let needed = larger.and_then(|size| {
                    let mut cfg = self.cfg;
                    cfg.sim_channel_size = Some(size);
                    match self.load_alone(cfg, p, core, dev, hbm, shared)?.2 {
                        Took::Bytes(b) => Some(b),
                        _ => None,
                    }
                });
                (Some(false), needed)
            }
        };
        Some(Measure {
            empty_free: empty.free,
            most: empty.largest_request(),
            fits_empty,
            needed,
        })
    }

    /// On a fresh device of `cfg`: the channel's empty figures, its size, and what loading
    /// `shared` and then `p` on `core` took on it beyond `shared`.
    fn load_alone(
        &self,
        cfg: RuntimeConfig,
        p: &Parsed,
        core: i64,
        dev: u32,
        hbm: u32,
        shared: SharedPieces,
    ) -> Option<(PoolStats, u64, Took)> {
        let s = start(cfg, None).ok()?;
        let stats = || s.rt.driver().pool_stats(dev, false, hbm).ok();
        let empty = stats()?;
        let channel_size = s.rt.nrt().geom(dev).channel_size;
        if shared != SharedPieces::default() {
            let spec = ModelSpec {
                name: "nrt-dmem plan: shared pieces",
                subgraphs: 1,
                scratchpad_bytes: shared.scratchpad_bytes,
                gpsimd_libs: shared
                    .ulib
                    .map(|(count, bytes)| UlibRequest { count, bytes }),
                ..ModelSpec::default()
            };
            if s.rt
                .nrt()
                .models()
                .load(LogicalCore::from_c(core), &spec)
                .is_err()
            {
                return Some((empty, channel_size, Took::Unknown));
            }
        }
        let before = stats()?.free;
        let took = match s.step(p, core, self.allow_legacy) {
            Step::Fit { .. } => Took::Bytes(before.saturating_sub(stats()?.free)),
            Step::Failed { oom: Some(_), .. } => Took::NoRoom,
            Step::Failed { .. } => Took::Unknown,
        };
        Some((empty, channel_size, took))
    }
}

/// An upper bound of the device bytes `p` can take on one channel: every allocation with a
/// page and its alignment on top, its scratchpad, libraries and tensors, with room for their
/// rounding.
fn demand_bound(p: &Parsed) -> Option<u64> {
    const SLACK: u64 = 1 << 30;
    let spec = with_spec(&p.file, |s| {
        let mut b: u64 = 0;
        for a in (0..s.subgraphs as usize).flat_map(|i| s.subgraph_allocations(i)) {
            b = b.saturating_add(a.size.saturating_add(a.align).saturating_add(1 << 12));
        }
        let libs = s.gpsimd_libs.map_or(0, |l| {
            l.bytes
                .saturating_add(SLACK)
                .saturating_mul(u64::from(l.count))
        });
        b.saturating_add(s.scratchpad_bytes).saturating_add(libs)
    })?;
    let tensors = p.file.tensor_info().iter().fold(0u64, |b, t| {
        b.saturating_add(t.size).saturating_add(1 << 12)
    });
    let b = spec.saturating_add(tensors).saturating_add(SLACK);
    (b < u64::MAX / 4).then_some(b)
}

/// The refusal of a model by the channel of its device OOM `e` ([`Refusal`]): `nrt` is
/// the plan's device after the load rolled back (the channel as it was before the load),
/// `ch` the failing channel as the OOM measured it, `m` the model's measure.
pub(super) fn channel_refusal(
    nrt: &Nrt<'_>,
    e: &nrt_core::Error,
    ch: Option<&FailingChannel>,
    m: Option<&Measure>,
) -> Option<Refusal> {
    let nrt_core::Error::DeviceOom {
        size,
        align,
        device,
        hbm,
        usage,
        emulated,
        ..
    } = *e
    else {
        return None;
    };
    let drv = nrt.driver();
    let st = drv.pool_stats(device, false, hbm).ok()?;
    let page = drv.device_info(device).map_or(1 << 12, |i| i.page_size);
    let req = FailedRequest::new(size, align, !emulated, page)?;
    let largest_free_at_align = (align > page)
        .then(|| {
            let at = if emulated {
                Some(st)
            } else {
                drv.hbm_stats_aligned(device, hbm, align).ok()
            };
            at.map(|s| req.in_request_terms(&s).largest_request())
        })
        .flatten();
    let cause = ch.map(|c| c.cause);
    let verdict = match m {
        Some(Measure {
            fits_empty: Some(false),
            ..
        }) => Verdict::Hopeless,
        Some(Measure {
            needed: Some(n), ..
        }) if *n > st.free => Verdict::Full,
        Some(Measure {
            needed: Some(_), ..
        }) if matches!(cause, Some(OomCause::Refused { .. })) => Verdict::DriverRefused,
        Some(Measure {
            needed: Some(_), ..
        }) => Verdict::Fragmented,
        // Not measured: the failing request's own cause.
        _ => match cause {
            _ if m.is_some_and(|m| req.driver_size() > m.most) => Verdict::Hopeless,
            Some(OomCause::Refused { .. }) => Verdict::DriverRefused,
            Some(OomCause::NoBlock { .. } | OomCause::Alignment { .. }) => Verdict::Fragmented,
            Some(OomCause::ChannelFull { .. }) => Verdict::Full,
            None if st.free < req.driver_size() => Verdict::Full,
            None => Verdict::Fragmented,
        },
    };
    let mut r = Refusal {
        device,
        hbm,
        request: RefusedRequest {
            usage: usage.short_name().to_string(),
            size: req.size,
            align,
            emulated,
        },
        needed: m.and_then(|m| m.needed),
        free: st.free,
        largest_free: st.largest_free,
        largest_free_at_align,
        empty_free: m.map_or(0, |m| m.empty_free),
        verdict,
        summary: String::new(),
    };
    r.summary = summary(&r, m.map(|m| m.most));
    Some(r)
}

/// The verdict as one line.
fn summary(r: &Refusal, most: Option<u64>) -> String {
    let b = crate::units::fmt_bytes;
    let at = format!("nd{} HBM {}", r.device, r.hbm);
    let need = r.needed.map_or_else(
        || "its allocations".to_string(),
        |n| format!("the {} it needs there", b(n)),
    );
    let request = format!(
        "{} {}{}",
        b(r.request.size),
        r.request.usage,
        if r.request.align > 0 {
            format!(" at a {}-byte alignment", r.request.align)
        } else {
            String::new()
        }
    );
    match r.verdict {
        Verdict::Full => format!(
            "{at} is full: {} free, {}",
            b(r.free),
            r.needed.map_or_else(
                || "too few for its allocations".into(),
                |n| format!("{} needed there", b(n))
            )
        ),
        Verdict::Fragmented => {
            let largest = match r.largest_free_at_align {
                Some(l) => format!(
                    "largest free block {}, {} at the request's alignment",
                    b(r.largest_free),
                    b(l)
                ),
                None => format!("largest free block {}", b(r.largest_free)),
            };
            format!(
                "{at} is fragmented: {} free, enough for {need}, but not in blocks that hold its \
                 allocations ({largest}); the request that failed: {request}",
                b(r.free)
            )
        }
        Verdict::Hopeless => format!(
            "does not fit on {at} even when empty: {} there, an empty channel has {} \
             free{}",
            r.needed
                .map_or_else(|| "it needs more".into(), |n| format!("it needs {}", b(n))),
            b(r.empty_free),
            most.map_or_else(String::new, |m| format!(" (largest block {})", b(m)))
        ),
        Verdict::DriverRefused => format!(
            "the driver refused a {request} request on {at} although the channel has {} free and \
             a block that holds it",
            b(r.free)
        ),
    }
}
