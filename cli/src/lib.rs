//! # nrt-dmem-cli
//!
//! The `nrt-dmem` command line: the demo, the scenario runner, the memory report and the
//! layout report. It is a crate of its own, apart from `nrt-host`: a file lives here when its
//! job is talking to a person — parsing arguments, drawing reports and tables, reading
//! scenario files and running them, watching shared devices (`monitor`), the layout/DWARF
//! commands. What an application or `libnrt.so` needs to run models (driver,
//! device, config, NEFF/manifest loading, the planner's and the shared device's Rust APIs)
//! stays in `nrt-host`, which this crate calls and which does not depend on it.
//!
//! - [`scenario`]: scenario files (TOML) and the [`scenario::Session`] that runs them.
//! - [`main`]: the command line itself; the binary `nrt-dmem` is a call to it.
//!
//! ```text
//! nrt-dmem [--device sim:trn2|sim:inf2x2|neuron] [--lnc-size N] [--visible-cores 1-3]
//!          [--num-cores N] [-v|-q] <demo | run FILE | stats [--json] [--scenario FILE] | layout … | plan FILES…
//!          | inspect --pid PID|--core FILE [--json]>
//! ```
//!
//! Flags override the environment the real runtime reads (`NRT_DMEM_DEVICE`,
//! `NEURON_RT_VIRTUAL_CORE_SIZE`, `NEURON_RT_VISIBLE_CORES`, `NEURON_RT_NUM_CORES`); a scenario
//! file's settings sit between the two. Logs go through `log` + `env_logger` to stderr: the core
//! logs under target `nrt`, the shim under `nrt_host::…` and this crate under `nrt_dmem::…`; `RUST_LOG`
//! refines what `-v`/`-q` set (`RUST_LOG=nrt=debug`).
//!
//! Exit codes: 0 = done and every expectation held; 1 = an expectation failed or a step failed
//! unexpectedly; 2 = bad input (usage, unreadable or malformed file, no such device).
#![deny(unsafe_code)]

pub mod scenario;

mod demo;
mod inspect;
mod layout;
mod monitor;
mod neff;
mod plan;
mod stats;

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand};
use nrt_core::cstr::Printable;

use crate::scenario::{RunOptions, Scenario, Session};
use nrt_host::config::{parse_visible_cores, DeviceChoice, Overrides, RuntimeConfig};
use nrt_host::runtime::StartError;

