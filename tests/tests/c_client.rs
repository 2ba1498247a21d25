//! The C door end to end: `libnrt.so` built by cargo, C programs compiled
//! with the system `cc` against the generated headers and linked with `-lnrt`, run on the
//! simulated device — natively on trn2 and trn1, and under
//! `valgrind --error-exitcode=1 --leak-check=full`.
//!
//! - `ffi/examples/nrt_client.c`: the whole memory API and its bad inputs; prints
//!   `N passed, M failed` and exits non-zero on any failure.
//! - `ffi/examples/dropin.c`: only `#include <nrt/nrt.h>` and `-lnrt`, as for AWS's library;
//!   also compiled as C++ (the `extern "C"` guards) and linked against `libnrt.a`.
//! - `ffi/examples/atexit.c`: failing calls from an `atexit` handler, after the thread's
//!   thread-local storage is gone: statuses come back, nothing aborts the process.
//! - The C compiler's `sizeof`/`offsetof` of every struct in the headers equal Rust's.
//! - Every exported function, called with bad arguments before and after `nrt_init`, logs its
//!   failure under its own name.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use nrt_tests::check_output as check;

fn root() -> PathBuf {
    nrt_tests::c::root()
}

/// Where this test puts what it builds (a symlink farm for `-lnrt` and the binaries).
fn out_dir() -> PathBuf {
    nrt_tests::c::out_dir("nrt-c-client")
}

/// Builds `libnrt.so`/`libnrt.a` once and returns the directory with `libnrt.so`,
/// `libnrt.so.1` and `libnrt.a` ([`nrt_tests::c::libnrt`]).
fn libdir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| nrt_tests::c::libnrt(&out_dir()))
}

use nrt_tests::c::{cc, include_dir};

/// `ffi/examples/SRC` compiled and linked against `libdir()` ([`nrt_tests::c::compile`]).
fn compile(src: &str, exe: &str) -> PathBuf {
    let out = out_dir().join(exe);
    nrt_tests::c::compile(&root().join("ffi/examples").join(src), &out, libdir());
    out
}

fn client() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile("nrt_client.c", "nrt_client"))
}

/// Runs the C client on `device` (extra environment `env`, under `wrapper` if any), checks
/// its summary line and returns its stdout and stderr.
fn run_client(device: &str, env: &[(&str, &str)], wrapper: &[&str]) -> (String, String) {
    let exe = client();
    let (prog, args): (&Path, Vec<&std::ffi::OsStr>) = match wrapper.split_first() {
        Some((w, rest)) => (
            Path::new(w),
            rest.iter()
                .map(std::ffi::OsStr::new)
                .chain([exe.as_os_str()])
                .collect(),
        ),
        None => (exe, Vec::new()),
    };
    let o = Command::new(prog)
        .args(args)
        .arg(root().join("examples/models"))
        .env("NRT_DMEM_DEVICE", device)
        .env_remove("NEURON_RT_VISIBLE_CORES")
        .env_remove("NEURON_RT_NUM_CORES")
        .env_remove("NEURON_RT_VIRTUAL_CORE_SIZE")
        .env_remove("NRT_DMEM_SIM_CHANNEL_SIZE")
        .envs(env.iter().copied())
        .env("NEURON_RT_LOG_LEVEL", "ERROR")
        .output()
        .expect("run nrt_client");
    let o = check(&format!("nrt_client on {device} {env:?} {wrapper:?}"), o);
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    let last = stdout.lines().last().unwrap_or_default().to_string();
    let (p, f) = last
        .split_once(" passed, ")
        .unwrap_or_else(|| panic!("no summary line in:\n{stdout}"));
    let passed: u32 = p.trim().parse().unwrap();
    assert_eq!(f.trim(), "0 failed", "{stdout}");
    assert!(passed > 300, "only {passed} checks ran:\n{stdout}");
    eprintln!("nrt_client on {device} {env:?} {wrapper:?}: {last}");
    (stdout, stderr)
}

#[test]
fn c_client_passes_on_trn2() {
    // Its own TMPDIR, to find the OOM table libnrt writes at a device OOM (public API §5).
    let tmp = out_dir().join("oom-tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let (out, err) = run_client("sim:trn2", &[("TMPDIR", tmp.to_str().unwrap())], &[]);
    assert!(
        out.contains("Failed to allocate"),
        "OOM report printed:\n{out}"
    );
    // The table is logged at ERROR and written to a file, with what the model asked for.
    assert!(
        err.contains("ND 0 memory usage (") && err.contains("largest live allocations"),
        "{err}"
    );
    assert!(err.contains("while loading model"), "{err}");
    let files: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("nrt-dmem-oom-nd0-"))
        })
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let table = std::fs::read_to_string(&files[0]).unwrap();
    assert!(table.contains("Failed to allocate"), "{table}");
    assert!(
        err.contains(&format!("written to {}", files[0].display())),
        "{err}"
    );
}

