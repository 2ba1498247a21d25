//! `nrt-dmem layout …`: delegates to nrt-layout's command line ([`nrt_layout::run_cli`]), so the
//! report, the DWARF checker and the dumper behave exactly as `nrt-layout` and
//! `cargo xtask layout` do.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Subcommand};

/// `layout` arguments.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LayoutArgs {
    /// The full report as JSON.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// The report as Markdown (docs/LAYOUT.md's text).
    #[arg(long)]
    pub markdown: bool,
    /// Check or dump an ELF's DWARF instead of printing the report.
    #[command(subcommand)]
    pub command: Option<LayoutCommand>,
}

/// `layout check` / `layout dump`.
#[derive(Debug, Subcommand)]
pub enum LayoutCommand {
    /// Check an ELF's DWARF (e.g. a real libnrt.so) against the layouts, fact by fact
    /// (exit 0 = nothing pinned fails, 1 = something fails, 2 = cannot check).
    Check {
        /// The ELF.
        elf: PathBuf,
        /// The report as JSON.
        #[arg(long)]
        json: bool,
        /// Only the facts the spec pins.
        #[arg(long, conflicts_with = "all")]
        pinned: bool,
        /// Every fact, chosen members included.
        #[arg(long)]
        all: bool,
        /// Findings fail too.
        #[arg(long)]
        strict: bool,
    },
    /// Print one struct (or enum) from an ELF's DWARF, pahole-style.
    Dump {
        /// The ELF.
        elf: PathBuf,
        /// Struct, union or enum name.
        #[arg(long = "struct", value_name = "NAME")]
        name: String,
    },
}

/// The nrt-layout argument vector for `a`.
fn argv(a: &LayoutArgs) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec!["nrt-layout".into()];
    match &a.command {
        None => {
            v.push("show".into());
            if a.json {
                v.push("--json".into());
            }
            if a.markdown {
                v.push("--markdown".into());
            }
        }
        Some(LayoutCommand::Check {
            elf,
            json,
            pinned,
            all,
            strict,
        }) => {
            v.push("check".into());
            v.push(elf.clone().into_os_string());
            for (on, flag) in [
                (*json, "--json"),
                (*pinned, "--pinned"),
                (*all, "--all"),
                (*strict, "--strict"),
            ] {
                if on {
                    v.push(flag.into());
                }
            }
        }
        Some(LayoutCommand::Dump { elf, name }) => {
            v.push("dump".into());
            v.push(elf.clone().into_os_string());
            v.push("--struct".into());
            v.push(name.into());
        }
    }
    v
}

/// Runs the layout command; returns nrt-layout's exit code.
pub fn run(a: &LayoutArgs) -> i32 {
    nrt_layout::run_cli(argv(a))
}
