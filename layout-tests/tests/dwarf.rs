//! Issue 8: the DWARF checker. The generated header compiled with `cc -g -c` must pass; copies
//! with a member moved, an array bound changed, an enum value or a table byte changed must fail
//! precisely; our DWARF reader must agree with pahole; bad inputs are one-line errors, exit 2.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use nrt_core::abi;
use nrt_layout::ccheck;
use nrt_layout::check::{self, CheckOptions, Mode, Status};
use nrt_layout::cli::run_cli_with;
use nrt_layout::dwarf::{self, DwarfError};

fn fixture(name: &str, header: &str, flags: &[&str]) -> PathBuf {
    ccheck::compile_fixture(header, &common::workdir(name), "fixture", flags)
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
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

#[test]
fn fixture_round_trips_in_every_mode() {
    if !common::have_cc() {
        return;
    }
    let obj = fixture("roundtrip", &common::header(), &["-g"]);
    for mode in [Mode::Default, Mode::Pinned, Mode::All] {
        let r = check::check(&obj, &CheckOptions { mode, strict: true }).unwrap();
        let bad: Vec<_> = r
            .facts
            .iter()
            .filter(|f| !matches!(f.status, Status::Pass | Status::Info))
            .collect();
        assert!(bad.is_empty(), "{mode:?}: {bad:#?}");
        assert_eq!(r.exit_code, 0);
        for t in &r.tables {
            assert_eq!(t.status, Status::Pass, "{}", t.symbol);
            assert_eq!(t.found.as_deref(), Some(&t.expected[..]), "{}", t.symbol);
        }
    }
    let all = check::check(
        &obj,
        &CheckOptions {
            mode: Mode::All,
            strict: false,
        },
    )
    .unwrap();
    // Every non-reserved member of every struct got an offset fact.
    for st in abi::STRUCTS {
        for f in st.fields.iter().filter(|f| !nrt_layout::is_reserved(f)) {
            let subj = format!("{}.{}", st.name, f.name);
            assert!(
                all.facts
                    .iter()
                    .any(|x| x.subject == subj && x.fact == "offset"),
                "{subj}"
            );
        }
    }
    let pinned = check::check(
        &obj,
        &CheckOptions {
            mode: Mode::Pinned,
            strict: false,
        },
    )
    .unwrap();
    assert!(pinned.facts.iter().all(|f| f.pinned));
    assert!(pinned
        .facts
        .iter()
        .any(|f| f.subject == "tpb_t.model_db" && f.fact == "offset"));
    assert!(
        pinned
            .facts
            .iter()
            .any(|f| f.subject == "tpb_t.pooling_q7_nrtucode_core" && f.fact == "bounds"),
        "the observed count of a chosen member is pinned"
    );
    assert!(
        pinned
            .facts
            .iter()
            .any(|f| f.subject == "nrt_mutex_t" && f.fact == "size"),
        "model_db_lock's size pins nrt_mutex_t"
    );
    assert!(
        !pinned
            .facts
            .iter()
            .any(|f| f.subject == "dmem_t.mem_handle"),
        "chosen members are not pinned facts"
    );
}

#[test]
fn cli_text_and_json_for_the_fixture() {
    if !common::have_cc() {
        return;
    }
    let obj = fixture("cli", &common::header(), &["-g"]);
    let (code, out, _) = cli(&["check", s(&obj)]);
    assert_eq!(code, 0, "{out}");
    assert!(
        line_with(
            &out,
            &[
                "PASS",
                "tpb_t.model_db",
                "offset",
                "expected 20032, found 20032"
            ]
        )
        .is_some(),
        "{out}"
    );
    assert!(
        line_with(
            &out,
            &["dmem_usage_type_to_host_category", "found [0, 1, 2,"]
        )
        .is_some(),
        "tables print the bytes found:\n{out}"
    );
    assert!(out.contains("chosen facts (not failures):"), "{out}");
    let (code, out, _) = cli(&["check", s(&obj), "--json", "--all"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["mode"], "all");
    assert!(v["facts"].as_array().unwrap().len() > 400);
    assert_eq!(v["tables"][0]["found"].as_array().unwrap().len(), 23);
    let (code, _, err) = cli(&["check", s(&obj), "--all", "--pinned"]);
    assert_eq!(code, 2, "conflicting flags are a usage error: {err}");
}

#[test]
fn a_moved_pinned_member_fails_naming_struct_member_and_offsets() {
    if !common::have_cc() {
        return;
    }
    let h = common::header();
    let h = common::mutate_member(&h, "ht_node_t", "uint64_t buf_size", "uint64_t tmp_");
    let h = common::mutate_member(&h, "ht_node_t", "uint64_t bucket", "uint64_t buf_size");
    let h = common::mutate_member(&h, "ht_node_t", "uint64_t tmp_", "uint64_t bucket");
    let obj = fixture("moved", &h, &["-g"]);
    for extra in [&[][..], &["--pinned"][..], &["--all"][..]] {
        let mut args = vec!["check", s(&obj)];
        args.extend_from_slice(extra);
        let (code, out, _) = bin(&args);
        assert_eq!(code, 1, "{extra:?}\n{out}");
        assert!(
            line_with(
                &out,
                &[
                    "FAIL",
                    "ht_node_t.buf_size",
                    "offset",
                    "expected 16, found 24"
                ]
            )
            .is_some(),
            "{out}"
        );
        assert!(
            line_with(
                &out,
                &[
                    "FAIL",
                    "ht_node_t.bucket",
                    "offset",
                    "expected 24, found 16"
                ]
            )
            .is_some(),
            "{out}"
        );
        assert_eq!(
            out.lines().filter(|l| l.starts_with("FAIL")).count(),
            2,
            "{out}"
        );
    }
}

#[test]
fn a_changed_array_bound_fails_with_everything_it_moves() {
    if !common::have_cc() {
        return;
    }
    let h = common::mutate_member(
        &common::header(),
        "tdrv_scratchpad_t",
        "tdrv_scratchpad_page_t pages[1024]",
        "tdrv_scratchpad_page_t pages[1000]",
    );
    let obj = fixture("bound", &h, &["-g"]);
    let (code, out, _) = bin(&["check", s(&obj)]);
    assert_eq!(code, 1);
    for want in [
        &[
            "FAIL",
            "tdrv_scratchpad_t.pages",
            "bounds",
            "expected [1024], found [1000]",
        ][..],
        &[
            "FAIL",
            "tdrv_scratchpad_t.pages",
            "member size",
            "expected 16384, found 16000",
        ],
        &[
            "FAIL",
            "tdrv_scratchpad_t ",
            "size",
            "expected 16440, found 16056",
        ],
        &["FAIL", "tpb_t ", "size", "expected 39320, found 38936"],
        &[
            "FAIL",
            "mla_t.top_sps",
            "offset",
            "expected 314672, found 311600",
        ],
        &["FAIL", "tdrv_ctx_t ", "size"],
    ] {
        assert!(line_with(&out, want).is_some(), "{want:?} in\n{out}");
    }
}

#[test]
fn swapped_bounds_of_a_pinned_count_fail() {
    if !common::have_cc() {
        return;
    }
    let h = common::mutate_member(
        &common::header(),
        "dma_mem_log_t",
        "uint64_t memory_usage_nc[8][23]",
        "uint64_t memory_usage_nc[23][8]",
    );
    let obj = fixture("swapped", &h, &["-g"]);
    let (code, out, _) = cli(&["check", s(&obj), "--pinned"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_with(
            &out,
            &[
                "FAIL",
                "dma_mem_log_t.memory_usage_nc",
                "bounds",
                "expected [8][23], found [23][8]"
            ]
        )
        .is_some(),
        "{out}"
    );
}

#[test]
fn chosen_members_are_findings_unless_strict() {
    if !common::have_cc() {
        return;
    }
    let h = common::header();
    let h = common::mutate_member(&h, "dmem_t", "uint32_t mem_type", "uint32_t tmp_");
    let h = common::mutate_member(&h, "dmem_t", "uint32_t mem_usage_type", "uint32_t mem_type");
    let h = common::mutate_member(&h, "dmem_t", "uint32_t tmp_", "uint32_t mem_usage_type");
    let obj = fixture("chosen", &h, &["-g"]);
    let (code, out, _) = cli(&["check", s(&obj)]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("— 387 agree, 2 differ, 0 missing") || out.contains(" 2 differ, 0 missing"),
        "{out}"
    );
    assert!(
        !out.contains("dmem_t.mem_type"),
        "default mode does not list chosen facts:\n{out}"
    );
    let (code, out, _) = cli(&["check", s(&obj), "--all"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        line_with(
            &out,
            &[
                "FINDING",
                "dmem_t.mem_type",
                "offset",
                "expected 48, found 52",
                "[chosen"
            ]
        )
        .is_some(),
        "{out}"
    );
    assert!(
        line_with(
            &out,
            &[
                "FINDING",
                "dmem_t.mem_usage_type",
                "offset",
                "expected 52, found 48"
            ]
        )
        .is_some(),
        "{out}"
    );
    let (code, out, _) = cli(&["check", s(&obj), "--all", "--strict"]);
    assert_eq!(code, 1);
    assert!(
        line_with(
            &out,
            &["FAIL", "dmem_t.mem_type", "offset", "expected 48, found 52"]
        )
        .is_some(),
        "{out}"
    );
    let (code, _, _) = cli(&["check", s(&obj), "--pinned"]);
    assert_eq!(code, 0);
}

#[test]
fn enum_values_and_table_bytes_are_checked() {
    if !common::have_cc() {
        return;
    }
    let h = common::mutate(
        &common::header(),
        "    HOST_DRAM = 1,\n",
        "    HOST_DRAM = 5,\n",
    );
    // Host table: index 18 (pinned sentinel) 20 -> 19. Device table: index 0 (chosen) 7 -> 9.
    let host = "dmem_usage_type_to_host_category[23] = {\n    0, 1, 2, 3, 4, 4, 6, 1, 4, 5, 4, 4,\n    4, 4, 4, 4, 4, 4, 20,";
    let h = common::mutate(&h, host, &host.replace("4, 4, 20,", "4, 4, 19,"));
    let dev = "dmem_usage_type_to_device_category[23] = {\n    7,";
    let h = common::mutate(&h, dev, &dev.replace("    7,", "    9,"));
    let obj = fixture("values", &h, &["-g"]);
    let (code, out, _) = cli(&["check", s(&obj)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_with(
            &out,
            &[
                "FAIL",
                "dma_mem_location_t.HOST_DRAM",
                "value",
                "expected 1, found 5"
            ]
        )
        .is_some(),
        "{out}"
    );
    assert!(
        line_with(
            &out,
            &[
                "FAIL",
                "dmem_usage_type_to_host_category",
                "found [0, 1, 2, 3, 4, 4, 6, 1, 4, 5, 4, 4, 4, 4, 4, 4, 4, 4, 19, 20"
            ]
        )
        .is_some(),
        "{out}"
    );
    assert!(
        line_with(&out, &["[18] expected 20, found 19 (pinned)"]).is_some(),
        "{out}"
    );
    assert!(
        line_with(
            &out,
            &[
                "FINDING",
                "dmem_usage_type_to_device_category",
                "found [9, 8,"
            ]
        )
        .is_some(),
        "{out}"
    );
    assert!(
        line_with(&out, &["[0] expected 7, found 9 (chosen)"]).is_some(),
        "{out}"
    );
}

#[test]
fn types_libnrt_leaves_anonymous_are_found_through_their_member() {
    if !common::have_cc() {
        return;
    }
    // No type named tpb_sunda_t (libnrt's `sunda` is an anonymous union), and ht_node_t.val
    // inside an anonymous union: both must still be checked.
    let h = common::header().replace("tpb_sunda_t", "tpb_sunda_renamed_t");
    let h = common::mutate_member(
        &h,
        "ht_node_t",
        "void *val",
        "union { void *val; uint64_t val_bits; }",
    );
    let src = ccheck::fixture_source().replace("tpb_sunda_t", "tpb_sunda_renamed_t");
    let dir = common::workdir("anonymous");
    let obj = ccheck::compile_c(&h, &src, &dir, "fixture", &["-g"]).unwrap();
    let r = check::check(
        &obj,
        &CheckOptions {
            mode: Mode::All,
            strict: true,
        },
    )
    .unwrap();
    let size = r
        .facts
        .iter()
        .find(|f| f.subject == "tpb_sunda_t" && f.fact == "size")
        .expect("tpb_sunda_t checked");
    assert_eq!(size.status, Status::Pass);
    assert_eq!(size.note.as_deref(), Some("found as tpb_t.sunda"));
    let val = r
        .facts
        .iter()
        .find(|f| f.subject == "ht_node_t.val" && f.fact == "offset")
        .unwrap();
    assert_eq!(
        (val.status, val.found.as_deref()),
        (Status::Pass, Some("8"))
    );
    assert_eq!(r.exit_code, 0, "{}", r.to_text());
    let dumped = dwarf::dump(&obj, "tpb_sunda_t").unwrap();
    assert!(
        dumped.contains("found as tpb_t.sunda") && dumped.contains("ulib_staging_lock"),
        "{dumped}"
    );
}

#[test]
fn a_linked_shared_object_passes_and_its_stripped_copy_is_refused() {
    if !common::have_cc() {
        return;
    }
    let obj = fixture("so", &common::header(), &["-g", "-fPIC"]);
    let so = obj.with_extension("so");
    let st = Command::new(ccheck::compiler())
        .args(["-shared", "-o", s(&so), s(&obj)])
        .status()
        .unwrap();
    assert!(st.success());
    let (code, out, _) = bin(&["check", s(&so), "--all", "--strict"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        line_with(
            &out,
            &[
                "PASS",
                "dmem_usage_type_to_device_category",
                "found [7, 8, 9"
            ]
        )
        .is_some(),
        "tables read through .rodata VMAs:\n{out}"
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
    let obj = fixture("dump", &common::header(), &["-g"]);
    let (code, out, _) = bin(&["dump", s(&obj), "--struct", "ht_node_t"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("struct ht_node_t {\n"), "{out}");
    assert!(
        line_with(&out, &["uint32_t", "key_type;", "/*    32     4 */"]).is_some(),
        "{out}"
    );
    assert!(
        line_with(&out, &["ht_node_t *", "next;", "/*    40     8 */"]).is_some(),
        "{out}"
    );
    assert!(
        out.contains("/* size: 48, cachelines: 1, members: 7 */"),
        "{out}"
    );
    let (_, out, _) = bin(&["dump", s(&obj), "--struct", "ht_t"]);
    assert!(
        line_with(&out, &["ht_node_t", "buckets[];", "/*    32     0 */"]).is_some(),
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
    let ex = dwarf::extract(&obj, &check::request()).unwrap();
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
    let obj = fixture("fuzz", &common::header(), &["-g"]);
    let good = std::fs::read(&obj).unwrap();
    let req = check::request();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut errors = 0;
    for round in 0..300 {
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
