//! Unit tests of the model manifest (`manifest`).

use super::*;
use nrt_core::LogicalCore;

const BERT: &str = r#"{ "format": "nrt-dmem-model/2", "name": "bert-base", "subgraphs": 1,
  "allocations": [ { "usage": "DMA_RING", "location": "device", "size": 4194304, "align": 0, "hint": "qPoolIO0" },
               { "usage": "dma_mem_usage_type_weight", "location": "Device", "size": 1000 },
               { "usage": 12, "location": "host", "size": 64 } ],
  "gpsimd_libs": { "count": 1, "bytes": 65536 }, "scratchpad_bytes": 0,
  "sbuf_carveout": { "type": "evtaccel", "partition_start": 0, "partition_count": 128, "offset": 229368, "size": 8 },
  "inputs":  [ { "name": "input0",  "size": 4096 } ], "outputs": [ { "name": "output0", "size": 4096 } ] }"#;

fn invalid(json: &str) -> (String, String, usize, usize) {
    match Manifest::parse(json.as_bytes()) {
        Err(ManifestError::Invalid {
            path,
            msg,
            line,
            column,
        }) => (path, msg, line, column),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn parses_the_documented_example() {
    let m = Manifest::parse(BERT.as_bytes()).unwrap();
    assert_eq!(m.name, "bert-base");
    assert_eq!(m.subgraphs, 1);
    assert_eq!(m.allocations.len(), 3);
    let a = &m.allocations[0];
    assert_eq!(a.usage, dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_DMA_RING);
    assert_eq!(a.location, Location::Device);
    assert_eq!((a.size, a.align, a.hint.as_str()), (4194304, 0, "qPoolIO0"));
    assert_eq!(
        m.allocations[1].usage,
        dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_WEIGHT
    );
    assert_eq!(
        m.allocations[1].hint, "weight",
        "hint defaults to the usage"
    );
    assert_eq!(
        m.allocations[2].usage,
        dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR
    );
    assert_eq!(m.allocations[2].location, Location::Host);
    assert_eq!(
        m.gpsimd_libs,
        Some(GpsimdLibs {
            count: 1,
            bytes: 65536
        })
    );
    let c = m.sbuf_carveout.unwrap();
    assert_eq!(
        (c.ty, c.partition_count, c.offset, c.size),
        (1, 128, 229368, 8)
    );
    assert_eq!(m.inputs[0].name, "input0");
    assert_eq!(m.outputs[0].size, 4096);
    assert_eq!(m.requested_bytes(Location::Device), 4194304 + 1000);
    assert_eq!(m.requested_bytes(Location::Host), 64);

    let s = m.spec();
    let spec = s.as_spec();
    assert_eq!(spec.name, "bert-base");
    assert_eq!(spec.allocations[0].usage as u32, 18);
    assert_eq!(spec.allocations[0].location, dma_mem_location_t::TONGA_DRAM);
    assert_eq!(spec.allocations[2].location, dma_mem_location_t::HOST_DRAM);
    assert_eq!(spec.allocations[0].hint, "qPoolIO0");
    assert_eq!(
        spec.gpsimd_libs.map(|l| (l.count, l.bytes)),
        Some((1, 65536))
    );
    assert_eq!(spec.sbuf_carveout.map(|c| c.offset), Some(0x37ff8));
    assert_eq!(spec.inputs[0].size, 4096);
    assert_eq!(spec.outputs[0].name, "output0");
}

#[test]
fn optional_fields_default() {
    let m = Manifest::parse(br#"{"format":"nrt-dmem-model/2","name":"tiny","allocations":[]}"#)
        .unwrap();
    assert_eq!(m.subgraphs, 1);
    assert!(m.allocations.is_empty());
    assert_eq!(m.gpsimd_libs, None);
    assert_eq!(m.scratchpad_bytes, 0);
    assert_eq!(m.sbuf_carveout, None);
    assert!(m.inputs.is_empty() && m.outputs.is_empty());
    let s = m.spec();
    assert!(s.as_spec().gpsimd_libs.is_none());
}

#[test]
fn every_usage_name_and_number_parses() {
    for u in dma_mem_usage_type_t::all() {
        for text in [
            format!("\"{}\"", u.name()),
            format!("\"{}\"", u.short_name().to_ascii_lowercase()),
            format!("{}", u as u32),
        ] {
            let j = format!(
                r#"{{"format":"nrt-dmem-model/2","name":"m","allocations":[{{"usage":{text},"location":"device","size":1}}]}}"#
            );
            let m = Manifest::parse(j.as_bytes()).unwrap();
            assert_eq!(m.allocations[0].usage, u, "{text}");
        }
    }
}

#[test]
fn rejects_unknown_keys_naming_them() {
    let (path, msg, line, col) = invalid(
        "{\"format\":\"nrt-dmem-model/2\",\"name\":\"m\",\"allocations\":[],\n \"weights\":1}",
    );
    assert!(msg.contains("unknown field `weights`"), "{msg}");
    assert_eq!(path, "weights");
    assert_eq!(line, 2);
    assert!(col > 1);
    let (path, msg, ..) = invalid(
        r#"{"format":"nrt-dmem-model/2","name":"m","allocations":[
            {"usage":"INSTR_PE","location":"device","size":1,"sise":2}]}"#,
    );
    assert!(msg.contains("unknown field `sise`"), "{msg}");
    assert_eq!(path, "allocations[0].sise");
    let (path, msg, ..) = invalid(
        r#"{"format":"nrt-dmem-model/2","name":"m","allocations":[],
            "inputs":[{"name":"a","size":1,"dtipe":"int8"}]}"#,
    );
    assert!(msg.contains("unknown field `dtipe`"), "{msg}");
    assert_eq!(path, "inputs[0].dtipe");
    let (path, ..) = invalid(
        r#"{"format":"nrt-dmem-model/2","name":"m","allocations":[],
            "gpsimd_libs":{"count":1,"bytes":1,"isa":"x"}}"#,
    );
    assert_eq!(path, "gpsimd_libs.isa");
}

