//! The report as Prometheus metrics (OpenMetrics text): the names and labels AWS's
//! neuron-monitor-prometheus.py makes of the same report — so its Grafana dashboard and the
//! CloudWatch agent's Neuron scrape find them — and this project's extras under `nrt_dmem_`
//! (docs/SHARED_DEVICE.md "Prometheus").

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;
use std::sync::atomic::AtomicU64;

type Labels = Vec<(String, String)>;
type IntGauges = Family<Labels, Gauge<i64>>;
type FloatGauges = Family<Labels, Gauge<f64, AtomicU64>>;

/// The content type of [`encode_report`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// neuron-monitor-prometheus.py's instance labels (`get_instance_labels`).
fn instance_labels(i: &Value) -> Labels {
    [
        ("instance_name", "instance_name"),
        ("instance_id", "instance_id"),
        ("instance_type", "instance_type"),
        ("availability_zone", "instance_availability_zone"),
        ("region", "instance_region"),
        ("subnet_id", "subnet_id"),
    ]
    .iter()
    .map(|(label, key)| (label.to_string(), i[key].as_str().unwrap_or("").to_string()))
    .collect()
}

fn with(base: &Labels, more: &[(&str, String)]) -> Labels {
    let mut l = base.clone();
    l.extend(more.iter().map(|(k, v)| (k.to_string(), v.clone())));
    l
}

fn u(v: &Value) -> i64 {
    v.as_u64()
        .map_or(0, |x| i64::try_from(x).unwrap_or(i64::MAX))
}

struct Families {
    reg: Registry,
}

impl Families {
    fn int(&mut self, name: &str, help: &str) -> IntGauges {
        let f = IntGauges::default();
        self.reg.register(name, help, f.clone());
        f
    }
    fn float(&mut self, name: &str, help: &str) -> FloatGauges {
        let f = FloatGauges::default();
        self.reg.register(name, help, f.clone());
        f
    }
}

