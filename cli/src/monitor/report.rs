//! neuron-monitor's JSON report (docs/SHARED_DEVICE.md "The monitor's report"): the
//! documented groups and keys, over the shared simulated devices' files or the real driver's
//! sysfs counters, with this project's extras under `nrt_dmem`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::system::{self, CpuSample};
use nrt_core::sim::Preset;
use nrt_host::shared::layout::{
    self, category_is_host, category_name, monitor_field, CATEGORIES, MODEL_CLASSES,
};
use nrt_host::shared::reader::{list, ProcSnap, SharedReader, Snapshot};

/// Where the figures come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// The real driver's sysfs tree.
    Sysfs(PathBuf),
    /// Every shared device file in a directory.
    Dir(PathBuf),
    /// One shared device file (`--device sim:…@NAME`).
    File(PathBuf),
}

/// Gathers reports, remembering what a measured period needs (the previous report's time
/// and `/proc/stat` reading).
pub struct Collector {
    source: Source,
    proc_root: PathBuf,
    dmi: PathBuf,
    last: Instant,
    cpu: Option<CpuSample>,
    /// Reclaim dead processes of the files it reads (when it may write them).
    pub reap: bool,
}

/// One report and whether it carries an error (a damaged or unreadable device).
pub struct Report {
    /// The JSON.
    pub json: Value,
    /// Some device could not be read or its figures were refused.
    pub failed: bool,
}

impl Collector {
    /// A collector over `source`; `/proc` and the DMI table are read from their usual places
    /// (`NRT_DMEM_PROC_ROOT` and `NRT_DMEM_DMI_ROOT` override them).
    pub fn new(source: Source) -> Collector {
        let var = |k: &str, d: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map_or_else(|| PathBuf::from(d), PathBuf::from)
        };
        let proc_root = var("NRT_DMEM_PROC_ROOT", "/proc");
        Collector {
            source,
            cpu: system::cpu_sample(&proc_root).ok(),
            proc_root,
            dmi: var("NRT_DMEM_DMI_ROOT", "/sys/class/dmi/id"),
            last: Instant::now(),
            reap: true,
        }
    }

    /// The files this collector reads now (none for sysfs).
    pub fn files(&self) -> Result<Vec<PathBuf>, String> {
        match &self.source {
            Source::Sysfs(_) => Ok(Vec::new()),
            Source::File(f) => Ok(vec![f.clone()]),
            Source::Dir(d) => {
                if !d.is_dir() {
                    return Err(format!(
                        "{}: the shared device directory is gone",
                        d.display()
                    ));
                }
                Ok(list(d))
            }
        }
    }

    /// Reclaims the dead processes of every file it reads (between reports, so a device
    /// whose last process died is reclaimed within [`nrt_host::shared::REAP_INTERVAL`] of a
    /// look). Errors are reported by the next report, not here.
    pub fn reap_now(&self) {
        if !self.reap {
            return;
        }
        for f in self.files().unwrap_or_default() {
            if let Ok(r) = SharedReader::open(&f) {
                if let Err(e) = r.reap() {
                    log::debug!(target: "nrt_dmem::monitor", "{e}");
                }
            }
        }
    }

    /// The report now.
    pub fn collect(&mut self) -> Report {
        let now = Instant::now();
        let period = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        let mut r = match self.source.clone() {
            Source::Sysfs(root) => sysfs_report(&root),
            _ => {
                self.reap_now();
                match self.files() {
                    Ok(files) => shared_report(&files, period),
                    Err(e) => Report {
                        json: empty_shared(vec![e]),
                        failed: true,
                    },
                }
            }
        };
        let cpu_now = system::cpu_sample(&self.proc_root);
        let vcpu = match &cpu_now {
            Ok(c) => system::vcpu_usage(c, self.cpu.as_ref(), system::uptime(&self.proc_root)),
            Err(e) => json!({"period": period, "error": e}),
        };
        if let Ok(c) = cpu_now {
            self.cpu = Some(c);
        }
        r.json["system_data"] = json!({
            "memory_info": system::memory_info(&self.proc_root, period),
            "vcpu_usage": vcpu,
        });
        r.json["instance_info"] = system::instance_info(&self.dmi);
        r
    }
}

