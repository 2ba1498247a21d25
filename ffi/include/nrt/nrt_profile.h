/*
 * nrt/nrt_profile.h -- GENERATED, do not edit.
 *
 * Device profiling, continuous profiling and the inspect capture (nrt_profile.h). Declared as
 * the SDK declares them; this library records no profiles and refuses every call. Generated
 * from ffi/src/profile.rs by ffi/tests/headers.rs; regenerate with `cargo xtask headers`.
 */
#ifndef NRT_DMEM_NRT_NRT_PROFILE_H
#define NRT_DMEM_NRT_NRT_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "nrt/nrt_status.h"
#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Options of continuous device profiling (opaque; from
 * `nrt_profile_continuous_options_allocate`).
 */
typedef struct nrt_profile_continuous_options nrt_profile_continuous_options_t;

/** Options of `nrt_inspect_begin_with_options` (opaque; from `nrt_inspect_config_allocate`). */
typedef struct nrt_inspect_config nrt_inspect_config_t;

/** Not supported by nrt-dmem (profiling): NRT_FAILURE. */
NRT_STATUS nrt_profile_start(nrt_model_t *model, const char *filename);

/** Not supported by nrt-dmem (profiling): NRT_FAILURE. */
NRT_STATUS nrt_profile_stop(const char *filename);

/** Not supported by nrt-dmem (profiling): NRT_FAILURE. */
NRT_STATUS nrt_profile_continuous_options_allocate(nrt_profile_continuous_options_t **options);

/** Not supported by nrt-dmem (profiling): NRT_FAILURE. */
NRT_STATUS nrt_profile_continuous_options_free(nrt_profile_continuous_options_t *options);

/** Not supported by nrt-dmem (profiling): NRT_FAILURE. */
NRT_STATUS nrt_profile_continuous_options_set_output_dir(nrt_profile_continuous_options_t *options, const char *output_dir);

/** Not supported by nrt-dmem (profiling): NRT_FAILURE. */
NRT_STATUS nrt_profile_continuous_start(nrt_profile_continuous_options_t *options);

/** Not supported by nrt-dmem (profiling): NRT_FAILURE. */
NRT_STATUS nrt_profile_continuous_save(uint32_t vnc, nrt_profile_continuous_options_t *options);

/** Not supported by nrt-dmem (profiling): NRT_FAILURE. */
NRT_STATUS nrt_profile_continuous_stop(void);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_begin(void);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_stop(void);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_config_allocate(nrt_inspect_config_t **options);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_config_set_defaults(nrt_inspect_config_t *options);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_config_free(nrt_inspect_config_t *options);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_config_set_session_id(nrt_inspect_config_t *options, int session_id);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_config_set_output_dir(nrt_inspect_config_t *options, const char *output_dir);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_config_set_sys_trace_max_events_per_nc(nrt_inspect_config_t *options, uint64_t sys_trace_max_events_per_nc);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_config_set_capture_enabled_for_nc(nrt_inspect_config_t *options, uint32_t nc_idx, bool enabled);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_config_set_capture_enabled_for_event_type_string(nrt_inspect_config_t *options, const char *event_type, bool enabled);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_config_set_enable_inspect(nrt_inspect_config_t *options, bool enable_inspect);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_config_set_enable_inspect_on_fail(nrt_inspect_config_t *options, bool enable_inspect_on_fail);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_begin_with_options(nrt_inspect_config_t *options);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_config_get_all_activity_types(const char ***activity_types, size_t *count);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_config_get_enabled_activity_types(nrt_inspect_config_t *options, const char ***activity_types, size_t *count);

/** Not supported by nrt-dmem (inspect): does nothing. */
void nrt_inspect_config_free_activity_types(const char **activity_types, size_t count);

/** Not supported by nrt-dmem (inspect): NRT_FAILURE. */
NRT_STATUS nrt_inspect_config_set_activity(nrt_inspect_config_t *options, const char *activity_type, bool enabled);

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NRT_NRT_PROFILE_H */
