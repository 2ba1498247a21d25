//! A small DWARF type reader over `gimli` + `object` (issue 8): find struct/union/enum types by
//! name in an ELF's debug info and extract byte sizes, member offsets/sizes/array bounds and
//! enumerator values; read the 23-byte category tables from their `.rodata` symbols (spec §3.3).
//!
//! libnrt.so.2.31.24.0 ships "not stripped, with DWARF .debug_info" (spec, "artifact & tooling"
//! note); every fact the spec marks OBSERVED was read from that DWARF, which is what this reader
//! re-reads. Bad input (not ELF, no DWARF, stripped, split DWARF, malformed bytes) is an error,
//! never a panic.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use gimli::{AttributeValue, EndianSlice, RunTimeEndian, UnitOffset, UnitType};
use object::{
    Object, ObjectKind, ObjectSection, ObjectSymbol, RelocationKind, RelocationTarget, SymbolKind,
};

type R<'a> = EndianSlice<'a, RunTimeEndian>;
type Die<'a, 'u> = gimli::DebuggingInformationEntry<'u, 'u, R<'a>>;

/// How deep type chains (typedef → const → array → …) and anonymous-member nesting are followed;
/// deeper chains in malformed DWARF end as "unknown" rather than recursing without bound.
const MAX_DEPTH: usize = 32;

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

/// One debug section of the file, decompressed.
struct DebugSection<'d> {
    index: object::SectionIndex,
    /// The name with a legacy `.zdebug_` prefix read as `.debug_`.
    name: String,
    data: Cow<'d, [u8]>,
    /// Where this section starts inside the concatenation of all sections of its name.
    base: u64,
}

/// Every `.debug_*` / `.zdebug_*` section, decompressed (`SHF_COMPRESSED` zlib or zstd, or the
/// legacy GNU `.zdebug_*` zlib format), in section order, and the compression seen per name.
///
/// A relocatable object can hold several sections of one name: with `-fdebug-types-section`
/// each type unit sits in its own COMDAT `.debug_types` (DWARF 4) or `.debug_info` (DWARF 5)
/// section. They are concatenated as a linker would, and `base` records where each one lands.
fn debug_sections<'d>(
    file: &object::File<'d>,
) -> Result<(Vec<DebugSection<'d>>, BTreeMap<String, String>), String> {
    let mut out: Vec<DebugSection<'d>> = Vec::new();
    let mut compressed = BTreeMap::new();
    let mut ends: HashMap<String, u64> = HashMap::new();
    for sec in file.sections() {
        let Ok(raw) = sec.name() else { continue };
        let name = match raw.strip_prefix(".zdebug_") {
            Some(rest) => format!(".debug_{rest}"),
            None if raw.starts_with(".debug_") => raw.to_string(),
            None => continue,
        };
        let format = sec
            .compressed_data()
            .map_err(|e| format!("{raw}: {e}"))?
            .format;
        let data = sec.uncompressed_data().map_err(|e| format!("{raw}: {e}"))?;
        let how = match format {
            object::CompressionFormat::None => None,
            object::CompressionFormat::Zlib if raw.starts_with(".zdebug_") => Some("zlib-gnu"),
            object::CompressionFormat::Zlib => Some("zlib"),
            object::CompressionFormat::Zstandard => Some("zstd"),
            _ => Some("unknown"),
        };
        if let Some(how) = how {
            compressed.insert(name.clone(), how.to_string());
        }
        let end = ends.entry(name.clone()).or_insert(0);
        let base = *end;
        *end = end.saturating_add(data.len() as u64);
        out.push(DebugSection {
            index: sec.index(),
            name,
            data,
            base,
        });
    }
    Ok((out, compressed))
}

