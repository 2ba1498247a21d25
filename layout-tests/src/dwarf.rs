//! A small DWARF type reader over `gimli` + `object`: find struct/union/enum types by
//! name in an ELF's debug info and extract byte sizes, member offsets/sizes/array bounds and
//! enumerator values; read the 23-byte category tables from their `.rodata` symbols (spec §3.3).
//!
//! libnrt.so.2.31.24.0 ships "not stripped, with DWARF .debug_info" (spec, "artifact & tooling"
//! note); every fact the spec marks OBSERVED was read from that DWARF, which is what this reader
//! re-reads. Bad input (not ELF, no DWARF, stripped, split DWARF, malformed bytes) is an error,
//! never a panic.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use gimli::{EndianSlice, RunTimeEndian};
use object::Object;

type R<'a> = EndianSlice<'a, RunTimeEndian>;
type Die<'a, 'u> = gimli::DebuggingInformationEntry<'u, 'u, R<'a>>;

/// How deep type chains (typedef → const → array → …) and anonymous-member nesting are followed;
/// deeper chains in malformed DWARF end as "unknown" rather than recursing without bound.
const MAX_DEPTH: usize = 32;

mod die;
mod elf;
mod render;

use die::Ctx;
use elf::{debug_sections, no_debug_info, read_file, section_bytes, symbol_bytes};
pub use render::{dump, facts_aliases, render_enum, render_struct, table_aliases};

/// Why an ELF could not be checked. Each is one line; the CLI exits with code 2.
#[derive(Debug)]
pub enum DwarfError {
    /// The file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file does not start with the ELF magic.
    NotElf {
        /// The file.
        path: PathBuf,
    },
    /// The ELF or its DWARF is damaged.
    Malformed {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        detail: String,
    },
    /// An ELF with a symbol table but no `.debug_info` (built without `-g`, or `strip -g`).
    NoDwarf {
        /// The file.
        path: PathBuf,
    },
    /// An ELF with neither DWARF nor a symbol table, or with a `.gnu_debuglink` to a separate
    /// debug file.
    Stripped {
        /// The file.
        path: PathBuf,
        /// The `.gnu_debuglink` file name, if any.
        debuglink: Option<String>,
    },
    /// Only skeleton units: the types are in `.dwo` files (`-gsplit-dwarf`).
    SplitDwarf {
        /// The file.
        path: PathBuf,
        /// The first unit's `DW_AT_dwo_name`, if readable.
        dwo: Option<String>,
    },
    /// `dump` was asked for a type the DWARF does not define.
    NoSuchType {
        /// The file.
        path: PathBuf,
        /// The requested name.
        name: String,
    },
}

impl fmt::Display for DwarfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DwarfError::Io { path, source } => {
                write!(f, "{}: cannot read: {source}", path.display())
            }
            DwarfError::NotElf { path } => write!(
                f,
                "{}: not an ELF file (no \\x7fELF magic); point the checker at libnrt.so or an object built with -g",
                path.display()
            ),
            DwarfError::Malformed { path, detail } => {
                write!(f, "{}: malformed ELF/DWARF: {detail}", path.display())
            }
            DwarfError::NoDwarf { path } => write!(
                f,
                "{}: ELF without DWARF (no .debug_info): it was built without -g or stripped of debug info; use a DWARF-bearing build",
                path.display()
            ),
            DwarfError::Stripped { path, debuglink } => match debuglink {
                Some(d) => write!(
                    f,
                    "{}: stripped ELF: no .debug_info; its debug info was split off into `{d}` (.gnu_debuglink) — check that file instead",
                    path.display()
                ),
                None => write!(
                    f,
                    "{}: stripped ELF (no .debug_info and no .symtab); use the unstripped library, e.g. /opt/aws/neuron/lib/libnrt.so.2.31.24.0",
                    path.display()
                ),
            },
            DwarfError::SplitDwarf { path, dwo } => write!(
                f,
                "{}: split DWARF (-gsplit-dwarf): only skeleton units here, the types live in {}, which this checker does not read; rebuild without -gsplit-dwarf",
                path.display(),
                dwo.as_deref().map_or("a .dwo file".to_string(), |d| format!("`{d}`"))
            ),
            DwarfError::NoSuchType { path, name } => {
                write!(f, "{}: no struct, union or enum named `{name}` in the DWARF", path.display())
            }
        }
    }
}

