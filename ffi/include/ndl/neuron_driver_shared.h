/*
 * ndl/neuron_driver_shared.h -- written by hand (not generated).
 *
 * Definitions the Neuron kernel driver and its user-space library share (the SDK's
 * ndl/neuron_driver_shared.h): driver feature bits, pod and election states, DMA engine and
 * queue state, notification queue kinds, memory-allocation categories of the driver's sysfs
 * counters, and the layout of the Neuron datastore (NDS) counters. Names, values and layouts
 * are the SDK's (checked against ffi/tests/sdk-facts.toml by ffi/tests/sdk_headers.rs); this
 * library does not talk to the driver through them.
 */
#ifndef NRT_DMEM_NDL_NEURON_DRIVER_SHARED_H
#define NRT_DMEM_NDL_NEURON_DRIVER_SHARED_H

#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>
#include "ndl/neuron_driver_shared_tensor_batch_op.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Optional driver features (bits of the driver's feature word). */
enum neuron_driver_feature_flag {
    NEURON_DRIVER_FEATURE_DMABUF = 1 << 0,
    NEURON_DRIVER_FEATURE_ASYNC_DMA = 1 << 1,
    NEURON_DRIVER_FEATURE_BATCH_DMAQ_INIT = 1 << 2,
    NEURON_DRIVER_FEATURE_BIG_CORE_MAPS = 1 << 3,
    NEURON_DRIVER_FEATURE_MEM_ALLOC_TYPE = 1 << 4,
    NEURON_DRIVER_FEATURE_HBM_SCRUB = 1 << 5,
    NEURON_DRIVER_FEATURE_MEM_ALLOC64 = 1 << 6,
    NEURON_DRIVER_FEATURE_CONTIGUOUS_SCRATCHPAD = 1 << 7,
    NEURON_DRIVER_FEATURE_ZEROCOPY = 1 << 8,
};

/** How the instance's devices are joined into a pod. */
enum {
    NEURON_POD_TYPE_NONE = 0,
    NEURON_POD_TYPE_P2P = 1,
    NEURON_POD_TYPE_SWITCH = 2,
};

/** State of the pod election. */
enum {
    NEURON_POD_E_STATE_NOT_STARTED = 0,
    NEURON_POD_E_STATE_IN_PROGRESS = 1,
    NEURON_POD_E_STATE_ULTRASERVER = 2,
    NEURON_POD_E_STATE_FAILED = 3,
    NEURON_POD_E_STATE_SINGLE_NODE = 4,
};

/** Requests to the pod election (ndl_pod_ctrl). */
enum neuron_pod_ctrl_req {
    /** Elect a pod now. */
    NEURON_NPE_POD_CTRL_REQ_POD = 0,
    /** Run as a single node. */
    NEURON_NPE_POD_CTRL_REQ_SINGLE_NODE = 1,
    /** Stop the election. */
    NEURON_NPE_POD_CTRL_REQ_KILL = 2,
    /** Set the ultraserver mode. */
    NEURON_NPE_POD_CTRL_SET_MODE = 3,
};

/** Ultraserver configurations. */
enum neuron_ultraserver_mode {
    /** None chosen. */
    NEURON_ULTRASERVER_MODE_UNSET = 0,
    /** Four nodes. */
    NEURON_ULTRASERVER_MODE_X4 = 1,
    /** Two nodes over the horizontal links. */
    NEURON_ULTRASERVER_MODE_X2H = 2,
    /** Two nodes over the vertical links. */
    NEURON_ULTRASERVER_MODE_X2V = 3,
    /** One node on its own. */
    NEURON_ULTRASERVER_MODE_X1 = 4,
};

/** Periodic posting of driver metrics (ndl_metrics_ctrl). */
enum neuron_metrics_mode {
    NEURON_METRICS_MODE_PERIODIC_ENABLE = 0,
    NEURON_METRICS_MODE_PERIODIC_DISABLE = 1,
};

/** A core map entry that stands for the whole device. */
#define NEURON_NC_MAP_DEVICE (0xffffffff)

