//! NEFF loading (docs/PERFORMANCE.md "NEFF load and its memory"): `nrt_load`'s path against
//! its floor, and the peak RSS of loading, inspecting and planning NEFFs with gigabytes of
//! weights.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nrt_core::abi::dma_mem_usage_type_t as U;
use nrt_core::sim::Preset;
use nrt_host::config::{DeviceChoice, RuntimeConfig};
use nrt_host::model_file::{self, Place};
use nrt_host::HostRuntime;
use nrt_neff::pack::{self, PackAlloc, PackModel, PackTensor};
use nrt_neff::ReadOptions;

use super::*;

/// `nrt_load`'s path against its floor, measured in one run.
#[derive(Clone, Debug)]
pub struct NeffLoad {
    /// Weight bytes of the NEFF (incompressible).
    pub weight_bytes: u64,
    /// Bytes of the NEFF file.
    pub neff_bytes: u64,
    /// Median CPU ms of a load: the streaming read, `load_model`, the weights copied into the
    /// simulated device (a fresh runtime each repetition, started untimed).
    pub load_ms: f64,
    /// Median CPU ms of the floor: the same gzip stream inflated in 256 KiB chunks, each copied
    /// into one fresh buffer of the inflated size.
    pub floor_ms: f64,
    /// load / floor, by [`paired_median_ratio`].
    pub ratio: f64,
    /// Inflate passes of the load (1: the weights streamed as the archive was walked).
    pub passes: u32,
    /// Repetitions.
    pub reps: usize,
}

/// A model of `weights` WEIGHT allocations of `each` bytes (`neff pack` writes them as zeros).
fn weights_model(weights: usize, each: u64) -> PackModel {
    PackModel {
        name: "bench-weights".into(),
        subgraphs: 1,
        allocations: (0..weights)
            .map(|i| PackAlloc {
                usage: U::DMA_MEM_USAGE_TYPE_WEIGHT,
                host: false,
                size: each,
                align: 4096,
                hint: format!("w{i}"),
            })
            .collect(),
        outputs: vec![PackTensor {
            name: "y".into(),
            dtype: nrt_neff::Dtype::Float32,
            shape: vec![4],
        }],
        ..PackModel::default()
    }
}

/// Bytes that do not compress (xorshift).
fn noise(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(n);
    v
}

/// The floor: inflate `payload` (gzip) in chunks, copying each into fresh memory, which is
/// returned (freed by the caller, untimed, as the load's device memory is).
fn floor(payload: &[u8], inflated: usize) -> Vec<u8> {
    let mut gz = flate2::bufread::GzDecoder::new(payload);
    let mut out = vec![0u8; inflated];
    let mut buf = vec![0u8; nrt_neff::stream::CHUNK];
    let mut at = 0;
    loop {
        let n = gz.read(&mut buf).expect("the floor inflates");
        if n == 0 {
            break;
        }
        out[at..at + n].copy_from_slice(&buf[..n]);
        at += n;
    }
    out.truncate(at);
    out
}

/// Measures [`NeffLoad`]: 256 MiB of weights, 7 repetitions (`quick`: 32 MiB, 3).
pub fn neff_load_vs_floor(quick: bool) -> Result<NeffLoad, String> {
    let (bytes, reps) = if quick { (32 << 20, 3) } else { (256 << 20, 7) };
    let content = noise(bytes);
    let mut w = pack::NeffWriter::new(pack::header_for("bench-weights"));
    w.members = pack::pack_members(&weights_model(1, bytes as u64)).map_err(|e| e.to_string())?;
    for (n, b) in w.members.iter_mut() {
        if n == "sg00/w0.bin" {
            *b = Some(content.clone());
        }
    }
    drop(content);
    let neff = w.finish().map_err(|e| e.to_string())?;
    let payload = &neff[nrt_neff::header::HEADER_LEN..];
    let inflated = floor(payload, w.tar().map_err(|e| e.to_string())?.len()).len();
    drop(w);
    let config = RuntimeConfig {
        device: DeviceChoice::sim(Preset::Trn2, 1),
        ..RuntimeConfig::default()
    };
    let (mut load, mut flo) = (Vec::new(), Vec::new());
    let mut passes = 0;
    for rep in 0..reps {
        let rt = HostRuntime::start(config).map_err(|e| e.to_string())?;
        let mut timed_load = || -> Result<f64, String> {
            let t = thread_cpu_ns();
            let l = model_file::load_source(
                &rt.nrt(),
                Place::Core(LogicalCore::new(0)),
                &neff.as_slice(),
                &ReadOptions::default(),
            )
            .map_err(|e| e.to_string())?;
            let ns = (thread_cpu_ns() - t) as f64;
            if let model_file::ModelFile::Neff(n) = &l.file {
                passes = n.archive.passes;
            }
            rt.nrt()
                .models()
                .unload(l.handle)
                .map_err(|e| e.to_string())?;
            Ok(ns)
        };
        let timed_floor = || {
            let t = thread_cpu_ns();
            let out = std::hint::black_box(floor(payload, inflated));
            let ns = (thread_cpu_ns() - t) as f64;
            drop(out);
            ns
        };
        // Alternate which goes first, so neither always runs on a warmer machine.
        if rep % 2 == 0 {
            load.push(timed_load()?);
            flo.push(timed_floor());
        } else {
            flo.push(timed_floor());
            load.push(timed_load()?);
        }
        rt.close().map_err(|e| e.to_string())?;
    }
    Ok(NeffLoad {
        weight_bytes: bytes as u64,
        neff_bytes: neff.len() as u64,
        ratio: paired_median_ratio(&load, &flo),
        load_ms: median(&mut load) / 1e6,
        floor_ms: median(&mut flo) / 1e6,
        passes,
        reps,
    })
}

