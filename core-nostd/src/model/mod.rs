//! Many models on one core (spec §4, §5): handle minting, the per-core `model_db`, load
//! (`vtpb_info_shared_init_vtpb` + `kbl_model_add`), remove-then-drain, `model_free`, and the
//! exec seam that serialises executions per core.
//!
//! This file holds the handle counter, the drain and the model's request and report types;
//! the other jobs have a file each: `load` (load, rollback, unload and free), `db` (the
//! per-core `model_db` and the lookups and queries over it), `exec` (the exec seam and the
//! IO an execution binds) and `sbuf` (the SBUF carveout, spec §8).
//!
//! No `unsafe` here or in the sub-modules but `access`: the model's raw memory — the
//! core's `model_db` behind `model_db_lock`, `model_t` slots, their IO tables, mem_ref sets
//! and cleanup records, `h_running_model` — is reached through the accessors of
//! `access` (see docs/UNSAFE.md). The domain's pool of arenas and the IO table entries are
//! declared with the state block, in `ctx/state/model.rs`.
#![deny(unsafe_code)]

// The domain's raw accessors: the one file of the domain where `unsafe` is allowed, each
// block argued (docs/UNSAFE.md).
#[allow(unsafe_code)]
pub(crate) mod access;
mod db;
mod exec;
mod load;
mod sbuf;
mod view;

pub(crate) use crate::ctx::state::model::ModelIoEntry;
pub use crate::ctx::state::model::{IO_CHUNK, IO_DIMS_MAX, IO_NAME_MAX};
pub use exec::ExecGuard;
pub use load::name_key;
pub use sbuf::SbufCarveout;
pub use view::Models;

use core::sync::atomic::{AtomicU32, Ordering};

use crate::abi::*;
use crate::loom::Atomic;
use crate::ulib::UlibRequest;
use crate::vcore::LogicalCore;

/// `last_model_handle.50`: the process-global handle counter (spec §4.2). libnrt's counter is
/// 64 bits wide (`lock xadd %rax`) and its low 32 bits become `H_MODEL.id`; this one is the id's
/// own width, so the "0 is skipped" rule also holds at every 2^32-th handle, where libnrt's
/// truncation would hand out 0 (the spec's stated intent, §4.2, is that 0 is never a handle).
static LAST_MODEL_HANDLE: AtomicU32 = AtomicU32::new(0);

/// `tdrv_get_unique_h_model` over a given counter: `++counter`, bumped again when the
/// increment wraps to 0 (handle 0 is reserved, spec §4.2). Generic over the loom facade
/// ([`crate::loom::Atomic`]), so loom checks this very function (`tests/loom.rs`).
pub fn mint_handle<C: Atomic<Int = u32>>(counter: &C) -> u32 {
    let incr = || counter.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
    let mut h = incr();
    while h == constants::MODEL_HANDLE_RESERVED {
        h = incr();
    }
    h
}

/// `tdrv_get_unique_h_model` (spec §4.2): unique across every core and model of the process,
/// never 0.
pub fn tdrv_get_unique_h_model() -> H_MODEL {
    H_MODEL {
        id: mint_handle(&LAST_MODEL_HANDLE),
    }
}

/// Sets the process-global counter (tests of the wrap-around only; feature `test-hooks`).
#[cfg(any(test, feature = "test-hooks"))]
pub fn set_last_model_handle_for_test(v: u32) {
    LAST_MODEL_HANDLE.store(v, Ordering::SeqCst);
}

/// Waits until `ref_count` reaches zero, calling `relax` between looks: the drain of
/// `remove_model` (spec §4.5: `while (ref_count != 0) _mm_pause()`).
/// Generic over the loom facade ([`crate::loom::Atomic`]), so loom checks this very function.
pub fn drain_with<R: Atomic<Int = u64>>(ref_count: &R, relax: impl FnMut(u32)) {
    crate::sync::wait_until(|| ref_count.load(Ordering::Acquire) == 0, relax)
}

/// [`drain_with`] bounded by the integrator's wait hook (`crate::sync::wait_bounded`):
/// `Timeout(what)` when it gives up.
pub fn drain_bounded(
    ref_count: &crate::atomic::AtomicU64,
    what: crate::sync::WaitFor,
) -> crate::error::Result<()> {
    crate::sync::wait_bounded(what, || ref_count.load(Ordering::Acquire) == 0)
}

/// One allocation a model makes at load (a NEFF's memory request; the manifest's
/// `allocations[]`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ModelAlloc<'a> {
    /// What the allocation is for (spec §3.3): one of 0..=21; `DMA_MEM_USAGE_TYPE_MAX` (the
    /// ledger's total column) is refused with `InvalidUsage`.
    pub usage: dma_mem_usage_type_t,
    /// Where it goes: HOST_DRAM or TONGA_DRAM; `DMA_MEM_LOC_INVALID` is refused with
    /// `InvalidLocation`.
    pub location: dma_mem_location_t,
    /// Bytes.
    pub size: u64,
    /// Alignment (0 = none).
    pub align: u64,
    /// Name (kept as the dmem hint and the mem_ref_set key).
    pub hint: &'a str,
}

