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
    Ok(())
}

fn usage() -> &'static str {
    "usage: cargo xtask <ci>\n  ci    fmt check, clippy -D warnings, tests (what .ci/run runs)"
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
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
