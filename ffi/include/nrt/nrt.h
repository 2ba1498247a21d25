/*
 * nrt/nrt.h -- GENERATED, do not edit.
 *
 * nrt-dmem's libnrt.so-compatible subset of the Neuron runtime API (nrt.h, API 2.0, public API
 * section 2): init/close, load/unload/execute, tensors, tensor sets, memory stats. A program
 * written for AWS's <nrt/nrt.h> compiles unchanged against this header for these functions and
 * links with -lnrt. Generated from ffi/src/types.rs, ffi/src/info.rs, ffi/src/runtime.rs,
 * ffi/src/model.rs, ffi/src/model_ext.rs, ffi/src/set.rs, ffi/src/tensor.rs, ffi/src/batch.rs,
 * ffi/src/stats.rs, ffi/src/unsupported.rs by ffi/tests/headers.rs; regenerate with `cargo
 * xtask headers`.
 */
#ifndef NRT_DMEM_NRT_NRT_H
#define NRT_DMEM_NRT_NRT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "nrt/nrt_status.h"
#include "ndl/neuron_driver_shared_tensor_batch_op.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Major version of the runtime API this library implements. */
#define NRT_MAJOR_VERSION 2

/** Minor version of the runtime API this library implements. */
#define NRT_MINOR_VERSION 0

/** A loaded model (opaque; from `nrt_load`, released by `nrt_unload`). */
typedef struct nrt_model nrt_model_t;

/** A tensor (opaque; from `nrt_tensor_allocate` and friends, released by `nrt_tensor_free`). */
typedef struct nrt_tensor nrt_tensor_t;

/** A container of named tensors (the inputs or outputs of one `nrt_execute`). */
typedef void nrt_tensor_set_t;

/** Where a tensor lives. Values are fixed by the public API. */
typedef enum {
    /** Device HBM of the logical core. */
    NRT_TENSOR_PLACEMENT_DEVICE = 0,
    /** DMA-able host memory (deprecated; refused on trn2 with NRT_RESOURCE). */
    NRT_TENSOR_PLACEMENT_HOST = 1,
    /** Ordinary host memory. */
    NRT_TENSOR_PLACEMENT_VIRTUAL = 2,
} nrt_tensor_placement_t;

/** The framework calling `nrt_init`. Values are fixed by the public API. */
typedef enum {
    /** Invalid. */
    NRT_FRAMEWORK_TYPE_INVALID = 0,
    /** Framework-less execution. */
    NRT_FRAMEWORK_TYPE_NO_FW = 1,
    /** TensorFlow. */
    NRT_FRAMEWORK_TYPE_TENSORFLOW = 2,
    /** PyTorch. */
    NRT_FRAMEWORK_TYPE_PYTORCH = 3,
    /** MXNet. */
    NRT_FRAMEWORK_TYPE_MXNET = 4,
    /** Neuron node precheck. */
    NRT_FRAMEWORK_TYPE_PRECHECK = 5,
} nrt_framework_type_t;

/** Where a device tensor's memory is (`nrt_tensor_get_device_allocation_info`). */
typedef struct nrt_tensor_device_allocation_info {
    /** Device physical address of the tensor's first byte. */
    uint64_t physical_address;
    /** Bytes of the tensor. */
    size_t size;
    /** The HBM the tensor is placed on. */
    int hbm_index;
} nrt_tensor_device_allocation_info_t;

/**
 * Memory of one logical core (`nrt_get_vnc_memory_stats`). Fields are only ever added at the
 * end; the size-in/size-out pair of the call keeps old and new callers compatible.
 */
typedef struct nrt_vnc_memory_stats {
    /** Device bytes in use on the logical core (tensors, models, shared resources). */
    size_t bytes_used;
    /**
     * Size of the HBM the logical core allocates from by default (libnrt:
     * `aws_hal_get_hbm_size()`). Cores that share an HBM (trn2 at LNC 1) each report all of
     * it: what one uses, the other cannot.
     */
    size_t bytes_limit;
} nrt_vnc_memory_stats_t;

