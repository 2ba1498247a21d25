//! The DWARF checker.
//!
//! Two fixtures, so that every test here holds whatever state `nrt_core`'s layouts are in:
//!
//! * the **facts fixture** ([`nrt_layout::fixture::facts_fixture`]), generated from
//!   `layout-facts.toml` alone: `--pinned` must pass on it in every DWARF flavour and fail,
//!   naming the member, when one member is moved;
//! * the **header fixture** (the generated `nrt_layout.h`), whose DWARF is the Rust tables by
//!   construction: the reader must see the tables in it in every flavour, agree with pahole, and
//!   every chosen fact of `--all` must pass on it.
//!
//! Bad inputs are one-line errors with exit code 2, and corrupt bytes never panic.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use nrt_core::abi;
use nrt_layout::ccheck::{self, Lang};
use nrt_layout::check::{self, CheckOptions, Mode, Report, Status};
use nrt_layout::cli::run_cli_with;
use nrt_layout::dwarf::{self, DwarfError, Extract};
use nrt_layout::facts::{Facts, Pins};
use nrt_layout::fixture::facts_fixture;

fn pins() -> Pins {
    Pins::vendored().expect("vendored facts load")
}

fn facts() -> &'static Facts {
    Facts::vendored().expect("vendored facts load")
}

