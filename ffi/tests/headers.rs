//! The generated C headers of `libnrt.so` (`ffi/include/nrt/*.h` but the hand-written ones,
//! `ffi/include/ndl/neuron_driver_shared_tensor_batch_op.h`), produced from this crate's Rust
//! source and kept in git (docs/STYLE.md #12, rust-analyzer's "sourcegen" tests).
//!
//! `cargo test` fails when a committed header differs from what the source generates;
//! `cargo xtask headers` (this test with `NRT_UPDATE_HEADERS=1`) rewrites them.
//!
//! The generator is a small cbindgen: it parses `ffi/src/*.rs` with `syn` and emits, in source
//! order, `#define`s for plain `pub const`s, a `typedef enum` for every `pub type X = u32`
//! with `pub const`s of type `X` (an anonymous `enum` for a private alias), opaque
//! `typedef struct` for zero-sized `repr(C)` structs and for types re-exported from another
//! crate, full `typedef struct`s for the others, and a prototype for every
//! `#[no_mangle] extern "C" fn` and every line of a `stubs!` invocation, each with its doc
//! comment. The status enum's members come from `nrt_core::abi::NRT_STATUS::INFO`, the one
//! table of status codes.
//!
//! The headers of subsystems this library neither implements nor models in Rust (`nrt/nec.h`,
//! `nrt/nds/neuron_ds.h`, `ndl/ndl.h`, `ndl/neuron_driver_shared.h`) are written by hand; the
//! second test checks every exported function against the declaration a C compiler sees.

use std::fmt::Write as _;
use std::path::PathBuf;

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
    /// C written here, after the declarations: what Rust cannot say (function-like macros).
    extra: &'static str,
}

