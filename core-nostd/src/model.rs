//! Many models on one core (spec §4, §5): handle minting, the per-core `model_db`, load
//! (`vtpb_info_shared_init_vtpb` + `kbl_model_add`), remove-then-drain, `model_free`, and the
//! exec seam that serialises executions per core.
// Pointer arguments of this module's safe API are arena handles (`dmem_t`, allocator,
// tensor slots): each is checked with `Arena::is_live` before it is dereferenced, so a
// stale or foreign pointer is an error, not undefined behaviour.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use core::ptr::{addr_of_mut, null_mut};
use core::sync::atomic::{AtomicU32, Ordering};

use crate::abi::tables::{category_for, CATEGORY_INVALID};
use crate::abi::*;
use crate::arena::GiveBack;
use crate::config::{MAX_SUBGRAPHS, MEM_REF_NAME_LEN_MAX};
use crate::cstr::{c_name, copy_c_name};
use crate::ctx::{MemRefSet, Nrt};
use crate::dmem::AllocArgs;
use crate::error::{Error, Result};
use crate::handle::{HandleKind, ModelHandle};
use crate::ht;
use crate::loom::Atomic;
use crate::sync::{relax, MutexGuard};
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

/// Sets the process-global counter (tests of the wrap-around only).
#[doc(hidden)]
pub fn set_last_model_handle_for_test(v: u32) {
    LAST_MODEL_HANDLE.store(v, Ordering::SeqCst);
}

/// Waits until `ref_count` reaches zero, calling `relax` between looks: the drain of
/// `remove_model` (spec §4.5: `while (ref_count != 0) _mm_pause()`).
/// Generic over the loom facade ([`crate::loom::Atomic`]), so loom checks this very function.
pub fn drain_with<R: Atomic<Int = u64>>(ref_count: &R, relax: impl FnMut(u32)) {
    crate::sync::wait_until(|| ref_count.load(Ordering::Acquire) == 0, relax)
}

/// [`drain_with`] that spins, then relaxes through the integrator's hook (the std shim yields
/// the thread, so a long drain does not burn a core).
pub fn drain(ref_count: &core::sync::atomic::AtomicU64) {
    drain_with(ref_count, relax)
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

/// Longest declared input / output name (bytes, excluding the NUL): the longest name a
/// tensor set can bind ([`crate::tensor::TENSOR_NAME_MAX`]). `nrt_tensor_info_t.name` holds
/// 255, but a model with a longer name could never be executed, so it is refused at load.
pub const IO_NAME_MAX: usize = crate::tensor::TENSOR_NAME_MAX;

/// Most dimensions of a declared tensor (the NEFF reader's `MAX_DIMS`, neff-format §6).
pub const IO_DIMS_MAX: usize = 32;

/// Whether a declared tensor is read or written by the model (`nrt_tensor_usage_t`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum IoUsage {
    /// `NRT_TENSOR_USAGE_INPUT` (0).
    Input = 0,
    /// `NRT_TENSOR_USAGE_OUTPUT` (1).
    Output = 1,
}

/// One declared input or output of a resident model, as [`Nrt::for_each_model_io`] lends
/// it (borrowed from the model's IO table while the call holds a reference on the model).
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

/// The SBUF carveout a NEFF reserves (spec §8).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SbufCarveout {
    /// Raw `kbin_sb_carveout_type_t`.
    pub ty: u32,
    /// First partition.
    pub partition_start: u64,
    /// Partitions.
    pub partition_count: u64,
    /// SB partition byte offset.
    pub offset: u64,
    /// Size.
    pub size: u64,
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

/// Executing: holds the model reference and every physical core's exec lock (spec §4.6).
pub struct ExecGuard<'a> {
    model: *mut model_t,
    tpbs: [*mut tpb_t; 2],
    _locks: [Option<MutexGuard<'a>>; 2],
}

// SAFETY: the guard holds spin locks (releasable from any thread) and raw pointers into the
// context tree, which is Sync; dropping it on another thread is what an async completion does.
unsafe impl Send for ExecGuard<'_> {}

impl ExecGuard<'_> {
    /// The model being executed.
    pub fn model(&self) -> &model_t {
        // SAFETY: the guard holds a reference: the model cannot be freed meanwhile.
        unsafe { &*self.model }
    }
}

impl Drop for ExecGuard<'_> {
    fn drop(&mut self) {
        for t in self.tpbs.iter().filter(|t| !t.is_null()) {
            // SAFETY: resolved core whose exec lock we hold.
            unsafe { (**t).h_running_model = H_MODEL { id: 0 } };
        }
        // The exec locks go first, the model reference last: once the reference is dropped,
        // `close` may finish and a later `init` rewrite the cores (their locks included), so
        // nothing of the runtime is touched after it.
        for l in &mut self._locks {
            drop(l.take());
        }
        // SAFETY: we took this reference in exec_begin.
        unsafe { (*self.model).ref_count.fetch_sub(1, Ordering::AcqRel) };
    }
}

/// A model under construction; `Drop`-free so rollback is explicit.
/// One declared input or output of a resident model: what `nrt_get_model_tensor_info`
/// returns for it (a NEFF's `neff.json` row, a manifest's tensor). `model_t` has no gap large
/// enough for the table, so it lives beside the model arena, one table per slot
/// (`CoreState::model_io`). Valid when all-zero.
#[repr(C)]
pub(crate) struct ModelIoEntry {
    pub(crate) size: u64,
    pub(crate) dtype: u32,
    pub(crate) ndim: u32,
    pub(crate) shape: [u32; IO_DIMS_MAX],
    pub(crate) name: [u8; IO_NAME_MAX + 1],
}

