//! The dmem allocator and its ledger (spec §3): bookkeeping, every bad input, OOM routing,
//! the aligned-alloc emulation, and a property test against a reference model.

mod common;

use common::*;
use nrt_core::abi::*;
use nrt_core::dmem::{align_offset, AllocArgs, AllocatorUsage};
use nrt_core::ledger::UsageSel;
use nrt_core::sim::{Placement, Preset, SimConfig};
use nrt_core::LogicalCore;
use nrt_core::PhysicalCore;
use nrt_core::{Error, InitOptions};
use proptest::prelude::*;

/// `al`'s list is whole (`List::assert_valid` through `DeviceMemory::allocator_check`): every link
/// symmetric and as many dmems linked as the allocator counts.
#[track_caller]
fn assert_list_valid(n: &nrt_core::Nrt<'_>, al: nrt_core::AllocatorHandle) {
    match n.dmem().allocator_check(al) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("allocator list invalid: {e}"),
        Err(e) => panic!("allocator not checkable: {e}"),
    }
}

#[test]
fn alloc_books_and_free_returns() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let al = n
        .dmem()
        .core_allocator(nrt_core::PhysicalCore::new(0, 1))
        .unwrap();
    let m = n
        .dmem()
        .alloc(al, &AllocArgs::device(1 << 20, 0, TENSOR, "t0"), None)
        .unwrap();
    assert_eq!(n.ledger().device(PhysicalCore::new(0, 1), TENSOR), 1 << 20);
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 1), UsageSel::Total),
        1 << 20
    );
    assert_eq!(
        n.dmem().allocator_usage(al),
        Ok(AllocatorUsage {
            dmems: 1,
            bytes: 1 << 20
        })
    );
    assert_list_valid(&n, al);
    let h = n
        .dmem()
        .alloc(al, &AllocArgs::host(8192, TENSOR, "h0"), None)
        .unwrap();
    assert_eq!(n.ledger().host(PhysicalCore::new(0, 1), TENSOR), 8192);
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 1), UsageSel::Total),
        1 << 20,
        "host bytes are not HBM usage"
    );
    n.dmem().free(m).unwrap();
    n.dmem().free(h).unwrap();
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 1), UsageSel::Total),
        0
    );
    assert_eq!(n.ledger().host(PhysicalCore::new(0, 1), UsageSel::Total), 0);
    assert_eq!(
        n.dmem().allocator_usage(al),
        Ok(AllocatorUsage { dmems: 0, bytes: 0 })
    );
    assert_list_valid(&n, al);
    close_and_check_drained(&n);
}

#[test]
fn every_bad_input_is_refused_and_changes_nothing() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let al = core0_allocator(&n);
    let keep = n
        .dmem()
        .alloc(al, &AllocArgs::device(4096, 0, TENSOR, "keep"), None)
        .unwrap();
    let before = snapshot(&n);
    let dev = dma_mem_location_t::TONGA_DRAM as u32;
    let bad: Vec<(AllocArgs<'_>, NRT_STATUS)> = vec![
        (
            AllocArgs::device(0, 0, TENSOR, "zero"),
            NRT_STATUS::NRT_INVALID,
        ),
        (
            AllocArgs::device(u64::MAX - 10, 0, TENSOR, "ovf").aligned(64),
            NRT_STATUS::NRT_INVALID,
        ),
        (
            AllocArgs::device(4096, 0, TENSOR, "align").aligned(48),
            NRT_STATUS::NRT_INVALID,
        ),
        (
            AllocArgs {
                size: 4096,
                align: 0,
                loc: 0,
                hbm_idx: 0,
                usage: TENSOR as u32,
                hint: "loc0",
            },
            NRT_STATUS::NRT_INVALID,
        ),
        (
            AllocArgs {
                size: 4096,
                align: 0,
                loc: 7,
                hbm_idx: 0,
                usage: TENSOR as u32,
                hint: "loc7",
            },
            NRT_STATUS::NRT_INVALID,
        ),
        (
            AllocArgs {
                size: 4096,
                align: 0,
                loc: dev,
                hbm_idx: 0,
                usage: 22,
                hint: "max",
            },
            NRT_STATUS::NRT_INVALID,
        ),
        (
            AllocArgs {
                size: 4096,
                align: 0,
                loc: dev,
                hbm_idx: 0,
                usage: 99,
                hint: "u99",
            },
            NRT_STATUS::NRT_INVALID,
        ),
        (
            AllocArgs::host(
                4096,
                dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_SCRATCHPAD,
                "scratchpad",
            ),
            NRT_STATUS::NRT_INVALID,
        ),
        (
            AllocArgs::device(4096, 4, TENSOR, "hbm4"),
            NRT_STATUS::NRT_INVALID,
        ),
        (
            // A host allocation records its HBM too (`tdram_channel`): checked alike.
            AllocArgs {
                hbm_idx: 99,
                ..AllocArgs::host(4096, TENSOR, "host-hbm99")
            },
            NRT_STATUS::NRT_INVALID,
        ),
    ];
    for (a, st) in &bad {
        let e = n.dmem().alloc(al, a, None).unwrap_err();
        assert_eq!(e.status(), *st, "{a:?} → {e}");
        assert_eq!(snapshot(&n), before, "{a:?} changed state");
    }
    // Each host-invalid usage (libnrt's host table: SCRATCHPAD, CC, SCRATCHPAD_NOT_SHARED)
    // is refused on the host with libnrt's message, and the host DMA rings are accepted.
    for u in 0..22u32 {
        let a = AllocArgs {
            size: 4096,
            align: 0,
            loc: 1,
            hbm_idx: 0,
            usage: u,
            hint: "h",
        };
        let invalid = constants::HOST_CATEGORY_INVALID_USAGE_INDICES.contains(&(u as usize));
        match n.dmem().alloc(al, &a, None) {
            Err(e @ Error::UsageInvalidForLocation { .. }) => {
                assert!(invalid, "usage {u} refused on the host: {e}");
                assert_eq!(e.status(), NRT_STATUS::NRT_INVALID);
                let text = e.to_string();
                assert!(
                    text.starts_with(&format!("Invalid mem_usage_type {u} for host")),
                    "{text}"
                );
                assert_eq!(snapshot(&n), before, "usage {u} changed state");
            }
            Ok(m) => {
                assert!(!invalid, "usage {u} accepted on the host");
                n.dmem().free(m).unwrap();
            }
            Err(e) => panic!("usage {u} on the host: {e}"),
        }
    }
    assert_eq!(snapshot(&n), before);
    // Core out of range, and a pcore that is not a core of the context tree: refused, the
    // latter without being dereferenced.
    assert!(matches!(
        n.dmem().core_allocator(nrt_core::PhysicalCore::new(0, 9)),
        Err(Error::CoreOutOfRange { device: 0, tpb: 9 })
    ));
    let mut bogus = physical_core_t::new(0, 1);
    assert!(matches!(
        nrt_core::raw::allocator_create(
            &n,
            &mut bogus,
            dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_MODEL
        ),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        n.dmem().allocator_create(
            nrt_core::PhysicalCore::new(0, 9),
            dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_MODEL
        ),
        Err(Error::CoreOutOfRange { device: 0, tpb: 9 })
    ));
    // A ref_list that is not a live dmem_list_t: refused before anything is charged.
    let mut not_a_list = dmem_list_t {
        head: std::ptr::null_mut(),
        tail: std::ptr::null_mut(),
    };
    let e = n
        .dmem()
        .alloc(
            al,
            &AllocArgs::device(4096, 0, TENSOR, "x"),
            Some(&mut not_a_list),
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    // An aligned host allocation while the driver aligns natively: its host pool refuses
    // alignment, so the request is refused up front with a clear error.
    let e = n
        .dmem()
        .alloc(al, &AllocArgs::host(4096, TENSOR, "h").aligned(4096), None)
        .unwrap_err();
    assert_eq!(e.status(), NRT_STATUS::NRT_INVALID, "{e}");
    assert_eq!(snapshot(&n), before);
    // A handle that was never issued is refused, not reported as a double free.
    assert!(matches!(
        n.dmem()
            .free(nrt_core::DmemHandle::from_parts(u32::MAX, 1, 1)),
        Err(Error::InvalidHandle(_))
    ));
    // Double free and foreign dmem.
    let other = n
        .dmem()
        .core_allocator(nrt_core::PhysicalCore::new(0, 1))
        .unwrap();
    assert_eq!(n.dmem().free_in(other, keep), Err(Error::ForeignDmem));
    n.dmem().free(keep).unwrap();
    assert_eq!(n.dmem().free(keep), Err(stale(nrt_core::HandleKind::Dmem)));
    assert_eq!(
        n.dmem().acquire_reference(keep),
        Err(stale(nrt_core::HandleKind::Dmem))
    );
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
        0
    );
}

