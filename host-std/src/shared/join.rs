//! Opening a shared device (docs/SHARED_DEVICE.md "Joining"): the header check, creating or
//! re-creating the file, admitting this process to a slot and its cores, and the snapshot of
//! the pools a plan reads without joining.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use nrt_core::driver::{errno, DeviceInfo, Driver, Errno};
use nrt_core::sim::{Placement, Preset, SimConfig, SimDevice};

use super::file::{flock, last_errno, live_byte, ofd_lock, ofd_locked, open_file, Mapping};
use super::layout::{self, MAX_PROCESSES, SLOT_FREE, SLOT_LIVE};
use super::lock::{guarded, h_slot_live, pids, Locked};
use super::{device_path, reader, Inner, JoinRequest, SharedDevice, SharedError, SharedName};
use super::{HOLD_VAR, REAP_INTERVAL};
use crate::backing::HostReservation;

fn fstat(fd: RawFd) -> Result<libc::stat, Errno> {
    // SAFETY: `fstat` fills a zeroed struct for an fd the caller holds.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(last_errno());
    }
    Ok(st)
}

/// The variable setting the mode a shared device file is created with (octal, default
/// `0600`): `0640` lets a monitor of the file's group read it, `0660` lets processes of the
/// group join it (docs/SHARED_DEVICE.md "Permissions").
pub const MODE_VAR: &str = "NRT_DMEM_SHM_MODE";

/// The mode [`MODE_VAR`] asks for (the owner keeps read and write), or `Err` naming the bad
/// value.
pub fn create_mode() -> Result<u32, String> {
    let Some(v) = std::env::var_os(MODE_VAR).filter(|v| !v.is_empty()) else {
        return Ok(0o600);
    };
    let t = v.to_string_lossy();
    match u32::from_str_radix(t.trim().trim_start_matches("0o"), 8) {
        Ok(m) if m <= 0o666 && m & 0o600 == 0o600 => Ok(m),
        _ => Err(format!(
            "{MODE_VAR}={t}: expected an octal file mode from 0600 to 0666 that keeps the \
             owner's read and write (e.g. 0640, 0660)"
        )),
    }
}

/// Gives a file this process just created the mode [`MODE_VAR`] asks for (whatever the
/// umask).
fn apply_mode(fd: RawFd, st: &libc::stat, path: &Path) -> Result<(), (Errno, String)> {
    let mode = create_mode().map_err(|m| (errno::EINVAL, m))?;
    // SAFETY: `geteuid` has no preconditions.
    if st.st_uid != unsafe { libc::geteuid() } {
        return Ok(());
    }
    // SAFETY: `fchmod` on an fd we hold.
    if unsafe { libc::fchmod(fd, mode as libc::mode_t) } != 0 {
        return Err((
            last_errno(),
            format!("cannot set the mode of {}", path.display()),
        ));
    }
    Ok(())
}

/// A file this process may join: a regular file, owned by this user or shared with it by its
/// mode (read and write for its group, when this process is in that group, or for others).
/// The kernel lets root open anything; this keeps root off another user's private device
/// too. `EACCES` naming owner and mode otherwise.
pub(crate) fn check_owner(st: &libc::stat, path: &Path) -> Result<(), (Errno, String)> {
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err((
            errno::EINVAL,
            format!("{} is not a regular file", path.display()),
        ));
    }
    // SAFETY: `geteuid`/`getegid` have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if st.st_uid == uid {
        return Ok(());
    }
    let mode = st.st_mode & 0o777;
    let in_group = st.st_gid == gid || {
        let mut groups = [0 as libc::gid_t; 256];
        // SAFETY: `getgroups` writes at most `groups.len()` ids into the array.
        let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
        n > 0 && groups[..n as usize].contains(&st.st_gid)
    };
    if mode & 0o006 == 0o006 || (in_group && mode & 0o060 == 0o060) {
        return Ok(());
    }
    Err((
        Errno::new(libc::EACCES),
        format!(
            "permission denied: {} is owned by uid {} (group {}) with mode {mode:04o}, which does \
             not share it with this user (uid {uid}); its owner shares it by creating it with \
             {MODE_VAR}=0660 for a common group",
            path.display(),
            st.st_uid,
            st.st_gid
        ),
    ))
}

/// Whether any slot's liveness lock is held (by a live process), read from the locks alone.
pub(crate) fn any_slot_locked(fd: RawFd) -> bool {
    (0..MAX_PROCESSES).any(|s| ofd_locked(fd, live_byte(s)) == Ok(true))
}

