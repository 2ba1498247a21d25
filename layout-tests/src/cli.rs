//! The `nrt-layout` command line, shared by the `nrt-layout` binary, `cargo xtask layout` and
//! `nrt-dmem layout …` (which delegates here through [`run_cli`]).
//!
//! Exit codes: 0 = success / nothing fails; 1 = a pinned fact fails (check) or the generated
//! files drifted (drift); 2 = bad usage or the input could not be checked (not ELF, no DWARF,
//! stripped, split DWARF, malformed, unknown type, I/O).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::check::{CheckOptions, Mode};

/// Layout conformance for nrt-dmem: libnrt 2.31's structs as this project reproduces them.
#[derive(Debug, Parser)]
#[command(name = "nrt-layout", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check an ELF's DWARF (e.g. /opt/aws/neuron/lib/libnrt.so.2.31.24.0) against the layouts,
    /// fact by fact (exit 0 = nothing pinned fails, 1 = something fails, 2 = cannot check).
    Check(CheckArgs),
    /// Print one struct (or enum) from an ELF's DWARF, pahole-style.
    Dump {
        /// The ELF.
        elf: PathBuf,
        /// Struct, union or enum name.
        #[arg(long = "struct", value_name = "NAME")]
        name: String,
    },
    /// Print the layout report (a one-screen summary by default).
    Show {
        /// The full report as JSON.
        #[arg(long, conflicts_with_all = ["markdown", "header"])]
        json: bool,
        /// docs/LAYOUT.md's text.
        #[arg(long, conflicts_with = "header")]
        markdown: bool,
        /// ffi/include/nrt_layout.h's text.
        #[arg(long)]
        header: bool,
    },
    /// Regenerate docs/LAYOUT.md and/or ffi/include/nrt_layout.h (both when neither is named).
    Write {
        /// Only docs/LAYOUT.md.
        #[arg(long)]
        markdown: bool,
        /// Only ffi/include/nrt_layout.h.
        #[arg(long)]
        header: bool,
        /// Workspace root (default: the one this tool was built in).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Fail (exit 1) if the committed generated files differ from what the tables generate.
    Drift {
        /// Workspace root (default: the one this tool was built in).
        #[arg(long)]
        root: Option<PathBuf>,
    },
}

/// `check` arguments.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The ELF to check (shared object, executable or relocatable object with DWARF).
    pub elf: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Only the facts the spec pins (observed/inferred members, sizes, enum values).
    #[arg(long, conflicts_with = "all")]
    pub pinned: bool,
    /// Every fact, chosen members included (their mismatches are findings, not failures), plus
    /// what libnrt keeps in the project's reserved spans.
    #[arg(long)]
    pub all: bool,
    /// Findings fail too (self-check of a build of this project's own header).
    #[arg(long)]
    pub strict: bool,
    /// Check against this facts file instead of the vendored `layout-facts.toml` (refused,
    /// exit 2, when it contradicts itself).
    #[arg(long, value_name = "TOML")]
    pub facts: Option<PathBuf>,
}

/// The generated files: `(path relative to the root, text)`.
pub fn generated() -> Result<Vec<(&'static str, String)>, String> {
    Ok(vec![
        (crate::HEADER_PATH, crate::header::generate()?),
        (crate::MARKDOWN_PATH, crate::markdown::generate()),
    ])
}

