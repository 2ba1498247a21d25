//! Placement-policy study on trace A (`docs/PERFORMANCE.md`, "Why 0.97 utilisation is missed on
//! trace A"): how close a non-moving allocator gets to 0.97 utilisation at the first refused
//! fill request, and what a policy would need to get further (knowledge of lifetimes, or
//! moving blocks). The `placement_study` binary prints the table.
//!
//! Every policy runs over the same model, so only the placement differs:
//!
//! * a [`FreeRanges`] pool of [`CARVE_GRANULE`] (4 KiB) granules; requests are rounded up to
//!   whole granules and every granule offset satisfies the trace's alignments (≤ 4 KiB), so
//!   policies ignore alignment ([`Case::generate`] checks the bound);
//! * the warm-up and churn of a [`Trace`] replayed op by op (a refused allocation is counted
//!   and its later free skipped, as [`crate::Replayer`] does);
//! * then the fill, offered until its first refused request; the figure is requested live
//!   bytes / capacity at that point (the rule of [`crate::TraceSession`]).
//!
//! Besides the policies, two ceilings bound what any fill could reach: [`compaction_ceiling`]
//! (blocks may move: the fill fails only when a request exceeds the total free bytes) and
//! [`cut_ceiling`] of the hole set a policy leaves after the churn (blocks may not move, the
//! fill may be placed clairvoyantly).

use std::collections::BTreeMap;

use crate::{Op, SeedSpread, Trace, TraceSpec, CARVE_GRANULE, MIB};

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

    /// Last fit: the top of the highest free range of at least `size` bytes (the block ends
    /// where the range ends; no alignment, as [`FreeRanges::best_fit`]).
    pub fn last_fit(&self, size: u64) -> Option<u64> {
        self.iter()
            .rev()
            .find(|&(_, len)| len >= size)
            .map(|(base, len)| base + len - size)
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

/// `bytes` rounded up to whole [`CARVE_GRANULE`]s: the space a request takes in the model.
fn granules(bytes: u64) -> u64 {
    bytes.next_multiple_of(CARVE_GRANULE)
}

/// An online placement rule: it sees only the free ranges and the request size.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Exhaustive address-ordered first fit (the driver's stated policy, as
    /// [`crate::FirstFitRef`]).
    FirstFit,
    /// Exhaustive best fit, ties to the lowest address.
    BestFit,
    /// Best fit for requests of at least `threshold` bytes, first fit below.
    Split {
        /// Smallest request placed by best fit.
        threshold: u64,
    },
    /// Two-ended: best fit for requests of at least `threshold` bytes (from the bottom, ties
    /// to the lowest address), last fit below (small blocks pile up from the top).
    TwoEnded {
        /// Smallest request placed by best fit.
        threshold: u64,
    },
}

impl Rule {
    /// Where a request of `size` bytes (whole granules) goes; `None` when nothing fits.
    pub fn place(self, pool: &FreeRanges, size: u64) -> Option<u64> {
        match self {
            Rule::FirstFit => pool.first_fit(size, CARVE_GRANULE),
            Rule::BestFit => pool.best_fit(size),
            Rule::Split { threshold } if size >= threshold => pool.best_fit(size),
            Rule::Split { .. } => pool.first_fit(size, CARVE_GRANULE),
            Rule::TwoEnded { threshold } if size >= threshold => pool.best_fit(size),
            Rule::TwoEnded { .. } => pool.last_fit(size),
        }
    }

    fn name(self) -> String {
        match self {
            Rule::FirstFit => "first fit (exhaustive, address-ordered)".into(),
            Rule::BestFit => "best fit (exhaustive, ties to the lowest address)".into(),
            Rule::Split { threshold } => format!(
                "split T = {}: best fit if size ≥ T, else first fit",
                bytes_label(threshold)
            ),
            Rule::TwoEnded { threshold } => format!(
                "two-ended T = {}: best fit if size ≥ T, else last fit (from the top)",
                bytes_label(threshold)
            ),
        }
    }
}

/// `bytes` as "N MiB" if a whole number of MiB, else "N KiB".
fn bytes_label(bytes: u64) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

