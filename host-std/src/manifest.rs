//! The model manifest: the JSON stand-in for a NEFF (`nrt_load`'s `neff_bytes`, public API §2).
//!
//! A NEFF tells libnrt what device memory a model needs (spec §5: its allocations per
//! subgraph, GPSIMD libraries §6, scratchpad and SBUF carveout §8) and which IO tensors it
//! declares (§7). This runtime models exactly that and nothing else, so a model is described by
//! a small JSON document, format `"nrt-dmem-model/2"` (docs/MANIFEST.md):
//!
//! ```json
//! { "format": "nrt-dmem-model/2", "name": "bert-base",
//!   "allocations": [ { "usage": "WEIGHT", "location": "device", "size": 438000000 } ],
//!   "inputs": [ { "name": "input_ids", "size": 512 } ],
//!   "outputs": [ { "name": "last_hidden_state", "size": 393216 } ] }
//! ```
//!
//! [`Manifest::parse`] reads one (unknown keys, a wrong `format` and unknown usage names are
//! refused with the JSON path, line and column); [`Manifest::spec`] lends it to
//! [`nrt_core::model::load_model`](nrt_core::Models::load) as a
//! [`ModelSpec`]. A real, compiled NEFF is recognised and refused with
//! [`ManifestError::Neff`], which the C ABI reports as `NRT_UNSUPPORTED_NEFF_VERSION`.
#![deny(unsafe_code)]

use std::fmt;
use std::path::Path;

use nrt_core::abi::{dma_mem_location_t, dma_mem_usage_type_t, kbin_sb_carveout_type_t};
use nrt_core::model::{ModelAlloc, ModelSpec, SbufCarveout, TensorDecl};
use nrt_core::ulib::UlibRequest;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use crate::tensor_info::{shape_bytes, Dtype, TensorInfo, TensorUsage, MAX_DIMS};

/// The one manifest format this runtime reads.
pub const FORMAT: &str = "nrt-dmem-model/2";

/// The format before the project took libnrt 2.31's usage enum: its usage names and numbers
/// meant something else (`2` was TENSOR, now INSTR_ACT), so it is refused, never read.
pub const FORMAT_V1: &str = "nrt-dmem-model/1";

/// Why bytes handed to `nrt_load` are not a loadable manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The bytes are a compiled NEFF (or some other binary blob), not a manifest.
    #[error(
        "the model is a compiled NEFF ({why}); nrt-dmem re-implements libnrt's device-memory and \
         multi-model core only and loads JSON model manifests (format \"{FORMAT}\", see \
         docs/MANIFEST.md) that describe a model's memory in place of a NEFF"
    )]
    Neff {
        /// What gave it away.
        why: &'static str,
    },
    /// The JSON is malformed or does not follow the format.
    #[error("model manifest: {path}: {msg} (line {line}, column {column})")]
    Invalid {
        /// The JSON path of the offending value (`allocations[2].usage`), or `.` for the
        /// document itself.
        path: String,
        /// What is wrong.
        msg: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },
    /// The manifest file could not be read.
    #[error("model manifest {path}: {msg}")]
    Io {
        /// File.
        path: String,
        /// The I/O error.
        msg: String,
    },
}

/// Where an allocation lives (`dma_mem_location_t`, spec §3.1).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// Device HBM (`TONGA_DRAM`).
    Device,
    /// Host DMA memory (`HOST_DRAM`).
    Host,
}

impl Location {
    /// The ABI `dma_mem_location_t`.
    pub fn abi(self) -> dma_mem_location_t {
        match self {
            Location::Device => dma_mem_location_t::TONGA_DRAM,
            Location::Host => dma_mem_location_t::HOST_DRAM,
        }
    }
    /// The raw `dma_mem_location_t` value.
    pub fn raw(self) -> u32 {
        self.abi() as u32
    }
}

/// One memory request of the model (`allocations[]`): made once per subgraph in that
/// subgraph's MODEL heap (spec §5.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// What it is for.
    pub usage: dma_mem_usage_type_t,
    /// Device or host.
    pub location: Location,
    /// Bytes.
    pub size: u64,
    /// Alignment (0 = the driver's natural alignment).
    pub align: u64,
    /// The dmem hint and mem_ref_set key (≤ 47 bytes); defaults to the usage name.
    pub hint: String,
}

