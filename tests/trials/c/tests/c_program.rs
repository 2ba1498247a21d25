//! Runs `trial.c`: compiled against `ffi/include` and linked with the `libnrt.so`
//! cargo builds, on the simulated trn2 with an example model.

use std::path::Path;
use std::process::Command;

use nrt_tests::c;

#[test]
fn c_program_runs_init_load_tensor_stats_close() {
    let out = c::out_dir("nrt-trial-c");
    let lib = c::libnrt(&out);
    let exe = out.join("trial");
    c::compile(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("trial.c"),
        &exe,
        &lib,
    );
    let model = c::root().join("examples/models/resnet50.json");
    assert!(model.is_file(), "{}", model.display());
    let o = Command::new(&exe)
        .arg(&model)
        .env("NRT_DMEM_DEVICE", "sim:trn2")
        .env_remove("NEURON_RT_VISIBLE_CORES")
        .env_remove("NEURON_RT_NUM_CORES")
        .env_remove("NEURON_RT_VIRTUAL_CORE_SIZE")
        .env("NEURON_RT_LOG_LEVEL", "ERROR")
        .output()
        .expect("run the trial");
    let o = nrt_tests::check_output("trial.c", o);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.starts_with("trial ok: model "), "{stdout}");
}
