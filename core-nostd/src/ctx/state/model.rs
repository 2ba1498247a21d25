//! The model domain's arenas (state split by domain): the one place they are
//! declared, sized and bound. Their members are `pub(crate)` for two users only: the model
//! module and its raw-memory accessors in `model/access.rs` (the domain's one file outside
//! `deny(unsafe_code)`); the rest of the core reaches them through the methods here.

use crate::abi::*;
use crate::arena::{Arena, ArenaStats, Chain, GiveBack, SideTable};
use crate::config::Capacity;
use crate::ctx::{Binder, MemRefSet, ModelDb, Part, UlibSet};
use crate::error::Result;

/// The models (spec §4), their per-core databases, per-subgraph mem_ref sets and nodes, their
/// scratchpad cleanup records (§8) and the GPSIMD library sets they stage (§6), as a
/// [`crate::ctx::CoreState`] holds them. Valid when all-zero (every arena unbound).
pub(crate) struct ModelPool {
    pub(crate) models: Arena<model_t>,
    /// Per `models` slot: the model's IO table, a chain of [`ModelIoEntry`] chunks.
    pub(crate) model_io: SideTable<Chain>,
    /// The chunks of the models' IO tables.
    pub(crate) io_chunks: Arena<IoChunk>,
    pub(crate) model_dbs: Arena<ModelDb>,
    pub(crate) mem_ref_sets: Arena<MemRefSet>,
    pub(crate) mem_ref_nodes: Arena<ht_node_t>,
    pub(crate) sp_cleanup: Arena<tdrv_scratchpad_cleanup_info_t>,
    pub(crate) ulib_sets: Arena<UlibSet>,
}

impl ModelPool {
    /// Arenas in the pool (its share of [`crate::ctx::CoreState::arena_stats`]).
    pub(crate) const ARENAS: usize = 7;

    /// The pool's storage parts for `c`, in the order [`Self::bind`] hands them out: the one
    /// list that sizes the pool's region and binds it.
    pub(crate) const fn parts(c: &Capacity) -> [Part; 8] {
        let (d, m, mr, u, sh) = (
            c.dmems as usize,
            c.models as usize,
            c.mr_sets as usize,
            c.ulib_sets as usize,
            c.shards as usize,
        );
        let dbs = c.devices as usize * constants::TPBS_PER_MLA;
        [
            Part::arena::<model_t>(m, 1, "Capacity.models (NRT_DMEM_MAX_MODELS)"),
            Part::side_table::<Chain>(m),
            Part::arena::<IoChunk>(
                c.io_chunks as usize,
                sh,
                "Capacity.io_chunks (NRT_DMEM_MAX_MODELS)",
            ),
            Part::arena::<ModelDb>(dbs, 1, "Capacity.devices"),
            Part::arena::<MemRefSet>(mr, 1, "Capacity.mr_sets (NRT_DMEM_MAX_MODELS)"),
            Part::arena::<ht_node_t>(d, sh, "Capacity.dmems (NRT_DMEM_MAX_DMEMS)"),
            Part::arena::<tdrv_scratchpad_cleanup_info_t>(
                m,
                1,
                "Capacity.models (NRT_DMEM_MAX_MODELS)",
            ),
            Part::arena::<UlibSet>(u, 1, "Capacity.ulib_sets"),
        ]
    }

    /// Binds the arenas to the pool's region (`b`), as [`Self::parts`] lays it out.
    pub(crate) fn bind(&mut self, b: &mut Binder, c: &Capacity) {
        let [models, io, io_chunks, dbs, sets, nodes, cleanup, ulib] = Self::parts(c);
        b.arena(&mut self.models, models);
        b.side_table(&mut self.model_io, io);
        b.arena(&mut self.io_chunks, io_chunks);
        b.arena(&mut self.model_dbs, dbs);
        b.arena(&mut self.mem_ref_sets, sets);
        b.arena(&mut self.mem_ref_nodes, nodes);
        b.arena(&mut self.sp_cleanup, cleanup);
        b.arena(&mut self.ulib_sets, ulib);
    }

    /// Occupancy of each arena, for footprint reports.
    pub(crate) fn stats(&self) -> [(&'static str, ArenaStats); Self::ARENAS] {
        [
            ("model_t", self.models.stats()),
            ("model io chunk", self.io_chunks.stats()),
            ("model_db", self.model_dbs.stats()),
            ("mem_ref_set", self.mem_ref_sets.stats()),
            ("mem_ref_node", self.mem_ref_nodes.stats()),
            ("tdrv_scratchpad_cleanup_info_t", self.sp_cleanup.stats()),
            ("ulib_set", self.ulib_sets.stats()),
        ]
    }

    /// A zeroed model_db table for a core's bring-up (`init`, spec §4.3).
    pub(crate) fn alloc_model_db(&self) -> Result<*mut ModelDb> {
        Ok(self.model_dbs.alloc("model_db")?.as_ptr())
    }

    /// Gives back a core's model_db table at teardown (a pointer that is not a live table
    /// of this pool is left alone).
    pub(crate) fn release_model_db(&self, db: *const ModelDb) {
        let _ = self.model_dbs.give_back(db, GiveBack::Release);
    }

    /// The GPSIMD library sets (spec §6), for `ulib`, which stages and frees them for the
    /// models, and the tree accessor that lists a live set's dmems.
    pub(crate) fn ulib_sets(&self) -> &Arena<UlibSet> {
        &self.ulib_sets
    }
}

/// Longest declared input / output name (bytes, excluding the NUL): `NRT_TENSOR_NAME_MAX - 1`,
/// what `nrt_tensor_info_t.name` holds with its NUL and the longest name a tensor set binds
/// ([`crate::config::TENSOR_NAME_MAX`]).
pub const IO_NAME_MAX: usize = crate::config::TENSOR_NAME_MAX;

/// Most dimensions of a declared tensor (the NEFF reader's `MAX_DIMS`, neff-format §6).
pub const IO_DIMS_MAX: usize = 32;

/// One declared input or output of a resident model: what `nrt_get_model_tensor_info`
/// returns for it (a NEFF's `neff.json` row, a manifest's tensor). `model_t` has no gap for a
/// table, so each model slot has a [`crate::arena::Chain`] of these beside the model arena
/// (`ModelPool::model_io`), in chunks of [`IO_CHUNK`] from the `io_chunks` arena: a model
/// declares as many as it has. Valid when all-zero.
#[repr(C)]
pub(crate) struct ModelIoEntry {
    pub(crate) size: u64,
    pub(crate) dtype: u32,
    pub(crate) ndim: u32,
    pub(crate) shape: [u32; IO_DIMS_MAX],
    pub(crate) name: [u8; IO_NAME_MAX + 1],
}

/// IO entries per chunk of a model's IO table (`Capacity::io_chunks` counts chunks).
pub const IO_CHUNK: usize = 8;

/// A chunk of model IO tables.
pub(crate) type IoChunk = crate::arena::Chunk<ModelIoEntry, IO_CHUNK>;
