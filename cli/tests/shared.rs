//! The shared simulated device across real processes (docs/SHARED_DEVICE.md). Every test
//! starts `nrt-dmem-worker` processes on a device in a private `NRT_DMEM_SHM_DIR`, drives
//! them over stdin and reads their one-line answers.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use nrt_host::shared::layout;

const GIB: u64 = 1 << 30;
const WORKER: &str = env!("CARGO_BIN_EXE_nrt-dmem-worker");
const CLI: &str = env!("CARGO_BIN_EXE_nrt-dmem");

/// A fresh directory for one test's shared files, removed when the test ends.
struct Dir(PathBuf);

impl std::ops::Deref for Dir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Dir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn shm_dir(test: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("nrt-shared-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
    pid: u32,
}

fn spawn(dir: &Path, device: &str, cores: &str, extra: &[(&str, &str)]) -> Command {
    let mut c = Command::new(WORKER);
    c.env("NRT_DMEM_SHM_DIR", dir)
        .env("NRT_DMEM_DEVICE", device)
        .env("NEURON_RT_VIRTUAL_CORE_SIZE", "1")
        .env("NEURON_RT_VISIBLE_CORES", cores)
        .env_remove("NRT_DMEM_SIM_CHANNEL_SIZE")
        .env_remove(nrt_host::shared::HOLD_VAR)
        .env("RUST_LOG", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in extra {
        c.env(k, v);
    }
    c
}

impl Worker {
    /// Starts a worker; `Err(message)` when its runtime refused to start.
    fn try_start(mut cmd: Command) -> Result<Worker, String> {
        let mut child = cmd.spawn().expect("worker starts");
        let stdin = child.stdin.take();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        if let Some(pid) = line.strip_prefix("ready ") {
            let pid = pid.trim().parse().unwrap();
            Ok(Worker {
                child,
                stdin,
                out,
                pid,
            })
        } else {
            let _ = child.wait();
            Err(line.trim().to_string())
        }
    }

    fn start(cmd: Command) -> Worker {
        Self::try_start(cmd).unwrap_or_else(|m| panic!("worker refused: {m}"))
    }

    /// Sends one command and returns its answer line.
    fn cmd(&mut self, c: &str) -> String {
        let w = self.stdin.as_mut().unwrap();
        writeln!(w, "{c}").unwrap();
        w.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    fn ok(&mut self, c: &str) -> String {
        let r = self.cmd(c);
        assert!(r.starts_with("ok"), "`{c}` answered `{r}`");
        r
    }

    /// `stats` parsed: (own bytes, device bytes, [(pid, bytes)]).
    fn stats(&mut self) -> (u64, u64, Vec<(u32, u64)>) {
        let r = self.ok("stats");
        let field = |k: &str| {
            r.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .unwrap_or("")
                .to_string()
        };
        let procs = field("procs=")
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|p| {
                let (a, b) = p.split_once(':').unwrap();
                (a.parse().unwrap(), b.parse().unwrap())
            })
            .collect();
        (
            field("own=").parse().unwrap(),
            field("device=").parse().unwrap(),
            procs,
        )
    }

    fn audit(&mut self) -> (u64, u64) {
        let r = self.ok("audit");
        let n = |k: &str| -> u64 {
            r.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .unwrap()
                .parse()
                .unwrap()
        };
        (n("allocations="), n("bytes="))
    }

    fn exit(mut self) {
        let _ = self.cmd("exit");
        drop(self.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }

    fn kill9(mut self) {
        // `Child::kill` sends SIGKILL: `kill -9`.
        self.child.kill().unwrap();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const MODEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/models/resnet50.json"
);

#[test]
fn colocation_two_processes_share_an_hbm_channel_and_see_each_other() {
    let dir = shm_dir("coloc");
    let dev = "sim:trn2@coloc";
    // LNC 1: logical cores 0-2 are physical 0-2, core 3 is physical 3; HBM 1 serves
    // physical cores 2 and 3, so A's logical core 2 and B's logical core 0 share it.
    let mut a = Worker::start(spawn(&dir, dev, "0-2", &[]));
    let mut b = Worker::start(spawn(&dir, dev, "3", &[]));
    a.ok(&format!("load {MODEL} 0 ra"));
    b.ok(&format!("load {MODEL} 0 rb"));
    let (a_own0, _, _) = a.stats();
    a.ok(&format!("alloc big {} 2", 20 * GIB));
    let (a_own, a_dev, _) = a.stats();
    let (b_own, b_dev, procs) = b.stats();
    assert_eq!(a_own, a_own0 + 20 * GIB);
    assert!(b_own < GIB, "B holds only its model: {b_own}");
    // Each sees the other's bytes in the device-wide counters.
    assert_eq!(a_dev, b_dev);
    assert_eq!(b_dev, a_own + b_own);
    assert!(procs.contains(&(a.pid, a_own)), "{procs:?}");
    assert!(procs.contains(&(b.pid, b_own)), "{procs:?}");
    // The shared channel is full for B: NRT_RESOURCE with the OOM table.
    let r = b.cmd(&format!("alloc t {} 0", 10 * GIB));
    assert!(r.starts_with("err NRT_RESOURCE"), "{r}");
    let table = b.ok("oom");
    assert!(table.len() > 3, "an OOM table headline: {table}");
    // Once A unloads (frees), B fits.
    a.ok("free big");
    a.ok("unload ra");
    b.ok(&format!("alloc t {} 0", 10 * GIB));
    b.ok("exec rb");
    let (_, dev_now, _) = a.stats();
    assert_eq!(dev_now, b.stats().0 + a.stats().0);
    b.audit();
    a.exit();
    b.exit();
}

#[test]
fn kill9_returns_bytes_and_cores_within_a_second() {
    let dir = shm_dir("reclaim");
    let dev = "sim:trn2@reclaim";
    let mut a = Worker::start(spawn(&dir, dev, "0-1", &[]));
    let mut b = Worker::start(spawn(&dir, dev, "4", &[]));
    a.ok(&format!("alloc big {} 0", 10 * GIB));
    let (_, before, _) = b.stats();
    assert!(before >= 10 * GIB);
    let a_pid = a.pid;
    let t0 = Instant::now();
    a.kill9();
    loop {
        let (_, dev_bytes, procs) = b.stats();
        if dev_bytes == before - 10 * GIB && !procs.iter().any(|p| p.0 == a_pid) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "not reclaimed after {:?}: {dev_bytes} B, {procs:?}",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The cores are free again: a new process claims them.
    let mut c = Worker::start(spawn(&dir, dev, "0-1", &[]));
    c.ok(&format!("alloc big {} 0", 20 * GIB));
    assert_eq!(b.audit().1, b.stats().1);
    c.exit();
    b.exit();
}

#[test]
fn a_core_is_exclusive_and_the_refusal_names_the_holder() {
    let dir = shm_dir("cores");
    let dev = "sim:trn2@cores";
    let a = Worker::start(spawn(&dir, dev, "1-2", &[]));
    let e = Worker::try_start(spawn(&dir, dev, "2-3", &[]))
        .err()
        .unwrap();
    assert!(e.contains(&format!("held by process {}", a.pid)), "{e}");
    assert!(e.contains("NeuronCore 2"), "{e}");
    // A disjoint slice is fine.
    Worker::start(spawn(&dir, dev, "3", &[])).exit();
    a.exit();
}

#[test]
fn every_process_of_a_device_has_its_placement() {
    // The file records the placement its creator named (docs/SHARED_DEVICE.md); a process
    // naming another one is refused while the device is in use.
    let dir = shm_dir("placement");
    let a = Worker::start(spawn(&dir, "sim:trn2+tlsf@placement", "0", &[]));
    let e = Worker::try_start(spawn(&dir, "sim:trn2@placement", "1", &[]))
        .err()
        .unwrap();
    assert!(
        e.contains("tlsf placement) by live processes")
            && e.contains("asks for trn2x1 (channel 25769803776 B, genalloc placement)"),
        "{e}"
    );
    Worker::start(spawn(&dir, "sim:trn2+tlsf@placement", "1", &[])).exit();
    a.exit();
    // Once every process is gone, the next one re-creates the device with its own.
    Worker::start(spawn(&dir, "sim:trn2@placement", "1", &[])).exit();
}

#[test]
fn the_17th_process_is_refused() {
    let dir = shm_dir("seventeen");
    let dev = "sim:trn2x2@seventeen";
    let ws: Vec<Worker> = (0..16)
        .map(|i| Worker::start(spawn(&dir, dev, &i.to_string(), &[])))
        .collect();
    // Any core: the slot count refuses first.
    let e = Worker::try_start(spawn(&dir, dev, "0", &[])).err().unwrap();
    assert!(e.contains("already has 16 processes"), "{e}");
    // A plan is refused as the 17th process is.
    let o = plan_on(&dir, dev, "0", &[MODEL]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("already has 16 processes"), "{err}");
    // One leaves: a newcomer fits.
    let mut ws = ws;
    ws.pop().unwrap().exit();
    Worker::start(spawn(&dir, dev, "15", &[])).exit();
    for w in ws {
        w.exit();
    }
}

#[test]
fn bad_names_are_refused_with_a_message() {
    let dir = shm_dir("names");
    for (name, why) in [
        ("../etc", "path separator"),
        ("a/b", "path separator"),
        (&"x".repeat(33)[..], "longer than 32"),
        (".hidden", "starts with `.`"),
        ("", "empty"),
        ("sp ace", "only letters"),
    ] {
        let e = Worker::try_start(spawn(&dir, &format!("sim:trn2@{name}"), "0", &[]))
            .err()
            .unwrap();
        assert!(e.contains(why), "{name:?}: {e}");
    }
    assert_eq!(
        std::fs::read_dir(&*dir).unwrap().count(),
        0,
        "nothing created"
    );
}

#[test]
fn permission_denied_is_reported() {
    let dir = shm_dir("perm");
    let dev = "sim:trn2@perm";
    Worker::start(spawn(&dir, dev, "0", &[])).exit();
    let file = dir.join("nrt-dmem-perm.shm");
    assert!(file.exists());
    let mut cmd = spawn(&dir, dev, "0", &[]);
    // As root, run the second process as `nobody` (the file is 0600 root's); otherwise take
    // the owner's permissions away.
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::process::CommandExt;
        cmd.uid(65534).gid(65534);
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000)).unwrap();
    }
    let e = Worker::try_start(cmd).err().unwrap();
    assert!(e.contains("permission denied"), "{e}");
}

/// Writes `bytes` at `offset` of the file.
fn poke(file: &Path, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

#[test]
fn a_file_of_another_layout_version_is_refused_while_used_and_re_created_when_not() {
    let dir = shm_dir("version");
    let dev = "sim:trn2@version";
    let file = dir.join("nrt-dmem-version.shm");
    let mut a = Worker::start(spawn(&dir, dev, "0", &[]));
    // `Header::version` follows the 8-byte magic.
    poke(&file, 8, &(layout::LAYOUT_VERSION + 1).to_le_bytes());
    let e = Worker::try_start(spawn(&dir, dev, "1", &[])).err().unwrap();
    let theirs = format!("layout version {}", layout::LAYOUT_VERSION + 1);
    let ours = format!("uses version {}", layout::LAYOUT_VERSION);
    assert!(e.contains(&theirs) && e.contains(&ours), "{e}");
    assert!(e.contains("live processes still use it"), "{e}");
    // Not touched: still refused the second time, and A still works.
    let e2 = Worker::try_start(spawn(&dir, dev, "1", &[])).err().unwrap();
    assert_eq!(e, e2);
    a.ok("alloc t 4096 0");
    a.exit();
    // Nobody uses it now: the next process re-creates it (with a warning).
    let (w, warning) = start_logged(spawn(&dir, dev, "0", &[]));
    assert!(
        warning.contains(&theirs) && warning.contains("re-creating it"),
        "{warning}"
    );
    w.exit();
}

/// Starts a worker whose warnings are captured; returns it and its stderr up to `ready`.
fn start_logged(mut cmd: Command) -> (Worker, String) {
    let log = std::env::temp_dir().join(format!(
        "nrt-worker-log-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    cmd.env("RUST_LOG", "warn")
        .stderr(std::fs::File::create(&log).unwrap());
    let w = Worker::start(cmd);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    (w, text)
}

/// A worker on core 0 of `dev` that is inside an allocation with the device lock held (its
/// allocation sleeps there, `HOLD_VAR`), for a test to kill it at that moment.
fn holding_the_lock(dir: &Path, dev: &str) -> Worker {
    let mut a = Worker::start(spawn(
        dir,
        dev,
        "0",
        &[(nrt_host::shared::HOLD_VAR, "10000")],
    ));
    writeln!(a.stdin.as_mut().unwrap(), "alloc t 4096 0").unwrap();
    a.stdin.as_mut().unwrap().flush().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    a
}

#[test]
fn a_process_killed_holding_the_lock_does_not_block_the_others() {
    let dir = shm_dir("holder");
    let dev = "sim:trn2@holder";
    let mut b = Worker::start(spawn(&dir, dev, "4", &[]));
    b.ok(&format!("alloc mine {} 0", GIB));
    // A's allocation sleeps with the device lock held: kill it there.
    let a = holding_the_lock(&dir, dev);
    let t0 = Instant::now();
    let a_pid = a.pid;
    a.kill9();
    // B carries on: the robust lock hands it EOWNERDEAD, it checks and recovers.
    b.ok(&format!("alloc more {} 0", GIB));
    assert!(t0.elapsed() < Duration::from_secs(5));
    // A's slot is reclaimed by B's reaper (within a second), and then everything left in
    // the pools is B's, without overlap.
    while b.stats().2.iter().any(|p| p.0 == a_pid) {
        assert!(t0.elapsed() < Duration::from_secs(2), "A not reclaimed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (n, bytes) = b.audit();
    let (own, _, _) = b.stats();
    assert_eq!(bytes, own);
    assert!(own >= 2 * GIB && n >= 2);
    // B's own allocations were not touched.
    b.ok("free mine");
    b.ok("free more");
    b.exit();
}

#[test]
fn pools_damaged_by_a_death_mid_update_are_rebuilt_and_handles_kept() {
    let dir = shm_dir("rebuild");
    let dev = "sim:trn2@rebuild";
    let file = dir.join("nrt-dmem-rebuild.shm");
    let mut b = Worker::start(spawn(&dir, dev, "4", &[]));
    b.ok(&format!("alloc mine {} 0", GIB));
    b.ok(&format!("load {MODEL} 0 m"));
    let (own, _, _) = b.stats();
    let a = holding_the_lock(&dir, dev);
    // As if A died halfway through updating the pools: damage them, then kill it.
    poke(&file, layout::sim_offset() as u64, &[0xa5; 8192]);
    a.kill9();
    // B's next call recovers: the pools are rebuilt from the ownership table.
    b.ok(&format!("alloc more {} 0", GIB));
    // B's handles from before the rebuild still work: execute, free, unload.
    b.ok("exec m");
    b.ok("free mine");
    b.ok("unload m");
    let (n, bytes) = b.audit();
    let (own_now, _, _) = b.stats();
    assert_eq!(bytes, own_now, "{n} allocations");
    assert!(own > GIB, "the model and `mine` were held: {own}");
    assert_eq!(own_now, GIB, "only `more` is left");
    b.ok("free more");
    b.exit();
}

/// A tiny deterministic generator (xorshift), seeded per run and printed on failure.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn soak_sixteen_processes_come_and_go_and_leave_nothing() {
    // 60 s is the issue's figure; CI runs a shorter soak (NRT_DMEM_SOAK_SECS overrides).
    let secs: u64 = std::env::var("NRT_DMEM_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("soak seed {seed:#x}, {secs} s");
    let mut rng = Rng(seed);
    let dir = shm_dir("soak");
    let dev = "sim:trn2x2@soak";
    let mut ws: Vec<Option<(Worker, u64)>> = (0..16).map(|_| None).collect();
    let end = Instant::now() + Duration::from_secs(secs);
    let mut ops = 0u64;
    while Instant::now() < end {
        let i = rng.below(16) as usize;
        match ws[i].take() {
            None => {
                let w = Worker::start(spawn(&dir, dev, &i.to_string(), &[]));
                ws[i] = Some((w, 0));
            }
            Some((mut w, n)) => match rng.below(10) {
                0 => w.exit(),
                1 => w.kill9(),
                2 => {
                    let r = w.cmd(&format!("load {MODEL} 0 m{n}"));
                    assert!(r.starts_with("ok") || r.contains("NRT_RESOURCE"), "{r}");
                    if r.starts_with("ok") {
                        w.ok(&format!("exec m{n}"));
                    }
                    ws[i] = Some((w, n + 1));
                }
                3..=6 => {
                    let size = 1 + rng.below(3 * GIB);
                    let r = w.cmd(&format!("alloc t{n} {size} 0"));
                    assert!(r.starts_with("ok") || r.contains("NRT_RESOURCE"), "{r}");
                    ws[i] = Some((w, n + 1));
                }
                7 | 8 => {
                    let k = rng.below(n.max(1));
                    let _ = w.cmd(&format!("free t{k}"));
                    ws[i] = Some((w, n));
                }
                _ => {
                    w.audit();
                    ws[i] = Some((w, n));
                }
            },
        }
        ops += 1;
    }
    eprintln!("soak: {ops} operations");
    let mut live: Vec<Worker> = ws.into_iter().flatten().map(|(w, _)| w).collect();
    // Half leave politely, half are killed.
    let mut last = live.pop();
    for (k, w) in live.into_iter().enumerate() {
        if k % 2 == 0 {
            w.exit()
        } else {
            w.kill9()
        }
    }
    // The checker: a fresh process walks the pools; every dead process is reclaimed.
    let mut checker = last
        .take()
        .unwrap_or_else(|| Worker::start(spawn(&dir, dev, "15", &[])));
    checker.ok("stats");
    let t0 = Instant::now();
    loop {
        let (own, dev_bytes, procs) = checker.stats();
        let other: u64 = procs
            .iter()
            .filter(|p| p.0 != checker.pid)
            .map(|p| p.1)
            .sum();
        if procs.len() == 1 && other == 0 {
            // The pools hold the checker's bytes and nothing else, without overlap.
            let (_, audited) = checker.audit();
            assert_eq!(audited, own);
            assert!(dev_bytes <= own);
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(2), "{procs:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    checker.exit();
    // Nobody is left: the device is at 0 bytes.
    let snap = nrt_host::shared::reader::SharedReader::open(&dir.join("nrt-dmem-soak.shm"))
        .unwrap()
        .snapshot();
    assert_eq!(snap.total_bytes(), 0);
    assert!(snap.procs.is_empty());
}

#[test]
fn the_monitor_reports_processes_in_json_and_as_a_table() {
    let dir = shm_dir("monitor");
    // Neither source: a clear message.
    let empty = shm_dir("monitor-empty");
    let o = Command::new(CLI)
        .args(["monitor", "--count", "1"])
        .env("NRT_DMEM_SHM_DIR", &empty)
        .env("NRT_DMEM_SYSFS_ROOT", empty.join("no-sysfs"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no Neuron device"), "{err}");

    let dev = "sim:trn2@mon";
    let mut a = Worker::start(spawn(&dir, dev, "0-1", &[]));
    let mut b = Worker::start(spawn(&dir, dev, "2", &[]));
    a.ok(&format!("alloc t {} 0", 3 * GIB));
    b.ok(&format!("load {MODEL} 0 r"));
    let run = |args: &[&str]| {
        let o = Command::new(CLI)
            .args(args)
            .env("NRT_DMEM_SHM_DIR", &dir)
            .env("NRT_DMEM_SYSFS_ROOT", dir.join("no-sysfs"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let json = run(&["monitor", "--json", "--count", "2", "--interval", "0.05"]);
    let reports: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reports.len(), 2);
    let r = &reports[1];
    let hw = &r["neuron_runtime_data"];
    let procs = hw.as_array().unwrap();
    assert_eq!(procs.len(), 2, "{r}");
    let pa = procs
        .iter()
        .find(|p| p["pid"] == a.pid)
        .expect("A is reported");
    assert_eq!(pa["nrt_dmem"]["alive"], true, "{pa}");
    let used = &pa["report"]["memory_used"]["neuron_runtime_used_bytes"];
    assert_eq!(used["neuron_device"], a.stats().0);
    let cores = &used["usage_breakdown"]["neuroncore_memory_usage"];
    assert!(
        cores["0"]["tensors"].as_u64().unwrap() >= 3 * GIB,
        "{cores}"
    );
    let dev0 = &r["nrt_dmem"]["devices"][0];
    assert_eq!(dev0["memory_used_bytes"], a.stats().1);
    assert_eq!(dev0["memory_total_bytes"], 96 * GIB);
    let table = run(&["monitor", "--count", "1"]);
    assert!(table.contains("mon"), "{table}");
    assert!(table.contains(&a.pid.to_string()), "{table}");
    assert!(table.contains(&b.pid.to_string()), "{table}");
    assert!(table.contains("NC0"), "{table}");
    a.exit();
    b.exit();
}

#[test]
fn plan_runs_on_a_snapshot_of_what_is_resident_and_changes_nothing() {
    let dir = shm_dir("plan");
    let dev = "sim:trn2@plan";
    // HBM 0 (physical cores 0 and 1 at LNC 1) nearly full: the main pool and the small-object
    // region both.
    let mut a = Worker::start(spawn(&dir, dev, "0", &[]));
    a.ok(&format!("alloc a {} 0", 22 * GIB + 900 * (1 << 20)));
    a.ok(&format!("alloc b {} 0", 1000 * (1 << 20)));
    a.ok(&format!("alloc c {} 0", 100 * (1 << 20)));
    let before = a.stats();
    let plan = |device: &str| {
        Command::new(CLI)
            .args([
                "plan",
                "--device",
                device,
                "--lnc-size",
                "1",
                "--visible-cores",
                "1",
            ])
            .arg(MODEL)
            .arg("--check")
            .env("NRT_DMEM_SHM_DIR", &dir)
            .env("RUST_LOG", "off")
            .output()
            .unwrap()
    };
    let o = plan(dev);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "does not fit beside A: {text}");
    assert!(
        text.contains("planned on a snapshot of shared device `plan`"),
        "{text}"
    );
    assert!(text.contains("1 process(es)"), "{text}");
    // The same plan on a private device fits.
    assert_eq!(plan("sim:trn2").status.code(), Some(0));
    // The plan took no slot, no core and no byte of the shared device.
    assert_eq!(a.stats(), before);
    Worker::start(spawn(&dir, dev, "1", &[])).exit();
    // Bad input: a shared device nobody opened.
    let o = plan("sim:trn2@nobody");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no such shared device"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    a.exit();
}

/// `nrt-dmem plan --device DEVICE --lnc-size 1 --visible-cores CORES ARGS… --check` in `dir`.
fn plan_on(dir: &Path, device: &str, cores: &str, args: &[&str]) -> std::process::Output {
    Command::new(CLI)
        .args([
            "plan",
            "--device",
            device,
            "--lnc-size",
            "1",
            "--visible-cores",
            cores,
            "--check",
        ])
        .args(args)
        .env("NRT_DMEM_SHM_DIR", dir)
        .env_remove("NRT_DMEM_SIM_CHANNEL_SIZE")
        .env("RUST_LOG", "off")
        .output()
        .unwrap()
}

/// Fills HBM 0 (physical cores 0 and 1 at LNC 1) from logical core 0 of `w`, main pool and
/// small-object region both, so that not even resnet50 fits beside it.
fn fill_hbm0(w: &mut Worker) {
    w.ok(&format!("alloc a {} 0", 22 * GIB + 900 * (1 << 20)));
    w.ok(&format!("alloc b {} 0", 1000 * (1 << 20)));
    w.ok(&format!("alloc c {} 0", 100 * (1 << 20)));
}

/// The file's figures, read without joining.
fn figures(dir: &Path, name: &str) -> nrt_host::shared::reader::Snapshot {
    nrt_host::shared::reader::SharedReader::open(&dir.join(format!("nrt-dmem-{name}.shm")))
        .unwrap()
        .snapshot()
}

/// Bytes as the plan's snapshot note writes them.
fn mib(b: u64) -> String {
    format!("{:.3} MiB", b as f64 / (1u64 << 20) as f64)
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: `kill` has no memory preconditions; the pid is a child this test started.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0);
}

#[test]
fn plan_leaves_out_what_a_dead_process_held_as_a_joining_process_would() {
    let dir = shm_dir("plan-dead");
    let dev = "sim:trn2@plandead";
    // B stays alive, but is stopped while A dies: no reaper reclaims A meanwhile, so the
    // file still books A's bytes when the plan reads it.
    let mut b = Worker::start(spawn(&dir, dev, "4", &[]));
    b.ok(&format!("alloc mine {} 0", GIB));
    let mut a = Worker::start(spawn(&dir, dev, "0", &[]));
    fill_hbm0(&mut a);
    let o = plan_on(&dir, dev, "1", &[MODEL]);
    assert_eq!(o.status.code(), Some(1), "beside a live A: {o:?}");
    let (a_bytes, b_bytes) = (a.stats().0, b.stats().0);
    signal(b.pid, libc::SIGSTOP);
    let a_pid = a.pid;
    a.kill9();
    let before = figures(&dir, "plandead");
    assert!(
        before.procs.iter().any(|p| p.pid == a_pid && !p.alive),
        "{before:?}"
    );
    let o = plan_on(&dir, dev, "1", &[MODEL]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "A's bytes are reclaimed first: {text}"
    );
    let live = format!("1 process(es) holding {} resident", mib(b_bytes));
    let dead = format!("left out the {} of 1 dead process(es)", mib(a_bytes));
    assert!(text.contains(&live) && text.contains(&dead), "{text}");
    // The plan reclaimed on its copy only: the file still books the dead A.
    assert_eq!(figures(&dir, "plandead"), before);
    signal(b.pid, libc::SIGCONT);
    // What the plan said is what a process joining now gets.
    let mut c = Worker::start(spawn(&dir, dev, "1", &[]));
    c.ok(&format!("load {MODEL} 0 m"));
    c.exit();
    b.exit();
}

#[test]
fn plan_on_a_device_whose_every_process_died_is_what_a_join_re_creates() {
    let dir = shm_dir("plan-stale");
    let dev = "sim:trn2@planstale";
    let mut a = Worker::start(spawn(&dir, dev, "0", &[]));
    fill_hbm0(&mut a);
    assert_eq!(plan_on(&dir, dev, "1", &[MODEL]).status.code(), Some(1));
    let a_bytes = a.stats().0;
    a.kill9();
    let before = figures(&dir, "planstale");
    let o = plan_on(&dir, dev, "1", &[MODEL]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}");
    let dead = format!("left out the {} of 1 dead process(es)", mib(a_bytes));
    assert!(
        text.contains("no live process") && text.contains(&dead),
        "{text}"
    );
    assert_eq!(figures(&dir, "planstale"), before, "the file is untouched");
    // A joining process re-creates it, of any geometry: so does the plan.
    let o = plan_on(&dir, "sim:trn1@planstale", "1", &[MODEL]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("sim:trn1@planstale"));
    let mut c = Worker::start(spawn(&dir, dev, "1", &[]));
    c.ok(&format!("load {MODEL} 0 m"));
    c.exit();
}

#[test]
fn plan_refuses_what_the_join_refuses_with_its_message() {
    let dir = shm_dir("plan-join");
    let dev = "sim:trn2@planjoin";
    let a = Worker::start(spawn(&dir, dev, "0-1", &[]));
    // Cores another live process holds.
    let held = format!(
        "shared device planjoin: NeuronCore 1 of nd0 is held by process {} (cores are \
         exclusive to one process)",
        a.pid
    );
    let o = plan_on(&dir, dev, "1-2", &[MODEL]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(err.contains(&held), "{err}");
    let e = Worker::try_start(spawn(&dir, dev, "1-2", &[]))
        .err()
        .unwrap();
    assert!(e.contains(&held), "the runtime's refusal: {e}");
    // Another geometry or placement than the live processes'.
    let trn1 = nrt_core::sim::Preset::Trn1.device_info().hbm_channel_size;
    for (other, asks) in [
        (
            "sim:trn1@planjoin",
            format!("trn1x1 (channel {trn1} B, genalloc placement)"),
        ),
        (
            "sim:trn2x2@planjoin",
            format!("trn2x2 (channel {} B, genalloc placement)", 24 * GIB),
        ),
        (
            "sim:trn2+tlsf@planjoin",
            format!("trn2x1 (channel {} B, tlsf placement)", 24 * GIB),
        ),
    ] {
        let o = plan_on(&dir, other, "4", &[MODEL]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{other}: {o:?}");
        let why = format!(
            "in use as a trn2x1 (channel {} B, genalloc placement) by live processes; this \
             process asks for {asks}",
            24 * GIB
        );
        assert!(err.contains(&why), "{other}: {err}");
        let e = Worker::try_start(spawn(&dir, other, "4", &[]))
            .err()
            .unwrap();
        assert!(e.contains(&why), "the runtime's refusal: {e}");
    }
    // Disjoint cores of the same geometry plan.
    assert_eq!(plan_on(&dir, dev, "2", &[MODEL]).status.code(), Some(0));
    a.exit();
}

#[test]
fn a_what_if_on_cores_another_process_holds_says_the_join_refuses_it() {
    let dir = shm_dir("plan-whatif");
    let dev = "sim:trn2@planwhatif";
    let mut b = Worker::start(spawn(&dir, dev, "0", &[]));
    fill_hbm0(&mut b);
    let a = Worker::start(spawn(&dir, dev, "2-3", &[]));
    // Logical core 1 at LNC 1 is physical core 1 (HBM 0, full); at LNC 2 it would be
    // physical cores 2 and 3 (HBM 1, empty), which A holds.
    let o = plan_on(&dir, dev, "1", &[MODEL, "--json"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let p: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let w = p["first_failure"]["what_ifs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["change"].as_str().unwrap().starts_with("LNC size 2"))
        .cloned()
        .unwrap_or_else(|| panic!("{p}"));
    assert_eq!(w["fits"], false, "{w}");
    let held = format!("NeuronCore 2 of nd0 is held by process {}", a.pid);
    assert!(w["detail"].as_str().unwrap().contains(&held), "{w}");
    a.exit();
    b.exit();
}

#[test]
fn plan_shows_what_other_processes_hold_on_each_channel() {
    let dir = shm_dir("plan-hbm");
    let dev = "sim:trn2@planhbm";
    let mut a = Worker::start(spawn(&dir, dev, "0", &[]));
    a.ok(&format!("alloc big {} 0", 16 * GIB));
    let svg = dir.join("plan.svg");
    let o = plan_on(
        &dir,
        dev,
        "1",
        &[MODEL, "--json", "--svg", svg.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let p: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let h0 = &p["hbm"][0];
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    let blocks = h0["blocks"].as_array().unwrap();
    let theirs: Vec<&serde_json::Value> =
        blocks.iter().filter(|b| b["owner_pid"] == a.pid).collect();
    assert_eq!(theirs.len(), 1, "{h0}");
    assert_eq!(n(&theirs[0]["size"]), 16 * GIB);
    assert_eq!(theirs[0]["usage"], "other processes: tensors");
    let usage = h0["usage"].as_array().unwrap();
    assert!(
        usage
            .iter()
            .any(|u| u[0] == "other processes: tensors" && n(&u[1]) == 16 * GIB),
        "{h0}"
    );
    // used + free is the capacity, but for the page rounding of this plan's own bytes.
    let (used, free, cap) = (n(&h0["used"]), n(&h0["free"]), n(&h0["capacity"]));
    assert!(used >= 16 * GIB, "{h0}");
    let blocks_sum: u64 = blocks.iter().map(|b| n(&b["size"])).sum();
    assert_eq!(blocks_sum + free, cap, "{h0}");
    assert!(used + free <= cap && cap - (used + free) < 1 << 20, "{h0}");
    // Logical core 1 (physical 1) draws from HBM 0: its headroom is what HBM 0 has free.
    let c1 = &p["cores"][0];
    assert_eq!(c1["index"], 0);
    assert_eq!(n(&c1["headroom"]), free, "{c1}");
    assert!(n(&c1["limit"]) - n(&c1["used"]) > free, "{c1}");
    // The SVG draws A's block, hatched grey, and names it.
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(
        s.contains(&format!(
            "fill=\"url(#other)\"><title>other processes: tensors, process {}: 16 GiB",
            a.pid
        )),
        "{s}"
    );
    assert!(s.contains(">other processes</text>"), "{s}");
    a.exit();
}

#[test]
fn stats_reports_device_wide_figures_without_joining() {
    let dir = shm_dir("stats");
    let dev = "sim:trn2@stats";
    let mut a = Worker::start(spawn(&dir, dev, "4-5", &[]));
    a.ok(&format!("alloc t {} 0", 5 * GIB));
    let o = Command::new(CLI)
        .args([
            "stats",
            "--json",
            "--device",
            dev,
            "--lnc-size",
            "1",
            "--visible-cores",
            "0-3",
        ])
        .env("NRT_DMEM_SHM_DIR", &dir)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let dw = &v["nrt_dmem"]["device_wide"];
    assert_eq!(dw["name"], "stats");
    let procs = dw["neuron_runtime_data"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "stats did not join: {dw}");
    let pa = procs.iter().find(|p| p["pid"] == a.pid).unwrap();
    assert_eq!(
        pa["report"]["memory_used"]["neuron_runtime_used_bytes"]["neuron_device"],
        a.stats().0
    );
    assert_eq!(dw["this_process"], serde_json::Value::Null);
    a.exit();
}

// ---- The monitor: neuron-monitor's report, /metrics, damaged files ----

/// `nrt-dmem ARGS` in `dir` (the shared directory), no sysfs; its output.
fn cli_in(dir: &Path, args: &[&str], extra: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(CLI);
    c.args(args)
        .env("NRT_DMEM_SHM_DIR", dir)
        .env("NRT_DMEM_SYSFS_ROOT", dir.join("no-sysfs"))
        .env("RUST_LOG", "off");
    for (k, v) in extra {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// One `monitor --json --count 1` report of `dir` and the exit code.
fn report(dir: &Path) -> (serde_json::Value, Option<i32>) {
    let o = cli_in(dir, &["monitor", "--json", "--count", "1"], &[]);
    let line = String::from_utf8_lossy(&o.stdout)
        .lines()
        .next()
        .map(str::to_string);
    let v = line.map_or(serde_json::Value::Null, |l| {
        serde_json::from_str(&l).unwrap()
    });
    (v, o.status.code())
}

/// A monitor serving `/metrics` on a port of the kernel's choosing.
struct Served {
    child: Child,
    addr: std::net::SocketAddr,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path, interval: &str) -> Served {
    let mut child = Command::new(CLI)
        .args(["monitor", "--listen", "127.0.0.1:0", "--interval", interval])
        .env("NRT_DMEM_SHM_DIR", dir)
        .env("NRT_DMEM_SYSFS_ROOT", dir.join("no-sysfs"))
        .env("RUST_LOG", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .rsplit("http://")
        .next()
        .and_then(|a| a.strip_suffix("/metrics"))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    Served { child, addr }
}

/// Sends `raw` to `addr` and reads the answer until the server closes (10 s at most).
fn http(addr: std::net::SocketAddr, raw: &[u8]) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(raw);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn get(addr: std::net::SocketAddr, path: &str) -> String {
    http(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
}

/// Whether `tool` runs here; without it a test that needs it skips, unless CI installed it
/// (`NRT_REQUIRE_TOOLS`), where it fails.
fn have(tool: &str, args: &[&str]) -> bool {
    let ok = Command::new(tool)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("NRT_REQUIRE_TOOLS").is_none(),
            "{tool} is required (NRT_REQUIRE_TOOLS) but does not run"
        );
        eprintln!("skipped: {tool} is not installed");
    }
    ok
}

#[test]
fn the_json_report_is_neuron_monitors_and_its_consumers_parse_it() {
    let dir = shm_dir("consumers");
    let dev = "sim:trn2@cons";
    let mut a = Worker::start(spawn(&dir, dev, "0", &[("NEURON_PROCESS_TAG", "app-a")]));
    a.ok(&format!("load {MODEL} 0 r"));
    let mut b = Worker::start(spawn(
        &dir,
        dev,
        "3",
        &[("NEURON_RT_VIRTUAL_CORE_SIZE", "2")],
    ));
    b.ok(&format!("alloc t {GIB} 0"));
    let dmi = dir.join("dmi");
    std::fs::create_dir_all(&dmi).unwrap();
    let o = cli_in(
        &dir,
        &["monitor", "--json", "--count", "2", "--interval", "0.1"],
        &[("NRT_DMEM_DMI_ROOT", dmi.to_str().unwrap())],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let json = String::from_utf8(o.stdout).unwrap();
    let r: serde_json::Value = serde_json::from_str(json.lines().nth(1).unwrap()).unwrap();
    // Off EC2: every instance field empty, and the error says why.
    assert_eq!(r["instance_info"]["instance_id"], "");
    assert!(r["instance_info"]["error"]
        .as_str()
        .unwrap()
        .contains("not an EC2"));
    let hw = &r["neuron_hardware_info"];
    assert_eq!(hw["neuron_device_type"], "trainium2");
    assert_eq!(hw["neuron_device_memory_size"], 96 * GIB);
    // A (the first live process) runs at LNC 1: 8 logical cores per device.
    assert_eq!(hw["logical_neuroncore_config"], 1);
    assert_eq!(hw["neuroncore_per_device_count"], 8);
    let rts = r["neuron_runtime_data"].as_array().unwrap();
    let pa = rts.iter().find(|p| p["pid"] == a.pid).unwrap();
    let pb = rts.iter().find(|p| p["pid"] == b.pid).unwrap();
    assert_eq!(pa["neuron_runtime_tag"], "app-a");
    assert_eq!(
        pb["neuron_runtime_tag"],
        b.pid.to_string(),
        "no tag: the pid"
    );
    assert!(pa["address"]
        .as_str()
        .unwrap()
        .contains("nrt-dmem-cons.shm"));
    let mu = &pa["report"]["memory_used"];
    assert_eq!(mu["error"], "");
    assert!(mu["period"].as_f64().unwrap() > 0.05, "measured: {mu}");
    let model = &mu["loaded_models"][0];
    assert_eq!(model["name"], "r");
    let sg = &model["subgraphs"]["sg_00"];
    assert_eq!(sg["neuroncore_index"], 0);
    assert!(sg["memory_used_bytes"]["neuron_device"].as_u64().unwrap() > 0);
    // B runs at LNC 2 on logical core 3 (physical 6 and 7): keyed by its logical core.
    let cores = &pb["report"]["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"]
        ["neuroncore_memory_usage"];
    assert_eq!(
        cores.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["3"],
        "{cores}"
    );
    assert_eq!(cores["3"]["tensors"], GIB);
    let sys = &r["system_data"];
    assert!(sys["memory_info"]["memory_total_bytes"].as_u64().unwrap() > 0);
    assert!(!sys["vcpu_usage"]["usage_data"]
        .as_object()
        .unwrap()
        .is_empty());
    // On EC2 the DMI table names the instance.
    std::fs::write(dmi.join("sys_vendor"), "Amazon EC2\n").unwrap();
    std::fs::write(dmi.join("product_name"), "trn2.48xlarge\n").unwrap();
    std::fs::write(dmi.join("board_asset_tag"), "i-0123456789abcdef0\n").unwrap();
    let o = cli_in(
        &dir,
        &["monitor", "--json", "--count", "1"],
        &[("NRT_DMEM_DMI_ROOT", dmi.to_str().unwrap())],
    );
    let ec2: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ec2["instance_info"]["instance_type"], "trn2.48xlarge");
    assert_eq!(ec2["instance_info"]["instance_id"], "i-0123456789abcdef0");

    // A consumer of the documented input (what neuron-monitor-prometheus.py reads).
    if have("python3", &["-c", "import prometheus_client"]) {
        let consumer = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/consumers/neuron_monitor_json.py"
        );
        let mut p = Command::new("python3")
            .arg(consumer)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        p.stdin.take().unwrap().write_all(json.as_bytes()).unwrap();
        let out = p.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("neuron_runtime_memory_used_bytes{")
                    && l.contains("runtime_tag=\"app-a\"")
                    && l.contains("memory_location=\"neuron_device\"")),
            "{text}"
        );
        assert!(text.contains("neuroncore_memory_usage_tensors{"), "{text}");
        assert!(text.contains("system_vcpu_count{"), "{text}");
    }
    // AWS's own script, where the environment provides it (it is not shipped here).
    if let Some(script) = std::env::var_os("NEURON_MONITOR_PROMETHEUS_PY") {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut p = Command::new("python3")
            .arg(script)
            .args(["--port", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = p.stdin.take().unwrap();
        stdin.write_all(json.as_bytes()).unwrap();
        stdin.flush().unwrap();
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let t0 = Instant::now();
        let mut text = String::new();
        while t0.elapsed() < Duration::from_secs(10) && !text.contains("runtime_tag=\"app-a\"") {
            std::thread::sleep(Duration::from_millis(200));
            if std::net::TcpStream::connect(addr).is_ok() {
                text = get(addr, "/metrics");
            }
        }
        let _ = p.kill();
        let out = p.wait_with_output().unwrap();
        assert!(text.contains("runtime_tag=\"app-a\""), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("Traceback"), "{err}");
    }
    a.exit();
    b.exit();
}

#[test]
fn a_real_prometheus_scrapes_metrics_and_the_dashboards_queries_answer() {
    let dir = shm_dir("prom");
    let mut a = Worker::start(spawn(
        &dir,
        "sim:trn2@prom",
        "0",
        &[("NEURON_PROCESS_TAG", "scraped")],
    ));
    a.ok(&format!("alloc t {GIB} 0"));
    let own = a.stats().0;
    let m = serve(&dir, "0.2");
    std::thread::sleep(Duration::from_millis(300));
    let page = get(m.addr, "/metrics");
    let (head, body) = page.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    // The names and labels AWS's script makes, which the CloudWatch agent's Neuron scrape
    // keeps (`neuron.*|system_.*|execution_.*`) and decorates (`neuroncore`, the hardware
    // info's device and core counts, `runtime_tag`, `memory_location`).
    for want in [
        "neuron_runtime_memory_used_bytes{",
        "runtime_tag=\"scraped\"",
        "neuroncore_memory_usage_tensors{",
        "neuroncore=\"0\"",
        "memory_location=\"None\"",
        "neuron_hardware_info{",
        "neuron_device_count=\"1\"",
        "neuroncore_per_device_count=\"8\"",
        "instance_info{",
        "system_memory_total_bytes{",
        "system_vcpu_usage_ratio{",
        "nrt_dmem_hbm_largest_free_block_bytes{",
    ] {
        assert!(body.contains(want), "{want} missing:\n{body}");
    }
    // The serving monitor's own memory (anonymous RSS; the binary's pages and the device
    // files it maps are shared) stays within the 8 MiB budget.
    let status = std::fs::read_to_string(format!("/proc/{}/status", m.child.id())).unwrap();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert!(rss_kib <= 8 * 1024, "anonymous RSS {rss_kib} KiB");

    if have("promtool", &["--version"]) {
        let mut p = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        p.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
        let out = p.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Exit 3 is lint only; the one lint allowed is AWS's own name `system_vcpu_count`.
        assert!(matches!(out.status.code(), Some(0 | 3)), "{said}");
        for l in said.lines().filter(|l| !l.trim().is_empty()) {
            assert!(l.starts_with("system_vcpu_count "), "promtool: {said}");
        }
    }
    if !have("prometheus", &["--version"]) {
        a.exit();
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: \
             nrt-dmem\n    static_configs:\n      - targets: ['{}']\n",
            m.addr
        ),
    )
    .unwrap();
    let mut prom = Command::new("prometheus")
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let api: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let query = |q: &str| -> serde_json::Value {
        let enc: String = q
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"_.-".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let page = get(api, &format!("/api/v1/query?query={enc}"));
        let body = page.split_once("\r\n\r\n").map_or("", |x| x.1);
        // Prometheus answers chunked or not; the JSON object is what lies between the braces.
        let (s, e) = (body.find('{'), body.rfind('}'));
        match (s, e) {
            (Some(s), Some(e)) => serde_json::from_str(&body[s..=e]).unwrap_or_default(),
            _ => serde_json::Value::Null,
        }
    };
    let per_process = "neuron_runtime_memory_used_bytes{runtime_tag=\"scraped\",memory_location=\"neuron_device\"}";
    let t0 = Instant::now();
    let mut got = serde_json::Value::Null;
    while t0.elapsed() < Duration::from_secs(40) {
        std::thread::sleep(Duration::from_millis(500));
        if std::net::TcpStream::connect(api).is_err() {
            continue;
        }
        got = query(per_process);
        if got["data"]["result"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
        {
            break;
        }
    }
    let value = got["data"]["result"][0]["value"][1].as_str().unwrap_or("");
    assert_eq!(value, own.to_string(), "{got}");
    // The memory, instance and system panels of AWS's dashboard (neuron-monitor-grafana.json).
    for q in [
        "instance_info",
        "count(instance_info)",
        "sum (system_vcpu_count)",
        "avg(sum by (instance_id) (system_vcpu_usage_ratio))",
        "avg(system_memory_used_bytes / system_memory_total_bytes)",
        "avg by (memory_location) (sum by (instance_id, memory_location) (neuron_runtime_memory_used_bytes))",
        "avg by (usage_type) (system_vcpu_usage_ratio)",
        "avg(system_memory_used_bytes)",
    ] {
        let r = query(q);
        assert_eq!(r["status"], "success", "{q}: {r}");
        assert!(
            r["data"]["result"].as_array().is_some_and(|v| !v.is_empty()),
            "{q}: no data: {r}"
        );
    }
    let _ = prom.kill();
    let _ = prom.wait();
    a.exit();
}

#[test]
fn the_last_process_killed_is_reclaimed_within_a_second_by_the_monitor() {
    let dir = shm_dir("lastkill");
    let mut a = Worker::start(spawn(&dir, "sim:trn2@last", "0", &[]));
    a.ok(&format!("alloc t {GIB} 0"));
    // A long report interval: reclaiming is the monitor's 100 ms look, not its reports.
    let _m = serve(&dir, "30");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(figures(&dir, "last").device_bytes(0), GIB);
    a.kill9();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(1) && !figures(&dir, "last").procs.is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let f = figures(&dir, "last");
    assert!(
        f.procs.is_empty(),
        "not reclaimed within 1 s: {:?}",
        f.procs
    );
    assert_eq!(f.device_bytes(0), 0);
    assert_eq!(f.reclaimed, 1);
}

#[test]
fn metrics_requests_that_are_huge_slow_malformed_or_not_get_are_refused() {
    let dir = shm_dir("http");
    let a = Worker::start(spawn(&dir, "sim:trn2@http", "0", &[]));
    let m = serve(&dir, "0.2");
    let status = |r: &str| r.lines().next().unwrap_or("").to_string();
    assert!(status(&get(m.addr, "/healthz")).contains("200"));
    assert!(status(&http(m.addr, b"POST /metrics HTTP/1.1\r\n\r\n")).contains("405"));
    assert!(status(&http(m.addr, b"DELETE / HTTP/1.1\r\n\r\n")).contains("405"));
    assert!(status(&get(m.addr, "/../etc/passwd")).contains("404"));
    assert!(status(&http(m.addr, b"GARBAGE\r\n\r\n")).contains("400"));
    assert!(status(&http(m.addr, b"\x00\x01\x02\xff\r\n\r\n")).contains("400"));
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    assert!(status(&http(m.addr, huge.as_bytes())).contains("431"));
    // A slow client holds nothing up: others are served meanwhile, and it is cut off.
    let mut slow = std::net::TcpStream::connect(m.addr).unwrap();
    slow.write_all(b"GET /met").unwrap();
    let t0 = Instant::now();
    assert!(status(&get(m.addr, "/metrics")).contains("200"));
    assert!(t0.elapsed() < Duration::from_secs(2));
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = String::new();
    use std::io::Read;
    let _ = slow.read_to_string(&mut rest);
    assert!(rest.contains("408"), "{rest}");
    // More connections than it keeps: the extra ones are closed, the server goes on.
    let held: Vec<_> = (0..80)
        .map(|_| std::net::TcpStream::connect(m.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    drop(held);
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    let mut ok = false;
    while !ok && t0.elapsed() < Duration::from_secs(8) {
        ok = status(&get(m.addr, "/metrics")).contains("200");
    }
    assert!(ok);
    a.exit();
}

/// Truncates (or extends) `file` to `len` bytes.
fn truncate(file: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// Pseudo-random bytes (xorshift), so the test needs no crate.
fn noise(n: usize, mut x: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A way to damage a file: its name and what it does to the file.
type Damage = (&'static str, Box<dyn Fn(&Path)>);

/// The ways a file is damaged, each applied to `file`.
fn damages() -> Vec<Damage> {
    vec![
        ("truncated to 0 B", Box::new(|f: &Path| truncate(f, 0))),
        ("truncated to 100 B", Box::new(|f: &Path| truncate(f, 100))),
        ("truncated to 4 KiB", Box::new(|f: &Path| truncate(f, 4096))),
        (
            "truncated to 1 MiB",
            Box::new(|f: &Path| truncate(f, 1 << 20)),
        ),
        ("bad magic", Box::new(|f: &Path| poke(f, 0, b"garbage!"))),
        (
            "random bytes in the pools",
            Box::new(|f: &Path| poke(f, layout::sim_offset() as u64, &noise(64 * 1024, 7))),
        ),
    ]
}

#[test]
fn a_damaged_file_without_live_processes_is_re_created_with_a_warning() {
    let dir = shm_dir("damaged-idle");
    let dev = "sim:trn2@dmg";
    let file = dir.join("nrt-dmem-dmg.shm");
    for (what, damage) in damages() {
        let mut w = Worker::start(spawn(&dir, dev, "0", &[]));
        w.ok(&format!("alloc t {GIB} 0"));
        w.exit();
        damage(&file);
        let (mut w, log) = start_logged(spawn(&dir, dev, "0", &[]));
        w.ok(&format!("alloc t {GIB} 0"));
        assert_eq!(w.audit(), (1, GIB), "{what}");
        if what.contains("100 B")
            || what.contains("4 KiB")
            || what.contains("1 MiB")
            || what.contains("magic")
        {
            assert!(log.contains("re-creating it"), "{what}: {log}");
        }
        let (r, code) = report(&dir);
        assert_eq!(code, Some(0), "{what}: {r}");
        assert_eq!(
            r["nrt_dmem"]["devices"][0]["memory_used_bytes"], GIB,
            "{what}"
        );
        w.exit();
    }
}

#[test]
fn a_damaged_file_under_live_processes_is_reported_never_read() {
    let dir = shm_dir("damaged-live");
    let dev = "sim:trn2@live";
    let file = dir.join("nrt-dmem-live.shm");
    let mut cases = damages();
    cases.push((
        "counters beyond the device",
        Box::new(|f: &Path| {
            // The first counter of nd0 core 0 (the header and slots precede the counters).
            let off = (size_of::<layout::Header>()
                + layout::MAX_PROCESSES * size_of::<layout::ProcSlot>())
                as u64;
            poke(f, off, &(3u64 << 60).to_le_bytes());
        }),
    ));
    for (what, damage) in cases {
        let _ = std::fs::remove_file(&file);
        let mut a = Worker::start(spawn(&dir, dev, "0", &[]));
        a.ok(&format!("alloc t {GIB} 0"));
        damage(&file);
        let (r, code) = report(&dir);
        assert_eq!(code, Some(1), "{what}: {r}");
        let errors = r["nrt_dmem"]["errors"].to_string();
        assert!(errors.contains("nrt-dmem-live.shm"), "{what}: {errors}");
        assert_eq!(
            r["neuron_runtime_data"],
            serde_json::json!([]),
            "{what}: no numbers"
        );
        assert_eq!(r["nrt_dmem"]["devices"], serde_json::json!([]), "{what}");
        if !what.contains("counters") {
            let e = Worker::try_start(spawn(&dir, dev, "1", &[])).err().unwrap();
            assert!(!e.is_empty(), "{what}: a newcomer is refused");
        }
        if what.contains("truncated") {
            // No SIGBUS: the process is told on its next call and lives on.
            let r = a.cmd("alloc u 4096 0");
            assert!(r.starts_with("err"), "{what}: {r}");
        }
        a.exit();
    }
}

#[test]
fn symlinks_and_files_not_shared_with_this_user_are_refused() {
    let dir = shm_dir("owner");
    let target = dir.join("target");
    std::fs::write(&target, b"not a device").unwrap();
    std::os::unix::fs::symlink(&target, dir.join("nrt-dmem-link.shm")).unwrap();
    let e = Worker::try_start(spawn(&dir, "sim:trn2@link", "0", &[]))
        .err()
        .unwrap();
    assert!(e.contains("symbolic link"), "{e}");
    assert_eq!(
        std::fs::read(&target).unwrap(),
        b"not a device",
        "never followed"
    );
    let (r, code) = report(&dir);
    assert_eq!(code, Some(1));
    assert!(
        r["nrt_dmem"]["errors"]
            .to_string()
            .contains("symbolic link"),
        "{r}"
    );
    std::fs::remove_file(dir.join("nrt-dmem-link.shm")).unwrap();

    // The creation mode (a monitor of the group may read).
    let w = Worker::start(spawn(
        &dir,
        "sim:trn2@mode",
        "0",
        &[("NRT_DMEM_SHM_MODE", "0640")],
    ));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("nrt-dmem-mode.shm"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640);
    w.exit();
    let e = Worker::try_start(spawn(
        &dir,
        "sim:trn2@bad",
        "0",
        &[("NRT_DMEM_SHM_MODE", "0777")],
    ))
    .err()
    .unwrap();
    assert!(e.contains("NRT_DMEM_SHM_MODE"), "{e}");

    // Another user's private file: refused even to root, with or without its processes.
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: changing a file's owner needs root");
        return;
    }
    let file = dir.join("nrt-dmem-theirs.shm");
    let a = Worker::start(spawn(&dir, "sim:trn2@theirs", "0", &[]));
    std::os::unix::fs::chown(&file, Some(65534), Some(65534)).unwrap();
    let e = Worker::try_start(spawn(&dir, "sim:trn2@theirs", "1", &[]))
        .err()
        .unwrap();
    assert!(
        e.contains("owned by uid 65534") && e.contains("0600"),
        "{e}"
    );
    a.exit();
    let e = Worker::try_start(spawn(&dir, "sim:trn2@theirs", "1", &[]))
        .err()
        .unwrap();
    assert!(e.contains("owned by uid 65534"), "{e}");
    // Shared by its mode: admitted.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
    Worker::start(spawn(&dir, "sim:trn2@theirs", "1", &[])).exit();
}

#[test]
fn a_monitor_that_loses_its_directory_says_so_and_keeps_serving() {
    let dir = shm_dir("lostdir");
    let a = Worker::start(spawn(&dir, "sim:trn2@lost", "0", &[]));
    let m = serve(&dir, "0.1");
    assert!(get(m.addr, "/metrics").contains("nrt_dmem_monitor_errors{} 0"));
    a.exit();
    std::fs::remove_dir_all(&*dir).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let page = get(m.addr, "/metrics");
    assert!(page.contains("nrt_dmem_monitor_errors{} 1"), "{page}");
    let o = cli_in(&dir, &["monitor", "--json", "--count", "1"], &[]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "nothing to watch at start is bad input"
    );
    std::fs::create_dir_all(&*dir).unwrap();
}

#[test]
fn stats_of_a_shared_device_is_read_only_and_monitor_device_picks_one() {
    let dir = shm_dir("readonly");
    let mut a = Worker::start(spawn(&dir, "sim:trn2@one", "0", &[]));
    a.ok(&format!("alloc t {GIB} 0"));
    let b = Worker::start(spawn(&dir, "sim:trn2@two", "0", &[]));
    let before = figures(&dir, "one");
    let o = cli_in(&dir, &["stats", "--device", "sim:trn2@one", "--json"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["nrt_dmem"]["read_only"], true);
    assert_eq!(
        v["nrt_dmem"]["device_wide"]["neuron_runtime_data"][0]["pid"],
        a.pid
    );
    let after = figures(&dir, "one");
    assert_eq!(after.procs.len(), 1, "stats joined nothing");
    assert_eq!(after.counters, before.counters, "and loaded nothing");
    let o = cli_in(&dir, &["stats", "--device", "sim:trn2@none"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let o = cli_in(
        &dir,
        &[
            "monitor",
            "--json",
            "--count",
            "1",
            "--device",
            "sim:trn2@two",
        ],
        &[],
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pids: Vec<_> = r["neuron_runtime_data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].clone())
        .collect();
    assert_eq!(pids, [serde_json::json!(b.pid)]);
    let o = cli_in(
        &dir,
        &["monitor", "--count", "1", "--device", "sim:trn2"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    a.exit();
    b.exit();
}

/// A worker in a "pod" of its own: private `/dev/shm` (a fresh tmpfs) and pid namespace
/// (`unshare`), sharing only `dir` with the others.
fn in_pod(dir: &Path, device: &str, cores: &str, tag: &str) -> Command {
    let inner = spawn(dir, device, cores, &[("NEURON_PROCESS_TAG", tag)]);
    let mut c = Command::new("unshare");
    c.args(["--mount", "--pid", "--fork", "--kill-child", "sh", "-c"])
        .arg("mount -t tmpfs none /dev/shm && exec \"$0\"")
        .arg(WORKER);
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    c
}

#[test]
fn pods_sharing_only_a_host_directory_co_locate_and_see_each_other() {
    // SAFETY: `geteuid` has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || !have("unshare", &["--mount", "--pid", "--fork", "true"]) {
        eprintln!("skipped: needs root and unshare (mount and pid namespaces)");
        return;
    }
    let dir = shm_dir("pods");
    let dev = "sim:trn2@pods";
    let mut a = Worker::start(in_pod(&dir, dev, "0", "pod-a"));
    a.ok(&format!("alloc t {GIB} 0"));
    // Each pod's process is pid 1 of its namespace: liveness is the lock, not the pid.
    assert_eq!(a.pid, 1);
    let e = Worker::try_start(in_pod(&dir, dev, "0", "pod-b"))
        .err()
        .unwrap();
    assert!(
        e.contains("NeuronCore 0 of nd0 is held"),
        "exclusive across pods: {e}"
    );
    let mut b = Worker::start(in_pod(&dir, dev, "1", "pod-b"));
    b.ok(&format!("alloc t {GIB} 0"));
    assert_eq!(b.stats().1, 2 * GIB, "B sees A's bytes on the device");
    let (r, code) = report(&dir);
    assert_eq!(code, Some(0), "{r}");
    let tags: Vec<_> = r["neuron_runtime_data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["neuron_runtime_tag"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tags, ["pod-a", "pod-b"]);
    // Without the shared directory each pod has a device of its own in its private
    // /dev/shm: no exclusivity, no visibility.
    let mut c = in_pod(&dir, dev, "0", "pod-c");
    c.env_remove("NRT_DMEM_SHM_DIR");
    let mut alone = Worker::start(c);
    assert_eq!(alone.stats().1, 0);
    alone.exit();
    a.exit();
    b.exit();
}
