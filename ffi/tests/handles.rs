//! Opaque pointers a C application keeps too long or shares between threads: tensor pointers
//! are the core's generation-checked handles, so a stale copy is always refused, even after
//! 10⁵ tensors came and went in its slot, and one of a closed runtime too; a free racing another call on the same tensor waits for it; a
//! completion wait that spans `nrt_close` + `nrt_init` ends with NRT_CLOSED; `nrt_load` with
//! `vnc = -1` takes the first free logical core (public API §2). The runtime is
//! process-global, so the tests take turns.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use nrt::*;

const OK: NRT_STATUS = 0;
const INVALID: NRT_STATUS = 2;
const CLOSED: NRT_STATUS = 14;
const VIRTUAL: nrt_tensor_placement_t = 2;

static SERIAL: Mutex<()> = Mutex::new(());

/// Takes this binary's turn and initialises the runtime on a simulated trn2.
fn init() -> MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2");
    std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    // SAFETY: NULL version strings are allowed.
    assert_eq!(unsafe { nrt_init(1, null_mut(), null_mut()) }, OK);
    g
}

#[test]
fn a_stale_tensor_pointer_is_refused_however_many_tensors_came_since() {
    let _turn = init();
    // SAFETY: C-ABI calls with valid out-pointers; `stale` is deliberately a freed tensor.
    unsafe {
        let mut batch: Vec<*mut nrt_tensor_t> = Vec::new();
        let mut stale = null_mut();
        // 20 batches of 1 000: far past the core's 8 192 fresh tensor slots and its
        // 64-release quarantine, so its slots are reused many times over.
        for step in 0..20 {
            for t in batch.iter_mut() {
                nrt_tensor_free(t);
                assert!(t.is_null());
            }
            batch.clear();
            for _ in 0..1000 {
                let mut t = null_mut();
                assert_eq!(
                    nrt_tensor_allocate(VIRTUAL, -1, 64, c"step".as_ptr(), &mut t),
                    OK
                );
                assert_ne!(t, stale, "a freed tensor's pointer was handed out again");
                assert_eq!(nrt_tensor_memset(t, 0, step, 64), OK);
                batch.push(t);
            }
            if step == 9 {
                stale = batch[0];
            }
        }
        let mut b = [0u8; 8];
        assert_eq!(
            nrt_tensor_read(stale, b.as_mut_ptr() as *mut c_void, 0, 8),
            INVALID
        );
        assert_eq!(nrt_tensor_get_size(stale), 0);
        // A double free through an old copy is a logged no-op: every live tensor survives.
        let mut copy = stale;
        nrt_tensor_free(&mut copy);
        assert!(copy.is_null());
        for &t in &batch {
            assert_eq!(nrt_tensor_read(t, b.as_mut_ptr() as *mut c_void, 0, 8), OK);
            assert_eq!(b, [19; 8]);
        }
        // A tensor set keeps the handle, and refuses it once freed.
        let mut set = null_mut();
        assert_eq!(nrt_allocate_tensor_set(&mut set), OK);
        assert_eq!(
            nrt_add_tensor_to_tensor_set(set, c"x".as_ptr(), stale),
            INVALID
        );
        assert_eq!(
            nrt_add_tensor_to_tensor_set(set, c"x".as_ptr(), batch[0]),
            OK
        );
        let mut back = null_mut();
        assert_eq!(
            nrt_get_tensor_from_tensor_set(set, c"x".as_ptr(), &mut back),
            OK
        );
        assert_eq!(back, batch[0]);
        nrt_destroy_tensor_set(&mut set);
    }
    nrt_close();
}