impl std::error::Error for DwarfError {}

impl DwarfError {
    /// The CLI exit code for this error (always 2: "could not check").
    pub fn exit_code(&self) -> i32 {
        2
    }
}

/// Where a DIE lives: unit index and offset inside the unit.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TypeLoc {
    unit: usize,
    offset: usize,
}

/// One member of a DWARF struct/union.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DMember {
    /// Member name (`None` for an anonymous struct/union member).
    pub name: Option<String>,
    /// Byte offset inside the enclosing type (`None` when the location is not a constant).
    pub offset: Option<u64>,
    /// Byte size of the member's type (`None` when it cannot be sized).
    pub size: Option<u64>,
    /// C spelling of the element type (`uint64_t`, `dmem_t *`, `struct foo`).
    pub type_name: String,
    /// Array bounds, outermost first; 0 = flexible / unknown bound. Empty for a scalar.
    pub dims: Vec<u64>,
    /// Bit-field width, if a bit-field.
    pub bit_size: Option<u64>,
    elem_aggregate: Option<TypeLoc>,
}

/// A struct or union read from DWARF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DStruct {
    /// The name it was requested under.
    pub name: String,
    /// Its name in the DWARF (`None` for an anonymous type found through a member).
    pub dwarf_name: Option<String>,
    /// `struct` or `union`.
    pub kind: &'static str,
    /// `DW_AT_byte_size`.
    pub size: Option<u64>,
    /// Direct members, in DWARF order.
    pub members: Vec<DMember>,
    /// Members of anonymous struct/union members, flattened with their offsets made absolute.
    pub nested: Vec<DMember>,
    /// `Some("tpb_t.sunda")` when found through the member that embeds it, not by name.
    pub via: Option<String>,
}

impl DStruct {
    /// A member by name: a direct member first, then one inside an anonymous member.
    pub fn member(&self, name: &str) -> Option<&DMember> {
        self.members
            .iter()
            .chain(&self.nested)
            .find(|m| m.name.as_deref() == Some(name))
    }
}

/// An enum read from DWARF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DEnum {
    /// The name it was requested under.
    pub name: String,
    /// `DW_AT_byte_size`.
    pub size: Option<u64>,
    /// `(name, value)` in DWARF order.
    pub members: Vec<(String, i64)>,
}

/// What to look up in one pass over the DWARF.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// Struct/union names.
    pub structs: Vec<String>,
    /// Enum names.
    pub enums: Vec<String>,
    /// `(target, parent, member)`: when `target` is not found by name, use the type of
    /// `parent.member` (libnrt's `sunda` is an anonymous union inside `tpb_t`).
    pub aliases: Vec<(String, String, String)>,
    /// Like `aliases`, but taken only when the member's type is anonymous in the DWARF: the
    /// candidates [`facts_aliases`] guesses from sizes alone.
    pub anonymous_aliases: Vec<(String, String, String)>,
    /// `(symbol, bytes)`: data symbols to read (the category tables).
    pub symbols: Vec<(String, usize)>,
}

/// What one pass found.
#[derive(Clone, Debug, Default)]
pub struct Extract {
    /// Found structs by requested name.
    pub structs: BTreeMap<String, DStruct>,
    /// Found enums by requested name.
    pub enums: BTreeMap<String, DEnum>,
    /// Symbol bytes by name.
    pub symbols: BTreeMap<String, Vec<u8>>,
    /// Compilation/type units read.
    pub units: usize,
    /// Of those, type units (DWARF 4 `.debug_types`, DWARF 5 `DW_UT_type`).
    pub type_units: usize,
    /// The DWARF versions of the units read.
    pub dwarf_versions: BTreeSet<u16>,
    /// Debug sections that were compressed, by `.debug_*` name: `zlib`, `zstd` (`SHF_COMPRESSED`)
    /// or `zlib-gnu` (a legacy `.zdebug_*` section).
    pub compressed: BTreeMap<String, String>,
    /// Skeleton units skipped (some CUs built with `-gsplit-dwarf`).
    pub skeleton_units: usize,
}