/// The report's metrics, encoded.
pub fn encode_report(r: &Value) -> Result<String, std::fmt::Error> {
    let mut f = Families {
        reg: Registry::default(),
    };
    let inst = instance_labels(&r["instance_info"]);

    // Instance and hardware: neuron-monitor-prometheus.py's Info metrics (value 1).
    f.int("instance_info", "EC2 instance information")
        .get_or_create(&inst)
        .set(1);
    let hw = &r["neuron_hardware_info"];
    f.int("neuron_hardware_info", "Neuron Hardware Information")
        .get_or_create(&with(
            &inst,
            &[
                ("neuron_device_count", hw["neuron_device_count"].to_string()),
                (
                    "neuroncore_per_device_count",
                    hw["neuroncore_per_device_count"].to_string(),
                ),
            ],
        ))
        .set(1);

    // Per process: memory_used (only for a process without an `error`, as the script does).
    let used = f.int(
        "neuron_runtime_memory_used_bytes",
        "Runtime memory used bytes",
    );
    const CLASSES: [&str; 5] = [
        "constants",
        "model_code",
        "model_shared_scratchpad",
        "runtime_memory",
        "tensors",
    ];
    let per_core: Vec<IntGauges> = CLASSES
        .iter()
        .map(|c| {
            f.int(
                &format!("neuroncore_memory_usage_{c}"),
                &format!("NeuronCore memory utilization for {c}"),
            )
        })
        .collect();
    let proc_info = f.int(
        "nrt_dmem_process_info",
        "A process on a shared simulated device: its pid, tag, device and slot (1 = alive, 0 = \
         gone and being reclaimed)",
    );
    for p in r["neuron_runtime_data"].as_array().into_iter().flatten() {
        let tag = p["neuron_runtime_tag"].as_str().unwrap_or("").to_string();
        let x = &p["nrt_dmem"];
        proc_info
            .get_or_create(&vec![
                ("pid".into(), p["pid"].to_string()),
                ("runtime_tag".into(), tag.clone()),
                ("device".into(), x["device"].as_str().unwrap_or("").into()),
                ("slot".into(), x["slot"].to_string()),
            ])
            .set(i64::from(x["alive"] == true));
        if p["error"].as_str() != Some("") {
            continue;
        }
        let m = &p["report"]["memory_used"];
        if m["error"].as_str() != Some("") {
            continue;
        }
        let labels = with(&inst, &[("runtime_tag", tag)]);
        let b = &m["neuron_runtime_used_bytes"];
        for loc in ["host", "neuron_device"] {
            used.get_or_create(&with(&labels, &[("memory_location", loc.into())]))
                .set(u(&b[loc]));
        }
        for (nc, row) in b["usage_breakdown"]["neuroncore_memory_usage"]
            .as_object()
            .into_iter()
            .flatten()
        {
            for (c, fam) in CLASSES.iter().zip(&per_core) {
                // The script sets `memory_location` to Python's None on these.
                fam.get_or_create(&with(
                    &labels,
                    &[
                        ("memory_location", "None".into()),
                        ("neuroncore", nc.clone()),
                    ],
                ))
                .set(u(&row[*c]));
            }
        }
    }

    // System: memory_info and vcpu_usage, as the script names them.
    let sys = &r["system_data"];
    let mi = &sys["memory_info"];
    if mi["error"].as_str() == Some("") {
        for (name, key) in [
            ("system_memory_total_bytes", "memory_total_bytes"),
            ("system_memory_used_bytes", "memory_used_bytes"),
            ("system_swap_total_bytes", "swap_total_bytes"),
            ("system_swap_used_bytes", "swap_used_bytes"),
        ] {
            f.int(name, &format!("System {}", key.replace('_', " ")))
                .get_or_create(&inst)
                .set(u(&mi[key]));
        }
    }
    let vc = &sys["vcpu_usage"];
    if vc["error"].as_str() == Some("") {
        f.int("system_vcpu_count", "System vCPU count")
            .get_or_create(&inst)
            .set(vc["usage_data"].as_object().map_or(0, |m| m.len() as i64));
        let ratio = f.float("system_vcpu_usage_ratio", "System CPU utilization ratio");
        let a = &vc["average_usage"];
        let sum = |ks: &[&str]| {
            ks.iter()
                .map(|k| a[*k].as_f64().unwrap_or(0.0))
                .sum::<f64>()
                .min(100.0)
                / 100.0
        };
        ratio
            .get_or_create(&with(&inst, &[("usage_type", "user".into())]))
            .set(sum(&["user", "nice"]));
        ratio
            .get_or_create(&with(&inst, &[("usage_type", "system".into())]))
            .set(sum(&["system", "io_wait", "irq", "soft_irq"]));
    }

    // This project's extras.
    let x = &r["nrt_dmem"];
    let total = f.int(
        "nrt_dmem_device_memory_total_bytes",
        "HBM bytes of a device",
    );
    let dev_used = f.int(
        "nrt_dmem_device_memory_used_bytes",
        "HBM bytes in use on a device, every process",
    );
    let core_bytes = f.int(
        "nrt_dmem_neuroncore_memory_bytes",
        "Bytes in use per physical NeuronCore and driver category",
    );
    let core_peak = f.int(
        "nrt_dmem_neuroncore_memory_peak_bytes",
        "High-water mark per physical NeuronCore and driver category",
    );
    let hbm_free = f.int("nrt_dmem_hbm_free_bytes", "Free bytes of an HBM channel");
    let hbm_largest = f.int(
        "nrt_dmem_hbm_largest_free_block_bytes",
        "The largest free block of an HBM channel (the largest request that fits now)",
    );
    let reclaimed = f.int(
        "nrt_dmem_reclaimed_processes",
        "Dead processes whose memory was reclaimed since the device's file was (re)created",
    );
    for d in x["devices"].as_array().into_iter().flatten() {
        let dev = vec![(
            "device".to_string(),
            d["name"].as_str().unwrap_or("").into(),
        )];
        total.get_or_create(&dev).set(u(&d["memory_total_bytes"]));
        dev_used.get_or_create(&dev).set(u(&d["memory_used_bytes"]));
        if let Some(n) = d["reclaimed_processes"].as_u64() {
            reclaimed
                .get_or_create(&dev)
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        for (c, cats) in d["neuroncores"].as_object().into_iter().flatten() {
            for (cat, v) in cats.as_object().into_iter().flatten() {
                let l = with(
                    &dev,
                    &[("neuroncore", c.clone()), ("category", cat.clone())],
                );
                core_bytes.get_or_create(&l).set(u(&v["total"]));
                core_peak.get_or_create(&l).set(u(&v["peak"]));
            }
        }
        for h in d["hbm"].as_array().into_iter().flatten() {
            let l = with(&dev, &[("hbm", h["index"].to_string())]);
            hbm_free.get_or_create(&l).set(u(&h["free_bytes"]));
            hbm_largest
                .get_or_create(&l)
                .set(u(&h["largest_free_block_bytes"]));
        }
    }
    let errors = x["errors"].as_array().map_or(0, |e| e.len() as i64);
    f.int(
        "nrt_dmem_monitor_errors",
        "Devices the last report could not read or whose figures it refused (see the JSON \
         report's nrt_dmem.errors)",
    )
    .get_or_create(&Vec::new())
    .set(errors);

    let mut out = String::new();
    encode(&mut out, &f.reg)?;
    Ok(out)
}
