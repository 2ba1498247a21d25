//! The planner (`nrt_host::plan`): a plan matches what a real load sequence on
//! the same simulated device then does, byte for byte and failure for failure; bad input. The
//! `nrt-dmem plan` front (`--check`'s exit codes, the SVG) is tested in `cli/tests/plan_cli.rs`.

#[path = "common/examples.rs"]
mod example_models;
use example_models::{example_paths, models_dir};

use nrt_core::tensor::Placement;
use nrt_core::CoreSel;
use nrt_core::LogicalCore;
use nrt_host::model_file::{load_source, pack, Place};
use nrt_host::plan::{plan, ModelSource, Plan, PlanError, PlanModel, PlanRequest, Verdict};
use nrt_host::{DeviceChoice, HostRuntime, Manifest, Overrides, RuntimeConfig};
use nrt_neff::ReadOptions;

/// The six manifests, the six as NEFFs (`pack`), then llama shards until something fails.
fn the_set(shards: usize) -> Vec<(String, Vec<u8>)> {
    let mut set = Vec::new();
    for p in example_paths() {
        let bytes = std::fs::read(&p).unwrap();
        let m = Manifest::parse(&bytes).unwrap();
        set.push((p.display().to_string(), bytes.clone()));
        // NEFFs of the examples whose weights are small: each plan and each replay copies a
        // NEFF's weights in, and the GB-sized ones would make this debug test minutes long
        // (their footprint is the manifest's, which the set holds too).
        if m.requested_bytes(nrt_host::manifest::Location::Device) <= 256 << 20 {
            set.push((format!("{}.neff", m.name), pack(&m).unwrap()));
        }
    }
    let llama = std::fs::read(models_dir().join("llama3-8b-tp8-shard.json")).unwrap();
    for i in 0..shards {
        set.push((format!("llama-{i}"), llama.clone()));
    }
    set
}

fn request(device: &str, set: &[(String, Vec<u8>)], tensors: bool) -> PlanRequest {
    PlanRequest {
        models: set
            .iter()
            .map(|(label, bytes)| PlanModel {
                source: ModelSource::Bytes {
                    label: label.clone(),
                    bytes: bytes.clone(),
                },
                tensors,
            })
            .collect(),
        device: device.into(),
        ..PlanRequest::default()
    }
}

