//! `nrt-dmem stats`: the memory report — per logical core used / limit / peak by category,
//! per model its footprint, per HBM the largest free block — as text or as neuron-monitor JSON
//! (public interfaces §5: `memory_used.neuron_runtime_used_bytes`, `usage_breakdown`,
//! `neuroncore_memory_usage`, `loaded_models`), with this project's extras under `nrt_dmem`.

use std::io::{self, Write};

use nrt_core::abi::{dma_mem_location_t, mem_aggr_index_t, mem_alloc_category_t};
use nrt_core::cstr::Printable;
use nrt_core::driver::{FreeHistogram, PoolStats};
use nrt_core::ledger::UsageBreakdown;
use nrt_core::ledger::{roll_up_aggr, roll_up_category, MonitorClass};
use nrt_core::LogicalCore;
use serde_json::{json, Map, Value};

use crate::scenario::{
    fmt_bytes, total_footprint, Category, Footprint, Session, DEVICE_CLASSES, REPORT_ROWS,
};

/// One logical core.
pub struct CoreStats {
    /// Logical index.
    pub index: i64,
    /// `(device, core)` of each physical core.
    pub tpbs: Vec<(u32, u32)>,
    /// Device bytes used.
    pub used: u64,
    /// HBM attributed to it.
    pub limit: u64,
    /// High-water mark.
    pub peak: u64,
    /// Per-usage figures.
    pub usage: UsageBreakdown,
    /// Models resident.
    pub models: usize,
}

/// One loaded model.
pub struct ModelStats {
    /// Name in the session.
    pub name: String,
    /// Handle.
    pub handle: u32,
    /// Logical core.
    pub core: i64,
    /// Device of its first physical core.
    pub device: u32,
    /// Device bytes per usage (`[22]` total).
    pub dev: [u64; 23],
    /// Host bytes per usage (`[22]` total).
    pub host: [u64; 23],
    /// Scratchpad pages held.
    pub scratchpad_pages: u32,
    /// Device and host bytes per usage of each subgraph's MODEL heap.
    pub subgraphs: Vec<Footprint>,
}

/// The whole report.
pub struct Report {
    /// What ran before it.
    pub source: String,
    /// The device in use.
    pub device: String,
    /// LNC size.
    pub lnc_size: u32,
    /// Logical cores.
    pub cores: Vec<CoreStats>,
    /// Models.
    pub models: Vec<ModelStats>,
    /// `(device, hbm, pool)` per HBM channel.
    pub hbm: Vec<(u32, u32, PoolStats)>,
    /// `(device, hbm, main pool, small-object region)` free blocks by size class, for the
    /// channels whose driver lists them.
    pub hbm_free_blocks: Vec<(u32, u32, FreeHistogram, FreeHistogram)>,
    /// `(device, pool)` host DMA pools.
    pub host_pools: Vec<(u32, PoolStats)>,
    /// Bytes in use in the driver's pools, or why they could not be read.
    pub driver_bytes: Result<u64, String>,
    /// On a shared simulated device: its name, this process's slot and the
    /// device-wide figures of every process.
    pub device_wide: Option<(String, usize, nrt_host::shared::reader::Snapshot)>,
}

/// The file of shared device `name` (in the shared device directory).
fn shared_file(name: &str) -> std::path::PathBuf {
    use nrt_host::shared::{shm_dir, FILE_PREFIX, FILE_SUFFIX};
    shm_dir().join(format!("{FILE_PREFIX}{name}{FILE_SUFFIX}"))
}