/// What is wrong with a non-empty file of `len` bytes, read through a private read-only
/// mapping of its header page only when it has one: too short, too long, or a header that is
/// not this build's (magic, version, sizes, devices). `None`: sound.
fn damage(fd: RawFd, len: u64) -> Option<String> {
    if len < layout::readable_size() as u64 {
        return Some(format!(
            "{len} bytes, too short for a shared device (corrupted)"
        ));
    }
    let Ok(map) = Mapping::map(fd, layout::readable_size(), false) else {
        return Some("cannot map its header".into());
    };
    check_header(&map.readable().header, len).err()
}

/// Checks a header against what this build expects; the message names the mismatch.
pub(crate) fn check_header(h: &layout::Header, file_len: u64) -> Result<(), String> {
    let magic = h.magic.load(Ordering::Acquire);
    if magic != layout::MAGIC {
        return Err(format!(
            "not a shared device file (magic {magic:#018x}, expected {:#018x})",
            layout::MAGIC
        ));
    }
    let v = h.version.load(Ordering::Acquire);
    if v != layout::LAYOUT_VERSION {
        return Err(format!(
            "the file has layout version {v}, this build uses version {} (made by another \
             nrt-dmem version: stop its processes and remove the file)",
            layout::LAYOUT_VERSION
        ));
    }
    let want = layout::file_size() as u64;
    if h.file_size.load(Ordering::Acquire) != want || file_len != want {
        return Err(format!(
            "the file is {file_len} bytes and its header says {}, expected {want} (corrupted \
             or truncated)",
            h.file_size.load(Ordering::Acquire)
        ));
    }
    if h.readable_size.load(Ordering::Acquire) != layout::readable_size() as u64 {
        return Err("the header's readable size is wrong (corrupted)".into());
    }
    let devices = h.devices.load(Ordering::Acquire);
    if devices == 0 || devices as usize > layout::MAX_DEVICES {
        return Err(format!("the header names {devices} devices (corrupted)"));
    }
    Ok(())
}

/// The join's geometry rule (docs/SHARED_DEVICE.md "Lock and recovery protocol"): a file
/// with live processes is joined only as the device it was made as (preset, devices, channel
/// and host pool sizes); `EBUSY` naming both otherwise. A join and a plan's snapshot both
/// apply it.
fn check_geometry(h: &layout::Header, cfg: &SimConfig) -> Result<(), (Errno, String)> {
    let channel = cfg
        .channel_size_override
        .unwrap_or(cfg.preset.device_info().hbm_channel_size);
    let same = h.preset.load(Ordering::Acquire) == cfg.preset as u32
        && h.devices.load(Ordering::Acquire) == cfg.devices
        && h.channel_size.load(Ordering::Acquire) == channel
        && h.host_capacity.load(Ordering::Acquire) == cfg.host_dma_capacity
        // The placement policy is the pools': one for every process of the device.
        && h.placement.load(Ordering::Acquire) == cfg.placement as u32;
    if same {
        return Ok(());
    }
    let placement = |v: u32| {
        [Placement::Genalloc, Placement::Tlsf]
            .into_iter()
            .find(|p| *p as u32 == v)
            .map_or("?", |p| p.name())
    };
    Err((
        errno::EBUSY,
        format!(
            "in use as a {}x{} (channel {} B, {} placement) by live processes; this process \
             asks for {}x{} (channel {} B, {} placement)",
            Preset::ALL
                .iter()
                .find(|p| **p as u32 == h.preset.load(Ordering::Relaxed))
                .map_or("?", |p| p.name()),
            h.devices.load(Ordering::Relaxed),
            h.channel_size.load(Ordering::Relaxed),
            placement(h.placement.load(Ordering::Relaxed)),
            cfg.preset.name(),
            cfg.devices,
            channel,
            cfg.placement.name(),
        ),
    ))
}

/// Under the device lock: a poisoned device ([`layout::POISONED`]) is refused, naming the
/// pid whose death poisoned it and the file to remove.
fn refuse_poisoned(g: &Locked<'_>, path: &Path) -> Result<(), (Errno, String)> {
    g.poisoned().map_err(|e| {
        (
            e,
            format!(
                "inconsistent since process {} died mid-update; remove {} once no process uses \
                 it",
                g.r().header.poisoned_by.load(Ordering::Relaxed),
                path.display()
            ),
        )
    })
}

