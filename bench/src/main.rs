//! `nrt-bench [--quick] [--json] [--dmem] [--capi]`: runs the carve-vs-crates comparison and
//! prints one JSON object on stdout (keys in `docs/PERFORMANCE.md`); without `--json` a human
//! summary goes to stderr as well. `--dmem` runs only the dmem-path-vs-raw-carve comparison
//! (small enough to run under `valgrind --tool=callgrind` for instruction counts); `--capi`
//! only the C API thread benchmark (`nrt_bench::capi`); `--host-mem` only the two VIRTUAL
//! tensor pools (`nrt_bench::host_mem_pools`); `--neff` only NEFF loading (`nrt_bench::neff`).

use std::process::ExitCode;

use nrt_bench::capi::{capi_threads, CapiThreads};
use nrt_bench::{
    dmem_path_vs_carve, exact_reuse, host_mem_pools, measure, measure_all, tensor_scale,
    tensor_threads, utilisation_over_seeds, CarveBench, FirstFitRef, GenallocBench, Measurement,
    OffsetBench, RangeBench, SeedSpread, Trace, TraceSession, TraceSpec, CARVE_FINE_GRANULE,
    CARVE_GRANULE, CHANNEL, OFFSET_UNIT, REUSE_BLOCK,
};
use serde_json::json;

const USAGE: &str =
    "usage: nrt-bench [--quick] [--json] [--dmem] [--threads] [--capi] [--host-mem] [--scale] [--neff]
  --quick  small op counts (CI smoke): 10k churn ops, 3 repetitions
  --json   print only the JSON object (no human summary on stderr)
  --dmem   only the full dmem path vs the raw carve (keys dmem_path_ns_per_op,
           carve_raw_ns_per_op_same_trace, dmem_path_vs_carve_raw_ratio)
  --threads only tensor allocate/write/free with 1 vs 2 threads on different logical
           cores (keys tensor_threads_*)
  --capi   only the C API thread benchmark (keys capi_*)
  --host-mem only the VIRTUAL tensor pools, carve vs linked_list_allocator (keys
           host_mem_*)
  --scale  only tensor allocate + free with 1 000 vs 200 000 live device tensors (keys
           tensor_scale_*)
  --neff   only NEFF loading: nrt_load's path vs its floor, and the peak RSS of nrt_load,
           neff inspect and plan of big NEFFs (keys neff_*; needs the release nrt-dmem and
           neff_load binaries next to this one, which cargo xtask bench builds)";

fn opt(x: Option<f64>) -> serde_json::Value {
    x.map_or(serde_json::Value::Null, |v| json!(v))
}

fn spread(s: SeedSpread) -> serde_json::Value {
    json!({"mean": s.mean, "min": s.min, "max": s.max})
}

