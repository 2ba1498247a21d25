//! GPSIMD ucode libraries (spec §6): the single ext-isa library staged once per core under
//! `ulib_staging_lock` from the GLOBAL allocator and shared by every model on the core;
//! multi-library custom-op sets (2..=9) staged per model from the model's own allocator.
// Pointer arguments (a core's `tpb_t`, dmems, sets) are never dereferenced here: they go to
// the accessors of the modules that own the memory (`ctx`, `arena`), which re-derive or check
// them (`Nrt::scratchpad_lock`, `Nrt::dmem_fixed`, `Arena::with_live`), so a stale or foreign
// pointer is an error or a no-op, not undefined behaviour (docs/UNSAFE.md).
#![deny(unsafe_code)]

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use crate::abi::*;
use crate::arena::GiveBack;
use crate::ctx::{Exclusive, InCall, Nrt, UlibSet};
use crate::device::PhysicalCore;
use crate::dmem::AllocArgs;
use crate::error::{Error, Result};

/// Bytes of each staging buffer besides the libraries themselves.
const SCRATCH_SPACE_BYTES: u64 = 64 << 10;
const EXTRAM_BYTES: u64 = 64 << 10;
const LIB_ALIGN: u64 = 4096;

/// What a model asks to stage (the manifest's `gpsimd_libs`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct UlibRequest {
    /// Number of libraries (1 = the shared ext-isa case).
    pub count: u32,
    /// Bytes of each library.
    pub bytes: u64,
}

/// The shared ext-isa library of one core ([`Nrt::ulib_shared_stats`], spec §6).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct UlibStats {
    /// Times it was staged (once however many models use it).
    pub stages: u32,
    /// Models that use it now.
    pub users: u32,
}

impl UlibRequest {
    /// Bytes the libraries take once each is padded to `LIB_ALIGN`; an error for a request
    /// of no bytes or one too large to count (checked before a load allocates anything).
    pub fn lib_bytes(&self) -> Result<u64> {
        self.bytes
            .checked_next_multiple_of(LIB_ALIGN)
            .and_then(|b| b.checked_mul(self.count as u64))
            .filter(|b| *b > 0)
            .ok_or(Error::InvalidModel(
                "gpsimd_libs.bytes must be > 0 and small enough",
            ))
    }
}

/// The stage-once protocol of `ucode_stage_libs` (spec §6): under the staging lock, reuse the
/// cached value or stage it and cache it. Returns `(value, staged_now)`. Generic so loom can
/// check the very code the runtime uses.
pub fn stage_once<G, T: Copy, E>(
    lock: impl FnOnce() -> G,
    cached: impl FnOnce() -> Option<T>,
    stage: impl FnOnce() -> Result<T, E>,
    store: impl FnOnce(T),
) -> Result<(T, bool), E> {
    stage_once_with(lock, |_| cached(), stage, |_, v| store(v))
}

/// [`stage_once`] for a lock that holds the cache: `cached` and `store` reach it through the
/// guard `lock` returned (the runtime's `UlibCacheGuard`), so the cache is only touched with
/// the lock held.
pub fn stage_once_with<G, T: Copy, E>(
    lock: impl FnOnce() -> G,
    cached: impl FnOnce(&mut G) -> Option<T>,
    stage: impl FnOnce() -> Result<T, E>,
    store: impl FnOnce(&mut G, T),
) -> Result<(T, bool), E> {
    let mut g = lock();
    if let Some(v) = cached(&mut g) {
        return Ok((v, false));
    }
    let v = stage()?;
    store(&mut g, v);
    Ok((v, true))
}