/// A freed tensor's pointer stays refused after 10⁵ other frees
/// (on a core whose tensors reuse the same few slots), and freeing it again frees nobody's.
#[test]
fn a_stale_tensor_pointer_is_refused_after_a_hundred_thousand_frees() {
    let _turn = init();
    // SAFETY: C-ABI calls with valid out-pointers; `stale` is deliberately a freed tensor.
    unsafe {
        let mut stale = null_mut();
        assert_eq!(nrt_tensor_allocate(0, 0, 4096, null_mut(), &mut stale), OK);
        let kept = stale;
        nrt_tensor_free(&mut stale);
        let mut live = null_mut();
        for i in 0..100_000u32 {
            let mut t = null_mut();
            assert_eq!(nrt_tensor_allocate(0, 0, 4096, null_mut(), &mut t), OK);
            assert_ne!(t, kept, "a freed tensor's pointer was handed out again");
            if i == 99_999 {
                live = t;
            } else {
                nrt_tensor_free(&mut t);
            }
        }
        assert_eq!(nrt_tensor_memset(live, 0, 7, 4096), OK);
        let mut copy = kept;
        nrt_tensor_free(&mut copy);
        assert_eq!(nrt_tensor_get_size(kept), 0);
        let mut b = [0u8; 4];
        assert_eq!(
            nrt_tensor_read(live, b.as_mut_ptr() as *mut c_void, 0, 4),
            OK
        );
        assert_eq!(
            b, [7; 4],
            "the double free through the stale copy touched a live tensor"
        );
        nrt_tensor_free(&mut live);
    }
    nrt_close();
}

/// A tensor pointer of a runtime `nrt_close` ended is refused in every later runtime,
/// including after 64 more `nrt_init`s, when the runtime serial bits the pointer carries come
/// round again and the new runtime's tensor sits in the same slot; the pointers of the other
/// kinds (set, model) and forged values are not tensors either.
#[test]
fn tensor_pointers_of_closed_runtimes_and_other_kinds_are_refused() {
    let turn = init();
    let mut old = null_mut();
    // SAFETY: valid out-pointers; `old` is deliberately kept past its runtime.
    unsafe {
        assert_eq!(
            nrt_tensor_allocate(VIRTUAL, -1, 64, null_mut(), &mut old),
            OK
        );
    }
    nrt_close();
    drop(turn);
    for round in 0..70 {
        let _turn = init();
        let mut t = null_mut();
        // SAFETY: as above.
        unsafe {
            assert_eq!(nrt_tensor_allocate(VIRTUAL, -1, 64, null_mut(), &mut t), OK);
            assert_eq!(nrt_tensor_memset(t, 0, 1, 64), OK);
            assert_eq!(nrt_tensor_get_size(old), 0, "round {round}");
            assert_eq!(nrt_tensor_memset(old, 0, 9, 64), INVALID, "round {round}");
            let mut copy = old;
            nrt_tensor_free(&mut copy);
            let mut b = [0u8; 4];
            assert_eq!(nrt_tensor_read(t, b.as_mut_ptr() as *mut c_void, 0, 4), OK);
            assert_eq!(b, [1; 4], "round {round}");
            if round == 0 {
                let mut set = null_mut();
                assert_eq!(nrt_allocate_tensor_set(&mut set), OK);
                assert_eq!(nrt_tensor_get_size(set as *const nrt_tensor_t), 0);
                assert_eq!(
                    nrt_unload(t as *mut nrt_model_t),
                    3,
                    "a tensor is not a model (NRT_INVALID_HANDLE)"
                );
                for forged in [
                    1usize,
                    8,
                    usize::MAX,
                    t as usize ^ (1 << 40),
                    t as usize + 8,
                ] {
                    assert_eq!(nrt_tensor_get_size(forged as *const nrt_tensor_t), 0);
                }
                nrt_destroy_tensor_set(&mut set);
            }
            nrt_tensor_free(&mut t);
        }
        nrt_close();
    }
}

#[test]
fn a_completion_wait_spanning_close_and_init_ends_with_closed() {
    for _ in 0..5 {
        let turn = init();
        let mut t = null_mut();
        // SAFETY: valid out-pointer.
        let st = unsafe { nrt_tensor_allocate(VIRTUAL, -1, 64, c"o".as_ptr(), &mut t) };
        assert_eq!(st, OK);
        let h = t as usize;
        let waiter = thread::spawn(move || {
            // SAFETY: the pointer is looked up by the library, never dereferenced.
            unsafe { nrt_tensor_check_output_completion(h as *const nrt_tensor_t, -1, 1) }
        });
        thread::sleep(Duration::from_millis(50));
        nrt_close();
        // SAFETY: NULL version strings are allowed.
        assert_eq!(unsafe { nrt_init(1, null_mut(), null_mut()) }, OK);
        assert_eq!(waiter.join().unwrap(), CLOSED);
        // Outside a wait, a tensor of the closed runtime is simply not a tensor here, for a
        // wait that starts now too.
        // SAFETY: looked up, never dereferenced.
        assert_eq!(unsafe { nrt_tensor_reset_output_completion(t) }, INVALID);
        // SAFETY: as above.
        let st = unsafe { nrt_tensor_check_output_completion(t, 0, 1) };
        assert_eq!(st, INVALID);
        nrt_close();
        drop(turn);
    }
}

