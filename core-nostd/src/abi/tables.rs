//! The three `.rodata` byte tables indexed by usage type (spec §3.3), and the constants of
//! `layout-facts.toml`.
//!
//! The spec pins the tables' shape (23 bytes each, index = `dma_mem_usage_type_t`), the
//! sentinel 20 and `host[18..=21] == 20`; the other bytes map each usage type to the driver
//! category (`mem_alloc_category_t`) that matches what it is for.
#![deny(unsafe_code)]

use super::enums::{dma_mem_location_t, dma_mem_usage_type_t, mem_aggr_index_t};

/// `0x14`: the category byte meaning "usage invalid for this location" (spec §3.2 step 2).
/// Not the usage member `DMA_RING_IO` (also 20): see the spec §3.3 QUIRK.
pub const CATEGORY_INVALID: u8 = 20;

/// `dmem_usage_type_to_host_category` (.rodata @0x9b9640 in libnrt).
pub const DMEM_USAGE_TYPE_TO_HOST_CATEGORY: [u8; 23] = [
    0,  // UNKNOWN              → UNKNOWN_HOST
    1,  // CODE                 → CODE_HOST
    2,  // TENSOR               → TENSORS_HOST
    3,  // CONSTANTS            → CONSTANTS_HOST
    4,  // SHARED_SCRATCHPAD    → MISC_HOST
    4,  // NONSHARED_SCRATCHPAD → MISC_HOST
    6,  // NOTIFICATION         → NOTIFICATION_HOST
    1,  // UCODE_LIB            → CODE_HOST
    4,  // UCODE_TABLE          → MISC_HOST
    5,  // IO_QUEUE             → NCDEV_HOST
    4,  // MR_POINTER           → MISC_HOST
    4,  // DBTC                 → MISC_HOST
    4,  // QUEUE_BUNDLE_LUT     → MISC_HOST
    4,  // DATA_REFILL          → MISC_HOST
    4,  // ENGINE_CONFIG        → MISC_HOST
    4,  // PATCH_INFO           → MISC_HOST
    4,  // COLLECTIVES          → MISC_HOST
    4,  // MISC                 → MISC_HOST
    20, // DMA_RING             → invalid on host (spec)
    20, // DMA_RING_SPILL       → invalid on host (spec)
    20, // DMA_RING_IO          → invalid on host (spec)
    20, // DMA_RING_COLLECTIVES → invalid on host (spec)
    20, // MAX                  → not an allocation type
];

/// `dmem_usage_type_to_device_category` (.rodata @0x9b9660 in libnrt).
pub const DMEM_USAGE_TYPE_TO_DEVICE_CATEGORY: [u8; 23] = [
    7,  // UNKNOWN              → UNKNOWN_DEVICE
    8,  // CODE                 → CODE_DEVICE
    9,  // TENSOR               → TENSORS_DEVICE
    10, // CONSTANTS            → CONSTANTS_DEVICE
    11, // SHARED_SCRATCHPAD    → SCRATCHPAD_DEVICE
    15, // NONSHARED_SCRATCHPAD → SCRATCHPAD_NONSHARED_DEVICE
    16, // NOTIFICATION         → NOTIFICATION_DEVICE
    8,  // UCODE_LIB            → CODE_DEVICE
    12, // UCODE_TABLE          → MISC_DEVICE
    13, // IO_QUEUE             → NCDEV_DEVICE
    12, // MR_POINTER           → MISC_DEVICE
    12, // DBTC                 → MISC_DEVICE
    12, // QUEUE_BUNDLE_LUT     → MISC_DEVICE
    12, // DATA_REFILL          → MISC_DEVICE
    12, // ENGINE_CONFIG        → MISC_DEVICE
    12, // PATCH_INFO           → MISC_DEVICE
    14, // COLLECTIVES          → COLLECTIVES_DEVICE
    12, // MISC                 → MISC_DEVICE
    18, // DMA_RING             → DMA_RINGS_DEVICE
    18, // DMA_RING_SPILL       → DMA_RINGS_DEVICE
    18, // DMA_RING_IO          → DMA_RINGS_DEVICE
    14, // DMA_RING_COLLECTIVES → COLLECTIVES_DEVICE
    20, // MAX                  → not an allocation type
];

/// `map_dmem_usage_type_to_aggr_index`'s table (spec §3.3): usage → neuron-monitor class.
pub const DMEM_USAGE_TYPE_TO_AGGR_INDEX: [u8; 23] = [
    4, // UNKNOWN              → runtime_memory
    2, // CODE                 → model_code
    0, // TENSOR               → tensors
    1, // CONSTANTS            → constants
    3, // SHARED_SCRATCHPAD    → model_shared_scratchpad
    4, // NONSHARED_SCRATCHPAD → runtime_memory
    4, // NOTIFICATION         → runtime_memory
    2, // UCODE_LIB            → model_code
    2, // UCODE_TABLE          → model_code
    4, // IO_QUEUE             → runtime_memory
    4, // MR_POINTER           → runtime_memory
    4, // DBTC                 → runtime_memory
    4, // QUEUE_BUNDLE_LUT     → runtime_memory
    4, // DATA_REFILL          → runtime_memory
    4, // ENGINE_CONFIG        → runtime_memory
    4, // PATCH_INFO           → runtime_memory
    4, // COLLECTIVES          → runtime_memory
    4, // MISC                 → runtime_memory
    5, // DMA_RING             → dma_buffers (runtime_memory on a device report)
    5, // DMA_RING_SPILL       → dma_buffers
    5, // DMA_RING_IO          → dma_buffers
    5, // DMA_RING_COLLECTIVES → dma_buffers
    6, // MAX                  → none (the total)
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
        None => mem_aggr_index_t::AGGR_NONE,
    }
}

// The spec's pinned bytes, checked at compile time.
const _: () = {
    let mut i = 18;
    while i <= 21 {
        assert!(DMEM_USAGE_TYPE_TO_HOST_CATEGORY[i] == CATEGORY_INVALID);
        i += 1;
    }
    let mut j = 0;
    while j < 22 {
        assert!(DMEM_USAGE_TYPE_TO_DEVICE_CATEGORY[j] != CATEGORY_INVALID);
        assert!(DMEM_USAGE_TYPE_TO_DEVICE_CATEGORY[j] >= 7);
        assert!(DMEM_USAGE_TYPE_TO_DEVICE_CATEGORY[j] != 17);
        assert!(
            DMEM_USAGE_TYPE_TO_HOST_CATEGORY[j] <= 6 || DMEM_USAGE_TYPE_TO_HOST_CATEGORY[j] == 20
        );
        j += 1;
    }
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
    pub const HOST_CATEGORY_INVALID_USAGE_INDICES: [usize; 4] = [18, 19, 20, 21];
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
    ];
}
