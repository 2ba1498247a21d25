//! Generation-checked handles (bad input): a stale, forged or foreign handle
//! is an error at any age, frees nothing of anyone else's, and a handle used on one thread
//! while another frees it gets a completed operation or the stale error, never another
//! object's bytes.
mod common;

use nrt_core::ledger::UsageSel;
use nrt_core::PhysicalCore;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};

use common::*;
use nrt_core::dmem::AllocArgs;
use nrt_core::sim::{Preset, SimConfig};
use nrt_core::tensor::Placement;
use nrt_core::LogicalCore;
use nrt_core::{
    CoreState, DmemHandle, Error, HandleError, HandleFault, HandleKind, InitOptions, Nrt,
    TensorHandle,
};
use proptest::prelude::*;

const DEVICE: Placement = Placement::Device;

fn fault(e: Error) -> Option<HandleFault> {
    match e {
        Error::InvalidHandle(HandleError { fault, .. }) => Some(fault),
        _ => None,
    }
}

/// A device tensor of `len` bytes filled with `byte`.
fn filled(n: &Nrt<'_>, len: usize, byte: u8) -> TensorHandle {
    let t = n
        .tensors()
        .allocate(DEVICE, LogicalCore::new(0).into(), len as u64, None)
        .unwrap();
    n.tensors().write(t, &vec![byte; len], 0).unwrap();
    t
}

fn bytes(n: &Nrt<'_>, t: TensorHandle, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    n.tensors().read(t, &mut b, 0).unwrap();
    b
}

#[test]
fn handles_are_plain_shareable_values() {
    fn check<T: Copy + Send + Sync + Eq + std::hash::Hash + std::fmt::Debug>() {}
    check::<DmemHandle>();
    check::<TensorHandle>();
    let h = TensorHandle::from_parts(3, 5, 7);
    assert_eq!(TensorHandle::from_bits(h.to_bits()), h);
    assert_eq!(h.to_parts(), (3, 5, 7));
}

/// Every call through a freed tensor's handle is refused after 10⁵ other frees (its slot
/// reused many times over), and the tensor now in its slot is untouched.
#[test]
fn a_stale_tensor_handle_stays_an_error_after_100k_frees() {
    let f = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let n = f.nrt();
    let stale = filled(&n, 64, 0xaa);
    n.tensors().free(stale).unwrap();
    let (idx, _, _) = stale.to_parts();
    // Fill the arena and empty it again, over and over: every slot, the stale one's
    // included, is reused once per round.
    let (mut frees, mut reused) = (0u32, 0u32);
    let mut all = Vec::with_capacity(nrt_core::Capacity::DEFAULT.tensors as usize);
    while frees < 100_000 {
        while let Ok(t) = n.tensors().allocate_empty(None) {
            assert_ne!(
                t, stale,
                "after {frees} frees: the stale handle was issued again"
            );
            reused += (t.to_parts().0 == idx) as u32;
            all.push(t);
        }
        for t in all.drain(..) {
            n.tensors().free(t).unwrap();
            frees += 1;
        }
    }
    assert!(reused > 5, "the slot was reused ({reused} times)");
    // A new tensor in the very slot the stale handle names.
    while let Ok(t) = n
        .tensors()
        .allocate(DEVICE, LogicalCore::new(0).into(), 64, None)
    {
        all.push(t);
    }
    let at = all.iter().position(|t| t.to_parts().0 == idx).unwrap();
    let victim = all.swap_remove(at);
    for t in all.drain(..) {
        n.tensors().free(t).unwrap();
    }
    n.tensors().write(victim, &[0x5c; 64], 0).unwrap();
    let stale_err = Err(stale_of(HandleKind::Tensor));
    assert_eq!(n.tensors().write(stale, &[0xff; 64], 0), stale_err);
    assert_eq!(n.tensors().memset(stale, 0, 0xee, 64), stale_err);
    let mut b = [0u8; 64];
    assert_eq!(n.tensors().read(stale, &mut b, 0), stale_err);
    assert_eq!(n.tensors().size(stale), Err(stale_of(HandleKind::Tensor)));
    assert_eq!(n.tensors().copy(victim, 0, stale, 0, 8), stale_err);
    assert!(n.tensors().allocate_slice(stale, 0, 8, None).is_err());
    assert_eq!(
        n.tensors().free(stale),
        stale_err,
        "a double free at any age"
    );
    assert_eq!(
        bytes(&n, victim, 64),
        vec![0x5c; 64],
        "the slot's new tensor"
    );
    n.tensors().free(victim).unwrap();
    n.close().unwrap();
    assert_eq!(n.driver_pool_bytes_in_use().unwrap(), 0);
}

