//! (b) Every struct tiles exactly; the layout report, Markdown and header cover every byte,
//! member, enum and table; the committed generated files are current.

mod common;

use std::collections::BTreeSet;

use nrt_core::abi::{self, meta};
use nrt_layout::{cli, header, markdown, report};
use serde_json::Value;

#[test]
fn every_struct_tiles_exactly() {
    for s in abi::STRUCTS {
        let mut end = 0;
        for f in s.fields {
            assert_eq!(
                f.offset, end,
                "{}.{}: gap or overlap before it",
                s.name, f.name
            );
            let elems = f.count().max(1);
            assert!(
                f.size % elems == 0,
                "{}.{}: size not a multiple of the element count",
                s.name,
                f.name
            );
            end += f.size;
        }
        assert_eq!(
            end, s.size,
            "{}: members end at {end}, not at the size",
            s.name
        );
        assert!(meta::tiles(s.size, s.fields), "{}", s.name);
        assert!(
            s.align.is_power_of_two() && s.size % s.align == 0,
            "{}: size/align",
            s.name
        );
        let names: BTreeSet<_> = s.fields.iter().map(|f| f.name).collect();
        assert_eq!(
            names.len(),
            s.fields.len(),
            "{}: duplicate member names",
            s.name
        );
    }
}

#[test]
fn reserved_spans_are_named_by_offset() {
    for s in abi::STRUCTS {
        for f in s.fields.iter().filter(|f| nrt_layout::is_reserved(f)) {
            let n: usize = f
                .name
                .trim_start_matches("_reserved_")
                .parse()
                .unwrap_or(usize::MAX);
            assert_eq!(
                n, f.offset,
                "{}.{} is not named by its offset",
                s.name, f.name
            );
        }
    }
}

#[test]
fn json_report_covers_every_byte_member_enum_and_table() {
    let v: Value = serde_json::from_str(&report::json()).expect("valid JSON");
    let structs = v["structs"].as_array().unwrap();
    assert_eq!(structs.len(), abi::STRUCTS.len());
    for (js, s) in structs.iter().zip(abi::STRUCTS) {
        assert_eq!(js["name"], s.name);
        assert_eq!(js["size"], s.size);
        assert_eq!(js["align"], s.align);
        assert_eq!(js["section"], s.section);
        let mut end = 0u64;
        let fields = js["fields"].as_array().unwrap();
        assert_eq!(fields.len(), s.fields.len());
        for (jf, f) in fields.iter().zip(s.fields) {
            assert_eq!(jf["offset"].as_u64().unwrap(), end, "{}.{}", s.name, f.name);
            end += jf["size"].as_u64().unwrap();
            for key in ["name", "provenance", "c_type", "count"] {
                assert!(!jf[key].is_null(), "{}.{}: no {key}", s.name, f.name);
            }
            assert_eq!(jf["c_type"], nrt_layout::c_type(f));
        }
        assert_eq!(end, s.size as u64, "{}", s.name);
    }
    let enums = v["enums"].as_array().unwrap();
    assert_eq!(enums.len(), abi::ENUMS.len());
    for (je, e) in enums.iter().zip(abi::ENUMS) {
        let m = je["members"].as_object().unwrap();
        assert_eq!(m.len(), e.members.len());
        for (n, val) in e.members {
            assert_eq!(m[*n].as_i64(), Some(*val), "{}.{n}", e.name);
        }
    }
    for (n, val) in abi::tables::constants::ALL {
        assert_eq!(v["constants"][*n].as_u64(), Some(*val), "{n}");
    }
    for t in ["host_category", "device_category", "aggr_index"] {
        assert_eq!(v["tables"][t].as_array().unwrap().len(), 23, "{t}");
    }
    assert_eq!(
        v["tables"]["host_category"][11], 20,
        "SCRATCHPAD is host-invalid"
    );
    assert_eq!(
        v["tables"]["host_category"][18], 17,
        "DMA_RING -> DMA_RINGS_HOST"
    );
}

#[test]
fn enum_members_keep_value_order_in_json() {
    let text = report::json();
    let a = text.find("\"DMA_MEM_USAGE_TYPE_GENERIC\"").unwrap();
    let b = text.find("\"DMA_MEM_USAGE_TYPE_MAX\"").unwrap();
    assert!(
        a < b,
        "members must be listed in value order, not sorted by name"
    );
}

#[test]
fn summary_fits_a_screen_and_names_every_struct() {
    let s = report::summary();
    for st in abi::STRUCTS {
        assert!(s.contains(st.name), "{}", st.name);
    }
    assert!(
        s.lines().count() <= 50,
        "summary is {} lines",
        s.lines().count()
    );
    assert!(
        s.lines().all(|l| l.chars().count() <= 120),
        "summary has over-long lines"
    );
}

#[test]
fn markdown_has_legend_and_a_table_per_struct() {
    let md = markdown::generate();
    assert!(md.contains("## Provenance legend"));
    for p in ["observed", "inferred", "chosen", "reserved"] {
        assert!(
            md.contains(&format!("| **{p}** |")) || md.contains(&format!("| {p} |")),
            "{p}"
        );
    }
    for s in abi::STRUCTS {
        assert!(md.contains(&format!("\n### {}\n", s.name)), "{}", s.name);
        for f in s.fields {
            assert!(
                md.contains(&format!("| {} | {} | `{}` |", f.offset, f.size, f.name)),
                "{}.{}",
                s.name,
                f.name
            );
        }
    }
    for e in abi::ENUMS {
        assert!(md.contains(&format!("\n### {}\n", e.name)), "{}", e.name);
    }
}