/// IO entries per model (inputs then outputs).
pub(crate) const MODEL_IO_MAX: usize = 32;

/// A model slot's IO table.
pub(crate) type ModelIoTable = [ModelIoEntry; MODEL_IO_MAX];

struct Building {
    model: *mut model_t,
    tpbs: [*mut tpb_t; MAX_SUBGRAPHS],
    sp_tpb: *mut tpb_t,
    sp_pages: u32,
    ulib: *mut ucode_lib_set_info_t,
    ulib_shared: bool,
    /// This load staged the core's shared ext-isa copy (rather than finding it cached).
    ulib_staged_now: bool,
    ulib_tpb: *mut tpb_t,
}

/// FNV-1a of a name: the mem_ref_set key.
pub const fn name_key(s: &str) -> u64 {
    let b = s.as_bytes();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < b.len() {
        h ^= b[i] as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
        i += 1;
    }
    h
}

impl<'a> Nrt<'a> {
    /// The IO table of model slot `m` (of this runtime's model arena; a pointer the arena does
    /// not own yields the last slot's table, which no caller reaches: they pass live models).
    pub(crate) fn model_io_table(&self, m: *mut model_t) -> *mut ModelIoTable {
        self.st.models.side_entry(&self.st.model_io, m)
    }

    /// The scratchpad claim a cleanup record describes: `(its core, pages)`, or `None` for no
    /// record or no pages. The record keeps libnrt's members (`pcores[0]`, `sizes[0]`) and
    /// the page count follows from the core's page size.
    pub(crate) fn cleanup_claim(
        &self,
        c: *const tdrv_scratchpad_cleanup_info_t,
    ) -> Option<(*mut tpb_t, u32)> {
        // SAFETY: a cleanup record lives as long as the model that points at it.
        let c = unsafe { c.as_ref() }?;
        let (d, t) = self.tree_pcore(c.pcores[0])?;
        let tpb = self.tpb(d, t).ok()?;
        // SAFETY: resolved tpb; page_size is fixed at bring-up.
        let ps = unsafe { (*tpb).scratchpad.page_size }.max(1);
        let pages = u32::try_from(c.sizes[0] / ps).ok()?;
        (c.num_entries > 0 && pages > 0).then_some((tpb, pages))
    }

    /// Validates a spec before anything is allocated.
    fn check_spec(&self, spec: &ModelSpec<'_>, arch: al_hal_tpb_arch_type_t) -> Result<()> {
        if spec.name.is_empty() {
            return Err(Error::InvalidModel("name is empty"));
        }
        if spec.subgraphs == 0 {
            return Err(Error::InvalidModel("subgraphs must be at least 1"));
        }
        if spec.subgraphs as usize > MAX_SUBGRAPHS {
            return Err(Error::InvalidModel("more than 8 subgraphs"));
        }
        if spec.inputs.len() + spec.outputs.len() > MODEL_IO_MAX {
            return Err(Error::InvalidModel("more than 32 inputs + outputs"));
        }
        for t in spec.inputs.iter().chain(spec.outputs.iter()) {
            if t.name.is_empty() || t.name.len() > IO_NAME_MAX {
                return Err(Error::InvalidModel("tensor names must be 1..=95 bytes"));
            }
            if t.size == 0 {
                return Err(Error::InvalidModel("tensor size must be > 0"));
            }
            if t.shape.len() > IO_DIMS_MAX {
                return Err(Error::InvalidModel("a tensor has more than 32 dimensions"));
            }
        }
        let ends = spec.subgraph_ends;
        if !ends.is_empty()
            && (ends.len() != spec.subgraphs as usize
                || ends.windows(2).any(|w| w[0] > w[1])
                || ends.last() != Some(&spec.allocations.len()))
        {
            return Err(Error::InvalidModel(
                "subgraph_ends must give one non-decreasing end per subgraph, the last at the \
                 end of allocations",
            ));
        }
        for a in (0..spec.subgraphs as usize).flat_map(|s| spec.subgraph_allocations(s)) {
            if a.hint.len() > MEM_REF_NAME_LEN_MAX {
                return Err(Error::InvalidModel("allocation hint longer than 47 bytes"));
            }
            let loc = Some(a.location)
                .filter(|l| *l != dma_mem_location_t::DMA_MEM_LOC_INVALID)
                .ok_or(Error::InvalidLocation(a.location as u32))?;
            let usage = Some(a.usage)
                .filter(|u| *u != dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_MAX)
                .ok_or(Error::InvalidUsage(a.usage as u32))?;
            if category_for(loc, usage) == CATEGORY_INVALID {
                return Err(Error::UsageInvalidForLocation { usage, loc });
            }
            if a.size == 0 {
                return Err(Error::ZeroSize);
            }
            if a.align != 0 && !a.align.is_power_of_two() {
                return Err(Error::BadAlignment(a.align));
            }
        }
        // The library cap belongs to ucode_stage_libs, which runs on SUNDA only (spec §6); it
        // is checked up front there so a refused load allocates nothing. Elsewhere the
        // libraries are ignored, whatever their number.
        if let Some(l) = spec.gpsimd_libs {
            if arch == al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_SUNDA {
                if l.count as usize > constants::ULIB_MAX_LIBS {
                    return Err(Error::TooManyLibs(l.count));
                }
                if l.count > 0 {
                    l.lib_bytes()?;
                }
            }
        }
        if arch == al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_CAYMAN {
            if let Some(c) = spec.sbuf_carveout {
                // kbl_model_add's EVTACCEL geometry checks (spec §8).
                if c.ty != kbin_sb_carveout_type_t::KBIN_SB_CARVEOUT_TYPE_EVTACCEL as u32 {
                    return Err(Error::BadCarveout("type must be EVTACCEL (1)"));
                }
                if c.partition_start != constants::EVTACCEL_PARTITION_START {
                    return Err(Error::BadCarveout("partition start must be 0"));
                }
                if c.partition_count != constants::EVTACCEL_PARTITION_COUNT {
                    return Err(Error::BadCarveout("partition count must be 128"));
                }
                if c.offset != constants::EVTACCEL_PARTITION_BYTE_OFFSET {
                    return Err(Error::BadCarveout(
                        "SB partition byte offset must be 0x37ff8",
                    ));
                }
                if c.size != constants::EVTACCEL_SIZE {
                    return Err(Error::BadCarveout("size must be 8"));
                }
            }
        }
        Ok(())
    }

