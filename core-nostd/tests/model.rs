//! Many models on one core (spec §4–§6, §8): co-residence, all-or-nothing loads, the shared
//! ext-isa library, scratchpad pages, carveout checks and every bad input.

mod common;

use common::*;
use nrt_core::abi::*;
use nrt_core::dmem::AllocArgs;
use nrt_core::driver::Driver;
use nrt_core::ledger::UsageSel;
use nrt_core::model::{ModelAlloc, ModelSpec, SbufCarveout};
use nrt_core::scratchpad::ScratchpadInfo;
use nrt_core::sim::{Preset, SimConfig};
use nrt_core::tensor::Placement;
use nrt_core::ulib::UlibRequest;
use nrt_core::ulib::UlibStats;
use nrt_core::LogicalCore;
use nrt_core::PhysicalCore;
use nrt_core::{Error, HandleError, HandleFault, HandleKind, InitOptions, ModelHandle};

const DEV: dma_mem_location_t = dma_mem_location_t::TONGA_DRAM;
const HOST: dma_mem_location_t = dma_mem_location_t::HOST_DRAM;

fn allocs() -> Vec<ModelAlloc<'static>> {
    vec![
        ModelAlloc {
            usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_WEIGHT,
            location: DEV,
            size: 3 << 20,
            align: 0,
            hint: "weights",
        },
        ModelAlloc {
            usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_INSTR_PE,
            location: DEV,
            size: 256 << 10,
            align: 4096,
            hint: "instr",
        },
        ModelAlloc {
            usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_DMA_RING,
            location: DEV,
            size: 64 << 10,
            align: 0,
            hint: "qPoolIO0",
        },
        ModelAlloc {
            usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_IO,
            location: HOST,
            size: 16 << 10,
            align: 0,
            hint: "ioq",
        },
    ]
}

fn spec<'a>(name: &'a str, a: &'a [ModelAlloc<'a>]) -> ModelSpec<'a> {
    ModelSpec {
        name,
        subgraphs: 1,
        allocations: a,
        ..Default::default()
    }
}

/// Writes `pattern` into every device dmem of the model (through the driver) and returns the
/// handles, so a later read can prove the bytes were untouched.
fn stamp(f: &Fixture, h: ModelHandle, pattern: u8) -> Vec<(u64, u64)> {
    let n = f.nrt();
    let mut out = Vec::new();
    let st = n.models().info(h).unwrap();
    assert!(st.allocations > 0);
    n.models()
        .for_each_dmem(h, |_, e| {
            if e.info.mem_type == DEV as u32 {
                out.push((e.info.mem_handle, e.info.size));
            }
        })
        .unwrap();
    for (handle, size) in &out {
        f.sim
            .copy_in(0, *handle, 0, &vec![pattern; (*size).min(8192) as usize])
            .unwrap();
    }
    out
}

fn check_stamp(f: &Fixture, handles: &[(u64, u64)], pattern: u8) {
    for (handle, size) in handles {
        let mut buf = vec![0u8; (*size).min(8192) as usize];
        f.sim.copy_out(0, *handle, 0, &mut buf).unwrap();
        assert!(
            buf.iter().all(|b| *b == pattern),
            "bytes of another model changed"
        );
    }
}

