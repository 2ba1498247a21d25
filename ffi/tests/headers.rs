//! The C headers of `libnrt.so` (`ffi/include/nrt/{nrt_status,nrt,nrtx}.h`), generated from
//! this crate's Rust source and kept in git (STYLE.md #12, rust-analyzer's "sourcegen" tests).
//!
//! `cargo test` fails when a committed header differs from what the source generates;
//! `cargo xtask headers` (this test with `NRT_UPDATE_HEADERS=1`) rewrites them.
//!
//! The generator is a small cbindgen: it parses `ffi/src/*.rs` with `syn` and emits, in source
//! order, `#define`s for plain `pub const`s, a `typedef enum` for every `pub type X = u32`
//! with `pub const`s of type `X`, opaque `typedef struct` for zero-sized `repr(C)` structs and
//! for types re-exported from another crate, full `typedef struct`s for the others, and a
//! prototype for every `#[no_mangle] extern "C" fn`, each with its doc comment. The status
//! enum's members come from `nrt_core::abi::NRT_STATUS::INFO`, the one table of status codes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use quote::ToTokens;
use syn::{Attribute, Expr, FnArg, Item, Lit, Pat, ReturnType, Type};

struct Header {
    /// Path under `ffi/include`.
    path: &'static str,
    /// What it is, for the banner.
    summary: &'static str,
    /// Headers it includes (`<…>` or `"…"`).
    includes: &'static [&'static str],
    /// Source files (under `ffi/src`) in emission order.
    sources: &'static [&'static str],
}

const HEADERS: &[Header] = &[
    Header {
        path: "nrt/nrt_status.h",
        summary: "Status codes of the Neuron runtime API (nrt_status.h, public API section 1).",
        includes: &[],
        sources: &["status.rs"],
    },
    Header {
        path: "nrt/nrt.h",
        summary: "nrt-dmem's libnrt.so-compatible subset of the Neuron runtime API (nrt.h, API \
                  2.0, public API section 2): init/close, load/unload/execute, tensors, tensor \
                  sets, memory stats. A program written for AWS's <nrt/nrt.h> compiles unchanged \
                  against this header for these functions and links with -lnrt.",
        includes: &[
            "<stdbool.h>",
            "<stddef.h>",
            "<stdint.h>",
            "\"nrt/nrt_status.h\"",
            "\"ndl/neuron_driver_shared_tensor_batch_op.h\"",
        ],
        sources: &[
            "types.rs",
            "info.rs",
            "runtime.rs",
            "model.rs",
            "model_ext.rs",
            "set.rs",
            "tensor.rs",
            "batch.rs",
            "stats.rs",
            "unsupported.rs",
        ],
    },
    Header {
        path: "ndl/neuron_driver_shared_tensor_batch_op.h",
        summary: "One operation of a batched tensor read or write (the SDK's \
                  ndl/neuron_driver_shared_tensor_batch_op.h, shared with the driver).",
        includes: &["<stdint.h>"],
        sources: &["batch_op.rs"],
    },
    Header {
        path: "nrt/nrt_experimental.h",
        summary: "The Neuron runtime's experimental API (nrt_experimental.h, libnrt 2.31): a \
                  model's input/output tensor table, its logical core, and the experimental \
                  entry points this library does not implement (they fail with NRT_FAILURE).",
        includes: &[
            "<stdbool.h>",
            "<stddef.h>",
            "<stdint.h>",
            "\"nrt/nrt_status.h\"",
            "\"nrt/nrt.h\"",
        ],
        sources: &["experimental.rs"],
    },
    Header {
        path: "nrt/nrt_version.h",
        summary: "The runtime's version (nrt_version.h): nrt_get_version.",
        includes: &["<stddef.h>", "<stdint.h>", "\"nrt/nrt_status.h\""],
        sources: &["version.rs"],
    },
    Header {
        path: "nrt/nrtx.h",
        summary: "nrt-dmem extensions (nrtx_*): the per-usage memory ledger of a logical core, \
                  peaks and their reset, free bytes and the largest free block of each HBM, a \
                  model's footprint, the out-of-memory report as text, the last error message.",
        includes: &["<stddef.h>", "<stdint.h>", "\"nrt/nrt.h\""],
        sources: &["nrtx.rs"],
    },
];

