//! `ht_t`: libnrt's pow2-bucket chained hash table with nodes embedded in what they index
//! (spec §4.1). Reproduced on purpose, for its bytes: `model_db` links each `model_t` through
//! the `ht_node_t` at `model_t+7496`, so no node is ever allocated for a model.
//!
//! `ht_find` keeps libnrt's inverted return polarity (0 = FOUND, non-zero = absent; spec §4.3
//! QUIRK) inside this module; the rest of the crate uses [`find`], which returns an `Option`.

use core::ptr::{addr_of_mut, null_mut};

use crate::abi::meta::ZeroValid;
use crate::abi::{ht_node_t, ht_t};

/// An `ht_t` header followed by its bucket-head nodes: the flexible array made concrete.
#[repr(C)]
pub struct HtBuckets<const N: usize> {
    /// The header.
    pub hdr: ht_t,
    /// Bucket heads; a bucket's chain starts at `buckets[i].next`.
    pub buckets: [ht_node_t; N],
}

// SAFETY: both members are ZeroValid abi structs (an all-zero table is "not initialised").
unsafe impl<const N: usize> ZeroValid for HtBuckets<N> {}

const _: () = assert!(core::mem::offset_of!(HtBuckets<4>, buckets) == 32);
// The header comes first: a table's `*mut ht_t` (what libnrt's fields store) is the address of
// its `HtBuckets`, so a cast turns one into the other.
const _: () = assert!(core::mem::offset_of!(HtBuckets<4>, hdr) == 0);

impl<const N: usize> HtBuckets<N> {
    /// `ht_init(ht, N, NULL)` (spec §4.1) on a table the caller holds by `&mut`: sets
    /// `size` / `size_mask` and empties the count. Safe: the bucket array is `N` long by
    /// type, so every masked index is in bounds. The bucket heads are left as they are
    /// (a zeroed slot's are empty).
    pub fn init(&mut self) {
        const { assert!(N.is_power_of_two()) };
        self.hdr.size = N as u64;
        self.hdr.size_mask = N as u64 - 1;
        self.hdr.count = 0;
        self.hdr.free_node_fn = null_mut();
    }
}

/// `ht_init(ht, nbuckets, free_fn)`: sets size/size_mask. `n` must be the bucket array length
/// (a power of two).
///
/// # Safety
/// `ht` must point at an `ht_t` followed by `n` `ht_node_t`s, not shared with other threads.
pub unsafe fn ht_init(ht: *mut ht_t, n: usize) {
    debug_assert!(n.is_power_of_two());
    // SAFETY: caller guarantees exclusive access to a valid header.
    unsafe {
        (*ht).size = n as u64;
        (*ht).size_mask = n as u64 - 1;
        (*ht).count = 0;
        (*ht).free_node_fn = null_mut();
    }
}

/// The bucket-head node for `key`.
///
/// # Safety
/// `ht` is an initialised table (see [`ht_init`]).
unsafe fn bucket(ht: *mut ht_t, key: u64) -> *mut ht_node_t {
    // SAFETY: the buckets follow the header (HtBuckets layout); the index is masked.
    unsafe {
        let idx = (mix(key) & (*ht).size_mask) as usize;
        (addr_of_mut!((*ht).buckets) as *mut ht_node_t).add(idx)
    }
}

/// A cheap integer mix so sequential handles spread over the buckets.
const fn mix(k: u64) -> u64 {
    let k = k ^ (k >> 33);
    k.wrapping_mul(0xff51_afd7_ed55_8ccd) ^ (k >> 29)
}

/// libnrt's `ht_find`: **returns 0 when the key is FOUND** and non-zero when it is absent
/// (spec §4.3 QUIRK), writing the node to `out` when found.
///
/// # Safety
/// `ht` is initialised and the caller holds the table's lock.
pub unsafe fn ht_find(ht: *mut ht_t, key: u64, out: Option<&mut *mut ht_node_t>) -> i32 {
    // SAFETY: caller holds the lock; chains only link valid nodes.
    unsafe {
        let mut n = (*bucket(ht, key)).next;
        while !n.is_null() {
            if (*n).key == key {
                if let Some(o) = out {
                    *o = n;
                }
                return 0;
            }
            n = (*n).next;
        }
    }
    1
}

/// The sane face of [`ht_find`]: `Some(node)` when present.
///
/// # Safety
/// As [`ht_find`].
pub unsafe fn find(ht: *mut ht_t, key: u64) -> Option<*mut ht_node_t> {
    let mut node = null_mut();
    // SAFETY: this function's contract is `ht_find`'s (`ht` a live, initialised table under
    // its lock), and `node` is a local the call writes.
    (unsafe { ht_find(ht, key, Some(&mut node)) } == 0).then_some(node)
}

