//! Placement-policy study on trace A (`docs/PERFORMANCE.md`, "Why 0.97 utilisation is missed on
//! trace A"). So far only the free-range pool the study's policies and [`crate::FirstFitRef`]
//! place into.

use std::collections::BTreeMap;

/// Free ranges of a pool over `[0, capacity)`, start → length, always coalesced: no two
/// ranges touch. O(ranges) searches; a yardstick for placement, not a fast allocator.
#[derive(Clone, Debug)]
pub struct FreeRanges {
    free: BTreeMap<u64, u64>,
    capacity: u64,
}

impl FreeRanges {
    /// One free range covering `[0, capacity)` (none if `capacity` is 0).
    pub fn new(capacity: u64) -> Self {
        FreeRanges {
            free: (capacity > 0)
                .then_some((0, capacity))
                .into_iter()
                .collect(),
            capacity,
        }
    }

    /// The capacity the pool was created with.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The free ranges as `(start, length)`, in address order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        self.free.iter().map(|(&start, &len)| (start, len))
    }

    /// The lengths of the free ranges (the hole set), in address order.
    pub fn lengths(&self) -> Vec<u64> {
        self.free.values().copied().collect()
    }

    /// Address-ordered first fit: the lowest `align`-aligned start at which `size` bytes fit
    /// in one free range (`align` a power of two).
    pub fn first_fit(&self, size: u64, align: u64) -> Option<u64> {
        self.iter().find_map(|(base, len)| {
            let start = base.next_multiple_of(align);
            (start + size <= base + len).then_some(start)
        })
    }

    /// Best fit: the start of the smallest free range of at least `size` bytes, ties to the
    /// lowest address (no alignment: for pools whose ranges all start aligned).
    pub fn best_fit(&self, size: u64) -> Option<u64> {
        self.iter()
            .filter(|&(_, len)| len >= size)
            .min_by_key(|&(start, len)| (len, start))
            .map(|(start, _)| start)
    }

    /// Marks `[start, start + size)` used; the range must lie inside one free range.
    pub fn take(&mut self, start: u64, size: u64) {
        let (base, len) = self
            .free
            .range(..=start)
            .next_back()
            .map(|(&base, &len)| (base, len))
            .filter(|&(base, len)| start + size <= base + len)
            .expect("FreeRanges::take: the range lies inside one free range");
        self.free.remove(&base);
        if start > base {
            self.free.insert(base, start - base);
        }
        if start + size < base + len {
            self.free.insert(start + size, base + len - start - size);
        }
    }

    /// Frees `[start, end)` (a used range), merging it with the free ranges it touches.
    pub fn give(&mut self, mut start: u64, mut end: u64) {
        debug_assert!(
            self.free
                .range(..end)
                .next_back()
                .is_none_or(|(&b, &l)| b + l <= start),
            "FreeRanges::give: [{start}, {end}) overlaps a free range"
        );
        if let Some((&base, &len)) = self.free.range(..start).next_back() {
            if base + len == start {
                self.free.remove(&base);
                start = base;
            }
        }
        if let Some(len) = self.free.remove(&end) {
            end += len;
        }
        self.free.insert(start, end - start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KIB;

    #[test]
    fn free_ranges_take_and_give_coalesce() {
        let mut p = FreeRanges::new(64 * KIB);
        p.take(16 * KIB, 16 * KIB);
        p.take(0, 4 * KIB);
        assert_eq!(
            p.iter().collect::<Vec<_>>(),
            [(4 * KIB, 12 * KIB), (32 * KIB, 32 * KIB)]
        );
        assert_eq!(p.first_fit(16 * KIB, 4 * KIB), Some(32 * KIB));
        assert_eq!(p.best_fit(8 * KIB), Some(4 * KIB), "smallest fitting range");
        p.give(16 * KIB, 32 * KIB);
        assert_eq!(p.lengths(), [60 * KIB], "merged with both neighbours");
        p.give(0, 4 * KIB);
        assert_eq!(p.iter().collect::<Vec<_>>(), [(0, 64 * KIB)]);
    }
}