/// The application's own sequence, written here from the public API: vnc = -1's rule, the
/// load, then each IO tensor as a DEVICE tensor; a model whose tensors fail is taken back.
/// Then every figure the plan states is compared with the device's.
fn real_sequence_matches(device: &str, set: &[(String, Vec<u8>)], tensors: bool, p: &Plan) {
    let mut cfg = RuntimeConfig::default();
    cfg.apply(&Overrides {
        device: Some(DeviceChoice::parse(device).unwrap()),
        ..Overrides::default()
    });
    let rt = HostRuntime::start(cfg).unwrap();
    let nrt = rt.nrt();
    assert_eq!(p.models.len(), set.len());
    for (i, (label, bytes)) in set.iter().enumerate() {
        let core = (0..i64::from(nrt.visible_logical_core_count()))
            .min_by_key(|&v| {
                nrt.models()
                    .on_core(LogicalCore::from_c(v), &mut [])
                    .unwrap()
            })
            .unwrap();
        let mut fits = false;
        let place = Place::Core(LogicalCore::from_c(core));
        if let Ok(l) = load_source(&nrt, place, &bytes.as_slice(), &ReadOptions::default()) {
            let (h, f) = (l.handle, l.file);
            fits = true;
            if tensors {
                let mut made = Vec::new();
                for t in f.tensor_info() {
                    match nrt.tensors().allocate(
                        Placement::Device,
                        CoreSel::from_c(core),
                        t.size,
                        Some(&t.name),
                    ) {
                        Ok(t) => made.push(t),
                        Err(_) => {
                            fits = false;
                            break;
                        }
                    }
                }
                if !fits {
                    for t in made {
                        nrt.tensors().free(t).unwrap();
                    }
                    nrt.models().unload(h).unwrap();
                }
            }
        }
        let m = &p.models[i];
        assert_eq!(
            (m.fits, m.core),
            (fits, core),
            "{device}: model #{i} {label}"
        );
    }
    for c in &p.cores {
        let st = nrt
            .ledger()
            .memory_stats(LogicalCore::from_c(c.index))
            .unwrap();
        assert_eq!((c.used, c.limit), (st.bytes_used, st.bytes_limit));
        let dev = nrt
            .ledger()
            .logical_core_usage(LogicalCore::from_c(c.index))
            .unwrap()
            .device;
        let sum: u64 = c.usage.iter().map(|(_, b)| b).sum();
        assert_eq!(sum, dev[22], "{device}: core {} by usage", c.index);
        for (u, b) in &c.usage {
            let t = nrt_core::abi::dma_mem_usage_type_t::parse(u).unwrap();
            assert_eq!(*b, dev[t as usize], "{device}: core {} {u}", c.index);
        }
    }
    let mut n = 0;
    for d in 0..nrt.num_devices() {
        let ledger = nrt.ledger().hbm(d);
        for h in 0..nrt.geom(d).channels {
            let ps = rt.driver().pool_stats(d, false, h).unwrap();
            let x = &p.hbm[n];
            n += 1;
            assert_eq!((x.device, x.hbm), (d, h));
            assert_eq!(x.used, ledger[h as usize], "{device}: nd{d} hbm{h} ledger");
            assert_eq!(
                (
                    x.free,
                    x.largest_free,
                    x.small_object_free,
                    x.small_object_largest_free
                ),
                (
                    ps.free,
                    ps.largest_free,
                    ps.small_object_free,
                    ps.small_object_largest_free
                ),
                "{device}: nd{d} hbm{h} pool"
            );
            // The drawn blocks are the channel's allocations (carve-outs aside).
            let drawn: u64 = x.blocks.iter().map(|b| b.size).sum();
            assert!(
                drawn <= ps.capacity - ps.free,
                "{device}: nd{d} hbm{h} blocks"
            );
        }
    }
    assert_eq!(n, p.hbm.len());
}

#[test]
fn a_plan_is_what_the_real_load_sequence_then_does() {
    for (device, shards) in [("sim:trn1", 12), ("sim:trn2", 40), ("sim:trn3", 2)] {
        for tensors in [false, true] {
            let set = the_set(shards);
            // The what-ifs replay the set (NEFF weights copied in each time): once is enough.
            let what_ifs = device == "sim:trn1" && !tensors;
            let mut r = request(device, &set, tensors);
            r.what_ifs = what_ifs;
            let p = plan(&r).unwrap();
            real_sequence_matches(device, &set, tensors, &p);
            if device != "sim:trn3" {
                assert!(!p.all_fit(), "{device}: the set is meant not to fit");
                let f = p.first_failure.as_ref().unwrap();
                let o = f.oom.as_ref().expect("an OOM");
                assert!(o.requested > o.largest_block);
                assert_eq!(o.missing, o.requested - o.largest_block);
            }
            if device == "sim:trn3" {
                assert!(p.all_fit(), "{device}: {:?}", p.first_failure);
            }
            if what_ifs {
                let f = p.first_failure.as_ref().unwrap();
                assert!(!f.what_ifs.is_empty());
                // Leaving out a resident model (they are all at least as large) makes room.
                assert!(
                    f.what_ifs
                        .iter()
                        .any(|w| w.fits && w.change.starts_with("leave out")),
                    "{device}: {:?}",
                    f.what_ifs
                );
            }
        }
    }
}

#[test]
fn placements_are_honoured_and_checked() {
    let set: Vec<(String, Vec<u8>)> = example_paths()
        .iter()
        .map(|p| (p.display().to_string(), std::fs::read(p).unwrap()))
        .collect();
    let mut r = request("sim:trn2", &set, false);
    r.placements = vec![("bert-base".into(), 3)];
    let p = plan(&r).unwrap();
    for m in p.models.iter().filter(|m| m.name == "bert-base") {
        assert_eq!(m.core, 3);
    }
    r.placements = vec![("nope".into(), 0)];
    assert!(matches!(plan(&r), Err(PlanError::UnknownPlacement(_))));
    // A core the runtime refuses is bad input with the runtime's message, not a model that
    // does not fit.
    r.placements = vec![("bert-base".into(), 9)];
    match plan(&r) {
        Err(PlanError::Refused { core: 9, error, .. }) => {
            assert!(error.contains("out of range"), "{error}")
        }
        other => panic!("expected a refusal: {other:?}"),
    }
}