/** The rings of a DMA queue. */
enum neuron_dma_queue_type {
    NEURON_DMA_QUEUE_TYPE_TX = 0,
    NEURON_DMA_QUEUE_TYPE_RX = 1,
    NEURON_DMA_QUEUE_TYPE_COMPLETION = 2,
};

/** Progress of a core's initialisation (ndl_nc_init_set_state). */
enum neuron_cinit_state {
    NEURON_CINIT_STATE_STARTED = 1,
    NEURON_CINIT_STATE_COMPLETED = 2,
    NEURON_CINIT_STATE_INVALID = 3,
};

/** State of a DMA engine (ndl_dma_eng_get_state). */
struct neuron_dma_eng_state {
    __u32 revision_id;
    /** Queues the engine has. */
    __u32 max_queues;
    /** Queues configured. */
    __u32 num_queues;
    __u32 tx_state;
    __u32 rx_state;
};

/** State of one ring of a DMA queue (ndl_dma_queue_get_state). */
struct neuron_dma_queue_state {
    __u32 hw_status;
    __u32 sw_status;
    /** Ring base address. */
    __u64 base_addr;
    /** Ring length. */
    __u32 length;
    /** Index the hardware advances. */
    __u32 head_pointer;
    /** Index software advances. */
    __u32 tail_pointer;
    __u64 completion_base_addr;
    __u32 completion_head;
};

/** Contexts of host-to-device DMA. */
enum neuron_dma_h2t_ctx_handle_type {
    /** No previous transfer (starts an asynchronous chain). */
    NEURON_DMA_H2T_CTX_HANDLE_NONE = -1,
    /** Synchronous transfers. */
    NEURON_DMA_H2T_CTX_HANDLE_SYNC = 0,
    /** The two asynchronous contexts. */
    NEURON_DMA_H2T_CTX_HANDLE_ASYNC1 = 1,
    NEURON_DMA_H2T_CTX_HANDLE_ASYNC2 = 2,
    /** Number of contexts. */
    NEURON_DMA_H2T_CTX_HANDLE_CNT = 3,
};

/** The default host-to-device DMA queue. */
#define NEURON_DMA_H2T_DEFAULT_QID (-1)

/** Owners of notification queues (0 and 1 match the boolean older runtimes passed). */
enum NQ_DEVICE_TYPE {
    NQ_DEVICE_TYPE_NEURON_CORE = 0,
    NQ_DEVICE_TYPE_TOPSP = 1,
    NQ_DEVICE_TYPE_MAX = 2,
};

/** Kinds of notification queues. */
enum NQ_TYPE {
    /** Notifications the execution emits implicitly. */
    NQ_TYPE_TRACE = 0,
    /** Notifications of NOTIFY instructions. */
    NQ_TYPE_NOTIFY = 1,
    /** Event set and clear. */
    NQ_TYPE_EVENT = 2,
    /** Errors. */
    NQ_TYPE_ERROR = 3,
    /** DMA transfers. */
    NQ_TYPE_TRACE_DMA = 4,
    /** Throttling. */
    NQ_TYPE_THROTTLE = 5,
    NQ_TYPE_MAX = 6,
};

/** Blocks of BAR0 that can be mapped (ndl_mmap_bar_region). */
enum neuron_dm_block_type {
    /** Marks the end of a table. */
    NEURON_DM_BLOCK_INVALID = -1,
    NEURON_DM_BLOCK_TPB = 0,
    NEURON_DM_BLOCK_TOPSP = 1,
    NEURON_DM_BLOCK_HBM = 2,
};

/** Resources within a mappable block. */
enum neuron_dm_resource_type {
    /** The semaphores. */
    NEURON_DM_RESOURCE_SEMAPHORE = 0,
    /** The whole block, read-only (TOP_SP only). */
    NEURON_DM_RESOURCE_ALL = 1,
    /** The state buffer. */
    NEURON_DM_RESOURCE_SBUF = 2,
    /** Device memory. */
    NEURON_DM_RESOURCE_DMEM = 3,
};

/** A model's UUID as the driver keeps it. */
struct neuron_uuid {
    __u8 value[32];
};

/** Processes that can use one device at a time. */
#define NEURON_MAX_PROCESS_PER_DEVICE 16

