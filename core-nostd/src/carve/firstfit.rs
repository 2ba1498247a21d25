//! The address-ordered first-fit index of [`Policy::FirstFit`] carves, the driver's genalloc
//! placement (module docs of `carve`, "Address-ordered first fit"): address buckets under a
//! max summary (`summary.rs`), a treap per bucket augmented with subtree maxima.

use super::*;

impl<const N: usize> Carve<N> {
    /// The bucket free block `i` belongs in: the one holding its last granule. Allocation
    /// takes the front of a block, so the shrunk block usually stays in its bucket.
    #[inline(always)]
    pub(super) fn key_bucket(&self, i: u32) -> usize {
        let n = self.node(i);
        self.bucket_of(n.addr + n.size - self.granule)
    }

    /// The bucket of address `addr` (inside the carve).
    #[inline(always)]
    pub(super) fn bucket_of(&self, addr: u64) -> usize {
        // `init_with` chose the shift so that every in-range address maps below FF_BUCKETS.
        ((addr - self.base) >> self.bucket_shift) as usize & (FF_BUCKETS - 1)
    }

    /// The lowest block ending above `addr` in the treap under `x`, or NIL.
    pub(super) fn tree_ceil_end(&self, mut x: u32, addr: u64) -> u32 {
        let mut best = NIL;
        while x != NIL {
            let n = self.node(x);
            if n.addr + n.size > addr {
                best = x;
                x = n.prev_free;
            } else {
                x = n.next_free;
            }
        }
        best
    }

    /// A fixed pseudo-random priority per node index (a 32-bit integer hash), so the tree's
    /// shape is independent of the order blocks come and go in.
    #[inline(always)]
    pub(super) fn priority(i: u32) -> u32 {
        let mut x = i.wrapping_mul(0x9E37_79B9);
        x ^= x >> 16;
        x = x.wrapping_mul(0x85EB_CA6B);
        x ^= x >> 13;
        x = x.wrapping_mul(0xC2B2_AE35);
        x ^ (x >> 16)
    }

    #[inline(always)]
    pub(super) fn units(&self, i: u32) -> u32 {
        // `init_with` bounds the carve to u32::MAX granules.
        // The granule is a power of two: a shift, not a division.
        (self.node(i).size >> self.granule.trailing_zeros()) as u32
    }

    #[inline(always)]
    pub(super) fn max_of(&self, i: u32) -> u32 {
        // Branch-free: whether a child exists is a coin flip in the maxima fix-ups (this
        // branch was 12 % of trace B's mispredicted branches, docs/PERFORMANCE.md), so NIL
        // reads node 1 (always there, as `CAPACITY_OK` asserts N ≥ 2) and the result is
        // masked instead.
        let j = core::hint::select_unpredictable(i == NIL, 1, i);
        let m = self.node(j).max_units;
        core::hint::select_unpredictable(i == NIL, 0, m)
    }

    /// Recomputes `i`'s subtree maximum from its block and its children; returns whether it
    /// changed.
    #[inline(always)]
    pub(super) fn recompute(&mut self, i: u32) -> bool {
        let m = {
            let n = self.node(i);
            n.lmax.max(n.rmax)
        };
        let m = self.units(i).max(m);
        let n = self.node_mut(i);
        let changed = n.max_units != m;
        n.max_units = m;
        changed
    }

    /// Fixes the maxima from `i` up after `i`'s own block changed size; stops at the first
    /// subtree whose maximum is unchanged (everything above it is then unchanged too), and
    /// at a bucket root updates the summary.
    pub(super) fn tree_fix_up(&mut self, mut i: u32) {
        if i == NIL {
            return;
        }
        // `old` follows the maximum `i`'s subtree had before: at the root it is the bucket's
        // level-0 entry, so the summary learns the direction without reading it.
        let mut old = self.node(i).max_units;
        if !self.recompute(i) {
            return;
        }
        loop {
            let (p, m, k) = {
                let n = self.node(i);
                (n.parent, n.max_units, usize::from(n.class))
            };
            if p == NIL {
                self.seg_update(k, old, m);
                return;
            }
            // The parent's maximum from its block and its two child maxima, one of them the
            // child just fixed (`m`): no child is read. Which side is a coin flip: selects.
            let u = self.units(p);
            let n = self.node_mut(p);
            let left = n.prev_free == i;
            n.lmax = core::hint::select_unpredictable(left, m, n.lmax);
            n.rmax = core::hint::select_unpredictable(left, n.rmax, m);
            let pm = u.max(n.lmax).max(n.rmax);
            if n.max_units == pm {
                return;
            }
            old = n.max_units;
            n.max_units = pm;
            i = p;
        }
    }