/// A stale dmem handle (freed, then freed again after another allocation) is reported as a
/// stale handle, and the allocation made in between is untouched.
#[test]
fn a_stale_dmem_does_not_alias_the_next_allocation() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let al = core0_allocator(&n);
    let a = n
        .dmem()
        .alloc(al, &AllocArgs::device(4096, 0, TENSOR, "a"), None)
        .unwrap();
    n.dmem().free(a).unwrap();
    let b = n
        .dmem()
        .alloc(al, &AllocArgs::device(8192, 0, TENSOR, "b"), None)
        .unwrap();
    assert_ne!(a, b);
    assert_eq!(n.dmem().free(a), Err(stale(nrt_core::HandleKind::Dmem)));
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
        8192,
        "b is still booked"
    );
    n.dmem().free(b).unwrap();
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
        0
    );
}

#[test]
fn oom_routes_device_and_host_differently() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let al = core0_allocator(&n);
    let before = snapshot(&n);
    let e = n
        .dmem()
        .alloc(al, &AllocArgs::device(200 << 30, 0, TENSOR, "huge"), None)
        .unwrap_err();
    assert_eq!(e.status(), NRT_STATUS::NRT_RESOURCE);
    assert!(e.to_string().contains("Failed to allocate"), "{e}");
    assert!(
        e.to_string().contains("(usage: tensors) on ND 0:NC 0"),
        "{e}"
    );
    assert_eq!(n.ledger().last_oom(), Some(e));
    let e = n
        .dmem()
        .alloc(
            al,
            &AllocArgs::device(200 << 30, 0, TENSOR, "huge").aligned(1 << 20),
            None,
        )
        .unwrap_err();
    assert!(e.to_string().contains("alignment boundaries"), "{e}");
    let e = n
        .dmem()
        .alloc(al, &AllocArgs::host(64 << 30, TENSOR, "hostbig"), None)
        .unwrap_err();
    assert_eq!(e.status(), NRT_STATUS::NRT_FAIL_HOST_MEM_ALLOC);
    assert_eq!(snapshot(&n), before);
    assert_eq!(
        n.ledger().device_totals(0).unwrap().device_ooms,
        2,
        "the two device OOMs, not the host one"
    );
    let mut dump = String::new();
    n.ledger()
        .dump(&mut dump, 0, n.ledger().last_oom().as_ref(), 5)
        .unwrap();
    assert!(
        dump.contains("NC 0") && dump.contains("largest free block"),
        "{dump}"
    );
}

#[test]
fn arena_exhaustion_is_its_own_error() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let al = core0_allocator(&n);
    let mut live = Vec::new();
    let err = loop {
        let hbm = (live.len() % 4) as u32;
        match n
            .dmem()
            .alloc(al, &AllocArgs::device(4096, hbm, TENSOR, "fill"), None)
        {
            Ok(m) => live.push(m),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::ArenaFull(_)), "{err}");
    assert_eq!(live.len(), nrt_core::Capacity::DEFAULT.dmems as usize);
    let before = snapshot(&n);
    assert!(n
        .dmem()
        .alloc(al, &AllocArgs::device(4096, 0, TENSOR, "x"), None)
        .is_err());
    assert_eq!(snapshot(&n), before);
    for m in live {
        n.dmem().free(m).unwrap();
    }
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
        0
    );
}

