//! # nrt-bench
//!
//! The carve allocator ([`nrt_core::carve`], public ABI §3 "How the driver carves memory")
//! against the crates `offset-allocator` 0.2 and `range-alloc` 0.1, on identical pre-generated
//! traces. What is measured and why is in `docs/PERFORMANCE.md`; the `nrt-bench` binary prints
//! the numbers as one JSON object.
//!
//! Unit mapping (each allocator in its natural granularity, same byte-sized requests):
//!
//! * carve: bytes, granule [`CARVE_GRANULE`] (4 KiB, the driver's page, like offset-allocator's
//!   unit) for the headline figures and [`CARVE_FINE_GRANULE`] (64 B) for a second figure in
//!   which the trace's 64 B–4 KiB alignments are honoured natively (head fragments split off);
//! * offset-allocator: `u32` units of [`OFFSET_UNIT`] (4 KiB; 16 GiB = 4 Mi units). Sizes are
//!   rounded up to whole units; every unit offset is 4 KiB-aligned, which satisfies every
//!   alignment of the traces (≤ 4 KiB) — the crate has no alignment parameter;
//! * range-alloc: bytes, `allocate_range_aligned` (best fit over a sorted `Vec` of free
//!   ranges).

use std::time::Instant;

use nrt_core::carve::{Carve, CarveId, Policy};
use nrt_core::LogicalCore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub mod capi;
pub mod placement;

use placement::FreeRanges;

/// KiB.
pub const KIB: u64 = 1024;
/// MiB.
pub const MIB: u64 = 1024 * KIB;
/// GiB.
pub const GIB: u64 = 1024 * MIB;
/// The simulated HBM channel every trace runs on.
pub const CHANNEL: u64 = 16 * GIB;
/// Carve granule of the headline figures: the driver's page (public ABI §3: requests are
/// rounded up to the page size), the same 4 KiB as offset-allocator's unit. Alignments of the
/// traces (≤ 4 KiB) are then free; [`CARVE_FINE_GRANULE`] is measured as well so the aligned
/// path (head fragments split off) is covered.
pub const CARVE_GRANULE: u64 = 4096;
/// The fine granule of the secondary carve figure: alignments 64 B–4 KiB need real work.
pub const CARVE_FINE_GRANULE: u64 = 64;
/// Bytes per offset-allocator unit.
pub const OFFSET_UNIT: u64 = 4 * KIB;
/// Carve node capacity for the benchmark (≥ 2 × 68 k live allocations + slack).
pub const CARVE_NODES: usize = 1 << 18;
/// offset-allocator `max_allocs` for the benchmark (its node count; same bound as carve's).
pub const OFFSET_MAX_ALLOCS: u32 = 1 << 18;
/// Block size of the exact-reuse test: 300 KiB, not a power of two, a whole number of 4 KiB
/// units, and not on a size-class boundary of either TLSF.
pub const REUSE_BLOCK: u64 = 300 * KIB;

/// One trace operation. Ids index the per-run handle table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Allocate `size` bytes aligned to `align`, remembered as `id`.
    Alloc {
        /// Allocation id.
        id: u32,
        /// Bytes.
        size: u64,
        /// Alignment (power of two).
        align: u64,
    },
    /// Free allocation `id` (a no-op for an allocator whose `Alloc` of `id` failed).
    Free {
        /// Allocation id.
        id: u32,
    },
}

/// Parameters of a generated trace.
#[derive(Copy, Clone, Debug)]
pub struct TraceSpec {
    /// Bytes managed.
    pub capacity: u64,
    /// Smallest request (log-uniform between min and max).
    pub min_size: u64,
    /// Largest request.
    pub max_size: u64,
    /// Smallest alignment (a power of two; log-uniform between min and max).
    pub min_align: u64,
    /// Largest alignment.
    pub max_align: u64,
    /// Target live bytes / capacity during the churn.
    pub occupancy: f64,
    /// Timed operations after the warm-up.
    pub churn_ops: usize,
    /// RNG seed (the same trace for every allocator).
    pub seed: u64,
}

impl TraceSpec {
    /// Trace A: 16 GiB channel, 4 KiB–256 MiB, alignment 64 B–4 KiB, ~75 % occupancy.
    pub fn trace_a(churn_ops: usize) -> Self {
        TraceSpec {
            capacity: CHANNEL,
            min_size: 4 * KIB,
            max_size: 256 * MIB,
            min_align: 64,
            max_align: 4 * KIB,
            occupancy: 0.75,
            churn_ops,
            seed: 0xA11C_0001,
        }
    }

    /// Trace B: as A with 4 KiB–1 MiB requests, so ~68 k allocations are live at 75 %.
    pub fn trace_b(churn_ops: usize) -> Self {
        TraceSpec {
            max_size: MIB,
            seed: 0xA11C_0002,
            ..Self::trace_a(churn_ops)
        }
    }

    /// Variant `k` of this trace: the same parameters with seed `seed + k·7919` (variant 0 is
    /// the trace itself, e.g. the trace A).
    pub fn seed_variant(self, k: u64) -> Self {
        TraceSpec {
            seed: self.seed + k * 7919,
            ..self
        }
    }
}

/// A generated trace: warm-up (allocations up to the target occupancy), the timed churn,
/// then the fill sequence used to measure utilisation at the first failure.
#[derive(Clone, Debug)]
pub struct Trace {
    /// What it was generated from.
    pub spec: TraceSpec,
    /// Untimed: allocations from empty to the target occupancy.
    pub warmup: Vec<Op>,
    /// Timed: mixed allocations and frees around the target occupancy.
    pub churn: Vec<Op>,
    /// `(size, align)` requests made after the churn until the first failure; their sizes
    /// add up to more than the capacity, so every allocator fails before the end.
    pub fill: Vec<(u64, u64)>,
    /// Requested bytes of every id.
    pub sizes: Vec<u64>,
    /// Live allocations (per the trace's own model) at the end of the warm-up.
    pub live_after_warmup: usize,
    /// Average live allocations during the churn (per the model).
    pub mean_live_in_churn: f64,
}

