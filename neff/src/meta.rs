//! The metadata tiers (neff-format §5–§9): `neff.json` (the IO tensor table), the KELF
//! descriptor (subgraphs, target) and each subgraph's `def.json` (vars, DMA queues, engines,
//! GPSIMD libraries, SBUF reservation), read as libnrt's DOM parser does: only the keys below
//! are looked up, unknown keys are ignored, every refusal names the member and the key.

use std::fmt;

use serde_json::{Map, Value};

use crate::error::{NeffError, Result};
use crate::index::View;

mod def;
mod kelf;

pub(crate) use def::{parse_def, payload_in};
pub use def::{
    Declared, DmaQueue, EngineProg, Extension, Reservation, SubgraphDef, UcodeLib, Var, VarKind,
    Weight, ENGINES,
};
pub(crate) use kelf::parse_kelf;
pub use kelf::{Kelf, ARCH_CAYMAN, ARCH_MARIANA, ARCH_SUNDA};

/// Most dimensions of an IO tensor (`io_node_info_t.shape[32]`, §6).
pub const MAX_DIMS: usize = 32;
/// Most GPSIMD functions in one library table (§8.5).
pub const MAX_UCODE_FUNCTIONS: usize = 97;
/// The runtime's GPSIMD library version whose major a NEFF library must match (§8.5).
pub const NRT_UCODE_VERSION: &str = "1.21.1.0";
/// Largest engine program libnrt takes (`size < 2^32`, §9).
pub const MAX_INSTR_BYTES: u64 = u32::MAX as u64;
/// `NRT_TENSOR_NAME_MAX` (`nrt_experimental.h`): a tensor name's buffer in
/// `nrt_tensor_info_t`, its NUL included.
pub const NRT_TENSOR_NAME_MAX: usize = 256;
/// Longest IO tensor name: `NRT_TENSOR_NAME_MAX - 1` bytes.
pub const MAX_TENSOR_NAME: usize = NRT_TENSOR_NAME_MAX - 1;
/// Largest `neff.json` (or `kelp.json`), the IO tensor table: a member declaring more is
/// refused from its tar header, before a byte of it is inflated. A table of 10 000 tensors with
/// 255-byte names takes about 6 MiB.
pub const MAX_IO_TABLE_BYTES: u64 = 8 << 20;

/// Refuses an IO tensor name longer than [`MAX_TENSOR_NAME`] bytes (its first 64 bytes shown).
pub fn check_tensor_name(name: &str) -> Result<()> {
    if name.len() <= MAX_TENSOR_NAME {
        return Ok(());
    }
    let mut cut = 64;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    Err(NeffError::invalid(format!(
        "tensor name \"{}…\" is {} bytes, longer than {MAX_TENSOR_NAME} \
         (NRT_TENSOR_NAME_MAX {NRT_TENSOR_NAME_MAX} with its NUL)",
        name[..cut].escape_debug(),
        name.len()
    )))
}

/// Element types of `nrt_dtype_t` (public `nrt.h`), with libnrt's values. `NRT_DTYPE_UNKNOWN`
/// (= `NRT_DTYPE_INVALID`, 0) is not a member: a tensor always has a known type here.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Dtype {
    /// `NRT_DTYPE_UINT64`.
    Uint64 = 0x1,
    /// `NRT_DTYPE_INT8`.
    Int8 = 0x2,
    /// `NRT_DTYPE_UINT8`.
    Uint8 = 0x3,
    /// `NRT_DTYPE_INT16`.
    Int16 = 0x4,
    /// `NRT_DTYPE_UINT16`.
    Uint16 = 0x5,
    /// `NRT_DTYPE_BFLOAT16`.
    Bfloat16 = 0x6,
    /// `NRT_DTYPE_FLOAT16`.
    Float16 = 0x7,
    /// `NRT_DTYPE_INT32`.
    Int32 = 0x8,
    /// `NRT_DTYPE_UINT32`.
    Uint32 = 0x9,
    /// `NRT_DTYPE_FLOAT32`.
    Float32 = 0xA,
    /// `NRT_DTYPE_FP32R` (fp32 with stochastic rounding; 4 bytes).
    Fp32r = 0xB,
    /// `NRT_DTYPE_INT64`.
    Int64 = 0xC,
    /// `NRT_DTYPE_FP8_E3`.
    Fp8E3 = 0xD,
    /// `NRT_DTYPE_FP8_E4`.
    Fp8E4 = 0xE,
    /// `NRT_DTYPE_FP8_E5`.
    Fp8E5 = 0xF,
}