#[test]
fn bad_input_is_an_error_naming_it() {
    let set = the_set(0);
    let e = |r: PlanRequest| plan(&r).unwrap_err().to_string();
    assert!(e(request("gpu", &set, false)).contains("expected sim:"));
    assert!(e(request("neuron", &set, false)).contains("simulated device only"));
    // A shared device is named `sim:<preset>@name` (docs/SHARED_DEVICE.md); one that no
    // process has opened is refused by name.
    assert!(e(request("shared:team", &set, false)).contains("expected sim:"));
    let nobody = format!("sim:trn2@plan-test-nobody-{}", std::process::id());
    assert!(e(request(&nobody, &set, false)).contains("no such shared device"));
    let mut r = request("sim:trn2", &set, false);
    r.lnc_size = Some(3);
    assert!(e(r).contains("does not divide"));
    let mut r = request("sim:trn2", &set, false);
    r.visible_cores = Some((9, 1));
    assert!(e(r).contains("logical core 9"));
    let mut neff = pack(&Manifest::parse(&set[0].1).unwrap()).unwrap();
    neff[0] ^= 0xff; // the header's magic
    let r = request("sim:trn2", &[("broken.neff".into(), neff)], false);
    let msg = e(r);
    assert!(msg.starts_with("broken.neff: "), "{msg}");
    let mut r = request("sim:trn2", &[], false);
    r.models = vec![PlanModel {
        source: ModelSource::Path("/nonexistent/m.neff".into()),
        tensors: false,
    }];
    assert!(e(r).contains("/nonexistent/m.neff"));
    assert!(matches!(
        plan(&request("sim:trn2", &[], false)),
        Err(PlanError::NoModels)
    ));
}

fn huge_manifest(bytes: u64) -> Vec<u8> {
    format!(
        r#"{{"format":"nrt-dmem-model/2","name":"huge-{bytes}","allocations":[
        {{"usage":"WEIGHT","location":"device","size":{bytes},"hint":"weights"}}]}}"#
    )
    .into_bytes()
}

#[test]
fn a_model_larger_than_any_channel_says_nothing_makes_it_fit() {
    let p = plan(&request(
        "sim:trn1",
        &[("huge".into(), huge_manifest(20 << 30))],
        false,
    ))
    .unwrap();
    let f = p.first_failure.unwrap();
    let o = f.oom.unwrap();
    assert!(o.larger_than_channel, "{o:?}");
    assert!(f.what_ifs.is_empty());
    // What it needs is measured all the same, against what an empty channel has.
    let m = &p.models[0];
    assert_eq!(m.needed, vec![("WEIGHT".to_string(), 20 << 30)]);
    let r = m.refusal.as_ref().unwrap();
    assert_eq!(r.verdict, Verdict::Hopeless);
    assert_eq!(r.needed, Some(20 << 30));
    assert!(r.empty_free < 20 << 30 && r.empty_free > 14 << 30, "{r:?}");
    assert!(p.fragmentation.is_empty());
}

