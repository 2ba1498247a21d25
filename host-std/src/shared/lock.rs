//! The device lock and the ownership table it guards (docs/SHARED_DEVICE.md): booking and
//! reclaiming allocations and cores, reaping dead processes, and recovering the counters
//! after a holder died (`EOWNERDEAD`).

use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, Ordering};

use nrt_core::driver::{errno, Driver, Errno};
use nrt_core::sim::{Placement, Preset, SimConfig, SimDevice, HOST_PA_BASE, MAX_CARVE_NODES};

use super::file::{last_errno, live_byte, ofd_locked};
use super::layout::{
    self, Owner, OwnerTable, Readable, CATEGORIES, CORES, MAX_PROCESSES, SLOT_FREE, SLOT_LIVE,
};
use super::{Inner, CATEGORY_CONTIGUOUS_SCRATCHPAD};

/// The device lock held; derefs to nothing, gives the parts.
pub(super) struct Locked<'a> {
    inner: &'a Inner,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: the mutex was initialised by the file's creator and is held by this
        // thread (taken in `Inner::lock`).
        unsafe { libc::pthread_mutex_unlock(self.inner.mutex()) };
    }
}

impl Locked<'_> {
    /// The shared `SimDevice`: `sim_offset()` is page-aligned inside the mapping and holds a
    /// `SimDevice` the creator initialised (zero-valid in any case). It is reached by any
    /// process only with the device lock held, which a `Locked` holds: no other process
    /// mutates it now, and this process's threads reach it through the same lock.
    fn sim_ptr(&self) -> *mut SimDevice {
        // SAFETY: the offset is inside the mapping (`layout` sizes the file to hold it).
        unsafe {
            self.inner
                .map
                .base()
                .add(layout::sim_offset())
                .cast::<SimDevice>()
        }
    }

    pub(super) fn sim(&self) -> &SimDevice {
        // SAFETY: see `sim_ptr`: a valid, initialised `SimDevice` behind the held lock.
        unsafe { &*self.sim_ptr() }
    }

    #[allow(clippy::mut_from_ref)]
    pub(super) fn sim_mut(&self) -> &mut SimDevice {
        // SAFETY: see `sim_ptr`; exclusive because the lock is held and no `&SimDevice` from
        // `sim()` is alive across a call of this (both are used only for one statement).
        unsafe { &mut *self.sim_ptr() }
    }

    /// The record indices of `(dev, carve)` that may hold a record: `1..` one past the
    /// highest index written since the pools were built ([`Readable::owner_bound`]).
    pub(super) fn owner_indices(&self, dev: u32, carve: u32) -> std::ops::Range<u32> {
        let bound = self
            .r()
            .owner_bound
            .get(dev as usize)
            .and_then(|d| d.get(carve as usize))
            .map_or(0, |b| b.load(Ordering::Relaxed));
        1..bound.min(MAX_CARVE_NODES)
    }

    /// [`Self::owner`], for writing a record: raises the carve's bound to cover it.
    #[allow(clippy::mut_from_ref)]
    pub(super) fn owner_to_write(&self, dev: u32, carve: u32, index: u32) -> Option<&mut Owner> {
        let o = self.owner(dev, carve, index)?;
        if let Some(b) = self
            .r()
            .owner_bound
            .get(dev as usize)
            .and_then(|d| d.get(carve as usize))
        {
            b.fetch_max(index + 1, Ordering::Relaxed);
        }
        Some(o)
    }

    /// Forgets every record bound (the pools were rebuilt and the table cleared).
    fn reset_owner_bounds(&self) {
        for b in self.r().owner_bound.iter().flatten() {
            b.store(0, Ordering::Relaxed);
        }
    }

    /// The owner record of key `(carve, index)` on device `dev`.
    #[allow(clippy::mut_from_ref)]
    pub(super) fn owner(&self, dev: u32, carve: u32, index: u32) -> Option<&mut Owner> {
        if dev >= self.inner.devices
            || carve >= nrt_core::sim::CARVES_PER_DEVICE
            || index >= MAX_CARVE_NODES
        {
            return None;
        }
        let table = layout::owners_offset() + dev as usize * size_of::<OwnerTable>();
        let off = table
            + (carve as usize * MAX_CARVE_NODES as usize + index as usize) * size_of::<Owner>();
        // SAFETY: `off` is inside the owners region (bounds checked above), aligned to 8
        // (tables and records are multiples of 8 from a page-aligned base), and `Owner` is
        // plain integers. Owner records are touched only under the device lock, which we
        // hold, and each call makes one short-lived reference.
        Some(unsafe { &mut *self.inner.map.base().add(off).cast::<Owner>() })
    }

    pub(super) fn r(&self) -> &Readable {
        self.inner.map.readable()
    }

    /// Books `size` bytes (`add` or not) for `slot` on `(dev, nc, cat)` under the seqlock.
    pub(super) fn book(&self, slot: usize, dev: u32, nc: u8, cat: u8, size: u64, add: bool) {
        let (d, c, k) = (dev as usize, nc as usize % CORES, cat as usize % CATEGORIES);
        let r = self.r();
        r.header.seq.fetch_add(1, Ordering::AcqRel);
        fence(Ordering::Release);
        let ctr = &r.counters[d][c][k];
        let u = &r.procs[slot].usage[d][c][k];
        if add {
            let t = ctr.total.load(Ordering::Relaxed).saturating_add(size);
            ctr.total.store(t, Ordering::Relaxed);
            ctr.peak.fetch_max(t, Ordering::Relaxed);
            u.fetch_add(size, Ordering::Relaxed);
            r.procs[slot].allocations.fetch_add(1, Ordering::Relaxed);
        } else {
            let t = ctr.total.load(Ordering::Relaxed).saturating_sub(size);
            ctr.total.store(t, Ordering::Relaxed);
            let v = u.load(Ordering::Relaxed).saturating_sub(size);
            u.store(v, Ordering::Relaxed);
            let a = r.procs[slot].allocations.load(Ordering::Relaxed);
            r.procs[slot]
                .allocations
                .store(a.saturating_sub(1), Ordering::Relaxed);
        }
        ctr.present.store(size, Ordering::Relaxed);
        self.publish_pools(dev);
        r.header.seq.fetch_add(1, Ordering::Release);
    }

    /// Copies device `dev`'s HBM pools' free space into the readable prefix (under the
    /// sequence counter, which the caller holds odd). Pools that fail their figures (damage)
    /// publish nothing new.
    pub(super) fn publish_pools(&self, dev: u32) {
        let Some(figs) = self.r().pools.get(dev as usize) else {
            return;
        };
        for (c, f) in figs.iter().enumerate() {
            let Ok(p) = guarded(|| self.sim().pool_stats(dev, false, c as u32)) else {
                continue;
            };
            f.capacity.store(p.capacity, Ordering::Relaxed);
            f.free.store(p.free, Ordering::Relaxed);
            f.largest_free.store(p.largest_free, Ordering::Relaxed);
        }
    }

    /// Calls `f` with every ownership record of `slot` (device, record): the allocations
    /// [`Self::reclaim`] frees.
    pub(super) fn for_each_owned(&self, slot: usize, mut f: impl FnMut(u32, &mut Owner)) {
        for dev in 0..self.inner.devices {
            for carve in 0..nrt_core::sim::CARVES_PER_DEVICE {
                for index in self.owner_indices(dev, carve) {
                    let Some(o) = self.owner(dev, carve, index) else {
                        continue;
                    };
                    if o.slot as usize == slot + 1 {
                        f(dev, o);
                    }
                }
            }
        }
    }

    /// Frees every allocation of `slot` and empties the slot (its process closed or died).
    /// Touches only records whose owner is `slot`. Returns the bytes returned.
    pub(super) fn reclaim(&self, slot: usize) -> u64 {
        let mut bytes = 0;
        self.for_each_owned(slot, |dev, o| {
            let rec = *o;
            *o = Owner::default();
            if self.sim().memory_free(dev, rec.handle).is_err() {
                log::warn!(
                    target: "nrt_host::shared",
                    "{}: reclaim: the pools did not know handle {:#x}",
                    self.inner.name, rec.handle
                );
            }
            self.book(slot, dev, rec.nc, rec.category, rec.size, false);
            bytes += rec.size;
        });
        let p = &self.r().procs[slot];
        p.clear_counters();
        p.pid.store(0, Ordering::Relaxed);
        p.state.store(SLOT_FREE, Ordering::Release);
        bytes
    }

    /// What [`Self::reclaim`] does to the pools, done to `copy`, a private copy of them
    /// ([`SimDevice::copy_to`]), instead: every allocation of `slot` freed there, the file
    /// untouched (a plan's snapshot, docs/PLAN.md). Returns the bytes freed.
    pub(super) fn reclaim_in(&self, slot: usize, copy: &SimDevice) -> u64 {
        let mut bytes = 0;
        self.for_each_owned(slot, |dev, o| {
            if copy.memory_free(dev, o.handle).is_err() {
                log::warn!(
                    target: "nrt_host::shared",
                    "{}: snapshot: the pools did not know handle {:#x}",
                    self.inner.name, o.handle
                );
            }
            bytes += o.size;
        });
        bytes
    }

    /// Reclaims every slot whose process is dead ([`Inner::slot_dead`]). Returns how many
    /// were reclaimed.
    pub(super) fn reap(&self) -> usize {
        let mut n = 0;
        for s in 0..MAX_PROCESSES {
            if !self.inner.slot_dead(s) {
                continue;
            }
            let p = &self.r().procs[s];
            let pid = p.pid.load(Ordering::Relaxed);
            let bytes = self.reclaim(s);
            self.r().header.reclaimed.fetch_add(1, Ordering::Relaxed);
            log::info!(
                target: "nrt_host::shared",
                "{}: process {pid} is gone; reclaimed its {bytes} bytes and its cores",
                self.inner.name
            );
            n += 1;
        }
        n
    }

    /// After a holder died: check the pools, reconcile them with the ownership table, and
    /// recount the counters from the table; poison the device if the pools are damaged.
    ///
    /// Every update writes the pools and the table in an order that leaves at most one
    /// mismatch at any key, and recovery settles each the one safe way: a live allocation
    /// nobody owns was being allocated or freed by the dead holder (a handle is handed out
    /// only after its record is written), so it is freed; a record whose allocation is gone
    /// was being freed, so it is cleared. Nothing another live process owns is touched.
    fn recover(&self) {
        let r = self.r();
        let dead = r
            .procs
            .iter()
            .enumerate()
            .find(|(s, _)| self.inner.slot_dead(*s))
            .map_or(0, |(_, p)| p.pid.load(Ordering::Relaxed));
        self.sim_mut().reset_locks();
        let checked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.sim().check_pools()));
        let why = match checked {
            Err(_) => Some("the pools are damaged (their check failed hard)".to_string()),
            Ok(Err(e)) => Some(format!("the pools are inconsistent ({e})")),
            Ok(Ok(())) => None,
        };
        let why = why.and_then(|why| match self.rebuild() {
            Ok(n) => {
                log::warn!(
                    target: "nrt_host::shared",
                    "{}: process {dead} died inside a pool update and {why}; the pools were \
                     rebuilt from the ownership table ({n} allocation(s) re-created at their \
                     addresses, their owners' handles kept)",
                    self.inner.name
                );
                None
            }
            Err(e) => Some(format!("{why}, and rebuilding them failed ({e})")),
        });
        if let Some(why) = why {
            r.header.poisoned_by.store(dead, Ordering::Relaxed);
            r.header.poisoned.store(layout::POISONED, Ordering::Release);
            log::error!(
                target: "nrt_host::shared",
                "{}: process {dead} died holding the device lock and {why}; the device is \
                 refused from now on",
                self.inner.name
            );
            return;
        }
        let seq = r.header.seq.load(Ordering::Relaxed);
        r.header.seq.store(seq | 1, Ordering::Release);
        for d in &r.counters {
            for c in d {
                for k in c {
                    k.total.store(0, Ordering::Relaxed);
                }
            }
        }
        for p in &r.procs {
            p.allocations.store(0, Ordering::Relaxed);
            for d in &p.usage {
                for c in d {
                    for k in c {
                        k.store(0, Ordering::Relaxed);
                    }
                }
            }
        }
        let (mut freed, mut cleared) = (0, 0);
        for dev in 0..self.inner.devices {
            for carve in 0..nrt_core::sim::CARVES_PER_DEVICE {
                for index in self.owner_indices(dev, carve) {
                    let Some(o) = self.owner(dev, carve, index) else {
                        continue;
                    };
                    let live = self.sim().live_handle(dev, carve, index);
                    let owned = o.slot != 0 && o.slot as usize <= MAX_PROCESSES;
                    match (live, owned) {
                        (Some(h), true) if h == o.handle => {}
                        (Some(h), _) => {
                            // Allocated or being freed by the dead holder, and not (any more)
                            // recorded: nobody else can hold the handle.
                            let _ = self.sim().memory_free(dev, h);
                            *o = Owner::default();
                            freed += 1;
                            continue;
                        }
                        (None, true) => {
                            *o = Owner::default();
                            cleared += 1;
                            continue;
                        }
                        (None, false) => continue,
                    }
                    let (d, c, k) = (
                        dev as usize,
                        o.nc as usize % CORES,
                        o.category as usize % CATEGORIES,
                    );
                    let t = r.counters[d][c][k]
                        .total
                        .fetch_add(o.size, Ordering::Relaxed)
                        + o.size;
                    r.counters[d][c][k].peak.fetch_max(t, Ordering::Relaxed);
                    let p = &r.procs[o.slot as usize - 1];
                    p.usage[d][c][k].fetch_add(o.size, Ordering::Relaxed);
                    p.allocations.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        r.header.seq.store((seq | 1) + 1, Ordering::Release);
        log::warn!(
            target: "nrt_host::shared",
            "{}: process {dead} died holding the device lock; the pools are consistent \
             ({freed} unrecorded allocation(s) freed, {cleared} stale record(s) cleared), the \
             counters were recounted",
            self.inner.name
        );
    }

    /// Re-creates the pools from the ownership table: a fresh `SimDevice` of the header's
    /// configuration, every owned allocation placed again at its address
    /// ([`SimDevice::place_at`]), each record moved to its new handle's key with the handle
    /// its owner holds kept as `alias`. Returns the allocations re-created.
    fn rebuild(&self) -> Result<usize, String> {
        let h = &self.r().header;
        let preset = Preset::ALL
            .into_iter()
            .find(|p| *p as u32 == h.preset.load(Ordering::Relaxed))
            .ok_or("the header names no preset")?;
        let mut cfg = SimConfig::new(preset, h.devices.load(Ordering::Relaxed));
        cfg.channel_size_override = Some(h.channel_size.load(Ordering::Relaxed));
        cfg.host_dma_capacity = h.host_capacity.load(Ordering::Relaxed);
        cfg.aligned_alloc = h.aligned_alloc.load(Ordering::Relaxed) != 0;
        cfg.placement = if h.placement.load(Ordering::Relaxed) == Placement::Tlsf as u32 {
            Placement::Tlsf
        } else {
            Placement::Genalloc
        };
        let mut live = Vec::new();
        for dev in 0..self.inner.devices {
            for carve in 0..nrt_core::sim::CARVES_PER_DEVICE {
                for index in self.owner_indices(dev, carve) {
                    let Some(o) = self.owner(dev, carve, index) else {
                        continue;
                    };
                    if o.slot != 0 && o.slot as usize <= MAX_PROCESSES {
                        live.push((dev, carve, *o));
                    }
                    *o = Owner::default();
                }
            }
        }
        self.reset_owner_bounds();
        self.sim_mut()
            .init(&cfg)
            .map_err(|e| format!("the header's configuration was refused (errno {e})"))?;
        for (dev, carve, rec) in &live {
            let scratch = rec.category == CATEGORY_CONTIGUOUS_SCRATCHPAD;
            let new = self
                .sim()
                .place_at(*dev, *carve, rec.pa, rec.size, scratch)
                .map_err(|_| format!("records overlap at {:#x}", rec.pa))?;
            let (k, i) = self
                .sim()
                .handle_key(*dev, new)
                .map_err(|e| e.to_string())?;
            let o = self
                .owner_to_write(*dev, k, i)
                .ok_or("a new handle outside the table")?;
            *o = Owner {
                handle: new,
                alias: if rec.alias != 0 {
                    rec.alias
                } else {
                    rec.handle
                },
                ..*rec
            };
        }
        guarded(|| self.sim().check_pools().map_err(|_| errno::EIO))
            .map_err(|_| "the rebuilt pools fail their check".to_string())?;
        Ok(live.len())
    }

    pub(super) fn poisoned(&self) -> Result<(), Errno> {
        if self.r().header.poisoned.load(Ordering::Acquire) == layout::POISONED {
            log::error!(
                target: "nrt_host::shared",
                "{}: the device is inconsistent since process {} died mid-update; remove {} \
                 once no process uses it",
                self.inner.name,
                self.r().header.poisoned_by.load(Ordering::Relaxed),
                self.inner.path.display()
            );
            Err(errno::EIO)
        } else {
            Ok(())
        }
    }

    /// The record of a handle this process owns, or `EINVAL` (never touches another's). The
    /// record's `handle` is the pools' current one (after a rebuild, not the caller's).
    pub(super) fn mine(&self, dev: u32, handle: u64) -> Result<&mut Owner, Errno> {
        let me = (self.inner.slot + 1) as u8;
        let (carve, index) = self.sim().handle_key(dev, handle)?;
        let o = self.owner(dev, carve, index).ok_or(errno::EINVAL)?;
        if o.slot == me && o.handle == handle && o.alias == 0 {
            return Ok(o);
        }
        // A handle from before a rebuild: its record moved to the new handle's key.
        for carve in 0..nrt_core::sim::CARVES_PER_DEVICE {
            for index in self.owner_indices(dev, carve) {
                if let Some(o) = self.owner(dev, carve, index) {
                    if o.slot == me && o.alias == handle {
                        return Ok(o);
                    }
                }
            }
        }
        Err(errno::EINVAL)
    }
}

/// Runs `f` on simulator state that came from another process: a panic (state damaged in a
/// way the checks missed) becomes `EIO` instead of unwinding into the caller.
pub(super) fn guarded<R>(f: impl FnOnce() -> Result<R, Errno>) -> Result<R, Errno> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(Err(errno::EIO))
}

