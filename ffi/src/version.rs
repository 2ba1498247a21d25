//! `nrt/nrt_version.h` (public SDK): `nrt_get_version`.

use std::ffi::c_char;

use crate::global::{entry, put_sized, Fail};
use crate::status::NRT_STATUS;

/// Bytes of `nrt_version_t.rt_detail`.
pub const RT_VERSION_DETAIL_LEN: usize = 128;
/// Bytes of `nrt_version_t.git_hash`.
pub const GIT_HASH_LEN: usize = 64;

/// The runtime's version (224 bytes).
#[repr(C)]
#[derive(Copy, Clone, Debug, zerocopy::IntoBytes, zerocopy::Immutable)]
pub struct nrt_version_t {
    /// Major version of the libnrt release this library implements (2).
    pub rt_major: u64,
    /// Its minor version (31).
    pub rt_minor: u64,
    /// Its patch version.
    pub rt_patch: u64,
    /// Its maintenance version.
    pub rt_maintenance: u64,
    /// NUL-terminated description: nrt-dmem, its own version and the device it simulates.
    pub rt_detail: [c_char; RT_VERSION_DETAIL_LEN],
    /// NUL-terminated source revision (empty when the build did not record one).
    pub git_hash: [c_char; GIT_HASH_LEN],
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<nrt_version_t>() == 224);
    assert!(offset_of!(nrt_version_t, rt_detail) == 32);
    assert!(offset_of!(nrt_version_t, git_hash) == 160);
};

/// The libnrt release whose API and ABI this library implements: applications that check the
/// runtime version see 2.31. nrt-dmem's own version is in `rt_detail`.
const LIBNRT_VERSION: [u64; 4] = [2, 31, 0, 0];

/// Fills `ver` with the runtime's version: `rt_major`.`rt_minor` = 2.31 (the libnrt API this
/// library implements), `rt_detail` = "nrt-dmem VERSION ...", `git_hash` = the build's
/// revision when known. Copies `min(size, sizeof(nrt_version_t))` bytes, so a caller built
/// against a shorter struct gets its prefix. NULL `ver` is NRT_INVALID. Can be called
/// before `nrt_init`.
///
/// # Safety
/// `ver` is NULL or valid for writes of `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_version(ver: *mut nrt_version_t, size: usize) -> NRT_STATUS {
    entry("nrt_get_version", || {
        if ver.is_null() {
            return Err(Fail::invalid("ver is NULL"));
        }
        let [rt_major, rt_minor, rt_patch, rt_maintenance] = LIBNRT_VERSION;
        let v = nrt_version_t {
            rt_major,
            rt_minor,
            rt_patch,
            rt_maintenance,
            rt_detail: crate::info::c_text(concat!(
                "nrt-dmem ",
                env!("CARGO_PKG_VERSION"),
                " (libnrt 2.31 API, memory path; simulated or /dev/neuron device)"
            )),
            git_hash: crate::info::c_text(option_env!("NRT_DMEM_GIT_HASH").unwrap_or("")),
        };
        // SAFETY: caller contract; non-null.
        unsafe { put_sized(&v, ver, size, std::ptr::null_mut(), ["ver", "size"]) }
    })
}
