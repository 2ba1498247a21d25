//! Tensors (spec §7): the public wrapper's gates in order, placements, bounds, slices sharing
//! storage, attach_buffer, device allocation info, and the execute data path.

mod common;

use nrt_core::ledger::UsageSel;
use nrt_core::tensor::Pending;
use nrt_core::tensor::Placement;
use nrt_core::PhysicalCore;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use common::*;
use nrt_core::abi::*;
use nrt_core::model::{ModelSpec, TensorDecl};
use nrt_core::sim::{Preset, SimConfig, SimDevice};
use nrt_core::tensor::HostMem;
use nrt_core::TensorHandle;
use nrt_core::{CoreSel, LogicalCore};
use nrt_core::{CoreState, Error, InitOptions, ModelHandle, Nrt, SetHandle};

struct Heap;
/// The provider the VIRTUAL tests bind their runtime to.
static HEAP: Heap = Heap;
impl HostMem for Heap {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        // SAFETY: non-zero size layout.
        NonNull::new(unsafe {
            std::alloc::alloc_zeroed(Layout::from_size_align(size.max(1), 64).ok()?)
        })
    }
    unsafe fn free(&self, p: NonNull<u8>, size: usize) {
        // SAFETY: caller contract.
        unsafe {
            std::alloc::dealloc(
                p.as_ptr(),
                Layout::from_size_align(size.max(1), 64).unwrap(),
            )
        }
    }
}

#[test]
fn gates_in_order() {
    let f = Fixture::new(SimConfig::scaled_down(Preset::Trn2, 1));
    let n = f.nrt();
    assert_eq!(
        n.tensors()
            .allocate(Placement::Device, LogicalCore::new(0).into(), 16, Some("t"))
            .unwrap_err()
            .status(),
        NRT_STATUS::NRT_UNINITIALIZED
    );
    n.init(&InitOptions::default()).unwrap();
    // range gate before the host-on-CAYMAN gate
    assert_eq!(
        n.tensors()
            .allocate(Placement::Host, LogicalCore::new(9).into(), 16, Some("t"))
            .unwrap_err()
            .status(),
        NRT_STATUS::NRT_INVALID
    );
    let e = n
        .tensors()
        .allocate(Placement::Host, LogicalCore::new(0).into(), 16, Some("t"))
        .unwrap_err();
    assert_eq!(
        e.status(),
        NRT_STATUS::NRT_RESOURCE,
        "host tensors are refused on CAYMAN: {e}"
    );
    assert_eq!(
        nrt_core::raw::tensor_allocate(&n, 7, 0, 16, Some("t"))
            .unwrap_err()
            .status(),
        NRT_STATUS::NRT_INVALID
    );
    assert_eq!(
        n.tensors()
            .allocate(Placement::Device, LogicalCore::new(0).into(), 0, Some("t"))
            .unwrap_err()
            .status(),
        NRT_STATUS::NRT_INVALID
    );
    let long = "x".repeat(256);
    assert_eq!(
        n.tensors()
            .allocate(
                Placement::Device,
                LogicalCore::new(0).into(),
                16,
                Some(&long)
            )
            .unwrap_err()
            .status(),
        NRT_STATUS::NRT_INVALID
    );
    n.close().unwrap();
    assert_eq!(
        n.tensors()
            .allocate(Placement::Device, LogicalCore::new(0).into(), 16, Some("t"))
            .unwrap_err()
            .status(),
        NRT_STATUS::NRT_CLOSED
    );
}

#[test]
fn device_tensor_round_trip_slices_and_info() {
    let f = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let n = f.nrt();
    let t = n
        .tensors()
        .allocate(
            Placement::Device,
            LogicalCore::new(1).into(),
            8192,
            Some("in"),
        )
        .unwrap();
    assert_eq!(
        n.ledger().device(
            PhysicalCore::new(0, 2),
            dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR
        ),
        8192,
        "vnc 1 = cores 2,3; GLOBAL heap of core 2"
    );
    let data: Vec<u8> = (0..8192u32).map(|i| i as u8).collect();
    n.tensors().write(t, &data, 0).unwrap();
    let mut back = vec![0u8; 8192];
    n.tensors().read(t, &mut back, 0).unwrap();
    assert_eq!(back, data);
    assert!(matches!(
        n.tensors().write(t, &data, 1),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        n.tensors().read(t, &mut back, u64::MAX),
        Err(Error::OutOfBounds { .. })
    ));
    let info = n.tensors().device_allocation_info(t).unwrap();
    assert_eq!((info.size, info.hbm_index), (8192, 1));
    let s = n
        .tensors()
        .allocate_slice(t, 4096, 100, Some("slice"))
        .unwrap();
    let mut b = vec![0u8; 100];
    n.tensors().read(s, &mut b, 0).unwrap();
    assert_eq!(b, data[4096..4196]);
    assert_eq!(
        n.tensors()
            .device_allocation_info(s)
            .unwrap()
            .physical_address,
        info.physical_address + 4096
    );
    assert!(n.tensors().allocate_slice(t, 8000, 500, None).is_err());
    n.tensors().memset(s, 0, 0xee, 100).unwrap();
    n.tensors().free(t).unwrap();
    assert_eq!(
        n.tensors().free(t).unwrap_err().status(),
        NRT_STATUS::NRT_INVALID,
        "double free detected"
    );
    // The slice keeps the storage alive.
    n.tensors().read(s, &mut b, 0).unwrap();
    assert!(b.iter().all(|x| *x == 0xee));
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 2), UsageSel::Total),
        8192
    );
    n.tensors().free(s).unwrap();
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 2), UsageSel::Total),
        0,
        "freed with the last user"
    );
}

