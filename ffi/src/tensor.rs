//! Tensors (public API §2; spec §7). A `nrt_tensor_t *` is the core's generation-checked
//! tensor handle encoded in a pointer value (`Runtime::tensor_ptr`), decoded at each call
//! (`Runtime::tensor`) and never dereferenced; the core checks it. So a freed, doubly freed,
//! foreign or corrupt pointer is NRT_INVALID however many tensors came and went since, and no
//! call takes a process-wide lock to find its tensor.

use std::ffi::{c_char, c_int, c_void};
use std::time::{Duration, Instant};

use nrt_core::tensor::check_window;

use crate::global::{self, entry, in_bytes, out_bytes, put, read_name, Fail, Res, Runtime};
use crate::status::NRT_STATUS;
use crate::types::{nrt_tensor_device_allocation_info_t, nrt_tensor_placement_t, nrt_tensor_t};

/// Allocates a tensor of `size` bytes. DEVICE tensors take HBM of logical core `vnc` and
/// outlive any model; HOST tensors take DMA-able host memory (refused with NRT_RESOURCE on
/// trn2); VIRTUAL tensors take ordinary host memory. `vnc` may be -1 for the host placements.
/// `name` is optional (NULL) and at most 255 bytes (`NRT_TENSOR_NAME_MAX - 1`). Out-of-memory on the device is
/// NRT_RESOURCE.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `tensor` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_allocate(
    tensor_placement: nrt_tensor_placement_t,
    vnc: c_int,
    size: usize,
    name: *const c_char,
    tensor: *mut *mut nrt_tensor_t,
) -> NRT_STATUS {
    entry("nrt_tensor_allocate", || {
        global::with_rt(|r| {
            if tensor.is_null() {
                return Err(Fail::invalid("tensor is NULL"));
            }
            // SAFETY: caller contract.
            let name = unsafe { read_name(name, "name") }?;
            let t = r.core(
                nrt_core::raw::tensor_allocate(
                    &r.rt.nrt(),
                    tensor_placement,
                    vnc as i64,
                    size as u64,
                    name,
                ),
                String::new,
            )?;
            let h = r.tensor_ptr(t)?;
            // SAFETY: checked non-null; caller contract.
            unsafe { put(tensor, h, "tensor") }
        })
    })
}

/// Frees a tensor and sets `*tensor` to NULL. Its memory is released with the last tensor
/// that shares it (slices); a buffer attached with `nrt_tensor_attach_buffer` is never freed.
/// NULL, `*tensor == NULL`, and pointers that are not live tensors are no-ops (the latter
/// logged).
///
/// # Safety
/// `tensor` is NULL or valid for a read and a write.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_free(tensor: *mut *mut nrt_tensor_t) {
    global::entry_value("nrt_tensor_free", (), || {
        // SAFETY: caller contract. After nrt_tensor_free the caller's pointer is always NULL.
        let Some(t) = (unsafe { global::take_nulled(tensor) }) else {
            return Ok(());
        };
        // The core's free: exactly one of racing frees releases the tensor, after every
        // call using it on another thread is done; the others get InvalidHandle.
        global::with_rt(|r| Ok(r.rt.nrt().tensors().free(r.tensor(t)?)?))
    })
}

/// The window `[offset, offset + size)` of a live tensor, checked before any caller buffer is
/// formed into a slice.
pub(crate) fn window(r: &Runtime, t: nrt_core::TensorHandle, offset: usize, size: usize) -> Res {
    let len = r.rt.nrt().tensors().size(t)?;
    check_window(offset as u64, size as u64, len)?;
    Ok(())
}

/// Copies `size` bytes at `offset` of the tensor into `buf`.
///
/// # Safety
/// `buf` is valid for writes of `size` bytes; `tensor` is any pointer value (checked).
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_read(
    tensor: *const nrt_tensor_t,
    buf: *mut c_void,
    offset: usize,
    size: usize,
) -> NRT_STATUS {
    entry("nrt_tensor_read", || {
        global::with_rt(|r| {
            let t = r.tensor(tensor)?;
            window(r, t, offset, size)?;
            // SAFETY: caller contract.
            let b = unsafe { out_bytes(buf as *mut u8, size, "buf") }?;
            Ok(r.rt.nrt().tensors().read(t, b, offset as u64)?)
        })
    })
}