/// The concatenated bytes of every section named `name`, with absolute relocations applied for
/// relocatable objects (`cc -c` output: `.debug_info`'s string and abbreviation offsets live in
/// `.rela.debug_info`, not in place). A relocation against a debug section adds where that
/// section starts in its concatenation, so references into the Nth COMDAT section stay right.
fn section_bytes<'d>(
    file: &object::File<'d>,
    all: &[DebugSection<'d>],
    name: &str,
) -> Result<Cow<'d, [u8]>, String> {
    let mut parts = all.iter().filter(|s| s.name == name);
    let Some(first) = parts.next() else {
        return Ok(Cow::Borrowed(&[][..]));
    };
    let relocatable = file.kind() == ObjectKind::Relocatable;
    let rest: Vec<&DebugSection<'d>> = parts.collect();
    if rest.is_empty() && !relocatable {
        return Ok(first.data.clone());
    }
    let base_of = |i: object::SectionIndex| all.iter().find(|s| s.index == i).map_or(0, |s| s.base);
    let mut buf = Vec::new();
    for part in std::iter::once(first).chain(rest) {
        let start = buf.len();
        buf.extend_from_slice(&part.data);
        if !relocatable {
            continue;
        }
        let sec = file
            .section_by_index(part.index)
            .map_err(|e| format!("{name}: {e}"))?;
        let Some(slot_area) = buf.get_mut(start..) else {
            continue;
        };
        apply_relocations(file, &sec, slot_area, &base_of)?;
    }
    Ok(Cow::Owned(buf))
}

/// Applies `sec`'s absolute relocations to `buf` (that section's bytes).
fn apply_relocations(
    file: &object::File<'_>,
    sec: &object::Section<'_, '_>,
    buf: &mut [u8],
    base_of: &dyn Fn(object::SectionIndex) -> u64,
) -> Result<(), String> {
    let little = file.is_little_endian();
    for (off, r) in sec.relocations() {
        if r.kind() != RelocationKind::Absolute {
            continue;
        }
        let base = match r.target() {
            RelocationTarget::Symbol(i) => file.symbol_by_index(i).map(|s| {
                s.address()
                    .wrapping_add(s.section_index().map_or(0, base_of))
            }),
            RelocationTarget::Section(i) => file
                .section_by_index(i)
                .map(|s| s.address().wrapping_add(base_of(i))),
            _ => continue,
        }
        .map_err(|e| format!("relocation target: {e}"))?;
        let width = usize::from(r.size() / 8);
        if !(1..=8).contains(&width) {
            continue;
        }
        let start = usize::try_from(off).map_err(|_| "relocation offset overflows")?;
        let end = start
            .checked_add(width)
            .ok_or("relocation offset overflows")?;
        let slot = buf
            .get_mut(start..end)
            .ok_or_else(|| format!("relocation at {off:#x} is outside its section"))?;
        let implicit = if r.has_implicit_addend() {
            let mut v = 0u64;
            for (i, b) in slot.iter().enumerate() {
                let shift = if little { 8 * i } else { 8 * (width - 1 - i) };
                v |= u64::from(*b) << shift;
            }
            v
        } else {
            0
        };
        let value = base.wrapping_add(r.addend() as u64).wrapping_add(implicit);
        for (i, b) in slot.iter_mut().enumerate() {
            let shift = if little { 8 * i } else { 8 * (width - 1 - i) };
            *b = (value >> shift) as u8;
        }
    }
    Ok(())
}

