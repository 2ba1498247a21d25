//! Tier 3: a subgraph's `def.json` (neff-format §8–§9): vars and their weights, DMA queues,
//! engine programs, GPSIMD libraries, the SBUF reservation and extensions.

use super::*;
use crate::index::{collect_all, NPY_HEAD};

/// A `var` entry's `type` (§8.2, `kbin_mr_type_t`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VarKind {
    /// `input` (5): the caller's tensor, nothing at load.
    Input,
    /// `output` (6).
    Output,
    /// `file` (3): weight/constant, HBM alloc + copy-in.
    File,
    /// `state-buffer` (1): SBUF, no alloc.
    StateBuffer,
    /// `tmp-buf` (4): private scratch.
    TmpBuf,
    /// `virtual` (8): scratchpad arena page + offset.
    Virtual,
    /// `pointer` (7).
    Pointer,
    /// `list` (9).
    List,
    /// `remote` (11).
    Remote,
    /// `shared`/`sharded`/`main`/`dge-table`: named by the sources, not decoded (SILENT).
    Undecoded(String),
}

impl VarKind {
    fn parse(s: &str) -> Option<VarKind> {
        Some(match s {
            "input" => VarKind::Input,
            "output" => VarKind::Output,
            "file" => VarKind::File,
            "state-buffer" => VarKind::StateBuffer,
            "tmp-buf" => VarKind::TmpBuf,
            "virtual" => VarKind::Virtual,
            "pointer" => VarKind::Pointer,
            "list" => VarKind::List,
            "remote" => VarKind::Remote,
            "shared" | "sharded" | "main" | "dge-table" => VarKind::Undecoded(s.to_string()),
            _ => return None,
        })
    }
    /// Whether `size` is required (§8.2).
    fn needs_size(&self) -> bool {
        matches!(
            self,
            VarKind::Input
                | VarKind::Output
                | VarKind::TmpBuf
                | VarKind::Virtual
                | VarKind::Pointer
        )
    }
}

/// One `var` entry (§8.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Var {
    /// Name (the object key, or the entry's `name`).
    pub name: String,
    /// `type`.
    pub kind: VarKind,
    /// `var_id` (dense 0..N-1).
    pub var_id: u32,
    /// `size`.
    pub size: Option<u64>,
    /// `alignment` (0 = none; otherwise a power of two).
    pub alignment: u64,
    /// `file_name` (file vars).
    pub file_name: Option<String>,
    /// `backing_variable_off` (virtual vars).
    pub backing_off: Option<u64>,
}

/// A weight's payload: a range of an archive member (§8.2: `.npy` data after its header, or
/// the whole member).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Weight {
    /// The var.
    pub var: String,
    /// Its `file_name`.
    pub file: String,
    /// The member holding it.
    pub member: String,
    /// Payload start within the member.
    pub offset: u64,
    /// Payload bytes.
    pub len: u64,
    /// `alignment` of the var.
    pub alignment: u64,
    /// Before the member arrived (an early parse): the root-level name that holds the payload
    /// when `member` (`<dir>/<file_name>`) turns out absent.
    pub(crate) fallback: Option<String>,
}

/// The five engines, in the order libnrt fills their slots (§8.4; SP last).
pub const ENGINES: [&str; 5] = ["pe", "act", "pool", "dve", "sp"];

/// One engine's program (§8.4, §9).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineProg {
    /// `pe`, `act`, `pool`, `dve`, `sp`.
    pub engine: &'static str,
    /// The engine JSON member, `None` = the empty placeholder (no key in def.json).
    pub json: Option<String>,
    /// The `.bin` member.
    pub bin: Option<String>,
    /// Its bytes (0 for none).
    pub bin_bytes: u64,
    /// Table members the engine JSON names (ACT `activation_function_sets`, DVE
    /// `dve_tables`) that are present, with their bytes.
    pub tables: Vec<(String, u64)>,
}