const HEADERS: &[Header] = &[
    Header {
        path: "nrt/nrt_status.h",
        summary: "Status codes of the Neuron runtime API (nrt_status.h, public API section 1).",
        includes: &[],
        sources: &["status.rs"],
        extra: "",
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
            "cc.rs",
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
        extra: "",
    },
    Header {
        path: "ndl/neuron_driver_shared_tensor_batch_op.h",
        summary: "One operation of a batched tensor read or write (the SDK's \
                  ndl/neuron_driver_shared_tensor_batch_op.h, shared with the driver).",
        includes: &["<stdint.h>"],
        sources: &["batch_op.rs"],
        extra: "",
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
        extra: "",
    },
    Header {
        path: "nrt/nrt_version.h",
        summary: "The runtime's version (nrt_version.h): nrt_get_version.",
        includes: &["<stddef.h>", "<stdint.h>", "\"nrt/nrt_status.h\""],
        sources: &["version.rs"],
        extra: "",
    },
    Header {
        path: "nrt/nrt_async.h",
        summary: "The asynchronous schedule (nrt_async.h, nrta_*): tensor reads, writes, \
                  copies, executions and collectives queued on per-core execution units and \
                  tracked by sequence ids. Declared as the SDK declares them; this library \
                  refuses every call (executions here are synchronous).",
        includes: &[
            "<stdbool.h>",
            "<stddef.h>",
            "<stdint.h>",
            "\"nrt/nrt_status.h\"",
            "\"nrt/nrt.h\"",
        ],
        sources: &["async_schedule.rs"],
        extra: "/** The sequence number of sequence id `seq_id` (its low 48 bits). */\n\
                #define NRTA_SEQ_GET_SEQ_NUM(seq_id) ((seq_id) & NRTA_SEQ_NUM_MASK)\n\n\
                /** The execution unit of sequence id `seq_id` (its high 16 bits). */\n\
                #define NRTA_SEQ_GET_XU_ID(seq_id) ((seq_id) >> 48)\n",
    },
    Header {
        path: "nrt/nrt_async_sendrecv.h",
        summary: "Asynchronous tensor send and receive between logical cores of different \
                  hosts (nrt_async_sendrecv.h). Declared as the SDK declares them; this \
                  library has no network transport and refuses every call.",
        includes: &[
            "<stdbool.h>",
            "<stddef.h>",
            "\"nrt/nrt_status.h\"",
            "\"nrt/nrt.h\"",
        ],
        sources: &["async_sendrecv.rs"],
        extra: "",
    },
    Header {
        path: "nrt/nrt_profile.h",
        summary: "Device profiling, continuous profiling and the inspect capture \
                  (nrt_profile.h). Declared as the SDK declares them; this library records no \
                  profiles and refuses every call.",
        includes: &[
            "<stdbool.h>",
            "<stddef.h>",
            "<stdint.h>",
            "\"nrt/nrt_status.h\"",
            "\"nrt/nrt.h\"",
        ],
        sources: &["profile.rs"],
        extra: "",
    },
    Header {
        path: "nrt/nrt_sys_trace.h",
        summary: "System trace capture and fetch (nrt_sys_trace.h). Declared as the SDK \
                  declares them; this library captures no trace and refuses every call.",
        includes: &[
            "<stdbool.h>",
            "<stddef.h>",
            "<stdint.h>",
            "\"nrt/nrt_status.h\"",
            "\"nrt/nrt.h\"",
        ],
        sources: &["sys_trace.rs"],
        extra: "",
    },
    Header {
        path: "nrt/ndebug_stream.h",
        summary: "The per-logical-core stream of debug events (ndebug_stream.h): event \
                  layouts and the client calls. Declared as the SDK declares them; this \
                  library emits no debug events and refuses every call.",
        includes: &[
            "<stdbool.h>",
            "<stddef.h>",
            "<stdint.h>",
            "\"nrt/nrt_status.h\"",
        ],
        sources: &["debug_stream.rs"],
        extra: "",
    },
    Header {
        path: "nrt/nrtx.h",
        summary: "nrt-dmem extensions (nrtx_*): the per-usage memory ledger of a logical core, \
                  peaks and their reset, free bytes and the largest free block of each HBM, a \
                  model's footprint, the out-of-memory report as text, the last error message.",
        includes: &["<stddef.h>", "<stdint.h>", "\"nrt/nrt.h\""],
        sources: &["nrtx.rs"],
        extra: "",
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
                // A register the C side writes through a `volatile` pointer (`nec.rs`).
                "volatile_u32" => "volatile uint32_t",
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
    // Every alias, public or not: a private one names a group of constants that C sees as an
    // anonymous `enum { ... };` (the SDK's instance family and size constants).
    let aliases: Vec<String> = ast
        .items
        .iter()
        .filter_map(|i| match i {
            Item::Type(t) => Some(t.ident.to_string()),
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
                // A 64-bit constant keeps its width in C (`1ull << 48` rather than a `long`).
                let suffix = if ty == "u64" { "ull" } else { "" };
                writeln!(
                    out,
                    "#define {} {}{suffix}\n",
                    c.ident,
                    int_value(&c.expr).unwrap()
                )
                .unwrap();
            }
            Item::Type(t) if !is_pub(&t.vis) => {
                let name = t.ident.to_string();
                let members: Vec<_> = consts.iter().filter(|c| c.1 == name).collect();
                if members.is_empty() {
                    continue;
                }
                comment(out, "", &docs(&t.attrs));
                writeln!(out, "enum {{").unwrap();
                for (n, _, v, d) in members {
                    comment(out, "    ", d);
                    writeln!(out, "    {n} = {v},").unwrap();
                }
                writeln!(out, "}};\n").unwrap();
            }
            Item::Type(t) => {
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
                    writeln!(out, "typedef enum {} {{", tag(&name)).unwrap();
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
                    let id = id.trim_start_matches("r#");
                    writeln!(out, "    {};", declarator(&f.ty, id)).unwrap();
                }
                writeln!(out, "}} {name};\n").unwrap();
            }
            Item::Fn(f) => {
                if let Some(f) = CFn::from_item(f, file) {
                    f.emit(out);
                }
            }
            Item::Macro(m) => {
                for f in CFn::from_stubs(m, file) {
                    f.emit(out);
                }
            }
            _ => {}
        }
    }
}