fn read_file(path: &Path) -> Result<Vec<u8>, DwarfError> {
    std::fs::read(path).map_err(|source| DwarfError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Classifies an ELF without `.debug_info`: no DWARF, stripped, or a split-DWARF `.dwo`.
fn no_debug_info(path: &Path, file: &object::File<'_>) -> DwarfError {
    let path = path.to_path_buf();
    if file.section_by_name(".debug_info.dwo").is_some() {
        return DwarfError::SplitDwarf { path, dwo: None };
    }
    if let Some(link) = file.section_by_name(".gnu_debuglink") {
        let name = link.data().ok().map(|d| {
            let end = d.iter().position(|b| *b == 0).unwrap_or(d.len());
            String::from_utf8_lossy(&d[..end]).into_owned()
        });
        return DwarfError::Stripped {
            path,
            debuglink: name,
        };
    }
    if file.symbols().next().is_none() {
        return DwarfError::Stripped {
            path,
            debuglink: None,
        };
    }
    DwarfError::NoDwarf { path }
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

/// The first `len` bytes of the data symbol `name` (static or dynamic symbol table).
fn symbol_bytes(file: &object::File<'_>, name: &str, len: usize) -> Option<Vec<u8>> {
    let sym = file
        .symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.name() == Ok(name) && s.kind() != SymbolKind::Text)?;
    let sec = file.section_by_index(sym.section_index()?).ok()?;
    // A symbol shorter than the table reads as short (a differing length), not as the bytes of
    // whatever follows it.
    let len = match sym.size() {
        0 => len as u64,
        n => n.min(len as u64),
    };
    let bytes = sec.data_range(sym.address(), len).ok()??;
    Some(bytes.to_vec())
}

struct Ctx<'a> {
    dwarf: gimli::Dwarf<R<'a>>,
    units: Vec<gimli::Unit<R<'a>>>,
    /// `.debug_info` offset where each unit starts (for `DW_FORM_ref_addr`), sorted.
    starts: Vec<(usize, usize)>,
    /// Type-unit signature → the type it defines (`DW_FORM_ref_sig8`).
    signatures: HashMap<u64, TypeLoc>,
    skeletons: usize,
    first_dwo: Option<String>,
}

struct Index {
    aggregates: HashMap<String, TypeLoc>,
    enums: HashMap<String, TypeLoc>,
    typedefs: HashMap<String, TypeLoc>,
}

impl Index {
    fn aggregate(&self, ctx: &Ctx<'_>, name: &str) -> Option<TypeLoc> {
        if let Some(l) = self.aggregates.get(name) {
            return Some(*l);
        }
        let t = ctx.peel(*self.typedefs.get(name)?)?;
        let tag = ctx.entry(t)?.tag();
        matches!(
            tag,
            gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type | gimli::DW_TAG_class_type
        )
        .then_some(t)
    }

    fn enumeration(&self, ctx: &Ctx<'_>, name: &str) -> Option<TypeLoc> {
        if let Some(l) = self.enums.get(name) {
            return Some(*l);
        }
        let t = ctx.peel(*self.typedefs.get(name)?)?;
        (ctx.entry(t)?.tag() == gimli::DW_TAG_enumeration_type).then_some(t)
    }
}

impl<'a> Ctx<'a> {
    fn new(dwarf: gimli::Dwarf<R<'a>>) -> gimli::Result<Ctx<'a>> {
        let mut ctx = Ctx {
            dwarf,
            units: Vec::new(),
            starts: Vec::new(),
            signatures: HashMap::new(),
            skeletons: 0,
            first_dwo: None,
        };
        let mut headers = Vec::new();
        let mut it = ctx.dwarf.units();
        while let Some(h) = it.next()? {
            headers.push(h);
        }
        let mut it = ctx.dwarf.type_units();
        while let Some(h) = it.next()? {
            headers.push(h);
        }
        for h in headers {
            let skeleton = matches!(h.type_(), UnitType::Skeleton(_));
            let unit = ctx.dwarf.unit(h)?;
            let dwo = if skeleton || unit.header.version() < 5 {
                unit.dwo_name()?
            } else {
                None
            };
            if let Some(dwo) = dwo {
                ctx.skeletons += 1;
                if ctx.first_dwo.is_none() {
                    ctx.first_dwo = ctx
                        .dwarf
                        .attr_string(&unit, dwo)
                        .ok()
                        .map(|s| s.to_string_lossy().into_owned());
                }
                continue;
            }
            let idx = ctx.units.len();
            if let Some(start) = unit.header.offset().as_debug_info_offset() {
                ctx.starts.push((start.0, idx));
            }
            if let UnitType::Type {
                type_signature,
                type_offset,
            } = unit.header.type_()
            {
                ctx.signatures.insert(
                    type_signature.0,
                    TypeLoc {
                        unit: idx,
                        offset: type_offset.0,
                    },
                );
            }
            ctx.units.push(unit);
        }
        ctx.starts.sort_unstable();
        Ok(ctx)
    }

    /// One pass over every DIE, remembering the first complete definition of each wanted name.
    fn index(&self, wanted: &BTreeSet<&str>) -> gimli::Result<Index> {
        let mut ix = Index {
            aggregates: HashMap::new(),
            enums: HashMap::new(),
            typedefs: HashMap::new(),
        };
        for (u, unit) in self.units.iter().enumerate() {
            let mut cursor = unit.entries();
            while let Some((_, e)) = cursor.next_dfs()? {
                let map = match e.tag() {
                    gimli::DW_TAG_structure_type
                    | gimli::DW_TAG_union_type
                    | gimli::DW_TAG_class_type => &mut ix.aggregates,
                    gimli::DW_TAG_enumeration_type => &mut ix.enums,
                    gimli::DW_TAG_typedef => &mut ix.typedefs,
                    _ => continue,
                };
                if matches!(
                    e.attr_value(gimli::DW_AT_declaration)?,
                    Some(AttributeValue::Flag(true))
                ) {
                    continue;
                }
                let Some(name) = self.name(u, e) else {
                    continue;
                };
                if wanted.contains(name.as_str()) && !map.contains_key(&name) {
                    map.insert(
                        name,
                        TypeLoc {
                            unit: u,
                            offset: e.offset().0,
                        },
                    );
                }
            }
        }
        Ok(ix)
    }

    fn entry(&self, loc: TypeLoc) -> Option<Die<'a, '_>> {
        self.units.get(loc.unit)?.entry(UnitOffset(loc.offset)).ok()
    }

    fn name(&self, unit: usize, e: &Die<'a, '_>) -> Option<String> {
        let v = e.attr_value(gimli::DW_AT_name).ok()??;
        let s = self.dwarf.attr_string(self.units.get(unit)?, v).ok()?;
        Some(s.to_string_lossy().into_owned())
    }

    fn udata(e: &Die<'a, '_>, at: gimli::DwAt) -> Option<u64> {
        e.attr_value(at).ok()??.udata_value()
    }

    /// Resolves `DW_AT_type` (unit-local, section-relative or type-signature references).
    fn type_ref(&self, unit: usize, e: &Die<'a, '_>) -> Option<TypeLoc> {
        match e.attr_value(gimli::DW_AT_type).ok()?? {
            AttributeValue::UnitRef(off) => Some(TypeLoc {
                unit,
                offset: off.0,
            }),
            AttributeValue::DebugInfoRef(off) => {
                let i = self.starts.partition_point(|(s, _)| *s <= off.0);
                let (_, u) = *self.starts.get(i.checked_sub(1)?)?;
                let uo = off.to_unit_offset(&self.units.get(u)?.header)?;
                Some(TypeLoc {
                    unit: u,
                    offset: uo.0,
                })
            }
            AttributeValue::DebugTypesRef(sig) => self.signatures.get(&sig.0).copied(),
            _ => None,
        }
    }

    /// Follows typedef / const / volatile / atomic / restrict, and a declaration that names its
    /// type unit (`DW_AT_signature`, how a CU built with `-fdebug-types-section` refers to a
    /// type); `None` for `void`.
    fn peel(&self, mut loc: TypeLoc) -> Option<TypeLoc> {
        for _ in 0..MAX_DEPTH {
            let e = self.entry(loc)?;
            match e.tag() {
                gimli::DW_TAG_typedef
                | gimli::DW_TAG_const_type
                | gimli::DW_TAG_volatile_type
                | gimli::DW_TAG_atomic_type
                | gimli::DW_TAG_restrict_type => loc = self.type_ref(loc.unit, &e)?,
                _ => match e.attr_value(gimli::DW_AT_signature).ok().flatten() {
                    Some(AttributeValue::DebugTypesRef(sig)) => {
                        loc = *self.signatures.get(&sig.0)?;
                    }
                    _ => return Some(loc),
                },
            }
        }
        None
    }

    /// Children DIEs of `loc` with the given tag, as (offset) locations.
    fn children(&self, loc: TypeLoc, tag: gimli::DwTag) -> Vec<TypeLoc> {
        let mut out = Vec::new();
        let Some(unit) = self.units.get(loc.unit) else {
            return out;
        };
        let Ok(mut tree) = unit.entries_tree(Some(UnitOffset(loc.offset))) else {
            return out;
        };
        let Ok(root) = tree.root() else {
            return out;
        };
        let mut kids = root.children();
        while let Ok(Some(child)) = kids.next() {
            if child.entry().tag() == tag {
                out.push(TypeLoc {
                    unit: loc.unit,
                    offset: child.entry().offset().0,
                });
            }
        }
        out
    }

    /// The bound of one `DW_TAG_subrange_type`: count, or upper − lower + 1; 0 when absent
    /// (a flexible array member) or not a constant.
    fn bound(&self, sub: TypeLoc) -> u64 {
        let Some(e) = self.entry(sub) else { return 0 };
        if let Some(c) = Self::udata(&e, gimli::DW_AT_count) {
            return c;
        }
        let lower = Self::udata(&e, gimli::DW_AT_lower_bound).unwrap_or(0);
        let upper = match e.attr_value(gimli::DW_AT_upper_bound) {
            Ok(Some(AttributeValue::Sdata(v))) if v < 0 => return 0,
            Ok(Some(AttributeValue::Data4(0xffff_ffff))) => return 0,
            Ok(Some(v)) => match v.udata_value() {
                Some(u64::MAX) | None => return 0,
                Some(u) => u,
            },
            _ => return 0,
        };
        upper
            .checked_sub(lower)
            .and_then(|n| n.checked_add(1))
            .unwrap_or(0)
    }

    /// For a (peeled) array type: its element type and bounds, nested arrays flattened.
    fn array_shape(&self, mut loc: TypeLoc) -> Option<(Option<TypeLoc>, Vec<u64>)> {
        let mut dims = Vec::new();
        for _ in 0..MAX_DEPTH {
            let e = self.entry(loc)?;
            if e.tag() != gimli::DW_TAG_array_type {
                return Some((Some(loc), dims));
            }
            dims.extend(
                self.children(loc, gimli::DW_TAG_subrange_type)
                    .into_iter()
                    .map(|s| self.bound(s)),
            );
            let elem = self.type_ref(loc.unit, &e);
            match elem.and_then(|t| self.peel(t)) {
                Some(p) if self.entry(p)?.tag() == gimli::DW_TAG_array_type => loc = p,
                _ => return Some((elem, dims)),
            }
        }
        None
    }

    fn type_size(&self, loc: TypeLoc, depth: usize) -> Option<u64> {
        if depth > MAX_DEPTH {
            return None;
        }
        // typedefs and qualifiers have their target's size
        let loc = self.peel(loc)?;
        let e = self.entry(loc)?;
        match e.tag() {
            gimli::DW_TAG_pointer_type
            | gimli::DW_TAG_reference_type
            | gimli::DW_TAG_rvalue_reference_type => Self::udata(&e, gimli::DW_AT_byte_size)
                .or_else(|| Some(u64::from(self.units.get(loc.unit)?.encoding().address_size))),
            gimli::DW_TAG_array_type => {
                if let Some(b) = Self::udata(&e, gimli::DW_AT_byte_size) {
                    return Some(b);
                }
                let (elem, dims) = self.array_shape(loc)?;
                let mut n = self.type_size(elem?, depth + 1)?;
                for d in dims {
                    n = n.checked_mul(d)?;
                }
                Some(n)
            }
            gimli::DW_TAG_subroutine_type => None,
            _ => Self::udata(&e, gimli::DW_AT_byte_size),
        }
    }

    fn type_name(&self, loc: Option<TypeLoc>, depth: usize) -> String {
        let Some(loc) = loc else {
            return "void".into();
        };
        if depth > MAX_DEPTH {
            return "?".into();
        }
        let Some(e) = self.entry(loc) else {
            return "?".into();
        };
        let inner = || self.type_name(self.type_ref(loc.unit, &e), depth + 1);
        let named = |kw: &str| match self.name(loc.unit, &e) {
            Some(n) => format!("{kw} {n}"),
            None => format!("{kw} {{...}}"),
        };
        match e.tag() {
            gimli::DW_TAG_base_type | gimli::DW_TAG_typedef => {
                self.name(loc.unit, &e).unwrap_or_else(|| "?".into())
            }
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type => named("struct"),
            gimli::DW_TAG_union_type => named("union"),
            gimli::DW_TAG_enumeration_type => named("enum"),
            gimli::DW_TAG_pointer_type => {
                let i = inner();
                if i.ends_with('*') {
                    format!("{i}*")
                } else {
                    format!("{i} *")
                }
            }
            gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type | gimli::DW_TAG_atomic_type => {
                let kw = match e.tag() {
                    gimli::DW_TAG_const_type => "const",
                    gimli::DW_TAG_volatile_type => "volatile",
                    _ => "_Atomic",
                };
                let i = inner();
                if i.ends_with('*') {
                    format!("{i} {kw}")
                } else {
                    format!("{kw} {i}")
                }
            }
            gimli::DW_TAG_restrict_type => format!("{} restrict", inner()),
            gimli::DW_TAG_array_type => match self.array_shape(loc) {
                Some((elem, dims)) => {
                    let mut s = self.type_name(elem, depth + 1);
                    for d in dims {
                        s.push_str(&if d == 0 {
                            "[]".into()
                        } else {
                            format!("[{d}]")
                        });
                    }
                    s
                }
                None => "?[]".into(),
            },
            gimli::DW_TAG_subroutine_type => "fn(...)".into(),
            _ => "?".into(),
        }
    }

    /// `DW_AT_data_member_location`: a constant, or the `DW_OP_plus_uconst N` of old DWARF.
    fn member_offset(&self, loc: TypeLoc, e: &Die<'a, '_>) -> Option<u64> {
        match e.attr_value(gimli::DW_AT_data_member_location).ok()? {
            None => match Self::udata(e, gimli::DW_AT_data_bit_offset) {
                Some(bits) => Some(bits / 8),
                None => Some(0), // union members, and the first member in some producers
            },
            Some(AttributeValue::Exprloc(expr)) => {
                let enc = self.units.get(loc.unit)?.encoding();
                let mut ops = expr.operations(enc);
                match ops.next().ok()?? {
                    gimli::Operation::PlusConstant { value } => Some(value),
                    _ => None,
                }
            }
            Some(v) => v.udata_value(),
        }
    }

    fn read_member(&self, loc: TypeLoc) -> Option<DMember> {
        let e = self.entry(loc)?;
        let ty = self.type_ref(loc.unit, &e);
        let peeled = ty.and_then(|t| self.peel(t));
        let is_array = peeled
            .is_some_and(|p| self.entry(p).map(|d| d.tag()) == Some(gimli::DW_TAG_array_type));
        let (elem, dims) = match (is_array, peeled) {
            (true, Some(p)) => self.array_shape(p).unwrap_or((None, Vec::new())),
            _ => (ty, Vec::new()),
        };
        let elem_aggregate = elem.and_then(|t| self.peel(t)).filter(|p| {
            matches!(
                self.entry(*p).map(|d| d.tag()),
                Some(
                    gimli::DW_TAG_structure_type
                        | gimli::DW_TAG_union_type
                        | gimli::DW_TAG_class_type
                )
            )
        });
        Some(DMember {
            name: self.name(loc.unit, &e),
            offset: self.member_offset(loc, &e),
            size: ty.and_then(|t| self.type_size(t, 0)),
            type_name: self.type_name(elem, 0),
            dims,
            bit_size: Self::udata(&e, gimli::DW_AT_bit_size),
            elem_aggregate,
        })
    }

    fn read_struct(&self, loc: TypeLoc, depth: usize) -> Option<DStruct> {
        if depth > MAX_DEPTH / 4 {
            return None;
        }
        let e = self.entry(loc)?;
        let kind = match e.tag() {
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type => "struct",
            gimli::DW_TAG_union_type => "union",
            _ => return None,
        };
        let members: Vec<DMember> = self
            .children(loc, gimli::DW_TAG_member)
            .into_iter()
            .filter_map(|m| self.read_member(m))
            .collect();
        let mut nested = Vec::new();
        for m in members
            .iter()
            .filter(|m| m.name.is_none() && m.dims.is_empty())
        {
            let (Some(inner), Some(base)) = (m.elem_aggregate, m.offset) else {
                continue;
            };
            if let Some(s) = self.read_struct(inner, depth + 1) {
                for mut n in s.members.into_iter().chain(s.nested) {
                    n.offset = n.offset.and_then(|o| o.checked_add(base));
                    nested.push(n);
                }
            }
        }
        let dwarf_name = self.name(loc.unit, &e);
        Some(DStruct {
            name: dwarf_name.clone().unwrap_or_default(),
            dwarf_name,
            kind,
            size: Self::udata(&e, gimli::DW_AT_byte_size),
            members,
            nested,
            via: None,
        })
    }

    fn read_enum(&self, loc: TypeLoc) -> Option<DEnum> {
        let e = self.entry(loc)?;
        let size = Self::udata(&e, gimli::DW_AT_byte_size);
        let signed = self
            .type_ref(loc.unit, &e)
            .and_then(|t| self.peel(t))
            .and_then(|t| self.entry(t))
            .and_then(|b| b.attr_value(gimli::DW_AT_encoding).ok()?)
            .is_some_and(|v| {
                matches!(
                    v,
                    AttributeValue::Encoding(gimli::DW_ATE_signed | gimli::DW_ATE_signed_char)
                )
            });
        let mut members = Vec::new();
        for m in self.children(loc, gimli::DW_TAG_enumerator) {
            let Some(me) = self.entry(m) else { continue };
            let Some(name) = self.name(m.unit, &me) else {
                continue;
            };
            let value = match me.attr_value(gimli::DW_AT_const_value).ok().flatten() {
                Some(AttributeValue::Sdata(v)) => v,
                Some(AttributeValue::Udata(v)) => v as i64,
                Some(AttributeValue::Data1(v)) if signed => i64::from(v as i8),
                Some(AttributeValue::Data2(v)) if signed => i64::from(v as i16),
                Some(AttributeValue::Data4(v)) if signed => i64::from(v as i32),
                Some(v) => match v.udata_value() {
                    Some(u) => u as i64,
                    None => continue,
                },
                None => continue,
            };
            members.push((name, value));
        }
        Some(DEnum {
            name: self.name(loc.unit, &e).unwrap_or_default(),
            size,
            members,
        })
    }
}

/// Every `(target, parent, member)` alias the ABI tables imply: each struct embedded by value
/// is also reachable as the type of its embedding member.
pub fn table_aliases() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for parent in nrt_core::abi::STRUCTS {
        for f in parent.fields {
            if crate::embedded_struct(f).is_some() {
                out.push((
                    f.c_base.to_string(),
                    parent.name.to_string(),
                    f.name.to_string(),
                ));
            }
        }
    }
    out
}

/// Candidate `(target, parent, member)` aliases from the facts alone: a member whose stated size
/// is `count` × another struct's stated size may embed that struct. Meant for
/// [`Request::anonymous_aliases`] (`tpb_t.sunda` for `tpb_sunda_t`, which libnrt's DWARF leaves
/// anonymous), where a member of a named type is never taken for another.
pub fn facts_aliases(facts: &crate::facts::Facts) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for target in &facts.structs {
        for parent in facts.structs.iter().filter(|p| p.name != target.name) {
            for f in &parent.fields {
                let n = f.count.unwrap_or(1);
                if f.size.is_some() && f.size == target.size.checked_mul(n) {
                    out.push((target.name.clone(), parent.name.clone(), f.name.clone()));
                }
            }
        }
    }
    out
}

