//! `nrt-dmem plan` as a person runs it: `--check`'s exit codes, `--json`, the SVG is
//! well-formed with one bar per channel, bad input. The planner itself: host-std/tests/plan.rs.

#[path = "../../host-std/tests/common/examples.rs"]
mod example_models;
use example_models::{example_paths, models_dir};

mod common;
use common::bin;

fn examples() -> Vec<String> {
    example_paths()
        .iter()
        .map(|p| p.display().to_string())
        .collect()
}

#[test]
fn plan_check_exits_0_when_all_fit_and_1_when_not() {
    let o = bin()
        .args(["plan", "--check", "--tensors"])
        .args(examples())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("6 of 6 models fit"));
    let llama = models_dir().join("llama3-8b-tp8-shard.json");
    let o = bin()
        .args(["plan", "--check", "--device", "sim:trn1"])
        .args(std::iter::repeat_n(&llama, 14))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("first failure: model #12"), "{out}");
    assert!(out.contains("missing"), "{out}");
    // Without --check a plan that does not fit is still a plan.
    let o = bin()
        .args(["plan", "--device", "sim:trn1"])
        .args(std::iter::repeat_n(&llama, 14))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    for bad in [
        vec!["plan", "--device", "gpu", "x.json"],
        vec!["plan", "--lnc-size", "3", &examples()[0]],
        vec!["plan", "--visible-cores", "9", &examples()[0]],
        vec!["plan", "/nonexistent.neff"],
        vec!["plan", "--place", "nope@0", &examples()[0]],
        vec!["plan", "--place", "bert", &examples()[0]],
        vec!["plan"],
    ] {
        let o = bin().args(&bad).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {o:?}");
    }
    // A refused NEFF is named with the gate that refused it and the runtime's status.
    let short = std::env::temp_dir().join(format!("plan-cli-short-{}.neff", std::process::id()));
    std::fs::write(&short, [0u8; 500]).unwrap();
    let o = bin()
        .args(["plan", "--check"])
        .arg(&short)
        .output()
        .unwrap();
    std::fs::remove_file(&short).unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("NEFF refused by the size floor gate (NRT_INVALID, 2)"),
        "{err}"
    );
    // A core the runtime refuses is bad input too (exit 2, the runtime's message), not a
    // model that does not fit: sim:trn2 at LNC 2 has logical cores 0-3.
    let resnet = models_dir().join("resnet50.json");
    let o = bin()
        .args(["plan", "--check", "--place", "resnet50@7"])
        .arg(&resnet)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refused on logical core 7"), "{err}");
    assert!(err.contains("out of range"), "{err}");
}

/// The JSON plan of `args` under the environment `env` (on top of the clean one).
fn plan_json(env: &[(&str, &str)], args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let o = bin()
        .envs(env.iter().copied())
        .args(["plan", "--json"])
        .args(args)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{env:?} {args:?}: {o:?}");
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The plan runs under the configuration `nrt_init` would take from the same environment and
/// flags: arena capacities, the simulated channel size, the core count — not the defaults.
#[test]
fn plan_runs_under_the_runtime_configuration_of_the_environment() {
    let topk = models_dir().join("gpsimd-topk.json");
    let many: Vec<&std::ffi::OsStr> = std::iter::repeat_n(topk.as_os_str(), 200).collect();
    let fits = |v: &serde_json::Value| {
        v["models"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["fits"] == true)
            .count()
    };
    // The runtime sets no model limit of its own: all 200 fit; NRT_DMEM_MAX_MODELS is a
    // ceiling for the plan exactly as for the runtime.
    assert_eq!(fits(&plan_json(&[], &many)), 200);
    assert_eq!(
        fits(&plan_json(&[("NRT_DMEM_MAX_MODELS", "150")], &many)),
        150
    );
    let resnet = models_dir().join("resnet50.json");
    let one = [resnet.as_os_str()];
    let v = plan_json(&[("NRT_DMEM_SIM_CHANNEL_SIZE", "4294967296")], &one);
    assert_eq!(v["hbm"][0]["channel_size"], 4294967296u64);
    assert_eq!(plan_json(&[], &one)["cores"].as_array().unwrap().len(), 4);
    let v = plan_json(&[("NEURON_RT_NUM_CORES", "1")], &one);
    assert_eq!(v["cores"].as_array().unwrap().len(), 1);
    // IO tensors for one model only.
    let two = [
        std::ffi::OsStr::new("--tensors-for"),
        std::ffi::OsStr::new("bert-base"),
        resnet.as_os_str(),
    ];
    let bert = models_dir().join("bert-base.json");
    let mut two = two.to_vec();
    two.push(bert.as_os_str());
    let v = plan_json(&[], &two);
    let tensors: Vec<u64> = v["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["tensor_bytes"].as_u64().unwrap())
        .collect();
    assert!(tensors[0] == 0 && tensors[1] > 0, "{tensors:?}");
    let flag = [
        std::ffi::OsStr::new("--num-cores"),
        std::ffi::OsStr::new("2"),
        resnet.as_os_str(),
    ];
    assert_eq!(plan_json(&[], &flag)["cores"].as_array().unwrap().len(), 2);
}

#[test]
fn plan_json_has_the_plan() {
    let o = bin()
        .args(["plan", "--json", "--device", "sim:trn1x2"])
        .args(examples())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["device"], "sim:trn1x2");
    assert_eq!(v["models"].as_array().unwrap().len(), 6);
    assert_eq!(v["hbm"].as_array().unwrap().len(), 4);
}

/// A small XML well-formedness check: every tag closes in order, attributes are quoted,
/// entities are known. Returns the start tags with their attributes.
fn well_formed(s: &str) -> Vec<(String, String)> {
    let mut stack: Vec<String> = Vec::new();
    let mut tags = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find(['<', '&']) {
        let c = rest.as_bytes()[i];
        rest = &rest[i..];
        if c == b'&' {
            let end = rest.find(';').expect("entity ends");
            assert!(
                ["&amp", "&lt", "&gt", "&quot", "&apos"].contains(&&rest[..end]),
                "entity {}",
                &rest[..end]
            );
            rest = &rest[end + 1..];
            continue;
        }
        let end = rest.find('>').expect("tag ends");
        let tag = &rest[1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name.trim()), "closing tag");
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let (name, attrs) = tag.split_once(' ').unwrap_or((tag, ""));
        assert_eq!(
            attrs.matches('"').count() % 2,
            0,
            "quoted attributes: {tag}"
        );
        assert!(!attrs.contains('<'));
        tags.push((name.to_string(), attrs.to_string()));
        if !self_closing {
            stack.push(name.to_string());
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    tags
}

#[test]
fn the_svg_renders_one_bar_per_channel() {
    let dir = std::env::temp_dir().join(format!("nrt-plan-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (device, channels) in [("sim:trn2", 4), ("sim:trn1x2", 4), ("sim:inf2", 2)] {
        let out = dir.join("plan.svg");
        let o = bin()
            .args(["plan", "--tensors", "--device", device, "--svg"])
            .arg(&out)
            .args(examples())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        let svg = std::fs::read_to_string(&out).unwrap();
        let tags = well_formed(&svg);
        assert_eq!(tags[0].0, "svg");
        let bars = tags
            .iter()
            .filter(|(n, a)| n == "g" && a.contains("class=\"channel\""))
            .count();
        assert_eq!(bars, channels, "{device}");
        assert!(tags
            .iter()
            .any(|(n, a)| n == "rect" && a.contains("class=\"legend\"")));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
