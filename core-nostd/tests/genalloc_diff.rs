//! Differential test of the simulated device's default placement ([`Placement::Genalloc`])
//! against a plain page-bitmap model of the kernel driver's pools, written from the driver's
//! documented behaviour (docs/PLACEMENT.md; public ABI §3 "How the driver carves memory"):
//!
//! * per HBM channel a main pool from the channel's start to 1 GiB (a quarter, on scaled-down
//!   channels) below its end, whose first 16 MiB are allocated at start-up (the firmware
//!   carve-out), and a small-object pool above it; one bit per 4 KiB page;
//! * a request is rounded up to the page; `size > INT64_MAX` is `EINVAL`;
//! * CONTIGUOUS_SCRATCHPAD_DEVICE takes exactly the pages ending `scratchpad` bytes below the
//!   main pool's end, or fails; the scratchpad grows by the size on success and shrinks by it
//!   on free, in whatever order;
//! * otherwise the small pool first for `size <= 512 KiB`, else the main pool, then the other;
//! * in a pool: the lowest page index with enough clear bits (first fit), aligned on the
//!   absolute address when `align > 4 KiB` (`EINVAL` above `INT_MAX`);
//! * failure everywhere is `ENOMEM`.
//!
//! Every operation of every trace must give the same address (and pool), or the same errno;
//! every 64 operations the pool figures (free bytes, largest free block, small-object region)
//! must equal the model's.

use nrt_core::driver::{errno, AllocRequest, Driver, Errno};
use nrt_core::sim::{Placement, Preset, SimConfig, SimDevice};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
const PAGE: u64 = 4 * KIB;
const CARVEOUT: u64 = 16 * MIB;
const SMALL_MAX: u64 = 512 * KIB;
const CONTIGUOUS_SCRATCHPAD: u8 = 19;
const TENSORS: u8 = 9;

/// One genalloc chunk as a bitmap of pages (set = in use).
struct RefPool {
    start: u64,
    pages: usize,
    bits: Vec<u64>,
    avail: u64,
}

impl RefPool {
    fn new(start: u64, size: u64) -> Self {
        let pages = (size / PAGE) as usize;
        RefPool {
            start,
            pages,
            bits: vec![0; pages.div_ceil(64)],
            avail: size,
        }
    }

    fn is_set(&self, i: usize) -> bool {
        self.bits[i / 64] >> (i % 64) & 1 != 0
    }

    fn set_range(&mut self, i: usize, n: usize, on: bool) {
        for k in i..i + n {
            if on {
                self.bits[k / 64] |= 1 << (k % 64);
            } else {
                self.bits[k / 64] &= !(1 << (k % 64));
            }
        }
        let bytes = n as u64 * PAGE;
        if on {
            self.avail -= bytes;
        } else {
            self.avail += bytes;
        }
    }

    /// The first clear bit at or after `from` (`pages` if none).
    fn next_clear(&self, mut from: usize) -> usize {
        while from < self.pages {
            let w = !self.bits[from / 64] >> (from % 64);
            if w != 0 {
                return (from + w.trailing_zeros() as usize).min(self.pages);
            }
            from = (from / 64 + 1) * 64;
        }
        self.pages
    }

    /// The first set bit in `[from, end)` (`end` if none).
    fn next_set(&self, mut from: usize, end: usize) -> usize {
        while from < end {
            let w = self.bits[from / 64] >> (from % 64);
            if w != 0 {
                return (from + w.trailing_zeros() as usize).min(end);
            }
            from = (from / 64 + 1) * 64;
        }
        end
    }

