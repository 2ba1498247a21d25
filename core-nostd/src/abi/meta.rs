//! Layout metadata: what every ABI struct and enum declares about itself.
//!
//! The [`abi_struct!`](crate::abi_struct) macro turns one declaration into the `#[repr(C)]` type,
//! compile-time asserts of its size/alignment/offsets/tiling, and a [`StructInfo`] table. The
//! layout report, the generated C header and the DWARF checker read these tables, and check
//! them against the spec's facts where the spec states a value (crate `nrt-layout`).

/// Where a field's offset comes from (spec tags `[… × OBSERVED]` / `[… × INFERRED]`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Provenance {
    /// Read from libnrt's DWARF / disassembly in the spec: must match exactly.
    Observed,
    /// Follows from an observed fact by ABI rules: must match exactly.
    Inferred,
    /// Not placed by the spec; this project chose the offset inside the pinned size.
    Chosen,
    /// Bytes the project does not interpret; kept so the struct has libnrt's size.
    Reserved,
}

impl Provenance {
    /// The lower-case name used in the layout report.
    pub const fn as_str(self) -> &'static str {
        match self {
            Provenance::Observed => "observed",
            Provenance::Inferred => "inferred",
            Provenance::Chosen => "chosen",
            Provenance::Reserved => "reserved",
        }
    }
}

/// One member of an ABI struct.
#[derive(Copy, Clone, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FieldInfo {
    /// Member name (libnrt's where the spec gives it).
    pub name: &'static str,
    /// Byte offset inside the struct.
    pub offset: usize,
    /// Byte size of the member.
    pub size: usize,
    /// Where the offset comes from.
    pub provenance: Provenance,
    /// The C type of one element (`uint64_t`, `dmem_t *`, `tpb_t`, …).
    pub c_base: &'static str,
    /// Array bounds, outermost first; only the first `ndims` are meaningful. A bound of 0 is a
    /// flexible array member.
    pub dims: [usize; 3],
    /// How many array dimensions the member has (0 = scalar).
    pub ndims: usize,
}

impl FieldInfo {
    /// The array bounds as a slice.
    pub fn dims(&self) -> &[usize] {
        &self.dims[..self.ndims]
    }
    /// Total element count (1 for a scalar, product of bounds otherwise).
    pub fn count(&self) -> usize {
        self.dims()
            .iter()
            .product::<usize>()
            .max(if self.ndims == 0 { 1 } else { 0 })
    }
}

/// One ABI struct's layout.
#[derive(Copy, Clone, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StructInfo {
    /// Type name (libnrt's).
    pub name: &'static str,
    /// `sizeof`.
    pub size: usize,
    /// `alignof`.
    pub align: usize,
    /// The spec section that states it.
    pub section: &'static str,
    /// Members, sorted by offset, tiling `0..size` exactly.
    pub fields: &'static [FieldInfo],
}

impl StructInfo {
    /// Looks a member up by name.
    pub fn field(&self, name: &str) -> Option<&'static FieldInfo> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// One ABI enum.
#[derive(Copy, Clone, Debug)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct EnumInfo {
    /// Type name.
    pub name: &'static str,
    /// `sizeof` (all are C enums of 4 bytes).
    pub size: usize,
    /// The spec section that states it.
    pub section: &'static str,
    /// `(member name, value)` in value order.
    pub members: &'static [(&'static str, i64)],
}

/// Implemented by every struct declared with [`abi_struct!`](crate::abi_struct).
pub trait AbiStruct: Sized {
    /// The layout table.
    const INFO: StructInfo;
}

/// The C spelling of a Rust field type, for the generated header.
pub trait CType {
    /// C type of one element.
    const BASE: &'static str;
    /// Array bounds (outermost first).
    const DIMS: [usize; 3] = [0; 3];
    /// Number of meaningful entries in `DIMS`.
    const NDIMS: usize = 0;
}

/// Types whose all-zero bit pattern is a valid value ("zero is empty", docs/ARCHITECTURE.md
/// principle 2).
///
/// # Safety
/// Implementors guarantee that `core::mem::zeroed::<Self>()` is a valid, initialised value.
pub unsafe trait ZeroValid {}

/// Resets `v` to all-zero bytes, its empty value ("zero is empty", docs/ARCHITECTURE.md
/// principle 2), without building a zero value on the stack (the logical-core table is 16
/// KiB). The old value is not dropped (zero-valid tables hold plain data).
pub fn zero_in_place<T: ZeroValid>(v: &mut T) {
    // SAFETY: `v` is a unique reference, so these bytes are ours to write, in bounds and
    // aligned for one `T`; `T: ZeroValid` makes the all-zero pattern a valid `T`, so `v`
    // is valid again when the reference is next used.
    unsafe { core::ptr::write_bytes(v as *mut T, 0, 1) }
}

