//! The tensor domain's arenas (state split by domain): the one place they
//! are declared, sized and bound. Their members are `pub(crate)` for two users only: the
//! tensor module and its raw-memory accessors in `tensor/access.rs` (the domain's one file
//! outside `deny(unsafe_code)`).

use crate::abi::*;
use crate::arena::{Arena, ArenaStats, Chain, Chunk, SideTable};
use crate::atomic::AtomicU64;
use crate::config::{Capacity, TENSOR_NAME_MAX};
use crate::ctx::{Binder, Part};

/// The tensors, their storages and names, the tensor sets (spec §7) and the execute data
/// locks, as a [`crate::ctx::CoreState`] holds them. Valid when all-zero (every arena unbound,
/// every lock unlocked).
pub(crate) struct TensorPool {
    pub(crate) tensors: Arena<nrt_tensor_t>,
    /// Per `tensors` slot: the tensor's name text (`nrt_tensor_t.name` points here).
    pub(crate) tensor_names: SideTable<[u8; TENSOR_NAME_MAX + 1]>,
    pub(crate) storages: Arena<nrt_tensor_storage_t>,
    /// Tensor sets ([`SetSlot`]), named by `SetHandle`s.
    pub(crate) sets: Arena<SetSlot>,
    /// The chunks of the sets' entries.
    pub(crate) set_chunks: Arena<SetChunk>,
    /// The chunks of the tensors executions in flight have bound ([`super::exec`]).
    pub(crate) bind_chunks: Arena<BindChunk>,
    /// Held by executions while they move their data (`execute`): the simulated stand-in for
    /// spec §7.1's DMA ordering, so an execution's inputs are never read while another
    /// execution, on any core, is writing them. Striped by tensor storage
    /// ([`super::exec::ExecDataGuard`]): an execution takes the stripes of the storages it binds,
    /// so executions sharing a tensor serialise and independent ones (one per core) rarely
    /// meet.
    pub(crate) exec_data_locks: [crate::ctx::state::ledger::CoreLock; EXEC_DATA_STRIPES],
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
            Part::side_table::<[u8; TENSOR_NAME_MAX + 1]>(t),
            Part::arena::<nrt_tensor_storage_t>(s, sh, "Capacity.storages (NRT_DMEM_MAX_TENSORS)"),
            Part::arena::<SetSlot>(sets, 1, "Capacity.sets (NRT_DMEM_MAX_SETS)"),
            Part::arena::<SetChunk>(
                c.set_chunks as usize,
                1,
                "Capacity.set_chunks (NRT_DMEM_MAX_SETS)",
            ),
            Part::arena::<BindChunk>(
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

/// Named tensors per chunk of a tensor set (`Capacity::set_chunks` counts chunks).
pub const SET_CHUNK: usize = 16;

/// One tensor set (`nrt_tensor_set_t`, spec §7.3; libnrt's `kbl_feature_map_set_t`): a slot
/// of the core's set arena (`CoreState::sets`, sized by [`crate::Capacity::sets`]), named by
/// a [`SetHandle`](crate::handle::SetHandle) through the pin protocol of [`crate::handle`]. Valid when all-zero.
#[repr(C)]
pub struct SetSlot {
    /// The slot's generation (only through `Arena::words`, atomically).
    pub(crate) generation: u32,
    _pad: u32,
    /// Owners (1 while the set lives) and pins.
    pub(crate) refs: crate::atomic::AtomicU64,
    /// The entries, behind the lock that guards them (`SetPin::body`, the one way to them):
    /// taken by `set_add`, `set_get`, `set_len` and an execution's binding, only while the set
    /// is pinned.
    pub(crate) body: crate::sync::DataLock<SetBody>,
}

const _: () = assert!(core::mem::offset_of!(SetSlot, generation) == 0);
const _: () = assert!(core::mem::offset_of!(SetSlot, refs) == 8);

// `SetSlot` is valid all-zero: its `ZeroValid` impl sits with the set slot's accessors
// (`tensor/access.rs`).

/// One named tensor of a set.
#[repr(C)]
pub(crate) struct SetEntry {
    /// [`name_hash`](crate::tensor::set::name_hash) of the name: compared before the name itself.
    pub(crate) hash: u32,
    /// The tensor's handle words.
    pub(crate) tensor: [u32; 3],
    pub(crate) name: [u8; TENSOR_NAME_MAX + 1],
}

// `SetEntry` is valid all-zero: its `ZeroValid` impl sits with the set slot's accessors.

/// A chunk of tensor-set entries.
pub(crate) type SetChunk = Chunk<SetEntry, SET_CHUNK>;

/// A set's entries: (name, tensor handle words) pairs in insertion order, in chunks of the
/// `set_chunks` arena, as many as the set is given.
#[repr(C)]
pub(crate) struct SetBody {
    pub(crate) entries: Chain,
}

/// Tensors per chunk of an execution's bound list (`Capacity::bind_chunks` counts chunks).
pub const BIND_CHUNK: usize = 64;

/// Stripes of the execute data lock (`CoreState::exec_data_locks`): one bit each of a `u64`.
pub(crate) const EXEC_DATA_STRIPES: usize = 64;

/// One tensor an execution binds: pinned (its reference word), with the storage it viewed
/// when the execution marked it (null until then).
#[repr(C)]
pub(crate) struct Bound {
    pub(crate) t: *mut nrt_tensor_t,
    pub(crate) refs: *const AtomicU64,
    pub(crate) sto: *mut nrt_tensor_storage_t,
}

/// A chunk of the tensors executions bind.
pub(crate) type BindChunk = crate::arena::Chunk<Bound, { BIND_CHUNK }>;
