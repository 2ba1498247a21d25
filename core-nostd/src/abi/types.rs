//! libnrt's structs, byte for byte (spec §1–§10; facts in `shared/spec/layout-facts.toml`).
//!
//! Offsets tagged `Observed`/`Inferred` are the spec's; `Chosen` ones are this project's
//! placement of a member the spec names but does not place; `Reserved` spans keep libnrt's size.
//! Every struct is valid when all-zero ("unused"), so the 18.9 MB context lives in `.bss` or a
//! zeroed allocation and is never built on the stack.
#![allow(non_camel_case_types, missing_docs)]

use core::ffi::{c_char, c_void};
use core::sync::atomic::{AtomicU32, AtomicU64};

use crate::abi_struct;

abi_struct! {
    /// The 40-byte `pthread_mutex_t` slot every libnrt lock occupies; here a spin lock whose lock
    /// word sits where glibc keeps `__lock` (offset 0). Behaviour: [`crate::sync`].
    pub struct nrt_mutex_t [size = 40, align = 8, section = "2"] {
        @0 pub(crate) state: AtomicU32 = Chosen,
        @4 pub(crate) _reserved_0004: [u8; 4] = Reserved,
        @8 pub(crate) _reserved_0008: [u64; 4] = Reserved,
    }
}

abi_struct! {
    /// A model handle: `H_MODEL.id`, minted by `tdrv_get_unique_h_model` (spec §4.1–§4.2).
    #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
    pub struct H_MODEL [size = 4, align = 4, section = "4.1"] {
        @0 pub id: u32 = Observed,
    }
}

abi_struct! {
    /// A physical NeuronCore coordinate `(device_id, device_tpb_idx)` with a back-pointer to
    /// its owning logical core (spec §1.1, 24 B).
    #[derive(Copy, Clone, Debug)]
    pub struct physical_core_t [size = 24, align = 8, section = "1.1"] {
        @0 pub device_id: u32 = Chosen,
        @4 pub device_tpb_idx: u32 = Chosen,
        @8 pub vcore: *mut virtual_core_t = Chosen,
        @16 _reserved_0016: [u8; 8] = Reserved,
    }
}

abi_struct! {
    /// A Logical NeuronCore (LNC / vtpb): 1–2 physical cores presented as one (spec §9, 64 B).
    #[derive(Copy, Clone, Debug)]
    pub struct virtual_core_t [size = 64, align = 8, section = "9"] {
        @0 pub vtpb_idx: u32 = Chosen,
        @4 pub tpb_count: u32 = Chosen,
        @8 pub tpbs: [physical_core_t; 2] = Chosen,
        @56 pub default_hbm_idx: u32 = Chosen,
        @60 _reserved_0060: [u8; 4] = Reserved,
    }
}

abi_struct! {
    /// Which of a device's 8 core slots are present: `mla->tpb_map.map[i]` (spec §1.1).
    pub struct tpb_map_t [size = 8, align = 1, section = "1.1"] {
        @0 pub map: [u8; 8] = Chosen,
    }
}

abi_struct! {
    /// One top-level sequencer/semaphore block of a device; opaque here (spec §1, 16 376 B ×16).
    pub struct top_sp_t [size = 16376, align = 8, section = "1"] {
        @0 _reserved_0000: [u64; 2047] = Reserved,
    }
}

abi_struct! {
    /// The per-device usage ledger `mla.dmem_logger` (spec §3.4, 1600 B): bytes of device
    /// memory (HBM) per (core, usage type); `[nc][22]` is the per-core total. After it, the
    /// device-wide totals and their high-water marks, the count of device OOMs, and the lock
    /// every ledger update takes (so one alloc's row, per-core total, device total and peaks
    /// move together, and a reader holding it sees a consistent ledger).
    pub struct dma_mem_log_t [size = 1600, align = 8, section = "3.4"] {
        @0 pub memory_usage_nc: [[AtomicU64; 23]; 8] = Chosen,
        @1472 pub total_device_bytes: AtomicU64 = Chosen,
        @1480 pub total_host_bytes: AtomicU64 = Chosen,
        @1488 pub peak_device_bytes: AtomicU64 = Chosen,
        @1496 pub peak_host_bytes: AtomicU64 = Chosen,
        @1504 pub oom_count: AtomicU64 = Chosen,
        @1512 pub lock: nrt_mutex_t = Chosen,
        @1552 _reserved_1552: [u8; 48] = Reserved,
    }
}

