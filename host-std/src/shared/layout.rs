//! The shared device file's layout (docs/SHARED_DEVICE.md "File layout"): a readable prefix
//! (header, process slots, sysfs-like counters) that any process may map read-only, then the
//! allocator's private part (the lock, the ownership table, the pools).
//!
//! Everything in the readable prefix is an atomic, so a reader that maps it while a writer
//! updates it never races (it may see a torn *set* of figures; the sequence counter
//! [`Header::seq`] tells it to read again). Everything is position-independent (indices and
//! byte counts, never pointers), and all-zero is the empty state.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use nrt_core::sim::{SimDevice, CARVES_PER_DEVICE, CATEGORY_MAX, MAX_CARVE_NODES, MAX_NC_ID};

/// `b"NRTDMSHM"` as a little-endian `u64`: the first word of every shared device file.
pub const MAGIC: u64 = u64::from_le_bytes(*b"NRTDMSHM");
/// The layout version: bumped whenever anything in this file changes shape. A file with
/// another version is refused, never reinterpreted.
pub const LAYOUT_VERSION: u32 = 3;
/// Processes per device (public ABI §3 "A device admits at most 16 processes").
pub const MAX_PROCESSES: usize = 16;
/// Devices per shared file (the context tree's `mla[32]`).
pub const MAX_DEVICES: usize = nrt_core::sim::MAX_DEVICES as usize;
/// Physical cores per device the counters track (the driver's `nc_id < 8`).
pub const CORES: usize = MAX_NC_ID as usize;
/// Driver categories (`mem_alloc_category_t` 0..MAX, public ABI §3).
pub const CATEGORIES: usize = CATEGORY_MAX as usize;
/// Bytes of a process tag (`NEURON_PROCESS_TAG`, neuron-monitor's 255 characters).
pub const TAG_BYTES: usize = 256;
/// Models a process publishes for the monitor (`loaded_models`); more load, unlisted.
pub const MAX_MODELS: usize = 32;
/// Bytes of a published model name (longer names keep their end).
pub const MODEL_NAME_BYTES: usize = 64;
/// Subgraphs published per model (more are folded into the last).
pub const MODEL_SUBGRAPHS: usize = 4;
/// A published subgraph's figures: device `constants`, `model_code`, `runtime_memory`,
/// `tensors`, then host `application_memory`, `constants`, `dma_buffers`, `tensors`
/// (neuron-monitor's `loaded_models[].subgraphs[].memory_used_bytes.usage_breakdown`).
pub const MODEL_CLASSES: usize = 8;
/// Slot states.
pub const SLOT_FREE: u32 = 0;
/// A process holds the slot (its liveness lock says whether it still lives).
pub const SLOT_LIVE: u32 = 1;
/// The device is inconsistent (a process died mid-update in a way recovery cannot undo):
/// every use is refused with a message ([`Header::poisoned`]).
pub const POISONED: u32 = 1;

/// The file's first page (all atomics: readers map it while writers run).
#[repr(C)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: AtomicU64,
    /// [`LAYOUT_VERSION`].
    pub version: AtomicU32,
    /// 1 once the creator finished initialising the file.
    pub ready: AtomicU32,
    /// The file's size in bytes ([`file_size`]).
    pub file_size: AtomicU64,
    /// Bytes of the readable prefix ([`readable_size`]).
    pub readable_size: AtomicU64,
    /// `nrt_core::sim::Preset` discriminant.
    pub preset: AtomicU32,
    /// Devices.
    pub devices: AtomicU32,
    /// Bytes per HBM channel.
    pub channel_size: AtomicU64,
    /// Bytes of the host DMA pool per device.
    pub host_capacity: AtomicU64,
    /// Sequence counter of the counters (odd while a writer updates them).
    pub seq: AtomicU64,
    /// Bumped at every (re)initialisation.
    pub epoch: AtomicU64,
    /// [`POISONED`] when the pools cannot be trusted any more.
    pub poisoned: AtomicU32,
    /// The pid of the process whose death poisoned the device.
    pub poisoned_by: AtomicU32,
    /// Processes reclaimed after their death since creation.
    pub reclaimed: AtomicU64,
    /// `nrt_core::sim::Placement` discriminant (with the fields above: the `SimConfig` the
    /// pools were made with, which a rebuild after damage re-creates them from).
    pub placement: AtomicU32,
    /// Whether MEM_ALLOC honours alignments (`SimConfig::aligned_alloc`).
    pub aligned_alloc: AtomicU32,
}

