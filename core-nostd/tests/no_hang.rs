//! No hang from safe code (spec §4.5 drain, §4.6 exec seam, §12 teardown): every call
//! sequence that would wait for its own thread, or for a guard that was leaked, returns an
//! error in bounded time and leaves the runtime usable; a leaked or overdue execution is
//! ended by `Models::revoke_exec`. This binary installs a thread token (so a callback's
//! re-entry, or a call waiting for the thread's own execution, is refused at once with
//! `WouldDeadlock`) and a wait hook that gives up after [`LIMIT`] (so another thread's wait
//! for an execution ends in `Timeout`); `no_hang_default.rs` runs sequences with neither.
mod common;

use std::cell::Cell;
use std::time::{Duration, Instant};

use common::*;
use nrt_core::abi::*;
use nrt_core::model::{ModelAlloc, ModelSpec, TensorDecl};
use nrt_core::sim::{Preset, SimConfig};
use nrt_core::sync::{WaitFor, WaitStep};
use nrt_core::{Error, InitOptions, LogicalCore, ModelHandle, Nrt, PhysicalCore};

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
fn execute_while_holding_an_exec_guard_of_the_model_is_refused_at_once() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let (si, so) = sets(&n);
    let g = n.models().exec_begin(m).unwrap();
    // The guard's thread is recorded on its core: waiting for it would be waiting for itself.
    let t0 = Instant::now();
    for e in [
        n.tensors().execute(m, si, so).unwrap_err(),
        n.models().exec_begin(m).err().unwrap(),
    ] {
        assert!(
            matches!(e, Error::WouldDeadlock(WaitFor::ExecLock { device: 0, .. })),
            "{e:?}"
        );
        assert_eq!(e.status(), NRT_STATUS::NRT_FAILURE);
    }
    assert!(
        t0.elapsed() < LIMIT,
        "refused without waiting: {:?}",
        t0.elapsed()
    );
    // Another thread waits, bounded, and is told how a leaked execution ends.
    let t0 = Instant::now();
    let e = timed(|| on_other_thread(|| n.tensors().execute(m, si, so).unwrap_err()));
    assert!(
        matches!(e, Error::Timeout(WaitFor::ExecLock { device: 0, .. })),
        "{e:?}"
    );
    assert!(t0.elapsed() >= LIMIT, "it waited up to the bound");
    assert_eq!(e.status(), NRT_STATUS::NRT_TIMEOUT);
    assert!(e.to_string().contains("exec lock of device 0"), "{e}");
    assert!(e.to_string().contains("Models::revoke_exec"), "{e}");
    drop(g);
    n.tensors()
        .execute(m, si, so)
        .expect("works once the guard is dropped");
    close_and_check_drained(&n);
}

/// Core 0 of device 0, where [`load`] puts the model.
const CORE0: PhysicalCore = PhysicalCore::new(0, 0);

#[test]
fn a_forgotten_exec_guard_then_unload_is_an_error_until_revoked() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let before = snapshot(&n);
    std::mem::forget(n.models().exec_begin(m).unwrap());
    let id = m.h_model().id;
    let mine = timed(|| n.models().unload(m).unwrap_err());
    assert_eq!(
        mine,
        Error::WouldDeadlock(WaitFor::ModelDrain { model: id })
    );
    let other = timed(|| on_other_thread(|| n.models().unload(m).unwrap_err()));
    assert_eq!(other, Error::Timeout(WaitFor::ModelDrain { model: id }));
    assert_eq!(other.status(), NRT_STATUS::NRT_TIMEOUT);
    assert!(
        other.to_string().contains(&format!("model {id}")),
        "{other}"
    );
    // The model stays loaded (linked again after each failed drain), referenced once.
    assert_eq!(n.models().core(m).unwrap(), LogicalCore::FIRST);
    assert_eq!(n.models().info(m).unwrap().ref_count, 1);
    // The recovery: the execution ends, its reference goes, the unload works.
    assert_eq!(n.models().revoke_exec(CORE0), Ok(Some(m)));
    assert_eq!(
        n.models().revoke_exec(CORE0),
        Ok(None),
        "nothing left to end"
    );
    assert_eq!(n.models().info(m).unwrap().ref_count, 0);
    assert_eq!(
        snapshot(&n),
        before,
        "revoking frees no memory of the model"
    );
    timed(|| n.models().unload(m)).expect("unloads once revoked");
    close_and_check_drained(&n);
}