fn log_uniform(rng: &mut StdRng, lo: u64, hi: u64) -> u64 {
    let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
    (rng.gen_range(a..=b).exp() as u64).clamp(lo, hi)
}

fn pow2_log_uniform(rng: &mut StdRng, lo: u64, hi: u64) -> u64 {
    1 << rng.gen_range(lo.trailing_zeros()..=hi.trailing_zeros())
}

impl Trace {
    /// Generates the trace for `spec`. Lifetimes are mixed: a free picks, with probability
    /// 0.6, one of the 16 most recent live allocations (short-lived) and otherwise a uniformly
    /// random live one (long-lived).
    pub fn generate(spec: TraceSpec) -> Self {
        let mut rng = StdRng::seed_from_u64(spec.seed);
        let target = (spec.capacity as f64 * spec.occupancy) as u64;
        let mut sizes: Vec<u64> = Vec::new();
        let mut live: Vec<u32> = Vec::new();
        let mut live_bytes = 0u64;
        let draw = |rng: &mut StdRng| {
            (
                log_uniform(rng, spec.min_size, spec.max_size),
                pow2_log_uniform(rng, spec.min_align, spec.max_align),
            )
        };
        let mut warmup = Vec::new();
        loop {
            let (size, align) = draw(&mut rng);
            if live_bytes + size > target {
                break;
            }
            let id = sizes.len() as u32;
            sizes.push(size);
            live.push(id);
            live_bytes += size;
            warmup.push(Op::Alloc { id, size, align });
        }
        let live_after_warmup = live.len();
        let mut churn = Vec::with_capacity(spec.churn_ops);
        let mut live_sum = 0f64;
        while churn.len() < spec.churn_ops {
            let (size, align) = draw(&mut rng);
            let below = live_bytes + size <= target;
            if live.is_empty() || (below && rng.gen_bool(0.6)) {
                let id = sizes.len() as u32;
                sizes.push(size);
                live.push(id);
                live_bytes += size;
                churn.push(Op::Alloc { id, size, align });
            } else {
                let n = live.len();
                let k = if rng.gen_bool(0.6) {
                    n - 1 - rng.gen_range(0..n.min(16))
                } else {
                    rng.gen_range(0..n)
                };
                let id = live.swap_remove(k);
                live_bytes -= sizes[id as usize];
                churn.push(Op::Free { id });
            }
            live_sum += live.len() as f64;
        }
        let mut fill = Vec::new();
        let mut sum = 0u64;
        while sum <= spec.capacity {
            let (size, align) = draw(&mut rng);
            sum += size;
            fill.push((size, align));
        }
        Trace {
            spec,
            warmup,
            churn,
            fill,
            sizes,
            live_after_warmup,
            mean_live_in_churn: live_sum / spec.churn_ops.max(1) as f64,
        }
    }
}

/// The interface the benchmark drives; one adapter per allocator.
pub trait BenchAlloc {
    /// What an allocation is remembered by.
    type Handle: Copy;
    /// Name used in the report.
    const NAME: &'static str;
    /// Back to empty, same capacity (untimed).
    fn reset(&mut self);
    /// Allocates; `None` when the allocator refuses.
    fn alloc(&mut self, size: u64, align: u64) -> Option<Self::Handle>;
    /// Frees a live allocation.
    fn free(&mut self, h: Self::Handle);
    /// The byte range `[start, end)` an allocation covers (for correctness checks).
    fn range(&self, h: Self::Handle) -> (u64, u64);
}

/// The carve allocator (the subject), TLSF good fit unless built by [`GenallocBench`].
pub struct CarveBench {
    carve: Box<Carve<CARVE_NODES>>,
    capacity: u64,
    granule: u64,
    policy: Policy,
}

impl CarveBench {
    /// A carve over `[0, capacity)` with the benchmark granule ([`CARVE_GRANULE`]).
    pub fn new(capacity: u64) -> Self {
        Self::with_granule(capacity, CARVE_GRANULE)
    }

    /// A carve over `[0, capacity)` with another granule (a power of two dividing
    /// `capacity`), e.g. 64 B so that the trace's alignments need real work.
    pub fn with_granule(capacity: u64, granule: u64) -> Self {
        let mut b = CarveBench {
            carve: Carve::new_boxed(),
            capacity,
            granule,
            policy: Policy::GoodFit,
        };
        b.reset();
        b
    }
}

impl BenchAlloc for CarveBench {
    type Handle = CarveId;
    const NAME: &'static str = "carve";
    fn reset(&mut self) {
        // Capacity and granule come from the constructor; a bad pair leaves the carve
        // uninitialised, and every allocation then fails (visible as trace failures).
        let _ = self
            .carve
            .init_with(0, self.capacity, self.granule, self.policy);
    }
    #[inline]
    fn alloc(&mut self, size: u64, align: u64) -> Option<CarveId> {
        self.carve.alloc(size, align).ok().map(|b| b.id)
    }
    #[inline]
    fn free(&mut self, h: CarveId) {
        let _ = self.carve.free(h);
    }
    fn range(&self, h: CarveId) -> (u64, u64) {
        self.carve
            .lookup(h)
            .map(|b| (b.addr, b.addr + b.size))
            .unwrap_or((0, 0))
    }
}

/// The carve with [`Policy::FirstFit`]: the simulated device's default, driver-exact
/// placement (docs/PLACEMENT.md), on the same traces as the TLSF carve.
pub struct GenallocBench(CarveBench);

