//! (a) Every fact of `shared/spec/layout-facts.toml` holds in the Rust tables, exactly.

use std::path::PathBuf;

use nrt_layout::facts::{self, Facts};

fn shared_facts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/spec/layout-facts.toml")
}

/// The shared spec copy when this checkout has one beside it, else the vendored copy.
fn facts_text() -> (String, &'static str) {
    match std::fs::read_to_string(shared_facts()) {
        Ok(t) => (t, "shared/spec/layout-facts.toml"),
        Err(_) => (
            facts::VENDORED.to_string(),
            "layout-tests/facts/layout-facts.toml",
        ),
    }
}

#[test]
fn vendored_copy_equals_shared() {
    match std::fs::read_to_string(shared_facts()) {
        Ok(shared) => assert_eq!(
            shared,
            facts::VENDORED,
            "layout-tests/facts/layout-facts.toml differs from shared/spec/layout-facts.toml: \
             copy the shared file over the vendored one"
        ),
        Err(_) => eprintln!("skipping: no shared/spec/layout-facts.toml beside this checkout"),
    }
}

#[test]
fn every_fact_matches_the_tables() {
    let (text, from) = facts_text();
    let f = Facts::parse(&text).expect("facts parse");
    assert!(
        f.structs.len() >= 20 && f.enums.len() >= 6 && f.constants.len() >= 18,
        "facts look truncated"
    );
    let errs = facts::verify_tables(&f);
    assert!(
        errs.is_empty(),
        "{from} disagrees with nrt-core's tables:\n  {}",
        errs.join("\n  ")
    );
}

#[test]
fn every_listed_fact_is_compared() {
    // Each struct fact with fields names members the tables have, so none is silently skipped.
    let (text, _) = facts_text();
    let f = Facts::parse(&text).unwrap();
    let mut compared = 0;
    for sf in &f.structs {
        let s = nrt_core::abi::struct_info(&sf.name).expect("struct in tables");
        for ff in &sf.fields {
            assert!(s.field(&ff.name).is_some(), "{}.{}", sf.name, ff.name);
            compared += usize::from(ff.offset.is_some())
                + usize::from(ff.size.is_some())
                + usize::from(ff.count.is_some());
        }
    }
    assert!(compared >= 50, "only {compared} member attributes compared");
}

#[test]
fn a_changed_fact_is_reported() {
    let (text, _) = facts_text();
    let cases = [
        (
            "{ name = \"model_db\", offset = 20032",
            "{ name = \"model_db\", offset = 20040",
            "tpb_t.model_db: offset 20032 in the tables, 20040",
        ),
        (
            "size = 7744",
            "size = 7745",
            "model_t: size 7744 in the tables, 7745",
        ),
        (
            "count = 1024",
            "count = 1000",
            "tdrv_scratchpad_t.pages: count 1024 in the tables, 1000",
        ),
        (
            "HOST_DRAM = 1",
            "HOST_DRAM = 3",
            "dma_mem_location_t.HOST_DRAM: 1 in the tables, 3",
        ),
        (
            "enomem_errno = 12",
            "enomem_errno = 11",
            "constant enomem_errno: 12 in the tables",
        ),
        ("[18, 19, 20, 21]", "[17, 19, 20, 21]", "host_category[17]"),
        (
            "{ name = \"head\", offset = 0, size = 8, provenance = \"inferred\" }",
            "{ name = \"head\", offset = 0, size = 8, provenance = \"observed\" }",
            "dmem_list_t.head: provenance inferred in the tables, observed",
        ),
    ];
    for (from, to, want) in cases {
        assert!(text.contains(from), "anchor `{from}`");
        let f = Facts::parse(&text.replacen(from, to, 1)).unwrap();
        let errs = facts::verify_tables(&f);
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "mutation `{to}`: want `{want}` in {errs:?}"
        );
    }
}

#[test]
fn outcomes_name_real_status_codes() {
    let (text, _) = facts_text();
    let f = Facts::parse(&text).unwrap();
    for (k, v) in &f.outcomes {
        assert!(
            nrt_core::abi::NRT_STATUS::INFO
                .members
                .iter()
                .any(|(n, _)| n == v),
            "outcome {k} = {v} is not an NRT_STATUS member"
        );
    }
}
