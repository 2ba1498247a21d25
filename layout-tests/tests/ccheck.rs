//! (c) The C compiler's word: `cc` measures every `sizeof`/`offsetof`/member size/array bound of
//! the generated header and must agree with the Rust tables — and a header that moves one member
//! or changes one array bound must be reported, naming the struct and member.

mod common;

use nrt_core::abi;
use nrt_layout::ccheck::{self, CcError, Mismatch};

fn run(name: &str, header: &str) -> Vec<Mismatch> {
    match ccheck::cross_check(header, &common::workdir(name)) {
        Ok(m) => m,
        Err(e) => panic!("cross-check could not run: {e}"),
    }
}

fn has(
    m: &[Mismatch],
    strukt: &str,
    member: Option<&str>,
    what: &str,
    expected: &str,
    found: &str,
) -> bool {
    m.iter().any(|x| {
        x.strukt == strukt
            && x.member.as_deref() == member
            && x.what == what
            && x.expected == expected
            && x.found == found
    })
}

#[test]
fn c_compiler_agrees_with_every_field_of_every_struct() {
    if !common::have_cc() {
        return;
    }
    let m = run("agree", &common::header());
    assert!(
        m.is_empty(),
        "cc disagrees with the Rust tables:\n{}",
        m.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn probe_measures_every_field_and_every_bound() {
    let src = ccheck::probe_source(abi::STRUCTS);
    for s in abi::STRUCTS {
        assert!(
            src.contains(&format!("\"S {} %zu %zu\\n\"", s.name)),
            "{}",
            s.name
        );
        for f in s.fields {
            assert!(
                src.contains(&format!("F {} {} ", s.name, f.name)),
                "{}.{}",
                s.name,
                f.name
            );
        }
    }
    // A two-dimensional member gets both bounds measured.
    assert!(src.contains("F dma_mem_log_t memory_usage_nc %zu %zu 2 %zu %zu"));
}

/// One mismatch row: (struct, member, what, expected, found).
type Row = (
    &'static str,
    Option<&'static str>,
    &'static str,
    &'static str,
    &'static str,
);

/// A mutation of the generated header: its member-line replacements (struct, declaration, new
/// declaration), applied in order, the rows `cc` must report, and whether those are all of
/// them (`false`: a change that moves every embedding struct too, so only some are listed).
struct Mutation {
    name: &'static str,
    edits: &'static [(&'static str, &'static str, &'static str)],
    rows: &'static [Row],
    exact: bool,
}

const MUTATIONS: &[Mutation] = &[
    // Swap two 8-byte members of ht_node_t: same size, both offsets move.
    Mutation {
        name: "moved",
        edits: &[
            ("ht_node_t", "uint64_t buf_size", "uint64_t bucket_tmp"),
            ("ht_node_t", "uint64_t bucket", "uint64_t buf_size"),
            ("ht_node_t", "uint64_t bucket_tmp", "uint64_t bucket"),
        ],
        rows: &[
            ("ht_node_t", Some("buf_size"), "offset", "16", "24"),
            ("ht_node_t", Some("bucket"), "offset", "24", "16"),
        ],
        exact: true,
    },
    // [8][23] -> [23][8]: same bytes, same offsets; only the bounds tell.
    Mutation {
        name: "swapped-bound",
        edits: &[(
            "dma_mem_log_t",
            "uint64_t memory_usage_nc[8][23]",
            "uint64_t memory_usage_nc[23][8]",
        )],
        rows: &[(
            "dma_mem_log_t",
            Some("memory_usage_nc"),
            "bounds",
            "[8, 23]",
            "[23, 8]",
        )],
        exact: true,
    },
    // A changed bound is reported with everything it moves.
    Mutation {
        name: "changed-bound",
        edits: &[(
            "tdrv_scratchpad_t",
            "tdrv_scratchpad_page_t pages[1024]",
            "tdrv_scratchpad_page_t pages[1000]",
        )],
        rows: &[
            (
                "tdrv_scratchpad_t",
                Some("pages"),
                "bounds",
                "[1024]",
                "[1000]",
            ),
            (
                "tdrv_scratchpad_t",
                Some("pages"),
                "member size",
                "16384",
                "16000",
            ),
            ("tdrv_scratchpad_t", None, "size", "16440", "16056"),
            ("tpb_t", None, "size", "39320", "38936"),
            (
                "tpb_t",
                Some("pooling_q7_nrtucode_core"),
                "offset",
                "39232",
                "38848",
            ),
            ("mla_t", Some("top_sps"), "offset", "314672", "311600"),
        ],
        exact: false,
    },
];

#[test]
fn each_header_mutation_is_reported_naming_struct_and_member() {
    if !common::have_cc() {
        return;
    }
    for t in MUTATIONS {
        let h = t.edits.iter().fold(common::header(), |h, (s, from, to)| {
            common::mutate_member(&h, s, from, to)
        });
        let m = run(t.name, &h);
        for &(strukt, member, what, expected, found) in t.rows {
            assert!(
                has(&m, strukt, member, what, expected, found),
                "{}: no row {strukt}.{member:?} {what} {expected} vs {found}: {m:#?}",
                t.name
            );
        }
        if t.exact {
            assert_eq!(
                m.len(),
                t.rows.len(),
                "{}: exactly these rows: {m:#?}",
                t.name
            );
        }
    }
}

#[test]
fn the_header_rejects_a_moved_member_by_itself() {
    if !common::have_cc() {
        return;
    }
    // Without NRT_LAYOUT_NO_STATIC_ASSERTS the header's own asserts stop the build.
    let h = common::mutate_member(
        &common::header(),
        "tpb_t",
        "ht_t *model_db",
        "ht_t *model_db[2]",
    );
    let dir = common::workdir("self-assert");
    std::fs::write(dir.join("nrt_layout.h"), h).unwrap();
    std::fs::write(dir.join("u.c"), "#include \"nrt_layout.h\"\n").unwrap();
    let out = std::process::Command::new(ccheck::compiler())
        .current_dir(&dir)
        .args(["-std=c11", "-fsyntax-only", "u.c"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tpb_t: size 39320") || err.contains("tpb_t.model_db"),
        "{err}"
    );
}

#[test]
fn a_header_that_does_not_compile_is_an_error_not_a_pass() {
    if !common::have_cc() {
        return;
    }
    let h = common::mutate(
        &common::header(),
        "struct ht_node_t {",
        "struct ht_node_t { syntax error here",
    );
    match ccheck::cross_check(&h, &common::workdir("broken")) {
        Err(CcError::Compile(msg)) => assert!(msg.contains("error"), "{msg}"),
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn probe_output_parser_rejects_garbage() {
    assert!(ccheck::parse_probe_output("S tpb_t 39320 8\nF tpb_t idx 0 4 0\n").is_ok());
    assert!(ccheck::parse_probe_output("S tpb_t x 8\n").is_err());
    assert!(ccheck::parse_probe_output("F tpb_t idx 0 4 2 8\n").is_err());
    assert!(ccheck::parse_probe_output("hello\n").is_err());
}
