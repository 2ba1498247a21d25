//! The first-fit index's bucket summary (module docs of `carve`, "Buckets"): the lowest bucket
//! whose largest free block holds a request, in three 64-byte line scans.
//!
//! * Level 0, `seg`: each bucket's largest free block in granules, exact, 16 `u32`s per line.
//! * Level 1, `seg1`: one `u16` per level-0 line, an *upper bound* of that line's maximum
//!   saturated at `u16::MAX`; 32 per line.
//! * Level 2, `seg2`: one `u16` per level-1 line, an upper bound of that line's maximum; the 32
//!   entries are one line.
//!
//! Upper bounds: a bucket maximum that grows is carried up at once (stopping at the first entry
//! already as large); one that shrinks is not. A search that meets a bound that is too high
//! (its line below has no entry that fits) brings it down to its line's maximum and goes on
//! with the next candidate, so each tightening pays for one earlier decrease. Nearly every
//! trace-B allocation lowers its bucket's maximum; carrying that up cost a line reduction per
//! level (docs/PERFORMANCE.md, "Fourth pass").
//!
//! Saturation: below `u16::MAX` granules a bound compares exactly with the request. A request
//! of at least `u16::MAX` granules (256 MiB at the 4 KiB page) also enters every saturated
//! entry and checks its line below exactly. A saturated level-1 entry needs a free block of
//! `u16::MAX` granules in its line, and free blocks are disjoint, so such a search scans at
//! most `granules / u16::MAX` extra lines (96 for a 24 GiB channel of 4 KiB pages), never a
//! bitmap.
//!
//! Why `u16` above level 0: 32 entries per line make 16 384 buckets three levels (16 × 32 ×
//! 32) instead of the four of a 16-ary `u32` summary, and the search starts at the top line
//! (one line, always in the cache) instead of climbing from bucket 0. Measured in
//! docs/PERFORMANCE.md, "Fifth pass".

use super::*;

/// Buckets per level-0 line: 16 `u32` maxima, one 64-byte line.
pub(super) const FAN0: usize = 16;
/// Entries per upper-level line: 32 `u16` bounds, one 64-byte line.
pub(super) const FAN1: usize = 32;
/// Level-1 entries: one per level-0 line.
pub(super) const L1_LEN: usize = FF_BUCKETS / FAN0;
/// Level-1 lines: one level-2 entry each.
pub(super) const L2_LEN: usize = L1_LEN / FAN1;
const _: () = assert!(FF_BUCKETS == FAN0 * FAN1 * FAN1 && L2_LEN == FAN1);

/// A level-0 line: 16 buckets' largest free blocks.
pub(super) type Line0 = [u32; FAN0];
/// A level-1 or level-2 line: 32 upper bounds.
pub(super) type Line1 = [u16; FAN1];

/// `v` as an upper-level bound: exact below `u16::MAX`, saturated above.
#[inline(always)]
pub(super) fn sat16(v: u32) -> u16 {
    v.min(u32::from(u16::MAX)) as u16
}

/// Bit `j` set when `line[j] >= need`: the portable scan of both line widths.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
fn ge_mask<T: Copy + Ord>(line: &[T], need: T) -> u32 {
    let mut m = 0;
    for (j, &v) in line.iter().enumerate() {
        m |= u32::from(v >= need) << j;
    }
    m
}

/// Bit `j` set when `line[j] >= need`.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
pub(super) fn line_ge(line: &Line0, need: u32) -> u32 {
    ge_mask(line, need)
}

