//! Unit tests of the simulated device (`sim`).

use super::*;
extern crate std;
use std::boxed::Box;
use std::vec;
use std::vec::Vec;

fn req(size: u64) -> AllocRequest {
    AllocRequest {
        size,
        align: 0,
        host: false,
        hbm_idx: 0,
        region: 0,
        nc_id: 0,
        category: 9, // TENSORS_DEVICE
    }
}

fn host_req(size: u64) -> AllocRequest {
    AllocRequest {
        host: true,
        category: 2, // TENSORS_HOST
        ..req(size)
    }
}

/// Test-only builders for requests.
trait With {
    fn hbm(self, v: u32) -> Self;
    fn align(self, v: u64) -> Self;
    fn nc(self, v: u32) -> Self;
    fn region(self, v: u32) -> Self;
    fn cat(self, v: u8) -> Self;
}

impl With for AllocRequest {
    fn hbm(self, v: u32) -> Self {
        AllocRequest { hbm_idx: v, ..self }
    }
    fn align(self, v: u64) -> Self {
        AllocRequest { align: v, ..self }
    }
    fn nc(self, v: u32) -> Self {
        AllocRequest { nc_id: v, ..self }
    }
    fn region(self, v: u32) -> Self {
        AllocRequest { region: v, ..self }
    }
    fn cat(self, v: u8) -> Self {
        AllocRequest {
            category: v,
            ..self
        }
    }
}

fn sim(cfg: SimConfig) -> Box<SimDevice> {
    SimDevice::new_boxed(&cfg).unwrap()
}

#[test]
fn an_empty_hbm_is_not_fragmented_and_a_holed_one_is() {
    let d = sim(SimConfig::new(Preset::Trn2, 1));
    let s = d.pool_stats(0, false, 0).unwrap();
    assert!(
        s.largest_free < s.free,
        "the small-object region is apart: {s:?}"
    );
    assert_eq!(s.fragmentation_permille(), 0, "{s:?}");
    // Three 1 GiB blocks in the main pool, the middle one freed: a 1 GiB hole apart from
    // the big free block.
    let hs: Vec<u64> = (0..3)
        .map(|_| d.memory_alloc(0, &req(1 << 30)).unwrap())
        .collect();
    d.memory_free(0, hs[1]).unwrap();
    let s = d.pool_stats(0, false, 0).unwrap();
    assert_eq!(s.fragmented_free, 1 << 30, "{s:?}");
    assert!(s.fragmentation_permille() > 0);
}

/// The footprint the module docs and docs/PLACEMENT.md state: no page-sized state, 56 B
/// per node (262 146 per pool), and per pool a fixed 130 KiB first-fit bucket index (16 384
/// roots and the three-level summary): about 4.27 GB of address space for 32 devices.
#[test]
fn the_simulator_footprint_is_as_documented() {
    let n = core::mem::size_of::<SimDevice>();
    std::eprintln!("size_of::<SimDevice>() = {n}");
    assert!((4_250_000_000..4_290_000_000).contains(&n), "{n}");
}

#[test]
fn presets_have_the_public_geometry() {
    for (p, arch, cores, ch, cs) in [
        (
            Preset::Inf2,
            al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_SUNDA,
            2,
            2,
            16 * GIB,
        ),
        (
            Preset::Trn1,
            al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_SUNDA,
            2,
            2,
            16 * GIB,
        ),
        (
            Preset::Trn2,
            al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_CAYMAN,
            8,
            4,
            24 * GIB,
        ),
        (
            Preset::Trn3,
            al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_MARIANA,
            8,
            4,
            36 * GIB,
        ),
    ] {
        let s = sim(SimConfig::new(p, 2));
        let i = s.device_info(1).unwrap();
        assert_eq!(
            (
                i.arch,
                i.cores_per_device,
                i.hbm_channels,
                i.hbm_channel_size
            ),
            (arch, cores, ch, cs)
        );
        assert_eq!(i.page_size, PAGE_SIZE);
        assert_eq!(i.host_dma_capacity, DEFAULT_HOST_DMA_CAPACITY);
        assert!(i.supports_aligned_alloc);
        assert_eq!(s.device_info(2), Err(errno::ENODEV));
        for c in 0..ch {
            let st = s.pool_stats(1, false, c).unwrap();
            assert_eq!(st.capacity, cs - FIRMWARE_CARVEOUT);
            assert_eq!(
                (st.free, st.largest_free),
                (st.capacity, cs - FIRMWARE_CARVEOUT - GIB)
            );
        }
        assert_eq!(s.pool_stats(1, false, ch), Err(errno::EINVAL));
        assert_eq!(
            s.pool_stats(0, true, 0).unwrap().capacity,
            DEFAULT_HOST_DMA_CAPACITY
        );
        assert_eq!(s.backing_len(0), ch as u64 * cs + DEFAULT_HOST_DMA_CAPACITY);
    }
    let t2 = Preset::Trn2.device_info();
    let hbm: Vec<u32> = (0..8).map(|c| t2.default_hbm_for_core(c)).collect();
    assert_eq!(hbm, [0, 0, 1, 1, 2, 2, 3, 3]);
    let t1 = Preset::Trn1.device_info();
    assert_eq!(
        (t1.default_hbm_for_core(0), t1.default_hbm_for_core(1)),
        (0, 1)
    );
    assert_eq!(Preset::Trn3.device_info().hbm_channel_size * 4, 144 * GIB);
}

