//! The streaming read (docs/NEFF.md "How a NEFF is read"): header gates on the first 1 KiB,
//! then the payload inflated as a stream and walked member by member.
//!
//! Pass 1 buffers the metadata members (`*.json`, under the metadata cap), records every other
//! member's size (and a `.npy` member's first bytes), and at each non-JSON member tries the
//! metadata seen so far (the early view of `index.rs`). Once that parse misses nothing, the
//! model is handed to the [`WeightSink`] (`nrt_load` loads it there) and every weight that
//! follows streams from the inflater into the sink in chunks — one inflate pass. When a weight
//! went by before the metadata naming it, or a weight's size is only known from its own
//! member, pass 1 reads to the end, the model is parsed whole, and a second pass over the
//! re-readable source streams the weights. A sink that takes no bytes (`neff inspect`, a plan)
//! never needs the second pass. Metadata members whose names do not say JSON are read in an
//! extra pass when the parse needs them.
//!
//! The payload digest, when asked for, is computed over the compressed bytes as the inflater
//! takes them (pass 1 only).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::io::{self, BufRead, Read};
use std::rc::Rc;

use crate::archive::{Entry, TarWalk};
use crate::error::{NeffError, Result};
use crate::header::{check_gates, integrity_gate, Gate, Header, PayloadDigest, HEADER_LEN};
use crate::index::{Index, Rec, View, NPY_HEAD};
use crate::meta::{payload_in, MAX_IO_TABLE_BYTES};
use crate::source::Source;
use crate::{footprint, ArchiveSummary, NeffModel, ReadOptions};

/// Bytes a weight is copied in by: large enough that per-copy costs vanish, small enough to stay
/// in cache between the inflater and the copy.
pub const CHUNK: usize = 256 << 10;
/// Parses of the metadata seen so far that pass 1 tries before it stops trying.
const MAX_EARLY_PARSES: u32 = 8;
/// Passes that read metadata members the first pass did not buffer (their names do not say
/// JSON): one per tier of the manifest chain.
const MAX_METADATA_PASSES: u32 = 4;

/// Receives a NEFF's weights as they stream out of the inflater.
pub trait WeightSink {
    /// What the sink fails with.
    type Error;

    /// Whether the sink takes the weights' bytes. `false`: the reader checks each weight's size
    /// against its declaration as it streams past it and never reads the payload twice.
    fn wants_bytes(&self) -> bool {
        true
    }

    /// Called once, before any weight byte, with the validated model (its
    /// [`NeffModel::archive`] summary is final only in the model [`read_with`] returns).
    fn begin(&mut self, model: &NeffModel) -> std::result::Result<(), Self::Error>;

    /// `bytes` of weight `weight` of subgraph `sg`, at `offset` of its payload. A weight's
    /// chunks come at increasing offsets; a weight first found at the archive root starts again
    /// at 0 when the member beside its `def.json` follows (that one wins, §5).
    fn write(
        &mut self,
        sg: usize,
        weight: usize,
        offset: u64,
        bytes: &[u8],
    ) -> std::result::Result<(), Self::Error>;
}

/// A sink that takes no weights: `neff inspect`, a plan.
#[derive(Copy, Clone, Debug, Default)]
pub struct NoWeights;

impl WeightSink for NoWeights {
    type Error = Infallible;

    fn wants_bytes(&self) -> bool {
        false
    }

    fn begin(&mut self, _: &NeffModel) -> std::result::Result<(), Infallible> {
        Ok(())
    }

    fn write(
        &mut self,
        _: usize,
        _: usize,
        _: u64,
        _: &[u8],
    ) -> std::result::Result<(), Infallible> {
        Ok(())
    }
}

/// Why [`read_with`] failed: the NEFF was refused, or the sink failed.
#[derive(Debug)]
pub enum ReadError<E> {
    /// The NEFF is refused.
    Neff(NeffError),
    /// The sink failed.
    Sink(E),
}

