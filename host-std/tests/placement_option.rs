//! The device string selects the HBM placement (docs/PLACEMENT.md, "The TLSF fast mode"):
//! `NRT_DMEM_DEVICE=sim:trn2+tlsf` builds a simulated device on the TLSF good-fit carve, and a
//! sequence where first fit and good fit disagree lands where each policy puts it.

use nrt_core::abi::dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR as TENSOR;
use nrt_core::dmem::AllocArgs;
use nrt_core::sim::Placement;
use nrt_host::config::RuntimeConfig;
use nrt_host::HostRuntime;

const MIB: u64 = 1 << 20;

/// A runtime on the device `NRT_DMEM_DEVICE=device` names (the environment path the C API's
/// `nrt_init` and the CLI read).
fn runtime(device: &str) -> HostRuntime {
    let cfg = RuntimeConfig::from_lookup(|k| (k == "NRT_DMEM_DEVICE").then(|| device.to_string()))
        .unwrap();
    HostRuntime::start(cfg).unwrap()
}

/// Holes of 8 MiB (low) and 4 MiB (high) in HBM 0's main pool, then a 4 MiB request: first
/// fit takes the lower hole, good fit the exact one. Returns the request's offset from the
/// 8 MiB hole and from the 4 MiB hole.
fn placed(rt: &HostRuntime) -> (u64, u64) {
    let nrt = rt.nrt();
    let al = nrt
        .dmem()
        .core_allocator(nrt_core::PhysicalCore::new(0, 0))
        .unwrap();
    let alloc = |size| {
        let h = nrt
            .dmem()
            .alloc(al, &AllocArgs::device(size, 0, TENSOR, "t"), None)
            .unwrap();
        (h, nrt.dmem().info(h).unwrap().pa)
    };
    let (a, a_pa) = alloc(8 * MIB);
    let _b = alloc(MIB);
    let (c, c_pa) = alloc(4 * MIB);
    let _d = alloc(MIB);
    nrt.dmem().free(a).unwrap();
    nrt.dmem().free(c).unwrap();
    let (_, pa) = alloc(4 * MIB);
    (pa.wrapping_sub(a_pa), pa.wrapping_sub(c_pa))
}

#[test]
fn the_device_string_selects_the_tlsf_carve() {
    let genalloc = runtime("sim:trn2");
    assert_eq!(genalloc.sim().unwrap().placement(), Placement::Genalloc);
    let tlsf = runtime("sim:trn2+tlsf");
    assert_eq!(tlsf.sim().unwrap().placement(), Placement::Tlsf);
    assert_eq!(tlsf.config().device.to_string(), "sim:trn2+tlsf");
    // First fit (the driver's genalloc): the lowest hole that holds it.
    let g = placed(&genalloc);
    assert!(g.0 == 0 && g.1 != 0, "{g:?}");
    // Good fit: the hole of exactly its size.
    let t = placed(&tlsf);
    assert!(t.0 != 0 && t.1 == 0, "{t:?}");
    // Several devices, each on the carve the string names.
    let rt = runtime("sim:inf2x2+tlsf");
    assert_eq!(rt.nrt().num_devices(), 2);
    assert_eq!(rt.sim().unwrap().placement(), Placement::Tlsf);
}

/// A model of one device allocation of `bytes`.
fn manifest(name: &str, bytes: u64) -> Vec<u8> {
    format!(
        r#"{{"format":"nrt-dmem-model/2","name":"{name}","allocations":[
        {{"usage":"WEIGHT","location":"device","size":{bytes},"hint":"weights"}}]}}"#
    )
    .into_bytes()
}

/// The planner builds its scratch device from the same string: on a trn1 (16 GiB channels, the
/// last 1 GiB the small-object region) whose main pool is nearly full, a 900 MiB model fits
/// under genalloc (the driver falls back to the small-object region, docs/PLACEMENT.md rule 4)
/// and not under TLSF (its routing never does).
#[test]
fn the_planner_plans_on_the_placement_the_string_names() {
    use nrt_host::plan::{plan, ModelSource, PlanModel, PlanRequest};
    let request = |device: &str| PlanRequest {
        models: [("a", 14 * 1024 * MIB + 512 * MIB), ("b", 900 * MIB)]
            .into_iter()
            .map(|(name, bytes)| PlanModel {
                source: ModelSource::Bytes {
                    label: name.into(),
                    bytes: manifest(name, bytes),
                },
                tensors: false,
            })
            .collect(),
        device: device.into(),
        placements: vec![("a".into(), 0), ("b".into(), 0)],
        what_ifs: false,
        ..PlanRequest::default()
    };
    let g = plan(&request("sim:trn1")).unwrap();
    assert_eq!(g.device, "sim:trn1");
    assert!(g.all_fit(), "{:?}", g.first_failure);
    let b = g.hbm[0]
        .blocks
        .iter()
        .find(|b| b.size == 900 * MIB)
        .unwrap();
    assert!(b.small_object, "{b:?}");
    let t = plan(&request("sim:trn1+tlsf")).unwrap();
    assert_eq!(t.device, "sim:trn1+tlsf");
    assert!(t.models[0].fits && !t.models[1].fits, "{:?}", t.models);
}
