//! The first-fit index's bucket summary (module docs of `carve`, "Buckets"): a 16-ary max tree
//! over the buckets' largest free blocks, one 64-byte line of `u32` maxima per node, scanned
//! with SSE2 on x86-64.

use super::*;

/// Fan-out of the bucket summary: one 64-byte line of `u32` maxima decides a level.
pub(super) const FAN: usize = 16;
/// Entries that matter on summary level `l` (level 0: one per bucket; level `l + 1`: one per
/// `FAN` entries of level `l`).
pub(super) const fn level_len(l: usize) -> usize {
    FF_BUCKETS.div_ceil(FAN.pow(l as u32))
}
/// Levels of the summary: the top one fits one line.
pub(super) const SUM_LEVELS: usize = {
    let mut l = 0;
    while level_len(l) > FAN {
        l += 1;
    }
    l + 1
};
/// Start of each summary level in `Carve::seg`; each level is padded to whole lines (the
/// padding stays 0, below every request). 16384 buckets: 16384 maxima, 1024, 64, then 4 in a
/// 16-entry line.
pub(super) const SUM_OFFSETS: [usize; SUM_LEVELS] = {
    let mut o = [0; SUM_LEVELS];
    let mut l = 1;
    while l < SUM_LEVELS {
        o[l] = o[l - 1] + level_len(l - 1).next_multiple_of(FAN);
        l += 1;
    }
    o
};
/// Entries of the summary.
pub(super) const SUM_LEN: usize =
    SUM_OFFSETS[SUM_LEVELS - 1] + level_len(SUM_LEVELS - 1).next_multiple_of(FAN);
/// [`level_len`] of each level, as constants for the search.
pub(super) const LEVEL_LENS: [usize; SUM_LEVELS] = {
    let mut n = [0; SUM_LEVELS];
    let mut l = 0;
    while l < SUM_LEVELS {
        n[l] = level_len(l);
        l += 1;
    }
    n
};
const _: () = assert!(FF_BUCKETS.is_power_of_two() && FF_BUCKETS <= 1 << 16);

/// Bit `j` set when `line[j] >= need`.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
pub(super) fn line_ge(line: &[u32; FAN], need: u32) -> u32 {
    let mut m = 0;
    for (j, &v) in line.iter().enumerate() {
        m |= u32::from(v >= need) << j;
    }
    m
}

/// Bit `j` set when `line[j] >= need`: four SSE2 compares and one movemask (SSE2 is part of
/// the x86-64 baseline). The compiler does not vectorise the portable loop above.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
pub(super) fn line_ge(line: &[u32; FAN], need: u32) -> u32 {
    use core::arch::x86_64::{
        __m128i, _mm_cmpgt_epi32, _mm_loadu_si128, _mm_movemask_epi8, _mm_packs_epi16,
        _mm_packs_epi32, _mm_set1_epi32, _mm_xor_si128,
    };
    if need == 0 {
        return (1 << FAN) - 1;
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

/// The largest of `FAN` entries (0 for none above 0). SSE2 has no unsigned 32-bit maximum
/// (`pmaxud` is SSE4.1) and the compiler turns the portable reduction below into 15 scalar
/// compares and moves, so this is a biased signed compare-and-select: three steps on four
/// vectors and two across the lanes.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
pub(super) fn line_max(line: &[u32; FAN]) -> u32 {
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

/// The largest of `FAN` entries (0 for none above 0).
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline(always)]
pub(super) fn line_max(line: &[u32; FAN]) -> u32 {
    // Pairwise, so the reduction is 4 steps deep rather than a chain of 16.
    let mut a = *line;
    let mut w = FAN / 2;
    while w > 0 {
        for j in 0..w {
            a[j] = a[j].max(a[j + w]);
        }
        w /= 2;
    }
    a[0]
}
