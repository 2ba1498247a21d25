//! Model and tensor-set handles (bad input): a model handle unloaded (at any
//! age), forged, of another runtime, of a closed or re-initialised one is an error and never
//! another model; the same for tensor-set handles. Each refused call changes nothing: the
//! ledger, the driver's bytes and every arena are as before.
mod common;

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use common::*;
use nrt_core::model::{ModelAlloc, ModelSpec, TensorDecl};
use nrt_core::sim::{Preset, SimConfig};
use nrt_core::tensor::{Placement, SET_CHUNK};
use nrt_core::LogicalCore;
use nrt_core::{
    CoreState, Error, HandleError, HandleFault, HandleKind, InitOptions, ModelHandle, Nrt,
    SetHandle,
};

fn fault(e: Error) -> Option<(HandleKind, HandleFault)> {
    match e {
        Error::InvalidHandle(HandleError { kind, fault }) => Some((kind, fault)),
        _ => None,
    }
}

fn up() -> Fixture {
    Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    )
}

/// Everything a refused call must leave as it was: the ledger of device 0, the driver's
/// bytes and every arena's live count.
fn state(n: &Nrt<'_>) -> impl PartialEq + std::fmt::Debug {
    (
        n.ledger().snapshot(0),
        n.driver_pool_bytes_in_use().unwrap(),
        n.state().arena_stats().map(|(name, s)| (name, s.live)),
    )
}

const IO_IN: [TensorDecl<'static>; 1] = [TensorDecl {
    name: "in",
    size: 16,
    dtype: 0xA,
    shape: &[2, 2],
}];
const IO_OUT: [TensorDecl<'static>; 1] = [TensorDecl::new("out", 16)];

/// A model with one 4 KiB weight, one input and one output.
fn load(n: &Nrt<'_>, vnc: u32) -> ModelHandle {
    const W: [ModelAlloc<'static>; 1] = [ModelAlloc {
        usage: nrt_core::abi::dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_WEIGHT,
        location: nrt_core::abi::dma_mem_location_t::TONGA_DRAM,
        size: 4096,
        align: 0,
        hint: "w",
    }];
    let spec = ModelSpec {
        name: "m",
        subgraphs: 1,
        allocations: &W,
        inputs: &IO_IN,
        outputs: &IO_OUT,
        ..Default::default()
    };
    n.models().load(LogicalCore::new(vnc), &spec).unwrap()
}

/// Every model call through `h` is refused with `(Model, want)` and changes nothing.
fn model_refused(n: &Nrt<'_>, h: ModelHandle, want: HandleFault) {
    let before = state(n);
    let m = Some((HandleKind::Model, want));
    assert_eq!(fault(n.models().unload(h).unwrap_err()), m, "unload {h:?}");
    assert_eq!(
        fault(n.models().info(h).unwrap_err()),
        m,
        "model_info {h:?}"
    );
    assert_eq!(fault(n.models().core(h).unwrap_err()), m);
    assert_eq!(fault(n.models().exec_begin(h).err().unwrap()), m);
    assert_eq!(
        fault(n.models().for_each_dmem(h, |_, _| ()).unwrap_err()),
        m
    );
    assert_eq!(fault(n.models().for_each_io(h, |_| ()).unwrap_err()), m);
    let s = n.sets().create().unwrap();
    assert_eq!(fault(n.tensors().execute(h, s, s).unwrap_err()), m);
    n.sets().destroy(s).unwrap();
    assert_eq!(
        n.models().unload(h).unwrap_err().status(),
        nrt_core::abi::NRT_STATUS::NRT_INVALID_HANDLE,
        "the C API's status for a model that is not loaded"
    );
    assert_eq!(state(n), before, "a refused model call changed something");
}