    /// The lowest index of `nr` clear bits whose address is a multiple of `align` (≥ a page).
    fn first_fit(&self, nr: usize, align: u64) -> Option<usize> {
        let step = (align / PAGE) as usize;
        let off = ((self.start % align) / PAGE) as usize;
        let mut from = 0;
        loop {
            let z = self.next_clear(from);
            // round `z` up so that (z + off) is a multiple of `step`
            let idx = (z + off).div_ceil(step) * step - off;
            let end = idx.checked_add(nr)?;
            if end > self.pages {
                return None;
            }
            let s = self.next_set(idx, end);
            if s == end {
                return Some(idx);
            }
            from = s + 1;
        }
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        if size > self.avail {
            return None;
        }
        let nr = (size / PAGE) as usize;
        let i = self.first_fit(nr, align.max(PAGE))?;
        self.set_range(i, nr, true);
        Some(self.start + i as u64 * PAGE)
    }

    fn alloc_fixed(&mut self, offset: u64, size: u64) -> Option<u64> {
        let (i, nr) = ((offset / PAGE) as usize, (size / PAGE) as usize);
        if i.checked_add(nr)? > self.pages || self.next_set(i, i + nr) != i + nr {
            return None;
        }
        self.set_range(i, nr, true);
        Some(self.start + offset)
    }

    fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.start + self.pages as u64 * PAGE
    }

    fn free(&mut self, addr: u64, size: u64) {
        let i = ((addr - self.start) / PAGE) as usize;
        let nr = (size / PAGE) as usize;
        assert!(
            (i..i + nr).all(|k| self.is_set(k)),
            "model freed a free page"
        );
        self.set_range(i, nr, false);
    }

    /// The largest `align`-aligned request the pool grants (bytes).
    fn largest(&self, align: u64) -> u64 {
        let mut best = 0;
        let mut i = self.next_clear(0);
        while i < self.pages {
            let end = self.next_set(i, self.pages);
            let lo = (self.start + i as u64 * PAGE).next_multiple_of(align.max(PAGE));
            let hi = self.start + end as u64 * PAGE;
            if lo < hi {
                best = best.max(hi - lo);
            }
            i = self.next_clear(end);
        }
        best
    }
}

/// One HBM channel of the driver: main and small-object pools plus the scratchpad size.
struct RefChannel {
    main: RefPool,
    small: RefPool,
    main_size: u64,
    scratchpad: u64,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Placed {
    pa: u64,
    size: u64,
    small: bool,
    scratch: bool,
}

impl RefChannel {
    fn new(base: u64, channel: u64) -> Self {
        let small = if channel / 4 < GIB { channel / 4 } else { GIB };
        let main_size = channel - small;
        let mut main = RefPool::new(base, main_size);
        // the firmware carve-out: the first allocation of every channel, at offset 0
        assert_eq!(main.alloc(CARVEOUT, 0), Some(base));
        RefChannel {
            main,
            small: RefPool::new(base + main_size, small),
            main_size,
            scratchpad: 0,
        }
    }

    fn alloc(&mut self, size: u64, align: u64, category: u8) -> Result<Placed, Errno> {
        if size > i64::MAX as u64 {
            return Err(errno::EINVAL);
        }
        let size = size.next_multiple_of(PAGE);
        let placed = |pa: u64, small: bool, scratch: bool| Placed {
            pa,
            size,
            small,
            scratch,
        };
        if category == CONTIGUOUS_SCRATCHPAD {
            let offset = self
                .main_size
                .checked_sub(self.scratchpad)
                .and_then(|o| o.checked_sub(size))
                .ok_or(errno::ENOMEM)?;
            let pa = self.main.alloc_fixed(offset, size).ok_or(errno::ENOMEM)?;
            self.scratchpad += size;
            return Ok(placed(pa, false, true));
        }
        if align > PAGE && align > i32::MAX as u64 {
            return Err(errno::EINVAL);
        }
        let align = if align > PAGE { align } else { PAGE };
        let small_first = size <= SMALL_MAX;
        for small in [small_first, !small_first] {
            let pool = if small {
                &mut self.small
            } else {
                &mut self.main
            };
            if let Some(pa) = pool.alloc(size, align) {
                return Ok(placed(pa, small, false));
            }
        }
        Err(errno::ENOMEM)
    }