impl<E> From<NeffError> for ReadError<E> {
    fn from(e: NeffError) -> Self {
        ReadError::Neff(e)
    }
}

fn io_error(what: &str, e: &io::Error) -> NeffError {
    NeffError::invalid(format!("reading the NEFF {what}: {e}"))
}

/// The payload's bytes as stored, counted (and hashed, in pass 1) as the inflater consumes them.
struct Raw<'s> {
    inner: Box<dyn BufRead + 's>,
    digest: Option<Rc<RefCell<PayloadDigest>>>,
    consumed: Rc<Cell<u64>>,
}

impl BufRead for Raw<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, n: usize) {
        if let Some(d) = &self.digest {
            // The bytes just returned by `fill_buf` are still buffered: no I/O here.
            if let Ok(b) = self.inner.fill_buf() {
                d.borrow_mut().update(&b[..n.min(b.len())]);
            }
        }
        self.consumed.set(self.consumed.get() + n as u64);
        self.inner.consume(n);
    }
}

impl Read for Raw<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = {
            let b = self.fill_buf()?;
            let n = b.len().min(buf.len());
            buf[..n].copy_from_slice(&b[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

/// What a weight's member delivered.
#[derive(Debug)]
enum Got {
    Nothing,
    /// The member beside its `def.json`: final.
    Primary(u64),
    /// The root-level member, standing until the primary arrives.
    Fallback(String, u64),
    /// The root-level member did not fit; the error stands unless the primary arrives.
    Refused(NeffError),
}

/// A weight to stream.
#[derive(Debug)]
struct Target {
    sg: usize,
    w: usize,
    var: String,
    file: String,
    primary: String,
    len: u64,
    got: Got,
}

/// The weights of a model and the members they arrive in.
struct Targets {
    list: Vec<Target>,
    by_name: HashMap<String, Vec<usize>>,
}

impl Targets {
    fn new(m: &NeffModel) -> Self {
        let mut list = Vec::new();
        let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
        for (sg, s) in m.subgraphs.iter().enumerate() {
            for (w, wt) in s.weights.iter().enumerate() {
                let id = list.len();
                by_name.entry(wt.member.clone()).or_default().push(id);
                if let Some(f) = &wt.fallback {
                    by_name.entry(f.clone()).or_default().push(id);
                }
                list.push(Target {
                    sg,
                    w,
                    var: wt.var.clone(),
                    file: wt.file.clone(),
                    primary: wt.member.clone(),
                    len: wt.len,
                    got: Got::Nothing,
                });
            }
        }
        Targets { list, by_name }
    }

    /// Member `name` (`size` bytes, of which `head` were read already) has arrived: checks it
    /// against the weights it holds and streams its payload into the sink.
    fn arrive<K: WeightSink>(
        &mut self,
        name: &str,
        size: u64,
        head: &[u8],
        walk: &mut TarWalk<'_>,
        sink: &mut K,
        buf: &mut [u8],
    ) -> std::result::Result<(), ReadError<K::Error>> {
        let Some(ids) = self.by_name.get(name).cloned() else {
            return Ok(());
        };
        let mut head = head.to_vec();
        let want = NPY_HEAD.min(usize::try_from(size).unwrap_or(NPY_HEAD));
        if name.ends_with(".npy") && head.len() < want {
            let at = head.len();
            head.resize(want, 0);
            walk.read_exact(&mut head[at..])?;
        }
        let mut accepted = Vec::new();
        let mut offset = 0u64;
        for id in ids {
            let t = &mut self.list[id];
            let primary = t.primary == name;
            if !primary && matches!(t.got, Got::Primary(_)) {
                continue;
            }
            match payload_in(&t.var, &t.file, Some(t.len), name, &head, size) {
                Ok((off, _)) => {
                    offset = off;
                    accepted.push((id, primary));
                }
                Err(e) if primary => return Err(e.into()),
                Err(e) => t.got = Got::Refused(e),
            }
        }
        if accepted.is_empty() {
            return Ok(());
        }
        walk.skip_bytes(offset.saturating_sub(head.len() as u64))?;
        let mut at = 0u64;
        loop {
            let n = walk.read(buf)?;
            if n == 0 {
                break;
            }
            for &(id, _) in &accepted {
                let t = &self.list[id];
                sink.write(t.sg, t.w, at, &buf[..n])
                    .map_err(ReadError::Sink)?;
            }
            at += n as u64;
        }
        for (id, primary) in accepted {
            self.list[id].got = if primary {
                Got::Primary(offset)
            } else {
                Got::Fallback(name.to_string(), offset)
            };
        }
        Ok(())
    }

    /// Every weight arrived: the model's weights get the members and offsets they came from.
    fn finish(self, m: &mut NeffModel) -> Result<()> {
        for t in self.list {
            let (member, offset) = match t.got {
                Got::Primary(o) => (t.primary, o),
                Got::Fallback(f, o) => (f, o),
                Got::Refused(e) => return Err(e),
                Got::Nothing => {
                    return Err(NeffError::invalid(format!(
                        "Failed to get neff weight content for {}",
                        t.file
                    )))
                }
            };
            if let Some(w) = m
                .subgraphs
                .get_mut(t.sg)
                .and_then(|s| s.weights.get_mut(t.w))
            {
                w.member = member;
                w.offset = offset;
                w.fallback = None;
            }
        }
        m.bookings = m.subgraphs.iter().map(footprint::book_subgraph).collect();
        Ok(())
    }
}

/// Pass 1's attempts at the metadata seen so far.
struct Early {
    /// Something the last attempt lacked may have arrived.
    dirty: bool,
    /// Members the last attempt missed that have not arrived.
    awaited: BTreeSet<String>,
    parses: u32,
    /// A weight went by before its metadata: this pass cannot deliver it.
    possible: bool,
    /// The last attempt wants the current member's body as metadata.
    want_current: bool,
}

struct Reader<'s> {
    src: &'s dyn Source,
    header: Header,
    opts: ReadOptions,
    index: Index,
    directories: usize,
    skipped: Vec<String>,
    inflated: u64,
    gzip: bool,
    passes: u32,
    digest: Option<Rc<RefCell<PayloadDigest>>>,
    /// Payload bytes pass 1 consumed (and hashed).
    hashed: Rc<Cell<u64>>,
    buf: Vec<u8>,
}

fn duplicate(name: &str) -> NeffError {
    NeffError::invalid(format!("duplicate NEFF member {name:?}; refused"))
}

fn changed() -> NeffError {
    NeffError::invalid("the NEFF changed while it was being read; refused")
}

impl<'s> Reader<'s> {
    fn open_pass(&mut self, first: bool) -> Result<TarWalk<'s>> {
        self.passes += 1;
        let data = self.header.data_size;
        let inner = self
            .src
            .open_at(HEADER_LEN as u64, data)
            .map_err(|e| io_error("payload", &e))?;
        let consumed = if first {
            Rc::clone(&self.hashed)
        } else {
            Rc::new(Cell::new(0))
        };
        let mut raw = Raw {
            inner,
            digest: if first { self.digest.clone() } else { None },
            consumed: Rc::clone(&consumed),
        };
        let gzip = raw
            .fill_buf()
            .map_err(|e| io_error("payload", &e))?
            .starts_with(&[0x1f, 0x8b]);
        let r: Box<dyn Read + 's> = if gzip {
            Box::new(flate2::bufread::GzDecoder::new(raw))
        } else {
            Box::new(raw)
        };
        Ok(TarWalk::new(r, gzip, gzip.then_some((consumed, data))))
    }

