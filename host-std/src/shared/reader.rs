//! Reading a shared device's counters without joining its allocator: a
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

    /// A consistent copy of the figures now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::read(self.map.readable(), self.fd.as_raw_fd())
    }
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
