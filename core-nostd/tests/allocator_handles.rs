//! Allocator handles (bad input, races): a destroyed or foreign `AllocatorHandle` is
//! `InvalidHandle` (NRT_INVALID) for every call at any age, the physical core is read
//! through the handle, and a destroy racing allocations on another thread leaves every call
//! either done or cleanly refused, and the ledger whole.
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

use common::*;
use nrt_core::abi::{dmem_allocator_type_t, NRT_STATUS};
use nrt_core::dmem::AllocArgs;
use nrt_core::sim::{Preset, SimConfig};
use nrt_core::{
    AllocatorHandle, Error, HandleError, HandleFault, HandleKind, InitOptions, InvalidArg, Nrt,
    PhysicalCore,
};

const MODEL: dmem_allocator_type_t = dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_MODEL;

fn refused(fault: HandleFault) -> Error {
    Error::InvalidHandle(HandleError {
        kind: HandleKind::Allocator,
        fault,
    })
}

/// Every call that takes an allocator refuses `al` with `fault`, changing nothing.
#[track_caller]
fn assert_refused(n: &Nrt<'_>, al: AllocatorHandle, fault: HandleFault) {
    let e = refused(fault);
    let before = snapshot(n);
    let args = AllocArgs::device(4096, 0, TENSOR, "x");
    assert_eq!(n.dmem().alloc(al, &args, None), Err(e));
    assert_eq!(n.dmem().allocator_core(al), Err(e));
    assert_eq!(n.dmem().allocator_destroy(al), Err(e));
    assert_eq!(n.dmem().allocator_for_each(al, |_| ()), Err(e));
    assert_eq!(n.dmem().allocator_check(al), Err(e));
    assert_eq!(n.dmem().allocator_usage(al), Err(e));
    assert!(!n.dmem().allocator_is_live(al));
    // As for dmem handles, and as the raw API answers a dead allocator pointer.
    assert_eq!(e.status(), NRT_STATUS::NRT_INVALID);
    assert_eq!(snapshot(n), before, "a refused call changed the books");
}

/// The handle names its core; a destroyed allocator's handle is refused at once and after
/// its slot has been reused many times, and never reaches the slot's new occupant.
#[test]
fn a_destroyed_allocator_handle_is_refused_at_any_age() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let core = PhysicalCore::new(0, 3);
    let global = n.dmem().core_allocator(core).unwrap();
    assert_eq!(n.dmem().allocator_core(global), Ok(core));
    let al = n.dmem().allocator_create(core, MODEL).unwrap();
    assert_eq!(n.dmem().allocator_core(al), Ok(core));
    let m = n
        .dmem()
        .alloc(al, &AllocArgs::device(4096, 0, TENSOR, "m"), None)
        .unwrap();
    assert_eq!(n.dmem().allocator_usage(al).unwrap().dmems, 1);
    n.dmem().allocator_destroy(al).unwrap();
    assert!(!n.dmem().is_live(m), "the destroy dropped its dmem");
    assert_refused(&n, al, HandleFault::Stale);

    let idx = al.to_parts().0;
    let mut reused = 0;
    let mut last = al;
    for _ in 0..2_000 {
        let other = n.dmem().allocator_create(core, MODEL).unwrap();
        reused += (other.to_parts().0 == idx) as u32;
        n.dmem().allocator_destroy(other).unwrap();
        last = other;
    }
    assert!(reused > 10, "the slot was reused ({reused} times)");
    let live = loop {
        let other = n.dmem().allocator_create(core, MODEL).unwrap();
        if other.to_parts().0 == idx {
            break other;
        }
        n.dmem().allocator_destroy(other).unwrap();
    };
    assert_ne!(live, al);
    assert_refused(&n, al, HandleFault::Stale);
    assert_refused(&n, last, HandleFault::Stale);
    // The new occupant is untouched by the stale calls and works.
    let d = n
        .dmem()
        .alloc(live, &AllocArgs::device(4096, 0, TENSOR, "d"), None)
        .unwrap();
    assert_eq!(n.dmem().allocator_usage(live).unwrap().dmems, 1);
    n.dmem().free_in(live, d).unwrap();
    n.dmem().allocator_destroy(live).unwrap();
    // A core's GLOBAL allocator is the runtime's: refused, and it stays usable.
    assert_eq!(
        n.dmem().allocator_destroy(global),
        Err(Error::InvalidArgument(InvalidArg::RuntimeOwnedAllocator))
    );
    assert!(n.dmem().allocator_is_live(global));
    // Forged bits: an index past the arena, an even generation.
    assert_refused(
        &n,
        AllocatorHandle::from_parts(u32::MAX, 1, global.to_parts().2),
        HandleFault::Forged,
    );
    let (i, g, e) = global.to_parts();
    assert_refused(
        &n,
        AllocatorHandle::from_parts(i, g + 1, e),
        HandleFault::Forged,
    );
    close_and_check_drained(&n);
}