/// The exact-death-time oracle: "thresholded lifetime match with first-fit fallback". A new
/// block goes next to a live neighbour that dies about when it does, so the two free up
/// together and leave one hole instead of two. Candidates are both ends of every fitting free
/// range whose neighbour on that side is a live block with `|ln rem(neighbour) − ln rem(new)|
/// < tau` (`rem` = remaining lifetime in ops, now); exact fits first, then the lowest address;
/// no candidate → first fit. `sigma` > 0 puts a fixed log-normal error on every block's
/// remaining lifetime (ln rem + sigma·z, z ~ N(0, 1) per block). The fill blocks never die, so
/// the fill is placed by best fit.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct LifetimeOracle {
    /// Standard deviation of the log-normal error on the remaining lifetime (0: exact).
    pub sigma: f64,
    /// Largest difference of log remaining lifetimes that still counts as a match.
    pub tau: f64,
}

/// A placement policy of the study.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Policy {
    /// An online rule, used for the churn and the fill alike.
    Online(Rule),
    /// The exact-death-time oracle (not implementable: an allocator is not told lifetimes).
    Oracle(LifetimeOracle),
}

impl Policy {
    /// The row label of the policy.
    pub fn name(self) -> String {
        match self {
            Policy::Online(rule) => rule.name(),
            Policy::Oracle(o) => format!(
                "death-time oracle, σ = {}, τ = {} (lifetime match, first-fit fallback; fill: best fit)",
                o.sigma, o.tau
            ),
        }
    }

    /// The rule that places the fill (whose blocks never die).
    fn fill_rule(self) -> Rule {
        match self {
            Policy::Online(rule) => rule,
            Policy::Oracle(_) => Rule::BestFit,
        }
    }

    /// What the policy believes of a block born at op `birth` that dies at op `death`.
    fn lifetime(self, birth: u64, death: u64) -> Lifetime {
        let log_error = match self {
            Policy::Online(_) => 0.0,
            Policy::Oracle(o) => o.sigma * std_normal(death, birth),
        };
        Lifetime { death, log_error }
    }

    /// Where a churn request of `size` bytes with lifetime `me` goes at op `now`.
    fn place(self, state: &Replay, size: u64, me: &Lifetime, now: u64) -> Option<u64> {
        match self {
            Policy::Online(rule) => rule.place(&state.pool, size),
            Policy::Oracle(o) => o
                .matching_position(state, size, me.log_remaining(now), now)
                .or_else(|| Rule::FirstFit.place(&state.pool, size)),
        }
    }
}

impl LifetimeOracle {
    /// The best matching position for a block of `size` bytes whose (noisy) log remaining
    /// lifetime is `mine`: exact fits first, then the lowest address.
    fn matching_position(self, state: &Replay, size: u64, mine: f64, now: u64) -> Option<u64> {
        let matches = |n: Option<&LiveBlock>| {
            n.is_some_and(|n| (n.lifetime.log_remaining(now) - mine).abs() < self.tau)
        };
        state
            .pool
            .iter()
            .filter(|&(_, len)| len >= size)
            .flat_map(|(base, len)| {
                let bottom = (base, state.block_ending_at(base));
                let top = (base + len - size, state.block_starting_at(base + len));
                [bottom, top]
                    .into_iter()
                    .filter(|&(_, n)| matches(n))
                    .map(move |(pos, _)| (len != size, pos))
            })
            .min()
            .map(|(_, pos)| pos)
    }
}

