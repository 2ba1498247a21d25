/*
 * ndl/ndl.h -- written by hand (not generated).
 *
 * The Neuron driver library (the SDK's ndl/ndl.h): the user-space layer libnrt drives
 * /dev/neuron* through -- devices, memory, DMA queues, notification queues, semaphores and
 * events, core reservation, the datastore and pods. Names, values and layouts are the SDK's
 * (checked against ffi/tests/sdk-facts.toml by ffi/tests/sdk_headers.rs).
 *
 * libnrt links this library in privately and does not export its functions, and neither does
 * this one: they are declared so that code written against the SDK compiles, but a program
 * that calls one does not link (against AWS's libnrt.so either). The bitmap helpers at the end
 * are inline and work as they are.
 */
#ifndef NRT_DMEM_NDL_NDL_H
#define NRT_DMEM_NDL_NDL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <pthread.h>
#include "ndl/neuron_driver_shared.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Owners of notification queues. */
typedef enum NQ_DEV_TYPE {
    NQ_DEV_TYPE_NEURON_CORE = 0,
    NQ_DEV_TYPE_TOPSP = 1,
    NQ_DEV_TYPE_MAX = 2,
} ndl_nq_dev_t;

/** Most Neuron devices on one host. */
#define MAX_NEURON_DEVICE_COUNT 64
/** Most cores per device. */
#define MAX_NC_PER_DEVICE 8
#define NEURON_MAX_DEVICES MAX_NEURON_DEVICE_COUNT
/** Device nodes are this prefix and the device index. */
#define NEURON_DEVICE_PREFIX "/dev/neuron"
/** This interface's version. */
#define NEURON_DRIVER_LIBRARY_MAJOR 1
#define NEURON_DRIVER_LIB_MINOR 0
/** Most HBMs per device. */
#define MAX_HBM_PER_DEVICE 4

/** Bytes of ndl_version_info_t.driver_full_version. */
#define DRIVER_VERSION_MAX_SIZE 32

/** Versions of the driver and of this library (ndl_get_version). */
typedef struct ndl_version_info {
    uint16_t driver_major_version;
    uint16_t driver_minor_version;
    /** NUL-terminated full driver version. */
    char driver_full_version[DRIVER_VERSION_MAX_SIZE];
    uint16_t library_major_version;
    uint16_t library_minor_version;
} ndl_version_info_t;

/** How ndl_open_device sets a device up. */
typedef struct ndl_device_init_param {
    /** Initialise the device while opening it. */
    bool initialize_device;
    /** Regions to split each device DRAM into. */
    int num_dram_regions;
    /** Map the HBMs while opening the device. */
    bool map_hbm;
} ndl_device_init_param_t;

/** Bytes of a preallocated copy buffer. */
#define NDL_COPY_BUF_SIZE (2ull * 1024 * 1024)

/** A host buffer the driver allocated for copies to and from one core (ndl_get_copy_buf). */
typedef struct ndl_copy_buf {
    uint64_t mem_handle;
    void *mmap_va;
    pthread_mutex_t lock;
} ndl_copy_buf_t;

/** An open device. */
typedef struct ndl_device {
    uint8_t device_index;
    /** Device generation. */
    uint8_t device_type;
    /** Board revision. */
    uint16_t device_revision;
    /** Devices this one is connected to, and their indexes. */
    uint8_t connected_device_count;
    uint8_t connected_devices[MAX_NEURON_DEVICE_COUNT];
    /** BAR0 and BAR2: base and size. */
    uint64_t csr_base[2];
    uint64_t csr_size[2];
    /** One copy buffer per core. */
    ndl_copy_buf_t cpy_bufs[MAX_NC_PER_DEVICE];
    /** Mapped HBMs: addresses, size of each, how many, log2 of the size. */
    void *hbm_va[MAX_HBM_PER_DEVICE];
    size_t hbm_size;
    uint32_t hbm_va_cnt;
    uint32_t shift_hbm_size;
    uint64_t hbm_offset[MAX_HBM_PER_DEVICE];
    /** The library's own state. */
    uint8_t context[];
} ndl_device_t;

/** A core of an open device. */
typedef struct ndl_device_nc {
    ndl_device_t *device;
    uint32_t nc_id;
} ndl_device_nc_t;

/** The library's state of an open device. */
typedef struct ndl_device_context {
    /** File descriptor of the device node. */
    int nd_fd;
} ndl_device_context_t;

