//! libnrt's enums with their exact values (spec §1, §3.1, §3.3, §7.1, §8) and the public
//! `NRT_STATUS` codes (`nrt_status.h`).
#![allow(non_camel_case_types, missing_docs)]
#![deny(unsafe_code)]

use crate::abi_enum;

abi_enum! {
    /// The device generation gate (spec §1 NOTE): SUNDA = NC-v2 (trn1/inf2), CAYMAN = NC-v3
    /// (trn2), MARIANA = NC-v4 (trn3).
    pub enum al_hal_tpb_arch_type_t [section = "1"] {
        AL_HAL_TPB_ARCH_TYPE_INVALID = 0,
        AL_HAL_TPB_ARCH_TYPE_INVALID_1 = 1,
        AL_HAL_TPB_ARCH_TYPE_SUNDA = 2,
        AL_HAL_TPB_ARCH_TYPE_CAYMAN = 3,
        AL_HAL_TPB_ARCH_TYPE_MARIANA = 4,
        AL_HAL_TPB_ARCH_TYPE_NUM = 5,
    }
}

abi_enum! {
    /// The two allocator tiers (spec §3.1): per-core GLOBAL, per-model MODEL.
    pub enum dmem_allocator_type_t [section = "3.1"] {
        DMEM_ALLOCATOR_TYPE_GLOBAL = 0,
        DMEM_ALLOCATOR_TYPE_MODEL = 1,
    }
}

abi_enum! {
    /// Where an allocation lives (spec §3.1): host pinned DRAM or on-package HBM.
    pub enum dma_mem_location_t [section = "3.1"] {
        DMA_MEM_LOC_INVALID = 0,
        HOST_DRAM = 1,
        TONGA_DRAM = 2,
    }
}

abi_enum! {
    /// What an allocation is for (spec §3.3; 23 members, libnrt 2.31's names and values, facts
    /// v2). `MAX` is not an allocation type: it is the ledger's per-core total index.
    pub enum dma_mem_usage_type_t [section = "3.3"] {
        /// Runtime memory of no finer class (pointer tables, io queues; neff-format §10.2).
        DMA_MEM_USAGE_TYPE_GENERIC = 0,
        /// The PE engine's assembled instruction image.
        DMA_MEM_USAGE_TYPE_INSTR_PE = 1,
        /// The ACT engine's instruction image.
        DMA_MEM_USAGE_TYPE_INSTR_ACT = 2,
        /// The POOL engine's instruction image (includes the GPSIMD library load sequence).
        DMA_MEM_USAGE_TYPE_INSTR_POOL = 3,
        /// Model IO staging.
        DMA_MEM_USAGE_TYPE_IO = 4,
        /// DRAM spill of a model.
        DMA_MEM_USAGE_TYPE_DRAM_SPILL = 5,
        /// Weights and constants of a NEFF (`file` vars, §5.2).
        DMA_MEM_USAGE_TYPE_WEIGHT = 6,
        /// Notification queues (§5.1).
        DMA_MEM_USAGE_TYPE_NOTIFICATION = 7,
        /// Activation lookup tables.
        DMA_MEM_USAGE_TYPE_ACT_TABLE = 8,
        /// The DVE engine's instruction image.
        DMA_MEM_USAGE_TYPE_INSTR_DVE = 9,
        /// The SP engine's instruction image.
        DMA_MEM_USAGE_TYPE_INSTR_SP = 10,
        /// Per-core scratchpad pages shared by resident models (§8). Invalid on the host.
        DMA_MEM_USAGE_TYPE_SCRATCHPAD = 11,
        /// Application IO tensors (`nrt_tensor_allocate`, §7.2).
        DMA_MEM_USAGE_TYPE_TENSOR = 12,
        /// GPSIMD / ext-isa library code and its tables (§6).
        DMA_MEM_USAGE_TYPE_UCODE_LIB = 13,
        /// The per-core pool stdio block.
        DMA_MEM_USAGE_TYPE_POOL_STDIO = 14,
        /// Collectives buffers. Invalid on the host.
        DMA_MEM_USAGE_TYPE_CC = 15,
        /// A model's private scratch memory (`tmp-buf` vars). Invalid on the host.
        DMA_MEM_USAGE_TYPE_SCRATCHPAD_NOT_SHARED = 16,
        /// Cross-thread collectives queues.
        DMA_MEM_USAGE_TYPE_XT_CC = 17,
        /// DMA descriptor rings.
        DMA_MEM_USAGE_TYPE_DMA_RING = 18,
        /// DMA ring spill.
        DMA_MEM_USAGE_TYPE_DMA_RING_SPILL = 19,
        /// DMA rings for IO.
        DMA_MEM_USAGE_TYPE_DMA_RING_IO = 20,
        /// DMA rings for collectives.
        DMA_MEM_USAGE_TYPE_DMA_RING_COLLECTIVES = 21,
        /// Not an allocation type: the per-core grand-total index of the ledger.
        DMA_MEM_USAGE_TYPE_MAX = 22,
    }
}

