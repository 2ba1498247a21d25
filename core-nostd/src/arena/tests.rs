//! Unit tests of the slab pools (`arena`).

use super::*;
extern crate std;
use std::boxed::Box;

#[repr(C, align(64))]
struct Line([u8; 64]);

/// A boxed arena of `n` slots in `shards` shards, bound to leaked zeroed storage.
pub(crate) fn sharded<T: ZeroValid>(n: usize, shards: usize) -> Box<Arena<T>> {
    sharded_told(n, shards, None)
}

/// [`sharded`] with an [`InUse`] hook.
fn sharded_told<T: ZeroValid>(n: usize, shards: usize, in_use: Option<InUse>) -> Box<Arena<T>> {
    // SAFETY: Arena<T> is ZeroValid.
    let mut a = unsafe { Box::<Arena<T>>::new_zeroed().assume_init() };
    let lines = Arena::<T>::storage_bytes(n).div_ceil(64);
    let storage: &'static mut [Line] =
        std::vec::Vec::leak((0..lines).map(|_| Line([0; 64])).collect());
    // SAFETY: 64-aligned zeroed storage of the right size, leaked (lives forever), used
    // by nobody else; the arena is fresh.
    unsafe {
        a.bind(
            storage.as_mut_ptr().cast(),
            n,
            shards,
            "test setting",
            in_use,
        )
    };
    a
}

std::thread_local! {
    static TOLD: core::cell::RefCell<std::vec::Vec<(usize, usize)>> =
        const { core::cell::RefCell::new(std::vec::Vec::new()) };
}

fn tell(at: *const u8, len: usize) {
    TOLD.with(|t| t.borrow_mut().push((at as usize, len)));
}

/// The hook hears of every slot before it is handed out, in whole runs, each slot once, also
/// where a shard's fresh cursor wraps; freed and reused slots are not told again.
#[test]
fn slots_coming_into_use_are_told_once_in_runs() {
    const N: usize = 5000;
    let a = sharded_told::<[u8; 64]>(N, 2, Some(tell));
    let run = IN_USE_RUN / 64;
    let mut held = std::vec::Vec::new();
    for _ in 0..N {
        let p = a.alloc("t").unwrap();
        let told = TOLD.with(|t| {
            t.borrow()
                .iter()
                .any(|&(at, len)| (at..at + len).contains(&(p.as_ptr() as usize)))
        });
        assert!(told, "slot {:p} handed out untold", p);
        held.push(p);
    }
    let spans = TOLD.with(|t| t.borrow().clone());
    let total: usize = spans.iter().map(|s| s.1).sum();
    assert_eq!(total, N * 64, "every slot once: {spans:?}");
    assert!(spans.iter().all(|s| s.1 <= run * 64), "{spans:?}");
    for p in held {
        a.release(p.as_ptr()).unwrap();
    }
    for _ in 0..100 {
        let p = a.alloc("t").unwrap();
        a.release(p.as_ptr()).unwrap();
    }
    assert_eq!(
        TOLD.with(|t| t.borrow().len()),
        spans.len(),
        "reuse tells nothing"
    );
}

fn arena<const N: usize>() -> Box<Arena<u64>> {
    sharded(N, 1)
}

#[test]
fn a_fresh_slot_is_hidden_until_published_and_a_dropped_one_leaves_no_trace() {
    let a = arena::<2>();
    let before = a.stats();
    {
        let mut f = a.alloc_fresh("t").unwrap();
        assert_eq!(*f, 0, "a fresh slot starts zeroed");
        *f = 7;
        let p = f.as_ptr();
        assert!(a.owns(p) && !a.is_live(p), "not live before publish");
        assert_eq!(a.with_live(p, |_| ()), None, "no reader reaches it");
        assert_eq!(a.release(p), Err(ReleaseError::NotLive));
    }
    // Dropped unpublished: books as before (live count and peak), the slot reusable.
    assert_eq!(a.stats(), before);
    let f = a.alloc_fresh("t").unwrap();
    let g = a.alloc_fresh("t").unwrap();
    assert!(a.alloc_fresh("t").is_err(), "two slots, both taken");
    drop(g);
    let mut f = f;
    *f = 9;
    let p = f.publish();
    assert!(a.is_live(p.as_ptr()));
    // SAFETY: a live slot of a test arena nobody else uses.
    assert_eq!(a.with_live(p.as_ptr(), |q| unsafe { *q.as_ptr() }), Some(9));
    assert_eq!(a.stats().live, 1);
    a.release(p.as_ptr()).unwrap();
    assert_eq!(a.with_live(p.as_ptr(), |_| ()), None, "released: refused");
}

