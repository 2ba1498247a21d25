//! What a loaded model tells an application about its inputs and outputs: name, direction,
//! element type, shape and byte size — libnrt's `nrt_tensor_info_t` (public
//! `nrt_experimental.h`), independent of where it was read from.
//!
//! The types are the NEFF reader's (`nrt_neff`, neff-format §6), the one place they are
//! defined: a NEFF fills them from its `neff.json`, a model manifest from its
//! `inputs`/`outputs` (`dtype`, `shape`, docs/MANIFEST.md). The C ABI
//! (`nrt_get_model_tensor_info`) only ever sees a `&[TensorInfo]`.
#![deny(unsafe_code)]

pub use nrt_neff::meta::{shape_bytes, Dtype, TensorInfo, TensorUsage, MAX_DIMS};

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