#[test]
fn three_models_share_a_core_and_unload_frees_exactly_one() {
    let f = Fixture::up(
        SimConfig::scaled_down(Preset::Trn2, 1),
        InitOptions::default(),
    );
    let n = f.nrt();
    let a = allocs();
    let h1 = n
        .models()
        .load(LogicalCore::new(0), &spec("m1", &a))
        .unwrap();
    let after1 = n
        .ledger()
        .memory_stats(LogicalCore::new(0))
        .unwrap()
        .bytes_used;
    let h2 = n
        .models()
        .load(LogicalCore::new(0), &spec("m2", &a))
        .unwrap();
    let after2 = n
        .ledger()
        .memory_stats(LogicalCore::new(0))
        .unwrap()
        .bytes_used;
    let h3 = n
        .models()
        .load(LogicalCore::new(0), &spec("m3", &a))
        .unwrap();
    assert!(h1.h_model().id != 0 && h2.h_model().id != 0 && h3.h_model().id != 0);
    assert!(h1 != h2 && h2 != h3 && h1 != h3);
    let mut on = [ModelHandle::from_parts(0, 0, 0); 8];
    assert_eq!(n.models().on_core(LogicalCore::new(0), &mut on).unwrap(), 3);
    let s1 = stamp(&f, h1, 0x11);
    let s3 = stamp(&f, h3, 0x33);
    let i1 = n.models().info(h1).unwrap();
    let i3 = n.models().info(h3).unwrap();
    let ledger_before = n.ledger().logical_core_usage(LogicalCore::new(0)).unwrap();
    let m2_bytes = after2 - after1;
    n.models().unload(h2).unwrap();
    let ledger_after = n.ledger().logical_core_usage(LogicalCore::new(0)).unwrap();
    assert_eq!(
        ledger_before.device[22] - ledger_after.device[22],
        m2_bytes,
        "only m2's bytes went"
    );
    assert_eq!(n.models().info(h1).unwrap(), i1);
    assert_eq!(n.models().info(h3).unwrap(), i3);
    check_stamp(&f, &s1, 0x11);
    check_stamp(&f, &s3, 0x33);
    assert_eq!(n.models().on_core(LogicalCore::new(0), &mut on).unwrap(), 2);
    assert_eq!(
        n.models().unload(h2),
        Err(Error::InvalidHandle(HandleError {
            kind: HandleKind::Model,
            fault: HandleFault::Stale
        })),
        "double unload"
    );
    let zero = ModelHandle::from_parts(0, 0, h1.to_parts().2);
    assert_eq!(
        n.models().unload(zero).unwrap_err().status(),
        NRT_STATUS::NRT_INVALID_HANDLE
    );
    // Teardown with models still loaded returns every byte to the driver.
    n.close().unwrap();
    assert_eq!(n.driver_pool_bytes_in_use().unwrap(), 0);
}

#[test]
fn a_failure_at_every_allocation_point_rolls_back_exactly() {
    let f = Fixture::up(SimConfig::new(Preset::Trn1, 1), InitOptions::default());
    let n = f.nrt();
    let a = allocs();
    let mut s = spec("big", &a);
    s.subgraphs = 1;
    s.scratchpad_bytes = 9 << 20;
    s.gpsimd_libs = Some(UlibRequest {
        count: 1,
        bytes: 65536,
    });
    // Count the driver allocations one successful load makes.
    let c0 = f.sim.alloc_calls();
    let h = n.models().load(LogicalCore::new(0), &s).unwrap();
    let points = f.sim.alloc_calls() - c0;
    n.models().unload(h).unwrap();
    n.ulib_unstage_for_test(PhysicalCore::new(0, 0));
    assert!(points >= 8, "allocations: {points}");
    for k in 1..=points {
        let before = snapshot(&n);
        let arenas = n.state().arena_stats().map(|(name, s)| (name, s.live));
        f.sim.fail_nth_alloc(k);
        let e = n.models().load(LogicalCore::new(0), &s).unwrap_err();
        f.sim.clear_faults();
        // Device ENOMEM is NRT_RESOURCE; the host IO queue's is NRT_FAIL_HOST_MEM_ALLOC (§3.2).
        let host_point = matches!(e, Error::HostOom { .. });
        assert_eq!(
            e.status(),
            if host_point {
                NRT_STATUS::NRT_FAIL_HOST_MEM_ALLOC
            } else {
                NRT_STATUS::NRT_RESOURCE
            },
            "point {k}: {e}"
        );
        assert_eq!(snapshot(&n), before, "point {k} left memory behind");
        assert_eq!(
            n.state().arena_stats().map(|(name, s)| (name, s.live)),
            arenas,
            "point {k} leaked metadata"
        );
        assert_eq!(
            n.ulib_shared_stats(PhysicalCore::new(0, 0)).unwrap(),
            UlibStats::default(),
            "point {k} left a staged ext-isa"
        );
    }
    // And it still loads afterwards.
    n.models().load(LogicalCore::new(0), &s).unwrap();
}