/// Under the device lock, for a file another process made: its pools pass their check before
/// they are trusted (`EINVAL` otherwise). Their own locks are only ever taken under the device
/// lock, which we hold, so none is legitimately held now: they are forced open first, so a
/// damaged lock word cannot make the check spin.
fn check_pools(g: &Locked<'_>, path: &Path) -> Result<(), (Errno, String)> {
    g.sim_mut().reset_locks();
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.sim().check_pools()));
    match checked {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err((
            errno::EINVAL,
            format!("{}: corrupted pools ({e})", path.display()),
        )),
        Err(_) => Err((
            errno::EINVAL,
            format!(
                "{}: corrupted pools (their check failed hard)",
                path.display()
            ),
        )),
    }
}

/// The join's admission rules (public ABI §3; docs/SHARED_DEVICE.md "What each process
/// gets"), judged under the device lock on `r`, the file of `inner`: a slot free for a
/// newcomer (at most [`MAX_PROCESSES`]) and none of `req.cores` held by a live process
/// (cores are exclusive). A dead process ([`Inner::slot_dead`]) holds neither, as after the
/// reap a joiner runs first: so a join (which has reaped) and a plan's snapshot (which leaves
/// the file as it is) judge alike.
///
/// Returns the free slot a joiner takes, or `None` when the only slots to be had are dead
/// processes' (a joiner must reap them before taking one: their records are still theirs).
fn admission(
    inner: &Inner,
    r: &layout::Readable,
    req: &JoinRequest,
) -> Result<Option<usize>, (Errno, String)> {
    let free = (0..MAX_PROCESSES).find(|&s| {
        r.procs[s].state.load(Ordering::Acquire) == SLOT_FREE
            && ofd_locked(inner.fd.as_raw_fd(), live_byte(s)) == Ok(false)
    });
    if free.is_none() && !(0..MAX_PROCESSES).any(|s| inner.slot_dead(s)) {
        return Err((
            errno::EBUSY,
            format!(
                "already has {MAX_PROCESSES} processes (the driver admits at most \
                 {MAX_PROCESSES} per device): {}",
                pids(r)
            ),
        ));
    }
    let holders: Vec<(u32, Vec<u32>)> = r
        .procs
        .iter()
        .enumerate()
        .filter(|&(t, p)| p.state.load(Ordering::Acquire) == SLOT_LIVE && !inner.slot_dead(t))
        .map(|(_, p)| {
            let cores = p.cores.iter().map(|c| c.load(Ordering::Acquire)).collect();
            (p.pid.load(Ordering::Relaxed), cores)
        })
        .collect();
    check_cores(&holders, req)?;
    Ok(free)
}

