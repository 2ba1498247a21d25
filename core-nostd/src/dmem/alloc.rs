//! `dmem_alloc_internal` (spec §3.2): the argument checks, the category tables, the ledger
//! booking, the driver call with its ENOMEM split, and the aligned-alloc emulation.

use core::ptr::null_mut;
use core::sync::atomic::Ordering;

use super::access::{AllocatorCore, DmemFields};
use super::{Action, AllocArgs, Booking, NewDmem};
use crate::abi::tables::{category_for, CATEGORY_INVALID};
use crate::abi::*;
use crate::ctx::state::dmem::AllocatorWords;
use crate::ctx::{InCall, Nrt};
use crate::driver::{errno, AllocRequest, Errno};
use crate::error::{Error, InvalidArg, Result};

impl<'a> Nrt<'a> {
    /// `dmem_alloc_internal` (spec §3.2): [`Self::dmem_alloc`] as a step of a gated call
    /// (`call`), for an allocator named by pointer (the runtime's own calls and the raw
    /// layer): the new dmem with its handle's words. One outlined copy of the path; the public
    /// call by handle inlines its own ([`Self::dmem_alloc_named`]).
    #[inline(never)]
    pub(crate) fn dmem_alloc_internal(
        &self,
        call: &impl InCall,
        al: *mut dmem_allocator_t,
        a: &AllocArgs<'_>,
        ref_list: Option<*mut dmem_list_t>,
    ) -> Result<NewDmem> {
        self.dmem_alloc_named(call, al, None, a, ref_list)
    }

