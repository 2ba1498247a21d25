//! The writer: a NEFF (pkg 2, gzip(tar), MD5) from a model description, so applications can be
//! tested end to end without a compiler, and the §12 fixture generator.
//!
//! What the reader reads back exactly (§10.2): weights become `file` vars with `.bin`
//! payloads, private scratch `tmp-buf` vars, the scratchpad one `virtual` var, the SBUF
//! carveout a `runtime_statebuffer_reservation`, GPSIMD libraries `ucode_lib` members, the IO
//! tensors `neff.json`'s table. Everything the NEFF format does not size (instruction images,
//! rings, tables, queues, host memory …) goes into the `nrt_dmem` extension of each `def.json`
//! (docs/NEFF.md), which libnrt ignores and this reader books as *declared*.

use std::collections::BTreeSet;
use std::io::{self, Cursor, Read, Seek, SeekFrom, Write};

use md5::{Digest as _, Md5};
use nrt_core::abi::dma_mem_usage_type_t as U;
use serde_json::{json, Map, Value};

use crate::archive::TAR_RECORD;
use crate::error::{NeffError, Result};
use crate::header::{Header, PayloadDigest, HEADER_LEN};
use crate::meta::{check_tensor_name, tensor_size, Dtype, Reservation, ENGINES, NRT_UCODE_VERSION};

/// Member mtime of written archives (the fixture's, §12).
pub const MTIME: u64 = 1_731_285_376;
/// Longest member name a plain GNU tar header holds (no long-name records are written, §4).
pub const MAX_HEADER_NAME: usize = 100;

/// An archive member to write: `None` body = a directory entry.
pub type Member = (String, Option<Vec<u8>>);

/// The body of a member [`write_neff`] writes.
pub enum Body<'a> {
    /// A directory entry.
    Dir,
    /// These bytes.
    Bytes(&'a [u8]),
    /// This many zero bytes (a weight of `neff pack`), never held in memory.
    Zeros(u64),
    /// This many bytes read from the reader.
    Reader(u64, Box<dyn Read + 'a>),
}

/// A writer that counts and (for the payload) hashes what passes through.
struct Tally<W> {
    inner: W,
    n: u64,
    digest: Option<PayloadDigest>,
}

impl<W: Write> Write for Tally<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        if let Some(d) = &mut self.digest {
            d.update(&buf[..n]);
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn write_error(e: io::Error) -> NeffError {
    NeffError::invalid(format!("writing the NEFF: {e}"))
}

/// Writes the members as a tar into `out` (GNU headers, mode 0644, numeric owner 0, records
/// padded to 10 240 B) and returns `out`.
fn write_tar<'a, T: Write>(
    out: T,
    members: impl IntoIterator<Item = (String, Body<'a>)>,
) -> Result<T> {
    let mut b = tar::Builder::new(Tally {
        inner: out,
        n: 0,
        digest: None,
    });
    for (name, body) in members {
        let raw = name.as_bytes();
        if raw.len() > MAX_HEADER_NAME {
            return Err(NeffError::invalid(format!(
                "member name {name} longer than {MAX_HEADER_NAME} bytes"
            )));
        }
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..raw.len()].copy_from_slice(raw);
        h.set_mtime(MTIME);
        h.set_uid(0);
        h.set_gid(0);
        let (size, data): (u64, Box<dyn Read + 'a>) = match body {
            Body::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                (0, Box::new(io::empty()))
            }
            Body::Bytes(b) => (b.len() as u64, Box::new(b)),
            Body::Zeros(n) => (n, Box::new(io::repeat(0).take(n))),
            Body::Reader(n, r) => (n, Box::new(r.take(n))),
        };
        if h.entry_type() != tar::EntryType::Directory {
            h.set_entry_type(tar::EntryType::Regular);
            h.set_mode(0o644);
        }
        h.set_size(size);
        h.set_cksum();
        b.append(&h, data).map_err(write_error)?;
    }
    let mut t = b.into_inner().map_err(write_error)?;
    let pad = t.n.div_ceil(TAR_RECORD) * TAR_RECORD - t.n;
    io::copy(&mut io::repeat(0).take(pad), &mut t).map_err(write_error)?;
    Ok(t.inner)
}

