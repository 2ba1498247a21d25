//! libnrt's structs, byte for byte (spec §1–§10; facts in `layout-tests/facts/layout-facts.toml`).
//!
//! Offsets tagged `Observed`/`Inferred` are the spec's; `Chosen` ones are this project's
//! placement of a member the spec names but does not place; `Reserved` spans keep libnrt's size.
//! Every struct is valid when all-zero ("unused"), so the context (18.9 MB for 32 devices)
//! lives in `.bss` or a zeroed allocation and is never built on the stack.
#![allow(non_camel_case_types, missing_docs)]

use crate::atomic::AtomicU64;
use core::ffi::{c_char, c_void};
use core::sync::atomic::AtomicU32;

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
        @0 pub device_id: u32 = Observed,
        @4 pub device_tpb_idx: u32 = Observed,
        @8 pub vcore: *mut virtual_core_t = Observed,
        /// libnrt's tail-pad member (`uint8_t fixes_gcc_bug`); never read.
        @16 pub fixes_gcc_bug: u8 = Observed,
        @17 _reserved_0017: [u8; 7] = Reserved,
    }
}

abi_struct! {
    /// A Logical NeuronCore (LNC / vtpb): 1–2 physical cores presented as one (spec §9, 64 B).
    /// `tpbs[0]` is the owner.
    #[derive(Copy, Clone, Debug)]
    pub struct virtual_core_t [size = 64, align = 8, section = "9"] {
        @0 pub vtpb_idx: u32 = Observed,
        @4 pub vtpb: u32 = Observed,
        @8 pub nec_dev_id: u32 = Observed,
        @12 pub num_tpbs: u32 = Observed,
        @16 pub tpbs: [physical_core_t; 2] = Observed,
    }
}

abi_struct! {
    /// Which of a device's 8 core slots are present: `mla->tpb_map.map[i]` (spec §1.1).
    pub struct tpb_map_t [size = 8, align = 1, section = "1.1"] {
        @0 pub map: [u8; 8] = Inferred,
    }
}

abi_struct! {
    /// One top-level sequencer/semaphore block of a device; opaque here (spec §1, 16 376 B ×16).
    pub struct top_sp_t [size = 16376, align = 8, section = "1"] {
        @0 _reserved_0000: [u64; 2047] = Reserved,
    }
}

abi_struct! {
    /// One entry of `tdrv_ctx_t.ptpbs`: a physical core `{tpb_idx, mla*}` (spec §1; 16 B).
    pub struct ptpb_info_t [size = 16, align = 8, section = "1"] {
        @0 pub tpb_idx: u32 = Chosen,
        @4 _reserved_0004: [u8; 4] = Reserved,
        @8 pub mla: *mut mla_t = Chosen,
    }
}

abi_struct! {
    /// `aws_hal_dma`, one of `tpb_t.dma[32]`: opaque here (spec §2, 40 B).
    pub struct aws_hal_dma [size = 40, align = 8, section = "2"] {
        @0 _reserved_0000: [u64; 5] = Reserved,
    }
}

abi_struct! {
    /// `ib_addrs_one_eng_t`, one of `tpb_t.ready_exec_program_ib_addrs[5]`: opaque here
    /// (spec §2, 56 B).
    pub struct ib_addrs_one_eng_t [size = 56, align = 8, section = "2"] {
        @0 _reserved_0000: [u64; 7] = Reserved,
    }
}

abi_struct! {
    /// `dma_queue_info_t`, one of `tpb_sunda_t.instr_fetch_queue[5]`: opaque here
    /// (spec §6, 360 B).
    pub struct dma_queue_info_t [size = 360, align = 8, section = "6"] {
        @0 _reserved_0000: [u64; 45] = Reserved,
    }
}

