//! Capacities of the core's arenas, chosen by the integrator ([`Capacity`]),
//! and the fixed sizes of the ABI (the core has no heap).
//!
//! Every arena's storage is zero-initialised, so in `.bss` or a zeroed allocation it costs
//! address space only until a slot is touched. When one is full, the caller gets
//! [`crate::Error::ArenaFull`] naming it and the [`Capacity`] field (and the std shim's
//! environment variable) that raises it.

/// How many slots each arena of a [`crate::CoreState`] has, and into how many shards the
/// arenas are cut. [`Capacity::DEFAULT`] is the sizing for 32 devices;
/// [`Capacity::ONE_DEVICE`] is a small profile for one-device firmware. `devices` also sizes
/// the ABI context (`tdrv_ctx_t` holds `mla[devices]`, 590 008 B each: the full 18.9 MB
/// context for 32, [`crate::ctx::ContextLayout`]; spec §1, facts v2).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Capacity {
    /// Devices the runtime attaches at most (1..=32): sizes the context tree (its `mla_t`
    /// slots and their side state, [`crate::ctx::ContextLayout`]) and the per-core model_db
    /// arena. 32 keeps libnrt's whole `tdrv_ctx_t`.
    pub devices: u32,
    /// Live `dmem_t` allocations (192 B each) across all devices; also the dmem reference
    /// nodes and the mem_ref_set nodes.
    pub dmems: u32,
    /// Live dmem allocators: one GLOBAL per core plus one MODEL per loaded subgraph.
    pub allocators: u32,
    /// Resident models across all cores (each `model_t` is 7744 B).
    pub models: u32,
    /// Chunks of the resident models' IO tables, [`crate::model::IO_CHUNK`] declared inputs
    /// and outputs each (3.2 KiB): a model with `n` IO tensors holds `n / 8` rounded up.
    pub io_chunks: u32,
    /// Subgraph slots (mr_sets): each owns a 1024-bucket mem_ref_set and a dmem list
    /// (spec §5.2).
    pub mr_sets: u32,
    /// Staged ulib sets (shared ext-isa copies + per-model sets, spec §6).
    pub ulib_sets: u32,
    /// Live tensors (`nrt_tensor_t`, 192 B each, plus 96 B of name text).
    pub tensors: u32,
    /// Live tensor storages (`nrt_tensor_storage_t`, 320 B each).
    pub storages: u32,
    /// Live tensor sets (`nrt_tensor_set_t`, spec §7.3).
    pub sets: u32,
    /// Chunks of the tensor sets' entries, [`crate::tensor::SET_CHUNK`] named tensors each
    /// (4.3 KiB): a set of `n` tensors holds `n / 16` rounded up.
    pub set_chunks: u32,
    /// Chunks of the tensors executions in flight have bound, [`crate::tensor::BIND_CHUNK`]
    /// each (1 KiB): an execution of `n` inputs and outputs holds `n / 64` rounded up while it
    /// runs.
    pub bind_chunks: u32,
    /// Shards per arena (1..=[`MAX_SHARDS`]): calls preferring different
    /// shards (different cores) take different locks.
    pub shards: u32,
}

/// The largest capacity of one arena (slot indices stay far from `u32` wrap): room for one
/// dmem per 4 KiB page of 512 GiB of device memory.
pub const MAX_ARENA_SLOTS: u32 = 1 << 27;

impl Capacity {
    /// A general sizing for 32 devices: 32 768 dmems, 8 192 tensors, 128 models with 32 IO
    /// tensors each on average, 1 024 sets of 16 tensors each on average.
    pub const DEFAULT: Capacity = Capacity {
        devices: constants::MAX_MLA_PER_PROCESS as u32,
        dmems: 32768,
        allocators: 1024,
        models: 128,
        io_chunks: 512,
        mr_sets: 256,
        ulib_sets: 256,
        tensors: 8192,
        storages: 8192,
        sets: 1024,
        set_chunks: 1024,
        bind_chunks: 512,
        shards: MAX_SHARDS as u32,
    };

