//! The dmem domain's arenas (state split by domain): the one place they are
//! declared, sized and bound. Their members are the dmem module's; the rest of the core
//! reaches them through the methods here.

use core::sync::atomic::{AtomicU8, Ordering};

use crate::atomic::AtomicU64;

use crate::abi::*;
use crate::arena::{Arena, ArenaStats, SideTable};
use crate::config::Capacity;
use crate::ctx::{Binder, Part};

/// The dmems (spec §3.1, §3.2), their allocators, the weak GC indexes that reference them
/// and the per-device aligned-alloc latch, as a [`crate::ctx::CoreState`] holds them. Valid
/// when all-zero (every arena unbound).
pub(crate) struct DmemPool {
    pub(crate) dmems: Arena<dmem_t>,
    pub(crate) allocators: Arena<dmem_allocator_t>,
    /// Per `allocators` slot: 1 when the allocator was made through the public
    /// `dmem_allocator_create` (the caller's to destroy), 0 when the runtime owns it (a core's
    /// GLOBAL allocator, a model's MODEL allocators).
    pub(crate) caller_allocators: SideTable<AtomicU8>,
    /// Per `allocators` slot: the generation and reference words that [`AllocatorHandle`]s
    /// resolve against (the pin protocol of [`crate::handle`]; the ABI's `dmem_allocator_t`
    /// has no room for them). They outlive the slot's occupants, so a handle of a destroyed
    /// allocator never names the slot's next one.
    ///
    /// [`AllocatorHandle`]: crate::handle::AllocatorHandle
    pub(crate) allocator_words: SideTable<AllocatorWords>,
    /// Per device: 1 once aligned allocation is known to be unsupported (the device said so
    /// at bring-up, or the driver refused an aligned request) and the one-shot WARN is out:
    /// the latch of spec §3.2's `ndl_supports_align`. Cleared by `init`.
    pub(crate) align_unsupported: [AtomicU8; constants::MAX_MLA_PER_PROCESS],
    pub(crate) ref_nodes: Arena<dmem_ref_node_t>,
    pub(crate) dmem_lists: Arena<dmem_list_t>,
}

/// The handle words of one allocator slot ([`DmemPool::allocator_words`]): its generation (odd
/// while an allocator lives in the slot), its reference word (one owner while it lives, plus a
/// pin per call using it through a handle), and whether it is a core's GLOBAL allocator, which
/// lives from `init` to `close` and so needs no pin inside a gated call; and the physical core
/// it allocates for, resolved in the context tree once, at its creation (the tree does not
/// change between `init` and `close`, and no allocator outlives `close`).
#[derive(Default)]
pub(crate) struct AllocatorWords {
    pub(crate) gen: core::sync::atomic::AtomicU32,
    pub(crate) stable: core::sync::atomic::AtomicU32,
    pub(crate) refs: AtomicU64,
    /// `device << 16 | core` of the allocator's `pcore`, written before the generation is
    /// published.
    pub(crate) core: core::sync::atomic::AtomicU32,
}

impl DmemPool {
    /// Arenas in the pool (its share of [`crate::ctx::CoreState::arena_stats`]).
    pub(crate) const ARENAS: usize = 4;

    /// The pool's storage parts for `c`, in the order [`Self::bind`] hands them out: the one
    /// list that sizes the pool's region and binds it.
    pub(crate) const fn parts(c: &Capacity) -> [Part; 6] {
        let (d, al, mr, sh) = (
            c.dmems as usize,
            c.allocators as usize,
            c.mr_sets as usize,
            c.shards as usize,
        );
        [
            Part::arena::<dmem_t>(d, sh, "Capacity.dmems (NRT_DMEM_MAX_DMEMS)"),
            Part::arena::<dmem_allocator_t>(al, sh, "Capacity.allocators"),
            Part::side_table::<AtomicU8>(al),
            Part::side_table::<AllocatorWords>(al),
            Part::arena::<dmem_ref_node_t>(d, sh, "Capacity.dmems (NRT_DMEM_MAX_DMEMS)"),
            Part::arena::<dmem_list_t>(mr, 1, "Capacity.mr_sets (NRT_DMEM_MAX_MODELS)"),
        ]
    }

    /// Binds the arenas to the pool's region (`b`), as [`Self::parts`] lays it out.
    pub(crate) fn bind(&mut self, b: &mut Binder, c: &Capacity) {
        let [dmems, allocators, caller, words, ref_nodes, lists] = Self::parts(c);
        b.arena(&mut self.dmems, dmems);
        b.arena(&mut self.allocators, allocators);
        b.side_table(&mut self.caller_allocators, caller);
        b.side_table(&mut self.allocator_words, words);
        b.arena(&mut self.ref_nodes, ref_nodes);
        b.arena(&mut self.dmem_lists, lists);
    }

    /// Occupancy of each arena, for footprint reports.
    pub(crate) fn stats(&self) -> [(&'static str, ArenaStats); Self::ARENAS] {
        [
            ("dmem_t", self.dmems.stats()),
            ("dmem_allocator_t", self.allocators.stats()),
            ("dmem_ref_node_t", self.ref_nodes.stats()),
            ("dmem_list_t", self.dmem_lists.stats()),
        ]
    }

    /// The dmem arena, read-only in intent: for the tree accessors that copy a dmem's fixed
    /// members under its shard lock (`Nrt::dmem_fixed` and its kin in ctx) and the raw API's
    /// pointer checks (`raw::dmem_handle`, `raw::dmem_alloc`), its readers outside this
    /// module.
    pub(crate) fn dmems(&self) -> &Arena<dmem_t> {
        &self.dmems
    }

    /// `init`'s reset of device `dev`'s aligned-alloc latch (a new device may align).
    pub(crate) fn clear_align_latch(&self, dev: u32) {
        if let Some(l) = self.align_unsupported.get(dev as usize) {
            l.store(0, Ordering::Relaxed);
        }
    }
}