    /// Raises the maxima from `i` up after `i`'s own block grew (same bucket): no child is
    /// read, as a larger block can only raise a maximum.
    pub(super) fn tree_grew(&mut self, mut i: u32) {
        let u = self.units(i);
        let n = self.node_mut(i);
        if n.max_units >= u {
            return;
        }
        n.max_units = u;
        loop {
            let (p, k) = {
                let n = self.node(i);
                (n.parent, usize::from(n.class))
            };
            if p == NIL {
                // The root's maximum was below `u` (or the walk would have stopped).
                self.seg_raise(k, u);
                return;
            }
            // `i`'s subtree maximum is now `u`: so is the parent's maximum on that side.
            let n = self.node_mut(p);
            let left = n.prev_free == i;
            n.lmax = core::hint::select_unpredictable(left, u, n.lmax);
            n.rmax = core::hint::select_unpredictable(left, n.rmax, u);
            if n.max_units >= u {
                return;
            }
            n.max_units = u;
            i = p;
        }
    }

    /// Fixes the maxima after `i`'s own block shrank from `old_units` (same bucket). Nothing
    /// changes when the subtree's maximum was larger than the old block (it comes from a
    /// child); otherwise the path is recomputed.
    #[inline(always)]
    pub(super) fn tree_shrank(&mut self, i: u32, old_units: u32) {
        if self.node(i).max_units > old_units {
            return;
        }
        self.tree_fix_up(i);
    }

    /// Points `parent`'s link that named `old` (bucket `k`'s root if `parent` is NIL) at `new`.
    #[inline(always)]
    pub(super) fn relink_child(&mut self, k: usize, parent: u32, old: u32, new: u32) {
        if parent == NIL {
            self.roots[k] = new;
        } else if self.node(parent).prev_free == old {
            self.node_mut(parent).prev_free = new;
        } else {
            self.node_mut(parent).next_free = new;
        }
    }

    /// Rotates `x` above its parent (both in bucket `k`), keeping address order and both maxima
    /// (the parent's must be up to date: `x` inherits it, as its new subtree holds exactly the
    /// blocks of the parent's old one; only the parent's is recomputed).
    pub(super) fn rotate_up(&mut self, k: usize, x: u32) {
        let p = self.node(x).parent;
        let (g, pm) = {
            let n = self.node(p);
            (n.parent, n.max_units)
        };
        let left = self.node(p).prev_free == x;
        if left {
            let (b, bm) = {
                let n = self.node(x);
                (n.next_free, n.rmax)
            };
            let n = self.node_mut(p);
            n.prev_free = b;
            n.lmax = bm;
            if b != NIL {
                self.node_mut(b).parent = p;
            }
            self.node_mut(x).next_free = p;
        } else {
            let (b, bm) = {
                let n = self.node(x);
                (n.prev_free, n.lmax)
            };
            let n = self.node_mut(p);
            n.next_free = b;
            n.rmax = bm;
            if b != NIL {
                self.node_mut(b).parent = p;
            }
            self.node_mut(x).prev_free = p;
        }
        self.node_mut(p).parent = x;
        self.node_mut(x).parent = g;
        // `g`'s link now names `x`, whose subtree holds the same blocks: `g`'s side maximum
        // stays.
        self.relink_child(k, g, p, x);
        self.recompute(p);
        let p_max = self.node(p).max_units;
        let n = self.node_mut(x);
        if left {
            n.rmax = p_max;
        } else {
            n.lmax = p_max;
        }
        n.max_units = pm;
    }

