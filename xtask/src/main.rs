//! `cargo xtask <task>`: the single automation entry point (STYLE.md #13).
//!
//! `ci` runs exactly what CI runs; the other tasks are the pieces it is made of.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

type DynResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

fn run(step: &str, mut cmd: Command) -> DynResult {
    eprintln!("==> {step}");
    let status = cmd.status()?;
    if !status.success() {
        return Err(format!("step `{step}` failed ({status})").into());
    }
    Ok(())
}

fn ci() -> DynResult {
    run("rustfmt", {
        let mut c = cargo();
        c.args(["fmt", "--all", "--", "--check"]);
        c
    })?;
    run("clippy", {
        let mut c = cargo();
        c.args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]);
        c
    })?;
    run("tests", {
        let mut c = cargo();
        c.args(["test", "--workspace"]);
        c
    })?;
    bench(&["--quick".into(), "--json".into()])?;
    run(
        "layout drift (nrt_layout.h, LAYOUT.md)",
        layout_tool(&["drift"]),
    )?;
    Ok(())
}

/// `nrt-layout <args> --root <workspace>` through cargo: the layout logic lives in the
/// `nrt-layout` crate, so xtask itself stays dependency-free and quick to build.
fn layout_tool(args: &[&str]) -> Command {
    let mut c = cargo();
    c.args([
        "run",
        "--quiet",
        "-p",
        "nrt-layout",
        "--bin",
        "nrt-layout",
        "--",
    ]);
    c.args(args);
    if matches!(args.first(), Some(&("write" | "drift"))) {
        c.arg("--root").arg(root());
    }
    c
}

/// `cargo xtask layout [--json | --markdown | --header | --write | --check]`, or any
/// `nrt-layout` subcommand (`check <ELF>`, `dump <ELF> --struct NAME`) passed through.
fn layout(args: &[String]) -> DynResult {
    let mapped: Vec<&str> = match args.first().map(String::as_str) {
        None => vec!["show"],
        Some("--json") => vec!["show", "--json"],
        Some("--markdown") => vec!["write", "--markdown"],
        Some("--header") => vec!["write", "--header"],
        Some("--write") => vec!["write"],
        Some("--check") => vec!["drift"],
        Some(_) => args.iter().map(String::as_str).collect(),
    };
    let status = layout_tool(&mapped).status()?;
    if !status.success() {
        // Keep nrt-layout's exit code (1 = a check failed, 2 = could not check).
        std::process::exit(status.code().unwrap_or(1));
    }
    Ok(())
}

/// `cargo xtask bench [--json] [--quick]`: the carve allocator against offset-allocator and
/// range-alloc on identical traces (docs/PERFORMANCE.md), built in release mode; prints one
/// JSON object on stdout (`--json`: nothing else). `ci` runs it with `--quick` as a smoke.
fn bench(args: &[String]) -> DynResult {
    if let Some(bad) = args
        .iter()
        .find(|a| !matches!(a.as_str(), "--json" | "--quick"))
    {
        return Err(format!("bench: unknown argument `{bad}` (expected --json, --quick)").into());
    }
    run("bench (nrt-bench, release)", {
        let mut c = cargo();
        c.args(["run", "--release", "--quiet", "-p", "nrt-bench", "--"]);
        c.args(args);
        c
    })
}

fn usage() -> &'static str {
    "usage: cargo xtask <ci|bench|layout>\n  ci    fmt check, clippy -D warnings, tests (what .ci/run runs)\n  \
     layout [--json|--markdown|--header|--write|--check]  libnrt's layouts as reproduced here\n  \
     layout check <ELF> [--json] [--pinned|--all] | layout dump <ELF> --struct NAME\n  bench [--json] [--quick]  carve vs offset-allocator / range-alloc (docs/PERFORMANCE.md)"
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("bench") => bench(&args[1..]),
        Some("layout") => layout(&args[1..]),
        _ => {
            eprintln!("{}", usage());
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
