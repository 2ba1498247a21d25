//! `nrt/ndebug_stream.h`: the per-logical-core stream of debug events (device prints, tensor
//! reads at breakpoints) a client connects to and polls. This library emits no debug events:
//! the calls exist, so a program built against the SDK links and loads, and refuse with one
//! log line. The event structs keep the SDK's layouts (64-byte header, 1024-byte tensor-read
//! payload head).

use std::ffi::{c_char, c_int, c_void};

/// What an event's payload is. Values are fixed by the public API.
pub type ndebug_stream_event_type_t = u32;
/// No event.
pub const NDEBUG_STREAM_EVENT_TYPE_INVALID: ndebug_stream_event_type_t = 0;
/// A tensor read by the device (`ndebug_stream_payload_debug_tensor_read_t`).
pub const NDEBUG_STREAM_EVENT_TYPE_DEBUG_TENSOR_READ: ndebug_stream_event_type_t = 1;

/// The head of every event.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct ndebug_stream_event_header_t {
    /// Bytes of the payload that follows.
    pub data_size: u64,
    /// An `NDEBUG_STREAM_EVENT_TYPE_*`.
    pub r#type: u32,
    /// Reserved.
    pub reserved: [c_char; 52],
}

/// The payload of `NDEBUG_STREAM_EVENT_TYPE_DEBUG_TENSOR_READ`: where the tensor was read and
/// its bytes.
#[repr(C)]
pub struct ndebug_stream_payload_debug_tensor_read_t {
    /// Text that heads the event.
    pub prefix: [c_char; 512],
    /// The logical core that read it.
    pub logical_nc_id: u32,
    /// The pipe it was read on.
    pub pipe: u32,
    /// Element type, as text.
    pub tensor_dtype: [c_char; 16],
    /// Shape, up to 8 dimensions.
    pub tensor_shape: [u64; 8],
    /// Bytes in `tensor_data`.
    pub tensor_data_size: u64,
    /// Reserved.
    pub reserved0: [c_char; 416],
    /// The tensor's bytes.
    pub tensor_data: [c_char; 0],
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<ndebug_stream_event_header_t>() == 64);
    assert!(size_of::<ndebug_stream_payload_debug_tensor_read_t>() == 1024);
    assert!(offset_of!(ndebug_stream_payload_debug_tensor_read_t, tensor_data) == 1024);
};

stubs!("the debug stream" {
    fn nrt_debug_client_connect(logical_nc_idx: c_int, stream_fd: *mut c_int);
    fn nrt_debug_client_connect_close(stream_fd: c_int) -> void;
    fn nrt_debug_client_read_one_event(stream_fd: c_int, header: *mut ndebug_stream_event_header_t, payload: *mut *mut c_void);
});
