//! What a state block keeps of a device OOM ([`crate::ctx::LastOom`] holds them): the failing
//! channel and why it failed (spec §3.2 `dml_driver_dump`). `oom` measures and reports them.

use crate::driver::PoolStats;

/// Why a device request failed, from the channel's figures at the moment of the report.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum OomCause {
    /// Fewer bytes free on the channel than the driver was asked for (`needed + emulation`).
    ChannelFull {
        /// HBM channel.
        hbm: u32,
        /// Bytes free there.
        free: u64,
        /// Bytes the request needs (page-rounded), in its own terms like every cause's.
        needed: u64,
        /// Bytes the runtime added in front to emulate the request's alignment (the
        /// alignment itself; 0 when the driver aligned natively): the driver was asked for
        /// `needed + emulation`.
        emulation: u64,
    },
    /// Enough bytes free, but no free block holds the request.
    NoBlock {
        /// HBM channel.
        hbm: u32,
        /// Bytes the request needs (page-rounded).
        needed: u64,
        /// The largest request like it that would succeed.
        largest: u64,
        /// Bytes free in the small-object region (part of the channel's free bytes).
        small_object_free: u64,
    },
    /// A free block is large enough, but none holds the request at its alignment.
    Alignment {
        /// HBM channel.
        hbm: u32,
        /// Bytes the request needs (page-rounded).
        needed: u64,
        /// The alignment asked for.
        align: u64,
        /// The largest request at that alignment that would succeed; `None` when the driver
        /// cannot measure it ([`Driver::hbm_stats_aligned`] refused).
        ///
        /// [`Driver::hbm_stats_aligned`]: crate::driver::Driver::hbm_stats_aligned
        largest_aligned: Option<u64>,
        /// The largest unaligned request that would succeed.
        largest_unaligned: u64,
    },
    /// The figures say the request fits: the driver refused for another reason (its
    /// allocation metadata is exhausted, or a fault was injected), or — for a table drawn
    /// after the fact ([`Ledger::dump`](crate::ledger::Ledger::dump) with an old error) — memory was freed since.
    Refused {
        /// HBM channel.
        hbm: u32,
        /// Bytes the request needs (page-rounded).
        needed: u64,
    },
}

/// The failing channel of a device OOM, as the report shows it, measured inside the failing
/// allocation (before any rollback): [`Ledger::last_oom_channel`](crate::ledger::Ledger::last_oom_channel).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FailingChannel {
    /// HBM channel.
    pub hbm: u32,
    /// The channel's figures in the request's terms (at its alignment when the driver can
    /// measure that; then `shown_align` is the alignment, else 0).
    pub shown: PoolStats,
    /// Alignment `shown` was measured at (0 = the page).
    pub shown_align: u64,
    /// Why it failed.
    pub cause: OomCause,
}