impl Dtype {
    /// Every member, in value order.
    pub const ALL: [Dtype; 15] = [
        Dtype::Uint64,
        Dtype::Int8,
        Dtype::Uint8,
        Dtype::Int16,
        Dtype::Uint16,
        Dtype::Bfloat16,
        Dtype::Float16,
        Dtype::Int32,
        Dtype::Uint32,
        Dtype::Float32,
        Dtype::Fp32r,
        Dtype::Int64,
        Dtype::Fp8E3,
        Dtype::Fp8E4,
        Dtype::Fp8E5,
    ];

    /// The name without `NRT_DTYPE_`, lower case (`"float32"`, `"fp8_e4"`): how manifests
    /// spell it.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Uint64 => "uint64",
            Dtype::Int8 => "int8",
            Dtype::Uint8 => "uint8",
            Dtype::Int16 => "int16",
            Dtype::Uint16 => "uint16",
            Dtype::Bfloat16 => "bfloat16",
            Dtype::Float16 => "float16",
            Dtype::Int32 => "int32",
            Dtype::Uint32 => "uint32",
            Dtype::Float32 => "float32",
            Dtype::Fp32r => "fp32r",
            Dtype::Int64 => "int64",
            Dtype::Fp8E3 => "fp8_e3",
            Dtype::Fp8E4 => "fp8_e4",
            Dtype::Fp8E5 => "fp8_e5",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Dtype::Int8 | Dtype::Uint8 | Dtype::Fp8E3 | Dtype::Fp8E4 | Dtype::Fp8E5 => 1,
            Dtype::Int16 | Dtype::Uint16 | Dtype::Bfloat16 | Dtype::Float16 => 2,
            Dtype::Int32 | Dtype::Uint32 | Dtype::Float32 | Dtype::Fp32r => 4,
            Dtype::Int64 | Dtype::Uint64 => 8,
        }
    }

    /// The `nrt_dtype_t` value.
    pub fn raw(self) -> u32 {
        self as u32
    }

    /// Reads a name: with or without `NRT_DTYPE_`, any case. The error lists the names.
    /// A tier-1 dtype string of `neff.json` (§6: the exact lower-case name).
    pub fn from_neff(s: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == s)
    }

    /// The public `nrt_dtype_t` value (= [`Dtype::raw`]).
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// Parses a dtype as a manifest writes it: the name with or without `NRT_DTYPE_`, any
    /// case.
    pub fn parse(s: &str) -> std::result::Result<Dtype, String> {
        let bare = s
            .get(..10)
            .filter(|p| p.eq_ignore_ascii_case("NRT_DTYPE_"))
            .map_or(s, |_| &s[10..]);
        Dtype::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(bare))
            .ok_or_else(|| {
                let names: Vec<&str> = Dtype::ALL.iter().map(|d| d.name()).collect();
                format!(
                    "unknown dtype \"{}\": expected an nrt_dtype_t name (with or without the \
                     NRT_DTYPE_ prefix, any case): {}",
                    s.escape_debug(),
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Input or output (`nrt_tensor_usage_t`: INPUT 0, OUTPUT 1).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TensorUsage {
    /// `NRT_TENSOR_USAGE_INPUT` (0).
    Input = 0,
    /// `NRT_TENSOR_USAGE_OUTPUT` (1).
    Output = 1,
}

/// One row of the IO tensor table (`io_node_info_t` + name, §6): what
/// `nrt_get_model_tensor_info` returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name.
    pub name: String,
    /// Input or output.
    pub usage: TensorUsage,
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions (≤ 32).
    pub shape: Vec<u32>,
    /// `product(shape) × dtype size` (`calc_tensor_size`, overflow-checked).
    pub size: u64,
}

/// Bytes of a tensor of `shape` and `dtype`: the product of the dimensions times the element
/// size, `None` on overflow.
pub fn shape_bytes(shape: &[u32], dtype: Dtype) -> Option<u64> {
    shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(u64::from(d)))
}

/// `calc_tensor_size` (§6): product of the dims times the element size, overflow-checked.
pub fn tensor_size(name: &str, dtype: Dtype, shape: &[u32]) -> Result<u64> {
    if shape.len() > MAX_DIMS {
        return Err(NeffError::invalid(format!(
            "Too many dimensions ({}) for tensor {name}",
            shape.len()
        )));
    }
    shape_bytes(shape, dtype).ok_or_else(|| {
        NeffError::invalid(format!(
            "Tensor size of {name} overflows: shape {shape:?} x {} bytes",
            dtype.size()
        ))
    })
}

fn parse_json(ar: &View<'_>, member: &str) -> Result<Value> {
    let body = ar.body(member)?;
    serde_json::from_slice(body)
        .map_err(|e| NeffError::invalid(format!("{member}: invalid JSON: {e}")))
}

fn as_u64(v: &Value, what: &str) -> Result<u64> {
    v.as_u64()
        .ok_or_else(|| NeffError::invalid(format!("{what} must be an unsigned integer, got {v}")))
}

fn as_str<'a>(v: &'a Value, what: &str) -> Result<&'a str> {
    v.as_str()
        .ok_or_else(|| NeffError::invalid(format!("{what} must be a string, got {v}")))
}