fn ffi_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn docs(attrs: &[Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(l) => match &l.lit {
                    Lit::Str(s) => Some(s.value()),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .map(|l| {
            let l = ascii(l.strip_prefix(' ').unwrap_or(&l).trim_end());
            if l == "# Safety" {
                "Safety:".to_string()
            } else {
                l
            }
        })
        .collect()
}

/// Headers stay ASCII whatever the Rust docs use: typographic characters get their ASCII
/// spelling, a run of superscript digits becomes a power (`2³²` -> `2^32`), and any other
/// non-ASCII character stops the generator (add its spelling here).
fn ascii(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_power = false;
    for c in s.chars() {
        // Superscript digits and minus, in the order of their ASCII spellings.
        let sup = "⁰¹²³⁴⁵⁶⁷⁸⁹⁻".chars().position(|d| d == c);
        if let Some(i) = sup {
            if !in_power {
                out.push('^');
            }
            out.push(if i == 10 {
                '-'
            } else {
                char::from(b'0' + i as u8)
            });
            in_power = true;
            continue;
        }
        in_power = false;
        match c {
            '…' => out.push_str("..."),
            '→' => out.push_str("->"),
            '—' | '–' => out.push_str("--"),
            '≤' => out.push_str("<="),
            '≥' => out.push_str(">="),
            '×' => out.push('x'),
            '§' => out.push_str("section "),
            'µ' => out.push('u'),
            c if c.is_ascii() => out.push(c),
            c => panic!("no ASCII spelling for `{c}` in a header comment: {s}"),
        }
    }
    out
}

fn comment(out: &mut String, indent: &str, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    if lines.len() == 1 {
        writeln!(out, "{indent}/** {} */", lines[0]).unwrap();
        return;
    }
    writeln!(out, "{indent}/**").unwrap();
    for l in lines {
        if l.is_empty() {
            writeln!(out, "{indent} *").unwrap();
        } else {
            writeln!(out, "{indent} * {l}").unwrap();
        }
    }
    writeln!(out, "{indent} */").unwrap();
}

fn last_ident(p: &syn::TypePath) -> String {
    p.path
        .segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default()
}

/// The C spelling of a Rust type (without a declarator).
fn ctype(t: &Type) -> String {
    match t {
        Type::Ptr(p) => {
            let inner = ctype(&p.elem);
            let inner = if p.const_token.is_some() && !matches!(&*p.elem, Type::Ptr(_)) {
                format!("const {inner}")
            } else {
                inner
            };
            if inner.ends_with('*') {
                format!("{inner}*")
            } else {
                format!("{inner} *")
            }
        }
        Type::Path(p) => {
            let id = last_ident(p);
            match id.as_str() {
                "u8" => "uint8_t",
                "u16" => "uint16_t",
                "u32" => "uint32_t",
                "u64" => "uint64_t",
                "i8" => "int8_t",
                "i16" => "int16_t",
                "i32" => "int32_t",
                "i64" => "int64_t",
                "usize" => "size_t",
                "isize" => "ptrdiff_t",
                "c_int" => "int",
                "c_uint" => "unsigned int",
                "c_char" => "char",
                "c_void" => "void",
                "bool" => "bool",
                other => other,
            }
            .to_string()
        }
        Type::Tuple(t) if t.elems.is_empty() => "void".into(),
        other => panic!("no C spelling for Rust type `{}`", other.to_token_stream()),
    }
}

/// `type name` (or `type name[N]` for arrays).
fn declarator(t: &Type, name: &str) -> String {
    match t {
        Type::Array(a) => {
            let len = a.len.to_token_stream().to_string().replace(' ', "");
            // `[T; 0]` at a struct's end is C's flexible array member.
            let len = if len == "0" { String::new() } else { len };
            format!("{} {name}[{len}]", ctype(&a.elem))
        }
        t => {
            let c = ctype(t);
            if c.ends_with('*') {
                format!("{c}{name}")
            } else {
                format!("{c} {name}")
            }
        }
    }
}

/// The function type of `Option<unsafe extern "C" fn(..)>` (a nullable C function pointer).
fn fn_pointer(t: &Type) -> Option<&syn::TypeBareFn> {
    let Type::Path(p) = t else { return None };
    let seg = p.path.segments.last()?;
    if seg.ident != "Option" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &seg.arguments else {
        return None;
    };
    match args.args.first()? {
        syn::GenericArgument::Type(Type::BareFn(f)) => Some(f),
        _ => None,
    }
}

/// `ret (*name)(type param, ...)`.
fn fn_pointer_decl(f: &syn::TypeBareFn, name: &str) -> String {
    let ret = match &f.output {
        ReturnType::Default => "void".to_string(),
        ReturnType::Type(_, t) => ctype(t),
    };
    let params: Vec<String> = f
        .inputs
        .iter()
        .map(|a| match &a.name {
            Some((id, _)) => declarator(&a.ty, &id.to_string()),
            None => ctype(&a.ty),
        })
        .collect();
    format!("{ret} (*{name})({})", params.join(", "))
}

/// `nrt_model_t` → `nrt_model` (the struct tag the public header uses).
fn tag(name: &str) -> &str {
    name.strip_suffix("_t").unwrap_or(name)
}

fn is_pub(v: &syn::Visibility) -> bool {
    matches!(v, syn::Visibility::Public(_))
}

fn has_attr(attrs: &[Attribute], name: &str) -> bool {
    attrs.iter().any(|a| a.path().is_ident(name))
}

fn int_value(e: &Expr) -> Option<String> {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => Some(i.base10_digits().to_string()),
            _ => None,
        },
        _ => None,
    }
}

