use super::*;
extern crate std;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::vec::Vec;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

fn carve<const N: usize>(base: u64, size: u64, granule: u64) -> std::boxed::Box<Carve<N>> {
    let mut c = Carve::<N>::new_boxed();
    c.init(base, size, granule).unwrap();
    c
}

#[test]
fn class_mapping_is_monotonic_and_search_rounds_up() {
    let mut last = (0, 0);
    for s in 1..5000u64 {
        let m = mapping_insert(s);
        assert!(m >= last, "mapping not monotonic at {s}");
        last = m;
        // every member of the searched class is >= s
        let (f, sl) = mapping_search(s).unwrap();
        let lower = if f == 0 {
            sl as u64
        } else {
            ((SL + sl) as u64) << (f - 1)
        };
        assert!(lower >= s, "class lower bound {lower} < {s}");
        assert_eq!(mapping_insert(lower), (f, sl));
    }
    assert_eq!(mapping_insert(u64::MAX), (FL - 1, SL - 1));
    assert_eq!(mapping_search(u64::MAX), None);
}

#[test]
fn zeroed_carve_is_uninitialised_not_ub() {
    let mut c = Carve::<8>::new();
    assert!(!c.is_initialized());
    assert_eq!(c.alloc(4096, 0), Err(CarveError::Uninitialized));
    assert_eq!(
        c.free(CarveId::from_parts(1, 1).unwrap()),
        Err(CarveError::Uninitialized)
    );
    assert_eq!(
        c.stats(),
        CarveStats {
            node_capacity: 8,
            ..Default::default()
        }
    );
    assert_eq!(c.check(), Ok(()));
    let boxed = Carve::<16384>::new_boxed();
    assert_eq!(boxed.capacity(), 0);
}

#[test]
fn init_rejects_bad_regions() {
    let mut c = Carve::<8>::new();
    assert_eq!(c.init(0, 4096, 0), Err(CarveError::BadRegion));
    assert_eq!(c.init(0, 4096, 3), Err(CarveError::BadRegion));
    assert_eq!(c.init(100, 4096, 64), Err(CarveError::BadRegion));
    assert_eq!(c.init(0, 63, 64), Err(CarveError::BadRegion));
    assert_eq!(c.init(u64::MAX - 63, 128, 64), Err(CarveError::BadRegion));
    assert_eq!(c.init(0, 4096 + 100, 64), Ok(()));
    assert_eq!(c.capacity(), 4096 + 64);
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    let mut c = carve::<64>(0x10_0000, 16 * MIB, 4096);
    assert_eq!(c.alloc(0, 0), Err(CarveError::ZeroSize));
    assert_eq!(c.alloc(4096, 3), Err(CarveError::BadAlignment(3)));
    assert_eq!(c.alloc(u64::MAX, 0), Err(CarveError::SizeOverflow));
    assert_eq!(c.alloc(u64::MAX - 4095, 0), Err(CarveError::OutOfSpace));
    assert_eq!(c.alloc(17 * MIB, 0), Err(CarveError::OutOfSpace));
    assert_eq!(c.alloc(4096, 1 << 63), Err(CarveError::OutOfSpace));
    assert_eq!(
        c.alloc(u64::MAX - 8191, 1 << 63),
        Err(CarveError::OutOfSpace)
    );
    assert_eq!(CarveId::from_raw(0), None);
    assert_eq!(CarveId::from_parts(0, 7), None);
    assert_eq!(
        c.free(CarveId::from_raw(u64::MAX).unwrap()),
        Err(CarveError::InvalidId)
    );
    assert_eq!(
        c.free(CarveId::from_parts(1, 0).unwrap()),
        Err(CarveError::InvalidId)
    );
    // the whole range in one block
    let all = c.alloc(16 * MIB, 0).unwrap();
    assert_eq!((all.addr, all.size), (0x10_0000, 16 * MIB));
    assert_eq!(c.alloc(1, 0), Err(CarveError::OutOfSpace));
    c.free(all.id).unwrap();
    c.check().unwrap();
}