#[test]
fn failed_loads_do_not_shorten_double_free_detection() {
    // A failed load's heaps go straight back to their arenas (nobody saw them), so a caller
    // retrying a load that does not fit does not age a stale dmem pointer of its own into
    // someone else's live allocation.
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let al = core0_allocator(&n);
    let stale = stale_dmem(&n, al);
    let too_big = [
        ModelAlloc {
            usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_INSTR_PE,
            location: DEV,
            size: 4096,
            align: 0,
            hint: "fits",
        },
        ModelAlloc {
            usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_WEIGHT,
            location: DEV,
            size: 1 << 50,
            align: 0,
            hint: "does not",
        },
    ];
    let live = |n: &nrt_core::Nrt<'_>| n.state().arena_stats().map(|(name, s)| (name, s.live));
    let before = (snapshot(&n), live(&n));
    // Each failed load allocated (and gave back) one dmem: as many failures as the quarantine
    // holds would age the stale slot out if they went through it.
    for _ in 0..nrt_core::arena::QUARANTINE {
        let e = n
            .models()
            .load(LogicalCore::new(0), &spec("retry", &too_big))
            .unwrap_err();
        assert_eq!(e.status(), NRT_STATUS::NRT_RESOURCE, "{e}");
    }
    assert_eq!((snapshot(&n), live(&n)), before);
    assert_stale_still_detected(&n, al, stale);
}

#[test]
fn gpsimd_libs_are_checked_before_anything_is_allocated() {
    // On SUNDA the libraries are staged after the scratchpad pages are claimed; a request of
    // no bytes is refused by the spec checks, before a single driver call. No libraries at
    // all (count 0) is a model without any, as before.
    let f = Fixture::up(SimConfig::new(Preset::Trn1, 1), InitOptions::default());
    let n = f.nrt();
    let mut s = ModelSpec {
        name: "sp",
        subgraphs: 1,
        scratchpad_bytes: 4 << 20,
        gpsimd_libs: Some(UlibRequest { count: 1, bytes: 0 }),
        ..Default::default()
    };
    let calls = f.sim.alloc_calls();
    assert_eq!(
        n.models()
            .load(LogicalCore::new(0), &s)
            .unwrap_err()
            .status(),
        NRT_STATUS::NRT_INVALID
    );
    assert_eq!(f.sim.alloc_calls(), calls);
    s.gpsimd_libs = Some(UlibRequest { count: 0, bytes: 0 });
    let h = n.models().load(LogicalCore::new(0), &s).unwrap();
    n.models().unload(h).unwrap();
}

#[test]
fn ext_isa_is_staged_once_per_core_and_shared() {
    let f = Fixture::up(SimConfig::new(Preset::Trn1, 1), InitOptions::default());
    let n = f.nrt();
    let a = allocs();
    let mut s = spec("gp", &a);
    s.gpsimd_libs = Some(UlibRequest {
        count: 1,
        bytes: 65536,
    });
    let hs: Vec<_> = (0..3)
        .map(|_| n.models().load(LogicalCore::new(0), &s).unwrap())
        .collect();
    assert_eq!(
        n.ulib_shared_stats(PhysicalCore::new(0, 0)).unwrap(),
        UlibStats {
            stages: 1,
            users: 3
        }
    );
    let lib_bytes = n.ledger().device(
        PhysicalCore::new(0, 0),
        dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_UCODE_LIB,
    );
    assert!(lib_bytes >= 65536);
    n.models().unload(hs[0]).unwrap();
    n.models().unload(hs[1]).unwrap();
    assert_eq!(
        n.ulib_shared_stats(PhysicalCore::new(0, 0)).unwrap(),
        UlibStats {
            stages: 1,
            users: 1
        }
    );
    assert_eq!(
        n.ledger().device(
            PhysicalCore::new(0, 0),
            dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_UCODE_LIB
        ),
        lib_bytes,
        "shared copy survives"
    );
    // 2..=9 libraries: per-model copies from the model's heap.
    s.gpsimd_libs = Some(UlibRequest {
        count: 3,
        bytes: 4096,
    });
    let h = n.models().load(LogicalCore::new(0), &s).unwrap();
    assert!(!n.models().info(h).unwrap().shared_ulib);
    assert!(
        n.models().info(h).unwrap().by_usage
            [dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_UCODE_LIB as usize]
            > 0
    );
    n.models().unload(h).unwrap();
    // More than 9: NRT_FAILURE, nothing allocated.
    let before = snapshot(&n);
    s.gpsimd_libs = Some(UlibRequest {
        count: 10,
        bytes: 4096,
    });
    let e = n.models().load(LogicalCore::new(0), &s).unwrap_err();
    assert_eq!(
        (e, e.status()),
        (Error::TooManyLibs(10), NRT_STATUS::NRT_FAILURE)
    );
    assert_eq!(snapshot(&n), before);
    // The cap is ucode_stage_libs', which runs on SUNDA only (spec §6): on a trn2 the same
    // model loads, its libraries ignored.
    let f2 = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n2 = f2.nrt();
    let h = n2.models().load(LogicalCore::new(0), &s).unwrap();
    assert_eq!(
        n2.models().info(h).unwrap().by_usage
            [dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_UCODE_LIB as usize],
        0
    );
    n2.models().unload(h).unwrap();
}