#[test]
fn c_client_passes_on_trn1_where_host_tensors_work() {
    run_client("sim:trn1", &[], &[]);
}

/// Runs the client under memcheck (`None`, with a note, when valgrind is not installed).
fn run_client_under_memcheck(device: &str, env: &[(&str, &str)]) -> Option<String> {
    if !nrt_tests::tool("valgrind") {
        return None;
    }
    let memcheck = [
        "valgrind",
        "--quiet",
        "--error-exitcode=1",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite,indirect,possible",
    ];
    Some(run_client(device, env, &memcheck).0)
}

/// The client under memcheck on trn1 (host tensors work there).
#[test]
fn c_client_is_clean_under_valgrind_on_trn1() {
    run_client_under_memcheck("sim:trn1", &[]);
}

/// The client under memcheck on trn2 (LNC 2, host tensors refused). Valgrind's address space
/// stops at 64 GiB and a full trn2 reserves 4 × 24 GiB of HBM, so this one runs with 8 GiB
/// channels (`NRT_DMEM_SIM_CHANNEL_SIZE`); the client expects that limit.
#[test]
fn c_client_is_clean_under_valgrind_on_trn2() {
    let channel = (8u64 << 30).to_string();
    if let Some(out) =
        run_client_under_memcheck("sim:trn2", &[("NRT_DMEM_SIM_CHANNEL_SIZE", &channel)])
    {
        assert!(
            out.contains("Failed to allocate"),
            "OOM report printed:\n{out}"
        );
    }
}

#[test]
fn dropin_program_builds_with_only_nrt_h_and_lnrt() {
    let exe = compile("dropin.c", "dropin");
    let o = check(
        "dropin",
        Command::new(&exe)
            .env("NRT_DMEM_DEVICE", "sim:trn2")
            .output()
            .unwrap(),
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("round trip ok"));
    // SONAME: the program depends on libnrt.so.1, as against AWS's library.
    if nrt_tests::tool("readelf") {
        let d = check(
            "readelf -d",
            Command::new("readelf")
                .arg("-d")
                .arg(&exe)
                .output()
                .unwrap(),
        );
        let text = String::from_utf8_lossy(&d.stdout);
        assert!(text.contains("[libnrt.so.1]"), "{text}");
    }
}

