//! Bad input: a facts file that contradicts itself is refused, naming the struct (or
//! enum, or table) and the members involved; the vendored v2 file is consistent.

use nrt_layout::facts::{self, Facts};

#[test]
fn the_vendored_facts_are_consistent() {
    let f = Facts::parse(facts::VENDORED).expect("v2 parses");
    assert_eq!(f.validate(), Vec::<String>::new());
    assert_eq!(f.tables.len(), 3, "v2 has the three category tables");
    assert!(Facts::load(facts::VENDORED).is_ok());
    assert!(Facts::vendored().is_ok());
}

/// Each mutation of the vendored text makes it contradict itself; `load` must refuse it with a
/// message containing every listed part (struct / enum / table, members, numbers).
#[test]
fn self_contradicting_facts_are_refused_naming_struct_and_members() {
    let cases: &[(&str, &str, &str, &[&str])] = &[
        (
            "overlapping members",
            "{ name = \"hint\", offset = 136,",
            "{ name = \"hint\", offset = 132,",
            &["struct dmem_t", "members ref_count (bytes 128..136)", "hint (bytes 132..140)", "overlap"],
        ),
        (
            "two members at one offset, one without a size",
            "{ name = \"key_type\", offset = 32,",
            "{ name = \"key_type\", offset = 24,",
            &["struct ht_node_t", "bucket", "key_type (at 24)", "overlap"],
        ),
        (
            "a member past the struct's size",
            "{ name = \"allocator\", offset = 168, size = 8,",
            "{ name = \"allocator\", offset = 188, size = 8,",
            &["struct dmem_t", "member allocator ends at 196", "past the struct's size 192"],
        ),
        (
            "a member starting past the size",
            "{ name = \"val\", offset = 8,",
            "{ name = \"val\", offset = 48,",
            &["struct ht_node_t", "member val at offset 48", "past the struct's size 48"],
        ),
        (
            "a struct shrunk under its members",
            "size = 192\nsection = \"3.1\"\nsource = \"P0 §3.1 table [HIGH × OBSERVED]; P3 §1 (HIGH, DWARF",
            "size = 160\nsection = \"3.1\"\nsource = \"P0 §3.1 table [HIGH × OBSERVED]; P3 §1 (HIGH, DWARF",
            &["struct dmem_t", "member prev at offset 160 is past the struct's size 160", "member allocator at offset 168"],
        ),
        (
            "a count that does not divide the size",
            "size = 16384, count = 1024",
            "size = 16384, count = 1000",
            &["struct tdrv_scratchpad_t", "member pages", "count 1000", "does not divide its size 16384"],
        ),
        (
            "a count of zero",
            "{ name = \"memory_usage\", offset = 80, size = 32, count = 4,",
            "{ name = \"memory_usage\", offset = 80, size = 32, count = 0,",
            &["struct dma_mem_log_t", "member memory_usage has count 0"],
        ),
        (
            "a member listed twice",
            "{ name = \"prev\", offset = 160,",
            "{ name = \"next\", offset = 160,",
            &["struct dmem_t", "member next listed twice"],
        ),
        (
            "a struct listed twice",
            "name = \"dmem_list_t\"",
            "name = \"dmem_ref_node_t\"",
            &["struct dmem_ref_node_t: listed twice"],
        ),
        (
            "an enum count below its listed members",
            "count = 2\nsource = \"P0 §8",
            "count = 1\nsource = \"P0 §8",
            &["enum kbin_sb_carveout_type_t", "count 1 but 2 members listed"],
        ),
        (
            "an impossible enum size",
            "name = \"al_hal_tpb_arch_type_t\"\nsize = 4",
            "name = \"al_hal_tpb_arch_type_t\"\nsize = 3",
            &["enum al_hal_tpb_arch_type_t", "size 3"],
        ),
        (
            "a table of the wrong length",
            "0x11, 0x11, 0x11, 0x11, 0x00]   # dmem_usage_type_to_host_category",
            "0x11, 0x11, 0x11, 0x11]   # dmem_usage_type_to_host_category",
            &["table host_category", "22 bytes", "23 usage types"],
        ),
        (
            "a sentinel index whose byte is not the sentinel",
            "host_category_invalid_usage_indices = [11, 15, 16]",
            "host_category_invalid_usage_indices = [11, 15, 18]",
            &["table host_category", "[18] is 17", "sentinel 20"],
        ),
        (
            "an unknown table",
            "aggr_index      = [",
            "aggr_idx        = [",
            &["table aggr_idx", "not one of host_category, device_category, aggr_index"],
        ),
    ];
    for (what, from, to, want) in cases {
        assert!(facts::VENDORED.contains(from), "{what}: anchor `{from}`");
        let text = facts::VENDORED.replacen(from, to, 1);
        // Still well-formed TOML: only `load` (parse + validate) refuses it.
        let parsed = Facts::parse(&text).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(!parsed.validate().is_empty(), "{what}: not detected");
        let err = Facts::load(&text).expect_err(what);
        for w in *want {
            assert!(err.contains(w), "{what}: want `{w}` in: {err}");
        }
    }
}
