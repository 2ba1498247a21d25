/*
 * nrt/nrt_experimental.h -- GENERATED, do not edit.
 *
 * The Neuron runtime's experimental API (nrt_experimental.h, libnrt 2.31): a model's
 * input/output tensor table, its logical core, and the experimental entry points this library
 * does not implement (they fail with NRT_FAILURE). Generated from ffi/src/experimental.rs by
 * ffi/tests/headers.rs; regenerate with `cargo xtask headers`.
 */
#ifndef NRT_DMEM_NRT_NRT_EXPERIMENTAL_H
#define NRT_DMEM_NRT_NRT_EXPERIMENTAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "nrt/nrt_status.h"
#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Whether a tensor is read or written by the model. Values are fixed by the public API. */
typedef enum nrt_tensor_usage {
    /** The tensor is an input (ifmap). */
    NRT_TENSOR_USAGE_INPUT = 0,
    /** The tensor is an output (ofmap). */
    NRT_TENSOR_USAGE_OUTPUT = 1,
} nrt_tensor_usage_t;

/** Bytes of `nrt_tensor_info_t.name`, NUL included. */
#define NRT_TENSOR_NAME_MAX 256

/** One input or output of a model (296 bytes). */
typedef struct nrt_tensor_info {
    /** Name of the tensor, NUL-terminated: the name to use in the tensor set. */
    char name[NRT_TENSOR_NAME_MAX];
    /** Input or output. */
    nrt_tensor_usage_t usage;
    /** Tensor size in bytes. */
    size_t size;
    /** Element type. */
    nrt_dtype_t dtype;
    /** `ndim` dimensions, outermost first (owned by the array; NULL when `ndim` is 0). */
    uint32_t *shape;
    /** Number of dimensions. */
    uint32_t ndim;
} nrt_tensor_info_t;

/** A model's tensors (`nrt_get_model_tensor_info`; free with `nrt_free_model_tensor_info`). */
typedef struct nrt_tensor_info_array {
    /** Number of entries in `tensor_array`: inputs first, then outputs. */
    uint64_t tensor_count;
    /** The tensors. */
    nrt_tensor_info_t tensor_array[];
} nrt_tensor_info_array_t;

/** Called when an asynchronous execution completes (`nrt_register_async_exec_callback`). */
typedef void (*NRT_ASYNC_EXEC_STATUS_CALLBACK)(void *params, uint32_t model_id, uint32_t vnc, uint64_t job_id, NRT_STATUS status);

/**
 * The input and output tensors of a loaded model: name, usage, size, element type and
 * shape, inputs first, then outputs, in the order the model declares them. `*tensor_info`
 * receives an array this library allocated; release it with `nrt_free_model_tensor_info`.
 * A model that is not loaded is NRT_INVALID_HANDLE; NULL `tensor_info` is NRT_INVALID.
 *
 * Safety:
 * `tensor_info` is NULL or valid for a write; `model` is any pointer value (decoded and
 * checked by the core, never dereferenced).
 */
NRT_STATUS nrt_get_model_tensor_info(nrt_model_t *model, nrt_tensor_info_array_t **tensor_info);

/**
 * Releases an array from `nrt_get_model_tensor_info` (also after `nrt_close`). NULL is a
 * no-op (NRT_SUCCESS); a pointer this library did not hand out, or one already freed, is
 * NRT_INVALID and nothing is freed.
 *
 * Safety:
 * `tensor_info` is any pointer value (looked up before anything is freed).
 */
NRT_STATUS nrt_free_model_tensor_info(nrt_tensor_info_array_t *tensor_info);

/**
 * Optimal number of threads calling `nrt_execute` on a loaded model (deprecated): 1 (one
 * execution per core at a time, spec section 4.6).
 *
 * Safety:
 * `instance_count` is NULL or valid for a write; `model` is any pointer value.
 */
NRT_STATUS nrt_get_model_instance_count(nrt_model_t *model, uint32_t *instance_count);

/** Enables tracing (not supported by this runtime: NRT_FAILURE). */
NRT_STATUS nrt_trace_start(bool trace_mem);

/** Serializes and disables tracing (not supported: NRT_FAILURE). */
NRT_STATUS nrt_trace_stop(const char *filename);

/**
 * The collectives network plugin (not supported: NULL, `*err` set to NRT_FAILURE and
 * `err_msg` to the reason when they are not NULL).
 *
 * Safety:
 * `err` is NULL or writable; `err_msg` is NULL or valid for writes of `err_msg_size` bytes.
 */
void *nrt_get_libnccl_net(int *err, char *err_msg, size_t err_msg_size);

/** A ucode image. */
typedef struct nrt_ucode_img {
    /** Image bytes. */
    uint8_t *bin;
    /** Image size in bytes. */
    size_t size;
} nrt_ucode_img;

/** The pooling engine's iram and dram images. */
typedef struct nrt_ucode_info {
    /** Instruction RAM image. */
    nrt_ucode_img iram;
    /** Data RAM image. */
    nrt_ucode_img dram;
} nrt_ucode_info;

/** Replaces the pooling engine's ucode (not supported: NRT_FAILURE). */
NRT_STATUS nrt_set_pool_eng_ucode(const nrt_ucode_info *ucode_info);

/**
 * Copies to memory-mapped device memory (not supported: NRT_FAILURE; this library hands
 * out no device mappings).
 */
NRT_STATUS nrt_memcpy_to_device(void *dest, const void *src, size_t size);

/**
 * Registers an asynchronous-execution callback (not supported: NRT_FAILURE; executions are
 * synchronous here).
 */
NRT_STATUS nrt_register_async_exec_callback(NRT_ASYNC_EXEC_STATUS_CALLBACK callback, void *params);

/**
 * A barrier over all workers. Only a single worker is supported, as for
 * `nrt_load_collectives`: with `g_device_id` 0 of `g_device_count` 1 there is no one to wait
 * for, so it succeeds once `vnc` is a logical core this process owns;
 * `g_device_id >= g_device_count` is NRT_INVALID; more workers are NRT_FAILURE (this runtime
 * has no collectives transport).
 */
NRT_STATUS nrt_barrier(int32_t vnc, uint32_t g_device_id, uint32_t g_device_count);

/** All-rank AllGather (not supported: NRT_FAILURE). */
NRT_STATUS nrt_all_gather(int32_t vnc, uint32_t g_device_id, uint32_t g_device_count, uint32_t rank_input_size, void *input, void *output);

/**
 * Waits for the queued asynchronous executions of logical core `vnc`: a success once `vnc`
 * is a core this process owns, since executions here are synchronous (nothing is ever
 * queued); another `vnc` is NRT_INVALID.
 */
NRT_STATUS nrt_async_drain_queued_execs(int32_t vnc);

/** What `nrt_get_model_info` reports. Fields are only ever added at the end (size-in/size-out). */
typedef struct nrt_model_info {
    /** The logical core the model is loaded on. */
    uint32_t vnc;
} nrt_model_info_t;

/**
 * Information about a loaded model: copies `min(info_size_in, sizeof(nrt_model_info_t))`
 * bytes to `info` and writes this library's `sizeof(nrt_model_info_t)` to `*info_size_out`
 * (when not NULL). A model that is not loaded is NRT_INVALID_HANDLE.
 *
 * Safety:
 * `info` is NULL or valid for writes of `info_size_in` bytes; `info_size_out` is NULL or
 * writable; `model` is any pointer value.
 */
NRT_STATUS nrt_get_model_info(const nrt_model_t *model, nrt_model_info_t *info, size_t info_size_in, size_t *info_size_out);

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NRT_NRT_EXPERIMENTAL_H */
