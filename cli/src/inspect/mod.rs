//! `nrt-dmem inspect`: what a libnrt process holds, read from its bytes — live
//! (`--pid`, without stopping it) or post-mortem (`--core`, an ELF core file) — with no help
//! from the process (docs/INSPECT.md).
//!
//! [`source`] reads the memory, [`symbol`] finds `tdrv_ctx_0`, [`walk`] follows the context
//! tree using the members in [`fields`]. A live process is not stopped: a walk with findings
//! is repeated, and the findings stand only when every walk agrees while nothing it read
//! changes, so a structure caught mid-update is read again rather than reported.

mod fields;
mod source;
mod symbol;
mod walk;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nrt_core::cstr::Printable;
use serde::Serialize;

use crate::scenario::fmt_bytes;
use crate::{paint, CliError, Ui, BOLD, GREEN, RED};
use source::{CoreFile, InputError, LiveProcess, Memory};
use symbol::{Flavor, Located};
use walk::{hex, Finding, Report};

/// `nrt-dmem inspect` arguments.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["pid", "core"])))]
pub struct InspectArgs {
    /// A running process that uses libnrt (read with process_vm_readv, not stopped).
    #[arg(long, value_name = "PID")]
    pub pid: Option<i32>,
    /// An ELF core file of such a process (gcore's or the kernel's).
    #[arg(long, value_name = "FILE")]
    pub core: Option<PathBuf>,
    /// Read libnrt's symbols from FILE: a copy with its symbol table of a stripped library,
    /// or the library when the mapped path is not readable here.
    #[arg(long, value_name = "FILE")]
    pub lib: Option<PathBuf>,
    /// The context's address (the value tdrv_ctx_0 holds), for a library without symbols:
    /// hex (0x…) or decimal.
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    pub ctx_addr: Option<u64>,
    /// JSON: `models`, `ledger`, `dmems`, `allocations`, `findings` and the `source`.
    #[arg(long)]
    pub json: bool,
    /// Walks of a live process: one that finds something wrong is repeated, and its
    /// findings stand only when all N walks agree while nothing they read changes.
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub attempts: u32,
}

fn parse_addr(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("`{s}` is not an address (0x… or decimal)"))
}

/// Where the bytes came from, for the report.
#[derive(Debug, Serialize)]
struct SourceInfo {
    /// `pid` or `core`.
    kind: &'static str,
    pid: Option<i32>,
    command: String,
    core: Option<String>,
    library: Option<String>,
    symbols_from: Option<String>,
    flavor: Flavor,
    /// Where `tdrv_ctx_0` is (None with `--ctx-addr`).
    symbol: Option<String>,
    /// The core's machine (`x86-64`, `AArch64`).
    machine: Option<&'static str>,
    /// The members this project placed itself that were read (its own library only).
    chosen_members_read: Vec<String>,
    /// Walks made (a live process is walked again while a walk has findings).
    walks: u32,
}

#[derive(Serialize)]
struct Output<'a> {
    source: &'a SourceInfo,
    #[serde(flatten)]
    report: &'a Report,
}

impl From<InputError> for CliError {
    fn from(e: InputError) -> Self {
        CliError::input(e.0)
    }
}

