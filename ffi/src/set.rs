//! Tensor sets (public API §2; spec §7.3): name → tensor, the inputs or outputs of one
//! `nrt_execute`. A set lives in the core's set arena (`Sets::create`, sized by
//! `NRT_DMEM_MAX_SETS`); the `nrt_tensor_set_t *` C holds is its `SetHandle` encoded in the
//! pointer value (`Runtime::set_ptr`), decoded at each call and checked by the core
//! (generation, epoch), never dereferenced. `nrt_close` frees every set (docs/STATES.md).

use std::ffi::c_char;

use crate::global::{self, entry, put, required_name, Fail};
use crate::status::NRT_STATUS;
use crate::types::{nrt_tensor_set_t, nrt_tensor_t};

/// Allocates an empty tensor set. A full set arena is NRT_RESOURCE naming the setting that
/// raises it (`NRT_DMEM_MAX_SETS`).
///
/// # Safety
/// `result` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrt_allocate_tensor_set(result: *mut *mut nrt_tensor_set_t) -> NRT_STATUS {
    entry("nrt_allocate_tensor_set", || {
        global::with_rt(|r| {
            if result.is_null() {
                return Err(Fail::invalid("result is NULL"));
            }
            let p = r.set_ptr(r.rt.nrt().sets().create()?)?;
            // SAFETY: checked non-null; caller contract.
            unsafe { put(result, p, "result") }
        })
    })
}

/// Destroys a tensor set (not the tensors in it) and sets `*tensor_set` to NULL. NULL is a
/// no-op; a pointer that is not a live set is refused (logged, NRT_INVALID as the thread's
/// last error). After `nrt_close` the set is already gone (close frees every set): the pointer
/// is set to NULL and NRT_CLOSED recorded; before `nrt_init`, NRT_UNINITIALIZED.
///
/// # Safety
/// `tensor_set` is NULL or valid for a read and a write.
#[no_mangle]
pub unsafe extern "C" fn nrt_destroy_tensor_set(tensor_set: *mut *mut nrt_tensor_set_t) {
    global::entry_value("nrt_destroy_tensor_set", (), || {
        // SAFETY: caller contract.
        let Some(set) = (unsafe { global::take_nulled(tensor_set) }) else {
            return Ok(());
        };
        global::with_rt(|r| Ok(r.rt.nrt().sets().destroy(r.set(set, "tensor_set")?)?))
    })
}

/// Adds `tensor` to the set under `tensor_name`, replacing a tensor of the same name. The
/// tensor must be live now; one freed later makes an execution that binds it NRT_INVALID.
/// Names are at most 255 bytes (`NRT_TENSOR_NAME_MAX - 1`); a set holds as many tensors as it
/// is given (NRT_RESOURCE when the runtime's set-entry storage is full, `NRT_DMEM_MAX_SETS`).
///
/// # Safety
/// `tensor_name` is NULL or a NUL-terminated string; `tensor_set` and `tensor` are any pointer
/// values (decoded and checked by the core, never dereferenced).
#[no_mangle]
pub unsafe extern "C" fn nrt_add_tensor_to_tensor_set(
    tensor_set: *mut nrt_tensor_set_t,
    tensor_name: *const c_char,
    tensor: *mut nrt_tensor_t,
) -> NRT_STATUS {
    entry("nrt_add_tensor_to_tensor_set", || {
        global::with_rt(|r| {
            // SAFETY: caller contract.
            let name = unsafe { required_name(tensor_name, "tensor_name") }?;
            let t = r.tensor(tensor)?;
            let s = r.set(tensor_set, "tensor_set")?;
            Ok(r.rt.nrt().sets().add(s, name, t)?)
        })
    })
}

/// Looks up the tensor stored under `tensor_name`; NRT_INVALID when the set has none.
///
/// # Safety
/// `tensor_name` is NULL or a NUL-terminated string; `tensor` is NULL or valid for a write;
/// `tensor_set` is any pointer value (decoded and checked by the core, never dereferenced).
#[no_mangle]
pub unsafe extern "C" fn nrt_get_tensor_from_tensor_set(
    tensor_set: *mut nrt_tensor_set_t,
    tensor_name: *const c_char,
    tensor: *mut *mut nrt_tensor_t,
) -> NRT_STATUS {
    entry("nrt_get_tensor_from_tensor_set", || {
        global::with_rt(|r| {
            // SAFETY: caller contract.
            let name = unsafe { required_name(tensor_name, "tensor_name") }?;
            if tensor.is_null() {
                return Err(Fail::invalid("tensor is NULL"));
            }
            let s = r.set(tensor_set, "tensor_set")?;
            let t = r.rt.nrt().sets().get(s, name)?.ok_or_else(|| {
                Fail::invalid(format_args!("the tensor set has no tensor named {name:?}"))
            })?;
            let p = r.existing_tensor_ptr(t)?;
            // SAFETY: checked non-null; caller contract.
            unsafe { put(tensor, p, "tensor") }
        })
    })
}