abi_struct! {
    /// The anonymous `sunda` union inside `tpb_t` (spec §6, 2960 B at tpb_t+17032): the
    /// ext-isa ulib staged once per core and the lock that serialises the staging.
    pub struct tpb_sunda_t [size = 2960, align = 8, section = "6"] {
        @0 pub ulib_staging_lock: nrt_mutex_t = Chosen,
        @40 pub ulib_set_info_extisa_only: *mut ucode_lib_set_info_t = Chosen,
        @48 pub ulib_stage_count: AtomicU32 = Chosen,
        @52 pub ulib_users: AtomicU32 = Chosen,
        @56 _reserved_0056: [u8; 2904] = Reserved,
    }
}

abi_struct! {
    /// One scratchpad page: a GLOBAL-allocator dmem shared by `refs` models (spec §8).
    pub struct tdrv_scratchpad_page_t [size = 16, align = 8, section = "8"] {
        @0 pub dmem: *mut dmem_t = Observed,
        @8 pub refs: u32 = Observed,
        @12 _reserved_0012: [u8; 4] = Reserved,
    }
}

abi_struct! {
    /// The per-core DRAM scratchpad (spec §8, 16 440 B at tpb_t+22200).
    pub struct tdrv_scratchpad_t [size = 16440, align = 8, section = "8"] {
        @0 pub lock: nrt_mutex_t = Inferred,
        @40 pub page_size: u64 = Observed,
        @48 pub num_pages: u32 = Observed,
        @52 pub is_contiguous: u8 = Observed,
        @53 _reserved_0053: [u8; 3] = Reserved,
        @56 pub pages: [tdrv_scratchpad_page_t; 1024] = Observed,
    }
}

abi_struct! {
    /// The per-NeuronCore context (spec §2, 39 320 B): the GLOBAL allocator, the model database
    /// under its lock, the ext-isa cache, the scratchpad, the Q7 ucode-core pointers.
    pub struct tpb_t [size = 39320, align = 8, section = "2"] {
        @0 pub idx: u32 = Chosen,
        @4 pub device_id: u32 = Chosen,
        @8 pub pcore: physical_core_t = Chosen,
        @32 pub h_running_model: H_MODEL = Chosen,
        @36 pub is_init: u8 = Chosen,
        @37 _reserved_0037: [u8; 3] = Reserved,
        @40 pub exec_lock: nrt_mutex_t = Chosen,
        @80 pub exec_count: AtomicU64 = Chosen,
        @88 _reserved_0088: [u8; 16936] = Reserved,
        @17024 pub tpb_allocator: *mut dmem_allocator_t = Observed,
        @17032 pub sunda: tpb_sunda_t = Observed,
        @19992 pub model_db_lock: nrt_mutex_t = Observed,
        @20032 pub model_db: *mut ht_t = Observed,
        @20040 _reserved_20040: [u8; 2160] = Reserved,
        @22200 pub scratchpad: tdrv_scratchpad_t = Observed,
        @38640 pub pooling_q7_nrtucode_core: [*mut c_void; 8] = Chosen,
        @38704 _reserved_38704: [u8; 616] = Reserved,
    }
}

abi_struct! {
    /// One physically attached Neuron device (spec §1, 590 008 B). Beyond the spec's members
    /// it keeps, in its reserved tail, the per-(core, usage) peaks of device memory and the host
    /// DMA ledger (current and peak), like the driver's sysfs `total`/`peak` counters.
    pub struct mla_t [size = 590008, align = 8, section = "1"] {
        @0 pub device: u64 = Chosen,
        @8 pub is_used: u8 = Chosen,
        @9 _reserved_0009: [u8; 3] = Reserved,
        @12 pub idx: u32 = Chosen,
        @16 pub tpb_map: tpb_map_t = Chosen,
        @24 pub num_tpbs: u32 = Chosen,
        @28 pub arch: u32 = Chosen,
        @32 pub num_hbm: u32 = Chosen,
        @36 _reserved_0036: [u8; 4] = Reserved,
        @40 pub hbm_size: u64 = Chosen,
        @48 _reserved_0048: [u8; 32] = Reserved,
        @80 pub _tpbs: [tpb_t; 8] = Observed,
        @314640 _reserved_314640: [u8; 32] = Reserved,
        @314672 pub top_sps: [top_sp_t; 16] = Observed,
        @576688 pub bdf: u32 = Observed,
        @576692 _reserved_576692: [u8; 76] = Reserved,
        @576768 pub dmem_logger: dma_mem_log_t = Observed,
        @578368 pub dmem_peak_nc: [[AtomicU64; 23]; 8] = Chosen,
        @579840 pub host_usage_nc: [[AtomicU64; 23]; 8] = Chosen,
        @581312 pub host_peak_nc: [[AtomicU64; 23]; 8] = Chosen,
        @582784 _reserved_582784: [u8; 7224] = Reserved,
    }
}