#[test]
fn aligned_alloc_emulation_reproduces_the_quirk() {
    let mut cfg = SimConfig::new(Preset::Trn2, 1);
    cfg.aligned_alloc = false;
    let f = Fixture::up(cfg, InitOptions::default());
    let n = f.nrt();
    let al = core0_allocator(&n);
    for align in [4096u64, 1 << 16, 1 << 21] {
        let m = n
            .dmem()
            .alloc(
                al,
                &AllocArgs::device(10_000, 0, TENSOR, "a").aligned(align),
                None,
            )
            .unwrap();
        let d = n.dmem().info(m).unwrap();
        assert_eq!(d.align_offset, align_offset(d.pa, align));
        assert_eq!((d.pa + d.align_offset) % align, 0);
        assert!(
            d.align_offset > 0 && d.align_offset <= align,
            "quirk: aligned pa gets a full alignment"
        );
        assert_eq!(d.allocated_size, 10_000 + d.align_offset);
        n.dmem().free(m).unwrap();
    }
    // Native path: the driver aligns, no offset.
    f.sim.set_aligned_alloc(true);
    let g = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n2 = g.nrt();
    let m = n2
        .dmem()
        .alloc(
            core0_allocator(&n2),
            &AllocArgs::device(10_000, 0, TENSOR, "a").aligned(1 << 16),
            None,
        )
        .unwrap();
    let d = n2.dmem().info(m).unwrap();
    assert_eq!((d.align_offset, d.pa % (1 << 16)), (0, 0));
}

#[test]
fn failed_allocations_do_not_shorten_double_free_detection() {
    // A freed dmem's slot waits out the arena's quarantine before reuse. Failed calls must not
    // use up that window: a caller retrying after out-of-memory would otherwise turn its own
    // stale pointer into someone else's live allocation.
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let al = core0_allocator(&n);
    let stale = stale_dmem(&n, al);
    let before = (snapshot(&n), n.state().arena_stats());
    // Exactly as many failures as the quarantine holds: enough to age the stale slot out if
    // each failure went through it.
    for _ in 0..nrt_core::arena::QUARANTINE {
        let e = n
            .dmem()
            .alloc(al, &AllocArgs::device(1 << 50, 0, TENSOR, "oom"), None)
            .unwrap_err();
        assert!(matches!(e, Error::DeviceOom { .. }), "{e}");
    }
    assert_eq!(
        (snapshot(&n), n.state().arena_stats()),
        before,
        "failed calls changed state"
    );
    assert_stale_still_detected(&n, al, stale);
}

#[test]
fn a_driver_that_refuses_alignment_after_init_is_latched_and_emulated() {
    // The device said it aligns; the driver then refuses aligned requests with EINVAL
    // (spec §3.2: `ndl_supports_align` latches 0). The request is served by the emulation,
    // and later ones go straight to it.
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let al = core0_allocator(&n);
    f.sim.set_aligned_alloc(false);
    let calls = f.sim.alloc_calls();
    let args = AllocArgs::device(10_000, 0, TENSOR, "a").aligned(1 << 16);
    let m = n.dmem().alloc(al, &args, None).unwrap();
    assert_eq!(f.sim.alloc_calls() - calls, 2, "refused, then emulated");
    let d = n.dmem().info(m).unwrap();
    assert_eq!(d.align_offset, align_offset(d.pa, 1 << 16));
    assert_eq!((d.pa + d.align_offset) % (1 << 16), 0);
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
        d.allocated_size
    );
    let m2 = n.dmem().alloc(al, &args, None).unwrap();
    assert_eq!(f.sim.alloc_calls() - calls, 3, "latched: no second refusal");
    n.dmem().free(m).unwrap();
    n.dmem().free(m2).unwrap();
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
        0
    );
    // The latch holds even if the driver takes alignments again, until the next init.
    f.sim.set_aligned_alloc(true);
    let m = n.dmem().alloc(al, &args, None).unwrap();
    // SAFETY: live.
    assert!(n.dmem().info(m).unwrap().align_offset > 0, "still emulated");
    n.dmem().free(m).unwrap();
    n.close().unwrap();
    n.init(&InitOptions::default()).unwrap();
    let al = core0_allocator(&n);
    let m = n.dmem().alloc(al, &args, None).unwrap();
    // SAFETY: live.
    let offset = n.dmem().info(m).unwrap().align_offset;
    assert_eq!(offset, 0, "init asks the device again");
    n.dmem().free(m).unwrap();
}

