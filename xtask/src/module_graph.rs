//! `cargo xtask module-graph`: the core's module graph, computed from `core-nostd/src`, and the
//! shape rules it must keep (docs/ARCHITECTURE.md, "Inside the core" and principle 11):
//!
//! - every `crate::…` path in a file of top-level module `a` that names top-level module `b`
//!   is an edge `a → b` (a name the crate root re-exports counts for the module it comes from;
//!   comments, strings and `#[cfg(test)]` code are not read);
//! - a **mechanism** module imports no **behaviour** module;
//! - the graph has no cycle (the first one found is printed);
//! - no type has more than [`PUB_FN_MAX`] `pub fn`s in its inherent `impl` blocks, counted
//!   across all files.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::DynResult;

/// The modules that know nothing of models, tensors or the runtime's rules.
pub const MECHANISM: &[&str] = &[
    "abi",
    "list",
    "ht",
    "sync",
    "cell",
    "loom",
    "arena",
    "config",
    "handle",
    "error",
    "cstr",
    "fmt",
    "driver",
    "carve",
    "sim",
    "device",
    "host_heap",
    "atomic",
];

/// The most `pub fn`s one type may have (smoltcp's largest, `tcp::Socket`, has 43).
pub const PUB_FN_MAX: usize = 40;

/// Source text with comments, string and char literals blanked to spaces (line structure kept).
pub fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    while i < b.len() {
        let c = b[i];
        let prev_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            let end = b[i..]
                .iter()
                .position(|&x| x == b'\n')
                .map_or(b.len(), |n| i + n);
            blank(&mut out, &b[i..end]);
            i = end;
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                    depth += 1;
                    j += 2;
                } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &b[i..j]);
            i = j;
        } else if !prev_ident && (c == b'r' || (c == b'b' && b.get(i + 1) == Some(&b'r'))) && {
            let s = if c == b'b' { i + 2 } else { i + 1 };
            let h = b[s..].iter().take_while(|&&x| x == b'#').count();
            b.get(s + h) == Some(&b'"')
        } {
            let s = if c == b'b' { i + 2 } else { i + 1 };
            let hashes = b[s..].iter().take_while(|&&x| x == b'#').count();
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let body = s + hashes + 1;
            let end = b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |n| body + n + close.len());
            blank(&mut out, &b[i..end]);
            i = end;
        } else if c == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            blank(&mut out, &b[i..end]);
            i = end;
        } else if c == b'\'' {
            // A char literal (`'x'`, `'\n'`, `'\u{..}'`) or a lifetime / label (`'a`).
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|n| i + 2 + n + 1)
            } else {
                let ch = std::str::from_utf8(&b[i + 1..])
                    .ok()
                    .and_then(|s| s.chars().next())
                    .or_else(|| {
                        std::str::from_utf8(&b[i + 1..(i + 5).min(b.len())])
                            .ok()
                            .and_then(|s| s.chars().next())
                    });
                ch.and_then(|ch| {
                    let e = i + 1 + ch.len_utf8();
                    (b.get(e) == Some(&b'\'')).then_some(e + 1)
                })
            };
            match end {
                Some(e) => {
                    blank(&mut out, &b[i..e]);
                    i = e;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

/// `text` with every `#[cfg(test)]` item (an inline `mod … { … }` or a single item) blanked.
fn without_test_code(text: &str) -> String {
    let mut s = text.to_owned();
    while let Some(at) = s.find("#[cfg(test)]") {
        let rest = &s[at..];
        let brace = rest.find('{');
        let semi = rest.find(';');
        let end = match (brace, semi) {
            (Some(b), Some(sc)) if sc < b => at + sc + 1,
            (Some(b), _) => {
                let mut depth = 0usize;
                let mut end = s.len();
                for (k, ch) in s[at + b..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = at + b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(sc)) => at + sc + 1,
            (None, None) => s.len(),
        };
        let blanked: String = s[at..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        s.replace_range(at..end, &blanked);
    }
    s
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The first segment of each path that a `crate::` at `rest` starts (`crate::{a::b, c}` → `a`, `c`).
fn first_segments(rest: &str) -> Vec<String> {
    let rest = rest.trim_start();
    if let Some(inner) = rest.strip_prefix('{') {
        let mut depth = 1usize;
        let mut parts = vec![String::new()];
        for ch in inner.chars() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                ',' if depth == 1 => {
                    parts.push(String::new());
                    continue;
                }
                _ => {}
            }
            if let Some(p) = parts.last_mut() {
                p.push(ch);
            }
        }
        parts
            .iter()
            .map(|p| {
                p.trim_start()
                    .chars()
                    .take_while(|&c| is_ident(c))
                    .collect()
            })
            .filter(|p: &String| !p.is_empty())
            .collect()
    } else {
        let seg: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        if seg.is_empty() {
            vec![]
        } else {
            vec![seg]
        }
    }
}

/// The top-level module a file below `src/` belongs to (`ctx/lifecycle.rs` → `ctx`), or `None`
/// for the crate root.
fn top_module(rel: &str) -> Option<String> {
    let first = rel.split('/').next()?;
    let m = first.strip_suffix(".rs").unwrap_or(first);
    (m != "lib").then(|| m.to_owned())
}

/// The names `lib.rs` re-exports, mapped to the module they come from (`pub use a::{X, Y}`).
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let code = code_only(lib);
    for stmt in code.split(';') {
        let Some(at) = stmt.find("pub use ") else {
            continue;
        };
        let body = stmt[at + 8..].trim();
        let Some((module, names)) = body.split_once("::") else {
            continue;
        };
        let names = names.trim().trim_start_matches('{').trim_end_matches('}');
        for n in names.split(',') {
            let n = n.trim();
            let n = n.rsplit(" as ").next().unwrap_or(n).trim();
            if !n.is_empty() {
                map.insert(n.to_owned(), module.trim().to_owned());
            }
        }
    }
    map
}

/// The module graph: module → (module it imports → files that do).
pub type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// One source file: its path below `src/` and its text.
pub struct Source {
    pub rel: String,
    pub text: String,
}

/// Reads every `.rs` file below `src`, sorted by path.
pub fn read_tree(src: &Path) -> DynResult<Vec<Source>> {
    let mut paths = Vec::new();
    collect(src, &mut paths)?;
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(src)?
                .to_string_lossy()
                .replace(std::path::MAIN_SEPARATOR, "/");
            Ok(Source {
                rel,
                text: std::fs::read_to_string(&p)?,
            })
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> DynResult {
    for entry in std::fs::read_dir(dir)? {
        let p = entry?.path();
        if p.is_dir() {
            collect(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

/// The module graph of `files` (see the module documentation).
pub fn graph(files: &[Source]) -> (BTreeSet<String>, Graph) {
    let modules: BTreeSet<String> = files.iter().filter_map(|f| top_module(&f.rel)).collect();
    let reexports = files
        .iter()
        .find(|f| f.rel == "lib.rs")
        .map(|f| root_reexports(&f.text))
        .unwrap_or_default();
    let mut g = Graph::new();
    for f in files {
        let Some(from) = top_module(&f.rel) else {
            continue;
        };
        // A whole file of tests (`mod tests;` under `#[cfg(test)]`) is test code.
        if f.rel.ends_with("/tests.rs") {
            continue;
        }
        let code = without_test_code(&code_only(&f.text));
        let mut at = 0;
        while let Some(n) = code[at..].find("crate::") {
            let pos = at + n;
            at = pos + 7;
            let before = code[..pos].chars().next_back();
            if before.is_some_and(|c| is_ident(c) || c == '$') {
                continue;
            }
            for seg in first_segments(&code[at..]) {
                let target = reexports.get(&seg).cloned().unwrap_or(seg);
                if target != from && modules.contains(&target) {
                    g.entry(from.clone())
                        .or_default()
                        .entry(target)
                        .or_default()
                        .insert(f.rel.clone());
                }
            }
        }
    }
    (modules, g)
}

/// A cycle of the graph (its modules in order, the first repeated at the end), if it has one.
pub fn find_cycle(modules: &BTreeSet<String>, g: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut mark: BTreeMap<&str, Mark> = modules.iter().map(|m| (m.as_str(), Mark::New)).collect();
    fn visit<'a>(
        m: &'a str,
        g: &'a Graph,
        mark: &mut BTreeMap<&'a str, Mark>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        mark.insert(m, Mark::Open);
        stack.push(m);
        for next in g.get(m).into_iter().flat_map(|e| e.keys()) {
            match mark.get(next.as_str()).copied().unwrap_or(Mark::Done) {
                Mark::Open => {
                    let from = stack.iter().position(|&s| s == next)?;
                    let mut cycle: Vec<String> =
                        stack[from..].iter().map(|s| (*s).to_owned()).collect();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(next, g, mark, stack) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        mark.insert(m, Mark::Done);
        None
    }
    for m in modules {
        if mark.get(m.as_str()) == Some(&Mark::New) {
            let mut stack = Vec::new();
            if let Some(c) = visit(m, g, &mut mark, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

/// The number of `pub fn`s (`pub const fn`, `pub unsafe fn`, … included; `pub(crate)` not) in
/// the inherent `impl` blocks of each type, summed over `files`.
pub fn pub_fns(files: &[Source]) -> BTreeMap<String, usize> {
    let mut count = BTreeMap::new();
    for f in files {
        let code = code_only(&f.text);
        let mut at = 0;
        while let Some(n) = code[at..].find("impl") {
            let pos = at + n;
            at = pos + 4;
            let before = code[..pos].chars().next_back();
            let after = code[at..].chars().next();
            if before.is_some_and(is_ident) || after.is_some_and(is_ident) {
                continue;
            }
            let Some(open) = code[at..].find(['{', ';']).map(|k| at + k) else {
                break;
            };
            if code.as_bytes()[open] == b';' {
                continue;
            }
            let header = &code[at..open];
            // Trait impls and macro templates (`impl $name`) are not a type's own API.
            if header.contains(" for ") || header.contains('$') {
                continue;
            }
            let Some(name) = impl_type_name(header) else {
                continue;
            };
            let mut depth = 0usize;
            let mut end = code.len();
            for (k, ch) in code[open..].char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + k;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let body = &code[open + 1..end];
            let n = body.lines().filter(|l| is_pub_fn(l)).count();
            *count.entry(name).or_insert(0) += n;
            at = end;
        }
    }
    count
}

/// Whether a line declares a `pub fn` (with any of `const`, `async`, `unsafe`, `extern "C"`).
fn is_pub_fn(line: &str) -> bool {
    let mut words = line.split_whitespace();
    if words.next() != Some("pub") {
        return false;
    }
    words
        .find(|w| !matches!(*w, "const" | "async" | "unsafe" | "extern"))
        .is_some_and(|w| w == "fn")
}

/// The type an inherent impl header names (`<'a> Nrt<'a>` → `Nrt`, `<T: X> Arena<T>` → `Arena`).
fn impl_type_name(header: &str) -> Option<String> {
    let mut h = header.trim();
    if h.starts_with('<') {
        let mut depth = 0usize;
        let mut cut = h.len();
        for (k, ch) in h.char_indices() {
            match ch {
                '<' => depth += 1,
                '>' => {
                    depth -= 1;
                    if depth == 0 {
                        cut = k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        h = h[cut..].trim();
    }
    let path: String = h.chars().take_while(|&c| is_ident(c) || c == ':').collect();
    let name = path.rsplit("::").next()?.to_owned();
    (!name.is_empty()).then_some(name)
}

/// The graph's strongly connected components of more than one module (each a set of modules
/// that import each other, directly or not), by Tarjan's algorithm.
pub fn cycles(modules: &BTreeSet<String>, g: &Graph) -> Vec<BTreeSet<String>> {
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        next: usize,
        out: Vec<BTreeSet<String>>,
    }
    fn connect<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        let g = t.g;
        for w in g.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                connect(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.stack.contains(&w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = BTreeSet::new();
            while let Some(w) = t.stack.pop() {
                comp.insert(w.to_owned());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for m in modules {
        if !t.index.contains_key(m.as_str()) {
            connect(&mut t, m);
        }
    }
    t.out
}

/// The report: the graph, then every broken rule; `Err` lists the failures.
pub fn check(files: &[Source]) -> Result<String, String> {
    let (modules, g) = graph(files);
    let mut report = String::new();
    let mut failures = Vec::new();
    for (from, edges) in &g {
        let kind = if MECHANISM.contains(&from.as_str()) {
            "mechanism"
        } else {
            "behaviour"
        };
        let to: Vec<&str> = edges.keys().map(String::as_str).collect();
        let _ = writeln!(report, "{from} ({kind}) -> {}", to.join(" "));
        if kind == "mechanism" {
            for (to, files) in edges {
                if !MECHANISM.contains(&to.as_str()) {
                    let files: Vec<&str> = files.iter().map(String::as_str).collect();
                    failures.push(format!(
                        "mechanism module `{from}` imports behaviour module `{to}` ({})",
                        files.join(", ")
                    ));
                }
            }
        }
    }
    let comps = cycles(&modules, &g);
    for c in &comps {
        let names: Vec<&str> = c.iter().map(String::as_str).collect();
        let _ = writeln!(report, "cycle among: {}", names.join(" "));
    }
    if let Some(cycle) = find_cycle(&modules, &g) {
        let mut why = Vec::new();
        for w in cycle.windows(2) {
            let files = &g[&w[0]][&w[1]];
            let first = files.iter().next().map_or("", String::as_str);
            why.push(format!("{} -> {} ({first})", w[0], w[1]));
        }
        failures.push(format!(
            "module cycle: {}\n    {}",
            cycle.join(" -> "),
            why.join("\n    ")
        ));
    }
    let fns = pub_fns(files);
    let (widest, most) = fns
        .iter()
        .max_by_key(|(_, n)| **n)
        .map_or(("-", 0), |(t, n)| (t.as_str(), *n));
    let _ = writeln!(
        report,
        "most pub fn on one type: {widest} ({most}; at most {PUB_FN_MAX})"
    );
    for (ty, n) in &fns {
        if *n > PUB_FN_MAX {
            failures.push(format!("type `{ty}` has {n} pub fn (at most {PUB_FN_MAX})"));
        }
    }
    if failures.is_empty() {
        Ok(report)
    } else {
        Err(format!("{report}\n{}", failures.join("\n")))
    }
}

/// `cargo xtask module-graph`.
pub fn run(root: &Path) -> DynResult {
    eprintln!("==> module graph of core-nostd/src (layers, cycles, pub fn per type)");
    let files = read_tree(&root.join("core-nostd").join("src"))?;
    match check(&files) {
        Ok(report) => {
            print!("{report}");
            Ok(())
        }
        Err(e) => Err(format!("module-graph:\n{e}").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(rel: &str, text: &str) -> Source {
        Source {
            rel: rel.into(),
            text: text.into(),
        }
    }

    #[test]
    fn comments_strings_and_chars_are_not_code() {
        let c = code_only("a // crate::x\nb \"crate::y // z\" 'c' '\\'' r#\"crate::w\"# 'a d");
        assert!(!c.contains("crate::"));
        assert!(c.contains("'a d"), "{c}");
        assert_eq!(c.lines().count(), 2);
    }

    #[test]
    fn edges_cycles_and_layers() {
        let files = [
            src("lib.rs", "pub use b::Thing;\n"),
            src("arena.rs", "use crate::{abi::X, model::Y};\n"),
            src("abi.rs", "fn f() {}\n"),
            src("model/mod.rs", "use crate::Thing;\n"),
            src(
                "b.rs",
                "fn g() -> crate::model::Z {}\n#[cfg(test)]\nmod tests { use crate::arena; }\n",
            ),
        ];
        let (modules, g) = graph(&files);
        assert!(g["arena"].contains_key("model"));
        assert!(g["model"].contains_key("b"), "re-export maps to its module");
        assert!(!g["b"].contains_key("arena"), "test code is not read");
        assert!(find_cycle(&modules, &g)
            .unwrap()
            .contains(&"model".to_owned()));
        let err = check(&files).unwrap_err();
        assert!(err.contains("mechanism module `arena` imports behaviour module `model`"));
        assert!(err.contains("module cycle"));

        let ok = [src("arena.rs", "use crate::abi::X;\n"), src("abi.rs", "")];
        assert!(check(&ok).is_ok());

        // Every cycle is refused, the state layer's included.
        let state = [
            src("ctx.rs", "use crate::dmem::X;\n"),
            src("dmem/mod.rs", "use crate::ctx::Nrt;\n"),
        ];
        let err = check(&state).unwrap_err();
        assert!(err.contains("cycle among: ctx dmem"), "{err}");
        assert!(err.contains("module cycle: ctx -> dmem -> ctx"), "{err}");
    }

    #[test]
    fn pub_fns_are_counted_per_type_across_files() {
        let many: String = (0..=PUB_FN_MAX)
            .map(|i| format!("    pub fn f{i}(&self) {{}}\n"))
            .collect();
        let files = [
            src("a.rs", "impl<'a> Nrt<'a> {\n    pub fn x(&self) {}\n    pub(crate) fn y() {}\n    pub const fn z() {}\n}\nimpl Tr for Nrt<'_> { pub fn no() {} }\n"),
            src("b.rs", &format!("impl Nrt<'_> {{\n{many}}}\n")),
        ];
        let n = pub_fns(&files);
        assert_eq!(n["Nrt"], 2 + PUB_FN_MAX + 1);
        assert!(check(&files).unwrap_err().contains("type `Nrt` has"));
    }
}