    /// The allocation path of [`Self::dmem_alloc_internal`] and the public call by handle.
    /// `pinned`: `al`'s own words, when this call resolved `al` through its handle and holds
    /// its pin (or `al` is runtime-owned): `al` is then known live and its words are not looked
    /// up again.
    #[inline(always)]
    pub(super) fn dmem_alloc_named(
        &self,
        call: &impl InCall,
        al: *mut dmem_allocator_t,
        pinned: Option<&AllocatorWords>,
        a: &AllocArgs<'_>,
        ref_list: Option<*mut dmem_list_t>,
    ) -> Result<NewDmem> {
        // 1. arguments (no side effects yet)
        if ref_list.is_some_and(|l| !self.st.dmem.dmem_lists.is_live(l)) {
            return Err(Error::InvalidArgument(InvalidArg::RefListNotLive));
        }
        if a.size == 0 {
            return Err(Error::ZeroSize);
        }
        if a.align != 0 && !a.align.is_power_of_two() {
            return Err(Error::BadAlignment(a.align));
        }
        if a.size.checked_add(a.align).is_none() {
            return Err(Error::SizeOverflow {
                size: a.size,
                extra: a.align,
            });
        }
        let loc = match dma_mem_location_t::from_raw(a.loc) {
            Some(l) if l != dma_mem_location_t::DMA_MEM_LOC_INVALID => l,
            _ => return Err(Error::InvalidLocation(a.loc)),
        };
        let usage = match dma_mem_usage_type_t::from_raw(a.usage) {
            Some(u) if u != dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_MAX => u,
            _ => return Err(Error::InvalidUsage(a.usage)),
        };
        let host = loc == dma_mem_location_t::HOST_DRAM;
        // 2. byte-category: host vs device table; 20 ⇒ usage invalid here.
        let cat = category_for(loc, usage);
        if cat == CATEGORY_INVALID {
            return Err(Error::UsageInvalidForLocation { usage, loc });
        }
        let AllocatorCore { pcore, dev, nc_id } = self.allocator_core(al, pinned)?;
        let g = self.dev_geom_ref(call, dev);
        // Recorded for host allocations too (`tdram_channel`, spec §3.2 step 5): libnrt passes
        // the core's default HBM whatever the location. So it is checked for them too: a
        // channel that does not exist would show in the trace line and the OOM table.
        let hbm = a.hbm_idx;
        if hbm >= g.channels {
            return Err(Error::HbmOutOfRange {
                hbm,
                channels: g.channels,
            });
        }
        let mut emulate = a.align != 0 && !self.aligned_alloc_supported(dev, g);
        if host && a.align != 0 && !emulate {
            // The driver's host pool refuses aligned requests (public ABI §3); said here, with
            // a clear message, instead of as the driver's bare EINVAL.
            return Err(Error::InvalidArgument(InvalidArg::AlignedHostAlloc));
        }
        // 3. metadata from the arenas (before touching the driver, so a full arena is its own
        //    error and needs no driver rollback). The generation and reference words are left
        //    alone: resolvers of old handles may be reading them.
        let shard = crate::ctx::core_shard(dev, nc_id);
        let (m, slot) = self.st.dmem.dmems.alloc_handle("dmem_t", false, shard)?;
        let (m, slot) = (m.as_ptr(), slot as usize);
        let ref_node = match ref_list {
            Some(_) => match self.st.dmem.ref_nodes.alloc_in(shard, "dmem_ref_node_t") {
                Ok(n) => n.as_ptr(),
                Err(e) => {
                    let _ = self.st.dmem.dmems.cancel(m);
                    return Err(e.into());
                }
            },
            None => null_mut(),
        };
        // Neither slot was seen outside this call: cancelled, not released (spec-free
        // bookkeeping, but a failed call must leave the arenas as it found them).
        let undo_meta = || {
            if !ref_node.is_null() {
                let _ = self.st.dmem.ref_nodes.cancel(ref_node);
            }
            let _ = self.st.dmem.dmems.cancel(m);
        };
        // The fields the request fixes go into the slot now, not held across the driver's
        // call (a failed call gives the slot back unpublished).
        self.dmem_write_request(
            m,
            &DmemFields {
                a,
                loc,
                usage,
                hbm,
                pcore,
                nc_id,
                dev,
                copy_buf: g.copy_buf.get(nc_id as usize).copied().unwrap_or(0),
            },
        );
        // 4. carve: natively aligned, or the over-allocate-and-offset emulation
        let mut req = AllocRequest {
            // Cannot overflow: size + align was checked above.
            size: if emulate { a.size + a.align } else { a.size },
            align: if emulate { 0 } else { a.align },
            host,
            hbm_idx: hbm,
            region: 0,
            nc_id,
            category: cat,
        };
        // ndl_memory_alloc + ndl_memory_get_pa (steps 4–5)
        let mut r = self.drv.memory_alloc_pa(dev, &req);
        if r == Err(errno::EINVAL) && a.align != 0 && !emulate && !host {
            (r, emulate) = self.alloc_aligned_refused(dev, &mut req, a);
        }
        let (handle, pa) = match r {
            Ok(r) => r,
            Err(e) => {
                undo_meta();
                return Err(self.alloc_failed(call, dev, nc_id, hbm, a, usage, host, emulate, e));
            }
        };
        // What the driver handed back is checked before anything else is recorded. A
        // repeated handle first: it is never given back (freeing it would free the block of
        // the dmem that holds it), whatever else is wrong with the answer. The set of live
        // handles records the new one with the same step (taken out again if the answer is
        // refused after all, before the block goes back to the driver).
        self.dmem_write_handle(m, handle);
        if handle != 0
            && !self
                .st
                .live_handles
                .claim(dev, handle, slot, |d, h, s| self.dmem_holds_key(d, h, s))
        {
            undo_meta();
            let e = Error::BadDriver {
                what: "memory_alloc: a handle a live allocation already holds",
                value: handle,
            };
            error!("dmem_alloc: {}", e);
            return Err(e);
        }
        let window = if host { g.host_window } else { g.hbm_window };
        if let Err(e) = self.check_driver_block(dev, window, handle, pa, req.size) {
            undo_meta();
            error!("dmem_alloc: {}", e);
            return Err(e);
        }
        // 5. the driver's answer into the slot, then publish it (generation, then one owner)
        //    to readers of live slots (the OOM dump) and to resolvers of the new handle.
        let offset = if emulate {
            align_offset(pa, a.align)
        } else {
            0
        };
        let allocated = a.size + offset; // offset <= align, and size + align was checked
        let generation = self.dmem_write_answer(m, pa, offset, allocated);
        // 6. ledger + trace: the booking `dml_add_entry` would read back from the dmem, from
        //    the values just written into it.
        let booking = Booking {
            dev,
            nc: nc_id,
            usage: usage as u32,
            channel: hbm,
            bytes: allocated,
            host,
        };
        self.dml_book(call, &booking, Action::Alloc);
        // 7. link before dummy_tail
        let linked = self.allocator_link(al, m);
        if let Err(e) = linked {
            // Undo everything (the dmem was never on this list and its handle was never
            // returned) and refuse the call.
            if !ref_node.is_null() {
                let _ = self.st.dmem.ref_nodes.cancel(ref_node);
            }
            self.dmem_cancel_unlinked(call, m);
            return Err(e);
        }
        // 8. weak GC index
        if let Some(list) = ref_list {
            let pushed = self.weak_index_push(list, ref_node, m);
            if let Err(e) = pushed {
                // Only a fresh node can be pushed, and it is unlinked: record the refusal; the
                // dmem stays allocated (on its allocator), only its weak entry is dropped.
                error!("dmem_alloc: {}: the weak index entry is dropped", e);
                let _ = self.st.dmem.ref_nodes.cancel(ref_node);
            }
        }
        Ok(NewDmem {
            m,
            index: slot as u32,
            generation,
        })
    }