/// Peak RSS of a process reading a NEFF.
#[derive(Clone, Debug)]
pub struct RssRun {
    /// Its peak RSS (`VmHWM`), KiB.
    pub peak_kib: u64,
    /// Wall seconds.
    pub seconds: f64,
}

/// Peak RSS of loading, inspecting and planning NEFFs of zero weights (what `neff pack`
/// writes: a few MB of file for GBs of weights).
#[derive(Clone, Debug)]
pub struct NeffRss {
    /// Weight bytes of the NEFF `nrt_load` loads.
    pub load_weight_bytes: u64,
    /// `nrt_load` of it (`neff_load`, a C-API client holding the file's bytes).
    pub nrt_load: RssRun,
    /// Weight bytes of the NEFF `neff inspect` and `plan` read.
    pub read_weight_bytes: u64,
    /// `nrt-dmem neff inspect`.
    pub inspect: RssRun,
    /// `nrt-dmem plan`.
    pub plan: RssRun,
}

/// `VmHWM` of `/proc/<pid>/status` (KiB); `None` once the process is gone.
fn vm_hwm(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Runs `cmd`, sampling its `VmHWM` every 10 ms (its own mark: unlike `ru_maxrss` it carries
/// nothing of this launcher); a child that prints `vm_hwm_kib=N` on stdout (`neff_load`, just
/// before it exits) reports its final mark itself.
fn run_peak(cmd: &mut Command) -> Result<RssRun, String> {
    let t0 = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    let mut peak = 0;
    while let Some(v) = vm_hwm(child.id()) {
        peak = peak.max(v);
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let seconds = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    for l in out.stdout.lines().map_while(Result::ok) {
        if let Some(v) = l.strip_prefix("vm_hwm_kib=").and_then(|v| v.parse().ok()) {
            peak = peak.max(v);
        }
    }
    Ok(RssRun {
        peak_kib: peak,
        seconds,
    })
}

fn sibling(name: &str) -> Result<PathBuf, String> {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .filter(|p| p.exists())
        .ok_or_else(|| {
            format!(
                "{name} is not next to this binary: cargo build --release -p nrt-dmem-cli \
                 --bin nrt-dmem && cargo build --release -p nrt-bench --bin neff_load \
                 (cargo xtask bench does)"
            )
        })
}

fn write_neff(path: &Path, weights: usize, each: u64) -> Result<(), String> {
    let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    pack::pack_to(&weights_model(weights, each), std::io::BufWriter::new(f))
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Measures [`NeffRss`]: `nrt_load` of 2 GiB of weights, `neff inspect` and `plan` of 8 GiB
/// (1 GiB weights each), with the release binaries next to this one.
pub fn neff_rss() -> Result<NeffRss, String> {
    let dmem = sibling("nrt-dmem")?;
    let loader = sibling("neff_load")?;
    let dir = std::env::temp_dir().join(format!("nrt-bench-neff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (small, big) = (dir.join("2g.neff"), dir.join("8g.neff"));
    let r = (|| {
        write_neff(&small, 2, 1 << 30)?;
        write_neff(&big, 8, 1 << 30)?;
        let nrt_load = run_peak(
            Command::new(&loader)
                .arg(&small)
                .env("NRT_DMEM_DEVICE", "sim:trn2")
                .env("NEURON_RT_LOG_LEVEL", "OFF"),
        )?;
        let inspect = run_peak(Command::new(&dmem).args(["neff", "inspect"]).arg(&big))?;
        let plan = run_peak(Command::new(&dmem).arg("plan").arg(&big))?;
        Ok(NeffRss {
            load_weight_bytes: 2 << 30,
            nrt_load,
            read_weight_bytes: 8 << 30,
            inspect,
            plan,
        })
    })();
    let _ = std::fs::remove_dir_all(&dir);
    r
}
