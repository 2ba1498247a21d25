//! `nrt-dmem neff inspect` and `neff pack` as a person runs them.

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;

fn run(args: &[&std::ffi::OsStr]) -> Output {
    common::bin().args(args).output().expect("run nrt-dmem")
}

/// `nrt-dmem neff inspect FILE --json`, parsed.
fn inspect_json(f: &Path) -> serde_json::Value {
    let out = stdout(&run(&[
        "neff".as_ref(),
        "inspect".as_ref(),
        f.as_os_str(),
        "--json".as_ref(),
    ]));
    serde_json::from_str(&out).unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nrt-neff-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// `nrt-dmem neff pack MANIFEST -o OUT`; its stdout.
fn pack(manifest: &Path, out: &Path) -> String {
    stdout(&run(&[
        "neff".as_ref(),
        "pack".as_ref(),
        manifest.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]))
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn inspect_shows_the_libnrt_fixture_s_tensors_and_footprint() {
    let f = tmp("fixture.neff");
    std::fs::write(&f, nrt_neff::pack::fixture().unwrap()).unwrap();
    let text = stdout(&run(&[
        "neff".as_ref(),
        "inspect".as_ref(),
        f.as_os_str(),
        "--verify".as_ref(),
    ]));
    for want in [
        "  input   input                    float32   [32]                      128",
        "  output  output                   float32   [32]                      128",
        "  MODEL  SCRATCHPAD_NOT_SHARED  device          256          256            0            0",
        "  MODEL  INSTR_PE               device        65600           64        65536            0",
        "  MODEL  INSTR_POOL             device        65728          192        65536            0",
        "  MODEL  DMA_RING_IO            device       131072            0       131072            0",
        "integrity         MD5 of the",
        "name \"x\", uuid 561826fb-125f-4bb8-991c-29e085c8949a",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    let j = inspect_json(&f);
    assert_eq!(
        j["tensors"][0],
        serde_json::json!({"name": "input", "usage": "input", "dtype": "float32", "nrt_dtype": 10, "shape": [32], "size": 128})
    );
    assert_eq!(j["tensors"][1]["name"], "output");
    let fp = j["footprint"].as_array().unwrap();
    let row = |u: &str| {
        fp.iter()
            .find(|r| r["usage"] == u && r["tier"] == "MODEL")
            .unwrap()
    };
    assert_eq!(
        (
            row("SCRATCHPAD_NOT_SHARED")["bytes"].as_u64(),
            row("SCRATCHPAD_NOT_SHARED")["exact"].as_u64()
        ),
        (Some(256), Some(256))
    );
    assert_eq!(row("INSTR_POOL")["exact"], 192);
    // The digest is checked only when asked (--verify, NRT_DMEM_VERIFY_NEFF=1).
    assert_eq!(j["gates"].as_array().unwrap().len(), 6);
    assert_eq!(j["archive"]["passes"], 1);
}

#[test]
fn pack_then_inspect_an_example_and_a_refusal() {
    let m = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/models/custom-op-3libs.json");
    let f = tmp("custom.neff");
    let o = pack(&m, &f);
    assert!(o.contains("NEFF pkg 2, model \"custom-op-3libs\""), "{o}");
    let text = stdout(&run(&["neff".as_ref(), "inspect".as_ref(), f.as_os_str()]));
    assert!(text.contains("  MODEL  WEIGHT                 device     16777216     16777216            0            0"), "{text}");
    assert!(text.contains("  MODEL  UCODE_LIB              device       589824       393216            0       196608"), "{text}");
    // A refused NEFF: exit 2, libnrt's reason and status.
    let mut b = std::fs::read(&f).unwrap();
    b[0x18] = 3;
    let bad = tmp("v3.neff");
    std::fs::write(&bad, b).unwrap();
    let o = run(&["neff".as_ref(), "inspect".as_ref(), bad.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "NEFF refused (NRT_UNSUPPORTED_NEFF_VERSION, 10): NEFF version: 3.0 is not supported"
        ),
        "{err}"
    );
}

/// `neff inspect --json` on every example packed with `neff pack`: the tensor table is the
/// manifest's (name, dtype, shape, bytes) and the MODEL tier's device bytes per usage are what
/// the manifest's allocations ask for over its subgraphs (inspect shows both).
#[test]
fn inspect_shows_every_packed_examples_tensors_and_footprint() {
    use nrt_host::manifest::{Location, Manifest};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/models");
    let mut examples: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 6);
    for m in &examples {
        let man = Manifest::from_path(m).unwrap();
        let f = tmp(&format!("{}.neff", man.name));
        pack(m, &f);
        let j = inspect_json(&f);
        let tensors: Vec<(String, String, Vec<u64>, u64)> = j["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_string(),
                    t["dtype"].as_str().unwrap().to_string(),
                    t["shape"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|d| d.as_u64().unwrap())
                        .collect(),
                    t["size"].as_u64().unwrap(),
                )
            })
            .collect();
        let want: Vec<(String, String, Vec<u64>, u64)> = man
            .io_tensors()
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    t.dtype.name().to_string(),
                    t.shape.iter().map(|d| u64::from(*d)).collect(),
                    t.size,
                )
            })
            .collect();
        assert_eq!(tensors, want, "{}", man.name);
        let mut have = std::collections::BTreeMap::<String, u64>::new();
        for row in j["footprint"].as_array().unwrap() {
            if row["tier"] == "MODEL" && row["location"] == "device" {
                *have
                    .entry(row["usage"].as_str().unwrap().into())
                    .or_default() += row["bytes"].as_u64().unwrap();
            }
        }
        let mut asked = std::collections::BTreeMap::<String, u64>::new();
        for a in man
            .allocations
            .iter()
            .filter(|a| a.location == Location::Device)
        {
            *asked.entry(a.usage.short_name().into()).or_default() +=
                a.size * u64::from(man.subgraphs);
        }
        for (usage, bytes) in &asked {
            assert_eq!(
                have.get(usage),
                Some(bytes),
                "{}: {usage} in {have:?}",
                man.name
            );
        }
        std::fs::remove_file(&f).unwrap();
    }
}

