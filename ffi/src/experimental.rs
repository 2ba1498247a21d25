//! `nrt/nrt_experimental.h` (public SDK, libnrt 2.31): a model's input/output tensor table
//! (`nrt_get_model_tensor_info`), its logical core (`nrt_get_model_info`), and the
//! experimental entry points this memory-path runtime does not implement, which fail with
//! `NRT_FAILURE` and one log line.
//!
//! The tensor table comes from the core's per-model IO table
//! ([`nrt_core::Models::for_each_io`]: name, usage, size, dtype, shape), which the load
//! filled from the model's declarations (a manifest's `inputs`/`outputs`, a NEFF's
//! `neff.json`); this file never looks at where they came from.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::mem::{align_of, offset_of, size_of};
use std::sync::{LazyLock, Mutex};

use nrt_core::abi::NRT_STATUS as CoreStatus;
use nrt_core::model::IoUsage;

use crate::global::{self, entry, lock, put, put_sized, Fail, Res};
use crate::info::nrt_dtype_t;
use crate::status::NRT_STATUS;
use crate::types::nrt_model_t;
use crate::unsupported::unsupported;

/// Whether a tensor is read or written by the model. Values are fixed by the public API.
pub type nrt_tensor_usage_t = u32;
/// The tensor is an input (ifmap).
pub const NRT_TENSOR_USAGE_INPUT: nrt_tensor_usage_t = 0;
/// The tensor is an output (ofmap).
pub const NRT_TENSOR_USAGE_OUTPUT: nrt_tensor_usage_t = 1;

/// Bytes of `nrt_tensor_info_t.name`, NUL included.
pub const NRT_TENSOR_NAME_MAX: usize = 256;

/// One input or output of a model (296 bytes).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct nrt_tensor_info_t {
    /// Name of the tensor, NUL-terminated: the name to use in the tensor set.
    pub name: [c_char; NRT_TENSOR_NAME_MAX],
    /// Input or output.
    pub usage: nrt_tensor_usage_t,
    /// Tensor size in bytes.
    pub size: usize,
    /// Element type.
    pub dtype: nrt_dtype_t,
    /// `ndim` dimensions, outermost first (owned by the array; NULL when `ndim` is 0).
    pub shape: *mut u32,
    /// Number of dimensions.
    pub ndim: u32,
}

/// A model's tensors (`nrt_get_model_tensor_info`; free with `nrt_free_model_tensor_info`).
#[repr(C)]
pub struct nrt_tensor_info_array_t {
    /// Number of entries in `tensor_array`: inputs first, then outputs.
    pub tensor_count: u64,
    /// The tensors.
    pub tensor_array: [nrt_tensor_info_t; 0],
}

const _: () = {
    assert!(size_of::<nrt_tensor_info_t>() == 296);
    assert!(offset_of!(nrt_tensor_info_t, usage) == 256);
    assert!(offset_of!(nrt_tensor_info_t, size) == 264);
    assert!(offset_of!(nrt_tensor_info_t, dtype) == 272);
    assert!(offset_of!(nrt_tensor_info_t, shape) == 280);
    assert!(offset_of!(nrt_tensor_info_t, ndim) == 288);
    assert!(size_of::<nrt_tensor_info_array_t>() == 8);
    assert!(offset_of!(nrt_tensor_info_array_t, tensor_array) == 8);
};

/// Called when an asynchronous execution completes (`nrt_register_async_exec_callback`).
pub type NRT_ASYNC_EXEC_STATUS_CALLBACK = Option<
    unsafe extern "C" fn(
        params: *mut c_void,
        model_id: u32,
        vnc: u32,
        job_id: u64,
        status: NRT_STATUS,
    ),
>;

/// Arrays handed out by `nrt_get_model_tensor_info` and not yet freed, by address, with the
/// layout they were allocated with: `nrt_free_model_tensor_info` frees only these.
static ARRAYS: LazyLock<Mutex<BTreeMap<usize, Layout>>> = LazyLock::new(Default::default);

/// One row of the table, as the core's IO table holds it ([`nrt_core::Models::for_each_io`]).
struct IoRow {
    name: String,
    usage: nrt_tensor_usage_t,
    size: u64,
    dtype: nrt_dtype_t,
    shape: Vec<u32>,
}

