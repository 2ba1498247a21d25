//! Reading a shared device's counters without joining its allocator (issue 20 item 3): a
//! read-only mapping of the file's readable prefix, read consistently with the sequence
//! counter (a seqlock: copy, and copy again if a writer was busy meanwhile).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};

use super::layout::{self, Readable, CATEGORIES, CORES, MAX_PROCESSES, SLOT_LIVE};
use super::{check_header, live_byte, ofd_locked, open_file, Mapping, FILE_PREFIX, FILE_SUFFIX};

/// One sysfs-like counter, copied out (public ABI §5).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterSnap {
    /// Bytes now.
    pub total: u64,
    /// Bytes of the last change.
    pub present: u64,
    /// High-water mark.
    pub peak: u64,
}

/// One process, copied out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcSnap {
    /// Its slot.
    pub slot: usize,
    /// Its pid.
    pub pid: u32,
    /// Whether it still lives (its liveness lock is held). A dead one is reclaimed by the next
    /// participant that looks (within 100 ms while any participant runs).
    pub alive: bool,
    /// Physical cores held, a bit per core, per device.
    pub cores: Vec<u32>,
    /// Live allocations.
    pub allocations: u64,
    /// Bytes per device, core and category.
    pub usage: Vec<[[u64; CATEGORIES]; CORES]>,
    /// Physical cores per logical core (0: not published yet).
    pub lnc: u32,
    /// `NEURON_PROCESS_TAG` (empty: none).
    pub tag: String,
    /// Unix time (seconds) the process joined.
    pub joined_at: u64,
    /// The models it published.
    pub models: Vec<ModelSnap>,
}

/// One published model, copied out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSnap {
    /// Its id in its process.
    pub id: u32,
    /// Its logical core.
    pub vnc: u32,
    /// The device of that core.
    pub device: u32,
    /// Its name.
    pub name: String,
    /// Per subgraph (at most [`layout::MODEL_SUBGRAPHS`]), bytes by
    /// [`layout::MODEL_CLASSES`] class.
    pub subgraphs: Vec<[u64; layout::MODEL_CLASSES]>,
}

/// One HBM channel's free space, copied out.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolSnap {
    /// Bytes of the pool.
    pub capacity: u64,
    /// Free bytes.
    pub free: u64,
    /// The largest free block.
    pub largest_free: u64,
}

impl ProcSnap {
    /// Device (HBM) bytes the process holds on device `dev`.
    pub fn device_bytes(&self, dev: usize) -> u64 {
        self.usage.get(dev).map_or(0, |d| {
            d.iter()
                .flat_map(|c| c.iter().enumerate())
                .filter(|(k, _)| !layout::category_is_host(*k))
                .map(|(_, b)| *b)
                .sum()
        })
    }

    /// All bytes the process holds.
    pub fn total_bytes(&self) -> u64 {
        self.usage.iter().flatten().flatten().sum()
    }
}

/// A consistent copy of a shared device's figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// `nrt_core::sim::Preset` discriminant.
    pub preset: u32,
    /// Devices.
    pub devices: u32,
    /// Bytes per HBM channel.
    pub channel_size: u64,
    /// Whether the device refuses use (a holder died mid-update).
    pub poisoned: bool,
    /// Dead processes reclaimed since creation.
    pub reclaimed: u64,
    /// Live slots.
    pub procs: Vec<ProcSnap>,
    /// Per device, core and category.
    pub counters: Vec<[[CounterSnap; CATEGORIES]; CORES]>,
    /// Per device and HBM channel ([`layout::MAX_HBM`]), its pool's free space.
    pub pools: Vec<[PoolSnap; layout::MAX_HBM]>,
    /// Bytes of the host DMA pool per device.
    pub host_capacity: u64,
}