/// Everything one source file contributes to a header.
fn emit_file(out: &mut String, file: &str) {
    let path = ffi_dir().join("src").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // Enum aliases: `pub type X = u32` with `pub const NAME: X = …` in the same file.
    let consts: Vec<(String, String, String, Vec<String>)> = ast
        .items
        .iter()
        .filter_map(|i| match i {
            Item::Const(c) if is_pub(&c.vis) => Some((
                c.ident.to_string(),
                c.ty.to_token_stream().to_string(),
                int_value(&c.expr).unwrap_or_else(|| {
                    panic!("{file}: const {} needs an integer literal", c.ident)
                }),
                docs(&c.attrs),
            )),
            _ => None,
        })
        .collect();
    let aliases: Vec<String> = ast
        .items
        .iter()
        .filter_map(|i| match i {
            Item::Type(t) if is_pub(&t.vis) => Some(t.ident.to_string()),
            _ => None,
        })
        .collect();
    for item in &ast.items {
        match item {
            Item::Const(c) if is_pub(&c.vis) => {
                let ty = c.ty.to_token_stream().to_string();
                if aliases.contains(&ty) {
                    continue; // emitted inside its enum
                }
                comment(out, "", &docs(&c.attrs));
                writeln!(out, "#define {} {}\n", c.ident, int_value(&c.expr).unwrap()).unwrap();
            }
            Item::Type(t) if is_pub(&t.vis) => {
                let name = t.ident.to_string();
                comment(out, "", &docs(&t.attrs));
                let members: Vec<(String, String, Vec<String>)> = if name == "NRT_STATUS" {
                    nrt_core::abi::NRT_STATUS::INFO
                        .members
                        .iter()
                        .map(|(n, v)| (n.to_string(), v.to_string(), Vec::new()))
                        .collect()
                } else {
                    consts
                        .iter()
                        .filter(|c| c.1 == name)
                        .map(|c| (c.0.clone(), c.2.clone(), c.3.clone()))
                        .collect()
                };
                if !members.is_empty() {
                    writeln!(out, "typedef enum {{").unwrap();
                    for (n, v, d) in &members {
                        comment(out, "    ", d);
                        writeln!(out, "    {n} = {v},").unwrap();
                    }
                    writeln!(out, "}} {name};\n").unwrap();
                    continue;
                }
                if let Some(f) = fn_pointer(&t.ty) {
                    writeln!(out, "typedef {};\n", fn_pointer_decl(f, &name)).unwrap();
                    continue;
                }
                match &*t.ty {
                    Type::Path(p) if last_ident(p) == "c_void" => {
                        writeln!(out, "typedef void {name};\n").unwrap()
                    }
                    // A type re-exported from another crate is opaque to C.
                    Type::Path(p) if p.path.segments.len() > 1 && last_ident(p) == name => {
                        writeln!(out, "typedef struct {} {name};\n", tag(&name)).unwrap()
                    }
                    ty => writeln!(out, "typedef {};\n", declarator(ty, &name)).unwrap(),
                }
            }
            Item::Struct(s) if is_pub(&s.vis) => {
                let name = s.ident.to_string();
                comment(out, "", &docs(&s.attrs));
                let opaque = s.fields.iter().all(|f| {
                    f.ident
                        .as_ref()
                        .is_some_and(|i| i.to_string().starts_with('_'))
                });
                if opaque {
                    writeln!(out, "typedef struct {} {name};\n", tag(&name)).unwrap();
                    continue;
                }
                writeln!(out, "typedef struct {} {{", tag(&name)).unwrap();
                for f in &s.fields {
                    comment(out, "    ", &docs(&f.attrs));
                    let id = f.ident.as_ref().unwrap().to_string();
                    writeln!(out, "    {};", declarator(&f.ty, &id)).unwrap();
                }
                writeln!(out, "}} {name};\n").unwrap();
            }
            Item::Fn(f)
                if f.sig.abi.is_some() && is_pub(&f.vis) && has_attr(&f.attrs, "no_mangle") =>
            {
                comment(out, "", &docs(&f.attrs));
                let ret = match &f.sig.output {
                    ReturnType::Default => "void".to_string(),
                    ReturnType::Type(_, t) => ctype(t),
                };
                let params: Vec<String> = f
                    .sig
                    .inputs
                    .iter()
                    .map(|a| match a {
                        FnArg::Typed(pt) => {
                            let name = match &*pt.pat {
                                Pat::Ident(i) => {
                                    i.ident.to_string().trim_start_matches("r#").to_string()
                                }
                                p => panic!("{file}: parameter pattern {}", p.to_token_stream()),
                            };
                            declarator(&pt.ty, &name)
                        }
                        FnArg::Receiver(_) => panic!("{file}: extern fn with self"),
                    })
                    .collect();
                let params = if params.is_empty() {
                    "void".to_string()
                } else {
                    params.join(", ")
                };
                let sep = if ret.ends_with('*') { "" } else { " " };
                writeln!(out, "{ret}{sep}{}({params});\n", f.sig.ident).unwrap();
            }
            _ => {}
        }
    }
}