/// One block: the array header, `io.len()` entries, then every shape.
fn build_array(io: &[IoRow]) -> Res<*mut nrt_tensor_info_array_t> {
    let too_big = || {
        Fail::new(
            CoreStatus::NRT_FAIL_HOST_MEM_ALLOC,
            "tensor table too large",
        )
    };
    let head = size_of::<nrt_tensor_info_array_t>();
    let entries = io
        .len()
        .checked_mul(size_of::<nrt_tensor_info_t>())
        .ok_or_else(too_big)?;
    let dims: usize = io.iter().map(|t| t.shape.len()).sum();
    let total = dims
        .checked_mul(size_of::<u32>())
        .and_then(|d| d.checked_add(head + entries))
        .ok_or_else(too_big)?;
    let layout = Layout::from_size_align(total, align_of::<nrt_tensor_info_array_t>())
        .map_err(|_| too_big())?;
    // SAFETY: `layout` has a non-zero size (at least the 8-byte header).
    let base = unsafe { alloc_zeroed(layout) };
    if base.is_null() {
        return Err(Fail::new(
            CoreStatus::NRT_FAIL_HOST_MEM_ALLOC,
            format_args!("cannot allocate {total} bytes for the tensor table"),
        ));
    }
    let arr = base as *mut nrt_tensor_info_array_t;
    // SAFETY: `base` is a fresh, zeroed, 8-aligned block of `head + entries + 4 * dims`
    // bytes: the header at 0, entry i at `head + 296 * i` (8-aligned: 296 = 8 * 37), the
    // shapes packed after the entries (4-aligned). Every write below stays inside it.
    unsafe {
        (*arr).tensor_count = io.len() as u64;
        let infos = base.add(head) as *mut nrt_tensor_info_t;
        let mut shapes = base.add(head + entries) as *mut u32;
        for (i, t) in io.iter().enumerate() {
            let shape = if t.shape.is_empty() {
                std::ptr::null_mut()
            } else {
                shapes
            };
            std::ptr::copy_nonoverlapping(t.shape.as_ptr(), shapes, t.shape.len());
            shapes = shapes.add(t.shape.len());
            infos.add(i).write(nrt_tensor_info_t {
                name: crate::info::c_text(&t.name),
                usage: t.usage,
                size: t.size as usize,
                dtype: t.dtype,
                shape,
                ndim: t.shape.len() as u32,
            });
        }
    }
    lock(&ARRAYS).insert(base.addr(), layout);
    Ok(arr)
}

/// The input and output tensors of a loaded model: name, usage, size, element type and
/// shape, inputs first, then outputs, in the order the model declares them. `*tensor_info`
/// receives an array this library allocated; release it with `nrt_free_model_tensor_info`.
/// A model that is not loaded is NRT_INVALID_HANDLE; NULL `tensor_info` is NRT_INVALID.
///
/// # Safety
/// `tensor_info` is NULL or valid for a write; `model` is any pointer value (decoded and
/// checked by the core, never dereferenced).
#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_tensor_info(
    model: *mut nrt_model_t,
    tensor_info: *mut *mut nrt_tensor_info_array_t,
) -> NRT_STATUS {
    entry("nrt_get_model_tensor_info", || {
        global::with_rt(|r| {
            if tensor_info.is_null() {
                return Err(Fail::invalid("tensor_info is NULL"));
            }
            let h = r.model(model)?;
            let mut io = Vec::new();
            r.rt.nrt().models().for_each_io(h, |t| {
                io.push(IoRow {
                    name: t.name.to_string(),
                    usage: match t.usage {
                        IoUsage::Input => NRT_TENSOR_USAGE_INPUT,
                        IoUsage::Output => NRT_TENSOR_USAGE_OUTPUT,
                    },
                    size: t.size,
                    dtype: t.dtype,
                    shape: t.shape.to_vec(),
                })
            })?;
            let arr = build_array(&io)?;
            // SAFETY: checked non-null; caller contract.
            unsafe { put(tensor_info, arr, "tensor_info") }
        })
    })
}