/// A deterministic N(0, 1) draw per block, from a hash of its death and birth ops (Box–Muller
/// over two splitmix-style hash outputs), so every run sees the same error for a block.
fn std_normal(death: u64, birth: u64) -> f64 {
    let mut x =
        death.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ birth.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    let mut uniform = || {
        x ^= x >> 33;
        x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        x ^= x >> 33;
        ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let (u0, u1) = (uniform(), uniform());
    (-2.0 * u0.ln()).sqrt() * (2.0 * std::f64::consts::PI * u1).cos()
}

/// What a policy knows of a block's life (the online rules ignore it).
#[derive(Copy, Clone, Debug)]
struct Lifetime {
    /// Op at which the trace frees it.
    death: u64,
    /// Error added to the log remaining lifetime (0 for an exact oracle).
    log_error: f64,
}

impl Lifetime {
    /// ln(remaining ops at `now`, at least 1) plus the block's error.
    fn log_remaining(&self, now: u64) -> f64 {
        (self.death.saturating_sub(now).max(1) as f64).ln() + self.log_error
    }
}

/// A block placed during the warm-up or churn.
#[derive(Copy, Clone, Debug)]
struct LiveBlock {
    /// One past its last byte.
    end: u64,
    lifetime: Lifetime,
}

/// The model state of one replay: the free ranges and the live blocks.
struct Replay {
    pool: FreeRanges,
    /// Live blocks by start address.
    live: BTreeMap<u64, LiveBlock>,
    /// Start of each trace id's block while it is live.
    starts: Vec<Option<u64>>,
}

impl Replay {
    fn new(capacity: u64, ids: usize) -> Self {
        Replay {
            pool: FreeRanges::new(capacity),
            live: BTreeMap::new(),
            starts: vec![None; ids],
        }
    }

    fn insert(&mut self, id: u32, start: u64, size: u64, lifetime: Lifetime) {
        self.pool.take(start, size);
        let end = start + size;
        self.live.insert(start, LiveBlock { end, lifetime });
        self.starts[id as usize] = Some(start);
    }

    /// Frees `id`'s block; nothing if its allocation was refused.
    fn remove(&mut self, id: u32) {
        if let Some(start) = self.starts[id as usize].take() {
            let b = self
                .live
                .remove(&start)
                .expect("Replay::remove: a live id has a live block");
            self.pool.give(start, b.end);
        }
    }

    /// The live block whose last byte is just below `addr`.
    fn block_ending_at(&self, addr: u64) -> Option<&LiveBlock> {
        self.live
            .range(..addr)
            .next_back()
            .map(|(_, b)| b)
            .filter(|b| b.end == addr)
    }

    /// The live block starting at `addr`.
    fn block_starting_at(&self, addr: u64) -> Option<&LiveBlock> {
        self.live.get(&addr)
    }

    /// Requested bytes of the live trace ids (`sizes` indexed by id).
    fn live_bytes(&self, sizes: &[u64]) -> u64 {
        self.starts
            .iter()
            .zip(sizes)
            .filter(|(s, _)| s.is_some())
            .map(|(_, &size)| size)
            .sum()
    }
}

/// One seed of the study: a trace and the death op of every id it allocates.
#[derive(Clone, Debug)]
pub struct Case {
    /// The trace.
    pub trace: Trace,
    /// Per id: the op (warm-up and churn counted together) at which the trace frees it, from
    /// [`death_times`].
    pub deaths: Vec<u64>,
}

impl Case {
    /// Generates the trace of `spec` and its death times.
    ///
    /// Panics if a request of the spec may need an alignment above [`CARVE_GRANULE`] (the
    /// model ignores alignment).
    pub fn generate(spec: TraceSpec) -> Self {
        assert!(
            spec.max_align <= CARVE_GRANULE,
            "placement study: alignments above the {CARVE_GRANULE} B granule are not modelled"
        );
        let trace = Trace::generate(spec);
        let deaths = death_times(&trace);
        Case { trace, deaths }
    }
}

/// Per id of `trace`, the op (warm-up and churn counted together) at which it is freed. Ids
/// still live at the end of the churn get their real future death from a longer run of the same
/// seed (the generator draws the same first ops whatever the churn length), lengthened until
/// every one of them has died, so no block is taken to live forever.
pub fn death_times(trace: &Trace) -> Vec<u64> {
    let mut churn_ops = trace.spec.churn_ops.max(1) * 4;
    loop {
        let longer = Trace::generate(TraceSpec {
            churn_ops,
            ..trace.spec
        });
        assert!(
            longer.warmup == trace.warmup && longer.churn.starts_with(&trace.churn),
            "a longer run of the same seed starts with the same ops"
        );
        let mut deaths = vec![None; trace.sizes.len()];
        for (op_index, op) in longer.warmup.iter().chain(&longer.churn).enumerate() {
            if let Op::Free { id } = *op {
                if let Some(d) = deaths.get_mut(id as usize) {
                    *d = Some(op_index as u64);
                }
            }
        }
        if let Some(deaths) = deaths.into_iter().collect::<Option<Vec<u64>>>() {
            return deaths;
        }
        churn_ops *= 2;
    }
}

/// What one policy did on one seed.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct PolicyRun {
    /// Requested live bytes / capacity at the first refused fill request.
    pub utilisation: f64,
    /// [`cut_ceiling`] of the holes and live bytes the policy left after the churn.
    pub state_ceiling: f64,
    /// Allocations refused during the warm-up and churn.
    pub churn_failures: u64,
}