/// Bit `j` set when `line[j] >= need`: four SSE2 compares and one movemask (SSE2 is part of
/// the x86-64 baseline). The compiler does not vectorise the portable loop above.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
pub(super) fn line_ge(line: &Line0, need: u32) -> u32 {
    use core::arch::x86_64::{
        __m128i, _mm_cmpgt_epi32, _mm_loadu_si128, _mm_movemask_epi8, _mm_packs_epi16,
        _mm_packs_epi32, _mm_set1_epi32, _mm_xor_si128,
    };
    if need == 0 {
        return (1 << FAN0) - 1;
    }
    let p = line.as_ptr().cast::<__m128i>();
    // SAFETY: the intrinsics need SSE2, which this function is only compiled with (the cfg
    // above requires `target_feature = "sse2"`, part of every x86-64 target's baseline).
    // `line` is 16 `u32`s (64 bytes); the four loads read bytes 0..16, 16..32, 32..48 and
    // 48..64 of it, all in bounds, and `_mm_loadu_si128` has no alignment requirement.
    #[allow(unsafe_code)]
    unsafe {
        let v = [
            _mm_loadu_si128(p),
            _mm_loadu_si128(p.add(1)),
            _mm_loadu_si128(p.add(2)),
            _mm_loadu_si128(p.add(3)),
        ];
        // Unsigned `v >= need` is signed `(v ^ MIN) > ((need - 1) ^ MIN)`.
        let bias = _mm_set1_epi32(i32::MIN);
        let n = _mm_xor_si128(_mm_set1_epi32((need - 1) as i32), bias);
        let ge = |x| _mm_cmpgt_epi32(_mm_xor_si128(x, bias), n);
        // Each lane is 0 or -1, which the saturating packs keep: 16 lanes of 8 bits.
        let lo = _mm_packs_epi32(ge(v[0]), ge(v[1]));
        let hi = _mm_packs_epi32(ge(v[2]), ge(v[3]));
        _mm_movemask_epi8(_mm_packs_epi16(lo, hi)) as u32
    }
}

/// The largest of a level-0 line's entries (0 for none above 0). SSE2 has no unsigned 32-bit
/// maximum (`pmaxud` is SSE4.1) and the compiler turns the portable reduction below into 15
/// scalar compares and moves, so this is a biased signed compare-and-select: three steps on
/// four vectors and two across the lanes.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
pub(super) fn line_max(line: &Line0) -> u32 {
    use core::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_andnot_si128, _mm_cmpgt_epi32, _mm_cvtsi128_si32,
        _mm_loadu_si128, _mm_or_si128, _mm_set1_epi32, _mm_shuffle_epi32, _mm_xor_si128,
    };
    let p = line.as_ptr().cast::<__m128i>();
    // SAFETY: as in `line_ge`: SSE2 is enabled for this function by the cfg above, and the
    // four unaligned loads read bytes 0..16, 16..32, 32..48 and 48..64 of the 64-byte `line`.
    #[allow(unsafe_code)]
    unsafe {
        // Unsigned order becomes signed order by flipping the top bit.
        let bias = _mm_set1_epi32(i32::MIN);
        let ld = |k: usize| _mm_xor_si128(_mm_loadu_si128(p.add(k)), bias);
        let max = |a: __m128i, b: __m128i| {
            let gt = _mm_cmpgt_epi32(a, b);
            _mm_or_si128(_mm_and_si128(gt, a), _mm_andnot_si128(gt, b))
        };
        let m = max(max(ld(0), ld(1)), max(ld(2), ld(3)));
        let m = max(m, _mm_shuffle_epi32::<0b01_00_11_10>(m));
        let m = max(m, _mm_shuffle_epi32::<0b10_11_00_01>(m));
        (_mm_cvtsi128_si32(m) as u32) ^ (1 << 31)
    }
}

/// The largest of a level-0 line's entries (0 for none above 0).
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
pub(super) fn line_max(line: &Line0) -> u32 {
    // Pairwise, so the reduction is 4 steps deep rather than a chain of 16.
    let mut a = *line;
    let mut w = FAN0 / 2;
    while w > 0 {
        for j in 0..w {
            a[j] = a[j].max(a[j + w]);
        }
        w /= 2;
    }
    a[0]
}

/// Bit `j` set when `line[j] >= need`.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
pub(super) fn line1_ge(line: &Line1, need: u16) -> u32 {
    ge_mask(line, need)
}

