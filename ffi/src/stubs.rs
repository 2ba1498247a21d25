//! libnrt 2.31's other exports — profiling, inspect, sys_trace, the debug stream,
//! asynchronous send/receive, the `nrta_*` asynchronous schedule (version node `NRT_3.0.0`) and
//! the `nec_*` collectives bridge — as entry points that exist and refuse. A program built
//! against AWS's library therefore loads and links against this one, also with
//! `LD_BIND_NOW=1`; each call logs one line naming what is missing and returns `NRT_FAILURE`
//! (the `void` ones return nothing; `int` ones -1, `bool` ones false, `size_t` ones 0).
//!
//! Their declarations stay in AWS's headers (`nrt_profile.h`, `nrt_sys_trace.h`,
//! `ndebug_stream.h`, `nrt_async.h`, `nrt_async_sendrecv.h`, `nec.h`), which this library does
//! not ship: their types belong to subsystems it does not implement. Pointer parameters are
//! `void *` here (never dereferenced); the ABI of a call does not depend on the pointee types.
//! The list is libnrt 2.31.24's export table (`ffi/libnrt-2.31-exports.txt`, checked by
//! `tests/tests/dist.rs`), plus the four `nrta_*` functions that the SDK's current
//! `nrt_async.h` declares.

use std::ffi::{c_char, c_int, c_void};

use crate::status::NRT_STATUS;
use crate::unsupported::unsupported;

/// Defines unsupported entry points: `fn name(args);` returns the status of
/// [`unsupported`], `fn name(args) -> void;` returns nothing, `fn name(args) -> T = v;`
/// returns `v`. Every one logs one line.
macro_rules! stubs {
    ($what:literal {}) => {};
    ($what:literal { fn $name:ident($($a:ident: $t:ty),* $(,)?); $($rest:tt)* }) => {
        #[doc = concat!("`", stringify!($name), "`: not supported by nrt-dmem (", $what, "): NRT_FAILURE.")]
        #[no_mangle]
        pub extern "C" fn $name($($a: $t),*) -> NRT_STATUS {
            let _ = ($($a,)*);
            unsupported(stringify!($name), $what)
        }
        stubs!($what { $($rest)* });
    };
    ($what:literal { fn $name:ident($($a:ident: $t:ty),* $(,)?) -> void; $($rest:tt)* }) => {
        #[doc = concat!("`", stringify!($name), "`: not supported by nrt-dmem (", $what, "): does nothing.")]
        #[no_mangle]
        pub extern "C" fn $name($($a: $t),*) {
            let _ = ($($a,)*);
            unsupported(stringify!($name), $what);
        }
        stubs!($what { $($rest)* });
    };
    ($what:literal { fn $name:ident($($a:ident: $t:ty),* $(,)?) -> $r:ty = $v:expr; $($rest:tt)* }) => {
        #[doc = concat!("`", stringify!($name), "`: not supported by nrt-dmem (", $what, "): returns `", stringify!($v), "`.")]
        #[no_mangle]
        pub extern "C" fn $name($($a: $t),*) -> $r {
            let _ = ($($a,)*);
            unsupported(stringify!($name), $what);
            $v
        }
        stubs!($what { $($rest)* });
    };
}

/// An opaque pointer parameter.
type P = *mut c_void;
/// A string parameter.
type S = *const c_char;

stubs!("profiling" {
    fn nrt_profile_start(model: P, filename: S);
    fn nrt_profile_stop(filename: S);
    fn nrt_profile_session_start(vnc: i32);
    fn nrt_profile_session_stop(vnc: i32, session_id: *mut u64);
    fn nrt_profile_session_serialize(session_id: u64, filename: S);
    fn nrt_profile_session_drop(session_id: u64);
    fn nrt_profile_session_drop_all(vnc: i32);
    fn nrt_profile_continuous_options_allocate(options: *mut P);
    fn nrt_profile_continuous_options_free(options: P);
    fn nrt_profile_continuous_options_set_output_dir(options: P, output_dir: S);
    fn nrt_profile_continuous_start(options: P);
    fn nrt_profile_continuous_save(vnc: u32, options: P);
    fn nrt_profile_continuous_stop();
});

