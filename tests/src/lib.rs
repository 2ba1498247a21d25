//! Cross-crate integration tests of nrt-dmem (`tests/tests/*.rs`): concurrency on the std
//! shim, the C client against `libnrt.so`, scenarios.
