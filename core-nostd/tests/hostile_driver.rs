//! A hostile driver (bad input from below, spec §3.2): a [`Driver`] over the simulated device
//! that lies in every field of its device info and pool statistics, fails calls at random
//! (seeded), returns allocation handle 0, the same handle twice and addresses outside its
//! window, and refuses frees. The runtime answers every lie and failure with an error —
//! never a panic, never a hang — and `close` reports, exactly, the frees the driver refused.
//!
//! Runs in debug and release (`cargo xtask ci` runs it with `--release`): arithmetic on the
//! driver's numbers must neither trap (debug) nor wrap (release).
mod common;
use common::{core0_allocator, tensor_args};

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use nrt_core::abi::*;
use nrt_core::dmem::AllocArgs;
use nrt_core::driver::{errno, AllocRequest, DeviceInfo, Driver, Errno, PoolStats};
use nrt_core::model::{ModelAlloc, ModelSpec, TensorDecl};
use nrt_core::sim::{Preset, SimConfig, SimDevice, HOST_PA_BASE};
use nrt_core::tensor::Placement;
use nrt_core::{CoreState, Error, InitOptions, LogicalCore, Nrt};
use proptest::prelude::*;

/// What the hostile driver does; each `*_pct` is a per-call chance in percent.
#[derive(Clone, Copy, Debug, Default)]
struct Hostility {
    /// Lie in device info: 0 none, else the index of a lie in [`INFO_LIES`] (1-based).
    info_lie: usize,
    /// Lie in pool statistics: 0 none, else the index of a lie in [`STATS_LIES`] (1-based).
    stats_lie: usize,
    /// Fail any call.
    fail_pct: u32,
    /// Return handle 0.
    zero_handle_pct: u32,
    /// Return the previous handle again.
    dup_handle_pct: u32,
    /// A repeated handle comes with an address outside the window.
    dup_outside: bool,
    /// Return an address outside the window.
    outside_pct: u32,
    /// Refuse a free.
    refuse_free_pct: u32,
}

type InfoLie = fn(&mut DeviceInfo);
const INFO_LIES: [(&str, InfoLie); 8] = [
    ("page size 0", |i| i.page_size = 0),
    ("page size 3000", |i| i.page_size = 3000),
    ("page size 2^62", |i| i.page_size = 1 << 62),
    ("16 HBM channels", |i| i.hbm_channels = 16),
    ("0 cores", |i| i.cores_per_device = 0),
    ("9 cores", |i| i.cores_per_device = 9),
    ("channel bytes overflow", |i| i.hbm_channel_size = u64::MAX),
    ("u32::MAX channels", |i| i.hbm_channels = u32::MAX),
];

type StatsLie = fn(&mut PoolStats);
const STATS_LIES: [(&str, StatsLie); 5] = [
    ("free above capacity", |s| s.free = s.capacity + 4096),
    ("largest above free", |s| {
        s.largest_free = s.free.saturating_add(1)
    }),
    ("capacity 0, free max", |s| {
        s.capacity = 0;
        s.free = u64::MAX
    }),
    ("small free above free", |s| s.small_object_free = u64::MAX),
    ("fragments above free", |s| s.fragmented_free = s.free + 1),
];

struct Hostile {
    inner: Box<SimDevice>,
    how: Hostility,
    rng: AtomicU64,
    last_handle: AtomicU64,
    /// `memory_free` calls answered with an error.
    free_errors: AtomicU32,
    /// When non-zero, the handle every allocation is answered with (its block placed all
    /// the same).
    repeat: AtomicU64,
}

impl Hostile {
    fn new(how: Hostility, seed: u64) -> Self {
        Hostile {
            inner: SimDevice::new_boxed(&SimConfig::scaled_down(Preset::Trn2, 1)).unwrap(),
            how,
            rng: AtomicU64::new(seed | 1),
            last_handle: AtomicU64::new(0),
            free_errors: AtomicU32::new(0),
            repeat: AtomicU64::new(0),
        }
    }