    /// The driver refused an aligned request with EINVAL although the device said it takes
    /// them: perhaps it does not after all. EINVAL has other causes, so the emulation (`req`
    /// becomes `size + align`, unaligned) is tried once, and only its success latches
    /// "unsupported" (as `ndl_supports_align` does). Its out-of-memory is reported as such;
    /// any other refusal keeps the driver's first answer (and `req` as it was). Returns the
    /// answer and whether it is the emulation's.
    #[cold]
    #[inline(never)]
    fn alloc_aligned_refused(
        &self,
        dev: u32,
        req: &mut AllocRequest,
        a: &AllocArgs<'_>,
    ) -> (core::result::Result<(u64, u64), Errno>, bool) {
        let native = *req;
        *req = AllocRequest {
            size: a.size + a.align,
            align: 0,
            ..native
        };
        match self.drv.memory_alloc_pa(dev, req) {
            Ok(ok) => {
                self.latch_aligned_alloc_unsupported(dev);
                (Ok(ok), true)
            }
            // The emulated request is the one that ran out of memory.
            Err(errno::ENOMEM) => (Err(errno::ENOMEM), true),
            Err(_) => {
                *req = native;
                (Err(errno::EINVAL), false)
            }
        }
    }

    /// Checks a block the driver returned: handle 0 is no handle (nothing can be freed), and
    /// the block `[pa, pa + size)` must lie in the driver's window when it states one
    /// (`window`: [`crate::driver::Driver::pa_window`] of the block's pool, read at bring-up);
    /// a block outside is taken out of the set of live handles (where the allocation claimed
    /// it) and given back to the driver.
    #[inline(always)]
    fn check_driver_block(
        &self,
        dev: u32,
        window: Option<(u64, u64)>,
        handle: u64,
        pa: u64,
        size: u64,
    ) -> Result<()> {
        if handle == 0 {
            return Err(Error::BadDriver {
                what: "memory_alloc: allocation handle 0",
                value: 0,
            });
        }
        let inside = match window {
            None => pa.checked_add(size).is_some(),
            Some((base, len)) => {
                pa >= base
                    && pa
                        .checked_add(size)
                        .zip(base.checked_add(len))
                        .is_some_and(|(end, wend)| end <= wend)
            }
        };
        if !inside {
            self.st
                .live_handles
                .remove(dev, handle, |d, h, s| self.dmem_holds_key(d, h, s));
            if self.drv.memory_free(dev, handle).is_err() {
                // Refused twice over: the block stays the driver's, and is counted so.
                self.st.driver_kept.note(size);
            }
            return Err(Error::BadDriver {
                what: "memory_alloc: block outside the driver's address window",
                value: pa,
            });
        }
        Ok(())
    }