impl Inner {
    pub(super) fn mutex(&self) -> *mut libc::pthread_mutex_t {
        // SAFETY: `lock_offset()` is a page inside the mapping reserved for the mutex.
        unsafe { self.map.base().add(layout::lock_offset()).cast() }
    }

    /// What is wrong with the file under this process, if anything: it shrank (an access
    /// past its new end faulted, or its size changed) — then nothing in it can be used — or it
    /// was removed from its directory — then this process keeps working on it, but a process
    /// started now creates a new device and is not kept off this one's cores. Each is logged
    /// once, as an error.
    pub(super) fn file_damage(&self) -> Option<(bool, String)> {
        // SAFETY: `fstat` fills a zeroed struct for an fd we hold.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        let ok = unsafe { libc::fstat(self.fd.as_raw_fd(), &mut st) } == 0;
        let d = if self.map.faulted() || (ok && st.st_size as u64 != layout::file_size() as u64) {
            Some((
                true,
                format!(
                    "{} was truncated under this process (now {} bytes): its allocator state is \
                     gone; every further call fails (stop the device's processes, the next one \
                     re-creates it)",
                    self.path.display(),
                    st.st_size
                ),
            ))
        } else if ok && st.st_nlink == 0 {
            Some((
                false,
                format!(
                    "{} was removed while this process uses it: this process keeps its memory and \
                     cores, but a process started now creates a new device and is not kept off \
                     them",
                    self.path.display()
                ),
            ))
        } else {
            None
        };
        if let Some((_, m)) = &d {
            if !self.damage_told.swap(true, Ordering::Relaxed) {
                log::error!(target: "nrt_host::shared", "{}: {m}", self.name);
            }
        }
        d
    }