abi_enum! {
    /// SBUF carveout kinds a NEFF may reserve (spec §8).
    pub enum kbin_sb_carveout_type_t [section = "8"] {
        KBIN_SB_CARVEOUT_TYPE_INVALID = 0,
        KBIN_SB_CARVEOUT_TYPE_EVTACCEL = 1,
    }
}

abi_enum! {
    /// `nrt_tensor_storage_t.type` (spec §7.1; the DWARF enum's name and values, facts v2).
    pub enum nrt_tensor_mem_type_t [section = "7.1"] {
        NRT_TENSOR_MEM_TYPE_INVALID = 0,
        NRT_TENSOR_MEM_TYPE_MALLOC = 1,
        NRT_TENSOR_MEM_TYPE_DMA = 2,
        NRT_TENSOR_MEM_TYPE_FAKE = 3,
    }
}

abi_enum! {
    /// The driver's allocation categories (`mem_alloc_category_t`), the byte the spec's
    /// category tables produce; `MAX` (20) is the "invalid for this location" sentinel.
    pub enum mem_alloc_category_t [section = "3.3"] {
        UNKNOWN_HOST = 0,
        CODE_HOST = 1,
        TENSORS_HOST = 2,
        CONSTANTS_HOST = 3,
        MISC_HOST = 4,
        NCDEV_HOST = 5,
        NOTIFICATION_HOST = 6,
        UNKNOWN_DEVICE = 7,
        CODE_DEVICE = 8,
        TENSORS_DEVICE = 9,
        CONSTANTS_DEVICE = 10,
        SCRATCHPAD_DEVICE = 11,
        MISC_DEVICE = 12,
        NCDEV_DEVICE = 13,
        COLLECTIVES_DEVICE = 14,
        SCRATCHPAD_NONSHARED_DEVICE = 15,
        NOTIFICATION_DEVICE = 16,
        DMA_RINGS_HOST = 17,
        DMA_RINGS_DEVICE = 18,
        CONTIGUOUS_SCRATCHPAD_DEVICE = 19,
        MAX = 20,
    }
}

impl mem_alloc_category_t {
    /// The name the driver's per-category counters use (public API §5: `collectives`,
    /// `constants`, `dma_rings`, `driver_memory`, `model_code`, `model_shared_scratchpad`,
    /// `nonshared_scratchpad`, `notifications`, `runtime_memory`, `tensors`, `uncategorized`),
    /// which libnrt's OOM message shows as `usage: …`. Host categories share the names.
    pub const fn counter_name(self) -> &'static str {
        use mem_alloc_category_t::*;
        match self {
            UNKNOWN_HOST | UNKNOWN_DEVICE => "uncategorized",
            CODE_HOST | CODE_DEVICE => "model_code",
            TENSORS_HOST | TENSORS_DEVICE => "tensors",
            CONSTANTS_HOST | CONSTANTS_DEVICE => "constants",
            MISC_HOST | MISC_DEVICE => "runtime_memory",
            NCDEV_HOST | NCDEV_DEVICE => "driver_memory",
            NOTIFICATION_HOST | NOTIFICATION_DEVICE => "notifications",
            SCRATCHPAD_DEVICE | CONTIGUOUS_SCRATCHPAD_DEVICE => "model_shared_scratchpad",
            SCRATCHPAD_NONSHARED_DEVICE => "nonshared_scratchpad",
            COLLECTIVES_DEVICE => "collectives",
            DMA_RINGS_HOST | DMA_RINGS_DEVICE => "dma_rings",
            MAX => "invalid",
        }
    }
}