/// Runs `inspect`: 0 when the bytes are consistent, 1 with findings, 2 when the input cannot
/// be read.
pub fn run(a: &InspectArgs, ui: &Ui, out: &mut dyn Write) -> Result<i32, CliError> {
    let (mem, info, located): (Box<dyn Memory>, SourceInfo, Option<Located>) =
        match (a.pid, &a.core) {
            (Some(pid), _) => {
                let p = LiveProcess::open(pid)?;
                let who = format!("process {pid}");
                let located = find(p.file_maps(), a, &who)?;
                let info = source_info("pid", Some(pid), p.command.clone(), None, &located, a);
                (Box::new(p), info, located)
            }
            (None, Some(path)) => {
                let c = CoreFile::open(path)?;
                let who = format!("core file {}", path.display());
                let located = find(c.file_maps(), a, &who)?;
                let mut info = source_info(
                    "core",
                    c.pid,
                    c.command.clone(),
                    Some(path.display().to_string()),
                    &located,
                    a,
                );
                info.machine = Some(c.machine);
                (Box::new(c), info, located)
            }
            (None, None) => return Err(CliError::input("--pid PID or --core FILE is required")),
        };
    let live = a.pid.is_some();
    let mut info = info;
    let flavor = info.flavor;
    // A live process is not stopped, so a walk may catch a structure halfway through an
    // update (a ledger booked before its node is linked). A walk that finds nothing wrong is
    // taken as it is. Findings are the process's only when every walk finds the same, and
    // nothing any of them read changed while it walked; a later walk that finds nothing wrong
    // is taken instead.
    let mut last: Option<Report> = None;
    let mut steady = true;
    let mut settled = !live;
    for attempt in 1..=(if live { a.attempts } else { 1 }) {
        let rec = source::Recorder::new(mem.as_ref());
        let ctx = match a.ctx_addr {
            Some(c) => c,
            None => read_ctx_pointer(&rec, located.as_ref().map_or(0, |l| l.symbol_addr), live)?,
        };
        let r = walk::walk(&rec, ctx, flavor);
        if let Some(pid) = a
            .pid
            .filter(|p| !PathBuf::from(format!("/proc/{p}")).exists())
        {
            return Err(CliError::input(format!(
                "process {pid} exited while it was read"
            )));
        }
        info.walks = attempt;
        if !live || r.findings.is_empty() {
            last = Some(r);
            settled = true;
            break;
        }
        steady &= rec.unchanged() && last.as_ref().is_none_or(|l| *l == r);
        last = Some(r);
        if attempt == a.attempts {
            settled = steady;
            break;
        }
        // Give an operation caught halfway time to finish.
        std::thread::sleep(Duration::from_millis(10 * u64::from(attempt)));
    }
    let mut report = last.unwrap_or_default();
    if !settled {
        report.findings.push(Finding {
            kind: "changing",
            at: "process".into(),
            message: format!(
                "the process changed while it was read: each of {} walks found something \
                 wrong, but not the same or not while it held still; this is the last, and \
                 its findings may be the reader's (a structure caught halfway through an \
                 update) as well as the process's",
                info.walks
            ),
        });
    }
    if a.json {
        let text = serde_json::to_string_pretty(&Output {
            source: &info,
            report: &report,
        })
        .map_err(|e| CliError::input(e.to_string()))?;
        writeln!(out, "{text}").map_err(CliError::output)?;
    } else {
        write_text(&info, &report, ui.color, out).map_err(CliError::output)?;
    }
    Ok(if report.findings.is_empty() { 0 } else { 1 })
}

/// The library and symbol, unless `--ctx-addr` makes them unnecessary (then they only say
/// which library it is, when they can).
fn find(
    maps: &[source::FileMap],
    a: &InspectArgs,
    who: &str,
) -> Result<Option<Located>, InputError> {
    match symbol::locate(maps, a.lib.as_deref(), who) {
        Ok(l) => Ok(Some(l)),
        Err(_) if a.ctx_addr.is_some() => Ok(symbol::identify(maps)),
        Err(e) => Err(e),
    }
}

fn source_info(
    kind: &'static str,
    pid: Option<i32>,
    command: String,
    core: Option<String>,
    located: &Option<Located>,
    a: &InspectArgs,
) -> SourceInfo {
    let flavor = located.as_ref().map_or(Flavor::Libnrt, |l| l.flavor);
    SourceInfo {
        kind,
        pid,
        command,
        core,
        library: located.as_ref().map(|l| l.library.display().to_string()),
        symbols_from: located
            .as_ref()
            .filter(|l| l.symbols_from != l.library)
            .map(|l| l.symbols_from.display().to_string()),
        flavor,
        symbol: located
            .as_ref()
            .filter(|_| a.ctx_addr.is_none())
            .map(|l| hex(l.symbol_addr)),
        machine: None,
        chosen_members_read: fields::ALL
            .iter()
            .filter(|f| f.chosen.is_some() && (f.any_library || flavor == Flavor::NrtDmem))
            .map(|f| format!("{}.{}", f.ty, f.name))
            .collect(),
        walks: 0,
    }
}

/// The pointer `tdrv_ctx_0` holds. Not being able to read it is bad input: the library's data
/// is not where its symbol table says, or the core does not hold it.
fn read_ctx_pointer(mem: &dyn Memory, at: u64, live: bool) -> Result<u64, InputError> {
    let mut b = [0u8; 8];
    mem.read(at, &mut b).map_err(|e| {
        InputError(format!(
            "{} at {} is not readable ({e}){}",
            symbol::CTX_SYMBOL,
            hex(at),
            if live {
                ""
            } else {
                ": the core file does not hold the library's data (a core made with a \
                 coredump_filter that leaves out file-backed mappings?)"
            }
        ))
    })?;
    Ok(u64::from_le_bytes(b))
}

fn usage_line(m: &std::collections::BTreeMap<String, u64>) -> String {
    let mut v: Vec<(&String, &u64)> = m.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(k, b)| format!("{k} {}", fmt_bytes(**b)))
        .collect::<Vec<_>>()
        .join(" · ")
}

