//! Finding libnrt's context in a process: the library among the mapped files, its
//! `tdrv_ctx_0` symbol (`.symtab`, then `.dynsym`) and where the library was loaded.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use object::read::ReadCache;
use object::{Architecture, Object, ObjectSegment, ObjectSymbol};

use super::source::{FileMap, InputError};

/// The symbol libnrt keeps its context pointer in (spec §1).
pub const CTX_SYMBOL: &str = "tdrv_ctx_0";

/// Only this project's `libnrt.so` exports it (`nrtx_` extensions): the mark that the members
/// this project placed itself (its chosen members, docs/INSPECT.md) are there to read.
const PROJECT_MARK: &str = "nrtx_get_oom_report";

/// How many mapped files are searched for the symbol when none is named like libnrt (a
/// program linked with `libnrt.a` carries it in its executable).
const MAX_FILES: usize = 256;

/// Which library the process runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flavor {
    /// This project's `libnrt.so`: its chosen members are read too.
    NrtDmem,
    /// AWS's libnrt (or any build without the `nrtx_` extensions): only the members libnrt's
    /// public record pins are read.
    Libnrt,
}

/// Where the context pointer is.
#[derive(Clone, Debug)]
pub struct Located {
    /// The library as the process mapped it.
    pub library: PathBuf,
    /// The file its symbols were read from (the same, or `--lib`).
    pub symbols_from: PathBuf,
    /// Run-time address of `tdrv_ctx_0`.
    pub symbol_addr: u64,
    /// Which library it is.
    pub flavor: Flavor,
}

/// What one ELF file says.
struct ElfFacts {
    symbol: Option<u64>,
    project: bool,
    /// `(file offset, size in the file, address)` of each `PT_LOAD`.
    loads: Vec<(u64, u64, u64)>,
    arch: Architecture,
    build_id: Option<Vec<u8>>,
}

fn read_elf(path: &Path) -> Result<ElfFacts, String> {
    let f = File::open(path).map_err(|e| e.to_string())?;
    let cache = ReadCache::new(f);
    let obj = object::File::parse(&cache).map_err(|e| format!("not a readable ELF file ({e})"))?;
    let mut symbol = None;
    let mut project = false;
    for s in obj.symbols().chain(obj.dynamic_symbols()) {
        match s.name() {
            Ok(CTX_SYMBOL) if symbol.is_none() && s.address() != 0 => symbol = Some(s.address()),
            Ok(PROJECT_MARK) => project = true,
            _ => {}
        }
    }
    let loads = obj
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (off, size, s.address())
        })
        .collect();
    Ok(ElfFacts {
        symbol,
        project,
        loads,
        arch: obj.architecture(),
        build_id: obj.build_id().ok().flatten().map(<[u8]>::to_vec),
    })
}

/// The load bias of a file mapped as `maps` (its mappings, any order): the mapping with the
/// lowest address shows file offset `m.offset` at `m.start`; the `PT_LOAD` whose file bytes
/// start inside it says which link-time address that is.
fn load_bias(maps: &[&FileMap], loads: &[(u64, u64, u64)]) -> Option<u64> {
    let m = maps.iter().min_by_key(|m| m.start)?;
    loads.iter().find_map(|&(off, _, addr)| {
        let len = m.end - m.start;
        (off >= m.offset && off - m.offset < len)
            .then(|| (m.start + (off - m.offset)).wrapping_sub(addr))
    })
}

fn is_libnrt(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("libnrt") && n.contains(".so"))
}

