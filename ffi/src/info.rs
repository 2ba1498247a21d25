//! The rest of `nrt/nrt.h` that describes things rather than moving bytes (public SDK
//! `nrt.h`, libnrt 2.31): the element types `nrt_dtype_t`, the instance (`nrt_get_instance_info`),
//! the deprecated `nc` spellings of the core counts, and how many cores a loaded model uses.

use std::ffi::c_char;

use nrt_core::sim::Preset;
use nrt_host::{DeviceChoice, RuntimeConfig};

use crate::global::{self, entry, put, put_sized, Fail, Res};
use crate::status::NRT_STATUS;
use crate::types::nrt_model_t;

/// Element type of a tensor (`nrt_get_model_tensor_info`). Values are fixed by the public API;
/// `NRT_DTYPE_UNKNOWN` and `NRT_DTYPE_INVALID` are both 0.
pub type nrt_dtype_t = u32;
/// Unknown type.
pub const NRT_DTYPE_UNKNOWN: nrt_dtype_t = 0x0;
/// Invalid type (= unknown).
pub const NRT_DTYPE_INVALID: nrt_dtype_t = 0x0;
/// 8-bit float, 3-bit exponent.
pub const NRT_DTYPE_FP8_E3: nrt_dtype_t = 0xD;
/// 8-bit float, 4-bit exponent.
pub const NRT_DTYPE_FP8_E4: nrt_dtype_t = 0xE;
/// 8-bit float, 5-bit exponent.
pub const NRT_DTYPE_FP8_E5: nrt_dtype_t = 0xF;
/// IEEE half.
pub const NRT_DTYPE_FLOAT16: nrt_dtype_t = 0x7;
/// bfloat16.
pub const NRT_DTYPE_BFLOAT16: nrt_dtype_t = 0x6;
/// IEEE single.
pub const NRT_DTYPE_FLOAT32: nrt_dtype_t = 0xA;
/// fp32 with stochastic rounding.
pub const NRT_DTYPE_FP32R: nrt_dtype_t = 0xB;
/// uint8_t.
pub const NRT_DTYPE_UINT8: nrt_dtype_t = 0x3;
/// uint16_t.
pub const NRT_DTYPE_UINT16: nrt_dtype_t = 0x5;
/// uint32_t.
pub const NRT_DTYPE_UINT32: nrt_dtype_t = 0x9;
/// uint64_t.
pub const NRT_DTYPE_UINT64: nrt_dtype_t = 0x1;
/// int8_t.
pub const NRT_DTYPE_INT8: nrt_dtype_t = 0x2;
/// int16_t.
pub const NRT_DTYPE_INT16: nrt_dtype_t = 0x4;
/// int32_t.
pub const NRT_DTYPE_INT32: nrt_dtype_t = 0x8;
/// int64_t.
pub const NRT_DTYPE_INT64: nrt_dtype_t = 0xC;

// The manifest's element types carry these very values (one table, checked here).
const _: () = {
    use nrt_host::tensor_info::Dtype;
    assert!(
        Dtype::Float32 as u32 == NRT_DTYPE_FLOAT32 && Dtype::Bfloat16 as u32 == NRT_DTYPE_BFLOAT16
    );
    assert!(Dtype::Uint64 as u32 == NRT_DTYPE_UINT64 && Dtype::Fp8E5 as u32 == NRT_DTYPE_FP8_E5);
    assert!(Dtype::Int64 as u32 == NRT_DTYPE_INT64 && Dtype::Fp32r as u32 == NRT_DTYPE_FP32R);
};

/// Instance families (`nrt_instance_info_t.family`).
type instance_family = u32;
/// Unknown.
pub const NRT_INSTANCE_UNKNOWN: instance_family = 0;
/// inf1.
pub const NRT_INSTANCE_INF1: instance_family = 1;
/// trn1.
pub const NRT_INSTANCE_TRN1: instance_family = 2;
/// trn1n.
pub const NRT_INSTANCE_TRN1N: instance_family = 3;
/// inf2.
pub const NRT_INSTANCE_INF2: instance_family = 4;
/// trn2.
pub const NRT_INSTANCE_TRN2: instance_family = 5;
/// trn2n.
pub const NRT_INSTANCE_TRN2N: instance_family = 6;
/// inf2e.
pub const NRT_INSTANCE_INF2E: instance_family = 7;
/// trn2p.
pub const NRT_INSTANCE_TRN2P: instance_family = 8;
/// trn2u.
pub const NRT_INSTANCE_TRN2U: instance_family = 9;
/// trn2e.
pub const NRT_INSTANCE_TRN2E: instance_family = 10;
/// trn2eu.
pub const NRT_INSTANCE_TRN2EU: instance_family = 11;
/// trn2ac.
pub const NRT_INSTANCE_TRN2AC: instance_family = 12;
/// trn2uac.
pub const NRT_INSTANCE_TRN2UAC: instance_family = 13;
/// trn3.
pub const NRT_INSTANCE_TRN3: instance_family = 14;
/// trn3pds98.
pub const NRT_INSTANCE_TRN3PDS98: instance_family = 15;