fn malformed(path: &Path, detail: impl fmt::Display) -> DwarfError {
    // Parser messages may wrap; errors are promised to be one line.
    let detail = detail.to_string();
    DwarfError::Malformed {
        path: path.to_path_buf(),
        detail: detail.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

/// Reads the requested types and symbols from the ELF at `path`.
pub fn extract(path: &Path, req: &Request) -> Result<Extract, DwarfError> {
    let data = read_file(path)?;
    extract_bytes(path, &data, req)
}

/// [`extract`] over bytes already in memory (`path` is only used in messages).
pub fn extract_bytes(path: &Path, data: &[u8], req: &Request) -> Result<Extract, DwarfError> {
    if !data.starts_with(b"\x7fELF") {
        return Err(DwarfError::NotElf {
            path: path.to_path_buf(),
        });
    }
    let file = object::File::parse(data).map_err(|e| malformed(path, e))?;
    if file.section_by_name(".debug_info").is_none() {
        return Err(no_debug_info(path, &file));
    }
    let endian = if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let (sections, compressed) = debug_sections(&file).map_err(|e| malformed(path, e))?;
    let owned = gimli::DwarfSections::load(|id| section_bytes(&file, &sections, id.name()))
        .map_err(|e| malformed(path, e))?;
    let dwarf = owned.borrow(|s| EndianSlice::new(s, endian));
    let ctx = Ctx::new(dwarf).map_err(|e| malformed(path, e))?;
    if ctx.units.is_empty() {
        if ctx.skeletons > 0 {
            return Err(DwarfError::SplitDwarf {
                path: path.to_path_buf(),
                dwo: ctx.first_dwo.clone(),
            });
        }
        return Err(DwarfError::NoDwarf {
            path: path.to_path_buf(),
        });
    }
    let mut out = Extract {
        units: ctx.units.len(),
        type_units: ctx.signatures.len(),
        dwarf_versions: ctx.units.iter().map(|u| u.header.version()).collect(),
        compressed,
        skeleton_units: ctx.skeletons,
        ..Extract::default()
    };

    let wanted: BTreeSet<&str> = req
        .structs
        .iter()
        .chain(&req.enums)
        .map(String::as_str)
        .collect();
    let index = ctx.index(&wanted).map_err(|e| malformed(path, e))?;
    for name in &req.structs {
        if let Some(loc) = index.aggregate(&ctx, name) {
            if let Some(mut s) = ctx.read_struct(loc, 0) {
                s.name = name.clone();
                out.structs.insert(name.clone(), s);
            }
        }
    }
    for name in &req.enums {
        if let Some(loc) = index.enumeration(&ctx, name) {
            if let Some(mut e) = ctx.read_enum(loc) {
                e.name = name.clone();
                out.enums.insert(name.clone(), e);
            }
        }
    }
    // Types this project names but libnrt leaves anonymous: take them from the embedding member.
    let all_aliases: Vec<(&(String, String, String), bool)> = req
        .aliases
        .iter()
        .map(|a| (a, false))
        .chain(req.anonymous_aliases.iter().map(|a| (a, true)))
        .collect();
    for _ in 0..all_aliases.len() {
        let mut progress = false;
        for ((target, parent, member), anonymous_only) in &all_aliases {
            if out.structs.contains_key(target) {
                continue;
            }
            let Some(loc) = out
                .structs
                .get(parent)
                .and_then(|p| p.member(member))
                .and_then(|m| m.elem_aggregate)
            else {
                continue;
            };
            if *anonymous_only
                && ctx
                    .entry(loc)
                    .and_then(|e| ctx.name(loc.unit, &e))
                    .is_some()
            {
                continue;
            }
            if let Some(mut s) = ctx.read_struct(loc, 0) {
                s.name = target.clone();
                s.via = Some(format!("{parent}.{member}"));
                out.structs.insert(target.clone(), s);
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    for (sym, len) in &req.symbols {
        if let Some(bytes) = symbol_bytes(&file, sym, *len) {
            out.symbols.insert(sym.clone(), bytes);
        }
    }
    Ok(out)
}