/// Writes a NEFF to `out`: a placeholder header, the tar of `members` (for pkg 2 through one
/// gzip member: zlib's own header, no name, mtime 0, OS Unix) hashed as it is written, then the
/// header with `data_size` and the digest (pkg 2: `hash_tail` in bytes 16..31). Nothing is held
/// but what the members lend; returns the bytes written. Names are written as given — also ones
/// the reader refuses, which the tests need.
pub fn write_neff<'a, W: Write + Seek>(
    header: &Header,
    hash_tail: [u8; 16],
    members: impl IntoIterator<Item = (String, Body<'a>)>,
    mut out: W,
) -> Result<u64> {
    let start = out.stream_position().map_err(write_error)?;
    out.write_all(&[0u8; HEADER_LEN]).map_err(write_error)?;
    let payload = Tally {
        inner: &mut out,
        n: 0,
        digest: Some(PayloadDigest::new(header.pkg_version)),
    };
    let payload = if header.pkg_version == 1 {
        write_tar(payload, members)?
    } else {
        let gz = flate2::GzBuilder::new()
            .operating_system(3)
            .write(payload, flate2::Compression::default());
        write_tar(gz, members)?.finish().map_err(write_error)?
    };
    let mut h = header.clone();
    h.data_size = payload.n;
    h.hash = payload
        .digest
        .map(PayloadDigest::finish)
        .unwrap_or_default();
    if h.pkg_version != 1 {
        h.hash[16..].copy_from_slice(&hash_tail);
    }
    out.seek(SeekFrom::Start(start)).map_err(write_error)?;
    out.write_all(&h.to_bytes()).map_err(write_error)?;
    out.seek(SeekFrom::Start(start + HEADER_LEN as u64 + h.data_size))
        .map_err(write_error)?;
    out.flush().map_err(write_error)?;
    Ok(HEADER_LEN as u64 + h.data_size)
}

fn bodies(members: &[Member]) -> impl Iterator<Item = (String, Body<'_>)> {
    members.iter().map(|(n, b)| {
        (
            n.clone(),
            match b {
                Some(b) => Body::Bytes(b),
                None => Body::Dir,
            },
        )
    })
}

/// A NEFF of members held in memory (tests, the §12 fixture); [`write_neff`] is the writer.
#[derive(Clone, Debug)]
pub struct NeffWriter {
    /// The header (`data_size` and `hash` are computed).
    pub header: Header,
    /// Members, in order.
    pub members: Vec<Member>,
    /// Bytes 16..31 of the hash for pkg 2 (the fixture has ASCII `'0'`s there, §2).
    pub hash_tail: [u8; 16],
}

impl NeffWriter {
    /// A writer for `header` with no members.
    pub fn new(header: Header) -> Self {
        NeffWriter {
            header,
            members: Vec::new(),
            hash_tail: [0; 16],
        }
    }

    /// The tar bytes of the members.
    pub fn tar(&self) -> Result<Vec<u8>> {
        write_tar(Vec::new(), bodies(&self.members))
    }

    /// The NEFF file's bytes.
    pub fn finish(&self) -> Result<Vec<u8>> {
        let mut out = Cursor::new(Vec::new());
        write_neff(
            &self.header,
            self.hash_tail,
            bodies(&self.members),
            &mut out,
        )?;
        Ok(out.into_inner())
    }
}

/// One allocation to describe (a manifest's `allocations[]` entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackAlloc {
    /// Usage type.
    pub usage: U,
    /// On the host rather than the device.
    pub host: bool,
    /// Bytes.
    pub size: u64,
    /// Alignment (0 = natural).
    pub align: u64,
    /// Hint: for weights and private scratch, the var's name.
    pub hint: String,
}

/// An IO tensor to describe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackTensor {
    /// Name.
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions.
    pub shape: Vec<u32>,
}

/// What to pack: the model manifest's content (docs/MANIFEST.md), with dtype and shape per IO
/// tensor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackModel {
    /// Model name (the header's `name`).
    pub name: String,
    /// Subgraphs (1..=8), each with the same allocations.
    pub subgraphs: u32,
    /// Allocations per subgraph.
    pub allocations: Vec<PackAlloc>,
    /// GPSIMD libraries: `(count, bytes each)`; the runtime's default ext-ISA library is one
    /// of them, so `count − 1` libraries are written into the NEFF.
    pub gpsimd_libs: Option<(u32, u64)>,
    /// Scratchpad bytes (one `virtual` var).
    pub scratchpad_bytes: u64,
    /// SBUF carveout.
    pub sbuf_carveout: Option<Reservation>,
    /// Inputs.
    pub inputs: Vec<PackTensor>,
    /// Outputs (at least one: a subgraph without outputs is refused, §8.1).
    pub outputs: Vec<PackTensor>,
}