#[test]
fn destroy_keeps_shared_dmems_until_their_last_reference() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let pc = core0_allocator(&n);
    let pcore = n.dmem().allocator_core(pc).unwrap();
    let al = n
        .dmem()
        .allocator_create(pcore, dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_MODEL)
        .unwrap();
    let shared = n
        .dmem()
        .alloc(al, &AllocArgs::device(4096, 0, TENSOR, "shared"), None)
        .unwrap();
    let _own = n
        .dmem()
        .alloc(al, &AllocArgs::device(8192, 0, TENSOR, "own"), None)
        .unwrap();
    n.dmem().acquire_reference(shared).unwrap();
    assert_list_valid(&n, al);
    assert_eq!(
        n.dmem().allocator_usage(al),
        Ok(AllocatorUsage {
            dmems: 2,
            bytes: 4096 + 8192
        })
    );
    n.dmem().allocator_destroy(al).unwrap();
    assert!(
        matches!(n.dmem().allocator_check(al), Err(Error::InvalidHandle(_))),
        "a destroyed allocator is not checkable"
    );
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
        4096,
        "only the shared dmem survives"
    );
    n.dmem().free(shared).unwrap();
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
        0
    );
}

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        core: u32,
        host: bool,
        usage: u32,
        kib: u64,
        align_log: u8,
    },
    Free(usize),
    Acquire(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..8, any::<bool>(), 0u32..22, 1u64..4096, 0u8..14).prop_map(|(core, host, usage, kib, align_log)| Op::Alloc { core, host, usage, kib, align_log }),
        3 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::Acquire),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Reference model: a list of live (dmem, core, host, usage, bytes, refs). After every step
    /// the ledger equals the model's sums, live device ranges never overlap, and at the end
    /// everything returns to empty with the driver holding nothing.
    #[test]
    fn ledger_matches_reference_model(ops in proptest::collection::vec(op(), 1..120), aligned in any::<bool>()) {
        let mut cfg = SimConfig::new(Preset::Trn2, 1);
        cfg.aligned_alloc = aligned;
        let f = Fixture::up(cfg, InitOptions::default());
        let n = f.nrt();
        let mut live: Vec<(nrt_core::DmemHandle, u32, bool, u32, u64, u32)> = Vec::new();
        // What the runtime itself keeps on each core's GLOBAL allocator.
        let base: Vec<u64> = (0..8).map(|c| n.dmem().allocator_usage(n.dmem().core_allocator(nrt_core::PhysicalCore::new(0, c)).unwrap()).unwrap().dmems).collect();
        for op in ops {
            match op {
                Op::Alloc { core, host, usage, kib, align_log } => {
                    let al = n.dmem().core_allocator(nrt_core::PhysicalCore::new(0, core)).unwrap();
                    let align = if align_log == 0 { 0 } else { 1u64 << (align_log + 5) };
                    let a = if host { AllocArgs::host(kib * 1024, dma_mem_usage_type_t::from_raw(usage).unwrap(), "p") } else {
                        AllocArgs::device(kib * 1024, core / 2, dma_mem_usage_type_t::from_raw(usage).unwrap(), "p").aligned(align)
                    };
                    match n.dmem().alloc(al, &a, None) {
                        Ok(m) => {
                            // SAFETY: live.
                            let bytes = n.dmem().info(m).unwrap().allocated_size;
                            live.push((m, core, host, usage, bytes, 1));
                        }
                        Err(e) => prop_assert!(
                            host && align != 0
                                || matches!(e, Error::DeviceOom{..} | Error::HostOom{..})
                                || (host && matches!(e, Error::UsageInvalidForLocation{..})
                                    && constants::HOST_CATEGORY_INVALID_USAGE_INDICES.contains(&(usage as usize))),
                            "{e}"
                        ),
                    }
                }
                Op::Free(i) if !live.is_empty() => {
                    let i = i % live.len();
                    n.dmem().free(live[i].0).unwrap();
                    live[i].5 -= 1;
                    if live[i].5 == 0 { live.swap_remove(i); }
                }
                Op::Acquire(i) if !live.is_empty() => {
                    let i = i % live.len();
                    n.dmem().acquire_reference(live[i].0).unwrap();
                    live[i].5 += 1;
                }
                _ => {}
            }
            for core in 0..8u32 {
                for usage in 0..23usize {
                    let want = |host: bool| live.iter().filter(|l| l.1 == core && l.2 == host && (usage == 22 || l.3 as usize == usage)).map(|l| l.4).sum::<u64>();
                    prop_assert_eq!(n.ledger().device(PhysicalCore::new(0, core), UsageSel::from_index(usage).unwrap()), want(false));
                    prop_assert_eq!(n.ledger().host(PhysicalCore::new(0, core), UsageSel::from_index(usage).unwrap()), want(true));
                }
            }
            // Every core's list is whole and holds the runtime's own dmems plus the model's.
            for core in 0..8u32 {
                let al = n.dmem().core_allocator(nrt_core::PhysicalCore::new(0, core)).unwrap();
                assert_list_valid(&n, al);
                let mine = live.iter().filter(|l| l.1 == core).count() as u64;
                prop_assert_eq!(n.dmem().allocator_usage(al).unwrap().dmems, base[core as usize] + mine);
            }
            // `memory_usage[4]`: device bytes per HBM channel (device allocations go to core / 2).
            let hbm = n.ledger().hbm(0);
            for (h, have) in hbm.iter().enumerate() {
                let want: u64 = live.iter().filter(|l| !l.2 && (l.1 / 2) as usize == h).map(|l| l.4).sum();
                prop_assert_eq!(*have, want, "HBM {}", h);
            }
            let mut ranges: Vec<(u64, u64, u32)> = live.iter().filter(|l| !l.2).map(|l| {
                // SAFETY: live.
                let d = n.dmem().info(l.0).unwrap();
                (d.pa, d.pa + d.size + d.align_offset, d.tdram_channel)
            }).collect();
            ranges.sort();
            for w in ranges.windows(2) {
                prop_assert!(w[0].1 <= w[1].0, "overlap {:?}", w);
            }
        }
        for l in &live {
            for _ in 0..l.5 { n.dmem().free(l.0).unwrap(); }
        }
        for core in 0..8 { prop_assert_eq!(n.ledger().device(PhysicalCore::new(0, core), UsageSel::Total), 0); }
        prop_assert_eq!(n.ledger().hbm(0), [0; 4]);
        n.close().unwrap();
        prop_assert_eq!(n.driver_pool_bytes_in_use().unwrap(), 0);
    }
}

/// The ledger lock (spec §3.4, `dma_mem_log_t.lock`): while threads allocate and free on two
/// cores under two usage types, every snapshot is consistent (each row's categories sum to its
/// `[nc][22]` total) and a peak reset never leaves a peak below the current usage.
#[test]
fn ledger_snapshots_stay_consistent_under_concurrent_allocation() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const COLLECTIVES: dma_mem_usage_type_t = dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_CC;
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for core in 0..2u32 {
            let (f, stop) = (&f, &stop);
            s.spawn(move || {
                let n = f.nrt();
                let al = n
                    .dmem()
                    .core_allocator(nrt_core::PhysicalCore::new(0, core))
                    .unwrap();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let a = n
                        .dmem()
                        .alloc(
                            al,
                            &AllocArgs::device(4096 * (1 + i % 7), 0, TENSOR, "a"),
                            None,
                        )
                        .unwrap();
                    let b = n
                        .dmem()
                        .alloc(al, &AllocArgs::device(8192, 0, COLLECTIVES, "b"), None)
                        .unwrap();
                    n.dmem().free(a).unwrap();
                    n.dmem().free(b).unwrap();
                    i += 1;
                }
            });
        }
        let _stop = StopOnDrop(&stop); // stops the writers if an assertion fails
        let n = f.nrt();
        for round in 0..3_000 {
            let dev = n.ledger().snapshot(0).device;
            for (nc, row) in dev.iter().enumerate() {
                let sum: u64 = row[..22].iter().sum();
                assert_eq!(
                    sum, row[22],
                    "round {round}: core {nc}'s categories vs its total"
                );
            }
            if round % 3 == 0 {
                n.ledger().reset_peak(LogicalCore::new(0)).unwrap();
            }
            let u = n.ledger().logical_core_usage(LogicalCore::new(0)).unwrap();
            for c in 0..23 {
                assert!(
                    u.device_peak[c] >= u.device[c],
                    "round {round}: peak below usage ({c})"
                );
            }
            if round % 100 == 0 {
                // The lists the writers are linking into and out of are whole at every look.
                for core in 0..2 {
                    assert_list_valid(
                        &n,
                        n.dmem()
                            .core_allocator(nrt_core::PhysicalCore::new(0, core))
                            .unwrap(),
                    );
                }
            }
        }
    });
    let n = f.nrt();
    assert_eq!(
        n.ledger().snapshot(0),
        nrt_core::LedgerSnapshot {
            device: [[0; 23]; 8],
            host: [[0; 23]; 8]
        }
    );
    for core in 0..8 {
        assert_list_valid(
            &n,
            n.dmem()
                .core_allocator(nrt_core::PhysicalCore::new(0, core))
                .unwrap(),
        );
    }
    n.close().unwrap();
}