/// Calls from an `atexit` handler, where the main thread's thread-local storage has already
/// been destroyed: each failing call returns its status and the last-error getter a valid
/// (static) string; no panic crosses the C ABI (a panic there would abort the process).
/// Also under memcheck when valgrind is installed: nothing reads freed thread-local memory.
#[test]
fn calls_from_an_atexit_handler_return_statuses() {
    let exe = compile("atexit.c", "atexit");
    let memcheck: &[&str] = &["valgrind", "--quiet", "--error-exitcode=1"];
    let mut wrappers = vec![&[][..]];
    if nrt_tests::tool("valgrind") {
        wrappers.push(memcheck);
    }
    for wrapper in wrappers {
        for args in [&[][..], &["init"][..]] {
            let mut cmd = match wrapper.split_first() {
                Some((w, rest)) => {
                    let mut c = Command::new(w);
                    c.args(rest).arg(&exe);
                    c
                }
                None => Command::new(&exe),
            };
            let o = cmd
                .args(args)
                .env("NRT_DMEM_DEVICE", "sim:trn1")
                .env("NEURON_RT_LOG_LEVEL", "ERROR")
                .output()
                .unwrap();
            let what = format!("atexit {args:?} {wrapper:?}");
            let o = check(&what, o);
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                out.contains("main: returning")
                    && out.contains("storage has been destroyed")
                    && out.trim_end().ends_with("atexit: ok"),
                "{what}:\n{out}\n--- stderr\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

#[test]
fn headers_compile_as_cpp() {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    if !nrt_tests::tool(&cxx) {
        return;
    }
    let out = out_dir().join("dropin_cpp.o");
    let o = Command::new(&cxx)
        .args([
            "-x",
            "c++",
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-c",
            "-I",
        ])
        .arg(include_dir())
        .arg(root().join("ffi/examples/dropin.c"))
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    check("compiling dropin.c as C++", o);
    // The layout header too, asserts included: debugger and crash-dump tools are often C++.
    let src = out_dir().join("layout_probe.cpp");
    std::fs::write(
        &src,
        "#include <nrt_layout.h>\nint main() { return (int)sizeof(mla_t) == 590008 ? 0 : 1; }\n",
    )
    .unwrap();
    let o = Command::new(&cxx)
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-c", "-I"])
        .arg(include_dir())
        .arg(&src)
        .arg("-o")
        .arg(out_dir().join("layout_probe.o"))
        .output()
        .unwrap();
    check("compiling nrt_layout.h as C++", o);
}

#[test]
fn dropin_links_statically_against_libnrt_a() {
    let exe = out_dir().join("dropin_static");
    let o = Command::new(cc())
        .args(["-std=c11", "-I"])
        .arg(include_dir())
        .arg(root().join("ffi/examples/dropin.c"))
        .arg("-o")
        .arg(&exe)
        .arg(libdir().join("libnrt.a"))
        .args(["-lpthread", "-ldl", "-lm", "-lgcc_s"])
        .output()
        .unwrap();
    check("linking dropin.c with libnrt.a", o);
    let o = Command::new(&exe)
        .env("NRT_DMEM_DEVICE", "sim:trn1")
        .output()
        .unwrap();
    check("dropin_static", o);
}

/// The C compiler and Rust agree on every struct the headers declare.
#[test]
fn header_structs_have_rust_sizes_and_offsets() {
    use std::mem::{offset_of, size_of};
    macro_rules! facts {
        ($($t:ident { $($f:ident),* }),* $(,)?) => {{
            let mut s = String::new();
            $(
                s += &format!(
                    "_Static_assert(sizeof({}) == {}, \"sizeof {}\");\n",
                    stringify!($t), size_of::<nrt::$t>(), stringify!($t)
                );
                $(
                    s += &format!(
                        "_Static_assert(offsetof({}, {}) == {}, \"{}.{}\");\n",
                        stringify!($t), stringify!($f), offset_of!(nrt::$t, $f),
                        stringify!($t), stringify!($f)
                    );
                )*
            )*
            s
        }};
    }
    let mut c = String::from("#include <stddef.h>\n#include <nrt/nrt.h>\n#include <nrt/nrtx.h>\n");
    c += &facts!(
        nrt_tensor_device_allocation_info_t {
            physical_address,
            size,
            hbm_index
        },
        nrt_vnc_memory_stats_t {
            bytes_used,
            bytes_limit
        },
        nrtx_vnc_memory_stats_t {
            bytes_used,
            bytes_limit,
            bytes_peak,
            host_bytes_used,
            host_bytes_peak
        },
        nrtx_vnc_usage_t {
            device,
            device_peak,
            host,
            host_peak
        },
        nrtx_hbm_stats_t {
            device,
            hbm_index,
            num_devices,
            num_hbm,
            capacity,
            free,
            largest_free_block,
            allocations,
            small_object_free,
            small_object_largest_free_block
        },
        nrtx_model_memory_t {
            vnc,
            subgraphs,
            allocations,
            bytes,
            device_by_usage,
            scratchpad_pages,
            shared_ext_isa
        },
    );
    c += &format!(
        "_Static_assert(sizeof(NRT_STATUS) == {}, \"status\");\n\
         _Static_assert(NRT_TENSOR_PLACEMENT_VIRTUAL == {} && NRT_FRAMEWORK_TYPE_PRECHECK == {}, \"enums\");\n\
         _Static_assert(NRTX_USAGE_TYPE_COUNT == {}, \"usage count\");\n",
        size_of::<nrt::NRT_STATUS>(),
        nrt::NRT_TENSOR_PLACEMENT_VIRTUAL,
        nrt::NRT_FRAMEWORK_TYPE_PRECHECK,
        nrt::NRTX_USAGE_TYPE_COUNT,
    );
    let src = out_dir().join("layout_check.c");
    std::fs::write(&src, c).unwrap();
    let o = Command::new(cc())
        .args([
            "-std=c11",
            "-Wall",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
            "-I",
        ])
        .arg(include_dir())
        .arg(&src)
        .output()
        .unwrap();
    check("layout_check.c", o);
}

/// The functions the installed headers declare and the library exports (all but the driver
/// library's `ndl_*`, the datastore's `nds_*` and the inline `nbitmap_*`): name and parameter
/// declarations, read from the one-line prototypes of `ffi/include/{nrt,ndl}/**.h`.
fn exported_prototypes() -> Vec<(String, Vec<String>)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "h") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    for sub in ["nrt", "ndl"] {
        walk(&include_dir().join(sub), &mut files);
    }
    let mut v = Vec::new();
    for f in files {
        for line in std::fs::read_to_string(&f).unwrap().lines() {
            let line = line.trim();
            let skip = ["#", "*", "/", "typedef", "static", "return"];
            if !line.ends_with(");") || skip.iter().any(|s| line.starts_with(s)) {
                continue;
            }
            let Some((head, rest)) = line.split_once('(') else {
                continue;
            };
            // `RET NAME`: identifiers, spaces and stars only (not a statement of an inline body).
            let declaration = head.contains(' ')
                && head
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == ' ' || c == '*');
            if !declaration {
                continue;
            }
            let Some(name) = head
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .next_back()
            else {
                continue;
            };
            if ["ndl_", "nds_", "nbitmap_"]
                .iter()
                .any(|p| name.starts_with(p))
            {
                continue;
            }
            let params = rest.trim_end_matches(");").trim();
            let params: Vec<String> = if params == "void" || params.is_empty() {
                Vec::new()
            } else {
                params.split(',').map(|p| p.trim().to_string()).collect()
            };
            v.push((name.to_string(), params));
        }
    }
    v.sort();
    v
}

