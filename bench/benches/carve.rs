//! Criterion view of the same traces as the `nrt-bench` binary: the churn phase of each trace,
//! timed per operation, with the warm-up (and the reset before it) left out of the clock
//! (docs/PERFORMANCE.md).
// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nrt_bench::{
    BenchAlloc, CarveBench, GenallocBench, OffsetBench, RangeBench, Replayer, Trace, TraceSpec,
    CHANNEL,
};

fn churn<A: BenchAlloc>(c: &mut Criterion, group: &str, trace: &Trace, alloc: A) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(trace.churn.len() as u64));
    g.sample_size(10);
    let mut r = Replayer::new(alloc, trace.sizes.len());
    g.bench_function(A::NAME, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                r.reset();
                r.run(&trace.warmup);
                let t0 = Instant::now();
                r.run(std::hint::black_box(&trace.churn));
                total += t0.elapsed();
            }
            total
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    let a = Trace::generate(TraceSpec::trace_a(20_000));
    churn(c, "trace_a", &a, CarveBench::new(CHANNEL));
    churn(c, "trace_a", &a, GenallocBench::new(CHANNEL));
    churn(c, "trace_a", &a, OffsetBench::new(CHANNEL));
    churn(c, "trace_a", &a, RangeBench::new(CHANNEL));
    let b = Trace::generate(TraceSpec::trace_b(20_000));
    churn(c, "trace_b_68k_live", &b, CarveBench::new(CHANNEL));
    churn(c, "trace_b_68k_live", &b, GenallocBench::new(CHANNEL));
    churn(c, "trace_b_68k_live", &b, OffsetBench::new(CHANNEL));
}

criterion_group!(carve_benches, benches);
criterion_main!(carve_benches);
