//! The ABI layer: libnrt's structs, enums, byte tables and constants, byte-exact.
//!
//! Pure data. Behaviour that manipulates these structs in place lives in the sibling modules.

pub mod enums;
pub mod meta;
pub mod tables;
pub mod types;

pub use enums::*;
pub use tables::constants;
pub use types::*;

use meta::{AbiStruct, EnumInfo, StructInfo};

/// Every ABI struct's layout table, in report order.
pub const STRUCTS: &[StructInfo] = &[
    tdrv_ctx_t::INFO,
    mla_t::INFO,
    top_sp_t::INFO,
    tpb_map_t::INFO,
    ptpb_info_t::INFO,
    tpb_t::INFO,
    tpb_sunda_t::INFO,
    aws_hal_dma::INFO,
    ib_addrs_one_eng_t::INFO,
    dma_queue_info_t::INFO,
    nrt_mutex_t::INFO,
    physical_core_t::INFO,
    virtual_core_t::INFO,
    dmem_allocator_t::INFO,
    dmem_t::INFO,
    dmem_list_t::INFO,
    dmem_ref_node_t::INFO,
    dma_mem_log_t::INFO,
    ht_t::INFO,
    ht_node_t::INFO,
    H_MODEL::INFO,
    model_t::INFO,
    vtpb_info_shared_mr_set_t::INFO,
    tdrv_scratchpad_cleanup_info_t::INFO,
    ucode_lib_set_info_t::INFO,
    ucode_lib_info_t::INFO,
    SUNDA_UCODE_LIB_LIBRARY_TABLE_ENTRY::INFO,
    nrt_tensor_t::INFO,
    nrt_tensor_storage_t::INFO,
    nrt_tensor_list_t::INFO,
    tdrv_scratchpad_t::INFO,
    tdrv_scratchpad_page_t::INFO,
];

/// Every ABI enum's table.
pub const ENUMS: &[EnumInfo] = &[
    al_hal_tpb_arch_type_t::INFO,
    dmem_allocator_type_t::INFO,
    dma_mem_location_t::INFO,
    dma_mem_usage_type_t::INFO,
    kbin_sb_carveout_type_t::INFO,
    nrt_tensor_mem_type_t::INFO,
    mem_alloc_category_t::INFO,
    mem_aggr_index_t::INFO,
    NRT_STATUS::INFO,
];

/// Looks a struct's layout up by name.
pub fn struct_info(name: &str) -> Option<&'static StructInfo> {
    STRUCTS.iter().find(|s| s.name == name)
}