    pub(super) fn lock(&self) -> Result<Locked<'_>, Errno> {
        if let Some((true, _)) = self.file_damage() {
            return Err(errno::EIO);
        }
        // SAFETY: the mutex was initialised process-shared and robust by the file's creator
        // (`init_file`) and lives for as long as the mapping.
        let r = unsafe { libc::pthread_mutex_lock(self.mutex()) };
        if r == 0 {
            return Ok(Locked { inner: self });
        }
        if r == libc::EOWNERDEAD {
            // SAFETY: we hold the mutex in the EOWNERDEAD state; marking it consistent is
            // what the protocol asks before the state is repaired (`recover`).
            unsafe { libc::pthread_mutex_consistent(self.mutex()) };
            let g = Locked { inner: self };
            g.recover();
            return Ok(g);
        }
        // ENOTRECOVERABLE (a holder died and its successor did not repair it) or EINVAL:
        // the pools cannot be reached safely; say so on every call.
        log::error!(
            target: "nrt_host::shared",
            "{}: the device lock cannot be taken (errno {r}); remove {} once no process uses it",
            self.name,
            self.path.display()
        );
        Err(errno::EIO)
    }

    /// Bytes behind `[pa, pa + len)` of device `dev` in this process's backing.
    fn window(&self, dev: u32, pa: u64, host: bool, len: u64) -> Result<*mut u8, Errno> {
        let b = self.backing.get(dev as usize).ok_or(errno::ENODEV)?;
        let off = if host {
            self.channels as u64 * self.channel_size + (pa - HOST_PA_BASE)
        } else {
            pa
        };
        if off.checked_add(len).is_none_or(|e| e > b.len()) {
            return Err(errno::EFAULT);
        }
        let off = usize::try_from(off).map_err(|_| errno::EFAULT)?;
        // SAFETY: `off + len <= b.len()`: inside the reservation.
        Ok(unsafe { b.as_ptr().add(off) })
    }

    /// Runs a copy on the live allocation `handle` (owned by this process) at
    /// `[offset, offset + len)`, with the lock held.
    pub(super) fn with_window(
        &self,
        dev: u32,
        handle: u64,
        offset: u64,
        len: u64,
        f: impl FnOnce(*mut u8),
    ) -> Result<(), Errno> {
        let g = self.lock()?;
        g.poisoned()?;
        guarded(|| {
            let real = g.mine(dev, handle)?.handle;
            let info = g.sim().memory_info(dev, real)?;
            let end = offset.checked_add(len).ok_or(errno::EFAULT)?;
            if end > info.size {
                return Err(errno::EFAULT);
            }
            let p = self.window(dev, info.pa, info.host, info.size)?;
            // SAFETY: `offset + len <= info.size` and `[p, p + info.size)` is in the backing.
            f(unsafe { p.add(offset as usize) });
            Ok(())
        })
    }
}

