//! What the core logs where libnrt logs. A binary of its own: the logger is process-global.

use std::sync::{Mutex, Once};

use nrt_core::abi::dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR as TENSOR;
use nrt_core::dmem::AllocArgs;
use nrt_core::driver::{errno, AllocRequest, Driver};
use nrt_core::sim::{Placement, Preset, SimConfig, SimDevice};
use nrt_core::{CoreState, InitOptions, Nrt};

/// Every record the process-wide level filter lets through (WARN, or TRACE while a test
/// raises it).
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
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

/// Installs the capture (once per binary: the logger is process-global).
fn capture() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_logger(&CAPTURE).expect("the only logger of this binary");
        log::set_max_level(log::LevelFilter::Warn);
    });
}

/// Records of any level containing `text`.
fn lines_containing(text: &str) -> usize {
    let v = CAPTURE.0.lock().unwrap_or_else(|p| p.into_inner());
    v.iter().filter(|l| l.contains(text)).count()
}

/// WARN records containing `text`.
fn warnings_containing(text: &str) -> usize {
    let v = CAPTURE.0.lock().unwrap_or_else(|p| p.into_inner());
    v.iter()
        .filter(|l| l.starts_with("WARN ") && l.contains(text))
        .count()
}

/// Each booking's `MEM_USAGE` trace line (spec §3.2 step 6) when trace logging is on, and
/// none when it is off.
#[test]
fn bookings_are_traced_only_when_trace_logging_is_on() {
    capture();
    let st = CoreState::new_boxed();
    let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn2, 1)).expect("sim");
    let n = Nrt::new(&st, &*sim);
    n.init(&InitOptions::default()).expect("init");
    let al = n
        .dmem()
        .core_allocator(nrt_core::PhysicalCore::new(0, 0))
        .expect("allocator");
    let round_trip = |size: u64| {
        let h = n
            .dmem()
            .alloc(al, &AllocArgs::device(size, 0, TENSOR, "t"), None)
            .expect("alloc");
        n.dmem().free(h).expect("free");
    };
    round_trip(0x3_1000);
    assert_eq!(lines_containing("MEM_USAGE: 200704 bytes"), 0);
    log::set_max_level(log::LevelFilter::Trace);
    round_trip(0x5_2000);
    log::set_max_level(log::LevelFilter::Warn);
    // The allocation's line and the free's.
    assert_eq!(lines_containing("MEM_USAGE: 335872 bytes, channel 0"), 2);
    n.close().expect("close");
}

#[test]
fn unsupported_aligned_allocation_is_warned_about_once_per_device() {
    capture();
    const WARNING: &str = "does not support aligned allocations";
    let st = CoreState::new_boxed();
    let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn2, 2)).expect("sim");
    let n = Nrt::new(&st, &*sim);
    n.init(&InitOptions::default()).expect("init");
    let args = AllocArgs::device(10_000, 0, TENSOR, "a").aligned(1 << 16);
    let round_trip = |dev: u32| {
        let al = n
            .dmem()
            .core_allocator(nrt_core::PhysicalCore::new(dev, 0))
            .expect("allocator");
        n.dmem()
            .free(n.dmem().alloc(al, &args, None).expect("alloc"))
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

/// A pool whose node array is full refuses with ENOMEM and says why, in both placements
/// (docs/PLACEMENT.md "Limits"): the simulation limit never silently moves a request to the
/// other pool.
#[test]
fn a_pool_out_of_nodes_is_refused_with_a_warning() {
    capture();
    const WARNING: &str = "HBM 0 small-object pool tracks no more allocations (its node array \
                           of 16 is full, a limit of the simulator the driver does not have): \
                           4096 bytes refused with ENOMEM, not placed in another pool";
    let before = warnings_containing(WARNING);
    for (k, placement) in [Placement::Genalloc, Placement::Tlsf]
        .into_iter()
        .enumerate()
    {
        let cfg = SimConfig {
            placement,
            ..SimConfig::scaled_down(Preset::Trn1, 1)
        };
        let sim = SimDevice::<1, 16>::new_boxed_sized(&cfg).expect("sim");
        let page = AllocRequest {
            size: 4096,
            align: 0,
            host: false,
            hbm_idx: 0,
            region: 0,
            nc_id: 0,
            category: 9, // TENSORS_DEVICE
        };
        let mut placed = 0;
        let e = loop {
            match sim.memory_alloc(0, &page) {
                Ok(h) => {
                    assert!(sim.memory_info(0, h).unwrap().small_pool, "{placement:?}");
                    placed += 1;
                    assert!(placed < 16, "{placement:?}");
                }
                Err(e) => break e,
            }
        };
        assert_eq!(e, errno::ENOMEM, "{placement:?}");
        assert_eq!(
            warnings_containing(WARNING),
            before + k + 1,
            "{placement:?}"
        );
    }
}