/// Every set call through `h` is refused with `(Set, want)` and changes nothing.
fn set_refused(n: &Nrt<'_>, h: SetHandle, live: ModelHandle, want: HandleFault) {
    let t = n.tensors().allocate_empty(None).unwrap();
    let before = state(n);
    let s = Some((HandleKind::Set, want));
    assert_eq!(fault(n.sets().destroy(h).unwrap_err()), s, "destroy {h:?}");
    assert_eq!(fault(n.sets().add(h, "in", t).unwrap_err()), s);
    assert_eq!(fault(n.sets().get(h, "in").unwrap_err()), s);
    assert_eq!(fault(n.sets().len(h).unwrap_err()), s);
    assert_eq!(fault(n.tensors().execute(live, h, h).unwrap_err()), s);
    assert_eq!(state(n), before, "a refused set call changed something");
    n.tensors().free(t).unwrap();
}

#[test]
fn model_and_set_handles_are_plain_shareable_values() {
    fn check<T: Copy + Send + Sync + Eq + std::hash::Hash + std::fmt::Debug>() {}
    check::<ModelHandle>();
    check::<SetHandle>();
    let f = up();
    let n = f.nrt();
    let h = load(&n, 1);
    assert_eq!(h.core(), LogicalCore::new(1));
    assert_eq!(n.models().core(h), Ok(LogicalCore::new(1)));
    assert_eq!(n.models().info(h).unwrap().handle, h.h_model().id);
    assert_eq!(ModelHandle::from_bits(h.to_bits()), h);
}

/// The IO table the core keeps is what the model declared: name, usage, size, dtype, shape.
#[test]
fn the_model_io_table_is_what_the_model_declared() {
    let f = up();
    let n = f.nrt();
    let h = load(&n, 0);
    let mut got = Vec::new();
    n.models()
        .for_each_io(h, |io| {
            got.push((
                io.name.to_string(),
                io.usage,
                io.size,
                io.dtype,
                io.shape.to_vec(),
            ))
        })
        .unwrap();
    use nrt_core::model::IoUsage::*;
    assert_eq!(
        got,
        [
            ("in".to_string(), Input, 16, 0xA, vec![2, 2]),
            ("out".to_string(), Output, 16, 0, vec![]),
        ]
    );
    // Names up to 255 bytes (NRT_TENSOR_NAME_MAX - 1) load; longer ones are refused.
    let long = "n".repeat(255);
    let ok = [TensorDecl::new(&long, 8)];
    let spec = |io| ModelSpec {
        name: "long",
        subgraphs: 1,
        inputs: io,
        ..Default::default()
    };
    let hl = n.models().load(LogicalCore::FIRST, &spec(&ok)).unwrap();
    n.models()
        .for_each_io(hl, |io| assert_eq!(io.name, long))
        .unwrap();
    let longer = "n".repeat(256);
    let bad = [TensorDecl::new(&longer, 8)];
    let before = state(&n);
    assert!(matches!(
        n.models().load(LogicalCore::FIRST, &spec(&bad)),
        Err(Error::InvalidModel(_))
    ));
    let dims = [1u32; 33];
    let deep = [TensorDecl {
        shape: &dims,
        ..TensorDecl::new("d", 8)
    }];
    assert!(matches!(
        n.models().load(LogicalCore::FIRST, &spec(&deep)),
        Err(Error::InvalidModel(_))
    ));
    assert_eq!(state(&n), before);
}

