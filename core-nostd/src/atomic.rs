//! The 64-bit atomic the core's counters, reference words and ledger rows use: core's
//! `AtomicU64` where the target has native 64-bit atomics, `portable-atomic`'s otherwise (its
//! lock-based fallback on thumbv7em, riscv32imac and the like), or everywhere with the
//! `portable-atomic` feature (how the tests run that path on a host target). Same size and
//! alignment as a `u64` either way, so the ABI structs keep libnrt's layout (spec §3.4).

#[cfg(all(target_has_atomic = "64", not(feature = "portable-atomic")))]
pub use core::sync::atomic::AtomicU64;
#[cfg(any(not(target_has_atomic = "64"), feature = "portable-atomic"))]
pub use portable_atomic::AtomicU64;

const _: () = assert!(core::mem::size_of::<AtomicU64>() == 8);
const _: () = assert!(core::mem::align_of::<AtomicU64>() == 8);

#[cfg(test)]
mod tests {
    extern crate std;
    use super::AtomicU64;
    use core::sync::atomic::Ordering;

    /// The word the core uses is the one the build promises (`portable-atomic`'s with the
    /// feature, or on a target without 64-bit atomics) and behaves as a 64-bit atomic under
    /// contention: no lost update, no torn value across the 32-bit halves.
    #[test]
    fn the_64_bit_atomic_is_whole_under_contention() {
        let name = core::any::type_name::<AtomicU64>();
        let portable = cfg!(any(
            not(target_has_atomic = "64"),
            feature = "portable-atomic"
        ));
        assert_eq!(name.starts_with("portable_atomic::"), portable, "{name}");
        static W: AtomicU64 = AtomicU64::new(u32::MAX as u64 - 1000);
        let threads: std::vec::Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..10_000 {
                        W.fetch_add(1, Ordering::AcqRel);
                        let v = W.load(Ordering::Acquire);
                        assert!(v >= u32::MAX as u64 - 1000, "torn read {v:#x}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(W.load(Ordering::Acquire), u32::MAX as u64 - 1000 + 40_000);
        let w = AtomicU64::new(u64::MAX);
        assert_eq!(w.fetch_add(1, Ordering::Relaxed), u64::MAX);
        assert_eq!(
            w.compare_exchange(0, 7, Ordering::AcqRel, Ordering::Acquire),
            Ok(0)
        );
        assert_eq!(w.fetch_max(1 << 40, Ordering::AcqRel), 7);
        assert_eq!(w.into_inner(), 1 << 40);
    }
}
