//! `nrt-dmem monitor`: the host agent. Every `--interval` (default 1 s) a
//! report in neuron-monitor's JSON shape (public ABI §5 field names: per process
//! `neuron_runtime_used_bytes` with `usage_breakdown.neuroncore_memory_usage` per core and the
//! host breakdown; per device and core the sysfs-like total/present/peak by category), or a
//! live table like neuron-top on a terminal.
//!
//! Sources: the real driver's sysfs counters when `/sys/devices/virtual/neuron_device` exists
//! (`$NRT_DMEM_SYSFS_ROOT` overrides, for tests), else every shared simulated device in
//! `$NRT_DMEM_SHM_DIR` (default `/dev/shm`), else a clear message and exit 2. The monitor
//! maps the shared files read-only and never joins their allocators.
#![deny(unsafe_code)]

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Map, Value};

use super::CliError;
use nrt_host::shared::layout::{self, category_is_host, category_name, monitor_field, CATEGORIES};
use nrt_host::shared::reader::{list, SharedReader, Snapshot};
use nrt_host::shared::shm_dir;

/// `nrt-dmem monitor` flags.
#[derive(Debug, Args)]
pub struct MonitorArgs {
    /// Seconds between reports.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,
    /// One JSON report per line (neuron-monitor's shape) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Stop after this many reports (0 = until interrupted).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub count: u64,
}

/// The real driver's sysfs tree.
pub const SYSFS_ROOT: &str = "/sys/devices/virtual/neuron_device";

fn sysfs_root() -> PathBuf {
    std::env::var_os("NRT_DMEM_SYSFS_ROOT")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(SYSFS_ROOT), PathBuf::from)
}

/// Runs the monitor.
pub fn run(a: &MonitorArgs, out: &mut dyn Write) -> Result<(), CliError> {
    if !(a.interval.is_finite() && a.interval >= 0.01 && a.interval <= 86_400.0) {
        return Err(CliError::input(
            "--interval: expected seconds from 0.01 to 86400",
        ));
    }
    let interval = Duration::from_secs_f64(a.interval);
    let sys = sysfs_root();
    let shm = shm_dir();
    let tty = !a.json && std::io::stdout().is_terminal();
    let mut n = 0u64;
    let mut next = Instant::now();
    loop {
        let report = if sys.is_dir() {
            sysfs_report(&sys)
        } else {
            let files = list(&shm);
            if files.is_empty() {
                return Err(CliError::input(format!(
                    "no Neuron device: neither {} (the neuron driver's sysfs counters) nor any \
                     shared simulated device in {} (start a runtime with \
                     NRT_DMEM_DEVICE=sim:trn2@<name>; {} sets the directory)",
                    sys.display(),
                    shm.display(),
                    nrt_host::shared::DIR_VAR
                )));
            }
            shared_report(&files, a.interval)
        };
        if a.json {
            writeln!(out, "{report}").map_err(CliError::output)?;
        } else {
            if tty {
                write!(out, "\x1b[H\x1b[2J").map_err(CliError::output)?;
            }
            write_table(out, &report).map_err(CliError::output)?;
        }
        out.flush().map_err(CliError::output)?;
        n += 1;
        if a.count != 0 && n >= a.count {
            return Ok(());
        }
        next += interval;
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        } else {
            next = Instant::now();
        }
    }
}

/// The neuron-monitor breakdown of one core's (or the host's) category bytes.
fn breakdown(bytes: &[u64; CATEGORIES], host: bool) -> Map<String, Value> {
    let names: &[&str] = if host {
        &["application_memory", "constants", "dma_buffers", "tensors"]
    } else {
        &[
            "constants",
            "model_code",
            "model_shared_scratchpad",
            "runtime_memory",
            "tensors",
        ]
    };
    let mut m: Map<String, Value> = names.iter().map(|n| (n.to_string(), json!(0u64))).collect();
    for (k, b) in bytes.iter().enumerate() {
        if category_is_host(k) == host && *b > 0 {
            let e = m.entry(monitor_field(k)).or_insert(json!(0u64));
            *e = json!(e.as_u64().unwrap_or(0) + b);
        }
    }
    m
}

/// Cores per device and HBM channels of a snapshot's preset.
fn geometry(s: &Snapshot) -> (usize, u64) {
    let info = nrt_core::sim::Preset::ALL
        .into_iter()
        .find(|p| *p as u32 == s.preset)
        .map(|p| p.device_info());
    (
        info.map_or(layout::CORES as u32, |i| i.cores_per_device) as usize,
        info.map_or(1, |i| i.hbm_channels) as u64,
    )
}

