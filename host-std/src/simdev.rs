//! [`HostSim`]: the simulated device ([`nrt_core::sim::SimDevice`]) with host memory behind
//! every device (docs/ARCHITECTURE.md principle 7), so `copy_in`/`copy_out` move real bytes.
//!
//! Each device gets one [`HostReservation`] of [`SimDevice::backing_len`] bytes — all HBM
//! channels back to back, then the host pool: ≈ 104 GiB for a trn2 (4 × 24 GiB + 8 GiB), of
//! which only the pages written cost memory (`MAP_NORESERVE`). `HostSim` owns the device and its
//! reservations together, so the memory outlives every use the device makes of it. Neither the
//! device memory nor the simulator's own state is written to core dumps (`MADV_DONTDUMP`), as
//! neither is on real hardware.

use nrt_core::driver::{Driver, Errno as DrvErrno};
use nrt_core::sim::{SimConfig, SimDevice};

use crate::backing::HostReservation;
use crate::error::{nix_errno, Error, Result};
use crate::zeroed::ZeroedBox;

/// A simulated device's pools (its node arrays: gigabytes of zero-valid address space of which
/// the nodes in use are touched), in a mapping of their own, outside core dumps (the driver's
/// state is kernel memory on real hardware).
pub type SimBox = ZeroedBox<SimDevice>;

/// An uninitialised [`SimBox`].
pub fn sim_box() -> Result<SimBox> {
    SimBox::new_undumped()
}

/// A [`SimBox`] initialised for `cfg`.
pub fn sim_box_for(cfg: &SimConfig) -> Result<SimBox> {
    let mut b = sim_box()?;
    b.init(cfg).map_err(sim_err("invalid configuration"))?;
    Ok(b)
}

/// A simulated device set with host-backed memory; a [`Driver`] by delegation.
pub struct HostSim {
    // Declared before `mem`, so the device (which holds pointers into `mem`) drops first.
    dev: SimBox,
    mem: Vec<HostReservation>,
}

fn sim_err(what: &'static str) -> impl Fn(DrvErrno) -> Error {
    move |e| Error::Sim {
        what,
        source: nix_errno(e),
    }
}

impl HostSim {
    /// Builds the simulator for `cfg` and backs each of its devices with a lazily committed
    /// host reservation.
    pub fn new(cfg: &SimConfig) -> Result<Self> {
        let sim = Self::with_backings(sim_box_for(cfg)?)?;
        log::debug!(
            "simulated {} × {:?}: {} B of host memory reserved per device",
            sim.dev.device_count(),
            cfg.preset,
            sim.mem.first().map_or(0, |r| r.len())
        );
        Ok(sim)
    }

    /// A private copy of `src` (its pools as they are now, [`SimDevice::copy_to`]) with host
    /// memory behind each device: what a plan against a shared device runs on.
    pub fn from_snapshot(src: &SimDevice) -> Result<Self> {
        let mut dev = sim_box()?;
        src.copy_to(&mut dev);
        Self::with_backings(dev)
    }

    fn with_backings(mut dev: SimBox) -> Result<Self> {
        let mut mem = Vec::with_capacity(dev.device_count() as usize);
        for d in 0..dev.device_count() {
            let r = HostReservation::reserve(dev.backing_len(d))?;
            // SAFETY: `r` is valid for reads and writes of `r.len()` bytes from any thread
            // until it is unmapped; it is kept in `mem` beside the device, which is dropped
            // first (field order), and `HostSim` never hands out `&mut SimDevice`, so the
            // backing cannot be swapped or re-initialised behind it. Nothing else uses the bytes.
            unsafe { dev.set_backing(d, r.as_ptr(), r.len()) }.map_err(sim_err("set_backing"))?;
            mem.push(r);
        }
        Ok(HostSim { dev, mem })
    }

    /// The simulator (fault injection, `memory_info`, counters).
    pub fn device(&self) -> &SimDevice {
        &self.dev
    }

    /// The reservation behind each device, in device order.
    pub fn reservations(&self) -> &[HostReservation] {
        &self.mem
    }
}

impl Driver for HostSim {
    nrt_core::forward_driver!(dev => all);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::resident_pages;
    use nrt_core::driver::AllocRequest;
    use nrt_core::sim::Preset;

    const GIB: u64 = 1 << 30;

    fn req(size: u64, hbm: u32, host: bool) -> AllocRequest {
        AllocRequest {
            size,
            align: 0,
            host,
            hbm_idx: hbm,
            region: 0,
            nc_id: 0,
            category: if host { 2 } else { 9 },
        }
    }

    #[test]
    fn trn2_full_geometry_moves_real_bytes_and_touches_only_what_it_writes() {
        let before = resident_pages().unwrap();
        let sim = HostSim::new(&SimConfig::new(Preset::Trn2, 2)).expect("2 × ~104 GiB reserved");
        assert_eq!(sim.device_count(), 2);
        assert_eq!(sim.reservations().len(), 2);
        assert_eq!(sim.reservations()[1].len(), 4 * 24 * GIB + 8 * GIB);
        let mut handles = Vec::new();
        for (dev, hbm, host) in [(0, 0, false), (0, 3, false), (1, 2, false), (1, 0, true)] {
            let h = sim.memory_alloc(dev, &req(3 * GIB, hbm, host)).unwrap();
            let msg = format!("dev {dev} hbm {hbm} host {host}");
            for off in [0, 3 * GIB / 2, 3 * GIB - 64] {
                sim.copy_in(dev, h, off, msg.as_bytes()).unwrap();
                let mut back = vec![0u8; msg.len()];
                sim.copy_out(dev, h, off, &mut back).unwrap();
                assert_eq!(back, msg.as_bytes(), "{msg} at {off}");
            }
            handles.push((dev, h));
        }
        sim.fill(0, handles[0].1, 4096, 8192, 0x5a).unwrap();
        let mut b = [0u8; 4];
        sim.copy_out(0, handles[0].1, 8190, &mut b).unwrap();
        assert_eq!(b, [0x5a; 4]);
        let grown = resident_pages().unwrap().saturating_sub(before);
        // ~12 data pages + the simulator's pool metadata; nowhere near the 208 GiB reserved.
        assert!(grown < 16 * 1024, "RSS grew by {grown} pages");
        for (dev, h) in handles {
            sim.memory_free(dev, h).unwrap();
        }
        assert!(sim.memory_free(0, 0x1234).is_err());
    }

    #[test]
    fn scaled_down_config_and_bad_config() {
        let sim = HostSim::new(&SimConfig::scaled_down(Preset::Inf2, 1)).unwrap();
        assert_eq!(
            sim.reservations()[0].len(),
            2 * 64 * (1 << 20) + 32 * (1 << 20)
        );
        let h = sim.memory_alloc(0, &req(1 << 20, 1, false)).unwrap();
        sim.copy_in(0, h, 10, b"bytes").unwrap();
        let mut b = [0u8; 5];
        sim.copy_out(0, h, 10, &mut b).unwrap();
        assert_eq!(&b, b"bytes");
        assert!(sim.device().memory_info(0, h).is_ok());

        let e = HostSim::new(&SimConfig::new(Preset::Trn2, 0))
            .err()
            .unwrap();
        assert!(
            matches!(
                e,
                Error::Sim {
                    source: nix::errno::Errno::EINVAL,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