/// A manifest whose only input is `tensor` (a JSON object).
fn with_input(tensor: &str) -> String {
    format!(r#"{{"format":"nrt-dmem-model/2","name":"m","allocations":[],"inputs":[{tensor}]}}"#)
}

#[test]
fn io_tensors_carry_dtype_and_shape_with_documented_defaults() {
    let m = Manifest::parse(
        br#"{"format":"nrt-dmem-model/2","name":"m","allocations":[],
            "inputs":[{"name":"a","size":12},
                      {"name":"b","dtype":"float32","shape":[1,3,224,224]},
                      {"name":"c","size":8,"dtype":"NRT_DTYPE_BFLOAT16"}],
            "outputs":[{"name":"y","size":4000,"dtype":"float32","shape":[1,1000]}]}"#,
    )
    .unwrap();
    let io = m.io_tensors();
    let got: Vec<_> = io
        .iter()
        .map(|t| (t.name.as_str(), t.usage, t.dtype, t.shape.clone(), t.size))
        .collect();
    assert_eq!(
        got,
        [
            ("a", TensorUsage::Input, Dtype::Uint8, vec![12], 12),
            (
                "b",
                TensorUsage::Input,
                Dtype::Float32,
                vec![1, 3, 224, 224],
                602112
            ),
            ("c", TensorUsage::Input, Dtype::Bfloat16, vec![4], 8),
            (
                "y",
                TensorUsage::Output,
                Dtype::Float32,
                vec![1, 1000],
                4000
            ),
        ]
    );
    assert_eq!(m.inputs[1].size, 602112, "size follows from the shape");
}