abi_struct! {
    /// The one process-global context `tdrv_ctx_0` points at (spec §1, 18 884 656 B).
    pub struct tdrv_ctx_t [size = 18884656, align = 8, section = "1"] {
        @0 pub num_mla: u32 = Chosen,
        @4 _reserved_0004: [u8; 4] = Reserved,
        @8 pub mla: [mla_t; 32] = Observed,
        @18880264 pub target: u32 = Chosen,
        @18880268 pub host_did_to_rid_map: [u32; 32] = Chosen,
        @18880396 _reserved_18880396: [u8; 4260] = Reserved,
    }
}

abi_struct! {
    /// One device-memory allocation (spec §3.1–§3.2, 192 B): the driver handle, physical
    /// address, sizes, location/usage/channel, ref count, hint, and its allocator-list links.
    /// libnrt `strdup`s the hint; here `hint` points at `hint_buf` inside the node (no heap).
    pub struct dmem_t [size = 192, align = 8, section = "3.1"] {
        @0 pub mem_handle: u64 = Chosen,
        @8 pub _pa: u64 = Chosen,
        @16 pub _va: *mut c_void = Chosen,
        @24 pub size: u64 = Chosen,
        @32 pub align_offset: u64 = Chosen,
        @40 pub allocated_size: u64 = Chosen,
        @48 pub mem_type: u32 = Chosen,
        @52 pub mem_usage_type: u32 = Chosen,
        @56 pub tdram_channel: u32 = Chosen,
        @60 pub ref_count: AtomicU32 = Chosen,
        @64 pub pcore: *mut physical_core_t = Chosen,
        @72 pub hint: *mut c_char = Chosen,
        @80 pub cpy_buf: *mut c_void = Chosen,
        @88 pub allocator: *mut dmem_allocator_t = Chosen,
        @96 pub prev: *mut dmem_t = Chosen,
        @104 pub next: *mut dmem_t = Chosen,
        @112 pub align: u64 = Chosen,
        @120 pub generation: u32 = Chosen,
        @124 pub nc_id: u32 = Chosen,
        @128 pub device_id: u32 = Chosen,
        @132 pub hint_buf: [u8; 48] = Chosen,
        @180 _reserved_0180: [u8; 12] = Reserved,
    }
}

abi_struct! {
    /// A device-memory allocator (spec §3.1, 512 B): `type` (GLOBAL/MODEL), the owning core,
    /// an intrusive list between embedded dummy head and tail `dmem_t`s, and its lock.
    pub struct dmem_allocator_t [size = 512, align = 8, section = "3.1"] {
        @0 pub r#type: u32 = Chosen,
        @4 _reserved_0004: [u8; 4] = Reserved,
        @8 pub pcore: *mut physical_core_t = Chosen,
        @16 pub dummy_head: dmem_t = Chosen,
        @208 pub dummy_tail: dmem_t = Chosen,
        @400 pub lock: nrt_mutex_t = Chosen,
        @440 pub count: u64 = Chosen,
        @448 pub bytes: u64 = Chosen,
        @456 _reserved_0456: [u8; 56] = Reserved,
    }
}

abi_struct! {
    /// Weak GC index of a group of dmems (spec §3.1): head/tail of `dmem_ref_node_t`.
    pub struct dmem_list_t [size = 16, align = 8, section = "3.1"] {
        @0 pub head: *mut dmem_ref_node_t = Inferred,
        @8 pub tail: *mut dmem_ref_node_t = Inferred,
    }
}

abi_struct! {
    /// One entry of a [`dmem_list_t`]; does not own its dmem (spec §3.1).
    pub struct dmem_ref_node_t [size = 16, align = 8, section = "3.1"] {
        @0 pub dmem: *mut dmem_t = Inferred,
        @8 pub next: *mut dmem_ref_node_t = Inferred,
    }
}

abi_struct! {
    /// A chained hash-table node, embedded in what it indexes (spec §4.1, 48 B).
    pub struct ht_node_t [size = 48, align = 8, section = "4.1"] {
        @0 pub key: u64 = Observed,
        @8 pub val: *mut c_void = Observed,
        @16 pub buf_size: u64 = Observed,
        @24 pub bucket: u64 = Observed,
        @32 pub key_type: u32 = Observed,
        @36 _reserved_0036: [u8; 4] = Reserved,
        @40 pub next: *mut ht_node_t = Observed,
    }
}