impl Nrt<'_> {
    /// `ucode_alloc_new_staged_libs` + `ucode_stage_libs_impl`: allocates the set's buffers from
    /// `al` and copies the library images in at running offsets, recording each library's
    /// device address `pa + align_offset + offset`. All-or-nothing.
    ///
    /// `how` is how a failure gives back the dmems already made: [`GiveBack::Cancel`] from a
    /// model's own allocator (nobody saw them); [`GiveBack::Release`] from the core's GLOBAL
    /// one, whose list callers can walk (`allocator_for_each`).
    fn ulib_alloc_and_stage(
        &self,
        call: &impl InCall,
        al: *mut dmem_allocator_t,
        hbm: u32,
        req: UlibRequest,
        how: GiveBack,
    ) -> Result<*mut UlibSet> {
        let lib_bytes = req.lib_bytes()?;
        let mut set = self.st.model.ulib_sets().alloc_fresh("ulib_set")?;
        let parts: [(u64, dma_mem_usage_type_t, &str); 4] = [
            (
                SCRATCH_SPACE_BYTES,
                dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_UCODE_LIB,
                "ulib_scratch_space",
            ),
            (
                (core::mem::size_of::<SUNDA_UCODE_LIB_LIBRARY_TABLE_ENTRY>()
                    * constants::SUNDA_ULIB_TABLE_ENTRIES) as u64,
                dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_UCODE_LIB,
                "ulib_ucode_table",
            ),
            (
                EXTRAM_BYTES,
                dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_UCODE_LIB,
                "ulib_extram",
            ),
            (
                lib_bytes,
                dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_UCODE_LIB,
                "ulib_lib_dmem",
            ),
        ];
        let mut got = [null_mut::<dmem_t>(); 4];
        // On failure: the dmems made so far go back as `how` says; the set's slot, never
        // handed out, goes back when `set` is dropped.
        let undo = |got: &[*mut dmem_t]| {
            for m in got {
                self.dmem_release_ref(call, *m, how);
            }
        };
        for (i, (size, usage, hint)) in parts.iter().enumerate() {
            let args = AllocArgs::device(*size, hbm, *usage, hint).aligned(if i == 3 {
                LIB_ALIGN
            } else {
                0
            });
            match self.dmem_alloc_internal(call, al, &args, None) {
                Ok(n) => got[i] = n.m,
                Err(e) => {
                    undo(&got[..i]);
                    return Err(e);
                }
            }
        }
        // The library dmem is this call's (just made), so it is live and published.
        let Some(lib) = self.dmem_fixed(got[3]) else {
            undo(&got);
            return Err(Error::ForeignDmem);
        };
        let libs = set
            .as_ptr()
            .wrapping_byte_add(core::mem::offset_of!(UlibSet, libs))
            .cast::<ucode_lib_info_t>();
        let info = &mut set.info;
        info.scratch_space = got[0];
        info.ucode_table = got[1];
        info.extram = got[2];
        info.lib_dmem = got[3];
        info.num_libs = req.count as i32;
        info.libs = libs;
        let stride = lib_bytes / req.count as u64;
        for i in 0..req.count as usize {
            let off = i as u64 * stride;
            let l = &mut set.libs[i];
            l.address = lib.pa + lib.align_offset + off;
            l.cpu_id = i as u8;
            l.total_cpus = req.count as u8;
            // Stage the image (a recognisable pattern stands in for the ELF bytes). A
            // device without host-visible memory (EOPNOTSUPP) keeps the allocation only.
            let pattern = [0x5au8 ^ i as u8; 64];
            let _ = self.drv.copy_in(
                lib.device_id,
                lib.mem_handle,
                lib.align_offset + off,
                &pattern,
            );
        }
        Ok(set.publish().as_ptr())
    }

    /// Frees a set's buffers and its slot.
    /// `how`: [`GiveBack::Cancel`] only for a failed load's rollback of a set it made.
    pub(crate) fn ulib_free_set(&self, call: &impl InCall, set: *mut UlibSet, how: GiveBack) {
        if set.is_null() {
            return;
        }
        let Some(dmems) = self.ulib_set_dmems(set) else {
            return;
        };
        for m in dmems {
            if !m.is_null() {
                self.dmem_release_ref(call, m, how);
            }
        }
        let _ = self.st.model.ulib_sets().give_back(set, how);
    }

    /// `ucode_stage_libs` (spec §6): > 9 libraries → `TooManyLibs` (NRT_FAILURE); exactly one
    /// → reuse the core's cached ext-isa copy or stage it once under `ulib_staging_lock`;
    /// 2..=9 → a per-model copy from `model_al`. Returns `(set, shared, staged_now)`:
    /// `staged_now` is true only when this call staged the core's shared copy (so only this
    /// call's rollback may unstage it).
    pub(crate) fn ucode_stage_libs(
        &self,
        call: &impl InCall,
        tpb: *mut tpb_t,
        model_al: *mut dmem_allocator_t,
        hbm: u32,
        req: UlibRequest,
    ) -> Result<(*mut ucode_lib_set_info_t, bool, bool)> {
        if req.count as usize > constants::ULIB_MAX_LIBS {
            return Err(Error::TooManyLibs(req.count));
        }
        if req.count == 0 {
            return Ok((null_mut(), false, false));
        }
        if req.count == 1 {
            let ext = self.tpb_ext(tpb);
            let (device, core) = self.tpb_coords(tpb);
            let cache = self
                .ulib_cache_lock(tpb)
                .ok_or(Error::CoreOutOfRange { device, tpb: core })?;
            // The cache is read and written only through the staging lock's guard;
            // `ulib_users` is bumped inside the same critical section.
            let (set, staged_now) = stage_once_with(
                || {
                    ext.ulib_users.fetch_add(1, Ordering::AcqRel);
                    cache
                },
                |g| Some(*g.cached()).filter(|p| !p.is_null()),
                || {
                    let al = self.tpb_allocator(call, tpb);
                    self.ulib_alloc_and_stage(call, al, hbm, req, GiveBack::Release)
                        .map(UlibSet::info_ptr)
                        .inspect_err(|_| {
                            ext.ulib_users.fetch_sub(1, Ordering::AcqRel);
                        })
                },
                |g, p| {
                    *g.cached() = p;
                    ext.ulib_stage_count.fetch_add(1, Ordering::AcqRel);
                },
            )?;
            return Ok((set, true, staged_now));
        }
        let set = self.ulib_alloc_and_stage(call, model_al, hbm, req, GiveBack::Cancel)?;
        Ok((UlibSet::info_ptr(set), false, false))
    }

    /// A model's release of its ulib set: drops its use of the shared copy (which stays cached
    /// until teardown), or frees a per-model set.
    pub(crate) fn ucode_release(
        &self,
        call: &impl InCall,
        tpb: *mut tpb_t,
        set: *mut ucode_lib_set_info_t,
        shared: bool,
        how: GiveBack,
    ) {
        if set.is_null() {
            return;
        }
        if shared {
            self.tpb_ext(tpb).ulib_users.fetch_sub(1, Ordering::AcqRel);
        } else {
            self.ulib_free_set(call, UlibSet::from_info_ptr(set), how);
        }
    }

    /// Undoes a shared staging that no model uses: the rollback of a failed load that staged
    /// the copy itself (`staged_now`), never of one that found it cached (spec §6).
    pub(crate) fn ulib_unstage_if_unused(
        &self,
        call: &impl InCall,
        tpb: *mut tpb_t,
        how: GiveBack,
    ) {
        let ext = self.tpb_ext(tpb);
        let Some(mut g) = self.ulib_cache_lock(tpb) else {
            return;
        };
        let cached = g.cached();
        if ext.ulib_users.load(Ordering::Acquire) == 0 && !cached.is_null() {
            self.ulib_free_set(call, UlibSet::from_info_ptr(*cached), how);
            *cached = null_mut();
            ext.ulib_stage_count.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Teardown (under `close`'s token `ex`): frees the core's shared ext-isa copy.
    pub(crate) fn ulib_free_shared(&self, ex: &Exclusive<'_>, tpb: *mut tpb_t) {
        let ext = self.tpb_ext(tpb);
        let Some(mut g) = self.ulib_cache_lock(tpb) else {
            return;
        };
        let cached = g.cached();
        if !cached.is_null() {
            self.ulib_free_set(ex, UlibSet::from_info_ptr(*cached), GiveBack::Release);
            *cached = null_mut();
        }
        ext.ulib_users.store(0, Ordering::Release);
    }

    /// Drops a core's cached ext-isa copy when no model uses it (tests, feature `test-hooks`;
    /// teardown does this).
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn ulib_unstage_for_test(&self, core: PhysicalCore) {
        let Ok(call) = self.enter() else {
            return;
        };
        if let Ok(tpb) = self.tpb(core.device, core.core) {
            self.ulib_unstage_if_unused(&call, tpb, GiveBack::Release);
        }
    }

    /// How many times the shared ext-isa library was staged on a core (exactly once however
    /// many models use it), and how many models use it now (spec §6).
    pub fn ulib_shared_stats(&self, core: PhysicalCore) -> Result<UlibStats> {
        let _call = self.enter()?;
        let ext = self.tpb_ext(self.tpb(core.device, core.core)?);
        Ok(UlibStats {
            stages: ext.ulib_stage_count.load(Ordering::Acquire),
            users: ext.ulib_users.load(Ordering::Acquire),
        })
    }
}
