/*
 * nrt/ndebug_stream.h -- GENERATED, do not edit.
 *
 * The per-logical-core stream of debug events (ndebug_stream.h): event layouts and the client
 * calls. Declared as the SDK declares them; this library emits no debug events and refuses
 * every call. Generated from ffi/src/debug_stream.rs by ffi/tests/headers.rs; regenerate with
 * `cargo xtask headers`.
 */
#ifndef NRT_DMEM_NRT_NDEBUG_STREAM_H
#define NRT_DMEM_NRT_NDEBUG_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "nrt/nrt_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** What an event's payload is. Values are fixed by the public API. */
typedef enum ndebug_stream_event_type {
    /** No event. */
    NDEBUG_STREAM_EVENT_TYPE_INVALID = 0,
    /** A tensor read by the device (`ndebug_stream_payload_debug_tensor_read_t`). */
    NDEBUG_STREAM_EVENT_TYPE_DEBUG_TENSOR_READ = 1,
} ndebug_stream_event_type_t;

/** The head of every event. */
typedef struct ndebug_stream_event_header {
    /** Bytes of the payload that follows. */
    uint64_t data_size;
    /** An `NDEBUG_STREAM_EVENT_TYPE_*`. */
    uint32_t type;
    /** Reserved. */
    char reserved[52];
} ndebug_stream_event_header_t;

/**
 * The payload of `NDEBUG_STREAM_EVENT_TYPE_DEBUG_TENSOR_READ`: where the tensor was read and
 * its bytes.
 */
typedef struct ndebug_stream_payload_debug_tensor_read {
    /** Text that heads the event. */
    char prefix[512];
    /** The logical core that read it. */
    uint32_t logical_nc_id;
    /** The pipe it was read on. */
    uint32_t pipe;
    /** Element type, as text. */
    char tensor_dtype[16];
    /** Shape, up to 8 dimensions. */
    uint64_t tensor_shape[8];
    /** Bytes in `tensor_data`. */
    uint64_t tensor_data_size;
    /** Reserved. */
    char reserved0[416];
    /** The tensor's bytes. */
    char tensor_data[];
} ndebug_stream_payload_debug_tensor_read_t;

/** Not supported by nrt-dmem (the debug stream): NRT_FAILURE. */
NRT_STATUS nrt_debug_client_connect(int logical_nc_idx, int *stream_fd);

/** Not supported by nrt-dmem (the debug stream): does nothing. */
void nrt_debug_client_connect_close(int stream_fd);

/** Not supported by nrt-dmem (the debug stream): NRT_FAILURE. */
NRT_STATUS nrt_debug_client_read_one_event(int stream_fd, ndebug_stream_event_header_t *header, void **payload);

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NRT_NDEBUG_STREAM_H */