/// The verdict on a model that does not fit comes from what it needs on the channel and the
/// channel's free bytes, not from the order in which its file lists its allocations: a NEFF
/// and the manifest it was packed from (whose allocations the NEFF lists in another order)
/// get the same verdict, the same needs and the same channel figures.
#[test]
fn a_neff_and_its_manifest_get_the_same_verdict() {
    let json = std::fs::read(models_dir().join("llama3-8b-tp8-shard.json")).unwrap();
    let neff = pack(&Manifest::parse(&json).unwrap()).unwrap();
    let plans: Vec<Plan> = [json, neff]
        .into_iter()
        .map(|bytes| {
            let set: Vec<(String, Vec<u8>)> = (0..14)
                .map(|i| (format!("llama-{i}"), bytes.clone()))
                .collect();
            let mut r = request("sim:trn1", &set, false);
            r.what_ifs = false;
            plan(&r).unwrap()
        })
        .collect();
    let (a, b) = (&plans[0], &plans[1]);
    let failed: Vec<usize> = (0..14).filter(|&i| !a.models[i].fits).collect();
    assert_eq!(failed, [12, 13], "{:?}", a.models);
    for &i in &failed {
        let (ma, mb) = (&a.models[i], &b.models[i]);
        assert!(!mb.fits);
        assert_eq!(ma.needed, mb.needed);
        assert!(ma.needed_bytes > 2 << 30, "{ma:?}");
        let (ra, rb) = (ma.refusal.as_ref().unwrap(), mb.refusal.as_ref().unwrap());
        assert_eq!(ra.verdict, Verdict::Full, "{ra:?}");
        assert_eq!(
            (ra.verdict, ra.device, ra.hbm, ra.needed, ra.free),
            (rb.verdict, rb.device, rb.hbm, rb.needed, rb.free)
        );
        // Twice its 1.2 GiB of allocations (two subgraphs) on HBM 0, the scratchpad pages
        // its core already has not counted, against about 1 GiB free.
        let needed = ra.needed.unwrap();
        assert!(needed > ra.free && needed < ma.needed_bytes, "{ra:?}");
    }
    assert!(a.fragmentation.is_empty() && b.fragmentation.is_empty());
}

/// A model whose allocations fit in the channel's free bytes but not in its blocks is
/// fragmentation whichever of its allocations the order makes fail: after 13.5 GiB on a trn1
/// channel, about 1.48 GiB of the main pool and the 1 GiB small-object region are free (2.48
/// GiB); 1.2 GiB then 1.1 GiB fails on the 1.1 GiB, 1.1 GiB then 1.2 GiB on the 1.2 GiB.
/// Both orders, each as a manifest and as the NEFF packed from it, get the one verdict and
/// figures.
#[test]
fn fragmentation_is_found_whatever_the_allocation_order() {
    const MIB: u64 = 1 << 20;
    let model = |big_first: bool| {
        let alloc = |size: u64, hint: &str| {
            format!(r#"{{"usage":"CC","location":"device","size":{size},"hint":"{hint}"}}"#)
        };
        let (big, small) = (alloc(1229 * MIB, "big"), alloc(1126 * MIB, "small"));
        let list = if big_first {
            format!("{big},{small}")
        } else {
            format!("{small},{big}")
        };
        format!(
            r#"{{"format":"nrt-dmem-model/2","name":"b","allocations":[{list}],
                "outputs":[{{"name":"y","size":4}}]}}"#
        )
        .into_bytes()
    };
    let mut seen = Vec::new();
    for big_first in [true, false] {
        let b = model(big_first);
        let neff = pack(&Manifest::parse(&b).unwrap()).unwrap();
        for bytes in [b, neff] {
            let mut r = request(
                "sim:trn1",
                &[("a".into(), huge_manifest(27 << 29)), ("b".into(), bytes)],
                false,
            );
            r.placements = vec![("a".into(), 0), ("b".into(), 0)];
            r.what_ifs = false;
            let p = plan(&r).unwrap();
            assert!(!p.models[1].fits);
            let v = p.models[1].refusal.clone().unwrap();
            assert_eq!(v.verdict, Verdict::Fragmented, "{v:?}");
            assert_eq!(v.needed, Some(2355 * MIB), "{v:?}");
            assert!(v.free > 2355 * MIB && v.largest_free < 2355 * MIB, "{v:?}");
            assert_eq!(p.fragmentation.len(), 1);
            assert_eq!(p.fragmentation[0].refusal, v);
            seen.push(v);
        }
    }
    // The refused request is the order's; the verdict and the channel's figures are not.
    let requests: Vec<u64> = seen.iter().map(|v| v.request.size).collect();
    assert_eq!(requests[0], 1126 * MIB, "{seen:?}");
    assert_eq!(requests[2], 1229 * MIB, "{seen:?}");
    for v in &seen {
        assert_eq!(
            (v.needed, v.free, v.largest_free),
            (seen[0].needed, seen[0].free, seen[0].largest_free)
        );
    }
}