fn fixture(name: &str, header: &str, flags: &[&str]) -> PathBuf {
    ccheck::compile_fixture(header, &common::workdir(name), "fixture", flags)
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// The facts fixture in `lang` with `flags`, each `(from, to)` mutation applied to its source
/// (and its own static asserts then off, so the mutated copy compiles).
fn facts_obj(
    name: &str,
    lang: Lang,
    flags: &[&str],
    mutations: &[(&str, &str)],
    tables: bool,
) -> PathBuf {
    let mut src = facts_fixture(facts(), lang, tables).expect("facts fixture generates");
    for (from, to) in mutations {
        src = common::mutate(&src, from, to);
    }
    let mut flags = flags.to_vec();
    if !mutations.is_empty() {
        flags.push("-DNRT_FIXTURE_NO_ASSERTS");
    }
    ccheck::compile_lang(lang, "", &src, &common::workdir(name), "facts", &flags)
        .unwrap_or_else(|e| panic!("facts fixture {name}: {e}"))
}

/// The header fixture in `lang` with `flags`.
fn header_obj(name: &str, lang: Lang, flags: &[&str]) -> PathBuf {
    ccheck::compile_lang(
        lang,
        &common::header(),
        &ccheck::fixture_source(),
        &common::workdir(name),
        "fixture",
        flags,
    )
    .unwrap_or_else(|e| panic!("header fixture {name}: {e}"))
}

/// Runs the CLI in-process: (exit code, stdout, stderr).
fn cli(args: &[&str]) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut argv = vec!["nrt-layout"];
    argv.extend_from_slice(args);
    let code = run_cli_with(argv, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// Runs the real binary: (exit code, stdout, stderr).
fn bin(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_nrt-layout"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn line_with<'a>(text: &'a str, parts: &[&str]) -> Option<&'a str> {
    text.lines().find(|l| parts.iter().all(|p| l.contains(p)))
}

fn pinned(obj: &Path) -> Report {
    let opts = CheckOptions {
        mode: Mode::Pinned,
        strict: false,
    };
    check::check(obj, &opts).unwrap_or_else(|e| panic!("{e}"))
}

/// What a flavour must visibly have produced, so a flag the toolchain ignored cannot pass as
/// that flavour.
#[derive(Copy, Clone, Debug)]
enum Shows {
    /// Units of this DWARF version only, no type units.
    Version(u16),
    /// Type units, DWARF version as given.
    TypeUnits(u16),
    /// `.debug_info` compressed in this format.
    Compressed(&'static str),
}

/// One DWARF flavour: name, language, compiler flags, what it shows.
struct Flavour {
    name: &'static str,
    lang: Lang,
    flags: &'static [&'static str],
    shows: Shows,
}

const FLAVOURS: &[Flavour] = &[
    Flavour {
        name: "cc -g",
        lang: Lang::C,
        flags: &["-g"],
        shows: Shows::Version(5),
    },
    Flavour {
        name: "cc -gdwarf-4",
        lang: Lang::C,
        flags: &["-gdwarf-4"],
        shows: Shows::Version(4),
    },
    Flavour {
        name: "g++ -g",
        lang: Lang::Cxx,
        flags: &["-g"],
        shows: Shows::Version(5),
    },
    Flavour {
        name: "g++ -gdwarf-4",
        lang: Lang::Cxx,
        flags: &["-gdwarf-4"],
        shows: Shows::Version(4),
    },
    Flavour {
        name: "cc -gz=zlib",
        lang: Lang::C,
        flags: &["-g", "-gz=zlib"],
        shows: Shows::Compressed("zlib"),
    },
    Flavour {
        name: "cc -gz=zlib-gnu (.zdebug_*)",
        lang: Lang::C,
        flags: &["-g", "-gz=zlib-gnu"],
        shows: Shows::Compressed("zlib-gnu"),
    },
    Flavour {
        name: "cc -gz=zstd",
        lang: Lang::C,
        flags: &["-g", "-gz=zstd"],
        shows: Shows::Compressed("zstd"),
    },
    Flavour {
        name: "cc -gdwarf-4 -fdebug-types-section",
        lang: Lang::C,
        flags: &["-gdwarf-4", "-fdebug-types-section"],
        shows: Shows::TypeUnits(4),
    },
    Flavour {
        name: "cc -gdwarf-5 -fdebug-types-section",
        lang: Lang::C,
        flags: &["-gdwarf-5", "-fdebug-types-section"],
        shows: Shows::TypeUnits(5),
    },
    Flavour {
        name: "g++ -gdwarf-4 -fdebug-types-section",
        lang: Lang::Cxx,
        flags: &["-gdwarf-4", "-fdebug-types-section"],
        shows: Shows::TypeUnits(4),
    },
];

/// Builds `flavour` of a fixture with `build(name, lang, flags)`. zstd needs a toolchain that
/// has it: `-gz=zstd` where gcc takes it, else `objcopy --compress-debug-sections=zstd` on a
/// `-g` build; `None` (with a skip note) when neither works.
fn build_flavour(
    f: &Flavour,
    tag: &str,
    build: &dyn Fn(&str, Lang, &[&str]) -> PathBuf,
) -> Option<PathBuf> {
    let name = format!(
        "{tag}-{}",
        f.name.replace([' ', '=', '(', ')', '*', '.'], "_")
    );
    let Shows::Compressed("zstd") = f.shows else {
        return Some(build(&name, f.lang, f.flags));
    };
    let probe = Command::new(f.lang.compiler())
        .args(["-gz=zstd", "-x", "c", "-c", "-o", "/dev/null", "-"])
        .stdin(std::process::Stdio::null())
        .output();
    if probe.is_ok_and(|o| o.status.success()) {
        return Some(build(&name, f.lang, f.flags));
    }
    let plain = build(&name, f.lang, &["-g"]);
    let out = plain.with_extension("zstd.o");
    let ok = Command::new("objcopy")
        .arg("--compress-debug-sections=zstd")
        .arg(&plain)
        .arg(&out)
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(out);
    }
    common::skip("neither `cc -gz=zstd` nor `objcopy --compress-debug-sections=zstd` works here");
    None
}

/// Panics unless the extraction shows what the flavour promises.
fn assert_shows(f: &Flavour, ex: &Extract) {
    let versions: Vec<u16> = ex.dwarf_versions.iter().copied().collect();
    match f.shows {
        Shows::Version(v) => {
            assert_eq!(versions, [v], "{}", f.name);
            assert_eq!(ex.type_units, 0, "{}", f.name);
        }
        Shows::TypeUnits(v) => {
            assert_eq!(versions, [v], "{}", f.name);
            assert!(
                ex.type_units > 10,
                "{}: {} type units",
                f.name,
                ex.type_units
            );
        }
        Shows::Compressed(how) => assert_eq!(
            ex.compressed.get(".debug_info").map(String::as_str),
            Some(how),
            "{}: {:?}",
            f.name,
            ex.compressed
        ),
    }
}

/// How many facts `--pinned` must check: the struct size and each stated offset, size and
/// count; each enum's stated size, its count and each value; the three tables.
fn pinned_fact_count(f: &Facts) -> usize {
    let structs: usize = f
        .structs
        .iter()
        .map(|s| {
            1 + s
                .fields
                .iter()
                .map(|x| {
                    usize::from(x.offset.is_some())
                        + usize::from(x.size.is_some())
                        + usize::from(x.count.is_some())
                })
                .sum::<usize>()
        })
        .sum();
    let enums: usize = f
        .enums
        .iter()
        .map(|e| usize::from(e.size.is_some()) + 1 + e.members.len())
        .sum();
    structs + enums + f.tables.len()
}

/// `dmem_t.tdram_channel` moved from 64 to 68 into the gap v2 leaves, nothing else moved.
const MOVE_TDRAM_CHANNEL: (&str, &str) = (
    "    uint32_t tdram_channel;\n    uint8_t _fixture_pad_68[60];\n",
    "    uint8_t _fixture_pad_64[4];\n    uint32_t tdram_channel;\n    uint8_t _fixture_pad_72[56];\n",
);

#[test]
fn pinned_mode_passes_on_the_facts_fixture_in_every_flavour() {
    if !common::have_cc() {
        return;
    }
    let want = pinned_fact_count(facts());
    assert!(want > 400, "the facts look truncated: {want}");
    let build = |n: &str, l: Lang, f: &[&str]| facts_obj(n, l, f, &[], true);
    for f in FLAVOURS {
        let Some(obj) = build_flavour(f, "facts", &build) else {
            continue;
        };
        let r = pinned(&obj);
        let bad: Vec<String> = r
            .facts
            .iter()
            .filter(|x| x.status != Status::Pass)
            .map(|x| format!("{} {} {:?} {:?}", x.subject, x.fact, x.expected, x.found))
            .collect();
        assert!(bad.is_empty(), "{}: {bad:#?}", f.name);
        assert_eq!(r.exit_code, 0, "{}", f.name);
        assert_eq!(
            r.summary.pass, want,
            "{}: exactly what v2 pins, all of it",
            f.name
        );
        assert!(r.facts.iter().all(|x| x.pinned), "{}", f.name);
        for t in &r.tables {
            assert_eq!(
                (t.status, t.pinned),
                (Status::Pass, true),
                "{}: {}",
                f.name,
                t.symbol
            );
        }
        let sunda = r
            .facts
            .iter()
            .find(|x| x.subject == "tpb_sunda_t" && x.fact == "size")
            .expect("tpb_sunda_t checked");
        assert_eq!(
            sunda.note.as_deref(),
            Some("found as tpb_t.sunda"),
            "{}",
            f.name
        );
        let ex = dwarf::extract(&obj, &check::request(&pins())).unwrap();
        assert_shows(f, &ex);
    }
}

#[test]
fn a_moved_member_fails_naming_it_in_every_flavour() {
    if !common::have_cc() {
        return;
    }
    let build = |n: &str, l: Lang, f: &[&str]| facts_obj(n, l, f, &[MOVE_TDRAM_CHANNEL], true);
    for f in FLAVOURS {
        let Some(obj) = build_flavour(f, "moved", &build) else {
            continue;
        };
        let r = pinned(&obj);
        assert_eq!(r.exit_code, 1, "{}", f.name);
        let fails: Vec<(&str, &str, &str, Option<&str>)> = r
            .facts
            .iter()
            .filter(|x| x.fails)
            .map(|x| {
                (
                    x.subject.as_str(),
                    x.fact,
                    x.expected.as_str(),
                    x.found.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            fails,
            [("dmem_t.tdram_channel", "offset", "64", Some("68"))],
            "{}",
            f.name
        );
        let first: Vec<(&str, &str)> = r
            .first_differences
            .iter()
            .map(|d| (d.strukt.as_str(), d.member.as_str()))
            .collect();
        assert_eq!(first, [("dmem_t", "tdram_channel")], "{}", f.name);
        assert!(
            r.to_text()
                .contains("FIRST    dmem_t: `tdram_channel` (offset expected 64, found 68)"),
            "{}:\n{}",
            f.name,
            r.to_text()
        );
    }
}

/// The generated header with its layout asserts taken out and one member of `dmem_t` moved by
/// four bytes (a padding member before `tdram_channel`): what a stale copy of the header would
/// compile to.
fn header_with_moved_member() -> String {
    let h: String = common::header()
        .lines()
        .filter(|l| !l.starts_with("NRT_LAYOUT_ASSERT("))
        .map(|l| format!("{l}\n"))
        .collect();
    common::mutate_member(
        &h,
        "dmem_t",
        "uint32_t tdram_channel",
        "uint32_t moved_by_4; uint32_t tdram_channel",
    )
}

#[test]
fn a_moved_member_of_the_header_fixture_fails_naming_it_in_every_flavour() {
    if !common::have_cc() {
        return;
    }
    let header = header_with_moved_member();
    let build = |n: &str, l: Lang, f: &[&str]| {
        ccheck::compile_lang(
            l,
            &header,
            &ccheck::fixture_source(),
            &common::workdir(n),
            "fixture",
            f,
        )
        .unwrap_or_else(|e| panic!("moved header fixture {n}: {e}"))
    };
    for f in FLAVOURS {
        let Some(obj) = build_flavour(f, "header-moved", &build) else {
            continue;
        };
        let r = pinned(&obj);
        assert_eq!(r.exit_code, 1, "{}", f.name);
        let first: Vec<(&str, &str)> = r
            .first_differences
            .iter()
            .map(|d| (d.strukt.as_str(), d.member.as_str()))
            .collect();
        assert!(
            first.contains(&("dmem_t", "tdram_channel")),
            "{}: {first:?}",
            f.name
        );
        assert!(
            r.facts.iter().any(|x| x.fails
                && x.subject == "dmem_t.tdram_channel"
                && x.fact == "offset"
                && x.expected == "64"
                && x.found.as_deref() == Some("68")),
            "{}:\n{}",
            f.name,
            r.to_text()
        );
    }
}

/// Each mutation of the facts fixture, the failing facts it must cause (subject, fact,
/// expected, found) and the first differing member named.
#[test]
fn each_kind_of_difference_fails_precisely() {
    if !common::have_cc() {
        return;
    }
    type Want = &'static [(&'static str, &'static str, &'static str, &'static str)];
    /// (what, mutation, failing facts, first differing (struct, member)).
    type Case = (
        &'static str,
        (&'static str, &'static str),
        Want,
        Option<(&'static str, &'static str)>,
    );
    let cases: &[Case] = &[
        (
            "array bound",
            (
                "    struct { uint8_t bytes[16]; } pages[1024];\n",
                "    struct { uint8_t bytes[16]; } pages[1000];\n    uint8_t _m[384];\n",
            ),
            &[
                ("tdrv_scratchpad_t.pages", "member size", "16384", "16000"),
                ("tdrv_scratchpad_t.pages", "count", "1024", "1000"),
            ],
            Some(("tdrv_scratchpad_t", "pages")),
        ),
        (
            "enum value",
            ("    HOST_DRAM = 1,\n", "    HOST_DRAM = 5,\n"),
            &[("dma_mem_location_t.HOST_DRAM", "value", "1", "5")],
            Some(("dma_mem_location_t", "HOST_DRAM")),
        ),
        (
            "member renamed",
            ("    uint64_t cpy_buf;\n", "    uint64_t copy_buf;\n"),
            &[("dmem_t.cpy_buf", "member", "@144 size 8", "")],
            Some(("dmem_t", "cpy_buf")),
        ),
        (
            "member size",
            (
                "    uint32_t num_mla;\n    uint8_t _fixture_pad_4[4];\n",
                "    uint64_t num_mla;\n",
            ),
            &[("tdrv_ctx_t.num_mla", "member size", "4", "8")],
            Some(("tdrv_ctx_t", "num_mla")),
        ),
    ];
    for (what, mutation, want, first) in cases {
        let obj = facts_obj(
            &format!("kind-{}", what.replace(' ', "-")),
            Lang::C,
            &["-g"],
            &[*mutation],
            true,
        );
        let r = pinned(&obj);
        let fails: Vec<(String, &str, String, String)> = r
            .facts
            .iter()
            .filter(|x| x.fails)
            .map(|x| {
                (
                    x.subject.clone(),
                    x.fact,
                    x.expected.clone(),
                    x.found.clone().unwrap_or_default(),
                )
            })
            .collect();
        let want: Vec<(String, &str, String, String)> = want
            .iter()
            .map(|(a, b, c, d)| (a.to_string(), *b, c.to_string(), d.to_string()))
            .collect();
        assert_eq!(fails, want, "{what}");
        let got = r
            .first_differences
            .first()
            .map(|d| (d.strukt.as_str(), d.member.as_str()));
        assert_eq!(got, *first, "{what}");
        assert_eq!(r.exit_code, 1, "{what}");
    }
}

#[test]
fn what_v2_does_not_state_never_fails() {
    if !common::have_cc() {
        return;
    }
    // v2 gives ht_node_t.val and key_type an offset only, model_t.qset likewise: their sizes,
    // bounds and types are free. Give them other shapes and type names than the fixture's.
    let obj = facts_obj(
        "unstated",
        Lang::C,
        &["-g"],
        &[
            ("    uint8_t val[8];\n", "    double val;\n"),
            (
                "    uint8_t key_type[8];\n",
                "    uint16_t key_type[2];\n    uint32_t _k;\n",
            ),
        ],
        true,
    );
    let ex = dwarf::extract(&obj, &check::request(&pins())).unwrap();
    let node = &ex.structs["ht_node_t"];
    assert_eq!(node.member("key_type").and_then(|m| m.size), Some(4));
    assert_eq!(
        node.member("val").map(|m| m.type_name.as_str()),
        Some("double")
    );
    let r = pinned(&obj);
    assert_eq!(r.exit_code, 0, "{}", r.to_text());
    for m in ["ht_node_t.val", "ht_node_t.key_type", "model_t.qset"] {
        let facts: Vec<&str> = r
            .facts
            .iter()
            .filter(|x| x.subject == m)
            .map(|x| x.fact)
            .collect();
        assert_eq!(facts, ["offset"], "{m}: offset-only pin");
    }
    // Type names the project invented (nrt_mutex_t, tpb_sunda_t as a type) are not looked
    // for: the fixture has neither, as libnrt has neither.
    assert!(r
        .facts
        .iter()
        .all(|x| !x.subject.starts_with("nrt_mutex_t")));
    // Chosen facts are findings at most: the default and --all modes pass as well.
    for mode in [Mode::Default, Mode::All] {
        let r = check::check(
            &obj,
            &CheckOptions {
                mode,
                strict: false,
            },
        )
        .unwrap();
        assert_eq!(r.exit_code, 0, "{mode:?}: {}", r.to_text());
        assert!(r.chosen.checked > 0, "{mode:?}");
    }
}

#[test]
fn category_tables_are_checked_byte_by_byte_when_present() {
    if !common::have_cc() {
        return;
    }
    let aggr = facts().tables["aggr_index"].clone();
    let list = |b: &[u8]| {
        b.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut changed = aggr.clone();
    changed[6] = 3;
    let from = format!("dmem_usage_type_to_aggr_index[23] = {{{}}};", list(&aggr));
    let to = format!(
        "dmem_usage_type_to_aggr_index[23] = {{{}}};",
        list(&changed)
    );
    let obj = facts_obj("table-byte", Lang::C, &["-g"], &[(&from, &to)], true);
    let (code, out, _) = cli(&["check", s(&obj), "--pinned"]);
    assert_eq!(code, 1, "{out}");
    for want in [
        &[
            "PASS",
            "dmem_usage_type_to_host_category",
            "23 bytes against v2 [tables]",
        ][..],
        &["PASS", "dmem_usage_type_to_device_category"],
        &[
            "FAIL",
            "dmem_usage_type_to_aggr_index",
            "first differing index [6]",
        ],
        &["[6] expected 11, found 3 (pinned)"],
    ] {
        assert!(line_with(&out, want).is_some(), "{want:?} in\n{out}");
    }
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("expected") && l.contains("(pinned)"))
            .count(),
        1,
        "{out}"
    );
    let (_, json, _) = cli(&["check", s(&obj), "--pinned", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["tables"][2]["first_diff"], 6);
    assert_eq!(v["tables"][2]["status"], "FAIL");
    // Without the symbols: reported as not present, never a failure.
    let bare = facts_obj("no-tables", Lang::C, &["-g"], &[], false);
    let (code, out, _) = cli(&["check", s(&bare), "--pinned"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("MISSING") && l.contains("not present"))
            .count(),
        3,
        "{out}"
    );
}

#[test]
fn cli_reports_json_and_checks_against_a_given_facts_file() {
    if !common::have_cc() {
        return;
    }
    let obj = facts_obj("cli-moved", Lang::C, &["-g"], &[MOVE_TDRAM_CHANNEL], true);
    let (code, out, _) = bin(&["check", s(&obj), "--pinned", "--json"]);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["exit_code"], 1);
    assert_eq!(v["mode"], "pinned");
    assert_eq!(v["first_differences"][0]["struct"], "dmem_t");
    assert_eq!(v["first_differences"][0]["member"], "tdram_channel");
    // Facts that say 68 make the moved fixture pass and fail nothing else.
    let dir = common::workdir("cli-facts");
    let moved = nrt_layout::facts::VENDORED.replacen(
        "{ name = \"tdram_channel\", offset = 64,",
        "{ name = \"tdram_channel\", offset = 68,",
        1,
    );
    let file = dir.join("moved.toml");
    std::fs::write(&file, &moved).unwrap();
    let (code, out, err) = bin(&["check", s(&obj), "--pinned", "--facts", s(&file)]);
    assert_eq!(code, 0, "{out}{err}");
    // A self-contradicting facts file is refused before any check: exit 2, struct and members.
    let bad = moved.replacen(
        "{ name = \"ref_count\", offset = 128,",
        "{ name = \"ref_count\", offset = 64,",
        1,
    );
    let file = dir.join("bad.toml");
    std::fs::write(&file, &bad).unwrap();
    let (code, out, err) = bin(&["check", s(&obj), "--facts", s(&file)]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("struct dmem_t") && err.contains("ref_count") && err.contains("overlap"),
        "{err}"
    );
}

#[test]
fn the_reader_sees_the_tables_in_the_header_fixture_in_every_flavour() {
    if !common::have_cc() {
        return;
    }
    let build = |n: &str, l: Lang, f: &[&str]| header_obj(n, l, f);
    for f in FLAVOURS {
        let Some(obj) = build_flavour(f, "header", &build) else {
            continue;
        };
        let ex = dwarf::extract(&obj, &check::request(&pins())).unwrap();
        assert_shows(f, &ex);
        for st in abi::STRUCTS {
            let d = ex
                .structs
                .get(st.name)
                .unwrap_or_else(|| panic!("{}: {} not read", f.name, st.name));
            assert_eq!(d.size, Some(st.size as u64), "{}: {}", f.name, st.name);
            for fi in st.fields {
                let m = d
                    .member(fi.name)
                    .unwrap_or_else(|| panic!("{}: {}.{}", f.name, st.name, fi.name));
                let dims: Vec<u64> = fi.dims().iter().map(|d| *d as u64).collect();
                assert_eq!(
                    (m.offset, m.dims.clone()),
                    (Some(fi.offset as u64), dims),
                    "{}: {}.{}",
                    f.name,
                    st.name,
                    fi.name
                );
                if fi.dims().first() != Some(&0) {
                    assert_eq!(
                        m.size,
                        Some(fi.size as u64),
                        "{}: {}.{}",
                        f.name,
                        st.name,
                        fi.name
                    );
                }
            }
        }
        for e in abi::ENUMS {
            let d = &ex.enums[e.name];
            let values: Vec<(String, i64)> =
                e.members.iter().map(|(n, v)| (n.to_string(), *v)).collect();
            assert_eq!(d.members, values, "{}: {}", f.name, e.name);
        }
        // --pinned: the tables meet every fact v2 states, so the header's own build passes.
        let p = pinned(&obj);
        assert_eq!(p.exit_code, 0, "{}:\n{}", f.name, p.to_text());
        // Every fact v2 states is checked, less the three `.rodata` tables: the header
        // fixture defines no table symbols (they are reported as not present).
        assert_eq!(
            p.facts.iter().filter(|x| x.pinned).count(),
            pinned_fact_count(facts()) - nrt_layout::facts::TABLE_SYMBOLS.len(),
            "{}",
            f.name
        );
        // --all: every chosen fact (compared with the tables) passes even with --strict.
        let r = check::check(
            &obj,
            &CheckOptions {
                mode: Mode::All,
                strict: true,
            },
        )
        .unwrap();
        let bad: Vec<String> = r
            .facts
            .iter()
            .filter(|x| !x.pinned && !matches!(x.status, Status::Pass | Status::Info))
            .map(|x| format!("{} {}", x.subject, x.fact))
            .collect();
        assert!(bad.is_empty(), "{}: {bad:?}", f.name);
        assert!(
            r.facts.iter().filter(|x| !x.pinned).count() > 100,
            "{}",
            f.name
        );
    }
}

#[test]
fn a_linked_shared_object_passes_and_its_stripped_copy_is_refused() {
    if !common::have_cc() {
        return;
    }
    let obj = facts_obj(
        "so",
        Lang::C,
        &["-g", "-gdwarf-4", "-fdebug-types-section", "-fPIC"],
        &[],
        true,
    );
    let so = obj.with_extension("so");
    let st = Command::new(ccheck::compiler())
        .args(["-shared", "-o", s(&so), s(&obj)])
        .status()
        .unwrap();
    assert!(st.success());
    let (code, out, _) = bin(&["check", s(&so), "--pinned"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        line_with(
            &out,
            &[
                "PASS",
                "dmem_usage_type_to_device_category",
                "found [12, 8, 8"
            ]
        )
        .is_some(),
        "tables read through .rodata VMAs:\n{out}"
    );
    assert!(
        !out.contains(" 0 of them type units"),
        "linked type units read:\n{out}"
    );
    let stripped = obj.with_extension("stripped.so");
    std::fs::copy(&so, &stripped).unwrap();
    if Command::new("strip")
        .arg(&stripped)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
    {
        let (code, out, err) = bin(&["check", s(&stripped)]);
        assert_eq!(code, 2, "{out}");
        assert!(
            err.contains("stripped ELF") && err.trim_end().lines().count() == 1,
            "{err}"
        );
    } else {
        common::skip("no `strip` for the stripped half");
    }
}

#[test]
fn bad_inputs_are_one_line_errors_with_exit_code_2() {
    if !common::have_cc() {
        return;
    }
    let dir = common::workdir("errors");
    let text = dir.join("notes.txt");
    std::fs::write(&text, "not an ELF at all\n").unwrap();
    let nodwarf =
        ccheck::compile_fixture(&common::header(), &dir.join("nog"), "fixture", &[]).unwrap();
    let split = ccheck::compile_fixture(
        &common::header(),
        &dir.join("split"),
        "fixture",
        &["-g", "-gsplit-dwarf"],
    )
    .unwrap();
    let withg =
        ccheck::compile_fixture(&common::header(), &dir.join("g"), "fixture", &["-g"]).unwrap();
    let stripped = dir.join("stripped.o");
    std::fs::copy(&withg, &stripped).unwrap();
    let have_strip = Command::new("strip")
        .arg(&stripped)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    let truncated = dir.join("truncated.o");
    std::fs::write(&truncated, &std::fs::read(&withg).unwrap()[..200]).unwrap();
    let mut cases = vec![
        (text.clone(), "not an ELF file"),
        (nodwarf, "ELF without DWARF"),
        (split, "split DWARF"),
        (truncated, "malformed ELF/DWARF"),
        (dir.join("does-not-exist.so"), "cannot read"),
    ];
    if have_strip {
        cases.push((stripped, "stripped ELF"));
    } else {
        common::skip("no `strip` for the stripped case");
    }
    for (path, want) in &cases {
        for sub in [&["check"][..], &["check", "--json"], &["dump"]] {
            let mut args: Vec<&str> = vec![sub[0], s(path)];
            args.extend_from_slice(&sub[1..]);
            if sub[0] == "dump" {
                args.extend_from_slice(&["--struct", "tpb_t"]);
            }
            let (code, out, err) = bin(&args);
            assert_eq!(code, 2, "{args:?}: {out}{err}");
            assert!(out.is_empty(), "{args:?}: nothing on stdout: {out}");
            assert_eq!(
                err.trim_end().lines().count(),
                1,
                "{args:?}: one line: {err}"
            );
            assert!(err.contains(want), "{args:?}: want `{want}` in {err}");
        }
    }
    let (code, _, err) = bin(&["dump", s(&withg), "--struct", "no_such_type_t"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no struct, union or enum named `no_such_type_t`"),
        "{err}"
    );
}

#[test]
fn dump_is_pahole_style() {
    if !common::have_cc() {
        return;
    }
    let obj = facts_obj("dump", Lang::C, &["-g"], &[], true);
    let (code, out, _) = bin(&["dump", s(&obj), "--struct", "ht_node_t"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("struct ht_node_t {\n"), "{out}");
    assert!(
        line_with(&out, &["uint8_t", "key_type[8];", "/*    32     8 */"]).is_some(),
        "{out}"
    );
    assert!(
        line_with(&out, &["uint64_t", "next;", "/*    40     8 */"]).is_some(),
        "{out}"
    );
    assert!(
        out.contains("/* size: 48, cachelines: 1, members: 6 */"),
        "{out}"
    );
    let (code, out, _) = bin(&["dump", s(&obj), "--struct", "tpb_sunda_t"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("found as tpb_t.sunda") && out.contains("ulib_staging_lock"),
        "{out}"
    );
    let (_, out, _) = bin(&["dump", s(&obj), "--struct", "dma_mem_usage_type_t"]);
    assert!(out.contains("DMA_MEM_USAGE_TYPE_MAX = 22,"), "{out}");
}

/// One member as pahole prints it: (name, offset, size, bounds).
type PMember = (String, u64, u64, Vec<u64>);
/// pahole's view of every struct: name → (size, members).
type PaholeView = BTreeMap<String, (u64, Vec<PMember>)>;

fn parse_pahole(text: &str) -> PaholeView {
    let mut out = PaholeView::new();
    let mut cur: Option<(String, Vec<PMember>)> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("struct ").and_then(|r| r.strip_suffix(" {")) {
            if !line.starts_with('\t') {
                cur = Some((name.to_string(), Vec::new()));
            }
            continue;
        }
        let Some((name, members)) = cur.as_mut() else {
            continue;
        };
        if let Some(rest) = t.strip_prefix("/* size: ") {
            let size: u64 = rest.split(',').next().unwrap().trim().parse().unwrap();
            out.insert(name.clone(), (size, std::mem::take(members)));
            cur = None;
            continue;
        }
        if t.starts_with("/*") || !t.contains(';') {
            continue;
        }
        let (decl, comment) = t.split_once("/*").unwrap();
        let decl = decl.trim().trim_end_matches(';');
        let last = decl
            .split_whitespace()
            .last()
            .unwrap()
            .trim_start_matches('*');
        let (mname, dims) = match last.split_once('[') {
            Some((n, d)) => (
                n,
                d.trim_end_matches(']')
                    .split("][")
                    .map(|x| x.parse().unwrap_or(0))
                    .collect(),
            ),
            None => (last, Vec::new()),
        };
        let nums: Vec<u64> = comment
            .trim_end_matches("*/")
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        members.push((mname.to_string(), nums[0], nums[1], dims));
    }
    out
}

#[test]
fn our_dwarf_reader_agrees_with_pahole() {
    if !common::have_cc() {
        return;
    }
    if Command::new("pahole").arg("--version").output().is_err() {
        common::skip("pahole (Debian `dwarves`) is not installed");
        return;
    }
    let obj = fixture("pahole", &common::header(), &["-g"]);
    let out = Command::new("pahole").arg(&obj).output().unwrap();
    assert!(
        out.status.success(),
        "pahole: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let view = parse_pahole(&String::from_utf8_lossy(&out.stdout));
    let ex = dwarf::extract(&obj, &check::request(&pins())).unwrap();
    for st in abi::STRUCTS {
        let ours = ex
            .structs
            .get(st.name)
            .unwrap_or_else(|| panic!("{} not read", st.name));
        let (psize, pmembers) = view
            .get(st.name)
            .unwrap_or_else(|| panic!("{} not in pahole's output", st.name));
        assert_eq!(ours.size, Some(*psize), "{}: size", st.name);
        assert_eq!(
            ours.members.len(),
            pmembers.len(),
            "{}: member count",
            st.name
        );
        for (m, (pn, poff, psz, pdims)) in ours.members.iter().zip(pmembers) {
            assert_eq!(
                m.name.as_deref(),
                Some(pn.as_str()),
                "{}: member order",
                st.name
            );
            assert_eq!(m.offset, Some(*poff), "{}.{pn}: offset", st.name);
            assert_eq!(m.size, Some(*psz), "{}.{pn}: size", st.name);
            assert_eq!(&m.dims, pdims, "{}.{pn}: bounds", st.name);
        }
    }
}

/// A tiny deterministic PRNG (no extra dependency).
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn corrupted_elves_are_errors_or_reports_never_panics() {
    if !common::have_cc() {
        return;
    }
    // The plain header fixture, and the facts fixture with zlib-compressed type units: the
    // decompressor and the type-unit paths see corrupt bytes too.
    let plain = fixture("fuzz", &common::header(), &["-g"]);
    let packed = facts_obj(
        "fuzz-packed",
        Lang::C,
        &["-gdwarf-4", "-fdebug-types-section", "-gz=zlib"],
        &[],
        true,
    );
    let req = check::request(&pins());
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut errors = 0;
    for round in 0..400 {
        let good = std::fs::read(if round % 2 == 0 { &plain } else { &packed }).unwrap();
        let mut bytes = good.clone();
        let flips = 1 + (xorshift(&mut rng) % 16) as usize;
        for _ in 0..flips {
            let i = (xorshift(&mut rng) as usize) % bytes.len();
            bytes[i] = xorshift(&mut rng) as u8;
        }
        if round % 10 == 0 {
            let cut = (xorshift(&mut rng) as usize) % bytes.len();
            bytes.truncate(cut);
        }
        let result =
            std::panic::catch_unwind(|| dwarf::extract_bytes(Path::new("fuzzed.o"), &bytes, &req));
        match result {
            Err(_) => panic!("round {round}: the reader panicked"),
            Ok(Err(e)) => {
                errors += 1;
                assert_eq!(e.exit_code(), 2);
                assert!(!e.to_string().contains('\n'), "{e}");
            }
            Ok(Ok(_)) => {}
        }
    }
    assert!(errors > 0, "some corruptions must be detected");
    // The exact error kinds for hand-made bad headers.
    let e = dwarf::extract_bytes(Path::new("x"), b"\x7fELF\x02\x01\x01", &req).unwrap_err();
    assert!(matches!(e, DwarfError::Malformed { .. }), "{e}");
    let e = dwarf::extract_bytes(Path::new("x"), b"", &req).unwrap_err();
    assert!(matches!(e, DwarfError::NotElf { .. }), "{e}");
}
