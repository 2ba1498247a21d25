//! `nrt/nrt_sys_trace.h`: capture of system trace events into per-core ring buffers and their
//! fetch as JSON. This library captures no trace: every call exists, so a program built
//! against the SDK links and loads, and refuses with one log line (the `void` setters return
//! nothing).

use std::ffi::c_char;

/// Options of a system trace capture (opaque; from `nrt_sys_trace_config_allocate`).
#[repr(C)]
pub struct nrt_sys_trace_config_t {
    _opaque: [u8; 0],
}

/// Options of `nrt_sys_trace_fetch_events` (opaque; from
/// `nrt_sys_trace_fetch_options_allocate`).
#[repr(C)]
pub struct nrt_sys_trace_fetch_options_t {
    _opaque: [u8; 0],
}

stubs!("sys_trace" {
    fn nrt_sys_trace_config_allocate(options: *mut *mut nrt_sys_trace_config_t);
    fn nrt_sys_trace_config_set_defaults(options: *mut nrt_sys_trace_config_t) -> void;
    fn nrt_sys_trace_config_free(options: *mut nrt_sys_trace_config_t) -> void;
    fn nrt_sys_trace_config_set_max_events_per_nc(options: *mut nrt_sys_trace_config_t, max_events_per_nc: u64) -> void;
    fn nrt_sys_trace_config_set_capture_enabled_for_nc(options: *mut nrt_sys_trace_config_t, nc_idx: u32, enabled: bool) -> void;
    fn nrt_sys_trace_config_set_capture_enabled_for_event_type(options: *mut nrt_sys_trace_config_t, event_type: *const c_char, enabled: bool);
    fn nrt_sys_trace_get_event_types(event_types: *mut *mut *const c_char, count: *mut usize);
    fn nrt_sys_trace_free_event_types(event_types: *mut *const c_char, count: usize) -> void;
    fn nrt_sys_trace_config_get_enabled_event_types(options: *mut nrt_sys_trace_config_t, event_types: *mut *mut *const c_char, count: *mut usize);
    fn nrt_sys_trace_start(options: *mut nrt_sys_trace_config_t);
    fn nrt_sys_trace_stop();
    fn nrt_sys_trace_fetch_options_allocate(options: *mut *mut nrt_sys_trace_fetch_options_t);
    fn nrt_sys_trace_fetch_options_set_defaults(options: *mut nrt_sys_trace_fetch_options_t) -> void;
    fn nrt_sys_trace_fetch_options_free(options: *mut nrt_sys_trace_fetch_options_t) -> void;
    fn nrt_sys_trace_fetch_options_set_max_events_per_nc(options: *mut nrt_sys_trace_fetch_options_t, max_events_per_nc: u64) -> void;
    fn nrt_sys_trace_fetch_options_set_nc_idx(options: *mut nrt_sys_trace_fetch_options_t, nc_idx: u64) -> void;
    fn nrt_sys_trace_fetch_events(buffer: *mut *mut c_char, written_size: *mut usize, options: *const nrt_sys_trace_fetch_options_t);
    fn nrt_sys_trace_buffer_free(buffer: *mut c_char) -> void;
});