/// Instance sizes (`nrt_instance_info_t.size`).
type instance_size = u32;
/// xlarge.
pub const NRT_INSTANCE_SIZE_1XL: instance_size = 0;
/// 2xlarge.
pub const NRT_INSTANCE_SIZE_2XL: instance_size = 1;
/// 4xlarge.
pub const NRT_INSTANCE_SIZE_4XL: instance_size = 2;
/// 6xlarge.
pub const NRT_INSTANCE_SIZE_6XL: instance_size = 3;
/// 8xlarge.
pub const NRT_INSTANCE_SIZE_8XL: instance_size = 4;
/// 24xlarge.
pub const NRT_INSTANCE_SIZE_24XL: instance_size = 5;
/// 32xlarge.
pub const NRT_INSTANCE_SIZE_32XL: instance_size = 6;
/// 48xlarge.
pub const NRT_INSTANCE_SIZE_48XL: instance_size = 7;
/// 3xlarge.
pub const NRT_INSTANCE_SIZE_3XL: instance_size = 8;
/// Unknown size.
pub const NRT_INSTANCE_SIZE_UNKNOWN: instance_size = 9;
/// Number of known sizes (= unknown).
pub const NRT_INSTANCE_SIZE_NUM: instance_size = 9;

/// The instance this process runs on (`nrt_get_instance_info`), 32 bytes.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, zerocopy::IntoBytes, zerocopy::Immutable)]
pub struct nrt_instance_info_t {
    /// An `NRT_INSTANCE_*` family.
    pub family: u32,
    /// An `NRT_INSTANCE_SIZE_*` size.
    pub size: u32,
    /// Device family name, NUL-terminated (`"trn2"` on `sim:trn2`).
    pub arch_name: [c_char; 16],
    /// Device revision, NUL-terminated (`"sim"` on the simulated device).
    pub device_revision: [c_char; 8],
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<nrt_instance_info_t>() == 32);
    assert!(offset_of!(nrt_instance_info_t, size) == 4);
    assert!(offset_of!(nrt_instance_info_t, arch_name) == 8);
    assert!(offset_of!(nrt_instance_info_t, device_revision) == 24);
};

/// `s` as a NUL-terminated C array (truncated to fit).
pub(crate) fn c_text<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(s.bytes().take(N - 1)) {
        *o = b as c_char;
    }
    out
}

/// The instance as the configuration describes it (the simulated preset and device count;
/// `NRT_INSTANCE_UNKNOWN` on the real driver, whose instance type this library does not read).
fn instance(cfg: &RuntimeConfig) -> nrt_instance_info_t {
    let (family, size, arch, rev) = match cfg.device {
        DeviceChoice::Sim {
            preset, devices, ..
        }
        | DeviceChoice::Shared {
            preset, devices, ..
        } => {
            let (family, size) = match (preset, devices) {
                (Preset::Inf2, 1) => (NRT_INSTANCE_INF2, NRT_INSTANCE_SIZE_1XL),
                (Preset::Inf2, 6) => (NRT_INSTANCE_INF2, NRT_INSTANCE_SIZE_24XL),
                (Preset::Inf2, 12) => (NRT_INSTANCE_INF2, NRT_INSTANCE_SIZE_48XL),
                (Preset::Inf2, _) => (NRT_INSTANCE_INF2, NRT_INSTANCE_SIZE_UNKNOWN),
                (Preset::Trn1, 1) => (NRT_INSTANCE_TRN1, NRT_INSTANCE_SIZE_2XL),
                (Preset::Trn1, 16) => (NRT_INSTANCE_TRN1, NRT_INSTANCE_SIZE_32XL),
                (Preset::Trn1, _) => (NRT_INSTANCE_TRN1, NRT_INSTANCE_SIZE_UNKNOWN),
                (Preset::Trn2, 1) => (NRT_INSTANCE_TRN2, NRT_INSTANCE_SIZE_3XL),
                (Preset::Trn2, 16) => (NRT_INSTANCE_TRN2, NRT_INSTANCE_SIZE_48XL),
                (Preset::Trn2, _) => (NRT_INSTANCE_TRN2, NRT_INSTANCE_SIZE_UNKNOWN),
                (Preset::Trn3, _) => (NRT_INSTANCE_TRN3, NRT_INSTANCE_SIZE_UNKNOWN),
            };
            (family, size, preset.name(), "sim")
        }
        DeviceChoice::Neuron => (
            NRT_INSTANCE_UNKNOWN,
            NRT_INSTANCE_SIZE_UNKNOWN,
            "neuron",
            "",
        ),
    };
    nrt_instance_info_t {
        family,
        size,
        arch_name: c_text(arch),
        device_revision: c_text(rev),
    }
}