fn stale_of(kind: HandleKind) -> Error {
    stale(kind)
}

/// The same for dmems, whose slots are reused most-recent first: a handle freed 10⁵ frees ago
/// frees nothing and reads nothing; the ledger still books the slot's new allocation.
#[test]
fn a_stale_dmem_handle_stays_an_error_after_100k_frees() {
    let f = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let n = f.nrt();
    let al = core0_allocator(&n);
    let args = AllocArgs::device(4096, 0, TENSOR, "x");
    let stale = n.dmem().alloc(al, &args, None).unwrap();
    n.dmem().free(stale).unwrap();
    assert_eq!(
        n.dmem().free(stale),
        Err(stale_of(HandleKind::Dmem)),
        "at once"
    );
    let idx = stale.to_parts().0;
    let mut reused = 0;
    for _ in 0..100_000 {
        let m = n.dmem().alloc(al, &args, None).unwrap();
        reused += (m.to_parts().0 == idx) as u32;
        n.dmem().free(m).unwrap();
    }
    assert!(reused > 100, "the slot was reused ({reused} times)");
    let theirs = loop {
        let m = n
            .dmem()
            .alloc(al, &AllocArgs::device(8192, 0, TENSOR, "theirs"), None)
            .unwrap();
        if m.to_parts().0 == idx {
            break m;
        }
        n.dmem().free(m).unwrap();
    };
    let before = snapshot(&n);
    assert_eq!(n.dmem().free(stale), Err(stale_of(HandleKind::Dmem)));
    assert_eq!(
        n.dmem().acquire_reference(stale),
        Err(stale_of(HandleKind::Dmem))
    );
    assert!(n.dmem().info(stale).is_err());
    assert!(!n.dmem().is_live(stale));
    assert_eq!(snapshot(&n), before, "nothing freed");
    assert_eq!(n.dmem().info(theirs).unwrap().size, 8192);
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
        8192
    );
    n.dmem().free(theirs).unwrap();
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
        0
    );
}

/// Random bits are never a live object: every call refuses them and changes nothing.
#[test]
fn forged_handles_never_resolve() {
    let f = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let n = f.nrt();
    let al = core0_allocator(&n);
    let live_t: Vec<TensorHandle> = (0..32).map(|i| filled(&n, 16, i as u8)).collect();
    let live_d: Vec<DmemHandle> = (0..32)
        .map(|_| {
            n.dmem()
                .alloc(al, &AllocArgs::device(4096, 0, TENSOR, "d"), None)
                .unwrap()
        })
        .collect();
    let epoch = live_t[0].to_parts().2;
    let before = snapshot(&n);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..20_000 {
        // Half fully random, half plausible: a real index and this runtime's epoch.
        let (index, generation, ep) = if i % 2 == 0 {
            (next() as u32, next() as u32, next() as u32)
        } else {
            ((next() % 64) as u32, next() as u32, epoch)
        };
        let t = TensorHandle::from_parts(index, generation, ep);
        let d = DmemHandle::from_parts(index, generation, ep);
        if live_t.contains(&t) || live_d.contains(&d) {
            continue; // the bits of a real handle are that handle
        }
        assert!(fault(n.tensors().write(t, &[0; 16], 0).unwrap_err()).is_some());
        assert!(fault(n.tensors().free(t).unwrap_err()).is_some());
        assert!(fault(n.dmem().free(d).unwrap_err()).is_some());
        assert!(fault(n.dmem().acquire_reference(d).unwrap_err()).is_some());
    }
    assert_eq!(
        fault(
            n.tensors()
                .size(TensorHandle::from_parts(u32::MAX, 1, epoch))
                .unwrap_err()
        ),
        Some(HandleFault::Forged),
        "an index past the arena"
    );
    assert_eq!(
        fault(
            n.dmem()
                .free(DmemHandle::from_parts(0, 2, epoch))
                .unwrap_err()
        ),
        Some(HandleFault::Forged),
        "an even (free) generation"
    );
    assert_eq!(snapshot(&n), before, "nothing freed");
    for (i, t) in live_t.iter().enumerate() {
        assert_eq!(bytes(&n, *t, 16), vec![i as u8; 16]);
    }
}

