//! Refusing entry points: the body they share (`unsupported`), the `stubs!` macro that
//! defines them one line each (used by the modules of the SDK headers whose calls this library
//! refuses), and the public `nrt.h` entry points outside this runtime's memory path
//! (collectives communicators, EFA and dma-buf sharing, HBM mappings, host device ids). They
//! exist so that a program built against AWS's library loads and links against this one (also
//! with `LD_BIND_NOW`), and each call fails with `NRT_FAILURE` — or the status libnrt documents
//! for "not supported" — and one log line naming what is missing.

use std::ffi::{c_char, c_int, c_void};

use nrt_core::abi::NRT_STATUS as CoreStatus;

use crate::global::{entry, Fail};
use crate::status::NRT_STATUS;

/// The body of every unsupported entry point: NRT_FAILURE, logged once per call at ERROR as
/// `<func>: not supported by nrt-dmem (<what>; it implements libnrt's memory path only)` and
/// kept as the thread's last error.
pub(crate) fn unsupported(func: &'static str, what: &str) -> NRT_STATUS {
    unsupported_with(func, what, CoreStatus::NRT_FAILURE)
}

/// [`unsupported`] with the status libnrt documents for "not supported".
pub(crate) fn unsupported_with(func: &'static str, what: &str, status: CoreStatus) -> NRT_STATUS {
    entry(func, || {
        Err(Fail::new(
            status,
            format_args!(
                "not supported by nrt-dmem ({what}; it implements libnrt's memory path only)"
            ),
        ))
    })
}

/// Defines entry points that exist and refuse, one line each: `fn name(args);` returns the
/// status of [`unsupported`], `fn name(args) -> void;` returns nothing, `fn name(args) -> T =
/// v;` returns `v`; every call logs one line naming what is missing. `what` names the
/// subsystem. The header generator (`tests/headers.rs`) reads these invocations like the
/// functions they expand to.
macro_rules! stubs {
    ($what:literal {}) => {};
    ($what:literal { fn $name:ident($($a:ident: $t:ty),* $(,)?); $($rest:tt)* }) => {
        #[doc = concat!("Not supported by nrt-dmem (", $what, "): NRT_FAILURE.")]
        #[no_mangle]
        pub extern "C" fn $name($($a: $t),*) -> $crate::status::NRT_STATUS {
            let _ = ($($a,)*);
            $crate::unsupported::unsupported(stringify!($name), $what)
        }
        stubs!($what { $($rest)* });
    };
    ($what:literal { fn $name:ident($($a:ident: $t:ty),* $(,)?) -> void; $($rest:tt)* }) => {
        #[doc = concat!("Not supported by nrt-dmem (", $what, "): does nothing.")]
        #[no_mangle]
        pub extern "C" fn $name($($a: $t),*) {
            let _ = ($($a,)*);
            $crate::unsupported::unsupported(stringify!($name), $what);
        }
        stubs!($what { $($rest)* });
    };
    ($what:literal { fn $name:ident($($a:ident: $t:ty),* $(,)?) -> $r:ty = $v:expr; $($rest:tt)* }) => {
        #[doc = concat!("Not supported by nrt-dmem (", $what, "): returns `", stringify!($v), "`.")]
        #[no_mangle]
        pub extern "C" fn $name($($a: $t),*) -> $r {
            let _ = ($($a,)*);
            $crate::unsupported::unsupported(stringify!($name), $what);
            $v
        }
        stubs!($what { $($rest)* });
    };
}

/// Builds the global collectives communicator (not supported: NRT_FAILURE).
#[no_mangle]
pub extern "C" fn nrt_build_global_comm(
    vnc: i32,
    g_device_id: u32,
    g_device_count: u32,
) -> NRT_STATUS {
    let _ = (vnc, g_device_id, g_device_count);
    unsupported("nrt_build_global_comm", "collectives")
}

/// The dma-buf fd of a device memory region (not supported: NRT_FAILURE).
#[no_mangle]
pub extern "C" fn nrt_get_dmabuf_fd(va: u64, size: u64, fd: *mut c_int) -> NRT_STATUS {
    let _ = (va, size, fd);
    unsupported("nrt_get_dmabuf_fd", "dma-buf export")
}

/// The host device id of a device (not supported: NRT_INVALID, libnrt's status when the call
/// cannot answer).
#[no_mangle]
pub extern "C" fn nrt_host_device_id_get(
    neuron_dev: c_int,
    host_device_id: *mut u32,
) -> NRT_STATUS {
    let _ = (neuron_dev, host_device_id);
    unsupported_with(
        "nrt_host_device_id_get",
        "host device ids",
        CoreStatus::NRT_INVALID,
    )
}

/// The routing ids by host device id (not supported: NRT_INVALID, libnrt's status when the
/// call cannot answer).
#[no_mangle]
pub extern "C" fn nrt_host_device_id_rid_map_get(
    count: *mut u32,
    host_did_to_rid_map: *mut u32,
) -> NRT_STATUS {
    let _ = (count, host_did_to_rid_map);
    unsupported_with(
        "nrt_host_device_id_rid_map_get",
        "routing ids",
        CoreStatus::NRT_INVALID,
    )
}

/// Maps an HBM region (not supported: NRT_INVALID, libnrt's "interface not supported").
#[no_mangle]
pub extern "C" fn nrt_get_hbm_mmap_va(
    device_id: c_int,
    hbm_idx: c_int,
    addr: *mut *mut c_void,
    size: *mut usize,
) -> NRT_STATUS {
    let _ = (device_id, hbm_idx, addr, size);
    unsupported_with(
        "nrt_get_hbm_mmap_va",
        "HBM mappings",
        CoreStatus::NRT_INVALID,
    )
}

/// The BDF of the EFA device next to a Neuron device (not supported: NRT_FAILURE).
#[no_mangle]
pub extern "C" fn nrt_get_attached_efa_bdf(
    va: *const c_void,
    efa_bdf: *mut c_char,
    len: *mut usize,
) -> NRT_STATUS {
    let _ = (va, efa_bdf, len);
    unsupported("nrt_get_attached_efa_bdf", "EFA")
}

/// Builds the communicator of host-driven collectives (not supported: NRT_FAILURE).
#[no_mangle]
pub extern "C" fn nrt_cc_global_comm_init(
    vnc: u32,
    g_device_id: u32,
    g_device_count: u32,
) -> NRT_STATUS {
    let _ = (vnc, g_device_id, g_device_count);
    unsupported("nrt_cc_global_comm_init", "collectives")
}

/// Creates a stream for host-initiated collectives (libnrt 2.31; not supported: NRT_FAILURE).
#[no_mangle]
pub extern "C" fn nrt_cc_create_stream(stream_id: u32) -> NRT_STATUS {
    let _ = stream_id;
    unsupported("nrt_cc_create_stream", "collectives")
}
