//! A simulated device shared by processes (issue 20; spec §9 co-location; public ABI §3
//! "Process lifetime"): `NRT_DMEM_DEVICE=sim:trn2@prod` opens (or creates) the device named
//! `prod`, a file `nrt-dmem-prod.shm` under `$NRT_DMEM_SHM_DIR` (default `/dev/shm`) that
//! every process using the name maps.
//!
//! The file holds the pools (a [`SimDevice`], the project's genalloc placement), who owns each
//! allocation, which process holds which cores, and sysfs-like counters; docs/SHARED_DEVICE.md
//! gives the layout and the protocol. In short:
//!
//! - Joining, creating and re-creating the file happen under an `flock` of the whole file.
//! - Every allocator operation runs under a process-shared **robust** pthread mutex: a
//!   process that dies holding it hands the next locker `EOWNERDEAD`, who checks the pools
//!   ([`SimDevice::check_pools`]), rebuilds the counters from the ownership table and carries
//!   on, or refuses the device for good ([`layout::POISONED`]) when they do not add up.
//! - Each process holds an open-file-description lock on one byte for its slot. The kernel
//!   drops it when the process dies, however it dies, so a dead process is recognised
//!   without its help and whatever pid it had (no pid-reuse confusion). Its allocations and
//!   cores are reclaimed by the next process that looks: every participant's reaper thread
//!   (every 100 ms), and before any refusal for lack of memory, cores or slots.
//! - The driver's rules: allocations belong to the process that made them (a free or copy of
//!   another's handle is `EINVAL`), cores are exclusive (`EBUSY`, naming the holder's pid), at
//!   most 16 processes per device (`EBUSY`).
//!
//! Device bytes are not shared: each process backs the addresses it owns with its own
//! lazily committed memory, as each process of the real driver maps only its own buffers.
//!
//! Files by job: `file` (the mapping and the file's locks), `join` (opening, creating and
//! joining the file, and the snapshot a plan reads), `lock` (the device lock and the
//! ownership table under it: booking, reclaim, reaping and recovery), `driver` (the
//! [`Driver`] over all that); `layout` is the file's format and `reader` its lock-free reader.
//!
//! [`SimDevice`]: nrt_core::sim::SimDevice
//! [`SimDevice::check_pools`]: nrt_core::sim::SimDevice::check_pools

mod driver;
mod file;
mod join;
pub mod layout;
mod lock;
pub mod reader;

pub use join::{snapshot_pools, PoolSnapshot, Resident};

use file::{live_byte, ofd_lock, ofd_locked, open_file, Mapping};
use join::check_header;
use lock::guarded;

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use nrt_core::driver::{errno, DeviceInfo, Driver, Errno};
use nrt_core::sim::{Preset, SimConfig};

use crate::backing::HostReservation;

/// Longest device name accepted.
pub const MAX_NAME_LEN: usize = 32;
/// The variable naming the directory of shared device files (default [`DEFAULT_DIR`]).
pub const DIR_VAR: &str = "NRT_DMEM_SHM_DIR";
/// Where shared device files live by default.
pub const DEFAULT_DIR: &str = "/dev/shm";
/// How often each participant looks for dead processes to reclaim.
pub const REAP_INTERVAL: Duration = Duration::from_millis(100);
/// `mem_alloc_category_t` CONTIGUOUS_SCRATCHPAD_DEVICE (public ABI §3).
const CATEGORY_CONTIGUOUS_SCRATCHPAD: u8 = 19;
/// `mem_alloc_category_t` TENSORS_DEVICE (public ABI §3): the allocations [`HOLD_VAR`] delays.
const CATEGORY_TENSORS_DEVICE: u8 = 9;
/// Test hook: a device tensor allocation sleeps this many milliseconds holding the device lock, so a test
/// can kill the process there (the "killed holding the lock" fault).
pub const HOLD_VAR: &str = "NRT_DMEM_SHARED_HOLD_LOCK_MS";

/// A shared device's name: 1 to [`MAX_NAME_LEN`] of `[A-Za-z0-9_.-]`, not starting with `.`
/// (so never a path, `.` or `..`). `Copy`, so configurations stay `Copy`.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct SharedName {
    bytes: [u8; MAX_NAME_LEN],
    len: u8,
}