abi_struct! {
    /// A pow2-bucket chained hash table header (spec §4.1, 32 B); `buckets` is the flexible
    /// array of bucket-head nodes that follows it.
    pub struct ht_t [size = 32, align = 8, section = "4.1"] {
        @0 pub size: u64 = Chosen,
        @8 pub size_mask: u64 = Chosen,
        @16 pub count: u64 = Chosen,
        @24 pub free_node_fn: *mut c_void = Chosen,
        @32 pub buckets: [ht_node_t; 0] = Chosen,
    }
}

abi_struct! {
    /// The shared per-LNC slot a model's MODEL heap is built in before `kbl_model_add` moves it
    /// into the `model_t` (spec §5.2–§5.3, 32 B). The order follows the two 16-byte zeroings
    /// `*(_OWORD*)&mr_set->mem_ref_set = 0; *(_OWORD*)&mr_set->gc_tracker = 0`.
    pub struct vtpb_info_shared_mr_set_t [size = 32, align = 8, section = "5.2"] {
        @0 pub mem_ref_set: *mut ht_t = Chosen,
        @8 pub model_allocator: *mut dmem_allocator_t = Chosen,
        @16 pub gc_tracker: *mut dmem_list_t = Chosen,
        @24 pub scratchpad_cleanup_info: *mut scratchpad_cleanup_info_t = Chosen,
    }
}

abi_struct! {
    /// The scratchpad pages a model holds (spec §8 "scratchpad_cleanup_info"); this project's
    /// own 16-byte record.
    pub struct scratchpad_cleanup_info_t [size = 16, align = 4, section = "8"] {
        @0 pub first_page: u32 = Chosen,
        @4 pub num_pages: u32 = Chosen,
        @8 pub tpb_idx: u32 = Chosen,
        @12 pub device_id: u32 = Chosen,
    }
}

abi_struct! {
    /// A loaded model (spec §5.3, `calloc(0x1E40)` = 7744 B): its MODEL heap, mem_ref index, GC
    /// tracker, scratchpad claim, ulib set, ref count and the embedded `model_db` node.
    pub struct model_t [size = 7744, align = 8, section = "5.3"] {
        @0 pub h_model: H_MODEL = Chosen,
        @4 pub vtpb_idx: u32 = Chosen,
        @8 pub pcore: physical_core_t = Chosen,
        @32 pub dmem_allocator: *mut dmem_allocator_t = Chosen,
        @40 pub mem_ref_set: *mut ht_t = Chosen,
        @48 pub gc_tracker: *mut dmem_list_t = Chosen,
        @56 pub scratchpad_cleanup_info: *mut scratchpad_cleanup_info_t = Chosen,
        @64 pub ulib_set_info: *mut ucode_lib_set_info_t = Chosen,
        @72 pub num_subgraphs: u32 = Chosen,
        @76 pub state: u32 = Chosen,
        @80 pub name: [u8; 64] = Chosen,
        @144 pub mem_usage_before: u64 = Chosen,
        @152 pub mem_usage_after: u64 = Chosen,
        @160 pub sg_allocators: [*mut dmem_allocator_t; 8] = Chosen,
        @224 pub sg_mem_ref_sets: [*mut ht_t; 8] = Chosen,
        @288 pub sg_gc_trackers: [*mut dmem_list_t; 8] = Chosen,
        @352 pub exec_count: AtomicU64 = Chosen,
        @360 pub num_inputs: u32 = Chosen,
        @364 pub num_outputs: u32 = Chosen,
        @368 pub io: [model_io_t; 32] = Chosen,
        @2160 _reserved_2160: [u8; 4328] = Reserved,
        @6488 pub ref_count: AtomicU64 = Observed,
        @6496 _reserved_6496: [u8; 722] = Reserved,
        @7218 pub reset_evt_accel: u8 = Chosen,
        @7219 pub program_fp8_cfg: u8 = Chosen,
        @7220 pub ulib_is_shared: u8 = Chosen,
        @7221 _reserved_7221: [u8; 275] = Reserved,
        @7496 pub ht_node: ht_node_t = Observed,
        @7544 _reserved_7544: [u8; 200] = Reserved,
    }
}

abi_struct! {
    /// One declared input or output of a model (this project's record inside `model_t`'s
    /// reserved span; NEFFs declare their IO tensors by name and size).
    pub struct model_io_t [size = 56, align = 8, section = "5.3"] {
        @0 pub size: u64 = Chosen,
        @8 pub name: [u8; 48] = Chosen,
    }
}

