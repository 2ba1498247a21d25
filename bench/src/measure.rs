//! Replaying a trace and timing it: the replayer, the round-robin repetitions, paired ratios
//! and medians.

use super::*;

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
