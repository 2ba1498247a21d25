//! `nrt-dmem monitor`: the host agent. Every `--interval` (default 1 s) a report in
//! neuron-monitor's documented JSON (`report`: `instance_info`, `neuron_hardware_info`,
//! `neuron_runtime_data[]` with `memory_used` per logical core and `loaded_models`,
//! `system_data`; this project's extras under `nrt_dmem`), a live table like neuron-top on a
//! terminal, and with `--listen ADDR` the same report as Prometheus metrics on
//! `http://ADDR/metrics` (`metrics`, served by `http`'s one-thread loop).
//!
//! Sources: the real driver's sysfs counters when `/sys/devices/virtual/neuron_device` exists
//! (`$NRT_DMEM_SYSFS_ROOT` overrides, for tests), else the shared simulated devices in
//! `$NRT_DMEM_SHM_DIR` (default `/dev/shm`; `--device sim:…@NAME` picks one), else a clear
//! message and exit 2. The monitor maps the files read-only and never joins their
//! allocators; between reports it reclaims dead processes of the files it may write (so a
//! device whose last process was killed is reclaimed within 100 ms of its death).
#![deny(unsafe_code)]

mod http;
mod metrics;
mod report;
mod system;

pub(crate) use report::device_wide_json;

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::Value;

use super::CliError;
use nrt_host::config::DeviceChoice;
use nrt_host::shared::{device_path, shm_dir, REAP_INTERVAL};
use report::{Collector, Source};

/// `nrt-dmem monitor` flags.
#[derive(Debug, Args)]
pub struct MonitorArgs {
    /// Seconds between reports.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,
    /// One JSON report per line (neuron-monitor's) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Stop after this many reports (0 = until interrupted); exit 1 when a report carried an
    /// error (a device that could not be read or whose figures were refused).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub count: u64,
    /// Serve the report as Prometheus metrics on http://ADDR/metrics (and /healthz), e.g.
    /// 0.0.0.0:9464; prints nothing else unless --json.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
}

/// The real driver's sysfs tree.
pub const SYSFS_ROOT: &str = "/sys/devices/virtual/neuron_device";

fn sysfs_root() -> PathBuf {
    std::env::var_os("NRT_DMEM_SYSFS_ROOT")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(SYSFS_ROOT), PathBuf::from)
}

/// Where the monitor reads: `--device` (a shared device's file, or the driver), else the
/// driver's sysfs when present, else the shared device directory.
fn source(device: Option<&DeviceChoice>) -> Result<Source, CliError> {
    match device {
        Some(DeviceChoice::Shared { name, .. }) => Ok(Source::File(device_path(name))),
        Some(DeviceChoice::Neuron) => Ok(Source::Sysfs(sysfs_root())),
        Some(DeviceChoice::Sim { .. }) => Err(CliError::input(
            "--device: the monitor reads a shared simulated device (sim:<preset>@NAME) or the \
             neuron driver (neuron); a private simulated device lives only in its process",
        )),
        None if sysfs_root().is_dir() => Ok(Source::Sysfs(sysfs_root())),
        None => Ok(Source::Dir(shm_dir())),
    }
}

