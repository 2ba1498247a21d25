//! `nrt-dmem plan`: will these models fit? The planner ([`nrt_host::plan`]) as a table, JSON or
//! an SVG chart of each HBM channel's occupancy by usage; `--check` for CI.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use nrt_core::cstr::Printable;

use super::CliError;

mod svg;
use crate::scenario::fmt_bytes;
use nrt_host::plan::{ModelPlan, ModelSource, Plan, PlanModel, PlanRequest, Verdict};
pub use svg::svg;

/// `plan`'s arguments (the global `--device`, `--lnc-size`, `--visible-cores` and `--num-cores`
/// apply, over the environment).
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Model files (NEFFs or manifests), loaded in this order.
    #[arg(required = true, value_name = "FILES")]
    pub files: Vec<PathBuf>,
    /// Also allocate each model's input and output tensors as DEVICE tensors on its core.
    #[arg(long)]
    pub tensors: bool,
    /// Also allocate this model's (its path, file name or model name) input and output
    /// tensors; repeatable.
    #[arg(long = "tensors-for", value_name = "MODEL")]
    pub tensors_for: Vec<String>,
    /// Place a model (its path, file name or model name) on a logical core: MODEL@CORE.
    #[arg(long = "place", value_name = "MODEL@CORE", value_parser = parse_place)]
    pub place: Vec<(String, i64)>,
    /// The plan as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write an SVG chart of each HBM channel's occupancy.
    #[arg(long, value_name = "OUT.svg")]
    pub svg: Option<PathBuf>,
    /// Exit 1 when a model does not fit (0 when all fit; 2 on bad input).
    #[arg(long)]
    pub check: bool,
}

fn parse_place(s: &str) -> Result<(String, i64), String> {
    let (m, c) = s
        .rsplit_once('@')
        .ok_or_else(|| "expected MODEL@CORE".to_string())?;
    let core: i64 = c
        .trim()
        .parse()
        .ok()
        .filter(|&c| c >= 0)
        .ok_or_else(|| format!("`{c}` is not a logical core index"))?;
    if m.is_empty() {
        return Err("expected MODEL@CORE".into());
    }
    Ok((m.to_string(), core))
}

/// Runs `plan` under the runtime configuration `g` and the environment give, exactly as the
/// other commands and `nrt_init` take it (flags over the environment over sim:trn2; arena
/// capacities, channel size and scratchpad settings from the environment).
pub fn run(g: &super::GlobalArgs, a: &PlanArgs, out: &mut dyn Write) -> Result<i32, CliError> {
    let runtime = super::runtime_config(g, None, false)?;
    let req = PlanRequest {
        models: a
            .files
            .iter()
            .map(|p| PlanModel {
                source: ModelSource::Path(p.clone()),
                tensors: a.tensors,
            })
            .collect(),
        device: runtime.device.to_string(),
        runtime,
        placements: a.place.clone(),
        tensors_for: a.tensors_for.clone(),
        read_options: nrt_host::model_file::read_options_from_env(),
        ..PlanRequest::default()
    };
    // The dry run's own OOMs are expected: they are the plan's subject, not warnings.
    if g.verbose == 0 {
        log::set_max_level(log::LevelFilter::Off);
    }
    let plan = nrt_host::plan::plan(&req).map_err(|e| CliError::input(e.to_string()))?;
    if let Some(p) = &a.svg {
        std::fs::write(p, svg(&plan))
            .map_err(|e| CliError::input(format!("{}: {e}", p.display())))?;
    }
    if a.json {
        let text =
            serde_json::to_string_pretty(&plan).map_err(|e| CliError::input(e.to_string()))?;
        writeln!(out, "{text}").map_err(CliError::output)?;
    } else {
        write_text(&plan, out).map_err(CliError::output)?;
    }
    Ok(if a.check && !plan.all_fit() { 1 } else { 0 })
}

/// `s` cut to `width` characters for a table column: a longer one keeps its end (a path's file
/// name), after an ellipsis. The JSON has the whole of it.
fn column(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_string();
    }
    let tail: String = s.chars().skip(n + 1 - width).collect();
    format!("…{tail}")
}

/// Models that do not fit listed one by one in the text (the JSON has all of them).
const MAX_FAILED_LISTED: usize = 20;

/// A verdict in the table's words.
fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Full => "full",
        Verdict::Fragmented => "fragmented",
        Verdict::Hopeless => "too small even when empty",
        Verdict::DriverRefused => "refused by the driver",
    }
}

