//! `nrt/nrt_profile.h`: device profiling, continuous profiling and the "inspect" capture of
//! system and device profiles. This library records no profiles: every call exists, so a
//! program built against the SDK links and loads, and refuses with one log line.

use std::ffi::{c_char, c_int};

use crate::types::nrt_model_t;

/// Options of continuous device profiling (opaque; from
/// `nrt_profile_continuous_options_allocate`).
#[repr(C)]
pub struct nrt_profile_continuous_options_t {
    _opaque: [u8; 0],
}

/// Options of `nrt_inspect_begin_with_options` (opaque; from `nrt_inspect_config_allocate`).
#[repr(C)]
pub struct nrt_inspect_config_t {
    _opaque: [u8; 0],
}

stubs!("profiling" {
    fn nrt_profile_start(model: *mut nrt_model_t, filename: *const c_char);
    fn nrt_profile_stop(filename: *const c_char);
    fn nrt_profile_continuous_options_allocate(options: *mut *mut nrt_profile_continuous_options_t);
    fn nrt_profile_continuous_options_free(options: *mut nrt_profile_continuous_options_t);
    fn nrt_profile_continuous_options_set_output_dir(options: *mut nrt_profile_continuous_options_t, output_dir: *const c_char);
    fn nrt_profile_continuous_start(options: *mut nrt_profile_continuous_options_t);
    fn nrt_profile_continuous_save(vnc: u32, options: *mut nrt_profile_continuous_options_t);
    fn nrt_profile_continuous_stop();
});

stubs!("inspect" {
    fn nrt_inspect_begin();
    fn nrt_inspect_stop();
    fn nrt_inspect_config_allocate(options: *mut *mut nrt_inspect_config_t);
    fn nrt_inspect_config_set_defaults(options: *mut nrt_inspect_config_t);
    fn nrt_inspect_config_free(options: *mut nrt_inspect_config_t);
    fn nrt_inspect_config_set_session_id(options: *mut nrt_inspect_config_t, session_id: c_int);
    fn nrt_inspect_config_set_output_dir(options: *mut nrt_inspect_config_t, output_dir: *const c_char);
    fn nrt_inspect_config_set_sys_trace_max_events_per_nc(options: *mut nrt_inspect_config_t, sys_trace_max_events_per_nc: u64);
    fn nrt_inspect_config_set_capture_enabled_for_nc(options: *mut nrt_inspect_config_t, nc_idx: u32, enabled: bool);
    fn nrt_inspect_config_set_capture_enabled_for_event_type_string(options: *mut nrt_inspect_config_t, event_type: *const c_char, enabled: bool);
    fn nrt_inspect_config_set_enable_inspect(options: *mut nrt_inspect_config_t, enable_inspect: bool);
    fn nrt_inspect_config_set_enable_inspect_on_fail(options: *mut nrt_inspect_config_t, enable_inspect_on_fail: bool);
    fn nrt_inspect_begin_with_options(options: *mut nrt_inspect_config_t);
    fn nrt_inspect_config_get_all_activity_types(activity_types: *mut *mut *const c_char, count: *mut usize);
    fn nrt_inspect_config_get_enabled_activity_types(options: *mut nrt_inspect_config_t, activity_types: *mut *mut *const c_char, count: *mut usize);
    fn nrt_inspect_config_free_activity_types(activity_types: *mut *const c_char, count: usize) -> void;
    fn nrt_inspect_config_set_activity(options: *mut nrt_inspect_config_t, activity_type: *const c_char, enabled: bool);
});