/** A memory allocation. */
typedef struct ndl_mem_info {
    ndl_device_t *device;
    __u64 driver_handle;
    /** Physical address. */
    uint64_t pa;
    uint64_t mmap_offset;
    uint64_t size;
    uint32_t align;
    /** Where it is mapped, if it is. */
    void *mmap_va;
    /** Non-zero for host memory. */
    uint32_t host_memory;
    int nc_id;
} ndl_mem_info_t;

/** A notification queue. */
typedef struct ndl_notification_context {
    /** The core, or the owner of another type. */
    union {
        uint8_t nc_id;
        uint8_t nq_dev_id;
    };
    ndl_nq_dev_t nq_dev_type;
    /** An NQ_TYPE. */
    uint8_t nq_type;
    uint8_t engine_index;
    /** Bytes. */
    uint32_t size;
    /** File descriptor of its device node. */
    int fd;
    uint64_t offset;
    uint64_t mem_handle;
    /** Where it is mapped. */
    void *va;
    ndl_mem_info_t *mem_info;
} ndl_notification_context_t;

/** One DMA queue to set up (ndl_dma_queue_init_batch). */
struct ndl_queue_init {
    __u32 eng_id;
    __u32 qid;
    __u32 tx_desc_count;
    __u32 rx_desc_count;
    /** Memory of the transmit, receive and completion rings. */
    __u64 tx_handle;
    __u64 rx_handle;
    __u64 rxc_handle;
    __u32 axi_port;
};

/** Most queues one batch sets up. */
#define MAX_NDL_QUEUE_INIT_BATCH 256

/** DMA queues to set up in one call. */
struct ndl_queue_init_batch {
    __u32 count;
    struct ndl_queue_init entries[MAX_NDL_QUEUE_INIT_BATCH];
};

/*
 * The functions. Unless stated otherwise they return 0 on success.
 */

/* Versions */
int ndl_get_version(ndl_version_info_t *version);
int ndl_get_compatible_version(uint32_t *min_compatible_version, uint32_t *max_compatible_version);

/* Devices: open, close, list; registers and counters */
int ndl_open_device(int device_index, ndl_device_init_param_t *params, ndl_device_t **device);
int ndl_close_device(ndl_device_t *device);
/** Fills `device_indexes` (room for `device_indexes_size`) and returns how many devices exist. */
int ndl_available_devices(int *device_indexes, int device_indexes_size);
int ndl_bar_read(ndl_device_t *device, uint8_t bar, uint64_t *addresses, uint32_t count, uint32_t *buffer);
int ndl_bar_write(ndl_device_t *device, uint8_t bar, uint64_t *addresses, uint32_t count, uint32_t *data);
int ndl_read_hw_counters(ndl_device_t *device, uint64_t *addresses, uint32_t count, uint32_t *data);
/** The mapped address and size of HBM `hbm_idx`: -EINVAL on a bad argument, -ENOENT past the last HBM. */
int ndl_get_hbm_va(ndl_device_t *device, int hbm_idx, void **va, size_t *size);

/* Memory: allocate, map, copy, free */
int ndl_memory_alloc(ndl_device_t *device, size_t size, uint64_t align, uint32_t host_memory, uint32_t dram_channel, uint32_t dram_region, uint32_t nc_id, uint32_t mem_alloc_type, uint64_t *mem_handle);
int ndl_memory_get_pa(uint64_t mem_handle, uint64_t *pa);
int ndl_memory_map(uint64_t mem_handle, void **va);
int ndl_memory_unmap(uint64_t mem_handle);
int ndl_memory_free(uint64_t mem_handle);
int ndl_memory_buf_copyin(uint64_t mem_handle, void *buffer, uint64_t offset, size_t size);
int ndl_memory_buf_copyout(uint64_t mem_handle, void *buffer, uint64_t offset, size_t size);
/** Copies straight from the (pinned) caller buffer, on host-to-device queue `qid`. */
int ndl_memory_buf_zerocopyin(uint64_t mem_handle, void *buffer, uint64_t offset, size_t size, int qid, uint32_t bar4_wr_threshold);
/** Copies straight into the (pinned) caller buffer, on host-to-device queue `qid`. */
int ndl_memory_buf_zerocopyout(uint64_t mem_handle, void *buffer, uint64_t offset, size_t size, int qid);
/** `direction` 0 writes the device, 1 reads it; `qid` -1 is the default queue. */
int ndl_memory_buf_batch_copy(neuron_memcpy_batch_t *batches, uint64_t num_batches, uint32_t direction, int qid);
int ndl_program_engine(ndl_device_t *device, uint32_t nc_id, uint64_t dst, void *buffer, uint64_t offset, size_t size);
int ndl_memset(const uint64_t addr, uint64_t offset, const int value, const size_t size);
int ndl_memory_copy(uint64_t src_mem_handle, uint64_t dst_mem_handle, uint64_t src_offset, uint64_t dst_offset, size_t size);
/** Starts a copy after the one `*wait_handle` names and returns its own handle there. */
int ndl_memory_copy_as(uint64_t src_mem_handle, uint64_t dst_mem_handle, uint64_t src_offset, uint64_t dst_offset, size_t size, uint64_t prefetch_addr, int *wait_handle);
int ndl_memory_copy_as_wait(uint64_t mem_handle, int wait_handle);