    fn free(&mut self, p: Placed) {
        if self.small.contains(p.pa) {
            self.small.free(p.pa, p.size);
        } else {
            self.main.free(p.pa, p.size);
        }
        if p.scratch {
            self.scratchpad -= p.size;
        }
    }
}

/// A small deterministic PRNG (xorshift64*), so traces are reproducible from their seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// A log-uniform size in `[lo, hi]`, not page-rounded (the driver rounds).
    fn size(&mut self, lo: u64, hi: u64) -> u64 {
        let (a, b) = (lo.ilog2(), hi.ilog2());
        let e = a + self.below(u64::from(b - a + 1)) as u32;
        let base = 1u64 << e;
        (base + self.below(base)).clamp(lo, hi)
    }
}

/// What a trace asks for next.
enum Step {
    Alloc { size: u64, align: u64, category: u8 },
    Free(usize),
}

/// A workload shape: picks the next step from the live set and the channel's free bytes.
type Shape = fn(&mut Rng, usize, u64, u64) -> Step;

fn alloc(size: u64, align: u64) -> Step {
    Step::Alloc {
        size,
        align,
        category: TENSORS,
    }
}

/// Random sizes from a page to 1/16 of the channel, a quarter of them aligned, ~75 % full.
fn random(r: &mut Rng, live: usize, free: u64, cap: u64) -> Step {
    if live > 0 && (free < cap / 4 || r.chance(45)) {
        return Step::Free(r.below(live as u64) as usize);
    }
    let align = if r.chance(25) {
        1 << (13 + r.below(12))
    } else {
        0
    };
    alloc(r.size(1, cap / 16), align)
}

/// Fragmentation-heavy: many small and mid blocks with random frees, then occasional big ones
/// that must skip every hole too small.
fn fragmenting(r: &mut Rng, live: usize, free: u64, cap: u64) -> Step {
    if live > 0 && (live > 3000 || free < cap / 8 || r.chance(40)) {
        return Step::Free(r.below(live as u64) as usize);
    }
    let size = if r.chance(5) {
        r.size(cap / 64, cap / 8)
    } else {
        r.size(PAGE, 2 * MIB)
    };
    alloc(size, 0)
}

/// Near-full: keeps the channel at ~98 %, so many requests are refused or squeezed into the
/// last holes; exact-fit requests for the remaining bytes.
fn near_full(r: &mut Rng, live: usize, free: u64, cap: u64) -> Step {
    if live > 0 && (live > 3000 || (free < cap / 50 && r.chance(50)) || r.chance(20)) {
        return Step::Free(r.below(live as u64) as usize);
    }
    let size = if r.chance(10) && free > 0 {
        free.min(cap / 8)
    } else {
        r.size(PAGE, cap / 32)
    };
    alloc(size, 0)
}

/// Aligned: every request aligned to 8 KiB … 4 GiB (above INT_MAX: EINVAL).
fn aligned(r: &mut Rng, live: usize, free: u64, cap: u64) -> Step {
    if live > 0 && (free < cap / 5 || r.chance(45)) {
        return Step::Free(r.below(live as u64) as usize);
    }
    let align = if r.chance(1) {
        1 << (31 + r.below(2))
    } else {
        1 << (13 + r.below(14))
    };
    alloc(r.size(1, cap / 32), align)
}

/// Small/large mix around the 512 KiB threshold, filling the small-object pool so small
/// requests fall back to the main pool and large ones into the small pool.
fn small_large(r: &mut Rng, live: usize, free: u64, cap: u64) -> Step {
    if live > 0 && (live > 3000 || free < cap / 20 || r.chance(35)) {
        return Step::Free(r.below(live as u64) as usize);
    }
    let size = match r.below(10) {
        0..=5 => r.size(1, SMALL_MAX),
        6 => SMALL_MAX + r.below(2) * PAGE,
        _ => r.size(SMALL_MAX, cap / 6),
    };
    let align = if r.chance(10) {
        1 << (13 + r.below(8))
    } else {
        0
    };
    alloc(size, align)
}

