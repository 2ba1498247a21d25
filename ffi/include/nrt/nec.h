/*
 * nrt/nec.h -- written by hand (not generated).
 *
 * Neuron Elastic Collectives (the SDK's nrt/nec.h): the runtime's side of collective
 * operations -- communicators, the ring, kangaring, mesh and hierarchical algorithms built on
 * the device topology, the network proxy's FIFOs -- and the nec_* calls the collectives library
 * makes into the runtime. Names, values and layouts are the SDK's (checked against
 * ffi/tests/sdk-facts.toml by ffi/tests/sdk_headers.rs).
 *
 * This library runs no collectives. The nec_* functions are exported (libnrt 2.31's node
 * NRT_2.0.0) and refuse with one log line: the NRT_STATUS ones return NRT_FAILURE, the int ones
 * -1, the bool one false, the size_t ones 0 (ffi/src/nec.rs, whose signatures
 * ffi/tests/headers.rs checks against this file).
 */
#ifndef NRT_DMEM_NRT_NEC_H
#define NRT_DMEM_NRT_NEC_H

#include <time.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include "nrt/nrt_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Most channels of an algorithm (NCCL's MAXCHANNELS). */
#define NEC_MAX_CHANNELS 32
/** Depth of a channel's buffer, in chunks. */
#define NEC_MAX_NR_CHANNEL_CHUNKS 32
/** Most folds of a network connector. */
#define NEC_MAX_FOLD_N 16
/** Most replica groups (communicators) of a NEFF. */
#define NEC_MAX_COMM_N 12
/** Network buffers: hierarchical and ring, per replica group. */
#define NEC_MAX_NET_BUFFERS (2 * NEC_MAX_COMM_N)
/** Host cache line, for padding shared indexes. */
#define NEC_CACHE_LINE_SIZE 128

/** Rank of the network connector. */
#define NEC_NET_CONNECTOR_RANK -1
/** Device of the network connector. */
#define NEC_NET_MLA_DEV -1
/** Device of the pod connector. */
#define NEC_POD_MLA_DEV -2
/** Rank of a connector that may not be reachable. */
#define NEC_UNKNOWN_RANK -3
/** Device of a connector that may not be reachable. */
#define NEC_UNKNOWN_MLA_DEV -3

/** Stages of the hierarchical collectives pipeline. */
#define NEC_HIER_CC_PIPELINE_STAGE_N (3)
/** Most requests in flight in the network proxy. */
#define NCCL_NET_NEURON_MAX_REQUESTS 128
/** Most collectives executing at once (streams). */
#define NEC_MAX_STREAM_N 4

/** Communicators of the network proxy. */
typedef enum ofi_comm_type {
    NET_SEND_COMM,
    NET_RECV_COMM,
    NET_RECV_LISTEN_COMM,
    LOCAL_RECV_COMM,
    LOCAL_SEND_COMM
} ofi_comm_type_t;

/** The two levels of a hierarchical communicator. */
enum enc_comm_type {
    H_COMM_INTRA_ID = 0,
    H_COMM_INTER_ID = 1,
    H_COMM_MAX_ID
};

/** How devices are joined into a pod, as the driver reports it. */
typedef enum nec_pod_type {
    NEC_POD_TYPE_NONE,
    NEC_POD_TYPE_P2P,
    NEC_POD_TYPE_SWITCH,
    NEC_POD_TYPE_INVALID
} nec_pod_type_t;

typedef struct enc_comm *nec_comm_t;
typedef struct enc_channel *nec_channel_t;
/** A device address. */
typedef uint64_t dma_addr_t;

/** An index shared by the device and the proxy thread, alone on its cache line. */
struct enc_net_host_memory_index {
    union {
        volatile uint32_t index;
        char pad[NEC_CACHE_LINE_SIZE];
    };
};

/** Where the device posts send or receive buffers for the network proxy, one index per fold. */
struct enc_net_host_memory {
    union {
        struct {
            struct enc_net_host_memory_index post_recv[NEC_MAX_FOLD_N];
        } recv;
        struct {
            struct enc_net_host_memory_index post_send[NEC_MAX_FOLD_N];
        } send;
    };
};