/// A declared input or output tensor: what `nrt_get_model_tensor_info` reports for it
/// (public `nrt_experimental.h` `nrt_tensor_info_t`: name, size, dtype, shape; the usage
/// follows from the list it is in).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TensorDecl<'a> {
    /// Name: 1..=[`IO_NAME_MAX`] bytes (the longest name a tensor set binds).
    pub name: &'a str,
    /// Bytes.
    pub size: u64,
    /// Element type: the public `nrt_dtype_t` value (0, `NRT_DTYPE_UNKNOWN`, when not
    /// known). Kept as given: the core does not interpret it.
    pub dtype: u32,
    /// Dimensions, outermost first (at most [`IO_DIMS_MAX`]; empty when not known).
    pub shape: &'a [u32],
}

impl<'a> TensorDecl<'a> {
    /// A tensor of `size` bytes with no element type or shape declared.
    pub const fn new(name: &'a str, size: u64) -> Self {
        TensorDecl {
            name,
            size,
            dtype: 0,
            shape: &[],
        }
    }
}

/// Whether a declared tensor is read or written by the model (`nrt_tensor_usage_t`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum IoUsage {
    /// `NRT_TENSOR_USAGE_INPUT` (0).
    Input = 0,
    /// `NRT_TENSOR_USAGE_OUTPUT` (1).
    Output = 1,
}

/// One declared input or output of a resident model, as
/// [`Models::for_each_io`](crate::model::Models::for_each_io) lends it (borrowed from the
/// model's IO table while the call holds a reference on the model).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ModelIo<'s> {
    /// Name.
    pub name: &'s str,
    /// Input or output.
    pub usage: IoUsage,
    /// Bytes.
    pub size: u64,
    /// `nrt_dtype_t` value as declared (0: unknown).
    pub dtype: u32,
    /// Dimensions as declared.
    pub shape: &'s [u32],
}

/// What a model needs: the no_std form of a model manifest (the NEFF stand-in).
#[derive(Copy, Clone, Debug, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ModelSpec<'a> {
    /// Model name.
    pub name: &'a str,
    /// Subgraphs (≥ 1); subgraph `s` is staged on physical core `s % LNC size`.
    pub subgraphs: u32,
    /// Allocations, made once per subgraph in that subgraph's MODEL heap; or, when
    /// `subgraph_ends` is given, every subgraph's own list one after the other.
    pub allocations: &'a [ModelAlloc<'a>],
    /// When subgraphs book different allocations (a NEFF's `sgNN/def.json` each list their
    /// own vars): for each subgraph, the end of its list in `allocations` (subgraph `s` makes
    /// `allocations[ends[s-1]..ends[s]]`). Empty: every subgraph makes all of `allocations`.
    pub subgraph_ends: &'a [usize],
    /// GPSIMD libraries (spec §6), staged on SUNDA.
    pub gpsimd_libs: Option<UlibRequest>,
    /// Scratchpad bytes (spec §8), claimed as shared pages on the first core.
    pub scratchpad_bytes: u64,
    /// SBUF carveout, validated on CAYMAN.
    pub sbuf_carveout: Option<SbufCarveout>,
    /// Inputs.
    pub inputs: &'a [TensorDecl<'a>],
    /// Outputs.
    pub outputs: &'a [TensorDecl<'a>],
}

impl<'a> ModelSpec<'a> {
    /// The allocations subgraph `s` makes: its own list (`subgraph_ends`), or the shared one.
    /// Empty for an index or range the spec does not hold (the load refuses such a spec).
    pub fn subgraph_allocations(&self, s: usize) -> &'a [ModelAlloc<'a>] {
        if self.subgraph_ends.is_empty() {
            return self.allocations;
        }
        let start = match s {
            0 => 0,
            _ => self.subgraph_ends.get(s - 1).copied().unwrap_or(usize::MAX),
        };
        let end = self.subgraph_ends.get(s).copied().unwrap_or(0);
        self.allocations.get(start..end).unwrap_or(&[])
    }
}

/// A resident model's memory footprint.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ModelInfo {
    /// Handle.
    pub handle: u32,
    /// Logical core (spec §9).
    pub vnc: LogicalCore,
    /// dmems in its MODEL heaps.
    pub allocations: u64,
    /// Bytes in its MODEL heaps (device + host).
    pub bytes: u64,
    /// Device bytes per usage type in its MODEL heaps.
    pub by_usage: [u64; 23],
    /// Scratchpad pages it holds.
    pub scratchpad_pages: u32,
    /// Whether it uses the core's shared ext-isa copy.
    pub shared_ulib: bool,
    /// Subgraphs.
    pub subgraphs: u32,
    /// Current users (executions in flight).
    pub ref_count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_counter_skips_zero_on_wrap() {
        let c = AtomicU32::new(u32::MAX - 1);
        assert_eq!(mint_handle(&c), u32::MAX);
        assert_eq!(mint_handle(&c), 1, "0 is reserved: the wrap bumps again");
        assert_eq!(mint_handle(&c), 2);
    }
}