/// A declared input or output tensor.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawTensor")]
pub struct Tensor {
    /// Name the caller's tensor set must use (1..=255 bytes).
    pub name: String,
    /// Bytes the caller's tensor must have: `product(shape) x dtype size`.
    pub size: u64,
    /// Element type (`dtype`; `uint8` when the manifest gives none).
    pub dtype: Dtype,
    /// Dimensions (`shape`, at most 32; `[size / dtype size]` when the manifest gives none).
    pub shape: Vec<u32>,
}

impl Tensor {
    /// The declaration the core's load takes (spec §4.2's IO table entry), borrowing this.
    fn decl(&self) -> TensorDecl<'_> {
        TensorDecl {
            name: &self.name,
            size: self.size,
            dtype: self.dtype.raw(),
            shape: &self.shape,
        }
    }
}

/// A tensor as written: `size`, `dtype` and `shape` are each optional, but `size` or `shape`
/// must be there and, when both are, agree.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTensor {
    name: String,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    dtype: Option<DtypeName>,
    #[serde(default)]
    shape: Option<Vec<u32>>,
}

/// A `dtype` value: an `nrt_dtype_t` name ([`Dtype::parse`]).
struct DtypeName(Dtype);

impl<'de> Deserialize<'de> for DtypeName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Dtype::parse(&s).map(DtypeName).map_err(de::Error::custom)
    }
}

impl TryFrom<RawTensor> for Tensor {
    type Error = String;

    fn try_from(t: RawTensor) -> Result<Self, String> {
        let dtype = t.dtype.map_or(Dtype::Uint8, |d| d.0);
        let shape = match (t.shape, t.size) {
            (Some(shape), _) => shape,
            (None, Some(size)) if size % dtype.size() == 0 => {
                let n = u32::try_from(size / dtype.size()).map_err(|_| {
                    format!(
                        "tensor \"{}\": {size} bytes of {dtype} are more elements than one \
                         dimension holds (give a shape)",
                        t.name.escape_debug()
                    )
                })?;
                vec![n]
            }
            (None, Some(size)) => {
                return Err(format!(
                    "tensor \"{}\": size {size} is not a multiple of the {}-byte {dtype}",
                    t.name.escape_debug(),
                    dtype.size()
                ))
            }
            (None, None) => {
                return Err(format!(
                    "tensor \"{}\": give its size or its shape",
                    t.name.escape_debug()
                ))
            }
        };
        if shape.len() > MAX_DIMS {
            return Err(format!(
                "tensor \"{}\": shape has {} dimensions, at most {MAX_DIMS} are allowed",
                t.name.escape_debug(),
                shape.len()
            ));
        }
        let bytes = shape_bytes(&shape, dtype).ok_or_else(|| {
            format!(
                "tensor \"{}\": shape {shape:?} of {dtype} overflows a 64-bit byte size",
                t.name.escape_debug()
            )
        })?;
        if let Some(size) = t.size.filter(|&s| s != bytes) {
            return Err(format!(
                "tensor \"{}\": shape {shape:?} of {dtype} is {bytes} bytes, but size is {size}",
                t.name.escape_debug()
            ));
        }
        Ok(Tensor {
            name: t.name,
            size: bytes,
            dtype,
            shape,
        })
    }
}

/// GPSIMD libraries (spec §6): `count` libraries of `bytes` each; one library is the shared
/// ext-isa case.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpsimdLibs {
    /// Libraries (≤ 9).
    pub count: u32,
    /// Bytes of each.
    pub bytes: u64,
}

/// The SBUF carveout a NEFF reserves (spec §8).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Carveout {
    /// `kbin_sb_carveout_type_t` (`"evtaccel"` or its number).
    #[serde(rename = "type", deserialize_with = "de_carveout_type")]
    pub ty: u32,
    /// First partition.
    pub partition_start: u64,
    /// Partitions.
    pub partition_count: u64,
    /// SB partition byte offset.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
}

/// A parsed model manifest (owned). [`Manifest::spec`] lends it to the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// Model name.
    pub name: String,
    /// Subgraphs (default 1).
    pub subgraphs: u32,
    /// Memory requests, per subgraph.
    pub allocations: Vec<Allocation>,
    /// GPSIMD libraries.
    pub gpsimd_libs: Option<GpsimdLibs>,
    /// Shared scratchpad bytes (spec §8).
    pub scratchpad_bytes: u64,
    /// SBUF carveout.
    pub sbuf_carveout: Option<Carveout>,
    /// Declared inputs, in position order.
    pub inputs: Vec<Tensor>,
    /// Declared outputs, in position order.
    pub outputs: Vec<Tensor>,
}