/** A DMA-mapped host memory region. */
typedef struct enc_host_mem {
    void *mem_handle;
    void *va;
    dma_addr_t pa;
    size_t size;
} enc_host_mem_t;

/** A host memory region and how many users share it. */
typedef struct enc_host_mem_shared {
    enc_host_mem_t mem;
    int refcnt;
} enc_host_mem_shared_t;

/** The resources of one network connection of a channel. */
struct enc_net_connector {
    int fold_n;
    /** Signals the proxy thread. */
    enc_host_mem_t net_host_mem;
    /** What is only known while executing (dynamic message sizes). */
    enc_host_mem_shared_t *dynamic_input_host_mem;
    /** Transport buffer (senders only). */
    void *devmem_res;
    void *nccl_mhandle;
    /** Semaphore increments sent with received data, and their registrations. */
    void *inc_recv_sem_nccl_mhandle;
    uint32_t *inc_recv_sem_values_buffer;
    void *inc_recv_sem_values_buffer_mhandle;
    /** The collectives library's connector. */
    void *nccl_connector;
};

/** Data movement pattern of a channel. */
typedef enum enc_pattern {
    ENC_PATTERN_RING,
    ENC_PATTERN_MESH,
    ENC_PATTERN_INVALID,
} enc_pattern_t;

/** Network connectivity of an algorithm. */
typedef enum enc_net_connectivity {
    ENC_CONNECTIVITY_MESH,
    ENC_CONNECTIVITY_RDH,
    ENC_CONNECTIVITY_DEFAULT
} enc_net_connectivity_t;

/** A path data takes along the topology. */
struct enc_channel {
    int id;
    enc_pattern_t pattern;
    /** Network connections to the neighbours, when they are remote. */
    struct enc_net_connector *net_recv;
    struct enc_net_connector *net_send;
    /** Runtime resources. */
    void *devmem_res;
    void *two_step_pod_mesh_devmem_res;
    /** Gateway buffer (hybrid rings only). */
    void *devmem_gw_buf_res;
    void *nccl_mhandle;
    dma_addr_t gw_recv_buffer;
    dma_addr_t gw_send_buffer;
    struct enc_channel_context *ch_ctx;
    struct encd_dma_channel *drv_channel;
};

/** Where a peer rank is. */
struct enc_peer_info {
    int neuron_dev;
    int rid;
    int tpb_index;
    int pod_node_id;
};

/** How four devices are arranged. */
typedef enum enc_topology_mode {
    ENC_TOPO_NULL = 0,
    ENC_TOPO_4_DEVS_IN_ROW,
    ENC_TOPO_4_DEVS_IN_COLUMN,
} enc_topology_mode_t;

/** A communicator's place in the cluster. */
struct enc_comm_info {
    int neuron_dev;
    int rank;
    int rank_n;
    int local_rank_n;
    int local_rack_rank_n;
    int node;
    int node_n;
    enc_topology_mode_t enc_topo_mode;
    /** Pod information from the collectives library. */
    bool enable_pod;
    /** Whether the communicator uses the network. */
    bool use_net;
    int pod;
    int pod_n;
    int pod_node;
    int pod_node_n;
    struct enc_peer_info *peers;
};

/** A rank's neighbours on a ring. */
struct enc_ring {
    int prev;
    int next;
    int *user_ranks;
    /** One-rank-per-device rings: a duplicate channel. */
    bool duplicate;
};

/** Kangaring sizes. */
#define NEC_KANGARING_MAX_NUM_RANKS (256)
#define KANGARING_NUM_SENG_PER_DEV (4)
#define KANGARING_NUM_TPB_PER_DEV (8)
#define KANGARING_MAX_SECONDARIES (3)

/** The S-engines of a device. */
enum SEngine {
    S0 = 0,
    S1 = 1,
    S2 = 2,
    S3 = 3,
    SENGS_PER_DIE = 2,
    SENGS_PER_MLA = 4
};

