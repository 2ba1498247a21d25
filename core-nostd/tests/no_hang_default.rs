//! No hang from safe code without any hook installed (a `no_std` integrator that set
//! nothing but the wait limit): no thread token, so re-entry is not recognised, but every
//! wait gives up after [`nrt_core::sync::set_wait_limit`] looks with `Timeout`, naming what it
//! waited for, and the runtime is left as it was (`no_hang.rs` has the same sequences with a
//! thread token and a wait hook).
mod common;

use std::time::{Duration, Instant};

use common::*;
use nrt_core::abi::*;
use nrt_core::model::{ModelAlloc, ModelSpec, TensorDecl};
use nrt_core::sim::{Preset, SimConfig};
use nrt_core::sync::WaitFor;
use nrt_core::{Error, InitOptions, LogicalCore, ModelHandle, Nrt};

/// What every sequence must finish within.
const BOUND: Duration = Duration::from_secs(30);

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
    nrt_core::sync::set_wait_limit(1 << 16);
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

fn timed<R>(f: impl FnOnce() -> R) -> R {
    let t0 = Instant::now();
    let r = f();
    assert!(t0.elapsed() < BOUND, "took {:?}", t0.elapsed());
    r
}

#[test]
fn execute_while_holding_an_exec_guard_times_out() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let (si, so) = (n.sets().create().unwrap(), n.sets().create().unwrap());
    n.sets()
        .add(si, "in", device_tensor(&n, 0, 64, "in"))
        .unwrap();
    n.sets()
        .add(so, "out", device_tensor(&n, 0, 64, "out"))
        .unwrap();
    let g = n.models().exec_begin(m).unwrap();
    let e = timed(|| n.tensors().execute(m, si, so).unwrap_err());
    assert!(
        matches!(e, Error::Timeout(WaitFor::ExecLock { device: 0, .. })),
        "{e:?}"
    );
    assert_eq!(e.status(), NRT_STATUS::NRT_TIMEOUT);
    // Unload and close wait for the guard's reference, and give up.
    let id = m.h_model().id;
    assert_eq!(
        timed(|| n.models().unload(m)).unwrap_err(),
        Error::Timeout(WaitFor::ModelDrain { model: id })
    );
    assert_eq!(
        timed(|| n.close()).unwrap_err(),
        Error::Timeout(WaitFor::ModelDrain { model: id })
    );
    assert_eq!(n.lifecycle(), nrt_core::Lifecycle::Init);
    drop(g);
    n.tensors().execute(m, si, so).unwrap();
    n.models().unload(m).expect("the model stayed loaded");
    close_and_check_drained(&n);
}

#[test]
fn unload_or_close_from_a_model_callback_times_out_and_changes_nothing() {
    let f = up();
    let n = f.nrt();
    let m = load(&n);
    let (mut unload, mut close) = (None, None);
    timed(|| {
        n.models().for_each_dmem(m, |_, _| {
            unload.get_or_insert(n.models().unload(m));
        })
    })
    .unwrap();
    timed(|| {
        n.models().for_each_io(m, |_| {
            close.get_or_insert(n.close());
        })
    })
    .unwrap();
    assert_eq!(
        unload.unwrap().unwrap_err(),
        Error::Timeout(WaitFor::ModelDrain {
            model: m.h_model().id
        })
    );
    assert_eq!(
        close.unwrap().unwrap_err(),
        Error::Timeout(WaitFor::CallsInFlight)
    );
    // Still loaded, linked again: found, unloaded, closed.
    assert_eq!(n.models().core(m).unwrap(), LogicalCore::FIRST);
    n.models().unload(m).unwrap();
    close_and_check_drained(&n);
}

#[test]
fn allocating_or_freeing_in_the_allocator_being_walked_times_out() {
    let f = up();
    let n = f.nrt();
    let al = core0_allocator(&n);
    let a = tensor_args(4096, "x");
    let d = n.dmem().alloc(al, &a, None).unwrap();
    let t = device_tensor(&n, 0, 4096, "t");
    let before = n.driver_pool_bytes_in_use().unwrap();
    let mut got = Vec::new();
    timed(|| {
        n.dmem().allocator_for_each(al, |_| {
            if got.is_empty() {
                got.push(n.dmem().alloc(al, &a, None).map(|_| ()));
                got.push(n.dmem().free(d));
                got.push(n.tensors().free(t));
            }
        })
    })
    .unwrap();
    for r in got {
        assert_eq!(r.unwrap_err(), Error::Timeout(WaitFor::AllocatorLock));
    }
    assert_eq!(
        n.driver_pool_bytes_in_use().unwrap(),
        before,
        "nothing allocated or freed"
    );
    n.dmem().free(d).unwrap();
    n.tensors().free(t).unwrap();
    close_and_check_drained(&n);
}