abi_struct! {
    /// The per-device usage ledger `mla.dmem_logger` (spec §3.4, 1600 B): under `lock`, bytes
    /// of device memory (HBM) per channel (`memory_usage[4]`) and per (core, usage type)
    /// (`memory_usage_nc`, `[nc][22]` the per-core total), and the trace ring's counters. The
    /// project's device-wide totals, peaks and host ledger have no room here: they live in the
    /// per-device side table `ctx::DevExt` (layout report: "where chosen state lives").
    pub struct dma_mem_log_t [size = 1600, align = 8, section = "3.4"] {
        @0 pub lock: nrt_mutex_t = Observed,
        @40 pub mla_idx: u32 = Observed,
        @44 _reserved_0044: [u8; 4] = Reserved,
        @48 pub max_entries: u64 = Observed,
        @56 pub entry_count: u64 = Observed,
        @64 pub next_entry_idx: u64 = Observed,
        @72 pub entries_dropped: u64 = Observed,
        @80 pub memory_usage: [AtomicU64; 4] = Observed,
        @112 pub memory_usage_nc: [[AtomicU64; 23]; 8] = Observed,
        @1584 pub entries: *mut c_void = Observed,
        @1592 pub verbose_log_dev_mem: u8 = Observed,
        @1593 _reserved_1593: [u8; 7] = Reserved,
    }
}

abi_struct! {
    /// The anonymous `sunda` union inside `tpb_t` (spec §6, 2960 B at tpb_t+17032): the
    /// ext-isa ulib staged once per core and the lock that serialises the staging. Its use
    /// counts live in the per-core side table (`ctx::CoreExt`): 7 bytes are free here.
    pub struct tpb_sunda_t [size = 2960, align = 8, section = "6"] {
        @0 pub hal_stpb: [u8; 1104] = Observed,
        @1104 pub instr_fetch_queue: [dma_queue_info_t; 5] = Observed,
        @2904 pub ulib_set_info_extisa_only: *mut ucode_lib_set_info_t = Observed,
        @2912 pub ulib_staging_lock: nrt_mutex_t = Observed,
        @2952 pub set_ulib_reg: u8 = Observed,
        @2953 _reserved_2953: [u8; 7] = Reserved,
    }
}

abi_struct! {
    /// One scratchpad page: a GLOBAL-allocator dmem shared by `refs` models (spec §8).
    pub struct tdrv_scratchpad_page_t [size = 16, align = 8, section = "8"] {
        @0 pub mem: *mut dmem_t = Observed,
        @8 pub refs: u32 = Observed,
        @12 _reserved_0012: [u8; 4] = Reserved,
    }
}

abi_struct! {
    /// The per-core DRAM scratchpad (spec §8, 16 440 B at tpb_t+22200).
    pub struct tdrv_scratchpad_t [size = 16440, align = 8, section = "8"] {
        @0 pub lock: nrt_mutex_t = Observed,
        @40 pub page_size: u64 = Observed,
        @48 pub num_pages: u32 = Observed,
        @52 pub is_contiguous: u8 = Observed,
        @53 _reserved_0053: [u8; 3] = Reserved,
        @56 pub pages: [tdrv_scratchpad_page_t; 1024] = Observed,
    }
}

abi_struct! {
    /// The per-NeuronCore context (spec §2, 39 320 B): all 24 members at libnrt's offsets. The
    /// GLOBAL allocator, the model database under its lock, the ext-isa cache, the scratchpad,
    /// the Q7 ucode-core pointers. The two 4-byte gaps are the only bytes libnrt leaves, so the
    /// project's per-core state (its `physical_core_t`, execution lock and counters) lives in
    /// the side table `ctx::CoreExt`.
    pub struct tpb_t [size = 39320, align = 8, section = "2"] {
        @0 pub tpb_mem_base: *mut c_void = Observed,
        @8 pub tpb_regs_base: *mut c_void = Observed,
        @16 pub ens_regs_base: *mut c_void = Observed,
        @24 pub idx: i32 = Observed,
        @28 _reserved_0028: [u8; 4] = Reserved,
        @32 pub notification: [u8; 15816] = Observed,
        @15848 pub pool_stdio_block: [u8; 1176] = Observed,
        @17024 pub tpb_allocator: *mut dmem_allocator_t = Observed,
        @17032 pub sunda: tpb_sunda_t = Observed,
        @19992 pub model_db_lock: nrt_mutex_t = Observed,
        @20032 pub model_db: *mut ht_t = Observed,
        @20040 pub h_running_model: H_MODEL = Observed,
        @20044 _reserved_20044: [u8; 4] = Reserved,
        @20048 pub dma: [aws_hal_dma; 32] = Observed,
        @21328 pub global_cc_resource: [u8; 872] = Observed,
        @22200 pub scratchpad: tdrv_scratchpad_t = Observed,
        @38640 pub hw_exec_queue: [u8; 224] = Observed,
        @38864 pub sync_point: [u8; 16] = Observed,
        @38880 pub ready_exec_program_ib_addrs: [ib_addrs_one_eng_t; 5] = Observed,
        @39160 pub ready_exec_program_switch_bufs: [*mut dmem_t; 2] = Observed,
        @39176 pub ready_exec_program_instr_mem_tracker: dmem_list_t = Observed,
        @39192 pub nrtucode_core: [*mut c_void; 5] = Observed,
        @39232 pub pooling_q7_nrtucode_core: [*mut c_void; 8] = Observed,
        @39296 pub pooling_q7_ll: *mut c_void = Observed,
        @39304 pub num_pooling_q7_ll: u64 = Observed,
        @39312 pub nrtucode_context: *mut c_void = Observed,
    }
}

