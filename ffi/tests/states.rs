//! The state table of docs/STATES.md, C layer: every C call the table names answers, in each
//! lifecycle state (uninit, init, closed), what the table says, through the same parser as the
//! Rust layer's `core-nostd/tests/states.rs`. The runtime is process-global, so this binary is
//! one test that walks the states in order: uninit is the process before its first `nrt_init`.
//!
//! Calls that return no status (`void`, a size, a pointer) are read through the thread's last
//! error: a known failure is recorded first, and if the call leaves it in place it recorded
//! nothing (`NRT_SUCCESS`); otherwise the new message names the status.

#[path = "../../core-nostd/tests/common/states.rs"]
mod states;

use std::ffi::{c_void, CStr};
use std::mem::{size_of, MaybeUninit};
use std::ptr::{null, null_mut};

use nrt::*;
use nrt_core::abi::NRT_STATUS as Status;

const DEVICE: nrt_tensor_placement_t = 0;

/// A model with one small allocation and no IO tensors (so `nrt_execute` takes empty sets).
const MODEL: &str = r#"{ "format": "nrt-dmem-model/2", "name": "states",
  "allocations": [ { "usage": "WEIGHT", "location": "device", "size": 65536 } ] }"#;

/// The objects the calls work on: made in the init state, forged before it (non-NULL values
/// no runtime handed out: the C layer's pointers are handles it looks up, never dereferences,
/// and a NULL would make `nrt_tensor_free` a documented no-op), kept (stale) after `close`. The
/// state gate answers before any argument check, so the pointers' worth never shows in the
/// uninit and closed cells.
struct Kit {
    t: *mut nrt_tensor_t,
    m: *mut nrt_model_t,
    inputs: *mut nrt_tensor_set_t,
    outputs: *mut nrt_tensor_set_t,
}

impl Kit {
    fn forged() -> Kit {
        Kit {
            t: std::ptr::without_provenance_mut(0x7e50),
            m: std::ptr::without_provenance_mut(0x7e51),
            inputs: std::ptr::without_provenance_mut(0x7e52),
            outputs: std::ptr::without_provenance_mut(0x7e53),
        }
    }

    fn make() -> Kit {
        let mut k = Kit::forged();
        // SAFETY: valid out-pointers and a NUL-terminated name; MODEL outlives the call.
        unsafe {
            assert_eq!(
                nrt_tensor_allocate(DEVICE, 0, 64, c"kit".as_ptr(), &mut k.t),
                0
            );
            k.m = load().expect("the kit's model loads");
            assert_eq!(nrt_allocate_tensor_set(&mut k.inputs), 0);
            assert_eq!(nrt_allocate_tensor_set(&mut k.outputs), 0);
        }
        k
    }
}

fn load() -> Result<*mut nrt_model_t, NRT_STATUS> {
    let mut m = null_mut();
    // SAFETY: MODEL's bytes are valid for its length; `m` is a valid out-pointer.
    let s = unsafe { nrt_load(MODEL.as_ptr().cast(), MODEL.len(), 0, 1, &mut m) };
    if s == 0 {
        Ok(m)
    } else {
        Err(s)
    }
}

fn name(s: NRT_STATUS) -> String {
    match Status::from_raw(s) {
        Some(v) => format!("{v:?}"),
        None => format!("status {s}"),
    }
}