#[test]
fn scratchpad_pages_are_shared_and_ref_counted() {
    let f = Fixture::up(
        SimConfig::new(Preset::Trn2, 1),
        InitOptions {
            scratchpad_page_size: Some(4 << 20),
            ..Default::default()
        },
    );
    let n = f.nrt();
    let mut small = spec("small", &[]);
    small.scratchpad_bytes = 6 << 20; // 2 pages
    let mut big = spec("big", &[]);
    big.scratchpad_bytes = 10 << 20; // 3 pages
    let hs = n.models().load(LogicalCore::new(0), &small).unwrap();
    let hb = n.models().load(LogicalCore::new(0), &big).unwrap();
    let refs: Vec<u32> = (0..4)
        .map(|i| n.scratchpad_page(PhysicalCore::new(0, 0), i).unwrap().refs)
        .collect();
    assert_eq!(refs, vec![2, 2, 1, 0]);
    // Each page dmem holds one reference per model plus the page's own (GLOBAL) one, so the
    // last user's release drops exactly the two that remain — never a third free that could
    // hit whichever dmem reused the slot meanwhile.
    let rc: Vec<u64> = (0..3)
        .map(|i| {
            let m = n
                .scratchpad_page(PhysicalCore::new(0, 0), i)
                .unwrap()
                .mem
                .unwrap();
            u64::from(n.dmem().info(m).unwrap().ref_count)
        })
        .collect();
    assert_eq!(rc, vec![3, 3, 2]);
    assert_eq!(
        n.scratchpad_info(PhysicalCore::new(0, 0)).unwrap(),
        ScratchpadInfo {
            page_size: 4 << 20,
            pages: 3,
            contiguous: false
        }
    );
    let scr = dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_SCRATCHPAD;
    assert_eq!(n.ledger().device(PhysicalCore::new(0, 0), scr), 12 << 20);
    let w = n
        .tdrv_scratchpad_get_mem(PhysicalCore::new(0, 0), (4 << 20) + 100, 16)
        .unwrap();
    let (page, off) = (w.page, w.offset);
    assert_eq!(off, 100);
    assert!(n.dmem().is_live(page));
    assert!(n
        .tdrv_scratchpad_get_mem(PhysicalCore::new(0, 0), 12 << 20, 1)
        .is_err());
    n.models().unload(hb).unwrap();
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), scr),
        8 << 20,
        "page 2 went with its last user"
    );
    n.models().unload(hs).unwrap();
    assert_eq!(n.ledger().device(PhysicalCore::new(0, 0), scr), 0);
}