/**
 * Element type of a tensor (`nrt_get_model_tensor_info`). Values are fixed by the public API;
 * `NRT_DTYPE_UNKNOWN` and `NRT_DTYPE_INVALID` are both 0.
 */
typedef enum {
    /** Unknown type. */
    NRT_DTYPE_UNKNOWN = 0,
    /** Invalid type (= unknown). */
    NRT_DTYPE_INVALID = 0,
    /** 8-bit float, 3-bit exponent. */
    NRT_DTYPE_FP8_E3 = 13,
    /** 8-bit float, 4-bit exponent. */
    NRT_DTYPE_FP8_E4 = 14,
    /** 8-bit float, 5-bit exponent. */
    NRT_DTYPE_FP8_E5 = 15,
    /** IEEE half. */
    NRT_DTYPE_FLOAT16 = 7,
    /** bfloat16. */
    NRT_DTYPE_BFLOAT16 = 6,
    /** IEEE single. */
    NRT_DTYPE_FLOAT32 = 10,
    /** fp32 with stochastic rounding. */
    NRT_DTYPE_FP32R = 11,
    /** uint8_t. */
    NRT_DTYPE_UINT8 = 3,
    /** uint16_t. */
    NRT_DTYPE_UINT16 = 5,
    /** uint32_t. */
    NRT_DTYPE_UINT32 = 9,
    /** uint64_t. */
    NRT_DTYPE_UINT64 = 1,
    /** int8_t. */
    NRT_DTYPE_INT8 = 2,
    /** int16_t. */
    NRT_DTYPE_INT16 = 4,
    /** int32_t. */
    NRT_DTYPE_INT32 = 8,
    /** int64_t. */
    NRT_DTYPE_INT64 = 12,
} nrt_dtype_t;

/** Instance family (`nrt_instance_info_t.family`): unknown. */
#define NRT_INSTANCE_UNKNOWN 0

/** inf1. */
#define NRT_INSTANCE_INF1 1

/** trn1. */
#define NRT_INSTANCE_TRN1 2

/** trn1n. */
#define NRT_INSTANCE_TRN1N 3

/** inf2. */
#define NRT_INSTANCE_INF2 4

/** trn2. */
#define NRT_INSTANCE_TRN2 5

/** trn2n. */
#define NRT_INSTANCE_TRN2N 6

/** inf2e. */
#define NRT_INSTANCE_INF2E 7

/** trn2p. */
#define NRT_INSTANCE_TRN2P 8

/** trn2u. */
#define NRT_INSTANCE_TRN2U 9

/** trn2e. */
#define NRT_INSTANCE_TRN2E 10

/** trn2eu. */
#define NRT_INSTANCE_TRN2EU 11

/** trn2ac. */
#define NRT_INSTANCE_TRN2AC 12

/** trn2uac. */
#define NRT_INSTANCE_TRN2UAC 13

/** trn3. */
#define NRT_INSTANCE_TRN3 14

/** trn3pds98. */
#define NRT_INSTANCE_TRN3PDS98 15

/** Instance size (`nrt_instance_info_t.size`): xlarge. */
#define NRT_INSTANCE_SIZE_1XL 0

/** 2xlarge. */
#define NRT_INSTANCE_SIZE_2XL 1

/** 4xlarge. */
#define NRT_INSTANCE_SIZE_4XL 2

/** 6xlarge. */
#define NRT_INSTANCE_SIZE_6XL 3

/** 8xlarge. */
#define NRT_INSTANCE_SIZE_8XL 4

/** 24xlarge. */
#define NRT_INSTANCE_SIZE_24XL 5

/** 32xlarge. */
#define NRT_INSTANCE_SIZE_32XL 6

/** 48xlarge. */
#define NRT_INSTANCE_SIZE_48XL 7

/** 3xlarge. */
#define NRT_INSTANCE_SIZE_3XL 8

/** Unknown size. */
#define NRT_INSTANCE_SIZE_UNKNOWN 9