/// `stats` of a shared device without a scenario: its device-wide figures, read-only (no
/// join, no slot, no core, no model loaded; the file is unchanged). `Err` names what could
/// not be read (no such device, a damaged file).
pub fn shared_read_only(name: &str, json: bool, out: &mut dyn Write) -> Result<(), String> {
    use nrt_host::shared::reader::SharedReader;
    let path = shared_file(name);
    if !path.exists() {
        return Err(format!(
            "shared device {name}: no such shared device (no process has opened it): {}",
            path.display()
        ));
    }
    let snap = SharedReader::open(&path)
        .and_then(|r| r.read())
        .map_err(|e| format!("shared device {name}: {e}"))?;
    let io = |e: std::io::Error| e.to_string();
    if json {
        let v = json!({
            "nrt_dmem": {
                "device": format!("shared device {name}"),
                "read_only": true,
                "device_wide": super::monitor::device_wide_json(&path, name, None, &snap),
            }
        });
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        )
        .map_err(io)?;
        return Ok(());
    }
    writeln!(
        out,
        "shared device {name} ({}), read without joining it",
        path.display()
    )
    .map_err(io)?;
    for d in 0..snap.devices as usize {
        writeln!(
            out,
            "  nd{d}: {} on the device",
            fmt_bytes(snap.device_bytes(d))
        )
        .map_err(io)?;
    }
    for p in &snap.procs {
        writeln!(
            out,
            "  pid {:>8}: {:>12}{}",
            p.pid,
            fmt_bytes(p.total_bytes()),
            if p.alive {
                ""
            } else {
                "  (gone, being reclaimed)"
            }
        )
        .map_err(io)?;
    }
    if snap.procs.is_empty() {
        writeln!(out, "  (no process)").map_err(io)?;
    }
    Ok(())
}

/// Gathers the report from a live session.
pub fn collect(s: &Session, source: &str) -> Report {
    let nrt = s.nrt();
    // A scenario may have closed the runtime: the report reads what it left (docs/STATES.md).
    let ins = nrt.inspector();
    let mut cores = Vec::new();
    for v in 0..nrt.visible_logical_core_count() as i64 {
        let tpbs = ins
            .logical_core_entry(LogicalCore::from_c(v))
            .map(|v| {
                v.cores()
                    .iter()
                    .map(|p| (p.device_id, p.device_tpb_idx))
                    .collect()
            })
            .unwrap_or_default();
        let st = ins.memory_stats(LogicalCore::from_c(v)).unwrap_or_default();
        cores.push(CoreStats {
            index: v,
            tpbs,
            used: st.bytes_used,
            limit: st.bytes_limit,
            peak: st.bytes_peak,
            usage: ins
                .logical_core_usage(LogicalCore::from_c(v))
                .unwrap_or_default(),
            models: nrt
                .models()
                .on_core(LogicalCore::from_c(v), &mut [])
                .unwrap_or(0),
        });
    }
    let models = s
        .models()
        .iter()
        .map(|m| {
            // One walk of the model's heaps: the total is the subgraphs' sum.
            let subgraphs = s.subgraph_footprints(m.handle).unwrap_or_default();
            let (dev, host) = total_footprint(&subgraphs);
            let info = nrt.models().info(m.handle).unwrap_or_default();
            let device = nrt
                .logical_core_entry(LogicalCore::from_c(m.core))
                .ok()
                .and_then(|v| v.cores().first().map(|p| p.device_id))
                .unwrap_or(0);
            ModelStats {
                name: m.name.clone(),
                handle: m.handle.h_model().id,
                core: m.core,
                device,
                dev,
                host,
                scratchpad_pages: info.scratchpad_pages,
                subgraphs,
            }
        })
        .collect();
    let mut hbm = Vec::new();
    let mut hbm_free_blocks = Vec::new();
    let mut host_pools = Vec::new();
    let drv = s.runtime().driver();
    for d in 0..nrt.num_devices() {
        for h in 0..nrt.geom(d).channels {
            if let Ok(p) = drv.pool_stats(d, false, h) {
                hbm.push((d, h, p));
            }
            if let Ok((main, small)) = drv.free_histogram(d, h) {
                hbm_free_blocks.push((d, h, main, small));
            }
        }
        if let Ok(p) = drv.pool_stats(d, true, 0) {
            host_pools.push((d, p));
        }
    }
    Report {
        source: source.to_string(),
        device: s.runtime().config().device.to_string(),
        lnc_size: nrt.logical_core_size(),
        cores,
        models,
        hbm,
        hbm_free_blocks,
        host_pools,
        driver_bytes: nrt.driver_pool_bytes_in_use().map_err(|e| e.to_string()),
        device_wide: s
            .runtime()
            .shared()
            .map(|d| (d.name().to_string(), d.slot(), d.snapshot())),
    }
}