#[test]
fn contiguous_scratchpad_uses_64mib_pages_in_reverse_order() {
    let f = Fixture::up(
        SimConfig::new(Preset::Trn2, 1),
        InitOptions {
            contiguous_scratchpad: true,
            ..Default::default()
        },
    );
    let n = f.nrt();
    let mut s = spec("c", &[]);
    s.scratchpad_bytes = 100 << 20;
    n.models().load(LogicalCore::new(0), &s).unwrap();
    assert_eq!(
        n.scratchpad_info(PhysicalCore::new(0, 0)).unwrap(),
        ScratchpadInfo {
            page_size: 64 << 20,
            pages: 2,
            contiguous: true
        }
    );
    let first = n
        .tdrv_scratchpad_get_mem(PhysicalCore::new(0, 0), 0, 1)
        .unwrap()
        .page;
    let second = n
        .tdrv_scratchpad_get_mem(PhysicalCore::new(0, 0), 64 << 20, 1)
        .unwrap()
        .page;
    let p0 = n
        .scratchpad_page(PhysicalCore::new(0, 0), 0)
        .unwrap()
        .mem
        .unwrap();
    assert_eq!(
        first,
        n.scratchpad_page(PhysicalCore::new(0, 0), 1)
            .unwrap()
            .mem
            .unwrap(),
        "offset 0 maps to the last page"
    );
    assert_eq!(second, p0);
    // Without the driver feature the pages stay small.
    let g = Fixture::new(SimConfig::new(Preset::Trn2, 1));
    g.sim
        .clear_feature_flags(nrt_core::driver::feature::CONTIGUOUS_SCRATCHPAD);
    g.nrt()
        .init(&InitOptions {
            contiguous_scratchpad: true,
            ..Default::default()
        })
        .unwrap();
    assert!(
        !g.nrt()
            .scratchpad_info(PhysicalCore::new(0, 0))
            .unwrap()
            .contiguous
    );
}

#[test]
fn sbuf_carveout_is_checked_on_cayman_only() {
    let good = SbufCarveout {
        ty: 1,
        partition_start: 0,
        partition_count: 128,
        offset: 0x37ff8,
        size: 8,
    };
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let mut s = spec("sb", &[]);
    s.sbuf_carveout = Some(good);
    n.models().load(LogicalCore::new(0), &s).unwrap();
    let before = snapshot(&n);
    for bad in [
        SbufCarveout { ty: 0, ..good },
        SbufCarveout {
            partition_start: 1,
            ..good
        },
        SbufCarveout {
            partition_count: 64,
            ..good
        },
        SbufCarveout {
            offset: 0x37ff0,
            ..good
        },
        SbufCarveout { size: 16, ..good },
    ] {
        s.sbuf_carveout = Some(bad);
        let e = n.models().load(LogicalCore::new(0), &s).unwrap_err();
        assert!(matches!(e, Error::BadCarveout(_)), "{e}");
        assert_eq!(e.status(), NRT_STATUS::NRT_INVALID);
        assert_eq!(snapshot(&n), before);
    }
    // SUNDA does not look at it.
    let g = Fixture::up(SimConfig::new(Preset::Trn1, 1), InitOptions::default());
    s.sbuf_carveout = Some(SbufCarveout { size: 16, ..good });
    g.nrt().models().load(LogicalCore::new(0), &s).unwrap();
}