#[test]
fn feature_flags_default_and_clear() {
    let f3 = feature::MEM_ALLOC_TYPE | feature::MEM_ALLOC64 | feature::CONTIGUOUS_SCRATCHPAD;
    for p in [Preset::Trn2, Preset::Trn3] {
        assert_eq!(
            sim(SimConfig::new(p, 1))
                .device_info(0)
                .unwrap()
                .feature_flags,
            f3
        );
    }
    let s = sim(SimConfig::new(Preset::Trn2, 1));
    s.clear_feature_flags(feature::CONTIGUOUS_SCRATCHPAD);
    assert_eq!(
        s.device_info(0).unwrap().feature_flags,
        feature::MEM_ALLOC_TYPE | feature::MEM_ALLOC64
    );
    s.set_feature_flags(feature::DMABUF);
    assert_ne!(s.device_info(0).unwrap().feature_flags & feature::DMABUF, 0);
    let cfg = SimConfig {
        feature_flags: Some(0),
        ..SimConfig::new(Preset::Trn2, 1)
    };
    assert_eq!(sim(cfg).device_info(0).unwrap().feature_flags, 0);
}

#[test]
fn parsing() {
    assert_eq!(Preset::parse("trn2"), Some(Preset::Trn2));
    assert_eq!(Preset::parse("TRN2"), Some(Preset::Trn2));
    assert_eq!(Preset::parse("Inf2"), Some(Preset::Inf2));
    assert_eq!(Preset::parse("trn4"), None);
    assert_eq!(parse_device_spec("trn2"), Some((Preset::Trn2, 1)));
    assert_eq!(parse_device_spec("trn2x4"), Some((Preset::Trn2, 4)));
    assert_eq!(parse_device_spec("inf2x2"), Some((Preset::Inf2, 2)));
    assert_eq!(parse_device_spec("TRN1X32"), Some((Preset::Trn1, 32)));
    for bad in [
        "trn2x0", "trn2x33", "trn2x", "x2", "trn2x+1", "trn2x1x", "", "trn5x2",
    ] {
        assert_eq!(parse_device_spec(bad), None, "{bad}");
    }
}

#[test]
fn init_rejects_bad_configs() {
    // SAFETY: `SimDevice` is `ZeroValid`.
    let mut s: Box<SimDevice> = unsafe { Box::<SimDevice>::new_zeroed().assume_init() };
    assert_eq!(s.device_count(), 0);
    assert_eq!(s.memory_alloc(0, &req(4096)), Err(errno::ENODEV));
    assert_eq!(s.init(&SimConfig::new(Preset::Trn2, 0)), Err(errno::EINVAL));
    assert_eq!(
        s.init(&SimConfig::new(Preset::Trn2, 33)),
        Err(errno::EINVAL)
    );
    for cs in [16 * MIB, 64 * MIB + 1, 1 << 45] {
        let cfg = SimConfig {
            channel_size_override: Some(cs),
            ..SimConfig::new(Preset::Trn2, 1)
        };
        assert_eq!(s.init(&cfg), Err(errno::EINVAL));
    }
    for host in [0, 100] {
        let cfg = SimConfig {
            host_dma_capacity: host,
            ..SimConfig::new(Preset::Trn2, 1)
        };
        assert_eq!(s.init(&cfg), Err(errno::EINVAL));
    }
    assert_eq!(s.init(&SimConfig::new(Preset::Trn2, 32)), Ok(()));
    assert_eq!(s.device_count(), 32);
    let h = s.memory_alloc(31, &req(1).hbm(3)).unwrap();
    assert_eq!(s.memory_get_pa(31, h), Ok(3 * 24 * GIB + 24 * GIB - GIB));
}

#[test]
fn carve_out_page_rounding_and_placement() {
    let s = sim(SimConfig::new(Preset::Trn2, 1));
    let cs = 24 * GIB;
    // large requests: main pool, right after the carve-out
    let a = s
        .memory_alloc(0, &req(SMALL_OBJECT_MAX + 1).hbm(2))
        .unwrap();
    assert_eq!(s.memory_get_pa(0, a), Ok(2 * cs + FIRMWARE_CARVEOUT));
    let i = s.memory_info(0, a).unwrap();
    assert_eq!(
        (i.size, i.host, i.hbm_idx, i.small_pool),
        (SMALL_OBJECT_MAX + PAGE_SIZE, false, 2, false)
    );
    // small requests: the top 1 GiB, page rounded
    let b = s.memory_alloc(0, &req(1)).unwrap();
    let c = s.memory_alloc(0, &req(SMALL_OBJECT_MAX)).unwrap();
    assert_eq!(s.memory_get_pa(0, b), Ok(cs - GIB));
    assert_eq!(s.memory_get_pa(0, c), Ok(cs - GIB + PAGE_SIZE));
    assert!(s.memory_info(0, b).unwrap().small_pool);
    assert_eq!(s.memory_info(0, b).unwrap().size, PAGE_SIZE);
    // host pool in its own range
    let h = s.memory_alloc(0, &host_req(100)).unwrap();
    assert_eq!(s.memory_get_pa(0, h), Ok(HOST_PA_BASE));
    let st = s.pool_stats(0, false, 0).unwrap();
    assert_eq!(st.allocations, 2);
    assert_eq!(
        st.free,
        cs - FIRMWARE_CARVEOUT - PAGE_SIZE - SMALL_OBJECT_MAX
    );
    assert_eq!(s.pool_stats(0, true, 0).unwrap().allocations, 1);
    for x in [a, b, c] {
        s.memory_free(0, x).unwrap();
    }
    s.memory_free(0, h).unwrap();
    let st = s.pool_stats(0, false, 2).unwrap();
    assert_eq!((st.free, st.allocations), (st.capacity, 0));
}

