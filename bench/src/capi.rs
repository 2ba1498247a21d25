//! The C API under threads (docs/PERFORMANCE.md "The C API under threads"):
//! `nrt_tensor_allocate` (DEVICE placement) / `nrt_tensor_write` / `nrt_tensor_free` of 4 KiB
//! tensors through `libnrt`'s entry points (the `nrt` rlib, the same code as `libnrt.so`), with
//! 1, 2 and 4 threads, each on its own logical core of a simulated trn2, the cores chosen on
//! distinct HBM channels.
//!
//! Throughput is wall-clock: every thread of a configuration starts at one barrier, and the
//! time runs until the last one finishes. One *op* is one C call (an iteration is 3 calls).
//! The configurations take turns within each repetition (1, 2, 4 threads, then again), so a
//! ratio pairs figures measured back to back; ratios are medians of the per-repetition ratios.
//!
//! Wall-clock scaling needs idle cores. On a shared machine the benchmark also reports the
//! CPU time each call costs (the workers' thread CPU time over the calls they made): time lost
//! to contention that spins or bounces cache lines shows up there whatever else runs, while
//! time a thread spends descheduled does not (nor does time asleep on a contended futex).

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use nrt::{
    nrt_close, nrt_init, nrt_tensor_allocate, nrt_tensor_device_allocation_info_t, nrt_tensor_free,
    nrt_tensor_get_device_allocation_info, nrt_tensor_t, nrt_tensor_write, NRT_STATUS,
};

use crate::{median, thread_cpu_ns};

/// Bytes of each tensor.
pub const TENSOR_BYTES: usize = 4096;
/// `nrt_tensor_placement_t` DEVICE.
const DEVICE: u32 = 0;
/// Thread counts measured.
pub const THREADS: [usize; 3] = [1, 2, 4];

/// What [`capi_threads`] measured.
#[derive(Clone, Debug)]
pub struct CapiThreads {
    /// Median C calls per second (all threads together) for 1, 2 and 4 threads.
    pub ops_per_s: [f64; 3],
    /// Smallest and largest per-repetition figure of each configuration.
    pub ops_per_s_range: [(f64, f64); 3],
    /// Median of the per-repetition ratios 2 threads / 1 thread.
    pub ratio_2_vs_1: f64,
    /// Median of the per-repetition ratios 4 threads / 1 thread.
    pub ratio_4_vs_1: f64,
    /// Median CPU nanoseconds per call (workers' thread CPU time / calls) for 1, 2, 4 threads.
    pub cpu_ns_per_call: [f64; 3],
    /// Median of the per-repetition ratios CPU ns per call, 2 threads / 1 thread (1.0: no
    /// contention cost).
    pub cpu_ratio_2_vs_1: f64,
    /// The logical cores the threads ran on (thread `i` on `vncs[i]`).
    pub vncs: [u32; 4],
    /// The HBM channel of each of those cores (what a tensor allocated there reported).
    pub hbm: [u32; 4],
    /// Iterations per thread per repetition.
    pub iterations: usize,
    /// Repetitions.
    pub repetitions: usize,
}

fn ok(st: NRT_STATUS, what: &str) -> Result<(), String> {
    if st == 0 {
        Ok(())
    } else {
        Err(format!("{what}: NRT_STATUS {st}"))
    }
}

/// The HBM channel that serves logical core `vnc` (from one tensor allocated there).
fn hbm_of(vnc: u32) -> Result<u32, String> {
    let mut t: *mut nrt_tensor_t = null_mut();
    let mut info = nrt_tensor_device_allocation_info_t::default();
    // SAFETY: C-ABI calls with valid out-pointers; the tensor is freed before returning.
    unsafe {
        ok(
            nrt_tensor_allocate(DEVICE, vnc as i32, TENSOR_BYTES, null_mut(), &mut t),
            "nrt_tensor_allocate",
        )?;
        let st = nrt_tensor_get_device_allocation_info(t, &mut info);
        nrt_tensor_free(&mut t);
        ok(st, "nrt_tensor_get_device_allocation_info")?;
    }
    Ok(info.hbm_index as u32)
}

/// One thread's loop: `n` × (allocate, write 4 KiB, free) on `vnc`; returns the thread CPU
/// nanoseconds it took.
fn churn(vnc: u32, n: usize) -> Result<u64, String> {
    let data = [0x5Au8; TENSOR_BYTES];
    let t0 = thread_cpu_ns();
    for _ in 0..n {
        let mut t: *mut nrt_tensor_t = null_mut();
        // SAFETY: C-ABI calls with valid pointers; `data` outlives the write; the tensor is
        // freed in the same iteration.
        unsafe {
            ok(
                nrt_tensor_allocate(DEVICE, vnc as i32, TENSOR_BYTES, null_mut(), &mut t),
                "nrt_tensor_allocate",
            )?;
            let st = nrt_tensor_write(t, data.as_ptr() as *const c_void, 0, TENSOR_BYTES);
            nrt_tensor_free(&mut t);
            ok(st, "nrt_tensor_write")?;
        }
    }
    Ok(thread_cpu_ns() - t0)
}