/// neuron-monitor's names for a preset's devices and cores: `neuron_device_type`,
/// `neuron_device_version`, `neuroncore_version`.
fn device_names(p: Preset) -> (&'static str, &'static str, &'static str) {
    match p {
        Preset::Inf2 => ("inferentia2", "v3", "v2"),
        Preset::Trn1 => ("trainium", "v2", "v2"),
        Preset::Trn2 => ("trainium2", "v4", "v3d"),
        Preset::Trn3 => ("trainium3", "v5", "v4"),
    }
}

fn preset_of(s: &Snapshot) -> Option<Preset> {
    Preset::ALL.into_iter().find(|p| *p as u32 == s.preset)
}

/// The LNC a device runs at: its processes' (the first live one's), else the preset's
/// default.
fn lnc_in_force(s: &Snapshot, p: Preset) -> u32 {
    s.procs
        .iter()
        .filter(|x| x.alive && x.lnc > 0)
        .map(|x| x.lnc)
        .next()
        .unwrap_or_else(|| {
            let i = p.device_info();
            nrt_core::vcore::parse_vnc_config(i.arch, i.cores_per_device, None).unwrap_or(1)
        })
}

/// neuron-monitor's breakdown of one logical core's (or the host's) category bytes.
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
            *e = json!(e.as_u64().unwrap_or(0).saturating_add(*b));
        }
    }
    m
}

/// A published model as neuron-monitor's `loaded_models[]` entry.
fn model_entry(m: &nrt_host::shared::reader::ModelSnap) -> Value {
    let sgs: Map<String, Value> = m
        .subgraphs
        .iter()
        .enumerate()
        .map(|(i, b): (usize, &[u64; MODEL_CLASSES])| {
            let dev = b[0] + b[1] + b[2] + b[3];
            let host = b[4] + b[5] + b[6] + b[7];
            (
                format!("sg_{i:02}"),
                json!({
                    "memory_used_bytes": {
                        "host": host,
                        "neuron_device": dev,
                        "usage_breakdown": {
                            "host": {
                                "application_memory": b[4],
                                "constants": b[5],
                                "dma_buffers": b[6],
                                "tensors": b[7],
                            },
                            "neuron_device": {
                                "constants": b[0],
                                "model_code": b[1],
                                "runtime_memory": b[2],
                                "tensors": b[3],
                            },
                        },
                    },
                    "neuroncore_index": m.vnc,
                    "neuron_device_index": m.device,
                }),
            )
        })
        .collect();
    json!({
        "name": m.name,
        "uuid": "",
        "model_id": m.id,
        "is_running": true,
        "subgraphs": sgs,
    })
}