fn decl(m: &DMember) -> String {
    let mut s = m.name.clone().unwrap_or_default();
    for d in &m.dims {
        s.push_str(&if *d == 0 {
            "[]".into()
        } else {
            format!("[{d}]")
        });
    }
    if let Some(b) = m.bit_size {
        s.push_str(&format!(":{b}"));
    }
    s.push(';');
    s
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "?".into(), |v| v.to_string())
}

/// pahole-style text for one struct/union.
pub fn render_struct(s: &DStruct) -> String {
    let mut o = String::new();
    let title = s.dwarf_name.clone().unwrap_or_else(|| "{...}".into());
    o.push_str(&format!("{} {} {{", s.kind, title));
    if let Some(v) = &s.via {
        o.push_str(&format!(" /* {} found as {v} */", s.name));
    }
    o.push('\n');
    let mut end: u64 = 0;
    for m in &s.members {
        if s.kind == "struct" {
            if let Some(off) = m.offset {
                if off > end {
                    o.push_str(&format!(
                        "\n\t/* XXX {} bytes hole, try to pack */\n\n",
                        off - end
                    ));
                }
            }
        }
        o.push_str(&format!(
            "\t{:<26} {:<21} /* {:>5} {:>5} */\n",
            m.type_name,
            decl(m),
            opt(m.offset),
            opt(m.size)
        ));
        if let (Some(off), Some(size)) = (m.offset, m.size) {
            end = end.max(off.saturating_add(size));
        }
    }
    let size = s.size.unwrap_or(0);
    o.push('\n');
    o.push_str(&format!(
        "\t/* size: {}, cachelines: {}, members: {} */\n",
        opt(s.size),
        size.div_ceil(64),
        s.members.len()
    ));
    if s.kind == "struct" && size > end && !s.members.is_empty() {
        o.push_str(&format!("\t/* padding: {} */\n", size - end));
    }
    o.push_str("};\n");
    o
}

