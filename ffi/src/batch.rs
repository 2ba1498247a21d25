//! `nrt_tensor_read_batch` / `nrt_tensor_write_batch` (public SDK `nrt.h`, libnrt 2.31):
//! many reads or writes, on many tensors, in one call.

use std::mem::size_of;

use crate::batch_op::nrt_tensor_batch_op_t;
use crate::global::{self, entry, in_bytes, out_bytes, Fail, Res, Runtime};
use crate::status::NRT_STATUS;
use crate::tensor::window;
use crate::types::nrt_tensor_t;

/// The operations on one tensor.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct nrt_tensor_batch_t {
    /// The tensor.
    pub tensor: *const nrt_tensor_t,
    /// `num_ops` operations on it.
    pub ops: *const nrt_tensor_batch_op_t,
    /// Number of operations.
    pub num_ops: u32,
}

const _: () = assert!(std::mem::size_of::<nrt_tensor_batch_t>() == 24);

/// `n` elements at `p`: empty when `n` is 0, NRT_INVALID when `p` is NULL otherwise.
///
/// # Safety
/// `p` is NULL or valid for reads of `n` elements.
unsafe fn slice_of<'a, T>(p: *const T, n: usize, what: &str) -> Res<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::invalid(format_args!("{what} is NULL")));
    }
    if n.checked_mul(size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(Fail::invalid(format_args!(
            "{what}: {n} entries are too many"
        )));
    }
    // SAFETY: non-null, in range, readable by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Runs every operation of every batch, in order: checks all of them first (live tensors,
/// windows inside them, non-NULL arrays and buffers), so a bad one is NRT_INVALID with nothing
/// copied, then copies. Each copy resolves its tensor's handle again (the core pins it for the
/// copy): a tensor freed by another thread after the checks fails its copy with NRT_INVALID
/// (the caller's race; nothing of anybody else's is touched).
///
/// # Safety
/// `batches` holds `num_batches` entries whose `ops` and buffers are valid as declared.
unsafe fn run(batches: *const nrt_tensor_batch_t, num_batches: u64, write: bool) -> Res {
    global::with_rt(|r| {
        let n =
            usize::try_from(num_batches).map_err(|_| Fail::invalid("num_batches is too large"))?;
        // SAFETY: caller contract.
        let batches = unsafe { slice_of(batches, n, "batches") }?;
        let mut work = Vec::new();
        for (i, b) in batches.iter().enumerate() {
            let h = r.tensor(b.tensor).map_err(|e| at(e, i, None))?;
            // SAFETY: caller contract (`ops` holds `num_ops` entries).
            let ops = unsafe { slice_of(b.ops, b.num_ops as usize, "ops") }
                .map_err(|e| at(e, i, None))?;
            for (j, op) in ops.iter().enumerate() {
                let (Ok(off), Ok(size)) = (usize::try_from(op.offset), usize::try_from(op.size))
                else {
                    return Err(at(Fail::invalid("offset or size is too large"), i, Some(j)));
                };
                window(r, h, off, size).map_err(|e| at(e, i, Some(j)))?;
                if size > 0 && op.buffer.is_null() {
                    return Err(at(Fail::invalid("buffer is NULL"), i, Some(j)));
                }
                work.push((h, *op));
            }
        }
        for (t, op) in work {
            copy(r, t, &op, write)?;
        }
        Ok(())
    })
}

/// One checked operation.
fn copy(r: &Runtime, t: nrt_core::TensorHandle, op: &nrt_tensor_batch_op_t, write: bool) -> Res {
    let nrt = r.rt.nrt();
    if write {
        // SAFETY: checked non-NULL for a non-empty op; caller contract for its size.
        let b = unsafe { in_bytes(op.buffer as *const u8, op.size as usize, "buffer") }?;
        Ok(nrt.tensors().write(t, b, op.offset)?)
    } else {
        // SAFETY: as above; the caller's buffers do not overlap each other's use here.
        let b = unsafe { out_bytes(op.buffer as *mut u8, op.size as usize, "buffer") }?;
        Ok(nrt.tensors().read(t, b, op.offset)?)
    }
}

/// `f` with the batch (and operation) it is about.
fn at(f: Fail, batch: usize, op: Option<usize>) -> Fail {
    let whr = match op {
        Some(j) => format!("batches[{batch}].ops[{j}]"),
        None => format!("batches[{batch}]"),
    };
    Fail::new(f.status, format_args!("{whr}: {}", f.msg))
}

/// Reads from many tensors at once: for each batch, each operation copies `size` bytes at
/// `offset` of the batch's tensor into `buffer`. Every operation is checked before anything
/// is copied (a freed tensor, a window past the end, a NULL array or buffer is NRT_INVALID,
/// naming the batch and operation). `unsafe` is accepted and ignored: the checks always run.
///
/// # Safety
/// `batches` holds `num_batches` entries; each `ops` holds `num_ops` operations whose
/// buffers are writable for their sizes.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_read_batch(
    batches: *const nrt_tensor_batch_t,
    num_batches: u64,
    r#unsafe: bool,
) -> NRT_STATUS {
    let _ = r#unsafe;
    // SAFETY: forwarded caller contract.
    entry("nrt_tensor_read_batch", || unsafe {
        run(batches, num_batches, false)
    })
}

/// Writes to many tensors at once (as `nrt_tensor_read_batch`, from `buffer` into the tensor).
///
/// # Safety
/// As `nrt_tensor_read_batch`, the buffers readable.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_write_batch(
    batches: *const nrt_tensor_batch_t,
    num_batches: u64,
    r#unsafe: bool,
) -> NRT_STATUS {
    let _ = r#unsafe;
    // SAFETY: forwarded caller contract.
    entry("nrt_tensor_write_batch", || unsafe {
        run(batches, num_batches, true)
    })
}