/// neuron-monitor's per-core classes (device): rings count as `runtime_memory`.
fn device_classes(dev: &[u64; 23]) -> Map<String, Value> {
    let mut m = Map::new();
    for (name, c) in DEVICE_CLASSES.iter().take(5) {
        m.insert((*name).into(), json!(c.of(dev)));
    }
    m
}

/// neuron-monitor's `memory_used_bytes` of a model or subgraph: totals and class breakdowns.
fn memory_used(dev: &[u64; 23], host: &[u64; 23]) -> Value {
    json!({
        "host": host[22],
        "neuron_device": dev[22],
        "usage_breakdown": {
            "host": host_classes(host),
            "neuron_device": device_classes(dev),
        }
    })
}

/// neuron-monitor's host classes: `tensors`, `constants`, `dma_buffers`, and everything else
/// as `application_memory`.
/// (through each usage type's host category).
fn host_classes(host: &[u64; 23]) -> Map<String, Value> {
    let by = roll_up_category(host, dma_mem_location_t::HOST_DRAM);
    let t = by[mem_alloc_category_t::TENSORS_HOST as usize];
    let c = by[mem_alloc_category_t::CONSTANTS_HOST as usize];
    let d = by[mem_alloc_category_t::DMA_RINGS_HOST as usize];
    let mut m = Map::new();
    m.insert(
        "application_memory".into(),
        json!(host[22].saturating_sub(t + c + d)),
    );
    m.insert("constants".into(), json!(c));
    m.insert("dma_buffers".into(), json!(d));
    m.insert("tensors".into(), json!(t));
    m
}

/// A core's device bytes per aggregate class (`dmem_usage_type_to_aggr_index`'s 12 classes,
/// spec §3.3; names in docs/LAYOUT.md).
fn aggregate_classes(dev: &[u64; 23]) -> Map<String, Value> {
    mem_aggr_index_t::all()
        .zip(roll_up_aggr(dev))
        .map(|(c, bytes)| (c.short_name().to_ascii_lowercase(), json!(bytes)))
        .collect()
}

/// A free-block histogram as JSON: one entry per non-empty size class.
fn histogram_json(h: &FreeHistogram) -> Vec<Value> {
    (0..FreeHistogram::CLASSES)
        .filter(|i| h.blocks[*i] > 0)
        .map(|i| {
            json!({
                "min_bytes": FreeHistogram::class_min(i),
                "max_bytes": FreeHistogram::class_min(i + 1),
                "blocks": h.blocks[i],
                "bytes": h.bytes[i],
            })
        })
        .collect()
}

fn pool_json(p: &PoolStats) -> Value {
    json!({
        "capacity_bytes": p.capacity,
        "free_bytes": p.free,
        "largest_free_block_bytes": p.largest_free,
        "fragmentation_percent": p.fragmentation_permille() as f64 / 10.0,
        "allocations": p.allocations,
    })
}