#[test]
fn virtual_attach_copy_and_host_placement() {
    let f = Fixture::up_with_host(
        SimConfig::scaled_down(Preset::Trn1, 1),
        InitOptions::default(),
        &HEAP,
    );
    let n = f.nrt();
    let v = n
        .tensors()
        .allocate(Placement::Virtual, CoreSel::Any, 64, Some("v"))
        .unwrap();
    assert!(!n.tensors().va(v).unwrap().is_null());
    n.tensors().write(v, &[7u8; 64], 0).unwrap();
    let h = n
        .tensors()
        .allocate(Placement::Host, LogicalCore::new(0).into(), 64, Some("h"))
        .unwrap();
    assert_eq!(
        n.ledger().host(
            PhysicalCore::new(0, 0),
            dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR
        ),
        64
    );
    let d0 = n
        .tensors()
        .allocate(
            Placement::Device,
            LogicalCore::new(0).into(),
            64,
            Some("d0"),
        )
        .unwrap();
    let d1 = n
        .tensors()
        .allocate(
            Placement::Device,
            LogicalCore::new(1).into(),
            64,
            Some("d1"),
        )
        .unwrap();
    // A host tensor records its logical core's default HBM, as a device one does (spec §7.2).
    let h1 = n
        .tensors()
        .allocate(Placement::Host, LogicalCore::new(1).into(), 64, Some("h1"))
        .unwrap();
    assert_eq!(n.tensors().device_allocation_info(h1).unwrap().hbm_index, 1);
    assert_eq!(n.tensors().device_allocation_info(d1).unwrap().hbm_index, 1);
    n.tensors().free(h1).unwrap();
    n.tensors().copy(v, 0, d0, 0, 64).unwrap();
    n.tensors().copy(d0, 0, h, 0, 64).unwrap();
    let mut b = [0u8; 64];
    n.tensors().read(h, &mut b, 0).unwrap();
    assert_eq!(b, [7u8; 64]);
    assert_eq!(
        n.tensors().copy(d0, 0, d1, 0, 64).unwrap_err().status(),
        NRT_STATUS::NRT_INVALID,
        "device copies stay on a core"
    );
    let mut buf = vec![1u8; 32];
    let e = n.tensors().allocate_empty(Some("e")).unwrap();
    assert!(
        n.tensors().read(e, &mut b[..1], 0).is_err(),
        "no storage yet"
    );
    // SAFETY: `buf` (32 bytes) outlives `e`, which is freed below; nothing else touches it
    // meanwhile.
    unsafe { n.tensors().attach_buffer(e, buf.as_mut_ptr(), 32) }.unwrap();
    n.tensors().write(e, &[9u8; 4], 0).unwrap();
    n.tensors().free(e).unwrap();
    assert_eq!(
        &buf[..5],
        &[9, 9, 9, 9, 1],
        "the caller's buffer is never freed by us"
    );
    for t in [v, h, d0, d1] {
        n.tensors().free(t).unwrap();
    }
    assert_eq!(
        n.tensors()
            .free(TensorHandle::from_parts(0, 0, 0))
            .unwrap_err()
            .status(),
        NRT_STATUS::NRT_INVALID
    );
    assert_eq!(
        n.tensors().free(v).unwrap_err(),
        common::stale(nrt_core::HandleKind::Tensor),
        "double free"
    );
    n.close().unwrap();
    assert_eq!(n.driver_pool_bytes_in_use().unwrap(), 0);
}