#[test]
fn rounding_alignment_and_head_fragment() {
    let mut c = carve::<64>(0, MIB, 64);
    let a = c.alloc(1, 0).unwrap();
    assert_eq!((a.addr, a.size), (0, 64));
    // aligned request: [64, 4096) becomes a free head fragment
    let b = c.alloc(100, 4096).unwrap();
    assert_eq!((b.addr, b.size), (4096, 128));
    c.check().unwrap();
    assert_eq!(c.stats().free_blocks, 2);
    // the head fragment is reused by a request that fits it
    let d = c.alloc(4096 - 64, 0).unwrap();
    assert_eq!(d.addr, 64);
    assert_eq!(c.stats().free_blocks, 1);
    // alignment relative to the absolute address, not the offset
    let mut e = carve::<64>(4096, MIB, 4096);
    let x = e.alloc(4096, 1 << 16).unwrap();
    assert_eq!(x.addr % (1 << 16), 0);
    e.check().unwrap();
}

#[test]
fn double_free_and_stale_ids_are_detected() {
    let mut c = carve::<64>(0, MIB, 4096);
    let a = c.alloc(8192, 0).unwrap();
    assert_eq!(c.free(a.id).map(|b| b.addr), Ok(0));
    assert_eq!(c.free(a.id), Err(CarveError::InvalidId));
    assert_eq!(c.lookup(a.id), Err(CarveError::InvalidId));
    // the same node reused: the old id is still stale
    let b = c.alloc(8192, 0).unwrap();
    assert_eq!(b.id.index(), a.id.index());
    assert_ne!(b.id, a.id);
    assert_eq!(c.free(a.id), Err(CarveError::InvalidId));
    assert_eq!(c.lookup(b.id).map(|x| x.size), Ok(8192));
    // re-init forgets everything; old ids stay invalid
    c.init(0, MIB, 4096).unwrap();
    assert_eq!(c.free(b.id), Err(CarveError::InvalidId));
    c.check().unwrap();
}

#[test]
fn coalescing_returns_to_one_block() {
    let mut c = carve::<64>(0, MIB, 4096);
    let ids: Vec<_> = (0..8).map(|_| c.alloc(4096, 0).unwrap().id).collect();
    for &i in [1usize, 3, 5, 7, 0, 2, 6, 4].iter() {
        c.free(ids[i]).unwrap();
        c.check().unwrap();
    }
    let s = c.stats();
    assert_eq!((s.free, s.largest_free, s.free_blocks), (MIB, MIB, 1));
    assert_eq!(s.nodes_used, 1);
}

/// The driver's pools are first-fit (public ABI §3): of two equal holes, the lower one is
/// reused first even when the higher one was freed last (textbook TLSF's LIFO lists would
/// hand out the higher, most recently freed hole).
#[test]
fn equal_holes_are_reused_lowest_address_first() {
    let mut c = carve::<64>(0, MIB, 4096);
    let blocks: Vec<_> = (0..6).map(|_| c.alloc(8192, 0).unwrap()).collect();
    // holes at 0 and 32 KiB (blocks 0 and 4), freed low first, then high
    c.free(blocks[0].id).unwrap();
    c.free(blocks[4].id).unwrap();
    assert_eq!(c.alloc(8192, 0).map(|b| b.addr), Ok(blocks[0].addr));
    assert_eq!(c.alloc(8192, 0).map(|b| b.addr), Ok(blocks[4].addr));
    // and freed high first, then low
    c.free(blocks[3].id).unwrap();
    c.free(blocks[1].id).unwrap();
    assert_eq!(c.alloc(8192, 0).map(|b| b.addr), Ok(blocks[1].addr));
    c.check().unwrap();
}

#[test]
fn a_node_starved_pool_still_takes_a_fit_that_needs_no_node() {
    // Holes of 65 and 64 granules, same class; every node in use. The first hole would
    // need a tail node; the second is an exact fit and must be found.
    let mut c = carve::<4>(0, 131, 1);
    let a = c.alloc(65, 0).unwrap();
    c.alloc(1, 0).unwrap();
    let b = c.alloc(64, 0).unwrap();
    c.alloc(1, 0).unwrap();
    c.free(a.id).unwrap();
    c.free(b.id).unwrap();
    assert_eq!(c.alloc(64, 0).map(|x| x.addr), Ok(66));
    c.check().unwrap();
    // With no hole that fits without a node, the refusal is still the node array's.
    // (Placing at a block's top needs a head node but no tail: see the next test.)
    assert_eq!(c.alloc(2, 0), Err(CarveError::NodesExhausted));
    assert_eq!(c.alloc(65, 0).map(|x| x.addr), Ok(0));
    c.check().unwrap();
}

