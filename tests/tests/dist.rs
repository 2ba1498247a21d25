//! The installed library: `cargo xtask dist --prefix DIR` lays out
//! libnrt like AWS's package, with the CLI (`bin/nrt-dmem`) and the examples
//! (`share/nrt-dmem/examples`) beside it. From the prefix alone, as a C developer would: the
//! installed `nrt-dmem neff pack` makes a NEFF of each installed example manifest, and the
//! documented flow (`doc_flow.c`, written only against the public SDK headers) builds with
//! `pkg-config` against the prefix and runs on sim:trn2 with each manifest and NEFF, natively
//! and under valgrind. A program taking the address of every function the SDK headers declare
//! (`ffi/tests/sdk-facts.toml`; but the driver library's and the datastore's, which libnrt does
//! not export) links against it. The library carries libnrt 2.31's version nodes and its 145
//! exports; a client linked against a stub with those nodes runs against it without a loader
//! warning, also with `LD_BIND_NOW=1`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use nrt_tests::check_output as check;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn out_dir() -> PathBuf {
    let t = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_relative() { root().join(p) } else { p })
        .unwrap_or_else(|| root().join("target"));
    let d = t.join("nrt-dist-test");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `None` (with a note) when `tool` is missing and `NRT_REQUIRE_TOOLS` is not set
/// ([`nrt_tests::tool`]).
fn require(tool: &str) -> Option<()> {
    nrt_tests::tool(tool).then_some(())
}

/// `cargo xtask dist --prefix <out>/prefix --debug`, once.
fn prefix() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let p = out_dir().join("prefix");
        let _ = std::fs::remove_dir_all(&p);
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let o = Command::new(cargo)
            .current_dir(root())
            .args([
                "run", "--quiet", "-p", "xtask", "--", "dist", "--debug", "--prefix",
            ])
            .arg(&p)
            .output()
            .unwrap();
        check("cargo xtask dist", o);
        p
    })
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// The headers under `ffi/include/{nrt,ndl}` (what dist installs), as relative paths.
fn repo_headers() -> Vec<PathBuf> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(base, &p, out);
            } else if p.extension().is_some_and(|x| x == "h") {
                out.push(p.strip_prefix(base).unwrap().to_path_buf());
            }
        }
    }
    let base = root().join("ffi/include");
    let mut v = Vec::new();
    for sub in ["nrt", "ndl"] {
        walk(&base, &base.join(sub), &mut v);
    }
    v.sort();
    v
}

/// `pkg-config --cflags --libs nrt` of the installed prefix (`None` without pkg-config).
fn pkg_config_flags() -> Option<Vec<String>> {
    require("pkg-config")?;
    let pcd = prefix().join("lib/pkgconfig");
    let flags = check(
        "pkg-config",
        Command::new("pkg-config")
            .args(["--cflags", "--libs", "nrt"])
            .env("PKG_CONFIG_PATH", &pcd)
            .output()
            .unwrap(),
    );
    Some(
        String::from_utf8_lossy(&flags.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    )
}

#[test]
fn dist_lays_out_the_library_like_libnrt() {
    let p = prefix();
    let lib = p.join("lib");
    let real = format!("libnrt.so.{}", env!("CARGO_PKG_VERSION"));
    assert!(lib.join(&real).is_file());
    assert_eq!(
        std::fs::read_link(lib.join("libnrt.so.1")).unwrap(),
        Path::new(&real)
    );
    assert_eq!(
        std::fs::read_link(lib.join("libnrt.so")).unwrap(),
        Path::new("libnrt.so.1")
    );
    assert!(lib.join("libnrt.a").is_file());
    let headers = repo_headers();
    assert!(headers.len() >= 15, "{headers:?}");
    for h in &headers {
        let installed = std::fs::read(p.join("include").join(h));
        let repo = std::fs::read(root().join("ffi/include").join(h)).unwrap();
        assert_eq!(
            installed.ok(),
            Some(repo),
            "include/{} is not the repository's",
            h.display()
        );
    }
    // The CLI and the examples a C developer starts from.
    let cli = p.join("bin/nrt-dmem");
    let o = check(
        "bin/nrt-dmem --version",
        Command::new(&cli).arg("--version").output().unwrap(),
    );
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("nrt-dmem "));
    assert_eq!(installed_manifests().len(), manifests().len());
    assert!(p.join("share/nrt-dmem/examples/doc_flow.c").is_file());
    let pc = std::fs::read_to_string(lib.join("pkgconfig/nrt.pc")).unwrap();
    assert!(
        pc.contains(&format!("prefix={}", p.display())) && pc.contains("Libs: -L${libdir} -lnrt"),
        "{pc}"
    );
    let d = check(
        "readelf -d",
        Command::new("readelf")
            .arg("-d")
            .arg(lib.join(&real))
            .output()
            .unwrap(),
    );
    assert!(String::from_utf8_lossy(&d.stdout).contains("[libnrt.so.1]"));
}