    fn parse(&self, early: bool) -> (Result<NeffModel>, crate::index::Misses, BTreeSet<String>) {
        let view = View::new(&self.index, early);
        let r = crate::parse_model(&view, &self.header, &self.opts);
        let (misses, used) = view.into_parts();
        (r, misses, used)
    }

    fn rec(&mut self, name: &str) -> &mut Rec {
        self.index.recs.entry(name.to_string()).or_default()
    }

    /// Buffers a metadata member's body when it fits the caps; else leaves it (the caller skips
    /// it) marked for what it exceeds.
    fn buffer(&mut self, name: &str, size: u64, walk: &mut TarWalk<'_>) -> Result<()> {
        let cap = if name == "kelp.json" {
            MAX_IO_TABLE_BYTES
        } else {
            self.opts.max_metadata_bytes
        };
        if size > cap {
            self.rec(name).over_cap = Some(cap);
            return Ok(());
        }
        if self.index.buffered + size > self.opts.max_metadata_bytes {
            return Ok(());
        }
        let mut body = vec![0u8; usize::try_from(size).unwrap_or(0)];
        walk.read_exact(&mut body)?;
        self.index.buffered += size;
        self.rec(name).body = Some(body);
        Ok(())
    }

    /// Pass 1 (see the module doc). `Some(model)` when the weights streamed in this pass.
    fn pass1<K: WeightSink>(
        &mut self,
        sink: &mut K,
    ) -> std::result::Result<Option<NeffModel>, ReadError<K::Error>> {
        let mut walk = self.open_pass(true)?;
        self.gzip = walk.gzip();
        let mut buf = std::mem::take(&mut self.buf);
        let mut early = Early {
            dirty: true,
            awaited: BTreeSet::new(),
            parses: 0,
            possible: true,
            want_current: false,
        };
        let mut committed: Option<(NeffModel, Targets)> = None;
        while let Some(entry) = walk.next_entry()? {
            let (name, size) = match entry {
                Entry::Dir => {
                    self.directories += 1;
                    continue;
                }
                Entry::Skipped { name } => {
                    self.skipped.push(name);
                    continue;
                }
                Entry::File { name, size } => (name, size),
            };
            if self.index.recs.contains_key(&name) {
                return Err(duplicate(&name).into());
            }
            if name == "neff.json" && size > MAX_IO_TABLE_BYTES {
                return Err(NeffError::invalid(format!(
                    "neff.json is {size} bytes: an IO tensor table takes at most \
                     {MAX_IO_TABLE_BYTES}; refused"
                ))
                .into());
            }
            self.index.recs.insert(
                name.clone(),
                Rec {
                    size,
                    ..Rec::default()
                },
            );
            if early.awaited.remove(&name) && early.awaited.is_empty() {
                early.dirty = true;
            }
            if let Some((_, targets)) = committed.as_mut() {
                targets.arrive(&name, size, &[], &mut walk, sink, &mut buf)?;
            } else if name.ends_with(".json") {
                self.buffer(&name, size, &mut walk)?;
                early.dirty = true;
            } else {
                let mut head = Vec::new();
                if name.ends_with(".npy") {
                    head = vec![0u8; NPY_HEAD.min(usize::try_from(size).unwrap_or(NPY_HEAD))];
                    walk.read_exact(&mut head)?;
                    self.rec(&name).head = head.clone();
                }
                if let Some(model) = self.try_commit(&name, &mut early)? {
                    sink.begin(&model).map_err(ReadError::Sink)?;
                    let mut targets = Targets::new(&model);
                    targets.arrive(&name, size, &head, &mut walk, sink, &mut buf)?;
                    committed = Some((model, targets));
                } else if std::mem::take(&mut early.want_current) && head.is_empty() {
                    // Metadata under a name that does not say JSON.
                    self.buffer(&name, size, &mut walk)?;
                    early.dirty = true;
                }
            }
            walk.skip()?;
            self.rec(&name).passed = true;
        }
        self.inflated = walk.position();
        self.buf = buf;
        match committed {
            Some((mut model, targets)) => {
                targets.finish(&mut model)?;
                Ok(Some(model))
            }
            None => Ok(None),
        }
    }