/// Replays `case` under `policy`: warm-up and churn, the per-state ceiling, then the fill up to
/// its first refused request.
pub fn run_policy(case: &Case, policy: Policy) -> PolicyRun {
    let trace = &case.trace;
    let capacity = trace.spec.capacity;
    let mut state = Replay::new(capacity, trace.sizes.len());
    let mut churn_failures = 0;
    for (now, op) in (0u64..).zip(trace.warmup.iter().chain(&trace.churn)) {
        match *op {
            Op::Alloc { id, size, .. } => {
                let size = granules(size);
                let me = policy.lifetime(now, case.deaths[id as usize]);
                match policy.place(&state, size, &me, now) {
                    Some(start) => state.insert(id, start, size, me),
                    None => churn_failures += 1,
                }
            }
            Op::Free { id } => state.remove(id),
        }
    }
    let live = state.live_bytes(&trace.sizes);
    let state_ceiling = cut_ceiling(&state.pool.lengths(), &trace.fill, live, capacity);
    let placed = fill_until_refused(&mut state.pool, policy.fill_rule(), &trace.fill);
    let utilisation = (live + placed) as f64 / capacity as f64;
    debug_assert!(utilisation <= state_ceiling, "a fill beat its own ceiling");
    PolicyRun {
        utilisation,
        state_ceiling,
        churn_failures,
    }
}

/// Offers `fill` to `pool` under `rule` until the first refusal; returns the requested bytes
/// placed.
fn fill_until_refused(pool: &mut FreeRanges, rule: Rule, fill: &[(u64, u64)]) -> u64 {
    let mut placed = 0;
    for &(size, _) in fill {
        let Some(start) = rule.place(pool, granules(size)) else {
            break;
        };
        pool.take(start, granules(size));
        placed += size;
    }
    placed
}

/// Per-state ceiling: an upper bound on the utilisation at the first refused fill request from
/// a state with free ranges of lengths `holes` and `live` requested live bytes, whatever the
/// fill placement (even clairvoyant). A fill prefix can only be placed if, for every size t, the
/// prefix's requests ≥ t fit in total into the holes ≥ t; the bound is the utilisation after
/// the longest prefix that passes.
pub fn cut_ceiling(holes: &[u64], fill: &[(u64, u64)], live: u64, capacity: u64) -> f64 {
    let mut holes = holes.to_vec();
    holes.sort_unstable_by(|a, b| b.cmp(a));
    let requests: Vec<u64> = fill.iter().map(|&(size, _)| granules(size)).collect();
    let n = longest_passing_prefix(requests.len(), |n| cut_holds(&holes, &requests[..n]));
    let placed: u64 = fill[..n].iter().map(|&(size, _)| size).sum();
    (live + placed) as f64 / capacity as f64
}

/// Whether `requests` pass the cut condition against `holes_desc` (hole lengths, largest
/// first): for every request size t, the requests ≥ t add up to at most the holes ≥ t.
fn cut_holds(holes_desc: &[u64], requests: &[u64]) -> bool {
    let mut requests = requests.to_vec();
    requests.sort_unstable_by(|a, b| b.cmp(a));
    let (mut need, mut have, mut holes_in) = (0u64, 0u64, 0usize);
    for &t in &requests {
        need += t;
        while let Some(&h) = holes_desc.get(holes_in).filter(|&&h| h >= t) {
            have += h;
            holes_in += 1;
        }
        if need > have {
            return false;
        }
    }
    true
}