fn write_text(s: &SourceInfo, r: &Report, color: bool, out: &mut dyn Write) -> std::io::Result<()> {
    let h = |t: &str| paint(color, BOLD, t);
    let who = match s.kind {
        "pid" => format!(
            "process {} ({})",
            s.pid.unwrap_or_default(),
            Printable(&s.command)
        ),
        _ => format!(
            "core file {} (process {}, {})",
            s.core.as_deref().unwrap_or("?"),
            s.pid.map_or("?".to_string(), |p| p.to_string()),
            Printable(&s.command)
        ),
    };
    writeln!(out, "{}", h(&format!("nrt-dmem inspect · {who}")))?;
    match &s.library {
        Some(lib) => writeln!(
            out,
            "  library {lib} ({}){}",
            match s.flavor {
                Flavor::NrtDmem => "nrt-dmem's libnrt: its chosen members are read too",
                Flavor::Libnrt => "libnrt: only the members its public record pins are read",
            },
            s.symbols_from
                .as_ref()
                .map_or(String::new(), |f| format!(", symbols from {f}"))
        )?,
        None => writeln!(
            out,
            "  library not identified: only pinned members are read"
        )?,
    }
    writeln!(
        out,
        "  tdrv_ctx_0{} → {}{}",
        s.symbol
            .as_ref()
            .map_or(" (--ctx-addr)".to_string(), |a| format!(" at {a}")),
        r.context.as_deref().unwrap_or("NULL"),
        if s.kind == "pid" {
            format!(" · {} walk{}", s.walks, if s.walks == 1 { "" } else { "s" })
        } else {
            String::new()
        }
    )?;
    if !r.initialized {
        writeln!(
            out,
            "\nno runtime is up in this process: tdrv_ctx_0 is NULL (before nrt_init or after nrt_close)"
        )?;
        return Ok(());
    }

    writeln!(out)?;
    writeln!(
        out,
        "{}",
        h(&format!(
            "ledger · {} device{} · device bytes in use per core (dma_mem_log_t.memory_usage_nc)",
            r.devices,
            if r.devices == 1 { "" } else { "s" }
        ))
    )?;
    writeln!(
        out,
        "  {:<9} {:>12} {:>12} {:>6} {:>6}  by usage",
        "core", "ledger", "on lists", "GLOBAL", "models"
    )?;
    for c in &r.ledger.cores {
        writeln!(
            out,
            "  {:<9} {:>12} {:>12} {:>6} {:>6}  {}",
            format!("nd{}:nc{}", c.device, c.core),
            fmt_bytes(c.total_bytes),
            fmt_bytes(c.listed_bytes),
            c.global_dmems,
            c.models,
            usage_line(&c.by_usage)
        )?;
    }
    writeln!(
        out,
        "  {:<9} {:>12}  ({} B)",
        "total",
        fmt_bytes(r.ledger.total_bytes),
        r.ledger.total_bytes
    )?;

    writeln!(out)?;
    writeln!(out, "{}", h(&format!("models ({})", r.models.len())))?;
    if r.models.is_empty() {
        writeln!(out, "  (none loaded)")?;
    } else {
        writeln!(
            out,
            "  {:>7}  {:<24} {:<8} {:>4} {:>5} {:>12} {:>10}  device by usage",
            "H_MODEL", "name", "core", "refs", "dmems", "device", "host"
        )?;
    }
    for m in &r.models {
        writeln!(
            out,
            "  {:>7}  {:<24} {:<8} {:>4} {:>5} {:>12} {:>10}  {}",
            m.h_model,
            Printable(&m.name),
            format!("nd{}:nc{}", m.device, m.core),
            m.ref_count,
            m.dmems,
            fmt_bytes(m.device_bytes),
            fmt_bytes(m.host_bytes),
            usage_line(&m.device_by_usage)
        )?;
    }

    writeln!(out)?;
    writeln!(
        out,
        "{}",
        h(&format!("allocations ({} live dmem_t)", r.dmems))
    )?;
    if !r.allocations.is_empty() {
        writeln!(
            out,
            "  {:<16} {:>11} {:<22} {:<6} {:>2} {:>4} {:<8} {:<28} hint",
            "dmem_t", "size", "usage", "loc", "ch", "refs", "core", "owner"
        )?;
    }
    for d in &r.allocations {
        writeln!(
            out,
            "  {:<16} {:>11} {:<22} {:<6} {:>2} {:>4} {:<8} {:<28} {}",
            d.address,
            fmt_bytes(d.size),
            d.usage,
            d.location,
            d.channel,
            d.ref_count,
            d.core.as_deref().unwrap_or("?"),
            Printable(&d.owner),
            Printable(d.hint.as_deref().unwrap_or("")),
        )?;
    }

    writeln!(out)?;
    if r.findings.is_empty() {
        writeln!(
            out,
            "{}: the lists close, every node is on its allocator's list, each model is in one \
             bucket, and the lists add up to the ledger",
            paint(color, GREEN, "consistent")
        )?;
    } else {
        writeln!(
            out,
            "{}",
            paint(color, RED, &format!("findings ({})", r.findings.len()))
        )?;
        for f in &r.findings {
            writeln!(
                out,
                "  [{}] {}: {}",
                f.kind,
                Printable(&f.at),
                Printable(&f.message)
            )?;
        }
    }
    Ok(())
}