/** Number of known sizes (= unknown). */
#define NRT_INSTANCE_SIZE_NUM 9

/** The instance this process runs on (`nrt_get_instance_info`), 32 bytes. */
typedef struct nrt_instance_info {
    /** An `NRT_INSTANCE_*` family. */
    uint32_t family;
    /** An `NRT_INSTANCE_SIZE_*` size. */
    uint32_t size;
    /** Device family name, NUL-terminated (`"trn2"` on `sim:trn2`). */
    char arch_name[16];
    /** Device revision, NUL-terminated (`"sim"` on the simulated device). */
    char device_revision[8];
} nrt_instance_info_t;

/**
 * Describes the instance: family, size, device family name and revision. On the simulated
 * device they follow `NRT_DMEM_DEVICE` (`sim:trn2` is a trn2.3xlarge, `sim:trn2x16` a
 * trn2.48xlarge). Copies `min(instance_info_len, sizeof(nrt_instance_info_t))` bytes, so
 * callers built against a shorter struct stay compatible. Can be called before `nrt_init`.
 *
 * Safety:
 * `info` is NULL or valid for writes of `instance_info_len` bytes.
 */
NRT_STATUS nrt_get_instance_info(nrt_instance_info_t *info, size_t instance_info_len);

/**
 * Deprecated spelling of `nrt_get_total_vnc_count` (the same count).
 *
 * Safety:
 * `vnc_count` is NULL or valid for a write.
 */
NRT_STATUS nrt_get_total_nc_count(uint32_t *vnc_count);

/**
 * Deprecated spelling of `nrt_get_visible_vnc_count` (the same count).
 *
 * Safety:
 * `vnc_count` is NULL or valid for a write.
 */
NRT_STATUS nrt_get_visible_nc_count(uint32_t *vnc_count);

/**
 * Logical cores a loaded model uses: always 1 here (a model lives on one logical core).
 *
 * Safety:
 * `vnc_count` is NULL or valid for a write; `model` is any pointer value.
 */
NRT_STATUS nrt_get_model_vnc_count(const nrt_model_t *model, uint32_t *vnc_count);

/**
 * Deprecated spelling of `nrt_get_model_vnc_count` (the same count).
 *
 * Safety:
 * As `nrt_get_model_vnc_count`.
 */
NRT_STATUS nrt_get_model_nc_count(const nrt_model_t *model, uint32_t *vnc_count);

/**
 * Initializes the runtime. The device comes from the environment, read now:
 * `NRT_DMEM_DEVICE` (`sim:trn2` by default, `sim:trn1`, `sim:inf2x2`, `sim:trn2+tlsf` for the
 * fast TLSF placement, ... or `neuron` for `/dev/neuron*`), `NEURON_RT_VISIBLE_CORES`,
 * `NEURON_RT_NUM_CORES` and
 * `NEURON_RT_VIRTUAL_CORE_SIZE`. The runtime can be initialized again after `nrt_close`.
 *
 * `framework` is a `nrt_framework_type_t` (NRT_INVALID for other values); `fw_version` and
 * `fal_version` are informational and may be NULL.
 *
 * Safety:
 * `fw_version` and `fal_version` are NULL or NUL-terminated strings (they are not read).
 */
NRT_STATUS nrt_init(nrt_framework_type_t framework, const char *fw_version, const char *fal_version);

/**
 * Closes the runtime: unloads every model, frees every tensor still allocated and returns
 * all device memory. Calls made afterwards fail with NRT_CLOSED until `nrt_init` runs again.
 * A no-op when the runtime is not initialized or already closed; the thread's last error
 * then says which, as `Nrt::close` answers (docs/STATES.md).
 */
void nrt_close(void);

/**
 * Logical NeuronCores on the instance (all attached devices, at the configured logical core
 * size). Can be called before `nrt_init`.
 *
 * Safety:
 * `vnc_count` is NULL or valid for a write.
 */
NRT_STATUS nrt_get_total_vnc_count(uint32_t *vnc_count);

