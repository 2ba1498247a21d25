//! `nrt-dmem inspect` against real processes (docs/INSPECT.md): a C program on this project's
//! `libnrt.so` (`ffi/examples/holder.c`) holding models and tensors, read live and from its
//! `gcore`, both held to what the process reports about itself through the C API; the core
//! file's size and its lack of simulated device memory; cores with scribbled pages; and every
//! bad input (exit 2 with a message that says what to do).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// What the holder loads: (logical core, model manifest). llama3's shard has two subgraphs,
/// one MODEL heap on each physical core of logical core 1.
const MODELS: [(u32, &str); 3] = [
    (0, "resnet50"),
    (0, "bert-base"),
    (1, "llama3-8b-tp8-shard"),
];

fn root() -> PathBuf {
    nrt_tests::c::root()
}

fn out_dir() -> PathBuf {
    nrt_tests::c::out_dir("nrt-inspect")
}

/// True when `tool` is an executable on the PATH (gcore has no `--version` to run); otherwise
/// false with a note, or a failure when `.ci/run` promised it (NRT_REQUIRE_TOOLS).
fn have(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|d| {
        std::fs::metadata(d.join(tool))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }) {
        return true;
    }
    assert!(
        std::env::var_os("NRT_REQUIRE_TOOLS").is_none(),
        "{tool} is not installed, and NRT_REQUIRE_TOOLS is set"
    );
    eprintln!("SKIPPED: {tool} is not installed (.ci/run installs it)");
    false
}

/// `(lib, stripped lib, holder)`, built once. The library is copied, not linked, into this
/// test's directory: another test rebuilding `target/debug/libnrt.so` must not replace the
/// file under a running holder. The stripped copy (`strip --strip-all`) has no symbol table.
fn build() -> &'static (PathBuf, PathBuf, PathBuf) {
    static B: OnceLock<(PathBuf, PathBuf, PathBuf)> = OnceLock::new();
    B.get_or_init(|| {
        let out = out_dir();
        let built = nrt_tests::c::libnrt(&out).join("libnrt.so");
        let (lib, stripped) = (out.join("own-lib"), out.join("stripped-lib"));
        for d in [&lib, &stripped] {
            let _ = std::fs::remove_dir_all(d);
            std::fs::create_dir_all(d).unwrap();
        }
        let real = std::fs::canonicalize(&built).unwrap();
        std::fs::copy(&real, lib.join("libnrt.so.1")).unwrap();
        std::os::unix::fs::symlink("libnrt.so.1", lib.join("libnrt.so")).unwrap();
        let o = Command::new("strip")
            .arg("--strip-all")
            .arg("-o")
            .arg(stripped.join("libnrt.so.1"))
            .arg(lib.join("libnrt.so.1"))
            .output()
            .expect("run strip");
        nrt_tests::check_output("strip", o);
        let exe = out.join("holder");
        nrt_tests::c::compile(&root().join("ffi/examples/holder.c"), &exe, &lib);
        (lib, stripped, exe)
    })
}

/// What the holder reports through the C API: per model (load order) its logical core,
/// allocations, bytes and device bytes; the sum of `nrt_get_vnc_memory_stats` over the
/// logical cores.
#[derive(Debug, Clone)]
struct ApiReport {
    models: Vec<(u32, u64, u64, u64)>,
    total: u64,
}

/// A running `holder` (ended on drop).
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
    pid: i32,
    api: ApiReport,
}

impl Holder {
    /// Starts the holder on sim:trn2 with [`MODELS`] and waits for its report.
    fn start(env: &[(&str, &str)]) -> Holder {
        Holder::start_in(env, None)
    }