/// A model declares as many inputs and outputs as it has (1 000 pairs here, 200-byte names):
/// the table reads back in order, an execution binds every one by name and moves each input
/// to its output, and unloading gives the table's chunks back. A table the chunk arena cannot
/// hold is refused and rolled back.
#[test]
fn a_model_declares_a_thousand_io_pairs() {
    let f = up();
    let n = f.nrt();
    let pairs = 1000;
    let names: Vec<String> = (0..2 * pairs)
        .map(|i| format!("{:0>200}", format!("model.layers.{i}.kv")))
        .collect();
    let decl = |r: std::ops::Range<usize>| -> Vec<TensorDecl<'_>> {
        r.map(|i| TensorDecl::new(&names[i], 8)).collect()
    };
    let (ins, outs) = (decl(0..pairs), decl(pairs..2 * pairs));
    let spec = ModelSpec {
        name: "llm-shard",
        subgraphs: 1,
        inputs: &ins,
        outputs: &outs,
        ..Default::default()
    };
    let h = n.models().load(LogicalCore::FIRST, &spec).unwrap();
    let mut got = Vec::new();
    n.models()
        .for_each_io(h, |io| got.push(io.name.to_string()))
        .unwrap();
    assert_eq!(got, names);
    let (si, so) = (n.sets().create().unwrap(), n.sets().create().unwrap());
    let mut tensors = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let t = n
            .tensors()
            .allocate(Placement::Device, LogicalCore::FIRST.into(), 8, Some(name))
            .unwrap();
        if i < pairs {
            n.tensors().write(t, &(i as u64).to_le_bytes(), 0).unwrap();
        }
        n.sets()
            .add(if i < pairs { si } else { so }, name, t)
            .unwrap();
        tensors.push(t);
    }
    n.tensors().execute(h, si, so).unwrap();
    for i in 0..pairs {
        let mut b = [0u8; 8];
        n.tensors().read(tensors[pairs + i], &mut b, 0).unwrap();
        assert_eq!(u64::from_le_bytes(b), i as u64, "output {i}");
    }
    assert_eq!(arena_live(&n, "bound tensor chunk"), 0, "pins ended");
    n.models().unload(h).unwrap();
    assert_eq!(arena_live(&n, "model io chunk"), 0);
    // More IO than the chunk arena holds (DEFAULT: 512 chunks of 8): refused, nothing kept.
    let many = decl(0..2 * pairs);
    let too_big: Vec<_> = many.iter().chain(&many).chain(&many).copied().collect();
    let before = state(&n);
    let e = n
        .models()
        .load(
            LogicalCore::FIRST,
            &ModelSpec {
                inputs: &too_big,
                ..spec
            },
        )
        .unwrap_err();
    assert!(
        matches!(e, Error::ArenaFull(a) if a.setting.contains("io_chunks")),
        "{e}"
    );
    assert_eq!(state(&n), before);
    for t in tensors {
        n.tensors().free(t).unwrap();
    }
}

/// A model handle unloaded 10⁵ loads and unloads ago is refused, and the model loaded now
/// (on the same core, from the same arena slots) is untouched.
#[test]
fn a_stale_model_handle_stays_an_error_after_100k_unloads() {
    let f = up();
    let n = f.nrt();
    let stale = load(&n, 0);
    n.models().unload(stale).unwrap();
    for _ in 0..100_000 {
        let h = load(&n, 0);
        assert_ne!(h, stale);
        n.models().unload(h).unwrap();
    }
    let live = load(&n, 0);
    let info = n.models().info(live).unwrap();
    model_refused(&n, stale, HandleFault::Stale);
    assert_eq!(
        n.models().info(live).unwrap(),
        info,
        "the live model changed"
    );
    // Unloaded twice: the second one is refused the same way.
    n.models().unload(live).unwrap();
    model_refused(&n, live, HandleFault::Stale);
}

/// A set handle destroyed 10⁵ creates and destroys ago is refused; the set in its slot now
/// keeps its tensors.
#[test]
fn a_stale_set_handle_stays_an_error_after_100k_destroys() {
    let f = up();
    let n = f.nrt();
    let m = load(&n, 0);
    let stale = n.sets().create().unwrap();
    n.sets().destroy(stale).unwrap();
    let (idx, _, _) = stale.to_parts();
    // Fill the arena and empty it again, over and over: every slot, the stale one's
    // included, is reused once per round.
    let (mut destroys, mut reused) = (0u32, 0u32);
    let mut all = Vec::new();
    while destroys < 100_000 {
        while let Ok(s) = n.sets().create() {
            assert_ne!(
                s, stale,
                "after {destroys} destroys: the stale handle came back"
            );
            reused += (s.to_parts().0 == idx) as u32;
            all.push(s);
        }
        for s in all.drain(..) {
            n.sets().destroy(s).unwrap();
            destroys += 1;
        }
    }
    assert!(reused > 0, "the stale handle's slot was never reused");
    let t = n.tensors().allocate_empty(None).unwrap();
    let live = n.sets().create().unwrap();
    n.sets().add(live, "x", t).unwrap();
    set_refused(&n, stale, m, HandleFault::Stale);
    assert_eq!(n.sets().get(live, "x"), Ok(Some(t)));
    assert_eq!(n.sets().len(live), Ok(1));
    n.sets().destroy(live).unwrap();
    set_refused(&n, live, m, HandleFault::Stale);
}