impl GenallocBench {
    /// A first-fit carve over `[0, capacity)` with the benchmark granule.
    pub fn new(capacity: u64) -> Self {
        let mut b = CarveBench::new(capacity);
        b.policy = Policy::FirstFit;
        b.reset();
        GenallocBench(b)
    }
}

impl BenchAlloc for GenallocBench {
    type Handle = CarveId;
    const NAME: &'static str = "genalloc";
    fn reset(&mut self) {
        self.0.reset();
    }
    #[inline]
    fn alloc(&mut self, size: u64, align: u64) -> Option<CarveId> {
        self.0.alloc(size, align)
    }
    #[inline]
    fn free(&mut self, h: CarveId) {
        self.0.free(h);
    }
    fn range(&self, h: CarveId) -> (u64, u64) {
        self.0.range(h)
    }
}

/// `offset-allocator` 0.2 in 4 KiB units.
pub struct OffsetBench {
    a: offset_allocator::Allocator<u32>,
    units: u32,
}

impl OffsetBench {
    /// An allocator over `capacity / 4 KiB` units (capacity ≤ 16 TiB).
    pub fn new(capacity: u64) -> Self {
        let units = u32::try_from(capacity / OFFSET_UNIT).unwrap_or(u32::MAX);
        OffsetBench {
            a: offset_allocator::Allocator::with_max_allocs(units, OFFSET_MAX_ALLOCS),
            units,
        }
    }
}

impl BenchAlloc for OffsetBench {
    type Handle = offset_allocator::Allocation<u32>;
    const NAME: &'static str = "offset_allocator";
    fn reset(&mut self) {
        self.a = offset_allocator::Allocator::with_max_allocs(self.units, OFFSET_MAX_ALLOCS);
    }
    #[inline]
    fn alloc(&mut self, size: u64, align: u64) -> Option<Self::Handle> {
        // Unit offsets are 4 KiB-aligned; larger alignments are not supported by the crate.
        if align > OFFSET_UNIT {
            return None;
        }
        let units = u32::try_from(size.div_ceil(OFFSET_UNIT)).ok()?;
        self.a.allocate(units)
    }
    #[inline]
    fn free(&mut self, h: Self::Handle) {
        self.a.free(h);
    }
    fn range(&self, h: Self::Handle) -> (u64, u64) {
        let start = h.offset as u64 * OFFSET_UNIT;
        (
            start,
            start + self.a.allocation_size(h) as u64 * OFFSET_UNIT,
        )
    }
}

/// `range-alloc` 0.1 in bytes.
pub struct RangeBench {
    a: range_alloc::RangeAllocator<u64>,
}

impl RangeBench {
    /// An allocator over `[0, capacity)`.
    pub fn new(capacity: u64) -> Self {
        RangeBench {
            a: range_alloc::RangeAllocator::new(0..capacity),
        }
    }
}

impl BenchAlloc for RangeBench {
    type Handle = (u64, u64);
    const NAME: &'static str = "range_alloc";
    fn reset(&mut self) {
        self.a.reset();
    }
    #[inline]
    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, u64)> {
        self.a
            .allocate_range_aligned(size, align.max(1))
            .ok()
            .map(|r| (r.start, r.end))
    }
    #[inline]
    fn free(&mut self, h: (u64, u64)) {
        self.a.free_range(h.0..h.1);
    }
    fn range(&self, h: (u64, u64)) -> (u64, u64) {
        h
    }
}

/// Exhaustive address-ordered first fit over a map of free ranges: the driver's stated policy
/// (public ABI §3 "How the driver carves memory"), with no bound on the search. O(free ranges)
/// per request, so it is a reference for *utilisation* (how far a non-moving allocator that
/// always takes the lowest fitting hole gets), not a speed peer.
pub struct FirstFitRef {
    /// Free ranges, coalesced.
    free: FreeRanges,
}

impl FirstFitRef {
    /// An empty pool over `[0, capacity)`, in units of [`CARVE_GRANULE`].
    pub fn new(capacity: u64) -> Self {
        FirstFitRef {
            free: FreeRanges::new(capacity),
        }
    }
}

impl BenchAlloc for FirstFitRef {
    type Handle = (u64, u64);
    const NAME: &'static str = "first_fit_reference";
    fn reset(&mut self) {
        *self = Self::new(self.free.capacity());
    }
    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, u64)> {
        let size = size.next_multiple_of(CARVE_GRANULE);
        let start = self.free.first_fit(size, align.max(CARVE_GRANULE))?;
        self.free.take(start, size);
        Some((start, start + size))
    }
    fn free(&mut self, (start, end): (u64, u64)) {
        self.free.give(start, end);
    }
    fn range(&self, h: (u64, u64)) -> (u64, u64) {
        h
    }
}

/// Utilisation at the first failure over several traces: `(mean, min, max)`.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct SeedSpread {
    /// Mean over the seeds.
    pub mean: f64,
    /// Lowest.
    pub min: f64,
    /// Highest.
    pub max: f64,
}

