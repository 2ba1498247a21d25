//! loom models of the core's concurrency protocols, run with
//! `RUSTFLAGS="--cfg loom" cargo test -p nrt-core --test loom --release` (`cargo xtask loom`).
//! They drive the very functions the runtime uses (`mint_handle`, `drain_with`, `stage_once`,
//! `release_one`, `gate_enter` / `gate_exit` / `gate_close`)
//! over loom's atomics and mutex.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use nrt_core::dmem::{release_one, DmemRefCount};
use nrt_core::model::{drain_with, mint_handle};
use nrt_core::sync::{gate_close, gate_enter, gate_exit, gate_open, GATE_CLOSED};
use nrt_core::ulib::stage_once;

/// Handles from concurrent mints are distinct and never 0, also across the wrap.
#[test]
fn handle_counter() {
    loom::model(|| {
        let c = Arc::new(AtomicU32::new(u32::MAX - 1));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let c = c.clone();
                thread::spawn(move || mint_handle(&*c))
            })
            .collect();
        let mut hs: Vec<u32> = ts.into_iter().map(|t| t.join().unwrap()).collect();
        hs.push(mint_handle(&*c));
        assert!(hs.iter().all(|h| *h != 0));
        hs.sort();
        hs.dedup();
        assert_eq!(hs.len(), 3);
    });
}

/// remove_model's protocol (spec §4.4–§4.5): a user looks the model up and takes a reference
/// under the db lock; the unloader unlinks under the lock, then drains. The model is never
/// freed while a user holds it, and a user never acquires it after the unlink.
#[test]
fn remove_then_drain() {
    loom::model(|| {
        let db = Arc::new(Mutex::new(true)); // "present in model_db"
        let refs = Arc::new(AtomicU64::new(0));
        let freed = Arc::new(AtomicBool::new(false));
        let user = {
            let (db, refs, freed) = (db.clone(), refs.clone(), freed.clone());
            thread::spawn(move || {
                let got = {
                    let present = db.lock().unwrap();
                    if *present {
                        refs.fetch_add(1, Ordering::AcqRel);
                    }
                    *present
                };
                if got {
                    assert!(!freed.load(Ordering::Acquire), "use after free");
                    refs.fetch_sub(1, Ordering::AcqRel);
                }
            })
        };
        {
            *db.lock().unwrap() = false; // ht_remove first
        }
        drain_with(&*refs, |_| thread::yield_now());
        freed.store(true, Ordering::Release); // model_free
        user.join().unwrap();
    });
}

/// ucode_stage_libs's single-library path (spec §6): however many first loads race, the
/// ext-isa library is staged exactly once and everyone gets the cached copy.
#[test]
fn ext_isa_staged_once() {
    loom::model(|| {
        let slot = Arc::new(Mutex::new(None::<u32>));
        let staged = Arc::new(AtomicUsize::new(0));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let (slot, staged) = (slot.clone(), staged.clone());
                thread::spawn(move || {
                    let g = slot.lock().unwrap();
                    let cell = std::cell::RefCell::new(g);
                    let (v, _) = stage_once(
                        || (),
                        || **cell.borrow(),
                        || {
                            staged.fetch_add(1, Ordering::SeqCst);
                            Ok::<u32, ()>(42)
                        },
                        |v| **cell.borrow_mut() = Some(v),
                    )
                    .unwrap();
                    v
                })
            })
            .collect();
        for t in ts {
            assert_eq!(t.join().unwrap(), 42);
        }
        assert_eq!(staged.load(Ordering::SeqCst), 1);
    });
}

/// dmem_free's reference drop (spec §3.2) with its store-only fast path for a count of 1:
/// however the holders' releases interleave — including one holder handing a freshly acquired
/// reference to another thread — exactly one of them sees the last reference go.
#[test]
fn dmem_release_elects_one_last_holder() {
    loom::model(|| {
        // Thread 0 holds the only reference, takes a second one (dmem_acquire_reference)
        // and hands it to thread 1; both then release.
        let rc = Arc::new(AtomicU64::new(1));
        rc.fetch_add(1, Ordering::AcqRel);
        let last = Arc::new(AtomicUsize::new(0));
        let t = {
            let (rc, last) = (rc.clone(), last.clone());
            thread::spawn(move || {
                if release_one(&*rc) {
                    last.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        if release_one(&*rc) {
            last.fetch_add(1, Ordering::SeqCst);
        }
        t.join().unwrap();
        assert_eq!(last.load(Ordering::SeqCst), 1, "exactly one last release");
        assert_eq!(rc.get(), 0);
    });
}

/// A public call racing `close`: it counts itself in, and when it got in it must not meet a
/// torn-down runtime. Returns whether it got in.
fn racing_call(gate: &Arc<AtomicU32>, torn_down: &Arc<AtomicBool>) -> thread::JoinHandle<bool> {
    let (gate, torn_down) = (gate.clone(), torn_down.clone());
    thread::spawn(move || {
        let got_in = gate_enter(&*gate);
        if got_in {
            assert!(
                !torn_down.load(Ordering::Acquire),
                "call ran into a teardown"
            );
            gate_exit(&*gate);
        }
        got_in
    })
}

/// `close` as the runtime does it: shut the gate, wait for the calls counted in, tear down.
fn close(gate: &AtomicU32, torn_down: &AtomicBool) {
    gate_close(gate, |_| thread::yield_now());
    torn_down.store(true, Ordering::Release);
}

/// The in-flight call gate (spec §7.2, §12): `close` shuts the gate and waits for the calls
/// counted in; a call counts itself in unless the gate is shut. Under every interleaving a
/// call that got in ends before the teardown that follows `gate_close`, and a call that comes
/// later does not get in.
#[test]
fn close_never_tears_down_under_a_call() {
    loom::model(|| {
        let gate = Arc::new(AtomicU32::new(0));
        let torn_down = Arc::new(AtomicBool::new(false));
        let call = racing_call(&gate, &torn_down);
        close(&gate, &torn_down);
        call.join().unwrap();
        assert!(!gate_enter(&*gate), "a call after close gets in");
        assert_eq!(gate.load(Ordering::Acquire), GATE_CLOSED);
    });
}

/// `init` after `close` reopens the gate (`gate_open`), and a later `close` shuts it again: a
/// call racing all three either gets in while the runtime stands (and ends before the
/// teardown that follows) or is turned away, whichever runtime it meets.
#[test]
fn a_reopened_gate_closes_again() {
    loom::model(|| {
        let gate = Arc::new(AtomicU32::new(0));
        let torn_down = Arc::new(AtomicBool::new(false));
        let call = racing_call(&gate, &torn_down);
        close(&gate, &torn_down);
        // init: the runtime stands again before the gate opens.
        torn_down.store(false, Ordering::Release);
        gate_open(&*gate);
        close(&gate, &torn_down);
        call.join().unwrap();
        assert_eq!(gate.load(Ordering::Acquire), GATE_CLOSED);
    });
}