#[test]
fn full_double_free_and_foreign_are_errors() {
    let a = arena::<2>();
    let p = a.alloc("t").unwrap();
    let q = a.alloc("t").unwrap();
    assert_eq!(
        a.alloc("t"),
        Err(ArenaFull {
            arena: "t",
            capacity: 2,
            setting: "test setting",
        })
    );
    assert_eq!(a.release(p.as_ptr()), Ok(()));
    assert_eq!(a.release(p.as_ptr()), Err(ReleaseError::NotLive));
    let x = 5u64;
    assert_eq!(a.release(&x), Err(ReleaseError::Foreign));
    assert!(a.is_live(q.as_ptr()));
    assert!(!a.is_live(p.as_ptr()));
    let r = a.alloc("t").unwrap();
    assert_eq!(
        r, p,
        "with every other slot live, the quarantined slot is reused"
    );
    assert_eq!(a.stats().live, 2);
    assert_eq!(a.stats().peak, 2);
}

#[test]
fn a_new_arena_starts_handing_out_elsewhere() {
    // Two arenas in turn, as two runtimes' state blocks at one address would be: the
    // second one's first slots are not the first one's.
    let first_four = |a: &Arena<u64>| -> std::vec::Vec<usize> {
        (0..4)
            .map(|_| {
                a.index_of(a.alloc_fresh_first("t").unwrap().as_ptr())
                    .unwrap()
            })
            .collect()
    };
    let a = arena::<8192>();
    let first_a = first_four(&a);
    let b = arena::<8192>();
    let first_b = first_four(&b);
    assert!(
        first_a.iter().all(|i| !first_b.contains(i)),
        "{first_a:?} {first_b:?}"
    );
    // Fresh slots are still consecutive (mod N), and every one is reachable.
    let c = arena::<4>();
    let mut got: std::vec::Vec<usize> = (0..4)
        .map(|_| c.index_of(c.alloc("t").unwrap().as_ptr()).unwrap())
        .collect();
    got.sort();
    assert_eq!(got, [0, 1, 2, 3]);
}

#[test]
fn a_freed_slot_waits_out_the_quarantine() {
    let a = arena::<256>();
    let p = a.alloc("t").unwrap().as_ptr();
    a.release(p).unwrap();
    // A stale pointer stays detectably dead while others come and go…
    for _ in 0..QUARANTINE - 1 {
        let q = a.alloc("t").unwrap().as_ptr();
        assert_ne!(q, p);
        assert!(!a.is_live(p));
        a.release(q).unwrap();
    }
    assert_eq!(a.release(p), Err(ReleaseError::NotLive));
    // …and after QUARANTINE releases the slot is back, most recently aged first.
    let q = a.alloc("t").unwrap().as_ptr();
    a.release(q).unwrap();
    assert_eq!(a.alloc("t").unwrap().as_ptr(), p);
}

#[test]
fn a_cancelled_alloc_leaves_the_arena_as_it_was() {
    let a = arena::<256>();
    let kept = a.alloc("t").unwrap().as_ptr();
    let stale = a.alloc("t").unwrap().as_ptr();
    a.release(stale).unwrap();
    let before = a.stats();
    // Many failed calls in a row: each cancels its slot. None of them goes through the
    // quarantine, so the stale pointer stays detectably dead however many there are.
    for _ in 0..4 * QUARANTINE {
        let p = a.alloc("t").unwrap().as_ptr();
        assert_ne!(p, stale);
        assert_eq!(a.cancel(p), Ok(()));
        assert!(!a.is_live(p));
        assert_eq!(a.stats(), before, "live count and peak restored");
    }
    assert_eq!(a.release(stale), Err(ReleaseError::NotLive));
    // A fresh slot becomes fresh again: the next alloc gets the same one.
    let p = a.alloc("t").unwrap().as_ptr();
    a.cancel(p).unwrap();
    assert_eq!(a.alloc("t").unwrap().as_ptr(), p);
    // A slot from the free stack goes back on top of it.
    let b = arena::<256>();
    let x = b.alloc("t").unwrap().as_ptr();
    b.release(x).unwrap();
    for _ in 0..QUARANTINE {
        let q = b.alloc("t").unwrap().as_ptr();
        b.release(q).unwrap();
    }
    let peak = b.stats().peak;
    assert_eq!(b.alloc("t").unwrap().as_ptr(), x, "aged out onto the stack");
    b.cancel(x).unwrap();
    assert_eq!(
        b.alloc("t").unwrap().as_ptr(),
        x,
        "back on top of the stack"
    );
    assert_eq!(b.stats().peak, peak);
    // A slot that is not live, or not ours, is refused.
    assert_eq!(a.cancel(kept), Ok(()));
    assert_eq!(a.cancel(kept), Err(ReleaseError::NotLive));
    assert_eq!(a.cancel(&5u64), Err(ReleaseError::Foreign));
}