/// A `dma_queue` entry (§8.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DmaQueue {
    /// Name.
    pub name: String,
    /// `owner` engine.
    pub owner: String,
    /// `type` (`in`, `out`, `data`, `act_load`, `embedding_update`).
    pub ty: String,
    /// `kbin_dma_ring_type` of the type (7, 8, 6/9, 11, 15).
    pub ring_type: u32,
    /// Queue instances (`num_queues` or `queue_instances`, default 1).
    pub instances: u64,
}

/// A NEFF-supplied GPSIMD library (`ucode_lib` element, §8.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UcodeLib {
    /// `library` member.
    pub member: String,
    /// Its bytes.
    pub bytes: u64,
    /// `ulib_to_ucode_version`.
    pub version: String,
    /// `opcode` (−123 marks a built-in op).
    pub opcode: i64,
    /// `functions[]` count.
    pub functions: usize,
}

/// A `runtime_statebuffer_reservation` element (§8.6).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// `kbin_sb_carveout_type_t` (only EVTACCEL = 1 is accepted).
    pub ty: u32,
    /// `offset`.
    pub offset: u64,
    /// `size`.
    pub size: u64,
    /// `base_partition` / `start_partition`.
    pub start_partition: u64,
    /// `partitions` / `num_partitions`.
    pub num_partitions: u64,
}

/// An allocation a NEFF declares in the `nrt_dmem` extension key of `def.json` (docs/NEFF.md):
/// what `neff pack` records for allocations the NEFF format does not size. libnrt ignores the
/// key (unknown keys are ignored, §5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declared {
    /// Raw `dma_mem_usage_type_t`.
    pub usage: u32,
    /// Host (`HOST_DRAM`) instead of device.
    pub host: bool,
    /// Bytes.
    pub size: u64,
    /// Alignment.
    pub align: u64,
    /// Hint.
    pub hint: String,
}

/// The `nrt_dmem` extension of a `def.json` (docs/NEFF.md "The nrt_dmem extension").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extension {
    /// Allocations booked as declared, in place of the conventions' estimates.
    pub allocations: Vec<Declared>,
    /// Bytes of the runtime's default ext-ISA library; `None` = no default library.
    pub default_ulib_bytes: Option<u64>,
}

/// Tier 3: one subgraph's `def.json`, validated (§8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubgraphDef {
    /// `graphs[].name`.
    pub name: String,
    /// The `def.json` member.
    pub def_member: String,
    /// `var` entries, by var_id.
    pub vars: Vec<Var>,
    /// Weight payloads (file vars), by var_id.
    pub weights: Vec<Weight>,
    /// `dma_queue` entries.
    pub queues: Vec<DmaQueue>,
    /// The five engines.
    pub engines: Vec<EngineProg>,
    /// NEFF-supplied GPSIMD libraries.
    pub ucode_libs: Vec<UcodeLib>,
    /// Whether `runtime_statebuffer_reservation` is present (required on CAYMAN, §8.6).
    pub has_reservation_key: bool,
    /// Its entries.
    pub reservations: Vec<Reservation>,
    /// The `nrt_dmem` extension, when present.
    pub extension: Option<Extension>,
}

/// Entries of a key that is an object name → entry (fixture) or an array (MS), §8.1 (a).
fn named_entries<'a>(v: &'a Value, what: &str) -> Result<Vec<(String, &'a Value)>> {
    match v {
        Value::Object(m) => Ok(m.iter().map(|(k, v)| (k.clone(), v)).collect()),
        Value::Array(a) => Ok(a
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let name = e
                    .get("name")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("{what}[{i}]"), str::to_string);
                (name, e)
            })
            .collect()),
        _ => Err(NeffError::invalid(format!(
            "{what} must be an object or an array"
        ))),
    }
}

fn opt_u64(e: &Value, key: &str, owner: &str) -> Result<Option<u64>> {
    e.get(key)
        .map(|v| as_u64(v, &format!("{key} of {owner}")))
        .transpose()
}