/// The report as JSON: one runtime's `report.memory_used` in neuron-monitor's shape, plus an
/// `nrt_dmem` object with what neuron-monitor does not show (limit, peak, largest free block).
pub fn to_json(r: &Report) -> Value {
    let mut host_total = [0u64; 23];
    let mut per_core = Map::new();
    let mut device_total = 0u64;
    let mut extras = Map::new();
    for c in &r.cores {
        for (i, v) in c.usage.host.iter().enumerate() {
            host_total[i] += v;
        }
        device_total += c.usage.device[22];
        per_core.insert(
            c.index.to_string(),
            Value::Object(device_classes(&c.usage.device)),
        );
        let mut peak = device_classes(&c.usage.device_peak);
        peak.insert("total".into(), json!(c.peak));
        extras.insert(
            c.index.to_string(),
            json!({
                "used_bytes": c.used,
                "limit_bytes": c.limit,
                "peak_bytes": c.peak,
                "peak_breakdown": peak,
                "dma_rings_bytes": Category::DmaRings.of(&c.usage.device),
                "aggregate_classes": aggregate_classes(&c.usage.device),
                "physical_cores": c.tpbs.iter().map(|(d, t)| format!("nd{d}:nc{t}")).collect::<Vec<_>>(),
                "models": c.models,
            }),
        );
    }
    let models: Vec<Value> = r
        .models
        .iter()
        .map(|m| {
            json!({
                "name": m.name,
                "uuid": format!("{:016x}{:016x}", nrt_core::model::name_key(&m.name), m.handle as u64),
                "model_id": m.handle,
                "neuroncore": m.core,
                "neuron_device": m.device,
                "subgraphs": m.subgraphs.iter().enumerate().map(|(i, (dev, host))| {
                    (format!("sg_{i:02}"), json!({ "memory_used_bytes": memory_used(dev, host) }))
                }).collect::<serde_json::Map<_, _>>(),
                "memory_used_bytes": memory_used(&m.dev, &m.host),
                "nrt_dmem": { "scratchpad_pages": m.scratchpad_pages },
            })
        })
        .collect();
    json!({
        "memory_used": {
            "neuron_runtime_used_bytes": {
                "host": host_total[22],
                "neuron_device": device_total,
                "usage_breakdown": {
                    "host": host_classes(&host_total),
                    "neuroncore_memory_usage": per_core,
                }
            },
            "loaded_models": models,
        },
        "nrt_dmem": {
            "source": r.source,
            "device": r.device,
            "lnc_size": r.lnc_size,
            "neuroncores": extras,
            "hbm": r.hbm.iter().map(|(d, h, p)| {
                let mut v = pool_json(p);
                if let Value::Object(m) = &mut v {
                    m.insert("neuron_device".into(), json!(d));
                    m.insert("hbm".into(), json!(h));
                    // The small-object region apart (public ABI §3): it serves only requests
                    // of at most 512 KiB, so its block is never the largest free block.
                    m.insert("small_object_free_bytes".into(), json!(p.small_object_free));
                    m.insert(
                        "small_object_largest_free_block_bytes".into(),
                        json!(p.small_object_largest_free),
                    );
                    if let Some((_, _, main, small)) =
                        r.hbm_free_blocks.iter().find(|f| (f.0, f.1) == (*d, *h))
                    {
                        m.insert(
                            "free_blocks".into(),
                            json!({ "main": histogram_json(main), "small_object": histogram_json(small) }),
                        );
                    }
                }
                v
            }).collect::<Vec<_>>(),
            "host_dma_pool": r.host_pools.iter().map(|(d, p)| {
                let mut v = pool_json(p);
                if let Value::Object(m) = &mut v {
                    m.insert("neuron_device".into(), json!(d));
                }
                v
            }).collect::<Vec<_>>(),
            "driver_bytes_in_use": match &r.driver_bytes {
                Ok(b) => serde_json::json!(b),
                Err(e) => serde_json::json!({ "error": e }),
            },
            "device_wide": r.device_wide.as_ref().map(|(name, slot, snap)| {
                super::monitor::device_wide_json(&shared_file(name), name, Some(*slot), snap)
            }),
        }
    })
}

