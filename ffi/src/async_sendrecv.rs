//! `nrt/nrt_async_sendrecv.h`: asynchronous tensor send and receive between logical cores of
//! different hosts. This library has no network transport: every call exists, so a program
//! built against the SDK links and loads, and refuses with one log line.

use std::ffi::{c_char, c_int};

use crate::types::nrt_tensor_t;

/// A send or receive communicator (opaque; from `nrt_async_sendrecv_connect` / `_accept`).
#[repr(C)]
pub struct nrt_async_sendrecv_comm_t {
    _opaque: [u8; 0],
}

/// A send or receive in flight (opaque; from `nrt_async_sendrecv_send_tensor` /
/// `_recv_tensor`).
#[repr(C)]
pub struct nrt_async_sendrecv_request_t {
    _opaque: [u8; 0],
}

stubs!("asynchronous send/receive" {
    fn nrt_async_sendrecv_get_max_num_communicators_per_lnc(num: *mut c_int);
    fn nrt_async_sendrecv_get_max_num_pending_request(num: *mut c_int);
    fn nrt_async_sendrecv_init(lnc: c_int);
    fn nrt_async_sendrecv_close(lnc: c_int);
    fn nrt_async_sendrecv_connect(peer_ip: *const c_char, peer_lnc: c_int, lnc: c_int, send_comm: *mut *mut nrt_async_sendrecv_comm_t);
    fn nrt_async_sendrecv_accept(peer_ip: *const c_char, peer_lnc: c_int, lnc: c_int, recv_comm: *mut *mut nrt_async_sendrecv_comm_t);
    fn nrt_async_sendrecv_test_comm(comm: *mut nrt_async_sendrecv_comm_t, done: *mut bool);
    fn nrt_async_sendrecv_send_tensor(tensor: *mut nrt_tensor_t, offset: usize, length: usize, send_comm: *mut nrt_async_sendrecv_comm_t, request: *mut *mut nrt_async_sendrecv_request_t);
    fn nrt_async_sendrecv_recv_tensor(tensor: *mut nrt_tensor_t, offset: usize, length: usize, recv_comm: *mut nrt_async_sendrecv_comm_t, request: *mut *mut nrt_async_sendrecv_request_t);
    fn nrt_async_sendrecv_test_request(request: *mut nrt_async_sendrecv_request_t, done: *mut bool, size: *mut usize);
    fn nrt_async_sendrecv_flush(lnc: c_int);
});