/// An exported C function: a `#[no_mangle] pub extern "C" fn`, or one line of a `stubs!`
/// invocation (`ffi/src/unsupported.rs`), which expands to one.
struct CFn {
    name: String,
    /// The C return type.
    ret: String,
    /// Parameter names and Rust types.
    params: Vec<(String, Type)>,
    docs: Vec<String>,
}

impl CFn {
    fn from_item(f: &syn::ItemFn, file: &str) -> Option<CFn> {
        if f.sig.abi.is_none() || !is_pub(&f.vis) || !has_attr(&f.attrs, "no_mangle") {
            return None;
        }
        let params = f
            .sig
            .inputs
            .iter()
            .map(|a| match a {
                FnArg::Typed(pt) => match &*pt.pat {
                    Pat::Ident(i) => (
                        i.ident.to_string().trim_start_matches("r#").to_string(),
                        (*pt.ty).clone(),
                    ),
                    p => panic!("{file}: parameter pattern {}", p.to_token_stream()),
                },
                FnArg::Receiver(_) => panic!("{file}: extern fn with self"),
            })
            .collect();
        Some(CFn {
            name: f.sig.ident.to_string(),
            ret: match &f.sig.output {
                ReturnType::Default => "void".to_string(),
                ReturnType::Type(_, t) => ctype(t),
            },
            params,
            docs: docs(&f.attrs),
        })
    }

    /// The functions of a `stubs!("what" { fn name(args) [-> void | -> T = v]; ... })`
    /// invocation, documented as its expansion is.
    fn from_stubs(m: &syn::ItemMacro, file: &str) -> Vec<CFn> {
        if !m.mac.path.is_ident("stubs") {
            return Vec::new();
        }
        let g: StubGroup = m
            .mac
            .parse_body()
            .unwrap_or_else(|e| panic!("{file}: stubs! invocation: {e}"));
        g.fns
            .into_iter()
            .map(|(name, params, ret)| {
                let (ret, answer) = match ret {
                    None => ("NRT_STATUS".to_string(), "NRT_FAILURE".to_string()),
                    Some((t, None)) => {
                        assert_eq!(t.to_token_stream().to_string(), "void", "{file}: {name}");
                        ("void".to_string(), "does nothing".to_string())
                    }
                    Some((t, Some(v))) => (
                        ctype(&t),
                        format!(
                            "returns {}",
                            v.to_token_stream().to_string().replace(' ', "")
                        ),
                    ),
                };
                CFn {
                    docs: vec![format!("Not supported by nrt-dmem ({}): {answer}.", g.what)],
                    name,
                    ret,
                    params,
                }
            })
            .collect()
    }

    /// `ret name(type param, ...)` without the `;`.
    fn prototype(&self) -> String {
        let params: Vec<String> = self.params.iter().map(|(n, t)| declarator(t, n)).collect();
        let params = if params.is_empty() {
            "void".to_string()
        } else {
            params.join(", ")
        };
        let sep = if self.ret.ends_with('*') { "" } else { " " };
        format!("{}{sep}{}({params})", self.ret, self.name)
    }

    /// The C type of a pointer to this function, `ret (*)(type, ...)`.
    fn pointer_type(&self) -> String {
        let params: Vec<String> = self.params.iter().map(|(_, t)| ctype(t)).collect();
        let params = if params.is_empty() {
            "void".to_string()
        } else {
            params.join(", ")
        };
        format!("{} (*)({params})", self.ret)
    }

    fn emit(&self, out: &mut String) {
        comment(out, "", &self.docs);
        writeln!(out, "{};\n", self.prototype()).unwrap();
    }
}

/// The body of a `stubs!` invocation.
struct StubGroup {
    what: String,
    /// Name, parameters, and the return: none (NRT_STATUS), `-> void`, or `-> T = v`.
    #[allow(clippy::type_complexity)]
    fns: Vec<(String, Vec<(String, Type)>, Option<(Type, Option<Expr>)>)>,
}