    pub(super) fn tree_insert(&mut self, i: u32) {
        let addr = self.node(i).addr;
        let k = self.key_bucket(i);
        let u = self.units(i);
        {
            let n = self.node_mut(i);
            // FF_BUCKETS ≤ 2^16: the bucket fits the (otherwise unused) class field.
            n.class = k as u16;
            n.prev_free = NIL;
            n.next_free = NIL;
            n.max_units = u;
            n.lmax = 0;
            n.rmax = 0;
        }
        // Descend to the leaf position, raising the maxima (the node's and that side's) on
        // the way. Which side is a coin flip: selects, not branches.
        let root = self.roots[k];
        // The bucket's largest block before: after the insert it is `max(old, u)`, as the
        // rotations below keep the root's maximum.
        let old = self.max_of(root);
        let (mut p, mut x, mut left) = (NIL, root, false);
        while x != NIL {
            p = x;
            let n = self.node_mut(x);
            n.max_units = n.max_units.max(u);
            left = addr < n.addr;
            n.lmax = core::hint::select_unpredictable(left, n.lmax.max(u), n.lmax);
            n.rmax = core::hint::select_unpredictable(left, n.rmax, n.rmax.max(u));
            x = core::hint::select_unpredictable(left, n.prev_free, n.next_free);
        }
        self.node_mut(i).parent = p;
        if p == NIL {
            self.roots[k] = i;
        } else {
            let n = self.node_mut(p);
            n.prev_free = core::hint::select_unpredictable(left, i, n.prev_free);
            n.next_free = core::hint::select_unpredictable(left, n.next_free, i);
        }
        let pr = Self::priority(i);
        loop {
            let p = self.node(i).parent;
            if p == NIL || Self::priority(p) >= pr {
                break;
            }
            self.rotate_up(k, i);
        }
        if u > old {
            self.seg_raise(k, u);
        }
    }

    /// The child of `i` with the higher priority (the one a rotation down brings up), or NIL
    /// for a leaf.
    #[inline(always)]
    fn higher_priority_child(&self, i: u32) -> u32 {
        let n = self.node(i);
        match (n.prev_free, n.next_free) {
            (NIL, c) | (c, NIL) => c,
            (l, r) => {
                if Self::priority(l) >= Self::priority(r) {
                    l
                } else {
                    r
                }
            }
        }
    }

    pub(super) fn tree_remove(&mut self, i: u32) {
        let k = usize::from(self.node(i).class);
        // Rotate `i` down (its higher-priority child up) until it is a leaf, then cut it off.
        loop {
            let c = self.higher_priority_child(i);
            if c == NIL {
                break;
            }
            self.rotate_up(k, c);
        }
        let p = self.node(i).parent;
        if p != NIL {
            let n = self.node_mut(p);
            if n.prev_free == i {
                n.lmax = 0;
            } else {
                n.rmax = 0;
            }
        }
        self.relink_child(k, p, i, NIL);
        // The fix-up carries a changed maximum to the summary; without a parent, `i` was the
        // bucket's only block.
        if p == NIL {
            self.seg_lower(k, 0);
        } else {
            self.tree_fix_up(p);
        }
    }

    /// `new` takes `old`'s place among the free blocks (no free block lies between them).
    /// In one bucket it takes `old`'s tree links (so the same address order), then the maxima
    /// are fixed for `new`'s size; across buckets it is a remove and an insert.
    pub(super) fn tree_replace(&mut self, old: u32, new: u32) {
        let k = usize::from(self.node(old).class);
        if self.key_bucket(new) != k {
            self.tree_remove(old);
            self.tree_insert(new);
            return;
        }
        self.node_mut(new).class = k as u16;
        let (l, r, p, m, lm, rm) = {
            let n = self.node(old);
            (
                n.prev_free,
                n.next_free,
                n.parent,
                n.max_units,
                n.lmax,
                n.rmax,
            )
        };
        {
            let n = self.node_mut(new);
            n.prev_free = l;
            n.next_free = r;
            n.parent = p;
            n.max_units = m;
            n.lmax = lm;
            n.rmax = rm;
        }
        if l != NIL {
            self.node_mut(l).parent = new;
        }
        if r != NIL {
            self.node_mut(r).parent = new;
        }
        self.relink_child(k, p, old, new);
        // Only `new`'s own block differs from a consistent tree: fix the maxima first, then
        // rotations (which keep maxima) restore heap order, as priorities are per index.
        self.tree_fix_up(new);
        let pr = Self::priority(new);
        while self.node(new).parent != NIL && Self::priority(self.node(new).parent) < pr {
            self.rotate_up(k, new);
        }
        loop {
            let c = self.higher_priority_child(new);
            if c == NIL || Self::priority(c) <= pr {
                break;
            }
            self.rotate_up(k, c);
        }
        // The fix-up above carried `new`'s size to the summary; rotations keep the root's
        // maximum.
    }