/** What ndl_get_all_apps_info reports: core locks, memory use, or all of it. */
#define APP_INFO_PID_NC_LOCK_INFO (1)
#define APP_INFO_PID_MEM_USAGE (1 << 1)
#define APP_INFO_ALL (0xF)

/** Models per device an application's entry records. */
#define APP_INFO_MAX_MODELS_PER_DEVICE (4)

/** No datastore id. */
#define NDS_INVALID_ID (-1)

/** One process using a device (ndl_get_all_apps_info). */
struct neuron_app_info {
    __s32 pid;
    /** One bit per core the process has locked. */
    __u8 nc_lock_map;
    /** The models it runs. */
    struct neuron_uuid uuid_data[APP_INFO_MAX_MODELS_PER_DEVICE];
    /** Host memory it uses, in bytes. */
    size_t host_mem_size;
    /** Device memory it uses, in bytes. */
    size_t device_mem_size;
};

/** A metrics version: 32-bit build number, 8-bit minor and major versions, as one word. */
typedef union nmetric_version {
    struct {
        __u64 build_num : 32;
        __u64 minor_ver : 8;
        __u64 major_ver : 8;
        __u64 reserved : 16;
    };
    __u64 all;
} nmetric_version_t;

/** One allocation in a device memory dump (ndl_dump_device_allocation_info). */
struct neuron_ioctl_mem_chunk_info {
    __u64 pa;
    __u64 size;
    __u32 mem_type;
};

/** Most entries a core map from the driver has. */
#define NEURON_NC_MAP_MAX_ENTRIES 128

/** Flavours of the logical-to-physical core map. */
enum neuron_ioctl_nc_mapping_type {
    NEURON_IOCTL_NC_MAPPING_TYPE_V0 = 0,
};

/** One core of the map: its device and its index there. */
struct neuron_ioctl_nc_map_entry {
    __u32 device_id;
    __u32 device_nc_idx;
};

/** The logical-to-physical core map (ndl_get_logical_to_physical_nc_map). */
struct neuron_ioctl_nc_map {
    __u32 num_entries;
    struct neuron_ioctl_nc_map_entry mappings[];
};

/** A batch of copies between host buffers and one device memory handle. */
typedef struct neuron_memcpy_batch {
    /** The device memory. */
    __u64 mem_handle;
    /** Offset into it the operations are relative to. */
    __u64 mem_handle_offset;
    /** `num_ops` operations. */
    const nrt_tensor_batch_op_t *ops_ptr;
    __u32 num_ops;
    /** Below this size the driver writes through BAR4 instead of using DMA. */
    __u16 bar4_wr_threshold;
    __u16 flags;
    /** Handed back with the completion. */
    void *context;
} neuron_memcpy_batch_t;

/** Categories of the driver's memory-allocation counters (sysfs). */
typedef enum {
    /** Host memory of runtimes that do not say (do not use). */
    NEURON_MEMALLOC_TYPE_UNKNOWN_HOST,
    NEURON_MEMALLOC_TYPE_CODE_HOST,
    NEURON_MEMALLOC_TYPE_TENSORS_HOST,
    NEURON_MEMALLOC_TYPE_CONSTANTS_HOST,
    NEURON_MEMALLOC_TYPE_MISC_HOST,
    NEURON_MEMALLOC_TYPE_NCDEV_HOST,
    NEURON_MEMALLOC_TYPE_NOTIFICATION_HOST,

    /** Device memory of runtimes that do not say (do not use). */
    NEURON_MEMALLOC_TYPE_UNKNOWN_DEVICE,
    NEURON_MEMALLOC_TYPE_CODE_DEVICE,
    NEURON_MEMALLOC_TYPE_TENSORS_DEVICE,
    NEURON_MEMALLOC_TYPE_CONSTANTS_DEVICE,
    NEURON_MEMALLOC_TYPE_SCRATCHPAD_DEVICE,
    NEURON_MEMALLOC_TYPE_MISC_DEVICE,
    NEURON_MEMALLOC_TYPE_NCDEV_DEVICE,
    NEURON_MEMALLOC_TYPE_COLLECTIVES_DEVICE,
    NEURON_MEMALLOC_TYPE_SCRATCHPAD_NONSHARED_DEVICE,
    NEURON_MEMALLOC_TYPE_NOTIFICATION_DEVICE,

    NEURON_MEMALLOC_TYPE_DMA_RINGS_HOST,
    NEURON_MEMALLOC_TYPE_DMA_RINGS_DEVICE,

    /** Counted with NEURON_MEMALLOC_TYPE_SCRATCHPAD_DEVICE. */
    NEURON_MEMALLOC_TYPE_CONTIGUOUS_SCRATCHPAD_DEVICE,

    NEURON_MEMALLOC_TYPE_MAX
} mem_alloc_category_t;