/** A rank's place on a kangaring. */
struct enc_kangaring {
    /** Logical core size. */
    int vnc;
    /** The logical path: primary, secondary, primary, ... */
    int logical_path[NEC_KANGARING_MAX_NUM_RANKS];
    int prev;
    int next;
    /** Port towards `next`. */
    int port;
    /** The peer over the remote link (with logical core size 2, the only peer). */
    int peer_rmtv;
    /** With logical core size 1: the remote peer of the other core, and the local one. */
    int peer_rmtv2;
    int peer_local;
    /** `next`'s remote peer. */
    int next_peer_rmtv;
    /** On the data path. */
    bool is_primary;
    /** `next` is reached over PCIe rather than die to die. */
    bool is_next_pcie;
    bool duplicate;
    bool pattern2;
};

/** Kinds of ring-like algorithms. */
typedef enum metaring_type {
    RING,
    KANGARING,
    SINGLE_CYCLE_RING,
    RDH,
    INVALID_METARING
} metaring_type_t;

/** A ring-like algorithm: its channels and each rank's place on them. */
struct enc_alg_metaring {
    int channel_n;
    struct enc_channel channels[NEC_MAX_CHANNELS];
    struct enc_ring ring_ranks[NEC_MAX_CHANNELS];
    struct enc_kangaring kangaring_ranks[NEC_MAX_CHANNELS];
    metaring_type_t type;
    /** Built from device-level cycles of one rank per device. */
    bool one_rank_per_device;
    /** Four one-rank-per-device cycles: a hybrid ring. */
    bool is_hybrid_ring;
    /** Tokens re-initialised from an earlier configuration. */
    bool tokens_exchanged;
    bool deadlock_free_rank_list;
    struct enc_comm *comm;
    struct encd_alg_metaring *drv_alg;
    /** Source/target pairs only. */
    bool skip_send;
    bool skip_recv;
};

/** Synchronisation events of mesh algorithms: the events every mesh uses, then those of the
 * plain mesh, of all-to-all and of recursive doubling/halving (each range starts where the
 * previous one ends; each event is used once). */
typedef enum enc_mesh_event_type {
    EVT_SYNC,
    EVT_GLOBAL_HNDSHK,
    EVT_LOCAL_HNDSHK,
    EVT_INTER_GRP_BRDCST,
    EVT_FUNCTION_BARRIER_FIRST_COLL,
    EVT_FUNCTION_BARRIER_LAST_COLL,
    EVT_REDUCE_LOCAL_HNDSHK,
    EVT_INTRA_GRP_BRDCST,
    ENC_COMMON_NUM_EVENT_TYPE,

    ENC_MESH_NUM_EVENT_START = ENC_COMMON_NUM_EVENT_TYPE,
    EVT_REDUCE_COPY = ENC_COMMON_NUM_EVENT_TYPE,
    EVT_REDUCE_COPY_2,
    EVT_REDUCE_WRITE,
    EVT_INTER_GRP_BRDCST_2,
    EVT_LOCAL_AND_POD_GRP_BRDCST,
    EVT_LOCAL_AND_POD_GRP_BRDCST_2,
    ENC_MESH_NUM_EVENT_TYPE,

    ENC_A2A_NUM_EVENT_START = ENC_MESH_NUM_EVENT_TYPE,
    EVT_LOCAL_HNDSHK_1 = ENC_MESH_NUM_EVENT_TYPE,
    EVT_LOCAL_HNDSHK_2,
    EVT_GLOBAL_HNDSHK_1,
    EVT_INTER_GRP_BRDCST_1,
    EVT_INTRA_GRP_BRDCST_1,
    EVT_2DEV_BRDCST,
    EVT_2DEV_HNDSHK,
    EVT_COPY_FROM_HOST,
    ENC_A2A_NUM_EVENT_TYPE,

    ENC_RDH_NUM_EVENT_START = ENC_A2A_NUM_EVENT_TYPE,
    EVT_RH_STEP_0 = ENC_A2A_NUM_EVENT_TYPE,
    EVT_RH_STEP_1,
    EVT_RH_STEP_2,
    EVT_RH_STEP_3,
    EVT_RH_STEP_4,
    EVT_RH_STEP_5,
    EVT_RH_STEP_6,
    EVT_RH_STEP_7,
    EVT_RH_STEP_8,
    EVT_RH_STEP_9,
    EVT_RDH_LOCAL_HANDSHAKE = EVT_RH_STEP_9,
    EVT_RDH_AXES_HANDSHAKE,
    EVT_RD_STEP_0,
    EVT_RD_STEP_1,
    EVT_RD_STEP_2,
    EVT_RD_STEP_3,
    EVT_RD_STEP_4,
    EVT_RD_STEP_5,
    EVT_RD_STEP_6,
    EVT_RDH_AXES_HANDSHAKE_2,
    EVT_1DEV_RDH_STEP_1,
    EVT_1DEV_RDH_STEP_2,
    EVT_1DEV_RD_STEP_1,
    EVT_1DEV_RD_STEP_2,
    EVT_1DEV_RH_STEP_1,
    EVT_2DEV_RD_STEP_0,
    EVT_2DEV_RD_STEP_1,
    EVT_2DEV_RD_STEP_2,
    EVT_2DEV_RD_STEP_3,
    EVT_2DEV_RD_STEP_4,
    EVT_RDH_LOCAL_PEER_HANDSHAKE,
    ENC_RDH_NUM_EVENT_TYPE
} enc_mesh_event_type_t;