impl SharedName {
    /// Validates a name; the error says what is wrong.
    pub fn parse(s: &str) -> Result<Self, &'static str> {
        if s.is_empty() {
            return Err("the shared device name after `@` is empty");
        }
        if s.len() > MAX_NAME_LEN {
            return Err("the shared device name is longer than 32 characters");
        }
        if s.contains('/') || s.contains('\\') {
            return Err("the shared device name holds a path separator");
        }
        if s.starts_with('.') {
            return Err("the shared device name starts with `.`");
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            return Err("the shared device name may hold only letters, digits, `_`, `-` and `.`");
        }
        let mut bytes = [0; MAX_NAME_LEN];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Ok(SharedName {
            bytes,
            len: s.len() as u8,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Only ASCII was ever stored (`parse`).
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl std::fmt::Debug for SharedName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for SharedName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The directory of shared device files: `$NRT_DMEM_SHM_DIR`, else `/dev/shm`.
pub fn shm_dir() -> PathBuf {
    std::env::var_os(DIR_VAR)
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_DIR), PathBuf::from)
}

/// File name prefix and suffix of shared device files.
pub const FILE_PREFIX: &str = "nrt-dmem-";
/// See [`FILE_PREFIX`].
pub const FILE_SUFFIX: &str = ".shm";

/// The file of device `name` in [`shm_dir`].
pub fn device_path(name: &SharedName) -> PathBuf {
    shm_dir().join(format!("{FILE_PREFIX}{name}{FILE_SUFFIX}"))
}

/// Why a shared device could not be opened or used: a message for a person and the errno.
#[derive(Debug, Clone, thiserror::Error)]
#[error("shared device {name}: {message}")]
pub struct SharedError {
    /// The device name.
    pub name: String,
    /// What went wrong.
    pub message: String,
    /// The errno (the driver's where there is one: `EBUSY`, `EACCES`, `EINVAL`, `EIO`).
    pub errno: Errno,
}

/// What a process asks of a shared device when it joins.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct JoinRequest {
    /// The device geometry (must match a device that has live processes).
    pub config: SimConfig,
    /// Physical cores to claim, one bit per core, per device.
    pub cores: [u32; layout::MAX_DEVICES],
}

impl JoinRequest {
    /// What a runtime of `config` asks when it joins a shared `preset` × `devices` device
    /// (`HostRuntime::new`; a plan's snapshot asks the same, docs/PLAN.md): the simulated
    /// device's configuration and the physical cores its visible slice owns
    /// ([`claimed_cores`]). An invalid slice claims none: bring-up then refuses it with the
    /// runtime's own message.
    pub fn for_runtime(
        preset: Preset,
        devices: u32,
        placement: nrt_core::sim::Placement,
        config: &crate::config::RuntimeConfig,
    ) -> JoinRequest {
        let c = config.sim_config(preset, devices, placement);
        let mut info = preset.device_info();
        info.hbm_channel_size = c.channel_size_override.unwrap_or(info.hbm_channel_size);
        let cores =
            claimed_cores(&info, devices, &config.vcores).unwrap_or([0; layout::MAX_DEVICES]);
        JoinRequest { config: c, cores }
    }
}

/// The per-process state of a joined shared device.
struct Inner {
    name: String,
    path: PathBuf,
    fd: OwnedFd,
    map: Mapping,
    slot: usize,
    pid: u32,
    devices: u32,
    info: Vec<DeviceInfo>,
    channels: u32,
    channel_size: u64,
    /// This process's bytes behind the addresses it owns (one reservation per device).
    backing: Vec<HostReservation>,
    hold_ms: u64,
    /// The file's damage ([`Inner::file_damage`]) was logged.
    damage_told: std::sync::atomic::AtomicBool,
}