/// The OOM dump's "largest live allocations" (spec §3.4) while other threads allocate and
/// free: every listed line describes one allocation — its size and its hint agree — even
/// when the dmem it was read from is freed and its slot reused during the dump.
#[test]
fn oom_dump_lines_stay_whole_under_concurrent_allocation() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const MIB: u64 = 1 << 20;
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for core in 0..2u32 {
            let (f, stop) = (&f, &stop);
            s.spawn(move || {
                let n = f.nrt();
                let al = n
                    .dmem()
                    .core_allocator(nrt_core::PhysicalCore::new(0, core))
                    .unwrap();
                let hints: Vec<String> = (1..=8).map(|k| format!("mib-{k}")).collect();
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let k = 1 + (i * 7 + core as usize) % 8;
                    let m = n
                        .dmem()
                        .alloc(
                            al,
                            &AllocArgs::device(k as u64 * MIB, 0, TENSOR, &hints[k - 1]),
                            None,
                        )
                        .unwrap();
                    n.dmem().free(m).unwrap();
                    i += 1;
                }
            });
        }
        let _stop = StopOnDrop(&stop);
        let n = f.nrt();
        let mut listed = 0;
        for round in 0..1_500 {
            let mut out = String::new();
            n.ledger().dump(&mut out, 0, None, 4).unwrap();
            for line in out
                .lines()
                .skip_while(|l| !l.contains("largest live allocations"))
                .skip(1)
            {
                let mb: f64 = line.split_whitespace().next().unwrap()[..]
                    .trim_end_matches("MB")
                    .parse()
                    .unwrap();
                let hint = line.split_whitespace().last().unwrap();
                assert_eq!(
                    hint,
                    format!("mib-{mb}"),
                    "round {round}: torn line {line:?}"
                );
                listed += 1;
            }
        }
        assert!(listed > 0, "the dump never listed an allocation");
    });
    f.nrt().close().unwrap();
}

/// What an integrator leaves behind through the public dmem calls is reclaimed by `close`:
/// an allocator it created and never destroyed (with its dmems), and an extra reference on a
/// GLOBAL dmem that outlives its allocator. Afterwards every dmem call is `Closed`.
#[test]
fn close_reclaims_what_the_dmem_api_left_behind() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let pcore = n
        .dmem()
        .allocator_core(
            n.dmem()
                .core_allocator(nrt_core::PhysicalCore::new(0, 3))
                .unwrap(),
        )
        .unwrap();
    let mine = n
        .dmem()
        .allocator_create(pcore, dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_MODEL)
        .unwrap();
    let a = n
        .dmem()
        .alloc(mine, &AllocArgs::device(3 << 20, 1, TENSOR, "mine"), None)
        .unwrap();
    let global = core0_allocator(&n);
    let shared = n
        .dmem()
        .alloc(
            global,
            &AllocArgs::device(1 << 20, 0, TENSOR, "shared"),
            None,
        )
        .unwrap();
    n.dmem().acquire_reference(shared).unwrap();
    assert!(n.driver_pool_bytes_in_use().unwrap() >= 4 << 20);
    n.close().unwrap();
    assert_eq!(
        n.driver_pool_bytes_in_use().unwrap(),
        0,
        "close left memory behind"
    );
    for (name, s) in n.state().arena_stats() {
        assert_eq!(s.live, 0, "close left {name} slots live");
    }
    assert_eq!(n.dmem().free(a), Err(Error::Closed));
    assert_eq!(n.dmem().free(shared), Err(Error::Closed));
    assert_eq!(n.dmem().acquire_reference(shared), Err(Error::Closed));
    assert_eq!(
        n.dmem()
            .alloc(global, &AllocArgs::device(4096, 0, TENSOR, "late"), None),
        Err(Error::Closed)
    );
    assert_eq!(n.dmem().allocator_destroy(mine), Err(Error::Closed));
    assert_eq!(n.dmem().allocator_usage(mine), Err(Error::Closed));
}

/// The limit of `nrt_get_vnc_memory_stats` is the HBM size (spec §7.4 `aws_hal_get_hbm_size()`)
/// of the HBM the logical core allocates from, whatever the LNC size: at LNC 1 on trn2 two
/// cores share one 24 GiB HBM and each may fill most of it, so each reports 24 GiB (and a core
/// that fills its own HBM stays within it; allocations on other HBMs count as used too).
#[test]
fn the_limit_is_the_hbm_size_at_every_lnc() {
    const GIB: u64 = 1 << 30;
    let cases = [
        (Preset::Trn2, Some(1), 24 * GIB),
        (Preset::Trn2, Some(2), 24 * GIB),
        (Preset::Trn1, None, 16 * GIB),
    ];
    for (preset, lnc, limit) in cases {
        let opts = InitOptions {
            vcores: nrt_core::vcore::VcoreOptions {
                lnc_size: lnc,
                ..Default::default()
            },
            ..Default::default()
        };
        let f = Fixture::up(SimConfig::new(preset, 1), opts);
        let n = f.nrt();
        for vnc in n.logical_cores() {
            let s = n.ledger().memory_stats(vnc).unwrap();
            assert_eq!(s.bytes_limit, limit, "{preset:?} lnc {lnc:?} vnc {vnc}");
        }
        if lnc == Some(1) {
            // Core 0 takes 20 GiB of the HBM it shares with core 1.
            let al = core0_allocator(&n);
            let big = n
                .dmem()
                .alloc(al, &AllocArgs::device(20 * GIB, 0, TENSOR, "big"), None)
                .unwrap();
            let s = n.ledger().memory_stats(LogicalCore::new(0)).unwrap();
            assert!(s.bytes_used <= s.bytes_limit, "{s:?}");
            n.dmem().free(big).unwrap();
        }
    }
}