abi_struct! {
    /// One physically attached Neuron device (spec §1, 590 008 B): every member at libnrt's
    /// offset. The project's per-device geometry and peaks live beside the tree (`ctx::DevExt`,
    /// `ctx::DevGeom`): libnrt leaves only 11 bytes of gaps.
    pub struct mla_t [size = 590008, align = 8, section = "1"] {
        @0 pub is_used: u8 = Observed,
        @1 _reserved_0001: [u8; 3] = Reserved,
        @4 pub init_state: u32 = Observed,
        @8 pub mla_idx: u32 = Observed,
        @12 _reserved_0012: [u8; 4] = Reserved,
        @16 pub bars: [u8; 64] = Observed,
        @80 pub _tpbs: [tpb_t; 8] = Observed,
        @314640 pub tpb_map: tpb_map_t = Observed,
        @314648 pub device_id: u32 = Observed,
        @314652 pub host_device_id: u32 = Observed,
        @314656 pub routing_id: u32 = Observed,
        @314660 _reserved_314660: [u8; 4] = Reserved,
        /// `ndl_device_t*` in libnrt; here the driver's device index the core passes back to
        /// the [`Driver`](crate::driver::Driver) (spec §3.2 portal).
        @314664 pub device: u64 = Observed,
        @314672 pub top_sps: [top_sp_t; 16] = Observed,
        @576688 pub bdf: [u8; 80] = Observed,
        @576768 pub dmem_logger: dma_mem_log_t = Observed,
        @578368 pub v2_last_nc_memory_error_ts: i64 = Observed,
        @578376 pub xt_cc: [u8; 200] = Observed,
        @578576 pub intc: [u8; 11432] = Observed,
    }
}

abi_struct! {
    /// The one process-global context `tdrv_ctx_0` points at (spec §1, 18 884 656 B).
    pub struct tdrv_ctx_t [size = 18884656, align = 8, section = "1"] {
        @0 pub num_mla: u32 = Observed,
        @4 _reserved_0004: [u8; 4] = Reserved,
        @8 pub mla: [mla_t; 32] = Observed,
        @18880264 pub num_ptpb: u32 = Observed,
        @18880268 _reserved_18880268: [u8; 4] = Reserved,
        @18880272 pub ptpbs: [ptpb_info_t; 256] = Observed,
        @18884368 pub host_did_to_rid_map: [u32; 32] = Observed,
        @18884496 pub host_did_to_rid_map_size: u32 = Observed,
        @18884500 _reserved_18884500: [u8; 4] = Reserved,
        @18884504 pub reservation_id: u64 = Observed,
        @18884512 pub pod_type: u32 = Observed,
        @18884516 pub pod_sz: u32 = Observed,
        @18884520 pub pod_node_id: u32 = Observed,
        @18884524 pub pod_mode: u32 = Observed,
        @18884528 pub target: u32 = Observed,
        /// libnrt's `dbg_*` collectives tunables (the sources cut the block).
        @18884532 _reserved_18884532: [u8; 124] = Reserved,
    }
}