abi_enum! {
    /// The 12 aggregate classes `dmem_usage_type_to_aggr_index` maps usage types onto (spec
    /// §3.3, facts v2 `[tables] aggr_index`; libnrt's names for them are not public). Each is
    /// named after what its bytes group together; `docs/LAYOUT.md` lists the members.
    pub enum mem_aggr_index_t [section = "3.3"] {
        /// INSTR_PE, INSTR_ACT, INSTR_DVE, ACT_TABLE, TENSOR, DMA_RING_COLLECTIVES (and MAX).
        AGGR_ENGINE_CODE_AND_TENSORS = 0,
        /// DRAM_SPILL.
        AGGR_DRAM_SPILL = 1,
        /// SCRATCHPAD (the shared pages).
        AGGR_SHARED_SCRATCHPAD = 2,
        /// INSTR_SP.
        AGGR_INSTR_SP = 3,
        /// CC.
        AGGR_COLLECTIVES = 4,
        /// GENERIC, INSTR_POOL, IO, NOTIFICATION, UCODE_LIB, SCRATCHPAD_NOT_SHARED.
        AGGR_RUNTIME = 5,
        /// DMA_RING_SPILL.
        AGGR_DMA_RING_SPILL = 6,
        /// DMA_RING.
        AGGR_DMA_RING = 7,
        /// DMA_RING_IO.
        AGGR_DMA_RING_IO = 8,
        /// XT_CC.
        AGGR_XT_CC = 9,
        /// POOL_STDIO.
        AGGR_POOL_STDIO = 10,
        /// WEIGHT.
        AGGR_WEIGHTS = 11,
    }
}

impl mem_aggr_index_t {
    /// Number of classes.
    pub const COUNT: usize = 12;
    /// Every class, in index order.
    pub fn all() -> impl Iterator<Item = Self> {
        (0..Self::COUNT as u32).filter_map(Self::from_raw)
    }
    /// The class's lower-case report name (`engine_code_and_tensors`, …).
    pub fn short_name(self) -> &'static str {
        let n = self.name();
        n.strip_prefix("AGGR_").unwrap_or(n)
    }
}

abi_enum! {
    /// Public status codes (`nrt_status.h`).
    pub enum NRT_STATUS [section = "public"] {
        NRT_SUCCESS = 0,
        NRT_FAILURE = 1,
        NRT_INVALID = 2,
        NRT_INVALID_HANDLE = 3,
        NRT_RESOURCE = 4,
        NRT_TIMEOUT = 5,
        NRT_HW_ERROR = 6,
        NRT_QUEUE_FULL = 7,
        NRT_LOAD_NOT_ENOUGH_NC = 9,
        NRT_UNSUPPORTED_NEFF_VERSION = 10,
        NRT_FAIL_HOST_MEM_ALLOC = 11,
        NRT_UNINITIALIZED = 13,
        NRT_CLOSED = 14,
        NRT_QUEUE_EMPTY = 15,
        NRT_EXEC_UNIT_UNRECOVERABLE = 101,
        NRT_EXEC_BAD_INPUT = 1002,
        NRT_EXEC_COMPLETED_WITH_NUM_ERR = 1003,
        NRT_EXEC_COMPLETED_WITH_ERR = 1004,
        NRT_EXEC_NC_BUSY = 1005,
        NRT_EXEC_OOB = 1006,
        NRT_COLL_PENDING = 1100,
        NRT_EXEC_HW_ERR_COLLECTIVES = 1200,
        NRT_EXEC_HW_ERR_HBM_UE = 1201,
        NRT_EXEC_HW_ERR_NC_UE = 1202,
        NRT_EXEC_HW_ERR_DMA_ABORT = 1203,
        NRT_EXEC_SW_NQ_OVERFLOW = 1204,
        NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE = 1205,
        NRT_NETWORK_PROXY_FAILURE = 1206,
    }
}