/* DMA engines and queues */
int ndl_dma_eng_set_state(int device_index, uint32_t eng_id, uint32_t state);
int ndl_dma_eng_get_state(int device_index, uint32_t eng_id, struct neuron_dma_eng_state *state);
int ndl_dma_queue_get_state(int device_index, uint8_t eng_id, uint8_t qid, struct neuron_dma_queue_state *tx, struct neuron_dma_queue_state *rx);
/** Copies descriptors out of a ring (root only). */
int ndl_dma_descriptor_copyout(int device_index, uint8_t eng_id, uint8_t qid, enum neuron_dma_queue_type type, uint32_t start_index, uint32_t count, void *buffer);
int ndl_dma_queue_init(int device_index, uint32_t eng_id, uint32_t qid, uint32_t tx_desc_count, uint32_t rx_desc_count, uint64_t tx_handle, uint64_t rx_handle, uint64_t rxc_handle, uint32_t axi_port);
int ndl_dma_queue_init_batch(int device_idx, struct ndl_queue_init_batch *batch);
int ndl_dma_queue_release(int device_index, uint32_t eng_id, uint32_t qid);
int ndl_dma_queue_copy_start(int device_index, uint32_t eng_id, uint32_t qid, uint32_t tx_desc_count, uint32_t rx_desc_count);
int ndl_dma_ack_completed_desc(int device_index, uint32_t eng_id, uint32_t qid, uint32_t count);
int ndl_dma_copy_descriptors(uint64_t mem_handle, void *buffer, uint64_t offset, uint32_t num_descs, enum neuron_dma_queue_type queue_type);

/* Reset and readiness */
/** Resets the cores of `nc_map` (-1: the whole device). */
int ndl_reset_ncs(int device_index, int nc_map, uint32_t *request_id);
/** Registers the function called with a warning when versions are only softly compatible. */
int ndl_register_soft_incompat_callback(void (*callback)(const char *));
/** Waits for reset `request_id`: `*result` 1 once the device is ready. */
int ndl_ready_ncs(int device_index, uint32_t request_id, uint8_t *result);
/** The processes using the device, in an array the caller frees. */
int ndl_get_all_apps_info(ndl_device_t *device, struct neuron_app_info **info, size_t *count, uint16_t apps_info_flags);

/* Semaphores and events of a core */
int ndl_nc_semaphore_increment(ndl_device_t *device, int nc_index, uint32_t semaphore_index, uint32_t value);
int ndl_nc_semaphore_decrement(ndl_device_t *device, int nc_index, uint32_t semaphore_index, uint32_t value);
int ndl_nc_semaphore_read(ndl_device_t *device, int nc_index, uint32_t semaphore_index, uint32_t *value);
int ndl_nc_semaphore_write(ndl_device_t *device, int nc_index, uint32_t semaphore_index, uint32_t value);
int ndl_nc_event_get(ndl_device_t *device, int nc_index, uint32_t event_index, uint32_t *value);
int ndl_nc_event_set(ndl_device_t *device, int nc_index, uint32_t event_index, uint32_t value);

