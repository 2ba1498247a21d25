//! The inner archive (neff-format §4): one gzip member over a GNU tar (pkg 2) or a bare tar
//! (pkg 1; a gzipped pkg 1 payload is accepted too, as libarchive's magic detection does).
//!
//! The walk builds an in-memory map name → bytes, as libnrt does: directories skipped, one
//! leading `./` stripped, members ending in `wavegraph-bin.json` dropped. Beyond libnrt (whose
//! names never reach a file system, §4 SILENT) it refuses path-traversal names, duplicates and
//! a payload that inflates past a stated cap, checked while reading.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{self, Read};
use std::rc::Rc;

use crate::error::{NeffError, Result};

/// The debug member libnrt skips by suffix (§4 step 3).
pub const WAVEGRAPH_SUFFIX: &str = "wavegraph-bin.json";

/// Default cap on the inflated archive (tar bytes), 4 GiB: above the largest shipped example
/// model, below what a host would hold for one load. A payload inflating past it is refused as
/// a decompression bomb ([`crate::ReadOptions::max_inflated_bytes`]).
pub const DEFAULT_MAX_INFLATED: u64 = 4 << 30;

/// The archive's members, by stripped name.
#[derive(Clone, Debug, Default)]
pub struct Archive {
    /// name → body.
    pub members: BTreeMap<String, Vec<u8>>,
    /// Whether the payload was gzip-compressed.
    pub gzip: bool,
    /// Bytes of tar read (inflated size as far as the walk went).
    pub inflated_bytes: u64,
    /// Members dropped by name (the wavegraph debug member).
    pub skipped: Vec<String>,
    /// Directory entries skipped.
    pub directories: usize,
}

impl Archive {
    /// A member's body, or `None`.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.members.get(name).map(Vec::as_slice)
    }
}

/// A reader that fails once more than `cap` bytes came through; `hit` remembers that it did.
struct Capped<R> {
    inner: R,
    left: u64,
    read: Rc<Cell<u64>>,
    hit: Rc<Cell<bool>>,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // One byte more tells "exactly at the cap" from "past it".
            let mut probe = [0u8; 1];
            let n = self.inner.read(&mut probe)?;
            if n == 0 {
                return Ok(0);
            }
            self.hit.set(true);
            return Err(io::Error::other("inflated size cap exceeded"));
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

/// Checks a member name and strips one leading `./` (§4 step 2). Absolute names, `..`
/// components, empty names and NUL bytes are refused: a reader handing names to a file
/// system must not be steered outside its directory.
fn member_name(raw: &[u8]) -> Result<String> {
    let s = std::str::from_utf8(raw).map_err(|_| {
        NeffError::invalid(format!(
            "failure while reading NEFF metadata: member name {:?} is not UTF-8",
            String::from_utf8_lossy(raw)
        ))
    })?;
    let s = s.strip_prefix("./").unwrap_or(s);
    if s.is_empty() || s.contains('\0') {
        return Err(NeffError::invalid(format!(
            "failure while reading NEFF metadata: bad member name {s:?}"
        )));
    }
    if s.starts_with('/') {
        return Err(NeffError::invalid(format!(
            "NEFF member {s:?} has an absolute path; refused (path traversal)"
        )));
    }
    if s.split('/').any(|c| c == "..") {
        return Err(NeffError::invalid(format!(
            "NEFF member {s:?} has a '..' component; refused (path traversal)"
        )));
    }
    Ok(s.to_string())
}

fn bomb_error(cap: u64) -> NeffError {
    NeffError::invalid(format!(
        "NEFF payload inflates past the {cap}-byte cap; refused (decompression bomb)"
    ))
}

/// Walks the payload (§4): gzip (by its magic `1f 8b`) or bare tar, at most `cap` inflated
/// bytes.
pub fn read_archive(payload: &[u8], cap: u64) -> Result<Archive> {
    let gzip = payload.starts_with(&[0x1f, 0x8b]);
    let read = Rc::new(Cell::new(0u64));
    let hit = Rc::new(Cell::new(false));
    let inner: Box<dyn Read + '_> = if gzip {
        Box::new(flate2::read::GzDecoder::new(payload))
    } else {
        Box::new(payload)
    };
    let capped = Capped {
        inner,
        left: cap,
        read: read.clone(),
        hit: hit.clone(),
    };
    let bomb = |hit: &Cell<bool>| hit.get().then(|| bomb_error(cap));
    let failed = |e: io::Error, hit: &Cell<bool>| {
        bomb(hit).unwrap_or_else(|| {
            NeffError::invalid(format!(
                "failure while reading NEFF metadata: {} ({e})",
                if gzip {
                    "corrupt or truncated gzip stream or tar archive"
                } else {
                    "corrupt or truncated tar archive"
                }
            ))
        })
    };
    let mut ar = tar::Archive::new(capped);
    let mut out = Archive {
        gzip,
        ..Archive::default()
    };
    {
        let entries = ar.entries().map_err(|e| failed(e, &hit))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| failed(e, &hit))?;
            let kind = entry.header().entry_type();
            if kind.is_dir() {
                out.directories += 1;
                continue;
            }
            let name = member_name(&entry.path_bytes())?;
            if !(kind.is_file() || kind == tar::EntryType::Continuous) {
                return Err(NeffError::invalid(format!(
                    "NEFF member {name:?} is not a regular file (tar type {:?}); refused",
                    kind.as_byte() as char
                )));
            }
            let size = entry.size();
            if name.ends_with(WAVEGRAPH_SUFFIX) {
                // The body is consumed by the walk's next step.
                out.skipped.push(name);
                continue;
            }
            // A header claiming more than the cap is a bomb before a byte is inflated.
            if size > cap {
                return Err(bomb_error(cap));
            }
            if out.members.contains_key(&name) {
                return Err(NeffError::invalid(format!(
                    "duplicate NEFF member {name:?}; refused"
                )));
            }
            let mut body = Vec::with_capacity(usize::try_from(size.min(1 << 20)).unwrap_or(0));
            entry.read_to_end(&mut body).map_err(|e| failed(e, &hit))?;
            if body.len() as u64 != size {
                return Err(NeffError::invalid(format!(
                    "failure while reading NEFF metadata {name}: short read ({} of {size} bytes)",
                    body.len()
                )));
            }
            out.members.insert(name, body);
        }
    }
    // Drain the rest so that gzip's trailer (CRC-32, length) is checked: a truncated or
    // corrupt stream past the tar's end-of-archive blocks is still refused.
    let mut rest = ar.into_inner();
    io::copy(&mut rest, &mut io::sink()).map_err(|e| failed(e, &hit))?;
    out.inflated_bytes = read.get();
    Ok(out)
}
