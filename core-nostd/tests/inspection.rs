//! The inspection figures say whose bytes they count and fail instead of answering 0: what
//! this runtime holds (its ledger) against what the driver's pools hold for every client; a
//! driver that reports no device, or lies about a pool, is named as such.

use nrt_core::abi::NRT_STATUS;
use nrt_core::cell::ZeroedCell;
use nrt_core::driver::{Driver, Errno, PoolStats};
use nrt_core::sim::{Preset, SimConfig, SimDevice};
use nrt_core::tensor::Placement;
use nrt_core::{CoreState, Error, InitOptions, LogicalCore, Nrt};

const MIB: u64 = 1 << 20;

/// Two runtimes on one driver: each runtime figure counts its own tensors, the driver figure
/// counts both; before `init` both figures are an error, after `close` this runtime holds 0.
#[test]
fn runtime_figures_count_this_runtime_and_driver_figures_every_client() {
    let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn2, 1)).unwrap();
    let (sa, sb) = (CoreState::new_boxed(), CoreState::new_boxed());
    let (a, b) = (Nrt::new(&sa, &*sim), Nrt::new(&sb, &*sim));
    assert_eq!(a.runtime_bytes_in_use(), Err(Error::Uninitialized));
    assert_eq!(a.driver_pool_bytes_in_use(), Err(Error::Uninitialized));
    a.init(&InitOptions::default()).unwrap();
    b.init(&InitOptions::default()).unwrap();
    let (a0, b0) = (
        a.runtime_bytes_in_use().unwrap(),
        b.runtime_bytes_in_use().unwrap(),
    );
    let drv0 = a.driver_pool_bytes_in_use().unwrap();
    assert_eq!(
        b.driver_pool_bytes_in_use(),
        Ok(drv0),
        "one driver, one figure"
    );
    assert!(drv0 >= a0 + b0);

    let core = LogicalCore::new(0).into();
    let ta = a
        .tensors()
        .allocate(Placement::Device, core, MIB, None)
        .unwrap();
    let tb = b
        .tensors()
        .allocate(Placement::Device, core, 3 * MIB, None)
        .unwrap();
    assert_eq!(a.runtime_bytes_in_use(), Ok(a0 + MIB));
    assert_eq!(b.runtime_bytes_in_use(), Ok(b0 + 3 * MIB));
    assert_eq!(a.driver_pool_bytes_in_use(), Ok(drv0 + 4 * MIB));

    a.tensors().free(ta).unwrap();
    a.close().unwrap();
    assert_eq!(a.runtime_bytes_in_use(), Ok(0), "closed: holds nothing");
    assert_eq!(
        a.driver_pool_bytes_in_use(),
        Ok(drv0 - a0 + 3 * MIB),
        "the driver still serves the other runtime"
    );
    b.tensors().free(tb).unwrap();
    b.close().unwrap();
    assert_eq!(b.driver_pool_bytes_in_use(), Ok(0));
}

/// A driver whose host pool reports more free bytes than it has, or refuses its statistics.
struct LyingPools {
    inner: Box<SimDevice>,
    refuse: bool,
}

impl Driver for LyingPools {
    nrt_core::forward_driver!(inner => device_count, device_info, memory_alloc, memory_alloc_pa,
        memory_get_pa, memory_free, memory_unmap, get_copy_buf, copy_in, copy_out, fill,
        hbm_stats_aligned, free_histogram, host_device_id_rid_map);
    fn pool_stats(&self, dev: u32, host: bool, hbm_idx: u32) -> Result<PoolStats, Errno> {
        let mut s = self.inner.pool_stats(dev, host, hbm_idx)?;
        if host && self.refuse {
            return Err(nrt_core::driver::errno::EOPNOTSUPP);
        }
        if host {
            s.free = s.capacity + 1;
        }
        Ok(s)
    }
}

#[test]
fn a_pool_figure_the_driver_refuses_or_lies_about_is_an_error() {
    for refuse in [false, true] {
        let drv = LyingPools {
            inner: SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, 1)).unwrap(),
            refuse,
        };
        let st = CoreState::new_boxed();
        let n = Nrt::new(&st, &drv);
        n.init(&InitOptions::default()).unwrap();
        let want = if refuse {
            Error::Driver(nrt_core::driver::errno::EOPNOTSUPP)
        } else {
            Error::BadDriver {
                what: "pool_stats: free bytes above capacity",
                value: drv.inner.pool_stats(0, true, 0).unwrap().capacity + 1,
            }
        };
        assert_eq!(n.driver_pool_bytes_in_use(), Err(want));
        assert_eq!(
            n.runtime_bytes_in_use(),
            Ok(0),
            "the ledger needs no driver"
        );
        n.close().unwrap();
    }
}

/// A simulated device that was never initialised reports no device: `init` says so, not
/// "driver error 19".
#[test]
fn init_over_a_driver_without_devices_says_so() {
    static SIM: ZeroedCell<SimDevice<1, 16>> = ZeroedCell::new();
    let sim: &'static SimDevice<1, 16> = SIM.take().unwrap();
    let st = CoreState::new_boxed();
    let n = Nrt::new(&st, sim);
    let e = n.init(&InitOptions::default()).unwrap_err();
    assert_eq!(e, Error::NoDevices);
    assert_eq!(e.status(), NRT_STATUS::NRT_FAILURE);
    let msg = e.to_string();
    assert!(
        msg.contains("0 devices") && !msg.contains("driver error"),
        "{msg}"
    );
    assert_eq!(n.runtime_bytes_in_use(), Err(Error::Uninitialized));
}
