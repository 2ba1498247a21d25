//! The std shim's bounded waits (`nrt_host::wait`): a long legitimate wait (an execution
//! holding the core on another thread) still succeeds under the default bound, and the
//! thread token the shim installs makes an unload from a callback on the model an immediate
//! error.

use std::time::{Duration, Instant};

use nrt_core::model::{ModelSpec, TensorDecl};
use nrt_core::sync::WaitFor;
use nrt_core::tensor::Placement;
use nrt_core::{Error, LogicalCore, ModelHandle, SetHandle};
use nrt_host::config::{DeviceChoice, RuntimeConfig};
use nrt_host::HostRuntime;

/// How long the other thread holds the core: far past any busy phase, well inside the
/// default bound.
const HOLD: Duration = Duration::from_secs(2);

/// A shim runtime over a simulated trn2.
fn runtime() -> HostRuntime {
    HostRuntime::start(RuntimeConfig {
        device: DeviceChoice::sim(nrt_core::sim::Preset::Trn2, 1),
        ..Default::default()
    })
    .expect("runtime")
}

/// A model with one 64-byte input and output on the first logical core, and its input and
/// output sets, filled.
fn one_model(n: &nrt_core::Nrt<'_>) -> (ModelHandle, SetHandle, SetHandle) {
    let (ins, outs) = ([TensorDecl::new("in", 64)], [TensorDecl::new("out", 64)]);
    let spec = ModelSpec {
        name: "m",
        subgraphs: 1,
        inputs: &ins,
        outputs: &outs,
        ..Default::default()
    };
    let m = n.models().load(LogicalCore::FIRST, &spec).unwrap();
    let (si, so) = (n.sets().create().unwrap(), n.sets().create().unwrap());
    for (set, name) in [(si, "in"), (so, "out")] {
        let t = n
            .tensors()
            .allocate(Placement::Device, LogicalCore::FIRST.into(), 64, Some(name))
            .unwrap();
        n.sets().add(set, name, t).unwrap();
    }
    (m, si, so)
}

#[test]
fn a_long_wait_for_another_threads_execution_succeeds_under_the_default_bound() {
    assert!(nrt_host::DEFAULT_WAIT_LIMIT > HOLD * 5);
    let rt = runtime();
    let n = rt.nrt();
    let (m, si, so) = one_model(&n);
    // The shim's thread token: an unload from the model's own callback is refused at once.
    let t0 = Instant::now();
    let mut got = None;
    n.models()
        .for_each_io(m, |_| {
            got.get_or_insert(n.models().unload(m));
        })
        .unwrap();
    assert_eq!(
        got.unwrap(),
        Err(Error::WouldDeadlock(WaitFor::ModelDrain {
            model: m.h_model().id
        }))
    );
    assert!(t0.elapsed() < HOLD, "refused without waiting");
    let g = n.models().exec_begin(m).unwrap();
    std::thread::scope(|s| {
        let exec = s.spawn(|| {
            let t0 = Instant::now();
            (n.tensors().execute(m, si, so), t0.elapsed())
        });
        let unload = s.spawn(|| {
            // Once the execution holds its reference (beside the guard's), the unload waits
            // for both.
            while n.models().info(m).map_or(0, |i| i.ref_count) < 2 {
                std::thread::sleep(Duration::from_millis(5));
            }
            n.models().unload(m)
        });
        std::thread::sleep(HOLD);
        drop(g);
        let (r, waited) = exec.join().unwrap();
        r.expect("the execution waited for the guard and ran");
        assert!(waited >= HOLD / 2, "it did wait: {waited:?}");
        unload
            .join()
            .unwrap()
            .expect("the unload waited for the guard and the execution");
    });
    n.close().unwrap();
    assert_eq!(n.driver_pool_bytes_in_use().unwrap(), 0);
}

#[test]
fn the_threads_own_execution_is_refused_at_once_and_a_leaked_one_is_revoked() {
    let rt = runtime();
    let n = rt.nrt();
    let (m, si, so) = one_model(&n);
    let core = n.physical_cores(LogicalCore::FIRST).unwrap()[0];
    let drain = WaitFor::ModelDrain {
        model: m.h_model().id,
    };
    // The shim's thread token: every call of this thread that would wait for its own
    // execution is refused without waiting, leaked guard or not.
    let g = n.models().exec_begin(m).unwrap();
    std::mem::forget(g);
    let t0 = Instant::now();
    assert!(matches!(
        n.tensors().execute(m, si, so),
        Err(Error::WouldDeadlock(WaitFor::ExecLock { .. }))
    ));
    assert_eq!(n.models().unload(m), Err(Error::WouldDeadlock(drain)));
    assert_eq!(n.close(), Err(Error::WouldDeadlock(drain)));
    assert!(t0.elapsed() < HOLD, "refused without waiting");
    // The recovery ends the leaked execution; everything works again.
    assert_eq!(n.models().revoke_exec(core), Ok(Some(m)));
    n.tensors().execute(m, si, so).expect("the core is free");
    n.models().unload(m).expect("the model is idle");
    n.close().unwrap();
    assert_eq!(n.driver_pool_bytes_in_use().unwrap(), 0);
}
