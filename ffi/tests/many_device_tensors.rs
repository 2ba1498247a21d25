//! Device memory, not the runtime or the simulated driver, is what bounds how many tensors
//! live at once: under the default configuration 131 072 live 4 KiB DEVICE tensors on two
//! logical cores of `sim:trn2` (65 536 in each core's HBM small-object pool, where the driver
//! holds 262 144 pages), each booked and readable, and every byte back after they are freed
//! (one test: the runtime is process-global).

use std::ptr::null_mut;

use nrt::*;

const OK: NRT_STATUS = 0;
const DEVICE: nrt_tensor_placement_t = 0;
const PER_CORE: usize = 65536;
const SIZE: usize = 4096;

/// Device bytes in use on logical core `vnc`.
fn used(vnc: u32) -> usize {
    let mut s = nrt_vnc_memory_stats_t::default();
    let size = size_of::<nrt_vnc_memory_stats_t>();
    // SAFETY: a valid out-pointer of `size` bytes.
    let st = unsafe { nrt_get_vnc_memory_stats(vnc, &mut s, size, null_mut()) };
    assert_eq!(st, OK);
    s.bytes_used
}

#[test]
fn a_hundred_thirty_thousand_device_tensors_live_at_once() {
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2");
    std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    for v in [
        "NRT_DMEM_MAX_TENSORS",
        "NRT_DMEM_MAX_DMEMS",
        "NRT_DMEM_SIM_CHANNEL_SIZE",
    ] {
        std::env::remove_var(v);
    }
    // SAFETY: C-ABI calls with valid pointers; every tensor is freed before `nrt_close`.
    unsafe {
        assert_eq!(nrt_init(1, null_mut(), null_mut()), OK);
        let before = [used(0), used(1)];
        let mut live = Vec::with_capacity(2 * PER_CORE);
        for vnc in 0..2 {
            for i in 0..PER_CORE {
                let mut t = null_mut();
                let st = nrt_tensor_allocate(DEVICE, vnc, SIZE, null_mut(), &mut t);
                assert_eq!(st, OK, "tensor {i} on logical core {vnc}");
                live.push(t);
            }
        }
        for vnc in 0..2 {
            assert_eq!(used(vnc) - before[vnc as usize], PER_CORE * SIZE);
        }
        // A sample reads back what was written.
        for &t in [live[0], live[PER_CORE], live[2 * PER_CORE - 1]].iter() {
            let b = [0xa5u8; SIZE];
            assert_eq!(nrt_tensor_write(t, b.as_ptr().cast(), 0, SIZE), OK);
            let mut r = [0u8; SIZE];
            assert_eq!(nrt_tensor_read(t, r.as_mut_ptr().cast(), 0, SIZE), OK);
            assert_eq!(r, b);
        }
        for mut t in live {
            nrt_tensor_free(&mut t);
            assert!(t.is_null());
        }
        assert_eq!([used(0), used(1)], before);
        nrt_close();
    }
}