/// Every figure of `pool_stats` / `hbm_stats_aligned` is what the allocator grants at
/// this moment: at `align`, the largest request above [`SMALL_OBJECT_MAX`] is
/// `largest_free` (it succeeds, one page more fails), and the largest small request is
/// `largest_request` (the small-object region or the main pool). Leaves the pool as found.
fn assert_largest_is_exact(s: &SimDevice, hbm: u32, align: u64) {
    let st = s.hbm_stats_aligned(0, hbm, align).unwrap();
    let r = |n: u64| req(n).hbm(hbm).align(align);
    let big = st.largest_free;
    if big > SMALL_OBJECT_MAX {
        let h = s.memory_alloc(0, &r(big));
        assert!(h.is_ok(), "largest {big} at align {align} refused: {st:?}");
        s.memory_free(0, h.unwrap()).unwrap();
    }
    let over = big.max(SMALL_OBJECT_MAX) + PAGE_SIZE;
    assert_eq!(s.memory_alloc(0, &r(over)), Err(errno::ENOMEM), "{st:?}");
    let small = st.largest_request().min(SMALL_OBJECT_MAX);
    if small > 0 {
        let h = s.memory_alloc(0, &r(small));
        assert!(h.is_ok(), "small {small} at align {align} refused: {st:?}");
        s.memory_free(0, h.unwrap()).unwrap();
        if small < SMALL_OBJECT_MAX {
            let e = s.memory_alloc(0, &r(small + PAGE_SIZE));
            assert_eq!(e, Err(errno::ENOMEM), "{st:?}");
        }
    }
    assert_eq!(s.hbm_stats_aligned(0, hbm, align), Ok(st), "left as found");
}

#[test]
fn the_largest_free_block_is_allocatable_on_every_preset_and_one_page_more_is_not() {
    for p in Preset::ALL {
        let s = sim(SimConfig::new(p, 1));
        let channels = s.device_info(0).unwrap().hbm_channels;
        for c in 0..channels {
            let st = s.pool_stats(0, false, c).unwrap();
            let main = s.channel_size() - FIRMWARE_CARVEOUT - GIB;
            assert_eq!(
                (st.largest_free, st.small_object_free),
                (main, GIB),
                "{p:?}"
            );
            assert_eq!(st.small_object_largest_free, GIB);
            for align in [0, 1 << 21, 1 << 30] {
                assert_largest_is_exact(&s, c, align);
            }
        }
    }
}

/// The free-block histogram is every free block of the channel, by size
/// class, in both placements: its bytes are the pool's free bytes, and the main pool's
/// largest block sits in its top non-empty class.
#[test]
fn the_free_block_histogram_is_every_free_block_by_size_class() {
    for placement in [Placement::Genalloc, Placement::Tlsf] {
        let s = sim(SimConfig {
            placement,
            ..SimConfig::scaled_down(Preset::Trn1, 1)
        });
        let mut live = Vec::new();
        let mut x = 0x9e37_79b9_u64;
        for i in 0..400u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let size = PAGE_SIZE << (x % 9);
            if i % 3 == 2 && !live.is_empty() {
                let h = live.swap_remove((x % live.len() as u64) as usize);
                s.memory_free(0, h).unwrap();
            } else if let Ok(h) = s.memory_alloc(0, &req(size)) {
                live.push(h);
            }
            let st = s.pool_stats(0, false, 0).unwrap();
            let (main, small) = s.free_histogram(0, 0).unwrap();
            assert_eq!(
                main.total_bytes() + small.total_bytes(),
                st.free,
                "{placement:?} step {i}"
            );
            if st.largest_free > 0 && st.largest_free > st.small_object_largest_free {
                let top = (0..FreeHistogram::CLASSES)
                    .rev()
                    .find(|c| main.blocks[*c] > 0)
                    .unwrap();
                assert_eq!(
                    top,
                    FreeHistogram::class_of(st.largest_free),
                    "{placement:?} step {i}"
                );
            }
        }
        assert_eq!(s.free_histogram(0, 9), Err(errno::EINVAL));
        let classes = [(0, 0), (4096, 0), (8191, 0), (8192, 1), (1 << 30, 18)];
        for (size, class) in classes {
            assert_eq!(FreeHistogram::class_of(size), class, "{size}");
        }
        assert_eq!(
            FreeHistogram::class_of(u64::MAX),
            FreeHistogram::CLASSES - 1
        );
        assert_eq!(s.free_histogram(7, 0), Err(errno::ENODEV));
    }
}