/// Bits no handle ever had: a logical core the runtime does not own, the reserved id 0, an
/// even set generation, a set index past the arena. A live model's id on another core names
/// nothing there.
#[test]
fn forged_model_and_set_handles_are_refused() {
    let f = up();
    let n = f.nrt();
    let live = load(&n, 0);
    let (vnc, id, epoch) = live.to_parts();
    model_refused(
        &n,
        ModelHandle::from_parts(999, id, epoch),
        HandleFault::Forged,
    );
    model_refused(
        &n,
        ModelHandle::from_parts(vnc, 0, epoch),
        HandleFault::Forged,
    );
    model_refused(
        &n,
        ModelHandle::from_parts(vnc + 1, id, epoch),
        HandleFault::Stale,
    );
    model_refused(
        &n,
        ModelHandle::from_parts(vnc, id.wrapping_add(12345), epoch),
        HandleFault::Stale,
    );
    let s = n.sets().create().unwrap();
    let (i, g, e) = s.to_parts();
    set_refused(
        &n,
        SetHandle::from_parts(i, g + 1, e),
        live,
        HandleFault::Forged,
    );
    set_refused(
        &n,
        SetHandle::from_parts(u32::MAX, g, e),
        live,
        HandleFault::Forged,
    );
    set_refused(
        &n,
        SetHandle::from_parts(i, g + 2, e),
        live,
        HandleFault::Stale,
    );
    assert_eq!(n.sets().len(s), Ok(0));
    assert!(n.models().info(live).is_ok());
}

/// Handles of another runtime, of this one after close, and after close + init (also with a
/// new state block, often at the old one's address) are refused.
#[test]
fn foreign_closed_and_reinitialised_model_and_set_handles_are_refused() {
    let (a, b) = (up(), up());
    let (na, nb) = (a.nrt(), b.nrt());
    let (ma, sa) = (load(&na, 0), na.sets().create().unwrap());
    let mb = load(&nb, 0);
    model_refused(&nb, ma, HandleFault::Foreign);
    set_refused(&nb, sa, mb, HandleFault::Foreign);
    na.close().unwrap();
    assert_eq!(na.models().unload(ma), Err(Error::Closed));
    assert_eq!(na.sets().destroy(sa), Err(Error::Closed));
    na.init(&InitOptions::default()).unwrap();
    let ma2 = load(&na, 0);
    model_refused(&na, ma, HandleFault::Foreign);
    set_refused(&na, sa, ma2, HandleFault::Foreign);
    assert!(na.models().info(ma2).is_ok());
    let c = Fixture::new(SimConfig::scaled_down(Preset::Trn2, 1));
    let sim: &nrt_core::sim::SimDevice = &c.sim;
    let (old_m, old_s) = {
        let st = CoreState::new_boxed();
        let n = Nrt::new(&st, sim);
        n.init(&InitOptions::default()).unwrap();
        let hs = (load(&n, 0), n.sets().create().unwrap());
        n.close().unwrap();
        hs
    };
    let st = CoreState::new_boxed();
    let n = Nrt::new(&st, sim);
    n.init(&InitOptions::default()).unwrap();
    let m = load(&n, 0);
    model_refused(&n, old_m, HandleFault::Foreign);
    set_refused(&n, old_s, m, HandleFault::Foreign);
}