#[test]
fn execute_binds_by_name_and_copies_inputs_to_outputs() {
    let f = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let n = f.nrt();
    let ins = [TensorDecl::new("a", 16), TensorDecl::new("b", 8)];
    let outs = [TensorDecl::new("x", 16), TensorDecl::new("y", 12)];
    let h = load_io_model(&n, 0, &ins, &outs);
    let mk = |name, size| {
        n.tensors()
            .allocate(
                Placement::Device,
                LogicalCore::new(0).into(),
                size,
                Some(name),
            )
            .unwrap()
    };
    let (a, b, x, y) = (mk("a", 16), mk("b", 8), mk("x", 16), mk("y", 12));
    n.tensors().write(a, &[1u8; 16], 0).unwrap();
    n.tensors().write(b, &[2u8; 8], 0).unwrap();
    n.tensors().write(y, &[0xffu8; 12], 0).unwrap();
    let si = n.sets().create().unwrap();
    let so = n.sets().create().unwrap();
    n.sets().add(si, "a", a).unwrap();
    n.sets().add(so, "x", x).unwrap();
    assert_eq!(
        n.tensors().execute(h, si, so).unwrap_err().status(),
        NRT_STATUS::NRT_INVALID,
        "missing input b"
    );
    n.sets().add(si, "b", b).unwrap();
    n.sets().add(so, "y", a).unwrap();
    assert_eq!(
        n.tensors().execute(h, si, so).unwrap_err().status(),
        NRT_STATUS::NRT_INVALID,
        "wrong size"
    );
    n.sets().add(so, "y", y).unwrap();
    n.tensors().execute(h, si, so).unwrap();
    let mut out = [0u8; 12];
    n.tensors().read(y, &mut out, 0).unwrap();
    assert_eq!(out, [2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0]);
    assert_eq!(n.tensors().output_completion(y).unwrap(), 1);
    assert_eq!(n.tensors().pending(y).unwrap(), Pending::default());
    n.tensors().reset_output_completion(y).unwrap();
    assert_eq!(n.tensors().output_completion(y).unwrap(), 0);
    assert_eq!(n.sets().len(si).unwrap(), 2);
    n.models().unload(h).unwrap();
    assert!(n.tensors().execute(h, si, so).is_err());
}

#[test]
fn independent_instances_do_not_share_state() {
    let f1 = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let st = CoreState::new_boxed();
    let n2 = Nrt::new(&st, &*f1.sim);
    assert_eq!(
        n2.tensors()
            .allocate(Placement::Device, LogicalCore::new(0).into(), 16, None)
            .unwrap_err()
            .status(),
        NRT_STATUS::NRT_UNINITIALIZED
    );
    let t = f1
        .nrt()
        .tensors()
        .allocate(Placement::Device, LogicalCore::new(0).into(), 16, None)
        .unwrap();
    assert!(
        matches!(
            n2.tensors().size(t),
            Err(Error::Uninitialized | Error::InvalidHandle(_))
        ),
        "another instance's tensor is foreign"
    );
}

/// A request no pool can hold is the out-of-memory of its location whatever its size: the
/// driver's EINVAL for sizes above `INT64_MAX` does not make `u64::MAX` a different mistake
/// from `u64::MAX / 2` (device: NRT_RESOURCE; host DMA: NRT_FAIL_HOST_MEM_ALLOC), and the
/// failed calls leave nothing allocated.
#[test]
fn too_large_requests_fail_as_out_of_memory_whatever_the_size() {
    let f = Fixture::up_with_host(
        SimConfig::scaled_down(Preset::Trn1, 1),
        InitOptions::default(),
        &HEAP,
    );
    let n = f.nrt();
    let core = || CoreSel::from(LogicalCore::new(0));
    let before = n.driver_pool_bytes_in_use().unwrap();
    for (placement, status) in [
        (Placement::Device, NRT_STATUS::NRT_RESOURCE),
        (Placement::Host, NRT_STATUS::NRT_FAIL_HOST_MEM_ALLOC),
    ] {
        for size in [u64::MAX, u64::MAX / 2 + 1, u64::MAX / 2, 1 << 40] {
            let e = n
                .tensors()
                .allocate(placement, core(), size, Some("huge"))
                .unwrap_err();
            assert_eq!(e.status(), status, "{placement:?} of {size} bytes: {e}");
        }
    }
    assert_eq!(n.driver_pool_bytes_in_use().unwrap(), before);
    n.close().unwrap();
}

