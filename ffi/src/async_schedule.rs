//! `nrt/nrt_async.h`: the asynchronous schedule (`nrta_*`, version node `NRT_3.0.0`): tensor
//! reads, writes, copies, executions and collectives queued on per-core execution units,
//! tracked by sequence ids. Executions here are synchronous, so this library has no queue:
//! every call exists, so a program built against the SDK links and loads, and refuses with
//! one log line.
//!
//! The signatures are the SDK header's. libnrt 2.31's own exports of the first three also take
//! a logical core index before `queue`; a refusing stub reads none of its arguments, so either
//! calling convention gets the same refusal.

use std::ffi::{c_int, c_void};

use crate::cc::{
    nrt_cc_comm_t, nrt_cc_context_t, nrt_cc_op_type_t, nrt_op_type_t, nrt_tensor_list_t,
};
use crate::info::nrt_dtype_t;
use crate::types::{nrt_model_t, nrt_tensor_set_t, nrt_tensor_t};

/// An execution unit of a logical core. Values are fixed by the public API; new units are
/// only ever added before `NRTA_XU_TYPE_NUM`.
pub type nrta_xu_t = u32;
/// Tensor reads.
pub const NRTA_XU_TENSOR_READ: nrta_xu_t = 0;
/// Tensor writes.
pub const NRTA_XU_TENSOR_WRITE: nrta_xu_t = 1;
/// Other tensor operations (copies).
pub const NRTA_XU_TENSOR_OP: nrta_xu_t = 2;
/// Model executions.
pub const NRTA_XU_COMPUTE: nrta_xu_t = 3;
/// Collectives.
pub const NRTA_XU_COLLECTIVES: nrta_xu_t = 4;
/// Number of execution units.
pub const NRTA_XU_TYPE_NUM: nrta_xu_t = 5;

/// A sequence id: the execution unit in the high 16 bits, a strictly increasing sequence number
/// in the low 48 (`NRTA_SEQ_GET_XU_ID`, `NRTA_SEQ_GET_SEQ_NUM`).
pub type nrta_seq_t = u64;
/// An execution unit id (the high 16 bits of a sequence id).
pub type nrta_xu_id_t = u16;

/// Largest sequence number (48 bits).
pub const NRTA_SEQ_NUM_MAX: u64 = 0xFFFF_FFFF_FFFF;
/// The sequence-number bits of a sequence id.
pub const NRTA_SEQ_NUM_MASK: u64 = 0xFFFF_FFFF_FFFF;

/// A failed request: its sequence id and status (an `NRT_STATUS`, stored as 64 bits so that
/// every compiler lays the struct out alike).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct nrta_error_t {
    /// The request.
    pub seq_id: nrta_seq_t,
    /// Its `NRT_STATUS`.
    pub error_code: u64,
}

const _: () = assert!(std::mem::size_of::<nrta_error_t>() == 16);

/// The errors of the requests scheduled with it (opaque; from `nrta_error_tracker_create`).
#[repr(C)]
pub struct nrta_error_tracker_t {
    _opaque: [u8; 0],
}

stubs!("the asynchronous schedule" {
    fn nrta_tensor_write(tensor: *mut nrt_tensor_t, buf: *const c_void, offset: u64, size: u64, queue: c_int, err: *mut nrta_error_tracker_t, req_sequence: *mut nrta_seq_t);
    fn nrta_tensor_read(buf: *mut c_void, tensor: *mut nrt_tensor_t, offset: u64, size: u64, queue: c_int, err: *mut nrta_error_tracker_t, req_sequence: *mut nrta_seq_t);
    fn nrta_tensor_copy(src: *mut nrt_tensor_t, src_offset: u64, dst: *mut nrt_tensor_t, dst_offset: u64, size: u64, queue: c_int, err: *mut nrta_error_tracker_t, req_sequence: *mut nrta_seq_t);
    fn nrta_execute_schedule(model: *mut nrt_model_t, input: *const nrt_tensor_set_t, output: *mut nrt_tensor_set_t, queue: c_int, err: *mut nrta_error_tracker_t, req_sequence: *mut nrta_seq_t);
    fn nrta_cc_prepare(comm: *mut nrt_cc_comm_t, input: *mut nrt_tensor_list_t, output: *mut nrt_tensor_list_t, dtype: nrt_dtype_t, op: nrt_op_type_t, cc_op: nrt_cc_op_type_t, cc_ctx: *mut *mut nrt_cc_context_t);
    fn nrta_cc_schedule(cc_ctx: *mut *mut nrt_cc_context_t, queue: c_int, err: *mut nrta_error_tracker_t, req_sequence: *mut nrta_seq_t);
    fn nrta_is_completed(seq: nrta_seq_t, is_completed: *mut bool);
    fn nrta_get_sequence(lnc: u32, xu: nrta_xu_t, queue: c_int, seq: *mut nrta_seq_t);
    fn nrta_get_completion_handle(seq: nrta_seq_t, fd: *mut c_int);
    fn nrta_error_tracker_create(lnc_idx: u32, error_tracker: *mut *mut nrta_error_tracker_t);
    fn nrta_error_tracker_destroy(error_tracker: *mut nrta_error_tracker_t) -> void;
    fn nrta_error_tracker_get_list(error_tracker: *mut nrta_error_tracker_t, list: *mut *const nrta_error_t, error_count: *mut usize);
});