#[test]
fn header_defines_embedded_structs_before_use() {
    let order = header::dependency_order(abi::STRUCTS).unwrap();
    assert_eq!(order.len(), abi::STRUCTS.len());
    let pos = |n: &str| order.iter().position(|s| s.name == n).unwrap();
    for s in abi::STRUCTS {
        for f in s.fields {
            if let Some(dep) = nrt_layout::embedded_struct(f) {
                assert!(
                    pos(dep.name) < pos(s.name),
                    "{} must precede {}",
                    dep.name,
                    s.name
                );
            }
        }
    }
    let h = common::header();
    let def = |n: &str| {
        h.find(&format!("\nstruct {n} {{\n"))
            .unwrap_or_else(|| panic!("{n} defined"))
    };
    assert!(def("tpb_t") < def("mla_t") && def("mla_t") < def("tdrv_ctx_t"));
    assert!(def("ht_node_t") < def("ht_t"));
}

#[test]
fn header_declares_everything() {
    let h = common::header();
    for s in abi::STRUCTS {
        assert!(
            h.contains(&format!("typedef struct {0} {0};", s.name)),
            "{}",
            s.name
        );
        assert!(
            h.contains(&format!(
                "NRT_LAYOUT_ASSERT(sizeof({0}) == {1},",
                s.name, s.size
            )),
            "{}",
            s.name
        );
        for f in s.fields {
            assert!(
                h.contains(&format!(" {};", header::member_decl(f))),
                "{}.{}",
                s.name,
                f.name
            );
        }
    }
    for e in abi::ENUMS {
        for (n, v) in e.members {
            assert!(h.contains(&format!("    {n} = {v},\n")), "{}.{n}", e.name);
        }
    }
    assert!(
        h.contains("ht_node_t buckets[];"),
        "ht_t.buckets is a flexible array member"
    );
    assert!(h.contains("NRT_LAYOUT_ASSERT(sizeof(nrt_mutex_t) == sizeof(pthread_mutex_t)"));
    for t in [
        "dmem_usage_type_to_host_category",
        "dmem_usage_type_to_device_category",
        "dmem_usage_type_to_aggr_index",
    ] {
        assert!(
            h.contains(&format!("static const uint8_t {t}[23] = {{")),
            "{t}"
        );
    }
}

#[test]
fn alignment_attribute_only_where_rust_exceeds_c() {
    let h = common::header();
    for s in abi::STRUCTS {
        let natural = header::natural_align(s).unwrap();
        assert!(
            s.align >= natural,
            "{}: Rust align {} below C's {natural}",
            s.name,
            s.align
        );
    }
    let over = abi::STRUCTS
        .iter()
        .filter(|s| s.align > header::natural_align(s).unwrap())
        .count();
    assert_eq!(h.matches("__attribute__((aligned(").count(), over);
}

#[test]
fn header_compiles_cleanly_as_c11_with_its_asserts() {
    if !common::have_cc() {
        return;
    }
    let dir = common::workdir("header-c11");
    std::fs::write(dir.join("nrt_layout.h"), common::header()).unwrap();
    std::fs::write(
        dir.join("use.c"),
        "#include \"nrt_layout.h\"\nint main(void) { tdrv_ctx_t *c = 0; (void)c; return 0; }\n",
    )
    .unwrap();
    let out = std::process::Command::new(nrt_layout::ccheck::compiler())
        .current_dir(&dir)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Werror",
            "-fsyntax-only",
            "use.c",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn committed_generated_files_are_current() {
    let drift = cli::drift(&nrt_layout::default_root()).unwrap();
    assert!(
        drift.is_empty(),
        "generated files drifted (run `cargo xtask layout --write`):\n{drift:#?}"
    );
}

#[test]
fn drift_is_detected() {
    let dir = common::workdir("drift");
    let mut out = Vec::new();
    let code = cli::run_cli_with(
        ["nrt-layout", "write", "--root", dir.to_str().unwrap()],
        &mut out,
        &mut Vec::new(),
    );
    assert_eq!(code, 0);
    assert!(cli::drift(&dir).unwrap().is_empty());
    let h = dir.join(nrt_layout::HEADER_PATH);
    let text = std::fs::read_to_string(&h)
        .unwrap()
        .replacen("uint64_t key;", "uint32_t key;", 1);
    std::fs::write(&h, text).unwrap();
    let mut err = Vec::new();
    let code = cli::run_cli_with(
        ["nrt-layout", "drift", "--root", dir.to_str().unwrap()],
        &mut Vec::new(),
        &mut err,
    );
    assert_eq!(code, 1);
    let err = String::from_utf8(err).unwrap();
    assert!(
        err.contains("ffi/include/nrt_layout.h") && err.contains("uint32_t key;"),
        "{err}"
    );
    std::fs::remove_file(dir.join(nrt_layout::MARKDOWN_PATH)).unwrap();
    let d = cli::drift(&dir).unwrap();
    assert!(
        d.iter()
            .any(|(p, why)| p == "docs/LAYOUT.md" && why.contains("cannot read")),
        "{d:?}"
    );
}