/**
 * Logical NeuronCores this process owns (`NEURON_RT_VISIBLE_CORES` /
 * `NEURON_RT_NUM_CORES`); the application numbers them from 0. Can be called before
 * `nrt_init`.
 *
 * Safety:
 * `vnc_count` is NULL or valid for a write.
 */
NRT_STATUS nrt_get_visible_vnc_count(uint32_t *vnc_count);

/**
 * Loads a model onto logical core `vnc` (-1: the first with no model, else the one with the
 * fewest) and makes all of its device memory: per-subgraph allocations, GPSIMD libraries,
 * scratchpad. All-or-nothing: on failure no memory stays allocated.
 *
 * `neff_bytes`/`size` hold a NEFF, or a model manifest (JSON, format "nrt-dmem-model/2").
 * A NEFF libnrt 2.31 would refuse for its version, feature bits or packager is
 * NRT_UNSUPPORTED_NEFF_VERSION, any other bad NEFF or manifest NRT_INVALID, each with the
 * precise reason (a manifest's names the field, line and column), before anything is
 * allocated; device out-of-memory is NRT_RESOURCE (`nrtx_get_oom_report` shows the memory at
 * that moment).
 * `vnc_count` is deprecated and ignored (pass -1).
 *
 * Safety:
 * `neff_bytes` is valid for reads of `size` bytes; `model` is NULL or valid for a write.
 */
NRT_STATUS nrt_load(const void *neff_bytes, size_t size, int32_t vnc, int32_t vnc_count, nrt_model_t **model);

/**
 * Unloads a model: waits for its executions in flight, then frees all of its device memory
 * (no other model's memory changes). The pointer is invalid afterwards; passing it (or a copy)
 * again is NRT_INVALID_HANDLE, also after later loads: model ids are never reused (below
 * 2?? loads). Of two threads unloading the same model, one unloads it and the other gets
 * NRT_INVALID_HANDLE.
 *
 * Safety:
 * `model` is any pointer value (it is decoded, never dereferenced).
 */
NRT_STATUS nrt_unload(nrt_model_t *model);

/**
 * Executes a model. Inputs and outputs are bound by the names the model declares; a missing
 * or wrongly sized tensor is NRT_INVALID. This runtime models memory, not compute: each
 * declared output receives the bytes of the input at the same position (the rest of it is
 * zero-filled), and every output's completion count goes up by one
 * (`nrt_tensor_check_output_completion`).
 *
 * Safety:
 * `model`, `input_set` and `output_set` are any pointer values (decoded and checked by the
 * core, never dereferenced); a tensor in a set freed since it was added is NRT_INVALID.
 */
NRT_STATUS nrt_execute(nrt_model_t *model, const nrt_tensor_set_t *input_set, nrt_tensor_set_t *output_set);

/**
 * Executes a model `repeat_count` times with the same tensor sets, each execution as
 * `nrt_execute` does it (outputs' completion counts go up by `repeat_count`). A
 * `repeat_count` below 1 is NRT_INVALID; the first failing execution ends the call.
 *
 * Safety:
 * As `nrt_execute`.
 */
NRT_STATUS nrt_execute_repeat(nrt_model_t *model, const nrt_tensor_set_t *input_set, nrt_tensor_set_t *output_set, int repeat_count);

/**
 * Loads a model that takes part in collectives. Only a single rank is supported: with
 * `ctx_device_id` 0 and `ctx_device_count` 1 this is `nrt_load` (the model's collectives
 * run within one worker); `ctx_device_id >= ctx_device_count` is NRT_INVALID; more ranks
 * are NRT_FAILURE (this runtime has no collectives transport).
 *
 * Safety:
 * As `nrt_load`.
 */
NRT_STATUS nrt_load_collectives(const void *neff_bytes, size_t size, int32_t vnc, int32_t vnc_count, uint32_t ctx_device_id, uint32_t ctx_device_count, nrt_model_t **model);

/**
 * Allocates an empty tensor set. A full set arena is NRT_RESOURCE naming the setting that
 * raises it (`NRT_DMEM_MAX_SETS`).
 *
 * Safety:
 * `result` is NULL or valid for a write.
 */
