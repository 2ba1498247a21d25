//! Tensor sets (public API §2; spec §7.3): name → tensor, the inputs or outputs of one
//! `nrt_execute`. A `nrt_tensor_set_t *` is an opaque handle, never reused within the process
//! (`global::new_handle`); callers' pointers are looked up (in the sharded `global::SETS`),
//! never dereferenced.

use std::ffi::c_char;

use nrt_core::abi::NRT_STATUS as CoreStatus;

use crate::global::{self, entry, put, required_name, Fail, SetEntry, SETS};
use crate::status::NRT_STATUS;
use crate::types::{nrt_tensor_set_t, nrt_tensor_t};

/// Tensors one set can hold (what one execution binds, spec §7.3).
pub(crate) const NRT_TENSOR_SET_MAX: usize = 64;

/// Allocates an empty tensor set.
///
/// # Safety
/// `result` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrt_allocate_tensor_set(result: *mut *mut nrt_tensor_set_t) -> NRT_STATUS {
    entry("nrt_allocate_tensor_set", || {
        global::with_rt(|_| {
            if result.is_null() {
                return Err(Fail::invalid("result is NULL"));
            }
            let h = global::new_handle()?;
            SETS.insert(h, SetEntry::default());
            // SAFETY: checked non-null; caller contract.
            unsafe { put(result, global::handle_ptr(h), "result") }
        })
    })
}

/// Destroys a tensor set (not the tensors in it) and sets `*tensor_set` to NULL. NULL, or a
/// pointer that is not a live set, is a no-op (logged). Works after `nrt_close` too.
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
        match SETS.remove(set.addr()) {
            Some(_) => Ok(()),
            None => Err(Fail::invalid(
                "tensor_set is not a live tensor set (already destroyed, foreign or corrupt pointer)",
            )),
        }
    })
}

/// Adds `tensor` to the set under `tensor_name`, replacing a tensor of the same name. The
/// tensor must stay valid until the set is destroyed or the name is replaced. Names are at
/// most 95 bytes; a set holds at most 64 tensors (NRT_RESOURCE beyond).
///
/// # Safety
/// `tensor_name` is NULL or a NUL-terminated string; `tensor_set` and `tensor` are any pointer
/// values (looked up, never dereferenced unless live).
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
            // A live tensor of this runtime when added (checked by the core now).
            r.rt.nrt().tensor_get_size(r.tensor(tensor)?)?;
            if tensor_set.is_null() {
                return Err(Fail::invalid("tensor_set is NULL or not a live tensor set"));
            }
            SETS.with(tensor_set.addr(), |e| {
                if let Some(slot) = e.entries.iter_mut().find(|(n, _)| n == name) {
                    slot.1 = tensor.addr();
                    return Ok(());
                }
                if e.entries.len() >= NRT_TENSOR_SET_MAX {
                    return Err(Fail::new(
                        CoreStatus::NRT_RESOURCE,
                        format_args!("tensor set is full ({NRT_TENSOR_SET_MAX} tensors)"),
                    ));
                }
                e.entries.push((name.to_string(), tensor.addr()));
                Ok(())
            })
            .ok_or_else(|| Fail::invalid("tensor_set is NULL or not a live tensor set"))?
        })
    })
}

/// Looks up the tensor stored under `tensor_name`; NRT_INVALID when the set has none.
///
/// # Safety
/// `tensor_name` is NULL or a NUL-terminated string; `tensor` is NULL or valid for a write;
/// `tensor_set` is any pointer value (looked up, never dereferenced).
#[no_mangle]
pub unsafe extern "C" fn nrt_get_tensor_from_tensor_set(
    tensor_set: *mut nrt_tensor_set_t,
    tensor_name: *const c_char,
    tensor: *mut *mut nrt_tensor_t,
) -> NRT_STATUS {
    entry("nrt_get_tensor_from_tensor_set", || {
        global::with_rt(|_| {
            // SAFETY: caller contract.
            let name = unsafe { required_name(tensor_name, "tensor_name") }?;
            if tensor.is_null() {
                return Err(Fail::invalid("tensor is NULL"));
            }
            if tensor_set.is_null() {
                return Err(Fail::invalid("tensor_set is NULL or not a live tensor set"));
            }
            let t = SETS
                .with(tensor_set.addr(), |e| {
                    e.entries
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, t)| global::handle_ptr::<nrt_tensor_t>(*t))
                })
                .ok_or_else(|| Fail::invalid("tensor_set is NULL or not a live tensor set"))?
                .ok_or_else(|| {
                    Fail::invalid(format_args!("the tensor set has no tensor named {name:?}"))
                })?;
            // SAFETY: checked non-null; caller contract.
            unsafe { put(tensor, t, "tensor") }
        })
    })
}
