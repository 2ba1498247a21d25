//! `nrt_load`, `nrt_unload`, `nrt_execute` (public API §2; spec §4–§5, §7.3).
//!
//! `nrt_load` takes a NEFF container (docs/NEFF.md: its header gates, archive and metadata are
//! checked as libnrt checks them, and its footprint is booked under libnrt's usage types) or a
//! model manifest (JSON, format `"nrt-dmem-model/2"`, docs/MANIFEST.md): this runtime models
//! libnrt's device memory, not the NeuronCore's instruction set. The `nrt_model_t *` handed
//! back is the core's `ModelHandle` encoded in the pointer value (`Runtime::model_ptr`: its
//! logical core and `H_MODEL` id, never reused below 2³² loads); every call decodes a
//! caller's pointer and the core checks it (no registry, no process-wide lock), never
//! dereferences it.

use std::ffi::c_void;

use nrt_core::LogicalCore;
use nrt_host::model_file::{self, LoadError, Place};

use crate::global::{self, entry, in_bytes, put, Fail, Res};
use crate::status::NRT_STATUS;
use crate::types::{nrt_model_t, nrt_tensor_set_t};

/// Loads a model onto logical core `vnc` (-1: the first with no model, else the one with the
/// fewest) and makes all of its device memory: per-subgraph allocations, GPSIMD libraries,
/// scratchpad. All-or-nothing: on failure no memory stays allocated.
///
/// `neff_bytes`/`size` hold a NEFF, or a model manifest (JSON, format "nrt-dmem-model/2").
/// A NEFF libnrt 2.31 would refuse for its version, feature bits or packager is
/// NRT_UNSUPPORTED_NEFF_VERSION, any other bad NEFF or manifest NRT_INVALID, each with the
/// precise reason (a manifest's names the field, line and column), before anything is
/// allocated; device out-of-memory is NRT_RESOURCE (`nrtx_get_oom_report` shows the memory at
/// that moment).
/// `vnc_count` is deprecated and ignored (pass -1).
///
/// # Safety
/// `neff_bytes` is valid for reads of `size` bytes; `model` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrt_load(
    neff_bytes: *const c_void,
    size: usize,
    vnc: i32,
    vnc_count: i32,
    model: *mut *mut nrt_model_t,
) -> NRT_STATUS {
    let _ = vnc_count;
    // SAFETY: forwarded caller contract.
    entry("nrt_load", || unsafe { load(neff_bytes, size, vnc, model) })
}

/// The body of `nrt_load` (and of a single-rank `nrt_load_collectives`).
///
/// # Safety
/// As `nrt_load`.
pub(crate) unsafe fn load(
    neff_bytes: *const c_void,
    size: usize,
    vnc: i32,
    model: *mut *mut nrt_model_t,
) -> Res {
    global::with_rt(|r| {
        if model.is_null() {
            return Err(Fail::invalid("model is NULL"));
        }
        if size == 0 {
            return Err(Fail::invalid("the model is empty (size 0)"));
        }
        // SAFETY: caller contract.
        let bytes = unsafe { in_bytes(neff_bytes as *const u8, size, "neff_bytes") }?;
        let opts = model_file::read_options_from_env();
        // `-1` loads pick and load under one lock (taken once the model is validated), so two
        // of them never pick the same free core.
        let place = if vnc == -1 {
            Place::FirstFree(&r.free_core_pick)
        } else {
            Place::Core(LogicalCore::from_c(vnc))
        };
        let loaded = match model_file::load_source(&r.rt.nrt(), place, &bytes, &opts) {
            Ok(l) => l,
            Err(LoadError::Load {
                error,
                model,
                requested_device_bytes,
                vnc,
            }) => {
                return r.core(Err(error), || {
                    model_oom_note(&model, requested_device_bytes, vnc)
                })
            }
            Err(LoadError::Core(e)) => return r.core(Err(e), String::new),
            Err(e) => return Err(Fail::new(e.status(), e)),
        };
        let h = loaded.handle;
        log::info!(target: "nrt_load", "loaded model {} ({}) on logical core {}", h.h_model().id, loaded.file.name(), loaded.vnc);
        r.rt.note_loaded(h, loaded.file.name());
        let p = r.model_ptr(h)?;
        // SAFETY: checked non-null; caller contract.
        unsafe { put(model, p, "model") }
    })
}

/// What the model asked for, for the OOM report (users budget with it, public API §6).
fn model_oom_note(name: &str, requested: u64, vnc: i64) -> String {
    format!(
        "while loading model \"{}\" onto logical core {vnc}: it asks for {:.3}MB of device \
         memory (before page rounding, libraries and shared scratchpad on top); the load was \
         rolled back\n",
        name.escape_debug(),
        requested as f64 / (1024.0 * 1024.0),
    )
}

/// Unloads a model: waits for its executions in flight, then frees all of its device memory
/// (no other model's memory changes). The pointer is invalid afterwards; passing it (or a copy)
/// again is NRT_INVALID_HANDLE, also after later loads: model ids are never reused (below
/// 2³² loads). Of two threads unloading the same model, one unloads it and the other gets
/// NRT_INVALID_HANDLE.
///
/// # Safety
/// `model` is any pointer value (it is decoded, never dereferenced).
#[no_mangle]
pub unsafe extern "C" fn nrt_unload(model: *mut nrt_model_t) -> NRT_STATUS {
    entry("nrt_unload", || {
        global::with_rt(|r| {
            let h = r.model(model)?;
            r.rt.nrt().models().unload(h)?;
            r.rt.note_unloaded(h);
            Ok(())
        })
    })
}

/// Executes a model. Inputs and outputs are bound by the names the model declares; a missing
/// or wrongly sized tensor is NRT_INVALID. This runtime models memory, not compute: each
/// declared output receives the bytes of the input at the same position (the rest of it is
/// zero-filled), and every output's completion count goes up by one
/// (`nrt_tensor_check_output_completion`).
///
/// # Safety
/// `model`, `input_set` and `output_set` are any pointer values (decoded and checked by the
/// core, never dereferenced); a tensor in a set freed since it was added is NRT_INVALID.
#[no_mangle]
pub unsafe extern "C" fn nrt_execute(
    model: *mut nrt_model_t,
    input_set: *const nrt_tensor_set_t,
    output_set: *mut nrt_tensor_set_t,
) -> NRT_STATUS {
    entry("nrt_execute", || execute(model, input_set, output_set, 1))
}

/// The body of `nrt_execute` (`repeat` = 1) and `nrt_execute_repeat`: binds the sets once
/// and executes `repeat` times.
pub(crate) fn execute(
    model: *const nrt_model_t,
    input_set: *const nrt_tensor_set_t,
    output_set: *const nrt_tensor_set_t,
    repeat: u32,
) -> Res {
    global::with_rt(|r| {
        let h = r.model(model)?;
        let (ins, outs) = (
            r.set(input_set, "input_set"),
            r.set(output_set, "output_set"),
        );
        if ins.is_err() || outs.is_err() {
            // The model is checked before the sets, as the core's execute does.
            r.rt.nrt().models().core(h)?;
        }
        let (ins, outs) = (ins?, outs?);
        for _ in 0..repeat {
            r.rt.execute(h, ins, outs)?;
        }
        Ok(())
    })
}