/// `ht_insert`: links the embedded `node` under `key` (the caller checked absence).
///
/// # Safety
/// Lock held; `node` is valid, not linked anywhere, and outlives its membership.
pub unsafe fn ht_insert(
    ht: *mut ht_t,
    key: u64,
    node: *mut ht_node_t,
    val: *mut core::ffi::c_void,
) {
    // SAFETY: the caller holds the table's lock and passes a live table (this function's
    // contract), so no other thread reads or links the bucket meanwhile; `node` is valid and
    // unlinked, so writing its members and making it the bucket's head aliases nothing.
    unsafe {
        let b = bucket(ht, key);
        (*node).key = key;
        (*node).val = val;
        (*node).bucket = mix(key) & (*ht).size_mask;
        (*node).next = (*b).next;
        (*b).next = node;
        (*ht).count += 1;
    }
}

/// `ht_remove`: unlinks the node of `key`; returns it (or null when absent).
///
/// # Safety
/// Lock held.
pub unsafe fn ht_remove(ht: *mut ht_t, key: u64) -> *mut ht_node_t {
    // SAFETY: caller holds the lock; we walk valid links.
    unsafe {
        let mut prev = bucket(ht, key);
        let mut n = (*prev).next;
        while !n.is_null() {
            if (*n).key == key {
                (*prev).next = (*n).next;
                (*n).next = null_mut();
                (*ht).count -= 1;
                return n;
            }
            prev = n;
            n = (*n).next;
        }
    }
    null_mut()
}

/// Calls `f` on every node (lock held by the caller; `f` must not modify the table).
///
/// # Safety
/// Lock held; table initialised.
pub unsafe fn for_each(ht: *mut ht_t, mut f: impl FnMut(*mut ht_node_t)) {
    // SAFETY: caller contract; bucket heads follow the header.
    unsafe {
        let base = addr_of_mut!((*ht).buckets) as *mut ht_node_t;
        for i in 0..(*ht).size as usize {
            let mut n = (*base.add(i)).next;
            while !n.is_null() {
                let next = (*n).next;
                f(n);
                n = next;
            }
        }
    }
}

/// Unlinks every node, calling `f` on each (after its `next` was read, so `f` may give the
/// node back), and leaves the table empty: the bucket heads point at no node and the count
/// is 0. Only non-empty bucket heads are written (a 1024-bucket table with a few nodes
/// dirties a few lines, not 48 KiB).
///
/// # Safety
/// As [`for_each`]: `ht` is initialised and the caller holds the table's lock.
pub unsafe fn drain(ht: *mut ht_t, mut f: impl FnMut(*mut ht_node_t)) {
    // SAFETY: caller holds the lock of an initialised table; the bucket heads follow the
    // header (HtBuckets layout) and there are `size` of them; chains only link valid nodes,
    // and each node's `next` is read before `f` gets it.
    unsafe {
        let base = addr_of_mut!((*ht).buckets) as *mut ht_node_t;
        for i in 0..(*ht).size as usize {
            let head = base.add(i);
            let mut n = (*head).next;
            if n.is_null() {
                continue;
            }
            (*head).next = null_mut();
            while !n.is_null() {
                let next = (*n).next;
                f(n);
                n = next;
            }
        }
        (*ht).count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::boxed::Box;
    use std::vec::Vec;

    #[test]
    fn polarity_insert_find_remove() {
        // SAFETY: HtBuckets is ZeroValid.
        let mut t: Box<HtBuckets<8>> = unsafe { Box::new_zeroed().assume_init() };
        t.init();
        assert_eq!((t.hdr.size, t.hdr.size_mask, t.hdr.count), (8, 7, 0));
        let ht = &mut t.hdr as *mut ht_t;
        let mut nodes: Vec<ht_node_t> = (0..20)
            // SAFETY: ht_node_t is ZeroValid.
            .map(|_| unsafe { core::mem::zeroed() })
            .collect();
        // SAFETY: single-threaded test over owned memory.
        unsafe {
            ht_init(ht, 8);
            assert_ne!(
                ht_find(ht, 7, None),
                0,
                "absent is non-zero (libnrt polarity)"
            );
            for (i, n) in nodes.iter_mut().enumerate() {
                ht_insert(ht, i as u64 + 1, n, null_mut());
            }
            assert_eq!((*ht).count, 20);
            assert_eq!(ht_find(ht, 7, None), 0, "found is 0 (libnrt polarity)");
            assert_eq!(find(ht, 7), Some(&mut nodes[6] as *mut _));
            assert_eq!(ht_remove(ht, 7), &mut nodes[6] as *mut _);
            assert!(find(ht, 7).is_none());
            assert!(ht_remove(ht, 7).is_null());
            let mut seen = 0;
            for_each(ht, |_| seen += 1);
            assert_eq!(seen, 19);
            let mut drained = 0;
            drain(ht, |_| drained += 1);
            assert_eq!((drained, (*ht).count), (19, 0));
            assert!(find(ht, 1).is_none(), "drained: no chain reaches a node");
            let mut left = 0;
            for_each(ht, |_| left += 1);
            assert_eq!(left, 0);
        }
    }
}
