//! Calls whose answer depends on which function was called and which argument was wrong: the
//! deprecated `nc` spellings of the core counts report themselves, `nrt_get_model_info` names
//! the argument that is NULL, `nrt_barrier` of a single worker succeeds, and
//! `nrt_async_drain_queued_execs` checks its core. The runtime is process-global, so this
//! binary is one test.

use std::ffi::{c_void, CStr};
use std::ptr::null_mut;

use nrt::*;

const OK: NRT_STATUS = 0;
const FAILURE: NRT_STATUS = 1;
const INVALID: NRT_STATUS = 2;
const UNINITIALIZED: NRT_STATUS = 13;

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated, valid until this thread's next failing call.
    unsafe { CStr::from_ptr(nrtx_get_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// `status` is `want` and the thread's last error starts with `func: ` and contains `text`.
fn failed(status: NRT_STATUS, want: NRT_STATUS, func: &str, text: &str) {
    let msg = last_error();
    assert_eq!(status, want, "{func}: {msg}");
    assert!(
        msg.starts_with(&format!("{func}: ")) && msg.contains(text),
        "{func} should report itself and `{text}`: {msg}"
    );
}

const MODEL: &[u8] = br#"{"format":"nrt-dmem-model/2","name":"tiny",
    "allocations":[{"usage":"WEIGHT","location":"device","size":4096}]}"#;

#[test]
fn failures_name_the_called_function_and_the_bad_argument() {
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2");
    std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    std::env::remove_var("NEURON_RT_VISIBLE_CORES");
    std::env::remove_var("NEURON_RT_NUM_CORES");
    type Count = unsafe extern "C" fn(*mut u32) -> NRT_STATUS;
    let counts: [(Count, &str); 4] = [
        (nrt_get_total_nc_count, "nrt_get_total_nc_count"),
        (nrt_get_visible_nc_count, "nrt_get_visible_nc_count"),
        (nrt_get_total_vnc_count, "nrt_get_total_vnc_count"),
        (nrt_get_visible_vnc_count, "nrt_get_visible_vnc_count"),
    ];
    for (count, func) in counts {
        // SAFETY: a NULL out-pointer is refused, never written.
        failed(
            unsafe { count(null_mut()) },
            INVALID,
            func,
            "vnc_count is NULL",
        );
    }
    failed(
        nrt_barrier(0, 0, 1),
        UNINITIALIZED,
        "nrt_barrier",
        "nrt_init",
    );
    // SAFETY: NULL version strings are allowed.
    assert_eq!(unsafe { nrt_init(1, null_mut(), null_mut()) }, OK);

    // A barrier of one worker has no one to wait for; more workers need a transport.
    assert_eq!(nrt_barrier(0, 0, 1), OK);
    let mut visible = 0u32;
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { nrt_get_visible_vnc_count(&mut visible) }, OK);
    let last = visible as i32 - 1;
    assert_eq!(nrt_barrier(last, 0, 1), OK, "the last logical core");
    failed(
        nrt_barrier(last + 1, 0, 1),
        INVALID,
        "nrt_barrier",
        "out of range",
    );
    failed(nrt_barrier(-1, 0, 1), INVALID, "nrt_barrier", "vnc -1");
    failed(
        nrt_barrier(0, 1, 1),
        INVALID,
        "nrt_barrier",
        "g_device_id 1",
    );
    failed(
        nrt_barrier(0, 0, 0),
        INVALID,
        "nrt_barrier",
        "g_device_count 0",
    );
    failed(
        nrt_barrier(0, 0, 2),
        FAILURE,
        "nrt_barrier",
        "single worker",
    );
    // Nothing is ever queued, but the core is still checked.
    assert_eq!(nrt_async_drain_queued_execs(last), OK);
    failed(
        nrt_async_drain_queued_execs(-1),
        INVALID,
        "nrt_async_drain_queued_execs",
        "vnc -1",
    );

    let mut m = null_mut();
    // SAFETY: a valid buffer, out-pointers and sizes; NULLs where the test wants refusals.
    unsafe {
        let s = nrt_load(MODEL.as_ptr() as *const c_void, MODEL.len(), 0, -1, &mut m);
        assert_eq!(s, OK, "{}", last_error());
        failed(
            nrt_get_model_info(m, null_mut(), 4, null_mut()),
            INVALID,
            "nrt_get_model_info",
            "info is NULL but info_size_in is not 0",
        );
        failed(
            nrt_get_instance_info(null_mut(), 4),
            INVALID,
            "nrt_get_instance_info",
            "info is NULL",
        );
        failed(
            nrt_get_vnc_memory_stats(0, null_mut(), 8, null_mut()),
            INVALID,
            "nrt_get_vnc_memory_stats",
            "stats is NULL but stats_size_in is not 0",
        );
        let mut size = 0;
        let mut info = nrt_model_info_t { vnc: u32::MAX };
        assert_eq!(
            nrt_get_model_info(m, &mut info, size_of::<nrt_model_info_t>(), &mut size),
            OK
        );
        assert_eq!((info.vnc, size), (0, size_of::<nrt_model_info_t>()));
        assert_eq!(nrt_unload(m), OK);
    }
    nrt_close();
}