fn as_array<'a>(v: &'a Value, what: &str) -> Result<&'a Vec<Value>> {
    v.as_array()
        .ok_or_else(|| NeffError::invalid(format!("{what} must be an array")))
}

fn index(a: &[Value], i: u64) -> Option<&Value> {
    usize::try_from(i).ok().and_then(|i| a.get(i))
}

/// Tier 1: `neff.json` (or legacy `kelp.json`) → (inputs, outputs, KELF member name) (§6).
pub(crate) fn parse_neff_json(ar: &View<'_>) -> Result<(Vec<TensorInfo>, String)> {
    let member = if ar.has("neff.json")? {
        "neff.json"
    } else if ar.has("kelp.json")? {
        "kelp.json"
    } else {
        return Err(NeffError::invalid(
            "Missing neff.json (or kelp.json) in NEFF",
        ));
    };
    let v = parse_json(ar, member)?;
    let ctx = |e: NeffError| e.context(member);
    let (Some(nodes), Some(arg_nodes), Some(heads), Some(row_ptr), Some(attrs)) = (
        v.get("nodes"),
        v.get("arg_nodes"),
        v.get("heads"),
        v.get("node_row_ptr"),
        v.get("attrs"),
    ) else {
        return Err(ctx(NeffError::invalid(
            "Missing required fields in NEFF JSON",
        )));
    };
    let nodes = as_array(nodes, "nodes").map_err(ctx)?;
    let arg_nodes = as_array(arg_nodes, "arg_nodes").map_err(ctx)?;
    let heads = as_array(heads, "heads").map_err(ctx)?;
    let row_ptr = as_array(row_ptr, "node_row_ptr").map_err(ctx)?;
    let (Some(dltype), Some(shape)) = (attrs.get("dltype"), attrs.get("shape")) else {
        return Err(ctx(NeffError::invalid("Missing dltype or shape in attrs")));
    };
    // ["list_str", [...]] / ["list_shape", [[...], ...]]
    let list = |v: &Value, what: &str| -> Result<Vec<Value>> {
        let a = as_array(v, what)?;
        a.get(1)
            .and_then(Value::as_array)
            .cloned()
            .ok_or_else(|| NeffError::invalid(format!("attrs.{what} must be [tag, [...]]")))
    };
    let dltypes = list(dltype, "dltype").map_err(ctx)?;
    let shapes = list(shape, "shape").map_err(ctx)?;
    // The executable node.
    let kelf_node = nodes
        .iter()
        .find(|n| n.pointer("/attrs/func_name").and_then(Value::as_str) == Some("__kelf"))
        .ok_or_else(|| ctx(NeffError::invalid("No KELF node found in NEFF JSON")))?;
    let kelf = match kelf_node.pointer("/attrs/kelf") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(ctx(NeffError::invalid(
                "KELF node's attrs.kelf is not a string",
            )))
        }
        None => return Err(ctx(NeffError::invalid("KELF node has no attrs.kelf"))),
    };
    let tensor = |name: String, usage, eid: u64| -> Result<TensorInfo> {
        check_tensor_name(&name)?;
        let (Some(dt), Some(sh)) = (index(&dltypes, eid), index(&shapes, eid)) else {
            return Err(NeffError::invalid(format!(
                "EID {eid} out of bounds for dtypes/shapes"
            )));
        };
        let dts = as_str(dt, "dltype entry")?;
        let dtype = Dtype::from_neff(dts).ok_or_else(|| {
            NeffError::invalid(format!(
                "Unknown dtype: {dts} for tensor {name} (libnrt defaults it to UNKNOWN with \
                 1-byte elements; refused here: its size would be wrong)"
            ))
        })?;
        let dims = as_array(sh, "shape entry")?;
        if dims.len() > MAX_DIMS {
            return Err(NeffError::invalid(format!(
                "Too many dimensions ({}) for tensor {name}",
                dims.len()
            )));
        }
        let shape = dims
            .iter()
            .map(|d| {
                d.as_u64()
                    .and_then(|d| u32::try_from(d).ok())
                    .ok_or_else(|| {
                        NeffError::invalid(format!(
                            "tensor {name}: dimension {d} is not a 32-bit unsigned integer"
                        ))
                    })
            })
            .collect::<Result<Vec<u32>>>()?;
        let size = tensor_size(&name, dtype, &shape)?;
        Ok(TensorInfo {
            name,
            usage,
            dtype,
            shape,
            size,
        })
    };
    let node_name = |nid: u64| -> Result<(&Value, u64)> {
        let node = index(nodes, nid)
            .ok_or_else(|| NeffError::invalid(format!("Output node ID {nid} out of bounds")))?;
        let eid = index(row_ptr, nid)
            .ok_or_else(|| NeffError::invalid(format!("node {nid} has no node_row_ptr entry")))
            .and_then(|e| as_u64(e, "node_row_ptr entry"))?;
        Ok((node, eid))
    };
    // An input node or a head listed twice is one tensor declared twice: refused, so that a
    // table repeating one entry cannot grow past what its distinct entries take.
    let mut listed = std::collections::HashSet::new();
    let mut once = |what: &str, key: (u64, Option<u64>)| -> Result<()> {
        if listed.insert(key) {
            Ok(())
        } else {
            Err(ctx(NeffError::invalid(format!(
                "{what} lists node {}{} twice",
                key.0,
                key.1.map_or(String::new(), |j| format!(" output {j}"))
            ))))
        }
    };
    let mut tensors = Vec::new();
    for a in arg_nodes {
        let nid = as_u64(a, "arg_nodes entry").map_err(ctx)?;
        once("arg_nodes", (nid, None))?;
        let (node, eid) = node_name(nid).map_err(ctx)?;
        let name = node
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| ctx(NeffError::invalid(format!("input node {nid} has no name"))))?;
        tensors.push(tensor(name.to_string(), TensorUsage::Input, eid).map_err(ctx)?);
    }
    let graph_names = attrs.get("output_names").and_then(Value::as_array);
    for (k, h) in heads.iter().enumerate() {
        let h = as_array(h, "heads entry").map_err(ctx)?;
        let nid = h
            .first()
            .ok_or_else(|| ctx(NeffError::invalid("heads entry is empty")))
            .and_then(|n| as_u64(n, "heads node id").map_err(ctx))?;
        let j = match h.get(1) {
            Some(j) => as_u64(j, "heads output index").map_err(ctx)?,
            None => 0,
        };
        once("heads", (nid, Some(j)))?;
        let (node, eid) = node_name(nid).map_err(ctx)?;
        let eid = eid
            .checked_add(j)
            .ok_or_else(|| ctx(NeffError::invalid(format!("EID {eid}+{j} overflows"))))?;
        // node attrs.output_names[j] → graph attrs.output_names[k] → the node-level `output`
        // (the fixture's form, §6) → the node name.
        let name = node
            .pointer("/attrs/output_names")
            .and_then(Value::as_array)
            .and_then(|a| index(a, j))
            .and_then(Value::as_str)
            .or_else(|| graph_names.and_then(|a| a.get(k)).and_then(Value::as_str))
            .or_else(|| node.get("output").and_then(Value::as_str))
            .or_else(|| node.get("name").and_then(Value::as_str))
            .ok_or_else(|| ctx(NeffError::invalid(format!("output {k} has no name"))))?;
        tensors.push(tensor(name.to_string(), TensorUsage::Output, eid).map_err(ctx)?);
    }
    Ok((tensors, kelf))
}