/// `init` after `close` on the same state: every gated call works again (the close gate is
/// reopened), and the old runtime's pointers stay dead.
#[test]
fn the_runtime_works_again_after_close_and_init() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let old = n
        .dmem()
        .alloc(
            core0_allocator(&n),
            &AllocArgs::device(4096, 0, TENSOR, "old"),
            None,
        )
        .unwrap();
    n.close().unwrap();
    n.init(&InitOptions::default()).unwrap();
    let al = core0_allocator(&n);
    let m = n
        .dmem()
        .alloc(al, &AllocArgs::device(1 << 20, 0, TENSOR, "new"), None)
        .unwrap();
    assert_eq!(
        n.dmem().allocator_usage(al),
        Ok(AllocatorUsage {
            dmems: 1,
            bytes: 1 << 20
        })
    );
    n.dmem().free(m).unwrap();
    assert!(n.dmem().free(old).is_err(), "a pointer from before close");
    let t = device_tensor(&n, 0, 4096, "t");
    n.tensors().free(t).unwrap();
    close_and_check_drained(&n);
}

/// The runtime's own allocators are the runtime's to destroy: the public destroy refuses a
/// core's GLOBAL allocator (its tensors and shared pages live there) and a loaded model's MODEL
/// allocator (its unload would otherwise destroy whatever reused the slot), and everything on
/// them survives. An allocator the caller made is the caller's to destroy.
#[test]
fn the_runtimes_own_allocators_cannot_be_destroyed_through_the_api() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let global = core0_allocator(&n);
    let t = device_tensor(&n, 0, 4096, "t");
    let allocs = [nrt_core::model::ModelAlloc {
        usage: TENSOR,
        location: dma_mem_location_t::TONGA_DRAM,
        size: 1 << 20,
        align: 0,
        hint: "w",
    }];
    let h = n
        .models()
        .load(
            LogicalCore::new(0),
            &nrt_core::model::ModelSpec {
                name: "m",
                subgraphs: 1,
                allocations: &allocs,
                ..Default::default()
            },
        )
        .unwrap();
    let mut model_al = None;
    n.models()
        .for_each_dmem(h, |_, d| model_al = d.allocator)
        .unwrap();
    let before = snapshot(&n);
    let model_al = model_al.expect("the model's MODEL allocator");
    for al in [global, model_al] {
        assert_eq!(
            n.dmem().allocator_destroy(al).map_err(|e| e.status()),
            Err(NRT_STATUS::NRT_INVALID)
        );
    }
    assert_eq!(snapshot(&n), before);
    let pcore = n.dmem().allocator_core(global).unwrap();
    let mine = n
        .dmem()
        .allocator_create(pcore, dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_MODEL)
        .unwrap();
    n.dmem().allocator_destroy(mine).unwrap();
    n.models().unload(h).unwrap();
    n.tensors().free(t).unwrap();
    close_and_check_drained(&n);
}

/// The inspection calls read what `init` and `close` rewrite (the device count, the geometry,
/// the ledger, the logical-core table), so they read it inside the state gate: a reader racing
/// close → init → close … gets from each call either a whole answer or "not initialised". (A
/// torn read without the gate is a data race that this test rarely catches in the act; the
/// gate rules it out by construction, and this pins the answers' contract.)
#[test]
fn inspection_racing_close_and_init_sees_a_whole_runtime_or_none() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    use std::sync::atomic::AtomicU32;
    let stop = AtomicBool::new(false);
    let (seen_up, seen_down) = (AtomicU32::new(0), AtomicU32::new(0));
    std::thread::scope(|s| {
        s.spawn(|| {
            let _stop = StopOnDrop(&stop);
            // At least 300 cycles, and on until the reader has seen both states (a loaded
            // machine may not schedule it during the first 300), with a bound.
            for i in 0..200_000 {
                n.close().unwrap();
                n.init(&InitOptions::default()).unwrap();
                let seen =
                    seen_up.load(Ordering::Relaxed) > 0 && seen_down.load(Ordering::Relaxed) > 0;
                if i >= 300 && seen {
                    break;
                }
                if i >= 300 {
                    std::thread::yield_now();
                }
            }
        });
        let (mut up, mut down) = (0u32, 0u32);
        while !stop.load(Ordering::Relaxed) {
            let devices = n.num_devices();
            let g = n.geom(0);
            let lnc = n.logical_core_size();
            let vc = n.inspector().logical_core_entry(LogicalCore::new(0));
            let rows = n.ledger().snapshot(0).device;
            // Each answer is whole on its own (the runtime may change between two calls).
            assert!(devices == 0 || devices == 1, "{devices} devices");
            assert!(g.channels == 0 || (g.channels, g.cores) == (4, 8), "{g:?}");
            assert!(lnc == 0 || lnc == 2, "lnc {lnc}");
            match vc {
                Ok(v) => assert_eq!(v.cores().len(), 2, "{v:?}"),
                Err(e) => assert!(matches!(e, Error::Closed | Error::Uninitialized), "{e}"),
            }
            assert!(rows.iter().all(|r| r[22] == r[..22].iter().sum::<u64>()));
            if devices == 1 {
                up += 1;
                seen_up.store(up, Ordering::Relaxed);
            } else {
                down += 1;
                seen_down.store(down, Ordering::Relaxed);
            }
        }
        assert!(up > 0, "never saw the runtime up ({down} down)");
    });
}

