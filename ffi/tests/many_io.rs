//! An LLM shard's IO through libnrt.so: a model with 320 input/output pairs (one KV-cache pair
//! per layer) and 200-byte dotted names, as a manifest and as a NEFF. It loads,
//! `nrt_get_model_tensor_info` lists its 640 tensors with their names in order, and an execute
//! through two tensor sets bound by name moves every input to its output. Names of 255 bytes
//! are accepted and 256 refused, at the tensor and at the set (one test: the runtime is
//! process-global).

use std::ffi::{c_void, CStr, CString};
use std::ptr::null_mut;

use nrt::*;

const OK: NRT_STATUS = 0;
const INVALID: NRT_STATUS = 2;
const DEVICE: nrt_tensor_placement_t = 0;
const PAIRS: usize = 320;
const BYTES: usize = 64;

/// `model.layers.<i>.self_attn.<k|v>_cache...` padded to 200 bytes.
fn name(i: usize) -> String {
    let kind = if i < PAIRS { "in" } else { "out" };
    let base = format!("model.layers.{}.self_attn.kv_cache.{kind}.", i % PAIRS);
    format!("{base}{}", "x".repeat(200 - base.len()))
}

fn manifest() -> String {
    let t = |r: std::ops::Range<usize>| {
        r.map(|i| format!(r#"{{"name":"{}","size":{BYTES}}}"#, name(i)))
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        r#"{{"format":"nrt-dmem-model/2","name":"llama-shard",
        "allocations":[{{"usage":"WEIGHT","location":"device","size":1048576,"hint":"w"}}],
        "inputs":[{}],"outputs":[{}]}}"#,
        t(0..PAIRS),
        t(PAIRS..2 * PAIRS)
    )
}

/// Loads `bytes`, checks its tensor table and runs one execution through sets by name.
///
/// # Safety
/// The runtime is initialised.
unsafe fn load_and_run(bytes: &[u8]) {
    let mut m = null_mut();
    // SAFETY: a valid buffer and out-pointer.
    let st = unsafe { nrt_load(bytes.as_ptr() as *const c_void, bytes.len(), 0, -1, &mut m) };
    assert_eq!(st, OK, "nrt_load");
    let mut info = null_mut();
    // SAFETY: valid out-pointers; the array is read within its count and freed.
    unsafe {
        assert_eq!(nrt_get_model_tensor_info(m, &mut info), OK);
        let n = (*info).tensor_count as usize;
        assert_eq!(n, 2 * PAIRS);
        let rows = std::slice::from_raw_parts((*info).tensor_array.as_ptr(), n);
        for (i, r) in rows.iter().enumerate() {
            let got = CStr::from_ptr(r.name.as_ptr()).to_str().unwrap();
            assert_eq!(got, name(i), "tensor {i}");
            assert_eq!(r.usage, u32::from(i >= PAIRS), "usage of {i}");
            assert_eq!(r.size, BYTES);
        }
        nrt_free_model_tensor_info(info);
    }
    let (mut ins, mut outs) = (null_mut(), null_mut());
    let mut tensors = Vec::new();
    // SAFETY: valid pointers; every tensor and set is freed below.
    unsafe {
        assert_eq!(nrt_allocate_tensor_set(&mut ins), OK);
        assert_eq!(nrt_allocate_tensor_set(&mut outs), OK);
        for i in 0..2 * PAIRS {
            let n = CString::new(name(i)).unwrap();
            let mut t = null_mut();
            assert_eq!(
                nrt_tensor_allocate(DEVICE, 0, BYTES, n.as_ptr(), &mut t),
                OK
            );
            let set = if i < PAIRS {
                let b = [i as u8 ^ 0x5a; BYTES];
                assert_eq!(nrt_tensor_write(t, b.as_ptr().cast(), 0, BYTES), OK);
                ins
            } else {
                outs
            };
            assert_eq!(nrt_add_tensor_to_tensor_set(set, n.as_ptr(), t), OK);
            tensors.push(t);
        }
        assert_eq!(nrt_execute(m, ins, outs), OK);
        for i in 0..PAIRS {
            let mut b = [0u8; BYTES];
            assert_eq!(
                nrt_tensor_read(tensors[PAIRS + i], b.as_mut_ptr().cast(), 0, BYTES),
                OK
            );
            assert_eq!(b, [i as u8 ^ 0x5a; BYTES], "output {i}");
        }
        for mut t in tensors {
            nrt_tensor_free(&mut t);
        }
        nrt_destroy_tensor_set(&mut ins);
        nrt_destroy_tensor_set(&mut outs);
        assert_eq!(nrt_unload(m), OK);
    }
}

#[test]
fn an_llm_shard_with_320_io_pairs_loads_and_executes() {
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2");
    std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    let json = manifest();
    let neff = nrt_host::model_file::pack(&nrt_host::Manifest::parse(json.as_bytes()).unwrap())
        .expect("pack");
    // SAFETY: C-ABI calls with valid pointers; everything is freed before `nrt_close`.
    unsafe {
        assert_eq!(nrt_init(1, null_mut(), null_mut()), OK);
        load_and_run(json.as_bytes());
        load_and_run(&neff);
        // NRT_TENSOR_NAME_MAX - 1 bytes is the longest name, at the tensor and the set.
        let mut set = null_mut();
        assert_eq!(nrt_allocate_tensor_set(&mut set), OK);
        for (len, want) in [(255, OK), (256, INVALID)] {
            let n = CString::new("n".repeat(len)).unwrap();
            let mut t = null_mut();
            assert_eq!(
                nrt_tensor_allocate(DEVICE, 0, 64, n.as_ptr(), &mut t),
                want,
                "{len}"
            );
            let mut any = null_mut();
            assert_eq!(nrt_tensor_allocate(DEVICE, 0, 64, null_mut(), &mut any), OK);
            assert_eq!(nrt_add_tensor_to_tensor_set(set, n.as_ptr(), any), want);
            nrt_tensor_free(&mut t);
            nrt_tensor_free(&mut any);
        }
        nrt_destroy_tensor_set(&mut set);
        nrt_close();
    }
}
