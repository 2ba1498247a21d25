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

/// A model that does not fit says what it needs by usage and which channel refused it; the
/// fragmentation list is structured (channel, needed, free, largest block, verdict).
#[test]
fn plan_json_gives_a_failed_model_its_needs_and_verdict() {
    const MIB: u64 = 1 << 20;
    let dir = std::env::temp_dir().join(format!("nrt-plan-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, allocs: &[(&str, u64)]| {
        let list: Vec<String> = allocs
            .iter()
            .enumerate()
            .map(|(k, (u, b))| {
                format!(r#"{{"usage":"{u}","location":"device","size":{b},"hint":"a{k}"}}"#)
            })
            .collect();
        let p = dir.join(format!("{name}.json"));
        std::fs::write(
            &p,
            format!(
                r#"{{"format":"nrt-dmem-model/2","name":"{name}","allocations":[{}]}}"#,
                list.join(",")
            ),
        )
        .unwrap();
        p
    };
    // trn1: 13.5 GiB leaves about 1.48 GiB of the main pool and the 1 GiB small-object
    // region of HBM 0: 2.3 GiB fits in those bytes, not in those blocks.
    let a = write("a", &[("WEIGHT", 13824 * MIB)]);
    let b = write("b", &[("CC", 1229 * MIB), ("WEIGHT", 1126 * MIB)]);
    let v = plan_json(
        &[],
        &[
            "--device".as_ref(),
            "sim:trn1".as_ref(),
            "--place".as_ref(),
            "a@0".as_ref(),
            "--place".as_ref(),
            "b@0".as_ref(),
            a.as_os_str(),
            b.as_os_str(),
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
    let m = &v["models"][1];
    assert_eq!(m["fits"], false);
    assert_eq!(m["device_bytes"], 0);
    assert_eq!(
        m["needed"],
        serde_json::json!([["WEIGHT", 1126 * MIB], ["CC", 1229 * MIB]])
    );
    assert_eq!(m["needed_bytes"], 2355 * MIB);
    let r = &m["refusal"];
    assert_eq!(
        (r["device"].as_u64(), r["hbm"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(r["verdict"], "fragmented");
    assert_eq!(r["needed"], 2355 * MIB);
    assert_eq!(r["request"]["align"], 0);
    let free = r["free"].as_u64().unwrap();
    let largest = r["largest_free"].as_u64().unwrap();
    assert!(free > 2355 * MIB && largest < 2355 * MIB, "{r}");
    let f = v["fragmentation"].as_array().unwrap();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0]["model"], 1);
    for k in [
        "device",
        "hbm",
        "needed",
        "free",
        "largest_free",
        "verdict",
        "request",
    ] {
        assert_eq!(f[0][k], r[k], "{k}");
    }
    assert!(f[0]["summary"].as_str().unwrap().contains("fragmented"));
    // The model that fits says what it needs too: what it holds.
    assert_eq!(
        v["models"][0]["needed_bytes"],
        v["models"][0]["device_bytes"]
    );
}

/// `plan --svg` of `args`: the SVG as text (the plan's exit code must be 0).
fn plan_svg(args: &[&std::ffi::OsStr]) -> String {
    let out = std::env::temp_dir().join(format!(
        "nrt-plan-svg-{}-{}.svg",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let o = bin()
        .args(["plan", "--svg"])
        .arg(&out)
        .args(args)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{args:?}: {o:?}");
    let svg = std::fs::read_to_string(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    svg
}

/// Whether `n` is an element with class `class` (one of its classes).
fn has_class(n: &roxmltree::Node<'_, '_>, class: &str) -> bool {
    n.attribute("class")
        .is_some_and(|c| c.split(' ').any(|c| c == class))
}

/// The text of every `<text>` under `n`.
fn texts(n: roxmltree::Node<'_, '_>) -> Vec<String> {
    n.descendants()
        .filter(|d| d.has_tag_name("text"))
        .map(|d| d.text().unwrap_or("").to_string())
        .collect()
}

#[test]
fn the_svg_renders_one_bar_per_channel() {
    for (device, channels) in [("sim:trn2", 4), ("sim:trn1x2", 4), ("sim:inf2", 2)] {
        let mut args: Vec<std::ffi::OsString> =
            vec!["--tensors".into(), "--device".into(), device.into()];
        args.extend(examples().into_iter().map(Into::into));
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let svg = plan_svg(&args);
        let doc = roxmltree::Document::parse(&svg).unwrap();
        assert!(doc.root_element().has_tag_name("svg"));
        let bars = doc
            .descendants()
            .filter(|n| n.has_tag_name("g") && has_class(n, "channel"))
            .count();
        assert_eq!(bars, channels, "{device}");
        assert!(doc
            .descendants()
            .any(|n| n.has_tag_name("rect") && has_class(&n, "legend")));
    }
}

/// The SVG reads without hovering: a byte scale with units, byte counts, the models' names,
/// the model that does not fit marked with what it needs and why, and a legend.
#[test]
fn the_svg_says_what_fits_where_and_what_failed() {
    let llama = models_dir().join("llama3-8b-tp8-shard.json");
    let mut args = vec!["--device".as_ref(), "sim:trn1".as_ref()];
    args.extend(std::iter::repeat_n(llama.as_os_str(), 13));
    let svg = plan_svg(&args);
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let all = texts(doc.root());
    // The scale: trn1's 16 GiB channels in 2 GiB steps.
    let axis = doc
        .descendants()
        .find(|n| has_class(n, "axis"))
        .expect("an axis");
    let ticks = texts(axis);
    for t in ["0 B", "2 GiB", "8 GiB", "16 GiB"] {
        assert!(ticks.iter().any(|x| x == t), "tick {t}: {ticks:?}");
    }
    // Each channel's figures and the bytes of the runs wide enough to hold them.
    assert!(
        all.iter()
            .any(|t| t.starts_with("used ") && t.contains("free") && t.contains("GiB")),
        "{all:?}"
    );
    // Every model that fits is named on its channel with its bytes there.
    let models: Vec<roxmltree::Node<'_, '_>> = doc
        .descendants()
        .filter(|n| n.has_tag_name("g") && has_class(n, "model"))
        .collect();
    for i in 0..12 {
        let named = models.iter().any(|m| {
            m.attribute("data-model") == Some(&i.to_string())
                && texts(*m)
                    .iter()
                    .any(|t| t.starts_with(&format!("#{i} ")) && t.ends_with("2.40 GiB"))
        });
        assert!(named, "model #{i} is not named: {all:?}");
    }
    // The one that does not fit: marked (hatched, outlined), on the channel that refused
    // it, with what it needs there and the verdict.
    let failed: Vec<roxmltree::Node<'_, '_>> = doc
        .descendants()
        .filter(|n| n.has_tag_name("g") && has_class(n, "failed"))
        .collect();
    assert_eq!(failed.len(), 1, "{svg}");
    let f = failed[0];
    assert_eq!(f.attribute("data-model"), Some("12"));
    assert_eq!(f.attribute("data-verdict"), Some("full"));
    let channel = f.ancestors().find(|a| has_class(a, "channel")).unwrap();
    assert_eq!(channel.attribute("data-hbm"), Some("0"));
    let mark = f.children().find(|c| c.has_tag_name("rect")).unwrap();
    assert_eq!(mark.attribute("fill"), Some("url(#failed)"));
    assert!(mark.attribute("stroke").is_some());
    let line = texts(f).join(" ");
    assert!(
        line.contains("#12 llama3-8b-tp8-shard does not fit")
            && line.contains("needs 2.40 GiB here")
            && line.contains("HBM full"),
        "{line}"
    );
    // The legend names the usages, free space and the failure mark.
    let legend = doc
        .descendants()
        .find(|n| n.has_tag_name("g") && has_class(n, "legend"))
        .unwrap();
    let names = texts(legend);
    for n in [
        "WEIGHT",
        "SCRATCHPAD",
        "free",
        "does not fit: what it needs there",
    ] {
        assert!(names.iter().any(|x| x == n), "legend {n}: {names:?}");
    }
}
