//! The host-driven ("out-of-NEFF") collectives types of `nrt/nrt.h`: a communicator, a list of
//! tensors, the reduction and the collective. This library runs no collectives
//! (`nrt_cc_global_comm_init` and the `nrta_cc_*` calls refuse); the types are declared with
//! the public header's names, values and layouts so that code written against it compiles.

use crate::types::nrt_tensor_t;

/// A prepared collective operation (opaque; from `nrta_cc_prepare`).
#[repr(C)]
pub struct nrt_cc_context_t {
    _opaque: [u8; 0],
}

/// The reduction a collective applies. Values are fixed by the public API.
pub type nrt_op_type_t = u32;
/// Sum.
pub const NRT_OP_ADD: nrt_op_type_t = 0x0;
/// Fused multiply-add.
pub const NRT_OP_FMA: nrt_op_type_t = 0x1;
/// Maximum.
pub const NRT_OP_MAX: nrt_op_type_t = 0x2;
/// Minimum.
pub const NRT_OP_MIN: nrt_op_type_t = 0x3;
/// No valid reduction.
pub const NRT_OP_INVALID: nrt_op_type_t = 0xF;

/// The collective. Values are fixed by the public API.
pub type nrt_cc_op_type_t = u32;
/// All-gather.
pub const NRT_CC_ALLGATHER: nrt_cc_op_type_t = 0;
/// All-reduce.
pub const NRT_CC_ALLREDUCE: nrt_cc_op_type_t = 1;
/// Reduce-scatter.
pub const NRT_CC_REDUCESCATTER: nrt_cc_op_type_t = 2;

/// The workers of a host-driven collective and this worker's place among them.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct nrt_cc_comm_t {
    /// The participants' ranks (`rank_n` of them).
    pub replica_group: *mut u32,
    /// This worker's rank in `replica_group`.
    pub rank: u32,
    /// Number of participants.
    pub rank_n: u32,
    /// This worker's device id among the devices of the operation.
    pub ctx_device_id: u32,
    /// Number of devices taking part.
    pub ctx_device_count: u32,
    /// The local logical core.
    pub vnc: u32,
}

/// The tensors a collective reads or writes.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct nrt_tensor_list_t {
    /// `num_tensors` tensors.
    pub tensors: *mut *mut nrt_tensor_t,
    /// Number of tensors.
    pub num_tensors: usize,
}

// The core's copy of libnrt's struct (the layout facts pin it) has this very layout.
const _: () = {
    use std::mem::{offset_of, size_of};
    type Core = nrt_core::abi::nrt_tensor_list_t;
    assert!(size_of::<nrt_tensor_list_t>() == size_of::<Core>());
    assert!(offset_of!(nrt_tensor_list_t, num_tensors) == offset_of!(Core, num_tensors));
    assert!(size_of::<nrt_cc_comm_t>() == 32 && offset_of!(nrt_cc_comm_t, vnc) == 24);
};