/// Releases an array from `nrt_get_model_tensor_info` (also after `nrt_close`). NULL is a
/// no-op (NRT_SUCCESS); a pointer this library did not hand out, or one already freed, is
/// NRT_INVALID and nothing is freed.
///
/// # Safety
/// `tensor_info` is any pointer value (looked up before anything is freed).
#[no_mangle]
pub unsafe extern "C" fn nrt_free_model_tensor_info(
    tensor_info: *mut nrt_tensor_info_array_t,
) -> NRT_STATUS {
    entry("nrt_free_model_tensor_info", || {
        if tensor_info.is_null() {
            return Ok(());
        }
        let layout = lock(&ARRAYS).remove(&tensor_info.addr()).ok_or_else(|| {
            Fail::invalid(
                "tensor_info is not an array from nrt_get_model_tensor_info (already freed, \
                 foreign or corrupt pointer)",
            )
        })?;
        // SAFETY: the registry held this address, so it came from `alloc_zeroed(layout)` in
        // `build_array` and has not been freed (it is removed from the registry first).
        unsafe { dealloc(tensor_info as *mut u8, layout) };
        Ok(())
    })
}

/// Optimal number of threads calling `nrt_execute` on a loaded model (deprecated): 1 (one
/// execution per core at a time, spec section 4.6).
///
/// # Safety
/// `instance_count` is NULL or valid for a write; `model` is any pointer value.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_instance_count(
    model: *mut nrt_model_t,
    instance_count: *mut u32,
) -> NRT_STATUS {
    entry("nrt_get_model_instance_count", || {
        // SAFETY: forwarded caller contract.
        unsafe { crate::info::per_model(model, instance_count, 1, "instance_count") }
    })
}

/// Enables tracing (not supported by this runtime: NRT_FAILURE).
#[no_mangle]
pub extern "C" fn nrt_trace_start(trace_mem: bool) -> NRT_STATUS {
    let _ = trace_mem;
    unsupported("nrt_trace_start", "tracing")
}

/// Serializes and disables tracing (not supported: NRT_FAILURE).
#[no_mangle]
pub extern "C" fn nrt_trace_stop(filename: *const c_char) -> NRT_STATUS {
    let _ = filename;
    unsupported("nrt_trace_stop", "tracing")
}

/// The collectives network plugin (not supported: NULL, `*err` set to NRT_FAILURE and
/// `err_msg` to the reason when they are not NULL).
///
/// # Safety
/// `err` is NULL or writable; `err_msg` is NULL or valid for writes of `err_msg_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_libnccl_net(
    err: *mut c_int,
    err_msg: *mut c_char,
    err_msg_size: usize,
) -> *mut c_void {
    unsupported("nrt_get_libnccl_net", "collectives");
    if !err.is_null() {
        // SAFETY: non-null; caller contract.
        unsafe { err.write(CoreStatus::NRT_FAILURE as c_int) };
    }
    if !err_msg.is_null() && err_msg_size > 0 {
        let msg = b"nrt-dmem does not implement collectives";
        let n = msg.len().min(err_msg_size - 1);
        // SAFETY: `err_msg` holds `err_msg_size > n` bytes (caller contract).
        unsafe {
            std::ptr::copy_nonoverlapping(msg.as_ptr(), err_msg as *mut u8, n);
            err_msg.add(n).write(0);
        }
    }
    std::ptr::null_mut()
}

/// A ucode image.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct nrt_ucode_img {
    /// Image bytes.
    pub bin: *mut u8,
    /// Image size in bytes.
    pub size: usize,
}

/// The pooling engine's iram and dram images.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct nrt_ucode_info {
    /// Instruction RAM image.
    pub iram: nrt_ucode_img,
    /// Data RAM image.
    pub dram: nrt_ucode_img,
}

const _: () = assert!(size_of::<nrt_ucode_img>() == 16 && size_of::<nrt_ucode_info>() == 32);

/// Replaces the pooling engine's ucode (not supported: NRT_FAILURE).
#[no_mangle]
pub extern "C" fn nrt_set_pool_eng_ucode(ucode_info: *const nrt_ucode_info) -> NRT_STATUS {
    let _ = ucode_info;
    unsupported("nrt_set_pool_eng_ucode", "custom pooling-engine ucode")
}

/// Copies to memory-mapped device memory (not supported: NRT_FAILURE; this library hands
/// out no device mappings).
#[no_mangle]
pub extern "C" fn nrt_memcpy_to_device(
    dest: *mut c_void,
    src: *const c_void,
    size: usize,
) -> NRT_STATUS {
    let _ = (dest, src, size);
    unsupported("nrt_memcpy_to_device", "mapped device memory")
}

