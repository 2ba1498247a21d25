//! The three `.rodata` byte tables indexed by usage type (spec §3.3), and the constants of
//! `layout-facts.toml`.
//!
//! All three tables are libnrt 2.31's bytes exactly (facts v2 `[tables]`, read from `.rodata`
//! at 0x9b9640 / 0x9b9660 / 0x9b9e80). The category bytes are the driver's
//! `mem_alloc_category_t`. CONFLICT: the spec's prose puts the host sentinel at the DMA-ring
//! indices 18..21; its own byte dump (kept here) has it at SCRATCHPAD, CC and
//! SCRATCHPAD_NOT_SHARED, and maps the DMA rings to DMA_RINGS_HOST (17).
#![deny(unsafe_code)]

use super::enums::{dma_mem_location_t, dma_mem_usage_type_t, mem_aggr_index_t};

/// `0x14`: the category byte meaning "usage invalid for this location" (spec §3.2 step 2).
/// Not the usage member `DMA_RING_IO` (also 20): see the spec §3.3 QUIRK.
pub const CATEGORY_INVALID: u8 = 20;

/// `dmem_usage_type_to_host_category` (.rodata @0x9b9640 in libnrt).
pub const DMEM_USAGE_TYPE_TO_HOST_CATEGORY: [u8; 23] = [
    4,  // GENERIC               → MISC_HOST
    1,  // INSTR_PE              → CODE_HOST
    1,  // INSTR_ACT             → CODE_HOST
    4,  // INSTR_POOL            → MISC_HOST
    1,  // IO                    → CODE_HOST
    4,  // DRAM_SPILL            → MISC_HOST
    3,  // WEIGHT                → CONSTANTS_HOST
    6,  // NOTIFICATION          → NOTIFICATION_HOST
    4,  // ACT_TABLE             → MISC_HOST
    1,  // INSTR_DVE             → CODE_HOST
    1,  // INSTR_SP              → CODE_HOST
    20, // SCRATCHPAD            → invalid on host
    2,  // TENSOR                → TENSORS_HOST
    1,  // UCODE_LIB             → CODE_HOST
    4,  // POOL_STDIO            → MISC_HOST
    20, // CC                    → invalid on host
    20, // SCRATCHPAD_NOT_SHARED → invalid on host
    4,  // XT_CC                 → MISC_HOST
    17, // DMA_RING              → DMA_RINGS_HOST
    17, // DMA_RING_SPILL        → DMA_RINGS_HOST
    17, // DMA_RING_IO           → DMA_RINGS_HOST
    17, // DMA_RING_COLLECTIVES  → DMA_RINGS_HOST
    0,  // MAX                   → (not an allocation type)
];

/// `dmem_usage_type_to_device_category` (.rodata @0x9b9660 in libnrt).
pub const DMEM_USAGE_TYPE_TO_DEVICE_CATEGORY: [u8; 23] = [
    12, // GENERIC               → MISC_DEVICE
    8,  // INSTR_PE              → CODE_DEVICE
    8,  // INSTR_ACT             → CODE_DEVICE
    12, // INSTR_POOL            → MISC_DEVICE
    8,  // IO                    → CODE_DEVICE
    12, // DRAM_SPILL            → MISC_DEVICE
    10, // WEIGHT                → CONSTANTS_DEVICE
    16, // NOTIFICATION          → NOTIFICATION_DEVICE
    12, // ACT_TABLE             → MISC_DEVICE
    8,  // INSTR_DVE             → CODE_DEVICE
    8,  // INSTR_SP              → CODE_DEVICE
    11, // SCRATCHPAD            → SCRATCHPAD_DEVICE
    9,  // TENSOR                → TENSORS_DEVICE
    8,  // UCODE_LIB             → CODE_DEVICE
    12, // POOL_STDIO            → MISC_DEVICE
    14, // CC                    → COLLECTIVES_DEVICE
    15, // SCRATCHPAD_NOT_SHARED → SCRATCHPAD_NONSHARED_DEVICE
    12, // XT_CC                 → MISC_DEVICE
    18, // DMA_RING              → DMA_RINGS_DEVICE
    18, // DMA_RING_SPILL        → DMA_RINGS_DEVICE
    18, // DMA_RING_IO           → DMA_RINGS_DEVICE
    18, // DMA_RING_COLLECTIVES  → DMA_RINGS_DEVICE
    0,  // MAX                   → (not an allocation type)
];

