//! No hang from safe code (spec §4.5 drain, §4.6 exec seam, §12 teardown): every call
//! sequence that would wait for its own thread, or for a guard that was leaked, returns an
//! error in bounded time and leaves the runtime usable. This binary installs a thread token
//! (so a callback's re-entry is refused at once with `WouldDeadlock`) and a wait hook that
//! gives up after [`LIMIT`] (so a wait on an `ExecGuard` — `Send`, so its thread proves
//! nothing — ends in `Timeout`); `no_hang_default.rs` runs sequences with neither.
mod common;

use std::cell::Cell;
use std::time::{Duration, Instant};

use common::*;
use nrt_core::abi::*;
use nrt_core::dmem::AllocArgs;
use nrt_core::model::{ModelAlloc, ModelSpec, TensorDecl};
use nrt_core::sim::{Preset, SimConfig};
use nrt_core::sync::{WaitFor, WaitStep};
use nrt_core::{Error, InitOptions, LogicalCore, ModelHandle, Nrt};

/// How long a wait lasts before the hook gives up.
const LIMIT: Duration = Duration::from_millis(300);
/// What every sequence must finish within (the limit plus generous slack for a loaded host).
const BOUND: Duration = Duration::from_secs(20);

thread_local! {
    static STARTED: Cell<Option<Instant>> = const { Cell::new(None) };
    static TOKEN: u8 = const { 0 };
}

fn wait(_what: WaitFor, looks: u32) -> WaitStep {
    let now = Instant::now();
    let t0 = STARTED.with(|s| {
        if looks == 0 {
            s.set(Some(now));
        }
        s.get().unwrap_or(now)
    });
    if now - t0 >= LIMIT {
        return WaitStep::GiveUp;
    }
    std::thread::yield_now();
    WaitStep::Wait
}

fn token() -> usize {
    TOKEN.with(|t| t as *const u8 as usize)
}

fn install() {
    nrt_core::sync::set_thread_token_hook(token);
    nrt_core::sync::set_wait_hook(Some(wait));
}

const ALLOCS: [ModelAlloc<'static>; 1] = [ModelAlloc {
    usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_WEIGHT,
    location: dma_mem_location_t::TONGA_DRAM,
    size: 64 << 10,
    align: 0,
    hint: "weights",
}];
const INS: [TensorDecl<'static>; 1] = [TensorDecl::new("in", 64)];
const OUTS: [TensorDecl<'static>; 1] = [TensorDecl::new("out", 64)];

fn up() -> Fixture {
    install();
    Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    )
}

fn load(n: &Nrt<'_>) -> ModelHandle {
    let spec = ModelSpec {
        name: "m",
        subgraphs: 1,
        allocations: &ALLOCS,
        inputs: &INS,
        outputs: &OUTS,
        ..Default::default()
    };
    n.models().load(LogicalCore::FIRST, &spec).unwrap()
}

/// Input and output sets bound to fresh tensors.
fn sets(n: &Nrt<'_>) -> (nrt_core::SetHandle, nrt_core::SetHandle) {
    let (si, so) = (n.sets().create().unwrap(), n.sets().create().unwrap());
    let i = device_tensor(n, 0, 64, "in");
    let o = device_tensor(n, 0, 64, "out");
    n.sets().add(si, "in", i).unwrap();
    n.sets().add(so, "out", o).unwrap();
    (si, so)
}

/// Runs `f`, checking it finishes within [`BOUND`].
fn timed<R>(f: impl FnOnce() -> R) -> R {
    let t0 = Instant::now();
    let r = f();
    assert!(t0.elapsed() < BOUND, "took {:?}", t0.elapsed());
    r
}

fn on_other_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| s.spawn(f).join().unwrap())
}

