//! loom models of the core's concurrency protocols, run with
//! `RUSTFLAGS="--cfg loom" cargo test -p nrt-core --test loom --release` (`cargo xtask loom`).
//! They drive the very functions the runtime uses (`mint_handle`, `drain_with`, `stage_once`,
//! the handle pin protocol `publish` / `pin` / `unpin` / `release_sole_pinned` /
//! `drop_owner` / `add_owner` / `wait_drained` / `retire`, the runtime's `ShardedGate` on two
//! shards, the sharded arena's `ShardBooks`) over loom's atomics and mutex. The atomics come through the core's one loom
//! facade (`nrt_core::loom`: loom's under `cfg(loom)`), the types those functions are generic
//! over.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::{Arc, Mutex};
use loom::thread;
use nrt_core::handle::{
    add_owner, drop_owner, pin, publish, release_sole_pinned, retire, unpin, wait_drained, Dropped,
};
use nrt_core::loom::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use nrt_core::model::{drain_with, mint_handle};
use nrt_core::sync::{ShardedGate, GATE_CLOSED};
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

/// One arena slot as the pin protocol sees it: the generation and reference words, the
/// object's other fields (`data`, non-atomic, so loom checks every access is ordered), and
/// how many times it was finalised.
struct Slot {
    gen: AtomicU32,
    refs: AtomicU64,
    data: UnsafeCell<u32>,
    finalised: AtomicUsize,
}

impl Slot {
    /// A slot holding a freshly published object whose fields say `tag`; its generation.
    fn new(tag: u32) -> (Arc<Slot>, u32) {
        let s = Arc::new(Slot {
            gen: AtomicU32::new(0),
            refs: AtomicU64::new(0),
            data: UnsafeCell::new(tag),
            finalised: AtomicUsize::new(0),
        });
        let g = publish(&s.gen, &s.refs);
        (s, g)
    }

    /// A call through a handle of generation `want` that reads the object (`tensor_read`):
    /// refused, or it reads the fields of exactly the object the handle names (`tag`),
    /// never a finalised or reused one.
    fn use_handle(&self, want: u32, tag: u32) -> bool {
        if !pin(&self.gen, &self.refs, want) {
            return false;
        }
        // SAFETY: the pin holds off finalisation (the protocol under test), so no write to the
        // fields can race this read; loom reports it if the protocol lets one through.
        let seen = self.data.with(|d| unsafe { *d });
        assert_eq!(seen, tag, "a pinned handle reached another object");
        assert_eq!(
            self.finalised.load(Ordering::Acquire),
            0,
            "use after finalise"
        );
        unpin(&self.refs);
        true
    }

    /// `dmem_free` / `tensor_free` through a handle: `Some(true)` when this call dropped the
    /// last owner (and finalised), `Some(false)` for another owner, `None` when refused.
    /// Finalising tears the fields down (a non-atomic write) and, with `reuse`, publishes a
    /// new object with fields `reuse` in the same slot, as the arena would.
    fn free_handle(&self, want: u32, reuse: Option<u32>) -> Option<bool> {
        if !pin(&self.gen, &self.refs, want) {
            return None;
        }
        // The common case first, as `dmem_free` takes it: the last owner and the only pin,
        // dropped and drained in one step.
        if release_sole_pinned(&self.refs) {
            return Some(self.finalise(reuse));
        }
        match drop_owner(&self.refs) {
            Dropped::NoOwner => {
                unpin(&self.refs);
                None
            }
            Dropped::Shared => {
                unpin(&self.refs);
                Some(false)
            }
            Dropped::Last => {
                wait_drained(&self.refs, 1, |_| thread::yield_now());
                Some(self.finalise(reuse))
            }
        }
    }

    /// The last owner's teardown once every pin drained: the fields go (a non-atomic write),
    /// the slot retires and, with `reuse`, a new object is published in it. `true`.
    fn finalise(&self, reuse: Option<u32>) -> bool {
        // SAFETY: the last owner after every pin drained: no reader can hold the fields.
        self.data.with_mut(|d| unsafe { *d = 0 });
        self.finalised.fetch_add(1, Ordering::AcqRel);
        retire(&self.gen);
        if let Some(tag) = reuse {
            self.finalised.store(0, Ordering::Release);
            // SAFETY: still before `publish`: no handle can pin the new object yet.
            self.data.with_mut(|d| unsafe { *d = tag });
            publish(&self.gen, &self.refs);
        }
        true
    }
}

/// A handle used on one thread while two others free it (spec §3.2; bad input):
/// the use is refused or sees the whole object, never a finalised one; exactly one free wins
/// and finalises exactly once; the other is refused (a double free). Three threads: bounded
/// at 4 preemptions (3.5 s; 5 takes 16 s, unbounded runs for many minutes).
#[test]
fn pin_vs_two_frees() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(4);
    b.check(|| {
        let (s, g) = Slot::new(7);
        let user = {
            let s = s.clone();
            thread::spawn(move || s.use_handle(g, 7))
        };
        let other_free = {
            let s = s.clone();
            thread::spawn(move || s.free_handle(g, None))
        };
        let mine = s.free_handle(g, None);
        let theirs = other_free.join().unwrap();
        user.join().unwrap();
        assert!(
            matches!((mine, theirs), (Some(true), None) | (None, Some(true))),
            "exactly one free wins: {mine:?} {theirs:?}"
        );
        assert_eq!(s.finalised.load(Ordering::Acquire), 1, "finalised once");
        assert_eq!(s.refs.load(Ordering::Acquire), 0);
        assert_eq!(
            s.gen.load(Ordering::Acquire),
            g + 1,
            "retired: the slot reads as free"
        );
        assert!(!s.use_handle(g, 7), "stale after the free");
    });
}

