//! The inner archive (neff-format §4), walked as a stream: one gzip member over a GNU tar
//! (pkg 2) or a bare tar (pkg 1; a gzipped pkg 1 payload is accepted too, as libarchive's
//! magic detection does).
//!
//! The walk hands out one member at a time and reads its body in pieces; nothing of the
//! archive is held. As libnrt: directories skipped, one leading `./` stripped, members ending
//! in `wavegraph-bin.json` dropped. Beyond libnrt (whose names never reach a file system, §4
//! SILENT) it refuses path-traversal names, links and special files, and bounds everything
//! the archive could inflate to by what the archive itself declares: every member is exactly
//! the size its tar header states, and after the end-of-archive blocks only the zero padding
//! of the last 10 KiB record may follow (then the gzip trailer, checked, and nothing more).
//! Entries, names and extension records are capped below.

use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;

use crate::error::{NeffError, Result};

/// The debug member libnrt skips by suffix (§4 step 3).
pub const WAVEGRAPH_SUFFIX: &str = "wavegraph-bin.json";
/// Tar block.
pub const BLOCK: u64 = 512;
/// Tar record (20 blocks, GNU tar's and Python's default): after the end-of-archive blocks,
/// zero padding up to the next record boundary is all that may follow (§4: the fixture's tar
/// is padded to 20 480 bytes).
pub const TAR_RECORD: u64 = 10240;
/// Longest member name, a GNU long-name record included (Linux's `PATH_MAX`).
pub const MAX_MEMBER_NAME: usize = 4096;
/// Most tar entries of any kind (members, directories, extension records) in one archive.
pub const MAX_ENTRIES: u64 = 1 << 20;
/// Most bytes of all member names together.
pub const MAX_NAME_BYTES: u64 = 64 << 20;
/// Largest pax extended-header record.
pub const MAX_PAX_BYTES: u64 = 64 << 10;

/// One entry of the walk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A regular file (its body is read with [`TarWalk::read`] or skipped).
    File {
        /// Name, `./` stripped.
        name: String,
        /// Bytes, as its header declares.
        size: u64,
    },
    /// A directory entry (skipped).
    Dir,
    /// A member dropped by name (the wavegraph debug member); its body is skipped.
    Skipped {
        /// Its name.
        name: String,
    },
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

/// The `path` and `size` of a pax extended header (`"LEN key=value\n"` records).
fn pax_fields(body: &[u8]) -> Result<(Option<Vec<u8>>, Option<u64>)> {
    let bad = || NeffError::invalid("failure while reading NEFF metadata: malformed pax header");
    let (mut path, mut size) = (None, None);
    let mut rest = body;
    while !rest.is_empty() && rest[0] != 0 {
        let sp = rest.iter().position(|&c| c == b' ').ok_or_else(bad)?;
        let len: usize = std::str::from_utf8(&rest[..sp])
            .ok()
            .and_then(|l| l.parse().ok())
            .filter(|&l| l > sp + 1 && l <= rest.len())
            .ok_or_else(bad)?;
        let rec = &rest[sp + 1..len];
        let rec = rec.strip_suffix(b"\n").ok_or_else(bad)?;
        let eq = rec.iter().position(|&c| c == b'=').ok_or_else(bad)?;
        match &rec[..eq] {
            b"path" => path = Some(rec[eq + 1..].to_vec()),
            b"size" => {
                size = Some(
                    std::str::from_utf8(&rec[eq + 1..])
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(bad)?,
                )
            }
            _ => {}
        }
        rest = &rest[len..];
    }
    Ok((path, size))
}

/// The tar walk over an inflated (or bare) stream.
pub struct TarWalk<'a> {
    r: Box<dyn Read + 'a>,
    gzip: bool,
    /// Tar bytes read.
    pos: u64,
    /// Body bytes of the current member not read yet, and the padding after them.
    left: u64,
    pad: u64,
    /// The member being read, or the last one (for messages).
    current: Option<String>,
    entries: u64,
    name_bytes: u64,
    done: bool,
    /// Bytes of the payload the inflater took, when the caller tracks it (gzip trailing data).
    consumed: Option<(Rc<Cell<u64>>, u64)>,
}

impl<'a> TarWalk<'a> {
    /// A walk over `r`, the tar stream (`gzip`: inflated from a gzip member). `consumed`, when
    /// given, counts the payload bytes the inflater took out of `payload_len`: after the
    /// gzip member, no payload byte may remain.
    pub fn new(r: Box<dyn Read + 'a>, gzip: bool, consumed: Option<(Rc<Cell<u64>>, u64)>) -> Self {
        TarWalk {
            r,
            gzip,
            pos: 0,
            left: 0,
            pad: 0,
            current: None,
            entries: 0,
            name_bytes: 0,
            done: false,
            consumed,
        }
    }