    /// Device bytes booked to a logical core (the "mem_usage before/after" of §5.3).
    fn vnc_device_bytes(&self, vnc: LogicalCore) -> u64 {
        // Ungated: this runs inside `load_model`'s own gated call, which a racing `close`
        // waits for.
        self.vnc_memory_stats(vnc)
            .map(|s| s.bytes_used)
            .unwrap_or(0)
    }

    /// Loads a model onto logical core `vnc` (spec §5): builds one MODEL heap per subgraph in
    /// an mr_set slot and moves it into the `model_t` (zeroing the slot), validates the SBUF
    /// carveout on CAYMAN, makes the allocations, claims scratchpad pages, stages GPSIMD
    /// libraries on SUNDA, and `add_model`s it. All-or-nothing: on any failure the ledger's
    /// bytes, every allocator and every arena's slots are as before. The model's own heaps go
    /// straight back, not through the quarantines (nobody saw them); scratchpad pages and the
    /// shared ext-isa copy, which others could see once claimed, go through them. High-water marks — the ledger's
    /// peaks, an arena's peak — may remember the attempt, as the driver's peak counters do.
    pub fn load_model(&self, vnc: LogicalCore, spec: &ModelSpec<'_>) -> Result<ModelHandle> {
        let _call = self.enter()?;
        let v = *self.vtpb_get_virtual_core(vnc)?;
        let g = self.dev_geom(v.tpbs[0].device_id);
        let arch = g.arch();
        self.check_spec(spec, arch)?;
        let before = self.vnc_device_bytes(vnc);
        let model = self.st.models.alloc("model_t")?.as_ptr();
        let mut b = Building {
            model,
            tpbs: [null_mut(); MAX_SUBGRAPHS],
            sp_tpb: null_mut(),
            sp_pages: 0,
            ulib: null_mut(),
            ulib_shared: false,
            ulib_staged_now: false,
            ulib_tpb: null_mut(),
        };
        match self.load_into(&mut b, &v, spec, arch, vnc, before) {
            Ok(h) => Ok(ModelHandle::from_parts(
                vnc.index().unwrap_or(u32::MAX),
                h.id,
                self.epoch(),
            )),
            Err(e) => {
                self.rollback(&b);
                Err(e)
            }
        }
    }