fn json_bytes(v: &Value) -> Vec<u8> {
    // Serialising a Value cannot fail (no non-string keys, no custom serializers).
    serde_json::to_vec_pretty(v).unwrap_or_default()
}

/// A file-name-safe form of a var name.
fn file_stem(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A member of [`pack_plan`]: its body, weights as runs of zeros.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PackBody {
    /// A directory entry.
    Dir,
    /// These bytes.
    Bytes(Vec<u8>),
    /// This many zero bytes.
    Zeros(u64),
}

/// The members of a NEFF describing `m` (what [`pack`] writes), for tests that alter some;
/// weights are written out as zeros.
pub fn pack_members(m: &PackModel) -> Result<Vec<Member>> {
    pack_plan(m)?
        .into_iter()
        .map(|(n, b)| {
            Ok((
                n,
                match b {
                    PackBody::Dir => None,
                    PackBody::Bytes(b) => Some(b),
                    PackBody::Zeros(z) => Some(vec![
                        0u8;
                        usize::try_from(z).map_err(|_| {
                            NeffError::invalid(format!("weight of {z} bytes too large"))
                        })?
                    ]),
                },
            ))
        })
        .collect()
}

/// The members [`pack`] writes for `m`, in order: `kelf-a.json`, `neff.json`, each subgraph's
/// directory, `def.json`, engine JSONs and ucode manifest; then the engine programs and GPSIMD
/// libraries; then the weights, whose file vars declare their sizes — so a reader has the whole
/// footprint before the first weight arrives and streams them in one pass (docs/NEFF.md).
pub fn pack_plan(m: &PackModel) -> Result<Vec<(String, PackBody)>> {
    if m.subgraphs == 0 || m.subgraphs as usize > crate::MAX_SUBGRAPHS {
        return Err(NeffError::invalid(format!(
            "subgraphs must be 1..={}, is {}",
            crate::MAX_SUBGRAPHS,
            m.subgraphs
        )));
    }
    if m.outputs.is_empty() {
        return Err(NeffError::invalid(
            "a NEFF needs at least one output (libnrt refuses a subgraph with no Outputs)",
        ));
    }
    let mut members: Vec<(String, PackBody)> = Vec::new();
    let tensors: Vec<&PackTensor> = m.inputs.iter().chain(&m.outputs).collect();
    let mut names = BTreeSet::new();
    let mut taken = |n: &str| -> Result<()> {
        if names.insert(n.to_string()) {
            Ok(())
        } else {
            Err(NeffError::invalid(format!(
                "two vars named {n:?}: names of IO tensors, weights and private scratch must \
                 be unique"
            )))
        }
    };
    // The per-subgraph def.json (shared by every subgraph but for the ucode libraries).
    let mut vars = Map::new();
    let mut var_id = 0u64;
    let mut next_id = || {
        var_id += 1;
        var_id - 1
    };
    for (i, t) in tensors.iter().enumerate() {
        check_tensor_name(&t.name)?;
        taken(&t.name)?;
        let ty = if i < m.inputs.len() {
            "input"
        } else {
            "output"
        };
        let size = tensor_size(&t.name, t.dtype, &t.shape)?;
        vars.insert(
            t.name.clone(),
            json!({ "type": ty, "var_id": next_id(), "size": size, "dtype": t.dtype.name(),
                    "shape": t.shape }),
        );
    }
    let mut weights: Vec<(String, u64)> = Vec::new();
    let mut declared = Vec::new();
    for a in &m.allocations {
        if a.size == 0 {
            return Err(NeffError::invalid(format!(
                "allocation {} has size 0",
                a.hint
            )));
        }
        let mut entry = match (a.host, a.usage) {
            (false, U::DMA_MEM_USAGE_TYPE_WEIGHT) => {
                let file = format!("{}.bin", file_stem(&a.hint));
                weights.push((file.clone(), a.size));
                json!({ "type": "file", "var_id": 0, "file_name": file, "size": a.size })
            }
            (false, U::DMA_MEM_USAGE_TYPE_SCRATCHPAD_NOT_SHARED) => {
                json!({ "type": "tmp-buf", "var_id": 0, "size": a.size })
            }
            _ => {
                declared.push(json!({
                    "usage": a.usage as u32,
                    "location": if a.host { "host" } else { "device" },
                    "size": a.size, "align": a.align, "hint": a.hint,
                }));
                continue;
            }
        };
        taken(&a.hint)?;
        entry["var_id"] = json!(next_id());
        if a.align != 0 {
            entry["alignment"] = json!(a.align);
        }
        vars.insert(a.hint.clone(), entry);
    }
    if m.scratchpad_bytes > 0 {
        taken("nrt_dmem_scratchpad")?;
        vars.insert(
            "nrt_dmem_scratchpad".into(),
            json!({ "type": "virtual", "var_id": next_id(), "size": m.scratchpad_bytes,
                    "backing_variable_off": 0, "backing_buf": "scratchpad" }),
        );
    }
    let (libs, default_ulib) = match m.gpsimd_libs {
        Some((c, b)) if c > 0 => (c - 1, Some(b)),
        _ => (0, None),
    };
    let reservation: Vec<Value> = m
        .sbuf_carveout
        .iter()
        .map(|r| {
            json!({ "type": "evtaccel", "offset": r.offset, "size": r.size,
                    "base_partition": r.start_partition, "partitions": r.num_partitions })
        })
        .collect();
    let graphs: Vec<Value> = (0..m.subgraphs)
        .map(|s| json!({ "name": format!("sg{s:02}"), "definition": format!("sg{s:02}/def.json") }))
        .collect();
    let json = |v: &Value| PackBody::Bytes(json_bytes(v));
    members.push((
        "kelf-a.json".into(),
        json(&json!({ "version": "1.0", "target": "*", "graphs": graphs })),
    ));
    members.push((
        "neff.json".into(),
        PackBody::Bytes(neff_json(&m.inputs, &m.outputs)),
    ));
    let mut programs = Vec::new();
    let mut payloads = Vec::new();
    for s in 0..m.subgraphs {
        let dir = format!("sg{s:02}");
        members.push((format!("{dir}/"), PackBody::Dir));
        let mut def = Map::new();
        def.insert("name".into(), json!(dir));
        def.insert("version".into(), json!("0.6-"));
        def.insert("var".into(), Value::Object(vars.clone()));
        def.insert("dma_queue".into(), json!({}));
        def.insert("runtime_statebuffer_reservation".into(), json!(reservation));
        for e in ENGINES {
            def.insert(e.into(), json!(format!("{e}.json")));
        }
        def.insert(
            "nrt_dmem".into(),
            json!({ "allocations": declared, "default_ulib_bytes": default_ulib }),
        );
        let ucode = s == 0 && libs > 0;
        if ucode {
            def.insert("ucode_lib".into(), json!("ucode_lib.json"));
        }
        members.push((format!("{dir}/def.json"), json(&Value::Object(def))));
        for e in ENGINES {
            members.push((
                format!("{dir}/{e}.json"),
                json(&json!({ "name": e, "instr": format!("{e}.bin") })),
            ));
            programs.push((format!("{dir}/{e}.bin"), PackBody::Bytes(Vec::new())));
        }
        if ucode {
            let list: Vec<Value> = (0..libs)
                .map(|i| {
                    json!({ "library": format!("ulib{i}.so"),
                            "ulib_to_ucode_version": NRT_UCODE_VERSION,
                            "opcode": 100 + i, "cpu_id": 0, "total_cpus": 8,
                            "functions": [ { "name": format!("op{i}"), "opcode": 100 + i,
                                             "sub_opcode": 0 } ] })
                })
                .collect();
            members.push((format!("{dir}/ucode_lib.json"), json(&json!(list))));
            for i in 0..libs {
                let bytes = default_ulib.unwrap_or(0);
                let mut lib = vec![0u8; usize::try_from(bytes).unwrap_or(0)];
                // A 32-bit ELF's magic, as the Xtensa libraries start (§8.5).
                let magic = [0x7f, b'E', b'L', b'F', 1, 1, 1];
                let n = magic.len().min(lib.len());
                lib[..n].copy_from_slice(&magic[..n]);
                programs.push((format!("{dir}/ulib{i}.so"), PackBody::Bytes(lib)));
            }
        }
        for (file, size) in &weights {
            payloads.push((format!("{dir}/{file}"), PackBody::Zeros(*size)));
        }
    }
    members.extend(programs);
    members.extend(payloads);
    Ok(members)
}

/// `neff.json` for the tensors (§6): one `null` node per input, then the `__kelf` node whose
/// outputs are the model's, with `output_names`.
fn neff_json(inputs: &[PackTensor], outputs: &[PackTensor]) -> Vec<u8> {
    let ni = inputs.len();
    let mut nodes: Vec<Value> = inputs
        .iter()
        .map(|t| json!({ "op": "null", "name": t.name, "inputs": [] }))
        .collect();
    let names: Vec<&str> = outputs.iter().map(|t| t.name.as_str()).collect();
    nodes.push(json!({
        "op": "tvm_op", "name": "kelf",
        "attrs": { "func_name": "__kelf", "kelf": "kelf-a.json", "output_names": names,
                   "num_inputs": ni.to_string(), "num_outputs": outputs.len().to_string() },
        "inputs": (0..ni).map(|i| json!([i, 0, 0])).collect::<Vec<_>>(),
    }));
    let all: Vec<&PackTensor> = inputs.iter().chain(outputs).collect();
    json_bytes(&json!({
        "nodes": nodes,
        "arg_nodes": (0..ni).collect::<Vec<_>>(),
        "heads": (0..outputs.len()).map(|j| json!([ni, j, 0])).collect::<Vec<_>>(),
        "node_row_ptr": (0..=ni).chain([ni + outputs.len()]).collect::<Vec<_>>(),
        "attrs": {
            "dltype": ["list_str", all.iter().map(|t| t.dtype.name()).collect::<Vec<_>>()],
            "shape": ["list_shape", all.iter().map(|t| t.shape.clone()).collect::<Vec<_>>()],
        },
    }))
}

/// The header [`pack`] writes for a model named `name`: pkg 2, version 2.0, a uuid derived
/// from the name (MD5 of `"nrt-dmem:" + name`), one core.
pub fn header_for(name: &str) -> Header {
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&Md5::digest(format!("nrt-dmem:{name}").as_bytes()));
    Header {
        build_version: format!("nrt-dmem {}%nrt-dmem/pack@0", env!("CARGO_PKG_VERSION")),
        uuid,
        name: name.to_string(),
        ..Header::default()
    }
}