pub(super) fn h_slot_live(inner: &Inner, s: usize) -> bool {
    inner.map.readable().procs[s].state.load(Ordering::Acquire) == SLOT_LIVE
}

pub(super) fn pids(r: &Readable) -> String {
    let v: Vec<String> = r
        .procs
        .iter()
        .filter(|p| p.state.load(Ordering::Relaxed) == SLOT_LIVE)
        .map(|p| p.pid.load(Ordering::Relaxed).to_string())
        .collect();
    format!("pids {}", v.join(", "))
}

impl Inner {
    /// Whether some other slot is live, its liveness lock still held, but its pid gone: a
    /// process that just died, whose lock the kernel is about to drop. (A pid in another pid
    /// namespace also looks gone: then the caller waits a second for nothing.)
    pub(super) fn any_dying(&self) -> bool {
        let r = self.map.readable();
        (0..MAX_PROCESSES).any(|s| {
            s != self.slot
                && h_slot_live(self, s)
                && ofd_locked(self.fd.as_raw_fd(), live_byte(s)) == Ok(true)
                && {
                    let pid = r.procs[s].pid.load(Ordering::Relaxed) as libc::pid_t;
                    // SAFETY: signal 0 only checks that the pid exists; nothing is sent.
                    pid > 0
                        && unsafe { libc::kill(pid, 0) } != 0
                        && last_errno().raw() == libc::ESRCH
                }
        })
    }

    /// Whether slot `s` is another process's that is dead: marked live, but its liveness
    /// lock is free (the kernel dropped it when the process died). The one test of death:
    /// what [`Locked::reap`] reclaims, and what a join and a plan's snapshot leave out.
    pub(super) fn slot_dead(&self, s: usize) -> bool {
        s != self.slot
            && h_slot_live(self, s)
            && ofd_locked(self.fd.as_raw_fd(), live_byte(s)) == Ok(false)
    }

    /// Whether some other slot is marked live and its process still lives (its liveness lock
    /// is held): a file in use, whose geometry a joiner must match, rather than a stale one
    /// it re-creates.
    pub(super) fn any_live(&self) -> bool {
        (0..MAX_PROCESSES).any(|s| {
            s != self.slot
                && h_slot_live(self, s)
                && ofd_locked(self.fd.as_raw_fd(), live_byte(s)) == Ok(true)
        })
    }

    /// Whether some other slot looks live but its process is gone (no lock needed).
    pub(super) fn any_dead(&self) -> bool {
        (0..MAX_PROCESSES).any(|s| self.slot_dead(s))
    }
}