/// The trn2 report, under the TLSF placement (whose routing never sends a request
/// above 512 KiB to the small-object region): after a big tensor the main pool keeps
/// 512 MiB and the 1 GiB small-object region is untouched; the largest free block is
/// 512 MiB (not 1 GiB), and a 768 MiB request fails as that says.
#[test]
fn a_full_main_pool_does_not_borrow_the_small_object_regions_figure() {
    let s = sim(SimConfig {
        placement: Placement::Tlsf,
        ..SimConfig::new(Preset::Trn2, 1)
    });
    let st = s.pool_stats(0, false, 0).unwrap();
    let h = s
        .memory_alloc(0, &req(st.largest_free - 512 * MIB))
        .unwrap();
    let st = s.pool_stats(0, false, 0).unwrap();
    assert_eq!(st.free, 512 * MIB + GIB);
    assert_eq!(st.largest_free, 512 * MIB);
    assert_eq!(
        (st.small_object_free, st.small_object_largest_free),
        (GIB, GIB)
    );
    assert_eq!(s.memory_alloc(0, &req(768 * MIB)), Err(errno::ENOMEM));
    assert_largest_is_exact(&s, 0, 0);
    s.memory_free(0, h).unwrap();
    // the alignment-aware figures agree with the allocator too (aligned first fit)
    let g = s.memory_alloc(0, &req(3 * MIB)).unwrap();
    assert_eq!(s.memory_get_pa(0, g), Ok(FIRMWARE_CARVEOUT));
    let st = s.hbm_stats_aligned(0, 0, 1 << 30).unwrap();
    assert_eq!(
        st.largest_free,
        24 * GIB - 2 * GIB,
        "from the first 1 GiB boundary"
    );
    assert_largest_is_exact(&s, 0, 1 << 30);
    assert_eq!(s.hbm_stats_aligned(0, 0, 3), Err(errno::EINVAL));
    assert_eq!(s.hbm_stats_aligned(0, 4, 0), Err(errno::EINVAL));
}

/// The same state under the driver's placement: a request above 512 KiB falls back to
/// the small-object region (`mc_alloc_internal`'s `alt_pool`), so the 768 MiB request
/// succeeds there and the largest free block says 1 GiB; the stats agree with it.
#[test]
fn under_genalloc_a_large_request_falls_back_to_the_small_object_region() {
    let s = sim(SimConfig::new(Preset::Trn2, 1));
    assert_eq!(s.placement(), Placement::Genalloc);
    let st = s.pool_stats(0, false, 0).unwrap();
    s.memory_alloc(0, &req(st.largest_free - 512 * MIB))
        .unwrap();
    let st = s.pool_stats(0, false, 0).unwrap();
    assert_eq!((st.free, st.largest_free), (512 * MIB + GIB, GIB));
    assert_largest_is_exact(&s, 0, 0);
    let h = s.memory_alloc(0, &req(768 * MIB)).unwrap();
    let i = s.memory_info(0, h).unwrap();
    assert!(i.small_pool);
    assert_eq!(i.pa, 23 * GIB, "the small-object region's first page");
    assert_eq!(s.pool_stats(0, false, 0).unwrap().largest_free, 512 * MIB);
    assert_largest_is_exact(&s, 0, 0);
    assert_largest_is_exact(&s, 0, 1 << 21);
}

/// Driver-exact refusals: alignments above `INT_MAX` and sizes above `INT64_MAX` are
/// `EINVAL` under genalloc (`mc_alloc_internal`), `ENOMEM` / honoured under TLSF.
#[test]
fn genalloc_refuses_what_the_driver_refuses() {
    let g = sim(SimConfig::new(Preset::Trn2, 1));
    let t = sim(SimConfig {
        placement: Placement::Tlsf,
        ..SimConfig::new(Preset::Trn2, 1)
    });
    assert_eq!(
        g.memory_alloc(0, &req(MIB).align(1 << 31)),
        Err(errno::EINVAL)
    );
    assert!(g.memory_alloc(0, &req(MIB).align(1 << 30)).is_ok());
    assert!(t.memory_alloc(0, &req(MIB).align(1 << 31)).is_ok());
    assert_eq!(g.memory_alloc(0, &req(1 << 63)), Err(errno::EINVAL));
    assert_eq!(t.memory_alloc(0, &req(1 << 63)), Err(errno::ENOMEM));
    assert_eq!(g.memory_alloc(0, &req(i64::MAX as u64)), Err(errno::ENOMEM));
    // an alignment at or below the page is a plain request
    let a = g
        .memory_alloc(0, &req(SMALL_OBJECT_MAX + 1).align(PAGE_SIZE))
        .unwrap();
    assert_eq!(g.memory_get_pa(0, a), Ok(FIRMWARE_CARVEOUT));
}