/// `dmem_usage_type_to_aggr_index` (.rodata @0x9b9e80 in libnrt): usage → one of the 12
/// aggregate classes ([`mem_aggr_index_t`]).
pub const DMEM_USAGE_TYPE_TO_AGGR_INDEX: [u8; 23] = [
    5,  // GENERIC               → RUNTIME
    0,  // INSTR_PE              → ENGINE_CODE_AND_TENSORS
    0,  // INSTR_ACT             → ENGINE_CODE_AND_TENSORS
    5,  // INSTR_POOL            → RUNTIME
    5,  // IO                    → RUNTIME
    1,  // DRAM_SPILL            → DRAM_SPILL
    11, // WEIGHT                → WEIGHTS
    5,  // NOTIFICATION          → RUNTIME
    0,  // ACT_TABLE             → ENGINE_CODE_AND_TENSORS
    0,  // INSTR_DVE             → ENGINE_CODE_AND_TENSORS
    3,  // INSTR_SP              → INSTR_SP
    2,  // SCRATCHPAD            → SHARED_SCRATCHPAD
    0,  // TENSOR                → ENGINE_CODE_AND_TENSORS
    5,  // UCODE_LIB             → RUNTIME
    10, // POOL_STDIO            → POOL_STDIO
    4,  // CC                    → COLLECTIVES
    5,  // SCRATCHPAD_NOT_SHARED → RUNTIME
    9,  // XT_CC                 → XT_CC
    7,  // DMA_RING              → DMA_RING
    6,  // DMA_RING_SPILL        → DMA_RING_SPILL
    8,  // DMA_RING_IO           → DMA_RING_IO
    0,  // DMA_RING_COLLECTIVES  → ENGINE_CODE_AND_TENSORS
    0,  // MAX                   → (the total)
];

/// The category byte for `usage` at `loc`; [`CATEGORY_INVALID`] when the pair is not allowed
/// (spec §3.2 step 2). `loc` must be HOST_DRAM or TONGA_DRAM.
pub const fn category_for(loc: dma_mem_location_t, usage: dma_mem_usage_type_t) -> u8 {
    match loc {
        dma_mem_location_t::HOST_DRAM => DMEM_USAGE_TYPE_TO_HOST_CATEGORY[usage as usize],
        dma_mem_location_t::TONGA_DRAM => DMEM_USAGE_TYPE_TO_DEVICE_CATEGORY[usage as usize],
        dma_mem_location_t::DMA_MEM_LOC_INVALID => CATEGORY_INVALID,
    }
}

/// The neuron-monitor class of a usage type.
pub const fn aggr_index(usage: dma_mem_usage_type_t) -> mem_aggr_index_t {
    match mem_aggr_index_t::from_raw(DMEM_USAGE_TYPE_TO_AGGR_INDEX[usage as usize] as u32) {
        Some(a) => a,
        None => mem_aggr_index_t::AGGR_ENGINE_CODE_AND_TENSORS,
    }
}

// The facts' pinned bytes, checked at compile time: the host sentinel sits exactly at the
// pinned indices, no device byte is the sentinel, every category is the driver's range for its
// side (host 0..=6 or DMA_RINGS_HOST 17; device 7..=19 less 17), and every aggregate class is
// one of the 12.
const _: () = {
    let mut j = 0;
    while j < 22 {
        let host = DMEM_USAGE_TYPE_TO_HOST_CATEGORY[j];
        let dev = DMEM_USAGE_TYPE_TO_DEVICE_CATEGORY[j];
        let mut pinned = false;
        let mut k = 0;
        while k < constants::HOST_CATEGORY_INVALID_USAGE_INDICES.len() {
            pinned |= constants::HOST_CATEGORY_INVALID_USAGE_INDICES[k] == j;
            k += 1;
        }
        assert!((host == CATEGORY_INVALID) == pinned);
        assert!(host <= 6 || host == 17 || host == CATEGORY_INVALID);
        assert!(dev >= 7 && dev <= 19 && dev != 17);
        assert!((DMEM_USAGE_TYPE_TO_AGGR_INDEX[j] as usize) < mem_aggr_index_t::COUNT);
        j += 1;
    }
    assert!(DMEM_USAGE_TYPE_TO_HOST_CATEGORY[22] == 0);
    assert!(DMEM_USAGE_TYPE_TO_DEVICE_CATEGORY[22] == 0);
    assert!(DMEM_USAGE_TYPE_TO_AGGR_INDEX[22] == 0);
};