abi_struct! {
    /// One device-memory allocation (spec §3.1–§3.2, 192 B): libnrt's members at its offsets;
    /// the project's own (generation, alignment, hint text, device and core ids) sit in the two
    /// gaps libnrt leaves, 68..127 (which `dma_memory.c` never touches) and 176..191. libnrt
    /// `strdup`s the hint; here `hint` points at `hint_buf` inside the node (no heap).
    pub struct dmem_t [size = 192, align = 8, section = "3.1"] {
        @0 pub pcore: *mut physical_core_t = Observed,
        @8 pub mem_handle: u64 = Observed,
        @16 pub size: u64 = Observed,
        @24 pub _pa: u64 = Observed,
        @32 pub _va: *mut c_void = Observed,
        @40 pub align_offset: u64 = Observed,
        @48 pub allocated_size: u64 = Observed,
        @56 pub mem_type: u32 = Observed,
        @60 pub mem_usage_type: u32 = Observed,
        @64 pub tdram_channel: u32 = Observed,
        @68 pub generation: u32 = Chosen,
        @72 pub align: u64 = Chosen,
        @80 pub hint_buf: [u8; 48] = Chosen,
        @128 pub ref_count: AtomicU64 = Observed,
        @136 pub hint: *mut c_char = Observed,
        @144 pub cpy_buf: *mut c_void = Observed,
        @152 pub next: *mut dmem_t = Observed,
        @160 pub prev: *mut dmem_t = Observed,
        @168 pub allocator: *mut dmem_allocator_t = Observed,
        @176 pub nc_id: u32 = Chosen,
        @180 pub device_id: u32 = Chosen,
        @184 _reserved_0184: [u8; 8] = Reserved,
    }
}

abi_struct! {
    /// A device-memory allocator (spec §3.1, 512 B): `type` (GLOBAL/MODEL), the owning core,
    /// its lock, an intrusive list between embedded dummy head and tail `dmem_t`s, and the
    /// largest oversized scratchpad var; the project's live count and bytes follow in the tail.
    pub struct dmem_allocator_t [size = 512, align = 8, section = "3.1"] {
        @0 pub r#type: u32 = Observed,
        @4 _reserved_0004: [u8; 4] = Reserved,
        @8 pub pcore: *mut physical_core_t = Observed,
        @16 pub lock: nrt_mutex_t = Observed,
        @56 _reserved_0056: [u8; 8] = Reserved,
        @64 pub dummy_head: dmem_t = Observed,
        @256 pub dummy_tail: dmem_t = Observed,
        @448 pub largest_oversized_scratchpad_var: u64 = Observed,
        @456 pub count: u64 = Chosen,
        @464 pub bytes: u64 = Chosen,
        @472 _reserved_0472: [u8; 40] = Reserved,
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
        @0 pub size: u64 = Inferred,
        @8 pub size_mask: u64 = Inferred,
        @16 pub count: u64 = Inferred,
        @24 pub free_node_fn: *mut c_void = Inferred,
        @32 pub buckets: [ht_node_t; 0] = Chosen,
    }
}

abi_struct! {
    /// The shared per-LNC slot a model's MODEL heap is built in before `kbl_model_add` moves it
    /// into the `model_t` (spec §5.2–§5.3, 32 B).
    pub struct vtpb_info_shared_mr_set_t [size = 32, align = 8, section = "5.2"] {
        @0 pub mem_ref_set: *mut ht_t = Observed,
        @8 pub model_allocator: *mut dmem_allocator_t = Observed,
        @16 pub gc_tracker: *mut dmem_list_t = Observed,
        @24 pub scratchpad_cleanup_info: *mut tdrv_scratchpad_cleanup_info_t = Observed,
    }
}

abi_struct! {
    /// The scratchpad a model holds, per physical core of its logical core (spec §5.2, §8;
    /// 48 B): the cores, the bytes claimed on each, and the contiguous scratchpad's address.
    /// The project's page range sits in the one 4-byte gap.
    pub struct tdrv_scratchpad_cleanup_info_t [size = 48, align = 8, section = "5.2"] {
        @0 pub pcores: [*mut physical_core_t; 2] = Observed,
        @16 pub sizes: [u64; 2] = Observed,
        @32 pub num_entries: u32 = Observed,
        @36 pub first_page: u32 = Chosen,
        @40 pub contiguous_scratchpad_va: *mut c_void = Observed,
    }
}