/// Device-memory core of AWS Neuron's runtime (libnrt), on a simulated Trainium device.
#[derive(Debug, Parser)]
#[command(name = "nrt-dmem", version)]
pub struct Cli {
    /// Settings that override the environment.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Flags accepted before or after the subcommand.
#[derive(Debug, Args, Default)]
pub struct GlobalArgs {
    /// Device: sim:trn2, sim:inf2x2, … (inf2, trn1, trn2 or trn3, times 1-32 devices; +tlsf for
    /// the fast TLSF placement instead of the driver's genalloc; @NAME for a device shared by
    /// processes) or neuron (overrides NRT_DMEM_DEVICE).
    #[arg(long, global = true, value_name = "DEVICE", value_parser = parse_device)]
    pub device: Option<DeviceChoice>,
    /// Physical cores per logical core (overrides NEURON_RT_VIRTUAL_CORE_SIZE).
    #[arg(long, global = true, value_name = "N", allow_negative_numbers = true)]
    pub lnc_size: Option<u32>,
    /// Logical cores to use: a core (3) or a range (1-3) (overrides NEURON_RT_VISIBLE_CORES).
    #[arg(long, global = true, value_name = "CORES", value_parser = parse_cores)]
    pub visible_cores: Option<(u32, u32)>,
    /// Use the first N logical cores, 0 = all (overrides NEURON_RT_NUM_CORES).
    #[arg(long, global = true, value_name = "N", allow_negative_numbers = true)]
    pub num_cores: Option<u32>,
    /// More log output (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
    /// Less output (-q errors only and no step lines, -qq no logs).
    #[arg(short, long, global = true, action = ArgAction::Count, conflicts_with = "verbose")]
    pub quiet: u8,
}

fn parse_device(s: &str) -> Result<DeviceChoice, String> {
    DeviceChoice::parse(s).map_err(|e| e.reason.to_string())
}

fn parse_cores(s: &str) -> Result<(u32, u32), String> {
    parse_visible_cores(s).map_err(|e| e.reason.to_string())
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load models (three on one core), allocate tensors on every core, execute, unload the
    /// middle model, provoke an OOM, tear down — on the simulated trn2 unless --device says
    /// otherwise.
    Demo,
    /// Run a scenario file (TOML, docs/SCENARIOS.md); exit 0 only if every expectation holds.
    Run {
        /// The scenario.
        scenario: PathBuf,
    },
    /// The memory report (per logical core, per model, per HBM) after the demo workload or a
    /// scenario, before teardown.
    Stats {
        /// neuron-monitor's JSON field names (plus `nrt_dmem` extras).
        #[arg(long)]
        json: bool,
        /// Run this scenario instead of the demo workload.
        #[arg(long, value_name = "FILE")]
        scenario: Option<PathBuf>,
    },
    /// The layout report (libnrt's structs as this project reproduces them), or check/dump an
    /// ELF's DWARF (delegates to nrt-layout).
    Layout(layout::LayoutArgs),
    /// Inspect a NEFF (header, gates, tensors, subgraphs, footprint) or pack one from a
    /// manifest.
    Neff(neff::NeffArgs),
    /// Will these models fit? A dry run of the load path on a scratch simulated device: where
    /// each model lands, per core and HBM channel the bytes by usage, headroom and largest
    /// free block, and for the first model that does not fit what would make it fit.
    Plan(plan::PlanArgs),
    /// The host agent: device-wide memory of every process on the shared simulated devices
    /// (or the real driver's sysfs counters), every --interval, as neuron-monitor JSON or a
    /// live table (docs/SHARED_DEVICE.md).
    Monitor(monitor::MonitorArgs),
    /// What a libnrt process holds, read from its bytes: a running process (--pid, not
    /// stopped) or a core file (--core). Its models, the ledger per core, every live dmem_t
    /// and whatever does not hold together (docs/INSPECT.md). Exit 0 consistent, 1 findings,
    /// 2 input unreadable.
    Inspect(inspect::InspectArgs),
}

/// A failure the command line reports: exit code and message.
#[derive(Debug)]
pub struct CliError {
    /// Process exit code.
    pub code: i32,
    /// What to tell the person.
    pub message: String,
}

impl CliError {
    fn input(message: impl Into<String>) -> Self {
        CliError {
            code: 2,
            message: message.into(),
        }
    }

    /// Writing the output failed. A closed pipe (`nrt-dmem demo | head -1`) ends the run
    /// quietly with the status a death by SIGPIPE gives (141), as other command-line tools
    /// end; anything else is reported.
    fn output(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return CliError {
                code: 141,
                message: String::new(),
            };
        }
        CliError::input(format!("writing output: {e}"))
    }
}

impl From<StartError> for CliError {
    fn from(e: StartError) -> Self {
        // The host error names the device node and the simulated alternative; its sources
        // (the errno) follow in parentheses.
        let mut msg = e.to_string();
        if msg.ends_with(nrt_host::SIM_HINT) {
            msg.push_str(" or --device sim:trn2");
        }
        let mut causes = Vec::new();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            let t = s.to_string();
            if !msg.contains(&t) && !causes.contains(&t) {
                causes.push(t);
            }
            src = s.source();
        }
        if !causes.is_empty() {
            msg.push_str(&format!(" ({})", causes.join(": ")));
        }
        CliError::input(msg)
    }
}

/// Output and presentation choices shared by the subcommands.
pub struct Ui {
    /// ANSI colour on stdout.
    pub color: bool,
    /// `-q` given.
    pub quiet: bool,
}