/// `<dir>/<name>` (`load_bin_file`, §5).
fn in_dir(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// `<dir>/<name>` (`load_bin_file`, §5), falling back to `name` from the archive root.
fn resolve(ar: &View<'_>, dir: &str, name: &str) -> Result<Option<String>> {
    let rel = in_dir(dir, name);
    if ar.has(&rel)? {
        return Ok(Some(rel));
    }
    if rel != name && ar.has(name)? {
        return Ok(Some(name.to_string()));
    }
    Ok(None)
}

fn parse_var(name: String, e: &Value) -> Result<Var> {
    let ty = e
        .get("type")
        .ok_or_else(|| NeffError::invalid(format!("missing <type> in var {name}")))
        .and_then(|t| as_str(t, &format!("type of var {name}")))?;
    let kind = VarKind::parse(ty)
        .ok_or_else(|| NeffError::invalid(format!("Unknown var type '{ty}' for var {name}")))?;
    let var_id = e
        .get("var_id")
        .ok_or_else(|| NeffError::invalid(format!("missing <var_id> in var {name}")))
        .and_then(|v| as_u64(v, &format!("var_id of var {name}")))?;
    let var_id = u32::try_from(var_id)
        .map_err(|_| NeffError::invalid(format!("var_id {var_id} of var {name} too large")))?;
    let size = opt_u64(e, "size", &name)?;
    if size.is_none() && kind.needs_size() {
        return Err(NeffError::invalid(format!("missing <size> in var {name}")));
    }
    if kind == VarKind::Pointer && size != Some(8) {
        return Err(NeffError::invalid(format!(
            "pointer var {name} must have size 8, has {size:?}"
        )));
    }
    let alignment = opt_u64(e, "alignment", &name)?.unwrap_or(0);
    if alignment != 0 && !alignment.is_power_of_two() {
        return Err(NeffError::invalid(format!(
            "alignment provided not power of 2. alignment={alignment} (var {name})"
        )));
    }
    let file_name = match e.get("file_name") {
        Some(f) => Some(as_str(f, &format!("file_name of var {name}"))?.to_string()),
        None => None,
    };
    if kind == VarKind::File && file_name.is_none() {
        return Err(NeffError::invalid(format!(
            "missing <file_name> in file var {name}"
        )));
    }
    Ok(Var {
        name,
        kind,
        var_id,
        size,
        alignment,
        file_name,
        backing_off: opt_u64(e, "backing_variable_off", "virtual var")?,
    })
}

/// Where a `.npy` member's payload lies (§8.2: NumPy v1, data after its header), from its first
/// [`NPY_HEAD`] bytes and its size: `(offset, len)`.
pub(crate) fn npy_payload(file: &str, head: &[u8], size: u64) -> Result<(u64, u64)> {
    let magic = head
        .get(..2)
        .map_or(0, |m| u16::from_le_bytes([m[0], m[1]]));
    if magic != 0x4E93 {
        return Err(NeffError::invalid(format!(
            "NUMPY {file} bad header {magic:x} != 0x4e93"
        )));
    }
    let major = head.get(6).copied().unwrap_or(0);
    if major != 1 {
        return Err(NeffError::invalid(format!(
            "NUMPY {file}: format version {major} unsupported (only v1 headers)"
        )));
    }
    let hlen = head
        .get(8..10)
        .map(|h| u64::from(u16::from_le_bytes([h[0], h[1]])))
        .ok_or_else(|| NeffError::invalid(format!("NUMPY {file}: truncated header")))?;
    let start = NPY_HEAD as u64 + hlen;
    if start > size {
        return Err(NeffError::invalid(format!(
            "NUMPY {file}: header length {hlen} past the file ({size} bytes)"
        )));
    }
    Ok((start, size - start))
}

/// Where member `member` (of `size` bytes, `head` its first bytes) holds file var `var`'s
/// payload, checked against the var's declared `size` when it has one (§8.2: the allocation is
/// the payload's size, so the two must agree).
pub(crate) fn payload_in(
    var: &str,
    file: &str,
    declared: Option<u64>,
    member: &str,
    head: &[u8],
    size: u64,
) -> Result<(u64, u64)> {
    let (offset, len) = if member.ends_with(".npy") {
        npy_payload(file, head, size)?
    } else {
        (0, size)
    };
    match declared {
        Some(d) if d != len => Err(NeffError::invalid(format!(
            "weight {var}: member {member} holds {len} payload bytes but the var declares \
             size {d}"
        ))),
        _ => Ok((offset, len)),
    }
}

/// The weight payload of a file var (§8.2): `.npy` v1 data after its header, else the member.
/// Early, a weight whose member has not arrived stands for its declared size (the var's
/// `size`); one whose member has gone by cannot be copied in this pass.
fn weight_of(ar: &View<'_>, dir: &str, v: &Var) -> Result<Weight> {
    let file = v.file_name.as_deref().unwrap_or_default();
    let primary = in_dir(dir, file);
    let weight = |member: String, offset, len, fallback| Weight {
        var: v.name.clone(),
        file: file.to_string(),
        member,
        offset,
        len,
        alignment: v.alignment,
        fallback,
    };
    let member = if ar.seen(&primary) {
        primary
    } else if ar.early() {
        // The primary may still come and would win over a root-level copy (§5).
        if primary != file && ar.passed(file) {
            return Err(ar.block());
        }
        return match v.size {
            Some(len) => Ok(weight(
                primary.clone(),
                0,
                len,
                (primary != file).then(|| file.to_string()),
            )),
            None => Err(ar.unseen(&primary)),
        };
    } else if ar.seen(file) {
        file.to_string()
    } else {
        return Err(NeffError::invalid(format!(
            "Failed to get neff weight content for {file}"
        )));
    };
    if ar.early() && ar.passed(&member) {
        return Err(ar.block());
    }
    let (offset, len) = payload_in(
        &v.name,
        file,
        v.size,
        &member,
        ar.npy_head(&member),
        ar.size(&member),
    )?;
    Ok(weight(member, offset, len, None))
}

fn parse_queue(name: String, e: &Value) -> Result<DmaQueue> {
    let owner = e
        .get("owner")
        .ok_or_else(|| NeffError::invalid(format!("missing <owner> in {name}")))
        .and_then(|o| as_str(o, &format!("owner of {name}")))?;
    if !ENGINES.contains(&owner) {
        return Err(NeffError::invalid(format!(
            "Invalid owner '{owner}' for DMA queue {name}"
        )));
    }
    let ty = e
        .get("type")
        .ok_or_else(|| NeffError::invalid(format!("missing <type> in {name}")))
        .and_then(|t| as_str(t, &format!("type of {name}")))?;
    let indirect = e.get("indirect_memcpy").and_then(Value::as_bool) == Some(true);
    let ring_type = match ty {
        "in" => 7,
        "out" => 8,
        "data" if indirect => 9,
        "data" => 6,
        "act_load" => 11,
        "embedding_update" => 15,
        t => {
            return Err(NeffError::invalid(format!(
                "Invalid DMA queue type '{t}' for {name}"
            )))
        }
    };
    let instances = match (e.get("queue_instances"), e.get("num_queues")) {
        (Some(q), _) => as_array(q, &format!("queue_instances of {name}"))?.len() as u64,
        (None, Some(n)) => as_u64(n, &format!("num_queues of {name}"))?,
        (None, None) => 1,
    };
    if ty == "act_load" && instances != 1 {
        return Err(NeffError::invalid(format!(
            "act_load DMA queue {name} needs num_queues == 1"
        )));
    }
    Ok(DmaQueue {
        name,
        owner: owner.to_string(),
        ty: ty.to_string(),
        ring_type,
        instances: instances.max(1),
    })
}

/// Every string inside `v` (table names of an engine JSON's table keys).
fn strings_in<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| strings_in(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings_in(x, out)),
        _ => {}
    }
}

