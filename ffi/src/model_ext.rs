//! `nrt_execute_repeat` and `nrt_load_collectives` (public SDK `nrt.h`, libnrt 2.31): thin
//! layers over `nrt_execute` and `nrt_load`.

use std::ffi::{c_int, c_void};

use nrt_core::abi::NRT_STATUS as CoreStatus;

use crate::global::{entry, Fail};
use crate::status::NRT_STATUS;
use crate::types::{nrt_model_t, nrt_tensor_set_t};

/// Executes a model `repeat_count` times with the same tensor sets, each execution as
/// `nrt_execute` does it (outputs' completion counts go up by `repeat_count`). A
/// `repeat_count` below 1 is NRT_INVALID; the first failing execution ends the call.
///
/// # Safety
/// As `nrt_execute`.
#[no_mangle]
pub unsafe extern "C" fn nrt_execute_repeat(
    model: *mut nrt_model_t,
    input_set: *const nrt_tensor_set_t,
    output_set: *mut nrt_tensor_set_t,
    repeat_count: c_int,
) -> NRT_STATUS {
    entry("nrt_execute_repeat", || {
        let n = u32::try_from(repeat_count)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| Fail::invalid(format_args!("repeat_count {repeat_count} is below 1")))?;
        crate::model::execute(model, input_set, output_set, n)
    })
}

/// Loads a model that takes part in collectives. Only a single rank is supported: with
/// `ctx_device_id` 0 and `ctx_device_count` 1 this is `nrt_load` (the model's collectives
/// run within one worker); `ctx_device_id >= ctx_device_count` is NRT_INVALID; more ranks
/// are NRT_FAILURE (this runtime has no collectives transport).
///
/// # Safety
/// As `nrt_load`.
#[no_mangle]
pub unsafe extern "C" fn nrt_load_collectives(
    neff_bytes: *const c_void,
    size: usize,
    vnc: i32,
    vnc_count: i32,
    ctx_device_id: u32,
    ctx_device_count: u32,
    model: *mut *mut nrt_model_t,
) -> NRT_STATUS {
    let _ = vnc_count;
    entry("nrt_load_collectives", || {
        if ctx_device_id >= ctx_device_count {
            return Err(Fail::invalid(format_args!(
                "ctx_device_id {ctx_device_id} is not below ctx_device_count {ctx_device_count}"
            )));
        }
        if ctx_device_count > 1 {
            return Err(Fail::new(
                CoreStatus::NRT_FAILURE,
                format_args!(
                    "{ctx_device_count} ranks: nrt-dmem loads collectives models for a single \
                     rank only (ctx_device_count 1)"
                ),
            ));
        }
        // SAFETY: forwarded caller contract.
        unsafe { crate::model::load(neff_bytes, size, vnc, model) }
    })
}
