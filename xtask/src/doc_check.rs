//! `cargo xtask doc-check`: the repository explains itself, in the present tense.
//!
//! Fails on:
//! - an issue number (`issue 12`, `Issue #3`) or "done means" in a `.rs`, `.h`, `.c`, `.md` or
//!   `.toml` file other than `docs/CHANGELOG.md`: history lives in git and the changelog;
//! - a reference to the inputs outside the repository (`../shared`, `/work/shared`,
//!   `shared/spec/`, …) in any file outside `.ci/` and `xtask/`;
//! - a `spec §N` citation with no `§N` heading in `docs/SPEC.md`, a `public API §N` / `public
//!   ABI §N` one with none in `docs/INTERFACES.md`, a `neff-format §N` one with none in
//!   `docs/NEFF-FORMAT.md` (ranges and lists such as `spec §4.4–§4.5, §5` check every member);
//! - `docs/PERFORMANCE.md` longer than [`PERFORMANCE_MAX_LINES`] lines.
//!
//! `cargo xtask ci` runs it first: it needs no build.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::DynResult;

/// The longest `docs/PERFORMANCE.md` may be: a results page, not a diary.
pub const PERFORMANCE_MAX_LINES: usize = 400;

/// The one file allowed to speak of issues and history.
const CHANGELOG: &str = "docs/CHANGELOG.md";

/// Where the project's inputs may still be named (CI and automation only).
const SHARED_ALLOWED: &[&str] = &[".ci/", "xtask/"];

/// Spellings of a path into the inputs outside the repository.
const SHARED_REFS: &[&str] = &[
    "../shared",
    "/work/shared",
    "shared/spec/",
    "shared/reference/",
    "shared/design/",
];

/// Citation prefixes and the page whose headings they must name.
const CITATIONS: &[(&str, &str)] = &[
    ("spec §", "docs/SPEC.md"),
    ("public API §", "docs/INTERFACES.md"),
    ("public ABI §", "docs/INTERFACES.md"),
    ("neff-format §", "docs/NEFF-FORMAT.md"),
];

/// Files that cite docs/NEFF-FORMAT.md by a bare `§N` (as `nrt-neff` does throughout).
const BARE_NEFF_FORMAT: &[&str] = &["neff/", "docs/NEFF.md"];

/// Extensions whose text is checked for history and citations.
const TEXT_EXTS: &[&str] = &["rs", "h", "c", "md", "toml"];

/// Files whose text is not checked for history and citations: vendored from outside byte for
/// byte (its sources' tags are not this project's words), and this checker, which spells out
/// what it looks for.
const EXEMPT: &[&str] = &[
    "layout-tests/facts/layout-facts.toml",
    "xtask/src/doc_check.rs",
];

/// One finding: where and what.
#[derive(Debug, PartialEq, Eq)]
pub struct Finding {
    /// Repository-relative path.
    pub path: String,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub what: String,
}

/// Runs every check over the repository at `root`; prints each finding and fails if any.
pub fn run(root: &Path) -> DynResult {
    eprintln!("==> doc-check (history, references outside the repository, citations, PERFORMANCE.md length)");
    let files = tracked_files(root)?;
    let mut headings = Vec::new();
    for (_, page) in CITATIONS {
        let text = std::fs::read_to_string(root.join(page))
            .map_err(|e| format!("doc-check: {page}: {e}"))?;
        headings.push((*page, section_headings(&text)));
    }
    let mut findings = Vec::new();
    for rel in &files {
        let Ok(text) = std::fs::read_to_string(root.join(rel)) else {
            continue; // binary or unreadable: nothing to cite or narrate
        };
        findings.extend(check_file(rel, &text, &headings));
    }
    let perf = "docs/PERFORMANCE.md";
    if let Ok(text) = std::fs::read_to_string(root.join(perf)) {
        let n = text.lines().count();
        if n > PERFORMANCE_MAX_LINES {
            findings.push(Finding {
                path: perf.into(),
                line: n,
                what: format!(
                    "{n} lines, more than {PERFORMANCE_MAX_LINES}: keep one table per benchmark with its command, date and commit"
                ),
            });
        }
    }
    if findings.is_empty() {
        return Ok(());
    }
    for f in &findings {
        eprintln!("{}:{}: {}", f.path, f.line, f.what);
    }
    Err(format!("doc-check: {} finding(s)", findings.len()).into())
}