    /// [`Holder::start`], in directory `crash_dir` with no limit on the size of a core dump
    /// when it is given (a crash leaves the kernel's core file there).
    fn start_in(env: &[(&str, &str)], crash_dir: Option<&Path>) -> Holder {
        let (_, _, exe) = build();
        let args: Vec<String> = MODELS
            .iter()
            .map(|(v, m)| {
                format!(
                    "{v}:{}",
                    root()
                        .join("examples/models")
                        .join(format!("{m}.json"))
                        .display()
                )
            })
            .collect();
        let mut cmd = match crash_dir {
            Some(d) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg("ulimit -c unlimited && exec \"$0\" \"$@\"")
                    .arg(exe)
                    .current_dir(d);
                c
            }
            None => Command::new(exe),
        };
        let mut child = cmd
            .args(&args)
            .env("NRT_DMEM_DEVICE", "sim:trn2")
            .env("NEURON_RT_LOG_LEVEL", "ERROR")
            .env_remove("NEURON_RT_VISIBLE_CORES")
            .env_remove("NEURON_RT_NUM_CORES")
            .env_remove("NEURON_RT_VIRTUAL_CORE_SIZE")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the holder");
        let stdin = child.stdin.take();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut api = ApiReport {
            models: Vec::new(),
            total: 0,
        };
        let pid;
        loop {
            let mut line = String::new();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "the holder ended before it was ready"
            );
            let f: Vec<&str> = line.split_whitespace().collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            match f[0] {
                "model" => api.models.push((n(1) as u32, n(2), n(3), n(4))),
                "total" => api.total = n(1),
                "ready" => {
                    pid = n(1) as i32;
                    break;
                }
                _ => {}
            }
        }
        assert_eq!(api.models.len(), MODELS.len());
        Holder {
            child,
            stdin,
            out,
            pid,
            api,
        }
    }

    /// Lets the holder go on (free everything, `nrt_close`) and returns its next line.
    fn next(&mut self) -> String {
        let i = self.stdin.as_mut().unwrap();
        i.write_all(b"\n").unwrap();
        i.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            // Only the child this test started, by its own handle.
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Runs `nrt-dmem inspect ARGS` (as `uid` when given), at most 60 s: (exit code, stdout,
/// stderr, time taken).
fn inspect_as(uid: Option<u32>, args: &[&str]) -> (i32, String, String, Duration) {
    let mut c = common::bin();
    c.arg("inspect").args(args);
    if let Some(u) = uid {
        use std::os::unix::process::CommandExt;
        c.uid(u).gid(u).current_dir("/");
    }
    let t = Instant::now();
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nrt-dmem");
    let pid = child.id();
    // Read its output while it runs (a report larger than a pipe would block it otherwise),
    // waiting at most a minute.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let o = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            // SAFETY: `kill` has no memory effects; `pid` is the child this test started and
            // has not reaped (its waiter thread is still blocked on it).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("nrt-dmem inspect {args:?} did not end within 60 s");
        }
    };
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        t.elapsed(),
    )
}

fn inspect(args: &[&str]) -> (i32, String, String, Duration) {
    inspect_as(None, args)
}

/// `inspect ARGS --json`: the exit code and the document.
fn inspect_json(args: &[&str]) -> (i32, Value) {
    let mut a = args.to_vec();
    a.push("--json");
    let (code, out, err, _) = inspect(&a);
    let v = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("inspect {args:?} (exit {code}): {e}\n{out}\n{err}"));
    (code, v)
}

/// The holder read live, its gcore read, and the holder after `nrt_close`, made once.
struct Fixture {
    api: ApiReport,
    live: (i32, Value),
    live_text: (i32, String),
    core: PathBuf,
    core_json: (i32, Value),
    closed: (i32, Value),
}