/// Code written against the SDK headers links against the prefix: one program includes the
/// SDK's 14 header files and takes the address of every function they declare (but the driver
/// library's `ndl_*` and the datastore's `nds_*`, which libnrt does not export either, and the
/// header-only bitmap helpers), built with `pkg-config`'s flags against `libnrt.so` and
/// against `libnrt.a`; it runs, and refusing calls answer as documented.
#[test]
fn every_function_the_sdk_headers_declare_links_against_the_prefix() {
    let Some(flags) = pkg_config_flags() else {
        return;
    };
    let text = std::fs::read_to_string(root().join("ffi/tests/sdk-facts.toml")).unwrap();
    let facts: toml::Table = text.parse().unwrap();
    let mut c = String::from("#include <stdio.h>\n");
    let mut names = Vec::new();
    for (h, t) in &facts {
        c += &format!("#include <{h}>\n");
        let fns = t.get("functions").and_then(|f| f.as_table());
        for name in fns.into_iter().flat_map(|f| f.keys()) {
            let driver_side = ["ndl_", "nds_", "nbitmap_"];
            if !driver_side.iter().any(|p| name.starts_with(p)) {
                names.push(name.clone());
            }
        }
    }
    assert!(names.len() > 140, "{}", names.len());
    c += "static void (*const fns[])(void) = {\n";
    for n in &names {
        c += &format!("    (void (*)(void))&{n},\n");
    }
    c += "};\n\
          int main(void) {\n\
          \x20   bool done = true;\n\
          \x20   NRT_STATUS st = nrta_is_completed(0, &done);\n\
          \x20   printf(\"%zu functions, %s, nrta_is_completed %d, nec_mla_idx_to_rid %d\\n\",\n\
          \x20          sizeof fns / sizeof fns[0], nrt_get_status_as_str(NRT_RESOURCE), (int)st,\n\
          \x20          nec_mla_idx_to_rid(0, 0));\n\
          \x20   return st == NRT_FAILURE ? 0 : 1;\n\
          }\n";
    let d = out_dir().join("sdk_link");
    std::fs::create_dir_all(&d).unwrap();
    let src = d.join("sdk_link.c");
    std::fs::write(&src, c).unwrap();
    let p = prefix();
    let libs_static: Vec<String> = flags
        .iter()
        .filter(|f| !f.starts_with("-L") && *f != "-lnrt")
        .cloned()
        .collect();
    for (name, link) in [
        ("shared", flags.clone()),
        (
            "static",
            std::iter::once(p.join("lib/libnrt.a").display().to_string())
                .chain(libs_static)
                .chain(
                    ["-lpthread", "-ldl", "-lm", "-lgcc_s"]
                        .iter()
                        .map(|s| s.to_string()),
                )
                .collect(),
        ),
    ] {
        let exe = d.join(format!("sdk_link_{name}"));
        let o = Command::new(cc())
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .args(&link)
            .arg(format!("-Wl,-rpath,{}", p.join("lib").display()))
            .output()
            .unwrap();
        check(&format!("linking every SDK function ({name})"), o);
        let o = check(
            &format!("sdk_link_{name}"),
            Command::new(&exe)
                .env("NRT_DMEM_DEVICE", "sim:trn2")
                .env("NEURON_RT_LOG_LEVEL", "OFF")
                .output()
                .unwrap(),
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.starts_with(&format!("{} functions, ", names.len()))
                && out.contains("nrta_is_completed 1, nec_mla_idx_to_rid -1"),
            "{out}"
        );
    }
}

