//! Every refusal of a bad NEFF that the reader makes by itself (the two that
//! need a live device are in nrt-host's tests): status, message, and — since the reader never
//! allocates — nothing else to check here.

mod common;

use common::*;
use nrt_core::abi::NRT_STATUS;
use nrt_neff::pack::NeffWriter;
use nrt_neff::{pack, read, ReadOptions};
use serde_json::{json, Value};

const INVALID: NRT_STATUS = NRT_STATUS::NRT_INVALID;
const UNSUPPORTED: NRT_STATUS = NRT_STATUS::NRT_UNSUPPORTED_NEFF_VERSION;

fn good() -> Vec<u8> {
    write(members(&small()))
}

fn patched(off: usize, v: u64) -> Vec<u8> {
    let mut b = good();
    set_u64(&mut b, off, v);
    b
}

fn payload() -> Vec<u8> {
    let b = good();
    let n = header_of(&b).data_size as usize;
    b[1024..1024 + n].to_vec()
}

fn with_members(f: impl FnOnce(&mut Vec<pack::Member>)) -> Vec<u8> {
    let mut ms = members(&small());
    f(&mut ms);
    write(ms)
}

fn var<'a>(v: &'a mut Value, name: &str) -> &'a mut Value {
    &mut v["var"][name]
}