/// A model unloaded on one thread while others use its handle: each call completes on the
/// model or is refused as stale; of two racing unloads exactly one wins; the ledger ends at
/// what the other models hold.
#[test]
fn a_model_unloaded_while_other_threads_use_it() {
    let f = up();
    let n = f.nrt();
    let keep = load(&n, 1);
    let kept = n.models().info(keep).unwrap();
    let t = [0u8; 16];
    let (ti, to) = (
        n.tensors()
            .allocate(Placement::Device, LogicalCore::new(0).into(), 16, None)
            .unwrap(),
        n.tensors()
            .allocate(Placement::Device, LogicalCore::new(0).into(), 16, None)
            .unwrap(),
    );
    n.tensors().write(ti, &t, 0).unwrap();
    let (si, so) = (n.sets().create().unwrap(), n.sets().create().unwrap());
    n.sets().add(si, "in", ti).unwrap();
    n.sets().add(so, "out", to).unwrap();
    let base = n.ledger().snapshot(0);
    for round in 0..200 {
        let h = load(&n, 0);
        let done = AtomicBool::new(false);
        let wins = std::thread::scope(|s| {
            let user = s.spawn(|| {
                while !done.load(SeqCst) {
                    for r in [
                        n.models()
                            .info(h)
                            .map(|i| assert_eq!(i.handle, h.h_model().id)),
                        n.tensors().execute(h, si, so),
                        n.models().core(h).map(|_| ()),
                    ] {
                        if let Err(e) = r {
                            assert_eq!(
                                fault(e),
                                Some((HandleKind::Model, HandleFault::Stale)),
                                "round {round}"
                            );
                        }
                    }
                }
            });
            let unloads: Vec<_> = (0..2).map(|_| s.spawn(|| n.models().unload(h))).collect();
            let wins = unloads
                .into_iter()
                .map(|u| u.join().unwrap())
                .filter(|r| r.is_ok())
                .count();
            done.store(true, SeqCst);
            user.join().unwrap();
            wins
        });
        assert_eq!(wins, 1, "round {round}: exactly one unload wins");
    }
    assert_eq!(
        n.ledger().snapshot(0),
        base,
        "every unloaded model's bytes went back"
    );
    assert_eq!(n.models().info(keep).unwrap(), kept);
}

/// A set destroyed on one thread while others add to it and execute with it: each call
/// completes or is refused as stale, exactly one of two racing destroys wins, and the set
/// arena ends empty.
#[test]
fn a_set_destroyed_while_other_threads_use_it() {
    let f = up();
    let n = f.nrt();
    let m = load(&n, 0);
    let (ti, to) = (
        n.tensors()
            .allocate(Placement::Device, LogicalCore::new(0).into(), 16, None)
            .unwrap(),
        n.tensors()
            .allocate(Placement::Device, LogicalCore::new(0).into(), 16, None)
            .unwrap(),
    );
    let sets_live = || arena_live(&n, "tensor_set");
    for round in 0..200 {
        let s = n.sets().create().unwrap();
        n.sets().add(s, "in", ti).unwrap();
        let done = AtomicBool::new(false);
        let wins = std::thread::scope(|sc| {
            let user = sc.spawn(|| {
                while !done.load(SeqCst) {
                    for r in [
                        n.sets().add(s, "out", to),
                        n.tensors().execute(m, s, s),
                        n.sets().len(s).map(|_| ()),
                    ] {
                        if let Err(e) = r {
                            assert_eq!(
                                fault(e),
                                Some((HandleKind::Set, HandleFault::Stale)),
                                "round {round}"
                            );
                        }
                    }
                }
            });
            let destroys: Vec<_> = (0..2).map(|_| sc.spawn(|| n.sets().destroy(s))).collect();
            let wins = destroys
                .into_iter()
                .map(|d| d.join().unwrap())
                .filter(|r| r.is_ok())
                .count();
            done.store(true, SeqCst);
            user.join().unwrap();
            wins
        });
        assert_eq!(wins, 1, "round {round}: exactly one destroy wins");
        assert_eq!(sets_live(), 0);
    }
}

