//! Why a device allocation failed, in one line, and each HBM's line of the OOM report
//! (spec §3.2 GOTCHA "driver dump plus a 'running out of alignment boundaries' hint when
//! align != 0", §3.4 `dml_dump`; public ABI §3 "How the driver carves memory", §6 "users
//! cannot see the largest free block").
//!
//! Every figure here is in the terms of the failed request: "largest free block" is the
//! largest request of the same alignment that would succeed at the moment of the report, so
//! the failing channel's line never shows a block at least as large as the request that
//! failed (the figures come from [`Driver::hbm_stats_aligned`], which the simulated driver
//! answers exactly).
//!
#![deny(unsafe_code)]

use core::fmt;

use crate::cstr::mb;
#[cfg(doc)]
use crate::driver::Driver;
use crate::driver::{FreeHistogram, PoolStats, SMALL_OBJECT_MAX};
use crate::{Error, Nrt};

pub use crate::ctx::state::oom::{FailingChannel, OomCause};

/// A device request as the driver saw it (spec §3.2 step 4): natively aligned, or — when the
/// runtime emulates alignment — `size + align` bytes at the driver's own alignment.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FailedRequest {
    /// Bytes the caller asked for, rounded up to the page.
    pub size: u64,
    /// Alignment the caller asked for (0 = none).
    pub align: u64,
    /// Whether the driver was asked for the alignment (false: the emulation over-allocated).
    pub native_align: bool,
}

impl FailedRequest {
    /// The request for `size` bytes at `align` on a device with pages of `page` bytes (a
    /// power of two); `None` when the rounded sizes overflow (no pool could hold them).
    pub fn new(size: u64, align: u64, native_align: bool, page: u64) -> Option<Self> {
        let r = FailedRequest {
            size: round_up(size, page)?,
            align,
            native_align,
        };
        round_up(r.size.checked_add(r.emulation_extra())?, page)?;
        Some(r)
    }

    /// Bytes the emulation adds in front (0 when the driver aligns natively).
    fn emulation_extra(&self) -> u64 {
        if self.native_align {
            0
        } else {
            self.align
        }
    }

    /// Bytes the driver was asked for, before its page rounding.
    pub fn driver_size(&self) -> u64 {
        self.size + self.emulation_extra()
    }

    /// Alignment the driver was asked for (0 = its page).
    pub fn driver_align(&self) -> u64 {
        if self.native_align {
            self.align
        } else {
            0
        }
    }

    /// `s` (driver figures measured at [`Self::driver_align`]) in the request's terms: with
    /// emulated alignment, each region's largest request less the `align` bytes the emulation
    /// adds (the small-object region's first capped at the [`SMALL_OBJECT_MAX`] it serves).
    pub fn in_request_terms(&self, s: &PoolStats) -> PoolStats {
        let x = self.emulation_extra();
        if x == 0 {
            return *s;
        }
        PoolStats {
            largest_free: s.largest_free.saturating_sub(x),
            small_object_largest_free: s
                .small_object_largest_free
                .min(SMALL_OBJECT_MAX)
                .saturating_sub(x),
            ..*s
        }
    }

    /// The largest request of this alignment that `s` (driver figures) says would succeed.
    fn largest_like_this(&self, s: &PoolStats) -> u64 {
        self.in_request_terms(s).largest_request()
    }
}

fn round_up(v: u64, page: u64) -> Option<u64> {
    Some(v.checked_add(page - 1)? & !(page - 1))
}