impl Snapshot {
    /// Copies the figures out of a mapped prefix (retrying while a writer is mid-update;
    /// after 10 000 tries it takes what it read, which only a writer dying mid-update and
    /// not yet recovered can cause). `fd` is any descriptor of the file (liveness tests).
    pub(crate) fn read(r: &Readable, fd: RawFd) -> Snapshot {
        let h = &r.header;
        let devices = (h.devices.load(Ordering::Acquire) as usize).min(layout::MAX_DEVICES);
        let mut tries = 0u32;
        loop {
            let s1 = h.seq.load(Ordering::Acquire);
            let snap = Snapshot {
                preset: h.preset.load(Ordering::Relaxed),
                devices: devices as u32,
                channel_size: h.channel_size.load(Ordering::Relaxed),
                poisoned: h.poisoned.load(Ordering::Relaxed) == layout::POISONED,
                reclaimed: h.reclaimed.load(Ordering::Relaxed),
                procs: (0..MAX_PROCESSES)
                    .filter(|&s| r.procs[s].state.load(Ordering::Relaxed) == SLOT_LIVE)
                    .map(|s| {
                        let p = &r.procs[s];
                        ProcSnap {
                            slot: s,
                            pid: p.pid.load(Ordering::Relaxed),
                            alive: ofd_locked(fd, live_byte(s)) != Ok(false),
                            cores: p.cores[..devices]
                                .iter()
                                .map(|c| c.load(Ordering::Relaxed))
                                .collect(),
                            allocations: p.allocations.load(Ordering::Relaxed),
                            usage: p.usage[..devices]
                                .iter()
                                .map(|d| {
                                    d.each_ref()
                                        .map(|c| c.each_ref().map(|k| k.load(Ordering::Relaxed)))
                                })
                                .collect(),
                            lnc: p.lnc.load(Ordering::Relaxed),
                            tag: layout::load_str(&p.tag, p.tag_len.load(Ordering::Relaxed)),
                            joined_at: p.joined_at.load(Ordering::Relaxed),
                            models: p
                                .models
                                .iter()
                                .filter(|m| m.id.load(Ordering::Relaxed) != 0)
                                .map(|m| {
                                    let n = (m.subgraphs.load(Ordering::Relaxed) as usize)
                                        .clamp(1, layout::MODEL_SUBGRAPHS);
                                    ModelSnap {
                                        id: m.id.load(Ordering::Relaxed),
                                        vnc: m.vnc.load(Ordering::Relaxed),
                                        device: m.device.load(Ordering::Relaxed),
                                        name: layout::load_str(
                                            &m.name,
                                            m.name_len.load(Ordering::Relaxed),
                                        ),
                                        subgraphs: m.bytes[..n]
                                            .iter()
                                            .map(|r| {
                                                r.each_ref().map(|b| b.load(Ordering::Relaxed))
                                            })
                                            .collect(),
                                    }
                                })
                                .collect(),
                        }
                    })
                    .collect(),
                counters: r.counters[..devices]
                    .iter()
                    .map(|d| {
                        d.each_ref().map(|c| {
                            c.each_ref().map(|k| CounterSnap {
                                total: k.total.load(Ordering::Relaxed),
                                present: k.present.load(Ordering::Relaxed),
                                peak: k.peak.load(Ordering::Relaxed),
                            })
                        })
                    })
                    .collect(),
                pools: r.pools[..devices]
                    .iter()
                    .map(|d| {
                        d.each_ref().map(|f| PoolSnap {
                            capacity: f.capacity.load(Ordering::Relaxed),
                            free: f.free.load(Ordering::Relaxed),
                            largest_free: f.largest_free.load(Ordering::Relaxed),
                        })
                    })
                    .collect(),
                host_capacity: h.host_capacity.load(Ordering::Relaxed),
            };
            fence(Ordering::Acquire);
            let s2 = h.seq.load(Ordering::Acquire);
            tries += 1;
            if (s1 == s2 && s1.is_multiple_of(2)) || tries >= 10_000 {
                return snap;
            }
            std::thread::yield_now();
        }
    }