/// Functions that succeed whatever their arguments (no failure, so nothing to name):
/// documented no-ops on NULL, lookups that answer every value.
const NEVER_FAIL: &[&str] = &[
    "nrt_get_status_as_str",
    "nrtx_get_usage_type_name",
    "nrtx_get_last_error_message",
    "nrt_tensor_free",
    "nrt_destroy_tensor_set",
    "nrt_free_model_tensor_info",
];

/// Every exported function, called with bad arguments (NULL pointers, all-ones integers)
/// before `nrt_init` and after it, logs its failure under its own name: each call's ERROR lines
/// are the function's own (`NRT:<function>`) or the core's (`NRT:nrt`), and there is one of
/// the function's own. `nrt_init` and `nrt_close` are called for real in between.
#[test]
fn every_export_names_itself_when_it_fails() {
    let fns = exported_prototypes();
    assert!(fns.len() > 150, "{} functions", fns.len());
    let mut c = String::from("#include <stdio.h>\n#include <string.h>\n");
    for sub in ["nrt", "ndl"] {
        let mut hs: Vec<String> = Vec::new();
        for e in std::fs::read_dir(include_dir().join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "h") {
                hs.push(p.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
        hs.sort();
        for h in hs {
            c += &format!("#include <{sub}/{h}>\n");
        }
    }
    c += "static void all(void) {\n";
    let mut called = Vec::new();
    for (name, params) in &fns {
        if name == "nrt_init" || name == "nrt_close" {
            continue;
        }
        let args: Vec<&str> = params
            .iter()
            .map(|p| {
                if p.contains('*') || p.starts_with("NRT_ASYNC_EXEC_STATUS_CALLBACK") {
                    "NULL"
                } else {
                    "-1"
                }
            })
            .collect();
        c += &format!(
            "    fprintf(stderr, \"@@ {name}\\n\");\n    (void){name}({});\n",
            args.join(", ")
        );
        called.push(name.clone());
    }
    c += "}\nint main(int argc, char **argv) {\n\
          \x20   if (argc > 1 && strcmp(argv[1], \"init\") == 0) {\n\
          \x20       if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, \"\", \"\") != NRT_SUCCESS) return 2;\n\
          \x20   }\n\
          \x20   all();\n\
          \x20   fprintf(stderr, \"@@ end\\n\");\n\
          \x20   nrt_close();\n\
          \x20   return 0;\n}\n";
    let src = out_dir().join("names_itself.c");
    std::fs::write(&src, c).unwrap();
    let exe = out_dir().join("names_itself");
    nrt_tests::c::compile(&src, &exe, libdir());
    for phase in ["uninit", "init"] {
        let o = check(
            &format!("names_itself {phase}"),
            Command::new(&exe)
                .arg(phase)
                .env("NRT_DMEM_DEVICE", "sim:trn2")
                .env("NEURON_RT_LOG_LEVEL", "ERROR")
                .output()
                .unwrap(),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        let mut sections: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        let mut current = "";
        for line in err.lines() {
            if let Some(f) = line.strip_prefix("@@ ") {
                current = f;
                sections.entry(f).or_default();
            } else if !current.is_empty() {
                sections.get_mut(current).unwrap().push(line);
            }
        }
        let mut bad = Vec::new();
        for f in &called {
            let lines = &sections[f.as_str()];
            let own = format!(" NRT:{f} ");
            let foreign: Vec<&&str> = lines
                .iter()
                .filter(|l| !l.contains(&own) && !l.contains(" NRT:nrt "))
                .collect();
            let named = lines.iter().any(|l| l.contains(&own));
            if !foreign.is_empty() || (!named && !NEVER_FAIL.contains(&f.as_str())) {
                bad.push(format!("{f} ({phase}): {lines:?}"));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
        eprintln!("{phase}: {} functions named themselves", called.len());
    }
}