impl SeedSpread {
    /// Mean, min and max of per-seed values (all NaN for an empty slice).
    pub fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return SeedSpread {
                mean: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        SeedSpread {
            mean: values.iter().sum::<f64>() / values.len() as f64,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// Utilisation at the first failure on `seeds` variants of `spec` (seed, seed + 7919, …), one
/// replay each (its timing is not used). The figure comes from one trace and so from one
/// fill request; this is the same measurement averaged, to compare placement policies.
pub fn utilisation_over_seeds<A: BenchAlloc>(
    mut make: impl FnMut() -> A,
    spec: TraceSpec,
    seeds: u64,
) -> SeedSpread {
    let v: Vec<f64> = (0..seeds)
        .map(|k| {
            let trace = Trace::generate(spec.seed_variant(k));
            measure(make(), &trace, 1).utilisation_at_first_failure
        })
        .collect();
    SeedSpread::of(&v)
}

/// Replays traces against one allocator, remembering handles by trace id.
pub struct Replayer<A: BenchAlloc> {
    /// The allocator.
    pub alloc: A,
    handles: Vec<Option<A::Handle>>,
    /// Allocations the allocator refused during the last replay (warm-up + churn).
    pub failures: u64,
}

impl<A: BenchAlloc> Replayer<A> {
    /// A replayer for traces with up to `ids` allocation ids.
    pub fn new(alloc: A, ids: usize) -> Self {
        Replayer {
            alloc,
            handles: vec![None; ids],
            failures: 0,
        }
    }

    /// Empties the allocator and the handle table.
    pub fn reset(&mut self) {
        self.alloc.reset();
        self.handles.iter_mut().for_each(|h| *h = None);
        self.failures = 0;
    }

    /// Applies `ops` in order.
    #[inline]
    pub fn run(&mut self, ops: &[Op]) {
        for op in ops {
            match *op {
                Op::Alloc { id, size, align } => match self.alloc.alloc(size, align) {
                    Some(h) => self.handles[id as usize] = Some(h),
                    None => self.failures += 1,
                },
                Op::Free { id } => {
                    if let Some(h) = self.handles[id as usize].take() {
                        self.alloc.free(h);
                    }
                }
            }
        }
    }

    /// Requested bytes of the allocations live now.
    pub fn live_bytes(&self, sizes: &[u64]) -> u64 {
        self.handles
            .iter()
            .zip(sizes)
            .filter(|(h, _)| h.is_some())
            .map(|(_, s)| *s)
            .sum()
    }

    /// The live allocations' byte ranges (for overlap checks).
    pub fn live_ranges(&self) -> Vec<(u64, u64)> {
        self.handles
            .iter()
            .flatten()
            .map(|h| self.alloc.range(*h))
            .collect()
    }
}

/// What one allocator did on one trace.
#[derive(Copy, Clone, Debug, Default)]
pub struct Measurement {
    /// Median over the repetitions of (churn time / churn ops), in ns.
    pub ns_per_op: f64,
    /// Fastest repetition.
    pub min_ns_per_op: f64,
    /// Slowest repetition.
    pub max_ns_per_op: f64,
    /// Allocations refused during warm-up + churn (fragmentation under the trace).
    pub failures: u64,
    /// Requested live bytes / capacity at the first refused fill request after the churn.
    pub utilisation_at_first_failure: f64,
    /// The same after offering the rest of the fill sequence too, refused requests skipped
    /// (how well the holes left by the churn get used).
    pub utilisation_after_fill: f64,
}

/// Median of a non-empty slice (sorted in place).
pub fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// Nanoseconds of CPU time this thread has used (Linux `CLOCK_THREAD_CPUTIME_ID`), so time
/// spent descheduled by other work on a shared machine is not counted; wall time elsewhere.
pub fn thread_cpu_ns() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
        let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if r == 0 {
            return ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        }
    }
    use std::sync::OnceLock;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// One allocator replaying one trace, one repetition at a time (so several sessions can be
/// interleaved and share the machine's noise fairly).
pub trait Session {
    /// Allocator name.
    fn name(&self) -> &'static str;
    /// Reset + untimed warm-up + timed churn; returns ns per churn op.
    fn rep(&mut self) -> f64;
    /// The fill after the last repetition: utilisation at the first failure.
    fn finish(&mut self, times: &mut [f64]) -> Measurement;
}

/// A [`Session`] of allocator `A` on `trace`.
pub struct TraceSession<'t, A: BenchAlloc> {
    r: Replayer<A>,
    trace: &'t Trace,
}

impl<'t, A: BenchAlloc> TraceSession<'t, A> {
    /// A session replaying `trace` on `alloc`.
    pub fn new(alloc: A, trace: &'t Trace) -> Self {
        TraceSession {
            r: Replayer::new(alloc, trace.sizes.len()),
            trace,
        }
    }
}

impl<A: BenchAlloc> Session for TraceSession<'_, A> {
    fn name(&self) -> &'static str {
        A::NAME
    }

    fn rep(&mut self) -> f64 {
        self.r.reset();
        self.r.run(&self.trace.warmup);
        let t0 = thread_cpu_ns();
        self.r.run(std::hint::black_box(&self.trace.churn));
        let dt = thread_cpu_ns() - t0;
        dt as f64 / self.trace.churn.len().max(1) as f64
    }

    fn finish(&mut self, times: &mut [f64]) -> Measurement {
        let failures = self.r.failures;
        let mut live = self.r.live_bytes(&self.trace.sizes);
        let mut at_first_failure = None;
        for &(size, align) in &self.trace.fill {
            match self.r.alloc.alloc(size, align) {
                Some(_) => live += size,
                None => {
                    at_first_failure.get_or_insert(live);
                }
            }
        }
        let cap = self.trace.spec.capacity as f64;
        let ns = median(times);
        Measurement {
            ns_per_op: ns,
            min_ns_per_op: times.first().copied().unwrap_or(f64::NAN),
            max_ns_per_op: times.last().copied().unwrap_or(f64::NAN),
            failures,
            utilisation_at_first_failure: at_first_failure.unwrap_or(live) as f64 / cap,
            utilisation_after_fill: live as f64 / cap,
        }
    }
}

/// Runs `reps` repetitions of every session, interleaved (rep 1 of each, rep 2 of each, …),
/// then each session's fill. Returns the measurements in session order.
pub fn measure_all(sessions: &mut [&mut dyn Session], reps: usize) -> (Vec<Measurement>, RepTimes) {
    let mut times = vec![Vec::with_capacity(reps); sessions.len()];
    for _ in 0..reps.max(1) {
        for (s, t) in sessions.iter_mut().zip(&mut times) {
            t.push(s.rep());
        }
    }
    let in_order = RepTimes(times.clone());
    let ms = sessions
        .iter_mut()
        .zip(&mut times)
        .map(|(s, t)| s.finish(t))
        .collect();
    (ms, in_order)
}