#[test]
fn a_node_starved_pool_places_at_a_block_top_when_only_a_head_node_is_spare() {
    // Used [0,1) and [10,11); free [1,10) and [11,20); one spare node. 4 units at
    // alignment 4: the lowest positions (4 in the first block, 12 in the second) leave
    // a head and a tail (two nodes); the top of the second block, [16,20), needs a head
    // node only.
    let mut c = carve::<5>(0, 20, 1);
    let a = c.alloc(1, 0).unwrap();
    let b = c.alloc(9, 0).unwrap();
    let d = c.alloc(1, 0).unwrap();
    c.free(b.id).unwrap();
    assert_eq!((a.addr, d.addr), (0, 10));
    assert_eq!(c.alloc(4, 4).map(|x| x.addr), Ok(16));
    c.check().unwrap();
}

#[test]
fn metadata_exhaustion_is_distinct_from_out_of_space() {
    let mut c = carve::<4>(0, MIB, 4096);
    let a = c.alloc(4096, 0).unwrap(); // node 1 used, tail node 2
    let _b = c.alloc(4096, 0).unwrap(); // tail node 3
    let _c = c.alloc(4096, 0).unwrap(); // tail node 4
    assert_eq!(c.alloc(4096, 0), Err(CarveError::NodesExhausted));
    assert_eq!(CarveError::NodesExhausted.errno(), errno::ENOMEM);
    // an exact fit needs no node
    c.free(a.id).unwrap();
    assert_eq!(c.alloc(4096, 0).map(|b| b.addr), Ok(0));
    // the remaining tail can be taken whole without a node
    let rest = MIB - 3 * 4096;
    assert_eq!(c.alloc(rest, 0).map(|b| b.size), Ok(rest));
    assert_eq!(c.alloc(4096, 0), Err(CarveError::OutOfSpace));
    c.check().unwrap();
}

/// The reuse test: 100 equal blocks, free every second, refill: all 50 fit into
/// the holes (textbook TLSF fails this for sizes inside a class).
fn exact_reuse(size: u64, granule: u64, tail: bool) {
    let cap = 100 * size + if tail { 10 * MIB } else { 0 };
    let mut c = carve::<512>(0, cap, granule);
    let ids: Vec<_> = (0..100).map(|_| c.alloc(size, 0).unwrap()).collect();
    let mut holes: Vec<u64> = Vec::new();
    for b in ids.iter().step_by(2) {
        c.free(b.id).unwrap();
        holes.push(b.addr);
    }
    let mut got: Vec<u64> = (0..50).map(|_| c.alloc(size, 0).unwrap().addr).collect();
    got.sort_unstable();
    assert_eq!(got, holes, "refill must land exactly in the holes");
    assert_eq!(c.stats().largest_free, if tail { 10 * MIB } else { 0 });
    c.check().unwrap();
}

#[test]
fn exact_size_holes_are_reused() {
    exact_reuse(4096, 4096, false);
    exact_reuse(3 * 4096 + 4096 * 7, 4096, true); // 40 KiB: not a power of two
    exact_reuse(100 * KIB + 4096, 4096, true);
    exact_reuse(1000, 8, true);
    exact_reuse(37 * MIB + 64 * 3, 64, true);
}