/// Copies `size` bytes from `buf` into the tensor at `offset`.
///
/// # Safety
/// `buf` is valid for reads of `size` bytes; `tensor` is any pointer value (checked).
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_write(
    tensor: *mut nrt_tensor_t,
    buf: *const c_void,
    offset: usize,
    size: usize,
) -> NRT_STATUS {
    entry("nrt_tensor_write", || {
        global::with_rt(|r| {
            let t = r.tensor(tensor)?;
            window(r, t, offset, size)?;
            // SAFETY: caller contract.
            let b = unsafe { in_bytes(buf as *const u8, size, "buf") }?;
            Ok(r.rt.nrt().tensors().write(t, b, offset as u64)?)
        })
    })
}

/// Copies `size` bytes from `src` at `src_offset` to `dst` at `dst_offset`. Two device
/// tensors must be on the same NeuronCore (NRT_INVALID otherwise).
///
/// # Safety
/// `src` and `dst` are any pointer values (checked).
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_copy(
    src: *const nrt_tensor_t,
    src_offset: usize,
    dst: *mut nrt_tensor_t,
    dst_offset: usize,
    size: usize,
) -> NRT_STATUS {
    entry("nrt_tensor_copy", || {
        global::with_rt(|r| {
            Ok(r.rt.nrt().tensors().copy(
                r.tensor(src)?,
                src_offset as u64,
                r.tensor(dst)?,
                dst_offset as u64,
                size as u64,
            )?)
        })
    })
}

/// Bytes of the tensor (0 for a pointer that is not a live tensor).
///
/// # Safety
/// `tensor` is any pointer value (checked).
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_get_size(tensor: *const nrt_tensor_t) -> usize {
    global::entry_value("nrt_tensor_get_size", 0, || {
        global::with_rt(|r| Ok(r.rt.nrt().tensors().size(r.tensor(tensor)?)? as usize))
    })
}

/// Sets `size` bytes at `offset` of the tensor to `value` (converted to unsigned char).
///
/// # Safety
/// `tensor` is any pointer value (checked).
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_memset(
    tensor: *mut nrt_tensor_t,
    offset: u64,
    value: c_int,
    size: usize,
) -> NRT_STATUS {
    entry("nrt_tensor_memset", || {
        global::with_rt(|r| {
            Ok(r.rt
                .nrt()
                .tensors()
                .memset(r.tensor(tensor)?, offset, value as u8, size as u64)?)
        })
    })
}

/// Allocates a tensor without storage; give it memory with `nrt_tensor_attach_buffer`.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `tensor` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_allocate_empty(
    name: *const c_char,
    tensor: *mut *mut nrt_tensor_t,
) -> NRT_STATUS {
    entry("nrt_tensor_allocate_empty", || {
        global::with_rt(|r| {
            if tensor.is_null() {
                return Err(Fail::invalid("tensor is NULL"));
            }
            // SAFETY: caller contract.
            let name = unsafe { read_name(name, "name") }?;
            let t = r.rt.nrt().tensors().allocate_empty(name)?;
            let h = r.tensor_ptr(t)?;
            // SAFETY: checked non-null; caller contract.
            unsafe { put(tensor, h, "tensor") }
        })
    })
}

/// Makes the caller's `buffer` of `size` bytes the tensor's storage (the tensor becomes
/// VIRTUAL). Storage the tensor had before is released if it owned it. The buffer is never
/// freed by the runtime and must outlive the tensor.
///
/// # Safety
/// `buffer` is valid for reads and writes of `size` bytes for the tensor's lifetime; `tensor`
/// is any pointer value (checked).
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_attach_buffer(
    tensor: *mut nrt_tensor_t,
    buffer: *mut c_void,
    size: usize,
) -> NRT_STATUS {
    entry("nrt_tensor_attach_buffer", || {
        global::with_rt(|r| {
            let t = r.tensor(tensor)?;
            // SAFETY: the caller's contract above is the core's: `buffer` is valid for reads
            // and writes of `size` bytes for as long as the tensor (or a slice of it) views it.
            Ok(unsafe {
                r.rt.nrt()
                    .tensors()
                    .attach_buffer(t, buffer as *mut u8, size as u64)
            }?)
        })
    })
}