abi_struct! {
    /// A set of GPSIMD ucode libraries staged into device memory (spec §6, 48 B).
    pub struct ucode_lib_set_info_t [size = 48, align = 8, section = "6"] {
        @0 pub scratch_space: *mut dmem_t = Inferred,
        @8 pub ucode_table: *mut dmem_t = Inferred,
        @16 pub extram: *mut dmem_t = Inferred,
        @24 pub num_libs: i32 = Inferred,
        @28 _reserved_0028: [u8; 4] = Reserved,
        @32 pub libs: *mut ucode_lib_info_t = Inferred,
        @40 pub lib_dmem: *mut dmem_t = Inferred,
    }
}

abi_struct! {
    /// One staged library: its device address (`pa + align + offset`) and CPU placement (§6).
    pub struct ucode_lib_info_t [size = 32, align = 8, section = "6"] {
        @0 pub address: u64 = Inferred,
        @8 pub flags: u32 = Chosen,
        @12 pub cpu_id: u32 = Chosen,
        @16 pub total_cpus: u32 = Chosen,
        @20 pub num_funcs: u32 = Chosen,
        @24 pub funcs: *mut c_void = Inferred,
    }
}

abi_struct! {
    /// One entry of the on-device library table (spec §6, 280 B; the table is `[97]`).
    pub struct SUNDA_UCODE_LIB_LIBRARY_TABLE_ENTRY [size = 280, align = 8, section = "6"] {
        @0 pub address: u64 = Chosen,
        @8 pub size: u64 = Chosen,
        @16 pub flags: u32 = Chosen,
        @20 pub cpu_id: u32 = Chosen,
        @24 _reserved_0024: [u8; 256] = Reserved,
    }
}

abi_struct! {
    /// A tensor (spec §7.1, 192 B): a window (`_offset`, `_size`) onto ref-counted storage.
    pub struct nrt_tensor_t [size = 192, align = 8, section = "7.1"] {
        @0 pub name: *mut c_char = Chosen,
        @8 pub sto: *mut nrt_tensor_storage_t = Chosen,
        @16 pub _offset: u64 = Chosen,
        @24 pub _size: u64 = Chosen,
        @32 pub extra: *mut c_void = Chosen,
        @40 pub ref_count: AtomicU64 = Chosen,
        @48 pub output_completion_count: AtomicU64 = Chosen,
        @56 pub magic: u32 = Chosen,
        @60 pub generation: u32 = Chosen,
        @64 pub name_buf: [u8; 96] = Chosen,
        @160 _reserved_0160: [u8; 32] = Reserved,
    }
}

abi_struct! {
    /// A tensor's backing storage (spec §7.1, 320 B): a dmem (DMA) or host bytes (MALLOC),
    /// ref-counted by the tensors that view it, with the output-completion condvar state.
    pub struct nrt_tensor_storage_t [size = 320, align = 8, section = "7.1"] {
        @0 pub hbm_idx: u32 = Chosen,
        @4 pub r#type: u32 = Chosen,
        @8 pub allocated_size: u64 = Chosen,
        @16 pub mem: *mut c_void = Chosen,
        @24 pub ref_count: AtomicU64 = Chosen,
        @32 pub mem_owned_by_tensor: u8 = Chosen,
        @33 _reserved_0033: [u8; 7] = Reserved,
        @40 pub tensor_op_cv_lock: nrt_mutex_t = Chosen,
        @80 pub tensor_op_cv: [u64; 6] = Chosen,
        @128 pub pending_exec_count_read: AtomicU64 = Chosen,
        @136 pub pending_exec_count_write: AtomicU64 = Chosen,
        @144 pub vtpb_idx: u32 = Chosen,
        @148 pub magic: u32 = Chosen,
        @152 pub device_id: u32 = Chosen,
        @156 pub tpb_idx: u32 = Chosen,
        @160 _reserved_0160: [u8; 160] = Reserved,
    }
}

abi_struct! {
    /// The flat-array form of a tensor set used by batched execute (spec §7.3, 16 B).
    pub struct nrt_tensor_list_t [size = 16, align = 8, section = "7.3"] {
        @0 pub tensors: *mut *mut nrt_tensor_t = Inferred,
        @8 pub num_tensors: u64 = Inferred,
    }
}

impl crate::abi::meta::CType for *mut *mut nrt_tensor_t {
    const BASE: &'static str = "nrt_tensor_t **";
}
// SAFETY: null is a valid raw pointer value.
unsafe impl crate::abi::meta::ZeroValid for *mut *mut nrt_tensor_t {}

impl physical_core_t {
    /// The coordinate `(device_id, device_tpb_idx)` with no owning logical core.
    pub const fn new(device_id: u32, device_tpb_idx: u32) -> Self {
        physical_core_t {
            device_id,
            device_tpb_idx,
            vcore: core::ptr::null_mut(),
            _reserved_0016: [0; 8],
        }
    }
}