    /// Tries the metadata seen so far, at non-JSON member `current`: `Some` when it misses
    /// nothing, an error when it refuses the NEFF for a reason no later member changes.
    fn try_commit(&mut self, current: &str, early: &mut Early) -> Result<Option<NeffModel>> {
        if !early.possible
            || !early.dirty
            || !early.awaited.is_empty()
            || early.parses >= MAX_EARLY_PARSES
        {
            return Ok(None);
        }
        early.parses += 1;
        early.dirty = false;
        let (r, misses, _) = self.parse(true);
        if misses.is_empty() {
            return r.map(Some);
        }
        if misses.blocked || misses.want.iter().any(|w| w != current) {
            early.possible = false;
        } else {
            early.want_current = misses.want.contains(current);
        }
        early.awaited = misses.unseen;
        Ok(None)
    }

    /// Parses the whole archive's metadata, reading in more passes the members the parse needs
    /// that pass 1 did not buffer.
    fn finish_metadata(&mut self) -> Result<NeffModel> {
        for _ in 0..MAX_METADATA_PASSES {
            let (r, misses, used) = self.parse(false);
            match r {
                Ok(m) => return Ok(m),
                Err(e) if misses.want.is_empty() => return Err(e),
                Err(_) => self.fetch(&misses.want, &used)?,
            }
        }
        Err(NeffError::invalid(format!(
            "NEFF metadata chain needs more than {MAX_METADATA_PASSES} passes over the archive \
             (metadata members whose names do not end in .json); refused"
        )))
    }

