//! The per-core DRAM scratchpad (spec §8): ref-counted pages from the GLOBAL allocator that
//! several resident models share (they execute one at a time per core).
// Pointer arguments (a core's `tpb_t`, dmems, sets) are never dereferenced here: they go to
// the accessors of the modules that own the memory (`ctx`, `arena`), which re-derive or check
// them (`Nrt::scratchpad_lock`, `Nrt::dmem_fixed`, `Arena::with_live`), so a stale or foreign
// pointer is an error or a no-op, not undefined behaviour (docs/UNSAFE.md).
#![deny(unsafe_code)]

use crate::abi::*;
use crate::arena::GiveBack;
use crate::ctx::{DevGeom, Exclusive, InCall, Nrt, ScratchpadGuard};
use crate::device::PhysicalCore;
use crate::dmem::AllocArgs;
use crate::driver::feature;
use crate::error::{Error, InvalidArg, Result};
use crate::handle::DmemHandle;

/// A core's scratchpad as [`Nrt::scratchpad_info`] reports it (spec §8).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ScratchpadInfo {
    /// Bytes per page.
    pub page_size: u64,
    /// Pages in use.
    pub pages: u32,
    /// Whether the pages are one contiguous allocation.
    pub contiguous: bool,
}

/// Where a scratchpad window lies, as [`Nrt::tdrv_scratchpad_get_mem`] maps it (spec §8).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ScratchpadWindow {
    /// The page's backing dmem.
    pub page: DmemHandle,
    /// The window's offset in that page.
    pub offset: u64,
}

/// One scratchpad page as [`Nrt::scratchpad_page`] reports it (spec §8).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ScratchpadPage {
    /// The page's backing dmem, if it has one.
    pub mem: Option<DmemHandle>,
    /// The references the models hold on the page.
    pub refs: u32,
}