/// Registers an asynchronous-execution callback (not supported: NRT_FAILURE; executions are
/// synchronous here).
#[no_mangle]
pub extern "C" fn nrt_register_async_exec_callback(
    callback: NRT_ASYNC_EXEC_STATUS_CALLBACK,
    params: *mut c_void,
) -> NRT_STATUS {
    let _ = (callback, params);
    unsupported("nrt_register_async_exec_callback", "asynchronous execution")
}

/// A barrier over all workers. Only a single worker is supported, as for
/// `nrt_load_collectives`: with `g_device_id` 0 of `g_device_count` 1 there is no one to wait
/// for, so it succeeds once `vnc` is a logical core this process owns;
/// `g_device_id >= g_device_count` is NRT_INVALID; more workers are NRT_FAILURE (this runtime
/// has no collectives transport).
#[no_mangle]
pub extern "C" fn nrt_barrier(vnc: i32, g_device_id: u32, g_device_count: u32) -> NRT_STATUS {
    entry("nrt_barrier", || {
        if g_device_id >= g_device_count {
            return Err(Fail::invalid(format_args!(
                "g_device_id {g_device_id} is not below g_device_count {g_device_count}"
            )));
        }
        if g_device_count > 1 {
            return Err(Fail::new(
                CoreStatus::NRT_FAILURE,
                format_args!(
                    "{g_device_count} workers: nrt-dmem runs collectives for a single worker \
                     only (g_device_count 1)"
                ),
            ));
        }
        global::with_rt(|r| owned_core(r, vnc))
    })
}

/// `vnc` is a logical core this process owns (NRT_INVALID otherwise).
fn owned_core(r: &global::Runtime, vnc: i32) -> Res {
    let vnc =
        u32::try_from(vnc).map_err(|_| Fail::invalid(format_args!("vnc {vnc} is negative")))?;
    r.rt.nrt().logical_core(vnc)?;
    Ok(())
}

/// All-rank AllGather (not supported: NRT_FAILURE).
#[no_mangle]
pub extern "C" fn nrt_all_gather(
    vnc: i32,
    g_device_id: u32,
    g_device_count: u32,
    rank_input_size: u32,
    input: *mut c_void,
    output: *mut c_void,
) -> NRT_STATUS {
    let _ = (
        vnc,
        g_device_id,
        g_device_count,
        rank_input_size,
        input,
        output,
    );
    unsupported("nrt_all_gather", "collectives")
}

/// Waits for the queued asynchronous executions of logical core `vnc`: a success once `vnc`
/// is a core this process owns, since executions here are synchronous (nothing is ever
/// queued); another `vnc` is NRT_INVALID.
#[no_mangle]
pub extern "C" fn nrt_async_drain_queued_execs(vnc: i32) -> NRT_STATUS {
    entry("nrt_async_drain_queued_execs", || {
        global::with_rt(|r| owned_core(r, vnc))
    })
}

/// What `nrt_get_model_info` reports. Fields are only ever added at the end (size-in/size-out).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, zerocopy::IntoBytes, zerocopy::Immutable)]
pub struct nrt_model_info_t {
    /// The logical core the model is loaded on.
    pub vnc: u32,
}

/// Information about a loaded model: copies `min(info_size_in, sizeof(nrt_model_info_t))`
/// bytes to `info` and writes this library's `sizeof(nrt_model_info_t)` to `*info_size_out`
/// (when not NULL). A model that is not loaded is NRT_INVALID_HANDLE.
///
/// # Safety
/// `info` is NULL or valid for writes of `info_size_in` bytes; `info_size_out` is NULL or
/// writable; `model` is any pointer value.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_info(
    model: *const nrt_model_t,
    info: *mut nrt_model_info_t,
    info_size_in: usize,
    info_size_out: *mut usize,
) -> NRT_STATUS {
    entry("nrt_get_model_info", || {
        global::with_rt(|r| {
            let h = r.model(model)?;
            // A model's core is one the runtime loaded it on: always an index.
            let vnc = r.rt.nrt().models().core(h)?.index().unwrap_or(u32::MAX);
            // SAFETY: caller contract.
            unsafe {
                put_sized(
                    &nrt_model_info_t { vnc },
                    info,
                    info_size_in,
                    info_size_out,
                    ["info", "info_size_in"],
                )
            }
        })
    })
}
