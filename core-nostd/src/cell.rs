//! [`ZeroedCell`]: a `static` holding a zero-valid block (the [`crate::CoreState`], a
//! [`crate::sim::SimDevice`]) that hands out its one `&'static mut` safely, once — static-cell's
//! `StaticCell` (docs/STYLE.md #18) for the core's all-zero blocks, so an integrator without a heap
//! writes no `static mut` and no `unsafe` (as `tests/trials/firmware` shows).
//!
//! The value starts as all-zero bytes (in `.bss`: nothing is built at compile time or on the
//! stack), which [`ZeroValid`] promises is a valid value; [`ZeroedCell::take`] marks the cell
//! taken with one atomic swap, so at most one `&mut` to the value ever exists.

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::abi::meta::ZeroValid;

/// A zero-initialised `static` whose value is taken once, as `&'static mut T`.
///
/// ```
/// use nrt_core::cell::ZeroedCell;
/// use nrt_core::CoreState;
///
/// static STATE: ZeroedCell<CoreState> = ZeroedCell::new();
///
/// let state: &'static CoreState = STATE.take().expect("first take");
/// assert!(STATE.take().is_none(), "a second take gets nothing");
/// # let _ = state;
/// ```
pub struct ZeroedCell<T> {
    taken: AtomicBool,
    value: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: the cell gives no access to the value through `&self` except the one `&mut T` that
// `take` hands out, to exactly one caller (the atomic swap); that caller may be on another
// thread than the one that declared the static, so `T: Send` is what sharing the cell needs.
unsafe impl<T: Send> Sync for ZeroedCell<T> {}

impl<T: ZeroValid> ZeroedCell<T> {
    /// An untaken cell holding an all-zero `T` (a `const fn`, for `static`s).
    pub const fn new() -> Self {
        ZeroedCell {
            taken: AtomicBool::new(false),
            value: UnsafeCell::new(MaybeUninit::zeroed()),
        }
    }

    /// The value, the first time; `None` on every later call (from any thread).
    // `&mut` from `&self` is the point (static-cell's `StaticCell::init` does the same): the
    // atomic `taken` flag, not the borrow checker, makes it the only reference.
    #[allow(clippy::mut_from_ref)]
    pub fn take(&'static self) -> Option<&'static mut T> {
        if self.taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        // SAFETY: the swap above returned `false` to this call only, so no other reference to
        // the value exists or will be made through the cell; the value is all-zero bytes
        // (`MaybeUninit::zeroed`), a valid `T` by its `ZeroValid` contract; and `self` is
        // `'static`, so the borrow lives as long as the storage.
        Some(unsafe { (*self.value.get()).assume_init_mut() })
    }

    /// Whether [`Self::take`] has handed the value out.
    pub fn is_taken(&self) -> bool {
        self.taken.load(Ordering::Acquire)
    }
}

// A cell is a `static` shared by every thread, and hands out its one `&mut` because it is the
// only cell holding the value: a clone would be a second `&mut` to it. A value that may not
// move to another thread (`!Send`) makes the cell not `Sync`.
static_assertions::assert_impl_all!(ZeroedCell<u64>: Sync);
static_assertions::assert_not_impl_any!(ZeroedCell<u64>: Clone, Copy);
static_assertions::assert_not_impl_any!(ZeroedCell<*mut u8>: Sync);

impl<T: ZeroValid> Default for ZeroedCell<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::ZeroedCell;

    #[test]
    fn the_value_is_zero_and_handed_out_once() {
        static C: ZeroedCell<[u64; 4]> = ZeroedCell::new();
        assert!(!C.is_taken());
        let v = C.take().unwrap();
        assert_eq!(*v, [0; 4]);
        v[1] = 7;
        assert!(C.is_taken());
        assert!(C.take().is_none());
        assert_eq!(v[1], 7);
    }
}