/// Runs the monitor; `Ok(1)` when `--count` reports ended and one carried an error.
pub fn run(
    a: &MonitorArgs,
    device: Option<&DeviceChoice>,
    out: &mut dyn Write,
) -> Result<i32, CliError> {
    if !(a.interval.is_finite() && a.interval >= 0.01 && a.interval <= 86_400.0) {
        return Err(CliError::input(
            "--interval: expected seconds from 0.01 to 86400",
        ));
    }
    let interval = Duration::from_secs_f64(a.interval);
    let src = source(device)?;
    let mut col = Collector::new(src.clone());
    // Without a server, nothing to watch is bad input (a typo'd directory, no process yet).
    if a.listen.is_none() {
        let none = match &src {
            Source::Dir(d) => col
                .files()
                .map_or(true, |f| f.is_empty())
                .then(|| d.clone()),
            Source::File(f) => (!f.exists()).then(|| f.clone()),
            Source::Sysfs(_) => None,
        };
        if let Some(p) = none {
            return Err(CliError::input(format!(
                "no Neuron device: neither {} (the neuron driver's sysfs counters) nor any \
                 shared simulated device at {} (start a runtime with \
                 NRT_DMEM_DEVICE=sim:trn2@<name>; {} sets the directory)",
                sysfs_root().display(),
                p.display(),
                nrt_host::shared::DIR_VAR
            )));
        }
    }
    let mut server = match a.listen {
        Some(addr) => {
            let s = http::Server::bind(addr)
                .map_err(|e| CliError::input(format!("--listen {addr}: cannot listen ({e})")))?;
            // On stderr whatever the verbosity: with port 0 this is where the port is told.
            eprintln!(
                "nrt-dmem monitor: serving http://{}/metrics",
                s.local_addr().map_or(addr, |a| a)
            );
            Some(s)
        }
        None => None,
    };
    let tty = !a.json && a.listen.is_none() && std::io::stdout().is_terminal();
    let mut n = 0u64;
    let mut failed = false;
    let mut next = Instant::now();
    loop {
        let report = col.collect();
        failed |= report.failed;
        if a.json {
            writeln!(out, "{}", report.json).map_err(CliError::output)?;
        } else if a.listen.is_none() {
            if tty {
                write!(out, "\x1b[H\x1b[2J").map_err(CliError::output)?;
            }
            write_table(out, &report.json).map_err(CliError::output)?;
        }
        out.flush().map_err(CliError::output)?;
        let latest: Option<Value> = Some(report.json);
        n += 1;
        if a.count != 0 && n >= a.count {
            return Ok(i32::from(failed));
        }
        next += interval;
        if next < Instant::now() {
            next = Instant::now();
        }
        // Until the next report: serve, and reclaim dead processes every REAP_INTERVAL.
        while Instant::now() < next {
            let step = (Instant::now() + REAP_INTERVAL).min(next);
            match server.as_mut() {
                Some(s) => {
                    let body = latest.as_ref();
                    s.serve_until(step, &mut |r| match r {
                        http::Route::Health => http::Answer::ok("text/plain", b"ok\n".to_vec()),
                        http::Route::Metrics => http::Answer::ok(
                            metrics::CONTENT_TYPE,
                            body.and_then(|b| metrics::encode_report(b).ok())
                                .unwrap_or_default()
                                .into_bytes(),
                        ),
                    })
                    .map_err(|e| CliError::input(format!("--listen: {e}")))?;
                }
                None => std::thread::sleep(step.saturating_duration_since(Instant::now())),
            }
            col.reap_now();
        }
    }
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

/// The neuron-top-like table of a report.
fn write_table(out: &mut dyn Write, r: &Value) -> std::io::Result<()> {
    writeln!(
        out,
        "nrt-dmem monitor — {}",
        r["nrt_dmem"]["source"].as_str().unwrap_or("")
    )?;
    for d in r["nrt_dmem"]["devices"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "\n{:<24} used {:>12} of {:>12}{}",
            d["name"].as_str().unwrap_or("?"),
            gib(d["memory_used_bytes"].as_u64().unwrap_or(0)),
            gib(d["memory_total_bytes"].as_u64().unwrap_or(0)),
            if d["poisoned"] == true {
                "  POISONED"
            } else {
                ""
            }
        )?;
        writeln!(
            out,
            "  {:<5} {:>12} {:>12}  top categories",
            "core", "used", "peak"
        )?;
        for (c, cats) in d["neuroncores"].as_object().into_iter().flatten() {
            let mut v: Vec<(&String, u64, u64)> = cats
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, x)| {
                    (
                        k,
                        x["total"].as_u64().unwrap_or(0),
                        x["peak"].as_u64().unwrap_or(0),
                    )
                })
                .collect();
            let used: u64 = v.iter().map(|x| x.1).sum();
            let peak: u64 = v.iter().map(|x| x.2).sum();
            v.sort_by_key(|x| std::cmp::Reverse(x.1));
            let top: Vec<String> = v
                .iter()
                .filter(|x| x.1 > 0)
                .take(3)
                .map(|x| format!("{} {}", x.0, gib(x.1)))
                .collect();
            writeln!(
                out,
                "  NC{:<3} {:>12} {:>12}  {}",
                c,
                gib(used),
                gib(peak),
                top.join(", ")
            )?;
        }
    }
    let procs = r["neuron_runtime_data"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    writeln!(
        out,
        "\n  {:>8}  {:<22} {:>12} {:>12}  logical cores",
        "tag", "device", "device mem", "host mem"
    )?;
    for p in &procs {
        let u = &p["report"]["memory_used"]["neuron_runtime_used_bytes"];
        let cores: Vec<&String> = u["usage_breakdown"]["neuroncore_memory_usage"]
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        writeln!(
            out,
            "  {:>8}  {:<22} {:>12} {:>12}  {}{}",
            p["neuron_runtime_tag"].as_str().unwrap_or(""),
            p["nrt_dmem"]["device"].as_str().unwrap_or(""),
            gib(u["neuron_device"].as_u64().unwrap_or(0)),
            gib(u["host"].as_u64().unwrap_or(0)),
            cores
                .iter()
                .map(|c| format!("NC{c}"))
                .collect::<Vec<_>>()
                .join(" "),
            if p["nrt_dmem"]["alive"] == false {
                "  (gone, reclaiming)"
            } else {
                ""
            }
        )?;
    }
    if procs.is_empty() {
        writeln!(out, "  (no process)")?;
    }
    for err in r["nrt_dmem"]["errors"].as_array().into_iter().flatten() {
        writeln!(out, "\n  error: {}", err.as_str().unwrap_or(""))?;
    }
    Ok(())
}