/// `close` keeps the tree until the next `init` (a documented difference from libnrt), so a
/// closed runtime can still be inspected: its devices, geometry, logical cores and the zeroed
/// ledger, through the value reads and the [`nrt_core::ledger::Inspector`]. API calls fail
/// with `Closed` (docs/STATES.md), the memory stats among them.
#[test]
fn a_closed_runtime_can_be_inspected_until_init() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let al = core0_allocator(&n);
    let m = n
        .dmem()
        .alloc(al, &AllocArgs::device(1 << 20, 0, TENSOR, "left"), None)
        .unwrap();
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
        1 << 20
    );
    let _ = m; // left for close to reclaim
    n.close().unwrap();
    assert_eq!(n.num_devices(), 1);
    assert_eq!(n.geom(0).channels, 4);
    assert_eq!(n.visible_logical_core_count(), 4);
    assert_eq!(n.logical_core_size(), 2);
    assert_eq!(
        n.logical_core_entry(LogicalCore::new(3)).unwrap_err(),
        Error::Closed
    );
    assert_eq!(
        n.ledger().memory_stats(LogicalCore::new(0)),
        Err(Error::Closed)
    );
    assert_eq!(
        n.ledger().logical_core_usage(LogicalCore::new(0)),
        Err(Error::Closed)
    );
    let ins = n.inspector();
    assert_eq!(
        ins.logical_core_entry(LogicalCore::new(3))
            .unwrap()
            .cores()
            .len(),
        2
    );
    assert_eq!(
        ins.logical_core_usage(LogicalCore::new(0)).unwrap().device[22],
        0
    );
    let stats = ins.memory_stats(LogicalCore::new(0)).unwrap();
    assert_eq!(
        stats.bytes_used, 0,
        "close reclaimed what the dmem API left"
    );
    assert!(stats.bytes_limit > 0);
    assert_eq!(stats.bytes_peak, 1 << 20, "peaks survive close");
    assert_eq!(n.ledger().snapshot(0).device[0][22], 0);
    assert_eq!(n.ledger().device_totals(0).unwrap().device_bytes, 0);
    let mut dump = String::new();
    n.ledger().dump(&mut dump, 0, None, 4).unwrap();
    assert!(dump.contains("ND 0 memory usage"), "{dump}");
    assert_eq!(
        n.dmem().core_allocator(nrt_core::PhysicalCore::new(0, 0)),
        Err(Error::Closed)
    );
    assert_eq!(
        n.dmem()
            .alloc(al, &AllocArgs::device(4096, 0, TENSOR, "x"), None),
        Err(Error::Closed)
    );
    n.init(&InitOptions::default()).unwrap();
    assert_eq!(
        n.ledger()
            .memory_stats(LogicalCore::new(0))
            .unwrap()
            .bytes_peak,
        0,
        "init starts afresh"
    );
}

/// A number in MB printed right after `label` in `line` (`"largest free block 1.250MB"`).
fn mb_after(line: &str, label: &str) -> Option<f64> {
    let rest = &line[line.find(label)? + label.len()..];
    rest.trim_start().split("MB").next()?.trim().parse().ok()
}

#[derive(Clone, Debug)]
enum OomOp {
    Alloc { bytes: u64, align_log2: u8 },
    Free(usize),
}