fn init_logging(g: &GlobalArgs) {
    let level = match (g.quiet, g.verbose) {
        (q, _) if q >= 2 => log::LevelFilter::Off,
        (1, _) => log::LevelFilter::Error,
        (_, 0) => log::LevelFilter::Warn,
        (_, 1) => log::LevelFilter::Info,
        (_, 2) => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    };
    let mut b = env_logger::Builder::new();
    b.filter_level(level);
    if let Ok(spec) = std::env::var("RUST_LOG") {
        b.parse_filters(&spec);
    }
    b.format_timestamp(None)
        .format_module_path(false)
        .format_target(true);
    let _ = b.try_init();
}

/// The runtime configuration: the environment, then the scenario's settings, then the flags.
/// A variable that the scenario or a flag replaces is not read (a bad value in it does not
/// matter). With `demo_default` (the demo), the device is `sim:trn2` unless `--device` says
/// otherwise, whatever `NRT_DMEM_DEVICE` says.
fn runtime_config(
    g: &GlobalArgs,
    sc: Option<&Scenario>,
    demo_default: bool,
) -> Result<RuntimeConfig, CliError> {
    let mut over = sc.map(Scenario::overrides).unwrap_or_default();
    if demo_default {
        over.device = Some(RuntimeConfig::default().device);
    }
    let over = over.then(Overrides {
        device: g.device,
        lnc_size: g.lnc_size,
        visible_cores: g.visible_cores,
        num_cores: g.num_cores,
    });
    let cfg = RuntimeConfig::from_env_under(&over).map_err(|e| CliError::input(e.to_string()))?;
    log::debug!(target: "nrt_dmem::cli", "runtime configuration: {cfg:?}");
    Ok(cfg)
}

/// Runs the command line with `args` (program name first); returns the exit code.
pub fn main<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    init_logging(&cli.global);
    let ui = Ui {
        color: anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never,
        quiet: cli.global.quiet > 0,
    };
    let mut out = anstream::stdout();
    let r = match &cli.command {
        Command::Demo => cmd_demo(&cli.global, &ui, &mut out),
        Command::Run { scenario } => cmd_run(&cli.global, &ui, scenario, &mut out),
        Command::Stats { json, scenario } => {
            cmd_stats(&cli.global, &ui, *json, scenario.as_deref(), &mut out)
        }
        Command::Layout(a) => Ok(layout::run(a)),
        Command::Neff(a) => neff::run(a, &mut out),
        Command::Plan(a) => plan::run(&cli.global, a, &mut out),
        Command::Monitor(a) => monitor::run(a, cli.global.device.as_ref(), &mut out),
        Command::Inspect(a) => inspect::run(a, &ui, &mut out),
    };
    let _ = out.flush();
    match r {
        Ok(code) => code,
        Err(e) if e.message.is_empty() => e.code,
        Err(e) => {
            let mut err = anstream::stderr();
            let _ = writeln!(
                err,
                "{}nrt-dmem: error:{} {}",
                if ui.color { "\x1b[1;31m" } else { "" },
                if ui.color { "\x1b[0m" } else { "" },
                e.message
            );
            e.code
        }
    }
}

fn cmd_demo(g: &GlobalArgs, ui: &Ui, out: &mut dyn Write) -> Result<i32, CliError> {
    let cfg = runtime_config(g, None, true)?;
    let mut s = start_session(g, None, cfg)?;
    demo::run(&mut s, out, ui, true)
}

/// Starts the runtime for `cfg`. A core-count error (spec §9) whose value came from the
/// scenario, not from a flag that replaced it, is reported at the scenario line that set it.
/// For the visible slice that is the setting in force: `visible_cores` (wherever it came
/// from) wins over `num_cores`.
fn start_session(
    g: &GlobalArgs,
    sc: Option<&Scenario>,
    cfg: RuntimeConfig,
) -> Result<Session, CliError> {
    Session::start(cfg).map_err(|e| {
        let keys: &[&str] = match &e {
            StartError::Init(nrt_core::Error::VncConfig { .. }) if g.lnc_size.is_none() => {
                &["lnc_size"]
            }
            StartError::Init(nrt_core::Error::VisibleCores { .. }) => {
                match (cfg.vcores.visible.is_some(), g.visible_cores, g.num_cores) {
                    (true, None, _) => &["visible_cores"],
                    (false, _, None) => &["num_cores"],
                    _ => &[],
                }
            }
            _ => &[],
        };
        match sc.and_then(|sc| sc.setting_error(keys, &e.to_string())) {
            Some(located) => CliError::input(located.to_string()),
            None => CliError::from(e),
        }
    })
}