    fn load_into(
        &self,
        b: &mut Building,
        v: &virtual_core_t,
        spec: &ModelSpec<'_>,
        arch: al_hal_tpb_arch_type_t,
        vnc: LogicalCore,
        before: u64,
    ) -> Result<H_MODEL> {
        let m = b.model;
        let lnc = v.num_tpbs.max(1);
        // vtpb_info_shared_init_vtpb (§5.2) + the ownership move of kbl_model_add (§5.3): each
        // subgraph's mr_set (MODEL allocator, 1024-bucket mem_ref_set, gc_tracker; the cleanup
        // record once per model) is built straight into the model_t's per-subgraph slots.
        // libnrt builds them in shared `vtpb_info_shared_mr_set_t` slots and then moves them
        // out, zeroing the slot; a load here builds its own, so there is no shared slot to zero.
        for s in 0..spec.subgraphs as usize {
            let pc = &v.tpbs[s % lnc as usize];
            let tpb = self.tpb(pc.device_id, pc.device_tpb_idx)?;
            b.tpbs[s] = tpb;
            // Each piece is stored in the model the moment it exists, so rollback finds it.
            // SAFETY: tpb resolved (its `pcore` lives as long as the context); `m` is our fresh,
            // unpublished model slot.
            unsafe {
                (*m).sg_allocators[s] = self.dmem_allocator_create_inner(
                    self.pcore_ptr(pc.device_id, pc.device_tpb_idx),
                    dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_MODEL,
                )?;
                let set = self.st.mem_ref_sets.alloc("mem_ref_set")?.as_ptr();
                ht::ht_init(addr_of_mut!((*set).hdr), constants::MEM_REF_SET_BUCKETS);
                (*m).sg_mem_ref_sets[s] = addr_of_mut!((*set).hdr);
                (*m).sg_gc_trackers[s] = self.dmem_list_new()?;
            }
        }
        // SAFETY: our model slot; subgraph 0's slots were filled above (subgraphs >= 1).
        unsafe {
            (*m).scratchpad_cleanup_info = self
                .st
                .sp_cleanup
                .alloc("scratchpad_cleanup_info_t")?
                .as_ptr();
            (*m).dmem_allocator = (*m).sg_allocators[0];
            (*m).mem_ref_set = (*m).sg_mem_ref_sets[0];
            (*m).gc_tracker = (*m).sg_gc_trackers[0];
        }
        // SBUF EVTACCEL (§8): validated in check_spec; here the model flags.
        if arch == al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_CAYMAN {
            if spec.sbuf_carveout.is_some() {
                // SAFETY: our model slot.
                unsafe {
                    (*m).reset_evt_accel = 1;
                    (*m).program_fp8_cfg = 1;
                }
            } else {
                info!("model {} has no evtaccel reservation on SBUF", spec.name);
            }
        }
        // The NEFF's allocations, per subgraph, into that subgraph's MODEL heap.
        for s in 0..spec.subgraphs as usize {
            // SAFETY: our model slot; tpbs[s] resolved above.
            let (al, list, set, hbm) = unsafe {
                let hbm = self.tpb_default_hbm(b.tpbs[s]);
                (
                    (*m).sg_allocators[s],
                    (*m).sg_gc_trackers[s],
                    (*m).sg_mem_ref_sets[s],
                    hbm,
                )
            };
            for a in spec.subgraph_allocations(s) {
                let args = AllocArgs {
                    size: a.size,
                    align: a.align,
                    loc: a.location as u32,
                    hbm_idx: hbm,
                    usage: a.usage as u32,
                    hint: a.hint,
                };
                let d = self.dmem_alloc_inner(al, &args, Some(list))?;
                let node = match self.st.mem_ref_nodes.alloc("mem_ref_node") {
                    Ok(n) => n.as_ptr(),
                    Err(e) => {
                        // Just allocated by this call: seen by nobody.
                        self.dmem_release_ref(d, GiveBack::Cancel);
                        return Err(e.into());
                    }
                };
                // SAFETY: fresh node; the set is ours (not yet published).
                unsafe {
                    (*node).buf_size = a.size;
                    (*node).key_type = 1; // string key (hashed)
                    ht::ht_insert(set, name_key(a.hint), node, d as *mut core::ffi::c_void);
                }
            }
        }
        // Scratchpad pages (§8), shared on the first core.
        if spec.scratchpad_bytes > 0 {
            let tpb = b.tpbs[0];
            // SAFETY: resolved tpb.
            let ps = unsafe { (*tpb).scratchpad.page_size.max(1) };
            let (dev, idx) = self.tpb_coords(tpb);
            let pages = spec.scratchpad_bytes.div_ceil(ps);
            if pages > constants::SCRATCHPAD_MAX_PAGES as u64 {
                return Err(Error::InvalidModel("scratchpad needs more than 1024 pages"));
            }
            self.scratchpad_claim(tpb, pages as u32, self.dev_geom(dev).default_hbm(idx))?;
            b.sp_tpb = tpb;
            b.sp_pages = pages as u32;
            // SAFETY: our cleanup record.
            unsafe {
                let c = (*m).scratchpad_cleanup_info;
                (*c).pcores[0] = self.pcore_ptr(dev, idx);
                (*c).sizes[0] = pages * ps;
                (*c).num_entries = 1;
                (*c).first_page = 0;
            }
        }
        // GPSIMD ext-isa staging only on SUNDA (kbl_model_add: cmp $0x2 → ucode_stage_libs).
        if let Some(req) = spec.gpsimd_libs {
            if arch == al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_SUNDA {
                let tpb = b.tpbs[0];
                // SAFETY: resolved tpb; our model.
                let (hbm, al) = (self.tpb_default_hbm(tpb), unsafe { (*m).dmem_allocator });
                b.ulib_tpb = tpb;
                let (set, shared, staged_now) = self.ucode_stage_libs(tpb, al, hbm, req)?;
                b.ulib = set;
                b.ulib_shared = shared;
                b.ulib_staged_now = staged_now;
                // SAFETY: our model.
                unsafe {
                    (*m).ulib_set_info = set;
                    (*m).ulib_is_shared = shared as u8;
                }
            } else {
                debug!(
                    "gpsimd libraries are staged only on SUNDA; ignored for {}",
                    spec.name
                );
            }
        }
        // Fill in the model and publish it.
        let h = tdrv_get_unique_h_model();
        // SAFETY: our model slot, not yet visible to anyone.
        unsafe {
            (*m).h_model = h;
            (*m).vtpb_idx = v.vtpb_idx;
            (*m).pcore = v.tpbs[0];
            (*m).num_subgraphs = spec.subgraphs;
            (*m).state = 1;
            copy_c_name(&mut (*m).name, spec.name);
            (*m).num_inputs = spec.inputs.len() as u32;
            (*m).num_outputs = spec.outputs.len() as u32;
            let io = self.model_io_table(m);
            for (i, t) in spec.inputs.iter().chain(spec.outputs.iter()).enumerate() {
                let e = &mut (*io)[i];
                e.size = t.size;
                e.dtype = t.dtype;
                e.ndim = t.shape.len() as u32;
                e.shape = [0; IO_DIMS_MAX];
                e.shape[..t.shape.len()].copy_from_slice(t.shape);
                e.name = [0; IO_NAME_MAX + 1];
                copy_c_name(&mut e.name, t.name);
            }
            (*m).mem_usage_before = before;
            (*m).mem_usage_after = self.vnc_device_bytes(vnc);
        }
        self.add_model(b.tpbs[0], m)?;
        info!(
            "Added model: {} on (nd{}:nc{}) mem_usage before {} after {}",
            h.id,
            v.tpbs[0].device_id,
            v.tpbs[0].device_tpb_idx,
            before,
            // SAFETY: published, but we still hold no lock-free mutators of this field.
            unsafe { (*m).mem_usage_after }
        );
        Ok(h)
    }