#[test]
fn bad_model_inputs() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let a = allocs();
    let mut s = spec("bad", &a);
    s.subgraphs = 0;
    assert!(matches!(
        n.models().load(LogicalCore::new(0), &s),
        Err(Error::InvalidModel(_))
    ));
    s.subgraphs = 1;
    assert!(matches!(
        n.models().load(LogicalCore::new(4), &s),
        Err(Error::LogicalCoreOutOfRange { vnc: 4, owned: 4 })
    ));
    assert!(matches!(
        n.models().load(LogicalCore::from_c(-1), &s),
        Err(Error::LogicalCoreOutOfRange { .. })
    ));
    // A value outside 0..=22 does not compile (typed usage); the ledger's total column is
    // not an allocation type.
    let wrong = [ModelAlloc {
        usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_MAX,
        ..a[0]
    }];
    assert!(matches!(
        n.models().load(LogicalCore::new(0), &spec("u", &wrong)),
        Err(Error::InvalidUsage(22))
    ));
    let nowhere = [ModelAlloc {
        location: dma_mem_location_t::DMA_MEM_LOC_INVALID,
        ..a[0]
    }];
    assert!(matches!(
        n.models().load(LogicalCore::new(0), &spec("l", &nowhere)),
        Err(Error::InvalidLocation(_))
    ));
    let scratch_on_host = [ModelAlloc {
        usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_SCRATCHPAD_NOT_SHARED,
        location: HOST,
        ..a[0]
    }];
    assert!(matches!(
        n.models()
            .load(LogicalCore::new(0), &spec("r", &scratch_on_host)),
        Err(Error::UsageInvalidForLocation { .. })
    ));
    let never = ModelHandle::from_parts(0, 987654, nrt_core::raw::epoch(&n));
    assert_eq!(
        n.models().unload(never),
        Err(Error::InvalidHandle(HandleError {
            kind: HandleKind::Model,
            fault: HandleFault::Stale
        }))
    );
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
        0
    );
}

#[test]
fn subgraphs_spread_over_the_logical_cores_physical_cores() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    assert_eq!(n.logical_core_size(), 2);
    let a = allocs();
    let mut s = spec("sg2", &a);
    s.subgraphs = 2;
    let h = n.models().load(LogicalCore::new(1), &s).unwrap();
    assert!(
        n.ledger().device(PhysicalCore::new(0, 2), UsageSel::Total) > 0
            && n.ledger().device(PhysicalCore::new(0, 3), UsageSel::Total) > 0
    );
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 2), UsageSel::Total),
        n.ledger().device(PhysicalCore::new(0, 3), UsageSel::Total)
    );
    n.models().unload(h).unwrap();
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 2), UsageSel::Total)
            + n.ledger().device(PhysicalCore::new(0, 3), UsageSel::Total),
        0
    );
}

#[test]
fn handles_are_unique_across_cores_and_never_zero() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 2), InitOptions::default());
    let n = f.nrt();
    let mut seen = std::collections::HashSet::new();
    for vnc in n.logical_cores() {
        for _ in 0..3 {
            let h = n.models().load(vnc, &spec("h", &[])).unwrap();
            assert!(h.h_model().id != 0 && seen.insert(h.h_model().id));
        }
    }
    assert_eq!(seen.len(), 24);
}

#[test]
fn the_oom_table_is_captured_before_the_load_rolls_back() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let big = [
        ModelAlloc {
            usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_WEIGHT,
            location: DEV,
            size: 3 << 30,
            align: 0,
            hint: "first_weights",
        },
        ModelAlloc {
            usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_WEIGHT,
            location: DEV,
            size: 30 << 30,
            align: 0,
            hint: "too_big",
        },
    ];
    let e = n
        .models()
        .load(LogicalCore::new(0), &spec("oom", &big))
        .unwrap_err();
    assert_eq!(e.status(), NRT_STATUS::NRT_RESOURCE);
    assert_eq!(
        n.ledger().device(PhysicalCore::new(0, 0), UsageSel::Total),
        0,
        "rolled back"
    );
    let mut dump = String::new();
    n.ledger().last_oom_dump(&mut dump).unwrap();
    assert!(
        dump.starts_with(
            "Failed to allocate 30720.000MB (usage: constants) on ND 0:NC 0 (HBM 0, type WEIGHT)"
        ),
        "{dump}"
    );
    assert!(
        dump.contains("first_weights"),
        "the table shows memory as it was at the failure:\n{dump}"
    );
    assert!(dump.contains("NC 0     3072.000MB"), "{dump}");
}