#[test]
fn aligned_request_finds_a_fitting_block_between_the_classes_searched() {
    // Free blocks of 3 and 2 pages; a 2-page request at 4-page alignment fits only in the
    // 3-page block at 4P. The own class (2 pages) holds the block at 9P, which cannot be
    // aligned; the block that fits sits in a class between the own class and the class
    // that guarantees an aligned fit.
    const P: u64 = 4096;
    let mut c = carve::<64>(0, 16 * P, P);
    let _a = c.alloc(4 * P, 0).unwrap();
    let b = c.alloc(3 * P, 0).unwrap();
    let _c = c.alloc(2 * P, 0).unwrap();
    let d = c.alloc(2 * P, 0).unwrap();
    let _e = c.alloc(5 * P, 0).unwrap();
    assert_eq!((b.addr, d.addr), (4 * P, 9 * P));
    c.free(b.id).unwrap();
    c.free(d.id).unwrap();
    assert_eq!(c.alloc(2 * P, 4 * P).map(|x| x.addr), Ok(4 * P));
    c.check().unwrap();
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { size: u64, align_log2: u8 },
    Free(usize),
    FreeStale(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (1u64..40_000, 0u8..14).prop_map(|(size, align_log2)| Op::Alloc { size, align_log2 }),
        1 => (1u64..4 * MIB).prop_map(|size| Op::Alloc { size, align_log2: 0 }),
        4 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::FreeStale),
    ]
}

/// The reference model's largest request at alignment `align` (≥ the granule): the best
/// of every gap from its first aligned start to its end; with no spare node, only a gap
/// that starts aligned can be taken (anything else needs a node for its head).
fn reference_largest(
    live: &BTreeMap<u64, (u64, CarveId)>,
    base: u64,
    cap: u64,
    align: u64,
    spare_node: bool,
) -> u64 {
    let mut best = 0;
    for (lo, hi) in reference_gaps(live, base, cap) {
        let start = lo.next_multiple_of(align);
        if start < hi && (start == lo || spare_node) {
            best = best.max(hi - start);
        }
    }
    best
}

/// The reference model's free gaps `[lo, hi)` in address order (empty ones included).
fn reference_gaps(
    live: &BTreeMap<u64, (u64, CarveId)>,
    base: u64,
    cap: u64,
) -> impl Iterator<Item = (u64, u64)> + '_ {
    let ends = core::iter::once(base).chain(live.iter().map(|(&a, &(s, _))| a + s));
    let starts = live.keys().copied().chain(core::iter::once(base + cap));
    ends.zip(starts)
}

/// The reference model's first fit: the lowest `align`-aligned start of a gap that holds
/// `need` bytes.
fn reference_first_fit(
    live: &BTreeMap<u64, (u64, CarveId)>,
    base: u64,
    cap: u64,
    need: u64,
    align: u64,
) -> Option<u64> {
    reference_gaps(live, base, cap)
        .map(|(lo, hi)| (lo.next_multiple_of(align), hi))
        .find(|&(at, hi)| at.checked_add(need).is_some_and(|end| end <= hi))
        .map(|(at, _)| at)
}

#[test]
fn first_fit_takes_the_lowest_hole_and_merges_both_ways() {
    const P: u64 = 4096;
    let mut c = Carve::<64>::new_boxed();
    c.init_with(0, 64 * P, P, Policy::FirstFit).unwrap();
    assert_eq!(c.policy(), Policy::FirstFit);
    let ids: Vec<CarveBlock> = (0..8).map(|_| c.alloc(2 * P, 0).unwrap()).collect();
    assert_eq!(ids[7].addr, 14 * P);
    // holes at 2P (2 pages) and 8P (4 pages, two blocks merged)
    for k in [1, 4, 5] {
        c.free(ids[k].id).unwrap();
    }
    c.check().unwrap();
    assert_eq!(c.stats().free_blocks, 3);
    // a 1-page request takes the lowest hole even though a better fit exists nowhere
    assert_eq!(c.alloc(P, 0).unwrap().addr, 2 * P);
    // 3 pages: not the 1-page rest at 3P, the 4-page hole at 8P
    assert_eq!(c.alloc(3 * P, 0).unwrap().addr, 8 * P);
    // aligned to 16 pages: the end of the used range, at 16P
    assert_eq!(c.alloc(P, 16 * P).unwrap().addr, 16 * P);
    assert_eq!(c.largest_aligned(32 * P), 32 * P);
    assert_eq!(c.largest_free(), 47 * P);
    // fixed placement: inside one free block only
    assert_eq!(c.alloc_at(11 * P, P).unwrap().addr, 11 * P);
    assert_eq!(c.alloc_at(11 * P, P), Err(CarveError::OutOfSpace));
    assert_eq!(c.alloc_at(63 * P, 2 * P), Err(CarveError::OutOfSpace));
    assert_eq!(c.alloc_at(100, P), Err(CarveError::BadAlignment(100)));
    c.check().unwrap();
}

