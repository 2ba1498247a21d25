//! `ndl/neuron_driver_shared_tensor_batch_op.h` (public SDK): one operation of a batched
//! tensor read or write, shared by libnrt and the driver.

use std::ffi::c_void;

/// Offset of a batch operation, in bytes.
pub type nrt_tensor_batch_offset_t = u64;
/// Size of a batch operation, in bytes.
pub type nrt_tensor_batch_size_t = u64;

/// One read or write of `size` bytes at `offset` of a tensor, from or into `buffer`.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct nrt_tensor_batch_op_t {
    /// Offset into the tensor.
    pub offset: nrt_tensor_batch_offset_t,
    /// Bytes.
    pub size: nrt_tensor_batch_size_t,
    /// Host buffer of `size` bytes.
    pub buffer: *mut c_void,
}

const _: () = assert!(std::mem::size_of::<nrt_tensor_batch_op_t>() == 24);