    /// Whether device `dev` takes aligned requests natively (spec §3.2 `ndl_supports_align`).
    /// The first time it is found not to, one WARN is logged and the answer is latched.
    pub(crate) fn aligned_alloc_supported(&self, dev: u32, g: &crate::ctx::DevGeom) -> bool {
        if g.aligned_alloc == 0 {
            self.latch_aligned_alloc_unsupported(dev);
            return false;
        }
        self.st
            .dmem
            .align_unsupported
            .get(dev as usize)
            .is_none_or(|l| l.load(Ordering::Relaxed) == 0)
    }

    /// Latches "no aligned allocation" for `dev`, with the one-shot WARN.
    fn latch_aligned_alloc_unsupported(&self, dev: u32) {
        let Some(latch) = self.st.dmem.align_unsupported.get(dev as usize) else {
            return;
        };
        if latch.load(Ordering::Relaxed) == 0 && latch.swap(1, Ordering::Relaxed) == 0 {
            warn!(
                "nd{}: the driver does not support aligned allocations; aligned requests are \
                 over-allocated by their alignment and offset",
                dev
            );
        }
    }

    /// Classifies a driver failure (spec §3.2 GOTCHA): device ENOMEM → `DeviceOom`
    /// (NRT_RESOURCE, with the ledger dump recorded), host ENOMEM → `HostOom`
    /// (NRT_FAIL_HOST_MEM_ALLOC), anything else → `Driver(errno)`. The driver refuses a size
    /// above `INT64_MAX` with EINVAL (it keeps sizes signed); no pool holds that many bytes, so
    /// such a request is the out-of-memory of its location like any other request larger
    /// than the pool: one status for "too large", whatever the size.
    #[allow(clippy::too_many_arguments)]
    fn alloc_failed(
        &self,
        call: &impl InCall,
        dev: u32,
        nc: u32,
        hbm: u32,
        a: &AllocArgs<'_>,
        usage: dma_mem_usage_type_t,
        host: bool,
        emulated: bool,
        e: Errno,
    ) -> Error {
        let requested = if emulated {
            a.size.saturating_add(a.align)
        } else {
            a.size
        };
        let too_large = e == errno::EINVAL && requested > i64::MAX as u64;
        if e != errno::ENOMEM && !too_large {
            return Error::Driver(e);
        }
        if host {
            let err = Error::HostOom {
                size: a.size,
                dma: true,
            };
            error!("{}", err);
            return err;
        }
        // Device OOMs only, as `device_totals` reports them.
        self.dev_ext(dev).oom_count.fetch_add(1, Ordering::Relaxed);
        let err = Error::DeviceOom {
            size: a.size,
            align: a.align,
            device: dev,
            nc,
            hbm,
            usage,
            emulated: emulated && a.align != 0,
        };
        error!("{}", err);
        self.record_oom(call, err);
        err
    }
}

/// The aligned-alloc emulation's offset, reproduced exactly (spec §3.2):
/// `((pa + alignment) & -alignment) - pa`. Quirk kept: an already aligned `pa` gets a full
/// `alignment` of offset, not 0 — the over-allocation of `size + alignment` covers it.
pub const fn align_offset(pa: u64, alignment: u64) -> u64 {
    (pa.wrapping_add(alignment) & alignment.wrapping_neg()).wrapping_sub(pa)
}

#[cfg(test)]
mod tests {
    use super::align_offset;

    #[test]
    fn align_offset_quirk() {
        assert_eq!(
            align_offset(0x1000, 0x1000),
            0x1000,
            "aligned pa gets a full alignment"
        );
        assert_eq!(align_offset(0x1001, 0x1000), 0xfff);
        assert_eq!(align_offset(0x1fff, 0x1000), 1);
        assert_eq!(align_offset(0x10_0040, 64), 64);
    }
}
