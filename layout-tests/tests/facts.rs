//! (a) Every fact of `layout-tests/facts/layout-facts.toml` holds in the Rust tables, exactly.

use nrt_layout::facts::{self, Facts};

/// The facts file the tests hold the tables to: the vendored copy, compiled in.
fn facts_text() -> (String, &'static str) {
    (
        facts::VENDORED.to_string(),
        "layout-tests/facts/layout-facts.toml",
    )
}

/// SHA-256 of the spec's layout facts file this project was built against.
const FACTS_SHA256: &str = "bcddc98155a633f4e0379d2172112cc43b39768efddc317bd2e66e705b48a43d";

/// The vendored copy is the spec's file, byte for byte: every layout check reads this copy, so
/// a table and a fact changed together to agree would otherwise pass them all. A new spec
/// version changes the pin, on purpose.
#[test]
fn vendored_copy_is_the_pinned_spec_version() {
    use sha2::{Digest, Sha256};
    let hex: String = Sha256::digest(facts::VENDORED.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        hex, FACTS_SHA256,
        "layout-tests/facts/layout-facts.toml is not the pinned spec version: it must be a byte \
         copy of the spec's facts file (and FACTS_SHA256 that file's sha256sum)"
    );
}

/// Array bounds the facts state only in a comment (`# size_t[8][23]`: the TOML gives the
/// element count, not the shape) are the tables' bounds too, so `[8][23]` cannot become
/// `[23][8]` with the same count.
#[test]
fn array_shapes_in_the_facts_comments_are_the_tables() {
    let mut checked = 0;
    for line in facts::VENDORED.lines() {
        let (Some(name), Some(comment)) = (
            line.split("name = \"")
                .nth(1)
                .and_then(|r| r.split('"').next()),
            line.split_once('#').map(|(_, c)| c),
        ) else {
            continue;
        };
        // The declarator's bounds: every `[N]` right after the type name, in order.
        let Some(decl) = comment.split_whitespace().next() else {
            continue;
        };
        let dims: Vec<usize> = decl
            .split('[')
            .skip(1)
            .filter_map(|d| d.split(']').next()?.parse().ok())
            .collect();
        if dims.len() < 2 {
            continue;
        }
        let fields: Vec<_> = nrt_core::abi::STRUCTS
            .iter()
            .flat_map(|s| s.fields.iter())
            .filter(|f| f.name == name)
            .collect();
        assert!(!fields.is_empty(), "{name}: not in the tables");
        for f in fields {
            assert_eq!(f.dims(), &dims[..], "{name}: the facts say {decl}");
        }
        checked += 1;
    }
    assert!(checked >= 1, "no array shape found in the facts' comments");
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
        (
            "host_category_invalid_usage_indices = [11, 15, 16]",
            "host_category_invalid_usage_indices = [12, 15, 16]",
            "host_category[12]",
        ),
        (
            "host_category   = [0x04, 0x01",
            "host_category   = [0x05, 0x01",
            "table host_category (dmem_usage_type_to_host_category)[0]: Some(4) in the tables, Some(5)",
        ),
        (
            "aggr_index      = [0x05, 0x00, 0x00, 0x05, 0x05, 0x01, 0x0b",
            "aggr_index      = [0x05, 0x00, 0x00, 0x05, 0x05, 0x01, 0x0a",
            "table aggr_index (dmem_usage_type_to_aggr_index)[6]",
        ),
        (
            "DMA_MEM_USAGE_TYPE_TENSOR = 12",
            "DMA_MEM_USAGE_TYPE_TENSOR = 2",
            "dma_mem_usage_type_t.DMA_MEM_USAGE_TYPE_TENSOR: 12 in the tables, 2",
        ),
        (
            "{ name = \"ref_count\", offset = 128, size = 8",
            "{ name = \"ref_count\", offset = 128, size = 4",
            "dmem_t.ref_count: size 8 in the tables, 4",
        ),
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