abi_struct! {
    /// A loaded model (spec §5.3, `calloc(0x1E40)` = 7744 B): libnrt's members at its offsets
    /// (opaque where the project does not model them: `qset`, `param`, `cc_ctx`, the fmap
    /// sets), and the project's own state in the gaps between them. `qset`'s size is not
    /// stated; the project reserves it everything up to `dbtc_storage`. The IO table does not
    /// fit any gap and lives in the per-slot side table `ModelPool::model_io`.
    pub struct model_t [size = 7744, align = 8, section = "5.3"] {
        @0 pub name: [u8; 256] = Observed,
        @256 pub vtpb_idx: u32 = Chosen,
        @260 pub num_subgraphs: u32 = Chosen,
        @264 pub state: u32 = Chosen,
        @268 pub ulib_is_shared: u8 = Chosen,
        @269 _reserved_0269: [u8; 3] = Reserved,
        @272 pub qset: [u8; 6024] = Observed,
        /// `dbtc_storage_t { ht_t *dbtc_node_lut; }` (P6).
        @6296 pub dbtc_storage: *mut ht_t = Observed,
        @6304 pub pcore: physical_core_t = Chosen,
        @6328 pub mem_ref_set: *mut ht_t = Chosen,
        @6336 pub mem_usage_before: u64 = Chosen,
        @6344 pub mem_usage_after: u64 = Chosen,
        @6352 pub exec_count: AtomicU64 = Chosen,
        @6360 pub num_inputs: u32 = Chosen,
        @6364 pub num_outputs: u32 = Chosen,
        @6368 _reserved_6368: [u8; 16] = Reserved,
        @6384 pub h_model: H_MODEL = Observed,
        @6388 _reserved_6388: [u8; 44] = Reserved,
        @6432 pub param: [u8; 32] = Observed,
        @6464 pub dmem_allocator: *mut dmem_allocator_t = Observed,
        @6472 pub gc_tracker: *mut dmem_list_t = Observed,
        @6480 pub ulib_set_info: *mut ucode_lib_set_info_t = Observed,
        @6488 pub ref_count: AtomicU64 = Observed,
        @6496 pub input_fmap_set: [u8; 16] = Observed,
        @6512 pub output_fmap_set: [u8; 16] = Observed,
        @6528 pub target: u32 = Observed,
        @6532 _reserved_6532: [u8; 4] = Reserved,
        @6536 pub sg_gc_trackers: [*mut dmem_list_t; 8] = Chosen,
        @6600 _reserved_6600: [u8; 56] = Reserved,
        @6656 pub num_hw_exec_queue_descs: u32 = Observed,
        @6660 _reserved_6660: [u8; 4] = Reserved,
        @6664 pub static_mr_set: *mut ht_t = Observed,
        @6672 pub io_mr_to_name_map: *mut ht_t = Observed,
        @6680 pub sg_allocators: [*mut dmem_allocator_t; 8] = Chosen,
        @6744 pub sg_mem_ref_sets: [*mut ht_t; 8] = Chosen,
        @6808 _reserved_6808: [u8; 48] = Reserved,
        @6856 pub cc_ctx: [u8; 624] = Observed,
        @7480 pub scratchpad_cleanup_info: *mut tdrv_scratchpad_cleanup_info_t = Observed,
        @7488 _reserved_7488: [u8; 8] = Reserved,
        @7496 pub ht_node: ht_node_t = Observed,
        @7544 _reserved_7544: [u8; 40] = Reserved,
        @7584 pub reset_evt_accel: u8 = Observed,
        @7585 pub program_fp8_cfg: u8 = Observed,
        @7586 _reserved_7586: [u8; 158] = Reserved,
    }
}

abi_struct! {
    /// A set of GPSIMD ucode libraries staged into device memory (spec §6, 48 B).
    pub struct ucode_lib_set_info_t [size = 48, align = 8, section = "6"] {
        @0 pub scratch_space: *mut dmem_t = Observed,
        @8 pub ucode_table: *mut dmem_t = Observed,
        @16 pub extram: *mut dmem_t = Observed,
        @24 pub num_libs: i32 = Observed,
        @28 _reserved_0028: [u8; 4] = Reserved,
        @32 pub libs: *mut ucode_lib_info_t = Observed,
        @40 pub lib_dmem: *mut dmem_t = Observed,
    }
}

