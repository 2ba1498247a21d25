//! What a loaded model tells an application about its inputs and outputs: name, direction,
//! element type, shape and byte size — libnrt's `nrt_tensor_info_t` (public
//! `nrt_experimental.h`), independent of where it was read from.
//!
//! A model manifest fills it from its `inputs`/`outputs` (`dtype`, `shape`, docs/MANIFEST.md);
//! a NEFF reader fills the same type from the container's `neff.json`. The C ABI
//! (`nrt_get_model_tensor_info`) only ever sees a `&[IoTensorInfo]`.
#![deny(unsafe_code)]

use std::fmt;

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
    pub fn parse(s: &str) -> Result<Dtype, String> {
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

/// Most dimensions a tensor may have (libnrt's NEFF reader refuses more).
pub const MAX_DIMS: usize = 32;

/// Bytes of a tensor of `shape` and `dtype`: the product of the dimensions times the element
/// size, `None` on overflow.
pub fn shape_bytes(shape: &[u32], dtype: Dtype) -> Option<u64> {
    shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(u64::from(d)))
}

/// Whether a tensor is read by the model or written by it (`nrt_tensor_usage_t`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum IoUsage {
    /// `NRT_TENSOR_USAGE_INPUT` (0).
    Input,
    /// `NRT_TENSOR_USAGE_OUTPUT` (1).
    Output,
}

/// One input or output tensor of a model, as `nrt_get_model_tensor_info` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoTensorInfo {
    /// The name the caller's tensor set must use.
    pub name: String,
    /// Input or output.
    pub usage: IoUsage,
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions, outermost first (at most [`MAX_DIMS`]).
    pub shape: Vec<u32>,
    /// Bytes (= [`shape_bytes`]).
    pub size: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_values_and_sizes_are_libnrts() {
        assert_eq!(Dtype::parse("float32").unwrap().raw(), 0xA);
        assert_eq!(Dtype::parse("NRT_DTYPE_BFLOAT16").unwrap(), Dtype::Bfloat16);
        assert_eq!(Dtype::parse("nrt_dtype_fp8_e4").unwrap().size(), 1);
        assert_eq!(Dtype::parse("INT64").unwrap().size(), 8);
        let e = Dtype::parse("fp64").unwrap_err();
        assert!(
            e.contains("unknown dtype \"fp64\"") && e.contains("bfloat16"),
            "{e}"
        );
        assert!(Dtype::parse("unknown").is_err() && Dtype::parse("").is_err());
        for (i, d) in Dtype::ALL.iter().enumerate() {
            assert_eq!(d.raw(), i as u32 + 1);
            assert_eq!(Dtype::parse(d.name()).unwrap(), *d);
        }
    }

    #[test]
    fn shape_bytes_multiplies_with_overflow_checks() {
        assert_eq!(shape_bytes(&[1, 3, 224, 224], Dtype::Float32), Some(602112));
        assert_eq!(shape_bytes(&[], Dtype::Int32), Some(4));
        assert_eq!(
            shape_bytes(&[u32::MAX, u32::MAX, u32::MAX], Dtype::Int8),
            None
        );
    }
}
