//! What every test of the `nrt-dmem` binary shares: the command, run in the default
//! environment (none of the runtime's settings, log filters or colour overrides leak in from
//! the developer's shell, so the tests describe what a newcomer sees).

use std::process::Command;

/// The `nrt-dmem` binary with the runtime's variables (`nrt_host::config::ENV_VARS`), the
/// legacy-NEFF switch, `RUST_LOG` and `CLICOLOR_FORCE` removed.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nrt-dmem"));
    for v in nrt_host::config::ENV_VARS.iter().chain(&[
        "RUST_LOG",
        "CLICOLOR_FORCE",
        "NEURON_RT_ALLOW_LEGACY_NEFF",
    ]) {
        c.env_remove(v);
    }
    c
}
