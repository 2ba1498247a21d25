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