/// Describes the instance: family, size, device family name and revision. On the simulated
/// device they follow `NRT_DMEM_DEVICE` (`sim:trn2` is a trn2.3xlarge, `sim:trn2x16` a
/// trn2.48xlarge). Copies `min(instance_info_len, sizeof(nrt_instance_info_t))` bytes, so
/// callers built against a shorter struct stay compatible. Can be called before `nrt_init`.
///
/// # Safety
/// `info` is NULL or valid for writes of `instance_info_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_instance_info(
    info: *mut nrt_instance_info_t,
    instance_info_len: usize,
) -> NRT_STATUS {
    entry("nrt_get_instance_info", || {
        if info.is_null() {
            return Err(Fail::invalid("info is NULL"));
        }
        let cfg = RuntimeConfig::from_env().map_err(Fail::invalid)?;
        let v = instance(&cfg);
        // SAFETY: caller contract; `info` is non-null.
        unsafe {
            put_sized(
                &v,
                info,
                instance_info_len,
                std::ptr::null_mut(),
                ["info", "instance_info_len"],
            )
        }
    })
}

/// Deprecated spelling of `nrt_get_total_vnc_count` (the same count).
///
/// # Safety
/// `vnc_count` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_total_nc_count(vnc_count: *mut u32) -> NRT_STATUS {
    // SAFETY: forwarded caller contract.
    unsafe { crate::runtime::total_vnc_count("nrt_get_total_nc_count", vnc_count) }
}

/// Deprecated spelling of `nrt_get_visible_vnc_count` (the same count).
///
/// # Safety
/// `vnc_count` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_visible_nc_count(vnc_count: *mut u32) -> NRT_STATUS {
    // SAFETY: forwarded caller contract.
    unsafe { crate::runtime::visible_vnc_count("nrt_get_visible_nc_count", vnc_count) }
}

/// Writes `v` (named `what`) for a loaded model: `NRT_INVALID_HANDLE` for a model that is not
/// loaded.
///
/// # Safety
/// `out` is NULL or valid for a write.
pub(crate) unsafe fn per_model(
    model: *const nrt_model_t,
    out: *mut u32,
    v: u32,
    what: &str,
) -> Res {
    global::with_rt(|r| {
        r.rt.nrt().models().core(r.model(model)?)?;
        // SAFETY: caller contract.
        unsafe { put(out, v, what) }
    })
}

/// Logical cores a loaded model uses: always 1 here (a model lives on one logical core).
///
/// # Safety
/// `vnc_count` is NULL or valid for a write; `model` is any pointer value.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_vnc_count(
    model: *const nrt_model_t,
    vnc_count: *mut u32,
) -> NRT_STATUS {
    // SAFETY: forwarded caller contract.
    entry("nrt_get_model_vnc_count", || unsafe {
        per_model(model, vnc_count, 1, "vnc_count")
    })
}

/// Deprecated spelling of `nrt_get_model_vnc_count` (the same count).
///
/// # Safety
/// As `nrt_get_model_vnc_count`.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_nc_count(
    model: *const nrt_model_t,
    vnc_count: *mut u32,
) -> NRT_STATUS {
    // SAFETY: forwarded caller contract.
    entry("nrt_get_model_nc_count", || unsafe {
        per_model(model, vnc_count, 1, "vnc_count")
    })
}