/// Bit `j` set when `line[j] >= need`: `v >= need` is "`need - v` saturates to 0"
/// (`psubusw`), four of them, then two packs and two movemasks.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
pub(super) fn line1_ge(line: &Line1, need: u16) -> u32 {
    use core::arch::x86_64::{
        __m128i, _mm_cmpeq_epi16, _mm_loadu_si128, _mm_movemask_epi8, _mm_packs_epi16,
        _mm_set1_epi16, _mm_setzero_si128, _mm_subs_epu16,
    };
    let p = line.as_ptr().cast::<__m128i>();
    // SAFETY: as in `line_ge`: SSE2 is enabled for this function by the cfg above, and the
    // four unaligned loads read bytes 0..16, 16..32, 32..48 and 48..64 of the 64-byte `line`
    // (32 `u16`s).
    #[allow(unsafe_code)]
    unsafe {
        let n = _mm_set1_epi16(need as i16);
        let z = _mm_setzero_si128();
        let ge = |k: usize| _mm_cmpeq_epi16(_mm_subs_epu16(n, _mm_loadu_si128(p.add(k))), z);
        // Each lane is 0 or -1, which the saturating pack keeps: 16 lanes of 8 bits each.
        let lo = _mm_movemask_epi8(_mm_packs_epi16(ge(0), ge(1))) as u32;
        let hi = _mm_movemask_epi8(_mm_packs_epi16(ge(2), ge(3))) as u32;
        lo | hi << 16
    }
}

/// The largest of a level-1 line's entries.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
pub(super) fn line1_max(line: &Line1) -> u16 {
    line.iter().copied().max().unwrap_or(0)
}

/// The largest of a level-1 line's entries: SSE2 has no unsigned 16-bit maximum (`pmaxuw` is
/// SSE4.1), but `max(a, b) = (a -sat b) + b`; two steps on four vectors, three across lanes.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
pub(super) fn line1_max(line: &Line1) -> u16 {
    use core::arch::x86_64::{
        __m128i, _mm_add_epi16, _mm_cvtsi128_si32, _mm_loadu_si128, _mm_shuffle_epi32,
        _mm_shufflelo_epi16, _mm_subs_epu16,
    };
    let p = line.as_ptr().cast::<__m128i>();
    // SAFETY: as in `line1_ge`: SSE2 is enabled by the cfg above; the four unaligned loads
    // read the 64 bytes of `line`.
    #[allow(unsafe_code)]
    unsafe {
        let max = |a: __m128i, b: __m128i| _mm_add_epi16(_mm_subs_epu16(a, b), b);
        let ld = |k: usize| _mm_loadu_si128(p.add(k));
        let m = max(max(ld(0), ld(1)), max(ld(2), ld(3)));
        // Eight lanes: fold the 64-bit halves, then the 32-bit pairs, then the 16-bit pairs.
        let m = max(m, _mm_shuffle_epi32::<0b01_00_11_10>(m));
        let m = max(m, _mm_shuffle_epi32::<0b10_11_00_01>(m));
        let m = max(m, _mm_shufflelo_epi16::<0b10_11_00_01>(m));
        _mm_cvtsi128_si32(m) as u16
    }
}

impl<const N: usize> Carve<N> {
    /// Bucket `k`'s largest free block in granules (level 0, exact).
    #[inline(always)]
    pub(super) fn bucket_max(&self, k: usize) -> u32 {
        self.seg[(k / FAN0) % L1_LEN][k % FAN0]
    }

    /// Level-0 line `j` (buckets `16 j .. 16 j + 16`).
    #[inline(always)]
    pub(super) fn line0(&self, j: usize) -> &Line0 {
        &self.seg[j % L1_LEN]
    }

    /// Bucket `k`'s largest block went from `old` (its level-0 entry) to `new`: a raise is
    /// carried up, a decrease is not (module docs). The callers know both values from the
    /// bucket root in hand, so the level-0 entry is stored without being read first.
    #[inline(always)]
    pub(super) fn seg_update(&mut self, k: usize, old: u32, new: u32) {
        if new > old {
            self.seg_raise(k, new);
        } else {
            self.seg_lower(k, new);
        }
    }