/// pahole-style text for one enum.
pub fn render_enum(e: &DEnum) -> String {
    let mut o = format!("enum {} {{\n", e.name);
    for (n, v) in &e.members {
        o.push_str(&format!("\t{n} = {v},\n"));
    }
    o.push_str(&format!("}}; /* size: {} */\n", opt(e.size)));
    o
}

/// `nrt-layout dump <ELF> --struct NAME`: a pahole-style view of one struct (or enum) from the
/// ELF's DWARF. Types this project names but libnrt embeds anonymously (`tpb_sunda_t`) are found
/// through their embedding member.
pub fn dump(elf: &Path, name: &str) -> Result<String, DwarfError> {
    let facts_aliases = crate::facts::Facts::vendored()
        .map(facts_aliases)
        .unwrap_or_default();
    let mut aliases = table_aliases();
    let mut structs = vec![name.to_string()];
    // Pull in the chain of parents that can reach `name` through an alias.
    let mut i = 0;
    while i < structs.len() && i < 64 {
        let want = structs[i].clone();
        for (t, p, _) in aliases.iter().chain(&facts_aliases) {
            if *t == want && !structs.contains(p) {
                structs.push(p.clone());
            }
        }
        i += 1;
    }
    aliases.retain(|(t, _, _)| structs.contains(t));
    let anonymous_aliases = facts_aliases
        .into_iter()
        .filter(|(t, _, _)| structs.contains(t))
        .collect();
    let req = Request {
        structs,
        enums: vec![name.to_string()],
        aliases,
        anonymous_aliases,
        symbols: Vec::new(),
    };
    let ex = extract(elf, &req)?;
    if let Some(s) = ex.structs.get(name) {
        return Ok(render_struct(s));
    }
    if let Some(e) = ex.enums.get(name) {
        return Ok(render_enum(e));
    }
    Err(DwarfError::NoSuchType {
        path: elf.to_path_buf(),
        name: name.to_string(),
    })
}