/// One process as neuron-monitor's `neuron_runtime_data[]` entry: its bytes per logical core
/// (at its own LNC), its host bytes and its models; a dead process carries an `error` (its
/// memory is being reclaimed, not the process's any more).
pub(crate) fn runtime_entry(
    file: &Path,
    dev_name: &str,
    p: &ProcSnap,
    cpd: usize,
    default_lnc: u32,
    period: f64,
) -> Value {
    let lnc = if p.lnc > 0 { p.lnc } else { default_lnc }.max(1) as usize;
    let mut logical: std::collections::BTreeMap<usize, [u64; CATEGORIES]> = Default::default();
    let mut host = [0u64; CATEGORIES];
    let (mut dev_total, mut host_total) = (0u64, 0u64);
    let mut physical = Vec::new();
    for (d, per_core) in p.usage.iter().enumerate() {
        for (c, cats) in per_core.iter().enumerate().take(cpd) {
            let held = p.cores.get(d).is_some_and(|m| m >> c & 1 == 1);
            if held {
                physical.push(d * cpd + c);
            }
            if held || cats.iter().any(|b| *b > 0) {
                let row = logical
                    .entry((d * cpd + c) / lnc)
                    .or_insert([0; CATEGORIES]);
                for (k, b) in cats.iter().enumerate() {
                    if !category_is_host(k) {
                        row[k] = row[k].saturating_add(*b);
                    }
                }
            }
            for (k, b) in cats.iter().enumerate() {
                if category_is_host(k) {
                    host[k] = host[k].saturating_add(*b);
                    host_total = host_total.saturating_add(*b);
                } else {
                    dev_total = dev_total.saturating_add(*b);
                }
            }
        }
    }
    let cores: Map<String, Value> = logical
        .iter()
        .map(|(i, cats)| (i.to_string(), Value::Object(breakdown(cats, false))))
        .collect();
    let tag = if p.tag.is_empty() {
        p.pid.to_string()
    } else {
        p.tag.clone()
    };
    json!({
        "pid": p.pid,
        "address": format!("{}#slot{}", file.display(), p.slot),
        "neuron_runtime_tag": tag,
        "error": if p.alive { "" } else { "the process is gone; its memory is being reclaimed" },
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
                "loaded_models": p.models.iter().map(model_entry).collect::<Vec<_>>(),
                "error": "",
            },
        },
        "nrt_dmem": {
            "device": dev_name,
            "slot": p.slot,
            "alive": p.alive,
            "allocations": p.allocations,
            "logical_neuroncore_config": lnc,
            "physical_neuroncores": physical,
            "joined_at": p.joined_at,
        },
    })
}

/// A device of a shared file with this project's figures: bytes used and in all, per HBM
/// channel the free space and largest free block, per physical core each category's
/// sysfs-like triple.
pub(crate) fn device_entry(name: &str, s: &Snapshot, d: usize, cpd: usize, channels: u64) -> Value {
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
    let hbm: Vec<Value> = s.pools[d]
        .iter()
        .take(channels as usize)
        .enumerate()
        .map(|(i, f)| {
            json!({
                "index": i,
                "capacity_bytes": f.capacity,
                "free_bytes": f.free,
                "largest_free_block_bytes": f.largest_free,
                // Free bytes outside the largest block, per mille of the free bytes.
                "fragmentation_permille": f.free.saturating_sub(f.largest_free)
                    .saturating_mul(1000)
                    .checked_div(f.free)
                    .unwrap_or(0),
            })
        })
        .collect();
    json!({
        "name": format!("{name}/nd{d}"),
        "memory_total_bytes": s.channel_size * channels,
        "memory_used_bytes": s.device_bytes(d),
        "hbm_channel_bytes": s.channel_size,
        "hbm": hbm,
        "poisoned": s.poisoned,
        "reclaimed_processes": s.reclaimed,
        "neuroncores": cores,
    })
}

fn empty_shared(errors: Vec<String>) -> Value {
    json!({
        "neuron_runtime_data": [],
        "neuron_hardware_info": {
            "neuron_device_count": 0,
            "neuroncore_per_device_count": 0,
            "error": errors.join("; "),
        },
        "nrt_dmem": {"source": "shared simulated devices", "devices": [], "errors": errors},
    })
}