/// Finds `tdrv_ctx_0` in the process whose file mappings are `maps` (`who` names it in
/// messages). With `lib`, that file's symbols are used for the mapped libnrt (a copy with
/// symbols of a stripped library, or the library at another path).
pub fn locate(maps: &[FileMap], lib: Option<&Path>, who: &str) -> Result<Located, InputError> {
    let mut by_path: BTreeMap<&Path, Vec<&FileMap>> = BTreeMap::new();
    for m in maps {
        by_path.entry(m.path.as_path()).or_default().push(m);
    }
    if by_path.is_empty() {
        return Err(InputError(format!(
            "{who}: no mapped files are listed (a core without an NT_FILE note?), so libnrt \
             cannot be found; pass the context's address with --ctx-addr ADDR"
        )));
    }
    let (named, others): (Vec<_>, Vec<_>) = by_path.iter().partition(|(p, _)| is_libnrt(p));
    let stripped_hint = |path: &Path| {
        format!(
            "{who}: {} has no {CTX_SYMBOL} symbol (stripped?). Pass a copy of the same build \
             that keeps its symbol table with --lib FILE, or the context's address with \
             --ctx-addr ADDR (the pointer value {CTX_SYMBOL} holds, e.g. from `p tdrv_ctx_0` \
             in gdb on a copy with symbols)",
            path.display()
        )
    };

    if let Some(lib) = lib {
        let facts =
            read_elf(lib).map_err(|e| InputError(format!("--lib {}: {e}", lib.display())))?;
        let sym = facts.symbol.ok_or_else(|| {
            InputError(format!(
                "--lib {}: no {CTX_SYMBOL} symbol in it either",
                lib.display()
            ))
        })?;
        // The mapping it stands for: the one of the same file name, else the only libnrt.
        let name = lib.file_name();
        let target = by_path
            .iter()
            .find(|(p, _)| p.file_name() == name)
            .or_else(|| (named.len() == 1).then(|| named[0]))
            .ok_or_else(|| {
                InputError(format!(
                    "{who}: --lib {}: no mapped file of that name{}",
                    lib.display(),
                    if named.is_empty() {
                        ", and no libnrt is mapped".to_string()
                    } else {
                        format!(
                            " (libnrt mappings: {})",
                            named
                                .iter()
                                .map(|(p, _)| p.display().to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                ))
            })?;
        if let Ok(mapped) = read_elf(&target.1[0].read_from) {
            if let (Some(a), Some(b)) = (&mapped.build_id, &facts.build_id) {
                if a != b {
                    return Err(InputError(format!(
                        "--lib {} is another build than the mapped {} (build ids differ)",
                        lib.display(),
                        target.0.display()
                    )));
                }
            }
        }
        let bias = load_bias(target.1, &facts.loads).ok_or_else(|| {
            InputError(format!(
                "{who}: cannot tell where {} was loaded",
                target.0.display()
            ))
        })?;
        return Ok(Located {
            library: target.0.to_path_buf(),
            symbols_from: lib.to_path_buf(),
            symbol_addr: bias.wrapping_add(sym),
            flavor: if facts.project {
                Flavor::NrtDmem
            } else {
                Flavor::Libnrt
            },
        });
    }

    let mut stripped: Option<&Path> = None;
    let mut unreadable: Vec<String> = Vec::new();
    for (path, ms) in named.iter().chain(others.iter().take(MAX_FILES)) {
        let facts = match read_elf(&ms[0].read_from) {
            Ok(f) => f,
            Err(e) => {
                if is_libnrt(path) {
                    unreadable.push(format!("{}: {e}", path.display()));
                }
                continue;
            }
        };
        if !matches!(facts.arch, Architecture::X86_64 | Architecture::Aarch64) {
            continue;
        }
        let Some(sym) = facts.symbol else {
            if is_libnrt(path) && stripped.is_none() {
                stripped = Some(path);
            }
            continue;
        };
        let Some(bias) = load_bias(ms, &facts.loads) else {
            continue;
        };
        return Ok(Located {
            library: path.to_path_buf(),
            symbols_from: path.to_path_buf(),
            symbol_addr: bias.wrapping_add(sym),
            flavor: if facts.project {
                Flavor::NrtDmem
            } else {
                Flavor::Libnrt
            },
        });
    }
    if let Some(p) = stripped {
        return Err(InputError(stripped_hint(p)));
    }
    if !unreadable.is_empty() {
        let replaced = named
            .iter()
            .any(|(p, _)| p.as_os_str().to_string_lossy().ends_with(" (deleted)"));
        return Err(InputError(format!(
            "{who}: cannot read the mapped libnrt ({}){}; pass the build it runs with --lib FILE",
            unreadable.join("; "),
            if replaced {
                ": the file was deleted or replaced after the process loaded it"
            } else {
                ""
            }
        )));
    }
    Err(InputError(format!(
        "{who} does not use libnrt: no libnrt*.so is mapped and none of its {} mapped files \
         has a {CTX_SYMBOL} symbol",
        by_path.len()
    )))
}

/// Which libnrt the process maps and which library it is, without its symbol: for
/// `--ctx-addr` on a stripped library (its `.dynsym` still says whose it is). `symbol_addr`
/// is 0.
pub fn identify(maps: &[FileMap]) -> Option<Located> {
    maps.iter().filter(|m| is_libnrt(&m.path)).find_map(|m| {
        let facts = read_elf(&m.read_from).ok()?;
        Some(Located {
            library: m.path.clone(),
            symbols_from: m.path.clone(),
            symbol_addr: 0,
            flavor: if facts.project {
                Flavor::NrtDmem
            } else {
                Flavor::Libnrt
            },
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fm(start: u64, end: u64, offset: u64) -> FileMap {
        FileMap {
            start,
            end,
            offset,
            path: PathBuf::from("/x/libnrt.so.1"),
            read_from: PathBuf::from("/x/libnrt.so.1"),
        }
    }

    #[test]
    fn the_bias_comes_from_the_lowest_mapping() {
        // A shared library linked at 0: text at file 0x1000 → vaddr 0x1000.
        let loads = [
            (0, 0x800, 0),
            (0x1000, 0x5000, 0x1000),
            (0x6000, 0x100, 0x7000),
        ];
        let a = fm(0x7f00_0000_0000, 0x7f00_0000_1000, 0);
        let b = fm(0x7f00_0000_1000, 0x7f00_0000_6000, 0x1000);
        assert_eq!(load_bias(&[&b, &a], &loads), Some(0x7f00_0000_0000));
        // Only the data mapping is known (a core's NT_FILE may list just some): the data
        // segment at file 0x6000 is linked at 0x7000.
        let c = fm(0x7f00_0000_7000, 0x7f00_0000_8000, 0x6000);
        assert_eq!(load_bias(&[&c], &loads), Some(0x7f00_0000_0000));
        // A non-PIE executable: mapped where it was linked.
        let exe = [(0, 0x1000, 0x400000)];
        assert_eq!(load_bias(&[&fm(0x400000, 0x401000, 0)], &exe), Some(0));
        assert_eq!(load_bias(&[&fm(0x400000, 0x401000, 0x9000)], &exe), None);
    }

    #[test]
    fn libnrt_names() {
        for n in ["libnrt.so", "libnrt.so.1", "libnrt.so.2.31.24.0"] {
            assert!(is_libnrt(Path::new(n)), "{n}");
        }
        for n in ["libnrt.a", "libc.so.6", "nrt.so"] {
            assert!(!is_libnrt(Path::new(n)), "{n}");
        }
    }
}