/// The cores rule (public ABI §3: NeuronCores are exclusive to one process): none of
/// `req.cores` may be held by a live process of `holders` (pid, cores per device); `EBUSY`
/// naming the first core held and its holder otherwise.
fn check_cores(holders: &[(u32, Vec<u32>)], req: &JoinRequest) -> Result<(), (Errno, String)> {
    for (dev, &want) in req
        .cores
        .iter()
        .enumerate()
        .take(req.config.devices as usize)
    {
        for (pid, cores) in holders {
            let held = cores.get(dev).copied().unwrap_or(0) & want;
            if held != 0 {
                return Err((
                    errno::EBUSY,
                    format!(
                        "NeuronCore {} of nd{dev} is held by process {pid} (cores are exclusive \
                         to one process)",
                        held.trailing_zeros(),
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl SharedDevice {
    /// Opens device `name` (creating it, or re-creating a stale one), takes a process slot
    /// and claims `req.cores`. Refusals: `EBUSY` (16 processes, a core another process holds
    /// — the message names its pid — or a live device of another geometry), `EACCES`
    /// (permission), `EINVAL` (a file of another layout version or a corrupted one), `EIO`
    /// (a poisoned device).
    pub fn open(name: &SharedName, req: &JoinRequest) -> Result<Self, SharedError> {
        let path = device_path(name);
        let fail = |errno: Errno, message: String| SharedError {
            name: name.to_string(),
            message,
            errno,
        };
        let fd = open_file(&path, libc::O_RDWR | libc::O_CREAT).map_err(|e| {
            let what = if e.raw() == libc::EACCES || e.raw() == libc::EPERM {
                "permission denied"
            } else if e.raw() == libc::ELOOP {
                "a symbolic link, never followed (remove it)"
            } else {
                "cannot open"
            };
            fail(
                e,
                format!(
                    "{what}: {} ({})",
                    path.display(),
                    std::io::Error::from_raw_os_error(e.raw())
                ),
            )
        })?;
        flock(fd.as_raw_fd(), libc::LOCK_EX)
            .map_err(|e| fail(e, format!("cannot lock {}", path.display())))?;
        // The flock is dropped with `fd` on every early return (and explicitly below).
        let r = Self::join(name, &path, fd, req);
        r.map_err(|(e, m)| fail(e, m))
    }

    fn join(
        name: &SharedName,
        path: &Path,
        fd: OwnedFd,
        req: &JoinRequest,
    ) -> Result<Self, (Errno, String)> {
        let raw = fd.as_raw_fd();
        let st = fstat(raw).map_err(|e| (e, format!("cannot stat {}", path.display())))?;
        check_owner(&st, path)?;
        let size = layout::file_size();
        let mut fresh = st.st_size == 0;
        if fresh && any_slot_locked(raw) {
            return Err((
                errno::EINVAL,
                format!(
                    "{} was truncated to 0 bytes while live processes still use it; it is left \
                     as it is (stop them, then the next process re-creates it)",
                    path.display()
                ),
            ));
        }
        if !fresh {
            if let Some(damage) = damage(raw, st.st_size as u64) {
                // Liveness locks are bytes past the end of the file: they are read without
                // trusting (or even mapping) the damaged contents.
                if any_slot_locked(raw) {
                    return Err((
                        errno::EINVAL,
                        format!(
                            "{}: {damage}; live processes still use it, so it is left as it is \
                             (stop them, then the next process re-creates it)",
                            path.display()
                        ),
                    ));
                }
                log::warn!(
                    target: "nrt_host::shared",
                    "{name}: {}: {damage}; no process uses it: re-creating it",
                    path.display()
                );
                // SAFETY: `ftruncate` on an fd we hold open for writing (under the flock).
                if unsafe { libc::ftruncate(raw, 0) } != 0 {
                    return Err((last_errno(), format!("cannot empty {}", path.display())));
                }
                fresh = true;
            }
        }
        if fresh {
            // SAFETY: `ftruncate` on an fd we hold open for writing.
            if unsafe { libc::ftruncate(raw, size as libc::off_t) } != 0 {
                return Err((last_errno(), format!("cannot size {}", path.display())));
            }
            apply_mode(raw, &st, path)?;
        }
        // Not fresh: `damage` found the file exactly `size` bytes with a sound header.
        let map = Mapping::map(raw, size, true)
            .map_err(|e| (e, format!("cannot map {}", path.display())))?;
        let devices = req.config.devices;
        let hold_ms = std::env::var(HOLD_VAR)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        // Not joined yet: no slot is "ours" while admitting.
        let mut inner = Inner::unjoined(
            name.to_string(),
            path.to_path_buf(),
            fd,
            map,
            devices,
            hold_ms,
        );
        let h = &inner.map.readable().header;
        let live_others = !fresh && h.ready.load(Ordering::Acquire) == 1 && inner.any_live();
        if !live_others {
            if !fresh {
                log::info!(
                    target: "nrt_host::shared",
                    "{name}: every process of {} is gone (or it never finished initialising): \
                     re-creating it rather than trusting it",
                    path.display()
                );
            }
            init_file(&inner, &req.config)?;
        } else {
            check_geometry(h, &req.config)?;
        }
        // Join under the device lock.
        let slot;
        let info;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let r = Self::admit(&inner, path, raw, fresh, live_others, req);
            match r {
                Ok(s) => {
                    slot = s.0;
                    info = s.1;
                    break;
                }
                // A process that is gone (no such pid) but whose liveness lock the kernel has
                // not dropped yet (its file is released a moment after its death): wait for
                // it rather than refuse for lack of what it held.
                Err((e, _)) if e == errno::EBUSY && attempt < 100 && inner.any_dying() => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(e),
            }
        }
        inner.info = info;
        Self::finish(name, inner, slot, raw)
    }

    /// Admits this process under the device lock: checks a file we did not create, reaps the
    /// dead, takes a free slot and the requested cores. Returns the slot and the devices' info.
    fn admit(
        inner: &Inner,
        path: &Path,
        raw: RawFd,
        fresh: bool,
        live_others: bool,
        req: &JoinRequest,
    ) -> Result<(usize, Vec<DeviceInfo>), (Errno, String)> {
        let devices = req.config.devices;
        {
            let g = inner
                .lock()
                .map_err(|e| (e, "cannot take the device lock".to_string()))?;
            refuse_poisoned(&g, path)?;
            if !fresh && live_others {
                check_pools(&g, path)?;
            }
            g.reap();
            // `None`: a process died since the reap; reap it too (each round frees a slot, and
            // none becomes live meanwhile: joins run under the flock we hold).
            let mut slot = None;
            for _ in 0..=MAX_PROCESSES {
                slot = admission(inner, g.r(), req)?;
                if slot.is_some() {
                    break;
                }
                g.reap();
            }
            let Some(s) = slot else {
                return Err((
                    errno::EBUSY,
                    "every slot is a dead process's (retry)".into(),
                ));
            };
            // Liveness first, then the slot becomes visible as live.
            match ofd_lock(raw, live_byte(s), true) {
                Ok(true) => {}
                Ok(false) => {
                    return Err((
                        errno::EBUSY,
                        "a dead slot's liveness lock is still held (retry)".into(),
                    ))
                }
                Err(e) => return Err((e, "cannot take the slot's liveness lock".into())),
            }
            let p = &g.r().procs[s];
            p.pid.store(inner.pid, Ordering::Relaxed);
            p.joined_at.store(unix_now(), Ordering::Relaxed);
            p.allocations.store(0, Ordering::Relaxed);
            for (dev, c) in p.cores.iter().enumerate() {
                c.store(req.cores.get(dev).copied().unwrap_or(0), Ordering::Relaxed);
            }
            p.state.store(SLOT_LIVE, Ordering::Release);
            // The free-space figures a reader shows, from the first join on.
            g.r().header.seq.fetch_add(1, Ordering::AcqRel);
            for d in 0..devices {
                g.publish_pools(d);
            }
            g.r().header.seq.fetch_add(1, Ordering::Release);
            let i: Result<Vec<_>, _> = (0..devices).map(|d| g.sim().device_info(d)).collect();
            let info = i.map_err(|e| (e, "device info".to_string()))?;
            Ok((s, info))
        }
    }

    /// The rest of joining, outside the device lock: this process's backing, the reaper.
    fn finish(
        name: &SharedName,
        mut inner: Inner,
        slot: usize,
        raw: RawFd,
    ) -> Result<Self, (Errno, String)> {
        let devices = inner.devices;
        inner.slot = slot;
        inner.channels = inner.info[0].hbm_channels;
        inner.channel_size = inner.info[0].hbm_channel_size;
        let backing_len =
            inner.channels as u64 * inner.channel_size + inner.info[0].host_dma_capacity;
        for _ in 0..devices {
            match HostReservation::reserve(backing_len) {
                Ok(r) => inner.backing.push(r),
                Err(e) => {
                    if let Ok(g) = inner.lock() {
                        g.reclaim(slot);
                    }
                    return Err((errno::ENOMEM, e.to_string()));
                }
            }
        }
        let _ = flock(raw, libc::LOCK_UN);
        log::debug!(target: "nrt_host::shared", "{name}: joined as slot {slot} (pid {})", inner.pid);
        let inner = Arc::new(inner);
        let (tx, rx) = mpsc::channel::<()>();
        let weak = Arc::downgrade(&inner);
        let reaper = std::thread::Builder::new()
            .name("nrt-shared-reaper".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(REAP_INTERVAL) {
                    let Some(inner) = weak.upgrade() else { return };
                    // Checked before the slots are read: a truncated file is told, not read.
                    if inner.file_damage().is_some_and(|(gone, _)| gone) {
                        continue;
                    }
                    if inner.any_dead() {
                        if let Ok(g) = inner.lock() {
                            g.reap();
                        }
                    }
                }
            })
            .ok();
        Ok(SharedDevice {
            inner,
            stop: Some(tx),
            reaper,
        })
    }
}

/// One allocation a live process holds on a shared device (its ownership record), as a
/// plan's snapshot reports it ([`PoolSnapshot::resident`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Resident {
    /// Device.
    pub device: u32,
    /// The pools' handle of it (live in [`PoolSnapshot::pools`]: `SimDevice::memory_info`
    /// places it).
    pub handle: u64,
    /// Page-rounded bytes.
    pub size: u64,
    /// Its driver category (`mem_alloc_category_t`, public ABI §3; named by
    /// [`layout::category_name`]).
    pub category: u8,
    /// The process holding it.
    pub pid: u32,
}

/// A shared device as a process joining it now would find it ([`snapshot_pools`]): what
/// `plan --device sim:…@name` plans on (docs/PLAN.md "Limits").
pub struct PoolSnapshot {
    /// The device's name.
    pub name: String,
    /// A private copy of the pools with what dead processes held freed in it, as the
    /// joiner's reap frees it in the file; when no process of the file lives, an empty device
    /// of the request's configuration (a joiner re-creates such a file).
    pub pools: crate::simdev::SimBox,
    /// The live processes.
    pub live: Vec<reader::ProcSnap>,
    /// The dead processes whose allocations were left out (reclaimed in [`Self::pools`]
    /// only: the file still holds them until a participant reaps).
    pub dead: Vec<reader::ProcSnap>,
    /// Every allocation the live processes hold.
    pub resident: Vec<Resident>,
    /// No process of the file lives (or it never finished initialising): a joiner
    /// re-creates it, so [`Self::pools`] is an empty device of the request's configuration.
    pub recreated: bool,
}

impl PoolSnapshot {
    /// Whether a process asking for `req` (another LNC size or visible slice than the
    /// snapshot was taken for: a plan's what-if) would be admitted to the cores the live
    /// processes of the snapshot hold: the join's cores rule and message, on the snapshot's
    /// figures.
    pub fn check_cores(&self, req: &JoinRequest) -> Result<(), SharedError> {
        let holders: Vec<(u32, Vec<u32>)> =
            self.live.iter().map(|p| (p.pid, p.cores.clone())).collect();
        check_cores(&holders, req).map_err(|(errno, message)| SharedError {
            name: self.name.clone(),
            message,
            errno,
        })
    }
}

impl std::fmt::Debug for PoolSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolSnapshot")
            .field("name", &self.name)
            .field("live", &self.live)
            .field("dead", &self.dead)
            .field("resident", &self.resident.len())
            .field("recreated", &self.recreated)
            .finish()
    }
}

/// Device `name` as a process joining it now with `req` would find it, read without joining
/// (no slot, no core, no byte taken; the file is not modified): what `plan --device
/// sim:…@name` plans on (issue 19 item 2: a plan runs on a snapshot, never on the live pools,
/// so processes that allocate meanwhile neither disturb it nor are disturbed).
///
/// Taken under the file's `flock` (shared: joins wait for it, as it waits for a join in
/// progress) and the device lock, with the join's own checks and messages
/// (docs/SHARED_DEVICE.md): a poisoned device, corrupted pools, a live device of another
/// geometry (`check_geometry`), no free slot or a requested core held by a live process
/// (`admission`) are refused as the join refuses them. Dead processes' allocations are freed
/// in the copy, as the joiner's reap frees them in the file (`Locked::reclaim_in`); a file
/// whose every process is gone is re-created by a joiner, so the copy is then an empty device
/// of `req.config`.
pub fn snapshot_pools(name: &SharedName, req: &JoinRequest) -> Result<PoolSnapshot, SharedError> {
    let path = device_path(name);
    let fail = |errno: Errno, message: String| SharedError {
        name: name.to_string(),
        message,
        errno,
    };
    let fd = open_file(&path, libc::O_RDWR).map_err(|e| {
        let what = if e.raw() == libc::ENOENT {
            "no such shared device (no process has opened it)"
        } else if e.raw() == libc::EACCES || e.raw() == libc::EPERM {
            "permission denied"
        } else {
            "cannot open"
        };
        fail(e, format!("{what}: {}", path.display()))
    })?;
    // Shared: no join runs meanwhile (a joiner holds it exclusively from opening to admitted),
    // so whether the file is live or stale is what a joiner would find. Dropped with `fd`.
    flock(fd.as_raw_fd(), libc::LOCK_SH)
        .map_err(|e| fail(e, format!("cannot lock {}", path.display())))?;
    // SAFETY: `fstat` fills a zeroed struct for an fd we hold.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(fail(
            last_errno(),
            format!("cannot stat {}", path.display()),
        ));
    }
    if (st.st_size as u64) != layout::file_size() as u64 {
        return Err(fail(
            errno::EINVAL,
            format!(
                "{}: {} bytes, not a shared device of this version",
                path.display(),
                st.st_size
            ),
        ));
    }
    let map = Mapping::map(fd.as_raw_fd(), layout::file_size(), true)
        .map_err(|e| fail(e, format!("cannot map {}", path.display())))?;
    check_header(&map.readable().header, st.st_size as u64)
        .map_err(|m| fail(errno::EINVAL, format!("{}: {m}", path.display())))?;
    let devices = map.readable().header.devices.load(Ordering::Acquire);
    let inner = Inner::unjoined(name.to_string(), path.clone(), fd, map, devices, 0);
    let h = &inner.map.readable().header;
    // As `join` decides: a file that is not ready (its creator died: creation runs under the
    // flock) or whose every process is gone is stale, and a joiner re-creates it for itself.
    if h.ready.load(Ordering::Acquire) != 1 || !inner.any_live() {
        let dead = reader::Snapshot::read(inner.map.readable(), inner.fd.as_raw_fd()).procs;
        let pools = crate::simdev::sim_box()
            .map_err(|e| fail(errno::ENOMEM, e.to_string()))
            .and_then(|mut b| {
                b.init(&req.config)
                    .map_err(|e| fail(e, "the device configuration was refused".into()))?;
                Ok(b)
            })?;
        return Ok(PoolSnapshot {
            name: name.to_string(),
            pools,
            live: Vec::new(),
            dead,
            resident: Vec::new(),
            recreated: true,
        });
    }
    check_geometry(h, &req.config).map_err(|(e, m)| fail(e, m))?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let g = inner
            .lock()
            .map_err(|e| fail(e, "cannot take the device lock".into()))?;
        refuse_poisoned(&g, &path).map_err(|(e, m)| fail(e, m))?;
        check_pools(&g, &path).map_err(|(e, m)| fail(e, m))?;
        match admission(&inner, g.r(), req) {
            Ok(_) => {}
            // As `join`: a process that is gone but whose liveness lock the kernel has not
            // dropped yet is waited for rather than counted.
            Err((e, _)) if e == errno::EBUSY && attempt < 100 && inner.any_dying() => {
                drop(g);
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err((e, m)) => return Err(fail(e, m)),
        }
        let mut copy = crate::simdev::sim_box().map_err(|e| fail(errno::ENOMEM, e.to_string()))?;
        g.sim().copy_to(&mut copy);
        // One verdict per slot, used for the copy and the figures alike.
        let dead_slots: Vec<usize> = (0..MAX_PROCESSES).filter(|&s| inner.slot_dead(s)).collect();
        for &s in &dead_slots {
            g.reclaim_in(s, &copy);
        }
        let mut resident = Vec::new();
        for s in (0..MAX_PROCESSES).filter(|&s| h_slot_live(&inner, s) && !dead_slots.contains(&s))
        {
            let pid = g.r().procs[s].pid.load(Ordering::Relaxed);
            g.for_each_owned(s, |device, o| {
                resident.push(Resident {
                    device,
                    handle: o.handle,
                    size: o.size,
                    category: o.category,
                    pid,
                })
            });
        }
        let procs = reader::Snapshot::read(g.r(), inner.fd.as_raw_fd()).procs;
        drop(g);
        let (dead, live) = procs
            .into_iter()
            .partition(|p| dead_slots.contains(&p.slot));
        return Ok(PoolSnapshot {
            name: name.to_string(),
            pools: copy,
            live,
            dead,
            resident,
            recreated: false,
        });
    }
}