/// One report over shared device files. A file that cannot be read, or whose figures fail
/// their check (`SharedReader::read`), contributes its error and no number.
fn shared_report(files: &[PathBuf], period: f64) -> Report {
    let mut runtimes = Vec::new();
    let mut devices = Vec::new();
    let mut errors = Vec::new();
    let mut hw: Option<(Preset, u32)> = None;
    let mut device_count = 0usize;
    let mut memory_size = 0u64;
    for f in files {
        let read = SharedReader::open(f).and_then(|r| {
            let s = r.read()?;
            r.check_pools()?;
            Ok((s, r.name().to_string()))
        });
        let (s, name) = match read {
            Ok(x) => x,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let Some(preset) = preset_of(&s) else {
            continue;
        };
        let info = preset.device_info();
        let cpd = info.cores_per_device as usize;
        let lnc = lnc_in_force(&s, preset);
        hw.get_or_insert((preset, lnc));
        memory_size = s.channel_size * info.hbm_channels as u64;
        device_count += s.devices as usize;
        for p in &s.procs {
            runtimes.push(runtime_entry(f, &name, p, cpd, lnc, period));
        }
        for d in 0..s.devices as usize {
            devices.push(device_entry(&name, &s, d, cpd, info.hbm_channels as u64));
        }
    }
    let mut hwinfo = json!({
        "neuron_device_count": device_count,
        "neuroncore_per_device_count": 0,
        "error": errors.join("; "),
    });
    if let Some((p, lnc)) = hw {
        let (kind, version, core) = device_names(p);
        hwinfo = json!({
            "neuron_device_type": kind,
            "neuron_device_version": version,
            "neuroncore_version": core,
            "neuron_device_count": device_count,
            "neuron_device_memory_size": memory_size,
            "neuroncore_per_device_count": p.device_info().cores_per_device / lnc.max(1),
            "logical_neuroncore_config": lnc,
            "error": errors.join("; "),
        });
    }
    Report {
        failed: !errors.is_empty(),
        json: json!({
            "neuron_runtime_data": runtimes,
            "neuron_hardware_info": hwinfo,
            "nrt_dmem": {
                "source": "shared simulated devices",
                "devices": devices,
                "errors": errors,
            },
        }),
    }
}

/// A shared device's figures for `stats --json` (`nrt_dmem.device_wide`): the same entries
/// the monitor reports (one place for their shape), `this_process` naming the caller's pid.
pub(crate) fn device_wide_json(
    file: &Path,
    name: &str,
    slot: Option<usize>,
    s: &Snapshot,
) -> Value {
    let (cpd, channels, lnc) = preset_of(s).map_or((layout::CORES, 1, 1), |p| {
        let i = p.device_info();
        (
            i.cores_per_device as usize,
            i.hbm_channels as u64,
            lnc_in_force(s, p),
        )
    });
    json!({
        "name": name,
        "this_process": slot.and_then(|slot| s.procs.iter().find(|p| p.slot == slot).map(|p| p.pid)),
        "neuron_runtime_data": s.procs.iter().map(|p| runtime_entry(file, name, p, cpd, lnc, 0.0)).collect::<Vec<_>>(),
        "devices": (0..s.devices as usize).map(|d| device_entry(name, s, d, cpd, channels)).collect::<Vec<_>>(),
    })
}

/// One report over the real driver's sysfs counters (aws-neuron-driver's
/// `neuron<N>/neuron_core<C>/stats/memory_usage/device_mem/<category>/{total,present,peak}`).
/// The driver does not publish per-process usage in sysfs, so `neuron_runtime_data` is empty.
fn sysfs_report(root: &Path) -> Report {
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
    let mut cores_per_device = 0;
    for nd in nds.iter().filter(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("neuron"))
    }) {
        let mut cores = Map::new();
        let mut used = 0u64;
        for c in 0..layout::CORES {
            let base = nd.join(format!("neuron_core{c}/stats/memory_usage/device_mem"));
            let Ok(rd) = std::fs::read_dir(&base) else {
                continue;
            };
            cores_per_device = cores_per_device.max(c + 1);
            let mut m = Map::new();
            for e in rd.filter_map(|e| e.ok()) {
                let cat = e.file_name().to_string_lossy().to_string();
                let total = read(e.path().join("total"));
                used = used.saturating_add(total);
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
    Report {
        failed: false,
        json: json!({
            "neuron_runtime_data": [],
            "neuron_hardware_info": {
                "neuron_device_count": devices.len(),
                "neuroncore_per_device_count": cores_per_device,
                "error": "",
            },
            "nrt_dmem": {
                "source": root.display().to_string(),
                "devices": devices,
                "errors": [],
            },
        }),
    }
}
