//! The host's figures neuron-monitor reports under `system_data` (`memory_info` from
//! `/proc/meminfo`, `vcpu_usage` from `/proc/stat`) and its `instance_info` (from the DMI
//! table an EC2 instance's firmware fills: no network query).

use std::path::Path;
use std::time::Instant;

use serde_json::{json, Map, Value};

/// One reading of `/proc/stat`: per vCPU the jiffies of user, nice, system, idle, iowait,
/// irq, softirq (and steal, counted as busy), and the context switches.
#[derive(Clone, Debug, Default)]
pub struct CpuSample {
    cpus: Vec<[u64; 8]>,
    total: [u64; 8],
    ctxt: u64,
    at: Option<Instant>,
}

/// Reads `/proc/stat` (under `root`, `/proc` by default).
pub fn cpu_sample(proc_root: &Path) -> Result<CpuSample, String> {
    let text = std::fs::read_to_string(proc_root.join("stat"))
        .map_err(|e| format!("{}/stat: {e}", proc_root.display()))?;
    let mut s = CpuSample {
        at: Some(Instant::now()),
        ..CpuSample::default()
    };
    for line in text.lines() {
        let mut w = line.split_ascii_whitespace();
        let Some(key) = w.next() else { continue };
        if key == "ctxt" {
            s.ctxt = w.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        } else if let Some(rest) = key.strip_prefix("cpu") {
            let mut v = [0u64; 8];
            for (slot, x) in v.iter_mut().zip(w.by_ref()) {
                *slot = x.parse().unwrap_or(0);
            }
            if rest.is_empty() {
                s.total = v;
            } else if rest.parse::<u32>().is_ok() {
                s.cpus.push(v);
            }
        }
    }
    if s.cpus.is_empty() {
        return Err(format!("{}/stat lists no vCPU", proc_root.display()));
    }
    Ok(s)
}

/// Percentages of one vCPU's jiffies between two readings (neuron-monitor's fields).
fn usage(now: &[u64; 8], before: &[u64; 8]) -> Value {
    let d: Vec<u64> = now
        .iter()
        .zip(before)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let all: u64 = d.iter().sum();
    let pct = |v: u64| {
        if all == 0 {
            0.0
        } else {
            (v as f64 * 10_000.0 / all as f64).round() / 100.0
        }
    };
    json!({
        "user": pct(d[0]),
        "nice": pct(d[1]),
        "system": pct(d[2] + d[7]),
        "idle": pct(d[3]),
        "io_wait": pct(d[4]),
        "irq": pct(d[5]),
        "soft_irq": pct(d[6]),
    })
}

/// neuron-monitor's `vcpu_usage` group over the period between `before` and `now` (the
/// first report, with no reading before it, covers the time since boot).
pub fn vcpu_usage(now: &CpuSample, before: Option<&CpuSample>, since_boot: f64) -> Value {
    let zero = CpuSample::default();
    let b = before.unwrap_or(&zero);
    let period = match (now.at, b.at) {
        (Some(n), Some(p)) => n.duration_since(p).as_secs_f64(),
        _ => since_boot,
    };
    let per: Map<String, Value> = now
        .cpus
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let prev = b.cpus.get(i).copied().unwrap_or_default();
            (i.to_string(), usage(c, &prev))
        })
        .collect();
    json!({
        "period": period,
        "average_usage": usage(&now.total, &b.total),
        "usage_data": per,
        "context_switch_count": now.ctxt.saturating_sub(b.ctxt),
        "error": "",
    })
}