/// Contiguous scratchpad pages (mostly freed last-in first-out, sometimes out of order) among
/// ordinary requests.
fn scratchpad(r: &mut Rng, live: usize, free: u64, cap: u64) -> Step {
    if live > 0 && (free < cap / 4 || r.chance(40)) {
        // Most frees hit the newest allocations, which include the newest scratchpad pages.
        let k = if r.chance(70) {
            live - 1 - r.below(live.min(4) as u64) as usize
        } else {
            r.below(live as u64) as usize
        };
        return Step::Free(k);
    }
    if r.chance(30) {
        return Step::Alloc {
            size: [PAGE, 64 * KIB, MIB, 4 * MIB][r.below(4) as usize],
            align: 0,
            category: CONTIGUOUS_SCRATCHPAD,
        };
    }
    alloc(r.size(1, cap / 32), 0)
}

/// What a trace exercised (so a test can check it reached the cases it is about).
#[derive(Debug, Default)]
struct Seen {
    refused: usize,
    /// Requests above 512 KiB placed in the small-object pool (fallback).
    big_in_small: usize,
    /// Requests of at most 512 KiB placed in the main pool (fallback).
    small_in_main: usize,
    /// Contiguous-scratchpad blocks placed.
    scratch: usize,
    /// Aligned requests placed.
    aligned: usize,
}

/// Runs `ops` steps of `shape` on `channels` channels of `channel` bytes each (trn2 preset),
/// the simulator against the model, and says what the trace exercised.
fn differential(shape: Shape, seed: u64, ops: usize, channel: u64) -> Seen {
    let cfg = SimConfig {
        channel_size_override: Some(channel),
        host_dma_capacity: 32 * MIB,
        ..SimConfig::new(Preset::Trn2, 1)
    };
    assert_eq!(cfg.placement, Placement::Genalloc, "the default placement");
    let sim = SimDevice::new_boxed(&cfg).unwrap();
    let channels = sim.device_info(0).unwrap().hbm_channels;
    let mut model: Vec<RefChannel> = (0..channels)
        .map(|c| RefChannel::new(u64::from(c) * channel, channel))
        .collect();
    // per channel: (handle, placement) in allocation order
    let mut live: Vec<Vec<(u64, Placed)>> = vec![Vec::new(); channels as usize];
    let mut rng = Rng(seed | 1);
    let mut seen = Seen::default();
    for op in 0..ops {
        let c = rng.below(u64::from(channels)) as usize;
        let m = &mut model[c];
        let free = m.main.avail + m.small.avail;
        match shape(&mut rng, live[c].len(), free, channel) {
            Step::Alloc {
                size,
                align,
                category,
            } => {
                let req = AllocRequest {
                    size,
                    align,
                    host: false,
                    hbm_idx: c as u32,
                    region: 0,
                    nc_id: 0,
                    category,
                };
                let want = m.alloc(size, align, category);
                let got = sim.memory_alloc_pa(0, &req).map(|(h, pa)| {
                    let i = sim.memory_info(0, h).unwrap();
                    (h, i.pa, i.size, i.small_pool, pa)
                });
                match (want, got) {
                    (Ok(p), Ok((h, pa, sz, small, pa2))) => {
                        assert_eq!(
                            (pa, sz, small, pa2),
                            (p.pa, p.size, p.small, p.pa),
                            "op {op}: alloc {size} align {align} cat {category} on HBM {c}"
                        );
                        live[c].push((h, p));
                        seen.big_in_small += usize::from(p.small && p.size > SMALL_MAX);
                        seen.small_in_main +=
                            usize::from(!p.small && !p.scratch && p.size <= SMALL_MAX);
                        seen.scratch += usize::from(p.scratch);
                        seen.aligned += usize::from(align > PAGE);
                    }
                    (Err(e), Err(g)) => {
                        assert_eq!(g, e, "op {op}: refusal errno, {size} align {align}");
                        seen.refused += 1;
                    }
                    (w, g) => panic!(
                        "op {op}: alloc {size} align {align} cat {category} on HBM {c}: \
                         model {w:?}, simulator {g:?}"
                    ),
                }
            }
            Step::Free(k) => {
                let (h, p) = live[c].remove(k);
                sim.memory_free(0, h).unwrap();
                m.free(p);
            }
        }
        if op % 64 == 0 {
            let m = &model[c];
            let st = sim.pool_stats(0, false, c as u32).unwrap();
            let (lm, ls) = (m.main.largest(PAGE), m.small.largest(PAGE));
            assert_eq!(
                (
                    st.free,
                    st.largest_free,
                    st.small_object_free,
                    st.small_object_largest_free,
                    st.allocations
                ),
                (
                    m.main.avail + m.small.avail,
                    lm.max(ls),
                    m.small.avail,
                    ls,
                    live[c].len() as u64
                ),
                "op {op}: pool figures of HBM {c}"
            );
            let a = 1 << (14 + rng.below(12));
            let st = sim.hbm_stats_aligned(0, c as u32, a).unwrap();
            assert_eq!(
                (st.largest_free, st.small_object_largest_free),
                (
                    m.main.largest(a).max(m.small.largest(a)),
                    m.small.largest(a)
                ),
                "op {op}: figures at alignment {a} of HBM {c}"
            );
        }
    }
    for (c, l) in live.iter().enumerate() {
        for &(h, p) in l {
            sim.memory_free(0, h).unwrap();
            model[c].free(p);
        }
    }
    seen
}