    /// Checks the figures against the device they describe before anyone publishes them: a
    /// known preset and device count, no counter, process or pool figure beyond the device's
    /// capacity, live slots with a pid. The message names the first figure that is wrong (the
    /// file is damaged: its numbers must not be shown).
    pub fn check(&self) -> Result<(), String> {
        let Some(preset) = nrt_core::sim::Preset::ALL
            .into_iter()
            .find(|p| *p as u32 == self.preset)
        else {
            return Err(format!("unknown device preset {} (damaged)", self.preset));
        };
        let info = preset.device_info();
        let hbm = self.channel_size.saturating_mul(info.hbm_channels as u64);
        if self.channel_size == 0 || self.channel_size > 1 << 40 {
            return Err(format!(
                "HBM channel size {} B (damaged)",
                self.channel_size
            ));
        }
        for d in 0..self.devices as usize {
            let dev = self.device_bytes(d);
            if dev > hbm {
                return Err(format!(
                    "nd{d}: counters say {dev} B of HBM in use, the device has {hbm} B (damaged)"
                ));
            }
            let host: u64 = self.counters[d]
                .iter()
                .flat_map(|c| c.iter().enumerate())
                .filter(|(k, _)| layout::category_is_host(*k))
                .map(|(_, v)| v.total)
                .fold(0u64, u64::saturating_add);
            if host > self.host_capacity {
                return Err(format!(
                    "nd{d}: counters say {host} B of host DMA memory in use, the pool has {} B \
                     (damaged)",
                    self.host_capacity
                ));
            }
            if let Some(c) = self.counters[d].iter().flatten().find(|v| {
                v.peak > hbm.max(self.host_capacity) || v.present > hbm.max(self.host_capacity)
            }) {
                return Err(format!(
                    "nd{d}: a counter's peak {} B is beyond the device (damaged)",
                    c.peak
                ));
            }
            for (ch, f) in self.pools[d].iter().enumerate() {
                if f.capacity > self.channel_size || f.free > f.capacity || f.largest_free > f.free
                {
                    return Err(format!(
                        "nd{d} HBM {ch}: free-space figures (capacity {}, free {}, largest {}) \
                         are inconsistent (damaged)",
                        f.capacity, f.free, f.largest_free
                    ));
                }
            }
            let procs = self
                .procs
                .iter()
                .map(|p| p.device_bytes(d))
                .fold(0u64, u64::saturating_add);
            if procs > hbm {
                return Err(format!(
                    "nd{d}: processes say they hold {procs} B of HBM, the device has {hbm} B \
                     (damaged)"
                ));
            }
        }
        if let Some(p) = self.procs.iter().find(|p| p.pid == 0 || p.lnc > 8) {
            return Err(format!(
                "slot {}: pid {} with LNC {} (damaged)",
                p.slot, p.pid, p.lnc
            ));
        }
        Ok(())
    }

    /// Device bytes now (HBM categories only), all cores of device `dev`.
    pub fn device_bytes(&self, dev: usize) -> u64 {
        self.counters.get(dev).map_or(0, |d| {
            d.iter()
                .flat_map(|c| c.iter().enumerate())
                .filter(|(k, _)| !layout::category_is_host(*k))
                .map(|(_, v)| v.total)
                .sum()
        })
    }

    /// All bytes now (device and host), every device.
    pub fn total_bytes(&self) -> u64 {
        self.counters
            .iter()
            .flatten()
            .flatten()
            .map(|k| k.total)
            .sum()
    }
}

/// A read-only view of one shared device file.
pub struct SharedReader {
    name: String,
    path: PathBuf,
    fd: OwnedFd,
    map: Mapping,
}

impl std::fmt::Debug for SharedReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReader")
            .field("path", &self.path)
            .finish()
    }
}