/** Most events of a mesh subtype. */
#define ENC_MESH_MAX_NUM_EVENTS 64

/** Binary size units. */
#define KiB (1024)
#define MiB (1024 * KiB)
#define GiB (1024 * MiB)

/** A group of neighbour ranks. */
struct enc_mesh_nbr_grp {
    int *ranks;
    int ranks_n;
};

/** One synchronisation event: who signals it and who waits. */
struct enc_mesh_event {
    struct enc_mesh_nbr_grp src_neighbor_grp;
    struct enc_mesh_nbr_grp dst_neighbor_grp;
    bool valid;
    enc_mesh_event_type_t evt_type;
};

/** Kinds of mesh algorithms. */
typedef enum enc_alg_mesh_type {
    ENC_ALG_FULL_MESH,
    ENC_ALG_GROUPED_MESH,
    ENC_ALG_MESH_TRN2,
    ENC_ALG_MESH_SWITCH,
    ENC_ALG_MESH_INVALID
} enc_alg_mesh_type_t;

/** Operation types a mesh has size limits for. */
#define ENC_MAX_OP_TYPES (13)

/** One variant of a mesh algorithm: its events and the message sizes it is used for. */
struct enc_alg_mesh_subtype {
    struct enc_mesh_event events[ENC_MESH_MAX_NUM_EVENTS];
    int num_events;
    struct encd_alg_mesh_subtype *drv_mesh;
    struct enc_alg_mesh *mesh;
    /** Sizes between which the mesh is used, per operation; the `_sbuf` ones for 2-D tensors. */
    size_t op_max_limit[ENC_MAX_OP_TYPES];
    size_t op_min_limit[ENC_MAX_OP_TYPES];
    size_t op_max_limit_sbuf[ENC_MAX_OP_TYPES];
    size_t op_min_limit_sbuf[ENC_MAX_OP_TYPES];
    bool no_inplace_support;
    /** Uses the channel buffer. */
    bool is_use_chnl_buffer;
    bool is_rdh;
    bool is_single_step_mesh;
    bool is_two_step_pod_mesh;
    bool is_latency_opt;
    bool is_bw_opt;
    bool is_rmv_dst_routing;
    uint32_t alltoall_iteration;
};

/** Most subtypes of a mesh. */
#define ENC_MAX_MESH_SUBTYPES (20)
/** Most devices of a mesh. */
#define ENC_MESH_MAX_NUM_DEVICES (128)