/// `models_on` after `close()` read the torn-down (null) model_db; it must be `Closed`.
#[test]
fn models_on_after_close_is_closed() {
    let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
    let n = f.nrt();
    let h = n
        .models()
        .load(LogicalCore::new(0), &spec("m", &[]))
        .unwrap();
    let mut on = [ModelHandle::from_parts(0, 0, 0); 4];
    assert_eq!(n.models().on_core(LogicalCore::new(0), &mut on).unwrap(), 1);
    assert_eq!(on[0], h);
    n.close().unwrap();
    let e = n
        .models()
        .on_core(LogicalCore::new(0), &mut on)
        .unwrap_err();
    assert_eq!(e, Error::Closed);
    assert_eq!(e.status(), NRT_STATUS::NRT_CLOSED);
    let fresh = Fixture::trn2();
    assert_eq!(
        fresh
            .nrt()
            .models()
            .on_core(LogicalCore::new(0), &mut on)
            .unwrap_err(),
        Error::Uninitialized
    );
}

/// `close()` racing calls already past the state gate: `model_info` (find, then take a
/// reference), `load_model`, `tensor_allocate` and the raw `dmem_*` calls. Before the in-flight call gate a whole close
/// fitted between those steps (a null model_db dereference, or a model / tensor published after
/// teardown and leaked). Now every racing call either completes before teardown or fails
/// `Closed`, and close leaves no memory behind.
#[test]
fn close_waits_for_in_flight_calls() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};
    let a = allocs();
    let t0 = Instant::now();
    let mut iters = 0;
    while iters < 20 || t0.elapsed() < Duration::from_secs(4) {
        iters += 1;
        let f = Fixture::up(SimConfig::new(Preset::Trn2, 1), InitOptions::default());
        let n = f.nrt();
        let h = n
            .models()
            .load(LogicalCore::new(0), &spec("m", &a))
            .unwrap();
        let ready = AtomicU32::new(0);
        std::thread::scope(|sc| {
            let mut hs = Vec::new();
            for _ in 0..2 {
                hs.push(sc.spawn(|| {
                    ready.fetch_add(1, Ordering::SeqCst);
                    loop {
                        if let Err(e) = n.models().info(h) {
                            return e;
                        }
                    }
                }));
            }
            hs.push(sc.spawn(|| {
                ready.fetch_add(1, Ordering::SeqCst);
                loop {
                    match n.models().load(LogicalCore::new(0), &spec("l", &a)) {
                        Ok(h) => match n.models().unload(h) {
                            Ok(()) => {}
                            Err(e) => return e,
                        },
                        Err(e) => return e,
                    }
                }
            }));
            hs.push(sc.spawn(|| {
                ready.fetch_add(1, Ordering::SeqCst);
                loop {
                    match n.tensors().allocate(
                        Placement::Device,
                        LogicalCore::new(0).into(),
                        4096,
                        Some("t"),
                    ) {
                        Ok(t) => {
                            if let Err(e) = n.tensors().free(t) {
                                return e;
                            }
                        }
                        Err(e) => return e,
                    }
                }
            }));
            // The low-level dmem calls pass the same gate: an allocation racing close is
            // either torn down with its allocator or refused, never linked into a dead one.
            let al = core0_allocator(&n);
            let ready = &ready;
            hs.push(sc.spawn(move || {
                ready.fetch_add(1, Ordering::SeqCst);
                let args = AllocArgs::device(64 << 10, 0, TENSOR, "raw");
                loop {
                    let m = match n.dmem().alloc(al, &args, None) {
                        Ok(m) => m,
                        Err(e) => return e,
                    };
                    let step = n
                        .dmem()
                        .acquire_reference(m)
                        .and_then(|()| n.dmem().free(m))
                        .and_then(|()| n.dmem().allocator_for_each(al, |_| {}))
                        .and_then(|()| n.dmem().free_in(al, m));
                    if let Err(e) = step {
                        return e;
                    }
                }
            }));
            while ready.load(Ordering::SeqCst) < 5 {
                std::hint::spin_loop();
            }
            std::thread::sleep(Duration::from_micros(100 + (iters % 7) * 50));
            n.close().unwrap();
            for j in hs {
                assert_eq!(j.join().unwrap(), Error::Closed);
            }
        });
        assert_eq!(
            n.driver_pool_bytes_in_use().unwrap(),
            0,
            "close left memory behind"
        );
        for (name, s) in n.state().arena_stats() {
            assert_eq!(s.live, 0, "close left {name} slots live");
        }
    }
}