NRT_STATUS nrt_allocate_tensor_set(nrt_tensor_set_t **result);

/**
 * Destroys a tensor set (not the tensors in it) and sets `*tensor_set` to NULL. NULL is a
 * no-op; a pointer that is not a live set is refused (logged, NRT_INVALID as the thread's
 * last error). After `nrt_close` the set is already gone (close frees every set): the pointer
 * is set to NULL and NRT_CLOSED recorded; before `nrt_init`, NRT_UNINITIALIZED.
 *
 * Safety:
 * `tensor_set` is NULL or valid for a read and a write.
 */
void nrt_destroy_tensor_set(nrt_tensor_set_t **tensor_set);

/**
 * Adds `tensor` to the set under `tensor_name`, replacing a tensor of the same name. The
 * tensor must be live now; one freed later makes an execution that binds it NRT_INVALID.
 * Names are at most 255 bytes (`NRT_TENSOR_NAME_MAX - 1`); a set holds as many tensors as it
 * is given (NRT_RESOURCE when the runtime's set-entry storage is full, `NRT_DMEM_MAX_SETS`).
 *
 * Safety:
 * `tensor_name` is NULL or a NUL-terminated string; `tensor_set` and `tensor` are any pointer
 * values (decoded and checked by the core, never dereferenced).
 */
NRT_STATUS nrt_add_tensor_to_tensor_set(nrt_tensor_set_t *tensor_set, const char *tensor_name, nrt_tensor_t *tensor);

/**
 * Looks up the tensor stored under `tensor_name`; NRT_INVALID when the set has none.
 *
 * Safety:
 * `tensor_name` is NULL or a NUL-terminated string; `tensor` is NULL or valid for a write;
 * `tensor_set` is any pointer value (decoded and checked by the core, never dereferenced).
 */
NRT_STATUS nrt_get_tensor_from_tensor_set(nrt_tensor_set_t *tensor_set, const char *tensor_name, nrt_tensor_t **tensor);

/**
 * Allocates a tensor of `size` bytes. DEVICE tensors take HBM of logical core `vnc` and
 * outlive any model; HOST tensors take DMA-able host memory (refused with NRT_RESOURCE on
 * trn2); VIRTUAL tensors take ordinary host memory. `vnc` may be -1 for the host placements.
 * `name` is optional (NULL) and at most 255 bytes (`NRT_TENSOR_NAME_MAX - 1`). Out-of-memory on the device is
 * NRT_RESOURCE.
 *
 * Safety:
 * `name` is NULL or a NUL-terminated string; `tensor` is NULL or valid for a write.
 */
NRT_STATUS nrt_tensor_allocate(nrt_tensor_placement_t tensor_placement, int vnc, size_t size, const char *name, nrt_tensor_t **tensor);

/**
 * Frees a tensor and sets `*tensor` to NULL. Its memory is released with the last tensor
 * that shares it (slices); a buffer attached with `nrt_tensor_attach_buffer` is never freed.
 * NULL, `*tensor == NULL`, and pointers that are not live tensors are no-ops (the latter
 * logged).
 *
 * Safety:
 * `tensor` is NULL or valid for a read and a write.
 */
void nrt_tensor_free(nrt_tensor_t **tensor);

/**
 * Copies `size` bytes at `offset` of the tensor into `buf`.
 *
 * Safety:
 * `buf` is valid for writes of `size` bytes; `tensor` is any pointer value (checked).
 */
NRT_STATUS nrt_tensor_read(const nrt_tensor_t *tensor, void *buf, size_t offset, size_t size);

/**
 * Copies `size` bytes from `buf` into the tensor at `offset`.
 *
 * Safety:
 * `buf` is valid for reads of `size` bytes; `tensor` is any pointer value (checked).
 */
NRT_STATUS nrt_tensor_write(nrt_tensor_t *tensor, const void *buf, size_t offset, size_t size);