impl Inner {
    /// A mapped device file this process has not joined yet (no slot is "ours", no device
    /// geometry read yet, no backing): what `admit` and the read-only reader start from.
    fn unjoined(
        name: String,
        path: PathBuf,
        fd: OwnedFd,
        map: Mapping,
        devices: u32,
        hold_ms: u64,
    ) -> Inner {
        Inner {
            name,
            path,
            fd,
            map,
            slot: usize::MAX,
            pid: std::process::id(),
            devices,
            info: Vec::new(),
            channels: 0,
            channel_size: 0,
            backing: Vec::new(),
            hold_ms,
            damage_told: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// A shared simulated device as this process sees it: a [`Driver`].
pub struct SharedDevice {
    inner: Arc<Inner>,
    stop: Option<mpsc::Sender<()>>,
    reaper: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for SharedDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedDevice")
            .field("name", &self.inner.name)
            .field("slot", &self.inner.slot)
            .finish()
    }
}

impl SharedDevice {
    /// The device's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The shared file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// This process's slot (0..16).
    pub fn slot(&self) -> usize {
        self.inner.slot
    }

    /// The device-wide figures now (a consistent read of the counters).
    pub fn snapshot(&self) -> reader::Snapshot {
        reader::Snapshot::read(self.inner.map.readable(), self.inner.fd.as_raw_fd())
    }

    /// Publishes what the monitor reports of this process beside its bytes: its LNC size
    /// (the monitor keys its cores by logical core) and its `NEURON_PROCESS_TAG` (empty: the
    /// pid is its tag).
    pub fn publish_identity(&self, lnc: u32, tag: &str) {
        let Ok(g) = self.inner.lock() else { return };
        let p = &g.r().procs[self.inner.slot];
        let seq = &g.r().header.seq;
        seq.fetch_add(1, Ordering::AcqRel);
        p.lnc.store(lnc, Ordering::Relaxed);
        let n = layout::store_str(&p.tag, tag);
        p.tag_len.store(n, Ordering::Relaxed);
        seq.fetch_add(1, Ordering::Release);
    }

    /// Publishes a model this process loaded (the monitor's `loaded_models[]`): its id, logical
    /// core and the device of that core, its name and per subgraph its bytes by
    /// [`layout::MODEL_CLASSES`] class as allocated at load time. A process with
    /// [`layout::MAX_MODELS`] published models lists no more (they still count in its bytes).
    pub fn publish_model(
        &self,
        id: u32,
        vnc: u32,
        device: u32,
        name: &str,
        subgraphs: &[[u64; layout::MODEL_CLASSES]],
    ) {
        if id == 0 {
            return;
        }
        let Ok(g) = self.inner.lock() else { return };
        let p = &g.r().procs[self.inner.slot];
        let Some(m) = p.models.iter().find(|m| m.id.load(Ordering::Relaxed) == 0) else {
            return;
        };
        let seq = &g.r().header.seq;
        seq.fetch_add(1, Ordering::AcqRel);
        m.vnc.store(vnc, Ordering::Relaxed);
        m.device.store(device, Ordering::Relaxed);
        m.subgraphs.store(subgraphs.len() as u32, Ordering::Relaxed);
        let n = layout::store_str(&m.name, name);
        m.name_len.store(n, Ordering::Relaxed);
        for (i, row) in m.bytes.iter().enumerate() {
            for (k, b) in row.iter().enumerate() {
                let v: u64 = if i + 1 == layout::MODEL_SUBGRAPHS {
                    subgraphs.iter().skip(i).map(|sg| sg[k]).sum()
                } else {
                    subgraphs.get(i).map_or(0, |sg| sg[k])
                };
                b.store(v, Ordering::Relaxed);
            }
        }
        m.id.store(id, Ordering::Relaxed);
        seq.fetch_add(1, Ordering::Release);
    }

    /// Withdraws model `id` from this process's published list (it was unloaded).
    pub fn unpublish_model(&self, id: u32) {
        let Ok(g) = self.inner.lock() else { return };
        let p = &g.r().procs[self.inner.slot];
        let seq = &g.r().header.seq;
        seq.fetch_add(1, Ordering::AcqRel);
        for m in &p.models {
            if m.id.load(Ordering::Relaxed) == id {
                m.id.store(0, Ordering::Relaxed);
            }
        }
        seq.fetch_add(1, Ordering::Release);
    }

    /// Withdraws every model of this process from its published list (the runtime closed).
    pub fn unpublish_models(&self) {
        let Ok(g) = self.inner.lock() else { return };
        let seq = &g.r().header.seq;
        seq.fetch_add(1, Ordering::AcqRel);
        for m in &g.r().procs[self.inner.slot].models {
            m.id.store(0, Ordering::Relaxed);
        }
        seq.fetch_add(1, Ordering::Release);
    }

    /// What is wrong with the device's file under this process (truncated, or removed from
    /// its directory), if anything: the message the process also logged.
    pub fn file_damage(&self) -> Option<String> {
        self.inner.file_damage().map(|(_, m)| m)
    }

    /// Reclaims dead processes now (what the reaper thread does every [`REAP_INTERVAL`]).
    pub fn reap_now(&self) -> usize {
        self.inner.lock().map_or(0, |g| g.reap())
    }

    /// Checks the pools against the ownership table (tests, the soak's checker): every
    /// pool's invariants hold, every owned allocation is live in the pools, no two overlap,
    /// and the pools hold no allocation nobody owns. Returns the live allocations and bytes.
    pub fn audit(&self) -> Result<(u64, u64), String> {
        let g = self.inner.lock().map_err(|e| format!("lock: errno {e}"))?;
        let r = guarded(|| {
            g.sim().check_pools().map_err(|_| errno::EIO)?;
            Ok(())
        });
        r.map_err(|_| "pool invariants broken".to_string())?;
        let mut ranges = Vec::new();
        let mut in_pools = 0u64;
        for dev in 0..self.inner.devices {
            for c in 0..self.inner.channels {
                in_pools += g
                    .sim()
                    .pool_stats(dev, false, c)
                    .map_or(0, |s| s.allocations);
            }
            in_pools += g
                .sim()
                .pool_stats(dev, true, 0)
                .map_or(0, |s| s.allocations);
            for carve in 0..nrt_core::sim::CARVES_PER_DEVICE {
                for index in g.owner_indices(dev, carve) {
                    let Some(o) = g.owner(dev, carve, index) else {
                        continue;
                    };
                    if o.slot == 0 {
                        continue;
                    }
                    let info = g.sim().memory_info(dev, o.handle).map_err(|e| {
                        format!("owned handle {:#x} not live (errno {e})", o.handle)
                    })?;
                    if info.size != o.size {
                        return Err(format!("handle {:#x}: size disagrees", o.handle));
                    }
                    ranges.push((dev, info.pa, info.size));
                }
            }
        }
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            if w[0].0 == w[1].0 && w[0].1 + w[0].2 > w[1].1 {
                return Err(format!("overlap at {:#x} on nd{}", w[1].1, w[1].0));
            }
        }
        if ranges.len() as u64 != in_pools {
            return Err(format!(
                "the pools hold {in_pools} allocations, the ownership table {}",
                ranges.len()
            ));
        }
        Ok((in_pools, ranges.iter().map(|r| r.2).sum()))
    }
}

impl Drop for SharedDevice {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.reaper.take() {
            let _ = t.join();
        }
        // Close: whatever the runtime did not free goes back, the cores and slot are released.
        let left = self.inner.lock().map_or(0, |g| {
            let n = g.reclaim(self.inner.slot);
            // Released before the device lock, so no newcomer sees the slot free but locked.
            let _ = ofd_lock(self.inner.fd.as_raw_fd(), live_byte(self.inner.slot), false);
            n
        });
        if left > 0 {
            log::debug!(target: "nrt_host::shared", "{}: close returned {left} bytes", self.inner.name);
        }
        let _ = ofd_lock(self.inner.fd.as_raw_fd(), live_byte(self.inner.slot), false);
    }
}

/// The physical cores a process with `vcores` owns on `devices` devices of `info`'s kind,
/// one bit per core per device (spec §9: the owned slice of logical cores, each
/// `lnc` physical cores wide). `None` when the configuration is invalid (bring-up then
/// reports it).
pub fn claimed_cores(
    info: &DeviceInfo,
    devices: u32,
    vcores: &nrt_core::vcore::VcoreOptions,
) -> Option<[u32; layout::MAX_DEVICES]> {
    let cpd = info.cores_per_device;
    let lnc = nrt_core::vcore::parse_vnc_config(info.arch, cpd, vcores.lnc_size).ok()?;
    let total = devices * (cpd / lnc);
    let (first, count) = nrt_core::vcore::visible_slice(vcores, total).ok()?;
    let mut out = [0u32; layout::MAX_DEVICES];
    for p in first * lnc..(first + count) * lnc {
        let (d, c) = ((p / cpd) as usize, p % cpd);
        *out.get_mut(d)? |= 1 << c;
    }
    Some(out)
}
