//! NEFF containers load through the same path as manifests: packed examples
//! book what their manifests book, weights are copied in, and every refusal that needs a live
//! device leaves the ledger and the driver as they were.

use std::path::{Path, PathBuf};

use nrt_core::abi::{dma_mem_usage_type_t as U, NRT_STATUS};
use nrt_core::sim::Preset;
use nrt_core::LogicalCore;
use nrt_core::PhysicalCore;
use nrt_host::config::{DeviceChoice, RuntimeConfig};
use nrt_host::model_file::{self, ModelFile, Place};
use nrt_host::{HostRuntime, Manifest};
use nrt_neff::pack::{self, PackAlloc, PackModel, PackTensor};
use nrt_neff::{Dtype, ReadOptions, Reservation};
use serde_json::{json, Value};

fn runtime(preset: Preset) -> HostRuntime {
    HostRuntime::start(RuntimeConfig {
        device: DeviceChoice::sim(preset, 1),
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// What must not change when a load is refused: the ledger of device 0 and the driver.
fn state(rt: &HostRuntime) -> (nrt_core::LedgerSnapshot, u64) {
    let nrt = rt.nrt();
    (
        nrt.ledger().snapshot(0),
        nrt.driver_pool_bytes_in_use().unwrap(),
    )
}

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/models");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    v.sort();
    v
}

/// The examples small enough to pack in a debug test run (their weights are written out).
fn small_examples() -> Vec<Manifest> {
    examples()
        .iter()
        .map(|p| Manifest::from_path(p).unwrap())
        .filter(|m| m.requested_bytes(nrt_host::manifest::Location::Device) <= 64 << 20)
        .collect()
}

#[test]
fn packed_examples_book_what_their_manifests_book() {
    let ms = small_examples();
    assert!(ms.len() >= 2, "gpsimd-topk and custom-op-3libs at least");
    for preset in [Preset::Trn2, Preset::Trn1] {
        let rt = runtime(preset);
        let nrt = rt.nrt();
        for m in &ms {
            let bytes = model_file::pack(m).unwrap();
            let f = ModelFile::parse(&bytes, &ReadOptions::default()).unwrap();
            assert!(matches!(f, ModelFile::Neff(_)));
            assert_eq!(f.name(), m.name);
            assert_eq!(
                f.requested_device_bytes(),
                m.requested_bytes(nrt_host::manifest::Location::Device)
            );
            let hm = ModelFile::Manifest(m.clone())
                .load_without_weights(&nrt, LogicalCore::new(0), false)
                .unwrap();
            let want = nrt.models().info(hm).unwrap();
            nrt.models().unload(hm).unwrap();
            let before = state(&rt);
            let hn = model_file::load_bytes(&nrt, LogicalCore::new(0), &bytes)
                .unwrap()
                .0;
            let got = nrt.models().info(hn).unwrap();
            assert_eq!(
                (got.bytes, got.by_usage, got.allocations),
                (want.bytes, want.by_usage, want.allocations),
                "{preset:?} {}",
                m.name
            );
            assert_eq!(
                (got.scratchpad_pages, got.shared_ulib),
                (want.scratchpad_pages, want.shared_ulib)
            );
            nrt.models().unload(hn).unwrap();
            assert_eq!(state(&rt), before, "unload frees exactly the NEFF's bytes");
        }
        rt.close().unwrap();
    }
}

#[test]
fn the_libnrt_fixture_loads_on_every_preset() {
    let bytes = pack::fixture().unwrap();
    for preset in [Preset::Trn2, Preset::Trn1, Preset::Inf2, Preset::Trn3] {
        let rt = runtime(preset);
        let nrt = rt.nrt();
        // On SUNDA the default ext-ISA library is staged once per core and stays cached after
        // its last user unloads (spec §6): warm it first, then a load/unload is exact.
        let (h, _) = model_file::load_bytes(&nrt, LogicalCore::new(0), &bytes).unwrap();
        nrt.models().unload(h).unwrap();
        let before = state(&rt);
        let (h, f) = model_file::load_bytes(&nrt, LogicalCore::new(0), &bytes).unwrap();
        let info = nrt.models().info(h).unwrap();
        // 256 B of SCRATCHPAD_NOT_SHARED (two 128 B tmp-bufs, exact), no WEIGHT (§12).
        assert_eq!(
            info.by_usage[U::DMA_MEM_USAGE_TYPE_SCRATCHPAD_NOT_SHARED as usize],
            256
        );
        assert_eq!(info.by_usage[U::DMA_MEM_USAGE_TYPE_WEIGHT as usize], 0);
        assert_eq!(
            f.tensor_info()
                .iter()
                .map(|t| (t.name.as_str(), t.size))
                .collect::<Vec<_>>(),
            [("input", 128), ("output", 128)]
        );
        nrt.models().unload(h).unwrap();
        assert_eq!(state(&rt), before);
        rt.close().unwrap();
    }
}

/// The members of a NEFF with one weight `w` holding `content`, in `neff pack`'s order.
fn weighted_members(content: &[u8]) -> Vec<pack::Member> {
    let m = PackModel {
        name: "weighted".into(),
        subgraphs: 1,
        allocations: vec![PackAlloc {
            usage: U::DMA_MEM_USAGE_TYPE_WEIGHT,
            host: false,
            size: content.len() as u64,
            align: 4096,
            hint: "w".into(),
        }],
        outputs: vec![PackTensor {
            name: "y".into(),
            dtype: Dtype::Float32,
            shape: vec![4],
        }],
        ..PackModel::default()
    };
    let mut ms = pack::pack_members(&m).unwrap();
    for (n, b) in ms.iter_mut() {
        if n == "sg00/w.bin" {
            *b = Some(content.to_vec());
        }
    }
    ms
}

fn write_members(members: Vec<pack::Member>) -> Vec<u8> {
    let mut w = pack::NeffWriter::new(pack::header_for("weighted"));
    w.members = members;
    w.finish().unwrap()
}

fn weighted(content: &[u8]) -> Vec<u8> {
    write_members(weighted_members(content))
}

#[test]
fn weights_are_copied_into_their_allocation() {
    let content: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    let rt = runtime(Preset::Trn2);
    let nrt = rt.nrt();
    let (h, _) = model_file::load_bytes(&nrt, LogicalCore::new(0), &weighted(&content)).unwrap();
    let mut found = Vec::new();
    nrt.models()
        .for_each_dmem(h, |_, e| {
            let d = &e.info;
            if d.mem_usage_type == U::DMA_MEM_USAGE_TYPE_WEIGHT as u32 {
                found.push((d.device_id, d.mem_handle, d.align_offset, d.size));
            }
        })
        .unwrap();
    assert_eq!(found.len(), 1);
    let (dev, handle, at, size) = found[0];
    assert_eq!(size, 8192);
    let mut back = vec![0u8; 8192];
    rt.driver().copy_out(dev, handle, at, &mut back).unwrap();
    assert_eq!(back, content);
    nrt.models().unload(h).unwrap();
    rt.close().unwrap();
}

/// A packed small model with its JSON members edited by `f(member name, value)`.
fn edited(m: &PackModel, f: impl Fn(&str, &mut Value)) -> Vec<u8> {
    let mut w = pack::NeffWriter::new(pack::header_for(&m.name));
    w.members = pack::pack_members(m).unwrap();
    for (n, b) in w.members.iter_mut() {
        if let Some(body) = b.as_mut().filter(|_| n.ends_with(".json")) {
            let mut v: Value = serde_json::from_slice(body).unwrap();
            f(n, &mut v);
            *body = serde_json::to_vec(&v).unwrap();
        }
    }
    w.finish().unwrap()
}

fn tiny(libs: Option<(u32, u64)>, carveout: Option<Reservation>) -> PackModel {
    PackModel {
        name: "tiny".into(),
        subgraphs: 1,
        allocations: vec![PackAlloc {
            usage: U::DMA_MEM_USAGE_TYPE_SCRATCHPAD_NOT_SHARED,
            host: false,
            size: 4096,
            align: 0,
            hint: "scratch".into(),
        }],
        gpsimd_libs: libs,
        sbuf_carveout: carveout,
        inputs: vec![PackTensor {
            name: "x".into(),
            dtype: Dtype::Float32,
            shape: vec![8],
        }],
        outputs: vec![PackTensor {
            name: "y".into(),
            dtype: Dtype::Float32,
            shape: vec![8],
        }],
        ..PackModel::default()
    }
}

const EVTACCEL: Reservation = Reservation {
    ty: 1,
    offset: 0x37ff8,
    size: 8,
    start_partition: 0,
    num_partitions: 128,
};

#[test]
fn device_dependent_refusals_leave_ledger_and_driver_unchanged() {
    let bad_geometry = Reservation {
        num_partitions: 64,
        ..EVTACCEL
    };
    let cases: Vec<(&str, Preset, Vec<u8>, NRT_STATUS, &str)> = vec![
        (
            "EVTACCEL geometry wrong on trn2",
            Preset::Trn2,
            pack::pack(&tiny(None, Some(bad_geometry))).unwrap(),
            NRT_STATUS::NRT_INVALID,
            "Failed to verify Event Accel State Buffer carveout: 64 partitions != 128",
        ),
        (
            "EVTACCEL offset wrong on trn2",
            Preset::Trn2,
            pack::pack(&tiny(
                None,
                Some(Reservation {
                    offset: 0,
                    ..EVTACCEL
                }),
            ))
            .unwrap(),
            NRT_STATUS::NRT_INVALID,
            "offset 0x0 != 0x37ff8",
        ),
        (
            "10 GPSIMD libraries on trn1",
            Preset::Trn1,
            pack::pack(&tiny(Some((10, 4096)), None)).unwrap(),
            NRT_STATUS::NRT_FAILURE,
            "Exceeded max number of GPSIMD libs: 10 > 9",
        ),
        (
            "no reservation key on trn2",
            Preset::Trn2,
            edited(&tiny(None, None), |n, v| {
                if n.ends_with("def.json") {
                    v.as_object_mut()
                        .unwrap()
                        .remove("runtime_statebuffer_reservation");
                }
            }),
            NRT_STATUS::NRT_INVALID,
            "Missing or corrupted runtime_statebuffer_reservation field in def.json",
        ),
        (
            "cayman NEFF on trn1",
            Preset::Trn1,
            edited(&tiny(None, None), |n, v| {
                if n == "kelf-a.json" {
                    v["target"] = json!("cayman");
                }
            }),
            NRT_STATUS::NRT_INVALID,
            "NEFF_ARCH_INCOMPAT: the NEFF targets 'cayman' (arch 3) but the device is arch 2",
        ),
        (
            "a read refusal (version 3)",
            Preset::Trn2,
            {
                let mut b = pack::pack(&tiny(None, None)).unwrap();
                b[0x18] = 3;
                b
            },
            NRT_STATUS::NRT_UNSUPPORTED_NEFF_VERSION,
            "NEFF version: 3.0 is not supported",
        ),
    ];
    let mut wrong = Vec::new();
    for (what, preset, bytes, status, msg) in &cases {
        let rt = runtime(*preset);
        let nrt = rt.nrt();
        // Something resident, so "unchanged" is not trivially "empty".
        let (keep, _) = model_file::load_bytes(
            &nrt,
            LogicalCore::new(0),
            &pack::pack(&tiny(None, Some(EVTACCEL))).unwrap(),
        )
        .unwrap();
        let before = state(&rt);
        match model_file::load_bytes(&nrt, LogicalCore::new(0), bytes) {
            Ok(_) => wrong.push(format!("{what}: loaded")),
            Err(e) => {
                if e.status() != *status || !e.to_string().contains(msg) {
                    wrong.push(format!("{what}: {:?} {e}", e.status()));
                }
            }
        }
        if state(&rt) != before {
            wrong.push(format!("{what}: ledger or driver changed"));
        }
        nrt.models().unload(keep).unwrap();
        rt.close().unwrap();
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn what_other_devices_accept() {
    // Ten libraries are ignored off SUNDA; the trn2-only checks do not apply on trn1; the
    // legacy switch turns the arch and reservation refusals into loads.
    let rt2 = runtime(Preset::Trn2);
    let rt1 = runtime(Preset::Trn1);
    let bad_geometry = pack::pack(&tiny(
        None,
        Some(Reservation {
            num_partitions: 64,
            ..EVTACCEL
        }),
    ))
    .unwrap();
    let cayman_on_trn1 = edited(&tiny(None, None), |n, v| {
        if n == "kelf-a.json" {
            v["target"] = json!("cayman");
        }
    });
    for (rt, bytes, legacy) in [
        (
            &rt2,
            pack::pack(&tiny(Some((10, 4096)), None)).unwrap(),
            false,
        ),
        (&rt1, bad_geometry, false),
        (&rt1, cayman_on_trn1, true),
    ] {
        let nrt = rt.nrt();
        let opts = ReadOptions {
            allow_legacy_neff: legacy,
            ..ReadOptions::default()
        };
        let l = model_file::load_source(
            &nrt,
            Place::Core(LogicalCore::new(0)),
            &bytes.as_slice(),
            &opts,
        )
        .unwrap();
        let h = l.handle;
        nrt.models().unload(h).unwrap();
    }
}

/// Subgraphs whose `def.json`s book different vars get one MODEL heap each with their own
/// footprint (spec §5.2): here sg01's private scratch is twice sg00's, and at LNC 2 each
/// subgraph is booked to its own physical core.
#[test]
fn subgraphs_with_different_footprints_each_book_their_own() {
    let m = PackModel {
        name: "two-sg".into(),
        subgraphs: 2,
        allocations: vec![PackAlloc {
            usage: U::DMA_MEM_USAGE_TYPE_SCRATCHPAD_NOT_SHARED,
            host: false,
            size: 1 << 20,
            align: 0,
            hint: "activations".into(),
        }],
        outputs: vec![PackTensor {
            name: "y".into(),
            dtype: Dtype::Float32,
            shape: vec![4],
        }],
        ..PackModel::default()
    };
    let bytes = edited(&m, |name, v| {
        if name == "sg01/def.json" {
            v["var"]["activations"]["size"] = json!(2 << 20);
        }
    });
    let rt = runtime(Preset::Trn2);
    let nrt = rt.nrt();
    let before = state(&rt);
    let (h, _) = model_file::load_bytes(&nrt, LogicalCore::new(0), &bytes).unwrap();
    let scr = U::DMA_MEM_USAGE_TYPE_SCRATCHPAD_NOT_SHARED;
    let per_core: Vec<u64> = (0..2)
        .map(|c| nrt.ledger().device(PhysicalCore::new(0, c), scr))
        .collect();
    assert_eq!(per_core, [1 << 20, 2 << 20], "sg00 on nc0, sg01 on nc1");
    assert_eq!(
        nrt.models().info(h).unwrap().by_usage[scr as usize],
        3 << 20
    );
    nrt.models().unload(h).unwrap();
    assert_eq!(state(&rt), before);
    rt.close().unwrap();
}

/// Content that does not compress: the weight's bytes are most of the payload.
fn noise(n: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The WEIGHT allocation's bytes of model `h`.
fn weight_bytes(rt: &HostRuntime, h: nrt_core::ModelHandle) -> Vec<u8> {
    let mut found = Vec::new();
    rt.nrt()
        .models()
        .for_each_dmem(h, |_, e| {
            let d = &e.info;
            if d.mem_usage_type == U::DMA_MEM_USAGE_TYPE_WEIGHT as u32 {
                found.push((d.device_id, d.mem_handle, d.align_offset, d.size));
            }
        })
        .unwrap();
    let (dev, handle, at, size) = found[0];
    let mut back = vec![0u8; size as usize];
    rt.driver().copy_out(dev, handle, at, &mut back).unwrap();
    back
}

/// A weight listed before the metadata naming it streams in a second pass; a file loads as its
/// bytes do.
#[test]
fn a_weight_before_its_def_json_and_a_file_load_the_same_bytes() {
    let content = noise(3 << 20);
    let mut ms = weighted_members(&content);
    let i = ms.iter().position(|(n, _)| n == "sg00/w.bin").unwrap();
    let w = ms.remove(i);
    ms.insert(0, w);
    let rt = runtime(Preset::Trn2);
    let (h, f) =
        model_file::load_bytes(&rt.nrt(), LogicalCore::new(0), &write_members(ms)).unwrap();
    let ModelFile::Neff(n) = &f else {
        panic!("a NEFF")
    };
    assert_eq!(n.archive.passes, 2);
    assert_eq!(weight_bytes(&rt, h), content);
    rt.nrt().models().unload(h).unwrap();
    // What `neff pack` writes: one pass, from a file.
    let path = std::env::temp_dir().join(format!("neff-load-{}.neff", std::process::id()));
    std::fs::write(&path, weighted(&content)).unwrap();
    let (h, f) = model_file::load_path(
        &rt.nrt(),
        LogicalCore::new(0),
        &path,
        &ReadOptions::default(),
    )
    .unwrap();
    let ModelFile::Neff(n) = &f else {
        panic!("a NEFF")
    };
    assert_eq!(n.archive.passes, 1);
    assert_eq!(weight_bytes(&rt, h), content);
    rt.nrt().models().unload(h).unwrap();
    std::fs::remove_file(&path).unwrap();
    rt.close().unwrap();
}

/// Refusals that come after the model was loaded — the archive ends inside the weight, the
/// weight's member is larger than its var declares, the digest is wrong — unload it again:
/// the ledger and the driver end as they began.
#[test]
fn refusals_after_the_load_began_roll_it_back() {
    let content = noise(2 << 20);
    let good = weighted(&content);
    let payload = &good[1024..];
    // The gzip stream cut in the middle of the weight, the header saying so (gates pass).
    let cut = {
        let half = payload.len() / 2;
        let mut h = nrt_neff::Header::parse(good[..1024].try_into().unwrap());
        h.data_size = half as u64;
        let mut b = h.to_bytes().to_vec();
        b.extend_from_slice(&payload[..half]);
        b
    };
    // The var declares 1 MiB, the member holds 2 MiB.
    let oversize = edited_weighted(&content, |v| v["var"]["w"]["size"] = json!(1 << 20));
    let mut bad_digest = good.clone();
    bad_digest[0xAC] ^= 1;
    let verify = ReadOptions {
        verify: true,
        ..ReadOptions::default()
    };
    let cases: [(&str, &[u8], ReadOptions, &str); 3] = [
        (
            "cut inside the weight",
            &cut,
            ReadOptions::default(),
            "corrupt or truncated gzip stream or tar archive",
        ),
        (
            "member larger than its var",
            &oversize,
            ReadOptions::default(),
            "member sg00/w.bin holds 2097152 payload bytes but the var declares size 1048576",
        ),
        (
            "wrong digest, verifying",
            &bad_digest,
            verify,
            "MD5 mismatch!",
        ),
    ];
    let rt = runtime(Preset::Trn2);
    let nrt = rt.nrt();
    let (keep, _) =
        model_file::load_bytes(&nrt, LogicalCore::new(0), &weighted(&[1; 4096])).unwrap();
    let before = state(&rt);
    for (what, bytes, opts, msg) in cases {
        let e = model_file::load_source(&nrt, Place::Core(LogicalCore::new(0)), &bytes, &opts)
            .map(|l| l.handle)
            .unwrap_err();
        assert_eq!(e.status(), NRT_STATUS::NRT_INVALID, "{what}: {e}");
        assert!(e.to_string().contains(msg), "{what}: {e}");
        assert_eq!(state(&rt), before, "{what}: ledger or driver changed");
    }
    nrt.models().unload(keep).unwrap();
    rt.close().unwrap();
}

/// [`weighted`] with its def.json edited.
fn edited_weighted(content: &[u8], f: impl Fn(&mut Value)) -> Vec<u8> {
    let mut ms = weighted_members(content);
    for (name, body) in ms.iter_mut() {
        if name == "sg00/def.json" {
            let mut v: Value = serde_json::from_slice(body.as_ref().unwrap()).unwrap();
            f(&mut v);
            *body = Some(serde_json::to_vec(&v).unwrap());
        }
    }
    write_members(ms)
}