/// Writes a NEFF (pkg 2, MD5) describing `m`; [`crate::read`] reads back the same spec.
pub fn pack(m: &PackModel) -> Result<Vec<u8>> {
    let mut out = Cursor::new(Vec::new());
    pack_to(m, &mut out)?;
    Ok(out.into_inner())
}

/// [`pack`] into `out` (a file): the weights' zeros are generated as they are written, never
/// held. Returns the bytes written.
pub fn pack_to<W: Write + Seek>(m: &PackModel, out: W) -> Result<u64> {
    let plan = pack_plan(m)?;
    let members = plan.iter().map(|(n, b)| {
        (
            n.clone(),
            match b {
                PackBody::Dir => Body::Dir,
                PackBody::Bytes(b) => Body::Bytes(b),
                PackBody::Zeros(z) => Body::Zeros(*z),
            },
        )
    });
    write_neff(&header_for(&m.name), [0; 16], members, out)
}

/// `s` padded with spaces to exactly `size` bytes (the fixture's published member sizes, §12).
fn padded(s: &str, size: usize) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.resize(size.max(v.len()), b' ');
    v
}

/// A 64-byte sequencer slot: opcode `base | engine << 5`, then 0x10 (16 words), then `words`
/// (§9).
fn slot(engine: u8, base: u8, words: &[u32]) -> Vec<u8> {
    let mut s = vec![0u8; 64];
    s[0] = base | (engine << 5);
    s[1] = 0x10;
    for (i, w) in words.iter().take(15).enumerate() {
        s[4 + 4 * i..8 + 4 * i].copy_from_slice(&w.to_le_bytes());
    }
    s
}