/// One sysfs-like counter (public ABI §5: `total` = current bytes, `present` = the size of
/// the last change, `peak` = high-water mark).
#[repr(C)]
pub struct Counter {
    /// Bytes now.
    pub total: AtomicU64,
    /// Bytes of the last allocation or free.
    pub present: AtomicU64,
    /// High-water mark of `total`.
    pub peak: AtomicU64,
}

/// One HBM channel's free space as the last allocator call left it (a reader cannot walk the
/// pools: they are the allocator's private part).
#[repr(C)]
pub struct PoolFigures {
    /// Bytes of the channel's pool.
    pub capacity: AtomicU64,
    /// Free bytes.
    pub free: AtomicU64,
    /// The largest free block (the largest request that fits now).
    pub largest_free: AtomicU64,
}

/// HBM channels per device whose figures the file publishes.
pub const MAX_HBM: usize = 8;

/// One process slot.
#[repr(C)]
pub struct ProcSlot {
    /// [`SLOT_FREE`] or [`SLOT_LIVE`].
    pub state: AtomicU32,
    /// The process id.
    pub pid: AtomicU32,
    /// Physical cores the process holds, one bit per core, per device.
    pub cores: [AtomicU32; MAX_DEVICES],
    /// Unix time (seconds) the process joined.
    pub joined_at: AtomicU64,
    /// Live allocations the process holds.
    pub allocations: AtomicU64,
    /// Bytes the process holds, per device, core and category.
    pub usage: [[[AtomicU64; CATEGORIES]; CORES]; MAX_DEVICES],
    /// Physical cores per logical core of the process (`NEURON_RT_VIRTUAL_CORE_SIZE`).
    pub lnc: AtomicU32,
    /// Bytes of [`Self::tag`] in use.
    pub tag_len: AtomicU32,
    /// `NEURON_PROCESS_TAG` (bytes, little-endian words); empty = none (the pid is the tag).
    pub tag: [AtomicU64; TAG_BYTES / 8],
    /// The models the process has loaded (written by the process under the device lock and
    /// the sequence counter).
    pub models: [ModelSlot; MAX_MODELS],
}

/// One loaded model a process publishes (neuron-monitor's `loaded_models[]`); all zero = none.
#[repr(C)]
pub struct ModelSlot {
    /// The model's id in its process (`nrt_model_t`'s handle id); 0 = free entry.
    pub id: AtomicU32,
    /// Its logical core.
    pub vnc: AtomicU32,
    /// The device of its logical core's first physical core.
    pub device: AtomicU32,
    /// Subgraphs (the figures of those past [`MODEL_SUBGRAPHS`] are in the last entry).
    pub subgraphs: AtomicU32,
    /// Bytes of [`Self::name`] in use.
    pub name_len: AtomicU32,
    /// Reserved.
    pub _pad: AtomicU32,
    /// The name (a NEFF's or manifest's file name), little-endian words.
    pub name: [AtomicU64; MODEL_NAME_BYTES / 8],
    /// Per subgraph, bytes by [`MODEL_CLASSES`] class, as allocated at load time.
    pub bytes: [[AtomicU64; MODEL_CLASSES]; MODEL_SUBGRAPHS],
}

/// Stores `s` (cut to `words.len() * 8` bytes, keeping its end) into atomic words; returns
/// the bytes stored.
pub fn store_str(words: &[AtomicU64], s: &str) -> u32 {
    let cap = words.len() * 8;
    let b = s.as_bytes();
    let mut start = b.len().saturating_sub(cap);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    let b = &b[start..];
    for (i, w) in words.iter().enumerate() {
        let mut v = [0u8; 8];
        for (j, x) in v.iter_mut().enumerate() {
            *x = b.get(i * 8 + j).copied().unwrap_or(0);
        }
        w.store(u64::from_le_bytes(v), Ordering::Relaxed);
    }
    b.len() as u32
}

/// Reads `len` bytes stored by [`store_str`] (invalid UTF-8, from a damaged file, is
/// replaced, never trusted).
pub fn load_str(words: &[AtomicU64], len: u32) -> String {
    let mut v: Vec<u8> = words
        .iter()
        .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
        .collect();
    v.truncate((len as usize).min(words.len() * 8));
    String::from_utf8_lossy(&v).into_owned()
}

impl ProcSlot {
    /// Zeroes the slot's cores, per-category bytes and allocation count (its state and pid
    /// are the caller's to set, in the order its protocol needs).
    pub fn clear_counters(&self) {
        for c in &self.cores {
            c.store(0, Ordering::Relaxed);
        }
        for k in self.usage.iter().flatten().flatten() {
            k.store(0, Ordering::Relaxed);
        }
        self.allocations.store(0, Ordering::Relaxed);
        self.lnc.store(0, Ordering::Relaxed);
        self.tag_len.store(0, Ordering::Relaxed);
        for m in &self.models {
            m.id.store(0, Ordering::Relaxed);
        }
    }
}