/* Notification queues */
int ndl_notification_init(ndl_device_t *device, int nq_dev_id, ndl_nq_dev_t nq_dev_type, uint8_t nq_type, uint8_t engine_index, uint32_t size, bool on_host_memory, uint32_t dram_channel, uint32_t dram_region, uint64_t *notification_context);
/** As ndl_notification_init; `force_alloc_mem` replaces memory the queue already has. */
int ndl_notification_init_with_realloc(ndl_device_t *device, int nq_dev_id, ndl_nq_dev_t nq_dev_type, uint8_t nq_type, uint8_t engine_index, uint32_t size, bool on_host_memory, uint32_t dram_channel, uint32_t dram_region, bool force_alloc_mem, uint64_t *notification_context);
int ndl_notification_get_mem_handle(uint64_t notification_context, uint64_t *mem_handle);
int ndl_notification_get_size(uint64_t notification_context, uint32_t *size);
int ndl_notification_map(uint64_t notification_context, void **va);
int ndl_notification_destroy(uint64_t notification_context);

/* The datastore (NDS) of a process: `pid` 0 creates this process's */
int ndl_nds_open(ndl_device_t *device, int32_t pid, void **data, size_t *size);
int ndl_nds_close(ndl_device_t *device, int32_t pid, void *data, size_t size);

/* Core reservation: inference and model-load critical sections, core ranges; 0 or -1 */
int ndl_crwl_reader_enter(ndl_device_t *device, int nc_index, struct neuron_uuid uuid);
int ndl_crwl_reader_exit(ndl_device_t *device, int nc_index, struct neuron_uuid uuid);
int ndl_crwl_writer_enter(ndl_device_t *device, int nc_index, struct neuron_uuid uuid);
int ndl_crwl_writer_downgrade(ndl_device_t *device, int nc_index, struct neuron_uuid uuid);
/** Marks `nc_count` free cores of `start_nc..end_nc` used, in `bitmap` (`size` bytes). */
int ndl_crwl_nc_range_mark(uint32_t nc_count, uint32_t start_nc, uint32_t end_nc, uint32_t *max_nc_available, uint64_t *bitmap, size_t size);
int ndl_crwl_nc_range_unmark(uint64_t *bitmap, size_t size);
int ndl_get_copy_buf(ndl_device_t *device, uint32_t nc_id, ndl_copy_buf_t **cpy_buf);
/** Moves a core's initialisation state (enum neuron_cinit_state); waits while another process initialises it. */
int ndl_nc_init_set_state(ndl_device_t *device, uint32_t nc_id, uint32_t state, uint32_t *new_state);
int ndl_nc_model_started_count(ndl_device_t *device, uint32_t nc_id, uint64_t *started_count);

/* Board, PCI and memory placement */
int ndl_get_board_info(uint32_t *architecture, uint32_t *revision);
/** Deprecated: ndl_get_device_bdf_ext. */
int ndl_get_device_bdf(int device_index, uint32_t *bus_num, uint8_t *pci_slot, uint8_t *dev_func);
int ndl_get_dmabuf_fd(uint64_t addr, uint64_t size, int *fd);
int ndl_get_device_bdf_ext(int device_index, uint32_t *domain, uint32_t *bus_num, uint8_t *pci_slot, uint8_t *dev_func);
int ndl_mem_get_mc_mmap_info(ndl_device_t *device, uint64_t pa, uint64_t *mmap_offset, uint64_t *size, uint64_t *mem_handle);
int ndl_mmap_bar_region(ndl_device_t *device, enum neuron_dm_block_type block, uint32_t block_id, enum neuron_dm_resource_type resource, void **va, uint64_t *size);
void ndl_device_cached_fd_close_all(void);
/** Logs `str` (`size` bytes with its NUL) to the kernel log: -1 with errno EFAULT or EBADMSG. */
int ndl_printk(char *str, uint32_t size, uint32_t action);
int ndl_get_host_device_id(ndl_device_t *device, uint32_t *host_device_id);
int ndl_get_host_device_id_to_rid_map(uint32_t *count, uint32_t *host_did_to_rid_map);
int ndl_dump_device_allocation_info(ndl_device_t *device, uint32_t hbm_index, struct neuron_ioctl_mem_chunk_info *data, uint32_t *num_entries);
int ndl_dump_nc_pid_info(uint32_t nc_id, bool filter_log_owner, uint32_t log_dump_limit);
/** Writes `init_val` over the whole HBM Neuron can use. */
int ndl_hbm_scrub_start(ndl_device_t *device, uint32_t nc_id, uint32_t hbm_index, uint32_t axi_port, uint32_t init_val);
int ndl_hbm_scrub_wait(ndl_device_t *device, uint32_t nc_id, uint32_t hbm_index);
int ndl_get_logical_to_physical_nc_map(struct neuron_ioctl_nc_map *map, uint32_t max_num_entries, enum neuron_ioctl_nc_mapping_type mapping_version);

