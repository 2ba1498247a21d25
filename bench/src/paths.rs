//! The whole dmem path against the raw carve, and tensor calls across threads
//! (docs/PERFORMANCE.md "The whole dmem path vs the raw carve", "Tensor calls on different
//! logical cores").

use super::*;

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
        let al = n
            .dmem()
            .core_allocator(nrt_core::PhysicalCore::new(0, 0))
            .ok()?;
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
                            n.dmem()
                                .alloc(
                                    al,
                                    &AllocArgs::device(size, 0, DMA_MEM_USAGE_TYPE_TENSOR, "bench"),
                                    None,
                                )
                                .ok()?,
                        );
                    }
                    PathOp::Free { slot } => n.dmem().free(dm[slot]?).ok()?,
                }
            }
            t_dmem.push((thread_cpu_ns() - t0) as f64 / trace.len() as f64);
            for m in dm.iter_mut() {
                if let Some(h) = m.take() {
                    if n.dmem().is_live(h) {
                        n.dmem().free(h).ok()?;
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
/// logical cores, ratio taken in one run: `ratio` is (2 threads' total
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
                .tensors()
                .allocate(placement, vnc.into(), 4096, Some("bench"))
                .ok()?;
            n.tensors().write(t, &data, 0).ok()?;
            n.tensors().free(t).ok()?;
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

/// Tensor allocate + free throughput with few and with many tensors live: no cost of the
/// runtime or the simulated driver may grow with the number of live tensors. Two patterns,
/// each a ratio of ns/op at [`TensorScale::many`] live over ns/op at [`TensorScale::few`] live
/// (the median of per-repetition ratios; the two runtimes take turns within each repetition):
///
/// * **window** (the headline): the live tensors stay, and each op allocates a tensor and
///   frees the oldest of the last 64 allocated (a serving loop's per-request IO tensors among
///   resident ones);
/// * **random**: each op frees a random live tensor and allocates its replacement, so every
///   op touches a random one of the live tensors' metadata: at 200 000 live that is tens of
///   megabytes, and the figure is the memory hierarchy's (cache and TLB misses), not an
///   algorithm's.
#[derive(Copy, Clone, Debug)]
pub struct TensorScale {
    /// Live tensors of the few-tensor runtime.
    pub few: usize,
    /// Live tensors of the many-tensor runtime.
    pub many: usize,
    /// Window pattern: ns per op at `few` live (median).
    pub window_few_ns_per_op: f64,
    /// Window pattern: ns per op at `many` live (median).
    pub window_many_ns_per_op: f64,
    /// Window pattern: paired median of many / few.
    pub window_ratio: f64,
    /// Random pattern: ns per op at `few` live (median).
    pub random_few_ns_per_op: f64,
    /// Random pattern: ns per op at `many` live (median).
    pub random_many_ns_per_op: f64,
    /// Random pattern: paired median of many / few.
    pub random_ratio: f64,
}

/// [`TensorScale`] of 4 KiB DEVICE tensors on logical core 0 of a full-size simulated trn2,
/// each runtime as `nrt_init` builds it (the std shim's default configuration: its arenas and
/// the simulated driver's pools at their default sizes): 1 000 against 200 000 live (quick:
/// 20 000).
pub fn tensor_scale(quick: bool) -> Option<TensorScale> {
    use nrt_core::tensor::Placement;
    use nrt_core::TensorHandle;
    use nrt_host::config::RuntimeConfig;
    use nrt_host::runtime::HostRuntime;
    use std::collections::VecDeque;

    let (few, many, ops, reps) = if quick {
        (1_000usize, 20_000usize, 5_000usize, 3)
    } else {
        (1_000, 200_000, 50_000, 7)
    };
    const WINDOW: usize = 64;
    let alloc = |rt: &HostRuntime| {
        rt.nrt()
            .tensors()
            .allocate(Placement::Device, LogicalCore::FIRST.into(), 4096, None)
            .ok()
    };
    let start = || HostRuntime::start(RuntimeConfig::default()).ok();
    let fill = |rt: &HostRuntime, n: usize| -> Option<Vec<TensorHandle>> {
        (0..n).map(|_| alloc(rt)).collect()
    };
    let window = |rt: &HostRuntime, recent: &mut VecDeque<TensorHandle>| -> Option<f64> {
        let t0 = Instant::now();
        for _ in 0..ops {
            recent.push_back(alloc(rt)?);
            if recent.len() > WINDOW {
                rt.nrt().tensors().free(recent.pop_front()?).ok()?;
            }
        }
        Some(t0.elapsed().as_nanos() as f64 / ops as f64)
    };
    let random = |rt: &HostRuntime, live: &mut [TensorHandle], rng: &mut StdRng| -> Option<f64> {
        let t0 = Instant::now();
        for _ in 0..ops {
            let i = rng.gen_range(0..live.len());
            rt.nrt().tensors().free(live[i]).ok()?;
            live[i] = alloc(rt)?;
        }
        Some(t0.elapsed().as_nanos() as f64 / ops as f64)
    };
    let (a, b) = (start()?, start()?);
    let (mut la, mut lb) = (fill(&a, few)?, fill(&b, many)?);
    let (mut ra, mut rb) = (VecDeque::new(), VecDeque::new());
    let mut rng = StdRng::seed_from_u64(0x7363_616c);
    // One warm-up pass of each (page faults of fresh slots and nodes), then the measured reps.
    window(&a, &mut ra)?;
    window(&b, &mut rb)?;
    random(&a, &mut la, &mut rng)?;
    random(&b, &mut lb, &mut rng)?;
    let (mut wf, mut wm, mut rf, mut rm) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        wf.push(window(&a, &mut ra)?);
        wm.push(window(&b, &mut rb)?);
        rf.push(random(&a, &mut la, &mut rng)?);
        rm.push(random(&b, &mut lb, &mut rng)?);
    }
    for (rt, live, recent) in [(&a, la, ra), (&b, lb, rb)] {
        for t in live.into_iter().chain(recent) {
            rt.nrt().tensors().free(t).ok()?;
        }
    }
    let (window_ratio, random_ratio) =
        (paired_median_ratio(&wm, &wf), paired_median_ratio(&rm, &rf));
    Some(TensorScale {
        few,
        many,
        window_few_ns_per_op: median(&mut wf),
        window_many_ns_per_op: median(&mut wm),
        window_ratio,
        random_few_ns_per_op: median(&mut rf),
        random_many_ns_per_op: median(&mut rm),
        random_ratio,
    })
}
