//! `nrt_init`, `nrt_close` and the core counts (public API §2; spec §1, §9, §12).

use std::ffi::c_char;

use nrt_core::abi::NRT_STATUS as CoreStatus;
use nrt_core::driver::Driver;
use nrt_core::vcore::{parse_vnc_config, visible_slice};
use nrt_host::runtime::StartError;
use nrt_host::{DeviceChoice, HostRuntime, NeuronDriver, RuntimeConfig};

use crate::global::{self, entry, put, Fail, Res};
use crate::status::NRT_STATUS;
use crate::types::{nrt_framework_type_t, NRT_FRAMEWORK_TYPE_PRECHECK};

fn config() -> Res<RuntimeConfig> {
    RuntimeConfig::from_env().map_err(Fail::invalid)
}

/// Initializes the runtime. The device comes from the environment, read now:
/// `NRT_DMEM_DEVICE` (`sim:trn2` by default, `sim:trn1`, `sim:inf2x2`, `sim:trn2+tlsf` for the
/// fast TLSF placement, … or `neuron` for `/dev/neuron*`), `NEURON_RT_VISIBLE_CORES`,
/// `NEURON_RT_NUM_CORES` and
/// `NEURON_RT_VIRTUAL_CORE_SIZE`. The runtime can be initialized again after `nrt_close`.
///
/// `framework` is a `nrt_framework_type_t` (NRT_INVALID for other values); `fw_version` and
/// `fal_version` are informational and may be NULL.
///
/// # Safety
/// `fw_version` and `fal_version` are NULL or NUL-terminated strings (they are not read).
#[no_mangle]
pub unsafe extern "C" fn nrt_init(
    framework: nrt_framework_type_t,
    fw_version: *const c_char,
    fal_version: *const c_char,
) -> NRT_STATUS {
    let _ = (fw_version, fal_version);
    entry("nrt_init", || {
        if framework > NRT_FRAMEWORK_TYPE_PRECHECK {
            return Err(Fail::invalid(format_args!(
                "framework {framework} is not a nrt_framework_type_t (0..=5)"
            )));
        }
        global::init(|| {
            let cfg = config()?;
            log::info!(target: "nrt_init", "device {} (NRT_DMEM_DEVICE)", cfg.device);
            HostRuntime::start(cfg).map_err(|e| match e {
                StartError::Init(e) => Fail::from(e),
                StartError::Build(b) => Fail::new(CoreStatus::NRT_FAILURE, b),
            })
        })
    })
}

/// Closes the runtime: unloads every model, frees every tensor still allocated and returns
/// all device memory. Calls made afterwards fail with NRT_CLOSED until `nrt_init` runs again.
/// A no-op when the runtime is not initialized or already closed; the thread's last error
/// then says which, as `Nrt::close` answers (docs/STATES.md).
#[no_mangle]
pub extern "C" fn nrt_close() {
    global::entry_value("nrt_close", (), global::close)
}

/// Total logical cores from the configuration alone (before `nrt_init`), with the
/// configuration: what bring-up will compute (spec §9 `parse_vnc_config`).
fn total_from_config() -> Res<(u32, RuntimeConfig)> {
    let cfg = config()?;
    let (arch, cores, devices) = match cfg.device {
        DeviceChoice::Sim {
            preset, devices, ..
        }
        | DeviceChoice::Shared {
            preset, devices, ..
        } => {
            let i = preset.device_info();
            (i.arch, i.cores_per_device, devices)
        }
        DeviceChoice::Neuron => {
            let d = NeuronDriver::open().map_err(|e| Fail::new(CoreStatus::NRT_FAILURE, e))?;
            let i = d
                .device_info(0)
                .map_err(|e| Fail::from(nrt_core::Error::Driver(e)))?;
            (i.arch, i.cores_per_device, d.device_count())
        }
    };
    let lnc = parse_vnc_config(arch, cores, cfg.vcores.lnc_size)?;
    Ok((devices * (cores / lnc), cfg))
}

/// Visible logical cores from the configuration alone: the slice bring-up will own.
fn visible_from_config() -> Res<u32> {
    let (total, cfg) = total_from_config()?;
    Ok(visible_slice(&cfg.vcores, total)?.1)
}

/// The running runtime's count, or the configuration's before `nrt_init`.
fn count(running: fn(&nrt_core::Nrt<'_>) -> u32, from_config: fn() -> Res<u32>) -> Res<u32> {
    global::with_rt(|r| Ok(running(&r.rt.nrt()))).or_else(|_| from_config())
}

/// The body of `nrt_get_total_vnc_count` and of its deprecated spelling `func`: the total
/// does not depend on which cores are visible, so an out-of-range `NEURON_RT_VISIBLE_CORES`
/// does not fail it (it is how a user finds the valid range).
///
/// # Safety
/// `vnc_count` is NULL or valid for a write.
pub(crate) unsafe fn total_vnc_count(func: &'static str, vnc_count: *mut u32) -> NRT_STATUS {
    entry(func, || {
        let total = count(
            |n| n.total_logical_core_count(),
            || Ok(total_from_config()?.0),
        )?;
        // SAFETY: caller contract.
        unsafe { put(vnc_count, total, "vnc_count") }
    })
}

/// The body of `nrt_get_visible_vnc_count` and of its deprecated spelling `func`.
///
/// # Safety
/// `vnc_count` is NULL or valid for a write.
pub(crate) unsafe fn visible_vnc_count(func: &'static str, vnc_count: *mut u32) -> NRT_STATUS {
    entry(func, || {
        let visible = count(|n| n.visible_logical_core_count(), visible_from_config)?;
        // SAFETY: caller contract.
        unsafe { put(vnc_count, visible, "vnc_count") }
    })
}

/// Logical NeuronCores on the instance (all attached devices, at the configured logical core
/// size). Can be called before `nrt_init`.
///
/// # Safety
/// `vnc_count` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_total_vnc_count(vnc_count: *mut u32) -> NRT_STATUS {
    // SAFETY: forwarded caller contract.
    unsafe { total_vnc_count("nrt_get_total_vnc_count", vnc_count) }
}

/// Logical NeuronCores this process owns (`NEURON_RT_VISIBLE_CORES` /
/// `NEURON_RT_NUM_CORES`); the application numbers them from 0. Can be called before
/// `nrt_init`.
///
/// # Safety
/// `vnc_count` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_visible_vnc_count(vnc_count: *mut u32) -> NRT_STATUS {
    // SAFETY: forwarded caller contract.
    unsafe { visible_vnc_count("nrt_get_visible_vnc_count", vnc_count) }
}