/// Every export of libnrt 2.31 is there under its node, nrtx_ under NRTX_1.0, and nothing else
/// of ours leaks (no Rust internals in the dynamic symbol table).
#[test]
fn the_library_exports_libnrt_2_31s_table_with_its_version_nodes() {
    let so = prefix().join("lib/libnrt.so.1");
    let t = check(
        "objdump -T",
        Command::new("objdump").arg("-T").arg(&so).output().unwrap(),
    );
    let t = String::from_utf8_lossy(&t.stdout);
    let exported: std::collections::BTreeMap<&str, &str> = t
        .lines()
        .filter(|l| l.contains(" DF .text"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((*f.last()?, *f.get(f.len() - 2)?))
        })
        .collect();
    let table = std::fs::read_to_string(root().join("ffi/libnrt-2.31-exports.txt")).unwrap();
    let mut n = 0;
    for l in table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, node) = l.split_once(' ').unwrap();
        assert_eq!(
            exported.get(name),
            Some(&node),
            "{name} should be exported at {node}"
        );
        n += 1;
    }
    assert_eq!(n, 145);
    for (name, node) in &exported {
        let ok = match *node {
            "NRT_2.0.0" => name.starts_with("nrt_") || name.starts_with("nec_"),
            "NRT_3.0.0" => name.starts_with("nrta_"),
            "NRTX_1.0" => name.starts_with("nrtx_") || *name == "nrt_get_status_as_str",
            _ => false,
        };
        assert!(ok, "{name} exported at {node}");
    }
}

/// libnrt's context pointer `tdrv_ctx_0` (spec §1) survives the relink with the version
/// script as a local object of `.symtab`, where `nrt-dmem inspect` and debuggers look for it,
/// and stays out of the dynamic symbol table.
#[test]
fn the_context_pointer_is_a_local_symbol_of_the_installed_library() {
    let so = prefix().join("lib/libnrt.so.1");
    let t = check(
        "objdump -t",
        Command::new("objdump").arg("-t").arg(&so).output().unwrap(),
    );
    let t = String::from_utf8_lossy(&t.stdout);
    let line = t
        .lines()
        .find(|l| l.split_whitespace().last() == Some("tdrv_ctx_0"))
        .unwrap_or_else(|| panic!("no tdrv_ctx_0 in .symtab of {}", so.display()));
    let f: Vec<&str> = line.split_whitespace().collect();
    // `ADDRESS l O .bss 0000000000000008 tdrv_ctx_0`
    assert_eq!(&f[1..4], ["l", "O", ".bss"], "{line}");
    assert_eq!(u64::from_str_radix(f[4], 16).unwrap(), 8, "{line}");
    let d = check(
        "objdump -T",
        Command::new("objdump").arg("-T").arg(&so).output().unwrap(),
    );
    assert!(!String::from_utf8_lossy(&d.stdout).contains("tdrv_ctx_0"));
}

/// Compiles the installed `share/nrt-dmem/examples/doc_flow.c` with
/// `cc app.c $(pkg-config --cflags --libs nrt)`.
fn doc_flow() -> Option<&'static Path> {
    let flags = pkg_config_flags()?;
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    Some(EXE.get_or_init(|| {
        let p = prefix();
        let exe = out_dir().join("doc_flow");
        let o = Command::new(cc())
            .args(["-std=c11", "-g", "-Wall", "-Wextra", "-Werror", "-pedantic"])
            .arg(p.join("share/nrt-dmem/examples/doc_flow.c"))
            .arg("-o")
            .arg(&exe)
            .args(&flags)
            .arg(format!("-Wl,-rpath,{}", p.join("lib").display()))
            .output()
            .unwrap();
        check("compiling doc_flow.c against the installed prefix", o);
        exe
    }))
}

