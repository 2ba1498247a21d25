//! nrt-ffi