fn parse_engine(
    ar: &View<'_>,
    dir: &str,
    def: &Map<String, Value>,
    eng: &'static str,
) -> Result<EngineProg> {
    let mut p = EngineProg {
        engine: eng,
        ..EngineProg::default()
    };
    let Some(j) = def.get(eng) else {
        // "Engine %s not found in NEFF %s, using empty placeholder" (§8.1).
        return Ok(p);
    };
    let jname = as_str(j, eng)?;
    let jmember = resolve(ar, dir, jname)?
        .ok_or_else(|| NeffError::invalid(format!("Failed to get NEFF member {jname} ({eng})")))?;
    let v: Value = serde_json::from_slice(ar.body(&jmember)?)
        .map_err(|e| NeffError::invalid(format!("{jmember}: invalid JSON: {e}")))?;
    if let Some(instr) = v.get("instr") {
        let bname = as_str(instr, &format!("{jmember} instr"))?;
        let bmember = resolve(ar, dir, bname)?.ok_or_else(|| {
            NeffError::invalid(format!("Failed to get NEFF member {bname} ({eng})"))
        })?;
        let n = ar.size(&bmember);
        if n > MAX_INSTR_BYTES {
            return Err(NeffError::invalid(format!(
                "Instruction size {n} for {eng} exceeds maximum supported size {MAX_INSTR_BYTES}"
            )));
        }
        p.bin = Some(bmember);
        p.bin_bytes = n;
    }
    for key in ["activation_function_sets", "dve_tables"] {
        if let Some(t) = v.get(key) {
            let mut names = Vec::new();
            strings_in(t, &mut names);
            for n in names {
                if let Some(m) = resolve(ar, dir, n)? {
                    if !p.tables.iter().any(|(x, _)| *x == m) {
                        let size = ar.size(&m);
                        p.tables.push((m, size));
                    }
                }
            }
        }
    }
    p.json = Some(jmember);
    Ok(p)
}