/// A handle of another runtime instance, of this runtime after close, and after close + init
/// (also with a new state block at the address of the old one) is refused.
#[test]
fn foreign_closed_and_reinitialised_handles_are_refused() {
    let a = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let b = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let (na, nb) = (a.nrt(), b.nrt());
    let ta = filled(&na, 32, 1);
    let tb = filled(&nb, 32, 2);
    let foreign = Some(HandleFault::Foreign);
    assert_eq!(fault(nb.tensors().free(ta).unwrap_err()), foreign);
    assert_eq!(fault(nb.tensors().size(ta).unwrap_err()), foreign);
    let al = core0_allocator(&na);
    let da = na
        .dmem()
        .alloc(al, &AllocArgs::device(4096, 0, TENSOR, "a"), None)
        .unwrap();
    assert_eq!(fault(nb.dmem().free(da).unwrap_err()), foreign);
    assert_eq!(bytes(&nb, tb, 32), vec![2; 32]);
    // After close: the gate refuses every call.
    na.close().unwrap();
    assert_eq!(na.tensors().size(ta), Err(Error::Closed));
    assert_eq!(na.dmem().free(da), Err(Error::Closed));
    // After close + init: the old handle names nothing of the new runtime.
    na.init(&InitOptions::default()).unwrap();
    let ta2 = filled(&na, 32, 3);
    assert_eq!(fault(na.tensors().size(ta).unwrap_err()), foreign);
    assert_eq!(fault(na.tensors().free(ta).unwrap_err()), foreign);
    assert_eq!(fault(na.dmem().free(da).unwrap_err()), foreign);
    assert_eq!(bytes(&na, ta2, 32), vec![3; 32]);
    // A state block freed and another allocated (often at the same address).
    let c = Fixture::new(SimConfig::scaled_down(Preset::Trn2, 1));
    let sim: &nrt_core::sim::SimDevice = &c.sim;
    let old = {
        let st = CoreState::new_boxed();
        let n = Nrt::new(&st, sim);
        n.init(&InitOptions::default()).unwrap();
        let t = filled(&n, 16, 4);
        n.close().unwrap();
        t
    };
    let st = CoreState::new_boxed();
    let n = Nrt::new(&st, sim);
    n.init(&InitOptions::default()).unwrap();
    let t = filled(&n, 16, 5);
    assert_ne!(t, old);
    assert_eq!(fault(n.tensors().size(old).unwrap_err()), foreign);
    assert_eq!(bytes(&n, t, 16), vec![5; 16]);
}