#[test]
fn a_cores_headroom_is_capped_by_its_channels_free_bytes() {
    // trn2 at LNC 1: logical cores 0 and 1 (physical 0 and 1) both draw from HBM 0. 20 GiB on
    // core 0 leaves core 1 its whole 24 GiB limit unused, but only HBM 0's ~4 GiB free.
    let mut r = request("sim:trn2", &[("a".into(), huge_manifest(20 << 30))], false);
    r.lnc_size = Some(1);
    r.placements = vec![("a".into(), 0)];
    let p = plan(&r).unwrap();
    assert!(p.all_fit());
    let h0 = &p.hbm[0];
    assert!(h0.free < 4 << 30, "{h0:?}");
    for c in &p.cores[..2] {
        assert_eq!(c.headroom, h0.free, "core {}: {c:?}", c.index);
    }
    assert!(p.cores[1].limit - p.cores[1].used > h0.free);
    // Every core, at either LNC size: never more than its channels have free.
    for lnc in [1, 2] {
        let mut r = request("sim:trn2", &[("a".into(), huge_manifest(20 << 30))], false);
        r.lnc_size = Some(lnc);
        let p = plan(&r).unwrap();
        let per_core = 8 / p.cores.len() as u32;
        for c in &p.cores {
            let hbm = c.index as u32 * per_core / 2;
            assert!(c.headroom <= p.hbm[hbm as usize].free, "LNC {lnc}: {c:?}");
            assert!(c.headroom <= c.limit - c.used);
        }
    }
}

#[test]
fn a_set_that_fits_in_total_bytes_but_not_in_any_block_is_reported() {
    // trn1: 16 GiB channels, the last 1 GiB the small-object region. 13.5 GiB leaves about
    // 1.5 GiB of the main pool plus the 1 GiB region: 2 GiB fits in total, in no block.
    let mut r = request(
        "sim:trn1",
        &[
            ("a".into(), huge_manifest(27 << 29)),
            ("b".into(), huge_manifest(2 << 30)),
        ],
        false,
    );
    r.placements = vec![("a".into(), 0), ("b".into(), 0)];
    let p = plan(&r).unwrap();
    assert!(p.models[0].fits && !p.models[1].fits);
    let o = p.first_failure.as_ref().unwrap().oom.as_ref().unwrap();
    assert!(o.channel_free >= o.requested, "{o:?}");
    assert_eq!(p.fragmentation.len(), 1);
    let f = &p.fragmentation[0];
    assert_eq!((f.model, f.file.as_str()), (1, "b"));
    let r = &f.refusal;
    assert_eq!(r.verdict, Verdict::Fragmented);
    assert_eq!((r.device, r.hbm), (0, 0));
    // Enough bytes free for the 2 GiB it needs, no block that holds it.
    assert_eq!(r.needed, Some(2 << 30), "{r:?}");
    assert!(r.free >= 2 << 30 && r.largest_free < 2 << 30, "{r:?}");
    assert_eq!((r.request.size, r.request.align), (2 << 30, 0));
    assert!(r.summary.contains("fragmented"), "{}", r.summary);
    assert_eq!(p.models[1].refusal.as_ref(), Some(r));
    let w = &p.first_failure.as_ref().unwrap().what_ifs;
    assert!(w
        .iter()
        .any(|w| w.fits && w.change == "load it on logical core 1"));
}

#[test]
fn a_thousand_tiny_models_plan_quickly() {
    let tiny = br#"{"format":"nrt-dmem-model/2","name":"tiny","allocations":[
        {"usage":"WEIGHT","location":"device","size":4096,"hint":"w"}]}"#
        .to_vec();
    let set: Vec<(String, Vec<u8>)> = (0..1000).map(|i| (format!("t{i}"), tiny.clone())).collect();
    let t = std::time::Instant::now();
    let p = plan(&request("sim:trn2", &set, false)).unwrap();
    assert_eq!(p.models.len(), 1000);
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
    // The core's model table (nrt_core::config::MAX_MODELS) ends the fits; that is the
    // first failure, and it is not an OOM.
    if let Some(f) = &p.first_failure {
        assert!(f.oom.is_none());
    }
}