/// The repository's example manifests.
fn manifests() -> Vec<PathBuf> {
    json_files(&root().join("examples/models"))
}

/// The example manifests as installed (`share/nrt-dmem/examples/models`).
fn installed_manifests() -> Vec<PathBuf> {
    json_files(&prefix().join("share/nrt-dmem/examples/models"))
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    v.sort();
    assert!(v.len() >= 6, "{}: {v:?}", dir.display());
    v
}

/// Every installed example manifest packed into a NEFF by the installed CLI
/// (`bin/nrt-dmem neff pack MANIFEST -o FILE`), once per test run.
fn neffs() -> &'static [PathBuf] {
    static NEFFS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    NEFFS.get_or_init(|| {
        let dir = out_dir().join("neffs");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cli = prefix().join("bin/nrt-dmem");
        installed_manifests()
            .iter()
            .map(|m| {
                let out = dir.join(m.file_stem().unwrap()).with_extension("neff");
                check(
                    &format!("bin/nrt-dmem neff pack {}", m.display()),
                    Command::new(&cli)
                        .args(["neff", "pack"])
                        .arg(m)
                        .arg("-o")
                        .arg(&out)
                        .output()
                        .unwrap(),
                );
                assert!(out.is_file(), "{} written", out.display());
                out
            })
            .collect()
    })
}

/// Runs the documented flow on each of `models` (a manifest or a NEFF each).
fn run_flow(models: &[PathBuf], wrapper: &[&str], env: &[(&str, &str)]) {
    let Some(exe) = doc_flow() else { return };
    for m in models {
        let mut c = match wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let o = c
            .arg(m)
            .env("NRT_DMEM_DEVICE", "sim:trn2")
            .env("NEURON_RT_LOG_LEVEL", "OFF")
            .env_remove("NEURON_RT_VISIBLE_CORES")
            .env_remove("NEURON_RT_NUM_CORES")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let o = check(&format!("doc_flow {} {wrapper:?}", m.display()), o);
        assert!(String::from_utf8_lossy(&o.stdout).contains("doc_flow ok"));
    }
}

const VALGRIND: [&str; 5] = [
    "valgrind",
    "--quiet",
    "--error-exitcode=1",
    "--leak-check=full",
    "--errors-for-leak-kinds=definite,indirect,possible",
];

#[test]
fn the_documented_flow_runs_with_every_example_manifest() {
    run_flow(&installed_manifests(), &[], &[]);
}

/// The same flow on each example packed as a NEFF by the installed CLI: the NEFF reader, its
/// footprint and its `neff.json` tensor table behind `nrt_get_model_tensor_info`, through the
/// installed library.
#[test]
fn the_documented_flow_runs_with_every_example_packed_as_a_neff() {
    run_flow(neffs(), &[], &[]);
}

#[test]
fn the_documented_flow_is_clean_under_valgrind() {
    if require("valgrind").is_none() {
        return;
    }
    let channel = (8u64 << 30).to_string();
    // Every manifest, and the NEFFs of the examples small enough to inflate under valgrind in
    // seconds (the GB-sized weights of the others are copied byte by byte there).
    let small_neffs: Vec<PathBuf> = neffs()
        .iter()
        .filter(|p| std::fs::metadata(p).unwrap().len() < 100 << 10)
        .cloned()
        .collect();
    assert!(small_neffs.len() >= 3, "{small_neffs:?}");
    let all: Vec<PathBuf> = installed_manifests()
        .into_iter()
        .chain(small_neffs)
        .collect();
    run_flow(&all, &VALGRIND, &[("NRT_DMEM_SIM_CHANNEL_SIZE", &channel)]);
}

