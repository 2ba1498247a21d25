//! The state table of docs/STATES.md, CLI layer: the calls `nrt-dmem run` exposes as scenario
//! steps (`alloc_tensor` is `tensor_allocate`, `close` is `close`) answer in the init and the
//! closed state what the table says, read through the same parser as the Rust and C layers'
//! tests (`core-nostd/tests/states.rs`, `ffi/tests/states.rs`). The CLI has no step before
//! `init` (a scenario starts initialised), so the uninit column is the other layers' to check.

#[path = "../../core-nostd/tests/common/states.rs"]
mod states;

mod common;

/// The step that makes the call of table row `rust`, or None when the CLI has none.
fn step(rust: &str, n: usize) -> Option<String> {
    match rust {
        "tensor_allocate" => Some(format!("[[step]]\nalloc_tensor = \"t{n}\"\nsize = 64\n")),
        "close" => Some("[[step]]\nclose = true\n".into()),
        _ => None,
    }
}

/// The cell of `rust` in `state` (1 init, 2 closed).
fn cell(rust: &str, state: usize) -> &'static str {
    states::table()
        .into_iter()
        .find(|r| r.rust == Some(rust))
        .unwrap_or_else(|| panic!("docs/STATES.md has no `{rust}` row"))
        .cells[state]
}

#[test]
fn the_cli_answers_the_state_table_in_the_init_and_closed_states() {
    let mut toml = String::from("name = \"states\"\ndevice = \"sim:trn2\"\n\n");
    let mut n = 0;
    let mut emit = |rust: &str, state: usize, toml: &mut String| {
        n += 1;
        toml.push_str(&step(rust, n).expect("a CLI step"));
        let want = cell(rust, state);
        if want != "NRT_SUCCESS" {
            // A step that fails must be followed by the expectation of its status.
            toml.push_str(&format!("\n[[step]]\nexpect.status = \"{want}\"\n"));
        }
        toml.push('\n');
    };
    // init: a scenario starts initialised; close goes last.
    emit("tensor_allocate", 1, &mut toml);
    emit("close", 1, &mut toml);
    // closed: every call, then nothing may be left on the device.
    emit("tensor_allocate", 2, &mut toml);
    emit("close", 2, &mut toml);
    toml.push_str("[[step]]\nexpect.driver_bytes = 0\n");

    let dir = std::env::temp_dir().join(format!("nrt-cli-states-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("states.toml");
    std::fs::write(&file, &toml).unwrap();
    let o = common::bin()
        .arg("run")
        .arg(&file)
        .output()
        .expect("run nrt-dmem");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        o.status.success(),
        "scenario:\n{toml}\n--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