#[test]
fn virtual_tensors_from_a_static_arena() {
    static POOL: nrt_core::tensor::ArenaHostMem<{ 1 << 20 }, 256> =
        nrt_core::tensor::ArenaHostMem::new();
    let f = Fixture::up_with_host(
        SimConfig::new(Preset::Trn2, 1),
        InitOptions::default(),
        &POOL,
    );
    let n = f.nrt();
    let before = POOL.free_bytes();
    let a = n
        .tensors()
        .allocate(Placement::Virtual, CoreSel::Any, 1000, Some("a"))
        .unwrap();
    let b = n
        .tensors()
        .allocate(Placement::Virtual, CoreSel::Any, 4096, Some("b"))
        .unwrap();
    n.tensors().write(a, &[3u8; 1000], 0).unwrap();
    n.tensors().copy(a, 0, b, 100, 1000).unwrap();
    let mut out = [0u8; 1100];
    n.tensors().read(b, &mut out, 0).unwrap();
    assert!(out[..100].iter().all(|x| *x == 0) && out[100..].iter().all(|x| *x == 3));
    assert_eq!(
        n.tensors()
            .allocate(Placement::Virtual, CoreSel::Any, 2 << 20, Some("big"))
            .unwrap_err()
            .status(),
        NRT_STATUS::NRT_FAIL_HOST_MEM_ALLOC
    );
    n.tensors().free(a).unwrap();
    n.tensors().free(b).unwrap();
    assert_eq!(POOL.free_bytes(), before.min(1 << 20));
}

/// `tensor_name` handed out a borrow of the arena slot's `name_buf`: once the tensor was freed
/// and its slot reused, the same name read the new tensor's bytes. It is an owned copy now.
#[test]
fn tensor_name_outlives_the_tensor() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let t = n.tensors().allocate_empty(Some("alpha")).unwrap();
    let name = n.tensors().name(t).unwrap();
    n.tensors().free(t).unwrap();
    let mut others = Vec::new();
    loop {
        let u = n.tensors().allocate_empty(Some("ZZZZZ")).unwrap();
        others.push(u);
        if u.to_parts().0 == t.to_parts().0 {
            break; // the freed slot is reused (fresh slots go first)
        }
    }
    assert_ne!(others.last(), Some(&t), "a new handle for the reused slot");
    assert_eq!(
        n.tensors().name(t).unwrap_err(),
        common::stale(nrt_core::HandleKind::Tensor),
        "the old handle does not name the slot's new tensor"
    );
    assert_eq!(
        &*n.tensors().name(*others.last().unwrap()).unwrap(),
        "ZZZZZ"
    );
    assert_eq!(
        &*name, "alpha",
        "the name read before the free is unchanged"
    );
    for u in others {
        n.tensors().free(u).unwrap();
    }
    let long = "n".repeat(255);
    let t = n.tensors().allocate_empty(Some(&long)).unwrap();
    assert_eq!(
        &*n.tensors().name(t).unwrap(),
        long.as_str(),
        "255 bytes fit"
    );
    n.tensors().free(t).unwrap();
}

/// `tensor_copy` within one storage with overlapping ranges: the 4 KiB chunks went forward, so
/// with the destination above the source a chunk re-read bytes an earlier chunk had already
/// overwritten. It is memmove now, in both directions, for one tensor and for slices sharing
/// a storage, on VIRTUAL and DEVICE tensors.
#[test]
fn overlapping_copy_within_a_storage_is_memmove() {
    let f = Fixture::up_with_host(
        SimConfig::scaled_down(Preset::Trn1, 1),
        InitOptions::default(),
        &HEAP,
    );
    let n = f.nrt();
    let pattern: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8).collect();
    let check = |t, src: u64, dst: u64, len: u64, what: &str| {
        n.tensors().write(t, &pattern, 0).unwrap();
        n.tensors().copy(t, src, t, dst, len).unwrap();
        let mut want = pattern.clone();
        want.copy_within(src as usize..(src + len) as usize, dst as usize);
        let mut got = vec![0u8; 16384];
        n.tensors().read(t, &mut got, 0).unwrap();
        assert!(
            got == want,
            "{what}: copy({src} -> {dst}, {len}) is not memmove"
        );
    };
    let v = n
        .tensors()
        .allocate(Placement::Virtual, CoreSel::Any, 16384, Some("v"))
        .unwrap();
    let d = n
        .tensors()
        .allocate(
            Placement::Device,
            LogicalCore::new(0).into(),
            16384,
            Some("d"),
        )
        .unwrap();
    for (t, what) in [(v, "VIRTUAL"), (d, "DEVICE")] {
        check(t, 0, 100, 8192, what);
        check(t, 100, 0, 8192, what);
        check(t, 0, 4096, 12288, what);
        check(t, 5000, 4999, 11000, what);
        check(t, 0, 0, 16384, what);
    }
    // Two slices of one storage: [0, 12K) and [100, 12K + 100).
    let lo = n.tensors().allocate_slice(v, 0, 12288, Some("lo")).unwrap();
    let hi = n
        .tensors()
        .allocate_slice(v, 100, 12288, Some("hi"))
        .unwrap();
    n.tensors().write(v, &pattern, 0).unwrap();
    n.tensors().copy(lo, 0, hi, 0, 8192).unwrap();
    let mut want = pattern.clone();
    want.copy_within(0..8192, 100);
    let mut got = vec![0u8; 16384];
    n.tensors().read(v, &mut got, 0).unwrap();
    assert!(got == want, "slices sharing a storage: not memmove");
    for t in [lo, hi, v, d] {
        n.tensors().free(t).unwrap();
    }
}

