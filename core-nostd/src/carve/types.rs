//! The carve's public vocabulary: the placement policy, its errors, allocation ids and the
//! block and pool figures it reports.

use super::*;

/// How a carve chooses among the free blocks that can hold a request (module docs).
#[repr(u8)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Policy {
    /// TLSF segregated lists with a bounded good-fit scan: O(1)-class work, placement leaning
    /// toward low addresses but not the driver's.
    #[default]
    GoodFit = 0,
    /// Address-ordered first fit over an augmented address tree: the lowest fitting (aligned)
    /// address, as the driver's genalloc pools place (public ABI §3 "plain requests are
    /// first-fit", "alignment above the page size uses an aligned first-fit").
    FirstFit = 1,
}

/// Why a carve operation was refused (public ABI §3 "How the driver carves memory").
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CarveError {
    /// [`Carve::init`] was never called (the all-zero state).
    Uninitialized,
    /// `init` arguments: granule not a power of two, base not granule-aligned, a range smaller
    /// than one granule, or `base + size` overflowing 64 bits.
    BadRegion,
    /// An allocation of zero bytes.
    ZeroSize,
    /// Alignment not a power of two (0 means "the granule").
    BadAlignment(u64),
    /// Rounding the size up to the granule overflows 64 bits.
    SizeOverflow,
    /// No free block can hold the request (with its alignment).
    OutOfSpace,
    /// The node array is full: metadata, not address space, ran out.
    NodesExhausted,
    /// Unknown, stale or already-freed allocation id.
    InvalidId,
}

impl CarveError {
    /// The errno a driver reports for this error: `ENOMEM` for exhaustion (space or
    /// metadata), `EINVAL` for everything the caller got wrong (public ABI §3).
    pub const fn errno(self) -> Errno {
        match self {
            CarveError::OutOfSpace | CarveError::NodesExhausted => errno::ENOMEM,
            _ => errno::EINVAL,
        }
    }
}

impl fmt::Display for CarveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CarveError::Uninitialized => f.write_str("carve allocator not initialised"),
            CarveError::BadRegion => f.write_str("bad carve region (granule/base/size)"),
            CarveError::ZeroSize => f.write_str("allocation size is 0"),
            CarveError::BadAlignment(a) => write!(f, "alignment {a} is not a power of two"),
            CarveError::SizeOverflow => f.write_str("size rounded to the granule overflows"),
            CarveError::OutOfSpace => f.write_str("no free block large enough"),
            CarveError::NodesExhausted => f.write_str("carve metadata (node array) exhausted"),
            CarveError::InvalidId => f.write_str("unknown, stale or already freed allocation"),
        }
    }
}

/// Names one live allocation of a [`Carve`]: node index (≥ 1) in the low 32 bits and the
/// node's generation in the high 32 bits, so the raw value is never 0 (`Option<CarveId>` is 8
/// bytes) and a reused node gets a different id (public ABI §3: handles are opaque non-zero
/// `u64`s).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CarveId(pub(super) NonZeroU64);

impl CarveId {
    /// Builds an id from its parts (for handle encodings that pack them elsewhere); `None`
    /// for index 0, which no allocation has.
    pub const fn from_parts(index: u32, generation: u32) -> Option<Self> {
        if index == NIL {
            return None;
        }
        match NonZeroU64::new(((generation as u64) << 32) | index as u64) {
            Some(v) => Some(CarveId(v)),
            None => None,
        }
    }
    /// Rebuilds an id from [`CarveId::raw`]; `None` for a value no allocation can have.
    pub const fn from_raw(raw: u64) -> Option<Self> {
        Self::from_parts(raw as u32, (raw >> 32) as u32)
    }
    /// The raw value (never 0).
    pub const fn raw(self) -> u64 {
        self.0.get()
    }
    /// Node index part (1-based).
    pub const fn index(self) -> u32 {
        self.0.get() as u32
    }
    /// Generation part.
    pub const fn generation(self) -> u32 {
        (self.0.get() >> 32) as u32
    }
}

/// One allocation: its id and the absolute address range `[addr, addr + size)` it covers
/// (`size` rounded up to the granule).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CarveBlock {
    /// The id to free or look the allocation up with.
    pub id: CarveId,
    /// First byte (absolute: `base + offset`).
    pub addr: u64,
    /// Bytes (the request rounded up to the granule).
    pub size: u64,
}

/// One block of the physical chain, as [`Carve::for_each_block`] reports it (the shape of the
/// driver's DUMP_MEM_CHUNKS entries, public ABI §3).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BlockInfo {
    /// First byte (absolute).
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Allocated (true) or free.
    pub used: bool,
}

/// Occupancy of one carve (what the driver reports per pool, public ABI §3 / §6 "largest free
/// block").
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CarveStats {
    /// Bytes managed.
    pub capacity: u64,
    /// Bytes free.
    pub free: u64,
    /// The largest single free block.
    pub largest_free: u64,
    /// Live allocations.
    pub live_allocations: u64,
    /// Bytes in live allocations (`capacity - free`).
    pub live_bytes: u64,
    /// Free blocks (fragments).
    pub free_blocks: u32,
    /// Nodes describing blocks right now.
    pub nodes_used: u32,
    /// Node capacity `N`.
    pub node_capacity: u32,
}

impl CarveStats {
    /// External fragmentation in per mille: `1000 * (1 - largest_free / free)`, 0 when
    /// nothing is free (same figure as [`PoolStats::fragmentation_permille`]).
    pub fn fragmentation_permille(&self) -> u32 {
        PoolStats::from(*self).fragmentation_permille()
    }
}

impl From<CarveStats> for PoolStats {
    fn from(s: CarveStats) -> Self {
        PoolStats::one_region(s.capacity, s.free, s.largest_free, s.live_allocations)
    }
}
