//! The generated traces (docs/PERFORMANCE.md "Carve allocator vs offset-allocator"): requests,
//! their parameters, and the warm-up / churn / fill sequences every allocator replays.

use super::*;

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

pub(crate) fn log_uniform(rng: &mut StdRng, lo: u64, hi: u64) -> u64 {
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
