//! `churn_counts <a|b> <genalloc|tlsf>`: replays one trace's untimed warm-up and then its
//! 100 000 churn ops once, the churn inside [`churn`] (never inlined), so that a deterministic
//! tool can count the churn alone (docs/PERFORMANCE.md, "Genalloc placement vs the TLSF carve"):
//!
//! ```sh
//! cargo build --release -p nrt-bench --bin churn_counts
//! valgrind --tool=callgrind --toggle-collect='churn_counts::churn*' --branch-sim=yes \
//!     target/release/churn_counts b genalloc
//! ```
//!
//! Instruction and mispredicted-branch counts do not depend on what else the machine runs,
//! which the timed figures of `nrt-bench` do. Exits 2 on bad arguments, 1 if the replay had
//! refusals (the counts would then describe a different run than the bench's).

use std::process::ExitCode;

use nrt_bench::{BenchAlloc, CarveBench, GenallocBench, Op, Replayer, Trace, TraceSpec, CHANNEL};

const USAGE: &str = "usage: churn_counts <a|b> <genalloc|tlsf>";

/// Churn ops, as in the `nrt-bench` figures.
const CHURN_OPS: usize = 100_000;

/// The counted part: the churn of the trace, once.
#[inline(never)]
fn churn<A: BenchAlloc>(r: &mut Replayer<A>, ops: &[Op]) {
    r.run(ops);
}

fn replay<A: BenchAlloc>(alloc: A, t: &Trace) -> u64 {
    let mut r = Replayer::new(alloc, t.sizes.len());
    r.reset();
    r.run(&t.warmup);
    churn(&mut r, std::hint::black_box(&t.churn));
    r.failures
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let spec = match args.first().map(String::as_str) {
        Some("a") => TraceSpec::trace_a(CHURN_OPS),
        Some("b") => TraceSpec::trace_b(CHURN_OPS),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let t = Trace::generate(spec);
    let failures = match args.get(1).map(String::as_str) {
        Some("genalloc") => replay(GenallocBench::new(CHANNEL), &t),
        Some("tlsf") => replay(CarveBench::new(CHANNEL), &t),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    println!("{} churn ops, {failures} refusals", t.churn.len());
    if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