/// The summary's line primitives (SSE2 on x86-64) against their plain definitions, on
/// values around the signed/unsigned boundary the biased compares must get right.
#[test]
fn summary_line_scans_match_their_definitions() {
    let vals = [
        0,
        1,
        2,
        7,
        0x7FFF,
        0x8000,
        0xFFFE,
        0xFFFF,
        0x1_0000,
        (1 << 31) - 1,
        1 << 31,
        (1 << 31) + 1,
        u32::MAX - 1,
        u32::MAX,
    ];
    let mut x = 0x9E37_79B9u32;
    let mut pick = || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        vals[x as usize % vals.len()]
    };
    let mask = |ge: &mut dyn Iterator<Item = bool>| {
        ge.enumerate()
            .fold(0u32, |m, (j, b)| m | (u32::from(b) << j))
    };
    for _ in 0..300 {
        let line: Line0 = core::array::from_fn(|_| pick());
        assert_eq!(line_max(&line), line.iter().copied().max().unwrap_or(0));
        let line1: Line1 = core::array::from_fn(|_| sat16(pick()));
        assert_eq!(line1_max(&line1), line1.iter().copied().max().unwrap_or(0));
        for need in vals {
            let want = mask(&mut line.iter().map(|&v| v >= need));
            assert_eq!(line_ge(&line, need), want, "{line:?} need {need}");
            let c = sat16(need);
            let want = mask(&mut line1.iter().map(|&v| v >= c));
            assert_eq!(line1_ge(&line1, c), want, "{line1:?} need {c}");
        }
    }
    assert_eq!(sat16(0xFFFF), 0xFFFF);
    assert_eq!(sat16(0x1_0000), 0xFFFF);
}

#[test]
fn first_fit_refuses_ranges_too_large_for_its_tree() {
    let mut c = Carve::<8>::new_boxed();
    assert_eq!(
        c.init_with(0, 1 << 33, 1, Policy::FirstFit),
        Err(CarveError::BadRegion)
    );
    assert!(c.init_with(0, 1 << 33, 4, Policy::FirstFit).is_ok());
    assert_eq!(c.largest_free(), 1 << 33);
}

#[test]
fn largest_aligned_is_what_alloc_grants() {
    const P: u64 = 4096;
    let mut c = carve::<64>(P, 64 * P, P);
    assert_eq!(c.largest_aligned(0), 64 * P);
    assert_eq!(c.largest_aligned(3), 0, "not a power of two");
    // [P, 65P) with its first 8P-aligned start at 8P: 57 pages from there to the end
    assert_eq!(c.largest_aligned(8 * P), 57 * P);
    assert_eq!(c.alloc(58 * P, 8 * P), Err(CarveError::OutOfSpace));
    let b = c.alloc(57 * P, 8 * P).unwrap();
    assert_eq!((b.addr, c.largest_aligned(8 * P)), (8 * P, 0));
    assert_eq!(c.largest_aligned(0), 7 * P, "the head fragment");
    c.free(b.id).unwrap();
    // an uninitialised carve grants nothing
    assert_eq!(Carve::<8>::new().largest_aligned(1 << 20), 0);
}