/// neuron-monitor's `memory_info` group from `/proc/meminfo` (used = total − available).
pub fn memory_info(proc_root: &Path, period: f64) -> Value {
    let text = match std::fs::read_to_string(proc_root.join("meminfo")) {
        Ok(t) => t,
        Err(e) => {
            return json!({
                "period": period,
                "memory_total_bytes": 0, "memory_used_bytes": 0,
                "swap_total_bytes": 0, "swap_used_bytes": 0,
                "error": format!("{}/meminfo: {e}", proc_root.display()),
            })
        }
    };
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.split_ascii_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib.saturating_mul(1024))
    };
    let total = field("MemTotal");
    let swap = field("SwapTotal");
    json!({
        "period": period,
        "memory_total_bytes": total,
        "memory_used_bytes": total.saturating_sub(field("MemAvailable")),
        "swap_total_bytes": swap,
        "swap_used_bytes": swap.saturating_sub(field("SwapFree")),
        "error": "",
    })
}

/// Seconds since boot (`/proc/uptime`), the period of a first `vcpu_usage`.
pub fn uptime(proc_root: &Path) -> f64 {
    std::fs::read_to_string(proc_root.join("uptime"))
        .ok()
        .and_then(|t| t.split_ascii_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// neuron-monitor's `instance_info`. On EC2 the firmware's DMI table names the vendor
/// (`Amazon EC2`), the instance type (`product_name`) and the instance id
/// (`board_asset_tag`); the zone, region, AMI and subnet come only from the instance metadata
/// service, which this monitor does not query. Off EC2 every field is empty and `error` says
/// so, as neuron-monitor's does.
pub fn instance_info(dmi: &Path) -> Value {
    let read = |f: &str| {
        std::fs::read_to_string(dmi.join(f))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let vendor = read("sys_vendor");
    let on_ec2 = vendor == "Amazon EC2";
    let (id, kind, error) = if on_ec2 {
        (
            read("board_asset_tag"),
            read("product_name"),
            "the availability zone, region, AMI and subnet come from the instance metadata \
             service, which nrt-dmem monitor does not query"
                .to_string(),
        )
    } else {
        (
            String::new(),
            String::new(),
            format!(
                "not an EC2 instance (DMI vendor {:?}): no instance information",
                if vendor.is_empty() {
                    "unknown"
                } else {
                    &vendor
                }
            ),
        )
    };
    json!({
        "instance_name": "",
        "instance_id": id,
        "instance_type": kind,
        "instance_availability_zone": "",
        "instance_availability_zone_id": "",
        "instance_region": "",
        "ami_id": "",
        "subnet_id": "",
        "error": error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcpu_percentages_come_from_the_jiffies_between_two_readings() {
        let dir = std::env::temp_dir().join(format!("nrt-sys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("stat"),
            "cpu 10 0 10 80 0 0 0 0\ncpu0 10 0 10 80 0 0 0 0\nctxt 100\n",
        )
        .unwrap();
        let a = cpu_sample(&dir).unwrap();
        std::fs::write(
            dir.join("stat"),
            "cpu 40 0 20 140 0 0 0 0\ncpu0 40 0 20 140 0 0 0 0\nctxt 150\n",
        )
        .unwrap();
        let b = cpu_sample(&dir).unwrap();
        let v = vcpu_usage(&b, Some(&a), 0.0);
        assert_eq!(v["average_usage"]["user"], 30.0);
        assert_eq!(v["average_usage"]["system"], 10.0);
        assert_eq!(v["average_usage"]["idle"], 60.0);
        assert_eq!(v["usage_data"]["0"]["user"], 30.0);
        assert_eq!(v["context_switch_count"], 50);
        std::fs::write(dir.join("stat"), "intr 1\n").unwrap();
        assert!(cpu_sample(&dir).unwrap_err().contains("no vCPU"));
        std::fs::write(
            dir.join("meminfo"),
            "MemTotal: 1000 kB\nMemAvailable: 250 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",
        )
        .unwrap();
        let m = memory_info(&dir, 1.0);
        assert_eq!(m["memory_total_bytes"], 1_024_000);
        assert_eq!(m["memory_used_bytes"], 768_000);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn off_ec2_instance_info_is_empty_with_its_error() {
        let v = instance_info(Path::new("/nonexistent-dmi"));
        assert_eq!(v["instance_id"], "");
        assert!(v["error"].as_str().unwrap().contains("not an EC2 instance"));
    }
}