/// Per-repetition ns/op of each session of one [`measure_all`] run, in repetition order.
pub struct RepTimes(Vec<Vec<f64>>);

impl RepTimes {
    /// Session `a`'s time relative to session `b`'s, by [`paired_median_ratio`].
    pub fn paired_ratio(&self, a: usize, b: usize) -> f64 {
        paired_median_ratio(&self.0[a], &self.0[b])
    }
}

/// Median over the repetitions of `a[i] / b[i]`. Each ratio pairs two timings taken back to
/// back, so a slow phase of a shared machine (this VM runs some seconds 1.5× slower than
/// others) moves both sides of a ratio instead of one side of a ratio of medians.
pub fn paired_median_ratio(a: &[f64], b: &[f64]) -> f64 {
    let mut r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    median(&mut r)
}

/// Runs `trace` `reps` times on one allocator (warm-up untimed, churn timed), then the fill.
pub fn measure<A: BenchAlloc>(alloc: A, trace: &Trace, reps: usize) -> Measurement {
    let mut s = TraceSession::new(alloc, trace);
    measure_all(&mut [&mut s], reps).0[0]
}

/// The exact-reuse test on a pool of exactly 100 blocks of [`REUSE_BLOCK`]: fill it,
/// free every second block, then request 50 blocks of the same size. Returns how many of the
/// 50 succeed (each can only land in a freed hole). `make` builds an allocator of the given
/// capacity.
pub fn exact_reuse<A: BenchAlloc>(make: impl FnOnce(u64) -> A) -> u32 {
    let mut a = make(100 * REUSE_BLOCK);
    let mut hs = Vec::with_capacity(100);
    for _ in 0..100 {
        match a.alloc(REUSE_BLOCK, 0) {
            Some(h) => hs.push(h),
            None => return 0,
        }
    }
    for h in hs.iter().step_by(2) {
        a.free(*h);
    }
    (0..50)
        .filter(|_| a.alloc(REUSE_BLOCK, 0).is_some())
        .count() as u32
}

/// One step of the runtime-sized trace of [`dmem_path_vs_carve`].
#[derive(Copy, Clone, Debug)]
enum PathOp {
    Alloc { slot: usize, size: u64 },
    Free { slot: usize },
}

/// Runtime-sized requests (4 KiB–16 MiB log-uniform, page multiples) with ~1000 live, on one
/// HBM channel: what model loads and tensor allocations look like to `dmem_alloc`.
fn path_trace(ops: usize) -> (Vec<PathOp>, usize) {
    let mut rng = StdRng::seed_from_u64(0x6d65_6d70);
    let slots = 2048;
    let mut live: Vec<usize> = Vec::new();
    let mut free: Vec<usize> = (0..slots).rev().collect();
    let mut out = Vec::with_capacity(ops);
    while out.len() < ops {
        let grow = live.len() < 1000 && (live.len() < 200 || rng.gen_bool(0.55));
        if (grow || live.is_empty()) && !free.is_empty() {
            let slot = free.pop().unwrap_or(0);
            let size = log_uniform(&mut rng, 4 << 10, 16 << 20).next_multiple_of(4096);
            live.push(slot);
            out.push(PathOp::Alloc { slot, size });
        } else {
            let i = rng.gen_range(0..live.len());
            let slot = live.swap_remove(i);
            free.push(slot);
            out.push(PathOp::Free { slot });
        }
    }
    (out, slots)
}

/// The runtime's whole device-memory path against the raw carve allocator, on one trace.
#[derive(Copy, Clone, Debug)]
pub struct PathComparison {
    /// ns/op of `dmem_alloc` / `dmem_free` over a trn2 `SimDevice` (argument checks, resolver,
    /// arenas, the driver's checks and carve, ledger, list linking); median of the reps.
    pub dmem_ns_per_op: f64,
    /// ns/op of the raw carve allocator replaying the same requests (page-rounded sizes, 4 KiB
    /// granule, one 24 GiB channel); median of the reps.
    pub carve_ns_per_op: f64,
    /// dmem / carve, by [`paired_median_ratio`]: the runtime's overhead factor.
    pub ratio: f64,
}