/// A full set arena, and a full arena of set entries, are their own errors naming the setting
/// that raises them; neither changes anything, and a replaced name takes no room. A set grows
/// past any fixed size: it holds as many tensors as the entry arena has room for.
#[test]
fn full_set_arena_and_full_sets_are_errors() {
    let f = up();
    let n = f.nrt();
    let mut all = Vec::new();
    let err = loop {
        match n.sets().create() {
            Ok(s) => all.push(s),
            Err(e) => break e,
        }
    };
    assert_eq!(all.len(), nrt_core::Capacity::DEFAULT.sets as usize);
    assert!(
        matches!(err, Error::ArenaFull(a) if a.setting.contains("NRT_DMEM_MAX_SETS")),
        "{err}"
    );
    assert!(err.to_string().contains("NRT_DMEM_MAX_SETS"), "{err}");
    n.sets().destroy(all[7]).unwrap();
    all[7] = n.sets().create().unwrap();
    let s = all[0];
    let ts: Vec<_> = (0..3)
        .map(|_| n.tensors().allocate_empty(None).unwrap())
        .collect();
    let room = nrt_core::Capacity::DEFAULT.set_chunks as usize * SET_CHUNK;
    for i in 0..room {
        n.sets().add(s, &format!("t{i}"), ts[i % 2]).unwrap();
    }
    assert_eq!(n.sets().len(s), Ok(room));
    n.sets().add(s, "t3", ts[2]).unwrap();
    assert_eq!(n.sets().get(s, "t3"), Ok(Some(ts[2])));
    assert_eq!(
        n.sets().get(s, &format!("t{}", room - 1)),
        Ok(Some(ts[(room - 1) % 2]))
    );
    let before_full = state(&n);
    let e = n.sets().add(all[1], "one too many", ts[0]).unwrap_err();
    assert!(
        matches!(e, Error::ArenaFull(a) if a.setting.contains("set_chunks")),
        "{e}"
    );
    assert_eq!(e.status(), nrt_core::abi::NRT_STATUS::NRT_RESOURCE);
    assert_eq!(state(&n), before_full);
    assert_eq!(n.sets().len(all[1]), Ok(0));
    assert!(matches!(
        n.sets().add(s, &"n".repeat(256), ts[0]),
        Err(Error::InvalidArgument(_))
    ));
    n.tensors().free(ts[1]).unwrap();
    let freed = ts[1];
    let before_freed = state(&n);
    assert_eq!(
        fault(n.sets().add(all[2], "x", freed).unwrap_err()),
        Some((HandleKind::Tensor, HandleFault::Stale)),
        "a freed tensor is refused when added"
    );
    assert_eq!(state(&n), before_freed);
    assert_eq!(n.sets().len(s), Ok(room));
    // Destroying the set gives its entries back: another set can take them.
    n.sets().destroy(s).unwrap();
    assert_eq!(arena_live(&n, "tensor set chunk"), 0);
    n.sets().add(all[1], &"n".repeat(255), ts[0]).unwrap();
    assert_eq!(n.sets().get(all[1], &"n".repeat(255)), Ok(Some(ts[0])));
    for s in &all[1..] {
        n.sets().destroy(*s).unwrap();
    }
}

fn arena_live(n: &Nrt<'_>, name: &str) -> usize {
    n.state()
        .arena_stats()
        .iter()
        .find(|(a, _)| *a == name)
        .map(|(_, s)| s.live)
        .unwrap_or_else(|| panic!("no arena {name}"))
}

/// `close` frees every set (nothing leaks); the set arena is empty after it.
#[test]
fn close_frees_every_set() {
    let f = up();
    let n = f.nrt();
    for _ in 0..10 {
        n.sets().create().unwrap();
    }
    assert_eq!(arena_live(&n, "tensor_set"), 10);
    n.close().unwrap();
    assert_eq!(arena_live(&n, "tensor_set"), 0);
    assert_eq!(arena_live(&n, "tensor set chunk"), 0);
}