fn guard(path: &str) -> String {
    format!(
        "NRT_DMEM_{}",
        path.to_ascii_uppercase().replace(['/', '.'], "_")
    )
}

fn generate(h: &Header) -> String {
    let mut out = String::new();
    let srcs: Vec<String> = h.sources.iter().map(|s| format!("ffi/src/{s}")).collect();
    writeln!(out, "/*").unwrap();
    writeln!(out, " * {} -- GENERATED, do not edit.", h.path).unwrap();
    writeln!(out, " *").unwrap();
    let summary = format!(
        "{} Generated from {} by ffi/tests/headers.rs; regenerate with `cargo xtask headers`.",
        h.summary,
        srcs.join(", ")
    );
    let mut line = String::from(" *");
    for w in summary.split_whitespace() {
        if line.len() + w.len() + 1 > 96 {
            writeln!(out, "{line}").unwrap();
            line = String::from(" *");
        }
        line.push(' ');
        line.push_str(w);
    }
    writeln!(out, "{line}").unwrap();
    writeln!(out, " */").unwrap();
    let g = guard(h.path);
    writeln!(out, "#ifndef {g}\n#define {g}\n").unwrap();
    for i in h.includes {
        writeln!(out, "#include {i}").unwrap();
    }
    if !h.includes.is_empty() {
        out.push('\n');
    }
    writeln!(out, "#ifdef __cplusplus\nextern \"C\" {{\n#endif\n").unwrap();
    for s in h.sources {
        emit_file(&mut out, s);
    }
    writeln!(out, "#ifdef __cplusplus\n}}\n#endif\n\n#endif /* {g} */").unwrap();
    out
}

#[test]
fn headers_match_the_source() {
    let update = std::env::var("NRT_UPDATE_HEADERS").is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    for h in HEADERS {
        let text = generate(h);
        let file = ffi_dir().join("include").join(h.path);
        let old = std::fs::read_to_string(&file).unwrap_or_default();
        if old == text {
            continue;
        }
        if update {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &text).unwrap();
            eprintln!("updated {}", file.display());
        } else {
            stale.push(h.path);
        }
    }
    assert!(
        stale.is_empty(),
        "generated headers are out of date: {stale:?} under ffi/include; run `cargo xtask headers` and commit them"
    );
}

#[test]
fn every_exported_function_is_in_a_header() {
    let mut declared = String::new();
    for h in HEADERS {
        declared.push_str(&generate(h));
    }
    let src = ffi_dir().join("src");
    let mut n = 0;
    for e in std::fs::read_dir(&src).unwrap() {
        let p: &Path = &e.unwrap().path();
        // The refusing stubs of libnrt's other exports stay declared in AWS's own headers
        // (nrt_profile.h, nrt_async.h, nec.h, ...), which this library does not ship.
        if p.file_name().is_some_and(|n| n == "stubs.rs") {
            continue;
        }
        let ast = syn::parse_file(&std::fs::read_to_string(p).unwrap()).unwrap();
        for item in ast.items {
            if let Item::Fn(f) = item {
                if has_attr(&f.attrs, "no_mangle") {
                    let name = f.sig.ident.to_string();
                    assert!(
                        declared.contains(&format!(" {name}(")) || declared.contains(&format!("*{name}(")),
                        "{name} ({}) is exported but no header declares it: add its file to HEADERS",
                        p.display()
                    );
                    n += 1;
                }
            }
        }
    }
    assert!(n >= 27 + 8, "only {n} exported functions found");
}