#[test]
fn alloc_handle_zeroes_all_but_the_resolver_words() {
    use crate::abi::dmem_t;
    // One slot, so the second allocation is the first one's slot again.
    let a = sharded::<dmem_t>(1, 1);
    let (p, i) = a.alloc_handle("d", false, 0).unwrap();
    let p = p.as_ptr();
    // SAFETY: a slot of `a`.
    let (gen, refs) = unsafe { a.words(p) };
    gen.store(0x1234_5677, Ordering::Relaxed);
    refs.store(0xdead_beef_0000_0000, Ordering::Relaxed);
    // SAFETY: the slot is ours; every byte but the two words is plain data.
    unsafe {
        let b = p as *mut u8;
        for off in (0..core::mem::size_of::<dmem_t>()).filter(|o| {
            !(<dmem_t as Generational>::GEN..<dmem_t as Generational>::GEN + 4).contains(o)
                && !(<dmem_t as Generational>::REFS..<dmem_t as Generational>::REFS + 8).contains(o)
        }) {
            b.add(off).write(0xa5);
        }
    }
    a.cancel(p).unwrap();
    let (q, j) = a.alloc_handle("d", false, 0).unwrap();
    assert_eq!((q.as_ptr(), j), (p, i), "the same slot again");
    assert_eq!(gen.load(Ordering::Relaxed), 0x1234_5677, "generation kept");
    assert_eq!(
        refs.load(Ordering::Relaxed),
        0xdead_beef_0000_0000,
        "word kept"
    );
    // SAFETY: the slot is ours.
    let bytes = unsafe {
        core::slice::from_raw_parts(q.as_ptr() as *const u8, core::mem::size_of::<dmem_t>())
    };
    let nonzero = bytes.iter().filter(|b| **b != 0).count();
    assert_eq!(
        nonzero,
        4 + 4,
        "only the two words' own non-zero bytes remain"
    );
}

#[test]
fn every_slot_is_usable_whatever_the_quarantine_holds() {
    let a = arena::<8>();
    for round in 0..50 {
        let ps: std::vec::Vec<_> = (0..8).map(|_| a.alloc("t").unwrap().as_ptr()).collect();
        assert!(a.alloc("t").is_err(), "round {round}: 9th slot");
        let mut sorted = ps.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 8, "round {round}: a slot handed out twice");
        for p in ps.iter().take(1 + round % 8) {
            a.release(*p).unwrap();
        }
        for p in ps.iter().skip(1 + round % 8) {
            a.release(*p).unwrap();
        }
        assert_eq!(a.stats().live, 0);
    }
}

#[test]
fn shards_split_the_slots_and_borrow_before_reporting_full() {
    let a = sharded::<u64>(8, 4);
    // Shard 1 owns slots 2..4: its first two allocations come from there.
    let p = a.alloc_in(1, "t").unwrap().as_ptr();
    let q = a.alloc_in(1, "t").unwrap().as_ptr();
    for x in [p, q] {
        assert!((2..4).contains(&a.index_of(x).unwrap()));
    }
    // Its third borrows from another shard rather than failing.
    let r = a.alloc_in(1, "t").unwrap().as_ptr();
    assert!(!(2..4).contains(&a.index_of(r).unwrap()));
    let mut rest: std::vec::Vec<_> = (0..5).map(|k| a.alloc_in(k, "t").unwrap()).collect();
    assert_eq!(a.alloc_in(3, "t").map(|_| ()).unwrap_err().capacity, 8);
    assert_eq!(a.stats().live, 8);
    // A slot is freed through the shard that owns it, whoever allocated it; a second free
    // of it is refused.
    a.release(r).unwrap();
    assert_eq!(a.release(r), Err(ReleaseError::NotLive));
    for x in rest.drain(..) {
        a.release(x.as_ptr()).unwrap();
    }
    a.release(p).unwrap();
    a.release(q).unwrap();
    assert_eq!(a.stats().live, 0);
    // An unbound arena has no slots: every alloc is full, every pointer foreign.
    // SAFETY: Arena<u64> is ZeroValid.
    let u = unsafe { Box::<Arena<u64>>::new_zeroed().assume_init() };
    assert_eq!(u.alloc("t").map(|_| ()).unwrap_err().capacity, 0);
    assert_eq!(u.release(&5u64), Err(ReleaseError::Foreign));
}