fn main() -> ExitCode {
    let mut quick = false;
    let mut json_only = false;
    let mut dmem_only = false;
    let mut threads_only = false;
    let mut capi_only = false;
    let mut host_mem_only = false;
    let mut scale_only = false;
    let mut neff_only = false;
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--quick" => quick = true,
            "--json" => json_only = true,
            "--dmem" => dmem_only = true,
            "--threads" => threads_only = true,
            "--capi" => capi_only = true,
            "--host-mem" => host_mem_only = true,
            "--scale" => scale_only = true,
            "--neff" => neff_only = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("nrt-bench: unknown argument `{other}`\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    // Measured last in a full run (after the allocator comparison, as it always was), so the
    // runtime's large state blocks do not change the heap the comparison starts from.
    let dmem_json = || {
        let p = dmem_path_vs_carve(quick);
        json!({
            "dmem_path_ns_per_op": opt(p.map(|p| p.dmem_ns_per_op)),
            "carve_raw_ns_per_op_same_trace": opt(p.map(|p| p.carve_ns_per_op)),
            "dmem_path_vs_carve_raw_ratio": opt(p.map(|p| p.ratio)),
        })
    };
    // 1 vs 2 threads on different logical cores, device and VIRTUAL tensors.
    let threads_json = || {
        use nrt_core::tensor::Placement;
        let mut o = serde_json::Map::new();
        let shards = nrt_core::Capacity::DEFAULT.shards;
        for (name, placement, shards) in [
            ("device", Placement::Device, shards),
            ("virtual", Placement::Virtual, shards),
            ("virtual_1shard", Placement::Virtual, 1),
        ] {
            let t = tensor_threads(quick, placement, shards);
            o.insert(
                format!("tensor_threads_{name}_1t_ops_per_s"),
                opt(t.map(|t| t.one_thread_ops_per_s)),
            );
            o.insert(
                format!("tensor_threads_{name}_2t_ops_per_s"),
                opt(t.map(|t| t.two_threads_ops_per_s)),
            );
            o.insert(
                format!("tensor_threads_{name}_2t_vs_1t_ratio"),
                opt(t.map(|t| t.ratio)),
            );
        }
        serde_json::Value::Object(o)
    };
    // The VIRTUAL tensor pools: the mix, and its 64 B–4 KiB variant.
    let host_mem_json = || {
        let mut o = serde_json::Map::new();
        for (name, small) in [("mix", false), ("small", true)] {
            let c = host_mem_pools(quick, small);
            o.insert(
                format!("host_mem_{name}_carve_ns_per_op"),
                json!(c.carve_ns_per_op),
            );
            o.insert(
                format!("host_mem_{name}_heap_ns_per_op"),
                json!(c.heap_ns_per_op),
            );
            o.insert(
                format!("host_mem_{name}_heap_vs_carve_ratio"),
                json!(c.heap_vs_carve_ratio),
            );
            o.insert(
                format!("host_mem_{name}_carve_failures"),
                json!(c.carve_failures),
            );
            o.insert(
                format!("host_mem_{name}_heap_failures"),
                json!(c.heap_failures),
            );
        }
        serde_json::Value::Object(o)
    };
    // Allocate + free at few and at many live tensors, each runtime as `nrt_init` builds it.
    let scale_json = || {
        let t = tensor_scale(quick);
        json!({
            "tensor_scale_few_live": opt(t.map(|t| t.few as f64)),
            "tensor_scale_many_live": opt(t.map(|t| t.many as f64)),
            "tensor_scale_window_few_ns_per_op": opt(t.map(|t| t.window_few_ns_per_op)),
            "tensor_scale_window_many_ns_per_op": opt(t.map(|t| t.window_many_ns_per_op)),
            "tensor_scale_window_many_vs_few_ratio": opt(t.map(|t| t.window_ratio)),
            "tensor_scale_random_few_ns_per_op": opt(t.map(|t| t.random_few_ns_per_op)),
            "tensor_scale_random_many_ns_per_op": opt(t.map(|t| t.random_many_ns_per_op)),
            "tensor_scale_random_many_vs_few_ratio": opt(t.map(|t| t.random_ratio)),
        })
    };
    if host_mem_only {
        println!("{}", host_mem_json());
        return ExitCode::SUCCESS;
    }
    if scale_only {
        println!("{}", scale_json());
        return ExitCode::SUCCESS;
    }
    if neff_only {
        let (j, ok) = neff_json(quick, json_only);
        println!("{j}");
        return if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if capi_only {
        let c = capi_threads(quick);
        if !json_only {
            capi_summary(&c);
        }
        println!("{}", capi_json(&c));
        return if c.is_ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if dmem_only {
        println!("{}", dmem_json());
        return ExitCode::SUCCESS;
    }
    if threads_only {
        println!("{}", threads_json());
        return ExitCode::SUCCESS;
    }
    let (ops, reps) = if quick { (10_000, 3) } else { (100_000, 7) };

    let a = Trace::generate(TraceSpec::trace_a(ops));
    let b = Trace::generate(TraceSpec::trace_b(ops));

    let ms = {
        let mut c = TraceSession::new(CarveBench::new(CHANNEL), &a);
        let mut cf = TraceSession::new(CarveBench::with_granule(CHANNEL, CARVE_FINE_GRANULE), &a);
        let mut o = TraceSession::new(OffsetBench::new(CHANNEL), &a);
        let mut cb = TraceSession::new(CarveBench::new(CHANNEL), &b);
        let mut ob = TraceSession::new(OffsetBench::new(CHANNEL), &b);
        let mut g = TraceSession::new(GenallocBench::new(CHANNEL), &a);
        let mut gb = TraceSession::new(GenallocBench::new(CHANNEL), &b);
        measure_all(
            &mut [&mut c, &mut cf, &mut o, &mut cb, &mut ob, &mut g, &mut gb],
            reps,
        )
    };
    let (ms, rep_times) = ms;
    let (carve, carve_fine, offset, carve_b, offset_b) = (ms[0], ms[1], ms[2], ms[3], ms[4]);
    let (genalloc, genalloc_b) = (ms[5], ms[6]);
    // range-alloc is O(free ranges) per op: fewer repetitions, run on its own.
    let range = measure(RangeBench::new(CHANNEL), &a, reps.min(3));

    // Utilisation at the first failure averaged over several trace-A seeds (placement policy
    // comparison; the single-trace figure above hinges on one fill request).
    let seeds = if quick { 2 } else { 10 };
    let spec = TraceSpec::trace_a(ops);
    let seeds_carve = utilisation_over_seeds(|| CarveBench::new(CHANNEL), spec, seeds);
    let seeds_offset = utilisation_over_seeds(|| OffsetBench::new(CHANNEL), spec, seeds);
    let seeds_range = utilisation_over_seeds(|| RangeBench::new(CHANNEL), spec, seeds);
    let seeds_first_fit = utilisation_over_seeds(|| FirstFitRef::new(CHANNEL), spec, seeds);

    let reuse_carve = exact_reuse(CarveBench::new);
    let reuse_offset = exact_reuse(OffsetBench::new);
    let reuse_range = exact_reuse(RangeBench::new);

    let mut out = json!({
        "carve_ns_per_op": carve.ns_per_op,
        "offset_allocator_ns_per_op": offset.ns_per_op,
        "range_alloc_ns_per_op": range.ns_per_op,
        "carve_ns_per_op_68k_live": carve_b.ns_per_op,
        "offset_allocator_ns_per_op_68k_live": offset_b.ns_per_op,
        "carve_utilisation_at_first_failure": carve.utilisation_at_first_failure,
        "offset_allocator_utilisation_at_first_failure": offset.utilisation_at_first_failure,
        "range_alloc_utilisation_at_first_failure": range.utilisation_at_first_failure,
        "carve_utilisation_at_first_failure_68k_live": carve_b.utilisation_at_first_failure,
        "offset_allocator_utilisation_at_first_failure_68k_live": offset_b.utilisation_at_first_failure,
        "carve_exact_reuse": reuse_carve,
        "offset_allocator_exact_reuse": reuse_offset,
        "range_alloc_exact_reuse": reuse_range,
        "carve_ns_per_op_granule_64": carve_fine.ns_per_op,
        "carve_utilisation_at_first_failure_granule_64": carve_fine.utilisation_at_first_failure,
        "carve_utilisation_after_fill": carve.utilisation_after_fill,
        "offset_allocator_utilisation_after_fill": offset.utilisation_after_fill,
        "range_alloc_utilisation_after_fill": range.utilisation_after_fill,
        "utilisation_at_first_failure_over_seeds": {
            "seeds": seeds,
            "carve": spread(seeds_carve),
            "offset_allocator": spread(seeds_offset),
            "range_alloc": spread(seeds_range),
            "first_fit_reference": spread(seeds_first_fit),
        },
        "carve_trace_failures": carve.failures,
        "offset_allocator_trace_failures": offset.failures,
        "range_alloc_trace_failures": range.failures,
        "carve_vs_offset_allocator_ns_ratio": rep_times.paired_ratio(0, 2),
        "carve_68k_vs_trace_a_ns_ratio": rep_times.paired_ratio(3, 0),
        "config": {
            "quick": quick,
            "churn_ops": ops,
            "repetitions": reps,
            "channel_bytes": CHANNEL,
            "carve_granule_bytes": CARVE_GRANULE,
            "carve_fine_granule_bytes": CARVE_FINE_GRANULE,
            "offset_allocator_unit_bytes": OFFSET_UNIT,
            "reuse_block_bytes": REUSE_BLOCK,
            "trace_a_live_after_warmup": a.live_after_warmup,
            "trace_a_mean_live": a.mean_live_in_churn,
            "trace_b_live_after_warmup": b.live_after_warmup,
            "trace_b_mean_live": b.mean_live_in_churn,
        },
    });

    // The first-fit (genalloc) carve against the TLSF carve (docs/PLACEMENT.md); a separate
    // object, as one `json!` this large exceeds the macro's recursion limit.
    let genalloc_json = json!({
        "genalloc_ns_per_op": genalloc.ns_per_op,
        "genalloc_ns_per_op_68k_live": genalloc_b.ns_per_op,
        "genalloc_vs_carve_ns_ratio": rep_times.paired_ratio(5, 0),
        "genalloc_vs_carve_ns_ratio_68k_live": rep_times.paired_ratio(6, 3),
        "genalloc_utilisation_at_first_failure": genalloc.utilisation_at_first_failure,
        "genalloc_utilisation_at_first_failure_68k_live": genalloc_b.utilisation_at_first_failure,
        "genalloc_trace_failures": genalloc.failures,
    });
    if let (Some(o), serde_json::Value::Object(g)) = (out.as_object_mut(), genalloc_json) {
        o.extend(g);
    }
    if let (Some(o), serde_json::Value::Object(d)) = (out.as_object_mut(), dmem_json()) {
        o.extend(d);
    }
    if let (Some(o), serde_json::Value::Object(t)) = (out.as_object_mut(), threads_json()) {
        o.extend(t);
    }
    if let (Some(o), serde_json::Value::Object(h)) = (out.as_object_mut(), host_mem_json()) {
        o.extend(h);
    }
    if let (Some(o), serde_json::Value::Object(t)) = (out.as_object_mut(), scale_json()) {
        o.extend(t);
    }

    let (neff, neff_ok) = neff_json(quick, json_only);
    if let (Some(o), serde_json::Value::Object(n)) = (out.as_object_mut(), neff) {
        o.extend(n);
    }

    // The C API under threads, last: it brings up the process-global `libnrt` runtime.
    let capi = capi_threads(quick);
    if let (Some(o), serde_json::Value::Object(c)) = (out.as_object_mut(), capi_json(&capi)) {
        o.extend(c);
    }

    if !json_only {
        let row = |name: &str, m: &Measurement| {
            eprintln!(
                "{name:<26} {:>8.1} ns/op (min {:>7.1}, max {:>7.1})  util@first-fail {:.4}  after fill {:.4}  trace failures {}",
                m.ns_per_op,
                m.min_ns_per_op,
                m.max_ns_per_op,
                m.utilisation_at_first_failure,
                m.utilisation_after_fill,
                m.failures
            );
        };
        let trace = |name: &str, live: f64, rows: &[(&str, &Measurement)]| {
            eprintln!("trace {name}: {ops} churn ops, {reps} reps, ~{live:.0} live");
            for (label, m) in rows {
                row(label, m);
            }
        };
        trace(
            "A",
            a.mean_live_in_churn,
            &[
                ("carve (4 KiB granule)", &carve),
                ("carve (64 B granule)", &carve_fine),
                ("offset-allocator (4 KiB)", &offset),
                ("range-alloc", &range),
                ("genalloc (first fit)", &genalloc),
            ],
        );
        trace(
            "B",
            b.mean_live_in_churn,
            &[
                ("carve (4 KiB granule)", &carve_b),
                ("offset-allocator (4 KiB)", &offset_b),
                ("genalloc (first fit)", &genalloc_b),
            ],
        );
        eprintln!(
            "genalloc / carve (TLSF) {:.3} on trace A, {:.3} on trace B (medians of per-rep ratios)",
            rep_times.paired_ratio(5, 0),
            rep_times.paired_ratio(6, 3)
        );
        eprintln!("utilisation at first failure over {seeds} trace-A seeds (mean, min-max):");
        for (name, s) in [
            ("carve", seeds_carve),
            ("offset-allocator", seeds_offset),
            ("range-alloc", seeds_range),
            ("first fit (reference)", seeds_first_fit),
        ] {
            eprintln!("  {name:<24} {:.3}  ({:.3}-{:.3})", s.mean, s.min, s.max);
        }
        eprintln!(
            "exact reuse (of 50): carve {reuse_carve}, offset-allocator {reuse_offset}, range-alloc {reuse_range}"
        );
        eprintln!(
            "carve / offset-allocator {:.3}, carve trace B / trace A {:.3} (medians of per-rep ratios)",
            rep_times.paired_ratio(0, 2),
            rep_times.paired_ratio(3, 0)
        );
        if let Some(p) = dmem_path_vs_carve(quick) {
            eprintln!(
                "dmem path {:.1} ns/op vs raw carve {:.1} ns/op on the same trace: {:.2}x",
                p.dmem_ns_per_op, p.carve_ns_per_op, p.ratio
            );
        }
    }
    if !json_only {
        capi_summary(&capi);
    }
    println!("{out}");
    if capi.is_ok() && neff_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The `neff_*` keys: `nrt_load`'s path against its floor, and (not with `quick`) the peak RSS
/// of loading, inspecting and planning big NEFFs. `false` when a measurement failed.
fn neff_json(quick: bool, json_only: bool) -> (serde_json::Value, bool) {
    use nrt_bench::neff::{neff_load_vs_floor, neff_rss};
    let mut o = serde_json::Map::new();
    let mut ok = true;
    match neff_load_vs_floor(quick) {
        Ok(l) => {
            if !json_only {
                eprintln!(
                    "NEFF load of {} MiB incompressible weights: {:.1} ms vs floor (inflate + one \
                     copy) {:.1} ms: {:.3}x (median of {} paired reps), {} pass(es)",
                    l.weight_bytes >> 20,
                    l.load_ms,
                    l.floor_ms,
                    l.ratio,
                    l.reps,
                    l.passes
                );
            }
            o.insert("neff_load_weight_bytes".into(), json!(l.weight_bytes));
            o.insert("neff_load_file_bytes".into(), json!(l.neff_bytes));
            o.insert("neff_load_ms".into(), json!(l.load_ms));
            o.insert("neff_load_floor_ms".into(), json!(l.floor_ms));
            o.insert("neff_load_vs_floor_ratio".into(), json!(l.ratio));
            o.insert("neff_load_passes".into(), json!(l.passes));
            o.insert("neff_load_repetitions".into(), json!(l.reps));
        }
        Err(e) => {
            ok = false;
            o.insert("neff_load_error".into(), json!(e));
        }
    }
    if quick {
        return (serde_json::Value::Object(o), ok);
    }
    match neff_rss() {
        Ok(r) => {
            if !json_only {
                eprintln!(
                    "peak RSS: nrt_load of {} GiB of weights {} MiB ({:.1} s); neff inspect of {} \
                     GiB {} MiB ({:.1} s); plan {} MiB ({:.1} s)",
                    r.load_weight_bytes >> 30,
                    r.nrt_load.peak_kib >> 10,
                    r.nrt_load.seconds,
                    r.read_weight_bytes >> 30,
                    r.inspect.peak_kib >> 10,
                    r.inspect.seconds,
                    r.plan.peak_kib >> 10,
                    r.plan.seconds
                );
            }
            o.insert(
                "neff_rss_nrt_load_weight_bytes".into(),
                json!(r.load_weight_bytes),
            );
            o.insert("neff_rss_nrt_load_kib".into(), json!(r.nrt_load.peak_kib));
            o.insert("neff_nrt_load_seconds".into(), json!(r.nrt_load.seconds));
            o.insert(
                "neff_rss_read_weight_bytes".into(),
                json!(r.read_weight_bytes),
            );
            o.insert("neff_rss_inspect_kib".into(), json!(r.inspect.peak_kib));
            o.insert("neff_inspect_seconds".into(), json!(r.inspect.seconds));
            o.insert("neff_rss_plan_kib".into(), json!(r.plan.peak_kib));
            o.insert("neff_plan_seconds".into(), json!(r.plan.seconds));
        }
        Err(e) => {
            ok = false;
            o.insert("neff_rss_error".into(), json!(e));
        }
    }
    (serde_json::Value::Object(o), ok)
}

/// The `capi_*` keys of the JSON object (`capi_error` when the benchmark could not run).
fn capi_json(c: &Result<CapiThreads, String>) -> serde_json::Value {
    match c {
        Ok(c) => json!({
            "capi_ops_per_s_1_thread": c.ops_per_s[0],
            "capi_ops_per_s_2_threads": c.ops_per_s[1],
            "capi_ops_per_s_4_threads": c.ops_per_s[2],
            "capi_ops_per_s_range": c.ops_per_s_range.map(|(a, b)| [a, b]),
            "capi_2_vs_1_thread_ratio": c.ratio_2_vs_1,
            "capi_4_vs_1_thread_ratio": c.ratio_4_vs_1,
            "capi_cpu_ns_per_call": c.cpu_ns_per_call,
            "capi_cpu_ns_2_vs_1_thread_ratio": c.cpu_ratio_2_vs_1,
            "capi_vncs": c.vncs,
            "capi_hbm": c.hbm,
            "capi_iterations_per_thread": c.iterations,
            "capi_repetitions": c.repetitions,
        }),
        Err(e) => json!({ "capi_error": e }),
    }
}

fn capi_summary(c: &Result<CapiThreads, String>) {
    match c {
        Ok(c) => eprintln!(
            "C API alloc/write/free 4 KiB on vncs {:?} (HBM {:?}): 1 thread {:.2} M calls/s, \
             2 threads {:.2} M ({:.2}x), 4 threads {:.2} M ({:.2}x); CPU ns/call {:.0} / {:.0} / {:.0} \
             (2/1 threads {:.2}) (medians of {} reps)",
            c.vncs,
            c.hbm,
            c.ops_per_s[0] / 1e6,
            c.ops_per_s[1] / 1e6,
            c.ratio_2_vs_1,
            c.ops_per_s[2] / 1e6,
            c.ratio_4_vs_1,
            c.cpu_ns_per_call[0],
            c.cpu_ns_per_call[1],
            c.cpu_ns_per_call[2],
            c.cpu_ratio_2_vs_1,
            c.repetitions
        ),
        Err(e) => eprintln!("C API thread benchmark failed: {e}"),
    }
}