/// The report as text.
pub fn write_text(r: &Report, out: &mut dyn Write, color: bool) -> io::Result<()> {
    let h = |t: &str| super::paint(color, super::BOLD, t);
    writeln!(
        out,
        "{}",
        h(&format!(
            "nrt-dmem stats · {} · LNC {} · {} logical cores · after {} (before teardown)",
            r.device,
            r.lnc_size,
            r.cores.len(),
            r.source
        ))
    )?;
    for c in &r.cores {
        let phys: Vec<String> = c.tpbs.iter().map(|(d, t)| format!("nd{d}:nc{t}")).collect();
        writeln!(out)?;
        writeln!(
            out,
            "{}  used {} of {} ({:.1}%), peak {}",
            h(&format!(
                "core {} ({}, {} model{})",
                c.index,
                phys.join("+"),
                c.models,
                if c.models == 1 { "" } else { "s" }
            )),
            fmt_bytes(c.used),
            fmt_bytes(c.limit),
            if c.limit == 0 {
                0.0
            } else {
                c.used as f64 * 100.0 / c.limit as f64
            },
            fmt_bytes(c.peak)
        )?;
        writeln!(
            out,
            "  {:<26} {:>12} {:>12} {:>12}",
            "category", "device", "peak", "host"
        )?;
        for (name, cls) in REPORT_ROWS {
            let cat = cls;
            let (d, p, ho) = (
                cat.of(&c.usage.device),
                cat.of(&c.usage.device_peak),
                cat.of(&c.usage.host),
            );
            writeln!(
                out,
                "  {:<26} {:>12} {:>12} {:>12}",
                name,
                fmt_bytes(d),
                fmt_bytes(p),
                fmt_bytes(ho)
            )?;
        }
    }
    writeln!(out)?;
    writeln!(out, "{}", h("models"))?;
    writeln!(
        out,
        "  {:<22} {:>4} {:>6} {:>12} {:>12} {:>12} {:>12} {:>10}",
        "name", "core", "handle", "device", "constants", "model_code", "host", "scratch pg"
    )?;
    if r.models.is_empty() {
        writeln!(out, "  (none loaded)")?;
    }
    for m in &r.models {
        writeln!(
            out,
            "  {:<22} {:>4} {:>6} {:>12} {:>12} {:>12} {:>12} {:>10}",
            Printable(&m.name),
            m.core,
            m.handle,
            fmt_bytes(m.dev[22]),
            fmt_bytes(Category::Class(MonitorClass::Constants).of(&m.dev)),
            fmt_bytes(Category::Class(MonitorClass::ModelCode).of(&m.dev)),
            fmt_bytes(m.host[22]),
            m.scratchpad_pages
        )?;
    }
    writeln!(out)?;
    writeln!(out, "{}", h("HBM"))?;
    writeln!(
        out,
        "  {:<10} {:>12} {:>12} {:>20} {:>14} {:>18} {:>21}",
        "pool",
        "capacity",
        "free",
        "largest free block",
        "fragmentation",
        "small-object free",
        "small-object largest"
    )?;
    let pools = r
        .hbm
        .iter()
        .map(|(d, hb, p)| (format!("nd{d} hbm{hb}"), p, true));
    let host = r
        .host_pools
        .iter()
        .map(|(d, p)| (format!("nd{d} host"), p, false));
    for (name, p, small_region) in pools.chain(host) {
        let (small_free, small_largest) = if small_region {
            (
                fmt_bytes(p.small_object_free),
                fmt_bytes(p.small_object_largest_free),
            )
        } else {
            ("-".into(), "-".into())
        };
        writeln!(
            out,
            "  {:<10} {:>12} {:>12} {:>20} {:>13.1}% {:>18} {:>21}",
            name,
            fmt_bytes(p.capacity),
            fmt_bytes(p.free),
            fmt_bytes(p.largest_free),
            p.fragmentation_permille() as f64 / 10.0,
            small_free,
            small_largest
        )?;
    }
    writeln!(
        out,
        "  largest free block: the largest request above 512 KiB that would succeed now; \
         requests of at most 512 KiB also fit the small-object region's largest block"
    )?;
    for (d, h, main, small) in &r.hbm_free_blocks {
        let mut line = String::new();
        // The OOM report's formatter: one place for how free blocks read.
        let _ = nrt_core::oom::write_free_histogram(&mut line, main, small);
        write!(out, "  nd{d} hbm{h} {}", line.trim_start())?;
    }
    if let Some((name, slot, snap)) = &r.device_wide {
        // On a shared device the pools' figures above are device-wide; this process's own
        // bytes are its slot's.
        writeln!(out)?;
        writeln!(out, "{}", h(&format!("device-wide (shared device {name})")))?;
        for d in 0..snap.devices as usize {
            writeln!(
                out,
                "  nd{d}: {} on the device",
                fmt_bytes(snap.device_bytes(d))
            )?;
        }
        for p in &snap.procs {
            writeln!(
                out,
                "  pid {:>8}: {:>12}{}{}",
                p.pid,
                fmt_bytes(p.total_bytes()),
                if p.slot == *slot {
                    "  (this process)"
                } else {
                    ""
                },
                if p.alive {
                    ""
                } else {
                    "  (gone, being reclaimed)"
                }
            )?;
        }
    } else {
        match &r.driver_bytes {
            Ok(b) => writeln!(out, "  driver holds {} for this runtime", fmt_bytes(*b))?,
            Err(e) => writeln!(out, "  driver pools unreadable: {e}")?,
        }
    }
    Ok(())
}
