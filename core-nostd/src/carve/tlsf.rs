//! The TLSF good-fit index of [`Policy::GoodFit`] carves (module docs of `carve`, "Algorithm"):
//! two-level segregated free lists with a bitmap per level.

use super::*;

/// `(fl, sl)` of the class that holds blocks of `size` (size ≥ 1).
#[inline]
pub(super) fn mapping_insert(size: u64) -> (usize, usize) {
    if size < SL as u64 {
        (0, size as usize)
    } else {
        let f = 63 - size.leading_zeros();
        let sl = (size >> (f - SL_LOG2)) as usize - SL;
        ((f - SL_LOG2 + 1) as usize, sl)
    }
}

/// The first class all of whose blocks are ≥ `size`; `None` if no class is (size near 2^64).
#[inline]
pub(super) fn mapping_search(size: u64) -> Option<(usize, usize)> {
    if size < SL as u64 {
        Some((0, size as usize))
    } else {
        let f = 63 - size.leading_zeros();
        let round = (1u64 << (f - SL_LOG2)) - 1;
        Some(mapping_insert(size.checked_add(round)?))
    }
}

/// One more than the largest size class `(fl, sl)` holds (saturating at `u64::MAX`).
#[inline]
pub(super) fn class_upper_bound(fl: usize, sl: usize) -> u64 {
    if fl == 0 {
        sl as u64 + 1
    } else {
        u64::try_from(((SL + sl + 1) as u128) << (fl - 1)).unwrap_or(u64::MAX)
    }
}

impl<const N: usize> Carve<N> {
    /// Puts free block `i` on its class list: at the head, unless the head has the lower
    /// address, then right behind it. One comparison with a node that is touched anyway keeps
    /// every list's head the lower-addressed of its two most recent blocks, so allocation (which
    /// takes the first fitting entry) leans toward low addresses instead of handing out the most
    /// recently freed hole — much of the benefit of address-ordered fit for O(1) work
    /// (docs/PERFORMANCE.md: utilisation at first failure 0.862 → 0.918, mean of 10 traces).
    #[inline(always)]
    pub(super) fn tlsf_insert(&mut self, i: u32) {
        let (fl, sl) = mapping_insert(self.node(i).size);
        let head = if self.sl_bitmap[fl] & (1 << sl) != 0 {
            self.heads[fl][sl]
        } else {
            NIL
        };
        let (prev, next) = if head != NIL && self.node(head).addr < self.node(i).addr {
            (head, self.node(head).next_free)
        } else {
            (NIL, head)
        };
        {
            let n = self.node_mut(i);
            n.prev_free = prev;
            n.next_free = next;
            n.class = (fl * SL + sl) as u16;
        }
        if next != NIL {
            self.node_mut(next).prev_free = i;
        }
        if prev == NIL {
            self.heads[fl][sl] = i;
        } else {
            self.node_mut(prev).next_free = i;
        }
        self.sl_bitmap[fl] |= 1 << sl;
        self.fl_bitmap |= 1 << fl;
    }

    #[inline(always)]
    pub(super) fn tlsf_remove(&mut self, i: u32) {
        let (class, p, n) = {
            let x = self.node(i);
            (x.class as usize, x.prev_free, x.next_free)
        };
        let (fl, sl) = (class / SL, class % SL);
        if p != NIL {
            self.node_mut(p).next_free = n;
        } else {
            self.heads[fl][sl] = n;
            if n == NIL {
                self.sl_bitmap[fl] &= !(1 << sl);
                if self.sl_bitmap[fl] == 0 {
                    self.fl_bitmap &= !(1 << fl);
                }
            }
        }
        if n != NIL {
            self.node_mut(n).prev_free = p;
        }
    }

    /// The first non-empty class at or above `(fl, sl)`.
    #[inline(always)]
    pub(super) fn find_suitable(&self, fl: usize, sl: usize) -> Option<(usize, usize)> {
        let sl_map = self.sl_bitmap[fl] & (u32::MAX << sl);
        if sl_map != 0 {
            return Some((fl, sl_map.trailing_zeros() as usize));
        }
        let fl_map = if fl + 1 >= 64 {
            0
        } else {
            self.fl_bitmap & (u64::MAX << (fl + 1))
        };
        if fl_map == 0 {
            return None;
        }
        let f = fl_map.trailing_zeros() as usize;
        Some((f, self.sl_bitmap[f].trailing_zeros() as usize))
    }

    /// The first of at most `limit` entries of one class that holds `size` at `align`
    /// (blocks of one class differ by less than 1/32 of their size, so first fit inside a
    /// class costs at most that much over best fit; blocks too small are skipped).
    #[inline(always)]
    pub(super) fn scan_class(
        &self,
        (fl, sl): (usize, usize),
        size: u64,
        align: u64,
        limit: u32,
    ) -> Option<(u32, u64)> {
        if self.sl_bitmap[fl] & (1 << sl) == 0 {
            return None;
        }
        let mut i = self.heads[fl][sl];
        let mut seen = 0;
        while i != NIL && seen < limit {
            let n = self.node(i);
            if let Some(pad) = fit(n.addr, n.size, size, align) {
                return Some((i, pad));
            }
            i = n.next_free;
            seen += 1;
        }
        None
    }