/// The ABA case: the slot is freed and handed out again (a new object, new fields) while a
/// thread still uses the old handle. The old handle never resolves to the new object, and
/// the new object's handle works.
#[test]
fn stale_handle_never_reaches_the_reused_slot() {
    loom::model(|| {
        let (s, g) = Slot::new(1);
        let user = {
            let s = s.clone();
            thread::spawn(move || {
                s.use_handle(g, 1);
                s.use_handle(g, 1)
            })
        };
        assert_eq!(s.free_handle(g, Some(2)), Some(true));
        let g2 = s.gen.load(Ordering::Acquire);
        assert_ne!(g2, g);
        assert!(s.use_handle(g2, 2), "the new object's handle resolves");
        user.join().unwrap();
        assert!(!s.use_handle(g, 1), "the old one never does");
        assert_eq!(s.free_handle(g, None), None, "nor frees anything");
    });
}

/// Shared owners (`dmem_acquire_reference`): thread 0 takes a second owner and hands it to
/// thread 1; both free. Exactly one sees the last owner go, and it finalises once.
#[test]
fn shared_owners_elect_one_last_free() {
    loom::model(|| {
        let (s, g) = Slot::new(5);
        assert!(pin(&s.gen, &s.refs, g));
        assert!(add_owner(&s.refs));
        unpin(&s.refs);
        let t = {
            let s = s.clone();
            thread::spawn(move || s.free_handle(g, None))
        };
        let mine = s.free_handle(g, None);
        let theirs = t.join().unwrap();
        assert!(
            matches!(
                (mine, theirs),
                (Some(true), Some(false)) | (Some(false), Some(true))
            ),
            "{mine:?} {theirs:?}"
        );
        assert_eq!(s.finalised.load(Ordering::Acquire), 1);
        assert_eq!(s.refs.load(Ordering::Acquire), 0);
    });
}

/// The runtime's gate with two shards (the runtime's is `GATE_SHARDS` wide; two is the least
/// that shows calls on different shards racing one `close`).
type Gate2 = ShardedGate<AtomicU32, 2>;

fn gate2() -> Arc<Gate2> {
    Arc::new(ShardedGate::from_words([
        AtomicU32::new(0),
        AtomicU32::new(0),
    ]))
}

/// A public call racing `close` on shard `shard`: it counts itself in, and when it got in it
/// must not meet a torn-down runtime. Returns whether it got in.
fn racing_call(
    gate: &Arc<Gate2>,
    shard: usize,
    torn_down: &Arc<AtomicBool>,
) -> thread::JoinHandle<bool> {
    let (gate, torn_down) = (gate.clone(), torn_down.clone());
    thread::spawn(move || match gate.enter_on(shard) {
        Some(i) => {
            assert_eq!(i, shard, "counted in on the shard it asked for");
            assert!(
                !torn_down.load(Ordering::Acquire),
                "call ran into a teardown"
            );
            gate.exit(i);
            true
        }
        None => false,
    })
}

/// `close` as the runtime does it: shut the gate, wait for the calls counted in, tear down.
fn close(gate: &Gate2, torn_down: &AtomicBool) {
    gate.close(|_| thread::yield_now());
    torn_down.store(true, Ordering::Release);
}

/// Every shard of a closed gate with no call in flight holds just the closed bit.
fn assert_shut_and_empty(gate: &Gate2) {
    for w in gate.words() {
        assert_eq!(w.load(Ordering::Acquire), GATE_CLOSED);
    }
}

/// The in-flight call gate (spec §7.2, §12), sharded: `close` shuts every
/// shard and waits for the calls counted in on each; a call counts itself in on its shard
/// unless that shard is shut. Under every interleaving of two calls on different shards with
/// `close`, a call that got in ends before the teardown that follows the close, and a call
/// that comes later, on either shard, does not get in.
#[test]
fn close_never_tears_down_under_a_call() {
    loom::model(|| {
        let gate = gate2();
        let torn_down = Arc::new(AtomicBool::new(false));
        let a = racing_call(&gate, 0, &torn_down);
        let b = racing_call(&gate, 1, &torn_down);
        close(&gate, &torn_down);
        a.join().unwrap();
        b.join().unwrap();
        assert!(gate.enter_on(0).is_none(), "a call after close gets in");
        assert!(gate.enter_on(1).is_none(), "a call after close gets in");
        assert_shut_and_empty(&gate);
    });
}

