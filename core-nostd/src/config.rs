//! Compile-time capacities of the core's static arenas (no heap; issue "No heap in the core").
//!
//! Every arena is zero-initialised, so in `.bss` or a zeroed allocation it costs address space
//! only until a slot is touched. When one is full, the caller gets [`crate::Error::ArenaFull`]
//! naming it — raise the constant here.

/// Live `dmem_t` allocations across all devices (each 192 B).
pub const MAX_DMEM: usize = 32768;
/// Live dmem allocators: one GLOBAL per core plus one MODEL per loaded subgraph.
pub const MAX_ALLOCATORS: usize = 1024;
/// Resident models across all cores (each `model_t` is 7744 B).
pub const MAX_MODELS: usize = 128;
/// Subgraph slots (mr_sets): each owns a MODEL allocator, a 1024-bucket mem_ref_set and a
/// gc_tracker (spec §5.2).
pub const MAX_MR_SETS: usize = 256;
/// Buckets of each core's model_db (power of two, spec §4.1).
pub const MODEL_DB_BUCKETS: usize = 64;
/// Bytes kept of each allocation's hint, including the NUL (`dmem_t.hint_buf`).
pub const HINT_LEN: usize = 48;
/// Staged ulib sets (shared ext-isa copies + per-model sets, spec §6).
pub const MAX_ULIB_SETS: usize = 256;
/// Live tensors (`nrt_tensor_t`, 192 B each).
pub const MAX_TENSORS: usize = 8192;
/// Live tensor storages (`nrt_tensor_storage_t`, 320 B each).
pub const MAX_STORAGES: usize = 8192;
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