/// The repository's files: `git ls-files`, or a walk that skips `target/` and `.git/` where
/// there is no git checkout.
fn tracked_files(root: &Path) -> DynResult<Vec<String>> {
    if let Ok(out) = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output()
    {
        if out.status.success() {
            return Ok(out
                .stdout
                .split(|&b| b == 0)
                .filter(|p| !p.is_empty())
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect());
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out)?;
    Ok(out)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> DynResult {
    for e in std::fs::read_dir(dir)? {
        let p: PathBuf = e?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            if name != "target" && name != ".git" {
                walk(root, &p, out)?;
            }
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

/// The section numbers a page's headings name: `## §3 …`, `### §3.2 …` → `3`, `3.2`.
pub fn section_headings(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| l.starts_with('#'))
        .filter_map(|l| {
            let at = l.find('§')?;
            let num = number_at(&l[at + '§'.len_utf8()..]);
            (!num.is_empty()).then_some(num)
        })
        .collect()
}

/// The section number at the start of `s` (`3`, `3.2`; a trailing `.` is not part of it).
fn number_at(s: &str) -> String {
    let n: String = s
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    n.trim_end_matches('.').to_owned()
}

/// Every finding in one file's text. `headings` pairs each cited page with its sections.
pub fn check_file(rel: &str, text: &str, headings: &[(&str, BTreeSet<String>)]) -> Vec<Finding> {
    let mut out = Vec::new();
    let ext = rel.rsplit('.').next().unwrap_or("");
    let texty = rel.contains('.') && TEXT_EXTS.contains(&ext) && !EXEMPT.contains(&rel);
    let shared_ok = SHARED_ALLOWED.iter().any(|p| rel.starts_with(p));
    for (i, line) in text.lines().enumerate() {
        let mut push = |what: String| {
            out.push(Finding {
                path: rel.to_owned(),
                line: i + 1,
                what,
            })
        };
        if !shared_ok {
            if let Some(r) = SHARED_REFS.iter().find(|r| line.contains(**r)) {
                push(format!(
                    "`{r}` points outside the repository: cite docs/SPEC.md, docs/INTERFACES.md or docs/NEFF-FORMAT.md"
                ));
            }
        }
        if !texty {
            continue;
        }
        if rel != CHANGELOG {
            if let Some(n) = issue_number(line) {
                push(format!(
                    "issue number `{n}`: say what and why; history belongs in git and docs/CHANGELOG.md"
                ));
            }
            let lower = line.to_lowercase();
            if lower.contains("done means") || lower.contains("done-means") {
                push("\"done means\": say what the code does and why".into());
            }
        }
        let mut prefixed = BTreeSet::new();
        for (prefix, page) in CITATIONS {
            let Some((_, known)) = headings.iter().find(|(p, _)| p == page) else {
                continue;
            };
            for (at, sec) in cited_at(line, prefix) {
                prefixed.insert(at);
                if !known.contains(&sec) {
                    push(format!("`{prefix}{sec}`: {page} has no `§{sec}` heading"));
                }
            }
        }
        let bare_neff = BARE_NEFF_FORMAT
            .iter()
            .any(|p| rel.starts_with(p) || rel == *p);
        let neff_headings = headings.iter().find(|(p, _)| *p == "docs/NEFF-FORMAT.md");
        if let (true, Some((page, known))) = (bare_neff, neff_headings) {
            for (at, _) in line.match_indices('§') {
                let sec = number_at(&line[at + '§'.len_utf8()..]);
                if !prefixed.contains(&at) && !sec.is_empty() && !known.contains(&sec) {
                    push(format!(
                        "`§{sec}` (this file's citations of the NEFF format): {page} has no `§{sec}` heading"
                    ));
                }
            }
        }
    }
    out
}

/// The first issue reference on a line (`issue 12`, `Issues 8 and 15`, `issue #3`), as written.
pub fn issue_number(line: &str) -> Option<&str> {
    // ASCII lowercasing keeps byte offsets, so offsets into `lower` index `line` too.
    let lower = line.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    lower.match_indices("issue").find_map(|(at, w)| {
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            return None;
        }
        let mut i = at + w.len();
        if bytes.get(i) == Some(&b's') {
            i += 1;
        }
        let spaces = bytes[i..]
            .iter()
            .take_while(|b| **b == b' ' || **b == b'-')
            .count();
        if spaces == 0 {
            return None; // `issue_tracker`, `issues:`
        }
        i += spaces;
        if bytes.get(i) == Some(&b'#') {
            i += 1;
        }
        let digits = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        (digits > 0).then(|| &line[at..i + digits])
    })
}

/// The sections a line cites after `prefix` (which ends in `§`), following ranges and lists:
/// `spec §4.4–§4.5, §5 and §7.2` → `4.4`, `4.5`, `5`, `7.2`.
#[cfg(test)]
fn cited_sections(line: &str, prefix: &str) -> Vec<String> {
    cited_at(line, prefix).into_iter().map(|(_, s)| s).collect()
}

/// The sections a line cites after `prefix` (which ends in `§`), following ranges and lists
/// (`spec §4.4–§4.5, §5 and §7.2`), each with the byte offset of its `§` in `line`.
fn cited_at(line: &str, prefix: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (at, _) in line.match_indices(prefix) {
        // The `§` is the prefix's last character.
        let mut mark = at + prefix.len() - '§'.len_utf8();
        let mut rest = &line[at + prefix.len()..];
        loop {
            let num = number_at(rest);
            if num.is_empty() {
                break;
            }
            rest = &rest[num.len()..];
            out.push((mark, num));
            // A continuation: a separator, then another `§N`.
            let t = rest.trim_start_matches(['.']);
            let t = t.trim_start();
            let t = ["–", "-", ",", "/", "and ", "&"]
                .iter()
                .find_map(|s| t.strip_prefix(s))
                .map(str::trim_start);
            match t.and_then(|t| t.strip_prefix('§')) {
                Some(next) => {
                    mark = line.len() - next.len() - '§'.len_utf8();
                    rest = next;
                }
                None => break,
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headings() -> Vec<(&'static str, BTreeSet<String>)> {
        let spec = "# t\n## §1 One\n### §1.1 Sub\n## §3 Three\n### §3.2 Path\n";
        vec![
            ("docs/SPEC.md", section_headings(spec)),
            ("docs/INTERFACES.md", section_headings("## §3 Driver\n")),
            ("docs/NEFF-FORMAT.md", section_headings("## §2 Header\n")),
        ]
    }

    #[test]
    fn headings_are_read_from_section_titles_only() {
        let h = section_headings("## §1 A\ntext §9\n### §3.2. B\n#### §10 C\n");
        assert_eq!(h.into_iter().collect::<Vec<_>>(), ["1", "10", "3.2"]);
    }

    #[test]
    fn issue_numbers_are_found_in_their_spellings() {
        assert_eq!(issue_number("// (issue 16 item 7)"), Some("issue 16"));
        assert_eq!(
            issue_number("//! Issues 8 and 15: the DWARF"),
            Some("Issues 8")
        );
        assert_eq!(issue_number("see issue #3"), Some("issue #3"));
        assert_eq!(issue_number("the issue-7 part"), Some("issue-7"));
        assert_eq!(issue_number("public issue threads"), None);
        assert_eq!(issue_number("tissue 3"), None);
        assert_eq!(issue_number("issue_3"), None);
    }

    #[test]
    fn citations_follow_ranges_and_lists() {
        assert_eq!(
            cited_sections("(spec §4.4–§4.5, §5 and §7.2).", "spec §"),
            ["4.4", "4.5", "5", "7.2"]
        );
        assert_eq!(cited_sections("spec §3.2. Next", "spec §"), ["3.2"]);
        assert_eq!(cited_sections("spec §1-§10; §9", "spec §"), ["1", "10"]);
        assert!(cited_sections("spec §public", "spec §").is_empty());
    }

    #[test]
    fn a_file_with_history_and_dangling_citations_fails() {
        let text = "// (issue 17 item 2) spec §3.2 ok, spec §3.4 missing\n\
                    // done means: x; public ABI §3 ok, public API §5 missing\n\
                    // ../shared/spec/000.txt; neff-format §2 ok, §8.1 is not cited with a prefix\n";
        let f = check_file("core-nostd/src/x.rs", text, &headings());
        let whats: Vec<&str> = f.iter().map(|f| f.what.as_str()).collect();
        assert_eq!(f.len(), 5, "{whats:#?}");
        assert!(whats[0].starts_with("issue number `issue 17`"));
        assert!(whats[1].contains("`spec §3.4`"));
        assert!(whats[2].contains("done means"));
        assert!(whats[3].contains("`public API §5`"));
        assert!(whats[4].contains("`../shared`"));
    }

    #[test]
    fn the_neff_crate_cites_the_format_by_bare_section() {
        let h = headings();
        let line = "// the header (§2), spec §3.2; §9\n";
        let f = check_file("neff/src/x.rs", line, &h);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!(f[0].what.starts_with("`§9`"), "{f:#?}");
        // Elsewhere a bare `§N` is not a citation of the NEFF format.
        assert!(check_file("core-nostd/src/x.rs", "// §9\n", &h).is_empty());
    }

    #[test]
    fn the_changelog_ci_and_xtask_have_their_exemptions() {
        let h = headings();
        assert!(check_file("docs/CHANGELOG.md", "issue 16, done means\n", &h).is_empty());
        assert!(check_file(".ci/run", "cp ../shared/spec/x .\n", &h).is_empty());
        assert!(check_file("xtask/src/main.rs", "../shared/spec/x\n", &h).is_empty());
        // Other files are checked for references outside the repository whatever they are.
        assert_eq!(check_file("Makefile", "../shared/x\n", &h).len(), 1);
        // A vendored file keeps its own sources' words.
        let facts = "layout-tests/facts/layout-facts.toml";
        assert!(check_file(facts, "P0 §2 issue 3\n", &h).is_empty());
    }
}