/// Hooks that park the first `copy_in` after `armed` is set until `go`: they let a test hold
/// an `execute` in the middle of writing its outputs. With `panic_in_fill`, the next `fill`
/// panics instead (a driver failing inside an execution).
#[derive(Default)]
struct Parking {
    armed: AtomicBool,
    parked: AtomicBool,
    go: AtomicBool,
    panic_in_fill: AtomicBool,
}

impl DriverHooks for Parking {
    fn before_copy_in(&self) {
        if self.armed.swap(false, SeqCst) {
            self.parked.store(true, SeqCst);
            while !self.go.load(SeqCst) {
                std::thread::yield_now();
            }
        }
    }
    fn before_fill(&self) {
        if self.panic_in_fill.swap(false, SeqCst) {
            panic!("driver failure inside fill");
        }
    }
}

/// A [`Parking`] driver over a scaled-down simulated trn2 whose memory is `backing`.
fn parking_driver(backing: &mut Vec<u8>) -> HookedSim<Parking> {
    let cfg = SimConfig::scaled_down(Preset::Trn2, 1);
    let mut sim = SimDevice::new_boxed(&cfg).unwrap();
    backing.resize(sim.backing_len(0) as usize, 0);
    // SAFETY: the caller keeps `backing` alive, unmoved, for as long as the driver.
    unsafe { sim.set_backing(0, backing.as_mut_ptr(), backing.len() as u64) }.unwrap();
    HookedSim {
        inner: sim,
        hooks: Parking::default(),
    }
}

/// `close` (spec §12) waits for the calls already past the gate, and those complete: an
/// `execute` parked half-way through its outputs when `close` begins still writes them all
/// and succeeds, instead of failing its nested copies with `Closed`.
#[test]
fn an_execute_in_flight_when_close_begins_completes() {
    let mut backing = Vec::new();
    let drv = parking_driver(&mut backing);
    let st = CoreState::new_boxed();
    let n = Nrt::new(&st, &drv);
    n.init(&InitOptions::default()).unwrap();
    let ins = [TensorDecl::new("a", 16), TensorDecl::new("b", 16)];
    let outs = [TensorDecl::new("x", 16), TensorDecl::new("y", 16)];
    let h = load_io_model(&n, 0, &ins, &outs);
    let mk = |name| {
        n.tensors()
            .allocate(
                Placement::Device,
                LogicalCore::new(0).into(),
                16,
                Some(name),
            )
            .unwrap()
    };
    let (a, b, x, y) = (mk("a"), mk("b"), mk("x"), mk("y"));
    n.tensors().write(a, &[1; 16], 0).unwrap();
    n.tensors().write(b, &[2; 16], 0).unwrap();
    let (si, so) = (n.sets().create().unwrap(), n.sets().create().unwrap());
    n.sets().add(si, "a", a).unwrap();
    n.sets().add(si, "b", b).unwrap();
    n.sets().add(so, "x", x).unwrap();
    n.sets().add(so, "y", y).unwrap();
    drv.hooks.armed.store(true, SeqCst);
    std::thread::scope(|s| {
        let exec = s.spawn(|| n.tensors().execute(h, si, so));
        while !drv.hooks.parked.load(SeqCst) {
            std::thread::yield_now();
        }
        let close = s.spawn(|| n.close());
        while n.lifecycle() != nrt_core::Lifecycle::Closed {
            std::thread::yield_now();
        }
        drv.hooks.go.store(true, SeqCst);
        assert_eq!(
            exec.join().unwrap(),
            Ok(()),
            "the execute in flight completes"
        );
        assert_eq!(close.join().unwrap(), Ok(()));
    });
    assert_eq!(
        n.driver_pool_bytes_in_use().unwrap(),
        0,
        "close still released everything"
    );
}