#[test]
fn a_free_racing_a_call_on_the_same_tensor_waits_for_it() {
    let _turn = init();
    // Above glibc's mmap threshold, so the freed memory is unmapped: a call still writing
    // into it would crash.
    const SIZE: usize = 64 << 20;
    for _ in 0..50 {
        let mut t = null_mut();
        // SAFETY: valid out-pointer.
        let st = unsafe { nrt_tensor_allocate(VIRTUAL, -1, SIZE, c"r".as_ptr(), &mut t) };
        assert_eq!(st, OK);
        let h = t as usize;
        let busy = thread::spawn(move || {
            // SAFETY: the handle is looked up by the library, never dereferenced.
            unsafe { nrt_tensor_memset(h as *mut nrt_tensor_t, 0, 0x5a, SIZE) }
        });
        thread::sleep(Duration::from_micros(300));
        // SAFETY: a valid pointer to the handle.
        unsafe { nrt_tensor_free(&mut t) };
        let st = busy.join().unwrap();
        assert!(st == OK || st == INVALID, "status {st}");
    }
    nrt_close();
}

#[test]
fn load_with_vnc_minus_one_takes_the_first_free_core() {
    let _turn = init();
    let json = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/models/resnet50.json"
    ))
    .unwrap();
    // SAFETY: valid buffers and out-pointers.
    unsafe {
        let mut count = 0u32;
        assert_eq!(nrt_get_visible_vnc_count(&mut count), OK);
        let load = |vnc: i32| {
            let mut m = null_mut();
            assert_eq!(
                nrt_load(json.as_ptr() as *const c_void, json.len(), vnc, -1, &mut m),
                OK
            );
            let mut mem = nrtx_model_memory_t::default();
            let size = size_of::<nrtx_model_memory_t>();
            assert_eq!(nrtx_get_model_memory(m, &mut mem, size, null_mut()), OK);
            mem.vnc
        };
        assert_eq!(load(1), 1);
        // Core 1 is taken: -1 fills 0, 2, 3, … then doubles up from the lowest.
        let mut got: Vec<u32> = (0..count).map(|_| load(-1)).collect();
        got.sort_unstable();
        let mut want: Vec<u32> = (0..count).filter(|&v| v != 1).collect();
        want.push(0);
        want.sort_unstable();
        assert_eq!(got, want);
    }
    nrt_close();
}

#[test]
fn concurrent_minus_one_loads_take_different_cores() {
    let _turn = init();
    let json = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/models/resnet50.json"
    ))
    .unwrap();
    let mut count = 0u32;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { nrt_get_visible_vnc_count(&mut count) }, OK);
    let cores: Vec<u32> = thread::scope(|s| {
        let loads: Vec<_> = (0..count)
            .map(|_| {
                s.spawn(|| {
                    let mut m = null_mut();
                    let mut mem = nrtx_model_memory_t::default();
                    let size = size_of::<nrtx_model_memory_t>();
                    // SAFETY: valid buffers and out-pointers.
                    unsafe {
                        let p = json.as_ptr() as *const c_void;
                        assert_eq!(nrt_load(p, json.len(), -1, -1, &mut m), OK);
                        assert_eq!(nrtx_get_model_memory(m, &mut mem, size, null_mut()), OK);
                    }
                    mem.vnc
                })
            })
            .collect();
        loads.into_iter().map(|l| l.join().unwrap()).collect()
    });
    let mut sorted = cores.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..count).collect::<Vec<_>>(), "{cores:?}");
    nrt_close();
}