/// `init` after `close` reopens the gate (`open`), and a later `close` shuts it again: a call
/// racing all three either gets in while the runtime stands (and ends before the teardown
/// that follows) or is turned away, whichever runtime it meets; a call on the other shard
/// after the reopen gets in.
#[test]
fn a_reopened_gate_closes_again() {
    loom::model(|| {
        let gate = gate2();
        let torn_down = Arc::new(AtomicBool::new(false));
        let call = racing_call(&gate, 1, &torn_down);
        close(&gate, &torn_down);
        // init: the runtime stands again before the gate opens.
        torn_down.store(false, Ordering::Release);
        gate.open();
        let i = gate.enter_on(0).expect("a reopened gate lets a call in");
        gate.exit(i);
        close(&gate, &torn_down);
        call.join().unwrap();
        assert_shut_and_empty(&gate);
    });
}

/// The sharded arena's slot protocol (`arena.rs`): each shard's books
/// ([`ShardBooks`], the very code the arena runs) behind that shard's own lock, a live flag
/// per slot, and the arena's composition (`take_slot`: the preferred shard, then the others,
/// quarantine last; `give_back`: the owning shard's lock, the flag checked and cleared under
/// it) mirrored over loom's mutex and atomics.
mod sharded {
    use super::*;
    use nrt_core::arena::ShardBooks;

    pub const SLOTS: usize = 4;
    pub const PER: usize = 2;

    pub struct Model {
        pub shards: [Mutex<ShardBooks>; 2],
        pub live: [AtomicU32; SLOTS],
        pub slots: [UnsafeCell<u64>; SLOTS],
        _free: Box<[u32; SLOTS]>,
    }

    // SAFETY: the books' free-stack pointer targets `_free`, owned by the model and reached only
    // under the owning shard's lock; the slots' cells are loom cells (loom checks their access).
    unsafe impl Sync for Model {}
    // SAFETY: as above.
    unsafe impl Send for Model {}

    impl Model {
        pub fn new() -> Self {
            let mut free = Box::new([0u32; SLOTS]);
            let p = free.as_mut_ptr();
            // SAFETY: each shard gets its own PER entries of `free`, which the model keeps alive.
            let books = |s: usize| unsafe {
                ShardBooks::new(p.add(s * PER), (s * PER) as u32, PER as u32).with_fresh_start(0)
            };
            Model {
                shards: [Mutex::new(books(0)), Mutex::new(books(1))],
                live: std::array::from_fn(|_| AtomicU32::new(0)),
                slots: std::array::from_fn(|_| UnsafeCell::new(0)),
                _free: free,
            }
        }

        /// `Arena::take_slot` + the live flag's publication.
        pub fn alloc(&self, prefer: usize) -> Option<usize> {
            for quarantined in [false, true] {
                for k in 0..2 {
                    let s = (prefer + k) % 2;
                    let got = self.shards[s].lock().unwrap().take(false, quarantined);
                    if let Some(i) = got {
                        let i = i as usize;
                        // The slot is ours alone: loom flags any overlapping access.
                        // SAFETY: exclusive by the protocol under test.
                        self.slots[i].with_mut(|v| unsafe { *v = 0 });
                        self.live[i].store(1, Ordering::Release);
                        return Some(i);
                    }
                }
            }
            None
        }

        /// `Arena::give_back(.., GiveBack::Release)`.
        pub fn release(&self, i: usize) -> bool {
            let mut b = self.shards[i / PER].lock().unwrap();
            if self.live[i].load(Ordering::Acquire) != 1 || !b.owns(i as u32) {
                return false;
            }
            self.live[i].store(0, Ordering::Release);
            b.put(i as u32);
            true
        }

        pub fn use_slot(&self, i: usize, v: u64) {
            // SAFETY: exclusive by the protocol under test.
            self.slots[i].with_mut(|p| unsafe { *p = v });
        }
    }
}

/// Two threads preferring different shards: one takes more slots than its shard has (it
/// borrows from the other), the other allocates, uses and frees, then frees again. No slot is
/// ever held by both (loom checks every access to the slots' cells), the second free is
/// refused, and every slot is back on the books at the end.
#[test]
fn sharded_arena_never_hands_a_slot_out_twice() {
    loom::model(|| {
        let m = Arc::new(sharded::Model::new());
        let a = {
            let m = m.clone();
            thread::spawn(move || {
                let got: Vec<usize> = (0..3).filter_map(|_| m.alloc(0)).collect();
                for (k, i) in got.iter().enumerate() {
                    m.use_slot(*i, k as u64 + 1);
                }
                for i in &got {
                    assert!(m.release(*i));
                }
                got.len()
            })
        };
        let b = {
            let m = m.clone();
            thread::spawn(move || {
                let i = m.alloc(1).expect("4 slots for at most 4 holders");
                m.use_slot(i, 99);
                assert!(m.release(i));
                assert!(!m.release(i), "a double free is refused");
            })
        };
        assert_eq!(a.join().unwrap(), 3, "a full shard borrows from the other");
        b.join().unwrap();
        let live: u32 = m.shards.iter().map(|s| s.lock().unwrap().live()).sum();
        assert_eq!(live, 0);
    });
}
