use super::*;

#[test]
fn paired_ratio_is_robust_to_a_phase_change_between_the_two_sides() {
    // a costs 2x b. In rep 2 the machine slowed down between timing a and timing b; in
    // reps 3 and 5 it was slow for both. The ratio of the medians says 2 / 1.5 = 1.33;
    // the median of the paired ratios still says 2.
    let a = [2.0, 2.0, 3.0, 2.0, 3.0];
    let b = [1.0, 1.5, 1.5, 1.0, 1.5];
    assert_eq!(paired_median_ratio(&a, &b), 2.0);
    assert!((median(&mut a.to_vec()) / median(&mut b.to_vec()) - 4.0 / 3.0).abs() < 1e-12);
    let mut r = [4.0, 1.0, 2.0];
    assert_eq!(paired_median_ratio(&r, &[1.0, 1.0, 1.0]), 2.0);
    r.reverse();
    assert_eq!(paired_median_ratio(&r, &[1.0, 1.0, 1.0]), 2.0);
}

fn no_overlap(mut v: Vec<(u64, u64)>, cap: u64) {
    v.sort_unstable();
    for w in v.windows(2) {
        assert!(w[0].1 <= w[1].0, "overlap {:?}", w);
    }
    if let Some(last) = v.last() {
        assert!(last.1 <= cap);
    }
}

#[test]
fn traces_are_deterministic_and_shaped_as_specified() {
    let a = Trace::generate(TraceSpec::trace_a(2000));
    let a2 = Trace::generate(TraceSpec::trace_a(2000));
    assert_eq!(a.churn, a2.churn);
    assert_eq!(a.churn.len(), 2000);
    for op in a.warmup.iter().chain(&a.churn) {
        if let Op::Alloc { size, align, .. } = *op {
            assert!((4 * KIB..=256 * MIB).contains(&size));
            assert!(align.is_power_of_two() && (64..=4096).contains(&align));
        }
    }
    assert!(a.fill.iter().map(|f| f.0).sum::<u64>() > CHANNEL);
    let b = Trace::generate(TraceSpec::trace_b(10));
    assert!(
        (60_000..80_000).contains(&b.live_after_warmup),
        "{}",
        b.live_after_warmup
    );
}

fn replay_is_sound<A: BenchAlloc>(a: A) {
    let t = Trace::generate(TraceSpec::trace_a(3000));
    let mut r = Replayer::new(a, t.sizes.len());
    r.run(&t.warmup);
    r.run(&t.churn);
    no_overlap(r.live_ranges(), CHANNEL);
}

#[test]
fn every_allocator_replays_without_overlap() {
    replay_is_sound(CarveBench::new(CHANNEL));
    replay_is_sound(OffsetBench::new(CHANNEL));
    replay_is_sound(RangeBench::new(CHANNEL));
    replay_is_sound(FirstFitRef::new(CHANNEL));
    replay_is_sound(GenallocBench::new(CHANNEL));
}

/// The first-fit carve and the exhaustive first-fit reference place every block of the
/// same trace at the same address.
#[test]
fn genalloc_places_as_the_first_fit_reference() {
    let t = Trace::generate(TraceSpec::trace_b(5000));
    let mut g = Replayer::new(GenallocBench::new(CHANNEL), t.sizes.len());
    let mut f = Replayer::new(FirstFitRef::new(CHANNEL), t.sizes.len());
    for r in [&t.warmup, &t.churn] {
        g.run(r);
        f.run(r);
    }
    let (mut a, mut b) = (g.live_ranges(), f.live_ranges());
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
}

#[test]
fn first_fit_reference_takes_the_lowest_hole_and_coalesces() {
    let mut f = FirstFitRef::new(16 * KIB);
    let a: Vec<_> = (0..4).map(|_| f.alloc(4 * KIB, 64).unwrap()).collect();
    assert_eq!(f.alloc(1, 1), None, "full");
    f.free(a[3]);
    f.free(a[1]);
    assert_eq!(
        f.alloc(100, 64),
        Some((4 * KIB, 8 * KIB)),
        "lowest hole first"
    );
    f.free(a[0]);
    f.free((4 * KIB, 8 * KIB));
    f.free(a[2]);
    assert_eq!(
        f.alloc(16 * KIB, 4096),
        Some((0, 16 * KIB)),
        "all merged back"
    );
}

#[test]
fn seed_spread_brackets_its_mean() {
    let s = utilisation_over_seeds(|| CarveBench::new(CHANNEL), TraceSpec::trace_a(500), 2);
    assert!(
        s.min <= s.mean && s.mean <= s.max && s.min > 0.5 && s.max <= 1.0,
        "{s:?}"
    );
}

#[test]
fn carve_reuses_every_exact_hole() {
    assert_eq!(exact_reuse(CarveBench::new), 50);
    assert_eq!(exact_reuse(RangeBench::new), 50);
}

#[test]
fn median_of_odd_and_even() {
    assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
}
