//! The C compiler's word: compile a probe against a header with the system `cc`, run it, and
//! compare every `sizeof`/`_Alignof`/`offsetof`/member size/array bound with what the spec
//! states where it states it ([`Pins`]'s `expected_*`), and with the Rust tables elsewhere
//! (docs/ARCHITECTURE.md: "every size and offset pinned and proven three ways").
//!
//! Also builds the DWARF fixture source ([`fixture_source`]) that the DWARF tests compile with
//! `cc -g -c`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nrt_core::abi::{self, meta::StructInfo};

use crate::facts::Pins;

/// One disagreement between what `cc` measured and the Rust tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Struct name.
    pub strukt: String,
    /// Member name (`None` for the struct's own size/alignment).
    pub member: Option<String>,
    /// `size`, `align`, `offset`, `member size`, `bounds`, `missing`.
    pub what: &'static str,
    /// What the spec says (where it says it), else the Rust tables.
    pub expected: String,
    /// What the C compiler produced.
    pub found: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.member {
            Some(m) => write!(f, "{}.{}", self.strukt, m)?,
            None => write!(f, "{}", self.strukt)?,
        }
        write!(
            f,
            ": {} expected {}, found {}",
            self.what, self.expected, self.found
        )
    }
}

/// Why the cross-check could not run.
#[derive(Debug)]
pub enum CcError {
    /// Writing the probe or spawning `cc`/the probe failed.
    Io(String, std::io::Error),
    /// `cc` rejected the probe (the header does not compile).
    Compile(String),
    /// The probe ran but failed or printed something unexpected.
    Probe(String),
}

impl fmt::Display for CcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CcError::Io(what, e) => write!(f, "{what}: {e}"),
            CcError::Compile(s) => write!(f, "cc rejected the probe:\n{s}"),
            CcError::Probe(s) => write!(f, "probe failed: {s}"),
        }
    }
}

impl std::error::Error for CcError {}

/// The C compiler to use: `$CC`, else `cc`.
pub fn compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// `true` when the C compiler can be run.
pub fn compiler_available() -> bool {
    Command::new(compiler())
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `x.m[0][0]` with `levels` subscripts, on a null-based lvalue (only used inside `sizeof`).
fn lvalue(s: &str, m: &str, levels: usize) -> String {
    let mut e = format!("((({s} *)0)->{m})");
    for _ in 0..levels {
        e.push_str("[0]");
    }
    e
}

/// The C source of the probe: prints one line per struct (`S name size align`) and one per
/// member (`F struct member offset size ndims bound...`).
pub fn probe_source(structs: &[StructInfo]) -> String {
    let mut o = String::from(
        "#define NRT_LAYOUT_NO_STATIC_ASSERTS 1\n#include <stdio.h>\n#include \"nrt_layout.h\"\n\nint main(void) {\n",
    );
    for s in structs {
        o.push_str(&format!(
            "    printf(\"S {0} %zu %zu\\n\", sizeof({0}), (size_t)_Alignof({0}));\n",
            s.name
        ));
        for f in s.fields {
            let flexible = f.dims().first() == Some(&0);
            if flexible {
                o.push_str(&format!(
                    "    printf(\"F {0} {1} %zu 0 1 0\\n\", offsetof({0}, {1}));\n",
                    s.name, f.name
                ));
                continue;
            }
            let mut fmt = format!("F {} {} %zu %zu {}", s.name, f.name, f.ndims);
            let mut args = vec![
                format!("offsetof({}, {})", s.name, f.name),
                format!("sizeof({})", lvalue(s.name, f.name, 0)),
            ];
            for level in 0..f.ndims {
                fmt.push_str(" %zu");
                args.push(format!(
                    "sizeof({}) / sizeof({})",
                    lvalue(s.name, f.name, level),
                    lvalue(s.name, f.name, level + 1)
                ));
            }
            o.push_str(&format!("    printf(\"{fmt}\\n\", {});\n", args.join(", ")));
        }
    }
    o.push_str("    return 0;\n}\n");
    o
}

/// What the probe printed.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// `name → (size, align)`.
    pub structs: BTreeMap<String, (usize, usize)>,
    /// `(struct, member) → (offset, size, bounds)`.
    pub fields: BTreeMap<(String, String), (usize, usize, Vec<usize>)>,
}