impl syn::parse::Parse for StubGroup {
    fn parse(input: syn::parse::ParseStream<'_>) -> syn::Result<Self> {
        let what: syn::LitStr = input.parse()?;
        let body;
        syn::braced!(body in input);
        let mut fns = Vec::new();
        while !body.is_empty() {
            body.parse::<syn::Token![fn]>()?;
            let name: syn::Ident = body.parse()?;
            let args;
            syn::parenthesized!(args in body);
            let params = args
                .parse_terminated(
                    |p| {
                        let n: syn::Ident = p.parse()?;
                        p.parse::<syn::Token![:]>()?;
                        let t: Type = p.parse()?;
                        Ok((n.to_string().trim_start_matches("r#").to_string(), t))
                    },
                    syn::Token![,],
                )?
                .into_iter()
                .collect();
            let ret = if body.peek(syn::Token![->]) {
                body.parse::<syn::Token![->]>()?;
                let t: Type = body.parse()?;
                let v = if body.peek(syn::Token![=]) {
                    body.parse::<syn::Token![=]>()?;
                    Some(body.parse::<Expr>()?)
                } else {
                    None
                };
                Some((t, v))
            } else {
                None
            };
            body.parse::<syn::Token![;]>()?;
            fns.push((name.to_string(), params, ret));
        }
        Ok(StubGroup {
            what: what.value(),
            fns,
        })
    }
}

/// Every exported C function of `ffi/src`, with the file defining it.
fn all_extern_fns() -> Vec<(String, CFn)> {
    let mut v = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(ffi_dir().join("src"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.ends_with(".rs"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(ffi_dir().join("src").join(&file)).unwrap();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        for item in &ast.items {
            match item {
                Item::Fn(f) => v.extend(CFn::from_item(f, &file).map(|f| (file.clone(), f))),
                Item::Macro(m) => v.extend(
                    CFn::from_stubs(m, &file)
                        .into_iter()
                        .map(|f| (file.clone(), f)),
                ),
                _ => {}
            }
        }
    }
    v
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
    if !h.extra.is_empty() {
        writeln!(out, "{}", h.extra.trim_end()).unwrap();
        out.push('\n');
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

/// Hand-written headers under `ffi/include` (what the generator does not write): the SDK
/// headers of subsystems this library neither implements nor models in Rust.
const HAND_WRITTEN: &[&str] = &[
    "nrt/nec.h",
    "nrt/nds/neuron_ds.h",
    "ndl/ndl.h",
    "ndl/neuron_driver_shared.h",
];

/// libnrt 2.31 exports that no SDK header declares (`ffi/src/stubs.rs`): exported, declared
/// nowhere.
const UNDECLARED_FILE: &str = "stubs.rs";

/// Every exported function but the undeclared ones is declared by an installed header, with a
/// type the C compiler finds compatible with the Rust definition: the generated headers by
/// construction, the hand-written ones (`nrt/nec.h`) checked here. One C file includes every
/// header and asserts, per function, `__typeof__(&f)` against the Rust signature spelled in C.
#[test]
fn every_exported_function_is_declared_with_its_rust_signature() {
    let fns = all_extern_fns();
    let mut c = String::from("/* generated by ffi/tests/headers.rs */\n");
    for h in HEADERS
        .iter()
        .map(|h| h.path)
        .chain(HAND_WRITTEN.iter().copied())
    {
        writeln!(c, "#include \"{h}\"").unwrap();
    }
    let mut n = 0;
    for (file, f) in &fns {
        if file == UNDECLARED_FILE {
            continue;
        }
        writeln!(
            c,
            "_Static_assert(__builtin_types_compatible_p(__typeof__(&{}), {}), \
             \"{} (ffi/src/{file}): the header declares another type than {}\");",
            f.name,
            f.pointer_type(),
            f.name,
            f.prototype()
        )
        .unwrap();
        n += 1;
    }
    assert!(n >= 150, "only {n} exported functions found");
    let dir = std::env::temp_dir().join(format!("nrt-ffi-headers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("signatures.c");
    std::fs::write(&src, c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = std::process::Command::new(&cc)
        .args([
            "-std=c11",
            "-fsyntax-only",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
        ])
        .arg(ffi_dir().join("include"))
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        o.status.success(),
        "exported functions and their declarations disagree:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
