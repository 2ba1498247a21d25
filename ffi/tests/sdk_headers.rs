//! The installed C headers (`ffi/include/nrt/**`, `ffi/include/ndl/**`, what `cargo xtask
//! dist` installs) as a C or C++ program written against AWS's SDK headers sees them:
//!
//! - every one is ASCII;
//! - every header of the SDK's public set (`tests/sdk-facts.toml`) is there, at its path;
//! - each compiles on its own (included twice) and all compile together, as C99, C11 and
//!   C++17 with `-Wall -Wextra -Werror`;
//! - each declares what the SDK's header of the same path declares, with the SDK's values:
//!   a C program including only that header asserts every enumerator's and macro's value, every
//!   type's size, alignment and member offsets, every function's type (`_Static_assert`), and
//!   evaluates the function-like macros, bit-fields and inline functions at run time.
//!
//! Needs a C and a C++ compiler (`CC`, `CXX`; `cc`, `c++` by default).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn ffi_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn include_dir() -> PathBuf {
    ffi_dir().join("include")
}

/// The installed headers, as paths under `ffi/include` (`nrt/nrt.h`), sorted.
fn installed_headers() -> Vec<String> {
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
    let mut v = Vec::new();
    for sub in ["nrt", "ndl"] {
        walk(&include_dir().join(sub), &mut v);
    }
    let mut v: Vec<String> = v
        .iter()
        .map(|p| {
            p.strip_prefix(include_dir())
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    v.sort();
    v
}

fn facts() -> toml::Table {
    let text = std::fs::read_to_string(ffi_dir().join("tests/sdk-facts.toml")).unwrap();
    text.parse().expect("tests/sdk-facts.toml parses")
}

/// A scratch directory for this test's files, emptied first.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nrt-sdk-headers-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `c`: `Err` with `what`, the status and the output when it fails.
fn try_run(what: &str, c: &mut Command) -> Result<(), String> {
    let o = c
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {c:?}: {e}"));
    if o.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what} failed ({}):\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    ))
}

fn run(what: &str, c: &mut Command) {
    if let Err(e) = try_run(what, c) {
        panic!("{e}");
    }
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

fn cxx() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "c++".into())
}

const WARNINGS: [&str; 3] = ["-Wall", "-Wextra", "-Werror"];

#[test]
fn installed_headers_are_ascii() {
    for h in installed_headers() {
        let bytes = std::fs::read(include_dir().join(&h)).unwrap();
        if let Some(i) = bytes.iter().position(|b| !b.is_ascii()) {
            let line = bytes[..i].iter().filter(|b| **b == b'\n').count() + 1;
            panic!("{h}:{line}: byte {:#04x} is not ASCII", bytes[i]);
        }
    }
}

#[test]
fn every_sdk_header_is_installed_at_its_path() {
    let installed = installed_headers();
    let sdk: Vec<String> = facts().keys().cloned().collect();
    assert_eq!(sdk.len(), 14, "the SDK's public set has 14 headers");
    for h in &sdk {
        assert!(installed.contains(h), "{h} is not under ffi/include");
    }
}