/// Storage a [`ModelSpec`] borrows: returned by [`Manifest::spec`].
pub struct ManifestSpec<'m> {
    m: &'m Manifest,
    allocations: Vec<ModelAlloc<'m>>,
    inputs: Vec<TensorDecl<'m>>,
    outputs: Vec<TensorDecl<'m>>,
}

impl ManifestSpec<'_> {
    /// The core's view of the manifest.
    pub fn as_spec(&self) -> ModelSpec<'_> {
        ModelSpec {
            name: &self.m.name,
            subgraphs: self.m.subgraphs,
            allocations: &self.allocations,
            subgraph_ends: &[],
            gpsimd_libs: self.m.gpsimd_libs.map(|l| UlibRequest {
                count: l.count,
                bytes: l.bytes,
            }),
            scratchpad_bytes: self.m.scratchpad_bytes,
            sbuf_carveout: self.m.sbuf_carveout.map(|c| SbufCarveout {
                ty: c.ty,
                partition_start: c.partition_start,
                partition_count: c.partition_count,
                offset: c.offset,
                size: c.size,
            }),
            inputs: &self.inputs,
            outputs: &self.outputs,
        }
    }
}

impl Manifest {
    /// Parses manifest bytes (what `nrt_load` receives). A compiled NEFF or other binary blob
    /// is [`ManifestError::Neff`]; anything else that is not a valid manifest is
    /// [`ManifestError::Invalid`] naming the JSON path, line and column.
    pub fn parse(bytes: &[u8]) -> Result<Self, ManifestError> {
        if let Some(why) = sniff_neff(bytes) {
            return Err(ManifestError::Neff { why });
        }
        let invalid = |path: String, e: serde_json::Error| ManifestError::Invalid {
            path,
            msg: strip_position(&e.to_string()),
            line: e.line(),
            column: e.column(),
        };
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let raw: RawManifest = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            invalid(path, e.into_inner())
        })?;
        // Trailing data after the document is an error, as for `serde_json::from_slice`.
        de.end().map_err(|e| invalid(".".into(), e))?;
        Ok(raw.into_manifest())
    }

    /// Parses a manifest file.
    /// A file larger than [`MAX_MANIFEST_BYTES`] is refused before it is read.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, ManifestError> {
        let p = path.as_ref();
        let io = |msg: String| ManifestError::Io {
            path: p.display().to_string(),
            msg,
        };
        let f = nrt_neff::NeffFile::open(p).map_err(|e| io(e.to_string()))?;
        Self::parse(&read_capped(&f).map_err(io)?)
    }

    /// Lends the manifest to the core: the returned storage yields a [`ModelSpec`] through
    /// [`ManifestSpec::as_spec`].
    pub fn spec(&self) -> ManifestSpec<'_> {
        ManifestSpec {
            m: self,
            allocations: self
                .allocations
                .iter()
                .map(|a| ModelAlloc {
                    usage: a.usage,
                    location: a.location.abi(),
                    size: a.size,
                    align: a.align,
                    hint: &a.hint,
                })
                .collect(),
            inputs: self.inputs.iter().map(Tensor::decl).collect(),
            outputs: self.outputs.iter().map(Tensor::decl).collect(),
        }
    }

    /// Bytes the model's allocations ask for at `location`, over all subgraphs (before the
    /// driver's page rounding; libraries and scratchpad not included).
    pub fn requested_bytes(&self, location: Location) -> u64 {
        self.allocations
            .iter()
            .filter(|a| a.location == location)
            .map(|a| a.size)
            .fold(0u64, u64::saturating_add)
            .saturating_mul(self.subgraphs as u64)
    }

    /// The declared inputs, then the outputs, as `nrt_get_model_tensor_info` reports them.
    pub fn io_tensors(&self) -> Vec<TensorInfo> {
        let info = |t: &Tensor, usage| TensorInfo {
            name: t.name.clone(),
            usage,
            dtype: t.dtype,
            shape: t.shape.clone(),
            size: t.size,
        };
        (self.inputs.iter().map(|t| info(t, TensorUsage::Input)))
            .chain(self.outputs.iter().map(|t| info(t, TensorUsage::Output)))
            .collect()
    }
}