    /// Reads the bodies of `want` in one more pass, dropping bodies the parse did not use when
    /// room is needed under the metadata cap.
    fn fetch(&mut self, want: &BTreeSet<String>, used: &BTreeSet<String>) -> Result<()> {
        let cap = self.opts.max_metadata_bytes;
        let need: u64 = want.iter().map(|n| self.index.recs[n].size).sum();
        if self.index.buffered + need > cap {
            for (name, rec) in self.index.recs.iter_mut() {
                if !used.contains(name) {
                    if let Some(b) = rec.body.take() {
                        self.index.buffered -= b.len() as u64;
                    }
                }
            }
        }
        if self.index.buffered + need > cap {
            return Err(NeffError::invalid(format!(
                "NEFF metadata needs more than the {cap}-byte metadata cap \
                 (ReadOptions::max_metadata_bytes) in memory at once; refused"
            )));
        }
        let mut walk = self.open_pass(false)?;
        while let Some(entry) = walk.next_entry()? {
            let Entry::File { name, size } = entry else {
                continue;
            };
            if self.index.recs.get(&name).map(|r| r.size) != Some(size) {
                return Err(changed());
            }
            if want.contains(&name) {
                let mut body = vec![0u8; usize::try_from(size).unwrap_or(0)];
                walk.read_exact(&mut body)?;
                self.index.buffered += size;
                self.rec(&name).body = Some(body);
            }
        }
        Ok(())
    }

    /// Pass 2: the weights of a model parsed from the whole archive.
    fn pass2<K: WeightSink>(
        &mut self,
        model: &mut NeffModel,
        sink: &mut K,
    ) -> std::result::Result<(), ReadError<K::Error>> {
        let mut targets = Targets::new(model);
        let mut walk = self.open_pass(false)?;
        let mut buf = std::mem::take(&mut self.buf);
        while let Some(entry) = walk.next_entry()? {
            let Entry::File { name, size } = entry else {
                continue;
            };
            if self.index.recs.get(&name).map(|r| r.size) != Some(size) {
                return Err(changed().into());
            }
            targets.arrive(&name, size, &[], &mut walk, sink, &mut buf)?;
        }
        self.buf = buf;
        targets.finish(model)?;
        Ok(())
    }

