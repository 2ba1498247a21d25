//! The `nrt-dmem` binary as a person runs it: the demo, the shipped scenarios (passing and
//! failing), the memory report's JSON, bad input, a missing device and unknown flags.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::bin;

fn run(args: &[&str]) -> Output {
    run_with(&[], args)
}

/// Runs with the variables `env` set (on top of the cleared defaults).
fn run_with(env: &[(&str, &str)], args: &[&str]) -> Output {
    cmd_with(env, args).output().expect("run nrt-dmem")
}

/// The command `run_with` runs.
fn cmd_with(env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut c = bin();
    c.envs(env.iter().copied()).args(args);
    c
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Runs `cmd`, which must fail on its input (exit 2); returns its stderr.
fn input_error(cmd: &mut Command) -> String {
    let o = cmd.output().expect("run nrt-dmem");
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "stdout:\n{out}\nstderr:\n{err}");
    err
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/scenarios")
}

fn scenario(rel: &str) -> String {
    examples().join(rel).to_string_lossy().into_owned()
}

#[test]
fn demo_shows_every_section_and_ends_with_zero_bytes() {
    let o = run(&["demo"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    for section in [
        "1. Load models",
        "2. IO tensors on every logical core",
        "3. Unload bert-base",
        "4. Out of memory",
        "5. Tear down",
    ] {
        assert!(out.contains(section), "missing {section:?}:\n{out}");
    }
    assert!(out.contains("bytes match"), "{out}");
    assert!(out.contains("= bert-base's footprint"), "{out}");
    assert!(out.contains("NRT_RESOURCE"), "{out}");
    assert!(out.contains("Failed to allocate"), "the OOM table:\n{out}");
    assert!(out.contains("largest free block"), "{out}");
    assert!(!out.contains('✗'), "a demo check failed:\n{out}");
    let last = out.lines().last().unwrap_or_default();
    assert!(last.contains("0 bytes left in the driver"), "{last}");
    // The OOM table was written to a file whose path is printed.
    let path = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("table also written to "))
        .expect("the OOM file path");
    let table = std::fs::read_to_string(path).expect("the OOM file exists");
    assert!(table.contains("Failed to allocate"), "{table}");
    let _ = std::fs::remove_file(path);
    // One screen: 60 lines, plus the OOM table's one "why:" line and its free-block line per
    // HBM channel (four on trn2).
    assert!(
        out.lines().count() <= 65,
        "one screen: {} lines",
        out.lines().count()
    );
    assert!(out.contains("   │ why: "), "the OOM table says why:\n{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("│     free blocks: main "))
            .count(),
        4,
        "one free-block line per HBM:\n{out}"
    );
    // Not a terminal: no colour codes.
    assert!(!out.contains('\u{1b}'), "{out}");
}

#[test]
fn shipped_scenarios_pass() {
    let mut n = 0;
    for e in std::fs::read_dir(examples()).expect("examples/scenarios") {
        let p = e.expect("dir entry").path();
        if p.extension().and_then(|x| x.to_str()) != Some("toml") {
            continue;
        }
        let o = bin().arg("run").arg(&p).output().expect("run");
        let (out, err) = text(&o);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}:\nstdout:\n{out}\nstderr:\n{err}",
            p.display()
        );
        assert!(out.contains("PASS"), "{out}");
        n += 1;
    }
    assert!(n >= 3, "at least three shipped scenarios, found {n}");
}

#[test]
fn failing_scenario_exits_nonzero_with_the_reason() {
    let o = run(&["run", &scenario("failing/wrong-expectation.toml")]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("FAIL"), "{out}");
    assert!(out.contains("step 2 (line 11)"), "{out}");
    assert!(out.contains("expected at most 100 MiB"), "{out}");
}