/// The members of the NEFF embedded in libnrt (§12), in the published order and at the
/// published sizes. The JSON members carry the keys the page prints, padded with spaces to
/// their sizes; the `.bin`/`.asm` payloads are stand-ins of the published sizes (the page's
/// bytes are not in the reference), so the gzip and its MD5 differ from the original.
pub fn fixture_members() -> Vec<Member> {
    let kelf =
        r#"{"version":"1.0","target":"*","graphs":[{"name":"sg00","definition":"sg00/def.json"}]}"#;
    let neff = r#"{"nodes":[{"op":"null","name":"input","inputs":[]},{"op":"tvm_op","name":"kelf","attrs":{"func_name":"__kelf","kelf":"kelf-a.json","num_inputs":"1","num_outputs":"1","flatten_data":"0"},"output":"output","inputs":[[0,0,0]]}],"arg_nodes":[0],"heads":[[1,0,0]],"node_row_ptr":[0,1,2],"attrs":{"dltype":["list_str",["float32","float32"]],"shape":["list_shape",[[32],[32]]],"storage_id":["list_int",[0,1]]}}"#;
    let def = r##"{"name":"sg00","version":"0.6-","var":{"input":{"type":"input","var_id":0,"size":128,"dtype":"float32","shape":[32],"#transfer-type":"in"},"SB":{"type":"state-buffer","var_id":1},"output":{"type":"output","var_id":2,"size":128,"dtype":"float32","shape":[32],"#transfer-type":"out"},"gradient_in":{"type":"tmp-buf","var_id":3,"size":128,"dtype":"float32","shape":[32]},"gradient_out":{"type":"tmp-buf","var_id":4,"size":128,"dtype":"float32","shape":[32]}},"dma_queue":{"q_gradient_in":{"owner":"pool","type":"in","semaphore":10},"q_gradient_out":{"owner":"pool","type":"out","semaphore":11}},"replica_groups":[[]],"runtime_statebuffer_reservation":[],"pe":"pe.json","act":"act.json","pool":"pool.json","dve":"dve.json"}"##;
    let act = r#"{"name":"act","instr":"act.bin","act_semaphore":0,"profile_meta_data":{}}"#;
    let pool = r#"{"name":"pool","instr":"pool.bin","dma":[{"queue":"q_gradient_in","id":0,"desc":[{"from":"input","to":"gradient_in","sizes":[128,1],"steps":[1,128]}]},{"queue":"q_gradient_out","id":1,"desc":[{"from":"gradient_out","to":"output","sizes":[128,1],"steps":[1,128]}]}]}"#;
    let pe_asm = "; pe: one placeholder instruction\n";
    let pool_asm = "; pool: dma trigger, all-reduce, dma trigger\n";
    let mut pool_bin = slot(2, 0x01, &[0]); // RT-class DMA trigger placeholders and one op
    pool_bin.extend(slot(2, 0x08, &[32]));
    pool_bin.extend(slot(2, 0x01, &[1]));
    let file = |name: &str, body: Vec<u8>| (name.to_string(), Some(body));
    vec![
        file("kelf-a.json", padded(kelf, 129)),
        file("neff.json", padded(neff, 980)),
        ("sg00/".to_string(), None),
        file(
            "sg00/pe.json",
            padded(r#"{"name":"pe","instr":"pe.bin"}"#, 63),
        ),
        file("sg00/def.json", padded(def, 1421)),
        file("sg00/pool.bin", pool_bin),
        file("sg00/sp.asm", Vec::new()),
        file("sg00/pe.bin", slot(0, 0x00, &[])),
        file(
            "sg00/dve.json",
            padded(r#"{"name":"dve","instr":"dve.bin"}"#, 65),
        ),
        file("sg00/act.json", padded(act, 182)),
        file("sg00/dve.bin", Vec::new()),
        file("sg00/dve.asm", Vec::new()),
        file("sg00/act.bin", Vec::new()),
        file("sg00/sp.bin", Vec::new()),
        file(
            "sg00/sp.json",
            padded(r#"{"name":"sp","instr":"sp.bin"}"#, 63),
        ),
        file("sg00/pool.asm", padded(pool_asm, 126)),
        file("sg00/pe.asm", padded(pe_asm, 153)),
        file("sg00/pool.json", padded(pool, 1042)),
        file("sg00/act.asm", Vec::new()),
    ]
}

/// The header of the §12 fixture (`data_size`/`hash` are recomputed over its own gzip).
pub fn fixture_header() -> Header {
    Header {
        build_version: "2.0.21884.0%kaena-tools/develop@6c66f4b".into(),
        uuid: [
            0x56, 0x18, 0x26, 0xfb, 0x12, 0x5f, 0x4b, 0xb8, 0x99, 0x1c, 0x29, 0xe0, 0x85, 0xc8,
            0x94, 0x9a,
        ],
        name: "x".into(),
        ..Header::default()
    }
}

/// A NEFF matching the one embedded in libnrt (§12): header, member order and sizes, var
/// table, queues and tensor table of the carved fixture; its pkg 2 hash tail is ASCII `'0'`s.
pub fn fixture() -> Result<Vec<u8>> {
    let mut w = NeffWriter::new(fixture_header());
    w.members = fixture_members();
    w.hash_tail = [b'0'; 16];
    w.finish()
}