    /// Tar bytes read so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Whether the tar was inflated from gzip.
    pub fn gzip(&self) -> bool {
        self.gzip
    }

    fn whereabouts(&self) -> String {
        match &self.current {
            Some(n) if self.left > 0 => format!("in member {n}"),
            Some(n) => format!("after member {n}"),
            None => "at the start of the archive".into(),
        }
    }

    fn corrupt(&self, e: &io::Error) -> NeffError {
        NeffError::invalid(format!(
            "failure while reading NEFF metadata: {} ({e}), {}",
            if self.gzip {
                "corrupt or truncated gzip stream or tar archive"
            } else {
                "corrupt or truncated tar archive"
            },
            self.whereabouts()
        ))
    }

    /// Reads up to `buf.len()` raw tar bytes; 0 only at the end of the stream.
    fn raw(&mut self, buf: &mut [u8]) -> Result<usize> {
        loop {
            match self.r.read(buf) {
                Ok(n) => {
                    self.pos += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.corrupt(&e)),
            }
        }
    }

    /// Fills `buf` completely; `Ok(false)` if the stream ended before its first byte.
    fn raw_exact(&mut self, buf: &mut [u8]) -> Result<bool> {
        let mut got = 0;
        while got < buf.len() {
            let n = self.raw(&mut buf[got..])?;
            if n == 0 {
                if got == 0 {
                    return Ok(false);
                }
                return Err(NeffError::invalid(format!(
                    "failure while reading NEFF metadata: the archive ends inside a tar header \
                     ({got} of 512 bytes), {}",
                    self.whereabouts()
                )));
            }
            got += n;
        }
        Ok(true)
    }

    fn discard(&mut self, mut n: u64) -> Result<()> {
        let mut scratch = [0u8; 8192];
        while n > 0 {
            let want = usize::try_from(n).map_or(scratch.len(), |n| n.min(scratch.len()));
            let got = self.raw(&mut scratch[..want])?;
            if got == 0 {
                return Err(self.truncated());
            }
            n -= got as u64;
        }
        Ok(())
    }

    fn truncated(&self) -> NeffError {
        NeffError::invalid(format!(
            "failure while reading NEFF metadata: the archive is truncated {} ({} bytes of it \
             missing)",
            self.whereabouts(),
            self.left
        ))
    }