/// Checks the pools of the file at `path` and, if `reap`, reclaims its dead processes,
/// without joining it (the monitor's check and reap, `SharedReader::{check_pools, reap}`): opened read-write (`EACCES` for a reader without write
/// permission), checked to be the file `reader_fd` reads, its header and pools checked as a
/// joiner checks them, then the reaper's own reap under the device lock.
pub(crate) fn reap_file(path: &Path, reader_fd: RawFd, reap: bool) -> Result<usize, String> {
    let here = |m: String| format!("{}: {m}", path.display());
    let fd = open_file(path, libc::O_RDWR).map_err(|e| {
        here(format!(
            "cannot reclaim ({})",
            std::io::Error::from_raw_os_error(e.raw())
        ))
    })?;
    let st = fstat(fd.as_raw_fd()).map_err(|e| here(format!("cannot stat (errno {e})")))?;
    let theirs = fstat(reader_fd).map_err(|e| here(format!("cannot stat (errno {e})")))?;
    if (st.st_dev, st.st_ino) != (theirs.st_dev, theirs.st_ino) {
        return Err(here("replaced since it was opened".into()));
    }
    if let Some(d) = damage(fd.as_raw_fd(), st.st_size as u64) {
        return Err(here(d));
    }
    let map = Mapping::map(fd.as_raw_fd(), layout::file_size(), true)
        .map_err(|e| here(format!("cannot map (errno {e})")))?;
    let devices = map.readable().header.devices.load(Ordering::Acquire);
    let inner = Inner::unjoined(String::new(), path.to_path_buf(), fd, map, devices, 0);
    let g = inner
        .lock()
        .map_err(|e| here(format!("cannot take the device lock (errno {e})")))?;
    refuse_poisoned(&g, path).map_err(|(_, m)| here(m))?;
    check_pools(&g, path).map_err(|(_, m)| m)?;
    if !reap {
        return Ok(0);
    }
    guarded(|| Ok(g.reap())).map_err(|_| here("reclaiming failed (damaged pools)".into()))
}