/// `(C calls per second, CPU ns per call)` of `threads` threads, thread `i` on `vncs[i]`,
/// `n` iterations each.
fn run(vncs: &[u32], n: usize) -> Result<(f64, f64), String> {
    let barrier = Arc::new(Barrier::new(vncs.len() + 1));
    let workers: Vec<_> = vncs
        .iter()
        .map(|&v| {
            let b = Arc::clone(&barrier);
            std::thread::spawn(move || {
                b.wait();
                churn(v, n)
            })
        })
        .collect();
    barrier.wait();
    let t0 = Instant::now();
    let mut cpu = 0;
    for w in workers {
        cpu += w.join().map_err(|_| "a worker panicked".to_string())??;
    }
    let secs = t0.elapsed().as_secs_f64();
    let calls = (3 * n * vncs.len()) as f64;
    Ok((calls / secs, cpu as f64 / calls))
}

/// Runs the benchmark on a fresh `nrt_init` of a simulated trn2 (the environment is set
/// here: `NRT_DMEM_DEVICE=sim:trn2`, logging off) and closes it again. `quick`: the CI smoke
/// (fewer iterations and repetitions).
pub fn capi_threads(quick: bool) -> Result<CapiThreads, String> {
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2");
    std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    std::env::remove_var("NEURON_RT_VISIBLE_CORES");
    std::env::remove_var("NEURON_RT_NUM_CORES");
    // SAFETY: NULL version strings are allowed (not read).
    let st = unsafe { nrt_init(0, std::ptr::null(), std::ptr::null()) };
    ok(st, "nrt_init")?;
    let r = measure(quick);
    nrt_close();
    r
}

fn measure(quick: bool) -> Result<CapiThreads, String> {
    // Logical cores on distinct HBM channels, in core order (trn2 at LNC 2: 4 cores, one
    // channel each).
    let mut vncs = Vec::new();
    let mut hbm = Vec::new();
    for v in 0..64u32 {
        let Ok(h) = hbm_of(v) else { break };
        if !hbm.contains(&h) {
            vncs.push(v);
            hbm.push(h);
        }
        if vncs.len() == 4 {
            break;
        }
    }
    if vncs.len() < 4 {
        return Err(format!(
            "need 4 logical cores on distinct HBM channels, found {vncs:?} on {hbm:?}"
        ));
    }
    let (n, reps) = if quick { (5_000, 3) } else { (100_000, 7) };
    // Warm-up: every core's allocator and the arenas' first pages.
    run(&vncs, n / 10)?;
    let mut per: [Vec<f64>; 3] = Default::default();
    let mut cpu: [Vec<f64>; 3] = Default::default();
    let (mut r2, mut r4, mut c2) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        let (mut this, mut this_cpu) = ([0.0; 3], [0.0; 3]);
        for (i, &k) in THREADS.iter().enumerate() {
            (this[i], this_cpu[i]) = run(&vncs[..k], n)?;
            per[i].push(this[i]);
            cpu[i].push(this_cpu[i]);
        }
        r2.push(this[1] / this[0]);
        r4.push(this[2] / this[0]);
        c2.push(this_cpu[1] / this_cpu[0]);
    }
    let range = |xs: &[f64]| {
        (
            xs.iter().copied().fold(f64::INFINITY, f64::min),
            xs.iter().copied().fold(0.0, f64::max),
        )
    };
    Ok(CapiThreads {
        ops_per_s_range: [range(&per[0]), range(&per[1]), range(&per[2])],
        ops_per_s: [
            median(&mut per[0]),
            median(&mut per[1]),
            median(&mut per[2]),
        ],
        ratio_2_vs_1: median(&mut r2),
        ratio_4_vs_1: median(&mut r4),
        cpu_ns_per_call: [
            median(&mut cpu[0]),
            median(&mut cpu[1]),
            median(&mut cpu[2]),
        ],
        cpu_ratio_2_vs_1: median(&mut c2),
        vncs: [vncs[0], vncs[1], vncs[2], vncs[3]],
        hbm: [hbm[0], hbm[1], hbm[2], hbm[3]],
        iterations: n,
        repetitions: reps,
    })
}
