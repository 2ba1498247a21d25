//! The [`Driver`] a shared device is: every operation under the device lock, on this
//! process's own allocations only (public ABI §3).

use std::time::Duration;

use nrt_core::driver::{errno, AllocRequest, DeviceInfo, Driver, Errno, FreeHistogram, PoolStats};

use super::layout::Owner;
use super::lock::guarded;
use super::{SharedDevice, CATEGORY_TENSORS_DEVICE};

impl Driver for SharedDevice {
    fn device_count(&self) -> u32 {
        self.inner.devices
    }

    fn device_info(&self, dev: u32) -> Result<DeviceInfo, Errno> {
        self.inner
            .info
            .get(dev as usize)
            .copied()
            .ok_or(errno::ENODEV)
    }

    fn memory_alloc(&self, dev: u32, req: &AllocRequest) -> Result<u64, Errno> {
        self.memory_alloc_pa(dev, req).map(|(h, _)| h)
    }

    fn memory_alloc_pa(&self, dev: u32, req: &AllocRequest) -> Result<(u64, u64), Errno> {
        let inner = &*self.inner;
        for attempt in 0..2 {
            let g = inner.lock()?;
            g.poisoned()?;
            if inner.hold_ms > 0 && req.category == CATEGORY_TENSORS_DEVICE {
                std::thread::sleep(Duration::from_millis(inner.hold_ms));
            }
            let r = guarded(|| {
                let (h, pa) = g.sim().memory_alloc_pa(dev, req)?;
                let info = g.sim().memory_info(dev, h)?;
                let (carve, index) = g.sim().handle_key(dev, h)?;
                let Some(o) = g.owner_to_write(dev, carve, index) else {
                    let _ = g.sim().memory_free(dev, h);
                    return Err(errno::EINVAL);
                };
                *o = Owner {
                    handle: h,
                    size: info.size,
                    pa: info.pa,
                    alias: 0,
                    slot: (inner.slot + 1) as u8,
                    category: req.category,
                    nc: req.nc_id as u8,
                    _pad: [0; 5],
                };
                g.book(
                    inner.slot,
                    dev,
                    req.nc_id as u8,
                    req.category,
                    info.size,
                    true,
                );
                Ok((h, pa))
            });
            match r {
                // Before refusing for lack of memory: reclaim the dead, then try once more.
                Err(e) if e == errno::ENOMEM && attempt == 0 && g.reap() > 0 => continue,
                r => return r,
            }
        }
        Err(errno::ENOMEM)
    }

    fn memory_get_pa(&self, dev: u32, handle: u64) -> Result<u64, Errno> {
        let g = self.inner.lock()?;
        g.poisoned()?;
        guarded(|| {
            let real = g.mine(dev, handle)?.handle;
            g.sim().memory_get_pa(dev, real)
        })
    }

    fn memory_free(&self, dev: u32, handle: u64) -> Result<(), Errno> {
        let g = self.inner.lock()?;
        g.poisoned()?;
        guarded(|| {
            let rec = *g.mine(dev, handle)?;
            g.sim().memory_free(dev, rec.handle)?;
            *g.mine(dev, handle)? = Owner::default();
            g.book(self.inner.slot, dev, rec.nc, rec.category, rec.size, false);
            Ok(())
        })
    }

    fn copy_in(&self, dev: u32, handle: u64, offset: u64, src: &[u8]) -> Result<(), Errno> {
        self.inner
            .with_window(dev, handle, offset, src.len() as u64, |p| {
                // SAFETY: `with_window` checked `[p, p + len)` lies in this process's backing of
                // an allocation it owns, with the device lock held; `src` is a distinct slice.
                unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) }
            })
    }

    fn copy_out(&self, dev: u32, handle: u64, offset: u64, dst: &mut [u8]) -> Result<(), Errno> {
        let len = dst.len();
        let out = dst.as_mut_ptr();
        self.inner
            .with_window(dev, handle, offset, len as u64, |p| {
                // SAFETY: as in `copy_in`; `dst` is an exclusive slice outside the backing.
                unsafe { core::ptr::copy_nonoverlapping(p, out, len) }
            })
    }

    fn fill(&self, dev: u32, handle: u64, offset: u64, len: u64, value: u8) -> Result<(), Errno> {
        let n = usize::try_from(len).map_err(|_| errno::EFAULT)?;
        self.inner.with_window(dev, handle, offset, len, |p| {
            // SAFETY: as in `copy_in`.
            unsafe { core::ptr::write_bytes(p, value, n) }
        })
    }

    fn pool_stats(&self, dev: u32, host: bool, hbm_idx: u32) -> Result<PoolStats, Errno> {
        let g = self.inner.lock()?;
        g.poisoned()?;
        guarded(|| g.sim().pool_stats(dev, host, hbm_idx))
    }

    fn hbm_stats_aligned(&self, dev: u32, hbm_idx: u32, align: u64) -> Result<PoolStats, Errno> {
        let g = self.inner.lock()?;
        g.poisoned()?;
        guarded(|| g.sim().hbm_stats_aligned(dev, hbm_idx, align))
    }

    fn free_histogram(
        &self,
        dev: u32,
        hbm_idx: u32,
    ) -> Result<(FreeHistogram, FreeHistogram), Errno> {
        let g = self.inner.lock()?;
        g.poisoned()?;
        guarded(|| g.sim().free_histogram(dev, hbm_idx))
    }
}