#[test]
fn a_forgotten_exec_guard_then_close_is_an_error_until_revoked() {
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
    let drain = WaitFor::ModelDrain {
        model: m.h_model().id,
    };
    assert_eq!(
        timed(|| n.close().unwrap_err()),
        Error::WouldDeadlock(drain)
    );
    assert_eq!(
        timed(|| on_other_thread(|| n.close().unwrap_err())),
        Error::Timeout(drain)
    );
    assert_eq!(
        n.lifecycle(),
        nrt_core::Lifecycle::Init,
        "close changed nothing"
    );
    // Other cores go on working.
    n.models().unload(other).unwrap();
    assert_eq!(n.models().core(m).unwrap(), LogicalCore::FIRST);
    // Revoked from another thread (a watchdog's): close works, and unloads the model.
    assert_eq!(
        on_other_thread(|| n.models().revoke_exec(CORE0)),
        Ok(Some(m))
    );
    close_and_check_drained(&n);
}

#[test]
fn a_forgotten_exec_guard_then_execute_is_an_error_until_revoked() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let (si, so) = sets(&n);
    std::mem::forget(n.models().exec_begin(m).unwrap());
    let e = timed(|| n.tensors().execute(m, si, so).unwrap_err());
    assert!(
        matches!(e, Error::WouldDeadlock(WaitFor::ExecLock { device: 0, .. })),
        "{e:?}"
    );
    let e = timed(|| on_other_thread(|| n.tensors().execute(m, si, so).unwrap_err()));
    assert!(
        matches!(e, Error::Timeout(WaitFor::ExecLock { device: 0, .. })),
        "{e:?}"
    );
    let runs = n.models().info(m).unwrap();
    assert_eq!(n.models().revoke_exec(CORE0), Ok(Some(m)));
    n.tensors()
        .execute(m, si, so)
        .expect("the core is free again");
    on_other_thread(|| n.tensors().execute(m, si, so)).expect("on any thread");
    let after = n.models().info(m).unwrap();
    assert_eq!(after.ref_count, 0, "every execution's reference went");
    assert_eq!(after.bytes, runs.bytes);
    n.models().unload(m).unwrap();
    close_and_check_drained(&n);
}

#[test]
fn revoking_a_core_nobody_executes_on_ends_nothing() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    // A core of another logical core than the model's.
    let idle = n.physical_cores(LogicalCore::new(1)).unwrap()[0];
    assert_eq!(n.models().revoke_exec(CORE0), Ok(None));
    assert_eq!(n.models().revoke_exec(idle), Ok(None));
    assert!(matches!(
        n.models().revoke_exec(PhysicalCore::new(0, 99)),
        Err(Error::CoreOutOfRange { .. })
    ));
    assert!(matches!(
        n.models().revoke_exec(PhysicalCore::new(7, 0)),
        Err(Error::CoreOutOfRange { .. } | Error::DeviceOutOfRange(_))
    ));
    // A guard on another core is not ended by revoking this one.
    let g = n.models().exec_begin(m).unwrap();
    assert_eq!(n.models().revoke_exec(idle), Ok(None));
    g.check().expect("still held");
    drop(g);
    n.models().unload(m).unwrap();
    close_and_check_drained(&n);
    assert_eq!(n.models().revoke_exec(CORE0), Err(Error::Closed));
}

#[test]
fn revoking_an_execution_whose_guard_lives_on_its_thread() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let (si, so) = sets(&n);
    let id = m.h_model().id;
    let (begun, revoked) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    std::thread::scope(|s| {
        let owner = s.spawn(|| {
            let g = n.models().exec_begin(m).unwrap();
            begun.wait();
            revoked.wait();
            // The guard holds nothing any more: it says so, reads no model, releases nothing.
            assert_eq!(g.h_model().id, id, "the handle's value");
            let e = g.check().unwrap_err();
            assert_eq!(e, Error::ExecRevoked { device: 0, core: 0 });
            assert_eq!(e.status(), NRT_STATUS::NRT_FAILURE);
            drop(g);
        });
        begun.wait();
        assert_eq!(n.models().revoke_exec(CORE0), Ok(Some(m)));
        // A new execution runs, and the model can go, while the old guard still lives.
        n.tensors().execute(m, si, so).expect("the core was freed");
        let g2 = n.models().exec_begin(m).unwrap();
        assert_eq!(
            n.models().info(m).unwrap().ref_count,
            1,
            "the new guard's only"
        );
        drop(g2);
        timed(|| n.models().unload(m)).expect("unloads: the revoked guard holds nothing");
        revoked.wait();
        owner.join().unwrap();
    });
    assert!(n.models().info(m).is_err(), "unloaded");
    close_and_check_drained(&n);
}