/** A mesh algorithm. */
struct enc_alg_mesh {
    enc_alg_mesh_type_t mesh_type;
    /** Per device generation. */
    union {
        struct {
            uint32_t devid_to_rankid[ENC_MESH_MAX_NUM_DEVICES];
            bool is_multi_chip;
        } trn2;
        struct {
            int num_non_net_node_local_groups;
        } trn1;
        struct {
            bool root_rank;
            int num_intra_group_roots;
            int local_root_ids[ENC_MESH_MAX_NUM_DEVICES];
            int global_root_ids[ENC_MESH_MAX_NUM_DEVICES];
        } inf2;
    };
    int group_id;
    int num_groups;
    /** A mesh uses one channel. */
    struct enc_channel channel;
    struct enc_alg_mesh_subtype mesh_subtype[ENC_MAX_MESH_SUBTYPES];
    /** Channel buffer room per group of ranks, per S-engine (trn2) and per rank (single-step
     * meshes). */
    size_t max_chbuf_space_per_group;
    size_t max_chbuf_space_per_seng;
    size_t max_chbuf_space_per_rank;
    /** Double buffering, which skips the global handshake. */
    bool double_buffer;
    /** Recursive doubling/halving. */
    bool build_rdh;
    bool rdh_double_buffer;
    /** Intra-node recursive doubling/halving channel buffer. */
    void *rdh_devmem_res;
    bool use_2dev_proxy;
    bool tokens_exchanged;
    /** Inter-node mesh through the network proxy. */
    bool use_net;
    struct enc_nccl_comm_node *nccl_comm_node;
    struct enc_comm_info *ci;
    struct enc_comm *comm;
    struct encd_alg_mesh *drv_alg;
    /** All-to-all-v metadata, DMA-mapped, known only while executing. */
    enc_host_mem_t alltoallv_host_input;
};

/** The hierarchical algorithm: intra-node and inter-node levels and a pipeline. */
struct enc_alg_hier {
    struct {
        struct enc_nccl_comm_node *nccl_comm_node;
        struct enc_comm_info ci;
        struct enc_alg_metaring ring;
        struct enc_alg_metaring kangaring;
        struct enc_alg_mesh mesh;
    } intra;
    struct {
        struct enc_nccl_comm_node *nccl_comm_node;
        struct enc_comm_info ci;
        struct enc_alg_metaring ring;
        struct enc_alg_metaring rdh;
        struct enc_alg_mesh mesh;
    } inter;
    struct {
        struct {
            struct enc_nccl_comm_node *nccl_comm_node;
            struct enc_comm_info ci;
            struct enc_alg_metaring ring;
        } stage[NEC_HIER_CC_PIPELINE_STAGE_N];
    } pipeline;
    /** Intermediate buffer of hierarchical reduce-scatter. */
    void *devmem_res;
    struct enc_comm *comm;
    struct encd_alg_hier *drv_alg;
};

/** What the collectives library reports about a communicator. */
typedef struct nccl_comm_info {
    /** Random id of the cluster, for the logs. */
    uint64_t cluster_id;
    /** Time of the first barrier, which every rank agrees on (core dump names). */
    time_t epoch;
    int neuron_dev;
    int rank;
    int rank_n;
    int local_rank_n;
    int local_rack_rank_n;
    int node;
    int node_n;
    bool enable_pod;
    bool use_net;
    int pod;
    int pod_n;
    int pod_node;
    int pod_node_n;
    /** Caller-allocated, or NULL when not wanted. */
    struct enc_peer_info *peers;
    /** Rings. */
    int channel_n;
    struct enc_ring rings[NEC_MAX_CHANNELS];
    /** Kangaring paths. */
    int kangaring_channel_n;
    int *kangaring_paths[NEC_MAX_CHANNELS];
    /** Cycles of devices, for one-rank-per-device rings. */
    int mla_cycle_n;
    int *mla_cycles[NEC_MAX_CHANNELS];
} nccl_comm_info_t;

/** A communicator of the collectives library, as the runtime tracks it. */
typedef struct enc_nccl_comm_node {
    void *nccl_comm;
    char *key;
    size_t key_sz;
    /** The graph is not used (only ever goes from false to true). */
    bool disable_graph;
    bool global_nccl_comm_node;
    int refcnt;
    uint32_t stream_id;
    uint32_t context_id;
    uint32_t num_local_participants;
    uint32_t num_local_leaders;
    uint32_t my_local_leader;
    uint32_t *local_participants;
    uint32_t *local_leaders;
    struct bp_barrier *local_barrier;
    /** Uses the intra-pod interface (no execution barrier can be skipped). */
    bool intra_pod_interface;
} enc_nccl_comm_node_t;

/** Bytes of the proxy histogram's output path. */
#define ENC_PROXY_HISTOGRAM_OUTPUT_PATH_LENGTH_MAX (128)