fn load_scenario(path: &std::path::Path) -> Result<Scenario, CliError> {
    Scenario::load(path).map_err(|e| CliError::input(e.to_string()))
}

struct Suspend<'a> {
    bar: &'a indicatif::ProgressBar,
    out: &'a mut dyn Write,
}

impl Write for Suspend<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let out = &mut self.out;
        self.bar.suspend(|| out.write(buf))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Runs a scenario, with step lines on `out` (unless quiet) and a progress bar on a terminal
/// for long ones; returns the report.
fn run_scenario(
    sc: &Scenario,
    s: &mut Session,
    out: &mut dyn Write,
    ui: &Ui,
    show_steps: bool,
) -> scenario::RunReport {
    let total = sc.total_operations();
    let long = total > 50 || sc.has_repeat();
    let bar = (long && std::io::stderr().is_terminal()).then(|| {
        let b = indicatif::ProgressBar::new(total);
        if let Ok(st) = indicatif::ProgressStyle::with_template(
            "{spinner} {bar:40} {pos}/{len} steps {elapsed}",
        ) {
            b.set_style(st);
        }
        b
    });
    let mut tick = |n: u64| {
        if let Some(b) = &bar {
            b.set_position(n);
        }
    };
    let report = match &bar {
        Some(b) => {
            let mut w = Suspend { bar: b, out };
            scenario::run(
                sc,
                s,
                RunOptions {
                    out: show_steps.then_some(&mut w as &mut dyn Write),
                    color: ui.color,
                    progress: Some(&mut tick),
                },
            )
        }
        None => scenario::run(
            sc,
            s,
            RunOptions {
                out: show_steps.then_some(out),
                color: ui.color,
                progress: Some(&mut tick),
            },
        ),
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    report
}

fn cmd_run(
    g: &GlobalArgs,
    ui: &Ui,
    path: &std::path::Path,
    out: &mut dyn Write,
) -> Result<i32, CliError> {
    let sc = load_scenario(path)?;
    let cfg = runtime_config(g, Some(&sc), false)?;
    let mut s = start_session(g, Some(&sc), cfg)?;

    if !ui.quiet {
        writeln!(
            out,
            "scenario {} ({}) on {}",
            Printable(&sc.name),
            path.display(),
            cfg.device
        )
        .map_err(CliError::output)?;
        if let Some(d) = &sc.description {
            for l in d.trim().lines() {
                writeln!(out, "  {}", Printable(l)).map_err(CliError::output)?;
            }
        }
    }
    let report = run_scenario(&sc, &mut s, out, ui, !ui.quiet);
    let c = ui.color;
    if report.passed() {
        writeln!(
            out,
            "{}: {} operations, {} expectations held",
            paint(c, GREEN, "PASS"),
            report.operations,
            report.expectations
        )
        .map_err(CliError::output)?;
        Ok(0)
    } else {
        writeln!(
            out,
            "{}: {} failure{} ({} operations, {} expectations checked){}",
            paint(c, RED, "FAIL"),
            report.failures.len(),
            if report.failures.len() == 1 { "" } else { "s" },
            report.operations,
            report.expectations,
            if report.stopped {
                " (stopped at an unexpected failure)"
            } else {
                ""
            }
        )
        .map_err(CliError::output)?;
        for f in &report.failures {
            writeln!(out, "  {}: {f}", path.display()).map_err(CliError::output)?;
        }
        Ok(1)
    }
}

fn cmd_stats(
    g: &GlobalArgs,
    ui: &Ui,
    json: bool,
    scenario: Option<&std::path::Path>,
    out: &mut dyn Write,
) -> Result<i32, CliError> {
    // A shared device's figures are read, not made: the demo workload is never loaded onto
    // it (a scenario, asked for by name, still runs).
    if scenario.is_none() {
        let cfg = runtime_config(g, None, false)?;
        if let nrt_host::config::DeviceChoice::Shared { name, .. } = cfg.device {
            stats::shared_read_only(name.as_str(), json, out).map_err(CliError::input)?;
            return Ok(0);
        }
    }
    let (mut s, source, code) = match scenario {
        Some(p) => {
            let sc = load_scenario(p)?;
            let cfg = runtime_config(g, Some(&sc), false)?;
            let mut s = start_session(g, Some(&sc), cfg)?;
            let mut sink = std::io::sink();
            let report = run_scenario(&sc, &mut s, &mut sink, ui, false);
            for f in &report.failures {
                log::warn!(target: "nrt_dmem::cli", "{}: {f}", p.display());
            }
            (
                s,
                format!("scenario {}", p.display()),
                if report.passed() { 0 } else { 1 },
            )
        }
        None => {
            let cfg = runtime_config(g, None, false)?;
            let mut s = start_session(g, None, cfg)?;
            let mut sink = std::io::sink();
            let quiet = Ui {
                color: false,
                quiet: true,
            };
            demo::run(&mut s, &mut sink, &quiet, false)?;
            (s, "the demo workload".to_string(), 0)
        }
    };
    let report = stats::collect(&s, &source);

    if json {
        let text = serde_json::to_string_pretty(&stats::to_json(&report))
            .map_err(|e| CliError::input(e.to_string()))?;
        writeln!(out, "{text}").map_err(CliError::output)?;
    } else {
        stats::write_text(&report, out, ui.color).map_err(CliError::output)?;
    }
    let _ = s.close();
    Ok(code)
}

const GREEN: anstyle::Style = anstyle::Style::new()
    .fg_color(Some(anstyle::Color::Ansi(anstyle::AnsiColor::Green)))
    .bold();
const RED: anstyle::Style = anstyle::Style::new()
    .fg_color(Some(anstyle::Color::Ansi(anstyle::AnsiColor::Red)))
    .bold();
const BOLD: anstyle::Style = anstyle::Style::new().bold();

fn paint(on: bool, style: anstyle::Style, text: &str) -> String {
    if on {
        format!("{}{text}{}", style.render(), style.render_reset())
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_override() {
        let cli = Cli::try_parse_from([
            "nrt-dmem",
            "stats",
            "--json",
            "--device",
            "sim:inf2x2",
            "--visible-cores",
            "1-2",
            "-vv",
        ])
        .unwrap();
        assert_eq!(
            cli.global.device,
            Some(DeviceChoice::sim(nrt_core::sim::Preset::Inf2, 2))
        );
        assert_eq!(cli.global.visible_cores, Some((1, 2)));
        assert_eq!(cli.global.verbose, 2);
        assert!(Cli::try_parse_from(["nrt-dmem", "--device", "gpu", "demo"]).is_err());
        let tlsf =
            Cli::try_parse_from(["nrt-dmem", "demo", "--device", "sim:trn2x2+tlsf"]).unwrap();
        assert_eq!(
            tlsf.global.device,
            Some(DeviceChoice::Sim {
                preset: nrt_core::sim::Preset::Trn2,
                devices: 2,
                placement: nrt_core::sim::Placement::Tlsf,
            })
        );
        assert!(Cli::try_parse_from(["nrt-dmem", "--device", "sim:trn2+fast", "demo"]).is_err());
        assert!(Cli::try_parse_from(["nrt-dmem", "demo", "--bogus"]).is_err());
        let cfg = runtime_config(&cli.global, None, true).unwrap();
        assert_eq!(cfg.vcores.visible, Some((1, 2)));
    }
}
