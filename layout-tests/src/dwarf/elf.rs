//! The ELF side: the `.debug_*` / `.zdebug_*` sections decompressed and concatenated,
//! relocations applied for relocatable objects, why a file has no usable debug info, and the
//! bytes of a data symbol.

use std::borrow::Cow;
use std::collections::HashMap;

use object::{
    ObjectKind, ObjectSection, ObjectSymbol, RelocationKind, RelocationTarget, SymbolKind,
};

use super::*;

/// One debug section of the file, decompressed.
pub(super) struct DebugSection<'d> {
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
pub(super) fn debug_sections<'d>(
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
pub(super) fn section_bytes<'d>(
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

pub(super) fn read_file(path: &Path) -> Result<Vec<u8>, DwarfError> {
    std::fs::read(path).map_err(|source| DwarfError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Classifies an ELF without `.debug_info`: no DWARF, stripped, or a split-DWARF `.dwo`.
pub(super) fn no_debug_info(path: &Path, file: &object::File<'_>) -> DwarfError {
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

/// The first `len` bytes of the data symbol `name` (static or dynamic symbol table).
pub(super) fn symbol_bytes(file: &object::File<'_>, name: &str, len: usize) -> Option<Vec<u8>> {
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