/// A tensor freed on one thread while others read and write through its handle: each call
/// either completes (a read sees exactly the tensor's own bytes) or is refused as stale; the
/// slot's next tensors are never touched. Many rounds, so frees land at every point of the
/// calls.
#[test]
fn a_handle_freed_while_other_threads_use_it() {
    const LEN: usize = 4096;
    let f = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let n = f.nrt();
    // Use up the fresh slots, so freed slots are reused within a few rounds.
    let fill: Vec<_> = (0..8192)
        .map_while(|_| n.tensors().allocate_empty(None).ok())
        .collect();
    for t in fill {
        n.tensors().free(t).unwrap();
    }
    let rounds = 1000;
    let (mut ok_reads, mut refused) = (0u64, 0u64);
    for round in 0..rounds {
        let tag = (round % 250) as u8 + 1;
        let t = filled(&n, LEN, tag);
        let ready = AtomicU32::new(0);
        let (r, w) = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut b = vec![0u8; LEN];
                let (mut ok, mut no) = (0u64, 0u64);
                ready.fetch_add(1, SeqCst);
                loop {
                    match n.tensors().read(t, &mut b, 0) {
                        Ok(()) => {
                            assert!(b.iter().all(|x| *x == tag), "round {round}: foreign bytes");
                            ok += 1;
                        }
                        Err(e) => {
                            assert_eq!(e, stale(HandleKind::Tensor), "round {round}");
                            no += 1;
                            break;
                        }
                    }
                }
                (ok, no)
            });
            let writer = s.spawn(|| {
                ready.fetch_add(1, SeqCst);
                loop {
                    match n.tensors().write(t, &[tag; 64], 0) {
                        Ok(()) => {}
                        Err(e) => {
                            assert_eq!(e, stale(HandleKind::Tensor), "round {round}");
                            break;
                        }
                    }
                }
            });
            // Both threads are calling in; free at a different point of their calls each
            // round.
            while ready.load(SeqCst) < 2 {
                std::hint::spin_loop();
            }
            for _ in 0..(round % 64) * 16 {
                std::hint::spin_loop();
            }
            n.tensors().free(t).unwrap();
            // The slot may now hold another tensor: the old handle must not reach it.
            let next = filled(&n, LEN, 0);
            let rw = reader.join().unwrap();
            writer.join().unwrap();
            assert_eq!(bytes(&n, next, LEN), vec![0; LEN], "round {round}");
            n.tensors().free(next).unwrap();
            (rw.0, rw.1)
        });
        ok_reads += r;
        refused += w;
    }
    assert_eq!(refused, rounds, "every reader ended on the stale error");
    assert!(ok_reads > 0);
    n.close().unwrap();
    assert_eq!(n.driver_pool_bytes_in_use().unwrap(), 0);
}

/// The same race on dmems, with a second free racing the first (exactly one wins) and the
/// slot reused at once (dmem slots are reused most-recent first).
#[test]
fn a_dmem_freed_twice_while_another_thread_uses_it() {
    let f = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let n = f.nrt();
    let al = core0_allocator(&n);
    for round in 0..1000u64 {
        let size = 4096 * (1 + round % 4);
        let m = n
            .dmem()
            .alloc(al, &AllocArgs::device(size, 0, TENSOR, "r"), None)
            .unwrap();
        let go = AtomicBool::new(false);
        let wins = std::thread::scope(|s| {
            let user = s.spawn(|| {
                while !go.load(SeqCst) {
                    std::hint::spin_loop();
                }
                loop {
                    match n.dmem().info(m) {
                        Ok(i) => assert_eq!(i.size, size, "round {round}"),
                        Err(e) => {
                            assert_eq!(e, stale(HandleKind::Dmem));
                            break;
                        }
                    }
                }
            });
            let second = s.spawn(|| {
                while !go.load(SeqCst) {
                    std::hint::spin_loop();
                }
                n.dmem().free(m).is_ok() as u32
            });
            go.store(true, SeqCst);
            let first = n.dmem().free(m).is_ok() as u32;
            let reuse = n
                .dmem()
                .alloc(al, &AllocArgs::device(1 << 20, 0, TENSOR, "n"), None)
                .unwrap();
            let w = first + second.join().unwrap();
            user.join().unwrap();
            assert_eq!(n.dmem().info(reuse).unwrap().size, 1 << 20, "round {round}");
            n.dmem().free(reuse).unwrap();
            w
        });
        assert_eq!(wins, 1, "round {round}: exactly one free wins");
        assert_eq!(
            n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
            0,
            "round {round}"
        );
    }
}