    fn run<K: WeightSink>(
        &mut self,
        sink: &mut K,
    ) -> std::result::Result<NeffModel, ReadError<K::Error>> {
        let mut model = match self.pass1(sink)? {
            Some(m) => m,
            None => {
                let mut m = self.finish_metadata()?;
                sink.begin(&m).map_err(ReadError::Sink)?;
                let bytes = m
                    .subgraphs
                    .iter()
                    .flat_map(|s| &s.weights)
                    .any(|w| w.len > 0);
                if sink.wants_bytes() && bytes {
                    self.pass2(&mut m, sink)?;
                }
                m
            }
        };
        model.archive = ArchiveSummary {
            gzip: self.gzip,
            inflated_bytes: self.inflated,
            members: self.index.recs.len(),
            directories: self.directories,
            skipped: std::mem::take(&mut self.skipped),
            passes: self.passes,
        };
        Ok(model)
    }

    /// The digest of the whole payload: what pass 1 hashed, then the rest read raw.
    fn finish_digest(&self) -> Result<Option<[u8; 32]>> {
        let Some(d) = &self.digest else {
            return Ok(None);
        };
        let done = self.hashed.get().min(self.header.data_size);
        let mut rest = self
            .src
            .open_at(HEADER_LEN as u64 + done, self.header.data_size - done)
            .map_err(|e| io_error("payload", &e))?;
        let mut d = d.borrow().clone();
        loop {
            let b = rest.fill_buf().map_err(|e| io_error("payload", &e))?;
            if b.is_empty() {
                break;
            }
            d.update(b);
            let n = b.len();
            rest.consume(n);
        }
        Ok(Some(d.finish()))
    }
}

/// Reads and validates a NEFF from `src` (§3 → §10), streaming its weights into `sink`: the
/// header gates on the first 1 KiB, the archive inflated as a stream, metadata buffered under
/// [`ReadOptions::max_metadata_bytes`], weights never held. `sink.begin` sees the model before
/// any weight; an error after it (a later refusal, a truncated weight, a digest mismatch) is
/// the sink owner's to roll back.
pub fn read_with<K: WeightSink>(
    src: &dyn Source,
    opts: &ReadOptions,
    sink: &mut K,
) -> std::result::Result<NeffModel, ReadError<K::Error>> {
    let size = src.len();
    let mut head = Vec::with_capacity(HEADER_LEN);
    src.open_at(0, HEADER_LEN as u64)
        .and_then(|r| r.take(HEADER_LEN as u64).read_to_end(&mut head))
        .map_err(|e| io_error("header", &e))?;
    let (header, gates) = check_gates(&head, size).map_err(|e| match src.not_regular() {
        Some(what) => e.note(what),
        None => e,
    })?;
    let pkg = header.pkg_version;
    let mut r = Reader {
        src,
        header: header.clone(),
        opts: *opts,
        index: Index::default(),
        directories: 0,
        skipped: Vec::new(),
        inflated: 0,
        gzip: false,
        passes: 0,
        digest: opts
            .verify
            .then(|| Rc::new(RefCell::new(PayloadDigest::new(pkg)))),
        hashed: Rc::new(Cell::new(0)),
        buf: vec![0u8; CHUNK],
    };
    let out = r.run(sink);
    // The integrity gate is libnrt's first refusal after the header: a corrupt payload is
    // refused for its digest whatever else went wrong.
    let digest = match r.finish_digest() {
        Ok(d) => d,
        Err(e) => return Err(out.err().unwrap_or(ReadError::Neff(e))),
    };
    let mut gates: Vec<Gate> = gates;
    if let Some(d) = digest {
        integrity_gate(&mut gates, &header, &d)?;
    }
    let mut model = out?;
    model.gates = gates;
    Ok(model)
}
