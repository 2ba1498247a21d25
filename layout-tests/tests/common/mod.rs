//! Helpers shared by the nrt-layout integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A fresh scratch directory for one test under cargo's per-crate temp dir.
pub fn workdir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("nrt-layout")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    d
}

/// A check that needs a tool this machine lacks: skipped with a note, or — when
/// `NRT_REQUIRE_TOOLS` is set, as `cargo xtask ci` sets it after installing them — a failure, so CI
/// cannot pass without running it.
pub fn skip(why: &str) {
    if std::env::var_os("NRT_REQUIRE_TOOLS").is_some() {
        panic!("{why}, and NRT_REQUIRE_TOOLS is set: this check must run here");
    }
    eprintln!("skipping: {why}");
}

/// `true` when `cc` runs; otherwise skips ([`skip`]).
pub fn have_cc() -> bool {
    let ok = nrt_layout::ccheck::compiler_available();
    if !ok {
        skip("no C compiler (`cc` / $CC) on PATH");
    }
    ok
}

/// The generated header text.
pub fn header() -> String {
    nrt_layout::header::generate().expect("header generates")
}

/// `text` with the first `from` replaced by `to`; panics when `from` is absent so a stale
/// mutation cannot pass silently.
pub fn mutate(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "mutation anchor `{from}` not in the text"
    );
    text.replacen(from, to, 1)
}

/// The member line of `decl` inside `struct name { ... }` of the header, replaced by `new_decl`.
pub fn mutate_member(header: &str, strukt: &str, decl: &str, new_decl: &str) -> String {
    let open = format!("struct {strukt} {{\n");
    let start = header.find(&open).expect("struct in header");
    let end = start + header[start..].find("\n};").expect("struct end");
    let body = &header[start..end];
    let needle = format!(" {decl};");
    assert!(body.contains(&needle), "`{decl}` not in struct {strukt}");
    let new_body = body.replacen(&needle, &format!(" {new_decl};"), 1);
    format!("{}{}{}", &header[..start], new_body, &header[end..])
}