/*
 * The Neuron datastore (NDS): a shared memory block per process and device holding a header,
 * per-device counters, per-core counters and, further on, extended per-core counters. New
 * counters are only ever appended, taking slots from the reserved ones, so older and newer
 * runtimes and tools agree on every offset.
 */

/** Reserved per-device counter slots. */
#define NDS_ND_COUNTER_RESERVED 18

/** Per-device counters. */
enum {
    NDS_ND_COUNTER_RUNTIME_VERSION,
    NDS_ND_COUNTER_FRAMEWORK_VERSION,
    NDS_ND_COUNTER_FAL_VERSION,
    NDS_ND_COUNTER_FEATURE_BITMAP,
    NDS_ND_COUNTER_MIN_NEFF_VERSION,
    NDS_ND_COUNTER_MAX_NEFF_VERSION,

    /* host memory in use, by category */
    NDS_ND_COUNTER_MEM_USAGE_CODE_HOST,
    NDS_ND_COUNTER_MEM_USAGE_TENSORS_HOST,
    NDS_ND_COUNTER_MEM_USAGE_CONSTANTS_HOST,
    NDS_ND_COUNTER_MEM_USAGE_SCRATCHPAD_HOST,
    NDS_ND_COUNTER_MEM_USAGE_MISC_HOST,

    NDS_ND_COUNTER_DYNAMIC_SYSFS_METRIC_BITMAP,

    NDS_ND_COUNTER_DEVICE_CLUSTER_ID,

    /** Slots in all, the reserved ones included. */
    NDS_ND_COUNTER_COUNT = NDS_ND_COUNTER_DEVICE_CLUSTER_ID + NDS_ND_COUNTER_RESERVED + 1
};

/** Reserved per-core counter slots. */
#define NDS_NC_COUNTER_RESERVED 0

/** Per-core counters. */
enum {
    NDS_NC_COUNTER_TIME_IN_USE = 0,

    NDS_NC_COUNTER_INFER_COMPLETED,
    NDS_NC_COUNTER_INFER_COMPLETED_WITH_ERR,
    NDS_NC_COUNTER_INFER_COMPLETED_WITH_NUM_ERR,
    NDS_NC_COUNTER_INFER_TIMED_OUT,
    NDS_NC_COUNTER_INFER_INCORRECT_INPUT,
    NDS_NC_COUNTER_INFER_FAILED_TO_QUEUE,

    /* errors, in the order of the error codes the runtime offsets them by */
    NDS_NC_COUNTER_ERR_GENERIC,
    NDS_NC_COUNTER_ERR_NUMERICAL,
    NDS_NC_COUNTER_ERR_MODEL,
    NDS_NC_COUNTER_ERR_TRANSIENT,
    NDS_NC_COUNTER_ERR_HW,
    NDS_NC_COUNTER_ERR_RT,

    NDS_NC_COUNTER_LATENCY_DEVICE,
    NDS_NC_COUNTER_LATENCY_TOTAL,
    NDS_NC_COUNTER_NC_TIME,

    /* appended later: an older driver sees them land in its reserved slots */
    NDS_NC_COUNTER_GENERIC_FAIL,
    NDS_NC_COUNTER_ERR_RESOURCE,
    NDS_NC_COUNTER_ERR_RESOURCE_NC,
    NDS_NC_COUNTER_ERR_INVALID,
    NDS_NC_COUNTER_ERR_UNSUPPORTED_NEFF_VERSION,