/// Measures [`PathComparison`] once per process (the repetitions alternate: dmem, carve, dmem,
/// …). `None` (printed `null`) only if the trace cannot run.
pub fn dmem_path_vs_carve(quick: bool) -> Option<PathComparison> {
    use nrt_core::abi::dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR;
    use nrt_core::dmem::AllocArgs;
    use nrt_core::sim::{Placement, Preset, SimConfig, SimDevice, FIRMWARE_CARVEOUT};
    use nrt_core::{CoreState, InitOptions, Nrt};
    use std::sync::OnceLock;

    static CACHE: OnceLock<Option<PathComparison>> = OnceLock::new();
    *CACHE.get_or_init(|| {
        let (ops, reps) = if quick { (4_000, 3) } else { (40_000, 7) };
        let (trace, slots) = path_trace(ops);
        let st = CoreState::new_boxed();
        // The simulated device places with the same TLSF carve the raw side replays, so the
        // ratio is the runtime's own overhead, not the difference between two placements
        // (the genalloc placement has its own comparison, `genalloc_vs_carve_ns_ratio`).
        let sim = SimDevice::new_boxed(&SimConfig {
            placement: Placement::Tlsf,
            ..SimConfig::new(Preset::Trn2, 1)
        })
        .ok()?;
        let n = Nrt::new(&st, &*sim);
        n.init(&InitOptions::default()).ok()?;
        let al = n.core_allocator(0, 0).ok()?;
        let channel = Preset::Trn2.device_info().hbm_channel_size;
        let mut carve = Carve::<{ nrt_core::sim::MAIN_NODES }>::new_boxed();
        carve.init(0, channel - FIRMWARE_CARVEOUT, 4096).ok()?;
        let mut dm: Vec<Option<nrt_core::DmemHandle>> = vec![None; slots];
        let mut ids: Vec<Option<CarveId>> = vec![None; slots];
        let (mut t_dmem, mut t_carve) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let t0 = thread_cpu_ns();
            for op in &trace {
                match *op {
                    PathOp::Alloc { slot, size } => {
                        dm[slot] = Some(
                            n.dmem_alloc(
                                al,
                                &AllocArgs::device(size, 0, DMA_MEM_USAGE_TYPE_TENSOR, "bench"),
                                None,
                            )
                            .ok()?,
                        );
                    }
                    PathOp::Free { slot } => n.dmem_free(dm[slot]?).ok()?,
                }
            }
            t_dmem.push((thread_cpu_ns() - t0) as f64 / trace.len() as f64);
            for m in dm.iter_mut() {
                if let Some(h) = m.take() {
                    if n.dmem_is_live(h) {
                        n.dmem_free(h).ok()?;
                    }
                }
            }
            let t0 = thread_cpu_ns();
            for op in &trace {
                match *op {
                    PathOp::Alloc { slot, size } => ids[slot] = Some(carve.alloc(size, 0).ok()?.id),
                    PathOp::Free { slot } => {
                        carve.free(ids[slot].take()?).ok()?;
                    }
                }
            }
            t_carve.push((thread_cpu_ns() - t0) as f64 / trace.len() as f64);
            for id in ids.iter_mut() {
                if let Some(id) = id.take() {
                    carve.free(id).ok()?;
                }
            }
        }
        n.close().ok()?;
        let ratio = paired_median_ratio(&t_dmem, &t_carve);
        Some(PathComparison {
            dmem_ns_per_op: median(&mut t_dmem),
            carve_ns_per_op: median(&mut t_carve),
            ratio,
        })
    })
}

/// Tensor allocate / write / free throughput with 1 thread against 2 threads on different
/// logical cores (issue 16 item 7), ratio taken in one run: `ratio` is (2 threads' total
/// ops/s) / (1 thread's ops/s), the median of the per-repetition ratios (each repetition times
/// one thread, then two, back to back). Wall-clock, so on a busy machine both sides move.
#[derive(Copy, Clone, Debug)]
pub struct ThreadScaling {
    /// One thread's ops per second (median), one op = allocate + write 4 KiB + free.
    pub one_thread_ops_per_s: f64,
    /// Two threads' total ops per second (median).
    pub two_threads_ops_per_s: f64,
    /// Paired median of two / one.
    pub ratio: f64,
}

