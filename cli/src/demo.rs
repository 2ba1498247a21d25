//! `nrt-dmem demo`: the tour a newcomer runs first, in one screen. On the simulated trn2 it
//! loads the shipped model manifests (three onto logical core 0, the rest one per core),
//! allocates IO tensors on every logical core and executes each model (input bytes in, output
//! bytes back, compared), unloads the second model of core 0 and shows that exactly its bytes
//! went, provokes a device OOM and shows libnrt's table, then tears down to zero bytes.

use std::io::Write;

use nrt_core::tensor::Placement;
use nrt_core::LogicalCore;

use super::{paint, CliError, Ui, BOLD, GREEN, RED};
use crate::scenario::{fmt_bytes, ManifestRef, Session, REPORT_ROWS};
use nrt_host::manifest::Manifest;

/// The shipped manifests the demo loads, embedded so the binary runs from anywhere:
/// `(file, text, logical core before wrapping to the visible count)`.
const MODELS: [(&str, &str, i64); 6] = [
    (
        "resnet50.json",
        include_str!("../../examples/models/resnet50.json"),
        0,
    ),
    (
        "bert-base.json",
        include_str!("../../examples/models/bert-base.json"),
        0,
    ),
    (
        "gpsimd-topk.json",
        include_str!("../../examples/models/gpsimd-topk.json"),
        0,
    ),
    (
        "llama3-8b-tp8-shard.json",
        include_str!("../../examples/models/llama3-8b-tp8-shard.json"),
        1,
    ),
    (
        "sd-unet.json",
        include_str!("../../examples/models/sd-unet.json"),
        2,
    ),
    (
        "custom-op-3libs.json",
        include_str!("../../examples/models/custom-op-3libs.json"),
        3,
    ),
];

/// Declared tensor name → session tensor name.
type Binds = Vec<(String, String)>;

/// Index in [`MODELS`] of the model unloaded from core 0 (the second of the three there on
/// a device with four or more logical cores).
const MIDDLE: usize = 1;

struct Out<'a> {
    w: &'a mut dyn Write,
    color: bool,
    /// `-q`: only failed checks and the closing verdict.
    quiet: bool,
    checks: usize,
    failed: usize,
}

impl Out<'_> {
    fn write(&mut self, s: &str) -> Result<(), CliError> {
        writeln!(self.w, "{s}").map_err(CliError::output)
    }
    /// A line of the narrative (not shown with `-q`).
    fn line(&mut self, s: &str) -> Result<(), CliError> {
        if self.quiet {
            return Ok(());
        }
        self.write(s)
    }
    fn heading(&mut self, s: &str) -> Result<(), CliError> {
        let t = paint(self.color, BOLD, s);
        self.line(&t)
    }
    /// A checked claim, marked ✓ or ✗; a failed one is shown even with `-q`.
    fn verdict(&mut self, good: bool, text: &str) -> Result<(), CliError> {
        self.checks += 1;
        let mark = if good {
            paint(self.color, GREEN, "✓")
        } else {
            self.failed += 1;
            paint(self.color, RED, "✗")
        };
        let l = format!("   {mark} {text}");
        if good {
            self.line(&l)
        } else {
            self.write(&l)
        }
    }
    /// The exit code, after the one-line summary `-q` leaves.
    fn finish(&mut self) -> Result<i32, CliError> {
        if self.quiet {
            let t = format!(
                "demo: {} of {} checks held",
                self.checks - self.failed,
                self.checks
            );
            self.write(&t)?;
        }
        Ok(if self.failed == 0 { 0 } else { 1 })
    }
}

fn fail(msg: impl std::fmt::Display) -> CliError {
    CliError {
        code: 1,
        message: format!("demo: {msg}"),
    }
}