/// `r#type` → `type`: the C name of a member spelled as a Rust raw identifier.
pub const fn strip_raw(name: &'static str) -> &'static str {
    let b = name.as_bytes();
    if b.len() > 2 && b[0] == b'r' && b[1] == b'#' {
        let (_, rest) = b.split_at(2);
        match core::str::from_utf8(rest) {
            Ok(s) => s,
            Err(_) => name,
        }
    } else {
        name
    }
}

/// `true` when `fields` are sorted, contiguous from 0 and end exactly at `size` (no gap,
/// no overlap, no implicit padding). Used in each struct's compile-time assert.
pub const fn tiles(size: usize, fields: &[FieldInfo]) -> bool {
    let mut end = 0;
    let mut i = 0;
    while i < fields.len() {
        if fields[i].offset != end {
            return false;
        }
        end += fields[i].size;
        i += 1;
    }
    end == size
}

macro_rules! scalar_ctype {
    ($($t:ty => $c:literal),* $(,)?) => {$(
        impl CType for $t { const BASE: &'static str = $c; }
        // SAFETY: integers, bools-as-bytes and atomics of integers are valid when zero.
        unsafe impl ZeroValid for $t {}
    )*};
}

scalar_ctype! {
    u8 => "uint8_t", u16 => "uint16_t", u32 => "uint32_t", u64 => "uint64_t",
    i8 => "int8_t", i32 => "int32_t", i64 => "int64_t", usize => "size_t",
    core::sync::atomic::AtomicU8 => "uint8_t",
    core::sync::atomic::AtomicU32 => "uint32_t",
    crate::atomic::AtomicU64 => "uint64_t",
    *mut core::ffi::c_void => "void *",
    *mut core::ffi::c_char => "char *",
}

impl<T: CType, const N: usize> CType for [T; N] {
    const BASE: &'static str = T::BASE;
    const DIMS: [usize; 3] = [N, T::DIMS[0], T::DIMS[1]];
    const NDIMS: usize = T::NDIMS + 1;
}
// SAFETY: an array of zero-valid elements is zero-valid.
unsafe impl<T: ZeroValid, const N: usize> ZeroValid for [T; N] {}

/// Declares an ABI struct: the `#[repr(C)]` type, a compile-time assert block beside it (size,
/// alignment, every offset, exact tiling — plain `const _: () = assert!(…)`, which does what the
/// `static_assertions` crate did before const panics were stable, so that crate is not needed),
/// its [`AbiStruct`] table, its [`CType`] spellings and
/// its [`ZeroValid`] proof (every member must itself be zero-valid).
///
/// Each member is written `@ OFFSET vis name: Type = provenance,` in offset order.
#[macro_export]
macro_rules! abi_struct {
    (
        $(#[$m:meta])*
        pub struct $name:ident [size = $size:literal, align = $align:literal, section = $sec:literal] {
            $( $(#[$fm:meta])* @ $off:literal $vis:vis $field:ident : $ty:ty = $prov:ident, )*
        }
    ) => {
        $(#[$m])*
        #[repr(C, align($align))]
        #[allow(non_camel_case_types)]
        pub struct $name { $( $(#[$fm])* $vis $field: $ty, )* }

        impl $crate::abi::meta::AbiStruct for $name {
            const INFO: $crate::abi::meta::StructInfo = $crate::abi::meta::StructInfo {
                name: stringify!($name),
                size: $size,
                align: $align,
                section: $sec,
                fields: &[ $( $crate::abi::meta::FieldInfo {
                    name: $crate::abi::meta::strip_raw(stringify!($field)),
                    offset: $off,
                    size: core::mem::size_of::<$ty>(),
                    provenance: $crate::abi::meta::Provenance::$prov,
                    c_base: <$ty as $crate::abi::meta::CType>::BASE,
                    dims: <$ty as $crate::abi::meta::CType>::DIMS,
                    ndims: <$ty as $crate::abi::meta::CType>::NDIMS,
                }, )* ],
            };
        }

        // Layout checks beside the struct (docs/STYLE.md #5): a moved member fails the build.
        const _: () = {
            assert!(core::mem::size_of::<$name>() == $size, concat!(stringify!($name), ": size"));
            assert!(core::mem::align_of::<$name>() == $align, concat!(stringify!($name), ": align"));
            $( assert!(core::mem::offset_of!($name, $field) == $off,
                       concat!(stringify!($name), ".", stringify!($field), ": offset")); )*
            assert!($crate::abi::meta::tiles($size,
                        <$name as $crate::abi::meta::AbiStruct>::INFO.fields),
                    concat!(stringify!($name), ": members do not tile the struct"));
        };

        impl $crate::abi::meta::CType for $name { const BASE: &'static str = stringify!($name); }
        impl $crate::abi::meta::CType for *mut $name {
            const BASE: &'static str = concat!(stringify!($name), " *");
        }
        // SAFETY: a repr(C) struct whose every member is ZeroValid (checked just below) is
        // valid when all its bytes are zero; raw pointers are valid when null.
        unsafe impl $crate::abi::meta::ZeroValid for $name {}
        // SAFETY: null is a valid raw pointer value.
        unsafe impl $crate::abi::meta::ZeroValid for *mut $name {}
        $( $crate::__static_assertions::assert_impl_all!($ty: $crate::abi::meta::ZeroValid); )*
    };
}

/// Declares a C enum (`#[repr(u32)]`) with its [`EnumInfo`] table and a checked conversion
/// from the raw integer stored in struct members.
#[macro_export]
macro_rules! abi_enum {
    (
        $(#[$m:meta])*
        pub enum $name:ident [section = $sec:literal] {
            $( $(#[$vm:meta])* $var:ident = $val:literal, )*
        }
    ) => {
        $(#[$m])*
        #[repr(u32)]
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        #[allow(non_camel_case_types)]
        pub enum $name { $( $(#[$vm])* $var = $val, )* }

        impl $name {
            /// The enum's layout table (spec section in `section`).
            pub const INFO: $crate::abi::meta::EnumInfo = $crate::abi::meta::EnumInfo {
                name: stringify!($name),
                size: 4,
                section: $sec,
                members: &[ $( (stringify!($var), $val), )* ],
            };
            /// Converts a raw value; `None` for a value the enum does not have.
            pub const fn from_raw(v: u32) -> Option<Self> {
                match v { $( $val => Some($name::$var), )* _ => None }
            }
            /// The member's C name.
            pub const fn name(self) -> &'static str {
                match self { $( $name::$var => stringify!($var), )* }
            }
        }
        const _: () = assert!(core::mem::size_of::<$name>() == 4);
    };
}