/**
 * Copies `size` bytes from `src` at `src_offset` to `dst` at `dst_offset`. Two device
 * tensors must be on the same NeuronCore (NRT_INVALID otherwise).
 *
 * Safety:
 * `src` and `dst` are any pointer values (checked).
 */
NRT_STATUS nrt_tensor_copy(const nrt_tensor_t *src, size_t src_offset, nrt_tensor_t *dst, size_t dst_offset, size_t size);

/**
 * Bytes of the tensor (0 for a pointer that is not a live tensor).
 *
 * Safety:
 * `tensor` is any pointer value (checked).
 */
size_t nrt_tensor_get_size(const nrt_tensor_t *tensor);

/**
 * Sets `size` bytes at `offset` of the tensor to `value` (converted to unsigned char).
 *
 * Safety:
 * `tensor` is any pointer value (checked).
 */
NRT_STATUS nrt_tensor_memset(nrt_tensor_t *tensor, uint64_t offset, int value, size_t size);

/**
 * Allocates a tensor without storage; give it memory with `nrt_tensor_attach_buffer`.
 *
 * Safety:
 * `name` is NULL or a NUL-terminated string; `tensor` is NULL or valid for a write.
 */
NRT_STATUS nrt_tensor_allocate_empty(const char *name, nrt_tensor_t **tensor);

/**
 * Makes the caller's `buffer` of `size` bytes the tensor's storage (the tensor becomes
 * VIRTUAL). Storage the tensor had before is released if it owned it. The buffer is never
 * freed by the runtime and must outlive the tensor.
 *
 * Safety:
 * `buffer` is valid for reads and writes of `size` bytes for the tensor's lifetime; `tensor`
 * is any pointer value (checked).
 */
NRT_STATUS nrt_tensor_attach_buffer(nrt_tensor_t *tensor, void *buffer, size_t size);

/**
 * Allocates a tensor viewing `[offset, offset + size)` of `tensor_source` (no copy). The
 * storage is shared and reference-counted: it is freed with the last tensor using it.
 *
 * Safety:
 * `name` is NULL or a NUL-terminated string; `tensor_slice` is NULL or valid for a write;
 * `tensor_source` is any pointer value (checked).
 */
NRT_STATUS nrt_tensor_allocate_slice(const nrt_tensor_t *tensor_source, size_t offset, size_t size, const char *name, nrt_tensor_t **tensor_slice);

/**
 * The host address of the tensor's first byte, for tensors in host memory (VIRTUAL and
 * attached buffers); NULL for device and host-DMA tensors and on failure.
 *
 * Safety:
 * `tensor` is any pointer value (checked).
 */
void *nrt_tensor_get_va(const nrt_tensor_t *tensor);

/**
 * Where a device (or host-DMA) tensor is: device physical address, size, HBM index.
 * NRT_INVALID for tensors in ordinary host memory.
 *
 * Safety:
 * `alloc_info` is NULL or valid for a write; `tensor` is any pointer value (checked).
 */
NRT_STATUS nrt_tensor_get_device_allocation_info(const nrt_tensor_t *tensor, nrt_tensor_device_allocation_info_t *alloc_info);

/**
 * Waits until `output_tensor` has been written by `expected_completion_count` executions.
 * `timeout` is in microseconds; negative waits without bound, 0 checks once. NRT_TIMEOUT when
 * the count is not reached in time; NRT_INVALID for a pointer that is not a live tensor.
 *
 * Safety:
 * `output_tensor` is any pointer value (checked).
 */
NRT_STATUS nrt_tensor_check_output_completion(const nrt_tensor_t *output_tensor, int64_t timeout, uint64_t expected_completion_count);

/**
 * Sets the tensor's output completion count back to 0.
 *
 * Safety:
 * `output_tensor` is any pointer value (checked).
 */
NRT_STATUS nrt_tensor_reset_output_completion(nrt_tensor_t *output_tensor);