/// The contiguous scratchpad under genalloc: fixed blocks growing down from the main
/// pool's end, each adjacent to the last, no fallback, and the driver's bookkeeping on
/// free (`get_offset_for_scratchpad_alloc`, `mc_free`).
#[test]
fn contiguous_scratchpad_grows_down_from_the_main_pools_end() {
    let s = sim(SimConfig::scaled_down(Preset::Trn2, 1));
    let main_end = 64 * MIB - 16 * MIB; // channel 0: 16 MiB small region at the top
    let sp = |n| req(n).cat(CATEGORY_CONTIGUOUS_SCRATCHPAD);
    let a = s.memory_alloc(0, &sp(4 * MIB)).unwrap();
    let b = s.memory_alloc(0, &sp(2 * MIB)).unwrap();
    assert_eq!(s.memory_get_pa(0, a), Ok(main_end - 4 * MIB));
    assert_eq!(s.memory_get_pa(0, b), Ok(main_end - 6 * MIB));
    assert!(!s.memory_info(0, a).unwrap().small_pool);
    // an ordinary block right below the scratchpad: the next page is taken
    let fill = s
        .memory_alloc(0, &req(main_end - 6 * MIB - FIRMWARE_CARVEOUT))
        .unwrap();
    assert_eq!(s.memory_alloc(0, &sp(PAGE_SIZE)), Err(errno::ENOMEM));
    s.memory_free(0, fill).unwrap();
    // freed from the bottom, the scratchpad shrinks and its next page goes back there
    s.memory_free(0, b).unwrap();
    let c = s.memory_alloc(0, &sp(MIB)).unwrap();
    assert_eq!(s.memory_get_pa(0, c), Ok(main_end - 5 * MIB));
    // freed out of order (the driver logs it): the scratchpad size drops by 4 MiB to
    // 1 MiB, so the next block goes at 2 MiB below the end, inside the freed range ...
    s.memory_free(0, a).unwrap();
    let d = s.memory_alloc(0, &sp(MIB)).unwrap();
    assert_eq!(s.memory_get_pa(0, d), Ok(main_end - 2 * MIB));
    // ... and one whose fixed range covers the live `c` is refused
    assert_eq!(s.memory_alloc(0, &sp(4 * MIB)), Err(errno::ENOMEM));
    s.memory_free(0, c).unwrap();
    s.memory_free(0, d).unwrap();
    let e = s.memory_alloc(0, &sp(MIB)).unwrap();
    assert_eq!(
        s.memory_get_pa(0, e),
        Ok(main_end - MIB),
        "all freed: back at the end"
    );
    // the whole main pool, and no byte more
    s.memory_free(0, e).unwrap();
    assert_eq!(
        s.memory_alloc(0, &sp(main_end - FIRMWARE_CARVEOUT + PAGE_SIZE)),
        Err(errno::ENOMEM)
    );
    let all = s
        .memory_alloc(0, &sp(main_end - FIRMWARE_CARVEOUT))
        .unwrap();
    assert_eq!(s.memory_get_pa(0, all), Ok(FIRMWARE_CARVEOUT));
    s.memory_free(0, all).unwrap();
    assert_eq!(s.pool_stats(0, false, 0).unwrap().allocations, 0);
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { pages: u64, align_log2: u8 },
    Free(usize),
    Check { align_log2: u8 },
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        // small (≤ 512 KiB) and large requests, some aligned
        3 => (1u64..=128, prop_oneof![Just(0u8), 13u8..22])
            .prop_map(|(pages, align_log2)| Op::Alloc { pages, align_log2 }),
        3 => (129u64..3072, prop_oneof![Just(0u8), 13u8..24])
            .prop_map(|(pages, align_log2)| Op::Alloc { pages, align_log2 }),
        4 => any::<usize>().prop_map(Op::Free),
        1 => prop_oneof![Just(0u8), 13u8..25].prop_map(|align_log2| Op::Check { align_log2 }),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 64, ..proptest::prelude::ProptestConfig::default()
    })]
    /// The OOM report's property, over random alloc/free sequences on a scaled-down channel
    /// (32 MiB main pool, 16 MiB small-object region): `largest_free` is always
    /// allocatable and one page more never is, for sizes above the small-object threshold;
    /// the same at the alignments the sequence uses; and small requests get exactly what
    /// `largest_request` says.
    #[test]
    fn largest_free_block_is_always_exactly_allocatable(
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let s = sim(SimConfig::scaled_down(Preset::Trn1, 1));
        let mut live: Vec<u64> = Vec::new();
        for op in ops {
            let check_align = match op {
                Op::Alloc { pages, align_log2 } => {
                    let align = if align_log2 == 0 { 0 } else { 1u64 << align_log2 };
                    match s.memory_alloc(0, &req(pages * PAGE_SIZE).align(align)) {
                        Ok(h) => live.push(h),
                        Err(e) => proptest::prop_assert_eq!(e, errno::ENOMEM),
                    }
                    align
                }
                Op::Free(k) => {
                    if !live.is_empty() {
                        let h = live.swap_remove(k % live.len());
                        s.memory_free(0, h).unwrap();
                    }
                    0
                }
                Op::Check { align_log2 } => if align_log2 == 0 { 0 } else { 1u64 << align_log2 },
            };
            assert_largest_is_exact(&s, 0, 0);
            if check_align != 0 {
                assert_largest_is_exact(&s, 0, check_align);
            }
        }
    }
}

