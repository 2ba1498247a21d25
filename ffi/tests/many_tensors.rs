//! libnrt.so holds as many live tensors as it is configured to: with
//! `NRT_DMEM_MAX_TENSORS=100000`, 100 000 small tensors are live at once through the C API,
//! the next one is NRT_RESOURCE with a message naming the setting, and every one frees (one
//! test: the runtime is process-global and the setting is read at `nrt_init`).

use std::ffi::CStr;
use std::ptr::null_mut;

use nrt::*;

const OK: NRT_STATUS = 0;
const RESOURCE: NRT_STATUS = 4;
/// VIRTUAL placement (host memory, no device node per tensor).
const VIRTUAL: nrt_tensor_placement_t = 2;
const LIVE: usize = 100_000;

#[test]
fn a_configured_runtime_holds_100k_live_tensors() {
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2");
    std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    std::env::set_var("NRT_DMEM_MAX_TENSORS", LIVE.to_string());
    // SAFETY: C-ABI calls with valid pointers; every tensor is freed before `nrt_close`.
    unsafe {
        assert_eq!(nrt_init(1, null_mut(), null_mut()), OK);
        let mut live = Vec::with_capacity(LIVE);
        for i in 0..LIVE {
            let mut t = null_mut();
            let st = nrt_tensor_allocate(VIRTUAL, -1, 64, null_mut(), &mut t);
            assert_eq!(st, OK, "tensor {i} of {LIVE}");
            live.push(t);
        }
        let mut extra = null_mut();
        assert_eq!(
            nrt_tensor_allocate(VIRTUAL, -1, 64, null_mut(), &mut extra),
            RESOURCE,
            "the arena holds exactly what was configured"
        );
        let msg = CStr::from_ptr(nrtx_get_last_error_message()).to_string_lossy();
        assert!(msg.contains("NRT_DMEM_MAX_TENSORS"), "{msg}");
        // A sample still answers with its own size, then everything frees.
        assert_eq!(nrt_tensor_get_size(live[LIVE / 2]), 64);
        for mut t in live {
            nrt_tensor_free(&mut t);
            assert!(t.is_null());
        }
        // Freed means reusable: the arena takes a new tensor again.
        assert_eq!(
            nrt_tensor_allocate(VIRTUAL, -1, 64, null_mut(), &mut extra),
            OK
        );
        nrt_tensor_free(&mut extra);
        nrt_close();
    }
}