fn parse_ucode(ar: &View<'_>, dir: &str, v: &Value) -> Result<Vec<UcodeLib>> {
    // CB: a string naming a JSON array member; MS/CAP: the array itself (§8.1 (c)).
    let owned;
    let list = match v {
        Value::String(name) => {
            let m = resolve(ar, dir, name)?.ok_or_else(|| {
                NeffError::invalid(format!("Failed to get ucode_lib manifest {name}"))
            })?;
            owned = serde_json::from_slice::<Value>(ar.body(&m)?)
                .map_err(|e| NeffError::invalid(format!("{m}: invalid JSON: {e}")))?;
            as_array(&owned, &m)?
        }
        v => as_array(v, "ucode_lib")?,
    };
    let want_major = NRT_UCODE_VERSION.split('.').next().unwrap_or("1");
    let mut libs: Vec<UcodeLib> = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let lib = e
            .get("library")
            .ok_or_else(|| NeffError::invalid(format!("ucode_lib[{i}]: missing <library>")))
            .and_then(|l| as_str(l, "library"))?;
        let version = e
            .get("ulib_to_ucode_version")
            .and_then(Value::as_str)
            .ok_or_else(|| NeffError::invalid("Missing GPSIMD lib version!"))?;
        if version.split('.').next() != Some(want_major) {
            return Err(NeffError::invalid(format!(
                "Mismatch between GPSIMD lib version and NRT version! ({lib}: {version} vs \
                 {NRT_UCODE_VERSION})"
            )));
        }
        let opcode = e
            .get("opcode")
            .and_then(Value::as_i64)
            .ok_or_else(|| NeffError::invalid(format!("UCode Library {lib}: missing <opcode>")))?;
        if e.get("cpu_id").and_then(Value::as_u64).unwrap_or(0) != 0 {
            return Err(NeffError::invalid(format!(
                "UCode Library {lib}: cpu_id must be 0"
            )));
        }
        let cpus = e.get("total_cpus").and_then(Value::as_u64).unwrap_or(0);
        if !matches!(cpus, 0 | 1 | 8) {
            return Err(NeffError::invalid(format!(
                "UCode Library {lib} has invalid number of total cpus {cpus}"
            )));
        }
        let functions = match e.get("functions") {
            Some(f) => {
                let f = as_array(f, "functions")?;
                for (k, func) in f.iter().enumerate() {
                    if func.get("opcode").and_then(Value::as_i64).is_none() {
                        return Err(NeffError::invalid(format!(
                            "UCode Library {lib}: functions[{k}] has no opcode"
                        )));
                    }
                    let n = func.get("name").and_then(Value::as_str).unwrap_or("");
                    if n.len() >= nrt_core::abi::constants::UCODE_FUNC_NAME_MAX {
                        return Err(NeffError::invalid(format!(
                            "UCode Library {lib}: function name {n} longer than 63 bytes"
                        )));
                    }
                }
                f.len()
            }
            None => 0,
        };
        if functions > MAX_UCODE_FUNCTIONS {
            return Err(NeffError::invalid(format!(
                "UCode Library {lib}: {functions} functions, at most {MAX_UCODE_FUNCTIONS}"
            )));
        }
        let member = resolve(ar, dir, lib)?
            .ok_or_else(|| NeffError::invalid(format!("Failed to get GPSIMD library {lib}")))?;
        if libs.iter().any(|l| l.member == member) {
            return Err(NeffError::invalid(format!(
                "duplicate GPSIMD library {lib}"
            )));
        }
        libs.push(UcodeLib {
            bytes: ar.size(&member),
            member,
            version: version.to_string(),
            opcode,
            functions,
        });
    }
    Ok(libs)
}