/// Largest model manifest read (64 MiB): a manifest lists allocations and tensors, never their
/// bytes; a larger text is refused before it is read.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// A manifest's bytes from `f`, refused when larger than [`MAX_MANIFEST_BYTES`].
pub(crate) fn read_capped(f: &nrt_neff::NeffFile) -> Result<Vec<u8>, String> {
    use nrt_neff::Source;
    match f.read_all_capped(MAX_MANIFEST_BYTES) {
        Ok(Some(b)) => Ok(b),
        Ok(None) => Err(format!(
            "{} bytes: a model manifest takes at most {MAX_MANIFEST_BYTES}",
            f.len()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Recognises a compiled NEFF or another binary blob: a gzip stream (NEFFs are
/// gzip-compressed tar archives), a tar header, a `NEFF` magic, NUL bytes or invalid UTF-8
/// where a JSON document is expected. `None` means "try it as JSON".
pub fn sniff_neff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        return Some("a gzip stream");
    }
    if bytes.len() >= 262 && &bytes[257..262] == b"ustar" {
        return Some("a tar archive");
    }
    if bytes.len() >= 4 && bytes[..4].eq_ignore_ascii_case(b"NEFF") {
        return Some("it starts with a NEFF header");
    }
    let head = &bytes[..bytes.len().min(4096)];
    if head.contains(&0) {
        return Some("binary data with NUL bytes, not JSON text");
    }
    // A sequence cut off at the end is the edge of a head read, not a binary file.
    if matches!(std::str::from_utf8(bytes), Err(e) if e.error_len().is_some()) {
        return Some("binary data that is not UTF-8 text");
    }
    None
}

/// serde_json appends " at line L column C"; the error carries them separately.
fn strip_position(s: &str) -> String {
    match s.rfind(" at line ") {
        Some(i) if s[i..].contains(" column ") => s[..i].to_string(),
        _ => s.to_string(),
    }
}

// ---- the serde form -------------------------------------------------------------------------

fn one() -> u32 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    #[allow(dead_code)] // validated while deserialising
    format: FormatTag,
    name: String,
    #[serde(default = "one")]
    subgraphs: u32,
    allocations: Vec<RawAlloc>,
    #[serde(default)]
    gpsimd_libs: Option<GpsimdLibs>,
    #[serde(default)]
    scratchpad_bytes: u64,
    #[serde(default)]
    sbuf_carveout: Option<Carveout>,
    #[serde(default)]
    inputs: Vec<Tensor>,
    #[serde(default)]
    outputs: Vec<Tensor>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlloc {
    usage: Usage,
    location: RawLocation,
    size: u64,
    #[serde(default)]
    align: u64,
    #[serde(default)]
    hint: Option<String>,
}

impl RawManifest {
    fn into_manifest(self) -> Manifest {
        Manifest {
            name: self.name,
            subgraphs: self.subgraphs,
            allocations: self
                .allocations
                .into_iter()
                .map(|a| Allocation {
                    usage: a.usage.0,
                    location: a.location.0,
                    size: a.size,
                    align: a.align,
                    hint: a
                        .hint
                        .unwrap_or_else(|| a.usage.0.short_name().to_ascii_lowercase()),
                })
                .collect(),
            gpsimd_libs: self.gpsimd_libs,
            scratchpad_bytes: self.scratchpad_bytes,
            sbuf_carveout: self.sbuf_carveout,
            inputs: self.inputs,
            outputs: self.outputs,
        }
    }
}

/// `"format"`: exactly [`FORMAT`].
struct FormatTag;

impl<'de> Deserialize<'de> for FormatTag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(Parse {
            expecting: |f| write!(f, "the string \"{FORMAT}\""),
            text: |s| {
                if s == FORMAT {
                    Ok(FormatTag)
                } else if s == FORMAT_V1 {
                    Err(format!(
                        "manifest format \"{FORMAT_V1}\" used this project's former usage \
                         names and numbers, which are now libnrt 2.31's (docs/CHANGELOG.md): \
                         rename the usages (CONSTANTS → WEIGHT, CODE → INSTR_*, …) and set \
                         \"format\": \"{FORMAT}\""
                    ))
                } else {
                    Err(format!(
                        "unsupported manifest format {s:?}: this runtime reads \"{FORMAT}\""
                    ))
                }
            },
            number: None,
            negative: None,
        })
    }
}

/// serde's visitor for a manifest value written as a string or, where the field allows it, a
/// number: each field states its forms and messages here, and the visitor does the rest.
struct Parse<T> {
    /// What the field takes (serde's "invalid type: …, expected …" message).
    expecting: fn(&mut fmt::Formatter<'_>) -> fmt::Result,
    /// The string form.
    text: fn(&str) -> Result<T, String>,
    /// The number form (`None`: a number is the wrong type).
    number: Option<fn(u64) -> Result<T, String>>,
    /// The message for a negative number (`None`: the wrong type).
    negative: Option<fn(i64) -> String>,
}

impl<T> Visitor<'_> for Parse<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.expecting)(f)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        (self.text)(s).map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        match self.number {
            Some(number) => number(v).map_err(E::custom),
            None => Err(E::invalid_type(de::Unexpected::Unsigned(v), &self)),
        }
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        match (u64::try_from(v), self.negative) {
            (Ok(u), _) if self.number.is_some() => self.visit_u64(u),
            (Err(_), Some(negative)) => Err(E::custom(negative(v))),
            _ => Err(E::invalid_type(de::Unexpected::Signed(v), &self)),
        }
    }
}