impl dma_mem_usage_type_t {
    /// Number of members (spec §3.3).
    pub const COUNT: usize = 23;
    /// Every allocatable member (0..=21), in value order.
    pub fn all() -> impl Iterator<Item = Self> {
        (0..22u32).filter_map(Self::from_raw)
    }
    /// The name without the `DMA_MEM_USAGE_TYPE_` prefix (`TENSOR`, `DMA_RING`, …).
    pub fn short_name(self) -> &'static str {
        let n = self.name();
        n.strip_prefix("DMA_MEM_USAGE_TYPE_").unwrap_or(n)
    }
    /// Parses a member name (with or without the prefix, any case) or its number.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        if let Ok(v) = s.parse::<u32>() {
            return Self::from_raw(v).filter(|u| *u != Self::DMA_MEM_USAGE_TYPE_MAX);
        }
        let bytes = s.as_bytes();
        let prefix = b"DMA_MEM_USAGE_TYPE_";
        let body =
            if bytes.len() > prefix.len() && bytes[..prefix.len()].eq_ignore_ascii_case(prefix) {
                &s[prefix.len()..]
            } else {
                s
            };
        Self::all().find(|u| u.short_name().eq_ignore_ascii_case(body))
    }
    /// For a name this project used before it took libnrt's enum (facts v2), the name(s) to
    /// use now; `None` for any other text. Nothing parses an old name: callers refuse it
    /// with this hint, so no manifest silently changes meaning.
    pub fn former_name(s: &str) -> Option<&'static str> {
        const RENAMED: [(&str, &str); 14] = [
            ("UNKNOWN", "GENERIC"),
            (
                "CODE",
                "INSTR_PE, INSTR_ACT, INSTR_POOL, INSTR_DVE or INSTR_SP",
            ),
            ("CONSTANTS", "WEIGHT"),
            ("SHARED_SCRATCHPAD", "SCRATCHPAD"),
            ("NONSHARED_SCRATCHPAD", "SCRATCHPAD_NOT_SHARED"),
            ("UCODE_TABLE", "UCODE_LIB"),
            ("IO_QUEUE", "IO"),
            ("MR_POINTER", "GENERIC"),
            ("DBTC", "GENERIC"),
            ("QUEUE_BUNDLE_LUT", "GENERIC"),
            ("DATA_REFILL", "DMA_RING"),
            ("ENGINE_CONFIG", "ACT_TABLE"),
            ("PATCH_INFO", "GENERIC"),
            ("COLLECTIVES", "CC"),
        ];
        let s = s.trim();
        let body = s
            .get(..19)
            .filter(|p| p.eq_ignore_ascii_case("DMA_MEM_USAGE_TYPE_"))
            .map_or(s, |_| &s[19..]);
        RENAMED
            .iter()
            .chain(core::iter::once(&("MISC", "GENERIC")))
            .find(|(old, _)| old.eq_ignore_ascii_case(body))
            .map(|(_, new)| *new)
    }
}

impl NRT_STATUS {
    /// The text `nrt_get_status_as_str` returns.
    pub const fn as_str(self) -> &'static str {
        match self {
            NRT_STATUS::NRT_SUCCESS => "Success",
            NRT_STATUS::NRT_FAILURE => "Error",
            NRT_STATUS::NRT_INVALID => "Invalid argument",
            NRT_STATUS::NRT_INVALID_HANDLE => "Invalid handle",
            NRT_STATUS::NRT_RESOURCE => "Failed to allocate a resource",
            NRT_STATUS::NRT_TIMEOUT => "Timed out",
            NRT_STATUS::NRT_HW_ERROR => "Hardware failure",
            NRT_STATUS::NRT_QUEUE_FULL => "Queue full",
            NRT_STATUS::NRT_LOAD_NOT_ENOUGH_NC => "Not enough NeuronCores for the model",
            NRT_STATUS::NRT_UNSUPPORTED_NEFF_VERSION => "Unsupported NEFF version",
            NRT_STATUS::NRT_FAIL_HOST_MEM_ALLOC => "Failed to allocate host memory",
            NRT_STATUS::NRT_UNINITIALIZED => "Runtime not initialized",
            NRT_STATUS::NRT_CLOSED => "Runtime closed",
            NRT_STATUS::NRT_QUEUE_EMPTY => "Queue empty",
            NRT_STATUS::NRT_EXEC_UNIT_UNRECOVERABLE => "Execution unit unrecoverable",
            NRT_STATUS::NRT_EXEC_BAD_INPUT => "Bad input to execution",
            NRT_STATUS::NRT_EXEC_COMPLETED_WITH_NUM_ERR => {
                "Execution completed with numerical errors"
            }
            NRT_STATUS::NRT_EXEC_COMPLETED_WITH_ERR => "Execution completed with errors",
            NRT_STATUS::NRT_EXEC_NC_BUSY => "NeuronCore busy",
            NRT_STATUS::NRT_EXEC_OOB => "Out-of-bounds access during execution",
            NRT_STATUS::NRT_COLL_PENDING => "Collectives operation pending",
            NRT_STATUS::NRT_EXEC_HW_ERR_COLLECTIVES => "Hardware error in collectives",
            NRT_STATUS::NRT_EXEC_HW_ERR_HBM_UE => "Uncorrectable HBM error",
            NRT_STATUS::NRT_EXEC_HW_ERR_NC_UE => "Uncorrectable NeuronCore error",
            NRT_STATUS::NRT_EXEC_HW_ERR_DMA_ABORT => "DMA abort",
            NRT_STATUS::NRT_EXEC_SW_NQ_OVERFLOW => "Notification queue overflow",
            NRT_STATUS::NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE => "Repairable HBM error",
            NRT_STATUS::NRT_NETWORK_PROXY_FAILURE => "Network proxy failure",
        }
    }
}