stubs!("inspect" {
    fn nrt_inspect_begin();
    fn nrt_inspect_begin_with_options(options: P);
    fn nrt_inspect_stop();
    fn nrt_inspect_get_instance_output_dir(output_dir: S, instance_dir_buf: *mut c_char, buf_size: usize);
    fn nrt_inspect_config_allocate(options: *mut P);
    fn nrt_inspect_config_free(options: P);
    fn nrt_inspect_config_set_defaults(options: P);
    fn nrt_inspect_config_set_output_dir(options: P, output_dir: S);
    fn nrt_inspect_config_set_session_id(options: P, session_id: c_int);
    fn nrt_inspect_config_set_activity(options: P, activity_type: S, enabled: bool);
    fn nrt_inspect_config_set_capture_enabled_for_nc(options: P, nc_idx: u32, enabled: bool);
    fn nrt_inspect_config_set_capture_enabled_for_event_type_string(options: P, event_type: S, enabled: bool);
    fn nrt_inspect_config_set_enable_inspect(options: P, enable_inspect: bool);
    fn nrt_inspect_config_set_enable_inspect_on_fail(options: P, enable_inspect_on_fail: bool);
    fn nrt_inspect_config_set_inspect_device_profile_mode(options: P, device_profile_mode: u32);
    fn nrt_inspect_config_set_sys_trace_max_events_per_nc(options: P, max_events_per_nc: u64);
    fn nrt_inspect_config_get_all_activity_types(activity_types: *mut *mut S, count: *mut usize);
    fn nrt_inspect_config_get_enabled_activity_types(options: P, activity_types: *mut *mut S, count: *mut usize);
    fn nrt_inspect_config_free_activity_types(activity_types: *mut S, count: usize) -> void;
});

stubs!("sys_trace" {
    fn nrt_sys_trace_start(options: P);
    fn nrt_sys_trace_stop();
    fn nrt_sys_trace_fetch_events(buffer: *mut *mut c_char, written_size: *mut usize, options: P);
    fn nrt_sys_trace_buffer_free(buffer: *mut c_char) -> void;
    fn nrt_sys_trace_get_event_types(event_types: *mut *mut S, count: *mut usize);
    fn nrt_sys_trace_free_event_types(event_types: *mut S, count: usize) -> void;
    fn nrt_sys_trace_config_allocate(options: *mut P);
    fn nrt_sys_trace_config_free(options: P) -> void;
    fn nrt_sys_trace_config_set_defaults(options: P) -> void;
    fn nrt_sys_trace_config_set_max_events_per_nc(options: P, max_events_per_nc: u64) -> void;
    fn nrt_sys_trace_config_set_capture_enabled_for_nc(options: P, nc_idx: u32, enabled: bool) -> void;
    fn nrt_sys_trace_config_set_capture_enabled_for_event_type(options: P, event_type: S, enabled: bool);
    fn nrt_sys_trace_config_get_enabled_event_types(options: P, event_types: *mut *mut S, count: *mut usize);
    fn nrt_sys_trace_fetch_options_allocate(options: *mut P);
    fn nrt_sys_trace_fetch_options_free(options: P) -> void;
    fn nrt_sys_trace_fetch_options_set_defaults(options: P) -> void;
    fn nrt_sys_trace_fetch_options_set_max_events_per_nc(options: P, max_events_per_nc: u64) -> void;
    fn nrt_sys_trace_fetch_options_set_nc_idx(options: P, nc_idx: u64) -> void;
});

stubs!("the debug stream" {
    fn nrt_debug_client_connect(logical_nc_idx: i32, stream_fd: *mut c_int);
    fn nrt_debug_client_connect_close(stream_fd: c_int) -> void;
    fn nrt_debug_client_read_one_event(stream_fd: c_int, header: P, payload: *mut P);
});

stubs!("asynchronous send/receive" {
    fn nrt_async_sendrecv_get_max_num_communicators_per_lnc(num: *mut c_int);
    fn nrt_async_sendrecv_get_max_num_pending_request(num: *mut c_int);
    fn nrt_async_sendrecv_init(lnc: c_int);
    fn nrt_async_sendrecv_close(lnc: c_int);
    fn nrt_async_sendrecv_connect(peer_ip: S, peer_lnc: c_int, lnc: c_int, send_comm: *mut P);
    fn nrt_async_sendrecv_accept(peer_ip: S, peer_lnc: c_int, lnc: c_int, recv_comm: *mut P);
    fn nrt_async_sendrecv_test_comm(comm: P, done: *mut bool);
    fn nrt_async_sendrecv_send_tensor(tensor: P, offset: usize, length: usize, send_comm: P, request: *mut P);
    fn nrt_async_sendrecv_recv_tensor(tensor: P, offset: usize, length: usize, recv_comm: P, request: *mut P);
    fn nrt_async_sendrecv_test_request(request: P, done: *mut bool, size: *mut usize);
    fn nrt_async_sendrecv_flush(lnc: c_int);
});