    /// Undoes a partial load.
    fn rollback(&self, b: &Building) {
        let m = b.model;
        if !b.ulib.is_null() {
            self.ucode_release(b.ulib_tpb, b.ulib, b.ulib_shared, GiveBack::Cancel);
        }
        // Unstage the shared copy only if this load staged it: a copy that was cached before
        // the call (kept after its last user unloaded) stays, so the rollback leaves the core
        // as it found it. A failed first staging cached nothing (stage_once stores only on
        // success), and a copy another load started using meanwhile is not unused.
        if !b.ulib_tpb.is_null() && b.ulib_shared && b.ulib_staged_now {
            // Release, not Cancel: once staged, the shared copy was in the core's cache (and
            // on its GLOBAL allocator's list), where others could see it.
            self.ulib_unstage_if_unused(b.ulib_tpb, GiveBack::Release);
        }
        if b.sp_pages > 0 {
            // Release, not Cancel: claimed pages are in the core's shared page table (and on
            // its GLOBAL allocator's list), where other loads and callers can see them.
            self.scratchpad_release(b.sp_tpb, b.sp_pages, GiveBack::Release);
        }
        self.free_model_heaps(m, GiveBack::Cancel);
        // The handle was never returned: the slot goes back as if the load never started.
        let _ = self.st.models.cancel(m);
    }

    /// Frees a model's per-subgraph heaps, mem_ref sets, gc trackers and cleanup record.
    /// `how`: [`GiveBack::Release`] at unload; [`GiveBack::Cancel`] when a failed load rolls
    /// back (nobody saw its heaps, so their slots need not wait out the quarantines).
    fn free_model_heaps(&self, m: *mut model_t, how: GiveBack) {
        for s in 0..MAX_SUBGRAPHS {
            // SAFETY: the model is unpublished or drained: we are its only user.
            unsafe {
                let set = (*m).sg_mem_ref_sets[s];
                if !set.is_null() {
                    ht::for_each(set, |n| {
                        let _ = self.st.mem_ref_nodes.give_back(n, how);
                    });
                    let _ = self.st.mem_ref_sets.give_back(set as *const MemRefSet, how);
                }
                let al = (*m).sg_allocators[s];
                if !al.is_null() {
                    // One call reclaims the subgraph's whole footprint (§5.4).
                    let _ = self.dmem_allocator_destroy_inner(al, how);
                }
                self.dmem_list_destroy((*m).sg_gc_trackers[s], how);
            }
        }
        // SAFETY: as above.
        unsafe {
            let c = (*m).scratchpad_cleanup_info;
            if !c.is_null() {
                let _ = self.st.sp_cleanup.give_back(c, how);
            }
        }
    }

    /// `add_model` (spec §4.3): links the model into the core's `model_db` through its embedded
    /// node; a handle already present is `DuplicateModel` (NRT_INVALID_HANDLE); a core torn
    /// down by `close` (null table) is `Closed`, and the caller rolls the load back.
    fn add_model(&self, tpb: *mut tpb_t, m: *mut model_t) -> Result<()> {
        // SAFETY: resolved tpb; model_db guarded by model_db_lock, checked non-null under it.
        unsafe {
            let _g = (*tpb).model_db_lock.lock();
            if (*tpb).model_db.is_null() {
                return Err(Error::Closed);
            }
            let id = (*m).h_model.id as u64;
            // ht_find != 0 means "absent, safe to insert" (spec §4.3 QUIRK).
            if ht::ht_find((*tpb).model_db, id, None) != 0 {
                ht::ht_insert(
                    (*tpb).model_db,
                    id,
                    addr_of_mut!((*m).ht_node),
                    m as *mut core::ffi::c_void,
                );
                Ok(())
            } else {
                Err(Error::DuplicateModel((*m).h_model.id))
            }
        }
    }

    /// container_of(node) → model (ht_node at model_t+7496, spec §4.4).
    fn model_of(node: *mut ht_node_t) -> *mut model_t {
        (node as *mut u8).wrapping_sub(core::mem::offset_of!(model_t, ht_node)) as *mut model_t
    }

    /// Resolves the core part of a model handle: its epoch must be this runtime's, and its
    /// logical core one this runtime owns (whose first physical core's `model_db` holds the
    /// model: no scan over the cores). Whether the model is still there is for the lookup
    /// under the `model_db` lock ([`Self::get_model_ref_count`], [`Self::remove_model`]).
    fn model_tpb(&self, h: ModelHandle) -> Result<(*mut tpb_t, LogicalCore)> {
        self.check_epoch(h.0, HandleKind::Model)?;
        if h.0.generation == constants::MODEL_HANDLE_RESERVED {
            return Err(Error::forged(HandleKind::Model));
        }
        let vnc = h.core();
        let v = self
            .vtpb_get_virtual_core(vnc)
            .map_err(|_| Error::forged(HandleKind::Model))?;
        let tpb = self.tpb(v.tpbs[0].device_id, v.tpbs[0].device_tpb_idx)?;
        Ok((tpb, vnc))
    }