    /// A one-device firmware profile (8 cores): 512 dmems, 256 tensors, 8 models with 8
    /// subgraphs between them (a mem_ref_set is 49 KiB, the largest slot), 128 IO tensors,
    /// 256 set entries and 512 bound tensors; with its one-device context region the whole
    /// storage ([`crate::CoreState::storage_bytes`]) is under 1.6 MiB.
    pub const ONE_DEVICE: Capacity = Capacity {
        devices: 1,
        dmems: 512,
        allocators: 32,
        models: 8,
        io_chunks: 16,
        mr_sets: 8,
        ulib_sets: 8,
        tensors: 256,
        storages: 256,
        sets: 8,
        set_chunks: 16,
        bind_chunks: 8,
        shards: 2,
    };

    /// `Ok` when every field is in range: `devices` in 1..=32, `shards` in
    /// 1..=[`MAX_SHARDS`], every arena 1..=[`MAX_ARENA_SLOTS`] slots (enough
    /// allocators for one GLOBAL per core of every device). The message names the field.
    pub const fn check(&self) -> Result<(), &'static str> {
        if self.devices == 0 || self.devices as usize > constants::MAX_MLA_PER_PROCESS {
            return Err("Capacity.devices must be 1..=32");
        }
        if self.shards == 0 || self.shards as usize > MAX_SHARDS {
            return Err("Capacity.shards must be 1..=8");
        }
        let arenas = [
            (self.dmems, "Capacity.dmems must be 1..=134217728"),
            (self.allocators, "Capacity.allocators must be 1..=134217728"),
            (self.models, "Capacity.models must be 1..=134217728"),
            (self.io_chunks, "Capacity.io_chunks must be 1..=134217728"),
            (self.mr_sets, "Capacity.mr_sets must be 1..=134217728"),
            (self.ulib_sets, "Capacity.ulib_sets must be 1..=134217728"),
            (self.tensors, "Capacity.tensors must be 1..=134217728"),
            (self.storages, "Capacity.storages must be 1..=134217728"),
            (self.sets, "Capacity.sets must be 1..=134217728"),
            (self.set_chunks, "Capacity.set_chunks must be 1..=134217728"),
            (
                self.bind_chunks,
                "Capacity.bind_chunks must be 1..=134217728",
            ),
        ];
        let mut i = 0;
        while i < arenas.len() {
            if arenas[i].0 == 0 || arenas[i].0 > MAX_ARENA_SLOTS {
                return Err(arenas[i].1);
            }
            i += 1;
        }
        if self.allocators < self.devices * constants::TPBS_PER_MLA as u32 {
            return Err(
                "Capacity.allocators must hold one GLOBAL allocator per core (8 per device)",
            );
        }
        Ok(())
    }
}

impl Default for Capacity {
    fn default() -> Self {
        Capacity::DEFAULT
    }
}

const _: () = assert!(Capacity::DEFAULT.check().is_ok());
const _: () = assert!(Capacity::ONE_DEVICE.check().is_ok());

use crate::abi::constants;

/// Most shards an arena is cut into (a capacity chooses up to this many).
pub const MAX_SHARDS: usize = 8;

/// Buckets of each core's model_db (power of two, spec §4.1).
pub const MODEL_DB_BUCKETS: usize = 64;
/// Bytes kept of each allocation's hint, including the NUL (`dmem_t.hint_buf`).
pub const HINT_LEN: usize = 48;
/// Logical cores a process can own (32 devices × 8 cores at LNC 1).
pub const MAX_VCORES: usize = 256;
/// Maximum logical-core size: `virtual_core_t.tpbs` holds 2 physical cores (spec §9).
pub const MAX_LNC_SIZE: u32 = 2;
/// Subgraphs per model (one MODEL heap each).
pub const MAX_SUBGRAPHS: usize = 8;
/// Default scratchpad page size (spec §8: configurable; 64 MiB when contiguous).
pub const DEFAULT_SCRATCHPAD_PAGE_SIZE: u64 = 4 << 20;
/// Longest allocation hint a model may declare (bytes, excluding the NUL).
pub const MEM_REF_NAME_LEN_MAX: usize = HINT_LEN - 1;
/// Bytes kept of the OOM table captured at the moment of the last device OOM (spec §3.4
/// `dml_driver_dump`); a longer table is truncated.
pub const OOM_DUMP_BYTES: usize = 8192;

/// Longest tensor name (bytes, excluding the NUL): `NRT_TENSOR_NAME_MAX - 1`, what the public
/// `nrt_tensor_info_t.name[NRT_TENSOR_NAME_MAX]` holds with its NUL (public API §2).
pub const TENSOR_NAME_MAX: usize = 255;