impl OomCause {
    /// Classifies a failure of `req` on `hbm` from the channel's unaligned figures
    /// (`pool_stats`) and, for an aligned request, its figures at the driver's alignment
    /// (`hbm_stats_aligned`; `None` when the driver cannot tell).
    pub fn classify(
        hbm: u32,
        req: &FailedRequest,
        plain: &PoolStats,
        at_align: Option<&PoolStats>,
    ) -> Self {
        let needed = req.size;
        if plain.free < req.driver_size() {
            return OomCause::ChannelFull {
                hbm,
                free: plain.free,
                needed,
                emulation: req.emulation_extra(),
            };
        }
        let unaligned = FailedRequest {
            align: 0,
            native_align: true,
            ..*req
        };
        let largest_unaligned = unaligned.largest_like_this(plain);
        if largest_unaligned < needed {
            return OomCause::NoBlock {
                hbm,
                needed,
                largest: largest_unaligned,
                small_object_free: plain.small_object_free,
            };
        }
        if req.align != 0 {
            let aligned = match (req.native_align, at_align) {
                (true, Some(s)) => Some(req.largest_like_this(s)),
                (true, None) => None,
                (false, _) => Some(req.largest_like_this(plain)),
            };
            match aligned {
                Some(largest_aligned) if largest_aligned >= needed => {}
                largest_aligned => {
                    return OomCause::Alignment {
                        hbm,
                        needed,
                        align: req.align,
                        largest_aligned,
                        largest_unaligned,
                    }
                }
            }
        }
        OomCause::Refused { hbm, needed }
    }
}

impl fmt::Display for OomCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            OomCause::ChannelFull {
                hbm,
                free,
                needed,
                emulation: 0,
            } => write!(
                f,
                "why: HBM {hbm} is full: {}MB free, {}MB needed",
                mb(free),
                mb(needed)
            ),
            // The driver's figure, and where it comes from: the request's own size is what
            // the error line and the plan show.
            OomCause::ChannelFull {
                hbm,
                free,
                needed,
                emulation,
            } => write!(
                f,
                "why: HBM {hbm} is full: {}MB free, {}MB needed ({}MB at a \
                 {emulation}-byte alignment, plus the {}MB the runtime over-allocates to \
                 emulate it)",
                mb(free),
                mb(needed.saturating_add(emulation)),
                mb(needed),
                mb(emulation)
            ),
            OomCause::NoBlock {
                hbm,
                needed,
                largest,
                small_object_free,
            } => write!(
                f,
                "why: HBM {hbm} has no free block of {}MB: largest free block {}MB; the \
                 rest of its free bytes are fragments, {}MB of them in the small-object \
                 region (the first choice of requests <= 512KB)",
                mb(needed),
                mb(largest),
                mb(small_object_free)
            ),
            OomCause::Alignment {
                hbm,
                needed,
                align,
                largest_aligned,
                largest_unaligned,
            } => {
                write!(
                    f,
                    "why: alignment: HBM {hbm} has free blocks of up to {}MB, but ",
                    mb(largest_unaligned)
                )?;
                match largest_aligned {
                    Some(l) => write!(
                        f,
                        "the largest {align}-byte aligned request it can take is {}MB",
                        mb(l)
                    )?,
                    None => write!(
                        f,
                        "none took it at a {align}-byte alignment (this driver cannot measure \
                         aligned blocks)"
                    )?,
                }
                write!(
                    f,
                    ", {}MB needed; the device may be running out of alignment boundaries",
                    mb(needed)
                )
            }
            OomCause::Refused { hbm, needed } => write!(
                f,
                "why: the driver refused {}MB on HBM {hbm} although a free block holds it \
                 now (its allocation metadata is exhausted, a fault was injected, or memory \
                 was freed since the failure)",
                mb(needed)
            ),
        }
    }
}

/// One HBM's line of the OOM report: free bytes, the largest free block (the largest request
/// above 512 KiB that would succeed; with `align`, the largest such request at that
/// alignment), the small-object region's own figures, fragmentation and allocations.
pub fn write_hbm_line(w: &mut dyn fmt::Write, hbm: u32, s: &PoolStats, align: u64) -> fmt::Result {
    let permille = s.fragmentation_permille();
    write!(
        w,
        "  HBM {}: {}MB free of {}MB allocatable, largest free block {}MB",
        hbm,
        mb(s.free),
        mb(s.capacity),
        mb(s.largest_free)
    )?;
    if align != 0 {
        write!(w, " at {align}-byte alignment")?;
    }
    writeln!(
        w,
        ", small-object region (requests <= 512KB) {}MB free, largest {}MB, \
         fragmentation {}.{}%, {} allocations",
        mb(s.small_object_free),
        mb(s.small_object_largest_free),
        permille / 10,
        permille % 10,
        s.allocations
    )
}