/// [`ThreadScaling`] of `placement` tensors (DEVICE or VIRTUAL) on logical cores 0 and 1
/// of a simulated trn2 (LNC 2: physical cores 0 and 2), each thread on its own core; the
/// Rust API directly (the C API's figure is the ffi crate's). `shards` is the arenas' shard
/// count (`Capacity::shards`; 1 is the unsharded peer: one lock per arena).
pub fn tensor_threads(
    quick: bool,
    placement: nrt_core::tensor::Placement,
    shards: u32,
) -> Option<ThreadScaling> {
    use nrt_core::sim::{Preset, SimConfig, SimDevice};
    use nrt_core::tensor::HostMem;
    use nrt_core::{CoreState, InitOptions, Nrt};
    use std::alloc::Layout;
    use std::ptr::NonNull;

    struct Malloc;
    impl HostMem for Malloc {
        fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
            // SAFETY: non-zero size.
            NonNull::new(unsafe {
                std::alloc::alloc_zeroed(Layout::from_size_align(size.max(1), 64).ok()?)
            })
        }
        unsafe fn free(&self, p: NonNull<u8>, size: usize) {
            if let Ok(l) = Layout::from_size_align(size.max(1), 64) {
                // SAFETY: caller contract: from `alloc(size)`.
                unsafe { std::alloc::dealloc(p.as_ptr(), l) };
            }
        }
    }
    static HOST: Malloc = Malloc;

    let (ops, reps) = if quick {
        (5_000u32, 3)
    } else {
        (100_000u32, 7)
    };
    let cfg = SimConfig::scaled_down(Preset::Trn2, 1);
    let mut sim = SimDevice::new_boxed(&cfg).ok()?;
    let mut backing = vec![0u8; sim.backing_len(0) as usize];
    // SAFETY: `backing` outlives every use of the device in this function (dropped after the
    // runtime is closed and the device is gone).
    unsafe { sim.set_backing(0, backing.as_mut_ptr(), backing.len() as u64) }.ok()?;
    let st = CoreState::with_capacity(&nrt_core::Capacity {
        shards,
        ..nrt_core::Capacity::DEFAULT
    })
    .ok()?;
    let n = Nrt::with_host(&st, &*sim, &HOST);
    n.init(&InitOptions::default()).ok()?;
    let data = [0x5au8; 4096];
    let work = |vnc: LogicalCore| -> Option<()> {
        for _ in 0..ops {
            let t = n
                .tensor_allocate(placement, vnc.into(), 4096, Some("bench"))
                .ok()?;
            n.tensor_write(t, &data, 0).ok()?;
            n.tensor_free(t).ok()?;
        }
        Some(())
    };
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t0 = Instant::now();
        work(LogicalCore::new(0))?;
        one.push(f64::from(ops) / t0.elapsed().as_secs_f64());
        let t0 = Instant::now();
        let ok = std::thread::scope(|s| {
            let h = s.spawn(|| work(LogicalCore::new(1)));
            let a = work(LogicalCore::new(0));
            a.and(h.join().ok().flatten())
        });
        ok?;
        two.push(2.0 * f64::from(ops) / t0.elapsed().as_secs_f64());
    }
    n.close().ok()?;
    drop(sim);
    drop(backing);
    let ratio = paired_median_ratio(&two, &one);
    Some(ThreadScaling {
        one_thread_ops_per_s: median(&mut one),
        two_threads_ops_per_s: median(&mut two),
        ratio,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_ratio_is_robust_to_a_phase_change_between_the_two_sides() {
        // a costs 2x b. In rep 2 the machine slowed down between timing a and timing b; in
        // reps 3 and 5 it was slow for both. The ratio of the medians says 2 / 1.5 = 1.33;
        // the median of the paired ratios still says 2.
        let a = [2.0, 2.0, 3.0, 2.0, 3.0];
        let b = [1.0, 1.5, 1.5, 1.0, 1.5];
        assert_eq!(paired_median_ratio(&a, &b), 2.0);
        assert!((median(&mut a.to_vec()) / median(&mut b.to_vec()) - 4.0 / 3.0).abs() < 1e-12);
        let mut r = [4.0, 1.0, 2.0];
        assert_eq!(paired_median_ratio(&r, &[1.0, 1.0, 1.0]), 2.0);
        r.reverse();
        assert_eq!(paired_median_ratio(&r, &[1.0, 1.0, 1.0]), 2.0);
    }

    fn no_overlap(mut v: Vec<(u64, u64)>, cap: u64) {
        v.sort_unstable();
        for w in v.windows(2) {
            assert!(w[0].1 <= w[1].0, "overlap {:?}", w);
        }
        if let Some(last) = v.last() {
            assert!(last.1 <= cap);
        }
    }

    #[test]
    fn traces_are_deterministic_and_shaped_as_specified() {
        let a = Trace::generate(TraceSpec::trace_a(2000));
        let a2 = Trace::generate(TraceSpec::trace_a(2000));
        assert_eq!(a.churn, a2.churn);
        assert_eq!(a.churn.len(), 2000);
        for op in a.warmup.iter().chain(&a.churn) {
            if let Op::Alloc { size, align, .. } = *op {
                assert!((4 * KIB..=256 * MIB).contains(&size));
                assert!(align.is_power_of_two() && (64..=4096).contains(&align));
            }
        }
        assert!(a.fill.iter().map(|f| f.0).sum::<u64>() > CHANNEL);
        let b = Trace::generate(TraceSpec::trace_b(10));
        assert!(
            (60_000..80_000).contains(&b.live_after_warmup),
            "{}",
            b.live_after_warmup
        );
    }

    fn replay_is_sound<A: BenchAlloc>(a: A) {
        let t = Trace::generate(TraceSpec::trace_a(3000));
        let mut r = Replayer::new(a, t.sizes.len());
        r.run(&t.warmup);
        r.run(&t.churn);
        no_overlap(r.live_ranges(), CHANNEL);
    }

    #[test]
    fn every_allocator_replays_without_overlap() {
        replay_is_sound(CarveBench::new(CHANNEL));
        replay_is_sound(OffsetBench::new(CHANNEL));
        replay_is_sound(RangeBench::new(CHANNEL));
        replay_is_sound(FirstFitRef::new(CHANNEL));
        replay_is_sound(GenallocBench::new(CHANNEL));
    }

    /// The first-fit carve and the exhaustive first-fit reference place every block of the
    /// same trace at the same address.
    #[test]
    fn genalloc_places_as_the_first_fit_reference() {
        let t = Trace::generate(TraceSpec::trace_b(5000));
        let mut g = Replayer::new(GenallocBench::new(CHANNEL), t.sizes.len());
        let mut f = Replayer::new(FirstFitRef::new(CHANNEL), t.sizes.len());
        for r in [&t.warmup, &t.churn] {
            g.run(r);
            f.run(r);
        }
        let (mut a, mut b) = (g.live_ranges(), f.live_ranges());
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
    }

    #[test]
    fn first_fit_reference_takes_the_lowest_hole_and_coalesces() {
        let mut f = FirstFitRef::new(16 * KIB);
        let a: Vec<_> = (0..4).map(|_| f.alloc(4 * KIB, 64).unwrap()).collect();
        assert_eq!(f.alloc(1, 1), None, "full");
        f.free(a[3]);
        f.free(a[1]);
        assert_eq!(
            f.alloc(100, 64),
            Some((4 * KIB, 8 * KIB)),
            "lowest hole first"
        );
        f.free(a[0]);
        f.free((4 * KIB, 8 * KIB));
        f.free(a[2]);
        assert_eq!(
            f.alloc(16 * KIB, 4096),
            Some((0, 16 * KIB)),
            "all merged back"
        );
    }

    #[test]
    fn seed_spread_brackets_its_mean() {
        let s = utilisation_over_seeds(|| CarveBench::new(CHANNEL), TraceSpec::trace_a(500), 2);
        assert!(
            s.min <= s.mean && s.mean <= s.max && s.min > 0.5 && s.max <= 1.0,
            "{s:?}"
        );
    }

    #[test]
    fn carve_reuses_every_exact_hole() {
        assert_eq!(exact_reuse(CarveBench::new), 50);
        assert_eq!(exact_reuse(RangeBench::new), 50);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}

/// The two VIRTUAL-tensor pools of [`nrt_core::host_heap`] on one alloc/free mix (issue 17
/// item 4): the carve-backed [`nrt_core::tensor::ArenaHostMem`] against the
/// `linked_list_allocator::Heap`-backed [`nrt_core::tensor::HeapHostMem`], each call through
/// the `HostMem` trait as the runtime makes it (zeroed 64-aligned blocks).
#[derive(Copy, Clone, Debug)]
pub struct HostMemComparison {
    /// Median ns per operation (an alloc or a free) of the carve pool.
    pub carve_ns_per_op: f64,
    /// Median ns per operation of the heap pool.
    pub heap_ns_per_op: f64,
    /// Paired median of heap / carve ([`paired_median_ratio`]).
    pub heap_vs_carve_ratio: f64,
    /// Allocations the carve pool refused over all repetitions.
    pub carve_failures: u64,
    /// Allocations the heap pool refused over all repetitions.
    pub heap_failures: u64,
}

/// Bytes of each pool of [`host_mem_pools`].
pub const HOST_POOL_BYTES: usize = 64 << 20;

/// One [`host_mem_pools`] trace: `(alloc size)` or `(free slot)` steps over a slot table.
#[derive(Copy, Clone, Debug)]
enum HostOp {
    Alloc { slot: usize, size: usize },
    Free { slot: usize },
}

/// The VIRTUAL tensor mix: 32 long-lived tensors (a model's staged inputs and outputs, 64 KiB
/// to 1 MiB) allocated first, then `ops` steps of short-lived tensors around 96 live ones
/// (sizes log-uniform: 70 % 64 B–4 KiB, 25 % 4–64 KiB, 5 % 64 KiB–1 MiB), then every free.
/// `small` keeps every size at 64 B–4 KiB, where the placement rather than the zeroing is
/// most of the cost.
fn host_trace(ops: usize, small: bool, seed: u64) -> (Vec<HostOp>, usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let log_uniform = |rng: &mut StdRng, lo: u32, hi: u32| -> usize {
        let e = rng.gen_range(f64::from(lo)..f64::from(hi));
        2f64.powf(e) as usize
    };
    let size = |rng: &mut StdRng| -> usize {
        let p: f64 = rng.gen();
        if small || p < 0.70 {
            log_uniform(rng, 6, 12)
        } else if p < 0.95 {
            log_uniform(rng, 12, 16)
        } else {
            log_uniform(rng, 16, 20)
        }
    };
    const LONG: usize = 32;
    const SHORT: usize = 96;
    let slots = LONG + SHORT;
    let mut t = Vec::with_capacity(ops + 2 * slots);
    for slot in 0..LONG {
        let size = if small {
            size(&mut rng)
        } else {
            log_uniform(&mut rng, 16, 20)
        };
        t.push(HostOp::Alloc { slot, size });
    }
    let mut live = [false; SHORT];
    for _ in 0..ops {
        let k = rng.gen_range(0..SHORT);
        let slot = LONG + k;
        if live[k] {
            t.push(HostOp::Free { slot });
        } else {
            t.push(HostOp::Alloc {
                slot,
                size: size(&mut rng),
            });
        }
        live[k] = !live[k];
    }
    for (k, l) in live.iter().enumerate() {
        if *l {
            t.push(HostOp::Free { slot: LONG + k });
        }
    }
    for slot in 0..LONG {
        t.push(HostOp::Free { slot });
    }
    (t, slots)
}

/// Replays `trace` on `pool` once: `(ns per op, refused allocations)`.
fn host_replay(pool: &dyn nrt_core::tensor::HostMem, trace: &[HostOp], slots: usize) -> (f64, u64) {
    use std::ptr::NonNull;
    let mut held: Vec<Option<(NonNull<u8>, usize)>> = vec![None; slots];
    let mut failures = 0;
    let t0 = thread_cpu_ns();
    for op in std::hint::black_box(trace) {
        match *op {
            HostOp::Alloc { slot, size } => match pool.alloc(size) {
                Some(p) => held[slot] = Some((p, size)),
                None => failures += 1,
            },
            HostOp::Free { slot } => {
                if let Some((p, size)) = held[slot].take() {
                    // SAFETY: `p` came from `pool.alloc(size)` and is dropped from the table.
                    unsafe { pool.free(p, size) };
                }
            }
        }
    }
    let dt = thread_cpu_ns() - t0;
    (dt as f64 / trace.len().max(1) as f64, failures)
}

/// [`HostMemComparison`] of the two pools on the VIRTUAL tensor mix (`small`: sizes 64 B–4 KiB
/// only), repetitions alternating which pool goes first, medians of CPU time per op.
pub fn host_mem_pools(quick: bool, small: bool) -> HostMemComparison {
    use nrt_core::tensor::{ArenaHostMem, HeapHostMem};
    static CARVE: ArenaHostMem<HOST_POOL_BYTES, 1024> = ArenaHostMem::new();
    static HEAP: HeapHostMem<HOST_POOL_BYTES> = HeapHostMem::new();
    let (ops, reps) = if quick { (5_000, 3) } else { (200_000, 9) };
    let (trace, slots) = host_trace(ops, small, 0x5eed_0017);
    // Warm-up: both pools initialised and their pages touched.
    host_replay(&CARVE, &trace, slots);
    host_replay(&HEAP, &trace, slots);
    let (mut c, mut h) = (Vec::new(), Vec::new());
    let (mut cf, mut hf) = (0, 0);
    for rep in 0..reps {
        let mut run_carve = || {
            let (ns, f) = host_replay(&CARVE, &trace, slots);
            c.push(ns);
            cf += f;
        };
        let mut run_heap = || {
            let (ns, f) = host_replay(&HEAP, &trace, slots);
            h.push(ns);
            hf += f;
        };
        if rep % 2 == 0 {
            run_carve();
            run_heap();
        } else {
            run_heap();
            run_carve();
        }
    }
    let ratio = paired_median_ratio(&h, &c);
    HostMemComparison {
        carve_ns_per_op: median(&mut c),
        heap_ns_per_op: median(&mut h),
        heap_vs_carve_ratio: ratio,
        carve_failures: cf,
        heap_failures: hf,
    }
}
