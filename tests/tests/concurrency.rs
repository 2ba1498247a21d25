//! Many threads loading, executing and unloading on the same core (spec §4.4–§4.6): unload
//! waits for in-flight executions, the ledger is consistent after every join, and the
//! runtime ends with the driver holding nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use nrt_core::abi::*;
use nrt_core::model::{ModelAlloc, ModelSpec};
use nrt_core::ulib::UlibRequest;
use nrt_core::LogicalCore;
use nrt_core::PhysicalCore;
use nrt_host::config::{DeviceChoice, RuntimeConfig};
use nrt_host::HostRuntime;

const DEV: dma_mem_location_t = dma_mem_location_t::TONGA_DRAM;

fn allocs() -> Vec<ModelAlloc<'static>> {
    vec![
        ModelAlloc {
            usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_WEIGHT,
            location: DEV,
            size: 2 << 20,
            align: 0,
            hint: "w",
        },
        ModelAlloc {
            usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_INSTR_PE,
            location: DEV,
            size: 64 << 10,
            align: 4096,
            hint: "c",
        },
        ModelAlloc {
            usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_DMA_RING,
            location: DEV,
            size: 32 << 10,
            align: 0,
            hint: "r",
        },
    ]
}

fn runtime(device: DeviceChoice) -> HostRuntime {
    HostRuntime::start(RuntimeConfig {
        device,
        ..Default::default()
    })
    .expect("runtime")
}

/// Device bytes the resident models of logical core 0 account for.
fn resident_bytes(rt: &HostRuntime) -> u64 {
    let n = rt.nrt();
    let mut hs = [nrt_core::ModelHandle::from_parts(0, 0, 0); 128];
    let k = n.models().on_core(LogicalCore::new(0), &mut hs).unwrap();
    hs[..k]
        .iter()
        .map(|h| n.models().info(*h).map(|i| i.by_usage[22]).unwrap_or(0))
        .sum()
}

#[test]
fn threads_load_execute_unload_on_one_core() {
    let rt = Arc::new(runtime(DeviceChoice::sim(nrt_core::sim::Preset::Trn2, 1)));
    let a = allocs();
    let spec = ModelSpec {
        name: "shared",
        subgraphs: 1,
        allocations: &a,
        scratchpad_bytes: 1 << 20,
        ..Default::default()
    };
    // A long-lived model everyone executes.
    let shared = rt.nrt().models().load(LogicalCore::new(0), &spec).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let loads = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(6));
    let mut threads = Vec::new();
    for t in 0..3 {
        let (rt, stop, start) = (rt.clone(), stop.clone(), start.clone());
        threads.push(std::thread::spawn(move || {
            start.wait();
            // At least one execution each, however the scheduler treats this thread.
            loop {
                let g = rt.nrt().models().exec_begin(shared).expect("exec");
                assert_eq!(g.h_model(), shared.h_model());
                if t == 0 {
                    std::thread::yield_now();
                }
                drop(g);
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
        }));
    }
    // The loaders run a fixed number of rounds (not a time window: on a loaded 2-core machine
    // the spinning executors can starve them for seconds); the executors run until they finish.
    const LOADER_ROUNDS: u64 = 25;
    let mut loaders = Vec::new();
    for _ in 0..2 {
        let (rt, loads, start) = (rt.clone(), loads.clone(), start.clone());
        let a = allocs();
        loaders.push(std::thread::spawn(move || {
            let spec = ModelSpec {
                name: "churn",
                subgraphs: 1,
                allocations: &a,
                scratchpad_bytes: 3 << 20,
                ..Default::default()
            };
            start.wait();
            for _ in 0..LOADER_ROUNDS {
                let h = rt
                    .nrt()
                    .models()
                    .load(LogicalCore::new(0), &spec)
                    .expect("load");
                // Someone executes it while we unload: the unload must wait for the drain.
                let g = rt.nrt().models().exec_begin(h).expect("exec");
                let in_exec = AtomicBool::new(true);
                std::thread::scope(|s| {
                    s.spawn(|| {
                        std::thread::sleep(Duration::from_millis(2));
                        in_exec.store(false, Ordering::SeqCst);
                        drop(g);
                    });
                    rt.nrt().models().unload(h).expect("unload");
                    assert!(
                        !in_exec.load(Ordering::SeqCst),
                        "unload returned while an execution held the model"
                    );
                });
                assert!(
                    rt.nrt().models().exec_begin(h).is_err(),
                    "an unloaded handle cannot be executed"
                );
                loads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    start.wait();
    for t in loaders {
        t.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        loads.load(Ordering::Relaxed),
        2 * LOADER_ROUNDS,
        "every load/unload round completed"
    );
    // After the joins: only the shared model is resident and the ledger says exactly its bytes
    // plus the scratchpad pages it still holds.
    let n = rt.nrt();
    let used = n
        .ledger()
        .memory_stats(LogicalCore::new(0))
        .unwrap()
        .bytes_used;
    let scr = n.ledger().device(
        PhysicalCore::new(0, 0),
        dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_SCRATCHPAD,
    );
    assert_eq!(used, resident_bytes(&rt) + scr);
    assert_eq!(
        n.scratchpad_page(PhysicalCore::new(0, 0), 0).unwrap().refs,
        1,
        "only the shared model holds the page"
    );
    n.models().unload(shared).unwrap();
    assert_eq!(
        n.ledger()
            .memory_stats(LogicalCore::new(0))
            .unwrap()
            .bytes_used,
        0
    );
    rt.close().unwrap();
    assert_eq!(rt.nrt().driver_pool_bytes_in_use().unwrap(), 0);
}

#[test]
fn concurrent_first_loads_stage_the_ext_isa_once() {
    let rt = Arc::new(runtime(DeviceChoice::sim(nrt_core::sim::Preset::Trn1, 1)));
    let start = Arc::new(Barrier::new(8));
    let hs: Vec<_> = (0..8)
        .map(|_| {
            let (rt, start) = (rt.clone(), start.clone());
            std::thread::spawn(move || {
                let spec = ModelSpec {
                    name: "gp",
                    subgraphs: 1,
                    gpsimd_libs: Some(UlibRequest {
                        count: 1,
                        bytes: 65536,
                    }),
                    ..Default::default()
                };
                start.wait();
                rt.nrt().models().load(LogicalCore::new(0), &spec).unwrap()
            })
        })
        .collect();
    let hs: Vec<_> = hs.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        rt.nrt().ulib_shared_stats(PhysicalCore::new(0, 0)).unwrap(),
        nrt_core::ulib::UlibStats {
            stages: 1,
            users: 8
        }
    );
    for h in hs {
        rt.nrt().models().unload(h).unwrap();
    }
}

#[test]
fn executions_are_serialised_per_core() {
    let rt = Arc::new(runtime(DeviceChoice::sim(nrt_core::sim::Preset::Trn2, 1)));
    let spec = ModelSpec {
        name: "s",
        subgraphs: 1,
        ..Default::default()
    };
    let h1 = rt.nrt().models().load(LogicalCore::new(0), &spec).unwrap();
    let h2 = rt.nrt().models().load(LogicalCore::new(0), &spec).unwrap();
    let inside = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = [h1, h2, h1, h2]
        .into_iter()
        .map(|h| {
            let (rt, inside) = (rt.clone(), inside.clone());
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let g = rt.nrt().models().exec_begin(h).unwrap();
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two executions on one core at once"
                    );
                    std::hint::spin_loop();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(g);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