#[test]
fn small_pool_falls_back_to_main_then_enomem() {
    let s = sim(SimConfig::scaled_down(Preset::Trn1, 1));
    let cs = 64 * MIB;
    let small = cs / 4; // 16 MiB
    let n = small / SMALL_OBJECT_MAX;
    let mut hs: Vec<u64> = (0..n)
        .map(|_| s.memory_alloc(0, &req(SMALL_OBJECT_MAX)).unwrap())
        .collect();
    for h in &hs {
        assert!(s.memory_info(0, *h).unwrap().small_pool);
    }
    // small pool full → the main pool
    let f = s.memory_alloc(0, &req(4096)).unwrap();
    let i = s.memory_info(0, f).unwrap();
    assert!(!i.small_pool);
    assert_eq!(i.pa, FIRMWARE_CARVEOUT);
    hs.push(f);
    // fill the main pool
    let main = cs - FIRMWARE_CARVEOUT - small - PAGE_SIZE;
    hs.push(s.memory_alloc(0, &req(main)).unwrap());
    assert_eq!(s.memory_alloc(0, &req(4096)), Err(errno::ENOMEM));
    assert_eq!(
        s.memory_alloc(0, &req(SMALL_OBJECT_MAX + 1)),
        Err(errno::ENOMEM)
    );
    let st = s.pool_stats(0, false, 0).unwrap();
    assert_eq!((st.free, st.largest_free), (0, 0));
    // the other channel is untouched
    assert!(s.memory_alloc(0, &req(4096).hbm(1)).is_ok());
    // and memory comes back
    s.memory_free(0, hs[3]).unwrap();
    assert!(s.memory_alloc(0, &req(SMALL_OBJECT_MAX)).is_ok());
    // a request larger than any pool (above INT64_MAX the driver says EINVAL)
    assert_eq!(s.memory_alloc(0, &req(u64::MAX)), Err(errno::EINVAL));
    assert_eq!(s.memory_alloc(0, &req(u64::MAX >> 1)), Err(errno::ENOMEM));
    assert_eq!(s.memory_alloc(0, &req(1 << 40)), Err(errno::ENOMEM));
    // host pool exhaustion
    assert!(s.memory_alloc(0, &host_req(32 * MIB)).is_ok());
    assert_eq!(s.memory_alloc(0, &host_req(1)), Err(errno::ENOMEM));
}

#[test]
fn alignment_rules() {
    let s = sim(SimConfig::new(Preset::Trn2, 1));
    // aligned host allocations are refused
    assert_eq!(
        s.memory_alloc(0, &host_req(4096).align(4096)),
        Err(errno::EINVAL)
    );
    // aligned device allocations are honoured
    let _pad = s.memory_alloc(0, &req(MIB)).unwrap();
    let a = s.memory_alloc(0, &req(MIB).align(1 << 30)).unwrap();
    assert_eq!(s.memory_get_pa(0, a).unwrap() % (1 << 30), 0);
    let b = s.memory_alloc(0, &req(4096).align(1 << 16)).unwrap();
    assert_eq!(s.memory_get_pa(0, b).unwrap() % (1 << 16), 0);
    assert_eq!(
        s.memory_alloc(0, &req(4096).align(3000)),
        Err(errno::EINVAL)
    );
    // withdrawn support: EINVAL for align != 0, plain requests still work
    s.set_aligned_alloc(false);
    assert!(!s.device_info(0).unwrap().supports_aligned_alloc);
    assert_eq!(
        s.memory_alloc(0, &req(4096).align(4096)),
        Err(errno::EINVAL)
    );
    assert!(s.memory_alloc(0, &req(4096)).is_ok());
    let cfg = SimConfig {
        aligned_alloc: false,
        ..SimConfig::new(Preset::Trn1, 1)
    };
    assert!(!sim(cfg).device_info(0).unwrap().supports_aligned_alloc);
}

#[test]
fn bad_arguments() {
    let s = sim(SimConfig::new(Preset::Trn1, 1));
    assert_eq!(s.memory_alloc(1, &req(4096)), Err(errno::ENODEV));
    assert_eq!(s.memory_alloc(0, &req(0)), Err(errno::EINVAL));
    assert_eq!(s.memory_alloc(0, &req(4096).nc(8)), Err(errno::EINVAL));
    assert!(s.memory_alloc(0, &req(4096).nc(7)).is_ok());
    assert_eq!(s.memory_alloc(0, &req(4096).hbm(2)), Err(errno::EINVAL));
    assert!(s.memory_alloc(0, &host_req(4096).hbm(9)).is_ok());
    assert_eq!(s.memory_alloc(0, &req(4096).region(1)), Err(errno::EINVAL));
    assert_eq!(s.memory_alloc(0, &req(4096).cat(20)), Err(errno::EINVAL));
    assert_eq!(s.pool_stats(1, false, 0), Err(errno::ENODEV));
    assert_eq!(s.memory_free(1, 1), Err(errno::ENODEV));
    assert_eq!(s.alloc_calls(), 8);
}

#[test]
fn stale_and_foreign_handles_are_einval() {
    let s = sim(SimConfig::new(Preset::Trn2, 2));
    let h = s.memory_alloc(0, &req(8192)).unwrap();
    assert_ne!(h, 0);
    assert_eq!(
        s.memory_free(1, h),
        Err(errno::EINVAL),
        "another device's handle"
    );
    assert_eq!(s.memory_get_pa(1, h), Err(errno::EINVAL));
    s.memory_free(0, h).unwrap();
    assert_eq!(s.memory_free(0, h), Err(errno::EINVAL), "double free");
    assert_eq!(s.memory_get_pa(0, h), Err(errno::EINVAL), "stale");
    // the slot is reused with a new generation: the old handle stays stale
    let h2 = s.memory_alloc(0, &req(8192)).unwrap();
    assert_ne!(h2, h);
    assert_eq!(s.memory_free(0, h), Err(errno::EINVAL));
    assert_eq!(s.copy_in(0, h, 0, &[1]), Err(errno::EINVAL));
    for junk in [
        0u64,
        1,
        u64::MAX,
        h2 ^ (1 << 20),
        h2 ^ (0xF << H_POOL_SHIFT),
        h2 + 1,
    ] {
        assert_eq!(s.memory_free(0, junk), Err(errno::EINVAL), "{junk:#x}");
    }
    assert_eq!(s.memory_free(0, h2), Ok(()));
}