    /// True with chance `pct` percent (xorshift, seeded).
    fn roll(&self, pct: u32) -> bool {
        if pct == 0 {
            return false;
        }
        let mut x = self.rng.load(SeqCst);
        loop {
            let mut y = x;
            y ^= y << 13;
            y ^= y >> 7;
            y ^= y << 17;
            match self.rng.compare_exchange(x, y, SeqCst, SeqCst) {
                Ok(_) => return (y % 100) < pct as u64,
                Err(now) => x = now,
            }
        }
    }

    fn fail(&self) -> Result<(), Errno> {
        if self.roll(self.how.fail_pct) {
            Err(errno::EIO)
        } else {
            Ok(())
        }
    }
}

impl Driver for Hostile {
    fn device_count(&self) -> u32 {
        self.inner.device_count()
    }
    fn device_info(&self, dev: u32) -> Result<DeviceInfo, Errno> {
        self.fail()?;
        let mut i = self.inner.device_info(dev)?;
        if let Some((_, lie)) = self
            .how
            .info_lie
            .checked_sub(1)
            .and_then(|k| INFO_LIES.get(k))
        {
            lie(&mut i);
        }
        Ok(i)
    }
    fn memory_alloc(&self, dev: u32, req: &AllocRequest) -> Result<u64, Errno> {
        self.memory_alloc_pa(dev, req).map(|(h, _)| h)
    }
    fn memory_alloc_pa(&self, dev: u32, req: &AllocRequest) -> Result<(u64, u64), Errno> {
        self.fail()?;
        let (h, pa) = self.inner.memory_alloc_pa(dev, req)?;
        let prev = self.last_handle.swap(h, SeqCst);
        let repeat = self.repeat.load(SeqCst);
        if repeat != 0 {
            return Ok((repeat, pa));
        }
        if self.roll(self.how.zero_handle_pct) {
            return Ok((0, pa));
        }
        let bad = if req.host {
            HOST_PA_BASE - 4096
        } else {
            u64::MAX - 4096
        };
        if prev != 0 && self.roll(self.how.dup_handle_pct) {
            return Ok((prev, if self.how.dup_outside { bad } else { pa }));
        }
        if self.roll(self.how.outside_pct) {
            return Ok((h, bad));
        }
        Ok((h, pa))
    }
    fn memory_get_pa(&self, dev: u32, handle: u64) -> Result<u64, Errno> {
        self.fail()?;
        self.inner.memory_get_pa(dev, handle)
    }
    fn memory_free(&self, dev: u32, handle: u64) -> Result<(), Errno> {
        let r = if self.roll(self.how.refuse_free_pct) || self.roll(self.how.fail_pct) {
            Err(errno::EBUSY)
        } else {
            self.inner.memory_free(dev, handle)
        };
        if r.is_err() {
            self.free_errors.fetch_add(1, SeqCst);
        }
        r
    }
    fn copy_in(&self, dev: u32, handle: u64, offset: u64, src: &[u8]) -> Result<(), Errno> {
        self.fail()?;
        self.inner.copy_in(dev, handle, offset, src)
    }
    fn copy_out(&self, dev: u32, handle: u64, offset: u64, dst: &mut [u8]) -> Result<(), Errno> {
        self.fail()?;
        self.inner.copy_out(dev, handle, offset, dst)
    }
    fn pool_stats(&self, dev: u32, host: bool, hbm_idx: u32) -> Result<PoolStats, Errno> {
        self.fail()?;
        let mut s = self.inner.pool_stats(dev, host, hbm_idx)?;
        if let Some((_, lie)) = self
            .how
            .stats_lie
            .checked_sub(1)
            .and_then(|k| STATS_LIES.get(k))
        {
            lie(&mut s);
        }
        Ok(s)
    }
    fn pa_window(&self, dev: u32, host: bool) -> Option<(u64, u64)> {
        self.inner.pa_window(dev, host)
    }
}

