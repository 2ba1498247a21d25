//! Model and tensor-set pointers a C application keeps too long or shares between threads
//! (bad input at the C layer): they are the core's `ModelHandle` / `SetHandle` encoded in
//! the pointer value, so an unloaded model, a destroyed set, one of a closed or re-initialised
//! runtime, or a forged value is refused at any age, and nothing else changes. The runtime is
//! process-global, so the tests take turns.

use std::ffi::{c_void, CStr};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard};

use nrt::*;

const OK: NRT_STATUS = 0;
const INVALID: NRT_STATUS = 2;
const INVALID_HANDLE: NRT_STATUS = 3;
const RESOURCE: NRT_STATUS = 4;
const CLOSED: NRT_STATUS = 14;
const DEVICE: nrt_tensor_placement_t = 0;

static SERIAL: Mutex<()> = Mutex::new(());

/// Takes this binary's turn and initialises the runtime on a simulated trn2, with `sets`
/// tensor sets at most.
fn init_with(sets: &str) -> MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2");
    std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    std::env::set_var("NRT_DMEM_MAX_SETS", sets);
    // SAFETY: NULL version strings are allowed.
    assert_eq!(unsafe { nrt_init(1, null_mut(), null_mut()) }, OK);
    g
}

fn init() -> MutexGuard<'static, ()> {
    init_with("1024")
}

/// A model with one 4 KiB weight, input `in` (16 B) and output `out` (16 B, float32 [2, 2]).
const MODEL: &[u8] = br#"{"format":"nrt-dmem-model/2","name":"tiny",
    "allocations":[{"usage":"WEIGHT","location":"device","size":4096,"hint":"w"}],
    "inputs":[{"name":"in","size":16}],
    "outputs":[{"name":"out","dtype":"float32","shape":[2,2]}]}"#;

fn load(vnc: i32) -> *mut nrt_model_t {
    let mut m = null_mut();
    // SAFETY: a valid buffer and out-pointer.
    let s = unsafe {
        nrt_load(
            MODEL.as_ptr() as *const c_void,
            MODEL.len(),
            vnc,
            -1,
            &mut m,
        )
    };
    assert_eq!(s, OK);
    m
}