/// A full arena is its own error; handles issued before stay good and a free makes room.
#[test]
fn a_full_tensor_arena_is_an_error() {
    let f = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let n = f.nrt();
    let mut all = Vec::new();
    let err = loop {
        match n.tensors().allocate_empty(None) {
            Ok(t) => all.push(t),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, Error::ArenaFull(a) if a.arena == "nrt_tensor_t"),
        "{err}"
    );
    assert_eq!(all.len(), nrt_core::Capacity::DEFAULT.tensors as usize);
    assert_eq!(n.tensors().size(all[17]), Ok(0));
    n.tensors().free(all[17]).unwrap();
    let t = n.tensors().allocate_empty(None).unwrap();
    assert_ne!(t, all[17]);
    assert!(n.tensors().size(all[17]).is_err());
    all[17] = t;
    for t in all {
        n.tensors().free(t).unwrap();
    }
}

#[derive(Clone, Debug)]
enum Op {
    Alloc(u8),
    Free(usize),
    Write(usize, u8),
    Read(usize),
    UseStale(usize),
    Forge(u32, u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => any::<u8>().prop_map(Op::Alloc),
        2 => any::<usize>().prop_map(Op::Free),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Op::Write(i, b)),
        2 => any::<usize>().prop_map(Op::Read),
        1 => any::<usize>().prop_map(Op::UseStale),
        1 => (0u32..64, any::<u32>()).prop_map(|(i, g)| Op::Forge(i, g)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// Against a reference model (a map of live handles to their bytes): live handles read
    /// back what was written, freed and forged handles are always refused, and nothing
    /// they do changes a live tensor.
    #[test]
    fn handles_match_a_reference_model(ops in proptest::collection::vec(op(), 1..200)) {
        const LEN: usize = 32;
        let f = Fixture::up(SimConfig::scaled_down(Preset::Trn2, 1), InitOptions::default());
        let n = f.nrt();
        let mut live: HashMap<TensorHandle, u8> = HashMap::new();
        let mut order: Vec<TensorHandle> = Vec::new();
        let mut dead: Vec<TensorHandle> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc(b) => {
                    let t = filled(&n, LEN, b);
                    prop_assert!(!live.contains_key(&t) && !dead.contains(&t), "reissued {t:?}");
                    live.insert(t, b);
                    order.push(t);
                }
                Op::Free(i) if !order.is_empty() => {
                    let t = order.swap_remove(i % order.len());
                    live.remove(&t);
                    n.tensors().free(t).unwrap();
                    dead.push(t);
                }
                Op::Write(i, b) if !order.is_empty() => {
                    let t = order[i % order.len()];
                    n.tensors().write(t, &[b; LEN], 0).unwrap();
                    live.insert(t, b);
                }
                Op::Read(i) if !order.is_empty() => {
                    let t = order[i % order.len()];
                    prop_assert_eq!(bytes(&n, t, LEN), vec![live[&t]; LEN]);
                }
                Op::UseStale(i) if !dead.is_empty() => {
                    let t = dead[i % dead.len()];
                    prop_assert_eq!(n.tensors().write(t, &[0xee; LEN], 0), Err(stale(HandleKind::Tensor)));
                    prop_assert_eq!(n.tensors().free(t), Err(stale(HandleKind::Tensor)));
                }
                Op::Forge(i, g) => {
                    let epoch = order.first().or(dead.first()).map_or(1, |t| t.to_parts().2);
                    let t = TensorHandle::from_parts(i, g, epoch);
                    if !live.contains_key(&t) {
                        prop_assert!(n.tensors().write(t, &[0xdd; LEN], 0).is_err());
                        prop_assert!(n.tensors().size(t).is_err());
                    }
                }
                _ => {}
            }
        }
        for (t, b) in &live {
            prop_assert_eq!(bytes(&n, *t, LEN), vec![*b; LEN]);
        }
        prop_assert_eq!(
            n.state().arena_stats().iter().find(|(a, _)| *a == "nrt_tensor_t").unwrap().1.live,
            live.len()
        );
        n.close().unwrap();
        prop_assert_eq!(n.driver_pool_bytes_in_use().unwrap(), 0);
    }
}
