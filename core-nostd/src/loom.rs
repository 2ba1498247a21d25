//! The one loom facade (cordyceps's `src/loom.rs`, docs/STYLE.md #15): how the core's concurrency
//! protocols are written once and model-checked as written.
//!
//! The protocols — the handle pin protocol ([`crate::handle`]), the in-flight call gate
//! ([`crate::sync::ShardedGate`]), the model-handle counter and the unload drain
//! ([`crate::model::mint_handle`], [`crate::model::drain_with`]) — are generic over [`Atomic`],
//! and state their memory orderings themselves. The runtime runs them on `core`'s atomics: the
//! words they work on sit in the ABI structs (`dmem_t.generation` @68, `ref_count` @128, …)
//! and in zeroed state blocks, so they must stay `core::sync::atomic` types (fixed layout,
//! `const` constructors, all-zero valid) whatever the build. The loom models
//! (`core-nostd/tests/loom.rs`, `cargo xtask loom`) run the very same functions on loom's
//! atomics, which [`atomic`] re-exports under `cfg(loom)`; [`Atomic`] is implemented once for
//! each, by one macro.

pub use core::sync::atomic::Ordering;

/// The atomics a model is built from: loom's under `cfg(loom)` (the loom tests), `core`'s
/// otherwise. The runtime's own words are always `core`'s (see the module docs).
pub mod atomic {
    #[cfg(not(loom))]
    pub use crate::atomic::AtomicU64;
    #[cfg(loom)]
    pub use ::loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
    pub use core::sync::atomic::Ordering;
    #[cfg(not(loom))]
    pub use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};
}

/// The operations the core's protocols use on one atomic integer word, under the inherent
/// methods' names and meaning (`core::sync::atomic::AtomicU32::load`, …), so a protocol
/// written over `W: Atomic` reads like plain atomics code.
pub trait Atomic: Sync {
    /// The integer held.
    type Int: Copy + Eq;
    /// `load`.
    fn load(&self, order: Ordering) -> Self::Int;
    /// `store`.
    fn store(&self, v: Self::Int, order: Ordering);
    /// `compare_exchange_weak`.
    fn compare_exchange_weak(
        &self,
        current: Self::Int,
        new: Self::Int,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Self::Int, Self::Int>;
    /// `fetch_add` (wrapping); the previous value.
    fn fetch_add(&self, v: Self::Int, order: Ordering) -> Self::Int;
    /// `fetch_sub` (wrapping); the previous value.
    fn fetch_sub(&self, v: Self::Int, order: Ordering) -> Self::Int;
    /// `fetch_or`; the previous value.
    fn fetch_or(&self, v: Self::Int, order: Ordering) -> Self::Int;
    /// `fetch_and`; the previous value.
    fn fetch_and(&self, v: Self::Int, order: Ordering) -> Self::Int;
}

/// [`Atomic`] for atomic types whose inherent methods have the std signatures.
macro_rules! impl_atomic {
    ($($a:ty => $int:ty),* $(,)?) => {$(
        impl Atomic for $a {
            type Int = $int;
            #[inline(always)]
            fn load(&self, order: Ordering) -> $int {
                <$a>::load(self, order)
            }
            #[inline(always)]
            fn store(&self, v: $int, order: Ordering) {
                <$a>::store(self, v, order)
            }
            #[inline(always)]
            fn compare_exchange_weak(
                &self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$int, $int> {
                <$a>::compare_exchange_weak(self, current, new, success, failure)
            }
            #[inline(always)]
            fn fetch_add(&self, v: $int, order: Ordering) -> $int {
                <$a>::fetch_add(self, v, order)
            }
            #[inline(always)]
            fn fetch_sub(&self, v: $int, order: Ordering) -> $int {
                <$a>::fetch_sub(self, v, order)
            }
            #[inline(always)]
            fn fetch_or(&self, v: $int, order: Ordering) -> $int {
                <$a>::fetch_or(self, v, order)
            }
            #[inline(always)]
            fn fetch_and(&self, v: $int, order: Ordering) -> $int {
                <$a>::fetch_and(self, v, order)
            }
        }
    )*};
}

impl_atomic!(
    core::sync::atomic::AtomicU32 => u32,
    crate::atomic::AtomicU64 => u64,
);

#[cfg(loom)]
impl_atomic!(
    ::loom::sync::atomic::AtomicU32 => u32,
    ::loom::sync::atomic::AtomicU64 => u64,
);