fn parse_reservations(v: &Value) -> Result<Vec<Reservation>> {
    as_array(v, "runtime_statebuffer_reservation")?
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let ty = e.get("type").and_then(Value::as_str).unwrap_or("");
            if ty != "evtaccel" {
                return Err(NeffError::invalid(format!(
                    "Invalid runtime_statebuffer_reservation type {ty}"
                )));
            }
            let field = |a: &str, b: &str| -> Result<u64> {
                match e.get(a).or_else(|| e.get(b)) {
                    Some(v) => as_u64(v, &format!("runtime_statebuffer_reservation[{i}].{a}")),
                    None => Err(NeffError::invalid(format!(
                        "runtime_statebuffer_reservation[{i}]: missing <{a}>"
                    ))),
                }
            };
            Ok(Reservation {
                ty: 1,
                offset: field("offset", "offset")?,
                size: field("size", "size")?,
                start_partition: field("base_partition", "start_partition")?,
                num_partitions: field("partitions", "num_partitions")?,
            })
        })
        .collect()
}

fn parse_extension(v: &Value) -> Result<Extension> {
    let allocations = match v.get("allocations") {
        Some(a) => as_array(a, "nrt_dmem.allocations")?
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let what = format!("nrt_dmem.allocations[{i}]");
                let num = |k: &str| -> Result<u64> {
                    e.get(k)
                        .ok_or_else(|| NeffError::invalid(format!("{what}: missing <{k}>")))
                        .and_then(|x| as_u64(x, &format!("{what}.{k}")))
                };
                let usage = u32::try_from(num("usage")?)
                    .map_err(|_| NeffError::invalid(format!("{what}: usage out of range")))?;
                let host = match e.get("location").and_then(Value::as_str) {
                    None | Some("device") => false,
                    Some("host") => true,
                    Some(l) => {
                        return Err(NeffError::invalid(format!(
                            "{what}: location {l:?} is neither \"device\" nor \"host\""
                        )))
                    }
                };
                Ok(Declared {
                    usage,
                    host,
                    size: num("size")?,
                    align: e.get("align").and_then(Value::as_u64).unwrap_or(0),
                    hint: e
                        .get("hint")
                        .and_then(Value::as_str)
                        .unwrap_or("declared")
                        .to_string(),
                })
            })
            .collect::<Result<Vec<_>>>()?,
        None => Vec::new(),
    };
    let default_ulib_bytes = match v.get("default_ulib_bytes") {
        None | Some(Value::Null) => None,
        Some(b) => Some(as_u64(b, "nrt_dmem.default_ulib_bytes")?),
    };
    Ok(Extension {
        allocations,
        default_ulib_bytes,
    })
}

