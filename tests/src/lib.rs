//! nrt-tests