/** Latency histogram of the network proxy. */
typedef struct enc_proxy_histogram_config {
    bool enable;
    size_t bucket_usecs;
    size_t num_buckets;
    size_t per_neff_warmup;
    size_t warmup;
    char output_path[ENC_PROXY_HISTOGRAM_OUTPUT_PATH_LENGTH_MAX];
} enc_proxy_histogram_config_t;

/** A device, as the runtime describes it to the collectives library. */
typedef struct enc_neuron_device_info {
    int nec_dev_id;
    int mla_idx;
    int tpb_idx;
    int host_device_id;
    int routing_id;
    uint64_t pod_id;
    nec_pod_type_t pod_type;
    uint32_t pod_node_id;
    uint32_t virtual_server_id;
    enc_proxy_histogram_config_t histogram_config;
} enc_neuron_device_info_t;

/** A collectives communicator: the topology and every algorithm built on it. */
struct enc_comm {
    struct enc_nccl_comm_node *nccl_comm_node;
    struct enc_comm_info ci;
    int id;
    int stream_id;
    struct enc_alg_metaring ring;
    struct enc_alg_metaring kangaring;
    struct enc_alg_metaring rdh;
    struct enc_alg_hier hier;
    struct enc_alg_mesh mesh;
    /** Network connector buffers shared across NEFFs (global communicator only), handed out in
     * order from `net_conn_count`. */
    int net_conn_count;
    void *net_connector_devmem_res[NEC_MAX_NET_BUFFERS];
    /** Channel buffer depth and transfer unit of every channel. */
    int nr_channel_chunks;
    size_t chunk_size;
    struct encd_comm *drv_comm;
    /** The topology as text, for error messages. */
    char topology[1024];
};

/** The global communicator. */
struct enc_glb_comm {
    uint32_t g_device_id;
    uint32_t g_device_cnt;
    uint32_t vtpb_idx;
    int nec_dev_id;
    int mla_idx;
    /** The device's id on the host (containers may renumber devices). */
    int host_device_id;
    int routing_id;
    uint32_t virtual_server_id;
    nec_pod_type_t pod_type;
    uint32_t pod_node_id;
    uint32_t pod_sz;
    uint64_t pod_id;
    const char *root_comm_id;
    bool check_sigs;
    /** Node and intra-node rank of each rank. */
    uint32_t *rank_nodes;
    uint32_t *local_ranks;
    enc_nccl_comm_node_t nccl_comm_node;
    struct bananaphone *local_rings;
    struct bp_handle *local_peer_handles;
    /** Values sent to increment semaphores over the network. */
    uint32_t *inc_recv_sem_values_buffer;
    size_t inc_recv_sem_values_buffer_size;
    struct enc_comm comm;
    /** Device memory reserved per stream, per replica group and per channel. */
    void *inter_rdh_devmem_res[NEC_MAX_STREAM_N];
    void *intra_rdh_devmem_res[NEC_MAX_STREAM_N];
    void *mesh_devmem_res_per_rg[NEC_MAX_STREAM_N * NEC_MAX_COMM_N * H_COMM_MAX_ID];
    void *rdh_devmem_res_per_rg[NEC_MAX_STREAM_N * NEC_MAX_COMM_N];
    void *gateway_devmem_res[NEC_MAX_STREAM_N][NEC_MAX_CHANNELS];
    pthread_mutex_t gcomm_setup_mtx;
    void *proxy_queue;
    void *device_barrier_table;
};

/** What an address entry of the network proxy's FIFOs is for. */
typedef enum net_addr_mark {
    /** A transfer over the network. */
    NET_TRANSFER,
    /** The end of a collective operation. */
    NET_OP_COMPLETE,
    /** The end of an execution. */
    EXEC_COMPLETE
} net_addr_mark_t;

/** A send of the network proxy. */
typedef struct net_src_addr {
    uint32_t net_op_idx;
    int complete;
    dma_addr_t dev_addr;
    void *host_addr;
    void *nccl_mhandle;
    uint32_t size;
    net_addr_mark_t mark;
    void *proxy_histogram_tag;
    /** Mesh only. */
    int dst_rank;
    /** Local RDMA read. */
    void *dst_addr;
    void *dst_mhandle;
} net_src_addr_t;