/// Tier 3 (§8): one subgraph's `def.json`, with every check the sources pin.
pub(crate) fn parse_def(ar: &View<'_>, name: &str, def_member: &str) -> Result<SubgraphDef> {
    if !ar.has(def_member)? {
        return Err(NeffError::invalid(format!(
            "Failed to get NEFF member {def_member}: subgraph {name} has no def.json"
        )));
    }
    let v = parse_json(ar, def_member)?;
    let ctx = |e: NeffError| e.context(def_member);
    let def = v
        .as_object()
        .ok_or_else(|| ctx(NeffError::invalid("def.json must be an object")))?;
    let dir = def_member.rsplit_once('/').map_or("", |(d, _)| d);
    // var (required) + the dense-id and has-outputs checks, always (§8.1 (b)).
    let vars_v = def.get("var").ok_or_else(|| {
        ctx(NeffError::invalid(format!(
            "Subgraph {name} has no Outputs (no var table)"
        )))
    })?;
    let mut vars = named_entries(vars_v, "var")
        .and_then(|es| {
            es.into_iter()
                .map(|(n, e)| parse_var(n, e))
                .collect::<Result<Vec<_>>>()
        })
        .map_err(ctx)?;
    vars.sort_by_key(|v| v.var_id);
    let max = vars.last().map_or(0, |v| v.var_id);
    if vars.is_empty() || max as usize + 1 != vars.len() {
        return Err(ctx(NeffError::invalid(format!(
            "Unexpected var_ids set! max={max}, size={}",
            vars.len()
        ))));
    }
    if let Some(w) = vars.windows(2).find(|w| w[0].var_id == w[1].var_id) {
        return Err(ctx(NeffError::invalid(format!(
            "duplicate var_id {} ({} and {})",
            w[0].var_id, w[0].name, w[1].name
        ))));
    }
    if !vars.iter().any(|v| v.kind == VarKind::Output) {
        return Err(ctx(NeffError::invalid(format!(
            "Subgraph {name} has no Outputs"
        ))));
    }
    // Every part is parsed before the first error is returned, so that an early parse records
    // all that it misses at once.
    let weights = collect_all(
        vars.iter()
            .filter(|v| v.kind == VarKind::File)
            .map(|v| weight_of(ar, dir, v)),
    );
    let queues: Result<Vec<DmaQueue>> = match def.get("dma_queue") {
        Some(q) => named_entries(q, "dma_queue")
            .and_then(|es| es.into_iter().map(|(n, e)| parse_queue(n, e)).collect()),
        None => Ok(Vec::new()),
    };
    let ucode_libs = match def.get("ucode_lib") {
        Some(u) => parse_ucode(ar, dir, u),
        None => Ok(Vec::new()),
    };
    let engines = collect_all(ENGINES.iter().map(|e| parse_engine(ar, dir, def, e)));
    let weights = weights.map_err(ctx)?;
    let queues = queues.map_err(ctx)?;
    if queues.iter().filter(|q| q.ty == "act_load").count() > 1 {
        return Err(ctx(NeffError::invalid("more than one act_load DMA queue")));
    }
    let ucode_libs = ucode_libs.map_err(ctx)?;
    let (has_reservation_key, reservations) = match def.get("runtime_statebuffer_reservation") {
        Some(r) => (true, parse_reservations(r).map_err(ctx)?),
        None => (false, Vec::new()),
    };
    let engines = engines.map_err(ctx)?;
    let extension = def
        .get("nrt_dmem")
        .map(parse_extension)
        .transpose()
        .map_err(ctx)?;
    Ok(SubgraphDef {
        name: name.to_string(),
        def_member: def_member.to_string(),
        vars,
        weights,
        queues,
        engines,
        ucode_libs,
        has_reservation_key,
        reservations,
        extension,
    })
}
