//! Cross-crate integration tests of nrt-dmem (`tests/tests/*.rs`): concurrency on the std
//! shim, the C client against `libnrt.so`, scenarios.

/// `o` when the command succeeded; otherwise a test failure showing `what`, the exit status and
/// both output streams (the C client and the installed-prefix tests run programs this way).
pub fn check_output(what: &str, o: std::process::Output) -> std::process::Output {
    assert!(
        o.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}
