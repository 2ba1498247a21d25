//! What a failed load may give straight back to its arenas and what it must not: scratchpad
//! pages are in the core's shared page table (and on its GLOBAL allocator's list) from the
//! moment they are claimed, so another load or a caller can see them before the load fails.
//! Their slots go through the quarantine, and a caller's stale dmem pointer stays detected.

mod common;

use std::sync::Mutex;

use common::*;
use nrt_core::abi::*;
use nrt_core::driver::{AllocRequest, DeviceInfo, Driver, Errno, PoolStats};
use nrt_core::model::ModelSpec;
use nrt_core::sim::{Preset, SimConfig, SimDevice};
use nrt_core::ulib::UlibRequest;
use nrt_core::{CoreState, InitOptions, Nrt};

/// What the hook does: runs once, with a runtime over the same state.
type Hook<'a> = Box<dyn FnOnce(&Nrt<'_>) + Send + 'a>;

/// A sim driver that, at the first huge allocation (the failing library staging of a load),
/// runs `hook` with a runtime over the same state: what another thread could do then.
struct HookDriver<'a> {
    inner: Box<SimDevice>,
    st: &'a CoreState,
    hook: Mutex<Option<Hook<'a>>>,
}

impl HookDriver<'_> {
    fn maybe_hook(&self, r: &AllocRequest) {
        if r.size >= 1 << 40 {
            let h = self.hook.lock().unwrap().take();
            if let Some(h) = h {
                h(&Nrt::new(self.st, self));
            }
        }
    }
}

impl Driver for HookDriver<'_> {
    fn device_count(&self) -> u32 {
        self.inner.device_count()
    }
    fn device_info(&self, d: u32) -> Result<DeviceInfo, Errno> {
        self.inner.device_info(d)
    }
    fn memory_alloc(&self, d: u32, r: &AllocRequest) -> Result<u64, Errno> {
        self.maybe_hook(r);
        self.inner.memory_alloc(d, r)
    }
    fn memory_alloc_pa(&self, d: u32, r: &AllocRequest) -> Result<(u64, u64), Errno> {
        self.maybe_hook(r);
        self.inner.memory_alloc_pa(d, r)
    }
    fn memory_get_pa(&self, d: u32, h: u64) -> Result<u64, Errno> {
        self.inner.memory_get_pa(d, h)
    }
    fn memory_free(&self, d: u32, h: u64) -> Result<(), Errno> {
        self.inner.memory_free(d, h)
    }
    fn copy_in(&self, d: u32, h: u64, o: u64, s: &[u8]) -> Result<(), Errno> {
        self.inner.copy_in(d, h, o, s)
    }
    fn copy_out(&self, d: u32, h: u64, o: u64, s: &mut [u8]) -> Result<(), Errno> {
        self.inner.copy_out(d, h, o, s)
    }
    fn fill(&self, d: u32, h: u64, o: u64, l: u64, v: u8) -> Result<(), Errno> {
        self.inner.fill(d, h, o, l, v)
    }
    fn pool_stats(&self, d: u32, host: bool, i: u32) -> Result<PoolStats, Errno> {
        self.inner.pool_stats(d, host, i)
    }
}

type Seen = std::sync::Arc<Mutex<Option<usize>>>;

fn run(hook: impl FnOnce(&Nrt<'_>, &Seen) + Send + 'static) {
    let st = CoreState::new_boxed();
    let seen: Seen = Default::default();
    let s2 = seen.clone();
    let drv = HookDriver {
        inner: SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, 1)).unwrap(),
        st: &st,
        hook: Mutex::new(Some(Box::new(move |n: &Nrt<'_>| hook(n, &s2)))),
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
        n.load_model(0, &s).unwrap_err().status(),
        NRT_STATUS::NRT_RESOURCE
    );
    let page = seen.lock().unwrap().expect("hook saw the page") as nrt_core::dmem::Dmem;
    assert!(!n.dmem_is_live(page), "the page was freed by the rollback");
    // The caller's copy of the page pointer is now stale: it must stay detectable.
    let al = n.core_allocator(0, 0).unwrap();
    assert_stale_still_detected(&n, al, page);
}

/// Someone reads the scratchpad page table (public API) while the load is in flight.
#[test]
fn a_page_read_through_the_public_api_during_a_failing_load_is_not_cancelled() {
    run(|n, seen| {
        let (m, _) = n.tdrv_scratchpad_get_mem(0, 0, 0, 1).unwrap();
        *seen.lock().unwrap() = Some(m as usize);
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
        let h = n.load_model(0, &s).unwrap();
        let (m, _) = n.tdrv_scratchpad_get_mem(0, 0, 0, 1).unwrap();
        *seen.lock().unwrap() = Some(m as usize);
        n.unload_model(h).unwrap();
    });
}