/// A model with one input `a` (16 bytes) and one output `x` (`out` bytes) loaded on logical
/// core 0, its two device tensors, and the sets that bind them: `execute` copies `a` into the
/// head of `x` and zero-fills the rest.
fn copy_model(
    n: &Nrt<'_>,
    out: u64,
) -> (
    ModelHandle,
    TensorHandle,
    TensorHandle,
    SetHandle,
    SetHandle,
) {
    let ins = [TensorDecl::new("a", 16)];
    let outs = [TensorDecl::new("x", out)];
    let h = load_io_model(n, 0, &ins, &outs);
    let a = n
        .tensors()
        .allocate(Placement::Device, LogicalCore::new(0).into(), 16, Some("a"))
        .unwrap();
    let x = n
        .tensors()
        .allocate(
            Placement::Device,
            LogicalCore::new(0).into(),
            out,
            Some("x"),
        )
        .unwrap();
    let (si, so) = (n.sets().create().unwrap(), n.sets().create().unwrap());
    n.sets().add(si, "a", a).unwrap();
    n.sets().add(so, "x", x).unwrap();
    (h, a, x, si, so)
}

/// Loads a model of one subgraph with these declared inputs and outputs on logical core
/// `vnc`.
fn load_io_model(n: &Nrt<'_>, vnc: i64, ins: &[TensorDecl], outs: &[TensorDecl]) -> ModelHandle {
    let spec = ModelSpec {
        name: "m",
        subgraphs: 1,
        inputs: ins,
        outputs: outs,
        ..Default::default()
    };
    n.models().load(LogicalCore::from_c(vnc), &spec).unwrap()
}

/// A read never sees an output half written (spec §7.1: a tensor cannot be read until the
/// DMA writing it has completed). `execute` copies the 16-byte input into the 64 KiB output
/// and then zero-fills the rest; a reader running beside it sees either the old bytes or the
/// whole new output, never the copied head over the old tail.
#[test]
fn reads_wait_for_the_execution_writing_the_tensor() {
    let f = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let n = f.nrt();
    const OUT: usize = 64 << 10;
    let (h, a, x, si, so) = copy_model(&n, OUT as u64);
    n.tensors().write(a, &[0x11; 16], 0).unwrap();
    let old = vec![0xffu8; OUT];
    let mut new = vec![0u8; OUT];
    new[..16].fill(0x11);
    n.tensors().write(x, &old, 0).unwrap(); // before the reader's first look
    let (started, done) = (AtomicBool::new(false), AtomicBool::new(false));
    let xa = x;
    std::thread::scope(|sc| {
        let reader = sc.spawn(|| {
            let mut buf = vec![0u8; OUT];
            let mut reads = 0u64;
            started.store(true, SeqCst);
            while !done.load(SeqCst) {
                n.tensors().read(xa, &mut buf, 0).unwrap();
                assert!(
                    buf == old || buf == new,
                    "read {reads}: half an output (head {:#x}, byte 16 {:#x})",
                    buf[0],
                    buf[16]
                );
                reads += 1;
            }
            reads
        });
        while !started.load(SeqCst) {
            std::hint::spin_loop();
        }
        for _ in 0..2000 {
            n.tensors().write(x, &old, 0).unwrap();
            n.tensors().execute(h, si, so).unwrap();
        }
        done.store(true, SeqCst);
        assert!(reader.join().unwrap() > 0);
    });
    for t in [a, x] {
        n.tensors().free(t).unwrap();
    }
    n.models().unload(h).unwrap();
}

/// An execution that unwinds (a driver panicking in the middle of its outputs) takes its
/// pending marks back: the output can be read afterwards, and `close` does not wait forever.
#[test]
fn an_unwinding_execute_leaves_no_pending_marks() {
    let mut backing = Vec::new();
    let drv = parking_driver(&mut backing);
    let st = CoreState::new_boxed();
    let n = Nrt::new(&st, &drv);
    n.init(&InitOptions::default()).unwrap();
    let (h, a, x, si, so) = copy_model(&n, 64);
    // The 16 input bytes are copied, then the rest of the output is filled: that panics.
    drv.hooks.panic_in_fill.store(true, SeqCst);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        n.tensors().execute(h, si, so)
    }));
    assert!(r.is_err(), "the driver's panic unwound through execute");
    assert_eq!(n.tensors().pending(x).unwrap(), Pending::default());
    assert_eq!(n.tensors().pending(a).unwrap(), Pending::default());
    let mut buf = [0u8; 64];
    n.tensors().read(x, &mut buf, 0).unwrap();
    n.close().unwrap();
    assert_eq!(n.driver_pool_bytes_in_use().unwrap(), 0);
}