/// `"usage"`: a `dma_mem_usage_type_t` name (with or without `DMA_MEM_USAGE_TYPE_`, any
/// case) or its number.
struct Usage(dma_mem_usage_type_t);

/// `GENERIC (0), INSTR_PE (1), …` for error messages.
fn usage_names() -> String {
    dma_mem_usage_type_t::all()
        .map(|u| format!("{} ({})", u.short_name(), u as u32))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses a usage type (`TENSOR`, `DMA_MEM_USAGE_TYPE_WEIGHT`, `12`), libnrt's names and values
/// (spec §3.3). A name this project used before (`CONSTANTS`, `SHARED_SCRATCHPAD`, …) is
/// refused with the name that replaced it: no silent alias.
pub fn parse_usage(s: &str) -> Result<dma_mem_usage_type_t, String> {
    if let Some(u) = dma_mem_usage_type_t::parse(s) {
        return Ok(u);
    }
    match dma_mem_usage_type_t::former_name(s) {
        Some(now) => Err(format!(
            "usage type `{}` was renamed when the project took libnrt 2.31's enum: use {now}",
            s.trim()
        )),
        None => Err(format!(
            "unknown usage {:?}: expected a dma_mem_usage_type_t name (with or without the \
             DMA_MEM_USAGE_TYPE_ prefix, any case) or its number: {}",
            s.trim(),
            usage_names()
        )),
    }
}

impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Parse {
            expecting: |f| f.write_str("a dma_mem_usage_type_t name or number (0..=21)"),
            text: |s| parse_usage(s).map(Usage),
            number: Some(|v| {
                u32::try_from(v)
                    .ok()
                    .and_then(dma_mem_usage_type_t::from_raw)
                    .filter(|u| *u != dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_MAX)
                    .map(Usage)
                    .ok_or_else(|| {
                        format!(
                            "usage {v} is not an allocatable dma_mem_usage_type_t: {}",
                            usage_names()
                        )
                    })
            }),
            negative: Some(|v| format!("usage {v} is negative: {}", usage_names())),
        })
    }
}

/// `"location"`: `device` or `host`, any case.
struct RawLocation(Location);

impl<'de> Deserialize<'de> for RawLocation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(Parse {
            expecting: |f| f.write_str("\"device\" or \"host\""),
            text: |s| {
                if s.eq_ignore_ascii_case("device") {
                    Ok(RawLocation(Location::Device))
                } else if s.eq_ignore_ascii_case("host") {
                    Ok(RawLocation(Location::Host))
                } else {
                    Err(format!(
                        "unknown location {s:?}: expected \"device\" (HBM) or \"host\" (host DMA memory)"
                    ))
                }
            },
            number: None,
            negative: None,
        })
    }
}

/// `"type"` of the carveout: `evtaccel` (any case) or a `kbin_sb_carveout_type_t` number.
fn de_carveout_type<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    d.deserialize_any(Parse {
        expecting: |f| f.write_str("\"evtaccel\" or a kbin_sb_carveout_type_t number"),
        text: |s| {
            const PREFIX: &str = "KBIN_SB_CARVEOUT_TYPE_";
            let body = match s.get(..PREFIX.len()) {
                Some(p) if p.eq_ignore_ascii_case(PREFIX) => &s[PREFIX.len()..],
                _ => s,
            };
            if body.eq_ignore_ascii_case("evtaccel") {
                Ok(kbin_sb_carveout_type_t::KBIN_SB_CARVEOUT_TYPE_EVTACCEL as u32)
            } else {
                Err(format!(
                    "unknown carveout type {s:?}: expected \"evtaccel\" (1)"
                ))
            }
        },
        number: Some(|v| {
            u32::try_from(v).map_err(|_| format!("carveout type {v} does not fit 32 bits"))
        }),
        negative: None,
    })
}

#[cfg(test)]
mod tests;