#[test]
fn execute_while_holding_an_exec_guard_of_the_model_times_out() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let (si, so) = sets(&n);
    let g = n.models().exec_begin(m).unwrap();
    // The guard is `Send`: its thread is no proof, so the wait is bounded, not refused.
    let t0 = Instant::now();
    let e = timed(|| n.tensors().execute(m, si, so).unwrap_err());
    assert!(
        matches!(e, Error::Timeout(WaitFor::ExecLock { device: 0, .. })),
        "{e:?}"
    );
    assert!(t0.elapsed() >= LIMIT, "it waited up to the bound");
    assert_eq!(e.status(), NRT_STATUS::NRT_TIMEOUT);
    assert!(e.to_string().contains("exec lock of device 0"), "{e}");
    drop(g);
    n.tensors()
        .execute(m, si, so)
        .expect("works once the guard is dropped");
    close_and_check_drained(&n);
}

#[test]
fn a_forgotten_exec_guard_then_unload_is_an_error_not_a_hang() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    std::mem::forget(n.models().exec_begin(m).unwrap());
    let id = m.h_model().id;
    for e in [
        timed(|| n.models().unload(m).unwrap_err()),
        timed(|| on_other_thread(|| n.models().unload(m).unwrap_err())),
    ] {
        assert_eq!(e, Error::Timeout(WaitFor::ModelDrain { model: id }));
        assert_eq!(e.status(), NRT_STATUS::NRT_TIMEOUT);
        assert!(e.to_string().contains(&format!("model {id}")), "{e}");
    }
    // The model stays loaded (linked again after each failed drain).
    assert_eq!(n.models().core(m).unwrap(), LogicalCore::FIRST);
}

#[test]
fn a_forgotten_exec_guard_then_close_is_an_error_and_the_runtime_stays_up() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let other = n
        .models()
        .load(
            LogicalCore::new(1),
            &ModelSpec {
                name: "other",
                subgraphs: 1,
                ..Default::default()
            },
        )
        .unwrap();
    std::mem::forget(n.models().exec_begin(m).unwrap());
    for e in [
        timed(|| n.close().unwrap_err()),
        timed(|| on_other_thread(|| n.close().unwrap_err())),
    ] {
        assert_eq!(
            e,
            Error::Timeout(WaitFor::ModelDrain {
                model: m.h_model().id
            })
        );
    }
    assert_eq!(
        n.lifecycle(),
        nrt_core::Lifecycle::Init,
        "close changed nothing"
    );
    // Other cores go on working.
    n.models().unload(other).unwrap();
    assert_eq!(n.models().core(m).unwrap(), LogicalCore::FIRST);
}

#[test]
fn a_forgotten_exec_guard_then_execute_is_an_error_not_a_hang() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let (si, so) = sets(&n);
    std::mem::forget(n.models().exec_begin(m).unwrap());
    for e in [
        timed(|| n.tensors().execute(m, si, so).unwrap_err()),
        timed(|| on_other_thread(|| n.tensors().execute(m, si, so).unwrap_err())),
    ] {
        assert!(
            matches!(e, Error::Timeout(WaitFor::ExecLock { device: 0, .. })),
            "{e:?}"
        );
    }
}

#[test]
fn unloading_the_model_from_its_dmem_callback_is_refused_at_once() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let mut got = None;
    let mut seen = 0;
    timed(|| {
        n.models().for_each_dmem(m, |_, _| {
            seen += 1;
            got.get_or_insert(n.models().unload(m));
        })
    })
    .unwrap();
    assert_eq!(seen, 1);
    assert_eq!(
        got.unwrap().unwrap_err(),
        Error::WouldDeadlock(WaitFor::ModelDrain {
            model: m.h_model().id
        })
    );
    n.models()
        .unload(m)
        .expect("unloads once the callback is done");
    close_and_check_drained(&n);
}

#[test]
fn unloading_the_model_from_its_io_callback_is_refused_at_once() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let mut got = Vec::new();
    timed(|| {
        n.models()
            .for_each_io(m, |_| got.push(n.models().unload(m)))
    })
    .unwrap();
    assert_eq!(got.len(), 2, "one input, one output");
    for r in got {
        assert_eq!(
            r.unwrap_err(),
            Error::WouldDeadlock(WaitFor::ModelDrain {
                model: m.h_model().id
            })
        );
    }
    // A close from the callback is refused too.
    let mut closed = None;
    n.models()
        .for_each_io(m, |_| {
            closed.get_or_insert(n.close());
        })
        .unwrap();
    assert!(matches!(closed.unwrap(), Err(Error::WouldDeadlock(_))));
    n.models().unload(m).unwrap();
    close_and_check_drained(&n);
}

