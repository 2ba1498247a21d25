//! The footprint of `nrt-dmem monitor` (its budget: peak RSS ≤ 8 MiB and under 1 % of
//! one core at `--interval 1`), measured on the real binary, not in a timed test.
//!
//! Sets up a shared simulated trn2 with two participants holding allocations, runs
//! `nrt-dmem monitor --json --interval <s> --count <n>` (stdout to /dev/null) and reads the
//! child's resource usage: peak RSS (its `VmHWM`, sampled until it exits; `ru_maxrss` is
//! reported too, an upper bound that includes this launcher's pre-`exec` mark) and CPU time
//! (user + system, `wait4`) over the wall time. The peer measured in the same run is `nrt-dmem --version`: the same
//! binary doing nothing, so the ratio says what the monitor adds.
//!
//! ```text
//! cargo build --release -p nrt-dmem-cli --bin nrt-dmem
//! cargo run --release -p nrt-bench --bin monitor_footprint -- [--count 10] [--interval 1]
//! ```
//! One JSON object on stdout.

use std::process::{Command, Stdio};
use std::time::Instant;

use nrt_core::driver::{AllocRequest, Driver};
use nrt_core::sim::{Preset, SimConfig};
use nrt_host::shared::{JoinRequest, SharedDevice, SharedName};

/// The process's own high-water mark (`VmHWM` of `/proc/<pid>/status`, KiB): it belongs to
/// the image's address space, so unlike `ru_maxrss` it does not carry the launching process's
/// pre-`exec` mark. `None` once the process is a zombie.
fn vm_hwm(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Runs `cmd` to completion; returns (peak RSS KiB: `VmHWM` sampled every 50 ms until exit,
/// `ru_maxrss` if never sampled; `ru_maxrss` KiB; CPU seconds; wall seconds).
fn measure(cmd: &mut Command) -> (u64, u64, f64, f64) {
    let t0 = Instant::now();
    let mut child = cmd.spawn().expect("nrt-dmem starts");
    let mut hwm = None;
    while let Some(v) = vm_hwm(child.id()) {
        hwm = Some(v);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value for `wait4` to fill.
    let mut ru: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: waits for our own child; `status` and `ru` are valid for writes.
    let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    assert_eq!(r, child.id() as libc::pid_t, "wait4");
    // Reaped by `wait4` already: this only lets `Child` know (it answers from its cache or
    // ECHILD, both fine).
    let _ = child.try_wait();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "nrt-dmem failed: status {status}"
    );
    let wall = t0.elapsed().as_secs_f64();
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let maxrss = ru.ru_maxrss as u64;
    (
        hwm.unwrap_or(maxrss),
        maxrss,
        secs(ru.ru_utime) + secs(ru.ru_stime),
        wall,
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |k: &str, d: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_else(|| d.to_string())
    };
    let count: u64 = arg("--count", "10").parse().expect("--count N");
    let interval: f64 = arg("--interval", "1").parse().expect("--interval SECONDS");
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("nrt-dmem")))
        .filter(|p| p.exists())
        .expect(
            "nrt-dmem next to this binary: cargo build --release -p nrt-dmem-cli --bin nrt-dmem",
        );

    let dir = std::env::temp_dir().join(format!("nrt-monitor-footprint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("NRT_DMEM_SHM_DIR", &dir);
    let name = SharedName::parse("footprint").unwrap();
    let join = |mask: u32| {
        let mut cores = [0u32; 32];
        cores[0] = mask;
        SharedDevice::open(
            &name,
            &JoinRequest {
                config: SimConfig::new(Preset::Trn2, 1),
                cores,
            },
        )
        .expect("shared device")
    };
    let (a, b) = (join(0x0f), join(0xf0));
    for (d, nc, hbm) in [(&a, 0u32, 0u32), (&a, 2, 1), (&b, 4, 2), (&b, 6, 3)] {
        for cat in [8u8, 9, 10, 12] {
            let req = AllocRequest {
                size: 64 << 20,
                align: 0,
                host: false,
                hbm_idx: hbm,
                region: 0,
                nc_id: nc,
                category: cat,
            };
            d.memory_alloc(0, &req).expect("allocation");
        }
    }

    let quiet = |c: &mut Command| {
        c.env("NRT_DMEM_SHM_DIR", &dir)
            .env("NRT_DMEM_SYSFS_ROOT", dir.join("no-sysfs"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
    };
    let mut peer = Command::new(&exe);
    peer.arg("--version");
    quiet(&mut peer);
    // Too short-lived to sample: its `ru_maxrss` (an upper bound, as the monitor's is).
    let (_, peer_maxrss, _, _) = measure(&mut peer);
    let mut mon = Command::new(&exe);
    mon.args([
        "monitor",
        "--json",
        "--interval",
        &interval.to_string(),
        "--count",
        &count.to_string(),
    ]);
    quiet(&mut mon);
    let (rss, maxrss, cpu, wall) = measure(&mut mon);
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
    let pct = 100.0 * cpu / wall;
    let ratio = maxrss as f64 / peer_maxrss.max(1) as f64;
    eprintln!(
        "nrt-dmem monitor: {count} reports at {interval} s: peak RSS {rss} KiB (VmHWM; ru_maxrss \
         {maxrss} KiB = {ratio:.2}x `--version`'s {peer_maxrss} KiB), CPU {cpu:.3} s over \
         {wall:.1} s = {pct:.3} % of one core"
    );
    println!(
        "{}",
        serde_json::json!({
            "monitor_reports": count,
            "monitor_interval_s": interval,
            "monitor_peak_rss_kib": rss,
            "monitor_ru_maxrss_kib": maxrss,
            "peer_version_ru_maxrss_kib": peer_maxrss,
            "monitor_vs_peer_ru_maxrss_ratio": ratio,
            "monitor_cpu_s": cpu,
            "monitor_wall_s": wall,
            "monitor_cpu_percent_of_one_core": pct,
            "budget_rss_kib": 8192,
            "budget_cpu_percent": 1.0,
        })
    );
}
