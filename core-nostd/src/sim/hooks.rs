//! The simulated device's hooks for tests and tools: fault injection, feature switches,
//! the placement of a live handle, the pools' self-check, and the copy and lock reset of a
//! simulator kept in shared memory.

use super::*;

impl<const DEVICES: usize, const NODES: usize> SimDevice<DEVICES, NODES> {
    /// Fault injection: the `n`th `memory_alloc` call from now (1-based) fails with `ENOMEM`
    /// (unless it is refused earlier for bad arguments); `n == 0` disarms.
    pub fn fail_nth_alloc(&self, n: u64) {
        self.fail_countdown.store(n, Ordering::Release);
    }

    /// Fault injection: every allocation of driver category `category` (public ABI §3
    /// `mem_alloc_category_t`) fails with `ENOMEM` until [`SimDevice::clear_faults`].
    pub fn fail_category(&self, category: u8) {
        if category < 64 {
            self.fail_categories
                .fetch_or(1 << category, Ordering::AcqRel);
        }
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        self.fail_countdown.store(0, Ordering::Release);
        self.fail_categories.store(0, Ordering::Release);
    }

    /// `memory_alloc` calls since `init` (failed ones included).
    pub fn alloc_calls(&self) -> u64 {
        let channels = self.channels as usize;
        self.slots[..self.device_count as usize].iter().fold(
            self.stray_alloc_calls.load(Ordering::Acquire),
            |n, slot| {
                slot.channels[..channels]
                    .iter()
                    .map(|p| p.with(|st| st.alloc_calls))
                    .sum::<u64>()
                    + slot.host.with(|st| st.alloc_calls)
                    + n
            },
        )
    }

    /// Grants or withdraws aligned-alloc support (spec §3.2 `ndl_supports_align`): without it
    /// `align != 0` is `EINVAL` and [`DeviceInfo::supports_aligned_alloc`] is false.
    pub fn set_aligned_alloc(&self, on: bool) {
        self.aligned_alloc.store(u32::from(on), Ordering::Release);
    }

    /// Clears driver feature bits (`feature::*`, public ABI §3).
    pub fn clear_feature_flags(&self, bits: u64) {
        self.feature_flags.fetch_and(!bits, Ordering::AcqRel);
    }

    /// Sets driver feature bits (`feature::*`, public ABI §3).
    pub fn set_feature_flags(&self, bits: u64) {
        self.feature_flags.fetch_or(bits, Ordering::AcqRel);
    }

    /// Where a live allocation sits (`MEM_GET_EXTENDED_INFO`, public ABI §3); `EINVAL` for a
    /// bad or stale handle.
    pub fn memory_info(&self, dev: u32, handle: u64) -> Result<SimMemInfo, Errno> {
        let (pool, id) = self.decode(dev, handle)?;
        self.with_block(dev, pool, id, |_, b| {
            let (host, hbm_idx, small_pool) = match pool {
                Pool::Main(c) | Pool::Scratch(c) => (false, c, false),
                Pool::Small(c) => (false, c, true),
                Pool::Host => (true, 0, false),
            };
            Ok(SimMemInfo {
                pa: b.addr,
                size: b.size,
                host,
                hbm_idx,
                small_pool,
            })
        })
    }

    /// Where a handle's record lives in a per-carve table: `(carve, node index)` with `carve`
    /// in `0..CARVES_PER_DEVICE` (HBM `c`'s main pool is `c`, its small-object region
    /// `MAX_HBM_CHANNELS + c`, the host pool `2 * MAX_HBM_CHANNELS`) and the node index below
    /// [`MAX_CARVE_NODES`]. Two live handles of one device never share a key, so a table
    /// indexed by it can say who owns each allocation (the shared device, docs/SHARED_DEVICE.md).
    /// `EINVAL` for a handle this simulator never minted (no pool lookup: a stale handle maps
    /// to the key its node had).
    pub fn handle_key(&self, dev: u32, handle: u64) -> Result<(u32, u32), Errno> {
        let (pool, id) = self.decode(dev, handle)?;
        let carve = match pool {
            Pool::Main(c) | Pool::Scratch(c) => c,
            Pool::Small(c) => MAX_HBM_CHANNELS + c,
            Pool::Host => POOL_HOST,
        };
        Ok((carve, id.index()))
    }

    /// The handle of the live allocation at key `(carve, index)` ([`SimDevice::handle_key`]),
    /// if there is one: what a table of owners indexed by that key is reconciled against.
    /// A contiguous-scratchpad block is named as a plain main-pool one (the pool cannot tell
    /// them apart), so freeing it does not shrink the scratchpad's recorded size.
    pub fn live_handle(&self, dev: u32, carve: u32, index: u32) -> Option<u64> {
        let (pool, id) = if carve < MAX_HBM_CHANNELS {
            let id = self.with_channel(dev, carve, |st| st.main.id_at(index).ok_or(errno::EINVAL));
            (Pool::Main(carve), id)
        } else if carve < POOL_HOST {
            let c = carve - MAX_HBM_CHANNELS;
            let id = self.with_channel(dev, c, |st| st.small.id_at(index).ok_or(errno::EINVAL));
            (Pool::Small(c), id)
        } else if carve == POOL_HOST {
            let id = self.with_host(dev, |st| st.host.id_at(index).ok_or(errno::EINVAL));
            (Pool::Host, id)
        } else {
            return None;
        };
        Some(Self::encode(dev, pool, id.ok()?))
    }

