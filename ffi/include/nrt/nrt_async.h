/*
 * nrt/nrt_async.h -- GENERATED, do not edit.
 *
 * The asynchronous schedule (nrt_async.h, nrta_*): tensor reads, writes, copies, executions and
 * collectives queued on per-core execution units and tracked by sequence ids. Declared as the
 * SDK declares them; this library refuses every call (executions here are synchronous).
 * Generated from ffi/src/async_schedule.rs by ffi/tests/headers.rs; regenerate with `cargo
 * xtask headers`.
 */
#ifndef NRT_DMEM_NRT_NRT_ASYNC_H
#define NRT_DMEM_NRT_NRT_ASYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "nrt/nrt_status.h"
#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * An execution unit of a logical core. Values are fixed by the public API; new units are
 * only ever added before `NRTA_XU_TYPE_NUM`.
 */
typedef enum nrta_xu {
    /** Tensor reads. */
    NRTA_XU_TENSOR_READ = 0,
    /** Tensor writes. */
    NRTA_XU_TENSOR_WRITE = 1,
    /** Other tensor operations (copies). */
    NRTA_XU_TENSOR_OP = 2,
    /** Model executions. */
    NRTA_XU_COMPUTE = 3,
    /** Collectives. */
    NRTA_XU_COLLECTIVES = 4,
    /** Number of execution units. */
    NRTA_XU_TYPE_NUM = 5,
} nrta_xu_t;

/**
 * A sequence id: the execution unit in the high 16 bits, a strictly increasing sequence number
 * in the low 48 (`NRTA_SEQ_GET_XU_ID`, `NRTA_SEQ_GET_SEQ_NUM`).
 */
typedef uint64_t nrta_seq_t;

/** An execution unit id (the high 16 bits of a sequence id). */
typedef uint16_t nrta_xu_id_t;

/** Largest sequence number (48 bits). */
#define NRTA_SEQ_NUM_MAX 281474976710655ull

/** The sequence-number bits of a sequence id. */
#define NRTA_SEQ_NUM_MASK 281474976710655ull

/**
 * A failed request: its sequence id and status (an `NRT_STATUS`, stored as 64 bits so that
 * every compiler lays the struct out alike).
 */
typedef struct nrta_error {
    /** The request. */
    nrta_seq_t seq_id;
    /** Its `NRT_STATUS`. */
    uint64_t error_code;
} nrta_error_t;

/** The errors of the requests scheduled with it (opaque; from `nrta_error_tracker_create`). */
typedef struct nrta_error_tracker nrta_error_tracker_t;

/** Not supported by nrt-dmem (the asynchronous schedule): NRT_FAILURE. */
NRT_STATUS nrta_tensor_write(nrt_tensor_t *tensor, const void *buf, uint64_t offset, uint64_t size, int queue, nrta_error_tracker_t *err, nrta_seq_t *req_sequence);

/** Not supported by nrt-dmem (the asynchronous schedule): NRT_FAILURE. */
NRT_STATUS nrta_tensor_read(void *buf, nrt_tensor_t *tensor, uint64_t offset, uint64_t size, int queue, nrta_error_tracker_t *err, nrta_seq_t *req_sequence);

/** Not supported by nrt-dmem (the asynchronous schedule): NRT_FAILURE. */
NRT_STATUS nrta_tensor_copy(nrt_tensor_t *src, uint64_t src_offset, nrt_tensor_t *dst, uint64_t dst_offset, uint64_t size, int queue, nrta_error_tracker_t *err, nrta_seq_t *req_sequence);

/** Not supported by nrt-dmem (the asynchronous schedule): NRT_FAILURE. */
NRT_STATUS nrta_execute_schedule(nrt_model_t *model, const nrt_tensor_set_t *input, nrt_tensor_set_t *output, int queue, nrta_error_tracker_t *err, nrta_seq_t *req_sequence);

/** Not supported by nrt-dmem (the asynchronous schedule): NRT_FAILURE. */
NRT_STATUS nrta_cc_prepare(nrt_cc_comm_t *comm, nrt_tensor_list_t *input, nrt_tensor_list_t *output, nrt_dtype_t dtype, nrt_op_type_t op, nrt_cc_op_type_t cc_op, nrt_cc_context_t **cc_ctx);

/** Not supported by nrt-dmem (the asynchronous schedule): NRT_FAILURE. */
NRT_STATUS nrta_cc_schedule(nrt_cc_context_t **cc_ctx, int queue, nrta_error_tracker_t *err, nrta_seq_t *req_sequence);

/** Not supported by nrt-dmem (the asynchronous schedule): NRT_FAILURE. */
NRT_STATUS nrta_is_completed(nrta_seq_t seq, bool *is_completed);

/** Not supported by nrt-dmem (the asynchronous schedule): NRT_FAILURE. */
NRT_STATUS nrta_get_sequence(uint32_t lnc, nrta_xu_t xu, int queue, nrta_seq_t *seq);

/** Not supported by nrt-dmem (the asynchronous schedule): NRT_FAILURE. */
NRT_STATUS nrta_get_completion_handle(nrta_seq_t seq, int *fd);

/** Not supported by nrt-dmem (the asynchronous schedule): NRT_FAILURE. */
NRT_STATUS nrta_error_tracker_create(uint32_t lnc_idx, nrta_error_tracker_t **error_tracker);

/** Not supported by nrt-dmem (the asynchronous schedule): does nothing. */
void nrta_error_tracker_destroy(nrta_error_tracker_t *error_tracker);

/** Not supported by nrt-dmem (the asynchronous schedule): NRT_FAILURE. */
NRT_STATUS nrta_error_tracker_get_list(nrta_error_tracker_t *error_tracker, const nrta_error_t **list, size_t *error_count);

/** The sequence number of sequence id `seq_id` (its low 48 bits). */
#define NRTA_SEQ_GET_SEQ_NUM(seq_id) ((seq_id) & NRTA_SEQ_NUM_MASK)

/** The execution unit of sequence id `seq_id` (its high 16 bits). */
#define NRTA_SEQ_GET_XU_ID(seq_id) ((seq_id) >> 48)

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NRT_NRT_ASYNC_H */