#[test]
fn each_bad_neff_is_refused_with_its_status_and_message() {
    let len = good().len() as u64;
    let cases: Vec<(&str, Vec<u8>, NRT_STATUS, String)> = vec![
        (
            "empty file",
            Vec::new(),
            INVALID,
            "Invalid number of NEFF bytes received 0".into(),
        ),
        (
            "truncated inside the header",
            good()[..1000].to_vec(),
            INVALID,
            "Invalid number of NEFF bytes received 3e8".into(),
        ),
        (
            "truncated inside the payload",
            good()[..len as usize - 7].to_vec(),
            INVALID,
            "Invalid NEFF data size(".into(),
        ),
        (
            "header_size past the file",
            patched(8, len),
            INVALID,
            format!("Invalid NEFF file size hdr sz: {len:x}, file sz: {len:x}"),
        ),
        (
            "data_size past the file",
            patched(0x10, len),
            INVALID,
            format!("Invalid NEFF data size({len:x} vs {:x})", len - 1024),
        ),
        (
            "version 3",
            patched(0x18, 3),
            UNSUPPORTED,
            "NEFF version: 3.0 is not supported, accepted version range: 0.x-2.x".into(),
        ),
        (
            "feature bit 27",
            patched(0x220, 1 << 27),
            UNSUPPORTED,
            "features: 0x8000000) has been compiled by a newer version".into(),
        ),
        (
            "feature bit 62",
            patched(0x220, (1 << 62) | 1),
            UNSUPPORTED,
            "features: 0x4000000000000000)".into(),
        ),
        (
            "packager 3",
            patched(0, 3),
            UNSUPPORTED,
            "Unsupported NEFF packager: 3".into(),
        ),
        (
            "packager 0",
            patched(0, 0),
            UNSUPPORTED,
            "Unsupported NEFF packager: 0".into(),
        ),
        (
            "MD5 mismatch",
            {
                let mut b = good();
                b[0xAC] ^= 1;
                b
            },
            INVALID,
            "MD5 mismatch!".into(),
        ),
        (
            "payload byte flipped",
            {
                let mut b = good();
                let n = b.len();
                b[n - 9] ^= 0x40;
                b
            },
            INVALID,
            "MD5 mismatch!".into(),
        ),
        (
            "SHA-256 mismatch (pkg 1)",
            {
                let mut w = NeffWriter::new(nrt_neff::Header {
                    pkg_version: 1,
                    ..pack::header_for("small")
                });
                w.members = members(&small());
                let mut b = w.finish().unwrap();
                b[0xAC + 31] ^= 1;
                b
            },
            INVALID,
            "SHA256 mismatch!".into(),
        ),
        (
            "truncated gzip",
            {
                let p = payload();
                rewrap(&p[..p.len() / 2])
            },
            INVALID,
            "failure while reading NEFF metadata: corrupt or truncated gzip".into(),
        ),
        (
            "gzip without its trailer",
            {
                let p = payload();
                rewrap(&p[..p.len() - 8])
            },
            INVALID,
            "failure while reading NEFF metadata".into(),
        ),
        (
            "member ../x",
            with_members(|m| m.push(("../x".into(), Some(b"x".to_vec())))),
            INVALID,
            "NEFF member \"../x\" has a '..' component; refused (path traversal)".into(),
        ),
        (
            "member sg00/../../x",
            with_members(|m| m.push(("sg00/../../x".into(), Some(vec![])))),
            INVALID,
            "'..' component".into(),
        ),
        (
            "absolute member",
            with_members(|m| m.push(("/etc/passwd".into(), Some(vec![])))),
            INVALID,
            "NEFF member \"/etc/passwd\" has an absolute path".into(),
        ),
        (
            "duplicate member",
            with_members(|m| m.push(("neff.json".into(), Some(b"{}".to_vec())))),
            INVALID,
            "duplicate NEFF member \"neff.json\"".into(),
        ),
        (
            "duplicate after ./",
            with_members(|m| m.push(("./kelf-a.json".into(), Some(b"{}".to_vec())))),
            INVALID,
            "duplicate NEFF member \"kelf-a.json\"".into(),
        ),
        (
            "missing neff.json",
            with_members(|m| m.retain(|(n, _)| n != "neff.json")),
            INVALID,
            "Missing neff.json (or kelp.json) in NEFF".into(),
        ),
        (
            "neff.json without heads",
            edit_json("neff.json", |v| {
                v.as_object_mut().unwrap().remove("heads");
            }),
            INVALID,
            "neff.json: Missing required fields in NEFF JSON".into(),
        ),
        (
            "neff.json without shape",
            edit_json("neff.json", |v| {
                v["attrs"].as_object_mut().unwrap().remove("shape");
            }),
            INVALID,
            "Missing dltype or shape in attrs".into(),
        ),
        (
            "no kelf node",
            edit_json("neff.json", |v| {
                v["nodes"][1]["attrs"]["func_name"] = json!("tvm_op")
            }),
            INVALID,
            "neff.json: No KELF node found in NEFF JSON".into(),
        ),
        (
            "kelf member absent",
            with_members(|m| m.retain(|(n, _)| n != "kelf-a.json")),
            INVALID,
            "Failed to get KELF member kelf-a.json".into(),
        ),
        (
            "bad target",
            edit_json("kelf-a.json", |v| v["target"] = json!("tonga")),
            INVALID,
            "kelf-a.json: Invalid target 'tonga'".into(),
        ),
        (
            "kelf version without a dot",
            edit_json("kelf-a.json", |v| v["version"] = json!("1")),
            INVALID,
            "Invalid KELF version '1'".into(),
        ),
        (
            "missing def.json",
            with_members(|m| m.retain(|(n, _)| n != "sg00/def.json")),
            INVALID,
            "Failed to get NEFF member sg00/def.json: subgraph sg00 has no def.json".into(),
        ),
        (
            "var_id gap",
            edit_json("sg00/def.json", |v| {
                var(v, "activations")["var_id"] = json!(9)
            }),
            INVALID,
            "sg00/def.json: Unexpected var_ids set! max=9, size=5".into(),
        ),
        (
            "duplicate var_id",
            edit_json("sg00/def.json", |v| {
                var(v, "activations")["var_id"] = json!(0)
            }),
            INVALID,
            "duplicate var_id 0".into(),
        ),
        (
            "no outputs",
            edit_json("sg00/def.json", |v| var(v, "y")["type"] = json!("tmp-buf")),
            INVALID,
            "sg00/def.json: Subgraph sg00 has no Outputs".into(),
        ),
        (
            "no var table",
            edit_json("sg00/def.json", |v| {
                v.as_object_mut().unwrap().remove("var");
            }),
            INVALID,
            "has no Outputs (no var table)".into(),
        ),
        (
            "alignment not a power of 2",
            edit_json("sg00/def.json", |v| {
                var(v, "weights")["alignment"] = json!(48)
            }),
            INVALID,
            "alignment provided not power of 2. alignment=48".into(),
        ),
        (
            "weight payload missing",
            with_members(|m| m.retain(|(n, _)| n != "sg00/weights.bin")),
            INVALID,
            "Failed to get neff weight content for weights.bin".into(),
        ),
        (
            "bad .npy magic",
            {
                let mut ms = members(&small());
                ms.push((
                    "sg00/w.npy".into(),
                    Some(vec![1, 2, 3, 4, 5, 6, 1, 0, 0, 0]),
                ));
                let def = ms
                    .iter_mut()
                    .find(|(n, _)| n == "sg00/def.json")
                    .unwrap()
                    .1
                    .as_mut()
                    .unwrap();
                let mut v: Value = serde_json::from_slice(def).unwrap();
                var(&mut v, "weights")["file_name"] = json!("w.npy");
                *def = serde_json::to_vec(&v).unwrap();
                write(ms)
            },
            INVALID,
            "NUMPY w.npy bad header 201 != 0x4e93".into(),
        ),
        (
            "unknown var type",
            edit_json("sg00/def.json", |v| {
                var(v, "activations")["type"] = json!("heap")
            }),
            INVALID,
            "Unknown var type 'heap' for var activations".into(),
        ),
        (
            "33 dims",
            edit_json("neff.json", |v| {
                v["attrs"]["shape"][1][0] = json!(vec![1; 33])
            }),
            INVALID,
            "Too many dimensions (33) for tensor x".into(),
        ),
        (
            "size overflow",
            edit_json("neff.json", |v| {
                v["attrs"]["shape"][1][1] = json!([u32::MAX, u32::MAX, u32::MAX])
            }),
            INVALID,
            "Tensor size of y overflows".into(),
        ),
        (
            "unknown dtype",
            edit_json("neff.json", |v| {
                v["attrs"]["dltype"][1][0] = json!("float128")
            }),
            INVALID,
            "Unknown dtype: float128 for tensor x".into(),
        ),
        (
            "negative dim",
            edit_json("neff.json", |v| v["attrs"]["shape"][1][0] = json!([-1])),
            INVALID,
            "dimension -1 is not a 32-bit unsigned integer".into(),
        ),
        (
            "EID out of bounds",
            edit_json("neff.json", |v| v["node_row_ptr"][0] = json!(7)),
            INVALID,
            "EID 7 out of bounds for dtypes/shapes".into(),
        ),
        (
            "output node out of bounds",
            edit_json("neff.json", |v| v["heads"][0][0] = json!(99)),
            INVALID,
            "Output node ID 99 out of bounds".into(),
        ),
        (
            "ucode version major",
            edit_json("sg00/ucode_lib.json", |v| {
                v[0]["ulib_to_ucode_version"] = json!("2.0.0.0")
            }),
            INVALID,
            "Mismatch between GPSIMD lib version and NRT version!".into(),
        ),
        (
            "ucode version missing",
            edit_json("sg00/ucode_lib.json", |v| {
                v[0].as_object_mut()
                    .unwrap()
                    .remove("ulib_to_ucode_version");
            }),
            INVALID,
            "Missing GPSIMD lib version!".into(),
        ),
        (
            "ucode total_cpus",
            edit_json("sg00/ucode_lib.json", |v| v[0]["total_cpus"] = json!(3)),
            INVALID,
            "UCode Library ulib0.so has invalid number of total cpus 3".into(),
        ),
        (
            "reservation type",
            edit_json("sg00/def.json", |v| {
                v["runtime_statebuffer_reservation"][0]["type"] = json!("dma")
            }),
            INVALID,
            "Invalid runtime_statebuffer_reservation type dma".into(),
        ),
        (
            "DMA queue owner",
            edit_json("sg00/def.json", |v| {
                v["dma_queue"] = json!({"q0": {"owner": "gpu", "type": "in"}})
            }),
            INVALID,
            "Invalid owner 'gpu' for DMA queue q0".into(),
        ),
        (
            "EVTACCEL geometry on an explicit cayman target",
            {
                let mut ms = members(&small());
                for (n, b) in ms.iter_mut() {
                    let Some(b) = b.as_mut() else { continue };
                    if n == "kelf-a.json" || n == "sg00/def.json" {
                        let mut v: Value = serde_json::from_slice(b).unwrap();
                        if n == "kelf-a.json" {
                            v["target"] = json!("cayman");
                        } else {
                            v["runtime_statebuffer_reservation"][0]["offset"] = json!(0x1000);
                        }
                        *b = serde_json::to_vec(&v).unwrap();
                    }
                }
                write(ms)
            },
            INVALID,
            "Failed to verify Event Accel State Buffer carveout: offset 0x1000 != 0x37ff8".into(),
        ),
    ];
    let mut failed = Vec::new();
    let verify = ReadOptions {
        verify: true,
        ..ReadOptions::default()
    };
    for (what, bytes, status, msg) in &cases {
        match read(bytes, &verify) {
            Ok(_) => failed.push(format!("{what}: accepted")),
            Err(e) if e.status() != *status || !e.message().contains(msg.as_str()) => {
                failed.push(format!(
                    "{what}: got {:?} {:?}, want {status:?} containing {msg:?}",
                    e.status(),
                    e.message()
                ))
            }
            Err(_) => {}
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} cases wrong:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}

#[test]
fn what_the_gates_let_through() {
    // Bit 63 is never tested, majors 0 and 1 skip the trapdoor, the minor is never checked.
    for (off, v) in [(0x220, 1u64 << 63), (0x18, 1), (0x20, 99)] {
        let mut b = good();
        set_u64(&mut b, off, v);
        if off == 0x18 {
            set_u64(&mut b, 0x220, 1 << 40);
        }
        read(&b, &ReadOptions::default()).unwrap_or_else(|e| panic!("{off:#x}={v:#x}: {e}"));
    }
    // Without verification (the default, as libnrt's plain nrt_load) a wrong digest passes.
    let mut b = good();
    b[0xAC] ^= 1;
    read(&b, &ReadOptions::default()).unwrap();
    // A wavegraph debug member is dropped, a directory skipped, `./` stripped.
    let b = with_members(|m| {
        m.push((
            "sg00/debug-wavegraph-bin.json".into(),
            Some(b"not json".to_vec()),
        ));
        for (n, _) in m.iter_mut() {
            if n == "neff.json" {
                *n = "./neff.json".into();
            }
        }
    });
    let m = read(&b, &ReadOptions::default()).unwrap();
    assert_eq!(m.archive.skipped, ["sg00/debug-wavegraph-bin.json"]);
    assert_eq!(m.archive.directories, 1);
    // A bare tar (pkg 1, SHA-256) reads like the gzip form.
    let mut w = NeffWriter::new(nrt_neff::Header {
        pkg_version: 1,
        ..pack::header_for("small")
    });
    w.members = members(&small());
    let m1 = read(&w.finish().unwrap(), &ReadOptions::default()).unwrap();
    assert!(!m1.archive.gzip);
    assert_eq!(
        m1.bookings,
        read(&good(), &ReadOptions::default()).unwrap().bookings
    );
}