#[test]
fn largest_aligned_without_a_spare_node_counts_only_blocks_that_start_aligned() {
    // Every node in use; free [0,1) (starts aligned) and [11,20) (would need a head node
    // at 12, of which there is none).
    let mut c = carve::<4>(0, 20, 1);
    let a = c.alloc(1, 0).unwrap();
    c.alloc(9, 0).unwrap();
    c.alloc(1, 0).unwrap();
    c.free(a.id).unwrap();
    assert_eq!(c.largest_aligned(0), 9);
    assert_eq!(c.largest_aligned(4), 1);
    assert_eq!(c.alloc(2, 4), Err(CarveError::NodesExhausted));
    assert_eq!(c.alloc(1, 4).map(|b| b.addr), Ok(0));
    c.check().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]
    #[test]
    fn matches_a_reference_model(
        base_units in 0u64..64,
        granule_log2 in 0u32..13,
        size_units in 1u64..4096,
        first_fit in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..160),
    ) {
        let granule = 1u64 << granule_log2;
        let base = base_units * granule;
        let cap = size_units * granule.max(256);
        let mut c = Carve::<96>::new_boxed();
        let policy = if first_fit { Policy::FirstFit } else { Policy::GoodFit };
        c.init_with(base, cap, granule, policy).unwrap();
        // reference model: live ranges by start address
        let mut live: BTreeMap<u64, (u64, CarveId)> = BTreeMap::new();
        let mut freed: Vec<CarveId> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc { size, align_log2 } => {
                    let align = if align_log2 == 0 { 0 } else { 1u64 << align_log2 };
                    let need = size.div_ceil(granule) * granule;
                    let lowest =
                        reference_first_fit(&live, base, cap, need, align.max(granule));
                    match c.alloc(size, align) {
                        Ok(b) => {
                            if first_fit {
                                prop_assert_eq!(Some(b.addr), lowest, "first fit");
                            }
                            prop_assert!(b.size >= size && b.size % granule == 0);
                            prop_assert!(b.size < size + granule);
                            prop_assert_eq!(b.addr % align.max(granule), 0);
                            prop_assert!(b.addr >= base && b.addr + b.size <= base + cap);
                            if let Some((&a, &(s, _))) = live.range(..=b.addr).next_back() {
                                prop_assert!(a + s <= b.addr, "overlap with previous");
                            }
                            if let Some((&a, _)) = live.range(b.addr..).next() {
                                prop_assert!(b.addr + b.size <= a, "overlap with next");
                            }
                            live.insert(b.addr, (b.size, b.id));
                        }
                        Err(CarveError::OutOfSpace) => {
                            // only legitimate if no gap between live ranges holds it at
                            // its alignment (the driver's policy is first fit: a fitting
                            // block must never be missed)
                            let need = size.div_ceil(granule) * granule;
                            let a = align.max(granule);
                            let mut start = base;
                            let gaps = live
                                .iter()
                                .map(|(&addr, &(s, _))| (addr, addr + s))
                                .chain(core::iter::once((base + cap, base + cap)));
                            for (lo, hi) in gaps {
                                let at = start.next_multiple_of(a);
                                prop_assert!(
                                    at.checked_add(need).is_none_or(|end| end > lo),
                                    "refused {} B at align {} but [{:#x}, {:#x}) is free",
                                    need, a, start, lo
                                );
                                start = hi;
                            }
                        }
                        Err(CarveError::NodesExhausted) => {
                            prop_assert!(lowest.is_some(), "no fit is OutOfSpace");
                        }
                        Err(e) => prop_assert!(false, "unexpected error {:?}", e),
                    }
                }
                Op::Free(k) => {
                    if !live.is_empty() {
                        let addr = *live.keys().nth(k % live.len()).unwrap();
                        let (size, id) = live.remove(&addr).unwrap();
                        let b = c.free(id).unwrap();
                        prop_assert_eq!((b.addr, b.size), (addr, size));
                        freed.push(id);
                    }
                }
                Op::FreeStale(k) => {
                    if !freed.is_empty() {
                        let id = freed[k % freed.len()];
                        prop_assert_eq!(c.free(id), Err(CarveError::InvalidId));
                    }
                }
            }
            prop_assert_eq!(c.check(), Ok(()));
            let live_bytes: u64 = live.values().map(|v| v.0).sum();
            let s = c.stats();
            prop_assert_eq!(s.free, cap - live_bytes);
            prop_assert_eq!(s.live_allocations, live.len() as u64);
            prop_assert!(s.largest_free <= s.free);
            // The largest aligned request, against the gaps of the reference model, and
            // granted by `alloc` exactly: that size succeeds, one granule more does not.
            let spare = s.nodes_used < s.node_capacity;
            // First fit never trades placement for nodes: its figures are exact while
            // two nodes are spare (a split's worst case).
            let exact = !first_fit || s.nodes_used + 2 <= s.node_capacity;
            for a in [0, 2 * granule, 1 << 12, 1 << 16] {
                if !exact {
                    break;
                }
                let want =
                    reference_largest(&live, base, cap, a.max(granule), spare || first_fit);
                let got = c.largest_aligned(a);
                prop_assert_eq!(got, want, "align {}", a);
                if got > 0 {
                    let b = c.alloc(got, a);
                    prop_assert!(b.is_ok(), "largest {} at align {}: {:?}", got, a, b);
                    c.free(b.unwrap().id).unwrap();
                }
                prop_assert!(c.alloc(got + granule, a).is_err());
            }
        }
        for (_, (_, id)) in core::mem::take(&mut live) {
            c.free(id).unwrap();
        }
        let s = c.stats();
        prop_assert_eq!((s.free, s.largest_free, s.free_blocks, s.nodes_used), (cap, cap, 1, 1));
        prop_assert_eq!(c.check(), Ok(()));
    }
}

