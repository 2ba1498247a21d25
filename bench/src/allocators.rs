//! The allocators under test behind one [`BenchAlloc`] trait: the TLSF and first-fit carves,
//! offset-allocator, range-alloc and the page-bitmap first-fit reference.

use super::*;

/// The interface the benchmark drives; one adapter per allocator.
pub trait BenchAlloc {
    /// What an allocation is remembered by.
    type Handle: Copy;
    /// Name used in the report.
    const NAME: &'static str;
    /// Back to empty, same capacity (untimed).
    fn reset(&mut self);
    /// Allocates; `None` when the allocator refuses.
    fn alloc(&mut self, size: u64, align: u64) -> Option<Self::Handle>;
    /// Frees a live allocation.
    fn free(&mut self, h: Self::Handle);
    /// The byte range `[start, end)` an allocation covers (for correctness checks).
    fn range(&self, h: Self::Handle) -> (u64, u64);
}

/// The carve allocator (the subject), TLSF good fit unless built by [`GenallocBench`].
pub struct CarveBench {
    carve: Box<Carve<CARVE_NODES>>,
    capacity: u64,
    granule: u64,
    policy: Policy,
}

impl CarveBench {
    /// A carve over `[0, capacity)` with the benchmark granule ([`CARVE_GRANULE`]).
    pub fn new(capacity: u64) -> Self {
        Self::with_granule(capacity, CARVE_GRANULE)
    }

    /// A carve over `[0, capacity)` with another granule (a power of two dividing
    /// `capacity`), e.g. 64 B so that the trace's alignments need real work.
    pub fn with_granule(capacity: u64, granule: u64) -> Self {
        let mut b = CarveBench {
            carve: Carve::new_boxed(),
            capacity,
            granule,
            policy: Policy::GoodFit,
        };
        b.reset();
        b
    }
}

impl BenchAlloc for CarveBench {
    type Handle = CarveId;
    const NAME: &'static str = "carve";
    fn reset(&mut self) {
        // Capacity and granule come from the constructor; a bad pair leaves the carve
        // uninitialised, and every allocation then fails (visible as trace failures).
        let _ = self
            .carve
            .init_with(0, self.capacity, self.granule, self.policy);
    }
    #[inline]
    fn alloc(&mut self, size: u64, align: u64) -> Option<CarveId> {
        self.carve.alloc(size, align).ok().map(|b| b.id)
    }
    #[inline]
    fn free(&mut self, h: CarveId) {
        let _ = self.carve.free(h);
    }
    fn range(&self, h: CarveId) -> (u64, u64) {
        self.carve
            .lookup(h)
            .map(|b| (b.addr, b.addr + b.size))
            .unwrap_or((0, 0))
    }
}

/// The carve with [`Policy::FirstFit`]: the simulated device's default, driver-exact
/// placement (docs/PLACEMENT.md), on the same traces as the TLSF carve.
pub struct GenallocBench(CarveBench);

impl GenallocBench {
    /// A first-fit carve over `[0, capacity)` with the benchmark granule.
    pub fn new(capacity: u64) -> Self {
        let mut b = CarveBench::new(capacity);
        b.policy = Policy::FirstFit;
        b.reset();
        GenallocBench(b)
    }
}

impl BenchAlloc for GenallocBench {
    type Handle = CarveId;
    const NAME: &'static str = "genalloc";
    fn reset(&mut self) {
        self.0.reset();
    }
    #[inline]
    fn alloc(&mut self, size: u64, align: u64) -> Option<CarveId> {
        self.0.alloc(size, align)
    }
    #[inline]
    fn free(&mut self, h: CarveId) {
        self.0.free(h);
    }
    fn range(&self, h: CarveId) -> (u64, u64) {
        self.0.range(h)
    }
}

/// `offset-allocator` 0.2 in 4 KiB units.
pub struct OffsetBench {
    a: offset_allocator::Allocator<u32>,
    units: u32,
}