/// Files under `root` that differ from what the tables generate: `(path, first differing line)`.
pub fn drift(root: &Path) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (rel, text) in generated()? {
        let path = root.join(rel);
        match std::fs::read_to_string(&path) {
            Err(e) => out.push((rel.to_string(), format!("cannot read: {e}"))),
            Ok(committed) if committed == text => {}
            Ok(committed) => {
                let line = committed
                    .lines()
                    .zip(text.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or_else(|| committed.lines().count().min(text.lines().count()));
                out.push((
                    rel.to_string(),
                    format!(
                        "line {}: committed `{}`, generated `{}`",
                        line + 1,
                        committed.lines().nth(line).unwrap_or("<end of file>"),
                        text.lines().nth(line).unwrap_or("<end of file>")
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// Runs the command line with `args` (program name first, as `std::env::args_os()` gives),
/// printing to stdout/stderr; returns the exit code.
pub fn run_cli<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    run_cli_with(args, &mut stdout.lock(), &mut stderr.lock())
}

/// [`run_cli`] writing to the given streams.
pub fn run_cli_with<I, T>(args: I, out: &mut dyn Write, err: &mut dyn Write) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let text = e.render().to_string();
            let _ = if code == 0 {
                out.write_all(text.as_bytes())
            } else {
                err.write_all(text.as_bytes())
            };
            return code;
        }
    };
    match execute(cli.command, out) {
        Ok(code) => code,
        Err((code, msg)) => {
            let _ = writeln!(err, "nrt-layout: {msg}");
            code
        }
    }
}

type CliResult = Result<i32, (i32, String)>;

fn io(e: std::io::Error) -> (i32, String) {
    (2, e.to_string())
}

fn execute(cmd: Command, out: &mut dyn Write) -> CliResult {
    match cmd {
        Command::Check(a) => {
            let mode = if a.all {
                Mode::All
            } else if a.pinned {
                Mode::Pinned
            } else {
                Mode::Default
            };
            let opts = CheckOptions {
                mode,
                strict: a.strict,
            };
            let pins = match &a.facts {
                None => crate::facts::Pins::vendored().map_err(|e| (2, e))?,
                Some(p) => {
                    let text = std::fs::read_to_string(p)
                        .map_err(|e| (2, format!("{}: cannot read: {e}", p.display())))?;
                    let facts = crate::facts::Facts::load(&text)
                        .map_err(|e| (2, format!("{}: {e}", p.display())))?;
                    crate::facts::Pins::new(facts)
                }
            };
            let report = crate::check::check_with(&a.elf, &opts, &pins)
                .map_err(|e| (e.exit_code(), e.to_string()))?;
            let text = if a.json {
                report.to_json() + "\n"
            } else {
                report.to_text()
            };
            out.write_all(text.as_bytes()).map_err(io)?;
            Ok(report.exit_code)
        }
        Command::Dump { elf, name } => {
            let text =
                crate::dwarf::dump(&elf, &name).map_err(|e| (e.exit_code(), e.to_string()))?;
            out.write_all(text.as_bytes()).map_err(io)?;
            Ok(0)
        }
        Command::Show {
            json,
            markdown,
            header,
        } => {
            let text = if json {
                crate::report::json() + "\n"
            } else if markdown {
                crate::markdown::generate()
            } else if header {
                crate::header::generate().map_err(|e| (2, e))?
            } else {
                crate::report::summary()
            };
            out.write_all(text.as_bytes()).map_err(io)?;
            Ok(0)
        }
        Command::Write {
            markdown,
            header,
            root,
        } => {
            let root = root.unwrap_or_else(crate::default_root);
            let both = !markdown && !header;
            for (rel, text) in generated().map_err(|e| (2, e))? {
                let wanted = both
                    || (markdown && rel == crate::MARKDOWN_PATH)
                    || (header && rel == crate::HEADER_PATH);
                if !wanted {
                    continue;
                }
                let path = root.join(rel);
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(io)?;
                }
                let unchanged = std::fs::read_to_string(&path).is_ok_and(|t| t == text);
                if !unchanged {
                    std::fs::write(&path, &text)
                        .map_err(|e| (2, format!("{}: {e}", path.display())))?;
                }
                writeln!(
                    out,
                    "{} {}",
                    if unchanged { "unchanged" } else { "wrote" },
                    path.display()
                )
                .map_err(io)?;
            }
            Ok(0)
        }
        Command::Drift { root } => {
            let root = root.unwrap_or_else(crate::default_root);
            let d = drift(&root).map_err(|e| (2, e))?;
            if d.is_empty() {
                writeln!(out, "generated layout files are up to date").map_err(io)?;
                return Ok(0);
            }
            let mut msg =
                String::from("generated layout files drifted from nrt-core's abi tables:");
            for (p, why) in d {
                msg.push_str(&format!("\n  {p}: {why}"));
            }
            msg.push_str("\nrun `cargo xtask layout --write` and commit the result");
            Err((1, msg))
        }
    }
}