/// A client linked against a stub `libnrt.so.1` that carries libnrt's version nodes (and
/// references every one of the 145 exports) runs against this library: no "no version
/// information" warning, no missing symbol, also with every symbol bound at load
/// (`LD_BIND_NOW=1`); `dlvsym` finds `nrt_init@NRT_2.0.0` and `nrta_is_completed@NRT_3.0.0`.
#[test]
fn a_client_built_against_libnrts_version_nodes_loads_this_library() {
    let table = std::fs::read_to_string(root().join("ffi/libnrt-2.31-exports.txt")).unwrap();
    let names: Vec<&str> = table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split_once(' ').unwrap().0)
        .collect();
    let d = out_dir().join("stub");
    std::fs::create_dir_all(&d).unwrap();
    let stub: String = names
        .iter()
        .map(|n| format!("int {n}(void) {{ return 1; }}\n"))
        .collect();
    std::fs::write(d.join("stub.c"), stub).unwrap();
    let o = Command::new(cc())
        .args(["-shared", "-fPIC", "-Wl,-soname,libnrt.so.1"])
        .arg(format!(
            "-Wl,--version-script={}",
            root().join("ffi/libnrt.map").display()
        ))
        .arg(d.join("stub.c"))
        .arg("-o")
        .arg(d.join("libnrt.so"))
        .output()
        .unwrap();
    check("building the stub libnrt", o);
    let mut client = String::from("#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdio.h>\n");
    for n in &names {
        client += &format!("extern int {n}(void);\n");
    }
    client += "static int (*const all[])(void) = {\n";
    for n in &names {
        client += &format!("    {n},\n");
    }
    client += "};\nint main(int argc, char **argv) {\n    (void)argc;\n    void *h = dlopen(argv[1], RTLD_NOW);\n    if (!h) { puts(dlerror()); return 1; }\n    if (!dlvsym(h, \"nrt_init\", \"NRT_2.0.0\") || !dlvsym(h, \"nrta_is_completed\", \"NRT_3.0.0\")\n        || !dlvsym(h, \"nrtx_get_oom_report\", \"NRTX_1.0\") || dlvsym(h, \"nrt_init\", \"NRT_3.0.0\")) { puts(\"dlvsym\"); return 1; }\n    /* nrt_get_total_vnc_count returns a status; called for real against this library. */\n    unsigned n = 0;\n    int st = ((int (*)(unsigned *))(void (*)(void))nrt_get_total_vnc_count)(&n);\n    printf(\"%zu exports, status %d, %u cores\\n\", sizeof all / sizeof all[0], st, n);\n    return st == 0 && n > 0 ? 0 : 1;\n}\n";
    std::fs::write(d.join("client.c"), client).unwrap();
    let exe = d.join("client");
    let o = Command::new(cc())
        .arg(d.join("client.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&d)
        .args(["-lnrt", "-ldl"])
        .output()
        .unwrap();
    check("building the client against the stub", o);
    let t = check(
        "objdump -T client",
        Command::new("objdump")
            .arg("-T")
            .arg(&exe)
            .output()
            .unwrap(),
    );
    let t = String::from_utf8_lossy(&t.stdout);
    assert!(t.contains("NRT_2.0.0") && t.contains("NRT_3.0.0"), "{t}");
    let lib = prefix().join("lib");
    for bind_now in [false, true] {
        let mut c = Command::new(&exe);
        c.arg(lib.join("libnrt.so.1"))
            .env("LD_LIBRARY_PATH", &lib)
            .env("NRT_DMEM_DEVICE", "sim:trn2")
            .env("NEURON_RT_LOG_LEVEL", "OFF");
        if bind_now {
            c.env("LD_BIND_NOW", "1");
        }
        let o = check(
            &format!("client (LD_BIND_NOW {bind_now})"),
            c.output().unwrap(),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("no version information"), "{err}");
        assert!(String::from_utf8_lossy(&o.stdout).starts_with("145 exports, status 0"));
    }
}
