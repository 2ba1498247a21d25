/*
 * nrt/nds/neuron_ds.h -- written by hand (not generated).
 *
 * The Neuron datastore (the SDK's nrt/nds/neuron_ds.h): the per-process shared memory block in
 * which a runtime publishes its counters, loaded models and process information for tools such
 * as neuron-monitor. Names, values and layouts are the SDK's (checked against
 * ffi/tests/sdk-facts.toml by ffi/tests/sdk_headers.rs).
 *
 * libnrt does not export these functions, and neither does this library: they are declared so
 * that code written against the SDK compiles, but a program that calls one does not link
 * (against AWS's libnrt.so either). This library publishes no datastore; its memory figures
 * are in <nrt/nrtx.h>.
 */
#ifndef NRT_DMEM_NRT_NDS_NEURON_DS_H
#define NRT_DMEM_NRT_NDS_NEURON_DS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "ndl/ndl.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A datastore object (from nds_obj_new or one of the readers). */
typedef void *nds_obj_handle_t;

/** Kinds of datastore objects (nds_obj_new). */
#define OBJECT_TYPE_MODEL_NODE_INFO (0)
#define OBJECT_TYPE_PROCESS_INFO (1)
#define OBJECT_TYPE_PROCESS_INFO_EXT (2)

/** Host and device: the locations a model's memory is counted in. */
#define MODEL_MEM_USAGE_LOCATION_COUNT 2

/** The memory-usage slots of a model node: the runtime's usage types, grouped. The datastore
 * has room for NDS_DMA_MEM_USAGE_SLOT_COUNT of them. */
enum {
    NDS_DMA_MEM_USAGE_SLOT_CODE,
    NDS_DMA_MEM_USAGE_SLOT_TENSORS,
    NDS_DMA_MEM_USAGE_SLOT_CONSTANTS,
    NDS_DMA_MEM_USAGE_SLOT_SCRATCHPAD,
    NDS_DMA_MEM_USAGE_SLOT_MISC,
    NDS_DMA_MEM_USAGE_SLOT_COUNT = 12
};

/** Memory of one usage slot and location: bytes and the allocations they are in. */
typedef struct nds_mem_usage_info {
    size_t total_size;
    uint32_t chunk_count;
} nds_mem_usage_info_t;

/** A loaded model node (a subgraph on a core). */
typedef struct nds_model_node_info {
    /** The model it belongs to. */
    uint32_t model_id;
    uint32_t model_node_id;
    /** NUL-terminated model name. */
    char name[256];
    char uuid[16];
    /** Its core and subgraph. */
    uint8_t nc_index;
    uint8_t sg_index;
} nds_model_node_info_t;

/** The memory of a loaded model node, by location and usage slot. */
typedef struct nds_model_node_mem_usage_info {
    nds_mem_usage_info_t model_mem_usage[MODEL_MEM_USAGE_LOCATION_COUNT][NDS_DMA_MEM_USAGE_SLOT_COUNT];
} nds_model_node_mem_usage_info_t;

/** A version: major, minor, build. */
typedef struct nds_version_info {
    uint8_t major;
    uint8_t minor;
    uint32_t build;
} nds_version_info_t;

/** The process: its framework and the versions of the framework, its abstraction layer and
 * the runtime. */
typedef struct nds_process_info {
    int8_t framework_type;
    char tag[32];
    nds_version_info_t framework_version;
    nds_version_info_t fal_version;
    nds_version_info_t runtime_version;
} nds_process_info_t;

/** More about the process: a longer tag. */
typedef struct nds_process_info_ext {
    char tag[256];
} nds_process_info_ext_t;

/** An open datastore (opaque; from nds_open). ndl_device_t comes from <ndl/ndl.h>. */
typedef struct nds_instance nds_instance_t;

/** Bits of the feature bitmap (NDS_ND_COUNTER_FEATURE_BITMAP). */
typedef enum feature_bitmap_bit_index {
    BIT_INDEX_TEST_FEATURE = 0,
    BIT_INDEX_MULTICORE_FEATURE = 1,
    BIT_INDEX_COUNT = BIT_INDEX_MULTICORE_FEATURE + 1
} feature_bitmap_bit_index_t;

/*
 * The functions. The int ones return 0 on success; the pointer ones NULL on failure.
 */

/** Opens the datastore of process `pid`: 0 opens this process's, read-write; another pid
 * opens that process's, read-only. */
int nds_open(ndl_device_t *device, pid_t pid, nds_instance_t **inst);
/** Closes it and frees `inst`, whatever the result. */
int nds_close(nds_instance_t *inst);

/* Per-core counters (counter_index: NDS_NC_COUNTER_*) */
int nds_increment_nc_counter(nds_instance_t *inst, int pnc_index, uint32_t counter_index, uint64_t increment);
int nds_decrement_nc_counter(nds_instance_t *inst, int pnc_index, uint32_t counter_index, uint64_t decrement);
int nds_get_nc_counter(nds_instance_t *inst, int pnc_index, uint32_t counter_index, uint64_t *value);
int nds_set_nc_counter(nds_instance_t *inst, int pnc_index, uint32_t counter_index, uint64_t *value);

/* Per-device counters (counter_index: NDS_ND_COUNTER_*); they wrap around */
int nds_increment_nd_counter(nds_instance_t *inst, uint32_t counter_index, uint64_t increment);
int nds_decrement_nd_counter(nds_instance_t *inst, uint32_t counter_index, uint64_t decrement);
/** ORs `bit_index` (a mask such as 1ull << BIT_INDEX_MULTICORE_FEATURE) into the counter. */
int nds_or_nd_counter(nds_instance_t *inst, uint32_t counter_index, uint64_t bit_index);
int nds_get_nd_counter(nds_instance_t *inst, uint32_t counter_index, uint64_t *value);
int nds_set_nd_counter(nds_instance_t *inst, uint32_t counter_index, uint64_t *value);

/* Objects: create one of OBJECT_TYPE_*, fill it through its view, commit it */
int nds_obj_commit(nds_obj_handle_t obj);
nds_obj_handle_t nds_obj_new(nds_instance_t *inst, int type);
int nds_obj_delete(nds_obj_handle_t obj);
nds_model_node_info_t *nds_obj_handle_to_model_node_info(nds_obj_handle_t obj);
nds_model_node_mem_usage_info_t *nds_obj_handle_to_model_node_mem_usage(nds_obj_handle_t obj);
/** Every model node, in an array of `*count` handles the caller frees. */
int nds_read_all_model_nodes(nds_instance_t *inst, nds_obj_handle_t **models, size_t *count);
nds_process_info_t *nds_obj_handle_to_process_info(nds_obj_handle_t obj);
nds_process_info_ext_t *nds_obj_handle_to_process_info_ext(nds_obj_handle_t obj);
nds_obj_handle_t nds_read_process_info(nds_instance_t *inst);
nds_obj_handle_t nds_read_process_info_ext(nds_instance_t *inst);

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NRT_NDS_NEURON_DS_H */