impl SharedReader {
    /// Opens `path` read-only and maps its readable prefix; the message says why not.
    pub fn open(path: &Path) -> Result<Self, String> {
        let fd = open_file(path, libc::O_RDONLY).map_err(|e| {
            if e.raw() == libc::ELOOP {
                return format!("{}: a symbolic link, never followed", path.display());
            }
            format!(
                "{}: {}",
                path.display(),
                std::io::Error::from_raw_os_error(e.raw())
            )
        })?;
        // SAFETY: `fstat` fills a zeroed struct for an fd we hold.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(format!("{}: cannot stat", path.display()));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(format!("{}: not a regular file", path.display()));
        }
        let len = layout::readable_size();
        if (st.st_size as u64) < len as u64 {
            return Err(format!(
                "{}: {} bytes, too short for a shared device (corrupted, or still being created)",
                path.display(),
                st.st_size
            ));
        }
        let map = Mapping::map(fd.as_raw_fd(), len, false)
            .map_err(|e| format!("{}: cannot map (errno {e})", path.display()))?;
        check_header(&map.readable().header, st.st_size as u64)
            .map_err(|m| format!("{}: {m}", path.display()))?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(FILE_PREFIX))
            .and_then(|n| n.strip_suffix(FILE_SUFFIX))
            .unwrap_or("?")
            .to_string();
        Ok(SharedReader {
            name,
            path: path.to_path_buf(),
            fd,
            map,
        })
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A consistent copy of the figures now (unchecked: see [`Self::read`]).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::read(self.map.readable(), self.fd.as_raw_fd())
    }

    /// A consistent copy of the figures now, only if they can be trusted: the file still
    /// has its size (it is never read past its end, so a file truncated meanwhile is reported,
    /// not a `SIGBUS`), it is still at its path, its header is intact and its figures pass
    /// [`Snapshot::check`]. The message says what is wrong.
    pub fn read(&self) -> Result<Snapshot, String> {
        let here = |m: String| format!("{}: {m}", self.path.display());
        let st =
            fstat(self.fd.as_raw_fd()).map_err(|e| here(format!("cannot stat (errno {e})")))?;
        if st.st_nlink == 0 {
            return Err(here(
                "removed while processes still use it (they keep running on the removed file; \
                 a process started now creates a new device and is not kept off their cores)"
                    .into(),
            ));
        }
        if st.st_size as u64 != layout::file_size() as u64 {
            return Err(here(format!(
                "{} bytes, expected {} (truncated or damaged under its processes)",
                st.st_size,
                layout::file_size()
            )));
        }
        check_header(&self.map.readable().header, st.st_size as u64).map_err(here)?;
        let s = self.snapshot();
        s.check().map_err(here)?;
        if s.poisoned {
            return Err(here(
                "poisoned: a process died mid-update and the pools could not be repaired".into(),
            ));
        }
        Ok(s)
    }

    /// Reclaims the dead processes of this file, as a participant's reaper would, when the
    /// caller may write it (the monitor does, so a device whose last process was killed is
    /// reclaimed without anyone joining). Returns how many were reclaimed; `Err` says why
    /// not (no write permission, damaged pools).
    pub fn reap(&self) -> Result<usize, String> {
        let dead = self.snapshot().procs.iter().any(|p| !p.alive);
        if !dead {
            return Ok(0);
        }
        super::join::reap_file(&self.path, self.fd.as_raw_fd(), true)
    }

    /// Checks the pools (the allocator's private part, which [`Self::read`] cannot see) under
    /// the device lock, as a joiner checks them: `Ok(false)` when this process may not write
    /// the file (the check needs the lock), `Err` naming the damage.
    pub fn check_pools(&self) -> Result<bool, String> {
        let c = std::ffi::CString::new(self.path.as_os_str().as_encoded_bytes())
            .map_err(|_| format!("{}: bad path", self.path.display()))?;
        // SAFETY: `access` reads a NUL-terminated path.
        if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
            return Ok(false);
        }
        super::join::reap_file(&self.path, self.fd.as_raw_fd(), false).map(|_| true)
    }
}

fn fstat(fd: RawFd) -> Result<libc::stat, i32> {
    // SAFETY: `fstat` fills a zeroed struct for an fd the caller holds.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    Ok(st)
}

/// The shared device files in `dir` (`nrt-dmem-*.shm`), sorted by name.
pub fn list(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(FILE_PREFIX) && n.ends_with(FILE_SUFFIX))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