/// Bytes by usage on one line, largest first: `WEIGHT 1.87 GiB, SCRATCHPAD 512 MiB`.
fn usage_line(u: &[(String, u64)]) -> String {
    let mut v: Vec<&(String, u64)> = u.iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    if v.is_empty() {
        return "no device bytes".into();
    }
    v.iter()
        .map(|(n, b)| format!("{n} {}", fmt_bytes(*b)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The plan as a table.
pub fn write_text(p: &Plan, out: &mut dyn Write) -> std::io::Result<()> {
    let fit = p.models.iter().filter(|m| m.fits).count();
    writeln!(
        out,
        "nrt-dmem plan · {} · LNC {} · {} of {} models fit",
        p.device,
        p.lnc_size,
        fit,
        p.models.len()
    )?;
    if let Some(n) = &p.snapshot {
        writeln!(out, "  {n}")?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "  {:<4} {:<36} {:<22} {:>4} {:>12} {:>12} {:>12}  result",
        "#", "file", "model", "core", "needs", "holds", "tensors"
    )?;
    for (i, m) in p.models.iter().enumerate() {
        writeln!(
            out,
            "  {:<4} {:<36} {:<22} {:>4} {:>12} {:>12} {:>12}  {}",
            i,
            Printable(&column(&m.file, 36)),
            Printable(&column(&m.name, 22)),
            m.core,
            fmt_bytes(m.needed_bytes),
            fmt_bytes(m.device_bytes),
            fmt_bytes(m.tensor_bytes),
            match (&m.refusal, m.fits) {
                (_, true) => "fits".to_string(),
                (Some(r), false) => format!(
                    "DOES NOT FIT: nd{} HBM {} {}",
                    r.device,
                    r.hbm,
                    verdict_word(r.verdict)
                ),
                (None, false) => "DOES NOT FIT".to_string(),
            }
        )?;
    }
    let failed: Vec<(usize, &ModelPlan)> = p
        .models
        .iter()
        .enumerate()
        .filter(|(_, m)| !m.fits)
        .collect();
    if !failed.is_empty() {
        writeln!(out)?;
        writeln!(out, "models that do not fit")?;
        for (i, m) in failed.iter().take(MAX_FAILED_LISTED) {
            match &m.refusal {
                Some(r) => {
                    writeln!(
                        out,
                        "  #{i} {}: {}",
                        Printable(&m.file),
                        Printable(&r.summary)
                    )?;
                    writeln!(
                        out,
                        "      refused request: {} {}{} on nd{} HBM {}",
                        fmt_bytes(r.request.size),
                        r.request.usage,
                        match (r.request.align, r.request.emulated) {
                            (0, _) => String::new(),
                            (a, false) => format!(" at a {a}-byte alignment"),
                            (a, true) => {
                                format!(" at a {a}-byte alignment (emulated: {a} bytes more)")
                            }
                        },
                        r.device,
                        r.hbm
                    )?;
                }
                None => writeln!(
                    out,
                    "  #{i} {}: {}",
                    Printable(&m.file),
                    Printable(m.error.as_deref().unwrap_or(""))
                )?,
            }
            writeln!(out, "      needs {}", usage_line(&m.needed))?;
        }
        if failed.len() > MAX_FAILED_LISTED {
            writeln!(
                out,
                "  … and {} more (--json lists every one)",
                failed.len() - MAX_FAILED_LISTED
            )?;
        }
    }
    writeln!(out)?;
    writeln!(out, "logical cores")?;
    for c in &p.cores {
        writeln!(
            out,
            "  core {} ({}, {} models): used {} of {}, headroom {}",
            c.index,
            c.physical.join("+"),
            c.models,
            fmt_bytes(c.used),
            fmt_bytes(c.limit),
            fmt_bytes(c.headroom)
        )?;
        for (u, b) in &c.usage {
            writeln!(out, "    {u:<28} {:>12}", fmt_bytes(*b))?;
        }
    }
    writeln!(out)?;
    writeln!(out, "HBM channels")?;
    writeln!(
        out,
        "  {:<10} {:>12} {:>12} {:>20} {:>18} {:>21}",
        "pool", "used", "free", "largest free block", "small-object free", "small-object largest"
    )?;
    for h in &p.hbm {
        writeln!(
            out,
            "  {:<10} {:>12} {:>12} {:>20} {:>18} {:>21}",
            format!("nd{} hbm{}", h.device, h.hbm),
            fmt_bytes(h.used),
            fmt_bytes(h.free),
            fmt_bytes(h.largest_free),
            fmt_bytes(h.small_object_free),
            fmt_bytes(h.small_object_largest_free)
        )?;
        for (u, b) in &h.usage {
            writeln!(out, "    {u:<28} {:>12}", fmt_bytes(*b))?;
        }
    }
    if let Some(f) = &p.first_failure {
        writeln!(out)?;
        writeln!(
            out,
            "first failure: model #{} {} on core {}: {}",
            f.model,
            Printable(&f.file),
            f.core,
            Printable(&f.error)
        )?;
        if let Some(r) = p.models.get(f.model).and_then(|m| m.refusal.as_ref()) {
            writeln!(out, "  verdict: {}", Printable(&r.summary))?;
            if r.verdict == Verdict::Hopeless {
                writeln!(out, "  nothing makes it fit")?;
            }
        }
        if let Some(o) = &f.oom {
            writeln!(
                out,
                "  the request that failed: {} ({}) on nd{} HBM {}, largest block then {}: {} \
                 missing; {} free on the channel then (its earlier allocations held)",
                fmt_bytes(o.requested),
                o.usage,
                o.device,
                o.hbm,
                fmt_bytes(o.largest_block),
                fmt_bytes(o.missing),
                fmt_bytes(o.channel_free)
            )?;
            if o.larger_than_channel {
                writeln!(
                    out,
                    "  the request is larger than anything an empty HBM channel holds"
                )?;
            }
            if !o.why.is_empty() {
                writeln!(out, "  the OOM report then: {}", o.why)?;
            }
        }
        for w in &f.what_ifs {
            writeln!(
                out,
                "  what if: {}: {}",
                w.change,
                if w.fits {
                    "fits".to_string()
                } else {
                    format!("does not fit ({})", w.detail.as_deref().unwrap_or(""))
                }
            )?;
        }
    }
    if !p.fragmentation.is_empty() {
        writeln!(out)?;
        writeln!(out, "fragmentation")?;
        for f in &p.fragmentation {
            writeln!(
                out,
                "  #{} {}: {}",
                f.model,
                Printable(&f.file),
                Printable(&f.refusal.summary)
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::column;

    #[test]
    fn long_labels_keep_their_end_within_the_column() {
        assert_eq!(column("a.json", 8), "a.json");
        assert_eq!(column("12345678", 8), "12345678");
        let c = column("/very/long/path/to/resnet50.json", 16);
        assert_eq!(c.chars().count(), 16);
        assert_eq!(c, "…o/resnet50.json");
        assert_eq!(column("ééééé", 3), "…éé");
    }
}
