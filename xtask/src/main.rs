//! `cargo xtask <task>`: the single automation entry point (docs/STYLE.md #13).
//!
//! `ci` runs exactly what CI runs; the other tasks are the pieces it is made of.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod doc_check;
mod module_graph;
mod tools;
mod unsafe_report;

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
    // Checks of the text and a generated doc table; no build needed, so they fail before the
    // long steps do.
    doc_check::run(&root())?;
    unsafe_report::run(&root(), true)?;
    module_graph::run(&root())?;
    // Every program a test runs is here (or installed now), so no test passes by skipping.
    tools::ensure()?;
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
        c.args(["test", "--workspace"]).env(tools::REQUIRE_VAR, "1");
        c
    })?;
    // Arithmetic on a lying driver's numbers must not wrap where debug builds would trap.
    run("hostile driver (nrt-core, release)", {
        let mut c = cargo();
        c.args([
            "test",
            "--release",
            "-p",
            "nrt-core",
            "--test",
            "hostile_driver",
        ]);
        c
    })?;
    // The bring-up an integrator copies: `cargo test` builds it, this runs it.
    run("example: nrt-core bring_up", {
        let mut c = cargo();
        c.args(["run", "--quiet", "-p", "nrt-core", "--example", "bring_up"]);
        c
    })?;
    run(
        "rustdoc -D warnings (no broken or private intra-doc links)",
        {
            let mut c = cargo();
            c.args(["doc", "--workspace", "--no-deps"])
                .env("RUSTDOCFLAGS", "-D warnings");
            c
        },
    )?;
    bench(&["--quick".into(), "--json".into()])?;
    run(
        "layout drift (nrt_layout.h, LAYOUT.md)",
        layout_tool(&["drift"]),
    )?;
    // The third proof of the layouts: the debug info of the library the compiler actually
    // built, compared with the spec's facts.
    let libnrt = libnrt_build()?;
    run(
        "layout of the built libnrt.so (DWARF vs the spec's pinned facts)",
        layout_tool(&["check", "--pinned", &libnrt.to_string_lossy()]),
    )?;
    firmware_ci()?;
    loom()?;
    Ok(())
}

/// `cargo xtask loom`: the loom models of the core's concurrency protocols (handle counter,
/// handle pin vs frees, stale handle vs slot reuse, shared owners, remove-then-drain, ext-isa
/// stage-once, the sharded gate's close and reopen on two shards), built with `--cfg loom` in
/// their own target dir so the normal build is not invalidated.
fn loom() -> DynResult {
    run("loom models (nrt-core --cfg loom)", {
        let mut c = cargo();
        c.args([
            "test",
            "-p",
            "nrt-core",
            "--test",
            "loom",
            "--release",
            "--target-dir",
        ])
        .arg(root().join("target").join("loom"))
        .env("RUSTFLAGS", "--cfg loom");
        c
    })
}

/// `nrt-layout <args> --root <workspace>` through cargo: the layout logic lives in the
/// `nrt-layout` crate, so xtask does not build it (or its DWARF stack) for every task.
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

/// `cargo xtask bench [--json] [--quick] [--capi]`: the carve allocator against
/// offset-allocator and range-alloc on identical traces, the dmem path, and the C API under
/// 1, 2 and 4 threads (docs/PERFORMANCE.md), built in release mode; prints one JSON object on
/// stdout (`--json`: nothing else; `--capi`: the C API benchmark only). `ci` runs it with
/// `--quick` as a smoke.
fn bench(args: &[String]) -> DynResult {
    if let Some(bad) = args.iter().find(|a| {
        !matches!(
            a.as_str(),
            "--json"
                | "--quick"
                | "--threads"
                | "--dmem"
                | "--capi"
                | "--host-mem"
                | "--scale"
                | "--neff"
        )
    }) {
        return Err(format!(
            "bench: unknown argument `{bad}` (expected --json, --quick, --threads, --dmem, --capi, --host-mem, --scale, --neff)"
        )
        .into());
    }
    // The NEFF memory figures run the release CLI and a C-API client as their own processes.
    let neff_rss = !args.iter().any(|a| a == "--quick")
        && (args.iter().any(|a| a == "--neff")
            || !args.iter().any(|a| {
                matches!(
                    a.as_str(),
                    "--threads" | "--dmem" | "--capi" | "--host-mem" | "--scale"
                )
            }));
    if neff_rss {
        run(
            "bench (release nrt-dmem and neff_load for the NEFF figures)",
            {
                let mut c = cargo();
                c.args([
                    "build",
                    "--release",
                    "--quiet",
                    "-p",
                    "nrt-dmem-cli",
                    "--bin",
                    "nrt-dmem",
                    "-p",
                    "nrt-bench",
                    "--bin",
                    "neff_load",
                ]);
                c
            },
        )?;
    }
    run("bench (nrt-bench, release)", {
        let mut c = cargo();
        c.args(["run", "--release", "--quiet", "-p", "nrt-bench", "--"]);
        c.args(args);
        c
    })
}