#[test]
fn a_revoked_guard_dropped_after_close_and_init_touches_nothing() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let g = n.models().exec_begin(m).unwrap();
    on_other_thread(|| {
        assert_eq!(n.models().revoke_exec(CORE0), Ok(Some(m)));
        n.close().expect("the revoked guard holds nothing");
        n.init(&InitOptions::default()).unwrap();
    });
    assert_eq!(g.check(), Err(Error::ExecRevoked { device: 0, core: 0 }));
    let m2 = load(&n);
    let g2 = n.models().exec_begin(m2).unwrap();
    // Its ticket names no execution of the new runtime: the new one keeps its core.
    drop(g);
    g2.check().expect("the new execution still holds its core");
    assert_eq!(n.models().info(m2).unwrap().ref_count, 1);
    drop(g2);
    n.models().unload(m2).unwrap();
    close_and_check_drained(&n);
}

#[test]
fn revoking_either_core_of_a_two_core_execution_ends_both() {
    install();
    let f = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions {
            vcores: nrt_core::vcore::VcoreOptions {
                lnc_size: Some(2),
                ..Default::default()
            },
            ..Default::default()
        },
    );
    let n = f.nrt();
    let m = load(&n);
    let cores = n.physical_cores(LogicalCore::FIRST).unwrap();
    let cores: Vec<PhysicalCore> = cores.iter().copied().collect();
    assert_eq!(cores.len(), 2);
    for revoke_on in [cores[0], cores[1]] {
        std::mem::forget(n.models().exec_begin(m).unwrap());
        assert!(matches!(
            n.models().exec_begin(m).err().unwrap(),
            Error::WouldDeadlock(WaitFor::ExecLock { .. })
        ));
        assert_eq!(n.models().revoke_exec(revoke_on), Ok(Some(m)));
        for c in &cores {
            assert_eq!(n.models().revoke_exec(*c), Ok(None), "{c} was freed too");
        }
        assert_eq!(n.models().info(m).unwrap().ref_count, 0);
    }
    let g = n.models().exec_begin(m).expect("both cores free");
    drop(g);
    n.models().unload(m).unwrap();
    close_and_check_drained(&n);
}

#[test]
fn a_guard_dropped_while_another_thread_revokes_releases_once() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    const ROUNDS: usize = 300;
    let mut revoked = 0;
    for _ in 0..ROUNDS {
        let go = std::sync::Barrier::new(2);
        let r = std::thread::scope(|s| {
            let owner = s.spawn(|| {
                let g = n.models().exec_begin(m).unwrap();
                go.wait();
                drop(g);
            });
            go.wait();
            let r = n.models().revoke_exec(CORE0).unwrap();
            owner.join().unwrap();
            r
        });
        revoked += usize::from(r.is_some());
        // Exactly one of the two released: no reference left, none released twice (the
        // count would wrap), and the core is free.
        assert_eq!(n.models().info(m).unwrap().ref_count, 0);
        assert_eq!(n.models().revoke_exec(CORE0), Ok(None));
    }
    eprintln!("revoke won {revoked} of {ROUNDS} races");
    n.models().unload(m).unwrap();
    close_and_check_drained(&n);
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
    let al = core0_allocator(&n);
    let a = tensor_args(4096, "x");
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
    let al = core0_allocator(&n);
    let a = tensor_args(4096, "x");
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
fn unload_while_holding_an_exec_guard_is_refused_at_once_and_keeps_the_model() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let g = n.models().exec_begin(m).unwrap();
    let t0 = Instant::now();
    let e = n.models().unload(m).unwrap_err();
    assert!(t0.elapsed() < LIMIT, "refused without waiting");
    assert_eq!(
        e,
        Error::WouldDeadlock(WaitFor::ModelDrain {
            model: m.h_model().id
        })
    );
    // A model the thread does not execute unloads.
    let other = n
        .models()
        .load(
            LogicalCore::FIRST,
            &ModelSpec {
                name: "other",
                subgraphs: 1,
                ..Default::default()
            },
        )
        .unwrap();
    n.models().unload(other).unwrap();
    drop(g);
    n.models().unload(m).unwrap();
    close_and_check_drained(&n);
}

#[test]
fn close_while_holding_an_exec_guard_is_refused_at_once_and_the_runtime_stays_up() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let g = n.models().exec_begin(m).unwrap();
    let t0 = Instant::now();
    let e = n.close().unwrap_err();
    assert!(t0.elapsed() < LIMIT, "refused without waiting");
    assert_eq!(
        e,
        Error::WouldDeadlock(WaitFor::ModelDrain {
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