/// A zeroed C struct for a size-in/size-out call.
fn zeroed<T>() -> T {
    // SAFETY: only used for the C ABI's plain-data out structs, for which zero is valid.
    unsafe { MaybeUninit::<T>::zeroed().assume_init() }
}

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated, valid until this thread's next failing call.
    unsafe { CStr::from_ptr(nrtx_get_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// The status a call without one recorded: `call` runs after a known failure is recorded.
fn recorded(call: impl FnOnce()) -> String {
    // A failure whose text no call below produces: NRT_INVALID from a NULL version buffer.
    // SAFETY: NULL is refused, not written.
    unsafe { nrt_get_version(null_mut(), 0) };
    let marker = last_error();
    call();
    let after = last_error();
    if after == marker {
        return "NRT_SUCCESS".into();
    }
    for e in [nrt_core::Error::Uninitialized, nrt_core::Error::Closed] {
        if after.ends_with(&e.to_string()) {
            return format!("{:?}", e.status());
        }
    }
    // The C layer's refusal of a set pointer it never handed out (`Fail::invalid`, set.rs).
    if after.contains("is not a live tensor set") {
        return "NRT_INVALID".into();
    }
    format!("another failure: {after}")
}

/// The answer of C call `c` in the current state (None: this test has no call of that name).
fn answer(k: &Kit, c: &str) -> Option<String> {
    let mut buf = [0u8; 8];
    let mut out = 0usize;
    let mut count = 0u32;
    // SAFETY: every pointer below is a valid out-pointer or buffer of the size passed, or a
    // kit object (live in the init state; NULL or stale otherwise, which the state gate
    // refuses before reading).
    let s = unsafe {
        match c {
            "nrt_init" => nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, null(), null()),
            "nrt_close" => return Some(recorded(|| nrt_close())),
            "nrt_get_visible_vnc_count" => nrt_get_visible_vnc_count(&mut count),
            "nrt_get_total_vnc_count" => nrt_get_total_vnc_count(&mut count),
            "nrt_tensor_allocate" => {
                let mut t = null_mut();
                let s = nrt_tensor_allocate(DEVICE, 0, 64, c"a".as_ptr(), &mut t);
                nrt_tensor_free(&mut t);
                s
            }
            "nrt_tensor_allocate_empty" => {
                let mut t = null_mut();
                let s = nrt_tensor_allocate_empty(c"e".as_ptr(), &mut t);
                nrt_tensor_free(&mut t);
                s
            }
            "nrt_tensor_attach_buffer" => {
                let mut t = null_mut();
                let _ = nrt_tensor_allocate_empty(c"e".as_ptr(), &mut t);
                let leaked: &'static mut [u8] = Box::leak(vec![0u8; 64].into_boxed_slice());
                nrt_tensor_attach_buffer(t, leaked.as_mut_ptr().cast(), 64)
            }
            "nrt_tensor_allocate_slice" => {
                let mut t = null_mut();
                nrt_tensor_allocate_slice(k.t, 0, 8, c"s".as_ptr(), &mut t)
            }
            "nrt_tensor_free" => {
                let mut t = null_mut();
                let _ = nrt_tensor_allocate(DEVICE, 0, 64, c"f".as_ptr(), &mut t);
                if t.is_null() {
                    t = k.t; // outside the init state: the forged or stale kit tensor
                }
                return Some(recorded(|| nrt_tensor_free(&mut t)));
            }
            "nrt_tensor_get_size" => {
                return Some(recorded(|| {
                    nrt_tensor_get_size(k.t);
                }))
            }
            "nrt_tensor_get_va" => {
                return Some(recorded(|| {
                    nrt_tensor_get_va(k.t);
                }))
            }
            "nrt_tensor_write" => nrt_tensor_write(k.t, buf.as_ptr().cast(), 0, 8),
            "nrt_tensor_read" => nrt_tensor_read(k.t, buf.as_mut_ptr().cast(), 0, 8),
            "nrt_tensor_memset" => nrt_tensor_memset(k.t, 0, 1, 8),
            "nrt_tensor_copy" => {
                let mut d = null_mut();
                let _ = nrt_tensor_allocate(DEVICE, 0, 64, c"d".as_ptr(), &mut d);
                let s = nrt_tensor_copy(k.t, 0, if d.is_null() { k.t } else { d }, 0, 8);
                nrt_tensor_free(&mut d);
                s
            }
            "nrt_tensor_get_device_allocation_info" => {
                let mut i = zeroed::<nrt_tensor_device_allocation_info_t>();
                nrt_tensor_get_device_allocation_info(k.t, &mut i)
            }
            "nrt_tensor_check_output_completion" => nrt_tensor_check_output_completion(k.t, 0, 0),
            "nrt_tensor_reset_output_completion" => nrt_tensor_reset_output_completion(k.t),
            "nrt_tensor_read_batch" | "nrt_tensor_write_batch" => {
                let op = nrt_tensor_batch_op_t {
                    offset: 0,
                    size: 8,
                    buffer: buf.as_mut_ptr().cast::<c_void>(),
                };
                let b = nrt_tensor_batch_t {
                    tensor: k.t,
                    ops: &op,
                    num_ops: 1,
                };
                if c == "nrt_tensor_read_batch" {
                    nrt_tensor_read_batch(&b, 1, false)
                } else {
                    nrt_tensor_write_batch(&b, 1, false)
                }
            }
            "nrt_load" => match load() {
                Ok(m) => {
                    assert_eq!(nrt_unload(m), 0, "a model nrt_load made unloads");
                    0
                }
                Err(s) => s,
            },
            "nrt_unload" => match load() {
                Ok(m) => nrt_unload(m),
                Err(_) => nrt_unload(k.m),
            },
            "nrt_execute" => nrt_execute(k.m, k.inputs, k.outputs),
            "nrt_execute_repeat" => nrt_execute_repeat(k.m, k.inputs, k.outputs, 2),
            "nrt_get_model_info" => {
                let mut i = zeroed::<nrt_model_info_t>();
                nrt_get_model_info(k.m, &mut i, size_of::<nrt_model_info_t>(), &mut out)
            }
            "nrt_get_model_tensor_info" => {
                let mut info = null_mut();
                let s = nrt_get_model_tensor_info(k.m, &mut info);
                let _ = nrt_free_model_tensor_info(info);
                s
            }
            "nrt_allocate_tensor_set" => {
                let mut set = null_mut();
                let s = nrt_allocate_tensor_set(&mut set);
                nrt_destroy_tensor_set(&mut set);
                s
            }
            "nrt_destroy_tensor_set" => {
                let mut set = null_mut();
                let _ = nrt_allocate_tensor_set(&mut set);
                if set.is_null() {
                    set = k.inputs; // outside the init state: the forged or stale kit set
                }
                return Some(recorded(|| nrt_destroy_tensor_set(&mut set)));
            }
            "nrt_add_tensor_to_tensor_set" => {
                let mut set = null_mut();
                let _ = nrt_allocate_tensor_set(&mut set);
                let target = if set.is_null() { k.outputs } else { set };
                let s = nrt_add_tensor_to_tensor_set(target, c"x".as_ptr(), k.t);
                nrt_destroy_tensor_set(&mut set);
                s
            }
            "nrt_get_tensor_from_tensor_set" => {
                let mut set = null_mut();
                let _ = nrt_allocate_tensor_set(&mut set);
                let target = if set.is_null() { k.outputs } else { set };
                let _ = nrt_add_tensor_to_tensor_set(target, c"x".as_ptr(), k.t);
                let mut t = null_mut();
                let s = nrt_get_tensor_from_tensor_set(target, c"x".as_ptr(), &mut t);
                nrt_destroy_tensor_set(&mut set);
                s
            }
            "nrt_get_vnc_memory_stats" => {
                let mut m = zeroed::<nrt_vnc_memory_stats_t>();
                nrt_get_vnc_memory_stats(0, &mut m, size_of::<nrt_vnc_memory_stats_t>(), &mut out)
            }
            "nrtx_get_vnc_memory_stats" => {
                let mut m = zeroed::<nrtx_vnc_memory_stats_t>();
                nrtx_get_vnc_memory_stats(0, &mut m, size_of::<nrtx_vnc_memory_stats_t>(), &mut out)
            }
            "nrtx_get_vnc_usage" => {
                let mut u = zeroed::<nrtx_vnc_usage_t>();
                nrtx_get_vnc_usage(0, &mut u, size_of::<nrtx_vnc_usage_t>(), &mut out)
            }
            "nrtx_reset_vnc_memory_peak" => nrtx_reset_vnc_memory_peak(0),
            "nrtx_get_hbm_stats" => {
                let mut h = zeroed::<nrtx_hbm_stats_t>();
                nrtx_get_hbm_stats(0, 0, &mut h, size_of::<nrtx_hbm_stats_t>(), &mut out)
            }
            "nrtx_get_vnc_hbm_stats" => {
                let mut h = zeroed::<nrtx_hbm_stats_t>();
                nrtx_get_vnc_hbm_stats(0, &mut h, size_of::<nrtx_hbm_stats_t>(), &mut out)
            }
            "nrtx_get_oom_report" => {
                let mut text = vec![0 as std::ffi::c_char; 1 << 16];
                nrtx_get_oom_report(text.as_mut_ptr(), text.len(), &mut out)
            }
            _ => return None,
        }
    };
    Some(name(s))
}

#[test]
fn every_c_call_answers_the_state_table() {
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2");
    std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    for v in [
        "NEURON_RT_VISIBLE_CORES",
        "NEURON_RT_NUM_CORES",
        "NEURON_RT_VIRTUAL_CORE_SIZE",
    ] {
        std::env::remove_var(v);
    }
    assert!(states::table().len() > 40, "docs/STATES.md has no table");
    let c = |r: &states::Row| r.c;
    let mut bad = Vec::new();
    let none = Kit::forged();
    // uninit: the process before its first nrt_init (init itself last: it changes the state).
    bad.extend(states::check_state("C", c, 0, "nrt_init", |n| {
        answer(&none, n)
    }));
    // init (close last).
    let k = Kit::make();
    bad.extend(states::check_state("C", c, 1, "nrt_close", |n| {
        answer(&k, n)
    }));
    // closed (init last), with the kit's objects now stale.
    bad.extend(states::check_state("C", c, 2, "nrt_init", |n| {
        answer(&k, n)
    }));
    nrt_close();
    assert!(
        bad.is_empty(),
        "{} disagreement(s):\n{}",
        bad.len(),
        bad.join("\n")
    );
}