/// `cargo xtask headers`: rewrites the generated headers under `ffi/include` from the
/// `nrt-ffi` source. The generator is the test `ffi/tests/headers.rs`, which `ci`'s test step
/// runs without the variable: there, a header that differs from the source fails the build.
fn headers() -> DynResult {
    run("headers (nrt-ffi tests/headers.rs)", {
        let mut c = cargo();
        c.args(["test", "--quiet", "-p", "nrt-ffi", "--test", "headers"]);
        c.env("NRT_UPDATE_HEADERS", "1");
        c
    })
}

fn usage() -> &'static str {
    "usage: cargo xtask <ci|bench|layout|firmware|headers|unsafe-report|module-graph|doc-check|tools|dist|loom>\n  ci    fmt check, doc-check, unsafe table, module graph, the tools the tests need (installed or a failure), clippy -D warnings, tests, rustdoc -D warnings, bench smoke, layout drift, firmware, loom (what .ci/run runs)\n  \
     layout [--json|--markdown|--header|--write|--check]  libnrt's layouts as reproduced here\n  \
     layout check <ELF> [--json] [--pinned|--all] | layout dump <ELF> --struct NAME\n  \
     firmware [--report|--json|--heap|--full|--ci]  the no_std image: build, run, footprint targets\n  \
     bench [--json] [--quick] [--threads] [--dmem] [--capi] [--host-mem] [--scale] [--neff]  carve vs offset-allocator / range-alloc, dmem path, threads, C API threads, VIRTUAL tensor pools, tensors at scale, NEFF load and memory (docs/PERFORMANCE.md)\n  \
     headers  regenerate libnrt.so's generated C headers (ffi/include) from ffi/src\n  \
     unsafe-report [--check]  rewrite (or check) the per-file unsafe count table in docs/UNSAFE.md\n  \
     module-graph [--strict]  the core's module graph from its sources: fails on a mechanism module importing a behaviour module, a type with more than 40 pub fn, or any cycle (--strict: the same check)\n  \
     doc-check  no issue numbers or process chatter outside docs/CHANGELOG.md, no ../shared outside .ci/ and xtask/, every spec/public API/ABI/neff-format citation has its heading, docs/PERFORMANCE.md <= 400 lines\n  \
     tools    check (as root on Debian/Ubuntu: install) the programs the tests run: cc, c++, pkg-config, pahole, valgrind, binutils, GNU time\n  \
     dist --prefix DIR [--debug]  install libnrt.so.<v> (+ .so.1, .so), libnrt.a, headers, nrt.pc, bin/nrt-dmem, examples\n  \
     loom     loom models of the handle counter, handle pins, drain, ext-isa staging and the sharded gate"
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("bench") => bench(&args[1..]),
        Some("layout") => layout(&args[1..]),
        Some("firmware") => firmware(&args[1..]),
        Some("headers") => headers(),
        Some("unsafe-report") => match args.get(1).map(String::as_str) {
            None => unsafe_report::run(&root(), false),
            Some("--check") => unsafe_report::run(&root(), true),
            Some(bad) => {
                Err(format!("unsafe-report: unknown argument `{bad}` (expected --check)").into())
            }
        },
        Some("doc-check") => doc_check::run(&root()),
        Some("module-graph") => match args.get(1).map(String::as_str) {
            None | Some("--strict") => module_graph::run(&root()),
            Some(bad) => {
                Err(format!("module-graph: unknown argument `{bad}` (expected --strict)").into())
            }
        },
        Some("tools") => tools::ensure(),
        Some("dist") => dist(&args[1..]),
        Some("loom") => loom(),
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