/** A receive of the network proxy. */
typedef struct net_dest_addr {
    uint32_t net_op_idx;
    int complete;
    dma_addr_t dev_addr;
    void *host_addr;
    void *nccl_mhandle;
    uint32_t size;
    net_addr_mark_t mark;
    /** Mesh only. */
    int src_rank;
} net_dest_addr_t;

/** One network operation of the proxy: its semaphores, credits and FIFO sizes. */
typedef struct net_ops_info {
    uint16_t sema_shift_offset;
    bool early_send_completion;
    bool early_recv_posting;
    volatile uint32_t *inc_send_handshake;
    volatile uint32_t *inc_send_complete;
    volatile uint32_t *inc_recv_handshake;
    volatile uint32_t *inc_recv_complete;
    uint32_t tx_entry_cnt;
    uint32_t rx_entry_cnt;
    uint32_t net_idx_loop_size;
    uint32_t initial_send_credits;
    uint32_t ending_recv_credits;
    size_t data_type_sz;
    bool is_dynamic_send_recv_sz;
    bool variable_peer;
    bool add_to_histogram;
    /** The channel whose connectors the operation uses. */
    void *enc_channel;
} net_ops_info_t;

/** The collectives bridge's version. */
typedef struct nec_version_info {
    uint64_t major;
    uint64_t minor;
    uint64_t patch;
    uint64_t maintenance;
    char git_hash[16];
    uint64_t compatibility_version;
    /** Fields added later go here. */
    uint8_t future_fields[];
} nec_version_info_t;

/*
 * The nec_* calls. Not supported by nrt-dmem (no collectives): NRT_STATUS ones return
 * NRT_FAILURE, int ones -1, the bool one false, size_t ones 0, void ones do nothing.
 */

/** Increments a device semaphore through its memory-mapped increment register. */
void nec_inc_semaphore(volatile uint32_t *sem_inc_addr, uint32_t val);
/** Message sizes and offsets only known while executing. */
size_t nec_get_dynamic_send_size_bytes(enc_host_mem_t *dyn_input, size_t data_type_sz, int dst_rank, int rank_n);
size_t nec_get_dynamic_send_offset_bytes(enc_host_mem_t *dyn_input, size_t data_type_sz, int dst_rank, int rank_n);
size_t nec_get_dynamic_recv_offset_bytes(enc_host_mem_t *dyn_input, size_t data_type_sz, int src_rank, int rank_n);
void nec_set_recv_size_bytes(enc_host_mem_t *dyn_input, size_t recv_size_bytes, size_t data_type_sz, int src_rank, int rank_n);
/** Devices and their PCI addresses. */
int nec_get_device_count(int *available_devices_array, uint32_t array_size);
int nec_get_device_pci_bdf(int neuron_dev, uint32_t *domain, uint32_t *bus_num, uint8_t *pci_slot, uint8_t *dev_func);
/** Physical cores per logical core. */
NRT_STATUS nec_get_virtual_core_size(uint32_t *virtual_core_size);
NRT_STATUS nec_get_version_info(nec_version_info_t *version_info);
/** Routing between devices. */
NRT_STATUS nec_build_port_and_rid_map(int local_nec_dev_id, int *mla_indexes, int *host_device_ids, int count);
bool nec_is_mla_available(int local_nec_dev_id, int mla_idx);
int nec_mla_idx_to_rid(int local_nec_dev_id, int mla_idx);
int nec_rid_to_mla_idx(int local_nec_dev_id, int rid);
int nec_get_peer_mla_idx(int local_nec_dev_id, int mla_idx, int port);
int nec_get_p2p_pod_peer_node(uint32_t nec_dev_id, int node, uint32_t port_distance, int *peer_node);
NRT_STATUS nec_pod_node_can_access_peer_node(nec_pod_type_t pod_type, uint32_t local_rid, uint32_t local_node_id, uint32_t remote_rid, uint32_t remote_node_id, int *can_access_peer);
/** Logs to the kernel log. */
void nec_ndl_printk(char *str, uint32_t size, uint32_t action);

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NRT_NEC_H */
