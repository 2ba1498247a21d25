//! libnrt.so has no model limit of its own: under the default configuration 1 000 small models
//! load with `vnc = -1` (each on the first free logical core, then the least loaded), every
//! logical core takes its share, and unloading them all leaves the device as it was (one test:
//! the runtime is process-global).

use std::ffi::c_void;
use std::ptr::null_mut;

use nrt::*;

const OK: NRT_STATUS = 0;
const MODELS: usize = 1000;

const MODEL: &[u8] = br#"{"format":"nrt-dmem-model/2","name":"adapter",
    "allocations":[{"usage":"WEIGHT","location":"device","size":65536,"hint":"lora_ab"},
                   {"usage":"INSTR_PE","location":"device","size":4096,"hint":"instr"}],
    "inputs":[{"name":"in","size":16}],
    "outputs":[{"name":"out","size":16}]}"#;

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
fn a_thousand_models_load_on_first_free_cores() {
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2");
    std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    for v in [
        "NRT_DMEM_MAX_MODELS",
        "NRT_DMEM_MAX_DMEMS",
        "NRT_DMEM_MAX_TENSORS",
        "NEURON_RT_VISIBLE_CORES",
        "NEURON_RT_NUM_CORES",
    ] {
        std::env::remove_var(v);
    }
    // SAFETY: C-ABI calls with valid pointers; every model is unloaded before `nrt_close`.
    unsafe {
        assert_eq!(nrt_init(1, null_mut(), null_mut()), OK);
        let mut cores = 0u32;
        assert_eq!(nrt_get_visible_vnc_count(&mut cores), OK);
        assert!(cores > 1, "trn2 has several logical cores");
        let before: Vec<usize> = (0..cores).map(used).collect();
        let mut per_core = vec![0usize; cores as usize];
        let mut models = Vec::with_capacity(MODELS);
        for i in 0..MODELS {
            let mut m = null_mut();
            let st = nrt_load(MODEL.as_ptr() as *const c_void, MODEL.len(), -1, -1, &mut m);
            assert_eq!(st, OK, "model {i} of {MODELS}");
            let mut info = nrt_model_info_t::default();
            assert_eq!(
                nrt_get_model_info(m, &mut info, size_of::<nrt_model_info_t>(), null_mut()),
                OK
            );
            per_core[info.vnc as usize] += 1;
            models.push(m);
        }
        let (lo, hi) = (
            per_core.iter().min().copied().unwrap(),
            per_core.iter().max().copied().unwrap(),
        );
        assert!(hi - lo <= 1, "first free, then least loaded: {per_core:?}");
        for m in models {
            assert_eq!(nrt_unload(m), OK);
        }
        let after: Vec<usize> = (0..cores).map(used).collect();
        assert_eq!(after, before, "unloading every model frees every byte");
        nrt_close();
    }
}