#[test]
fn refuses_bad_dtypes_and_shapes() {
    let cases = [
        (
            r#"{"name":"a","size":4,"dtype":"fp64"}"#,
            "inputs[0].dtype",
            "unknown dtype \"fp64\"",
        ),
        (
            r#"{"name":"a","size":4,"dtype":"unknown"}"#,
            "inputs[0].dtype",
            "unknown dtype",
        ),
        (
            r#"{"name":"a","size":5,"dtype":"int32"}"#,
            "inputs[0]",
            "not a multiple of the 4-byte int32",
        ),
        (
            r#"{"name":"a","size":7,"dtype":"int8","shape":[2,3]}"#,
            "inputs[0]",
            "is 6 bytes, but size is 7",
        ),
        (r#"{"name":"a"}"#, "inputs[0]", "give its size or its shape"),
        (
            r#"{"name":"a","shape":[4294967295,4294967295,4294967295]}"#,
            "inputs[0]",
            "overflows",
        ),
    ];
    for (t, want_path, want) in cases {
        let (path, msg, ..) = invalid(&with_input(t));
        assert!(msg.contains(want), "{t}: {msg}");
        assert_eq!(path, want_path, "{t}");
    }
    let dims = vec!["1"; 33].join(",");
    let (_, msg, ..) = invalid(&with_input(&format!(r#"{{"name":"a","shape":[{dims}]}}"#)));
    assert!(msg.contains("33 dimensions, at most 32"), "{msg}");
    let dims = vec!["1"; 32].join(",");
    let ok = with_input(&format!(r#"{{"name":"a","shape":[{dims}]}}"#));
    assert_eq!(Manifest::parse(ok.as_bytes()).unwrap().inputs[0].size, 1);
}

#[test]
fn rejects_a_wrong_format() {
    let (path, msg, line, _) =
        invalid(r#"{"format":"nrt-dmem-model/3","name":"m","allocations":[]}"#);
    assert_eq!(path, "format");
    assert!(msg.contains("nrt-dmem-model/3"), "{msg}");
    assert!(msg.contains("nrt-dmem-model/2"), "{msg}");
    assert_eq!(line, 1);
    // The former format (the project's own usage numbering) is refused with what changed,
    // never read with its numbers reinterpreted.
    let (path, msg, ..) = invalid(
        r#"{"format":"nrt-dmem-model/1","name":"m","allocations":[{"usage":2,"location":"device","size":1}]}"#,
    );
    assert_eq!(path, "format");
    assert!(msg.contains("former usage names and numbers"), "{msg}");
    assert!(msg.contains("\"format\": \"nrt-dmem-model/2\""), "{msg}");
    let (path, ..) = invalid(r#"{"format":1,"name":"m","allocations":[]}"#);
    assert_eq!(path, "format");
}

#[test]
fn refuses_a_former_usage_name_naming_the_new_one() {
    for (old, new) in [
        ("CONSTANTS", "use WEIGHT"),
        ("DMA_MEM_USAGE_TYPE_SHARED_SCRATCHPAD", "use SCRATCHPAD"),
        ("nonshared_scratchpad", "use SCRATCHPAD_NOT_SHARED"),
        ("CODE", "use INSTR_PE, INSTR_ACT"),
        ("COLLECTIVES", "use CC"),
    ] {
        let (path, msg, ..) = invalid(&format!(
            r#"{{"format":"nrt-dmem-model/2","name":"m","allocations":[{{"usage":"{old}","location":"device","size":1}}]}}"#
        ));
        assert_eq!(path, "allocations[0].usage");
        assert!(msg.contains(new) && msg.contains("renamed"), "{old}: {msg}");
    }
}

#[test]
fn rejects_unknown_usage_listing_the_valid_names() {
    let (path, msg, line, col) = invalid(
        "{\"format\":\"nrt-dmem-model/2\",\"name\":\"m\",\"allocations\":[\n  {\"usage\":\"WEIGHTS\",\"location\":\"device\",\"size\":1}]}",
    );
    assert_eq!(path, "allocations[0].usage");
    assert!(msg.contains("\"WEIGHTS\""), "{msg}");
    for name in [
        "GENERIC (0)",
        "TENSOR (12)",
        "WEIGHT (6)",
        "DMA_RING_COLLECTIVES (21)",
    ] {
        assert!(msg.contains(name), "{name} missing from {msg}");
    }
    assert_eq!(line, 2);
    assert!(col > 10);
    let (path, msg, ..) = invalid(
        r#"{"format":"nrt-dmem-model/2","name":"m","allocations":[{"usage":22,"location":"device","size":1}]}"#,
    );
    assert_eq!(path, "allocations[0].usage");
    assert!(msg.contains("22"), "{msg}");
    let (_, msg, ..) = invalid(
        r#"{"format":"nrt-dmem-model/2","name":"m","allocations":[{"usage":-1,"location":"device","size":1}]}"#,
    );
    assert!(msg.contains("negative"), "{msg}");
}

#[test]
fn rejects_bad_locations_types_and_missing_fields() {
    let (path, msg, ..) = invalid(
        r#"{"format":"nrt-dmem-model/2","name":"m","allocations":[{"usage":"INSTR_PE","location":"hbm","size":1}]}"#,
    );
    assert_eq!(path, "allocations[0].location");
    assert!(msg.contains("\"hbm\""), "{msg}");
    let (path, msg, ..) = invalid(
        r#"{"format":"nrt-dmem-model/2","name":"m","allocations":[{"usage":"INSTR_PE","location":"device","size":-4}]}"#,
    );
    assert_eq!(path, "allocations[0].size");
    assert!(msg.contains("invalid value"), "{msg}");
    let (path, msg, ..) = invalid(
        r#"{"format":"nrt-dmem-model/2","name":"m","allocations":[{"usage":"INSTR_PE","location":"device"}]}"#,
    );
    assert_eq!(path, "allocations[0]");
    assert!(msg.contains("missing field `size`"), "{msg}");
    let (_, msg, ..) = invalid(r#"{"format":"nrt-dmem-model/2","allocations":[]}"#);
    assert!(msg.contains("missing field `name`"), "{msg}");
    let (_, msg, ..) = invalid(r#"{"name":"m","allocations":[]}"#);
    assert!(msg.contains("missing field `format`"), "{msg}");
    let (_, msg, ..) = invalid(r#"{"format":"nrt-dmem-model/2","name":"m"}"#);
    assert!(msg.contains("missing field `allocations`"), "{msg}");
    let (path, msg, ..) = invalid(
        r#"{"format":"nrt-dmem-model/2","name":"m","allocations":[],
           "sbuf_carveout":{"type":"dma","partition_start":0,"partition_count":128,"offset":0,"size":8}}"#,
    );
    assert_eq!(path, "sbuf_carveout.type");
    assert!(msg.contains("evtaccel"), "{msg}");
}

#[test]
fn rejects_malformed_json_with_a_position() {
    let (_, msg, line, col) =
        invalid("{\"format\":\"nrt-dmem-model/2\",\n\"name\":\"m\",,\"allocations\":[]}");
    assert!(!msg.is_empty());
    assert_eq!((line, col > 0), (2, true));
    let (_, msg, ..) = invalid("");
    assert!(msg.contains("EOF"), "{msg}");
    let (_, msg, ..) = invalid(r#"{"format":"nrt-dmem-model/2","name":"m","allocations":[]} {}"#);
    assert!(msg.contains("trailing"), "{msg}");
    let (_, msg, ..) = invalid("model: bert\n");
    assert!(msg.contains("expected value"), "{msg}");
}

#[test]
fn recognises_neffs_and_binary_blobs() {
    let neff = |b: &[u8]| matches!(Manifest::parse(b), Err(ManifestError::Neff { .. }));
    assert!(neff(&[0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0]));
    let mut tar = vec![b'a'; 600];
    tar[257..262].copy_from_slice(b"ustar");
    assert!(neff(&tar));
    assert!(neff(b"NEFF\x01\x00\x00\x00"));
    assert!(neff(b"neff header v2"));
    assert!(neff(&[b'{', 0, 1, 2]));
    assert!(neff(&[0xff, 0xfe, b'{', b'}']));
    let e = Manifest::parse(&[0x1f, 0x8b]).unwrap_err().to_string();
    assert!(e.contains("NEFF") && e.contains("nrt-dmem-model/2"), "{e}");
    assert!(!neff(BERT.as_bytes()));
}

#[test]
fn shipped_examples_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/models");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            let m = Manifest::from_path(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(!m.name.is_empty());
            n += 1;
        }
    }
    assert!(n >= 4, "expected at least 4 example manifests, found {n}");
    assert!(matches!(
        Manifest::from_path(dir.join("no-such-model.json")),
        Err(ManifestError::Io { .. })
    ));
}

#[test]
fn shipped_examples_load_together_on_one_core_of_trn2_and_trn1() {
    use crate::config::{DeviceChoice, RuntimeConfig};
    use nrt_core::sim::Preset;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/models");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    for preset in [Preset::Trn2, Preset::Trn1] {
        let cfg = RuntimeConfig {
            device: DeviceChoice::sim(preset, 1),
            ..RuntimeConfig::default()
        };
        let rt = crate::HostRuntime::start(cfg).unwrap();
        let nrt = rt.nrt();
        let before = nrt
            .ledger()
            .memory_stats(LogicalCore::new(0))
            .unwrap()
            .bytes_used;
        let mut handles = Vec::new();
        for p in &paths {
            let m = Manifest::from_path(p).unwrap();
            let s = m.spec();
            let h = nrt
                .models()
                .load(LogicalCore::new(0), &s.as_spec())
                .unwrap_or_else(|e| panic!("{preset:?} {}: {e}", p.display()));
            let info = nrt.models().info(h).unwrap();
            assert!(
                info.bytes >= m.requested_bytes(Location::Device),
                "{}: {} < {}",
                m.name,
                info.bytes,
                m.requested_bytes(Location::Device)
            );
            handles.push(h);
        }
        assert!(
            nrt.ledger()
                .memory_stats(LogicalCore::new(0))
                .unwrap()
                .bytes_used
                > before
        );
        for h in handles {
            nrt.models().unload(h).unwrap();
        }
        rt.close().unwrap();
    }
}

/// A value of the wrong JSON type is refused with what the field takes; a carveout type past
/// 32 bits is refused as such.
#[test]
fn wrong_typed_values_name_what_the_field_takes() {
    let alloc = |usage: &str, location: &str| {
        format!(
            r#"{{"format":"nrt-dmem-model/2","name":"m","allocations":[{{"usage":{usage},"location":{location},"size":1}}]}}"#
        )
    };
    let carveout = |ty: &str| {
        format!(
            r#"{{"format":"nrt-dmem-model/2","name":"m","allocations":[],
               "sbuf_carveout":{{"type":{ty},"partition_start":0,"partition_count":128,"offset":0,"size":8}}}}"#
        )
    };
    for (json, want_path, want) in [
        (
            alloc("\"TENSOR\"", "3"),
            "allocations[0].location",
            "invalid type: integer `3`, expected \"device\" or \"host\"",
        ),
        (
            alloc("true", "\"device\""),
            "allocations[0].usage",
            "invalid type: boolean `true`, expected a dma_mem_usage_type_t name or number (0..=21)",
        ),
        (
            r#"{"format":2,"name":"m","allocations":[]}"#.to_string(),
            "format",
            "invalid type: integer `2`, expected the string \"nrt-dmem-model/2\"",
        ),
        (
            carveout("-1"),
            "sbuf_carveout.type",
            "invalid type: integer `-1`, expected \"evtaccel\" or a kbin_sb_carveout_type_t number",
        ),
        (
            carveout("4294967296"),
            "sbuf_carveout.type",
            "carveout type 4294967296 does not fit 32 bits",
        ),
    ] {
        let (path, msg, ..) = invalid(&json);
        assert_eq!(path, want_path, "{json}");
        assert_eq!(msg, want, "{json}");
    }
}