/// Runs nrt-dmem with `args`; its output and its peak RSS in KiB (`wait4`'s rusage of the
/// child, which std spawns without copying this process's memory).
// Reaped with `wait4` (for its rusage), not `Child::wait`.
#[allow(clippy::zombie_processes)]
fn run_rss(args: &[&std::ffi::OsStr]) -> (Output, u64) {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let mut child = common::bin()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run nrt-dmem");
    let mut err = child.stderr.take().unwrap();
    let errs = std::thread::spawn(move || {
        let mut v = Vec::new();
        err.read_to_end(&mut v).map(|_| v)
    });
    let mut stdout = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    let stderr = errs.join().unwrap().unwrap();
    let mut status = 0;
    // SAFETY: all-zero is a valid rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    // SAFETY: `pid` is this test's own child, not yet reaped (std has not waited for it);
    // `status` and `ru` are valid for writes during the call.
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut ru) }, pid);
    let out = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout,
        stderr,
    };
    (out, u64::try_from(ru.ru_maxrss).unwrap())
}

/// What is not a NEFF file — a device, a directory, a FIFO, a 3 GiB file of zeros — is refused
/// by `neff inspect` and `plan` with the first gate's message, in at most 64 MiB: nothing past
/// the header is read (a FIFO is not even waited on).
#[test]
fn special_files_are_refused_by_the_first_gate_in_bounded_memory() {
    let dir = tmp("special");
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    let _ = std::fs::remove_file(&fifo);
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let zeros = dir.join("zeros-3g.neff");
    // Sparse: 3 GiB of zeros that take no disk.
    std::fs::File::create(&zeros)
        .unwrap()
        .set_len(3 << 30)
        .unwrap();
    let size0 = "NEFF refused by the size floor gate (NRT_INVALID, 2): Invalid number of NEFF \
                 bytes received 0";
    let cases: Vec<(PathBuf, String)> = vec![
        (
            "/dev/zero".into(),
            format!("{size0} (/dev/zero is a character device, not a regular file)"),
        ),
        (
            "/dev/urandom".into(),
            format!("{size0} (/dev/urandom is a character device"),
        ),
        (
            dir.clone(),
            format!("{size0} ({} is a directory", dir.display()),
        ),
        (
            fifo.clone(),
            format!("{size0} ({} is a FIFO", fifo.display()),
        ),
        (
            zeros.clone(),
            "NEFF refused by the packager gate (NRT_UNSUPPORTED_NEFF_VERSION, 10): Unsupported \
             NEFF packager: 0"
                .into(),
        ),
    ];
    let mut wrong = Vec::new();
    for (path, want) in &cases {
        for cmd in ["inspect", "plan"] {
            let args: Vec<&std::ffi::OsStr> = if cmd == "inspect" {
                vec!["neff".as_ref(), "inspect".as_ref(), path.as_os_str()]
            } else {
                vec!["plan".as_ref(), path.as_os_str()]
            };
            let (o, kib) = run_rss(&args);
            let err = String::from_utf8_lossy(&o.stderr);
            // `neff inspect` prints the reason without the gate's name.
            let want = if cmd == "inspect" {
                want.replace(" by the size floor gate", "")
                    .replace(" by the packager gate", "")
            } else {
                want.clone()
            };
            if o.status.code() != Some(2) || !err.contains(&want) {
                wrong.push(format!("{cmd} {}: {:?} {err}", path.display(), o.status));
            }
            if kib > 64 << 10 {
                wrong.push(format!("{cmd} {}: peak RSS {kib} KiB", path.display()));
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
