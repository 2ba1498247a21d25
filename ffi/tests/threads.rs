//! The C ABI under threads (one test: the runtime is process-global): executions and tensor
//! traffic from several threads at once, then `nrt_close` while calls are in flight — every
//! call answers SUCCESS or NRT_CLOSED, none crashes or hangs (an unbounded completion wait
//! returns when the runtime closes), and a new `nrt_init` starts clean.

use std::ffi::{c_void, CStr};
use std::ptr::null_mut;
use std::thread;
use std::time::Duration;

use nrt::*;

const OK: NRT_STATUS = 0;
const INVALID: NRT_STATUS = 2;
const CLOSED: NRT_STATUS = 14;
const INVALID_HANDLE: NRT_STATUS = 3;

fn used(vnc: u32) -> usize {
    let mut s = nrt_vnc_memory_stats_t::default();
    // SAFETY: valid out-pointers.
    let st = unsafe {
        nrt_get_vnc_memory_stats(vnc, &mut s, size_of::<nrt_vnc_memory_stats_t>(), null_mut())
    };
    assert_eq!(st, OK);
    s.bytes_used
}

fn resnet() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/models/resnet50.json"
    ))
    .unwrap()
}

/// One execution of resnet50 with fresh tensors; returns the first failing status.
fn execute_once(m: *mut nrt_model_t, seed: u8) -> NRT_STATUS {
    // SAFETY: C-ABI calls with valid pointers; every object is released before returning.
    unsafe {
        let (mut i, mut o) = (null_mut(), null_mut());
        let mut st = nrt_tensor_allocate(0, 0, 602112, c"input".as_ptr(), &mut i);
        if st == OK {
            st = nrt_tensor_allocate(2, -1, 4000, c"output".as_ptr(), &mut o);
        }
        let data = vec![seed; 4000];
        if st == OK {
            st = nrt_tensor_write(i, data.as_ptr() as *const c_void, 0, data.len());
        }
        let (mut si, mut so) = (null_mut(), null_mut());
        if st == OK {
            st = nrt_allocate_tensor_set(&mut si);
        }
        if st == OK {
            st = nrt_allocate_tensor_set(&mut so);
        }
        if st == OK {
            st = nrt_add_tensor_to_tensor_set(si, c"input".as_ptr(), i);
        }
        if st == OK {
            st = nrt_add_tensor_to_tensor_set(so, c"output".as_ptr(), o);
        }
        if st == OK {
            st = nrt_execute(m, si, so);
        }
        if st == OK {
            let mut back = vec![0u8; 4000];
            st = nrt_tensor_read(o, back.as_mut_ptr() as *mut c_void, 0, 4000);
            if st == OK {
                assert_eq!(back, data, "output carries this thread's input");
            }
        }
        nrt_destroy_tensor_set(&mut si);
        nrt_destroy_tensor_set(&mut so);
        nrt_tensor_free(&mut i);
        nrt_tensor_free(&mut o);
        st
    }
}

#[test]
fn threads_execute_together_and_close_waits_for_them() {
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2");
    std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    // SAFETY: C-ABI calls with valid pointers throughout.
    unsafe {
        assert_eq!(nrt_init(1, c"2.0".as_ptr(), null_mut()), OK);
        let base = used(0);
        let json = resnet();
        let mut m = null_mut();
        assert_eq!(
            nrt_load(json.as_ptr() as *const c_void, json.len(), -1, -1, &mut m),
            OK
        );
        let model = m as usize;
        let workers: Vec<_> = (0..4u8)
            .map(|k| {
                thread::spawn(move || {
                    for n in 0..25u8 {
                        assert_eq!(execute_once(model as *mut nrt_model_t, k * 50 + n), OK);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(nrt_unload(m), OK);
        assert_eq!(
            used(0),
            base,
            "every thread's tensors and the model are gone"
        );

        // Two threads unloading the same model: one unloads it, the other is told the handle
        // is gone (never both reaching the core, never both succeeding).
        for _ in 0..20 {
            let json = resnet();
            assert_eq!(
                nrt_load(json.as_ptr() as *const c_void, json.len(), 0, -1, &mut m),
                OK
            );
            let model = m as usize;
            let both: Vec<_> = (0..2)
                .map(|_| thread::spawn(move || nrt_unload(model as *mut nrt_model_t)))
                .collect();
            let mut got: Vec<NRT_STATUS> = both.into_iter().map(|t| t.join().unwrap()).collect();
            got.sort();
            assert_eq!(got, [OK, INVALID_HANDLE]);
            assert_eq!(used(0), base);
        }

        // Close while calls are in flight.
        let json = resnet();
        assert_eq!(
            nrt_load(json.as_ptr() as *const c_void, json.len(), 0, -1, &mut m),
            OK
        );
        let model = m as usize;
        let busy: Vec<_> = (0..3u8)
            .map(|k| {
                thread::spawn(move || loop {
                    // Until this thread sees the close: every answer is SUCCESS or CLOSED (a
                    // tensor freed by nrt_close between two of its calls is CLOSED too).
                    match execute_once(model as *mut nrt_model_t, k) {
                        OK => continue,
                        CLOSED => return,
                        st => panic!("status {st}"),
                    }
                })
            })
            .collect();
        let mut out = null_mut();
        assert_eq!(
            nrt_tensor_allocate(0, 0, 64, c"waited".as_ptr(), &mut out),
            OK
        );
        let waited = out as usize;
        let waiter = thread::spawn(move || {
            // Never completes: must return when the runtime closes, not hang.
            nrt_tensor_check_output_completion(waited as *const nrt_tensor_t, -1, 1)
        });
        thread::sleep(Duration::from_millis(200));
        nrt_close();
        assert_eq!(waiter.join().unwrap(), CLOSED);
        for b in busy {
            b.join().expect("a busy thread failed");
        }
        assert_eq!(nrt_unload(m), CLOSED);
        let msg = CStr::from_ptr(nrtx_get_last_error_message());
        assert!(msg.to_str().unwrap().contains("nrt_unload"), "{msg:?}");

        // A new runtime starts clean; stale pointers from the old one are refused.
        assert_eq!(nrt_init(1, null_mut(), null_mut()), OK);
        assert_eq!(used(0), base);
        assert_eq!(nrt_tensor_get_size(out), 0);
        assert_eq!(nrt_tensor_reset_output_completion(out), INVALID);
        assert_eq!(nrt_unload(m), 3);
        nrt_close();
    }
}