const OPS: usize = 100_000;
/// Scaled-down channels for the 10⁵-operation traces: 256 MiB (16 MiB carve-out, 176 MiB
/// main pool, 64 MiB small-object pool), so the bitmap model stays fast in debug builds.
const CHANNEL: u64 = 256 * MIB;

#[test]
fn random_trace_is_address_identical() {
    let s = differential(random, 0x5EED_0001, OPS, CHANNEL);
    assert!(s.refused > 0 && s.aligned > 1000, "{s:?}");
}

#[test]
fn fragmentation_heavy_trace_is_address_identical() {
    let s = differential(fragmenting, 0x5EED_0002, OPS, CHANNEL);
    assert!(s.refused > 0, "{s:?}");
}

#[test]
fn near_full_trace_is_address_identical() {
    let s = differential(near_full, 0x5EED_0003, OPS, CHANNEL);
    assert!(s.refused > 1000 && s.big_in_small > 0, "near full: {s:?}");
}

#[test]
fn aligned_trace_is_address_identical() {
    let s = differential(aligned, 0x5EED_0004, OPS, CHANNEL);
    assert!(s.aligned > 10_000 && s.refused > 0, "{s:?}");
}

#[test]
fn small_large_mix_with_fallback_is_address_identical() {
    let s = differential(small_large, 0x5EED_0005, OPS, CHANNEL);
    assert!(s.big_in_small > 100 && s.small_in_main > 100, "{s:?}");
}

#[test]
fn contiguous_scratchpad_trace_is_address_identical() {
    let s = differential(scratchpad, 0x5EED_0006, OPS, CHANNEL);
    assert!(s.scratch > 500 && s.refused > 0, "{s:?}");
}

/// The real trn2 geometry (24 GiB channels, 1 GiB small-object pools), fewer operations: the
/// model scans up to 6 M bits per request.
#[test]
fn full_size_trn2_channels_are_address_identical() {
    let s = differential(near_full, 0x5EED_0007, 3_000, 24 * GIB);
    assert!(s.refused > 0, "{s:?}");
    let s = differential(aligned, 0x5EED_0008, 3_000, 24 * GIB);
    assert!(s.aligned > 500, "{s:?}");
}
