/*
 * nrt/nrt_async_sendrecv.h -- GENERATED, do not edit.
 *
 * Asynchronous tensor send and receive between logical cores of different hosts
 * (nrt_async_sendrecv.h). Declared as the SDK declares them; this library has no network
 * transport and refuses every call. Generated from ffi/src/async_sendrecv.rs by
 * ffi/tests/headers.rs; regenerate with `cargo xtask headers`.
 */
#ifndef NRT_DMEM_NRT_NRT_ASYNC_SENDRECV_H
#define NRT_DMEM_NRT_NRT_ASYNC_SENDRECV_H

#include <stdbool.h>
#include <stddef.h>
#include "nrt/nrt_status.h"
#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A send or receive communicator (opaque; from `nrt_async_sendrecv_connect` / `_accept`). */
typedef struct nrt_async_sendrecv_comm nrt_async_sendrecv_comm_t;

/**
 * A send or receive in flight (opaque; from `nrt_async_sendrecv_send_tensor` /
 * `_recv_tensor`).
 */
typedef struct nrt_async_sendrecv_request nrt_async_sendrecv_request_t;

/** Not supported by nrt-dmem (asynchronous send/receive): NRT_FAILURE. */
NRT_STATUS nrt_async_sendrecv_get_max_num_communicators_per_lnc(int *num);

/** Not supported by nrt-dmem (asynchronous send/receive): NRT_FAILURE. */
NRT_STATUS nrt_async_sendrecv_get_max_num_pending_request(int *num);

/** Not supported by nrt-dmem (asynchronous send/receive): NRT_FAILURE. */
NRT_STATUS nrt_async_sendrecv_init(int lnc);

/** Not supported by nrt-dmem (asynchronous send/receive): NRT_FAILURE. */
NRT_STATUS nrt_async_sendrecv_close(int lnc);

/** Not supported by nrt-dmem (asynchronous send/receive): NRT_FAILURE. */
NRT_STATUS nrt_async_sendrecv_connect(const char *peer_ip, int peer_lnc, int lnc, nrt_async_sendrecv_comm_t **send_comm);

/** Not supported by nrt-dmem (asynchronous send/receive): NRT_FAILURE. */
NRT_STATUS nrt_async_sendrecv_accept(const char *peer_ip, int peer_lnc, int lnc, nrt_async_sendrecv_comm_t **recv_comm);

/** Not supported by nrt-dmem (asynchronous send/receive): NRT_FAILURE. */
NRT_STATUS nrt_async_sendrecv_test_comm(nrt_async_sendrecv_comm_t *comm, bool *done);

/** Not supported by nrt-dmem (asynchronous send/receive): NRT_FAILURE. */
NRT_STATUS nrt_async_sendrecv_send_tensor(nrt_tensor_t *tensor, size_t offset, size_t length, nrt_async_sendrecv_comm_t *send_comm, nrt_async_sendrecv_request_t **request);

/** Not supported by nrt-dmem (asynchronous send/receive): NRT_FAILURE. */
NRT_STATUS nrt_async_sendrecv_recv_tensor(nrt_tensor_t *tensor, size_t offset, size_t length, nrt_async_sendrecv_comm_t *recv_comm, nrt_async_sendrecv_request_t **request);

/** Not supported by nrt-dmem (asynchronous send/receive): NRT_FAILURE. */
NRT_STATUS nrt_async_sendrecv_test_request(nrt_async_sendrecv_request_t *request, bool *done, size_t *size);

/** Not supported by nrt-dmem (asynchronous send/receive): NRT_FAILURE. */
NRT_STATUS nrt_async_sendrecv_flush(int lnc);

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NRT_NRT_ASYNC_SENDRECV_H */