/// The free blocks of one HBM by size class, as the OOM report and `stats` print them:
/// `    free blocks: main 4KB-8KB x3 (12KB), 16MB-32MB x1 (20MB); small-object none`,
/// classes with no block left out (fragmentation made visible).
pub fn write_free_histogram(
    w: &mut dyn fmt::Write,
    main: &FreeHistogram,
    small: &FreeHistogram,
) -> fmt::Result {
    w.write_str("    free blocks:")?;
    for (k, (label, h)) in [("main", main), ("small-object", small)]
        .into_iter()
        .enumerate()
    {
        write!(w, "{} {label}", if k == 0 { "" } else { ";" })?;
        if h.total_blocks() == 0 {
            w.write_str(" none")?;
            continue;
        }
        let mut first = true;
        for i in (0..FreeHistogram::CLASSES).filter(|i| h.blocks[*i] > 0) {
            let (lo, hi) = (FreeHistogram::class_min(i), FreeHistogram::class_min(i + 1));
            write!(
                w,
                "{} {}-{} x{} ({})",
                if first { "" } else { "," },
                Size(lo),
                Size(hi),
                h.blocks[i],
                Size(h.bytes[i])
            )?;
            first = false;
        }
    }
    w.write_str("\n")
}

/// A byte count in the report's short units (`4KB`, `16MB`, `2GB`; exact when round).
struct Size(u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 4] = [
            (1 << 40, "TB"),
            (1 << 30, "GB"),
            (1 << 20, "MB"),
            (1 << 10, "KB"),
        ];
        for (u, n) in UNITS {
            if self.0 >= u {
                return if self.0.is_multiple_of(u) {
                    write!(f, "{}{n}", self.0 / u)
                } else {
                    write!(f, "{}{n}", crate::cstr::Fixed3(self.0, u))
                };
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl Nrt<'_> {
    /// The failing channel of `e` when it is a device OOM on `dev`, measured now (the OOM
    /// path calls this inside the failing allocation, before anything is rolled back).
    pub(crate) fn failing_channel(
        &self,
        call: &impl crate::ctx::InCall,
        dev: u32,
        e: &Error,
    ) -> Option<FailingChannel> {
        let Error::DeviceOom {
            size,
            align,
            device,
            hbm,
            emulated,
            ..
        } = *e
        else {
            return None;
        };
        if device != dev {
            return None;
        }
        let g = self.dev_geom(call, dev);
        // How the failed request was actually issued (recorded at the failure): the latch
        // may have moved since, and reading it here could latch and warn.
        let native = !emulated;
        let req = FailedRequest::new(size, align, native, g.page_size.max(1))?;
        let plain = self.pool_stats_checked(dev, false, hbm).ok()?;
        let at_align = if req.driver_align() != 0 {
            self.drv
                .hbm_stats_aligned(dev, hbm, req.driver_align())
                .ok()
                .filter(|s| s.check().is_ok())
        } else {
            None
        };
        let (shown, shown_align) = match (native, at_align) {
            (true, Some(s)) => (s, align),
            (true, None) => (plain, 0),
            (false, _) => (req.in_request_terms(&plain), align),
        };
        Some(FailingChannel {
            hbm,
            shown,
            shown_align,
            cause: OomCause::classify(hbm, &req, &plain, at_align.as_ref()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::string::String;

    const P: u64 = 4096;
    const MIB: u64 = 1 << 20;

    fn stats(free: u64, largest: u64, small_free: u64, small_largest: u64) -> PoolStats {
        PoolStats {
            capacity: 1 << 30,
            free,
            largest_free: largest,
            allocations: 3,
            fragmented_free: 0,
            small_object_free: small_free,
            small_object_largest_free: small_largest,
        }
    }

    fn req(size: u64, align: u64, native: bool) -> FailedRequest {
        FailedRequest::new(size, align, native, P).unwrap()
    }

    #[test]
    fn each_cause_is_told_apart() {
        fn c(r: &FailedRequest, plain: &PoolStats, at: Option<&PoolStats>) -> OomCause {
            OomCause::classify(2, r, plain, at)
        }
        let big = req(100 * MIB, 0, true);
        assert_eq!(
            c(&big, &stats(50 * MIB, 40 * MIB, 0, 0), None),
            OomCause::ChannelFull {
                hbm: 2,
                free: 50 * MIB,
                needed: 100 * MIB,
                emulation: 0
            }
        );
        // Emulated: the channel is measured against `size + align`, the request stays its
        // own size (the mix-up of a 1 GiB request reported as 17 GiB needed, 17 GiB missing).
        let gib = 1024 * MIB;
        let one_at_16 = req(gib, 16 * gib, false);
        let full = c(&one_at_16, &stats(13 * gib, 13 * gib, 0, 0), None);
        assert_eq!(
            full,
            OomCause::ChannelFull {
                hbm: 2,
                free: 13 * gib,
                needed: gib,
                emulation: 16 * gib
            }
        );
        let why = std::format!("{full}");
        assert!(
            why.contains(
                "13312.000MB free, 17408.000MB needed (1024.000MB at a 17179869184-byte \
                 alignment, plus the 16384.000MB the runtime over-allocates to emulate it)"
            ),
            "{why}"
        );
        // Natively aligned, the driver is asked for the request's own size.
        assert!(matches!(
            c(&req(gib, 16 * gib, true), &stats(MIB, MIB, 0, 0), None),
            OomCause::ChannelFull { needed, emulation: 0, .. } if needed == gib
        ));
        // 300 MiB free, but the small-object region's 200 MiB block does not serve 100 MiB
        assert_eq!(
            c(
                &big,
                &stats(300 * MIB, 60 * MIB, 200 * MIB, 200 * MIB),
                None
            ),
            OomCause::NoBlock {
                hbm: 2,
                needed: 100 * MIB,
                largest: 60 * MIB,
                small_object_free: 200 * MIB
            }
        );
        // a small request: both regions count, the region's block capped at 512 KiB
        let small = req(300 * 1024, 0, true);
        assert_eq!(
            c(&small, &stats(MIB, 64 * 1024, MIB, 256 * 1024), None),
            OomCause::NoBlock {
                hbm: 2,
                needed: 300 * 1024,
                largest: 256 * 1024,
                small_object_free: MIB
            }
        );
        let aligned = req(100 * MIB, 64 * MIB, true);
        let plain = stats(300 * MIB, 150 * MIB, 0, 0);
        assert_eq!(
            c(&aligned, &plain, Some(&stats(300 * MIB, 90 * MIB, 0, 0))),
            OomCause::Alignment {
                hbm: 2,
                needed: 100 * MIB,
                align: 64 * MIB,
                largest_aligned: Some(90 * MIB),
                largest_unaligned: 150 * MIB
            }
        );
        assert_eq!(
            c(&aligned, &plain, Some(&plain)),
            OomCause::Refused {
                hbm: 2,
                needed: 100 * MIB
            }
        );
        // emulated: size + align from the unaligned figures
        let emulated = req(100 * MIB, 64 * MIB, false);
        assert!(matches!(
            c(&emulated, &plain, None),
            OomCause::Alignment {
                largest_aligned,
                ..
            } if largest_aligned == Some(86 * MIB)
        ));
        assert_eq!(emulated.driver_size(), 164 * MIB);
        assert_eq!(FailedRequest::new(u64::MAX - 10, 0, true, P), None);
        assert_eq!(
            FailedRequest::new(u64::MAX - 2 * P, 1 << 20, false, P),
            None
        );
    }

    #[test]
    fn the_lines_name_the_cause_and_both_regions() {
        let mut out = String::new();
        let s = stats(300 * MIB, 60 * MIB, 200 * MIB, 100 * MIB);
        write_hbm_line(&mut out, 1, &s, 1 << 20).unwrap();
        assert!(
            out.contains("largest free block 60.000MB at 1048576-byte alignment"),
            "{out}"
        );
        assert!(
            out.contains(
                "small-object region (requests <= 512KB) 200.000MB free, largest 100.000MB"
            ),
            "{out}"
        );
        let why = OomCause::Alignment {
            hbm: 1,
            needed: MIB,
            align: 4 * MIB,
            largest_aligned: None,
            largest_unaligned: 2 * MIB,
        };
        assert!(std::format!("{why}").contains("running out of alignment boundaries"));
    }
}