// The NRT_3.0.0 node: libnrt 2.31 exports the first eight; the SDK's current nrt_async.h
// also declares the last four.
stubs!("the asynchronous schedule" {
    fn nrta_tensor_write(tensor: P, buf: *const c_void, offset: u64, size: u64, lnc_idx: c_int, queue: c_int, err: P, req_sequence: *mut u64);
    fn nrta_tensor_read(buf: P, tensor: P, offset: u64, size: u64, lnc_idx: c_int, queue: c_int, err: P, req_sequence: *mut u64);
    fn nrta_tensor_copy(src: P, src_offset: u64, dst: P, dst_offset: u64, size: u64, lnc_idx: c_int, queue: c_int, err: P, req_sequence: *mut u64);
    fn nrta_execute_schedule(model: P, input: *const c_void, output: P, queue: c_int, err: P, req_sequence: *mut u64);
    fn nrta_cc_prepare(comm: P, input: P, output: P, dtype: u32, op: u32, cc_op: u32, cc_ctx: *mut P);
    fn nrta_cc_schedule(cc_ctx: *mut P, queue: c_int, err: P, req_sequence: *mut u64);
    fn nrta_is_completed(seq: u64, is_completed: *mut bool);
    fn nrta_get_sequence(lnc: u32, xu: u32, queue: c_int, seq: *mut u64);
    fn nrta_get_completion_handle(seq: u64, fd: *mut c_int);
    fn nrta_error_tracker_create(lnc_idx: u32, error_tracker: *mut P);
    fn nrta_error_tracker_destroy(error_tracker: P) -> void;
    fn nrta_error_tracker_get_list(error_tracker: P, list: *mut P, error_count: *mut usize);
});

stubs!("the collectives bridge" {
    fn nec_inc_semaphore(sem_inc_addr: *mut u32, val: u32) -> void;
    fn nec_get_device_count(available_devices_array: *mut c_int, array_size: u32) -> c_int = -1;
    fn nec_get_device_pci_bdf(neuron_dev: c_int, domain: *mut u32, bus_num: *mut u32, pci_slot: *mut u8, dev_func: *mut u8) -> c_int = -1;
    fn nec_get_virtual_core_size(virtual_core_size: *mut u32);
    fn nec_build_port_and_rid_map(local_nec_dev_id: c_int, mla_indexes: *mut c_int, host_device_ids: *mut c_int, count: c_int);
    fn nec_is_mla_available(local_nec_dev_id: c_int, mla_idx: c_int) -> bool = false;
    fn nec_mla_idx_to_rid(local_nec_dev_id: c_int, mla_idx: c_int) -> c_int = -1;
    fn nec_rid_to_mla_idx(local_nec_dev_id: c_int, rid: c_int) -> c_int = -1;
    fn nec_get_peer_mla_idx(local_nec_dev_id: c_int, mla_idx: c_int, port: c_int) -> c_int = -1;
    fn nec_get_p2p_pod_peer_node(nec_dev_id: u32, node: c_int, port_distance: u32, peer_node: *mut c_int) -> c_int = -1;
    fn nec_pod_node_can_access_peer_node(pod_type: u32, local_rid: u32, local_node_id: u32, remote_rid: u32, remote_node_id: u32, can_access_peer: *mut c_int);
    fn nec_ndl_printk(str: *mut c_char, size: u32, action: u32) -> void;
    fn nec_get_dynamic_send_size_bytes(dyn_input: P, data_type_sz: usize, dst_rank: c_int, rank_n: c_int) -> usize = 0;
    fn nec_get_dynamic_send_offset_bytes(dyn_input: P, data_type_sz: usize, dst_rank: c_int, rank_n: c_int) -> usize = 0;
    fn nec_get_dynamic_recv_offset_bytes(dyn_input: P, data_type_sz: usize, src_rank: c_int, rank_n: c_int) -> usize = 0;
    fn nec_set_recv_size_bytes(dyn_input: P, recv_size_bytes: usize, data_type_sz: usize, src_rank: c_int, rank_n: c_int) -> void;
});