/// `None` (with a note) without gdb's `gcore`.
fn fixture() -> Option<&'static Fixture> {
    static F: OnceLock<Option<Fixture>> = OnceLock::new();
    F.get_or_init(|| {
        if !have("gcore") {
            return None;
        }
        let mut h = Holder::start(&[]);
        let pid = h.pid.to_string();
        // gcore writes what is not marked do-not-dump: without the mark the simulated trn2's
        // 104 GiB would go to disk. Refuse before that happens.
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
        let mut big = false;
        for l in smaps.lines() {
            if let Some((a, rest)) = l.split_once('-') {
                let b = rest.split(' ').next().unwrap_or("");
                if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                    big = b - a >= 1 << 30;
                }
            } else if big && l.starts_with("VmFlags:") {
                assert!(
                    l.split_whitespace().any(|f| f == "dd"),
                    "a mapping of 1 GiB or more is not MADV_DONTDUMP (the simulated device \
                     memory?): gcore would write it out"
                );
            }
        }
        let live = inspect_json(&["--pid", &pid]);
        let (code, text, err, _) = inspect(&["--pid", &pid]);
        assert!(err.is_empty(), "{err}");
        // Cores of earlier runs (each is named after its process).
        for e in std::fs::read_dir(out_dir()).unwrap().flatten() {
            if e.file_name().to_string_lossy().starts_with("core.") {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let prefix = out_dir().join("core");
        let core = PathBuf::from(format!("{}.{pid}", prefix.display()));
        let _ = std::fs::remove_file(&core);
        let o = Command::new("gcore")
            .arg("-o")
            .arg(&prefix)
            .arg(&pid)
            .output()
            .expect("run gcore");
        nrt_tests::check_output("gcore", o);
        let core_json = inspect_json(&["--core", core.to_str().unwrap()]);
        assert_eq!(h.next(), "closed");
        let closed = inspect_json(&["--pid", &pid]);
        Some(Fixture {
            api: h.api.clone(),
            live,
            live_text: (code, text),
            core,
            core_json,
            closed,
        })
    })
    .as_ref()
}

/// The model of `MODELS[i]` in an inspect document.
fn model<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no model {name} in {:#}", doc["models"]))
}