    /// `get_model_ref_count` (spec §4.4): looks `h` up and takes a reference under the lock,
    /// so an in-flight unload cannot free it. A table torn down by `close` is `Closed`.
    fn get_model_ref_count(&self, tpb: *mut tpb_t, h: H_MODEL) -> Result<*mut model_t> {
        // SAFETY: resolved tpb; under model_db_lock, the table checked non-null under it.
        unsafe {
            let _g = (*tpb).model_db_lock.lock();
            if (*tpb).model_db.is_null() {
                return Err(Error::Closed);
            }
            let node =
                ht::find((*tpb).model_db, h.id as u64).ok_or(Error::stale(HandleKind::Model))?;
            let m = Self::model_of(node);
            (*m).ref_count.fetch_add(1, Ordering::AcqRel);
            Ok(m)
        }
    }

    /// `remove_model` (spec §4.5): unlinks `h` from the lookup first (no new execution can
    /// acquire it), then drains until every in-flight user has released it. A table torn
    /// down by `close` is `Closed`.
    fn remove_model(&self, tpb: *mut tpb_t, h: H_MODEL) -> Result<*mut model_t> {
        // SAFETY: resolved tpb; the table under model_db_lock (checked non-null under it), the
        // drain on an atomic.
        unsafe {
            let node = {
                let _g = (*tpb).model_db_lock.lock();
                if (*tpb).model_db.is_null() {
                    return Err(Error::Closed);
                }
                if ht::ht_find((*tpb).model_db, h.id as u64, None) != 0 {
                    return Err(Error::stale(HandleKind::Model));
                }
                ht::ht_remove((*tpb).model_db, h.id as u64)
            };
            let m = Self::model_of(node);
            drain(&(*m).ref_count);
            Ok(m)
        }
    }

    /// `model_free` (spec §5.4): releases the ulib set (not the shared ext-isa copy), the
    /// scratchpad claim, then destroys the MODEL heaps — one call per subgraph reclaims the
    /// whole footprint — and frees the `model_t`.
    fn model_free(&self, m: *mut model_t) {
        // SAFETY: drained and unlinked: we are the only user.
        unsafe {
            let tpb = self
                .tpb((*m).pcore.device_id, (*m).pcore.device_tpb_idx)
                .unwrap_or(null_mut());
            if !tpb.is_null() {
                self.ucode_release(
                    tpb,
                    (*m).ulib_set_info,
                    (*m).ulib_is_shared != 0,
                    GiveBack::Release,
                );
                let c = (*m).scratchpad_cleanup_info;
                if let Some((sp_tpb, pages)) = self.cleanup_claim(c) {
                    self.scratchpad_release(sp_tpb, pages, GiveBack::Release);
                }
            }
            (*m).ulib_set_info = null_mut();
        }
        self.free_model_heaps(m, GiveBack::Release);
        let _ = self.st.models.release(m);
    }

    /// Unloads `h` (`nrt_unload`): `remove_model` (waits for in-flight executions), then
    /// `model_free` (spec §4.5, §5.4). No other model's memory changes. `Closed` /
    /// `Uninitialized` outside an initialised runtime (spec §7.2 state gate). A handle
    /// already unloaded (at any age), forged, or of another runtime is
    /// [`Error::InvalidHandle`] and nothing changes; of two racing unloads of one model,
    /// exactly one unloads it.
    ///
    /// As with `close`: a thread must not unload while it holds an [`ExecGuard`] of a model on
    /// the same core. The guard holds the core's exec lock; an execution of the model being
    /// unloaded that waits for that lock already holds a model reference; and the unload
    /// waits for the model's references to go. The three would wait for each other forever.
    pub fn unload_model(&self, h: ModelHandle) -> Result<()> {
        let _call = self.enter()?;
        let (tpb, _) = self.model_tpb(h)?;
        let m = self.remove_model(tpb, h.h_model())?;
        self.model_free(m);
        Ok(())
    }

    /// Teardown: unloads every resident model.
    pub(crate) fn unload_all_models(&self) {
        for vnc in (0..self.owned_vnc_count()).map(LogicalCore::new) {
            let Ok(v) = self.vtpb_get_virtual_core(vnc) else {
                continue;
            };
            let Ok(tpb) = self.tpb(v.tpbs[0].device_id, v.tpbs[0].device_tpb_idx) else {
                continue;
            };
            loop {
                // SAFETY: resolved tpb; under model_db_lock.
                let next = unsafe {
                    let _g = (*tpb).model_db_lock.lock();
                    let mut first = None;
                    if !(*tpb).model_db.is_null() {
                        ht::for_each((*tpb).model_db, |n| {
                            if first.is_none() {
                                first = Some((*n).key as u32);
                            }
                        });
                    }
                    first
                };
                match next {
                    Some(id) => {
                        if let Ok(m) = self.remove_model(tpb, H_MODEL { id }) {
                            self.model_free(m);
                        }
                    }
                    None => break,
                }
            }
        }
    }