#[test]
fn allocating_in_the_allocator_being_walked_is_refused_at_once() {
    let f = up();
    let n = f.nrt();
    let al = n
        .dmem()
        .core_allocator(nrt_core::PhysicalCore::new(0, 0))
        .unwrap();
    let a = AllocArgs::device(
        4096,
        0,
        dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR,
        "x",
    );
    let first = n.dmem().alloc(al, &a, None).unwrap();
    let mut got = Vec::new();
    timed(|| {
        n.dmem()
            .allocator_for_each(al, |_| got.push(n.dmem().alloc(al, &a, None)))
    })
    .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].unwrap_err(),
        Error::WouldDeadlock(WaitFor::AllocatorLock)
    );
    // Another allocator is fine from the same callback.
    let pcore = n.dmem().allocator_core(al).unwrap();
    let other = n
        .dmem()
        .allocator_create(pcore, dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_MODEL)
        .unwrap();
    let mut ok = None;
    n.dmem()
        .allocator_for_each(al, |_| {
            ok.get_or_insert(n.dmem().alloc(other, &a, None));
        })
        .unwrap();
    ok.unwrap().expect("a different allocator is not locked");
    n.dmem().free(first).unwrap();
    close_and_check_drained(&n);
}

#[test]
fn freeing_in_the_allocator_being_walked_is_refused_at_once() {
    let f = up();
    let n = f.nrt();
    let al = n
        .dmem()
        .core_allocator(nrt_core::PhysicalCore::new(0, 0))
        .unwrap();
    let a = AllocArgs::device(
        4096,
        0,
        dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR,
        "x",
    );
    let d = n.dmem().alloc(al, &a, None).unwrap();
    let t = device_tensor(&n, 0, 4096, "t");
    let mut got = Vec::new();
    timed(|| {
        n.dmem().allocator_for_each(al, |_| {
            if got.is_empty() {
                got.push(n.dmem().free(d));
                got.push(n.tensors().free(t));
                got.push(n.dmem().allocator_for_each(al, |_| {}));
            }
        })
    })
    .unwrap();
    for r in got {
        assert_eq!(r.unwrap_err(), Error::WouldDeadlock(WaitFor::AllocatorLock));
    }
    // Nothing was freed: both go now.
    n.dmem().free(d).unwrap();
    n.tensors().free(t).unwrap();
    close_and_check_drained(&n);
}

#[test]
fn unload_while_holding_an_exec_guard_times_out_and_keeps_the_model() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let g = n.models().exec_begin(m).unwrap();
    let e = timed(|| n.models().unload(m).unwrap_err());
    assert_eq!(
        e,
        Error::Timeout(WaitFor::ModelDrain {
            model: m.h_model().id
        })
    );
    drop(g);
    n.models().unload(m).unwrap();
    close_and_check_drained(&n);
}

#[test]
fn close_while_holding_an_exec_guard_times_out_and_the_runtime_stays_up() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let g = n.models().exec_begin(m).unwrap();
    let e = timed(|| n.close().unwrap_err());
    assert_eq!(
        e,
        Error::Timeout(WaitFor::ModelDrain {
            model: m.h_model().id
        })
    );
    assert_eq!(n.lifecycle(), nrt_core::Lifecycle::Init);
    drop(g);
    close_and_check_drained(&n);
}

#[test]
fn an_execution_waits_for_a_guard_another_thread_holds_within_the_bound() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let (si, so) = sets(&n);
    let g = n.models().exec_begin(m).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| n.tensors().execute(m, si, so));
        std::thread::sleep(LIMIT / 3);
        drop(g);
        waiter
            .join()
            .unwrap()
            .expect("the wait ends when the guard drops");
    });
    close_and_check_drained(&n);
}