// ---------------------------------------------------------------------------------------------
// `cargo xtask dist`: libnrt.so installed like AWS's.
// ---------------------------------------------------------------------------------------------

/// Libraries a program linked against `libnrt.a` (or the relinked `libnrt.so`) needs: what
/// the Rust standard library uses. Also `Libs.private` of `nrt.pc`.
const NRT_NATIVE_LIBS: &[&str] = &[
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];

/// `cargo xtask dist --prefix DIR [--debug]`: builds nrt-ffi (release, or the dev profile with
/// `--debug`) and lays out under DIR:
///
/// - `lib/libnrt.so.<version>` (SONAME `libnrt.so.1`), linked here from `libnrt.a` with
///   `ffi/libnrt.map`: rustc's own version script lists every export unversioned and wins over
///   a second one (measured with rust-lld and GNU ld), so cargo's `libnrt.so` cannot carry
///   libnrt's version nodes; the relinked one does;
/// - `lib/libnrt.so.1` -> `libnrt.so.<version>`, `lib/libnrt.so` -> `libnrt.so.1`;
/// - `lib/libnrt.a`, `include/nrt/**/*.h`, `include/ndl/*.h`, `lib/pkgconfig/nrt.pc`;
/// - `bin/nrt-dmem` (the CLI of the same profile: `neff pack` makes a NEFF from a manifest,
///   `plan` tells whether models fit);
/// - `share/nrt-dmem/examples/`: the example model manifests (`models/*.json`) and the
///   documented C flow (`doc_flow.c`), so a C developer needs nothing but the prefix.
fn dist(args: &[String]) -> DynResult {
    let mut prefix = None;
    let mut debug = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--prefix" => prefix = it.next().map(PathBuf::from),
            "--debug" => debug = true,
            other => return Err(format!("dist: unknown argument `{other}`").into()),
        }
    }
    let prefix = prefix.ok_or("dist: --prefix DIR is required")?;
    let prefix = if prefix.is_relative() {
        std::env::current_dir()?.join(prefix)
    } else {
        prefix
    };
    eprintln!(
        "==> build nrt-ffi ({})",
        if debug { "dev" } else { "release" }
    );
    let mut c = cargo();
    c.args(["build", "-p", "nrt-ffi"]);
    if !debug {
        c.arg("--release");
    }
    let staticlib = artifact_lines(c, "libnrt.a")?
        .iter()
        .flat_map(|l| l.split('"'))
        .find(|f| f.ends_with("/libnrt.a"))
        .map(PathBuf::from)
        .ok_or("cargo reported no libnrt.a for nrt-ffi")?;
    let version = env!("CARGO_PKG_VERSION");
    let lib = prefix.join("lib");
    let pc_dir = lib.join("pkgconfig");
    std::fs::create_dir_all(&pc_dir)?;
    let real = format!("libnrt.so.{version}");
    eprintln!(
        "==> link {}/{real} (version nodes from ffi/libnrt.map)",
        lib.display()
    );
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut link = Command::new(cc);
    link.arg("-shared")
        .arg("-o")
        .arg(lib.join(&real))
        .arg("-Wl,--whole-archive")
        .arg(&staticlib)
        .arg("-Wl,--no-whole-archive")
        .arg(format!(
            "-Wl,--version-script={}",
            root().join("ffi/libnrt.map").display()
        ))
        .args([
            "-Wl,-soname,libnrt.so.1",
            "-Wl,--gc-sections",
            "-Wl,-z,relro,-z,now",
        ])
        .args(NRT_NATIVE_LIBS);
    run("link libnrt.so", link)?;
    for (name, target) in [("libnrt.so.1", real.as_str()), ("libnrt.so", "libnrt.so.1")] {
        let l = lib.join(name);
        let _ = std::fs::remove_file(&l);
        std::os::unix::fs::symlink(target, &l)?;
    }
    std::fs::copy(&staticlib, lib.join("libnrt.a"))?;
    for sub in ["nrt", "ndl"] {
        copy_tree(
            &root().join("ffi/include").join(sub),
            &prefix.join("include").join(sub),
            "h",
        )?;
    }
    eprintln!(
        "==> build nrt-dmem-cli ({})",
        if debug { "dev" } else { "release" }
    );
    let mut c = cargo();
    c.args(["build", "-p", "nrt-dmem-cli", "--bin", "nrt-dmem"]);
    if !debug {
        c.arg("--release");
    }
    const KEY: &str = "\"executable\":\"";
    let cli = artifact_lines(c, "nrt-dmem")?
        .iter()
        .find_map(|l| {
            let at = l.find(KEY)? + KEY.len();
            let end = l[at..].find('"')?;
            Some(PathBuf::from(&l[at..at + end]))
        })
        .filter(|p| p.file_name().is_some_and(|n| n == "nrt-dmem"))
        .ok_or("cargo reported no nrt-dmem executable")?;
    let bin = prefix.join("bin");
    std::fs::create_dir_all(&bin)?;
    // Replaced, not overwritten in place: a running copy keeps its inode.
    let _ = std::fs::remove_file(bin.join("nrt-dmem"));
    std::fs::copy(&cli, bin.join("nrt-dmem"))?;
    let examples = prefix.join("share/nrt-dmem/examples");
    copy_tree(
        &root().join("examples/models"),
        &examples.join("models"),
        "json",
    )?;
    std::fs::copy(
        root().join("ffi/examples/doc_flow.c"),
        examples.join("doc_flow.c"),
    )?;
    let pc = format!(
        "prefix={}\nexec_prefix=${{prefix}}\nlibdir=${{prefix}}/lib\nincludedir=${{prefix}}/include\n\n\
         Name: nrt\nDescription: nrt-dmem, a libnrt.so-compatible Neuron runtime (memory path, simulated or /dev/neuron device)\n\
         Version: {version}\nCflags: -I${{includedir}}\nLibs: -L${{libdir}} -lnrt\nLibs.private: {}\n",
        prefix.display(),
        NRT_NATIVE_LIBS.join(" ")
    );
    std::fs::write(pc_dir.join("nrt.pc"), pc)?;
    eprintln!(
        "==> installed under {}: PKG_CONFIG_PATH={} cc app.c $(pkg-config --cflags --libs nrt)",
        prefix.display(),
        pc_dir.display()
    );
    Ok(())
}