/// A handle of another runtime, and one of this runtime before it was closed and initialised
/// again, is refused as foreign, whatever the other runtime has in that slot.
#[test]
fn a_foreign_allocator_handle_is_refused() {
    let a = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let b = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let (na, nb) = (a.nrt(), b.nrt());
    let core = PhysicalCore::new(0, 0);
    let ga = na.dmem().core_allocator(core).unwrap();
    let gb = nb.dmem().core_allocator(core).unwrap();
    // b's own handle with a's epoch: the slot and generation b issued, another runtime's.
    let (i, g, _) = gb.to_parts();
    assert_refused(
        &nb,
        AllocatorHandle::from_parts(i, g, ga.to_parts().2),
        HandleFault::Foreign,
    );
    let ma = na.dmem().allocator_create(core, MODEL).unwrap();
    assert_refused(&nb, ga, HandleFault::Foreign);
    assert_refused(&nb, ma, HandleFault::Foreign);
    assert!(
        na.dmem().allocator_is_live(ma),
        "b's refusals left a's alone"
    );
    na.dmem().allocator_destroy(ma).unwrap();
    // Closed and initialised again: the old handles are of another epoch.
    na.close().unwrap();
    na.init(&InitOptions::default()).unwrap();
    assert_refused(&na, ga, HandleFault::Foreign);
    let ga2 = na.dmem().core_allocator(core).unwrap();
    assert_ne!(ga2, ga);
    close_and_check_drained(&na);
    close_and_check_drained(&nb);
}

/// One thread allocates from and frees into an allocator while another destroys it: every
/// call either completes or is refused cleanly (the destroy with `AllocatorInUse` while an
/// allocation holds the allocator, the allocations with `InvalidHandle` once it is gone), and
/// afterwards the ledger and the driver hold exactly what is still live.
#[test]
fn destroy_racing_alloc_on_two_threads() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let core = PhysicalCore::new(0, 1);
    let empty = snapshot(&n);
    let (mut in_use, mut done_allocs, mut refused_allocs) = (0u64, 0u64, 0u64);
    for round in 0..200 {
        let al = n.dmem().allocator_create(core, MODEL).unwrap();
        let go = AtomicBool::new(false);
        let first_done = AtomicBool::new(false);
        let kept = AtomicU64::new(0);
        let (allocs, refusals, busy) = std::thread::scope(|sc| {
            let alloc = sc.spawn(|| {
                while !go.load(SeqCst) {
                    std::hint::spin_loop();
                }
                let (mut ok, mut no) = (0u64, 0u64);
                let args = AllocArgs::device(4096, 0, TENSOR, "race");
                for i in 0..64u64 {
                    match n.dmem().alloc(al, &args, None) {
                        Ok(m) => {
                            ok += 1;
                            first_done.store(true, SeqCst);
                            // Keep every other one: the destroy must drop them.
                            if i % 2 == 0 {
                                kept.fetch_add(1, SeqCst);
                            } else {
                                match n.dmem().free_in(al, m) {
                                    Ok(()) => {}
                                    // The destroy took it meanwhile (or the allocator is gone).
                                    Err(Error::InvalidHandle(_)) => {}
                                    Err(e) => panic!("free_in: {e}"),
                                }
                            }
                        }
                        Err(Error::InvalidHandle(HandleError {
                            kind: HandleKind::Allocator,
                            fault: HandleFault::Stale,
                        })) => no += 1,
                        Err(e) => panic!("alloc: unexpected {e}"),
                    }
                }
                (ok, no)
            });
            // Both outcomes whatever the scheduler does: every fourth round the destroy goes
            // first (the allocations are refused), every odd round it waits for one allocation
            // to complete, the others race from the start.
            let mut busy = 0u64;
            if round % 4 == 0 {
                n.dmem().allocator_destroy(al).unwrap();
            }
            go.store(true, SeqCst);
            if round % 2 == 1 {
                while !first_done.load(SeqCst) && !alloc.is_finished() {
                    std::thread::yield_now();
                }
            }
            if round % 4 != 0 {
                loop {
                    match n.dmem().allocator_destroy(al) {
                        Ok(()) => break,
                        Err(Error::InvalidArgument(InvalidArg::AllocatorInUse)) => {
                            busy += 1;
                            std::hint::spin_loop();
                        }
                        Err(e) => panic!("destroy: unexpected {e}"),
                    }
                }
            }
            let (ok, no) = alloc.join().unwrap();
            (ok, no, busy)
        });
        // Destroyed: every later call through the handle is refused.
        assert_refused(&n, al, HandleFault::Stale);
        // Nothing of the allocator's is left booked.
        assert_eq!(snapshot(&n), empty, "round {round}: the ledger kept bytes");
        in_use += busy;
        done_allocs += allocs;
        refused_allocs += refusals;
        let _ = kept.load(SeqCst);
    }
    // Both outcomes were seen (the race is real): some allocations done, some refused.
    assert!(done_allocs > 0, "no allocation ever completed");
    assert!(
        refused_allocs > 0 || in_use > 0,
        "the destroy never overlapped an allocation (allocs {done_allocs}, busy {in_use})"
    );
    close_and_check_drained(&n);
}