/** The operations on one tensor. */
typedef struct nrt_tensor_batch {
    /** The tensor. */
    const nrt_tensor_t *tensor;
    /** `num_ops` operations on it. */
    const nrt_tensor_batch_op_t *ops;
    /** Number of operations. */
    uint32_t num_ops;
} nrt_tensor_batch_t;

/**
 * Reads from many tensors at once: for each batch, each operation copies `size` bytes at
 * `offset` of the batch's tensor into `buffer`. Every operation is checked before anything
 * is copied (a freed tensor, a window past the end, a NULL array or buffer is NRT_INVALID,
 * naming the batch and operation). `unsafe` is accepted and ignored: the checks always run.
 *
 * Safety:
 * `batches` holds `num_batches` entries; each `ops` holds `num_ops` operations whose
 * buffers are writable for their sizes.
 */
NRT_STATUS nrt_tensor_read_batch(const nrt_tensor_batch_t *batches, uint64_t num_batches, bool unsafe);

/**
 * Writes to many tensors at once (as `nrt_tensor_read_batch`, from `buffer` into the tensor).
 *
 * Safety:
 * As `nrt_tensor_read_batch`, the buffers readable.
 */
NRT_STATUS nrt_tensor_write_batch(const nrt_tensor_batch_t *batches, uint64_t num_batches, bool unsafe);

/**
 * Device memory of logical core `vnc`: bytes in use (every allocation booked to its
 * NeuronCores, on whichever HBM: tensors, models, shared scratchpad and libraries) and the
 * limit, the size of the HBM its cores allocate from by default (libnrt's
 * `aws_hal_get_hbm_size()`). Cores that share an HBM each report all of it, and allocations
 * placed on other HBMs count as used, so used can exceed the limit. Copies `min(stats_size_in, sizeof(nrt_vnc_memory_stats_t))` bytes to `stats` and
 * writes this library's `sizeof(nrt_vnc_memory_stats_t)` to `*stats_size_out` (when not
 * NULL), so callers built against an older or newer header stay compatible.
 *
 * Safety:
 * `stats` is NULL or valid for writes of `stats_size_in` bytes; `stats_size_out` is NULL or
 * valid for a write.
 */
NRT_STATUS nrt_get_vnc_memory_stats(uint32_t vnc, nrt_vnc_memory_stats_t *stats, size_t stats_size_in, size_t *stats_size_out);

/** Builds the global collectives communicator (not supported: NRT_FAILURE). */
NRT_STATUS nrt_build_global_comm(int32_t vnc, uint32_t g_device_id, uint32_t g_device_count);

/** The dma-buf fd of a device memory region (not supported: NRT_FAILURE). */
NRT_STATUS nrt_get_dmabuf_fd(uint64_t va, uint64_t size, int *fd);

/**
 * The host device id of a device (not supported: NRT_INVALID, libnrt's status when the call
 * cannot answer).
 */
NRT_STATUS nrt_host_device_id_get(int neuron_dev, uint32_t *host_device_id);

/**
 * The routing ids by host device id (not supported: NRT_INVALID, libnrt's status when the
 * call cannot answer).
 */
NRT_STATUS nrt_host_device_id_rid_map_get(uint32_t *count, uint32_t *host_did_to_rid_map);

/** Maps an HBM region (not supported: NRT_INVALID, libnrt's "interface not supported"). */
NRT_STATUS nrt_get_hbm_mmap_va(int device_id, int hbm_idx, void **addr, size_t *size);

/** The BDF of the EFA device next to a Neuron device (not supported: NRT_FAILURE). */
NRT_STATUS nrt_get_attached_efa_bdf(const void *va, char *efa_bdf, size_t *len);

/** Builds the communicator of host-driven collectives (not supported: NRT_FAILURE). */
NRT_STATUS nrt_cc_global_comm_init(uint32_t vnc, uint32_t g_device_id, uint32_t g_device_count);

/** Creates a stream for host-initiated collectives (libnrt 2.31; not supported: NRT_FAILURE). */
NRT_STATUS nrt_cc_create_stream(uint32_t stream_id);

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NRT_NRT_H */