/// Copies the files with extension `ext` under `src` to the same paths under `dst`
/// (directories created as needed).
fn copy_tree(src: &Path, dst: &Path, ext: &str) -> DynResult {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let p = e?.path();
        let to = dst.join(p.file_name().unwrap_or_default());
        if p.is_dir() {
            copy_tree(&p, &to, ext)?;
        } else if p.extension().is_some_and(|x| x == ext) {
            std::fs::copy(&p, to)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// `cargo xtask firmware`: the no_std firmware-style image, its footprint and targets.
// ---------------------------------------------------------------------------------------------

/// Footprint targets of the image: text + data, and the peak RSS of a run (`.bss` statics
/// count only where touched): 4 MiB for the one-device profile, 8 MiB for the others.
const FIRMWARE_TEXT_DATA_MAX: u64 = 256 * 1024;
const FIRMWARE_PEAK_RSS_MAX_KIB: u64 = 8 * 1024;
const FIRMWARE_ONE_DEVICE_PEAK_RSS_MAX_KIB: u64 = 4 * 1024;
/// `.bss` target of the one-device profile (the integrator sizes the storage, the context
/// tree included): bare-metal startup zeroes `.bss` in real RAM, so it must fit a small part.
/// The 32-device profile (`--full`) has no target.
const FIRMWARE_BSS_MAX: u64 = 4 << 20;

/// Allocated-section sizes of an ELF, as Berkeley `size` counts them.
#[derive(Debug, Default)]
struct ElfSizes {
    /// Read-only allocated sections (code, rodata, eh_frame).
    text: u64,
    /// Writable allocated sections with file contents.
    data: u64,
    /// Writable allocated sections without (NOBITS).
    bss: u64,
    /// Size of the image's `STATE` static (`CoreState`), if its symbol is present.
    state: Option<u64>,
    /// Size of the image's `SIM` static (`SimDevice`), if its symbol is present.
    sim: Option<u64>,
    /// Size of the `heap` variant's heap region (`heap::REGION`), if its symbol is present.
    heap: Option<u64>,
    /// Symbols of core's float formatting (`core::num::flt2dec`), which no message of the
    /// image needs (nrt-core formats sizes in integers).
    float_fmt: usize,
}

fn elf_sizes(image: &Path) -> DynResult<ElfSizes> {
    use object::{Object, ObjectSection, ObjectSymbol, SectionFlags, SectionKind};
    let bytes = std::fs::read(image)?;
    let file = object::File::parse(&*bytes)?;
    let mut s = ElfSizes::default();
    for sec in file.sections() {
        let SectionFlags::Elf { sh_flags } = sec.flags() else {
            continue;
        };
        if sh_flags & u64::from(object::elf::SHF_ALLOC) == 0 {
            continue;
        }
        let nobits = matches!(
            sec.kind(),
            SectionKind::UninitializedData | SectionKind::UninitializedTls
        );
        if nobits {
            s.bss += sec.size();
        } else if sh_flags & u64::from(object::elf::SHF_WRITE) != 0 {
            s.data += sec.size();
        } else {
            s.text += sec.size();
        }
    }
    for sym in file.symbols() {
        let name = sym.name().unwrap_or("");
        if name.contains("flt2dec") {
            s.float_fmt += 1;
        }
        // Legacy-mangled `nrt_firmware::STATE` / `nrt_firmware::SIM`.
        if name.contains("12nrt_firmware5STATE") {
            s.state = Some(sym.size());
        } else if name.contains("12nrt_firmware3SIM") {
            s.sim = Some(sym.size());
        } else if name.contains("12nrt_firmware4heap6REGION") {
            s.heap = Some(sym.size());
        }
    }
    Ok(s)
}

/// `cargo <verb> -p nrt-firmware --profile firmware --features <features>`.
fn firmware_cargo(verb: &str, features: &str) -> Command {
    let mut c = cargo();
    c.args([
        verb,
        "-p",
        "nrt-firmware",
        "--profile",
        "firmware",
        "--features",
        features,
    ]);
    c
}

/// Builds `libnrt.so` (nrt-ffi, debug, with debug info) and returns its path as cargo reports
/// it (so `CARGO_TARGET_DIR` and `build.target-dir` are honoured).
fn libnrt_build() -> DynResult<PathBuf> {
    eprintln!("==> build nrt-ffi (libnrt.so)");
    let mut c = cargo();
    c.args(["build", "-p", "nrt-ffi"]);
    artifact_lines(c, "libnrt.so")?
        .iter()
        .flat_map(|l| l.split('"'))
        .find(|f| f.ends_with("/libnrt.so"))
        .map(PathBuf::from)
        .ok_or_else(|| "cargo reported no libnrt.so for nrt-ffi".into())
}

/// Builds the image (`--profile firmware --features image`) and returns its path, as cargo
/// reports it (so `CARGO_TARGET_DIR` and `build.target-dir` are honoured).
fn firmware_build(features: &str, quiet: bool) -> DynResult<PathBuf> {
    if !quiet {
        eprintln!(
            "==> build nrt-firmware (profile firmware: panic=abort, opt-level=s, lto; features {features})"
        );
    }
    const KEY: &str = "\"executable\":\"";
    artifact_lines(firmware_cargo("build", features), "the firmware image")?
        .iter()
        .filter(|l| l.contains("nrt-firmware"))
        .find_map(|l| {
            let at = l.find(KEY)? + KEY.len();
            let end = l[at..].find('"')?;
            Some(PathBuf::from(&l[at..at + end]))
        })
        .ok_or_else(|| "cargo reported no nrt-firmware executable".into())
}

/// Runs the cargo build `c` with JSON messages (diagnostics still rendered on stderr) and
/// returns its `compiler-artifact` lines; `what` names the build in the error.
fn artifact_lines(mut c: Command, what: &str) -> DynResult<Vec<String>> {
    let out = c
        .arg("--message-format=json-render-diagnostics")
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(format!("building {what} failed ({})", out.status).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        .map(str::to_string)
        .collect())
}

/// One run of the image: its exit status, what it printed and its peak RSS.
struct FirmwareRun {
    status: std::process::ExitStatus,
    stdout: String,
    peak_rss_kib: u64,
    /// `GNU time -v` or `wait4 rusage`.
    measured_by: &'static str,
}

/// Runs the image under GNU `time -v` (`/usr/bin/time`), or, where that is absent (or
/// `XTASK_FIRMWARE_NO_GNU_TIME` is set), as a plain child reaped with `wait4` for its rusage.
fn firmware_run(image: &Path, args: &[&str]) -> DynResult<FirmwareRun> {
    use std::os::unix::process::ExitStatusExt;
    let gnu_time = Path::new("/usr/bin/time");
    if gnu_time.exists() && std::env::var_os("XTASK_FIRMWARE_NO_GNU_TIME").is_none() {
        let report = image.with_extension("time-v.txt");
        let out = Command::new(gnu_time)
            .arg("-v")
            .arg("-o")
            .arg(&report)
            .arg(image)
            .args(args)
            .stderr(std::process::Stdio::inherit())
            .output()?;
        let text = std::fs::read_to_string(&report).unwrap_or_default();
        let rss = text.lines().find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes):")
                .and_then(|v| v.trim().parse::<u64>().ok())
        });
        // GNU time exits with the child's code; "Command terminated by signal" covers kills.
        if let Some(peak_rss_kib) = rss {
            let status = match text.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("Command terminated by signal ")
                    .and_then(|v| v.trim().parse::<i32>().ok())
            }) {
                Some(sig) => std::process::ExitStatus::from_raw(sig),
                None => out.status,
            };
            return Ok(FirmwareRun {
                status,
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                peak_rss_kib,
                measured_by: "GNU time -v",
            });
        }
        eprintln!(
            "xtask: {} gave no peak RSS; measuring with wait4",
            gnu_time.display()
        );
    }
    let mut child = Command::new(image)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut stdout = String::new();
    if let Some(mut pipe) = child.stdout.take() {
        std::io::Read::read_to_string(&mut pipe, &mut stdout)?;
    }
    let pid = libc::pid_t::try_from(child.id())?;
    let mut raw_status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own un-reaped child (std has not waited for it); `raw_status` and
    // `ru` are valid for writes for the duration of the call.
    let r = unsafe { libc::wait4(pid, &mut raw_status, 0, &mut ru) };
    if r != pid {
        return Err(format!(
            "wait4 on the firmware image: {}",
            std::io::Error::last_os_error()
        )
        .into());
    }
    Ok(FirmwareRun {
        status: std::process::ExitStatus::from_raw(raw_status),
        stdout,
        peak_rss_kib: u64::try_from(ru.ru_maxrss).unwrap_or(0),
        measured_by: "wait4 rusage",
    })
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// `cargo xtask firmware [--report | --json] [--heap]`: builds the no_std image, runs it, and
/// fails when it exits non-zero or misses a footprint target (text + data ≤ 256 KiB; for the
/// default one-device profile `.bss` ≤ 4 MiB and peak RSS ≤ 4 MiB, for the others peak RSS ≤
/// 8 MiB). `--full` builds the
/// 32-device profile instead (`Capacity::DEFAULT`, no `.bss` target). `--report` adds the ELF sizes, the static arenas and the measured RSS; `--json` prints
/// one object `{image, text, data, bss, peak_rss_kib}` on stdout (the image's report goes to
/// stderr). `--heap` builds the `heap` variant instead (a `LockedHeap` global allocator and a
/// second runtime from nrt-core's `alloc` constructors); its heap region is written by
/// `Box::new_zeroed`, so its RSS target is the region's size on top of the 8 MiB.
/// `--ci` runs the whole firmware part of `ci` ([`firmware_ci`]).
fn firmware(args: &[String]) -> DynResult {
    let mut report = false;
    let mut json = false;
    let mut features = "image";
    for a in args {
        match a.as_str() {
            "--report" => report = true,
            "--json" => json = true,
            "--heap" => features = "image,heap",
            "--full" => features = "image,full",
            "--ci" => return firmware_ci(),
            other => return Err(format!("firmware: unknown argument `{other}`").into()),
        }
    }
    let image = firmware_build(features, json)?;
    let sizes = elf_sizes(&image)?;
    if features.contains("heap") && sizes.heap.is_none() {
        return Err("the heap variant has no `heap::REGION` symbol to budget its RSS by".into());
    }
    let rss_max_kib = if features == "image" {
        FIRMWARE_ONE_DEVICE_PEAK_RSS_MAX_KIB
    } else {
        FIRMWARE_PEAK_RSS_MAX_KIB + sizes.heap.unwrap_or(0).div_ceil(1024)
    };
    if !json {
        eprintln!("==> run {}", image.display());
    }
    let run = firmware_run(&image, if report { &["--arenas"] } else { &[] })?;
    if json {
        eprint!("{}", run.stdout);
        println!(
            "{{\"image\":{},\"text\":{},\"data\":{},\"bss\":{},\"peak_rss_kib\":{}}}",
            json_str(&image.display().to_string()),
            sizes.text,
            sizes.data,
            sizes.bss,
            run.peak_rss_kib
        );
    } else {
        print!("{}", run.stdout);
    }
    let text_data = sizes.text + sizes.data;
    let size_ok = text_data <= FIRMWARE_TEXT_DATA_MAX;
    // The one-device default image (the heap variant's region and the 32-device profile are
    // extra `.bss` on purpose).
    let bss_max = (features == "image").then_some(FIRMWARE_BSS_MAX);
    let bss_ok = bss_max.is_none_or(|m| sizes.bss <= m);
    let rss_ok = run.peak_rss_kib <= rss_max_kib;
    if report && !json {
        let kib = |b: u64| b as f64 / 1024.0;
        let opt = |v: Option<u64>| v.map_or("?".to_string(), |b| b.to_string());
        let verdict = |ok: bool| if ok { "ok" } else { "MISSED" };
        println!("footprint of {}", image.display());
        println!(
            "  text       {:>10} B  {:>9.1} KiB",
            sizes.text,
            kib(sizes.text)
        );
        println!(
            "  data       {:>10} B  {:>9.1} KiB",
            sizes.data,
            kib(sizes.data)
        );
        println!(
            "  text+data  {:>10} B  {:>9.1} KiB  target <= {} KiB: {}",
            text_data,
            kib(text_data),
            FIRMWARE_TEXT_DATA_MAX / 1024,
            verdict(size_ok)
        );
        println!(
            "  bss        {:>10} B  {:>9.1} MiB  (static CoreState + context + arenas {} B, static SimDevice {} B){}",
            sizes.bss,
            kib(sizes.bss) / 1024.0,
            opt(sizes.state),
            opt(sizes.sim),
            bss_max.map_or(String::new(), |m| format!(
                "  target <= {} MiB: {}",
                m >> 20,
                verdict(bss_ok)
            ))
        );
        println!(
            "  float fmt  {:>10} symbols (core::num::flt2dec)  target 0: {}",
            sizes.float_fmt,
            verdict(sizes.float_fmt == 0)
        );
        if let Some(h) = sizes.heap {
            println!(
                "  heap       {:>10} B  {:>9.1} MiB  (LockedHeap region, in bss)",
                h,
                kib(h) / 1024.0
            );
        }
        println!(
            "  peak RSS   {:>10} KiB            target <= {} KiB: {} ({})",
            run.peak_rss_kib,
            rss_max_kib,
            verdict(rss_ok),
            run.measured_by
        );
    }
    if !run.status.success() {
        return Err(format!("the firmware image failed ({})", run.status).into());
    }
    if !size_ok {
        return Err(format!(
            "firmware text + data is {text_data} B, over the {FIRMWARE_TEXT_DATA_MAX} B target"
        )
        .into());
    }
    if !rss_ok {
        return Err(format!(
            "firmware peak RSS is {} KiB, over the {rss_max_kib} KiB target",
            run.peak_rss_kib
        )
        .into());
    }
    if !bss_ok {
        return Err(format!(
            "the one-device firmware's .bss is {} B, over the {FIRMWARE_BSS_MAX} B target",
            sizes.bss
        )
        .into());
    }
    if sizes.float_fmt > 0 {
        return Err(format!(
            "the firmware image links float formatting ({} `flt2dec` symbols)",
            sizes.float_fmt
        )
        .into());
    }
    if !json {
        eprintln!(
            "==> firmware ok: text+data {} B, bss {} B, peak RSS {} KiB",
            text_data, sizes.bss, run.peak_rss_kib
        );
    }
    Ok(())
}

