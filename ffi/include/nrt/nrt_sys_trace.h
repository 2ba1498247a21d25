/*
 * nrt/nrt_sys_trace.h -- GENERATED, do not edit.
 *
 * System trace capture and fetch (nrt_sys_trace.h). Declared as the SDK declares them; this
 * library captures no trace and refuses every call. Generated from ffi/src/sys_trace.rs by
 * ffi/tests/headers.rs; regenerate with `cargo xtask headers`.
 */
#ifndef NRT_DMEM_NRT_NRT_SYS_TRACE_H
#define NRT_DMEM_NRT_NRT_SYS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "nrt/nrt_status.h"
#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Options of a system trace capture (opaque; from `nrt_sys_trace_config_allocate`). */
typedef struct nrt_sys_trace_config nrt_sys_trace_config_t;

/**
 * Options of `nrt_sys_trace_fetch_events` (opaque; from
 * `nrt_sys_trace_fetch_options_allocate`).
 */
typedef struct nrt_sys_trace_fetch_options nrt_sys_trace_fetch_options_t;

/** Not supported by nrt-dmem (sys_trace): NRT_FAILURE. */
NRT_STATUS nrt_sys_trace_config_allocate(nrt_sys_trace_config_t **options);

/** Not supported by nrt-dmem (sys_trace): does nothing. */
void nrt_sys_trace_config_set_defaults(nrt_sys_trace_config_t *options);

/** Not supported by nrt-dmem (sys_trace): does nothing. */
void nrt_sys_trace_config_free(nrt_sys_trace_config_t *options);

/** Not supported by nrt-dmem (sys_trace): does nothing. */
void nrt_sys_trace_config_set_max_events_per_nc(nrt_sys_trace_config_t *options, uint64_t max_events_per_nc);

/** Not supported by nrt-dmem (sys_trace): does nothing. */
void nrt_sys_trace_config_set_capture_enabled_for_nc(nrt_sys_trace_config_t *options, uint32_t nc_idx, bool enabled);

/** Not supported by nrt-dmem (sys_trace): NRT_FAILURE. */
NRT_STATUS nrt_sys_trace_config_set_capture_enabled_for_event_type(nrt_sys_trace_config_t *options, const char *event_type, bool enabled);

/** Not supported by nrt-dmem (sys_trace): NRT_FAILURE. */
NRT_STATUS nrt_sys_trace_get_event_types(const char ***event_types, size_t *count);

/** Not supported by nrt-dmem (sys_trace): does nothing. */
void nrt_sys_trace_free_event_types(const char **event_types, size_t count);

/** Not supported by nrt-dmem (sys_trace): NRT_FAILURE. */
NRT_STATUS nrt_sys_trace_config_get_enabled_event_types(nrt_sys_trace_config_t *options, const char ***event_types, size_t *count);

/** Not supported by nrt-dmem (sys_trace): NRT_FAILURE. */
NRT_STATUS nrt_sys_trace_start(nrt_sys_trace_config_t *options);

/** Not supported by nrt-dmem (sys_trace): NRT_FAILURE. */
NRT_STATUS nrt_sys_trace_stop(void);

/** Not supported by nrt-dmem (sys_trace): NRT_FAILURE. */
NRT_STATUS nrt_sys_trace_fetch_options_allocate(nrt_sys_trace_fetch_options_t **options);

/** Not supported by nrt-dmem (sys_trace): does nothing. */
void nrt_sys_trace_fetch_options_set_defaults(nrt_sys_trace_fetch_options_t *options);

/** Not supported by nrt-dmem (sys_trace): does nothing. */
void nrt_sys_trace_fetch_options_free(nrt_sys_trace_fetch_options_t *options);

/** Not supported by nrt-dmem (sys_trace): does nothing. */
void nrt_sys_trace_fetch_options_set_max_events_per_nc(nrt_sys_trace_fetch_options_t *options, uint64_t max_events_per_nc);

/** Not supported by nrt-dmem (sys_trace): does nothing. */
void nrt_sys_trace_fetch_options_set_nc_idx(nrt_sys_trace_fetch_options_t *options, uint64_t nc_idx);

/** Not supported by nrt-dmem (sys_trace): NRT_FAILURE. */
NRT_STATUS nrt_sys_trace_fetch_events(char **buffer, size_t *written_size, const nrt_sys_trace_fetch_options_t *options);

/** Not supported by nrt-dmem (sys_trace): does nothing. */
void nrt_sys_trace_buffer_free(char *buffer);

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NRT_NRT_SYS_TRACE_H */