const ALLOCS: [ModelAlloc<'static>; 2] = [
    ModelAlloc {
        usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_WEIGHT,
        location: dma_mem_location_t::TONGA_DRAM,
        size: 1 << 20,
        align: 0,
        hint: "w",
    },
    ModelAlloc {
        usage: dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_IO,
        location: dma_mem_location_t::HOST_DRAM,
        size: 16 << 10,
        align: 0,
        hint: "io",
    },
];
const INS: [TensorDecl<'static>; 1] = [TensorDecl::new("in", 256)];
const OUTS: [TensorDecl<'static>; 1] = [TensorDecl::new("out", 256)];

fn spec() -> ModelSpec<'static> {
    ModelSpec {
        name: "m",
        subgraphs: 1,
        allocations: &ALLOCS,
        inputs: &INS,
        outputs: &OUTS,
        ..Default::default()
    }
}

/// Device and host bytes the ledger books on device 0.
fn ledger_bytes(n: &Nrt<'_>) -> u64 {
    let nrt_core::LedgerSnapshot { device: d, host: h } = n.ledger().snapshot(0);
    d.iter().chain(h.iter()).map(|r| r[22]).sum()
}

/// `e` is the refusal of a driver answer that repeats `held`, the handle of a live block.
fn assert_repeat_refused(e: Error, held: u64, what_of: &str) {
    assert!(
        matches!(e, Error::BadDriver { what, value } if what.contains("already holds") && value == held),
        "{what_of}: {e:?}"
    );
}

/// Every call must come back: a wait the driver could wedge would show here.
fn bounded<R>(f: impl FnOnce() -> R) -> R {
    let t0 = Instant::now();
    let r = f();
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    r
}

#[test]
fn init_refuses_every_lie_in_device_info() {
    for (k, (name, _)) in INFO_LIES.iter().enumerate() {
        let drv = Hostile::new(
            Hostility {
                info_lie: k + 1,
                ..Default::default()
            },
            1,
        );
        let st = CoreState::new_boxed();
        let n = Nrt::new(&st, &drv);
        let e = n.init(&InitOptions::default()).unwrap_err();
        assert!(
            matches!(e, Error::BadDriver { what, .. } if what.starts_with("device_info")),
            "{name}: {e:?}"
        );
        assert_eq!(e.status(), NRT_STATUS::NRT_FAILURE, "{name}");
        assert!(e.to_string().contains("device_info"), "{name}: {e}");
        // Never up: no figure to read, and nothing was asked of the driver.
        assert_eq!(
            n.driver_pool_bytes_in_use(),
            Err(Error::Uninitialized),
            "{name}"
        );
        assert_eq!(
            drv.inner.alloc_calls(),
            0,
            "{name}: nothing allocated on a lie"
        );
    }
}

#[test]
fn lying_pool_statistics_are_refused_never_subtracted() {
    for (k, (name, _)) in STATS_LIES.iter().enumerate() {
        let drv = Hostile::new(
            Hostility {
                stats_lie: k + 1,
                ..Default::default()
            },
            1,
        );
        let st = CoreState::new_boxed();
        let n = Nrt::new(&st, &drv);
        n.init(&InitOptions::default()).unwrap();
        let e = n.pool_stats_checked(0, false, 0).unwrap_err();
        assert!(
            matches!(e, Error::BadDriver { what, .. } if what.starts_with("pool_stats")),
            "{name}: {e:?}"
        );
        // The figure built on them is refused too, never wrapped or trapped.
        let figure = n.driver_pool_bytes_in_use();
        assert!(
            matches!(figure, Err(Error::BadDriver { .. })),
            "{name}: {figure:?}"
        );
        // An OOM report reads the statistics: it says less, but it is made.
        let a = tensor_args(1 << 40, "big");
        let al = core0_allocator(&n);
        assert!(n.dmem().alloc(al, &a, None).is_err(), "{name}");
        let mut text = String::new();
        let _ = n.ledger().dump(&mut text, 0, None, 8);
        assert_eq!(n.close(), Ok(()), "{name}");
    }
}

#[test]
fn handle_zero_and_blocks_outside_the_window_are_refused_and_given_back() {
    for (how, what) in [
        (
            Hostility {
                zero_handle_pct: 100,
                ..Default::default()
            },
            "memory_alloc: allocation handle 0",
        ),
        (
            Hostility {
                outside_pct: 100,
                ..Default::default()
            },
            "memory_alloc: block outside the driver's address window",
        ),
    ] {
        let drv = Hostile::new(how, 7);
        let st = CoreState::new_boxed();
        let n = Nrt::new(&st, &drv);
        n.init(&InitOptions::default()).unwrap();
        let al = core0_allocator(&n);
        for a in [
            tensor_args(4096, "d"),
            AllocArgs::host(4096, dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR, "h"),
        ] {
            let e = n.dmem().alloc(al, &a, None).unwrap_err();
            assert!(
                matches!(e, Error::BadDriver { what: w, .. } if w == what),
                "{e:?}"
            );
        }
        assert!(n.models().load(LogicalCore::FIRST, &spec()).is_err());
        assert_eq!(ledger_bytes(&n), 0, "nothing booked");
        n.close().unwrap();
    }
}

#[test]
fn the_same_handle_twice_is_refused() {
    let drv = Hostile::new(
        Hostility {
            dup_handle_pct: 100,
            ..Default::default()
        },
        5,
    );
    let st = CoreState::new_boxed();
    let n = Nrt::new(&st, &drv);
    n.init(&InitOptions::default()).unwrap();
    let al = core0_allocator(&n);
    let a = tensor_args(4096, "d");
    let first = n
        .dmem()
        .alloc(al, &a, None)
        .expect("the first handle is new");
    let held = n.dmem().info(first).unwrap().mem_handle;
    let booked = ledger_bytes(&n);
    // The driver answers each request with the handle of its previous block: the first
    // repeat is the live one's.
    let e = n.dmem().alloc(al, &a, None).unwrap_err();
    assert_repeat_refused(e, held, "the repeat");
    assert_eq!(
        ledger_bytes(&n),
        booked,
        "nothing booked for the refused answers"
    );
    n.dmem().free(first).unwrap();
    n.close().unwrap();
}

/// A live allocation's handle repeated with a block outside the window is refused as a
/// repeat: giving that block back would free the live allocation's.
#[test]
fn a_repeated_handle_outside_the_window_is_not_given_back() {
    let drv = Hostile::new(
        Hostility {
            dup_handle_pct: 100,
            dup_outside: true,
            ..Default::default()
        },
        9,
    );
    let st = CoreState::new_boxed();
    let n = Nrt::new(&st, &drv);
    n.init(&InitOptions::default()).unwrap();
    let al = core0_allocator(&n);
    let a = tensor_args(4096, "d");
    let first = n.dmem().alloc(al, &a, None).expect("a new handle");
    let held = n.dmem().info(first).unwrap().mem_handle;
    let e = n.dmem().alloc(al, &a, None).unwrap_err();
    assert_repeat_refused(e, held, "the repeat");
    // The live block is still the driver's to free: exactly once, by its owner.
    n.dmem().free(first).unwrap();
    assert_eq!(drv.free_errors.load(SeqCst), 0);
    assert_eq!(ledger_bytes(&n), 0);
    n.close().unwrap();
}

/// The set of live handles is exact: with far more allocations live than a window of a
/// few thousand handles would hold, the handle of any one of them repeated is refused, and
/// nothing of the refused answers is booked or given back.
#[test]
fn a_repeated_handle_is_refused_among_thousands_of_live_allocations() {
    const LIVE: usize = 12_000;
    let drv = Hostile::new(Hostility::default(), 1);
    let st = CoreState::new_boxed();
    let n = Nrt::new(&st, &drv);
    n.init(&InitOptions::default()).unwrap();
    let al = core0_allocator(&n);
    let a = tensor_args(4096, "d");
    let live: Vec<_> = (0..LIVE)
        .map(|i| {
            n.dmem()
                .alloc(al, &a, None)
                .unwrap_or_else(|e| panic!("allocation {i}: {e:?}"))
        })
        .collect();
    let booked = ledger_bytes(&n);
    for i in [0, 1, 4095, 4096, LIVE / 2, LIVE - 2, LIVE - 1] {
        let held = n.dmem().info(live[i]).unwrap().mem_handle;
        drv.repeat.store(held, SeqCst);
        let e = n.dmem().alloc(al, &a, None).unwrap_err();
        assert_repeat_refused(e, held, &format!("live allocation {i}"));
        assert_eq!(
            ledger_bytes(&n),
            booked,
            "nothing booked for allocation {i}'s repeat"
        );
    }
    drv.repeat.store(0, SeqCst);
    // Every live block is still the driver's to free, exactly once, by its owner.
    for h in live {
        n.dmem().free(h).unwrap();
    }
    assert_eq!(drv.free_errors.load(SeqCst), 0);
    assert_eq!(ledger_bytes(&n), 0);
    n.close().unwrap();
}

#[test]
fn refused_frees_are_reported_by_each_call_and_by_close() {
    let drv = Hostile::new(
        Hostility {
            refuse_free_pct: 100,
            ..Default::default()
        },
        3,
    );
    let st = CoreState::new_boxed();
    let n = Nrt::new(&st, &drv);
    n.init(&InitOptions::default()).unwrap();
    let t = n
        .tensors()
        .allocate(
            Placement::Device,
            LogicalCore::FIRST.into(),
            8192,
            Some("t"),
        )
        .unwrap();
    let m = n.models().load(LogicalCore::FIRST, &spec()).unwrap();
    let booked = ledger_bytes(&n);
    let e = n.tensors().free(t).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DriverKept {
                blocks: 1,
                bytes: 8192,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("8192 bytes"), "{e}");
    assert!(
        n.tensors().size(t).is_err(),
        "the tensor is gone all the same"
    );
    let e = n.models().unload(m).unwrap_err();
    assert!(matches!(e, Error::DriverKept { blocks: 2, .. }), "{e:?}");
    assert!(
        n.models().core(m).is_err(),
        "the model is unloaded all the same"
    );
    // The ledger still books what the driver holds.
    assert_eq!(ledger_bytes(&n), booked, "the ledger stays true");
    let kept = n.driver_kept().unwrap();
    assert_eq!(kept.blocks, 3);
    assert_eq!(kept.bytes, booked);
    let e = n.close().unwrap_err();
    assert!(
        matches!(e, Error::DriverKept { blocks, bytes, .. } if u64::from(blocks) == kept.blocks && bytes == kept.bytes),
        "{e:?}"
    );
    assert_eq!(e.status(), NRT_STATUS::NRT_FAILURE);
    assert_eq!(
        n.lifecycle(),
        nrt_core::Lifecycle::Closed,
        "closed all the same"
    );
    assert_eq!(n.driver_kept().unwrap(), kept, "readable after close");
    assert_eq!(drv.free_errors.load(SeqCst) as u64, kept.blocks);
    // A new init starts from none.
    n.init(&InitOptions::default()).unwrap();
    assert_eq!(n.driver_kept().unwrap().blocks, 0);
}

/// One step of a random session.
#[derive(Clone, Debug)]
enum Op {
    Load,
    Unload(usize),
    Tensor(u64),
    FreeTensor(usize),
    Dmem(u64, bool),
    FreeDmem(usize),
    Execute(usize),
    Stats,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Load),
        any::<usize>().prop_map(Op::Unload),
        (1u64..1 << 20).prop_map(Op::Tensor),
        any::<usize>().prop_map(Op::FreeTensor),
        ((1u64..1 << 20), any::<bool>()).prop_map(|(s, h)| Op::Dmem(s, h)),
        any::<usize>().prop_map(Op::FreeDmem),
        any::<usize>().prop_map(Op::Execute),
        Just(Op::Stats),
    ]
}