impl Nrt<'_> {
    /// `tdrv_scratchpad_init` (spec §8): page size from the settings, or contiguous 64 MiB
    /// pages when `experimental_contiguous_scratchpad` && arch > SUNDA && LNC > 1 && the driver
    /// has the contiguous-scratchpad feature (0x80). Bring-up, under init's token.
    pub(crate) fn tdrv_scratchpad_init(
        &self,
        ex: &mut Exclusive<'_>,
        tpb: *mut tpb_t,
        g: &DevGeom,
    ) {
        let s = self.settings(&*ex);
        let contiguous = s.contiguous_scratchpad != 0
            && g.arch > al_hal_tpb_arch_type_t::AL_HAL_TPB_ARCH_TYPE_SUNDA as u32
            && self.lnc(&*ex) > 1
            && g.features & feature::CONTIGUOUS_SCRATCHPAD != 0;
        let page_size = if contiguous {
            constants::SCRATCHPAD_CONTIGUOUS_PAGE_SIZE
        } else {
            s.scratchpad_page_size
        };
        self.scratchpad_setup(ex, tpb, page_size, contiguous);
    }

    /// Claims the first `pages` scratchpad pages of `tpb` for one model: allocates missing
    /// pages (usage SHARED_SCRATCHPAD, GLOBAL allocator) and takes a reference on each.
    /// A page dmem holds the page's own reference (from `dmem_alloc`) plus one per model
    /// (`refs`), which is what [`Self::scratchpad_release_locked`] and
    /// [`Self::tdrv_scratchpad_free`] drop. All-or-nothing: on failure every page this call
    /// created or referenced is released.
    pub(crate) fn scratchpad_claim(
        &self,
        call: &impl InCall,
        tpb: *mut tpb_t,
        pages: u32,
        hbm: u32,
    ) -> Result<()> {
        if pages as usize > constants::SCRATCHPAD_MAX_PAGES {
            return Err(Error::InvalidModel("scratchpad needs more than 1024 pages"));
        }
        let al = self.tpb_allocator(call, tpb);
        let mut sp = self.scratchpad_lock(tpb).ok_or(Error::CoreOutOfRange {
            device: self.tpb_coords(tpb).0,
            tpb: self.tpb_coords(tpb).1,
        })?;
        let page_size = sp.page_size();
        for i in 0..pages as usize {
            let (num_pages, table) = sp.table();
            let page = &mut table[i];
            let r = if page.mem.is_null() {
                let args = AllocArgs::device(
                    page_size,
                    hbm,
                    dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_SCRATCHPAD,
                    "scratchpad_page",
                );
                self.dmem_alloc_internal(call, al, &args, None)
                    .and_then(|n| {
                        let m = n.m;
                        page.mem = m;
                        *num_pages = (*num_pages).max(i as u32 + 1);
                        // The model's reference, beside the page's own.
                        self.dmem_acquire_owned(call, m)
                    })
            } else {
                self.dmem_acquire_owned(call, page.mem)
            };
            match r {
                Ok(()) => page.refs += 1,
                Err(e) => {
                    // Through the quarantine: a page this call created was already on
                    // the GLOBAL allocator's list, which callers can walk.
                    self.scratchpad_release_locked(call, &mut sp, i as u32, GiveBack::Release);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Drops one model's claim on the first `pages` pages (a page is freed with its last user,
    /// returned to its arena as `how` says: [`GiveBack::Cancel`] for a failed load's rollback).
    pub(crate) fn scratchpad_release(
        &self,
        call: &impl InCall,
        tpb: *mut tpb_t,
        pages: u32,
        how: GiveBack,
    ) {
        if let Some(mut sp) = self.scratchpad_lock(tpb) {
            self.scratchpad_release_locked(call, &mut sp, pages, how);
        }
    }

    /// [`Self::scratchpad_release`] with the scratchpad lock held (`sp`).
    fn scratchpad_release_locked(
        &self,
        call: &impl InCall,
        sp: &mut ScratchpadGuard<'_>,
        pages: u32,
        how: GiveBack,
    ) {
        let (num_pages, table) = sp.table();
        for page in table.iter_mut().take(pages as usize) {
            if page.refs == 0 || page.mem.is_null() {
                continue;
            }
            page.refs -= 1;
            let m = page.mem;
            if page.refs == 0 {
                // Last user: drop the model's ref and the page's own (GLOBAL) ref.
                self.dmem_release_ref(call, m, how);
                page.mem = core::ptr::null_mut();
            }
            self.dmem_release_ref(call, m, how);
        }
        while *num_pages > 0
            && table
                .get(*num_pages as usize - 1)
                .is_none_or(|p| p.mem.is_null())
        {
            *num_pages -= 1;
        }
    }

    /// Frees every page regardless of users (teardown, under `close`'s token `ex`).
    pub(crate) fn tdrv_scratchpad_free(&self, ex: &Exclusive<'_>, tpb: *mut tpb_t) {
        let Some(mut sp) = self.scratchpad_lock(tpb) else {
            return;
        };
        let (num_pages, table) = sp.table();
        for page in table.iter_mut() {
            let m = page.mem;
            if m.is_null() {
                continue;
            }
            for _ in 0..=page.refs {
                let _ = self.dmem_free_owned(ex, m);
            }
            page.mem = core::ptr::null_mut();
            page.refs = 0;
        }
        *num_pages = 0;
    }

    /// Runs `f` on the scratchpad of physical core `core` with its lock held.
    fn with_scratchpad<R>(
        &self,
        core: PhysicalCore,
        f: impl FnOnce(&ScratchpadGuard<'_>) -> R,
    ) -> Result<R> {
        let PhysicalCore { device: dev, core } = core;
        // The scratchpad is torn down by `close`: an API call, gated (docs/STATES.md).
        let _call = self.enter()?;
        let tpb = self.tpb(dev, core)?;
        let sp = self.scratchpad_lock(tpb).ok_or(Error::CoreOutOfRange {
            device: dev,
            tpb: core,
        })?;
        Ok(f(&sp))
    }

    /// `tdrv_scratchpad_get_mem` (spec §8): maps a scratchpad window to `(page dmem, offset in
    /// page)` ([`ScratchpadWindow`]). Contiguous mode lays pages out in reverse order (the
    /// driver carves them growing backwards from the end of the pool).
    pub fn tdrv_scratchpad_get_mem(
        &self,
        core: PhysicalCore,
        offset: u64,
        size: u64,
    ) -> Result<ScratchpadWindow> {
        self.with_scratchpad(core, |sp| {
            let ps = sp.page_size().max(1);
            let (n, pages) = sp.view();
            let n = n as u64;
            let outside = Error::OutOfBounds {
                offset,
                len: size,
                size: n * ps,
            };
            let (idx, in_page) = (offset / ps, offset % ps);
            if idx >= n || in_page.checked_add(size).is_none_or(|e| e > ps) {
                return Err(outside);
            }
            let idx = if sp.is_contiguous() { n - 1 - idx } else { idx };
            let m = pages
                .get(idx as usize)
                .map_or(core::ptr::null_mut(), |p| p.mem);
            if m.is_null() {
                return Err(outside);
            }
            // The page holds a reference on `m` while the scratchpad lock is held.
            Ok(ScratchpadWindow {
                page: self.dmem_handle_of_owned(m),
                offset: in_page,
            })
        })?
    }

    /// A core's scratchpad: its page size, pages in use and whether it is contiguous (spec §8).
    pub fn scratchpad_info(&self, core: PhysicalCore) -> Result<ScratchpadInfo> {
        self.with_scratchpad(core, |sp| ScratchpadInfo {
            page_size: sp.page_size(),
            pages: sp.view().0,
            contiguous: sp.is_contiguous(),
        })
    }

    /// Scratchpad page `i` of a core: its backing dmem and references ([`ScratchpadPage`]).
    pub fn scratchpad_page(&self, core: PhysicalCore, i: usize) -> Result<ScratchpadPage> {
        self.with_scratchpad(core, |sp| {
            sp.view()
                .1
                .get(i)
                // The page holds a reference on its dmem while the scratchpad lock is held.
                .map(|p| ScratchpadPage {
                    mem: (!p.mem.is_null()).then(|| self.dmem_handle_of_owned(p.mem)),
                    refs: p.refs,
                })
                .ok_or(Error::InvalidArgument(InvalidArg::PageIndex))
        })?
    }
}