#[test]
fn stats_json_has_neuron_monitor_keys() {
    let o = run(&["stats", "--json"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stats --json is JSON");
    let used = &v["memory_used"]["neuron_runtime_used_bytes"];
    assert!(
        used["host"].is_u64() && used["neuron_device"].as_u64() > Some(0),
        "{used}"
    );
    let host = &used["usage_breakdown"]["host"];
    for k in ["application_memory", "constants", "dma_buffers", "tensors"] {
        assert!(host[k].is_u64(), "host.{k}: {host}");
    }
    let cores = used["usage_breakdown"]["neuroncore_memory_usage"]
        .as_object()
        .expect("neuroncore_memory_usage");
    assert_eq!(cores.len(), 4, "trn2 at LNC 2: four logical cores");
    let mut sum = 0;
    for (_, c) in cores {
        for k in [
            "constants",
            "model_code",
            "model_shared_scratchpad",
            "runtime_memory",
            "tensors",
        ] {
            sum += c[k].as_u64().unwrap_or_else(|| panic!("{k} in {c}"));
        }
    }
    assert_eq!(
        Some(sum),
        used["neuron_device"].as_u64(),
        "per-core classes sum to the device total"
    );
    let models = v["memory_used"]["loaded_models"]
        .as_array()
        .expect("loaded_models");
    assert_eq!(
        models.len(),
        5,
        "the demo workload leaves five models: {models:?}"
    );
    for m in models {
        assert!(m["name"].is_string() && m["uuid"].is_string() && m["neuroncore"].is_i64());
        let b = &m["memory_used_bytes"];
        assert!(b["neuron_device"].as_u64() > Some(0), "{m}");
        assert!(
            b["usage_breakdown"]["neuron_device"]["constants"].is_u64(),
            "{m}"
        );
        // Per subgraph too, as neuron-monitor reports. Every allocation of a manifest is
        // made once per subgraph (docs/MANIFEST.md), so each subgraph's heap holds the same
        // bytes: a mis-attribution (everything on sg_00) shows as unequal subgraphs.
        let sgs = m["subgraphs"].as_object().expect("subgraphs");
        assert!(sgs.contains_key("sg_00"), "{m}");
        let by_sg: Vec<u64> = sgs
            .values()
            .map(|g| g["memory_used_bytes"]["neuron_device"].as_u64().unwrap())
            .collect();
        assert!(by_sg.iter().all(|b| *b == by_sg[0] && *b > 0), "{m}");
        assert_eq!(
            Some(by_sg.iter().sum::<u64>()),
            b["neuron_device"].as_u64(),
            "{m}"
        );
        if m["name"].as_str().is_some_and(|n| n.starts_with("llama")) {
            assert_eq!(sgs.len(), 2, "the llama shard has 2 subgraphs: {m}");
        }
    }
    let extras = &v["nrt_dmem"];
    assert!(
        extras["neuroncores"]["0"]["peak_bytes"].as_u64()
            >= extras["neuroncores"]["0"]["used_bytes"].as_u64()
    );
    assert!(extras["neuroncores"]["0"]["limit_bytes"].as_u64() > Some(0));
    let hbm = extras["hbm"].as_array().expect("hbm");
    assert_eq!(hbm.len(), 4);
    assert!(hbm
        .iter()
        .all(|h| h["largest_free_block_bytes"].as_u64() > Some(0)));
    // The small-object region is reported apart, and the largest free block is the
    // main pool's: with it, the region's free bytes fit in the free total.
    for h in hbm {
        let field = |k: &str| h[k].as_u64().unwrap_or_else(|| panic!("{k}: {h}"));
        let small = field("small_object_free_bytes");
        assert!(small > 0 && small <= 1 << 30, "{h}");
        assert!(
            field("small_object_largest_free_block_bytes") <= small,
            "{h}"
        );
        assert!(
            field("largest_free_block_bytes") + field("small_object_free_bytes")
                <= field("free_bytes"),
            "{h}"
        );
        // The free blocks by size class add up to the free bytes.
        let classes = |k: &str| -> u64 {
            h["free_blocks"][k]
                .as_array()
                .unwrap_or_else(|| panic!("free_blocks.{k}: {h}"))
                .iter()
                .map(|c| c["bytes"].as_u64().unwrap())
                .sum()
        };
        assert_eq!(
            classes("main") + classes("small_object"),
            field("free_bytes"),
            "{h}"
        );
    }
}

#[test]
fn stats_text_after_a_scenario() {
    let o = run(&[
        "stats",
        "--scenario",
        &scenario("failing/wrong-expectation.toml"),
    ]);
    let (out, _) = text(&o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "the scenario's failure shows in the exit code"
    );
    assert!(out.contains("core 0 ("), "{out}");
    assert!(out.contains("bert"), "{out}");
    assert!(out.contains("largest free block"), "{out}");
    assert!(out.contains("small-object largest"), "{out}");
}

#[test]
fn malformed_scenario_names_file_line_and_field() {
    let dir = std::env::temp_dir().join(format!("nrt-dmem-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "device = \"sim:trn2\"\n\n[[step]]\nalloc_tensor = \"t\"\nsize = \"twelve\"\n",
    )
    .expect("write");
    let err = input_error(bin().arg("run").arg(&bad));
    assert!(err.contains("bad.toml:5:"), "{err}");
    assert!(err.contains("field `size`"), "{err}");

    // A manifest with a bad field: the scenario's line and the manifest's path, line, field.
    let manifest = dir.join("m.json");
    std::fs::write(
        &manifest,
        "{\n  \"format\": \"nrt-dmem-model/2\",\n  \"name\": \"m\",\n  \"allocations\": [\n    { \"usage\": \"BOGUS\", \"location\": \"device\", \"size\": 4096 }\n  ]\n}\n",
    )
    .expect("write");
    let sc = dir.join("uses-bad-manifest.toml");
    std::fs::write(&sc, "[[step]]\nload = \"m.json\"\n").expect("write");
    let err = input_error(bin().arg("run").arg(&sc));
    assert!(err.contains("uses-bad-manifest.toml:2:"), "{err}");
    assert!(err.contains("m.json"), "{err}");
    assert!(err.contains("allocations[0].usage"), "{err}");
    assert!(err.contains("line 5"), "{err}");

    let missing = dir.join("missing.toml");
    let err = input_error(bin().arg("run").arg(&missing));
    assert!(
        err.contains("missing.toml") && err.contains("cannot read"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn core_count_errors_point_at_the_scenario_line_that_set_them() {
    let dir = std::env::temp_dir().join(format!("nrt-dmem-cli-cores-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    };
    // trn2 has 8 cores per device: LNC 3 does not divide them (found at runtime start).
    let lnc = write(
        "lnc.toml",
        "device = \"sim:trn2\"\nlnc_size = 3\n[[step]]\nclose = true\n",
    );
    let err = input_error(bin().arg("run").arg(&lnc));
    assert!(err.contains("lnc.toml:2:"), "{err}");
    assert!(err.contains("field `lnc_size`"), "{err}");
    assert!(err.contains("does not divide the 8 cores"), "{err}");
    assert!(err.contains("lnc_size = 3"), "the line is quoted: {err}");
    // The same through `stats`, and for the visible slice.
    let visible = write(
        "visible.toml",
        "device = \"sim:trn1\"\n\nvisible_cores = \"1-5\"\n[[step]]\nclose = true\n",
    );
    let err = input_error(bin().args(["stats", "--scenario"]).arg(&visible));
    assert!(err.contains("visible.toml:3:"), "{err}");
    assert!(err.contains("field `visible_cores`"), "{err}");
    // The scenario's num_cores is not in force when the environment names the visible cores
    // (NEURON_RT_VISIBLE_CORES wins over a core count): the scenario is not blamed.
    let count = write(
        "count.toml",
        "device = \"sim:trn2\"\nnum_cores = 2\n[[step]]\nclose = true\n",
    );
    let err = input_error(
        bin()
            .env("NEURON_RT_VISIBLE_CORES", "60-63")
            .arg("run")
            .arg(&count),
    );
    assert!(err.contains("60-63"), "{err}");
    assert!(!err.contains("count.toml:"), "{err}");
    // Without it, num_cores is the setting in force, and its line is named.
    let too_many = write(
        "too-many.toml",
        "device = \"sim:trn2\"\nnum_cores = 9\n[[step]]\nclose = true\n",
    );
    let err = input_error(bin().arg("run").arg(&too_many));
    assert!(err.contains("too-many.toml:2:"), "{err}");
    assert!(err.contains("field `num_cores`"), "{err}");
    // A flag that replaces the setting owns the error: no scenario line is blamed.
    let err = input_error(bin().args(["--lnc-size", "5", "run"]).arg(&lnc));
    assert!(err.contains("logical core size 5"), "{err}");
    assert!(!err.contains("lnc.toml:"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_device_is_a_clear_error() {
    if Path::new("/dev/neuron0").exists() {
        return; // real hardware: nothing to check here
    }
    let err = input_error(&mut cmd_with(&[], &["--device", "neuron", "demo"]));
    assert!(err.contains("/dev/neuron0"), "{err}");
    assert!(err.contains("sim:trn2"), "{err}");
}

#[test]
fn bad_settings_are_named_not_panicked_on() {
    // A core range whose count does not fit in 32 bits.
    let err = input_error(&mut cmd_with(
        &[],
        &["--visible-cores", "0-4294967295", "demo"],
    ));
    assert!(err.contains("range is too large"), "{err}");
    // A variable that is set but not UTF-8 is reported, not taken as unset.
    use std::os::unix::ffi::OsStrExt;
    let err = input_error(
        bin()
            .env(
                "NRT_DMEM_DEVICE",
                std::ffi::OsStr::from_bytes(b"sim:\xfftrn2"),
            )
            .arg("stats"),
    );
    assert!(
        err.contains("NRT_DMEM_DEVICE") && err.contains("UTF-8"),
        "{err}"
    );
    // A scratchpad page that is not a page multiple.
    let err = input_error(&mut cmd_with(
        &[("NRT_DMEM_SCRATCHPAD_PAGE_SIZE", "4097")],
        &["demo"],
    ));
    assert!(err.contains("NRT_DMEM_SCRATCHPAD_PAGE_SIZE"), "{err}");
}

#[test]
fn unknown_flag_gets_clap_help() {
    let err = input_error(&mut cmd_with(&[], &["demo", "--frobnicate"]));
    assert!(
        err.contains("--frobnicate") && err.contains("Usage:"),
        "{err}"
    );
    let err = input_error(&mut cmd_with(&[], &["--device", "gpu", "demo"]));
    assert!(err.contains("sim:<inf2|trn1|trn2|trn3>"), "{err}");
    let err = input_error(&mut cmd_with(&[], &["--device", "sim:trn2+fast", "demo"]));
    assert!(err.contains("unknown placement after `+`"), "{err}");
}

#[test]
fn the_tlsf_placement_is_a_device_option() {
    // The flag and the variable both take it, and the report names the device as given.
    for (env, args) in [
        (
            vec![],
            vec!["stats", "--json", "--device", "sim:trn2x2+tlsf"],
        ),
        (
            vec![("NRT_DMEM_DEVICE", "sim:trn2x2+tlsf")],
            vec!["stats", "--json"],
        ),
    ] {
        let o = run_with(&env, &args);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(out.contains("sim:trn2x2+tlsf"), "{out}");
    }
}

#[test]
fn layout_report_is_delegated() {
    let o = run(&["layout", "--json"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("layout --json is JSON");
    assert!(v.is_object() || v.is_array());
}

#[test]
fn names_from_a_scenario_are_shown_escaped() {
    // A name or note with a terminal escape or a newline must not reach the terminal raw:
    // it could clear the screen or forge a report line.
    let dir = std::env::temp_dir().join(format!("nrt-dmem-cli-esc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let models = examples().join("../models");
    let sc = dir.join("escapes.toml");
    std::fs::write(
        &sc,
        format!(
            "name = \"evil\\u001b[2J\"\ndescription = \"line one\\nline\\u001b[31m two\"\n\
             device = \"sim:trn2\"\n\n[[step]]\nload = \"{}\"\ncore = 0\nas = \"m\\u001b[31m\\nFAKE\"\n\
             note = \"n\\u0007\"\n",
            models.join("resnet50.json").display()
        ),
    )
    .expect("write");
    for args in [&["run"][..], &["stats", "--scenario"][..]] {
        let o = bin().args(args).arg(&sc).output().expect("run");
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {out}{err}");
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{7}'),
            "{args:?}: {out:?}"
        );
        assert!(!out.contains("\nFAKE"), "{args:?}: a forged line: {out}");
        assert!(out.contains("\\u{1b}[31m\\nFAKE"), "{args:?}: {out}");
    }
    // A failure that quotes a name: the summary after the run shows it escaped too.
    let failing = dir.join("failing.toml");
    std::fs::write(
        &failing,
        "device = \"sim:trn2\"\n\n[[step]]\nunload = \"ghost\\u001b[2J\\nFAKE: all passed\"\n",
    )
    .expect("write");
    let o = bin().arg("run").arg(&failing).output().expect("run");
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(!out.contains('\u{1b}'), "{out:?}");
    assert!(
        !out.lines().any(|l| l.starts_with("FAKE")),
        "a forged line: {out}"
    );
    let o = bin().arg("run").arg(&sc).output().expect("run");
    let (out, _) = text(&o);
    assert!(out.contains("evil\\u{1b}[2J"), "{out}");
    assert!(out.contains("  line one\n  line\\u{1b}[31m two\n"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn flags_replace_the_environment_they_override() {
    // A flag wins over its variable, so the variable's value is not even read: a bad one
    // does not fail the run.
    for (var, value, flag, flag_value) in [
        ("NRT_DMEM_DEVICE", "bogus", "--device", "sim:trn2"),
        ("NEURON_RT_VIRTUAL_CORE_SIZE", "abc", "--lnc-size", "2"),
        ("NEURON_RT_NUM_CORES", "abc", "--num-cores", "2"),
        ("NEURON_RT_VISIBLE_CORES", "9-1", "--visible-cores", "0-1"),
    ] {
        let o = run_with(&[(var, value)], &["stats", "--json", flag, flag_value]);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(0), "{var}={value} {flag}: {out}{err}");
        // Without the flag the bad value is an error that names the variable.
        let err = input_error(&mut cmd_with(&[(var, value)], &["stats"]));
        assert!(err.contains(var), "{err}");
    }
    // `stats` without a scenario runs on the device the environment names.
    let o = run_with(&[("NRT_DMEM_DEVICE", "sim:inf2")], &["stats", "--json"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(out.contains("sim:inf2"), "{out}");
}

#[test]
fn quiet_demo_prints_only_its_verdict() {
    let o = run(&["demo", "-q"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    let (held, all) = lines[0]
        .strip_prefix("demo: ")
        .and_then(|r| r.strip_suffix(" checks held"))
        .and_then(|r| r.split_once(" of "))
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(held, all, "{out}");
    assert!(all.parse::<u32>().unwrap() >= 10, "{out}");
    assert!(
        !err.contains("ERROR"),
        "the deliberate OOM is not an error log: {err}"
    );
}

#[test]
fn a_closed_pipe_ends_the_run_quietly() {
    use std::process::Stdio;
    let mut child = bin()
        .arg("demo")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Close the reading end before the demo has written anything (its runtime takes a few
    // milliseconds to come up), as `nrt-dmem demo | head -0` would: its first write fails.
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(141), "{err}");
    assert!(!err.contains("Broken pipe"), "{err}");
}
