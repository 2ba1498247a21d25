//! The simulated device's [`Driver`] face (public ABI §3): the calls the runtime makes, routed
//! to the pools of `sim`.

use super::*;

impl<const DEVICES: usize, const NODES: usize> Driver for SimDevice<DEVICES, NODES> {
    fn device_count(&self) -> u32 {
        self.device_count
    }

    fn device_info(&self, dev: u32) -> Result<DeviceInfo, Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        let preset = self.preset().ok_or(errno::ENODEV)?;
        let mut info = preset.device_info();
        info.hbm_channel_size = self.channel_size;
        info.host_dma_capacity = self.host_capacity;
        info.feature_flags = self.feature_flags.load(Ordering::Acquire);
        info.supports_aligned_alloc = self.aligned_alloc.load(Ordering::Acquire) != 0;
        Ok(info)
    }

    fn memory_alloc(&self, dev: u32, req: &AllocRequest) -> Result<u64, Errno> {
        self.alloc_block(dev, req).map(|(h, _)| h)
    }

    /// The carve already knows the address: one lock instead of alloc + get_pa's two.
    fn memory_alloc_pa(&self, dev: u32, req: &AllocRequest) -> Result<(u64, u64), Errno> {
        self.alloc_block(dev, req)
    }

    /// The address map of the module docs: HBM channels back to back from 0, the host pool
    /// from [`HOST_PA_BASE`].
    fn pa_window(&self, dev: u32, host: bool) -> Option<(u64, u64)> {
        if dev >= self.device_count {
            return None;
        }
        Some(if host {
            (HOST_PA_BASE, self.host_capacity)
        } else {
            (0, self.channels as u64 * self.channel_size)
        })
    }

    fn memory_get_pa(&self, dev: u32, handle: u64) -> Result<u64, Errno> {
        self.memory_info(dev, handle).map(|i| i.pa)
    }

    fn memory_free(&self, dev: u32, handle: u64) -> Result<(), Errno> {
        // A main-pool or small-object handle of this device (tag, device and pool kind in one
        // test) for one of its channels, with a node index: what `decode` accepts as
        // `Pool::Main` / `Pool::Small`, freed here under the channel's lock. Host and
        // scratchpad handles, and everything `decode` refuses, take `free_decoded`.
        let c = (handle >> H_POOL_SHIFT) as u32 % MAX_HBM_CHANNELS;
        if handle & (H_TAG_MASK | H_DEV_MASK | H_NOT_HBM_BIT) == Self::handle_prefix(dev)
            && dev < self.device_count
            && c < self.channels
        {
            if let Some(id) = Self::handle_id(handle) {
                let small = handle & ((MAX_HBM_CHANNELS as u64) << H_POOL_SHIFT) != 0;
                return self.channel_part(dev, c).with_split(move |st| {
                    let carve = if small { &mut st.small } else { &mut st.main };
                    match carve.free(id) {
                        Ok(_) => Ok(()),
                        Err(_) => Err(errno::EINVAL),
                    }
                });
            }
        }
        self.free_decoded(dev, handle)
    }

    fn copy_in(&self, dev: u32, handle: u64, offset: u64, src: &[u8]) -> Result<(), Errno> {
        let (pool, id) = self.decode(dev, handle)?;
        self.with_block(dev, pool, id, |st, b| {
            let p = self.window(st, pool, b, offset, src.len() as u64)?;
            // SAFETY: `window` checked `[p, p + len)` lies inside the block's backing, which
            // nothing else accesses (set_backing's contract) while we hold the lock of the
            // part that owns the block (so nobody frees or re-carves it meanwhile); `src` is a
            // distinct Rust slice, so the ranges do not overlap.
            unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
            Ok(())
        })
    }

    fn copy_out(&self, dev: u32, handle: u64, offset: u64, dst: &mut [u8]) -> Result<(), Errno> {
        let (pool, id) = self.decode(dev, handle)?;
        self.with_block(dev, pool, id, |st, b| {
            let p = self.window(st, pool, b, offset, dst.len() as u64)?;
            // SAFETY: as in `copy_in`; `dst` is an exclusive Rust slice outside the backing.
            unsafe { core::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) };
            Ok(())
        })
    }

    fn fill(&self, dev: u32, handle: u64, offset: u64, len: u64, value: u8) -> Result<(), Errno> {
        let (pool, id) = self.decode(dev, handle)?;
        self.with_block(dev, pool, id, |st, b| {
            let p = self.window(st, pool, b, offset, len)?;
            let n = usize::try_from(len).map_err(|_| errno::EFAULT)?;
            // SAFETY: `window` checked `[p, p + len)` lies inside the block's backing, which
            // only we access while the lock of the part that owns the block is held.
            unsafe { core::ptr::write_bytes(p, value, n) };
            Ok(())
        })
    }

    fn pool_stats(&self, dev: u32, host: bool, hbm_idx: u32) -> Result<PoolStats, Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        if !host && hbm_idx >= self.channels {
            return Err(errno::EINVAL);
        }
        if host {
            return Ok(self.slots[dev as usize]
                .host
                .with(|st| st.host.stats().into()));
        }
        self.with_channel(dev, hbm_idx, |st| {
            Ok(hbm_stats(&st.main, &st.small, 0, self.genalloc()))
        })
    }

    /// Exact: every free block of the channel's main pool and small-object region, under the
    /// channel's lock (one moment), by size class.
    fn free_histogram(
        &self,
        dev: u32,
        hbm_idx: u32,
    ) -> Result<(FreeHistogram, FreeHistogram), Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        if hbm_idx >= self.channels {
            return Err(errno::EINVAL);
        }
        self.with_channel(dev, hbm_idx, |st| {
            let (mut main, mut small) = (FreeHistogram::default(), FreeHistogram::default());
            st.main.for_each_block(|b| {
                if !b.used {
                    main.add(b.size);
                }
            });
            st.small.for_each_block(|b| {
                if !b.used {
                    small.add(b.size);
                }
            });
            Ok((main, small))
        })
    }

    /// Exact: the largest request each region's carve would grant at `align`
    /// ([`Carve::largest_aligned`]), under the channel's lock, so the figures are those of one
    /// moment. `EINVAL` for an alignment that is not a power of two or a bad channel.
    fn hbm_stats_aligned(&self, dev: u32, hbm_idx: u32, align: u64) -> Result<PoolStats, Errno> {
        if dev >= self.device_count {
            return Err(errno::ENODEV);
        }
        if hbm_idx >= self.channels || (align != 0 && !align.is_power_of_two()) {
            return Err(errno::EINVAL);
        }
        self.with_channel(dev, hbm_idx, |st| {
            Ok(hbm_stats(&st.main, &st.small, align, self.genalloc()))
        })
    }
}