#[test]
fn threads_on_different_shards_never_share_a_slot() {
    let a = sharded::<u64>(64, 2);
    let a = &*a;
    std::thread::scope(|s| {
        for shard in 0..2usize {
            s.spawn(move || {
                for round in 0..2000u64 {
                    let p = a.alloc_in(shard, "t").unwrap().as_ptr();
                    // SAFETY: our live slot.
                    unsafe {
                        assert_eq!(*p, 0, "a slot handed out zeroed");
                        *p = round + 1;
                    }
                    a.release(p).unwrap();
                }
            });
        }
    });
    assert_eq!(a.stats().live, 0);
    // At most two slots are live at once, but a thread whose own shard holds only
    // quarantined slots takes a free one from the other shard first, so both can be live
    // in one shard: the peak is the sum of the shards' peaks (an upper bound, module
    // docs), here at most 2 per shard.
    assert!(a.stats().peak <= 4, "{}", a.stats().peak);
}

/// `alloc_handle` takes from the preferred shard (modulo the shard count), borrows from the
/// others, falls back on quarantined slots, reports a full arena, and tells the hook about
/// the fresh runs it starts, like the other allocations; statistics follow every path.
#[test]
fn alloc_handle_takes_every_path_the_other_allocations_take() {
    use crate::abi::dmem_t;
    let a = sharded_told::<dmem_t>(8, 2, Some(tell));
    // Shard 1 owns slots 4..8; shard 5 is shard 1 (modulo 2).
    let mut held = std::vec::Vec::new();
    for k in 0..4 {
        let (p, i) = a.alloc_handle("d", false, 5).unwrap();
        assert!(
            (4..8).contains(&i),
            "take {k}: slot {i} of the preferred shard"
        );
        assert_eq!(a.index_of(p.as_ptr()), Some(i as usize));
        let told = TOLD.with(|t| {
            t.borrow()
                .iter()
                .any(|&(at, len)| (at..at + len).contains(&(p.as_ptr() as usize)))
        });
        assert!(told, "slot {i} handed out untold");
        held.push(p.as_ptr());
    }
    for k in 0..4 {
        let (p, i) = a.alloc_handle("d", true, 1).unwrap();
        assert!(
            (0..4).contains(&i),
            "take {k}: slot {i} borrowed from shard 0"
        );
        held.push(p.as_ptr());
    }
    let full = a.alloc_handle("d", false, 1).map(|_| ()).unwrap_err();
    assert_eq!((full.arena, full.capacity), ("d", 8));
    assert_eq!((a.stats().live, a.stats().peak), (8, 8));
    for p in &held {
        a.release(*p).unwrap();
    }
    assert_eq!(a.release(held[0]), Err(ReleaseError::NotLive));
    // Every slot is quarantined now: the allocation still succeeds, with the oldest one.
    let (p, _) = a.alloc_handle("d", false, 1).unwrap();
    assert_eq!(p.as_ptr(), held[0], "shard 1's oldest quarantined slot");
    assert_eq!((a.stats().live, a.stats().peak), (1, 8));
    a.cancel(p.as_ptr()).unwrap();
    assert_eq!(a.stats().live, 0);
    // An unbound arena is full for every shard.
    // SAFETY: Arena<dmem_t> is ZeroValid.
    let u = unsafe { Box::<Arena<dmem_t>>::new_zeroed().assume_init() };
    assert_eq!(
        u.alloc_handle("d", false, 0)
            .map(|_| ())
            .unwrap_err()
            .capacity,
        0
    );
}

/// The shard of a slot, by a multiplication, is the quotient of a division for every slot
/// index an arena can have (below 2^31) and every shard length.
#[test]
fn the_shard_reciprocal_divides_exactly() {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let top = (1u32 << 31) - 1;
    let mut pers = std::vec![
        1,
        2,
        3,
        5,
        7,
        64,
        100,
        4095,
        4096,
        4097,
        12_345,
        1 << 30,
        top
    ];
    pers.extend((0..200).map(|_| 1 + (next() % u64::from(top)) as u32));
    for per in pers {
        let r = shard_recip(per);
        let check = |n: u32| {
            if n <= top {
                assert_eq!(shard_index(n, r), (n / per) as usize, "{n} / {per}");
            }
        };
        for n in [0, 1, top, top - 1] {
            check(n);
        }
        for k in 0..64u32 {
            let m = per.saturating_mul(k);
            for n in [m.saturating_sub(1), m, m.saturating_add(1)] {
                check(n);
            }
        }
        for _ in 0..2000 {
            check((next() % (u64::from(top) + 1)) as u32);
        }
    }
    assert_eq!(shard_index(12_345, shard_recip(0)), 0, "unbound: shard 0");
}