    NDS_NC_COUNTER_CC_TIME,

    /* device memory in use, by category */
    NDS_NC_COUNTER_MEM_USAGE_CODE_DEVICE,
    NDS_NC_COUNTER_MEM_USAGE_TENSORS_DEVICE,
    NDS_NC_COUNTER_MEM_USAGE_CONSTANTS_DEVICE,
    NDS_NC_COUNTER_MEM_USAGE_SCRATCHPAD_DEVICE,
    NDS_NC_COUNTER_MEM_USAGE_MISC_DEVICE,

    NDS_NC_COUNTER_MODEL_LOAD_COUNT,
    NDS_NC_COUNTER_INFERENCE_COUNT,

    NDS_NC_COUNTER_MAC_COUNT,

    NDS_NC_COUNTER_OOB,

    /** Slots in all, the reserved ones included. */
    NDS_NC_COUNTER_COUNT = NDS_NC_COUNTER_OOB + NDS_NC_COUNTER_RESERVED + 1
};

/** Cores whose counters live in the original section. */
#define NDS_MAX_NEURONCORE_COUNT (4)
/** Further cores, whose counters live in the extended section. */
#define NDS_EXT_MAX_NEURONCORE_COUNT (12)

/** Reserved extended per-core counter slots. */
#define NDS_EXT_NC_COUNTER_ADDED_RESERVED 54

/** Extended per-core counters, numbered on from the per-core ones. */
enum {
    NDS_EXT_NC_COUNTER_HW_ERR_COLLECTIVES = NDS_NC_COUNTER_COUNT,
    NDS_EXT_NC_COUNTER_HW_ERR_HBM_UE,
    NDS_EXT_NC_COUNTER_HW_ERR_NC_UE,
    NDS_EXT_NC_COUNTER_HW_ERR_DMA_ABORT,
    NDS_EXT_NC_COUNTER_ERR_SW_NQ_OVERFLOW,
    NDS_EXT_NC_COUNTER_ERR_SW_SEMAPHORE_ERROR,
    NDS_EXT_NC_COUNTER_ERR_SW_EVENT_ERROR,
    NDS_EXT_NC_COUNTER_ERR_SW_PSUM_COLLISION,
    NDS_EXT_NC_COUNTER_ERR_SW_SEQUENCER_FATAL,
    NDS_EXT_NC_COUNTER_HW_ERR_REPAIRABLE_HBM_UE,
    NDS_EXT_NC_COUNTER_LAST,
    /** Extended slots in all, the reserved ones included. */
    NDS_EXT_NC_COUNTER_COUNT = NDS_EXT_NC_COUNTER_LAST - NDS_NC_COUNTER_COUNT + NDS_EXT_NC_COUNTER_ADDED_RESERVED
};

/** Per-core counters in all (original and extended). */
#define NDS_TOTAL_NC_COUNTER_COUNT (NDS_NC_COUNTER_COUNT + NDS_EXT_NC_COUNTER_COUNT)

/** The datastore's first bytes. */
typedef struct nds_header {
    /** "nds" and a NUL. */
    char signature[4];
    /** Version of the datastore's format. */
    int version;
} nds_header_t;

/* Offsets in the datastore. `base_addr` is the datastore's address as a byte pointer (or an
 * integer); the accessors give `uint64_t *`. */

#define NDS_HEADER_START (0)
#define NDS_HEADER_SIZE (sizeof(nds_header_t))

/** The per-device counters. */
#define NDS_ND_COUNTERS_START (NDS_HEADER_START + NDS_HEADER_SIZE)
#define NDS_ND_COUNTERS_SIZE (NDS_ND_COUNTER_COUNT * sizeof(uint64_t))
#define NDS_ND_COUNTERS(base_addr) ((uint64_t *)((base_addr) + NDS_ND_COUNTERS_START))

/** The original per-core counters of the first NDS_MAX_NEURONCORE_COUNT cores. */
#define NDS_NEURONCORE_COUNTERS_COUNT (NDS_NC_COUNTER_COUNT)
#define NDS_NEURONCORE_COUNTERS_START (NDS_ND_COUNTERS_START + NDS_ND_COUNTERS_SIZE)
#define NDS_NEURONCORE_COUNTERS_SIZE \
    (NDS_NEURONCORE_COUNTERS_COUNT * NDS_MAX_NEURONCORE_COUNT * sizeof(uint64_t))
