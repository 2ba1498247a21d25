//! What the core logs where libnrt logs. A binary of its own: the logger is process-global.

use std::sync::Mutex;

use nrt_core::abi::dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR as TENSOR;
use nrt_core::dmem::AllocArgs;
use nrt_core::sim::{Preset, SimConfig, SimDevice};
use nrt_core::{CoreState, InitOptions, Nrt};

/// Every record at WARN or above.
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
            v.push(format!("{} {}", r.level(), r.args()));
        }
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

fn warnings_containing(text: &str) -> usize {
    let v = CAPTURE.0.lock().unwrap_or_else(|p| p.into_inner());
    v.iter().filter(|l| l.contains(text)).count()
}

#[test]
fn unsupported_aligned_allocation_is_warned_about_once_per_device() {
    log::set_logger(&CAPTURE).expect("the only logger of this binary");
    log::set_max_level(log::LevelFilter::Warn);
    const WARNING: &str = "does not support aligned allocations";
    let st = CoreState::new_boxed();
    let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn2, 2)).expect("sim");
    let n = Nrt::new(&st, &*sim);
    n.init(&InitOptions::default()).expect("init");
    let args = AllocArgs::device(10_000, 0, TENSOR, "a").aligned(1 << 16);
    let round_trip = |dev: u32| {
        let al = n.core_allocator(dev, 0).expect("allocator");
        n.dmem_free(n.dmem_alloc(al, &args, None).expect("alloc"))
            .expect("free");
    };
    let warned = |dev: u32| warnings_containing(&format!("nd{dev}: the driver {WARNING}"));
    // Supported: no warning.
    round_trip(0);
    assert_eq!(warnings_containing(WARNING), 0);
    // Withdrawn: one WARN for device 0 however many aligned requests follow (spec §3.2
    // `ndl_supports_align`: a one-shot WARN, then the latch).
    sim.set_aligned_alloc(false);
    for _ in 0..3 {
        round_trip(0);
    }
    assert_eq!((warnings_containing(WARNING), warned(0)), (1, 1));
    // Device 1 latches on its own.
    round_trip(1);
    assert_eq!(warned(1), 1);
    // A device that says so at bring-up: the WARN comes with the first aligned request.
    n.close().expect("close");
    n.init(&InitOptions::default()).expect("init");
    round_trip(0);
    assert_eq!(warned(0), 2);
    n.close().expect("close");
}
