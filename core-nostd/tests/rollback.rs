//! What a failed load may give straight back to its arenas and what it must not: scratchpad
//! pages are in the core's shared page table (and on its GLOBAL allocator's list) from the
//! moment they are claimed, so another load or a caller can see them before the load fails.
//! Their slots go through the quarantine, and a caller's stale dmem pointer stays detected.

mod common;

use std::sync::Mutex;

use common::*;
use nrt_core::abi::*;
use nrt_core::driver::{AllocRequest, Driver};
use nrt_core::model::ModelSpec;
use nrt_core::sim::{Preset, SimConfig, SimDevice};
use nrt_core::ulib::UlibRequest;
use nrt_core::LogicalCore;
use nrt_core::PhysicalCore;
use nrt_core::{CoreState, InitOptions, Nrt};

/// What the hook does: runs once, with a runtime over the same state.
type Hook<'a> = Box<dyn FnOnce(&Nrt<'_>) + Send + 'a>;

/// Hooks that, at the first huge allocation (the failing library staging of a load), run
/// `hook` with a runtime over the same state: what another thread could do then.
struct OnHugeAlloc<'a> {
    st: &'a CoreState,
    hook: Mutex<Option<Hook<'a>>>,
}

impl DriverHooks for OnHugeAlloc<'_> {
    fn before_alloc(&self, drv: &dyn Driver, r: &AllocRequest) {
        if r.size >= 1 << 40 {
            let h = self.hook.lock().unwrap().take();
            if let Some(h) = h {
                h(&Nrt::new(self.st, drv));
            }
        }
    }
}

type Seen = std::sync::Arc<Mutex<Option<u128>>>;

fn run(hook: impl FnOnce(&Nrt<'_>, &Seen) + Send + 'static) {
    let st = CoreState::new_boxed();
    let seen: Seen = Default::default();
    let s2 = seen.clone();
    let drv = HookedSim {
        inner: SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, 1)).unwrap(),
        hooks: OnHugeAlloc {
            st: &st,
            hook: Mutex::new(Some(Box::new(move |n: &Nrt<'_>| hook(n, &s2)))),
        },
    };
    let n = Nrt::new(&st, &drv);
    n.init(&InitOptions {
        scratchpad_page_size: Some(4096),
        ..Default::default()
    })
    .unwrap();
    // One scratchpad page, then a library too big to stage: the load fails after the claim.
    let s = ModelSpec {
        name: "fails",
        subgraphs: 1,
        scratchpad_bytes: 4096,
        gpsimd_libs: Some(UlibRequest {
            count: 2,
            bytes: 1 << 50,
        }),
        ..Default::default()
    };
    assert_eq!(
        n.models()
            .load(LogicalCore::new(0), &s)
            .unwrap_err()
            .status(),
        NRT_STATUS::NRT_RESOURCE
    );
    let page = nrt_core::DmemHandle::from_bits(seen.lock().unwrap().expect("hook saw the page"));
    assert!(
        !n.dmem().is_live(page),
        "the page was freed by the rollback"
    );
    // The caller's copy of the page pointer is now stale: it must stay detectable.
    let al = core0_allocator(&n);
    assert_stale_still_detected(&n, al, page);
}

/// Someone reads the scratchpad page table (public API) while the load is in flight.
#[test]
fn a_page_read_through_the_public_api_during_a_failing_load_is_not_cancelled() {
    run(|n, seen| {
        let m = n
            .tdrv_scratchpad_get_mem(PhysicalCore::new(0, 0), 0, 1)
            .unwrap()
            .page;
        *seen.lock().unwrap() = Some(m.to_bits());
    });
}

/// Another model shares the page, is executed/inspected, and unloaded before the rollback.
#[test]
fn a_page_another_model_shared_during_a_failing_load_is_not_cancelled() {
    run(|n, seen| {
        let s = ModelSpec {
            name: "other",
            subgraphs: 1,
            scratchpad_bytes: 4096,
            ..Default::default()
        };
        let h = n.models().load(LogicalCore::new(0), &s).unwrap();
        let m = n
            .tdrv_scratchpad_get_mem(PhysicalCore::new(0, 0), 0, 1)
            .unwrap()
            .page;
        *seen.lock().unwrap() = Some(m.to_bits());
        n.models().unload(h).unwrap();
    });
}

/// A driver that says it takes aligned requests but refuses one with EINVAL.
struct RefusesAligned;

impl DriverHooks for RefusesAligned {
    fn refuse_alloc(&self, r: &AllocRequest) -> Option<nrt_core::driver::Errno> {
        (r.align != 0).then_some(nrt_core::driver::errno::EINVAL)
    }
}

/// An aligned request the driver refuses (EINVAL) is retried through the
/// over-allocate emulation; when that runs out of memory, the OOM report measures the channel
/// as the emulated request saw it, not natively aligned, so it never shows a block the request
/// would have fitted in.
#[test]
fn an_emulated_retry_that_runs_out_reports_the_channel_it_saw() {
    let st = CoreState::new_boxed();
    let cfg = SimConfig {
        aligned_alloc: true,
        ..SimConfig::scaled_down(Preset::Trn1, 1)
    };
    let drv = HookedSim {
        inner: SimDevice::new_boxed(&cfg).unwrap(),
        hooks: RefusesAligned,
    };
    let n = Nrt::new(&st, &drv);
    n.init(&InitOptions::default()).unwrap();
    let largest = drv.pool_stats(0, false, 0).unwrap().largest_free;
    let align = 1u64 << 20;
    // Fits natively at a 1 MiB boundary of an empty channel, not with `align` bytes on top.
    let size = largest - 4096;
    let al = core0_allocator(&n);
    let a = nrt_core::dmem::AllocArgs::device(
        size,
        0,
        dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR,
        "big",
    )
    .aligned(align);
    let e = n.dmem().alloc(al, &a, None).unwrap_err();
    assert!(
        matches!(e, nrt_core::Error::DeviceOom { emulated: true, .. }),
        "{e:?}"
    );
    let mut dump = String::new();
    n.ledger().last_oom_dump(&mut dump).unwrap();
    let line = dump
        .lines()
        .find(|l| l.trim_start().starts_with("HBM 0:"))
        .expect("HBM 0 line");
    let shown: f64 = line
        .split("largest free block ")
        .nth(1)
        .and_then(|r| r.split("MB").next())
        .and_then(|v| v.parse().ok())
        .expect("largest free block figure");
    assert!(
        shown < size as f64 / (1024.0 * 1024.0),
        "the report shows a block the request fits in:\n{dump}"
    );
    assert!(!dump.contains("refused"), "{dump}");
}