fn last_error() -> String {
    // SAFETY: never NULL, NUL-terminated, valid until this thread's next failing call.
    unsafe { CStr::from_ptr(nrtx_get_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// Device bytes of logical core 0 (what a refused call must leave as it was).
fn used() -> usize {
    let mut s = nrt_vnc_memory_stats_t::default();
    let size = size_of::<nrt_vnc_memory_stats_t>();
    // SAFETY: a valid out-pointer of `size` bytes.
    let st = unsafe { nrt_get_vnc_memory_stats(0, &mut s, size, null_mut()) };
    assert_eq!(st, OK);
    s.bytes_used
}

/// Every model call through `m` answers `want`, and the device memory does not move.
fn model_refused(m: *mut nrt_model_t, want: NRT_STATUS) {
    let before = used();
    // SAFETY: valid out-pointers; `m` is any pointer value (decoded, never dereferenced).
    unsafe {
        let mut set = null_mut();
        assert_eq!(nrt_allocate_tensor_set(&mut set), OK);
        assert_eq!(nrt_unload(m), want, "nrt_unload {m:?}");
        assert_eq!(nrt_execute(m, set, set), want, "nrt_execute");
        let mut info = null_mut();
        assert_eq!(nrt_get_model_tensor_info(m, &mut info), want);
        assert!(info.is_null());
        let mut count = 0;
        assert_eq!(nrt_get_model_vnc_count(m, &mut count), want);
        let mut mem = nrtx_model_memory_t::default();
        let size = size_of::<nrtx_model_memory_t>();
        assert_eq!(nrtx_get_model_memory(m, &mut mem, size, null_mut()), want);
        nrt_destroy_tensor_set(&mut set);
    }
    assert_eq!(used(), before);
}

/// Every set call through `s` is refused with NRT_INVALID, and nothing moves.
fn set_refused(s: *mut nrt_tensor_set_t, m: *mut nrt_model_t) {
    let before = used();
    // SAFETY: valid out-pointers and names; `s` is any pointer value.
    unsafe {
        let mut t = null_mut();
        assert_eq!(nrt_tensor_allocate(DEVICE, 0, 16, null_mut(), &mut t), OK);
        let after_alloc = used();
        assert_eq!(nrt_add_tensor_to_tensor_set(s, c"in".as_ptr(), t), INVALID);
        let mut got = null_mut();
        assert_eq!(
            nrt_get_tensor_from_tensor_set(s, c"in".as_ptr(), &mut got),
            INVALID
        );
        assert!(got.is_null());
        assert_eq!(nrt_execute(m, s, s), INVALID);
        let mut copy = s;
        nrt_destroy_tensor_set(&mut copy);
        assert!(copy.is_null(), "the caller's pointer is cleared");
        assert!(last_error().contains("tensor set"), "{}", last_error());
        assert_eq!(used(), after_alloc);
        nrt_tensor_free(&mut t);
    }
    assert_eq!(used(), before);
}

#[test]
fn unloaded_forged_and_other_runtimes_model_pointers_are_refused() {
    let turn = init();
    let keep = load(0);
    let stale = load(0);
    // SAFETY: `stale` is a live model pointer.
    assert_eq!(unsafe { nrt_unload(stale) }, OK);
    model_refused(stale, INVALID_HANDLE);
    let (k, s) = (keep as usize, stale as usize);
    for forged in [
        8usize,
        usize::MAX & !7,
        k ^ (1 << 40),
        k + 8,
        k ^ (1 << 9),
        s,
    ] {
        model_refused(forged as *mut nrt_model_t, INVALID_HANDLE);
    }
    model_refused(null_mut(), INVALID);
    // The kept model is whole.
    let mut mem = nrtx_model_memory_t::default();
    let size = size_of::<nrtx_model_memory_t>();
    // SAFETY: valid out-pointer.
    let st = unsafe { nrtx_get_model_memory(keep, &mut mem, size, null_mut()) };
    assert_eq!(st, OK);
    assert_eq!(mem.allocations, 1);
    nrt_close();
    // SAFETY: any pointer value.
    assert_eq!(unsafe { nrt_unload(keep) }, CLOSED);
    drop(turn);
    // A re-initialised runtime: the old pointer names nothing, for as many inits as the
    // serial bits take to come round again.
    for round in 0..70 {
        let _turn = init();
        let m = load(0);
        assert_ne!(m, keep);
        model_refused(keep, INVALID_HANDLE);
        let _ = round;
        // SAFETY: a live model.
        assert_eq!(unsafe { nrt_unload(m) }, OK);
        nrt_close();
    }
}

/// 10⁵ loads and unloads later, an unloaded model's pointer is still refused.
#[test]
fn an_unloaded_model_pointer_is_refused_after_a_hundred_thousand_unloads() {
    let _turn = init();
    let stale = load(0);
    // SAFETY: a live model.
    assert_eq!(unsafe { nrt_unload(stale) }, OK);
    for _ in 0..100_000 {
        let m = load(0);
        assert_ne!(m, stale);
        // SAFETY: a live model.
        assert_eq!(unsafe { nrt_unload(m) }, OK);
    }
    let live = load(0);
    model_refused(stale, INVALID_HANDLE);
    // SAFETY: a live model.
    assert_eq!(unsafe { nrt_unload(live) }, OK);
    nrt_close();
}

/// Destroyed sets (also 10⁵ creates and destroys later, also twice), forged values, sets of
/// a closed and of a re-initialised runtime are refused; `nrt_destroy_tensor_set` after
/// `nrt_close` clears the pointer and records NRT_CLOSED (close freed the set).
#[test]
fn destroyed_forged_and_other_runtimes_set_pointers_are_refused() {
    let turn = init();
    let m = load(0);
    // SAFETY: valid out-pointers.
    unsafe {
        let mut stale = null_mut();
        assert_eq!(nrt_allocate_tensor_set(&mut stale), OK);
        let kept = stale;
        nrt_destroy_tensor_set(&mut stale);
        assert!(stale.is_null());
        for _ in 0..100_000 {
            let mut s = null_mut();
            assert_eq!(nrt_allocate_tensor_set(&mut s), OK);
            assert_ne!(s, kept);
            nrt_destroy_tensor_set(&mut s);
        }
        set_refused(kept, m);
        let k = kept as usize;
        for forged in [8usize, k ^ (1 << 40), k + 8, k ^ (1 << 62)] {
            set_refused(forged as *mut nrt_tensor_set_t, m);
        }
        let mut old = null_mut();
        assert_eq!(nrt_allocate_tensor_set(&mut old), OK);
        nrt_close();
        let mut copy = old;
        nrt_destroy_tensor_set(&mut copy);
        assert!(copy.is_null());
        assert!(
            last_error().ends_with(&nrt_core::Error::Closed.to_string()),
            "{}",
            last_error()
        );
        drop(turn);
        let _turn = init();
        let m = load(0);
        set_refused(old, m);
        nrt_close();
    }
}

/// A full set arena is NRT_RESOURCE naming the setting that raises it; a full set (64
/// tensors) is NRT_RESOURCE; what the sets hold comes back out.
#[test]
fn full_set_arena_and_full_sets() {
    let _turn = init_with("4");
    // SAFETY: valid out-pointers and names.
    unsafe {
        let mut sets = [null_mut(); 4];
        for s in &mut sets {
            assert_eq!(nrt_allocate_tensor_set(s), OK);
        }
        let mut extra = null_mut();
        assert_eq!(nrt_allocate_tensor_set(&mut extra), RESOURCE);
        assert!(extra.is_null());
        assert!(
            last_error().contains("NRT_DMEM_MAX_SETS"),
            "{}",
            last_error()
        );
        let mut t = null_mut();
        assert_eq!(nrt_tensor_allocate(DEVICE, 0, 16, null_mut(), &mut t), OK);
        for i in 0..64 {
            let name = std::ffi::CString::new(format!("t{i}")).unwrap();
            assert_eq!(nrt_add_tensor_to_tensor_set(sets[0], name.as_ptr(), t), OK);
        }
        assert_eq!(
            nrt_add_tensor_to_tensor_set(sets[0], c"t64".as_ptr(), t),
            RESOURCE
        );
        assert_eq!(nrt_add_tensor_to_tensor_set(sets[0], c"t7".as_ptr(), t), OK);
        let mut got = null_mut();
        assert_eq!(
            nrt_get_tensor_from_tensor_set(sets[0], c"t7".as_ptr(), &mut got),
            OK
        );
        assert_eq!(got, t);
        assert_eq!(
            nrt_get_tensor_from_tensor_set(sets[0], c"t64".as_ptr(), &mut got),
            INVALID
        );
        nrt_destroy_tensor_set(&mut sets[3]);
        assert_eq!(nrt_allocate_tensor_set(&mut extra), OK);
        nrt_tensor_free(&mut t);
    }
    nrt_close();
    std::env::set_var("NRT_DMEM_MAX_SETS", "1024");
}

/// The tensor table comes from the core's IO table: names, usage, size, dtype, shape.
#[test]
fn the_tensor_table_is_what_the_model_declared() {
    let _turn = init();
    let m = load(0);
    // SAFETY: valid out-pointer; the array is read within its count and freed once.
    unsafe {
        let mut info = null_mut();
        assert_eq!(nrt_get_model_tensor_info(m, &mut info), OK);
        let arr = &*info;
        assert_eq!(arr.tensor_count, 2);
        let rows = std::slice::from_raw_parts(arr.tensor_array.as_ptr(), 2);
        let name = |r: &nrt_tensor_info_t| CStr::from_ptr(r.name.as_ptr()).to_str().unwrap();
        let shape = |r: &nrt_tensor_info_t| std::slice::from_raw_parts(r.shape, r.ndim as usize);
        assert_eq!(
            (name(&rows[0]), rows[0].usage, rows[0].size, rows[0].dtype),
            ("in", NRT_TENSOR_USAGE_INPUT, 16, NRT_DTYPE_UINT8)
        );
        assert_eq!(shape(&rows[0]), [16]);
        assert_eq!(
            (name(&rows[1]), rows[1].usage, rows[1].size, rows[1].dtype),
            ("out", NRT_TENSOR_USAGE_OUTPUT, 16, NRT_DTYPE_FLOAT32)
        );
        assert_eq!(shape(&rows[1]), [2, 2]);
        assert_eq!(nrt_free_model_tensor_info(info), OK);
    }
    nrt_close();
}

/// A model unloaded on one thread while others execute it and read its memory: each call
/// succeeds or answers NRT_INVALID_HANDLE; of two racing unloads exactly one succeeds; the
/// device memory ends where it began.
#[test]
fn a_model_unloaded_while_other_threads_use_it() {
    let _turn = init();
    // SAFETY: valid out-pointers and buffers.
    unsafe {
        let (mut si, mut so) = (null_mut(), null_mut());
        assert_eq!(nrt_allocate_tensor_set(&mut si), OK);
        assert_eq!(nrt_allocate_tensor_set(&mut so), OK);
        let (mut ti, mut to) = (null_mut(), null_mut());
        assert_eq!(nrt_tensor_allocate(DEVICE, 0, 16, null_mut(), &mut ti), OK);
        assert_eq!(nrt_tensor_allocate(DEVICE, 0, 16, null_mut(), &mut to), OK);
        assert_eq!(nrt_add_tensor_to_tensor_set(si, c"in".as_ptr(), ti), OK);
        assert_eq!(nrt_add_tensor_to_tensor_set(so, c"out".as_ptr(), to), OK);
        let base = used();
        let (si, so) = (si as usize, so as usize);
        for round in 0..100 {
            let m = load(0) as usize;
            let done = AtomicBool::new(false);
            let wins = std::thread::scope(|s| {
                let user = s.spawn(|| {
                    while !done.load(SeqCst) {
                        let mut mem = nrtx_model_memory_t::default();
                        let size = size_of::<nrtx_model_memory_t>();
                        for st in [
                            nrt_execute(m as *mut _, si as *mut _, so as *mut _),
                            nrtx_get_model_memory(m as *mut _, &mut mem, size, null_mut()),
                        ] {
                            assert!(st == OK || st == INVALID_HANDLE, "round {round}: {st}");
                        }
                    }
                });
                let unloads: Vec<_> = (0..2)
                    .map(|_| s.spawn(|| nrt_unload(m as *mut nrt_model_t)))
                    .collect();
                let wins = unloads
                    .into_iter()
                    .map(|u| u.join().unwrap())
                    .filter(|st| *st == OK)
                    .count();
                done.store(true, SeqCst);
                user.join().unwrap();
                wins
            });
            assert_eq!(wins, 1, "round {round}: exactly one unload succeeds");
            assert_eq!(used(), base, "round {round}");
        }
    }
    nrt_close();
}