abi_struct! {
    /// One staged library: its device address (`pa + align + offset`) and CPU placement (§6).
    pub struct ucode_lib_info_t [size = 32, align = 8, section = "6"] {
        @0 pub address: u64 = Observed,
        @8 pub flags: u32 = Observed,
        @12 pub cpu_id: u8 = Observed,
        @13 pub total_cpus: u8 = Observed,
        @14 _reserved_0014: [u8; 2] = Reserved,
        @16 pub num_funcs: i32 = Observed,
        @20 _reserved_0020: [u8; 4] = Reserved,
        @24 pub funcs: *mut c_void = Observed,
    }
}

abi_struct! {
    /// One entry of the on-device library table (spec §6, 280 B; the table is `[97]`).
    pub struct SUNDA_UCODE_LIB_LIBRARY_TABLE_ENTRY [size = 280, align = 8, section = "6"] {
        @0 pub valid: u8 = Observed,
        @1 pub opcode: u8 = Observed,
        @2 pub sub_opcode: u8 = Observed,
        @3 pub cpu_id: u8 = Observed,
        @4 pub total_cpus: u8 = Observed,
        @5 pub reserved: [u8; 7] = Observed,
        @12 pub flags: u32 = Observed,
        @16 pub stripped_lib_addr: u64 = Observed,
        @24 pub func_name: [u8; 256] = Observed,
    }
}

abi_struct! {
    /// A tensor (spec §7.1, 192 B): a window (`_offset`, `_size`) onto ref-counted storage,
    /// libnrt's members at its offsets (the two counters on their own cache lines). The
    /// project's magic and generation sit in the gap after `extra`; the name text lives in the
    /// per-slot side table (`TensorPool::tensor_names`), which `name` points into.
    pub struct nrt_tensor_t [size = 192, align = 8, section = "7.1"] {
        @0 pub name: *mut c_char = Observed,
        @8 pub sto: *mut nrt_tensor_storage_t = Observed,
        @16 pub _offset: u64 = Observed,
        @24 pub _size: u64 = Observed,
        @32 pub extra: *mut c_void = Observed,
        @40 pub magic: u32 = Chosen,
        @44 pub generation: u32 = Chosen,
        @48 _reserved_0048: [u8; 16] = Reserved,
        @64 pub ref_count: AtomicU64 = Observed,
        @72 _reserved_0072: [u8; 56] = Reserved,
        @128 pub output_completion_count: AtomicU64 = Observed,
        @136 _reserved_0136: [u8; 56] = Reserved,
    }
}

abi_struct! {
    /// A tensor's backing storage (spec §7.1, 320 B): a dmem (DMA) or host bytes (MALLOC),
    /// ref-counted by the tensors that view it, with the output-completion condvar state.
    /// `dmem` is libnrt's anonymous union `{ dmem_t *dmem; uint8_t *vmem; }`, named by its DMA
    /// arm. The project's magic and owning core sit in the gap before `ref_count`.
    pub struct nrt_tensor_storage_t [size = 320, align = 8, section = "7.1"] {
        @0 pub hbm_idx: u32 = Observed,
        @4 _reserved_0004: [u8; 4] = Reserved,
        @8 pub allocated_size: u64 = Observed,
        @16 pub r#type: u32 = Observed,
        @20 _reserved_0020: [u8; 4] = Reserved,
        @24 pub dmem: *mut c_void = Observed,
        @32 pub magic: u32 = Chosen,
        @36 pub device_id: u32 = Chosen,
        @40 pub tpb_idx: u32 = Chosen,
        @44 _reserved_0044: [u8; 20] = Reserved,
        @64 pub ref_count: AtomicU64 = Observed,
        @72 pub mem_owned_by_tensor: u8 = Observed,
        @73 _reserved_0073: [u8; 7] = Reserved,
        @80 pub tensor_op_cv_lock: nrt_mutex_t = Observed,
        @120 pub tensor_op_cv: [u64; 6] = Observed,
        @168 _reserved_0168: [u8; 24] = Reserved,
        @192 pub pending_exec_count_read: AtomicU64 = Observed,
        @200 _reserved_0200: [u8; 56] = Reserved,
        @256 pub pending_exec_count_write: AtomicU64 = Observed,
        @264 pub vtpb_idx: i32 = Observed,
        @268 _reserved_0268: [u8; 52] = Reserved,
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
            fixes_gcc_bug: 0,
            _reserved_0017: [0; 7],
        }
    }
}