/// Runs the demo on `s`, narrating to `out`. With `full`, it also provokes the OOM and closes
/// the runtime at the end; without, it stops after the unload (the workload `stats` reports
/// on). Exit code 0 when every check held.
pub fn run(s: &mut Session, out: &mut dyn Write, ui: &Ui, full: bool) -> Result<i32, CliError> {
    let mut o = Out {
        w: out,
        color: ui.color,
        quiet: ui.quiet,
        checks: 0,
        failed: 0,
    };
    let nrt = s.nrt();
    let g = nrt.geom(0);
    let ncores = nrt.visible_logical_core_count().max(1) as i64;
    o.heading(&format!(
        "nrt-dmem demo · {} ({} device{}: {} NeuronCores, {} HBM × {}) · LNC {} → {} logical cores",
        s.runtime().config().device,
        nrt.num_devices(),
        if nrt.num_devices() == 1 { "" } else { "s" },
        g.cores,
        g.channels,
        fmt_bytes(g.channel_size),
        nrt.logical_core_size(),
        ncores
    ))?;

    // 1. Load.
    o.line("")?;
    let on_core0 = MODELS.iter().filter(|m| m.2 % ncores == 0).count();
    o.heading(&format!(
        "1. Load models — {} share logical core 0",
        count_word(on_core0)
    ))?;
    o.line(&format!(
        "   {:<4} {:<22} {:>6} {:>12} {:>12}",
        "core", "model", "handle", "device", "host"
    ))?;
    let mut loaded: Vec<(String, i64, ManifestRef)> = Vec::new();
    for (file, text, core) in MODELS {
        let m: ManifestRef = std::rc::Rc::new(
            Manifest::parse(text.as_bytes())
                .map_err(|e| fail(format!("examples/models/{file}: {e}")))?,
        );
        let core = core % ncores;
        let h = s
            .load(&m, core, &m.name)
            .map_err(|e| fail(format!("loading {file} onto core {core}: {e}")))?;
        let (dev, host) = s.footprint(h).map_err(fail)?;
        o.line(&format!(
            "   {:<4} {:<22} {:>6} {:>12} {:>12}",
            core,
            m.name,
            h.h_model().id,
            fmt_bytes(dev[22]),
            fmt_bytes(host[22])
        ))?;
        loaded.push((m.name.clone(), core, m));
    }

    // 2. Tensors and execution.
    o.line("")?;
    o.heading("2. IO tensors on every logical core, then execute (bytes in → bytes back)")?;
    let mut per_core = vec![(0usize, 0u64); ncores as usize];
    let mut binds: Vec<(Binds, Binds)> = Vec::new();
    for (name, core, m) in &loaded {
        let mut b = (Vec::new(), Vec::new());
        for (decls, side) in [(&m.inputs, &mut b.0), (&m.outputs, &mut b.1)] {
            for d in decls.iter() {
                let tn = format!("{name}:{}", d.name);
                s.alloc_tensor(&tn, Placement::Device, *core, d.size)
                    .map_err(|e| fail(format!("tensor {tn}: {e}")))?;
                per_core[*core as usize].0 += 1;
                per_core[*core as usize].1 += d.size;
                side.push((d.name.clone(), tn));
            }
        }
        binds.push(b);
    }
    let summary: Vec<String> = per_core
        .iter()
        .enumerate()
        .map(|(c, (n, b))| format!("core {c}: {n} tensors, {}", fmt_bytes(*b)))
        .collect();
    o.line(&format!("   {}", summary.join(" · ")))?;
    for ((name, core, m), (ins, outs)) in loaded.iter().zip(&binds) {
        let r = s.execute(name, ins, outs, true);
        let (good, what) = match r {
            Ok(w) => (
                true,
                format!(
                    "{} into {} input{}, {} output{} read back: bytes match",
                    fmt_bytes(w),
                    m.inputs.len(),
                    if m.inputs.len() == 1 { "" } else { "s" },
                    m.outputs.len(),
                    if m.outputs.len() == 1 { "" } else { "s" }
                ),
            ),
            Err(e) => (false, e.to_string()),
        };
        o.verdict(good, &format!("{name:<22} core {core}: {what}"))?;
    }

    // 3. Unload the second model of core 0 (the middle one of three on a trn2).
    let (mid, mid_core, _) = loaded[MIDDLE].clone();
    let neighbours: Vec<&(String, i64, ManifestRef)> = loaded
        .iter()
        .filter(|(n, c, _)| *c == mid_core && *n != mid)
        .collect();
    o.line("")?;
    let nth = 1 + loaded[..MIDDLE]
        .iter()
        .filter(|(_, c, _)| *c == mid_core)
        .count();
    o.heading(&format!(
        "3. Unload {mid}, loaded {} of the {} models on core {mid_core}",
        ordinal(nth),
        neighbours.len() + 1
    ))?;
    let footprint = |s: &Session, n: &str| -> Result<u64, CliError> {
        let m = s.model(n).map_err(fail)?;
        Ok(s.footprint(m.handle).map_err(fail)?.0[22])
    };
    let mid_bytes = footprint(s, &mid)?;
    let others_before: Vec<u64> = neighbours
        .iter()
        .map(|(n, _, _)| footprint(s, n))
        .collect::<Result<_, _>>()?;
    let before = s
        .nrt()
        .ledger()
        .logical_core_usage(LogicalCore::from_c(mid_core))
        .map_err(fail)?;
    s.unload(&mid)
        .map_err(|e| fail(format!("unloading {mid}: {e}")))?;
    let after = s
        .nrt()
        .ledger()
        .logical_core_usage(LogicalCore::from_c(mid_core))
        .map_err(fail)?;
    o.line(&format!(
        "   {:<26} {:>12} {:>12} {:>12}",
        format!("core {mid_core}"),
        "before",
        "after",
        "change"
    ))?;
    for (name, cls) in REPORT_ROWS {
        let cat = cls;
        let (b, a) = (cat.of(&before.device), cat.of(&after.device));
        o.line(&format!(
            "   {:<26} {:>12} {:>12} {:>12}",
            name,
            fmt_bytes(b),
            fmt_bytes(a),
            delta(b, a)
        ))?;
    }
    let (b, a) = (before.device[22], after.device[22]);
    o.line(&format!(
        "   {:<26} {:>12} {:>12} {:>12}",
        "total",
        fmt_bytes(b),
        fmt_bytes(a),
        delta(b, a)
    ))?;
    let freed = b.saturating_sub(a);
    o.verdict(
        freed == mid_bytes && a <= b,
        &format!(
            "freed {} = {mid}'s footprint {}",
            fmt_bytes(freed),
            fmt_bytes(mid_bytes)
        ),
    )?;
    let mut same = Vec::new();
    let mut all_same = true;
    for ((n, _, _), was) in neighbours.iter().zip(&others_before) {
        let now = footprint(s, n)?;
        all_same &= now == *was;
        same.push(format!("{n} {} → {}", fmt_bytes(*was), fmt_bytes(now)));
    }
    o.verdict(
        all_same,
        &format!("the others are untouched: {}", same.join(", ")),
    )?;

    if !full {
        return o.finish();
    }

    // 4. OOM on purpose.
    let oom_core = ncores - 1;
    o.line("")?;
    let hbm = s
        .nrt()
        .logical_core_hbm(LogicalCore::from_c(oom_core))
        .unwrap_or(0);
    let dev = s
        .nrt()
        .logical_core_entry(LogicalCore::from_c(oom_core))
        .ok()
        .and_then(|v| v.cores().first().map(|p| p.device_id))
        .unwrap_or(0);
    let largest = s
        .runtime()
        .driver()
        .pool_stats(dev, false, hbm)
        .map(|p| p.largest_free)
        .unwrap_or(0);
    let huge = (largest / (1 << 30) + 1) << 30;
    o.heading(&format!(
        "4. Out of memory, on purpose: a {} tensor on core {oom_core} (HBM {hbm}'s largest free block is {})",
        fmt_bytes(huge),
        fmt_bytes(largest)
    ))?;
    let used_before = s
        .nrt()
        .ledger()
        .memory_stats(LogicalCore::from_c(oom_core))
        .map(|x| x.bytes_used)
        .unwrap_or(0);
    // With -q the deliberate OOM is not logged as an error: the verdict line says how it went.
    let level = log::max_level();
    if o.quiet {
        log::set_max_level(log::LevelFilter::Off);
    }
    let oom = s.alloc_tensor("too-big", Placement::Device, oom_core, huge);
    log::set_max_level(level);
    match oom {
        Ok(_) => {
            o.verdict(false, "the allocation succeeded; no OOM to show")?;
            let _ = s.free_tensor("too-big");
        }
        Err(e) => {
            let status = e.status().map_or("?", |st| st.name());
            o.line(&format!(
                "   nrt_tensor_allocate → {status}; libnrt's table for the device:"
            ))?;
            if let crate::scenario::StepError::Nrt(err) = &e {
                if let Some((_, text)) = nrt_host::runtime::oom_table(&s.nrt(), err) {
                    for l in text.lines() {
                        o.line(&format!("   │ {l}"))?;
                    }
                }
            }
            match s.last_oom_file.take() {
                Some(Ok(p)) => o.line(&format!("   table also written to {}", p.display()))?,
                Some(Err(why)) => {
                    o.line(&format!("   (could not write the table to a file: {why})"))?
                }
                None => {}
            }
            let used_after = s
                .nrt()
                .ledger()
                .memory_stats(LogicalCore::from_c(oom_core))
                .map(|x| x.bytes_used)
                .unwrap_or(0);
            o.verdict(
                used_after == used_before,
                &format!(
                    "core {oom_core} unchanged by the failed allocation: {}",
                    fmt_bytes(used_after)
                ),
            )?;
        }
    }

    // 5. Teardown.
    o.line("")?;
    o.heading("5. Tear down (nrt_close)")?;
    let pools = |s: &Session| {
        s.driver_bytes()
            .map_err(|e| fail(format!("driver pools: {e}")))
    };
    let held = pools(s)?;
    s.close().map_err(|e| fail(format!("nrt_close: {e}")))?;
    let left = pools(s)?;
    o.verdict(
        left == 0,
        &format!(
            "{left} bytes left in the driver after nrt_close (it held {} before)",
            fmt_bytes(held)
        ),
    )?;
    o.finish()
}

/// "three", "six": small counts in words for the headings.
fn count_word(n: usize) -> String {
    const WORDS: [&str; 7] = ["no", "one", "two", "three", "four", "five", "six"];
    WORDS
        .get(n)
        .map_or_else(|| n.to_string(), |w| (*w).to_string())
}

/// "first", "second", …
fn ordinal(n: usize) -> String {
    const WORDS: [&str; 6] = ["first", "second", "third", "fourth", "fifth", "sixth"];
    WORDS
        .get(n.wrapping_sub(1))
        .map_or_else(|| format!("#{n}"), |w| (*w).to_string())
}

fn delta(before: u64, after: u64) -> String {
    if after >= before {
        if after == before {
            "0".into()
        } else {
            format!("+{}", fmt_bytes(after - before))
        }
    } else {
        format!("-{}", fmt_bytes(before - after))
    }
}