/// One report over the shared simulated devices.
fn shared_report(files: &[PathBuf], period: f64) -> Value {
    let mut runtimes = Vec::new();
    let mut devices = Vec::new();
    let mut errors = Vec::new();
    let mut cores_per_device = 0;
    for f in files {
        let r = match SharedReader::open(f) {
            Ok(r) => r,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let s = r.snapshot();
        let (cpd, channels) = geometry(&s);
        cores_per_device = cpd;
        for p in &s.procs {
            runtimes.push(runtime_entry(r.name(), p, cpd, period));
        }
        for d in 0..s.devices as usize {
            devices.push(device_entry(r.name(), &s, d, cpd, channels));
        }
    }
    json!({
        "neuron_runtime_data": runtimes,
        "system_data": null,
        "neuron_hardware_info": {
            "neuron_device_count": devices.len(),
            "neuroncore_per_device_count": cores_per_device,
            "devices": devices,
            "error": errors.join("; "),
        },
        "source": "shared simulated devices",
    })
}

fn runtime_entry(
    dev_name: &str,
    p: &nrt_host::shared::reader::ProcSnap,
    cpd: usize,
    period: f64,
) -> Value {
    let mut cores = Map::new();
    let mut host = [0u64; CATEGORIES];
    let (mut dev_total, mut host_total) = (0u64, 0u64);
    for (d, per_core) in p.usage.iter().enumerate() {
        for (c, cats) in per_core.iter().enumerate().take(cpd) {
            let held = p.cores.get(d).is_some_and(|m| m >> c & 1 == 1);
            let any = cats.iter().any(|b| *b > 0);
            if held || any {
                let idx = d * cpd + c;
                cores.insert(idx.to_string(), Value::Object(breakdown(cats, false)));
            }
            for (k, b) in cats.iter().enumerate() {
                if category_is_host(k) {
                    host[k] += b;
                    host_total += b;
                } else {
                    dev_total += b;
                }
            }
        }
    }
    json!({
        "pid": p.pid,
        "neuron_runtime_tag": format!("{dev_name}:slot{}", p.slot),
        "error": if p.alive { "" } else { "process is gone; its memory is being reclaimed" },
        "report": {
            "memory_used": {
                "period": period,
                "neuron_runtime_used_bytes": {
                    "host": host_total,
                    "neuron_device": dev_total,
                    "usage_breakdown": {
                        "host": breakdown(&host, true),
                        "neuroncore_memory_usage": cores,
                    },
                },
            },
        },
        "nrt_dmem": { "device": dev_name, "alive": p.alive, "allocations": p.allocations },
    })
}

/// A shared device's figures for `stats --json` (`nrt_dmem.device_wide`): the same entries
/// the monitor reports (one place for their shape), `this_process` naming the caller's pid.
pub(super) fn device_wide_json(name: &str, slot: usize, s: &Snapshot) -> Value {
    let (cpd, channels) = geometry(s);
    json!({
        "name": name,
        "this_process": s.procs.iter().find(|p| p.slot == slot).map(|p| p.pid),
        "neuron_runtime_data": s.procs.iter().map(|p| runtime_entry(name, p, cpd, 0.0)).collect::<Vec<_>>(),
        "devices": (0..s.devices as usize).map(|d| device_entry(name, s, d, cpd, channels)).collect::<Vec<_>>(),
    })
}

fn device_entry(name: &str, s: &Snapshot, d: usize, cpd: usize, channels: u64) -> Value {
    let mut cores = Map::new();
    for (c, cats) in s.counters[d].iter().enumerate().take(cpd) {
        let mut m = Map::new();
        for (k, v) in cats.iter().enumerate() {
            if v.total > 0 || v.peak > 0 {
                m.insert(
                    category_name(k).to_string(),
                    json!({"total": v.total, "present": v.present, "peak": v.peak}),
                );
            }
        }
        cores.insert(c.to_string(), Value::Object(m));
    }
    json!({
        "name": format!("{name}/nd{d}"),
        "memory_total_bytes": s.channel_size * channels,
        "memory_used_bytes": s.device_bytes(d),
        "hbm_channel_bytes": s.channel_size,
        "poisoned": s.poisoned,
        "reclaimed_processes": s.reclaimed,
        "neuroncores": cores,
    })
}

/// One report over the real driver's sysfs counters (aws-neuron-driver's
/// `neuron<N>/neuron_core<C>/stats/memory_usage/device_mem/<category>/{total,present,peak}`).
/// The driver does not publish per-process usage in sysfs, so `neuron_runtime_data` is empty.
fn sysfs_report(root: &Path) -> Value {
    let read = |p: PathBuf| -> u64 {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let mut devices = Vec::new();
    let mut nds: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    nds.sort();
    for nd in nds.iter().filter(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("neuron"))
    }) {
        let mut cores = Map::new();
        let mut used = 0;
        for c in 0..layout::CORES {
            let base = nd.join(format!("neuron_core{c}/stats/memory_usage/device_mem"));
            let Ok(rd) = std::fs::read_dir(&base) else {
                continue;
            };
            let mut m = Map::new();
            for e in rd.filter_map(|e| e.ok()) {
                let cat = e.file_name().to_string_lossy().to_string();
                let total = read(e.path().join("total"));
                used += total;
                m.insert(
                    cat,
                    json!({"total": total, "present": read(e.path().join("present")), "peak": read(e.path().join("peak"))}),
                );
            }
            cores.insert(c.to_string(), Value::Object(m));
        }
        devices.push(json!({
            "name": nd.file_name().map(|n| n.to_string_lossy().to_string()),
            "memory_used_bytes": used,
            "neuroncores": cores,
        }));
    }
    json!({
        "neuron_runtime_data": [],
        "system_data": null,
        "neuron_hardware_info": {
            "neuron_device_count": devices.len(),
            "devices": devices,
            "error": "",
        },
        "source": root.display().to_string(),
    })
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

/// The neuron-top-like table of a report.
fn write_table(out: &mut dyn Write, r: &Value) -> std::io::Result<()> {
    writeln!(
        out,
        "nrt-dmem monitor — {}",
        r["source"].as_str().unwrap_or("")
    )?;
    for d in r["neuron_hardware_info"]["devices"]
        .as_array()
        .into_iter()
        .flatten()
    {
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
        "\n  {:>8}  {:<22} {:>12} {:>12}  cores",
        "pid", "device", "device mem", "host mem"
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
            p["pid"],
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
    let err = r["neuron_hardware_info"]["error"].as_str().unwrap_or("");
    if !err.is_empty() {
        writeln!(out, "\n  error: {err}")?;
    }
    Ok(())
}
