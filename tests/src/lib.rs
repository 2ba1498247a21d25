//! Cross-crate integration tests of nrt-dmem (`tests/tests/*.rs`): concurrency on the std
//! shim, the C client against `libnrt.so`, scenarios.

/// `o` when the command succeeded; otherwise a test failure showing `what`, the exit status and
/// both output streams (the C client and the installed-prefix tests run programs this way).
pub fn check_output(what: &str, o: std::process::Output) -> std::process::Output {
    assert!(
        o.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Whether `tool` runs (`tool --version` exits 0). When it does not, the check that needs it
/// is skipped with a note — unless `NRT_REQUIRE_TOOLS` is set (`cargo xtask ci` sets it after
/// making sure every tool is installed), where a missing tool fails the test instead.
pub fn tool(tool: &str) -> bool {
    let ok = std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("NRT_REQUIRE_TOOLS").is_none(),
            "`{tool}` is not installed, and NRT_REQUIRE_TOOLS is set: this check must run here"
        );
        eprintln!("SKIPPED: `{tool}` is not installed (`cargo xtask tools` installs it)");
    }
    ok
}

/// Building and linking C programs against the `libnrt.so` cargo builds: shared by the C
/// client test (`tests/c_client.rs`) and the C trial (`tests/trials/c`).
pub mod c {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// The workspace root.
    pub fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("tests/ lives in the workspace")
            .to_path_buf()
    }

    /// Cargo's target directory (`CARGO_TARGET_DIR`, relative to the root, or `target/`).
    pub fn target_dir() -> PathBuf {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .map(|p| if p.is_relative() { root().join(p) } else { p })
            .unwrap_or_else(|| root().join("target"))
    }

    /// `<target>/<name>`, created: where one test puts what it builds.
    pub fn out_dir(name: &str) -> PathBuf {
        let d = target_dir().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// The public headers (`ffi/include`).
    pub fn include_dir() -> PathBuf {
        root().join("ffi/include")
    }

    /// The C compiler (`CC`, or `cc`).
    pub fn cc() -> String {
        std::env::var("CC").unwrap_or_else(|_| "cc".into())
    }

    /// Builds `libnrt.so`/`libnrt.a` (`cargo build -p nrt-ffi`) and returns `out/lib`, a
    /// directory with `libnrt.so`, `libnrt.so.1` (the SONAME programs record) and `libnrt.a`
    /// linked to what cargo built. Call it once per `out` (each test keeps its own).
    pub fn libnrt(out: &Path) -> PathBuf {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .current_dir(root())
            .args(["build", "--quiet", "-p", "nrt-ffi"])
            .status()
            .expect("run cargo build -p nrt-ffi");
        assert!(st.success(), "cargo build -p nrt-ffi failed");
        let built = target_dir().join("debug");
        let dir = out.join("lib");
        std::fs::create_dir_all(&dir).unwrap();
        for (link, file) in [
            ("libnrt.so", "libnrt.so"),
            ("libnrt.so.1", "libnrt.so"),
            ("libnrt.a", "libnrt.a"),
        ] {
            let l = dir.join(link);
            let _ = std::fs::remove_file(&l);
            std::os::unix::fs::symlink(built.join(file), &l).unwrap();
        }
        dir
    }

    /// `cc -std=c11 -Wall -Wextra -Werror -pedantic -I ffi/include SRC -L LIB -lnrt` (with an
    /// rpath to `lib`) into `exe`.
    pub fn compile(src: &Path, exe: &Path, lib: &Path) {
        let o = Command::new(cc())
            .args([
                "-std=c11",
                "-g",
                "-O1",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-I",
            ])
            .arg(include_dir())
            .arg(src)
            .arg("-o")
            .arg(exe)
            .arg("-L")
            .arg(lib)
            .arg("-lnrt")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .output()
            .expect("run the C compiler");
        super::check_output(&format!("compiling {}", src.display()), o);
    }
}