/// Every figure of `doc` equals what the process reported through the C API.
fn agrees_with_the_c_api(doc: &Value, api: &ApiReport) {
    assert_eq!(
        doc["findings"],
        Value::Array(vec![]),
        "{:#}",
        doc["findings"]
    );
    assert_eq!(doc["source"]["flavor"], "nrt-dmem");
    assert_eq!(doc["ledger"]["total_bytes"], api.total);
    let names: Vec<&str> = doc["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), MODELS.len(), "{names:?}");
    for (i, (_, name)) in MODELS.iter().enumerate() {
        let m = model(doc, name);
        let (_, allocations, bytes, device) = api.models[i];
        assert_eq!(m["dmems"], allocations, "{name}");
        assert_eq!(m["bytes"], bytes, "{name}");
        assert_eq!(m["device_bytes"], device, "{name}");
    }
    let models_ids: std::collections::BTreeSet<u64> = doc["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["h_model"].as_u64().unwrap())
        .collect();
    assert_eq!(models_ids.len(), MODELS.len(), "H_MODEL ids are distinct");
    // Every live dmem is listed, and the lists add up to the ledger.
    let allocs = doc["allocations"].as_array().unwrap();
    assert_eq!(doc["dmems"], allocs.len() as u64);
    let device: u64 = allocs
        .iter()
        .filter(|d| d["location"] == "device")
        .map(|d| d["allocated_size"].as_u64().unwrap())
        .sum();
    assert_eq!(device, api.total, "device bytes on the lists = the ledger");
    // Tensors: two per logical core, on the GLOBAL lists, with their names.
    let tensors = allocs
        .iter()
        .filter(|d| d["usage"] == "TENSOR" && d["owner"].as_str().unwrap().starts_with("GLOBAL"))
        .count();
    assert!(tensors >= 2 * 4, "{tensors} tensors");
    assert!(allocs
        .iter()
        .any(|d| d["hint"] == "held_input" && d["size"] == 1u64 << 20));
}

#[test]
fn live_and_core_report_what_the_process_reports_through_the_c_api() {
    let Some(f) = fixture() else { return };
    assert_eq!(f.live.0, 0, "{:#}", f.live.1);
    agrees_with_the_c_api(&f.live.1, &f.api);
    assert_eq!(f.core_json.0, 0, "{:#}", f.core_json.1);
    agrees_with_the_c_api(&f.core_json.1, &f.api);
    // The same bytes: the core shows exactly what the live read showed.
    for key in [
        "models",
        "ledger",
        "dmems",
        "allocations",
        "devices",
        "context",
    ] {
        assert_eq!(f.live.1[key], f.core_json.1[key], "{key}");
    }
    assert_eq!(f.core_json.1["source"]["kind"], "core");
    assert_eq!(f.core_json.1["source"]["command"], "holder");
    assert!(f.live.1["source"]["walks"].as_u64().unwrap() >= 1);
    // The multi-subgraph model has a MODEL heap on each physical core of its logical core.
    let llama = model(&f.live.1, "llama3-8b-tp8-shard");
    assert_eq!(llama["allocators"].as_array().unwrap().len(), 2);
}

/// The simulated device's memory is not in the core (MADV_DONTDUMP): the file is small next to
/// the 104 GiB the simulated trn2 reserves, and the marker the holder wrote into a tensor is
/// not in it.
#[test]
fn the_core_file_holds_no_simulated_device_memory() {
    let Some(f) = fixture() else { return };
    let bytes = std::fs::read(&f.core).unwrap();
    eprintln!("gcore of the holder: {} MiB", bytes.len() >> 20);
    assert!(bytes.len() < 256 << 20, "{} bytes", bytes.len());
    let marker: Vec<u8> = (0..32u32).map(|i| (0xA5 ^ (i * 29 + 7)) as u8).collect();
    assert!(
        !bytes.windows(marker.len()).any(|w| w == marker),
        "the core holds a tensor's bytes"
    );
}

#[test]
fn the_text_report_shows_models_ledger_and_allocations() {
    let Some(f) = fixture() else { return };
    let (code, text) = &f.live_text;
    assert_eq!(*code, 0, "{text}");
    for (_, m) in MODELS {
        assert!(text.contains(m), "{m}:\n{text}");
    }
    for s in [
        "tdrv_ctx_0 at 0x",
        "ledger · 1 device",
        "nd0:nc0",
        &format!("({} B)", f.api.total),
        "models (3)",
        "held_input",
        "weights_bf16",
        "consistent:",
    ] {
        assert!(text.contains(s), "{s}:\n{text}");
    }
}

#[test]
fn after_nrt_close_no_runtime_is_up() {
    let Some(f) = fixture() else { return };
    let (code, doc) = &f.closed;
    assert_eq!(*code, 0, "{doc:#}");
    assert_eq!(doc["initialized"], false);
    assert_eq!(doc["models"], Value::Array(vec![]));
    assert_eq!(doc["ledger"]["total_bytes"], 0);
    assert_eq!(doc["dmems"], 0);
}

/// Virtual address → file offset through the core's `PT_LOAD` segments (bytes it holds).
struct CoreMap(Vec<(u64, u64, u64)>);

impl CoreMap {
    fn of(core: &[u8]) -> CoreMap {
        use object::read::elf::{FileHeader, ProgramHeader};
        let h = object::elf::FileHeader64::<object::Endianness>::parse(core).unwrap();
        let e = h.endian().unwrap();
        CoreMap(
            h.program_headers(e, core)
                .unwrap()
                .iter()
                .filter(|p| p.p_type(e) == object::elf::PT_LOAD && p.p_filesz(e) > 0)
                .map(|p| (p.p_vaddr(e), p.p_filesz(e), p.p_offset(e)))
                .collect(),
        )
    }

    fn offset(&self, addr: u64) -> u64 {
        self.0
            .iter()
            .find(|(va, len, _)| (*va..va + len).contains(&addr))
            .map(|(va, _, off)| off + (addr - va))
            .unwrap_or_else(|| panic!("{addr:#x} is not in the core"))
    }
}

fn addr(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// A private copy of the fixture's core, patched and restored in place.
struct Scratch {
    path: PathBuf,
    file: std::fs::File,
    map: CoreMap,
}

impl Scratch {
    fn new(name: &str, core: &Path) -> Scratch {
        let path = out_dir().join(name);
        std::fs::copy(core, &path).unwrap();
        let map = CoreMap::of(&std::fs::read(&path).unwrap());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        Scratch { path, file, map }
    }

    /// Writes `bytes` at virtual address `at` and returns what was there.
    fn poke(&self, at: u64, bytes: &[u8]) -> Vec<u8> {
        let off = self.map.offset(at);
        let mut old = vec![0u8; bytes.len()];
        self.file.read_exact_at(&mut old, off).unwrap();
        self.file.write_all_at(bytes, off).unwrap();
        old
    }

    fn peek_u64(&self, at: u64) -> u64 {
        let mut b = [0u8; 8];
        self.file
            .read_exact_at(&mut b, self.map.offset(at))
            .unwrap();
        u64::from_le_bytes(b)
    }

    fn inspect(&self) -> (i32, Value, Duration) {
        let (code, out, err, took) = inspect(&["--core", self.path.to_str().unwrap(), "--json"]);
        let v: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("exit {code}: {e}\n{out}\n{err}"));
        (code, v, took)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn kinds(doc: &Value) -> Vec<String> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

/// Each kind of damage is named: a cycle, a list that does not close, a pointer into
/// nowhere, a node on the wrong allocator, a model in two buckets, a ledger that disagrees
/// with the lists.
#[test]
fn damaged_structures_are_named() {
    use core::mem::offset_of;
    use nrt_core::abi::{dma_mem_log_t, dmem_t, ht_node_t, mla_t, model_t, tdrv_ctx_t};
    let Some(f) = fixture() else { return };
    let doc = &f.core_json.1;
    let s = Scratch::new("damaged.core", &f.core);
    let allocs = doc["allocations"].as_array().unwrap();
    let global = allocs
        .iter()
        .find(|d| d["owner"] == "GLOBAL nd0:nc0")
        .unwrap();
    let of_model = allocs
        .iter()
        .find(|d| d["owner"].as_str().unwrap().starts_with("model resnet50"))
        .unwrap();
    let next = offset_of!(dmem_t, next) as u64;
    let cases: Vec<(&str, u64, Vec<u8>)> = vec![
        // Its next points back at itself.
        (
            "cycle",
            addr(&global["address"]) + next,
            addr(&global["address"]).to_le_bytes().to_vec(),
        ),
        (
            "list-not-closed",
            addr(&global["address"]) + next,
            0u64.to_le_bytes().to_vec(),
        ),
        (
            "unreadable",
            addr(&global["address"]) + next,
            0x10u64.to_le_bytes().to_vec(),
        ),
        (
            "wrong-allocator",
            addr(&of_model["address"]) + offset_of!(dmem_t, allocator) as u64,
            addr(&global["address"]).to_le_bytes().to_vec(),
        ),
    ];
    for (kind, at, bytes) in cases {
        let old = s.poke(at, &bytes);
        let (code, v, _) = s.inspect();
        assert_eq!(code, 1, "{kind}: {v:#}");
        assert!(
            kinds(&v).iter().any(|k| k == kind),
            "{kind}: {:#}",
            v["findings"]
        );
        s.poke(at, &old);
    }

    // A model linked into a second, empty bucket of its core's model_db.
    let resnet = model(doc, "resnet50");
    let node = addr(&resnet["address"]) + offset_of!(model_t, ht_node) as u64;
    let db = doc["ledger"]["cores"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["device"] == resnet["device"] && c["core"] == resnet["core"])
        .unwrap();
    let table = addr(&db["model_db"]);
    let buckets = table + 32;
    let empty = (0..64u64)
        .map(|i| buckets + i * 48 + offset_of!(ht_node_t, next) as u64)
        .find(|&p| s.peek_u64(p) == 0)
        .unwrap();
    let old = s.poke(empty, &node.to_le_bytes());
    let (code, v, _) = s.inspect();
    assert_eq!(code, 1);
    assert!(
        kinds(&v).iter().any(|k| k == "model-in-two-buckets"),
        "{:#}",
        v["findings"]
    );
    s.poke(empty, &old);

    // The ledger books 4 KiB more TENSOR bytes on nd0:nc0 than its lists hold.
    let ctx = addr(&doc["context"]);
    let cell = ctx
        + offset_of!(tdrv_ctx_t, mla) as u64
        + offset_of!(mla_t, dmem_logger) as u64
        + offset_of!(dma_mem_log_t, memory_usage_nc) as u64
        + nrt_core::abi::dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR as u64 * 8;
    let was = s.peek_u64(cell);
    let old = s.poke(cell, &(was + 4096).to_le_bytes());
    let (code, v, _) = s.inspect();
    assert_eq!(code, 1);
    let f = v["findings"].as_array().unwrap();
    assert!(
        f.iter()
            .any(|f| f["kind"] == "ledger-mismatch" && f["at"] == "nd0:nc0"),
        "{f:#?}"
    );
    s.poke(cell, &old);
    // Restored: consistent again.
    assert_eq!(s.inspect().0, 0);
}

/// Pages under the structures the walk reads, overwritten with random bytes, all-ones, zeros
/// or pointers into themselves, give findings (exit 0 or 1), never a crash, a hang or exit 2,
/// and each read takes seconds at most.
#[test]
fn scribbled_pages_give_findings_within_seconds() {
    let Some(f) = fixture() else { return };
    let doc = &f.core_json.1;
    let s = Scratch::new("scribbled.core", &f.core);
    let mut targets: Vec<u64> = doc["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| addr(&d["address"]))
        .chain(
            doc["models"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| addr(&m["address"])),
        )
        .chain(
            doc["ledger"]["cores"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|c| {
                    c["global_allocator"]
                        .as_str()
                        .map(|_| addr(&c["global_allocator"]))
                }),
        )
        .map(|a| a & !0xfff)
        .collect();
    targets.sort_unstable();
    targets.dedup();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut with_findings, runs) = (0, 16);
    for run in 0..runs {
        let pages: Vec<u64> = (0..1 + run % 4)
            .map(|_| targets[(next() % targets.len() as u64) as usize])
            .collect();
        let mut saved = Vec::new();
        for &p in &pages {
            let fill: Vec<u8> = match run % 4 {
                0 => (0..4096).map(|_| next() as u8).collect(),
                1 => vec![0xff; 4096],
                2 => vec![0; 4096],
                // Aligned pointers into the page itself: lists that run in circles.
                _ => (0..512)
                    .flat_map(|_| (p + (next() % 512) * 8).to_le_bytes())
                    .collect(),
            };
            saved.push((p, s.poke(p, &fill)));
        }
        let (code, v, took) = s.inspect();
        assert!(code == 0 || code == 1, "run {run}: exit {code}: {v:#}");
        assert_eq!(code == 1, !v["findings"].as_array().unwrap().is_empty());
        assert!(took < Duration::from_secs(10), "run {run} took {took:?}");
        if code == 1 {
            with_findings += 1;
        }
        for (p, old) in saved.into_iter().rev() {
            s.poke(p, &old);
        }
    }
    eprintln!("scribbled cores: {with_findings} of {runs} reads found damage");
    assert!(
        with_findings >= runs / 2,
        "only {with_findings} of {runs} runs found damage"
    );
}

/// A process that allocates and frees a tensor without pause while it is read: every read
/// ends, well-formed, in exit 0 or 1; what does not change (the models) is always right; and a
/// structure caught halfway through an update is never reported as damage: findings come
/// only with `changing`, which says the process would not hold still.
#[test]
fn a_process_changing_under_the_reader_is_read_or_reported() {
    let h = Holder::start(&[("HOLDER_CHURN", "1")]);
    let pid = h.pid.to_string();
    let mut kinds_seen = std::collections::BTreeMap::<String, u32>::new();
    for _ in 0..10 {
        let (code, out, err, took) = inspect(&["--pid", &pid, "--json"]);
        assert!(code == 0 || code == 1, "exit {code}: {err}");
        assert!(took < Duration::from_secs(30), "{took:?}");
        let doc: Value = serde_json::from_str(&out).unwrap();
        for (i, (_, name)) in MODELS.iter().enumerate() {
            let m = model(&doc, name);
            assert_eq!(m["bytes"], h.api.models[i].2, "{name}");
        }
        let k = kinds(&doc);
        assert!(k.is_empty() || k.contains(&"changing".to_string()), "{k:?}");
        for k in k {
            *kinds_seen.entry(k).or_default() += 1;
        }
    }
    eprintln!("findings over 10 reads of a changing process: {kinds_seen:?}");
}

/// Damage in a live process that holds still is reported as such, after every walk agreed.
#[test]
fn damage_in_a_live_process_is_reported_once_every_walk_agrees() {
    use core::mem::offset_of;
    use nrt_core::abi::{dma_mem_log_t, mla_t, tdrv_ctx_t};
    let h = Holder::start(&[]);
    let pid = h.pid.to_string();
    let (code, doc) = inspect_json(&["--pid", &pid]);
    assert_eq!(code, 0, "{doc:#}");
    // Its ledger books 4 KiB of TENSOR on nd0:nc0 that no list holds.
    let cell = addr(&doc["context"])
        + offset_of!(tdrv_ctx_t, mla) as u64
        + offset_of!(mla_t, dmem_logger) as u64
        + offset_of!(dma_mem_log_t, memory_usage_nc) as u64
        + nrt_core::abi::dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR as u64 * 8;
    let tensors = doc["ledger"]["cores"][0]["by_usage"]["TENSOR"]
        .as_u64()
        .unwrap();
    let v = (tensors + 4096).to_le_bytes();
    let local = libc::iovec {
        iov_base: v.as_ptr() as *mut libc::c_void,
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: cell as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: the iovecs describe `v` (8 readable bytes that outlive the call) and 8 bytes of
    // the holder this test started; the call writes only the holder's memory.
    let n = unsafe { libc::process_vm_writev(h.pid, &local, 1, &remote, 1, 0) };
    assert_eq!(n, 8, "{}", std::io::Error::last_os_error());
    let (code, doc) = inspect_json(&["--pid", &pid]);
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(kinds(&doc), ["ledger-mismatch"]);
    assert_eq!(doc["source"]["walks"], 5);
}

/// After a crash: the kernel's core file reads as gcore's does (where the kernel writes core
/// files to the working directory).
#[test]
fn a_kernel_core_dump_after_a_crash_is_read() {
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    let pattern = pattern.trim();
    if pattern.starts_with('|') || pattern.contains('/') || pattern.contains("%e") {
        eprintln!(
            "SKIPPED: core_pattern {pattern:?} does not write core files to the working directory"
        );
        return;
    }
    let dir = out_dir().join("crash");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut h = Holder::start_in(&[], Some(&dir));
    // SAFETY: `kill` has no memory effects; the holder is this test's child, not yet reaped.
    assert_eq!(unsafe { libc::kill(h.pid, libc::SIGABRT) }, 0);
    let status = h.child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    if status.core_dumped() {
        let core = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("core"))
            .expect("the kernel's core file");
        let (code, doc) = inspect_json(&["--core", core.to_str().unwrap()]);
        assert_eq!(code, 0, "{doc:#}");
        agrees_with_the_c_api(&doc, &h.api);
        assert!(std::fs::metadata(&core).unwrap().len() < 256 << 20);
    } else {
        eprintln!("SKIPPED: the kernel wrote no core file ({status})");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_process_without_libnrt_is_refused() {
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let (code, _, err, _) = inspect(&["--pid", &pid]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("does not use libnrt"), "{err}");
}

#[test]
fn no_such_process_is_refused() {
    let (code, _, err, _) = inspect(&["--pid", "2147483646"]);
    assert_eq!(code, 2);
    assert!(err.contains("no process 2147483646"), "{err}");
    let (code, _, err, _) = inspect(&[]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err, _) = inspect(&["--pid", "1", "--core", "x"]);
    assert_eq!(code, 2, "{err}");
}

/// A library without its symbol table: the message names --lib and --ctx-addr, and each of
/// them works.
#[test]
fn a_stripped_library_needs_lib_or_ctx_addr() {
    let (lib, stripped, _) = build();
    let h = Holder::start(&[("LD_LIBRARY_PATH", stripped.to_str().unwrap())]);
    let pid = h.pid.to_string();
    let (code, _, err, _) = inspect(&["--pid", &pid]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("has no tdrv_ctx_0 symbol")
            && err.contains("--lib")
            && err.contains("--ctx-addr"),
        "{err}"
    );
    let with_lib = lib.join("libnrt.so.1");
    let (code, doc) = inspect_json(&["--pid", &pid, "--lib", with_lib.to_str().unwrap()]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["ledger"]["total_bytes"], h.api.total);
    let ctx = doc["context"].as_str().unwrap().to_string();
    let (code, by_addr) = inspect_json(&["--pid", &pid, "--ctx-addr", &ctx]);
    assert_eq!(code, 0, "{by_addr:#}");
    // The stripped library still says whose it is (its dynamic symbols).
    assert_eq!(by_addr["source"]["flavor"], "nrt-dmem");
    for key in ["models", "ledger", "dmems"] {
        assert_eq!(doc[key], by_addr[key], "{key}");
    }
    let (code, _, err, _) = inspect(&["--pid", &pid, "--ctx-addr", "nowhere"]);
    assert_eq!(code, 2, "{err}");
    // An address that is no context: findings, not a crash.
    let (code, garbage) = inspect_json(&["--pid", &pid, "--ctx-addr", "0x10"]);
    assert_eq!(code, 1, "{garbage:#}");
}

/// Without ptrace permission over the process, the message says what is needed.
#[test]
fn permission_denied_says_what_is_needed() {
    // SAFETY: `geteuid` has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let (code, err) = if root {
        // As root: read a root process as nobody.
        let h = Holder::start(&[]);
        let pid = h.pid.to_string();
        let (code, _, err, _) = inspect_as(Some(65534), &["--pid", &pid]);
        (code, err)
    } else {
        let (code, _, err, _) = inspect(&["--pid", "1"]);
        (code, err)
    };
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("permission denied"), "{err}");
    assert!(
        err.contains("CAP_SYS_PTRACE") && err.contains("same user"),
        "{err}"
    );
}

#[test]
fn files_that_are_no_core_of_a_libnrt_process_are_refused() {
    let (_, _, exe) = build();
    let dir = out_dir();
    let text = dir.join("not-elf.txt");
    std::fs::write(&text, "hello\n").unwrap();
    let (code, _, err, _) = inspect(&["--core", text.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("not an ELF file"), "{err}");
    let (code, _, err, _) = inspect(&["--core", exe.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("not a core file"), "{err}");
    let (code, _, err, _) = inspect(&["--core", dir.join("missing.core").to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("No such file"), "{err}");

    let Some(f) = fixture() else { return };
    let mut head = vec![0u8; 4096];
    std::fs::File::open(&f.core)
        .unwrap()
        .read_exact_at(&mut head, 0)
        .unwrap();
    // Another architecture (e_machine = EM_PPC64), a 32-bit class, a big-endian one.
    for (what, patch, expect) in [
        ("ppc64", (18usize, vec![21u8, 0]), "another architecture"),
        ("class32", (4, vec![1]), "32-bit"),
        ("bigendian", (5, vec![2]), "big-endian"),
    ] {
        let mut b = head.clone();
        b[patch.0..patch.0 + patch.1.len()].copy_from_slice(&patch.1);
        let p = dir.join(format!("{what}.core"));
        std::fs::write(&p, &b).unwrap();
        let (code, _, err, _) = inspect(&["--core", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{what}: {err}");
        assert!(err.contains(expect), "{what}: {err}");
    }
    // Truncated: the first MiB of the core.
    let mut part = vec![0u8; 1 << 20];
    std::fs::File::open(&f.core)
        .unwrap()
        .read_exact_at(&mut part, 0)
        .unwrap();
    let p = dir.join("truncated.core");
    std::fs::write(&p, &part).unwrap();
    let (code, _, err, took) = inspect(&["--core", p.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("truncated core file"), "{err}");
    assert!(took < Duration::from_secs(10));
    // Only the ELF header.
    std::fs::write(&p, &head[..40]).unwrap();
    let (code, _, err, _) = inspect(&["--core", p.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("truncated"), "{err}");
}
