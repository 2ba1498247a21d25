//! The programs the tests run besides cargo, checked before `cargo xtask ci` builds anything.
//!
//! Each test that needs one of them skips with a note when it is missing, so a plain `cargo
//! test` works on a bare machine. `ci` must not pass that way: it installs what is missing
//! (Debian or Ubuntu, as root, with `apt-get`), or fails naming each missing program and its
//! package, and then runs the tests with `NRT_REQUIRE_TOOLS=1`, under which a missing program
//! fails its test instead of skipping it.

use std::path::Path;
use std::process::Command;

use crate::DynResult;

/// The variable under which the tests treat a missing tool as a failure.
pub const REQUIRE_VAR: &str = "NRT_REQUIRE_TOOLS";

/// A program the tests run.
struct Tool {
    /// What is run (`$CC` / `$CXX` override the compilers, as the tests honour them).
    program: String,
    /// Arguments that make it print its version and exit 0.
    probe: &'static [&'static str],
    /// The Debian package that provides it.
    package: &'static str,
    /// Which tests need it.
    used_by: &'static str,
}

fn tools() -> Vec<Tool> {
    let env_or = |var: &str, dflt: &str| std::env::var(var).unwrap_or_else(|_| dflt.to_owned());
    let t = |program: &str, probe, package, used_by| Tool {
        program: program.to_owned(),
        probe,
        package,
        used_by,
    };
    vec![
        Tool {
            program: env_or("CC", "cc"),
            probe: &["--version"],
            package: "gcc",
            used_by: "the C clients, the layout cross-check, the DWARF fixtures, dist",
        },
        Tool {
            program: env_or("CXX", "c++"),
            probe: &["--version"],
            package: "g++",
            used_by: "the headers compiled as C++, the DWARF fixtures",
        },
        t(
            "pkg-config",
            &["--version"],
            "pkg-config",
            "the installed prefix's C build (tests/tests/dist.rs)",
        ),
        t(
            "pahole",
            &["--version"],
            "dwarves",
            "the DWARF reader against pahole (layout-tests/tests/dwarf.rs)",
        ),
        t(
            "valgrind",
            &["--version"],
            "valgrind",
            "the C clients under memcheck (tests/tests/c_client.rs)",
        ),
        t(
            "readelf",
            &["--version"],
            "binutils",
            "SONAME and version-node checks",
        ),
        t(
            "objdump",
            &["--version"],
            "binutils",
            "the export table check (tests/tests/dist.rs)",
        ),
        t(
            "objcopy",
            &["--version"],
            "binutils",
            "compressed-DWARF fixtures",
        ),
        t("strip", &["--version"], "binutils", "stripped-ELF refusals"),
        t(
            "/usr/bin/time",
            &["-V"],
            "time",
            "the firmware image's peak RSS (cargo xtask firmware)",
        ),
    ]
}

fn present(t: &Tool) -> bool {
    Command::new(&t.program)
        .args(t.probe)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Makes sure every tool is there: installs the missing ones with `apt-get` when this is a
/// Debian-like system and the process is root, and fails loudly otherwise.
pub fn ensure() -> DynResult {
    eprintln!("==> tools the tests need");
    let missing: Vec<Tool> = tools().into_iter().filter(|t| !present(t)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut packages: Vec<&str> = missing.iter().map(|t| t.package).collect();
    packages.sort_unstable();
    packages.dedup();
    let names: Vec<&str> = missing.iter().map(|t| t.program.as_str()).collect();
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if root && Path::new("/usr/bin/apt-get").exists() {
        eprintln!(
            "    missing {}: installing {} with apt-get",
            names.join(", "),
            packages.join(" ")
        );
        let ok = Command::new("apt-get")
            .args(["update", "-qq"])
            .status()
            .is_ok_and(|s| s.success())
            && Command::new("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends"])
                .args(&packages)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .is_ok_and(|s| s.success());
        let still: Vec<&Tool> = missing.iter().filter(|t| !present(t)).collect();
        if ok && still.is_empty() {
            return Ok(());
        }
    }
    let mut msg = String::from("the tests need programs this machine does not have:\n");
    for t in tools().iter().filter(|t| !present(t)) {
        msg.push_str(&format!(
            "  {:<14} (Debian package `{}`): {}\n",
            t.program, t.package, t.used_by
        ));
    }
    msg.push_str(&format!(
        "install them (`sudo apt-get install {}`), or run `cargo test --workspace`, which skips \
         the checks that need them",
        packages.join(" ")
    ));
    Err(msg.into())
}
