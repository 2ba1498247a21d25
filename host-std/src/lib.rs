//! nrt-host