    /// Bucket `k`'s largest block went down to `v`: level 0 only; the bounds above stay (a
    /// search tightens them when it finds them too high).
    #[inline(always)]
    pub(super) fn seg_lower(&mut self, k: usize, v: u32) {
        debug_assert!(v <= self.bucket_max(k));
        self.seg[(k / FAN0) % L1_LEN][k % FAN0] = v;
    }

    /// Bucket `k`'s largest block went up to `v`: stores it and raises the bounds above that
    /// it now exceeds, stopping at the first entry already as large.
    #[inline(always)]
    pub(super) fn seg_raise(&mut self, k: usize, v: u32) {
        debug_assert!(v >= self.bucket_max(k));
        // Stores only where a value changes: the next search loads these lines 16 bytes at a
        // time, and a load that overlaps a store still waiting to commit cannot be forwarded
        // from it and stalls until the store is in the cache (storing every level
        // unconditionally, branch-free, cut the mispredicts but made trace A 10 % slower in
        // time, docs/PERFORMANCE.md).
        let j = (k / FAN0) % L1_LEN;
        self.seg[j][k % FAN0] = v;
        let c = sat16(v);
        let e = &mut self.seg1[j / FAN1][j % FAN1];
        if *e >= c {
            return;
        }
        *e = c;
        let e = &mut self.seg2[j / FAN1];
        if *e < c {
            *e = c;
        }
    }

    /// The exact largest block of every bucket: the maximum over level 0 (the levels above
    /// are upper bounds). A diagnostics path: one line scan per 16 buckets.
    pub(super) fn seg_exact_max(&self) -> u32 {
        self.seg.iter().map(line_max).max().unwrap_or(0)
    }

    /// The lowest bucket under the candidates `m` of level-1 line `i` whose maximum is ≥
    /// `need`. A candidate whose level-0 line has none is brought down to that line's maximum.
    #[inline(always)]
    fn first_in_line1(&mut self, i: usize, mut m: u32, need: u32) -> Option<usize> {
        let i = i % L2_LEN;
        while m != 0 {
            let j = i * FAN1 + m.trailing_zeros() as usize;
            m &= m - 1;
            let line = self.line0(j);
            let hit = line_ge(line, need);
            if hit != 0 {
                return Some(j * FAN0 + hit.trailing_zeros() as usize);
            }
            self.seg1[i][j % FAN1] = sat16(line_max(line));
        }
        None
    }

    /// The lowest bucket ≥ `from` whose largest block is ≥ `need` granules: the rest of
    /// `from`'s level-0 line, then the rest of its level-1 line, then the level-2 line from
    /// there down (from bucket 0, straight from the top). A level-2 bound whose line below
    /// held no fit is brought down to that line's maximum. Every loop runs over a mask of
    /// one line, so the search ends; each tightening pays for an earlier decrease or is one
    /// of the few saturated entries (module docs).
    #[inline(always)]
    pub(super) fn next_bucket(&mut self, from: usize, need: u32) -> Option<usize> {
        if from >= FF_BUCKETS {
            return None;
        }
        let c = sat16(need);
        let mut j = from / FAN0;
        if !from.is_multiple_of(FAN0) {
            let m = line_ge(self.line0(j), need) & (u32::MAX << (from % FAN0));
            if m != 0 {
                return Some(j * FAN0 + m.trailing_zeros() as usize);
            }
            j += 1;
        }
        let mut i = j / FAN1;
        if !j.is_multiple_of(FAN1) {
            let m = line1_ge(&self.seg1[i % L2_LEN], c) & (u32::MAX << (j % FAN1));
            if let Some(k) = self.first_in_line1(i, m, need) {
                return Some(k);
            }
            i += 1;
        }
        if i >= L2_LEN {
            return None;
        }
        let mut m2 = line1_ge(&self.seg2, c) & (u32::MAX << i);
        while m2 != 0 {
            let i = m2.trailing_zeros() as usize % L2_LEN;
            m2 &= m2 - 1;
            let m = line1_ge(&self.seg1[i], c);
            if let Some(k) = self.first_in_line1(i, m, need) {
                return Some(k);
            }
            self.seg2[i] = line1_max(&self.seg1[i]);
        }
        None
    }
}
