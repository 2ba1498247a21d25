//! The tensor domain's arenas (state split by domain): the one place they
//! are declared, sized and bound. Their members are `pub(crate)` for two users only: the
//! tensor module and its raw-memory accessors in `tensor/access.rs` (the domain's one file
//! outside `deny(unsafe_code)`).

use crate::abi::*;
use crate::arena::{Arena, ArenaStats, SideTable};
use crate::config::Capacity;
use crate::ctx::{Binder, Part};

/// The tensors, their storages and names, the tensor sets (spec §7) and the execute data
/// locks, as a [`crate::ctx::CoreState`] holds them. Valid when all-zero (every arena unbound,
/// every lock unlocked).
pub(crate) struct TensorPool {
    pub(crate) tensors: Arena<nrt_tensor_t>,
    /// Per `tensors` slot: the tensor's name text (`nrt_tensor_t.name` points here).
    pub(crate) tensor_names: SideTable<[u8; super::TENSOR_NAME_MAX + 1]>,
    pub(crate) storages: Arena<nrt_tensor_storage_t>,
    /// Tensor sets ([`super::SetSlot`]), named by `SetHandle`s.
    pub(crate) sets: Arena<super::SetSlot>,
    /// The chunks of the sets' entries.
    pub(crate) set_chunks: Arena<super::set::SetChunk>,
    /// The chunks of the tensors executions in flight have bound ([`super::exec`]).
    pub(crate) bind_chunks: Arena<super::exec::BindChunk>,
    /// Held by executions while they move their data (`execute`): the simulated stand-in for
    /// spec §7.1's DMA ordering, so an execution's inputs are never read while another
    /// execution, on any core, is writing them. Striped by tensor storage
    /// ([`super::exec::ExecDataGuard`]): an execution takes the stripes of the storages it binds,
    /// so executions sharing a tensor serialise and independent ones (one per core) rarely
    /// meet.
    pub(crate) exec_data_locks: [crate::ctx::state::ledger::CoreLock; super::EXEC_DATA_STRIPES],
}

impl TensorPool {
    /// Arenas in the pool (its share of [`crate::ctx::CoreState::arena_stats`]).
    pub(crate) const ARENAS: usize = 5;

    /// The pool's storage parts for `c`, in the order [`Self::bind`] hands them out: the one
    /// list that sizes the pool's region and binds it.
    pub(crate) const fn parts(c: &Capacity) -> [Part; 6] {
        let (t, s, sets, sh) = (
            c.tensors as usize,
            c.storages as usize,
            c.sets as usize,
            c.shards as usize,
        );
        [
            Part::arena::<nrt_tensor_t>(t, sh, "Capacity.tensors (NRT_DMEM_MAX_TENSORS)"),
            Part::side_table::<[u8; super::TENSOR_NAME_MAX + 1]>(t),
            Part::arena::<nrt_tensor_storage_t>(s, sh, "Capacity.storages (NRT_DMEM_MAX_TENSORS)"),
            Part::arena::<super::SetSlot>(sets, 1, "Capacity.sets (NRT_DMEM_MAX_SETS)"),
            Part::arena::<super::set::SetChunk>(
                c.set_chunks as usize,
                1,
                "Capacity.set_chunks (NRT_DMEM_MAX_SETS)",
            ),
            Part::arena::<super::exec::BindChunk>(
                c.bind_chunks as usize,
                sh,
                "Capacity.bind_chunks (NRT_DMEM_MAX_TENSORS)",
            ),
        ]
    }

    /// Binds the arenas to the pool's region (`b`), as [`Self::parts`] lays it out.
    pub(crate) fn bind(&mut self, b: &mut Binder, c: &Capacity) {
        let [tensors, names, storages, sets, set_chunks, bind_chunks] = Self::parts(c);
        b.arena(&mut self.tensors, tensors);
        b.side_table(&mut self.tensor_names, names);
        b.arena(&mut self.storages, storages);
        b.arena(&mut self.sets, sets);
        b.arena(&mut self.set_chunks, set_chunks);
        b.arena(&mut self.bind_chunks, bind_chunks);
    }

    /// Occupancy of each arena, for footprint reports.
    pub(crate) fn stats(&self) -> [(&'static str, ArenaStats); Self::ARENAS] {
        [
            ("nrt_tensor_t", self.tensors.stats()),
            ("nrt_tensor_storage_t", self.storages.stats()),
            ("tensor_set", self.sets.stats()),
            ("tensor set chunk", self.set_chunks.stats()),
            ("bound tensor chunk", self.bind_chunks.stats()),
        ]
    }
}
