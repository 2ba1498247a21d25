//! Loading and unloading a model (spec §5, §4.5): the spec checks, the all-or-nothing
//! build of its heaps, allocations, scratchpad and GPSIMD libraries, the rollback of a
//! failed load, and `model_free`.

use core::ptr::null_mut;

use super::access::DrainedModel;
use super::{tdrv_get_unique_h_model, ModelSpec, IO_DIMS_MAX, IO_NAME_MAX};
use crate::abi::tables::{category_for, CATEGORY_INVALID};
use crate::abi::*;
use crate::arena::{Fresh, GiveBack};
use crate::config::{MAX_SUBGRAPHS, MEM_REF_NAME_LEN_MAX};
use crate::cstr::copy_c_name;
use crate::ctx::{Exclusive, InCall, Nrt};
use crate::dmem::AllocArgs;
use crate::error::{Error, Result};
use crate::handle::ModelHandle;
use crate::vcore::LogicalCore;

/// What a load has built beside its model slot (the slot itself is a [`Fresh`] the load
/// holds apart, so `add_model` can take it); rollback undoes it explicitly.
struct Building<'a> {
    /// The scratchpad cleanup record, unpublished until the model is complete (dropping it
    /// gives the slot back as if never taken).
    cleanup: Option<Fresh<'a, tdrv_scratchpad_cleanup_info_t>>,
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
    /// The scratchpad claim a cleanup record describes: `(its core, pages)`, or `None` for no
    /// record or no pages. The record keeps libnrt's members (`pcores[0]`, `sizes[0]`) and
    /// the page count follows from the core's page size.
    pub(crate) fn cleanup_claim(
        &self,
        c: *const tdrv_scratchpad_cleanup_info_t,
    ) -> Option<(*mut tpb_t, u32)> {
        let c = self.cleanup_record(c)?;
        let (d, t) = self.tree_pcore(c.pcore)?;
        let tpb = self.tpb(d, t).ok()?;
        let ps = self.scratchpad_lock(tpb)?.page_size().max(1);
        let pages = u32::try_from(c.bytes / ps).ok()?;
        (c.entries > 0 && pages > 0).then_some((tpb, pages))
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
        if spec.inputs.len() + spec.outputs.len() > u32::MAX as usize {
            return Err(Error::InvalidModel("more than 2^32 - 1 inputs + outputs"));
        }
        for t in spec.inputs.iter().chain(spec.outputs.iter()) {
            if t.name.is_empty() || t.name.len() > IO_NAME_MAX {
                return Err(Error::InvalidModel(
                    "tensor names must be 1..=255 bytes (NRT_TENSOR_NAME_MAX - 1)",
                ));
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
                c.check()?;
            }
        }
        Ok(())
    }

    /// Device bytes booked to a logical core (the "mem_usage before/after" of §5.3).
    fn vnc_device_bytes(&self, call: &impl InCall, vnc: LogicalCore) -> u64 {
        // Ungated: this runs inside `load_model`'s own gated call, which a racing `close`
        // waits for.
        self.vnc_memory_stats(call, vnc)
            .map(|s| s.bytes_used)
            .unwrap_or(0)
    }

    /// The body of [`crate::model::Models::load`].
    pub(crate) fn load_model(&self, vnc: LogicalCore, spec: &ModelSpec<'_>) -> Result<ModelHandle> {
        let call = self.enter()?;
        let v = *self.vtpb_get_virtual_core(&call, vnc)?;
        let g = self.dev_geom(&call, v.tpbs[0].device_id);
        let arch = g.arch();
        self.check_spec(spec, arch)?;
        let mut model = self.st.model.models.alloc_fresh("model_t")?;
        let mut b = Building {
            cleanup: None,
            tpbs: [null_mut(); MAX_SUBGRAPHS],
            sp_tpb: null_mut(),
            sp_pages: 0,
            ulib: null_mut(),
            ulib_shared: false,
            ulib_staged_now: false,
            ulib_tpb: null_mut(),
        };
        let published = match self.load_into(&call, &mut model, &mut b, &v, spec, arch, vnc) {
            Ok(h) => {
                let usage = (model.mem_usage_before, model.mem_usage_after);
                self.add_model(b.tpbs[0], model).map(|()| (h, usage))
            }
            Err(e) => Err((e, model)),
        };
        match published {
            Ok((h, (before, after))) => {
                info!(
                    "Added model: {} on (nd{}:nc{}) mem_usage before {} after {}",
                    h.id, v.tpbs[0].device_id, v.tpbs[0].device_tpb_idx, before, after
                );
                Ok(ModelHandle::from_parts(
                    vnc.index().unwrap_or(u32::MAX),
                    h.id,
                    self.epoch(),
                ))
            }
            Err((e, model)) => {
                self.rollback(&call, model, b);
                Err(e)
            }
        }
    }

    /// Builds everything of the model in `m` (still unpublished) and returns its handle;
    /// `add_model` is the caller's.
    // The gate token, the two pieces of the load's own state and the request as `load_model`
    // resolved it: bundling them into a struct would only rename the arguments.
    #[allow(clippy::too_many_arguments)]
    fn load_into(
        &self,
        call: &impl InCall,
        m: &mut Fresh<'a, model_t>,
        b: &mut Building<'a>,
        v: &virtual_core_t,
        spec: &ModelSpec<'_>,
        arch: al_hal_tpb_arch_type_t,
        vnc: LogicalCore,
    ) -> Result<H_MODEL> {
        // Nothing of this load is booked yet (the model slot is not ledger memory).
        let before = self.vnc_device_bytes(call, vnc);
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
            m.sg_allocators[s] = self.allocator_create(
                call,
                self.pcore_ptr(pc.device_id, pc.device_tpb_idx),
                dmem_allocator_type_t::DMEM_ALLOCATOR_TYPE_MODEL,
            )?;
            m.sg_mem_ref_sets[s] = self.mem_ref_set_new()?;
            m.sg_gc_trackers[s] = self.dmem_list_new()?;
        }
        // The cleanup record, published with the model (rollback drops it unpublished).
        b.cleanup = Some(
            self.st
                .model
                .sp_cleanup
                .alloc_fresh("scratchpad_cleanup_info_t")?,
        );
        // Subgraph 0's slots were filled above (subgraphs >= 1).
        m.dmem_allocator = m.sg_allocators[0];
        m.mem_ref_set = m.sg_mem_ref_sets[0];
        m.gc_tracker = m.sg_gc_trackers[0];
        // SBUF EVTACCEL (§8): validated in check_spec; here the model flags.
        if arch == al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_CAYMAN {
            if spec.sbuf_carveout.is_some() {
                m.reset_evt_accel = 1;
                m.program_fp8_cfg = 1;
            } else {
                info!("model {} has no evtaccel reservation on SBUF", spec.name);
            }
        }
        // The NEFF's allocations, per subgraph, into that subgraph's MODEL heap.
        for s in 0..spec.subgraphs as usize {
            let (al, list, set) = (
                m.sg_allocators[s],
                m.sg_gc_trackers[s],
                m.sg_mem_ref_sets[s],
            );
            let hbm = self.tpb_default_hbm(call, b.tpbs[s]);
            for a in spec.subgraph_allocations(s) {
                let args = AllocArgs {
                    size: a.size,
                    align: a.align,
                    loc: a.location as u32,
                    hbm_idx: hbm,
                    usage: a.usage as u32,
                    hint: a.hint,
                };
                let d = self.dmem_alloc_internal(call, al, &args, Some(list))?.m;
                if let Err(e) = self.mem_ref_set_add(set, name_key(a.hint), a.size, d) {
                    // Just allocated by this call: seen by nobody.
                    self.dmem_release_ref(call, d, GiveBack::Cancel);
                    return Err(e);
                }
            }
        }
        // Scratchpad pages (§8), shared on the first core.
        if spec.scratchpad_bytes > 0 {
            let tpb = b.tpbs[0];
            let ps = self
                .scratchpad_lock(tpb)
                .map_or(1, |sp| sp.page_size())
                .max(1);
            let (dev, idx) = self.tpb_coords(tpb);
            let pages = spec.scratchpad_bytes.div_ceil(ps);
            if pages > constants::SCRATCHPAD_MAX_PAGES as u64 {
                return Err(Error::InvalidModel("scratchpad needs more than 1024 pages"));
            }
            self.scratchpad_claim(
                call,
                tpb,
                pages as u32,
                self.dev_geom(call, dev).default_hbm(idx),
            )?;
            b.sp_tpb = tpb;
            b.sp_pages = pages as u32;
            if let Some(c) = b.cleanup.as_mut() {
                c.pcores[0] = self.pcore_ptr(dev, idx);
                c.sizes[0] = pages * ps;
                c.num_entries = 1;
                c.first_page = 0;
            }
        }
        // GPSIMD ext-isa staging only on SUNDA (kbl_model_add: cmp $0x2 → ucode_stage_libs).
        if let Some(req) = spec.gpsimd_libs {
            if arch == al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_SUNDA {
                let tpb = b.tpbs[0];
                let (hbm, al) = (self.tpb_default_hbm(call, tpb), m.dmem_allocator);
                b.ulib_tpb = tpb;
                let (set, shared, staged_now) = self.ucode_stage_libs(call, tpb, al, hbm, req)?;
                b.ulib = set;
                b.ulib_shared = shared;
                b.ulib_staged_now = staged_now;
                m.ulib_set_info = set;
                m.ulib_is_shared = shared as u8;
            } else {
                debug!(
                    "gpsimd libraries are staged only on SUNDA; ignored for {}",
                    spec.name
                );
            }
        }
        // Fill in the model; the caller publishes it (`add_model`).
        let h = tdrv_get_unique_h_model();
        m.h_model = h;
        m.vtpb_idx = v.vtpb_idx;
        m.pcore = v.tpbs[0];
        m.num_subgraphs = spec.subgraphs;
        m.state = 1;
        copy_c_name(&mut m.name, spec.name);
        m.num_inputs = spec.inputs.len() as u32;
        m.num_outputs = spec.outputs.len() as u32;
        let shard = crate::ctx::core_shard(v.tpbs[0].device_id, v.tpbs[0].device_tpb_idx);
        let chunks = &self.st.model.io_chunks;
        let io = self
            .model_io_mut(m)
            .ok_or(Error::InvalidModel("model slot of another runtime"))?;
        // check_spec bounded the shapes (at most IO_DIMS_MAX) and names (IO_NAME_MAX).
        for t in spec.inputs.iter().chain(spec.outputs.iter()) {
            let e = chunks.chain_push(io, shard, "model io chunk")?;
            e.size = t.size;
            e.dtype = t.dtype;
            e.ndim = t.shape.len() as u32;
            for (d, s) in e.shape.iter_mut().zip(t.shape) {
                *d = *s;
            }
            copy_c_name(&mut e.name, t.name);
        }
        m.mem_usage_before = before;
        m.mem_usage_after = self.vnc_device_bytes(call, vnc);
        if let Some(c) = b.cleanup.take() {
            m.scratchpad_cleanup_info = c.publish().as_ptr();
        }
        Ok(h)
    }

    /// Undoes a partial load: `m` is the unpublished model, `b` what was built beside it.
    fn rollback(&self, call: &impl InCall, m: Fresh<'a, model_t>, b: Building<'a>) {
        if !b.ulib.is_null() {
            self.ucode_release(call, b.ulib_tpb, b.ulib, b.ulib_shared, GiveBack::Cancel);
        }
        // Unstage the shared copy only if this load staged it: a copy that was cached before
        // the call (kept after its last user unloaded) stays, so the rollback leaves the core
        // as it found it. A failed first staging cached nothing (stage_once stores only on
        // success), and a copy another load started using meanwhile is not unused.
        if !b.ulib_tpb.is_null() && b.ulib_shared && b.ulib_staged_now {
            // Release, not Cancel: once staged, the shared copy was in the core's cache (and
            // on its GLOBAL allocator's list), where others could see it.
            self.ulib_unstage_if_unused(call, b.ulib_tpb, GiveBack::Release);
        }
        if b.sp_pages > 0 {
            // Release, not Cancel: claimed pages are in the core's shared page table (and on
            // its GLOBAL allocator's list), where other loads and callers can see them.
            self.scratchpad_release(call, b.sp_tpb, b.sp_pages, GiveBack::Release);
        }
        self.free_model_heaps(call, &m, GiveBack::Cancel);
        let mut m = m;
        if let Some(io) = self.model_io_mut(&mut m) {
            self.st.model.io_chunks.chain_clear(io);
        }
        // The handle was never returned: the slots go back as if the load never started
        // (dropping a `Fresh` cancels its take: the model's, and the cleanup record's when it
        // was not yet published).
        drop(b);
        drop(m);
    }

    /// Frees a model's per-subgraph heaps, mem_ref sets, gc trackers and cleanup record.
    /// `how`: [`GiveBack::Release`] at unload; [`GiveBack::Cancel`] when a failed load rolls
    /// back (nobody saw its heaps, so their slots need not wait out the quarantines).
    fn free_model_heaps(&self, call: &impl InCall, m: &model_t, how: GiveBack) {
        for s in 0..MAX_SUBGRAPHS {
            let set = m.sg_mem_ref_sets[s];
            if !set.is_null() {
                self.mem_ref_set_free(set, how);
            }
            let al = m.sg_allocators[s];
            if !al.is_null() {
                // One call reclaims the subgraph's whole footprint (§5.4).
                let _ = self.allocator_destroy(call, al, how);
            }
            self.dmem_list_destroy(m.sg_gc_trackers[s], how);
        }
        let c = m.scratchpad_cleanup_info;
        if !c.is_null() {
            let _ = self.st.model.sp_cleanup.give_back(c, how);
        }
    }

    /// `model_free` (spec §5.4): releases the ulib set (not the shared ext-isa copy), the
    /// scratchpad claim, then destroys the MODEL heaps — one call per subgraph reclaims the
    /// whole footprint — and frees the `model_t`.
    fn model_free(&self, call: &impl InCall, mut m: DrainedModel<'a>) {
        if let Ok(tpb) = self.tpb(m.pcore.device_id, m.pcore.device_tpb_idx) {
            self.ucode_release(
                call,
                tpb,
                m.ulib_set_info,
                m.ulib_is_shared != 0,
                GiveBack::Release,
            );
            if let Some((sp_tpb, pages)) = self.cleanup_claim(m.scratchpad_cleanup_info) {
                self.scratchpad_release(call, sp_tpb, pages, GiveBack::Release);
            }
        }
        m.ulib_set_info = null_mut();
        self.free_model_heaps(call, &m, GiveBack::Release);
        m.release();
    }

    /// The body of [`crate::model::Models::unload`].
    pub(crate) fn unload_model(&self, h: ModelHandle) -> Result<()> {
        let call = self.enter()?;
        let (tpb, _) = self.model_tpb(&call, h)?;
        self.refuse_own_exec_of(&call, h)?;
        self.st.reentry.refuse(
            crate::sync::reentry_key::model(h.h_model().id),
            crate::sync::WaitFor::ModelDrain {
                model: h.h_model().id,
            },
        )?;
        let m = self.remove_model(tpb, h.h_model())?;
        self.model_free(&call, m);
        // The model is gone either way; blocks the driver kept are said.
        call.kept_result()
    }

    /// Teardown: unloads every resident model.
    pub(crate) fn unload_all_models(&self, ex: &Exclusive<'_>) {
        for vnc in (0..self.owned_vnc_count(ex)).map(LogicalCore::new) {
            let Ok(v) = self.vtpb_get_virtual_core(ex, vnc) else {
                continue;
            };
            let Ok(tpb) = self.tpb(v.tpbs[0].device_id, v.tpbs[0].device_tpb_idx) else {
                continue;
            };
            loop {
                let next = self.model_db_lock(tpb).and_then(|db| {
                    let mut first = None;
                    db.for_each_id(|id| {
                        first = first.or(Some(id));
                    });
                    first
                });
                match next {
                    Some(id) => match self.remove_model(tpb, H_MODEL { id }) {
                        Ok(m) => self.model_free(ex, m),
                        // `close` drained every model first (`wait_models_idle`): not
                        // reachable; the model stays rather than the loop spinning on it.
                        Err(e) => {
                            error!("close: model {} stays loaded: {}", id, e);
                            break;
                        }
                    },
                    None => break,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::PhysicalCore;
    use crate::model::set_last_model_handle_for_test;
    use crate::ulib::UlibRequest;

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
                n.driver_pool_bytes_in_use().unwrap(),
                n.ulib_shared_stats(PhysicalCore::new(0, 0)).unwrap(),
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
            n.ulib_shared_stats(PhysicalCore::new(0, 0)).unwrap(),
            crate::ulib::UlibStats {
                stages: 1,
                users: 0
            },
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
        n.ulib_unstage_for_test(PhysicalCore::new(0, 0));
        let hb = n.load_model(LogicalCore::new(0), &plain).unwrap();
        let before = state(&n);
        assert_eq!(
            before.2,
            crate::ulib::UlibStats::default(),
            "nothing cached"
        );
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