/// Every value in `layout-facts.toml [constants]` (spec section in each doc line).
pub mod constants {
    /// Devices per process: `tdrv_ctx_t.mla[32]` (§1).
    pub const MAX_MLA_PER_PROCESS: usize = 32;
    /// Cores per device: `mla_t._tpbs[8]` (§1).
    pub const TPBS_PER_MLA: usize = 8;
    /// `dma_mem_usage_type_t` cardinality (§3.3).
    pub const USAGE_TYPE_COUNT: usize = 23;
    /// `DMA_MEM_USAGE_TYPE_MAX`, the per-core total index (§3.3).
    pub const USAGE_TYPE_MAX_INDEX: usize = 22;
    /// Category-table sentinel (§3.2).
    pub const CATEGORY_INVALID_SENTINEL: u8 = 20;
    /// Host-table indices holding the sentinel (§3.3).
    pub const HOST_CATEGORY_INVALID_USAGE_INDICES: [usize; 3] = [11, 15, 16];
    /// Cap on GPSIMD libraries in one set (§6).
    pub const ULIB_MAX_LIBS: usize = 9;
    /// Entries of the on-device library table (§6).
    pub const SUNDA_ULIB_TABLE_ENTRIES: usize = 97;
    /// Scratchpad pages per core (§8).
    pub const SCRATCHPAD_MAX_PAGES: usize = 1024;
    /// Contiguous scratchpad page size, 64 MiB (§8).
    pub const SCRATCHPAD_CONTIGUOUS_PAGE_SIZE: u64 = 0x400_0000;
    /// Buckets of a model's mem_ref_set (§5.2).
    pub const MEM_REF_SET_BUCKETS: usize = 0x400;
    /// GPSIMD Q7 cores per NeuronCore (§2).
    pub const POOLING_Q7_CORES: usize = 8;
    /// EVTACCEL carveout geometry (§8).
    pub const EVTACCEL_PARTITION_START: u64 = 0;
    /// EVTACCEL carveout partition count (§8).
    pub const EVTACCEL_PARTITION_COUNT: u64 = 128;
    /// EVTACCEL carveout SB byte offset (§8).
    pub const EVTACCEL_PARTITION_BYTE_OFFSET: u64 = 0x37ff8;
    /// EVTACCEL carveout size (§8).
    pub const EVTACCEL_SIZE: u64 = 8;
    /// Default logical-core size (§9; SUNDA forces 1).
    pub const LNC_DEFAULT_SIZE: u32 = 2;
    /// Handle 0 is reserved/invalid (§4.2).
    pub const MODEL_HANDLE_RESERVED: u32 = 0;
    /// `ENOMEM` (§3.2).
    pub const ENOMEM_ERRNO: i32 = 12;
    /// `dmem_t.tdram_channel < MAX_HBM`; `dma_mem_log_t.memory_usage[4]` (§3.4).
    pub const MAX_HBM_CHANNELS: usize = 4;
    /// `MAX_TPB_PER_HBM`: cores sharing one HBM channel at most (§8).
    pub const MAX_TPB_PER_HBM: usize = 2;
    /// Paged scratchpad pages are allocated with this alignment, 4 MiB (§8).
    pub const SCRATCHPAD_PAGE_ALIGNMENT: u64 = 0x40_0000;
    /// A scratchpad page's `_pa + align_offset` must be 4 KiB aligned (§8).
    pub const SCRATCHPAD_PAGE_BASE_ALIGNMENT: u64 = 0x1000;
    /// Longest GPSIMD function name + 1: `strlen(name) > 63` is refused (§6).
    pub const UCODE_FUNC_NAME_MAX: usize = 64;
    /// GPSIMD functions per core, at most + 1: a per-core count over 27 is refused (§6).
    pub const UCODE_FUNCS_PER_CORE_MAX: usize = 28;
    /// Buckets of a tensor set (`kbl_init_feature_map_set`, §7.3).
    pub const TENSOR_SET_BUCKETS: usize = 0x400;
    /// `(name, value)` of every constant, for the layout report.
    pub const ALL: &[(&str, u64)] = &[
        ("max_mla_per_process", MAX_MLA_PER_PROCESS as u64),
        ("tpbs_per_mla", TPBS_PER_MLA as u64),
        ("usage_type_count", USAGE_TYPE_COUNT as u64),
        ("usage_type_max_index", USAGE_TYPE_MAX_INDEX as u64),
        (
            "category_invalid_sentinel",
            CATEGORY_INVALID_SENTINEL as u64,
        ),
        ("ulib_max_libs", ULIB_MAX_LIBS as u64),
        ("sunda_ulib_table_entries", SUNDA_ULIB_TABLE_ENTRIES as u64),
        ("scratchpad_max_pages", SCRATCHPAD_MAX_PAGES as u64),
        (
            "scratchpad_contiguous_page_size",
            SCRATCHPAD_CONTIGUOUS_PAGE_SIZE,
        ),
        ("mem_ref_set_buckets", MEM_REF_SET_BUCKETS as u64),
        ("pooling_q7_cores", POOLING_Q7_CORES as u64),
        ("evtaccel_partition_start", EVTACCEL_PARTITION_START),
        ("evtaccel_partition_count", EVTACCEL_PARTITION_COUNT),
        (
            "evtaccel_partition_byte_offset",
            EVTACCEL_PARTITION_BYTE_OFFSET,
        ),
        ("evtaccel_size", EVTACCEL_SIZE),
        ("lnc_default_size", LNC_DEFAULT_SIZE as u64),
        ("model_handle_reserved", MODEL_HANDLE_RESERVED as u64),
        ("enomem_errno", ENOMEM_ERRNO as u64),
        ("max_hbm_channels", MAX_HBM_CHANNELS as u64),
        ("max_tpb_per_hbm", MAX_TPB_PER_HBM as u64),
        ("scratchpad_page_alignment", SCRATCHPAD_PAGE_ALIGNMENT),
        (
            "scratchpad_page_base_alignment",
            SCRATCHPAD_PAGE_BASE_ALIGNMENT,
        ),
        ("ucode_func_name_max", UCODE_FUNC_NAME_MAX as u64),
        ("ucode_funcs_per_core_max", UCODE_FUNCS_PER_CORE_MAX as u64),
        ("tensor_set_buckets", TENSOR_SET_BUCKETS as u64),
    ];
}
