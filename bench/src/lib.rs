//! # nrt-bench
//!
//! The carve allocator ([`nrt_core::carve`], public ABI §3 "How the driver carves memory")
//! against the crates `offset-allocator` 0.2 and `range-alloc` 0.1, on identical pre-generated
//! traces. What is measured and why is in `docs/PERFORMANCE.md`; the `nrt-bench` binary prints
//! the numbers as one JSON object.
//!
//! Unit mapping (each allocator in its natural granularity, same byte-sized requests):
//!
//! * carve: bytes, granule [`CARVE_GRANULE`] (4 KiB, the driver's page, like offset-allocator's
//!   unit) for the headline figures and [`CARVE_FINE_GRANULE`] (64 B) for a second figure in
//!   which the trace's 64 B–4 KiB alignments are honoured natively (head fragments split off);
//! * offset-allocator: `u32` units of [`OFFSET_UNIT`] (4 KiB; 16 GiB = 4 Mi units). Sizes are
//!   rounded up to whole units; every unit offset is 4 KiB-aligned, which satisfies every
//!   alignment of the traces (≤ 4 KiB) — the crate has no alignment parameter;
//! * range-alloc: bytes, `allocate_range_aligned` (best fit over a sorted `Vec` of free
//!   ranges).

use std::time::Instant;

use nrt_core::carve::{Carve, CarveId, Policy};
use nrt_core::LogicalCore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub mod capi;
pub mod neff;
pub mod placement;

mod allocators;
mod host_mem;
mod measure;
mod paths;
#[cfg(test)]
mod tests;
mod trace;

pub use allocators::*;
pub use host_mem::*;
pub use measure::*;
pub use paths::*;
pub use trace::*;

use placement::FreeRanges;

/// KiB.
pub const KIB: u64 = 1024;
/// MiB.
pub const MIB: u64 = 1024 * KIB;
/// GiB.
pub const GIB: u64 = 1024 * MIB;
/// The simulated HBM channel every trace runs on.
pub const CHANNEL: u64 = 16 * GIB;
/// Carve granule of the headline figures: the driver's page (public ABI §3: requests are
/// rounded up to the page size), the same 4 KiB as offset-allocator's unit. Alignments of the
/// traces (≤ 4 KiB) are then free; [`CARVE_FINE_GRANULE`] is measured as well so the aligned
/// path (head fragments split off) is covered.
pub const CARVE_GRANULE: u64 = 4096;
/// The fine granule of the secondary carve figure: alignments 64 B–4 KiB need real work.
pub const CARVE_FINE_GRANULE: u64 = 64;
/// Bytes per offset-allocator unit.
pub const OFFSET_UNIT: u64 = 4 * KIB;
/// Carve node capacity for the benchmark (≥ 2 × 68 k live allocations + slack).
pub const CARVE_NODES: usize = 1 << 18;
/// offset-allocator `max_allocs` for the benchmark (its node count; same bound as carve's).
pub const OFFSET_MAX_ALLOCS: u32 = 1 << 18;
/// Block size of the exact-reuse test: 300 KiB, not a power of two, a whole number of 4 KiB
/// units, and not on a size-class boundary of either TLSF.
pub const REUSE_BLOCK: u64 = 300 * KIB;