/// The readable prefix.
#[repr(C)]
pub struct Readable {
    /// The header.
    pub header: Header,
    /// Process slots.
    pub procs: [ProcSlot; MAX_PROCESSES],
    /// Per device, core and category.
    pub counters: [[[Counter; CATEGORIES]; CORES]; MAX_DEVICES],
    /// Per device and HBM channel, its pool's free space.
    pub pools: [[PoolFigures; MAX_HBM]; MAX_DEVICES],
    /// Per device and carve: one past the highest ownership-record index ever written since
    /// the pools were (re)built, so walks of the ownership table stop where records stop
    /// (each carve's table has an entry per node, hundreds of thousands, of which a process
    /// uses what it allocated; a walk past that would read, and commit, untouched pages).
    pub owner_bound: [[AtomicU32; CARVES_PER_DEVICE as usize]; MAX_DEVICES],
}

/// Who owns one allocation (indexed by [`SimDevice::handle_key`] of `handle`); all zero = no
/// allocation.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    /// The handle the simulator minted.
    pub handle: u64,
    /// Page-rounded bytes.
    pub size: u64,
    /// Physical address (what a rebuild re-creates the allocation at).
    pub pa: u64,
    /// The handle the owning process holds when the pools were rebuilt under it since
    /// (0 = `handle` itself).
    pub alias: u64,
    /// Slot + 1 of the owning process (0 = free entry).
    pub slot: u8,
    /// The driver category.
    pub category: u8,
    /// The core it is accounted to.
    pub nc: u8,
    /// Reserved.
    pub _pad: [u8; 5],
}

/// The ownership table of one device.
pub type OwnerTable = [[Owner; MAX_CARVE_NODES as usize]; CARVES_PER_DEVICE as usize];

const PAGE: usize = 4096;

const fn up(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}

/// Bytes of the readable prefix.
pub const fn readable_size() -> usize {
    up(size_of::<Readable>())
}
/// Offset of the process-shared lock (a page of its own).
pub const fn lock_offset() -> usize {
    readable_size()
}
/// Offset of the ownership tables (one per device).
pub const fn owners_offset() -> usize {
    lock_offset() + PAGE
}
/// Offset of the pools (a [`SimDevice`]).
pub const fn sim_offset() -> usize {
    owners_offset() + up(MAX_DEVICES * size_of::<OwnerTable>())
}
/// The whole file (sparse: only pages in use cost memory).
pub const fn file_size() -> usize {
    sim_offset() + up(size_of::<SimDevice>())
}

const _: () = {
    assert!(size_of::<libc::pthread_mutex_t>() <= PAGE);
    assert!(align_of::<SimDevice>() <= PAGE);
    assert!(align_of::<Readable>() <= PAGE);
    assert!(size_of::<Owner>() == 40);
};

/// Category names as the driver's sysfs tree spells them (public ABI §5), by
/// `mem_alloc_category_t` value (public ABI §3).
pub fn category_name(cat: usize) -> &'static str {
    match cat {
        0 => "uncategorized_host",
        1 => "model_code_host",
        2 => "tensors_host",
        3 => "constants_host",
        4 => "misc_host",
        5 => "driver_memory_host",
        6 => "notifications_host",
        7 => "uncategorized",
        8 => "model_code",
        9 => "tensors",
        10 => "constants",
        11 => "model_shared_scratchpad",
        12 => "runtime_memory",
        13 => "driver_memory",
        14 => "collectives",
        15 => "nonshared_scratchpad",
        16 => "notifications",
        17 => "dma_rings_host",
        18 => "dma_rings",
        19 => "model_shared_scratchpad_contiguous",
        _ => "unknown",
    }
}

/// Whether a category is host memory (`*_HOST`, public ABI §3).
pub fn category_is_host(cat: usize) -> bool {
    cat <= 6 || cat == 17
}

/// The neuron-monitor field a driver category is reported under (public ABI §5): device
/// memory under `neuroncore_memory_usage` (`constants`, `model_code`,
/// `model_shared_scratchpad`, `runtime_memory`, `tensors`), host memory under the host
/// breakdown (`application_memory`, `constants`, `dma_buffers`, `tensors`).
pub fn monitor_field(cat: usize) -> &'static str {
    match cat {
        8 => "model_code",
        9 | 2 => "tensors",
        10 | 3 => "constants",
        11 | 15 | 19 => "model_shared_scratchpad",
        17 => "dma_buffers",
        _ if category_is_host(cat) => "application_memory",
        _ => "runtime_memory",
    }
}