/// The firmware part of `ci`: the core builds with each logging backend (and none), its unit
/// tests pass on `portable-atomic`'s 64-bit atomics (what targets without native ones use),
/// the firmware crate passes clippy with its own profile (the workspace clippy run skips its
/// binary: it needs `--features image`), and the image runs within its footprint targets.
fn firmware_ci() -> DynResult {
    run("test nrt-core --lib on portable-atomic's AtomicU64", {
        let mut c = cargo();
        c.args([
            "test",
            "--quiet",
            "-p",
            "nrt-core",
            "--lib",
            "--features",
            "portable-atomic",
        ]);
        c
    })?;
    for (what, features) in [
        ("no default features", None),
        ("defmt", Some("defmt")),
        ("log", Some("log")),
        ("alloc", Some("alloc")),
        ("heap-host-mem", Some("heap-host-mem")),
    ] {
        run(&format!("build nrt-core: {what}"), {
            let mut c = cargo();
            c.args([
                "build",
                "--quiet",
                "-p",
                "nrt-core",
                "--no-default-features",
            ]);
            if let Some(f) = features {
                c.args(["--features", f]);
            }
            c
        })?;
    }
    for features in ["image", "image,log", "image,heap", "image,full"] {
        run(
            &format!("clippy nrt-firmware (profile firmware, features {features})"),
            {
                let mut c = firmware_cargo("clippy", features);
                c.args(["--", "-D", "warnings"]);
                c
            },
        )?;
    }
    // `defmt` and `log` together must be refused at compile time (lib.rs `compile_error!`).
    eprintln!("==> build nrt-core: defmt + log (must fail)");
    let both = cargo()
        .args([
            "build",
            "--quiet",
            "-p",
            "nrt-core",
            "--no-default-features",
        ])
        .args(["--features", "defmt,log"])
        .output()?;
    if both.status.success()
        || !String::from_utf8_lossy(&both.stderr).contains("mutually exclusive")
    {
        return Err("nrt-core built with both `defmt` and `log`: expected a compile_error!".into());
    }
    // The image with nrt-core's `log` backend wired to its own logger: must behave the same.
    let image = firmware_build("image,log", false)?;
    eprintln!("==> run {} --log-level=warn", image.display());
    let logged = firmware_run(&image, &["--log-level=warn"])?;
    if !logged.status.success() {
        print!("{}", logged.stdout);
        return Err(format!("the firmware image with `log` failed ({})", logged.status).into());
    }
    // The heap variant: a global allocator and a second, boxed runtime (nrt-core `alloc`).
    firmware(&["--heap".into()])?;
    // The 32-device profile still builds and runs within its RSS target.
    firmware(&["--full".into()])?;
    // Last, so the image left in target/firmware is the default one.
    firmware(&[])
}