    /// Reads the current member's body into `buf`: up to `buf.len()` bytes, 0 at its end. A
    /// body the stream ends inside is refused, the member named.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        if self.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = usize::try_from(self.left).map_or(buf.len(), |l| l.min(buf.len()));
        let n = self.raw(&mut buf[..want])?;
        if n == 0 {
            return Err(self.truncated());
        }
        self.left -= n as u64;
        Ok(n)
    }

    /// Fills `buf` from the current member's body (which holds at least `buf.len()` more bytes).
    pub fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        let mut got = 0;
        while got < buf.len() {
            let n = self.read(&mut buf[got..])?;
            if n == 0 {
                return Err(self.truncated());
            }
            got += n;
        }
        Ok(())
    }

    /// Skips the rest of the current member's body.
    pub fn skip(&mut self) -> Result<()> {
        let n = self.left;
        self.discard_body(n)
    }

    /// Skips `n` bytes of the current member's body.
    pub fn skip_bytes(&mut self, n: u64) -> Result<()> {
        self.discard_body(n.min(self.left))
    }

    fn discard_body(&mut self, mut n: u64) -> Result<()> {
        let mut scratch = [0u8; 8192];
        while n > 0 {
            let want = usize::try_from(n).map_or(scratch.len(), |n| n.min(scratch.len()));
            let got = self.read(&mut scratch[..want])?;
            n -= got as u64;
        }
        Ok(())
    }

    /// The body of an extension record (long name, pax header), at most `cap` bytes.
    fn record_body(&mut self, size: u64, cap: u64, what: &str) -> Result<Vec<u8>> {
        if size > cap {
            return Err(NeffError::invalid(format!(
                "failure while reading NEFF metadata: a {what} of {size} bytes {} (at most \
                 {cap}); refused",
                self.whereabouts()
            )));
        }
        self.left = size;
        self.pad = (BLOCK - size % BLOCK) % BLOCK;
        let mut body = vec![0u8; size as usize];
        self.read_exact(&mut body)?;
        let pad = self.pad;
        self.discard(pad)?;
        self.pad = 0;
        Ok(body)
    }

    /// The next entry; `None` after the end-of-archive blocks, their padding and (gzip) the
    /// stream's trailer have been checked.
    pub fn next_entry(&mut self) -> Result<Option<Entry>> {
        if self.done {
            return Ok(None);
        }
        self.skip()?;
        let pad = self.pad;
        self.discard(pad)?;
        self.pad = 0;
        let mut long_name: Option<Vec<u8>> = None;
        let mut pax: (Option<Vec<u8>>, Option<u64>) = (None, None);
        loop {
            let mut block = [0u8; BLOCK as usize];
            if !self.raw_exact(&mut block)? {
                // The stream ended at a block boundary without end-of-archive blocks: the end
                // of the archive, as tar readers take it.
                return self.end(false).map(|()| None);
            }
            if block.iter().all(|&b| b == 0) {
                return self.end(true).map(|()| None);
            }
            self.entries += 1;
            if self.entries > MAX_ENTRIES {
                return Err(NeffError::invalid(format!(
                    "NEFF archive has more than {MAX_ENTRIES} entries; refused"
                )));
            }
            let h = tar::Header::from_byte_slice(&block);
            let sum: u64 = block[..148]
                .iter()
                .chain(&block[156..])
                .map(|&b| u64::from(b))
                .sum::<u64>()
                + 8 * 32;
            if h.cksum().ok().map(u64::from) != Some(sum) {
                return Err(NeffError::invalid(format!(
                    "failure while reading NEFF metadata: tar header checksum mismatch {}",
                    self.whereabouts()
                )));
            }
            let size = match pax.1 {
                Some(s) => s,
                None => h.entry_size().map_err(|e| {
                    NeffError::invalid(format!(
                        "failure while reading NEFF metadata: bad tar size field ({e}) {}",
                        self.whereabouts()
                    ))
                })?,
            };
            let ty = block[156];
            match ty {
                b'L' => {
                    let mut n = self.record_body(size, MAX_MEMBER_NAME as u64 + 1, "long name")?;
                    while n.last() == Some(&0) {
                        n.pop();
                    }
                    long_name = Some(n);
                    continue;
                }
                b'x' => {
                    let body = self.record_body(size, MAX_PAX_BYTES, "pax header")?;
                    pax = pax_fields(&body)?;
                    continue;
                }
                b'g' => {
                    self.record_body(size, MAX_PAX_BYTES, "pax global header")?;
                    continue;
                }
                _ => {}
            }
            let raw = match (pax.0.take(), long_name.take()) {
                (Some(p), _) | (None, Some(p)) => p,
                (None, None) => h.path_bytes().into_owned(),
            };
            if raw.len() > MAX_MEMBER_NAME {
                return Err(NeffError::invalid(format!(
                    "NEFF member name of {} bytes {} (at most {MAX_MEMBER_NAME}); refused",
                    raw.len(),
                    self.whereabouts()
                )));
            }
            self.left = size;
            self.pad = (BLOCK - size % BLOCK) % BLOCK;
            if ty == b'5' {
                self.current = None;
                return Ok(Some(Entry::Dir));
            }
            let name = member_name(&raw)?;
            self.name_bytes += name.len() as u64;
            if self.name_bytes > MAX_NAME_BYTES {
                return Err(NeffError::invalid(format!(
                    "NEFF member names add up to more than {MAX_NAME_BYTES} bytes; refused"
                )));
            }
            if !matches!(ty, b'0' | 0 | b'7') {
                return Err(NeffError::invalid(format!(
                    "NEFF member {name:?} is not a regular file (tar type {:?}); refused",
                    ty as char
                )));
            }
            self.current = Some(name.clone());
            if name.ends_with(WAVEGRAPH_SUFFIX) {
                return Ok(Some(Entry::Skipped { name }));
            }
            return Ok(Some(Entry::File { name, size }));
        }
    }

    /// The end of the tar: after a zero block (`eoa`), only zeros up to the next record
    /// boundary; then the stream must end (gzip: its trailer is checked there) and, for gzip,
    /// no payload byte may follow the member.
    fn end(&mut self, eoa: bool) -> Result<()> {
        self.done = true;
        let past = |what: &str| {
            NeffError::invalid(format!(
                "NEFF payload has data past the end of its {what}; refused"
            ))
        };
        if eoa {
            let limit = (self.pos + BLOCK).div_ceil(TAR_RECORD) * TAR_RECORD;
            let mut buf = [0u8; 4096];
            loop {
                let room = limit - self.pos;
                // One byte beyond the record boundary tells "exactly padded" from "more".
                let want = usize::try_from(room + 1).map_or(buf.len(), |r| r.min(buf.len()));
                let n = self.raw(&mut buf[..want])?;
                if n == 0 {
                    break;
                }
                if buf[..n].iter().any(|&b| b != 0) || self.pos > limit {
                    return Err(past("tar archive (after the end-of-archive blocks)"));
                }
            }
        }
        if let Some((consumed, total)) = &self.consumed {
            if consumed.get() < *total {
                return Err(past("gzip stream"));
            }
        }
        Ok(())
    }
}