/// The first-fit summary's upper bounds (module docs): an allocation that lowers a bucket's
/// largest block leaves the levels above it high; the next search that trusts them must
/// tighten them and still find the lowest fit elsewhere, and the figures stay exact.
#[test]
fn first_fit_search_tightens_a_bound_an_allocation_left_high() {
    const P: u64 = 4096;
    const CAP: u64 = 16 << 30; // 16 384 buckets of 1 MiB
    let mut c = Carve::<64>::new_boxed();
    c.init_with(0, CAP, P, Policy::FirstFit).unwrap();
    let a = c.alloc(64 * P, 0).unwrap();
    c.alloc(MIB - 64 * P, 0).unwrap();
    c.free(a.id).unwrap();
    // Bucket 0 holds one 64-page hole; everything above 1 MiB is one block.
    assert_eq!(c.alloc(48 * P, 0).unwrap().addr, 0);
    // The hole is 16 pages now, but the entries above bucket 0 still say 64.
    assert_eq!(c.largest_aligned(0), CAP - MIB, "largest_free is exact");
    assert_eq!(
        c.alloc(32 * P, 0).unwrap().addr,
        MIB,
        "past the bound left high"
    );
    c.check().unwrap();
    assert_eq!(
        c.alloc(16 * P, 0).unwrap().addr,
        48 * P,
        "the hole itself still fits"
    );
    assert_eq!(c.alloc(P, 0).unwrap().addr, MIB + 32 * P);
    c.check().unwrap();
    assert_eq!(c.largest_free(), CAP - MIB - 33 * P);
    assert_eq!(c.stats().largest_free, c.largest_free());
}

/// Requests of at least `u16::MAX` granules compare with saturated level-1 bounds: every
/// line holding a hole of that size is a candidate, and its level-0 line decides exactly.
#[test]
fn first_fit_search_past_saturated_bounds() {
    const P: u64 = 64;
    const CAP: u64 = 1 << 30; // 2^24 granules: 1 024 per bucket, 16 384 per level-0 line
    const BIG: u64 = 70_000 * P; // above u16::MAX granules
    let mut c = Carve::<256>::new_boxed();
    c.init_with(0, CAP, P, Policy::FirstFit).unwrap();
    // Ten holes of 70 000 granules, each in its own level-0 line, separated by allocations.
    let mut holes = Vec::new();
    for _ in 0..10 {
        holes.push(c.alloc(BIG, 0).unwrap());
        c.alloc(P, 0).unwrap();
    }
    let wide = c.alloc(100_000 * P, 0).unwrap();
    c.alloc(P, 0).unwrap();
    for h in &holes {
        c.free(h.id).unwrap();
    }
    c.free(wide.id).unwrap();
    c.check().unwrap();
    // 80 000 granules skips the ten saturated-but-small holes, and lands in the wide one.
    assert_eq!(c.alloc(80_000 * P, 0).unwrap().addr, wide.addr);
    // 70 000 takes the first hole; 65 535 (exactly saturated) the second.
    assert_eq!(c.alloc(BIG, 0).unwrap().addr, holes[0].addr);
    assert_eq!(c.alloc(65_535 * P, 0).unwrap().addr, holes[1].addr);
    c.check().unwrap();
    // Nothing left holds 70 001 granules below the tail block.
    let tail = c.alloc(70_001 * P, 0).unwrap();
    assert!(tail.addr > wide.addr, "{tail:?}");
    c.check().unwrap();
}
