//! Logging that compiles away (docs/STYLE.md #9, after embassy's `fmt.rs`): the core's log macros
//! route to `defmt`, to `log`, or to nothing, by feature. Declared first in `lib.rs` so every
//! module sees the macros.
#![allow(unused_macros)]

macro_rules! nrt_log {
    ($level:ident, $($arg:tt)*) => {{
        #[cfg(feature = "log")]
        { ::log::$level!(target: "nrt", $($arg)*); }
        #[cfg(feature = "defmt")]
        { ::defmt::$level!($($arg)*); }
        #[cfg(not(any(feature = "log", feature = "defmt")))]
        { let _ = || { let _ = ($($arg)*,); }; }
    }};
}

macro_rules! trace { ($($arg:tt)*) => { nrt_log!(trace, $($arg)*) }; }
macro_rules! debug { ($($arg:tt)*) => { nrt_log!(debug, $($arg)*) }; }
macro_rules! info { ($($arg:tt)*) => { nrt_log!(info, $($arg)*) }; }
macro_rules! warn { ($($arg:tt)*) => { nrt_log!(warn, $($arg)*) }; }
macro_rules! error { ($($arg:tt)*) => { nrt_log!(error, $($arg)*) }; }

/// Whether trace-level lines are kept: the `log` facade's level filter; with `defmt`, always
/// (its filter is applied at build time, inside the macro: the cold call behind this test
/// then runs and logs nothing); without a logger, never. Lets a hot path keep the arguments of
/// its trace line out of its own frame, in a cold call behind this test.
#[inline(always)]
pub(crate) fn trace_enabled() -> bool {
    #[cfg(feature = "log")]
    {
        ::log::log_enabled!(target: "nrt", ::log::Level::Trace)
    }
    #[cfg(all(feature = "defmt", not(feature = "log")))]
    {
        true
    }
    #[cfg(not(any(feature = "log", feature = "defmt")))]
    {
        false
    }
}