#define NDS_NEURONCORE_COUNTERS(base_addr, nc_index) \
    ((uint64_t *)((base_addr) + NDS_NEURONCORE_COUNTERS_START) + ((nc_index) * NDS_NEURONCORE_COUNTERS_COUNT))

/** Sizes of the extended section in the previous format, which placed it at a fixed offset
 * after the process records. */
#define NDS_EXT_NC_COUNTER_COUNT_OLD (65)
#define NDS_TOTAL_NC_COUNTER_COUNT_OLD (96)
#define NDS_EXT_NEURONCORE_COUNTERS_SIZE_OLD \
    (NDS_EXT_NC_COUNTER_COUNT_OLD * NDS_MAX_NEURONCORE_COUNT * sizeof(uint64_t))
#define NDS_EXT_NEURONCORE_NC_DATA_SIZE_OLD \
    (NDS_TOTAL_NC_COUNTER_COUNT_OLD * NDS_EXT_MAX_NEURONCORE_COUNT * sizeof(uint64_t))
#define NDS_EXT_SECTION_SIZE_OLD (NDS_EXT_NEURONCORE_COUNTERS_SIZE_OLD + NDS_EXT_NEURONCORE_NC_DATA_SIZE_OLD)
#define NDS_EXT_OFFSET_OLD (44588)

/** The extended section starts on a 64-byte boundary after the previous format's. */
#define NDS_EXT_ALIGNMENT (64)
#define NDS_ALIGN(v) ((v) + (-(v) & (NDS_EXT_ALIGNMENT - 1)))
#define NDS_EXT_OFFSET (NDS_ALIGN(NDS_EXT_OFFSET_OLD + NDS_EXT_SECTION_SIZE_OLD))

/** The extended counters of the first NDS_MAX_NEURONCORE_COUNT cores. */
#define NDS_EXT_NEURONCORE_COUNTERS_COUNT (NDS_EXT_NC_COUNTER_COUNT)
#define NDS_EXT_NEURONCORE_COUNTERS_START (NDS_EXT_OFFSET)
#define NDS_EXT_NEURONCORE_COUNTERS_SIZE \
    (NDS_EXT_NC_COUNTER_COUNT * NDS_MAX_NEURONCORE_COUNT * sizeof(uint64_t))
#define NDS_EXT_NEURONCORE_COUNTERS(base_addr, nc_index) \
    ((uint64_t *)((base_addr) + NDS_EXT_NEURONCORE_COUNTERS_START) + ((nc_index) * NDS_EXT_NC_COUNTER_COUNT))

/** Every counter (original and extended, plus one slot of padding to 64 bytes) of each of
 * the NDS_EXT_MAX_NEURONCORE_COUNT further cores. */
#define NDS_EXT_NEURONCORE_NC_DATA_PADDING (1)
#define NDS_EXT_NEURONCORE_NC_DATA_COUNT (NDS_TOTAL_NC_COUNTER_COUNT + NDS_EXT_NEURONCORE_NC_DATA_PADDING)
#define NDS_EXT_NEURONCORE_NC_DATA_START \
    (NDS_ALIGN(NDS_EXT_NEURONCORE_COUNTERS_START + NDS_EXT_NEURONCORE_COUNTERS_SIZE))
#define NDS_EXT_NEURONCORE_NC_DATA_SIZE \
    (NDS_EXT_MAX_NEURONCORE_COUNT * NDS_EXT_NEURONCORE_NC_DATA_COUNT * sizeof(uint64_t))
#define NDS_EXT_NEURONCORE_NC_DATA(base_addr, nc_index) \
    ((uint64_t *)((base_addr) + NDS_EXT_NEURONCORE_NC_DATA_START) + ((nc_index) * NDS_EXT_NEURONCORE_NC_DATA_COUNT))

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NDL_NEURON_DRIVER_SHARED_H */
