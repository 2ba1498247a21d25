//! The types of `nrt/nrt.h` this subset uses, with the public header's names and values
//! (public API §2). C sees `nrt_model_t`, `nrt_tensor_t` and `nrt_tensor_set_t` as opaque.
#![allow(non_camel_case_types)]

use std::ffi::{c_int, c_void};

/// Major version of the runtime API this library implements.
pub const NRT_MAJOR_VERSION: u32 = 2;
/// Minor version of the runtime API this library implements.
pub const NRT_MINOR_VERSION: u32 = 0;

/// A loaded model (opaque; from `nrt_load`, released by `nrt_unload`).
#[repr(C)]
pub struct nrt_model_t {
    _opaque: [u8; 0],
}

/// A tensor (opaque; from `nrt_tensor_allocate` and friends, released by `nrt_tensor_free`).
pub type nrt_tensor_t = nrt_core::abi::nrt_tensor_t;

/// A container of named tensors (the inputs or outputs of one `nrt_execute`).
pub type nrt_tensor_set_t = c_void;

/// Where a tensor lives. Values are fixed by the public API.
pub type nrt_tensor_placement_t = u32;
/// Device HBM of the logical core.
pub const NRT_TENSOR_PLACEMENT_DEVICE: nrt_tensor_placement_t = 0;
/// DMA-able host memory (deprecated; refused on trn2 with NRT_RESOURCE).
pub const NRT_TENSOR_PLACEMENT_HOST: nrt_tensor_placement_t = 1;
/// Ordinary host memory.
pub const NRT_TENSOR_PLACEMENT_VIRTUAL: nrt_tensor_placement_t = 2;

/// The framework calling `nrt_init`. Values are fixed by the public API.
pub type nrt_framework_type_t = u32;
/// Invalid.
pub const NRT_FRAMEWORK_TYPE_INVALID: nrt_framework_type_t = 0;
/// Framework-less execution.
pub const NRT_FRAMEWORK_TYPE_NO_FW: nrt_framework_type_t = 1;
/// TensorFlow.
pub const NRT_FRAMEWORK_TYPE_TENSORFLOW: nrt_framework_type_t = 2;
/// PyTorch.
pub const NRT_FRAMEWORK_TYPE_PYTORCH: nrt_framework_type_t = 3;
/// MXNet.
pub const NRT_FRAMEWORK_TYPE_MXNET: nrt_framework_type_t = 4;
/// Neuron node precheck.
pub const NRT_FRAMEWORK_TYPE_PRECHECK: nrt_framework_type_t = 5;

/// Where a device tensor's memory is (`nrt_tensor_get_device_allocation_info`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct nrt_tensor_device_allocation_info_t {
    /// Device physical address of the tensor's first byte.
    pub physical_address: u64,
    /// Bytes of the tensor.
    pub size: usize,
    /// The HBM the tensor is placed on.
    pub hbm_index: c_int,
}

/// Memory of one logical core (`nrt_get_vnc_memory_stats`). Fields are only ever added at the
/// end; the size-in/size-out pair of the call keeps old and new callers compatible.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, zerocopy::IntoBytes, zerocopy::Immutable)]
pub struct nrt_vnc_memory_stats_t {
    /// Device bytes in use on the logical core (tensors, models, shared resources).
    pub bytes_used: usize,
    /// Size of the HBM the logical core allocates from by default (libnrt:
    /// `aws_hal_get_hbm_size()`). Cores that share an HBM (trn2 at LNC 1) each report all of
    /// it: what one uses, the other cannot.
    pub bytes_limit: usize,
}