/// Allocates a tensor viewing `[offset, offset + size)` of `tensor_source` (no copy). The
/// storage is shared and reference-counted: it is freed with the last tensor using it.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `tensor_slice` is NULL or valid for a write;
/// `tensor_source` is any pointer value (checked).
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_allocate_slice(
    tensor_source: *const nrt_tensor_t,
    offset: usize,
    size: usize,
    name: *const c_char,
    tensor_slice: *mut *mut nrt_tensor_t,
) -> NRT_STATUS {
    entry("nrt_tensor_allocate_slice", || {
        global::with_rt(|r| {
            if tensor_slice.is_null() {
                return Err(Fail::invalid("tensor_slice is NULL"));
            }
            // SAFETY: caller contract.
            let name = unsafe { read_name(name, "name") }?;
            let t = r.rt.nrt().tensors().allocate_slice(
                r.tensor(tensor_source)?,
                offset as u64,
                size as u64,
                name,
            )?;
            let h = r.tensor_ptr(t)?;
            // SAFETY: checked non-null; caller contract.
            unsafe { put(tensor_slice, h, "tensor_slice") }
        })
    })
}

/// The host address of the tensor's first byte, for tensors in host memory (VIRTUAL and
/// attached buffers); NULL for device and host-DMA tensors and on failure.
///
/// # Safety
/// `tensor` is any pointer value (checked).
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_get_va(tensor: *const nrt_tensor_t) -> *mut c_void {
    global::entry_value("nrt_tensor_get_va", std::ptr::null_mut(), || {
        global::with_rt(|r| Ok(r.rt.nrt().tensors().va(r.tensor(tensor)?)? as *mut c_void))
    })
}

/// Where a device (or host-DMA) tensor is: device physical address, size, HBM index.
/// NRT_INVALID for tensors in ordinary host memory.
///
/// # Safety
/// `alloc_info` is NULL or valid for a write; `tensor` is any pointer value (checked).
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_get_device_allocation_info(
    tensor: *const nrt_tensor_t,
    alloc_info: *mut nrt_tensor_device_allocation_info_t,
) -> NRT_STATUS {
    entry("nrt_tensor_get_device_allocation_info", || {
        global::with_rt(|r| {
            if alloc_info.is_null() {
                return Err(Fail::invalid("alloc_info is NULL"));
            }
            let i =
                r.rt.nrt()
                    .tensors()
                    .device_allocation_info(r.tensor(tensor)?)?;
            let v = nrt_tensor_device_allocation_info_t {
                physical_address: i.physical_address,
                size: i.size as usize,
                hbm_index: i.hbm_index,
            };
            // SAFETY: checked non-null; caller contract.
            unsafe { put(alloc_info, v, "alloc_info") }
        })
    })
}

/// Slice of one completion wait: the lifecycle lock is released between slices so
/// `nrt_close` is never blocked by a waiter.
const WAIT_SLICE: Duration = Duration::from_millis(20);

/// Waits until `output_tensor` has been written by `expected_completion_count` executions.
/// `timeout` is in microseconds; negative waits without bound, 0 checks once. NRT_TIMEOUT when
/// the count is not reached in time; NRT_INVALID for a pointer that is not a live tensor.
///
/// # Safety
/// `output_tensor` is any pointer value (checked).
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_check_output_completion(
    output_tensor: *const nrt_tensor_t,
    timeout: i64,
    expected_completion_count: u64,
) -> NRT_STATUS {
    entry("nrt_tensor_check_output_completion", || {
        let deadline =
            (timeout >= 0).then(|| Instant::now() + Duration::from_micros(timeout as u64));
        // Which runtime the wait began in (its `serial`).
        let mut began = None;
        loop {
            let slice = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()).min(WAIT_SLICE),
                None => WAIT_SLICE,
            };
            let r = global::with_rt(|r| {
                if began.is_some_and(|b| b != r.serial) {
                    // The runtime this wait began in closed between two slices, and another
                    // one started: the wait ends as it would have at the close.
                    return Err(nrt_core::Error::Closed.into());
                }
                began = Some(r.serial);
                Ok(r.rt.wait_output_completion(
                    r.tensor(output_tensor)?,
                    Some(slice),
                    expected_completion_count,
                )?)
            });
            match r {
                Err(f)
                    if f.status == nrt_core::abi::NRT_STATUS::NRT_TIMEOUT
                        && deadline.is_none_or(|d| Instant::now() < d) =>
                {
                    continue
                }
                other => return other,
            }
        }
    })
}

/// Sets the tensor's output completion count back to 0.
///
/// # Safety
/// `output_tensor` is any pointer value (checked).
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_reset_output_completion(
    output_tensor: *mut nrt_tensor_t,
) -> NRT_STATUS {
    entry("nrt_tensor_reset_output_completion", || {
        global::with_rt(|r| {
            Ok(r.rt
                .nrt()
                .tensors()
                .reset_output_completion(r.tensor(output_tensor)?)?)
        })
    })
}