    /// Finds a free block for `size` bytes at `align` (both granule multiples): own class
    /// (good fit, bounded), then the next class up, then the class that guarantees an aligned
    /// fit. Only when all of these fail — the request would otherwise be refused — are the
    /// own class and every class above it scanned to their ends ([`Self::find_exhaustive`]),
    /// so a fitting block is never missed for want of looking.
    pub(super) fn find(&self, size: u64, align: u64) -> Option<(u32, u64)> {
        let own = mapping_insert(size);
        if let Some(hit) = self.scan_class(own, size, align, OWN_CLASS_SCAN) {
            return Some(hit);
        }
        if let Some(up) = mapping_search(size) {
            if let Some(class) = self.find_suitable(up.0, up.1) {
                if class != own {
                    if let Some(hit) = self.scan_class(class, size, align, OWN_CLASS_SCAN) {
                        return Some(hit);
                    }
                }
            }
        }
        if align > self.granule {
            if let Some(hit) = self.find_aligned(size, align) {
                return Some(hit);
            }
        }
        self.find_exhaustive(own, size, align)
    }

    /// The refusal path: every block of class `own` and of every class above it, lowest class
    /// first. Blocks below `own` are smaller than `size`. An unaligned request only gets here
    /// when no class above `own` has a block (any such block would have fitted); an aligned
    /// one may fit in a block of an intermediate class that is too small to fit at every
    /// position, which the bounded steps of [`Self::find`] do not look at. Costs one visit of
    /// every free block in those classes, on the way to a refusal or to a hit the bounded
    /// steps missed.
    #[cold]
    pub(super) fn find_exhaustive(
        &self,
        own: (usize, usize),
        size: u64,
        align: u64,
    ) -> Option<(u32, u64)> {
        let mut class = self.find_suitable(own.0, own.1);
        while let Some(c) = class {
            if let Some(hit) = self.scan_class(c, size, align, u32::MAX) {
                return Some(hit);
            }
            class = self.next_class(c);
        }
        None
    }

    /// The first non-empty class after `(fl, sl)`.
    pub(super) fn next_class(&self, (fl, sl): (usize, usize)) -> Option<(usize, usize)> {
        if sl + 1 < SL {
            self.find_suitable(fl, sl + 1)
        } else if fl + 1 < FL {
            self.find_suitable(fl + 1, 0)
        } else {
            None
        }
    }

    /// Nodes that carving `size` bytes at `pad` into free block `idx` takes: one for a head
    /// fragment, one for a tail.
    pub(super) fn nodes_to_split(&self, idx: u32, pad: u64, size: u64) -> u32 {
        let tail = self.node(idx).size - pad - size;
        u32::from(pad > 0) + u32::from(tail > 0)
    }

    /// The node-starved path: the first block, over every class from the request's own up,
    /// that holds `size` at `align` with at most `spare` new nodes, at its lowest aligned
    /// position or its highest (which leaves no tail, so needs at most a head node). Runs
    /// only when the node array is (almost) full and the block [`Self::find`] chose would
    /// need more; costs one visit of every free block in those classes.
    #[cold]
    pub(super) fn find_within_nodes(
        &self,
        size: u64,
        align: u64,
        spare: u32,
    ) -> Option<(u32, u64)> {
        let own = mapping_insert(size);
        let mut class = self.find_suitable(own.0, own.1);
        while let Some((fl, sl)) = class {
            let mut i = self.heads[fl][sl];
            while i != NIL {
                let n = self.node(i);
                if let Some(low) = fit(n.addr, n.size, size, align) {
                    // The highest aligned start: `end - size` rounded down, never below the
                    // lowest (which `fit` found, so it does not underflow).
                    let high = ((n.addr + n.size - size) & !(align - 1)) - n.addr;
                    for pad in [low, high] {
                        if self.nodes_to_split(i, pad, size) <= spare {
                            return Some((i, pad));
                        }
                    }
                }
                i = n.next_free;
            }
            class = self.next_class((fl, sl));
        }
        None
    }

    /// The head of the first class whose every block holds `size` at any `align` position.
    pub(super) fn find_aligned(&self, size: u64, align: u64) -> Option<(u32, u64)> {
        let need = size.checked_add(align - self.granule)?;
        let (f0, s0) = mapping_search(need)?;
        let (f, s) = self.find_suitable(f0, s0)?;
        let h = self.heads[f][s];
        let n = self.node(h);
        fit(n.addr, n.size, size, align).map(|pad| (h, pad))
    }
}