impl OffsetBench {
    /// An allocator over `capacity / 4 KiB` units (capacity ≤ 16 TiB).
    pub fn new(capacity: u64) -> Self {
        let units = u32::try_from(capacity / OFFSET_UNIT).unwrap_or(u32::MAX);
        OffsetBench {
            a: offset_allocator::Allocator::with_max_allocs(units, OFFSET_MAX_ALLOCS),
            units,
        }
    }
}

impl BenchAlloc for OffsetBench {
    type Handle = offset_allocator::Allocation<u32>;
    const NAME: &'static str = "offset_allocator";
    fn reset(&mut self) {
        self.a = offset_allocator::Allocator::with_max_allocs(self.units, OFFSET_MAX_ALLOCS);
    }
    #[inline]
    fn alloc(&mut self, size: u64, align: u64) -> Option<Self::Handle> {
        // Unit offsets are 4 KiB-aligned; larger alignments are not supported by the crate.
        if align > OFFSET_UNIT {
            return None;
        }
        let units = u32::try_from(size.div_ceil(OFFSET_UNIT)).ok()?;
        self.a.allocate(units)
    }
    #[inline]
    fn free(&mut self, h: Self::Handle) {
        self.a.free(h);
    }
    fn range(&self, h: Self::Handle) -> (u64, u64) {
        let start = h.offset as u64 * OFFSET_UNIT;
        (
            start,
            start + self.a.allocation_size(h) as u64 * OFFSET_UNIT,
        )
    }
}

/// `range-alloc` 0.1 in bytes.
pub struct RangeBench {
    a: range_alloc::RangeAllocator<u64>,
}

impl RangeBench {
    /// An allocator over `[0, capacity)`.
    pub fn new(capacity: u64) -> Self {
        RangeBench {
            a: range_alloc::RangeAllocator::new(0..capacity),
        }
    }
}

impl BenchAlloc for RangeBench {
    type Handle = (u64, u64);
    const NAME: &'static str = "range_alloc";
    fn reset(&mut self) {
        self.a.reset();
    }
    #[inline]
    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, u64)> {
        self.a
            .allocate_range_aligned(size, align.max(1))
            .ok()
            .map(|r| (r.start, r.end))
    }
    #[inline]
    fn free(&mut self, h: (u64, u64)) {
        self.a.free_range(h.0..h.1);
    }
    fn range(&self, h: (u64, u64)) -> (u64, u64) {
        h
    }
}

/// Exhaustive address-ordered first fit over a map of free ranges: the driver's stated policy
/// (public ABI §3 "How the driver carves memory"), with no bound on the search. O(free ranges)
/// per request, so it is a reference for *utilisation* (how far a non-moving allocator that
/// always takes the lowest fitting hole gets), not a speed peer.
pub struct FirstFitRef {
    /// Free ranges, coalesced.
    free: FreeRanges,
}

impl FirstFitRef {
    /// An empty pool over `[0, capacity)`, in units of [`CARVE_GRANULE`].
    pub fn new(capacity: u64) -> Self {
        FirstFitRef {
            free: FreeRanges::new(capacity),
        }
    }
}

impl BenchAlloc for FirstFitRef {
    type Handle = (u64, u64);
    const NAME: &'static str = "first_fit_reference";
    fn reset(&mut self) {
        *self = Self::new(self.free.capacity());
    }
    fn alloc(&mut self, size: u64, align: u64) -> Option<(u64, u64)> {
        let size = size.next_multiple_of(CARVE_GRANULE);
        let start = self.free.first_fit(size, align.max(CARVE_GRANULE))?;
        self.free.take(start, size);
        Some((start, start + size))
    }
    fn free(&mut self, (start, end): (u64, u64)) {
        self.free.give(start, end);
    }
    fn range(&self, h: (u64, u64)) -> (u64, u64) {
        h
    }
}