/// Initialises (or re-initialises) the whole file for `cfg`. Runs under the file's `flock`
/// with no live process: nothing else reads the private part.
fn init_file(inner: &Inner, cfg: &SimConfig) -> Result<(), (Errno, String)> {
    let h = &inner.map.readable().header;
    h.ready.store(0, Ordering::Release);
    // SAFETY: with no live process and the flock held, nothing else touches the file's bytes
    // beyond readers of the (all-atomic) readable prefix; zeroing the private part (lock page,
    // owner tables, pools) is writing plain memory we mapped read-write, and all-zero is the
    // empty state of every structure in it.
    unsafe {
        let start = layout::lock_offset();
        // Only pages that may have been touched need zeroing; on a fresh sparse file they are
        // zero already, so this is cheap the first time.
        libc::madvise(
            inner.map.base().add(start).cast(),
            layout::file_size() - start,
            libc::MADV_REMOVE,
        );
        core::ptr::write_bytes(inner.map.base().add(start), 0, 4096);
    }
    let r = inner.map.readable();
    for p in &r.procs {
        p.state.store(SLOT_FREE, Ordering::Relaxed);
        p.pid.store(0, Ordering::Relaxed);
        p.clear_counters();
    }
    for d in &r.counters {
        for c in d {
            for k in c {
                k.total.store(0, Ordering::Relaxed);
                k.present.store(0, Ordering::Relaxed);
                k.peak.store(0, Ordering::Relaxed);
            }
        }
    }
    for b in r.owner_bound.iter().flatten() {
        b.store(0, Ordering::Relaxed);
    }
    // The robust, process-shared mutex.
    // SAFETY: attribute and mutex calls on memory we own exclusively right now (see above);
    // the attribute object lives on the stack for the calls' duration.
    unsafe {
        let mut attr: libc::pthread_mutexattr_t = core::mem::zeroed();
        libc::pthread_mutexattr_init(&mut attr);
        libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
        libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
        let rc = libc::pthread_mutex_init(inner.mutex(), &attr);
        libc::pthread_mutexattr_destroy(&mut attr);
        if rc != 0 {
            return Err((Errno::new(rc), "cannot initialise the device lock".into()));
        }
    }
    // SAFETY: exclusive as above; `SimDevice` is zero-valid and the region was zeroed.
    let sim = unsafe {
        &mut *inner
            .map
            .base()
            .add(layout::sim_offset())
            .cast::<SimDevice>()
    };
    sim.init(cfg)
        .map_err(|e| (e, "the device configuration was refused".to_string()))?;
    let info = cfg.preset.device_info();
    h.magic.store(layout::MAGIC, Ordering::Relaxed);
    h.version.store(layout::LAYOUT_VERSION, Ordering::Relaxed);
    h.file_size
        .store(layout::file_size() as u64, Ordering::Relaxed);
    h.readable_size
        .store(layout::readable_size() as u64, Ordering::Relaxed);
    h.preset.store(cfg.preset as u32, Ordering::Relaxed);
    h.devices.store(cfg.devices, Ordering::Relaxed);
    h.channel_size.store(
        cfg.channel_size_override.unwrap_or(info.hbm_channel_size),
        Ordering::Relaxed,
    );
    h.host_capacity
        .store(cfg.host_dma_capacity, Ordering::Relaxed);
    h.placement.store(cfg.placement as u32, Ordering::Relaxed);
    h.aligned_alloc
        .store(u32::from(cfg.aligned_alloc), Ordering::Relaxed);
    h.seq.store(0, Ordering::Relaxed);
    h.epoch.fetch_add(1, Ordering::Relaxed);
    h.poisoned.store(0, Ordering::Relaxed);
    h.poisoned_by.store(0, Ordering::Relaxed);
    h.ready.store(1, Ordering::Release);
    Ok(())
}
