//! `nrtx_get_device_memory_stats` on a shared simulated device: the figures
//! cover every process using it. One test: it sets the process environment. The "other
//! process" is a second slot opened in this test process (each open is its own open file
//! description, so the device treats it as another process).

use std::ptr::null_mut;

use nrt::*;
use nrt_core::driver::{AllocRequest, Driver};
use nrt_core::sim::{Preset, SimConfig};
use nrt_host::shared::{JoinRequest, SharedDevice, SharedName};

const GIB: u64 = 1 << 30;

fn stats() -> nrtx_device_memory_stats_t {
    let mut s = nrtx_device_memory_stats_t::default();
    let mut out = 0usize;
    // SAFETY: valid out-pointers of the sizes given.
    let rc = unsafe { nrtx_get_device_memory_stats(0, &mut s, size_of_val(&s), &mut out) };
    assert_eq!(rc, 0);
    assert_eq!(out, size_of_val(&s));
    s
}

#[test]
fn device_wide_figures_include_the_other_process() {
    let dir = std::env::temp_dir().join(format!("nrt-ffi-shared-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("NRT_DMEM_SHM_DIR", &dir);
    std::env::set_var("NRT_DMEM_DEVICE", "sim:trn2@ffi");
    std::env::set_var("NEURON_RT_VIRTUAL_CORE_SIZE", "1");
    std::env::set_var("NEURON_RT_VISIBLE_CORES", "0-3");
    std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    // SAFETY: NULL version strings are accepted.
    assert_eq!(unsafe { nrt_init(1, null_mut(), null_mut()) }, 0);
    let alone = stats();
    assert_eq!(alone.shared, 1);
    assert_eq!(alone.processes, 1);
    assert_eq!(alone.device_bytes_total, 96 * GIB);
    assert_eq!(alone.process_device_bytes_used, alone.device_bytes_used);

    // Another process on cores 4-7 allocates 2 GiB.
    let mut cores = [0u32; 32];
    cores[0] = 0xf0;
    let other = SharedDevice::open(
        &SharedName::parse("ffi").unwrap(),
        &JoinRequest {
            config: SimConfig::new(Preset::Trn2, 1),
            cores,
        },
    )
    .unwrap();
    let req = AllocRequest {
        size: 2 * GIB,
        align: 0,
        host: false,
        hbm_idx: 2,
        region: 0,
        nc_id: 4,
        category: 9,
    };
    let h = other.memory_alloc(0, &req).unwrap();
    let both = stats();
    assert_eq!(both.processes, 2);
    assert_eq!(both.device_bytes_used, alone.device_bytes_used + 2 * GIB);
    assert_eq!(
        both.process_device_bytes_used,
        alone.process_device_bytes_used
    );
    // The core that process holds is refused to a third.
    let e = SharedDevice::open(
        &SharedName::parse("ffi").unwrap(),
        &JoinRequest {
            config: SimConfig::new(Preset::Trn2, 1),
            cores,
        },
    )
    .unwrap_err();
    assert_eq!(e.errno.raw(), 16, "EBUSY: {e}");
    other.memory_free(0, h).unwrap();
    drop(other);
    assert_eq!(stats(), alone);
    nrt_close();
    let _ = std::fs::remove_dir_all(&dir);
}