    /// The exec seam (spec §4.6): takes a reference on `h` (so an unload waits), then each of
    /// its physical cores' exec locks in order (one model executes at a time per core), and
    /// marks it `h_running_model`. Dropping the guard undoes all three.
    pub fn exec_begin(&self, h: ModelHandle) -> Result<ExecGuard<'a>> {
        let _call = self.enter()?;
        let (tpb0, vnc) = self.model_tpb(h)?;
        let m = self.get_model_ref_count(tpb0, h.h_model())?;
        let v = *self.vtpb_get_virtual_core(vnc)?;
        let mut g = ExecGuard {
            model: m,
            tpbs: [null_mut(); 2],
            _locks: [None, None],
        };
        for j in 0..v.num_tpbs.min(2) as usize {
            let tpb = self.tpb(v.tpbs[j].device_id, v.tpbs[j].device_tpb_idx)?;
            // SAFETY: resolved tpb that lives as long as `'a`.
            let ext = self.core_ext(v.tpbs[j].device_id, v.tpbs[j].device_tpb_idx);
            g._locks[j] = Some(ext.exec_lock.lock());
            ext.exec_count.fetch_add(1, Ordering::Relaxed);
            // SAFETY: under this core's exec lock.
            unsafe { (*tpb).h_running_model = h.h_model() };
            g.tpbs[j] = tpb;
        }
        // SAFETY: we hold a reference.
        unsafe { (*m).exec_count.fetch_add(1, Ordering::Relaxed) };
        Ok(g)
    }

    /// Footprint of a resident model (spec §4.4 lookup + reference, §5). `Closed` /
    /// `Uninitialized` outside an initialised runtime.
    pub fn model_info(&self, h: ModelHandle) -> Result<ModelInfo> {
        self.with_model(h, |m, vnc, refs| {
            let scratchpad_pages = self
                .cleanup_claim(m.scratchpad_cleanup_info)
                .map_or(0, |(_, pages)| pages);
            let mut info = ModelInfo {
                handle: h.h_model().id,
                vnc,
                scratchpad_pages,
                shared_ulib: m.ulib_is_shared != 0,
                subgraphs: m.num_subgraphs,
                ref_count: refs,
                ..Default::default()
            };
            for al in m.sg_allocators {
                self.allocator_for_each_inner(al, |d| {
                    info.allocations += 1;
                    info.bytes += d.allocated_size;
                    if d.mem_type == dma_mem_location_t::TONGA_DRAM as u32 {
                        info.by_usage[(d.mem_usage_type as usize).min(21)] += d.allocated_size;
                        info.by_usage[22] += d.allocated_size;
                    }
                });
            }
            info
        })
    }

    /// Calls `f(subgraph, dmem)` on every dmem of a resident model's MODEL heaps, one heap per
    /// subgraph (spec §5.2). `Closed` / `Uninitialized` outside an initialised runtime.
    pub fn for_each_model_dmem(
        &self,
        h: ModelHandle,
        mut f: impl FnMut(u32, &dmem_t),
    ) -> Result<()> {
        self.with_model(h, |m, _, _| {
            let n = (m.num_subgraphs as usize).min(m.sg_allocators.len());
            for (sg, al) in m.sg_allocators[..n].iter().enumerate() {
                self.allocator_for_each_inner(*al, |d| f(sg as u32, d));
            }
        })
    }

    /// Runs `f` on a resident model while holding a reference on it (so an unload waits):
    /// `f(model, logical core, references held by others)`.
    fn with_model<R>(
        &self,
        h: ModelHandle,
        f: impl FnOnce(&model_t, LogicalCore, u64) -> R,
    ) -> Result<R> {
        let _call = self.enter()?;
        let (tpb, vnc) = self.model_tpb(h)?;
        let m = self.get_model_ref_count(tpb, h.h_model())?;
        // SAFETY: we hold a reference: the model is not freed until we drop it below.
        let r = unsafe { f(&*m, vnc, (*m).ref_count.load(Ordering::Acquire) - 1) };
        // SAFETY: the reference taken above.
        unsafe { (*m).ref_count.fetch_sub(1, Ordering::AcqRel) };
        Ok(r)
    }

    /// Handles of the models resident on logical core `vnc` (the core's `model_db`, spec
    /// §4.3): writes up to `out.len()` of them and returns how many there are. `Closed` /
    /// `Uninitialized` outside an initialised runtime (the table only exists while it is).
    pub fn models_on(&self, vnc: LogicalCore, out: &mut [ModelHandle]) -> Result<usize> {
        let _call = self.enter()?;
        let v = self.vtpb_get_virtual_core(vnc)?;
        let (index, epoch) = (vnc.index().unwrap_or(u32::MAX), self.epoch());
        let tpb = self.tpb(v.tpbs[0].device_id, v.tpbs[0].device_tpb_idx)?;
        let mut n = 0;
        // SAFETY: resolved tpb; the table is read under model_db_lock, and only when teardown
        // has not cleared it (a close racing this call leaves it null).
        unsafe {
            let _g = (*tpb).model_db_lock.lock();
            if (*tpb).model_db.is_null() {
                return Err(Error::Closed);
            }
            ht::for_each((*tpb).model_db, |node| {
                if n < out.len() {
                    out[n] = ModelHandle::from_parts(index, (*node).key as u32, epoch);
                }
                n += 1;
            });
        }
        Ok(n)
    }

    /// Declared input (`output == false`) or output `i` of the model an execution holds.
    pub(crate) fn model_io<'s>(
        &self,
        g: &'s ExecGuard<'_>,
        output: bool,
        i: usize,
    ) -> Option<ModelIo<'s>> {
        let m = g.model();
        let (start, n) = if output {
            (m.num_inputs as usize, m.num_outputs as usize)
        } else {
            (0, m.num_inputs as usize)
        };
        if i >= n {
            return None;
        }
        // SAFETY: the guard holds a reference, so the model's IO entries (written before it
        // was published) are not rewritten while `'s` lives.
        unsafe { self.io_entry(m, start + i) }
    }

    /// Entry `k` of a referenced model's IO table (inputs first, then outputs).
    ///
    /// # Safety
    /// The caller holds a reference on `m` for `'s` (the table is not rewritten meanwhile).
    unsafe fn io_entry<'s>(&self, m: &'s model_t, k: usize) -> Option<ModelIo<'s>> {
        // SAFETY: caller contract; the table belongs to `m`'s slot.
        let table = unsafe { &*self.model_io_table(m as *const model_t as *mut model_t) };
        let io = table.get(k)?;
        Some(ModelIo {
            name: c_name(&io.name),
            usage: if k < m.num_inputs as usize {
                IoUsage::Input
            } else {
                IoUsage::Output
            },
            size: io.size,
            dtype: io.dtype,
            shape: &io.shape[..(io.ndim as usize).min(IO_DIMS_MAX)],
        })
    }

    /// Calls `f` on each declared input, then each output, of a resident model, in the order
    /// the model declared them: what `nrt_get_model_tensor_info` reports (name, usage, size,
    /// dtype, shape). Holds a reference on the model meanwhile (an unload waits). A stale,
    /// forged or foreign handle is [`Error::InvalidHandle`]; `Closed` / `Uninitialized`
    /// outside an initialised runtime.
    pub fn for_each_model_io(&self, h: ModelHandle, mut f: impl FnMut(&ModelIo<'_>)) -> Result<()> {
        self.with_model(h, |m, _, _| {
            let n = (m.num_inputs + m.num_outputs) as usize;
            for k in 0..n.min(MODEL_IO_MAX) {
                // SAFETY: `with_model` holds a reference on `m` for the whole closure.
                if let Some(io) = unsafe { self.io_entry(m, k) } {
                    f(&io);
                }
            }
        })
    }

    /// The logical core of a resident model (`nrt_get_model_info`'s `vnc`), checking that
    /// the model is still loaded: a stale, forged or foreign handle is
    /// [`Error::InvalidHandle`].
    pub fn model_core(&self, h: ModelHandle) -> Result<LogicalCore> {
        self.with_model(h, |_, vnc, _| vnc)
    }
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

    /// A failed load that found the shared ext-isa copy already cached must not unstage it
    /// (spec §6): its rollback freed the copy although another load had staged it. Forcing
    /// DuplicateModel after staging moves the process-global handle counter, so this test
    /// lives here (the unit-test binary loads no other model) rather than in tests/model.rs,
    /// whose parallel tests mint handles from the same counter.
    #[test]
    fn failed_load_keeps_an_ext_isa_copy_it_did_not_stage() {
        use crate::ctx::{CoreState, InitOptions};
        use crate::sim::{Preset, SimConfig, SimDevice};
        let st = CoreState::new_boxed();
        let sim = SimDevice::new_boxed(&SimConfig::new(Preset::Trn1, 1)).unwrap();
        let n = Nrt::new(&st, &*sim);
        n.init(&InitOptions::default()).unwrap();
        let state = |n: &Nrt<'_>| {
            (
                n.ledger_snapshot(0),
                n.driver_bytes_in_use(),
                n.ulib_shared_stats(0, 0).unwrap(),
                n.state().arena_stats().map(|(_, s)| s.live),
            )
        };
        let mut g = ModelSpec {
            name: "g",
            subgraphs: 1,
            ..Default::default()
        };
        g.gpsimd_libs = Some(UlibRequest {
            count: 1,
            bytes: 65536,
        });
        let hx = n.load_model(LogicalCore::new(0), &g).unwrap();
        n.unload_model(hx).unwrap();
        assert_eq!(
            n.ulib_shared_stats(0, 0).unwrap(),
            (1, 0),
            "copy stays cached"
        );
        let plain = ModelSpec {
            name: "a",
            subgraphs: 1,
            ..Default::default()
        };
        let ha = n.load_model(LogicalCore::new(0), &plain).unwrap();
        let before = state(&n);
        // The next handle minted is `ha` again: the load fails in add_model, after staging.
        set_last_model_handle_for_test(ha.h_model().id - 1);
        let e = n.load_model(LogicalCore::new(0), &g).unwrap_err();
        assert_eq!(e, Error::DuplicateModel(ha.h_model().id));
        assert_eq!(state(&n), before, "the rollback left everything as it was");
        // A load that stages the copy itself and fails still unstages it.
        n.unload_model(ha).unwrap();
        n.ulib_unstage_for_test(0, 0);
        let hb = n.load_model(LogicalCore::new(0), &plain).unwrap();
        let before = state(&n);
        assert_eq!(before.2, (0, 0), "nothing cached");
        set_last_model_handle_for_test(hb.h_model().id - 1);
        assert_eq!(
            n.load_model(LogicalCore::new(0), &g).unwrap_err(),
            Error::DuplicateModel(hb.h_model().id)
        );
        assert_eq!(state(&n), before, "its own staging is undone");
        n.unload_model(hb).unwrap();
        n.close().unwrap();
    }
}
