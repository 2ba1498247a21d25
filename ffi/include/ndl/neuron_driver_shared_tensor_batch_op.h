/*
 * ndl/neuron_driver_shared_tensor_batch_op.h -- GENERATED, do not edit.
 *
 * One operation of a batched tensor read or write (the SDK's
 * ndl/neuron_driver_shared_tensor_batch_op.h, shared with the driver). Generated from
 * ffi/src/batch_op.rs by ffi/tests/headers.rs; regenerate with `cargo xtask headers`.
 */
#ifndef NRT_DMEM_NDL_NEURON_DRIVER_SHARED_TENSOR_BATCH_OP_H
#define NRT_DMEM_NDL_NEURON_DRIVER_SHARED_TENSOR_BATCH_OP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Offset of a batch operation, in bytes. */
typedef uint64_t nrt_tensor_batch_offset_t;

/** Size of a batch operation, in bytes. */
typedef uint64_t nrt_tensor_batch_size_t;

/** One read or write of `size` bytes at `offset` of a tensor, from or into `buffer`. */
typedef struct nrt_tensor_batch_op {
    /** Offset into the tensor. */
    nrt_tensor_batch_offset_t offset;
    /** Bytes. */
    nrt_tensor_batch_size_t size;
    /** Host buffer of `size` bytes. */
    void *buffer;
} nrt_tensor_batch_op_t;

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NDL_NEURON_DRIVER_SHARED_TENSOR_BATCH_OP_H */
