//! The core counts before `nrt_init` (one test: they read the process environment).

use nrt::*;

#[test]
fn total_does_not_depend_on_the_visible_slice() {
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2");
    std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    std::env::remove_var("NEURON_RT_NUM_CORES");
    std::env::remove_var("NEURON_RT_VIRTUAL_CORE_SIZE");
    let (mut total, mut visible) = (0u32, 0u32);
    // An out-of-range slice: the total is still answered (it is how a user finds the valid
    // range); the visible count is refused with the reason.
    std::env::set_var("NEURON_RT_VISIBLE_CORES", "5");
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(nrt_get_total_vnc_count(&mut total), 0);
        assert_eq!(total, 4, "trn2 at LNC 2");
        assert_eq!(nrt_get_visible_vnc_count(&mut visible), 2, "NRT_INVALID");
    }
    std::env::set_var("NEURON_RT_VISIBLE_CORES", "1-2");
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(nrt_get_total_vnc_count(&mut total), 0);
        assert_eq!(nrt_get_visible_vnc_count(&mut visible), 0);
    }
    assert_eq!((total, visible), (4, 2));
    // The device string's placement option (`+tlsf`, docs/PLACEMENT.md) is read here too;
    // an unknown one is refused with the reason.
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2x2+tlsf");
    // SAFETY: a valid out-pointer.
    unsafe {
        assert_eq!(nrt_get_total_vnc_count(&mut total), 0);
    }
    assert_eq!(total, 8, "two trn2 at LNC 2");
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2+fast");
    // SAFETY: a valid out-pointer.
    unsafe {
        assert_eq!(nrt_get_total_vnc_count(&mut total), 2, "NRT_INVALID");
        let msg = std::ffi::CStr::from_ptr(nrtx_get_last_error_message());
        assert!(
            msg.to_string_lossy().contains("unknown placement"),
            "{msg:?}"
        );
    }
}
