//! The two VIRTUAL-tensor host pools compared.

use super::*;

/// The two VIRTUAL-tensor pools of [`nrt_core::host_heap`] on one alloc/free mix: the
/// carve-backed [`nrt_core::tensor::ArenaHostMem`] against the
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
