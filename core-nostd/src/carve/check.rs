//! The carve's self-check (`Carve::check`): every invariant of the block chain, the node
//! free list and whichever index the policy keeps, walked in full; for tests and `--check` runs.

use super::*;

impl<const N: usize> Carve<N> {
    /// Verifies every internal invariant (O(N)); for tests and debugging. Returns the first
    /// violation found.
    pub fn check(&self) -> Result<(), &'static str> {
        if self.size == 0 {
            return Ok(());
        }
        let mut expect = self.base;
        let mut prev = NIL;
        let (mut free, mut used, mut used_bytes, mut free_blocks, mut nodes) = (0, 0, 0, 0, 0);
        let mut prev_free = false;
        let mut i = 1;
        while i != NIL {
            if i > self.bump {
                return Err("physical link past bump");
            }
            let n = self.node(i);
            nodes += 1;
            if n.prev_phys != prev {
                return Err("prev_phys mismatch");
            }
            if n.addr != expect || n.size == 0 || !n.size.is_multiple_of(self.granule) {
                return Err("blocks not contiguous / granule-sized");
            }
            match n.state {
                FREE if self.first_fit() => {
                    if prev_free {
                        return Err("two adjacent free blocks (missed coalesce)");
                    }
                    free += n.size;
                    free_blocks += 1;
                }
                FREE => {
                    if prev_free {
                        return Err("two adjacent free blocks (missed coalesce)");
                    }
                    free += n.size;
                    free_blocks += 1;
                    let (fl, sl) = mapping_insert(n.size);
                    if self.sl_bitmap[fl] & (1 << sl) == 0 || self.fl_bitmap & (1 << fl) == 0 {
                        return Err("free block's class bit clear");
                    }
                    let mut j = self.heads[fl][sl];
                    let mut found = false;
                    while j != NIL {
                        if j == i {
                            found = true;
                            break;
                        }
                        j = self.node(j).next_free;
                    }
                    if !found {
                        return Err("free block missing from its class list");
                    }
                }
                USED => {
                    used += 1;
                    used_bytes += n.size;
                }
                _ => return Err("unused node in the physical chain"),
            }
            prev_free = n.state == FREE;
            expect = n.addr + n.size;
            prev = i;
            i = n.next_phys;
        }
        if expect != self.base + self.size {
            return Err("chain does not end at base + size");
        }
        if free != self.free_bytes || used_bytes != self.live_bytes || used != self.live_count {
            return Err("counters disagree with the chain");
        }
        if free + used_bytes != self.size {
            return Err("free + live != capacity");
        }
        if free_blocks != self.free_blocks {
            return Err("free block count mismatch");
        }
        if nodes + self.spare_count != self.bump {
            return Err("node accounting mismatch");
        }
        if self.first_fit() {
            if self.fl_bitmap != 0 {
                return Err("first-fit carve with class bits set");
            }
            return if self.check_tree()? == self.free_blocks {
                Ok(())
            } else {
                Err("the tree holds a different number of blocks")
            };
        }
        let mut listed = 0;
        for fl in 0..FL {
            if (self.fl_bitmap >> fl) & 1 != u64::from(self.sl_bitmap[fl] != 0) {
                return Err("first-level bitmap disagrees with second level");
            }
            for sl in 0..SL {
                if self.sl_bitmap[fl] & (1 << sl) == 0 {
                    continue;
                }
                let mut j = self.heads[fl][sl];
                if j == NIL {
                    return Err("class bit set on an empty list");
                }
                let mut back = NIL;
                while j != NIL {
                    let n = self.node(j);
                    if n.state != FREE
                        || mapping_insert(n.size) != (fl, sl)
                        || n.class as usize != fl * SL + sl
                        || n.prev_free != back
                    {
                        return Err("bad free-list entry");
                    }
                    listed += 1;
                    back = j;
                    j = n.next_free;
                }
            }
        }
        if listed != self.free_blocks {
            return Err("free lists hold a different number of blocks");
        }
        Ok(())
    }

    /// Checks the index: per bucket, address order, parent links, maxima, heap order and that
    /// every block starts in its bucket; the bucket summary; returns the number of blocks.
    pub(super) fn check_tree(&self) -> Result<u32, &'static str> {
        // Above level 0 an entry is an upper bound of its line (`seg_raise`).
        for (j, line) in self.seg.iter().enumerate() {
            if sat16(line_max(line)) > self.seg1[j / FAN1][j % FAN1] {
                return Err("bucket summary level 1 is below a bucket's largest block");
            }
        }
        for (i, line) in self.seg1.iter().enumerate() {
            if line1_max(line) > self.seg2[i] {
                return Err("bucket summary level 2 is below a level-1 bound");
            }
        }
        let mut count = 0u32;
        let mut last_end = 0u64;
        for k in 0..FF_BUCKETS {
            let root = self.roots[k];
            if self.bucket_max(k) != self.max_of(root) {
                return Err("bucket maximum disagrees with its treap");
            }
            if root != NIL && self.node(root).parent != NIL {
                return Err("tree root has a parent");
            }
            let mut x = self.tree_first(root, |_| true, |_| true);
            while let Some(i) = x {
                let n = self.node(i);
                if n.state != FREE {
                    return Err("non-free block in the tree");
                }
                if self.key_bucket(i) != k || usize::from(n.class) != k {
                    return Err("free block indexed in the wrong bucket");
                }
                if count > 0 && n.addr <= last_end {
                    return Err("tree out of address order (or touching free blocks)");
                }
                for c in [n.prev_free, n.next_free] {
                    if c != NIL {
                        if self.node(c).parent != i {
                            return Err("tree child's parent link is wrong");
                        }
                        if Self::priority(c) > Self::priority(i) {
                            return Err("tree heap order violated");
                        }
                    }
                }
                let m = self
                    .units(i)
                    .max(self.max_of(n.prev_free))
                    .max(self.max_of(n.next_free));
                if n.max_units != m {
                    return Err("tree subtree maximum is stale");
                }
                if n.lmax != self.max_of(n.prev_free) || n.rmax != self.max_of(n.next_free) {
                    return Err("tree child maximum is stale");
                }
                count += 1;
                if count > N as u32 {
                    return Err("tree has a cycle");
                }
                last_end = n.addr + n.size;
                // In-order successor.
                x = if n.next_free != NIL {
                    let mut y = n.next_free;
                    while self.node(y).prev_free != NIL {
                        y = self.node(y).prev_free;
                    }
                    Some(y)
                } else {
                    let mut y = i;
                    loop {
                        let p = self.node(y).parent;
                        if p == NIL {
                            break None;
                        }
                        if self.node(p).prev_free == y {
                            break Some(p);
                        }
                        y = p;
                    }
                };
            }
        }
        Ok(count)
    }
}
