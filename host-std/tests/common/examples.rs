//! The example model manifests (`examples/models/*.json`), for the planner's tests here and
//! the `nrt-dmem plan` tests of the CLI crate (`cli/tests/plan_cli.rs`, included by path).

use std::path::{Path, PathBuf};

/// `examples/models/`.
pub fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/models")
}

/// The example manifests (`*.json`), sorted; there are six.
pub fn example_paths() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(models_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 6, "the six example manifests");
    v
}