    /// Re-creates one allocation at exactly `[addr, addr + size)` of carve `carve`
    /// ([`SimDevice::handle_key`] numbering; `scratch` marks a contiguous-scratchpad block of
    /// a main pool, which grows the recorded scratchpad) and returns its new handle: how pools
    /// damaged in shared memory are rebuilt from an ownership table after a fresh
    /// [`SimDevice::init`]. `EINVAL` when the range is not free (the table itself is wrong).
    pub fn place_at(
        &self,
        dev: u32,
        carve: u32,
        addr: u64,
        size: u64,
        scratch: bool,
    ) -> Result<u64, Errno> {
        if carve < self.channels {
            let pool = if scratch {
                Pool::Scratch(carve)
            } else {
                Pool::Main(carve)
            };
            self.with_channel(dev, carve, |st| {
                let b = st.main.alloc_at(addr, size).map_err(|_| errno::EINVAL)?;
                if scratch {
                    st.scratchpad += b.size;
                }
                Ok(Self::encode(dev, pool, b.id))
            })
        } else if (MAX_HBM_CHANNELS..MAX_HBM_CHANNELS + self.channels).contains(&carve) {
            let c = carve - MAX_HBM_CHANNELS;
            self.with_channel(dev, c, |st| {
                let b = st.small.alloc_at(addr, size).map_err(|_| errno::EINVAL)?;
                Ok(Self::encode(dev, Pool::Small(c), b.id))
            })
        } else if carve == POOL_HOST {
            self.with_host(dev, |st| {
                let b = st.host.alloc_at(addr, size).map_err(|_| errno::EINVAL)?;
                Ok(Self::encode(dev, Pool::Host, b.id))
            })
        } else {
            Err(errno::EINVAL)
        }
    }

    /// Verifies every pool's invariants ([`Carve::check`], O(nodes)) and the simulator's own
    /// fields: for state that came from outside the process (a shared mapping), before it is
    /// trusted. The check indexes nodes as the carve does, so state corrupted badly enough
    /// can make it panic: a caller reading untrusted bytes runs it behind `catch_unwind`.
    pub fn check_pools(&self) -> Result<(), &'static str> {
        if self.device_count as usize > DEVICES || self.preset().is_none() {
            return Err("device count or preset out of range");
        }
        if self.channels == 0 || self.channels > MAX_HBM_CHANNELS {
            return Err("HBM channel count out of range");
        }
        for slot in &self.slots[..self.device_count as usize] {
            for part in &slot.channels[..self.channels as usize] {
                part.with(|st| {
                    st.main.check()?;
                    st.small.check()?;
                    if st.scratchpad > st.main.capacity() {
                        return Err("contiguous scratchpad larger than its pool");
                    }
                    Ok(())
                })?;
            }
            slot.host.with(|st| st.host.check())?;
            if !slot.backing.is_null() {
                return Err("a backing pointer in state that must have none");
            }
        }
        Ok(())
    }

    /// Makes `dst` a copy of this simulator: settings, faults cleared, every device's pools
    /// (each part copied under its lock), no backing (set one with
    /// [`SimDevice::set_backing`]). A plan runs on such a copy of a shared device (a
    /// snapshot, never the live pools). Only the attached devices' pools are copied
    /// (~7.4 MB each). Each channel's figures are those of one moment; a device's channels
    /// may be of moments apart (the shared device holds its process-shared lock around the
    /// whole copy, so nothing changes there meanwhile).
    pub fn copy_to(&self, dst: &mut Self) {
        for d in 0..(self.device_count as usize).min(DEVICES) {
            let (src, out) = (&self.slots[d], &mut dst.slots[d]);
            for (sp, op) in src.channels.iter().zip(out.channels.iter_mut()) {
                let o = op.state.get_mut();
                // SAFETY: under the source part's lock nothing mutates its state while it is
                // read; `ChannelState` is integers and integer arrays (no heap ownership, no
                // `Drop`), so a bitwise copy is a valid value and the old `o` needs no drop.
                sp.with(|st| unsafe { core::ptr::copy_nonoverlapping(st as *const _, o, 1) });
            }
            let o = out.host.state.get_mut();
            // SAFETY: as above, for the host part's `HostState`.
            src.host
                .with(|st| unsafe { core::ptr::copy_nonoverlapping(st as *const _, o, 1) });
            out.backing = core::ptr::null_mut();
            out.backing_len = 0;
        }
        dst.device_count = self.device_count;
        dst.preset = self.preset;
        dst.channels = self.channels;
        dst.channel_size = self.channel_size;
        dst.host_capacity = self.host_capacity;
        dst.placement = self.placement;
        *dst.aligned_alloc.get_mut() = self.aligned_alloc.load(Ordering::Acquire);
        *dst.feature_flags.get_mut() = self.feature_flags.load(Ordering::Acquire);
        *dst.stray_alloc_calls.get_mut() = 0;
        *dst.fail_countdown.get_mut() = 0;
        *dst.fail_categories.get_mut() = 0;
    }

    /// Forces every part lock open: for a simulator in memory shared by processes, after a
    /// process died holding the outer lock (and so perhaps one of these). `&mut self` proves
    /// no call is running in this process; run [`SimDevice::check_pools`] afterwards.
    pub fn reset_locks(&mut self) {
        for slot in &mut self.slots {
            for part in &mut slot.channels {
                part.lock = nrt_mutex_t::new();
            }
            slot.host.lock = nrt_mutex_t::new();
        }
    }
}