    /// The first free block in address order under the treap root `root` that `accept`s,
    /// visiting only subtrees whose maximum (in granules) passes `enter`.
    #[inline(always)]
    pub(super) fn tree_first(
        &self,
        root: u32,
        mut enter: impl FnMut(u32) -> bool,
        mut accept: impl FnMut(&Node) -> bool,
    ) -> Option<u32> {
        let mut x = root;
        if x == NIL || !enter(self.node(x).max_units) {
            return None;
        }
        'subtree: loop {
            // `x`'s subtree passes `enter`: go to its leftmost such part.
            loop {
                let n = self.node(x);
                let l = n.prev_free;
                if l != NIL && enter(n.lmax) {
                    x = l;
                } else {
                    break;
                }
            }
            loop {
                if accept(self.node(x)) {
                    return Some(x);
                }
                let n = self.node(x);
                let r = n.next_free;
                if r != NIL && enter(n.rmax) {
                    x = r;
                    continue 'subtree;
                }
                // Climb until we leave a left subtree: its parent is next in address order.
                loop {
                    let p = self.node(x).parent;
                    if p == NIL {
                        return None;
                    }
                    let from_left = self.node(p).prev_free == x;
                    x = p;
                    if from_left {
                        break;
                    }
                }
            }
        }
    }

    /// First fit: the lowest free block holding `size` bytes at an `align`-aligned start (both
    /// granule multiples), with the padding in front of that start.
    pub(super) fn ff_find(&mut self, size: u64, align: u64) -> Option<(u32, u64)> {
        let need = size >> self.granule.trailing_zeros();
        if need > u64::from(u32::MAX) {
            return None;
        }
        let need = need as u32;
        if align <= self.granule {
            // Every block of `need` granules fits: the lowest bucket with one, then one walk
            // down its treap (whose maximum is ≥ need, so the walk ends at a block).
            let k = self.next_bucket(0, need)?;
            let mut x = self.roots[k];
            while x != NIL {
                let n = self.node(x);
                // `need` ≥ 1 and `lmax` is 0 without a left child.
                if n.lmax >= need {
                    x = n.prev_free;
                } else if self.units(x) >= need {
                    return Some((x, 0));
                } else {
                    x = n.next_free;
                }
            }
            return None;
        }
        let mut k = self.next_bucket(0, need)?;
        loop {
            let hit = self.tree_first(
                self.roots[k],
                |m| m >= need,
                |n| fit(n.addr, n.size, size, align).is_some(),
            );
            if let Some(i) = hit {
                let n = self.node(i);
                return fit(n.addr, n.size, size, align).map(|pad| (i, pad));
            }
            k = self.next_bucket(k + 1, need)?;
        }
    }

    /// [`Carve::largest_aligned`] under [`Policy::FirstFit`] for `align` above the granule:
    /// the best of every free block from its first aligned start to its end, skipping buckets
    /// and subtrees that cannot beat the best found.
    pub(super) fn ff_largest_aligned(&self, align: u64) -> u64 {
        let g = self.granule;
        let best = core::cell::Cell::new(0u64);
        // Level 0 is exact (the levels above are upper bounds): one line per 16 buckets,
        // then the treaps of the buckets whose largest block could beat the best found.
        for (j, line) in self.seg.iter().enumerate() {
            // Only a block of more than `best` bytes can beat it (`best` is a granule multiple).
            let Ok(beat) = u32::try_from(best.get() / g + 1) else {
                break;
            };
            let mut m = line_ge(line, beat);
            while m != 0 {
                let b = j * FAN0 + m.trailing_zeros() as usize;
                m &= m - 1;
                self.tree_first(
                    self.roots[b],
                    |m| u64::from(m) * g > best.get(),
                    |n| {
                        let end = n.addr + n.size;
                        if let Some(start) = n.addr.checked_next_multiple_of(align) {
                            if start < end {
                                best.set(best.get().max(end - start));
                            }
                        }
                        false
                    },
                );
            }
        }
        best.get()
    }
}