#[test]
fn handles_naming_no_channel_pool_or_node_are_einval() {
    // Trn1 has two HBM channels: pool codes for channels 2 and 3 name nothing.
    let s = sim(SimConfig::new(Preset::Trn1, 2));
    let h = s.memory_alloc(0, &req(8192)).unwrap();
    let code = |c: u32| h & !(H_POOL_MASK << H_POOL_SHIFT) | u64::from(c) << H_POOL_SHIFT;
    assert_eq!(
        code(MAX_HBM_CHANNELS),
        h,
        "a small-object handle of channel 0"
    );
    for c in [
        0,
        2,
        3,
        MAX_HBM_CHANNELS + 2,
        MAX_HBM_CHANNELS + 3,
        POOL_HOST,
        POOL_HOST + 1,
        POOL_HOST + 3,
        H_POOL_MASK as u32,
    ] {
        assert_eq!(
            s.memory_free(0, code(c)),
            Err(errno::EINVAL),
            "pool code {c}"
        );
    }
    assert_eq!(
        s.memory_free(0, h & !H_INDEX_MASK),
        Err(errno::EINVAL),
        "node 0"
    );
    assert_eq!(s.memory_free(2, h), Err(errno::ENODEV));
    assert_eq!(s.memory_free(0, h), Ok(()));
    // Host handles take the same call.
    let hh = s.memory_alloc(1, &host_req(4096)).unwrap();
    assert_eq!(s.memory_free(0, hh), Err(errno::EINVAL), "another device's");
    assert_eq!(s.memory_free(1, hh), Ok(()));
    assert_eq!(s.memory_free(1, hh), Err(errno::EINVAL), "double free");
}

#[test]
fn sizes_beyond_int64_max_are_refused_by_each_placement() {
    let too_big = i64::MAX as u64 + 1;
    let g = sim(SimConfig::new(Preset::Trn2, 1));
    assert_eq!(g.memory_alloc(0, &req(too_big)), Err(errno::EINVAL));
    assert_eq!(g.memory_alloc(0, &req(u64::MAX)), Err(errno::EINVAL));
    let t = sim(SimConfig {
        placement: Placement::Tlsf,
        ..SimConfig::new(Preset::Trn2, 1)
    });
    assert_eq!(t.memory_alloc(0, &req(too_big)), Err(errno::ENOMEM));
    assert_eq!(t.memory_alloc(0, &req(u64::MAX)), Err(errno::ENOMEM));
    assert_eq!((g.alloc_calls(), t.alloc_calls()), (2, 2));
}

#[test]
fn fault_injection_and_call_count() {
    let s = sim(SimConfig::new(Preset::Trn2, 1));
    s.fail_nth_alloc(3);
    assert!(s.memory_alloc(0, &req(4096)).is_ok());
    assert!(s.memory_alloc(0, &req(4096)).is_ok());
    assert_eq!(s.memory_alloc(0, &req(4096)), Err(errno::ENOMEM));
    assert!(s.memory_alloc(0, &req(4096)).is_ok());
    assert_eq!(s.alloc_calls(), 4);
    s.fail_category(10); // CONSTANTS_DEVICE
    assert_eq!(s.memory_alloc(0, &req(4096).cat(10)), Err(errno::ENOMEM));
    assert_eq!(s.memory_alloc(0, &req(4096).cat(10)), Err(errno::ENOMEM));
    assert!(s.memory_alloc(0, &req(4096).cat(9)).is_ok());
    s.fail_nth_alloc(1);
    s.clear_faults();
    assert!(s.memory_alloc(0, &req(4096).cat(10)).is_ok());
    assert_eq!(s.alloc_calls(), 8);
    assert_eq!(s.pool_stats(0, false, 0).unwrap().allocations, 5);
}