/// An execution does not read its inputs while another execution is writing them (spec §7.1:
/// a tensor cannot be read until the DMA writing it has completed). Producer P
/// (vnc 0) writes `x` from a1 (all 0x11) or a2 (all 0x22); consumer C (vnc 1, another core so
/// the exec locks do not serialise them) copies `x` into `z`. `z` must be one whole output of
/// P, never half of one.
#[test]
fn an_execution_never_reads_half_of_another_executions_output() {
    let f = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let n = f.nrt();
    const N: u64 = 64 << 10;
    let load = |vnc, i: &'static str, o: &'static str| {
        let ins = [TensorDecl::new(i, N)];
        let outs = [TensorDecl::new(o, N)];
        load_io_model(&n, vnc, &ins, &outs)
    };
    let (p, c) = (load(0, "a", "x"), load(1, "x", "z"));
    let mk = |name| {
        n.tensors()
            .allocate(Placement::Device, LogicalCore::new(0).into(), N, Some(name))
            .unwrap()
    };
    let (a1, a2, x, z) = (mk("a"), mk("a"), mk("x"), mk("z"));
    n.tensors().write(a1, &vec![0x11; N as usize], 0).unwrap();
    n.tensors().write(a2, &vec![0x22; N as usize], 0).unwrap();
    n.tensors().write(x, &vec![0x11; N as usize], 0).unwrap();
    let set = |name, t| {
        let s = n.sets().create().unwrap();
        n.sets().add(s, name, t).unwrap();
        s
    };
    let (sa1, sa2, sx, sz) = (set("a", a1), set("a", a2), set("x", x), set("z", z));
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            while !done.load(SeqCst) {
                n.tensors().execute(p, sa1, sx).unwrap();
                n.tensors().execute(p, sa2, sx).unwrap();
            }
        });
        let _stop = StopOnDrop(&done);
        let mut buf = vec![0u8; N as usize];
        for i in 0..1000 {
            n.tensors().execute(c, sx, sz).unwrap();
            n.tensors().read(z, &mut buf, 0).unwrap();
            assert!(
                buf.iter().all(|b| *b == buf[0]),
                "execution {i} read half an output: first {:#x}, last {:#x}",
                buf[0],
                buf[N as usize - 1]
            );
        }
    });
}

/// A refused execution writes none of its outputs: every copy is checked before the first
/// byte moves (here the second output is on another NeuronCore than its input).
#[test]
fn a_refused_execution_leaves_every_output_as_it_was() {
    let f = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let n = f.nrt();
    const N: u64 = 4096;
    let ins = [TensorDecl::new("a", N), TensorDecl::new("b", N)];
    let outs = [TensorDecl::new("x", N), TensorDecl::new("y", N)];
    let m = load_io_model(&n, 0, &ins, &outs);
    let on = |vnc, name| {
        n.tensors()
            .allocate(Placement::Device, vnc, N, Some(name))
            .unwrap()
    };
    let (a, b, x, y) = (
        on(LogicalCore::new(0).into(), "a"),
        on(LogicalCore::new(0).into(), "b"),
        on(LogicalCore::new(0).into(), "x"),
        on(LogicalCore::new(1).into(), "y"),
    );
    n.tensors().write(a, &[0x11; N as usize], 0).unwrap();
    n.tensors().write(x, &[0x77; N as usize], 0).unwrap();
    let si = n.sets().create().unwrap();
    n.sets().add(si, "a", a).unwrap();
    n.sets().add(si, "b", b).unwrap();
    let so = n.sets().create().unwrap();
    n.sets().add(so, "x", x).unwrap();
    n.sets().add(so, "y", y).unwrap();
    let e = n.tensors().execute(m, si, so).unwrap_err();
    assert_eq!(e.status(), NRT_STATUS::NRT_INVALID, "{e}");
    let mut buf = [0u8; N as usize];
    n.tensors().read(x, &mut buf, 0).unwrap();
    assert!(buf.iter().all(|&v| v == 0x77), "output x was written");
    n.close().unwrap();
}

/// A host provider that counts the bytes it has out.
struct Counting(std::sync::atomic::AtomicU64);
impl HostMem for Counting {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        let p = HEAP.alloc(size)?;
        self.0
            .fetch_add(size as u64, std::sync::atomic::Ordering::Relaxed);
        Some(p)
    }
    unsafe fn free(&self, p: NonNull<u8>, size: usize) {
        self.0
            .fetch_sub(size as u64, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: forwarded contract: `p` came from HEAP.alloc(size) in `alloc`.
        unsafe { HEAP.free(p, size) }
    }
}