/// Parses the probe's output.
pub fn parse_probe_output(text: &str) -> Result<Measured, CcError> {
    let mut m = Measured::default();
    for line in text.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> Result<usize, CcError> {
            t.get(i)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| CcError::Probe(format!("unparsable line `{line}`")))
        };
        match t.first() {
            Some(&"S") if t.len() == 4 => {
                m.structs.insert(t[1].to_string(), (num(2)?, num(3)?));
            }
            Some(&"F") if t.len() >= 6 => {
                let ndims = num(5)?;
                let dims = (0..ndims).map(|i| num(6 + i)).collect::<Result<_, _>>()?;
                m.fields.insert(
                    (t[1].to_string(), t[2].to_string()),
                    (num(3)?, num(4)?, dims),
                );
            }
            _ => return Err(CcError::Probe(format!("unexpected line `{line}`"))),
        }
    }
    Ok(m)
}

/// Adds a [`compare`] row (member `m`, `what`, expected vs found) when the measured value is
/// not the expected one.
fn differ<T: PartialEq + fmt::Debug + ?Sized>(
    row: &mut impl FnMut(Option<&str>, &'static str, String, String),
    m: Option<&str>,
    what: &'static str,
    expected: &T,
    found: &T,
) {
    if expected != found {
        row(m, what, format!("{expected:?}"), format!("{found:?}"));
    }
}

/// Compares measurements with the spec's values where `pins` state them and the tables
/// elsewhere; every disagreement, in table order.
pub fn compare(measured: &Measured, structs: &[StructInfo], pins: &Pins) -> Vec<Mismatch> {
    let mut out = Vec::new();
    for s in structs {
        // One row: what differs in struct `s` (member `m`), as expected vs found.
        let mut row = |m: Option<&str>, what, expected: String, found: String| {
            out.push(Mismatch {
                strukt: s.name.to_string(),
                member: m.map(str::to_string),
                what,
                expected,
                found,
            })
        };
        match measured.structs.get(s.name) {
            None => row(None, "missing", "struct".into(), "-".into()),
            Some(&(size, align)) => {
                differ(&mut row, None, "size", &pins.expected_size(s), &size);
                differ(&mut row, None, "align", &s.align, &align);
            }
        }
        for f in s.fields {
            let key = (s.name.to_string(), f.name.to_string());
            let m = Some(f.name);
            let Some((off, size, dims)) = measured.fields.get(&key) else {
                row(m, "missing", "member".into(), "-".into());
                continue;
            };
            differ(&mut row, m, "offset", &pins.expected_offset(s, f), off);
            differ(
                &mut row,
                m,
                "member size",
                &pins.expected_member_size(s, f),
                size,
            );
            differ(&mut row, m, "bounds", f.dims(), dims.as_slice());
        }
    }
    out
}

fn run_tool(cmd: &mut Command, what: &str) -> Result<std::process::Output, CcError> {
    cmd.output().map_err(|e| CcError::Io(what.to_string(), e))
}

/// Creates `dir` and writes `header_text` as `dir/nrt_layout.h` and `source` as `src`.
fn write_sources(dir: &Path, header_text: &str, src: &Path, source: &str) -> Result<(), CcError> {
    std::fs::create_dir_all(dir).map_err(|e| CcError::Io(format!("mkdir {}", dir.display()), e))?;
    let header = dir.join("nrt_layout.h");
    std::fs::write(&header, header_text)
        .map_err(|e| CcError::Io(format!("write {}", header.display()), e))?;
    std::fs::write(src, source).map_err(|e| CcError::Io(format!("write {}", src.display()), e))
}

/// Runs a `cc` invocation; a failed compile is [`CcError::Compile`] with cc's stderr.
fn run_cc(cmd: &mut Command) -> Result<(), CcError> {
    let out = run_tool(cmd, "run cc")?;
    if !out.status.success() {
        return Err(CcError::Compile(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(())
}

/// Writes `header_text` as `dir/nrt_layout.h`, compiles and runs the probe for every ABI struct,
/// and returns every disagreement with the Rust tables (empty = the C compiler agrees).
pub fn cross_check(header_text: &str, dir: &Path) -> Result<Vec<Mismatch>, CcError> {
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    write_sources(dir, header_text, &src, &probe_source(abi::STRUCTS))?;
    run_cc(
        Command::new(compiler())
            .arg("-std=gnu11")
            .arg("-I")
            .arg(dir)
            .arg("-o")
            .arg(&exe)
            .arg(&src),
    )?;
    let run = run_tool(&mut Command::new(&exe), "run the probe")?;
    if !run.status.success() {
        return Err(CcError::Probe(format!("exit {}", run.status)));
    }
    let measured = parse_probe_output(&String::from_utf8_lossy(&run.stdout))?;
    let pins = Pins::vendored().map_err(CcError::Probe)?;
    Ok(compare(&measured, abi::STRUCTS, &pins))
}

/// The DWARF fixture: a translation unit that includes the header and declares one variable of
/// every struct and enum type and points at the category tables, so `cc -g -c` emits them all.
pub fn fixture_source() -> String {
    let mut o = String::from(
        "/* nrt-layout DWARF fixture: one object of every ABI type. */\n\
         #include \"nrt_layout.h\"\n\n",
    );
    for s in abi::STRUCTS {
        o.push_str(&format!("{0} nrt_fixture_{0};\n", s.name));
    }
    for e in abi::ENUMS {
        o.push_str(&format!("{0} nrt_fixture_{0};\n", e.name));
    }
    // `extern` first: in C++ a namespace-scope `const` has internal linkage and an unused one
    // may be dropped, taking the tables' symbols with it.
    o.push_str(
        "extern const uint8_t *const nrt_fixture_tables[3];\n\
         const uint8_t *const nrt_fixture_tables[3] = {\n    \
         dmem_usage_type_to_host_category,\n    \
         dmem_usage_type_to_device_category,\n    \
         dmem_usage_type_to_aggr_index,\n};\n",
    );
    o
}

/// Writes `header_text` and the fixture into `dir` and compiles them with
/// `cc -c <extra_flags> -o dir/<stem>.o`; returns the object's path.
pub fn compile_fixture(
    header_text: &str,
    dir: &Path,
    stem: &str,
    extra_flags: &[&str],
) -> Result<PathBuf, CcError> {
    compile_c(header_text, &fixture_source(), dir, stem, extra_flags)
}

/// The language a fixture is compiled as.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Lang {
    /// C (`$CC`, else `cc`; `-std=gnu11`).
    C,
    /// C++ (`$CXX`, else `c++`; `-std=gnu++17`): classes, namespaces and C++ DWARF.
    Cxx,
}

impl Lang {
    /// The compiler command.
    pub fn compiler(self) -> String {
        match self {
            Lang::C => compiler(),
            Lang::Cxx => std::env::var("CXX").unwrap_or_else(|_| "c++".into()),
        }
    }

    /// `true` when this language's compiler runs.
    pub fn available(self) -> bool {
        Command::new(self.compiler())
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    fn std_flag(self) -> &'static str {
        match self {
            Lang::C => "-std=gnu11",
            Lang::Cxx => "-std=gnu++17",
        }
    }

    fn extension(self) -> &'static str {
        match self {
            Lang::C => "c",
            Lang::Cxx => "cc",
        }
    }
}

/// Writes `header_text` as `dir/nrt_layout.h` and `source` as `dir/<stem>.c`, and compiles
/// with `cc -std=gnu11 -c -DNRT_LAYOUT_NO_STATIC_ASSERTS <extra_flags> -o dir/<stem>.o`.
pub fn compile_c(
    header_text: &str,
    source: &str,
    dir: &Path,
    stem: &str,
    extra_flags: &[&str],
) -> Result<PathBuf, CcError> {
    compile_lang(Lang::C, header_text, source, dir, stem, extra_flags)
}

/// [`compile_c`] in either language: `dir/<stem>.c` or `.cc`, compiled with that language's
/// compiler and standard into `dir/<stem>.o`.
pub fn compile_lang(
    lang: Lang,
    header_text: &str,
    source: &str,
    dir: &Path,
    stem: &str,
    extra_flags: &[&str],
) -> Result<PathBuf, CcError> {
    let src = dir.join(format!("{stem}.{}", lang.extension()));
    let obj = dir.join(format!("{stem}.o"));
    write_sources(dir, header_text, &src, source)?;
    run_cc(
        Command::new(lang.compiler())
            .current_dir(dir)
            .arg(lang.std_flag())
            .arg("-c")
            .args(extra_flags)
            .arg("-DNRT_LAYOUT_NO_STATIC_ASSERTS")
            .arg("-I")
            .arg(dir)
            .arg("-o")
            .arg(&obj)
            .arg(&src),
    )?;
    Ok(obj)
}