/* Pods */
int ndl_pod_info(uint32_t *pod_type, uint32_t *pod_sz);
int ndl_pod_election_state(uint32_t *state);
/** `*node_id` -1 when the node is in no pod. */
int ndl_pod_mapping_info(int *node_id);
int ndl_pod_status(uint8_t *pod_id, uint32_t *state, uint32_t *pod_type, uint32_t *pod_sz, int *node_id, enum neuron_ultraserver_mode *mode, uint32_t *modes_supported);
int ndl_pod_ctrl(uint32_t ctrl, enum neuron_ultraserver_mode mode, uint32_t timeout, uint32_t *state);

/* Scratchpad, performance, features, queues, metrics */
int ndl_alloc_contiguous_scratchpad(ndl_device_t *device, uint64_t size, uint32_t hbm_index, uint32_t nc_id, uint64_t *mem_handle);
/** As ndl_memory_map, for a contiguous scratchpad that spans chunks (`size` bytes). */
int ndl_memory_map_contiguous_scratchpad(uint64_t mem_handle, void **va, uint64_t size);
int ndl_set_performance_profile(ndl_device_t *device, uint32_t profile);
int ndl_enable_throttling_notifications(ndl_device_t *device, bool enable);
bool ndl_feature_supported(int nd_fd, uint64_t feature);
int ndl_h2t_dma_queue_alloc(ndl_device_t *device, uint32_t nc_id, uint32_t copy_queue_cnt, uint32_t service_queue_cnt, uint32_t *copy_queue_bmap, uint32_t *service_queue_bmap, uint32_t *copy_default_queue);
int ndl_h2t_dma_queue_free(ndl_device_t *device, uint32_t nc_id, uint32_t queue_bmap);
int ndl_metrics_ctrl(ndl_device_t *device, enum neuron_metrics_mode mode);
/** The device and HBM that device memory at `va` belongs to. */
int ndl_get_va_placement(const void *va, int *device_index, int *hbm_index);

/*
 * Bitmaps of any length, as arrays of uint64_t words.
 */

/** Bits in a `t`. */
#define NBM_NR_BITS(t) (sizeof(t) * 8)
/** Words of type `t` that hold `nr` bits. */
#define NBM_NR_ENT(nr, t) (((nr) + NBM_NR_BITS(t) - 1) / NBM_NR_BITS(t))

/** 1 if bit `nr` is set, else 0. */
static inline uint32_t nbitmap_test_bit(uint32_t nr, uint64_t *addr)
{
    return (addr[nr / NBM_NR_BITS(*addr)] & (1ull << (nr % NBM_NR_BITS(*addr)))) != 0ull;
}

/** Sets bit `nr`. */
static inline void nbitmap_set_bit(uint32_t nr, uint64_t *addr)
{
    addr[nr / NBM_NR_BITS(*addr)] |= 1ull << (nr % NBM_NR_BITS(*addr));
}

/** Clears bit `nr`. */
static inline void nbitmap_clr_bit(uint32_t nr, uint64_t *addr)
{
    addr[nr / NBM_NR_BITS(*addr)] &= ~(1ull << (nr % NBM_NR_BITS(*addr)));
}

/** One more than the index of the lowest set bit among the words holding `nr` bits; 0 if none. */
static inline uint32_t nbitmap_ffs1(uint32_t nr, uint64_t *addr)
{
    uint32_t i;
    for (i = 0; i < NBM_NR_ENT(nr, *addr); i++) {
        uint32_t x = (uint32_t)__builtin_ffsll((long long)addr[i]);
        if (x != 0) {
            return i * (uint32_t)NBM_NR_BITS(*addr) + x;
        }
    }
    return 0;
}

/** Set bits in the words holding `nr` bits. */
static inline uint32_t nbitmap_popcount(uint32_t nr, uint64_t *addr)
{
    uint32_t i;
    uint32_t n = 0;
    for (i = 0; i < NBM_NR_ENT(nr, *addr); i++) {
        n += (uint32_t)__builtin_popcountll(addr[i]);
    }
    return n;
}

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NDL_NDL_H */