/// One translation unit per header (included twice: the include guard), one with all of them
/// in order and one in reverse order, compiled by one compiler run per language standard.
#[test]
fn each_header_compiles_alone_and_all_together_as_c99_c11_and_cpp17() {
    let headers = installed_headers();
    let dir = scratch("compile");
    let mut units = Vec::new();
    for (i, h) in headers.iter().enumerate() {
        let p = dir.join(format!("alone{i}.c"));
        std::fs::write(
            &p,
            format!("#include \"{h}\"\n#include \"{h}\"\nint unit{i};\n"),
        )
        .unwrap();
        units.push(p);
    }
    for (name, order) in [
        ("all", headers.clone()),
        ("reversed", headers.iter().rev().cloned().collect()),
    ] {
        let mut text = String::new();
        for h in &order {
            writeln!(text, "#include \"{h}\"").unwrap();
        }
        writeln!(text, "int unit_{name};").unwrap();
        let p = dir.join(format!("{name}.c"));
        std::fs::write(&p, text).unwrap();
        units.push(p);
    }
    for (compiler, lang, std) in [
        (cc(), "c", "-std=c99"),
        (cc(), "c", "-std=c11"),
        (cxx(), "c++", "-std=c++17"),
    ] {
        run(
            &format!("compiling every header as {lang} {std}"),
            Command::new(&compiler)
                .args(["-x", lang, std, "-fsyntax-only"])
                .args(WARNINGS)
                .arg("-I")
                .arg(include_dir())
                .args(&units),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The C program that checks header `h` against its facts `t`: the header first and alone
/// (what it needs, it includes), then what the checks need.
fn fact_program(h: &str, t: &toml::Table) -> String {
    let mut c = format!(
        "/* {h} against tests/sdk-facts.toml (generated by tests/sdk_headers.rs) */\n\
         #include \"{h}\"\n#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n\
         #include <string.h>\n"
    );
    let section = |name: &str| {
        t.get(name)
            .and_then(|v| v.as_table())
            .cloned()
            .unwrap_or_default()
    };
    let lit = |v: i64| format!("{v}LL");
    for (name, v) in &section("constants") {
        let v = v.as_integer().unwrap();
        writeln!(
            c,
            "_Static_assert((long long)({name}) == {}, \"{name} is {v}\");",
            lit(v)
        )
        .unwrap();
    }
    let layouts = cfg!(target_arch = "x86_64");
    let mut in_main = String::new();
    for (ty, v) in &section("types") {
        match v {
            toml::Value::String(s) if s == "opaque" => {
                writeln!(in_main, "    {{ {ty} *p = NULL; (void)p; }}").unwrap();
            }
            toml::Value::String(s) if s == "void" => {
                writeln!(
                    c,
                    "_Static_assert(__builtin_types_compatible_p({ty}, void), \"{ty} is void\");"
                )
                .unwrap();
            }
            toml::Value::Table(l) => {
                let size = l["size"].as_integer().unwrap();
                let align = l["align"].as_integer().unwrap();
                if layouts {
                    writeln!(
                        c,
                        "_Static_assert(sizeof({ty}) == {size} && _Alignof({ty}) == {align}, \
                         \"{ty}: {size} bytes, aligned to {align}\");"
                    )
                    .unwrap();
                } else {
                    writeln!(c, "_Static_assert(sizeof({ty}) > 0, \"{ty} is complete\");").unwrap();
                }
                if let Some(sig) = l.get("signature").and_then(|s| s.as_str()) {
                    writeln!(
                        c,
                        "_Static_assert(__builtin_types_compatible_p({ty}, {sig}), \"{ty} is {sig}\");"
                    )
                    .unwrap();
                }
                for (m, off) in l
                    .get("members")
                    .and_then(|m| m.as_table())
                    .into_iter()
                    .flatten()
                {
                    let off = off.as_integer().unwrap();
                    let check = if layouts {
                        format!("offsetof({ty}, {m}) == {off}")
                    } else {
                        format!("offsetof({ty}, {m}) < sizeof({ty}) + 1")
                    };
                    writeln!(c, "_Static_assert({check}, \"{ty}.{m} at {off}\");").unwrap();
                }
            }
            other => panic!("{h}: type {ty}: unexpected fact {other}"),
        }
    }
    for (f, sig) in &section("functions") {
        let sig = sig.as_str().unwrap();
        writeln!(
            c,
            "_Static_assert(__builtin_types_compatible_p(__typeof__(&{f}), {sig}), \"{f} is {sig}\");"
        )
        .unwrap();
    }
    let exprs = section("expressions");
    if exprs.keys().any(|e| e.contains("fact_bits")) {
        c.push_str("static uint64_t fact_bits[2];\n");
    }
    c.push_str("int main(void) {\n    int bad = 0;\n");
    c.push_str(&in_main);
    for (e, v) in &exprs {
        let v = v.as_integer().unwrap();
        let shown = e.replace('\\', "\\\\").replace('"', "\\\"");
        writeln!(
            c,
            "    if ((long long)({e}) != {}) {{ printf(\"{shown} is %lld, not {v}\\n\", (long long)({e})); bad++; }}",
            lit(v)
        )
        .unwrap();
    }
    for (name, v) in &section("strings") {
        let v = v.as_str().unwrap();
        writeln!(
            c,
            "    if (strcmp({name}, \"{v}\") != 0) {{ printf(\"{name} is %s\\n\", {name}); bad++; }}"
        )
        .unwrap();
    }
    c.push_str("    return bad;\n}\n");
    c
}

#[test]
fn each_header_declares_the_sdks_names_with_the_sdks_values() {
    let dir = scratch("facts");
    let facts = facts();
    let mut checked = 0;
    let mut failures = Vec::new();
    for (h, t) in &facts {
        let t = t.as_table().unwrap();
        let stem = h.replace(['/', '.'], "_");
        let src = dir.join(format!("{stem}.c"));
        let exe = dir.join(&stem);
        std::fs::write(&src, fact_program(h, t)).unwrap();
        let checked_here = try_run(
            &format!("compiling the facts of {h} ({})", src.display()),
            Command::new(cc())
                .args(["-std=c11"])
                .args(WARNINGS)
                .arg("-I")
                .arg(include_dir())
                .arg(&src)
                .arg("-o")
                .arg(&exe),
        )
        .and_then(|()| try_run(&format!("the facts of {h}"), &mut Command::new(&exe)));
        if let Err(e) = checked_here {
            failures.push(e);
            continue;
        }
        checked += t
            .values()
            .map(|s| s.as_table().map_or(0, |s| s.len()))
            .sum::<usize>();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked > 850, "only {checked} facts");
    let _ = std::fs::remove_dir_all(&dir);
}