#[test]
fn copies_are_bounds_checked_and_use_the_backing() {
    let mut s = sim(SimConfig::scaled_down(Preset::Trn1, 2));
    let h = s.memory_alloc(1, &req(10_000).hbm(1)).unwrap();
    let hh = s.memory_alloc(1, &host_req(5000)).unwrap();
    // no backing: bounds first, then EOPNOTSUPP
    assert_eq!(s.copy_in(1, h, 0, &[1, 2, 3]), Err(errno::EOPNOTSUPP));
    assert_eq!(s.copy_in(1, h, 12_288, &[1]), Err(errno::EFAULT));
    let len = s.backing_len(1);
    assert_eq!(len, 2 * 64 * MIB + 32 * MIB);
    let mut mem = vec![0u8; len as usize];
    // SAFETY: `mem` outlives every use below (the simulator is dropped first... or the
    // backing is removed before `mem` is) and is accessed only through the simulator.
    unsafe {
        assert_eq!(
            s.set_backing(1, mem.as_mut_ptr(), len - 1),
            Err(errno::EINVAL)
        );
        assert_eq!(s.set_backing(2, mem.as_mut_ptr(), len), Err(errno::ENODEV));
        s.set_backing(1, mem.as_mut_ptr(), len).unwrap();
    }
    s.copy_in(1, h, 100, b"hello").unwrap();
    let mut out = [0u8; 5];
    s.copy_out(1, h, 100, &mut out).unwrap();
    assert_eq!(&out, b"hello");
    // the whole rounded allocation is addressable, one byte more is not
    assert_eq!(s.copy_in(1, h, 12_287, &[7]), Ok(()));
    assert_eq!(s.copy_in(1, h, 12_287, &[7, 7]), Err(errno::EFAULT));
    assert_eq!(s.copy_out(1, h, u64::MAX, &mut out), Err(errno::EFAULT));
    assert_eq!(s.fill(1, h, 0, 12_289, 0), Err(errno::EFAULT));
    s.fill(1, h, 0, 4, 0xAB).unwrap();
    s.copy_out(1, h, 0, &mut out).unwrap();
    assert_eq!(out, [0xAB, 0xAB, 0xAB, 0xAB, 0]);
    // host pool bytes sit after the channels
    s.copy_in(1, hh, 1, b"host").unwrap();
    let pa = s.memory_get_pa(1, h).unwrap();
    let removed = {
        // SAFETY: removing the backing (null) has no requirement.
        unsafe { s.set_backing(1, core::ptr::null_mut(), 0) }
    };
    removed.unwrap();
    assert_eq!(&mem[pa as usize + 100..pa as usize + 105], b"hello");
    assert_eq!(
        pa,
        64 * MIB + 48 * MIB,
        "channel 1's small pool (16 MiB at the top)"
    );
    let host_off = 2 * 64 * MIB as usize;
    assert_eq!(&mem[host_off + 1..host_off + 5], b"host");
    assert_eq!(s.copy_in(1, h, 0, &[1]), Err(errno::EOPNOTSUPP));
    // device 0 never had a backing
    let d0 = s.memory_alloc(0, &req(4096)).unwrap();
    assert_eq!(s.copy_in(0, d0, 0, &[1]), Err(errno::EOPNOTSUPP));
}

#[test]
fn concurrent_allocations_from_two_threads() {
    let s = sim(SimConfig::scaled_down(Preset::Trn2, 1));
    std::thread::scope(|t| {
        for hbm in 0..2 {
            let s = &*s;
            t.spawn(move || {
                for _ in 0..200 {
                    let h = s.memory_alloc(0, &req(8192).hbm(hbm)).unwrap();
                    s.memory_free(0, h).unwrap();
                }
            });
        }
    });
    assert_eq!(s.alloc_calls(), 400);
    assert_eq!(s.pool_stats(0, false, 0).unwrap().allocations, 0);
}

/// The node arena is a simulation limit (docs/PLACEMENT.md "Limits"): a pool whose nodes run
/// out refuses with `ENOMEM`; it never sends the request to the other pool, where the driver
/// (genalloc has no descriptor limit) would not have put it.
#[test]
fn a_pool_out_of_nodes_refuses_instead_of_falling_back() {
    const N: usize = 16;
    for placement in [Placement::Genalloc, Placement::Tlsf] {
        let cfg = SimConfig {
            placement,
            ..SimConfig::scaled_down(Preset::Trn1, 1)
        };
        let s = SimDevice::<1, N>::new_boxed_sized(&cfg).unwrap();
        let main_capacity = {
            let st = s.pool_stats(0, false, 0).unwrap();
            st.capacity - st.small_object_free
        };
        // Small requests: the small-object pool (16 MiB, 4 096 pages) has room for all of
        // them, its N nodes do not.
        let mut placed = 0;
        let e = loop {
            match s.memory_alloc(0, &req(PAGE_SIZE)) {
                Ok(h) => {
                    let i = s.memory_info(0, h).unwrap();
                    assert!(
                        i.small_pool,
                        "{placement:?}: #{placed} left the pool: {i:?}"
                    );
                    placed += 1;
                }
                Err(e) => break e,
            }
            assert!(placed < N, "{placement:?}: more allocations than nodes");
        };
        assert_eq!(e, errno::ENOMEM, "{placement:?}");
        assert!(placed >= (N - 1) / 2, "{placement:?}: {placed}");
        let st = s.pool_stats(0, false, 0).unwrap();
        assert_eq!(
            st.free - st.small_object_free,
            main_capacity,
            "{placement:?}: main used"
        );
        assert!(
            st.small_object_free > 1000 * PAGE_SIZE,
            "{placement:?}: {st:?}"
        );
        // Refused again, and the main pool still serves what it serves first.
        assert_eq!(s.memory_alloc(0, &req(PAGE_SIZE)), Err(errno::ENOMEM));
        let big = s
            .memory_alloc(0, &req(SMALL_OBJECT_MAX + PAGE_SIZE))
            .unwrap();
        assert!(!s.memory_info(0, big).unwrap().small_pool);
        // Large requests on a fresh channel: its main pool (32 MiB) runs out of nodes
        // first; genalloc would fall back to the small-object pool when the main pool is
        // *full*, never when it only cannot track another block.
        let mut placed = 0;
        let e = loop {
            match s.memory_alloc(0, &req(SMALL_OBJECT_MAX + PAGE_SIZE).hbm(1)) {
                Ok(h) => {
                    assert!(!s.memory_info(0, h).unwrap().small_pool, "{placement:?}");
                    placed += 1;
                }
                Err(e) => break e,
            }
            assert!(placed < N, "{placement:?}: more allocations than nodes");
        };
        assert_eq!(e, errno::ENOMEM, "{placement:?}");
        let st = s.pool_stats(0, false, 1).unwrap();
        assert_eq!(
            st.small_object_free,
            small_region(64 * MIB),
            "{placement:?}"
        );
    }
}