#[test]
fn close_returns_live_virtual_tensors_bytes_to_the_bound_provider() {
    static HOST: Counting = Counting(std::sync::atomic::AtomicU64::new(0));
    let out = || HOST.0.load(std::sync::atomic::Ordering::Relaxed);
    let f = Fixture::up_with_host(
        SimConfig::new(Preset::Trn2, 1),
        InitOptions::default(),
        &HOST,
    );
    let n = f.nrt();
    for size in [64u64, 4096, 100_000] {
        n.tensors()
            .allocate(Placement::Virtual, CoreSel::Any, size, Some("left"))
            .unwrap();
    }
    let slice_src = n
        .tensors()
        .allocate(Placement::Virtual, CoreSel::Any, 512, Some("src"))
        .unwrap();
    n.tensors()
        .allocate_slice(slice_src, 0, 256, Some("slice"))
        .unwrap();
    n.tensors()
        .allocate(
            Placement::Device,
            LogicalCore::new(0).into(),
            4096,
            Some("dev"),
        )
        .unwrap();
    assert_eq!(out(), 64 + 4096 + 100_000 + 512);
    n.close().unwrap();
    assert_eq!(out(), 0, "close left VIRTUAL bytes with the host provider");
    assert_eq!(n.driver_pool_bytes_in_use().unwrap(), 0);
}

#[test]
fn a_view_over_other_resources_is_refused() {
    static OTHER: Heap = Heap;
    let f = Fixture::up_with_host(
        SimConfig::new(Preset::Trn2, 1),
        InitOptions::default(),
        &HEAP,
    );
    let n = f.nrt();
    let t = n
        .tensors()
        .allocate(Placement::Virtual, CoreSel::Any, 64, Some("mine"))
        .unwrap();
    let before = snapshot(&n);
    // Another driver over the same state block: every call is refused, nothing changes.
    let other_sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn2, 1)).unwrap();
    let wrong = Nrt::with_host(&f.st, &*other_sim, &HEAP);
    assert_eq!(wrong.tensors().free(t), Err(Error::ForeignResources));
    assert_eq!(
        wrong
            .tensors()
            .allocate(Placement::Device, LogicalCore::new(0).into(), 4096, None),
        Err(Error::ForeignResources)
    );
    assert_eq!(wrong.close(), Err(Error::ForeignResources));
    assert_eq!(
        wrong.init(&InitOptions::default()),
        Err(Error::ForeignResources)
    );
    // The right driver without the bound provider: refused, naming what is missing; with
    // another provider: refused as foreign.
    let no_host = Nrt::new(&f.st, &*f.sim);
    assert_eq!(no_host.tensors().size(t), Err(Error::MissingHostProvider));
    let dev = no_host
        .tensors()
        .allocate(Placement::Device, LogicalCore::new(0).into(), 4096, None);
    assert_eq!(dev, Err(Error::MissingHostProvider));
    let msg = Error::MissingHostProvider.to_string();
    assert!(
        msg.contains("host-memory provider") && msg.contains("with_host"),
        "{msg}"
    );
    assert_eq!(Error::MissingHostProvider.status(), NRT_STATUS::NRT_INVALID);
    let other_host = Nrt::with_host(&f.st, &*f.sim, &OTHER);
    assert_eq!(other_host.tensors().free(t), Err(Error::ForeignResources));
    // No call takes a per-call provider any more: a free always goes to the bound one.
    assert_eq!(
        Error::ForeignResources.status(),
        NRT_STATUS::NRT_INVALID,
        "a caller's mistake"
    );
    assert_eq!(snapshot(&n), before);
    assert_eq!(n.tensors().size(t), Ok(64));
    n.tensors().free(t).unwrap();
    n.close().unwrap();
    // After close, a new init may bind other resources.
    let again = Nrt::new(&f.st, &*other_sim);
    again.init(&InitOptions::default()).unwrap();
    assert_eq!(n.tensors().size(t), Err(Error::ForeignResources));
    again.close().unwrap();
}

#[test]
fn any_core_is_core_0_off_device_and_fails_the_range_gate_as_minus_1_on_device() {
    let f = Fixture::up_with_host(
        SimConfig::scaled_down(Preset::Trn1, 1),
        InitOptions::default(),
        &HEAP,
    );
    let n = f.nrt();
    let owned = n.visible_logical_core_count();
    let v = n
        .tensors()
        .allocate(Placement::Virtual, CoreSel::Any, 64, Some("v"))
        .unwrap();
    let h = n
        .tensors()
        .allocate(Placement::Host, CoreSel::Any, 64, Some("h"))
        .unwrap();
    let host = n
        .ledger()
        .logical_core_usage(LogicalCore::FIRST)
        .unwrap()
        .host;
    assert!(
        host.iter().any(|&b| b >= 64),
        "HOST tensor booked on core 0"
    );
    assert_eq!(
        n.tensors()
            .allocate(Placement::Device, CoreSel::Any, 64, Some("d")),
        Err(Error::LogicalCoreOutOfRange { vnc: -1, owned })
    );
    n.tensors().free(v).unwrap();
    n.tensors().free(h).unwrap();
}
