//! `nrt_get_vnc_memory_stats` (public API §2; spec §7.4 `dmem_get_memory_stats`).

use crate::global::{self, entry, put_sized};
use crate::status::NRT_STATUS;
use crate::types::nrt_vnc_memory_stats_t;
use nrt_core::LogicalCore;

/// Device memory of logical core `vnc`: bytes in use (every allocation booked to its
/// NeuronCores, on whichever HBM: tensors, models, shared scratchpad and libraries) and the
/// limit, the size of the HBM its cores allocate from by default (libnrt's
/// `aws_hal_get_hbm_size()`). Cores that share an HBM each report all of it, and allocations
/// placed on other HBMs count as used, so used can exceed the limit. Copies `min(stats_size_in, sizeof(nrt_vnc_memory_stats_t))` bytes to `stats` and
/// writes this library's `sizeof(nrt_vnc_memory_stats_t)` to `*stats_size_out` (when not
/// NULL), so callers built against an older or newer header stay compatible.
///
/// # Safety
/// `stats` is NULL or valid for writes of `stats_size_in` bytes; `stats_size_out` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_vnc_memory_stats(
    vnc: u32,
    stats: *mut nrt_vnc_memory_stats_t,
    stats_size_in: usize,
    stats_size_out: *mut usize,
) -> NRT_STATUS {
    entry("nrt_get_vnc_memory_stats", || {
        global::with_rt(|r| {
            let s = r.rt.nrt().ledger().memory_stats(LogicalCore::from_c(vnc))?;
            let v = nrt_vnc_memory_stats_t {
                bytes_used: s.bytes_used as usize,
                bytes_limit: s.bytes_limit as usize,
            };
            // SAFETY: caller contract.
            unsafe {
                put_sized(
                    &v,
                    stats,
                    stats_size_in,
                    stats_size_out,
                    ["stats", "stats_size_in"],
                )
            }
        })
    })
}
