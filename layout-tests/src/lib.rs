//! # nrt-layout — layout conformance for nrt-dmem
//!
//! nrt-dmem's structs must sit at libnrt 2.31's offsets (docs/ARCHITECTURE.md principle 1: "the bytes
//! are the spec"). This crate proves it three ways. Each compares what was built with the spec's
//! facts (`layout-facts.toml`, [`facts::Pins`]'s `expected_*`) wherever the spec states a value,
//! and with the tables `abi_struct!` produces (`nrt_core::abi::{STRUCTS, ENUMS}`) elsewhere; so a
//! spec-breaking edit fails all three even after the generated files are regenerated:
//!
//! 1. **Rust** — [`report`]: the layout report (`cargo xtask layout [--json|--markdown]`), and the
//!    integration tests that hold every fact of `layout-facts.toml` ([`facts`]) against the tables.
//! 2. **The C compiler** — [`header`] generates `ffi/include/nrt_layout.h`, whose
//!    `_Static_assert`s state the spec's values; [`ccheck`] compiles a probe against it with the
//!    system `cc` and compares every `offsetof`/`sizeof`/array bound.
//! 3. **DWARF** — [`dwarf`] reads struct/enum types from an ELF's debug info (gimli + object);
//!    [`check`](mod@check) compares them fact by fact: `cargo xtask ci` runs it on the
//!    `libnrt.so` this workspace builds, and it runs as well on a real `libnrt.so.2.31.24.0`,
//!    which ships with DWARF (docs/SPEC.md, the introduction).
//!
//!    [`fixture`] generates a C/C++ fixture from the facts alone, so the checker's `--pinned`
//!    mode is tested in every DWARF flavour whatever state the Rust layouts are in.
//!
//! [`cli::run_cli`] is the command line (`nrt-layout check|dump|show|write|drift`), shared by the
//! `nrt-layout` binary, `cargo xtask layout` and `nrt-dmem layout`.

pub mod ccheck;
pub mod check;
pub mod cli;
pub mod dwarf;
pub mod facts;
pub mod fixture;
pub mod header;
pub mod markdown;
pub mod report;

pub use check::{check, CheckOptions, Mode, Report};
pub use cli::run_cli;
pub use dwarf::{dump, DwarfError};

use nrt_core::abi::meta::{FieldInfo, StructInfo};

/// How a generated file cites the section of a struct or enum: `spec §N` (docs/SPEC.md), or
/// `public API §1` (docs/INTERFACES.md) for the public status codes.
pub fn citation(section: &str) -> String {
    match section {
        "public" => "public API §1".to_owned(),
        s => format!("spec §{s}"),
    }
}

/// Path of the generated C header, relative to the workspace root.
pub const HEADER_PATH: &str = "ffi/include/nrt_layout.h";
/// Path of the generated Markdown layout report, relative to the workspace root.
pub const MARKDOWN_PATH: &str = "docs/LAYOUT.md";

/// `true` for the `_reserved_NNNN` spans that keep libnrt's size (not members libnrt has).
pub fn is_reserved(f: &FieldInfo) -> bool {
    f.provenance == nrt_core::abi::meta::Provenance::Reserved
}

/// `true` when a member's offset (and shape) is the spec's: provenance observed or inferred.
pub fn is_pinned(f: &FieldInfo) -> bool {
    matches!(
        f.provenance,
        nrt_core::abi::meta::Provenance::Observed | nrt_core::abi::meta::Provenance::Inferred
    )
}

/// The struct a member embeds by value (its element type when it is an array), if that type is
/// one of the ABI structs.
pub fn embedded_struct(f: &FieldInfo) -> Option<&'static StructInfo> {
    nrt_core::abi::struct_info(f.c_base)
}

/// The full C spelling of a member's type: `uint64_t[8][23]`, `dmem_t *`, `ht_node_t[]`.
pub fn c_type(f: &FieldInfo) -> String {
    let mut s = String::from(f.c_base);
    for d in f.dims() {
        if *d == 0 {
            s.push_str("[]");
        } else {
            s.push_str(&format!("[{d}]"));
        }
    }
    s
}

/// The workspace root this crate was built in (`layout-tests/..`).
pub fn default_root() -> std::path::PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}
