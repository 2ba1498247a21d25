//! `nrt/nrt_status.h`: the status every call returns (public API §1).

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr, CString};
use std::sync::LazyLock;

use nrt_core::abi::NRT_STATUS as CoreStatus;

/// The status every call returns, a C enum with libnrt's values: 0 is success, 4
/// (`NRT_RESOURCE`) is how device out-of-memory surfaces, 13/14 mean "called before
/// `nrt_init`" / "after `nrt_close`".
pub type NRT_STATUS = u32;

static TEXTS: LazyLock<BTreeMap<u32, CString>> = LazyLock::new(|| {
    CoreStatus::INFO
        .members
        .iter()
        .filter_map(|(_, v)| CoreStatus::from_raw(*v as u32))
        .map(|s| (s as u32, CString::new(s.as_str()).unwrap_or_default()))
        .collect()
});

const UNKNOWN: &CStr = c"Unknown status";

/// Returns a static, NUL-terminated description of `status` ("Unknown status" for a value that
/// is not an NRT_STATUS). The string must not be freed.
#[no_mangle]
pub extern "C" fn nrt_get_status_as_str(status: NRT_STATUS) -> *const c_char {
    crate::global::entry_value("nrt_get_status_as_str", UNKNOWN.as_ptr(), || {
        Ok(TEXTS.get(&status).map_or(UNKNOWN.as_ptr(), |s| s.as_ptr()))
    })
}