fn hostility() -> impl Strategy<Value = Hostility> {
    (
        0..=INFO_LIES.len(),
        0..=STATS_LIES.len(),
        0u32..30,
        0u32..10,
        0u32..10,
        0u32..10,
        0u32..30,
        any::<bool>(),
    )
        .prop_map(|(i, s, f, z, d, o, r, dup_outside)| Hostility {
            // An info lie fails init; keep most sessions past it.
            info_lie: if i % 3 == 0 { i } else { 0 },
            stats_lie: s,
            fail_pct: f,
            zero_handle_pct: z,
            dup_handle_pct: d,
            dup_outside,
            outside_pct: o,
            refuse_free_pct: r,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any mix of lies and failures: every call returns (an error or a value), nothing
    /// panics, and close reports exactly the frees the driver refused.
    #[test]
    fn a_session_over_a_hostile_driver_errs_but_never_panics_or_hangs(
        how in hostility(),
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        let drv = Hostile::new(how, seed);
        let st = CoreState::new_boxed();
        let n = Nrt::new(&st, &drv);
        if bounded(|| n.init(&InitOptions::default())).is_err() {
            // A refused init holds nothing: no figure, or an empty one.
            let figure = n.driver_pool_bytes_in_use();
            prop_assert!(!matches!(figure, Ok(b) if b != 0), "{:?}", figure);
            return Ok(());
        }
        let (mut models, mut tensors, mut dmems, mut sets) = (vec![], vec![], vec![], vec![]);
        let al = core0_allocator(&n);
        for op in ops {
            bounded(|| match op {
                Op::Load => {
                    if let Ok(m) = n.models().load(LogicalCore::FIRST, &spec()) {
                        models.push(m);
                    }
                }
                Op::Unload(i) if !models.is_empty() => {
                    let m = models.swap_remove(i % models.len());
                    match n.models().unload(m) {
                        Ok(()) | Err(Error::DriverKept { .. }) => {}
                        Err(e) => panic!("unload: {e:?}"),
                    }
                }
                Op::Tensor(size) => {
                    if let Ok(t) = n.tensors().allocate(
                        Placement::Device, LogicalCore::FIRST.into(), size, Some("in"),
                    ) {
                        let _ = n.tensors().write(t, &[1; 64], 0);
                        tensors.push(t);
                    }
                }
                Op::FreeTensor(i) if !tensors.is_empty() => {
                    let t = tensors.swap_remove(i % tensors.len());
                    match n.tensors().free(t) {
                        Ok(()) | Err(Error::DriverKept { .. }) => {}
                        Err(e) => panic!("tensor_free: {e:?}"),
                    }
                }
                Op::Dmem(size, host) => {
                    let u = dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR;
                    let a = if host {
                        AllocArgs::host(size, u, "h")
                    } else {
                        AllocArgs::device(size, 0, u, "d")
                    };
                    if let Ok(d) = n.dmem().alloc(al, &a, None) {
                        dmems.push(d);
                    }
                }
                Op::FreeDmem(i) if !dmems.is_empty() => {
                    // A duplicated handle may have been freed under this one: an error is
                    // fine, a panic is not.
                    let _ = n.dmem().free(dmems.swap_remove(i % dmems.len()));
                }
                Op::Execute(i) if !models.is_empty() && tensors.len() >= 2 => {
                    let m = models[i % models.len()];
                    let (si, so) = match (n.sets().create(), n.sets().create()) {
                        (Ok(a), Ok(b)) => (a, b),
                        _ => return,
                    };
                    sets.push(si);
                    sets.push(so);
                    let _ = n.sets().add(si, "in", tensors[0]);
                    let _ = n.sets().add(so, "out", tensors[1]);
                    let _ = n.tensors().execute(m, si, so);
                }
                Op::Stats => {
                    let _ = n.driver_pool_bytes_in_use();
                    let _ = n.pool_stats_checked(0, false, 0);
                    let mut s = String::new();
                    let _ = n.ledger().dump(&mut s, 0, None, 8);
                }
                _ => {}
            });
        }
        let r = bounded(|| n.close());
        let kept = n.driver_kept().unwrap();
        prop_assert_eq!(kept.blocks, u64::from(drv.free_errors.load(SeqCst)),
            "every refused free is counted");
        match r {
            Ok(()) => prop_assert_eq!(kept.blocks, 0),
            Err(Error::DriverKept { blocks, bytes, .. }) => {
                prop_assert_eq!(u64::from(blocks), kept.blocks);
                prop_assert_eq!(bytes, kept.bytes);
            }
            Err(e) => prop_assert!(false, "close: {:?}", e),
        }
        prop_assert_eq!(n.lifecycle(), nrt_core::Lifecycle::Closed);
    }
}