fn oom_op() -> impl Strategy<Value = OomOp> {
    prop_oneof![
        3 => (1u64..=512 * 1024, prop_oneof![Just(0u8), 6u8..20])
            .prop_map(|(bytes, align_log2)| OomOp::Alloc { bytes, align_log2 }),
        4 => (512 * 1024 + 1..14u64 << 20, prop_oneof![Just(0u8), 12u8..25])
            .prop_map(|(bytes, align_log2)| OomOp::Alloc { bytes, align_log2 }),
        3 => any::<usize>().prop_map(OomOp::Free),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// The OOM report never contradicts itself. On every device OOM (random
    /// sizes, alignments, frees; driver alignment native or emulated), the report has one
    /// "why:" line that is not "the driver refused" (no fault was injected, the pools have
    /// nodes to spare), and the failing channel's line shows a largest free block below the
    /// failed request — and, for a small request, a small-object region block below it too.
    #[test]
    fn the_oom_report_never_shows_a_block_that_would_have_fitted(
        aligned_alloc in any::<bool>(),
        ops in proptest::collection::vec(oom_op(), 1..60),
    ) {
        let cfg = SimConfig {
            aligned_alloc,
            ..SimConfig::scaled_down(Preset::Trn1, 1)
        };
        let f = Fixture::up(cfg, InitOptions::default());
        let n = f.nrt();
        let al = core0_allocator(&n);
        let mut live = Vec::new();
        for op in ops {
            match op {
                OomOp::Alloc { bytes, align_log2 } => {
                    let align = if align_log2 == 0 { 0 } else { 1u64 << align_log2 };
                    let a = AllocArgs::device(bytes, 0, TENSOR, "t").aligned(align);
                    match n.dmem().alloc(al, &a, None) {
                        Ok(m) => live.push(m),
                        Err(e @ Error::DeviceOom { size, .. }) => {
                            let mut dump = String::new();
                            n.ledger().last_oom_dump(&mut dump).unwrap();
                            let why: Vec<&str> =
                                dump.lines().filter(|l| l.starts_with("why: ")).collect();
                            prop_assert_eq!(why.len(), 1, "{}", dump);
                            prop_assert!(!why[0].contains("refused"), "{}", dump);
                            if align != 0 {
                                prop_assert!(
                                    e.to_string().contains("alignment boundaries"),
                                    "{}", e
                                );
                            }
                            let line = dump
                                .lines()
                                .find(|l| l.trim_start().starts_with("HBM 0:"))
                                .unwrap();
                            let requested = size as f64 / (1024.0 * 1024.0);
                            // The report prints MB to three decimals: a block just below the
                            // request may print up to half a unit above it.
                            let below = |mb: f64| mb - 0.0005 < requested;
                            let largest = mb_after(line, "largest free block").unwrap();
                            prop_assert!(below(largest), "{} MB: {}", requested, dump);
                            if size <= 512 * 1024 {
                                let small_region = line
                                    .split("small-object region")
                                    .nth(1)
                                    .and_then(|r| mb_after(r, "largest"))
                                    .unwrap();
                                prop_assert!(below(small_region), "{}", dump);
                            }
                        }
                        Err(e) => prop_assert!(false, "unexpected {}", e),
                    }
                }
                OomOp::Free(k) => {
                    if !live.is_empty() {
                        n.dmem().free(live.swap_remove(k % live.len())).unwrap();
                    }
                }
            }
        }
        for m in live {
            n.dmem().free(m).unwrap();
        }
        n.close().unwrap();
    }
}

/// Each of the three causes, through the runtime, as the report's "why:" line says it. On the
/// TLSF placement, whose routing keeps requests above 512 KiB out of the small-object region
/// (under genalloc the 12 MiB request below would fall back there and succeed).
#[test]
fn the_oom_report_says_why_in_one_line() {
    const MIB: u64 = 1 << 20;
    let why = |n: &nrt_core::Nrt<'_>| {
        let mut dump = String::new();
        n.ledger().last_oom_dump(&mut dump).unwrap();
        let line = dump.lines().find(|l| l.starts_with("why: ")).unwrap_or("");
        (line.to_string(), dump)
    };
    let f = Fixture::up(
        SimConfig {
            placement: Placement::Tlsf,
            ..SimConfig::scaled_down(Preset::Trn1, 1)
        },
        InitOptions::default(),
    );
    let n = f.nrt();
    let al = core0_allocator(&n);
    let dev = |size: u64| AllocArgs::device(size, 0, TENSOR, "t");
    // 32 MiB main pool, 16 MiB small-object region: 8 + 8 + 8 MiB, free the middle one
    let a: Vec<_> = (0..3)
        .map(|_| n.dmem().alloc(al, &dev(8 * MIB), None).unwrap())
        .collect();
    n.dmem().free(a[1]).unwrap();
    // 16 MiB free in the main pool, in two 8 MiB blocks: no block of 12 MiB
    n.dmem().alloc(al, &dev(12 * MIB), None).unwrap_err();
    let (w, dump) = why(&n);
    assert!(
        w.contains("no free block of 12.000MB: largest free block 8.000MB; ")
            && w.contains("16.000MB of them in the small-object region"),
        "{dump}"
    );
    assert!(dump.contains("HBM 0: 32.000MB free"), "{dump}");
    assert!(
        dump.contains("largest free block 8.000MB, small-object region"),
        "{dump}"
    );
    // 40 MiB: more than the channel's 32 MiB free
    n.dmem().alloc(al, &dev(40 * MIB), None).unwrap_err();
    let (w, dump) = why(&n);
    assert!(
        w.contains("HBM 0 is full: 32.000MB free, 40.000MB needed"),
        "{dump}"
    );
    // Fill one 8 MiB hole: the main pool's one free block is then [24, 32) or [40, 48) MiB
    // of the channel, and neither holds a 16 MiB boundary with 4 MiB after it.
    let b = n.dmem().alloc(al, &dev(8 * MIB), None).unwrap();
    n.dmem()
        .alloc(al, &dev(4 * MIB).aligned(16 * MIB), None)
        .unwrap_err();
    let (w, dump) = why(&n);
    assert!(
        w.contains("alignment: HBM 0 has free blocks of up to 8.000MB")
            && w.contains("running out of alignment boundaries"),
        "{dump}"
    );
    assert!(
        dump.contains("largest free block 0.000MB at 16777216-byte alignment"),
        "{dump}"
    );
    // an injected fault: the figures say it fits, and the report says so
    f.sim.fail_nth_alloc(1);
    n.dmem().alloc(al, &dev(MIB), None).unwrap_err();
    let (w, dump) = why(&n);
    assert!(
        w.contains("the driver refused 1.000MB on HBM 0 although"),
        "{dump}"
    );
    for m in [a[0], a[2], b] {
        n.dmem().free(m).unwrap();
    }
    n.close().unwrap();
}

/// The per-core ledger: allocations racing on two cores of one device on
/// different HBM channels leave every device figure the sum of the cores' — the device total,
/// the per-channel bytes, each row its `[nc][22]` — and the device peak at least the final
/// total and at most the sum of the cores' peaks.
#[test]
fn racing_cores_keep_the_device_ledger_the_sum_of_theirs() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    // Physical cores 0 and 2: logical cores 0 and 1 at LNC 2, HBM 0 and 1.
    let cores = [0u32, 2];
    std::thread::scope(|s| {
        for &c in &cores {
            s.spawn(move || {
                let al = n
                    .dmem()
                    .core_allocator(nrt_core::PhysicalCore::new(0, c))
                    .unwrap();
                let mut kept = Vec::new();
                for i in 0..2000u64 {
                    let size = 4096 * (1 + i % 7);
                    let m = n
                        .dmem()
                        .alloc(al, &AllocArgs::device(size, 0, TENSOR, "race"), None)
                        .unwrap();
                    if i % 100 == 0 {
                        kept.push(m);
                    } else {
                        n.dmem().free(m).unwrap();
                    }
                }
                kept.len()
            });
        }
    });
    let per_core: u64 = cores
        .iter()
        .map(|&c| n.ledger().device(PhysicalCore::new(0, c), UsageSel::Total))
        .sum();
    assert!(per_core > 0);
    let totals = n.ledger().device_totals(0).unwrap();
    let (device, device_peak) = (totals.device_bytes, totals.device_peak);
    assert_eq!(device, per_core);
    assert_eq!(n.ledger().hbm(0).iter().sum::<u64>(), per_core);
    let rows = n.ledger().snapshot(0).device;
    for row in rows {
        assert_eq!(row[..22].iter().sum::<u64>(), row[22]);
    }
    let stats0 = n.ledger().memory_stats(LogicalCore::new(0)).unwrap();
    let stats1 = n.ledger().memory_stats(LogicalCore::new(1)).unwrap();
    assert!(
        device_peak >= device,
        "peak {device_peak} below the total {device}"
    );
    assert!(
        device_peak <= stats0.bytes_peak + stats1.bytes_peak,
        "peak {device_peak} above the cores' peaks"
    );
}
