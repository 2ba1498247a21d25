//! The ledger's state beside the tree's rows, and the padded per-core lock and channel
//! counters the state block embeds (spec §3.4). The steps that book and read them are
//! `ledger`'s.

use crate::abi::*;
use crate::atomic::AtomicU64;

/// The ledger's state beside the tree's rows (state split by domain), as a
/// [`crate::ctx::CoreState`] holds it. Valid when all-zero.
pub(crate) struct LedgerPool {
    /// The last device OOM (spec §3.2 `dml_driver_dump`), in the lock that guards it (a lock
    /// that holds its data). The core's own `nrt_mutex_t` rather than a
    /// [`crate::sync::DataLock`]: its holder writes the OOM table, which asks the driver for
    /// pool figures, and this lock's waits relax instead of spinning.
    pub(crate) oom: lock_api::Mutex<nrt_mutex_t, crate::ctx::LastOom>,
}

/// A lock on its own cache line: one core's ledger lock
/// ([`crate::ctx::DevExt::ledger_locks`]), one stripe of the execute data lock
/// (`TensorPool::exec_data_locks`). Valid when all-zero (an unlocked lock).
///
/// Padded to [`crate::sync::LINE_STRIDE`] bytes rather than aligned: an over-aligned member
/// would over-align `CoreState`, and `Box::new_zeroed` then memsets all of it instead of
/// using calloc's lazily zeroed pages.
#[repr(C)]
pub(crate) struct CoreLock(
    pub(crate) crate::abi::nrt_mutex_t,
    [u8; crate::sync::LINE_STRIDE - core::mem::size_of::<crate::abi::nrt_mutex_t>()],
);

/// One core's device bytes per HBM channel, on its own cache line
/// ([`crate::ctx::DevExt::hbm_nc`]), padded like [`CoreLock`]. Valid when all-zero.
#[repr(C)]
pub(crate) struct CoreChannels(
    pub(crate) [AtomicU64; constants::MAX_HBM_CHANNELS],
    [u8; crate::sync::LINE_STRIDE - 8 * constants::MAX_HBM_CHANNELS],
);