/// The largest `n` in `0..=len` with `passes(n)`, for a `passes` that holds up to some `n` and
/// fails after it (`passes(0)` is taken to hold).
fn longest_passing_prefix(len: usize, passes: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, len);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if passes(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// Compaction ceiling: blocks may move, so the fill fails only at the first request larger than
/// the total free space. The live set is the trace's own model (no allocation refused in the
/// churn); sizes in whole granules as everywhere in the study.
pub fn compaction_ceiling(trace: &Trace) -> f64 {
    let mut live = vec![false; trace.sizes.len()];
    for op in trace.warmup.iter().chain(&trace.churn) {
        match *op {
            Op::Alloc { id, .. } => live[id as usize] = true,
            Op::Free { id } => live[id as usize] = false,
        }
    }
    let (requested, used) = live
        .iter()
        .zip(&trace.sizes)
        .filter(|(&l, _)| l)
        .fold((0, 0), |(r, u), (_, &size)| (r + size, u + granules(size)));
    let capacity = trace.spec.capacity;
    cut_ceiling(&[capacity - used], &trace.fill, requested, capacity)
}

/// The policies of the study's table: first fit, best fit, the split rule at 2, 4 and 8 MiB,
/// the two-ended rule at 4 MiB, and the death-time oracle exact and with log-normal errors σ = 0.25 and 1.
pub fn study_policies() -> Vec<Policy> {
    let split = |mib: u64| {
        Policy::Online(Rule::Split {
            threshold: mib * MIB,
        })
    };
    let oracle = |sigma, tau| Policy::Oracle(LifetimeOracle { sigma, tau });
    vec![
        Policy::Online(Rule::FirstFit),
        Policy::Online(Rule::BestFit),
        split(2),
        split(4),
        split(8),
        Policy::Online(Rule::TwoEnded { threshold: 4 * MIB }),
        oracle(0.0, 0.3),
        oracle(0.25, 0.3),
        oracle(1.0, 1.0),
    ]
}

/// One row of the table: a label and one value per seed, in seed order.
#[derive(Clone, Debug)]
pub struct Row {
    /// What the row measures.
    pub label: String,
    /// Utilisation per seed.
    pub per_seed: Vec<f64>,
}

impl Row {
    /// Mean, min and max over the seeds.
    pub fn spread(&self) -> SeedSpread {
        SeedSpread::of(&self.per_seed)
    }
}

/// Runs the whole study on `cases`: the compaction ceiling, every policy of
/// [`study_policies`], then each policy's per-state ceiling. `progress` is called with each
/// policy's label before it runs.
pub fn study(cases: &[Case], mut progress: impl FnMut(&str)) -> Vec<Row> {
    let mut rows = vec![Row {
        label: "compaction ceiling (fail iff a request exceeds the total free bytes)".into(),
        per_seed: cases.iter().map(|c| compaction_ceiling(&c.trace)).collect(),
    }];
    let mut ceilings = Vec::new();
    for policy in study_policies() {
        let label = policy.name();
        progress(&label);
        let runs: Vec<PolicyRun> = cases.iter().map(|c| run_policy(c, policy)).collect();
        rows.push(Row {
            label: label.clone(),
            per_seed: runs.iter().map(|r| r.utilisation).collect(),
        });
        ceilings.push(Row {
            label: format!("per-state ceiling after the churn of: {label}"),
            per_seed: runs.iter().map(|r| r.state_ceiling).collect(),
        });
    }
    rows.extend(ceilings);
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{measure, FirstFitRef, KIB};

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
        assert_eq!(
            p.last_fit(8 * KIB),
            Some(56 * KIB),
            "top of the highest range"
        );
        assert_eq!(p.last_fit(16 * KIB), Some(48 * KIB));
        assert_eq!(p.last_fit(33 * KIB), None);
        p.give(16 * KIB, 32 * KIB);
        assert_eq!(p.lengths(), [60 * KIB], "merged with both neighbours");
        p.give(0, 4 * KIB);
        assert_eq!(p.iter().collect::<Vec<_>>(), [(0, 64 * KIB)]);
    }

    #[test]
    fn study_first_fit_agrees_with_first_fit_ref() {
        let case = Case::generate(TraceSpec::trace_a(3000));
        let study = run_policy(&case, Policy::Online(Rule::FirstFit));
        let reference = measure(FirstFitRef::new(case.trace.spec.capacity), &case.trace, 1);
        assert_eq!(study.utilisation, reference.utilisation_at_first_failure);
        assert_eq!(study.churn_failures, reference.failures);
        assert!(study.utilisation <= study.state_ceiling);
        assert!(study.state_ceiling <= compaction_ceiling(&case.trace));
    }

    #[test]
    fn cut_ceiling_counts_large_requests_against_large_holes() {
        let cap = 100 * MIB;
        // 8 MiB free in two 4 MiB holes: a 6 MiB request cannot be placed although 8 MiB is
        // free, so nothing of the fill fits; with one 8 MiB hole the first two requests do.
        let fill = [(6 * MIB, 64), (2 * MIB, 64), (MIB, 64)];
        assert_eq!(cut_ceiling(&[4 * MIB, 4 * MIB], &fill, 0, cap), 0.0);
        assert_eq!(cut_ceiling(&[8 * MIB], &fill, 0, cap), 0.08);
    }

    #[test]
    fn deaths_cover_every_block_in_time_order() {
        let case = Case::generate(TraceSpec::trace_a(2000));
        let t = &case.trace;
        let ops = (t.warmup.len() + t.churn.len()) as u64;
        for (now, op) in (0u64..).zip(t.warmup.iter().chain(&t.churn)) {
            match *op {
                Op::Alloc { id, .. } => assert!(case.deaths[id as usize] > now),
                Op::Free { id } => assert_eq!(case.deaths[id as usize], now),
            }
        }
        assert!(
            case.deaths.iter().any(|&d| d >= ops),
            "some die after the churn"
        );
    }
}
