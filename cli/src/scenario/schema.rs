//! The scenario file format: the TOML schema as written (`Raw*`), its errors located by line,
//! column and field ([`ScenarioError`]), and the conversion into the validated [`Scenario`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nrt_core::tensor::Placement;
use serde::Deserialize;
use toml::Spanned;

use nrt_host::config::{parse_visible_cores, DeviceChoice};
use nrt_host::manifest::Manifest;

use super::category::Category;
use super::model::{Action, Bound, Expect, ManifestRef, Scenario, SettingAt, Step};
use super::units::{Nth, Size, Status};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    description: Option<String>,
    device: Option<Spanned<String>>,
    lnc_size: Option<Spanned<u32>>,
    visible_cores: Option<Spanned<VisibleRaw>>,
    num_cores: Option<Spanned<u32>>,
    #[serde(default)]
    step: Vec<Spanned<RawStep>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum VisibleRaw {
    Int(u32),
    Str(String),
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStep {
    // actions
    load: Option<Spanned<String>>,
    unload: Option<Spanned<String>>,
    alloc_tensor: Option<Spanned<String>>,
    free_tensor: Option<Spanned<String>>,
    execute: Option<Spanned<String>>,
    expect: Option<RawExpect>,
    reset_peak: Option<Spanned<i64>>,
    fail_next_alloc: Option<Spanned<Nth>>,
    close: Option<Spanned<bool>>,
    repeat: Option<Spanned<u64>>,
    snapshot: Option<Spanned<String>>,
    // arguments
    core: Option<Spanned<i64>>,
    #[serde(rename = "as")]
    as_name: Option<Spanned<String>>,
    placement: Option<Spanned<String>>,
    size: Option<Spanned<Size>>,
    inputs: Option<Spanned<BTreeMap<String, String>>>,
    outputs: Option<Spanned<BTreeMap<String, String>>>,
    check: Option<Spanned<bool>>,
    #[serde(rename = "do")]
    body: Option<Vec<Spanned<RawStep>>>,
    note: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    status: Option<Spanned<Status>>,
    message_contains: Option<Spanned<String>>,
    core: Option<Spanned<i64>>,
    used_bytes: Option<Spanned<Size>>,
    used_at_most: Option<Spanned<Size>>,
    used_at_least: Option<Spanned<Size>>,
    peak_bytes: Option<Spanned<Size>>,
    peak_at_most: Option<Spanned<Size>>,
    peak_at_least: Option<Spanned<Size>>,
    category: Option<Spanned<String>>,
    bytes: Option<Spanned<Size>>,
    bytes_at_most: Option<Spanned<Size>>,
    bytes_at_least: Option<Spanned<Size>>,
    models_on_core: Option<Spanned<u64>>,
    model: Option<Spanned<String>>,
    model_bytes: Option<Spanned<Size>>,
    driver_bytes: Option<Spanned<Size>>,
    unchanged_since: Option<Spanned<String>>,
}

/// A bad scenario (or manifest it names): where, which field, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line (0 when the whole file is at fault, e.g. it cannot be read).
    pub line: usize,
    /// 1-based column (0 when unknown).
    pub column: usize,
    /// The field (key) at fault, when one is.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
    /// The offending source line, for display.
    pub source_line: Option<String>,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
            if self.column > 0 {
                write!(f, ":{}", self.column)?;
            }
        }
        f.write_str(": ")?;
        if let Some(k) = &self.field {
            write!(f, "field `{k}`: ")?;
        }
        f.write_str(&self.message)?;
        if let Some(l) = &self.source_line {
            write!(f, "\n  {:>4} | {}", self.line, l)?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioError {}

/// Line/column lookup over a source text.
struct Src<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Src<'_> {
    fn line_col(&self, offset: usize) -> (usize, usize) {
        // A span always starts on a character boundary; step back to one anyway rather than
        // panic on a surprise.
        let mut off = offset.min(self.text.len());
        while !self.text.is_char_boundary(off) {
            off -= 1;
        }
        let before = &self.text[..off];
        let line = before.matches('\n').count() + 1;
        let col = before.rfind('\n').map_or(off, |p| off - p - 1) + 1;
        (line, col)
    }
    fn line_text(&self, line: usize) -> Option<String> {
        self.text
            .lines()
            .nth(line.checked_sub(1)?)
            .map(|l| l.trim_end().to_string())
    }
    fn err(
        &self,
        span: std::ops::Range<usize>,
        field: Option<&str>,
        msg: impl Into<String>,
    ) -> ScenarioError {
        let (line, column) = self.line_col(span.start);
        ScenarioError {
            file: self.file.to_path_buf(),
            line,
            column,
            field: field.map(str::to_string),
            message: msg.into(),
            source_line: self.line_text(line),
        }
    }
    /// A TOML/serde error with its span, naming the key written on that line when the message
    /// does not already.
    fn toml_err(&self, e: &toml::de::Error) -> ScenarioError {
        let msg = e.message().trim().replace('\n', "; ");
        match e.span() {
            Some(span) => {
                let (line, column) = self.line_col(span.start);
                let text = self.line_text(line);
                let field = if msg.contains("field `") {
                    None
                } else {
                    text.as_deref()
                        .and_then(|l| l.split_once('='))
                        .map(|(k, _)| k.trim().trim_matches('"').to_string())
                        .filter(|k| !k.is_empty() && !k.starts_with('['))
                };
                ScenarioError {
                    file: self.file.to_path_buf(),
                    line,
                    column,
                    field,
                    message: msg,
                    source_line: text,
                }
            }
            None => ScenarioError {
                file: self.file.to_path_buf(),
                line: 0,
                column: 0,
                field: None,
                message: msg,
                source_line: None,
            },
        }
    }
}

const ACTIONS: &str = "load, unload, alloc_tensor, free_tensor, execute, expect, reset_peak, \
                       fail_next_alloc, snapshot, close, repeat";

impl Scenario {
    /// Reads and validates a scenario file, loading every manifest it names.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
            field: None,
            message: format!("cannot read scenario: {e}"),
            source_line: None,
        })?;
        Self::parse(path, &text)
    }

    /// Parses scenario text; `path` names it in errors and anchors relative manifest paths.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ScenarioError> {
        let src = Src { file: path, text };
        let raw: RawScenario = toml::from_str(text).map_err(|e| src.toml_err(&e))?;
        let device = match &raw.device {
            None => None,
            Some(d) => Some(
                DeviceChoice::parse(d.get_ref())
                    .map_err(|e| src.err(d.span(), Some("device"), e.reason))?,
            ),
        };
        let visible_cores = match &raw.visible_cores {
            None => None,
            Some(v) => Some(match v.get_ref() {
                VisibleRaw::Int(n) => (*n, 1),
                VisibleRaw::Str(s) => parse_visible_cores(s)
                    .map_err(|e| src.err(v.span(), Some("visible_cores"), e.reason))?,
            }),
        };
        if raw.step.is_empty() {
            return Err(ScenarioError {
                file: path.to_path_buf(),
                line: 0,
                column: 0,
                field: Some("step".into()),
                message: "the scenario has no [[step]] tables".into(),
                source_line: None,
            });
        }
        let at = |key: &'static str, span: Option<std::ops::Range<usize>>| {
            span.map(|span| {
                let e = src.err(span, None, "");
                SettingAt {
                    key,
                    line: e.line,
                    column: e.column,
                    source_line: e.source_line,
                }
            })
        };
        let setting_at = [
            at("lnc_size", raw.lnc_size.as_ref().map(Spanned::span)),
            at(
                "visible_cores",
                raw.visible_cores.as_ref().map(Spanned::span),
            ),
            at("num_cores", raw.num_cores.as_ref().map(Spanned::span)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut cache: BTreeMap<PathBuf, ManifestRef> = BTreeMap::new();
        let steps = raw
            .step
            .into_iter()
            .map(|s| convert_step(&src, dir, &mut cache, s))
            .collect::<Result<Vec<_>, _>>()?;
        let name = raw
            .name
            .or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "scenario".into());
        Ok(Scenario {
            path: path.to_path_buf(),
            name,
            description: raw.description,
            device,
            lnc_size: raw.lnc_size.map(|v| v.into_inner()),
            visible_cores,
            num_cores: raw.num_cores.map(|v| v.into_inner()),
            steps,
            setting_at,
        })
    }
}

fn convert_step(
    src: &Src<'_>,
    dir: &Path,
    cache: &mut BTreeMap<PathBuf, ManifestRef>,
    s: Spanned<RawStep>,
) -> Result<Step, ScenarioError> {
    let span = s.span();
    let (line, _) = src.line_col(span.start);
    let r = s.into_inner();
    let step_err = |msg: String| ScenarioError {
        file: src.file.to_path_buf(),
        line,
        column: 0,
        field: None,
        message: msg,
        source_line: src.line_text(line),
    };
    let mut present: Vec<&str> = Vec::new();
    for (k, on) in [
        ("load", r.load.is_some()),
        ("unload", r.unload.is_some()),
        ("alloc_tensor", r.alloc_tensor.is_some()),
        ("free_tensor", r.free_tensor.is_some()),
        ("execute", r.execute.is_some()),
        ("expect", r.expect.is_some()),
        ("reset_peak", r.reset_peak.is_some()),
        ("fail_next_alloc", r.fail_next_alloc.is_some()),
        ("close", r.close.is_some()),
        ("repeat", r.repeat.is_some()),
        ("snapshot", r.snapshot.is_some()),
    ] {
        if on {
            present.push(k);
        }
    }
    let action = match present.as_slice() {
        [] => {
            return Err(step_err(format!(
                "step has no action: give exactly one of {ACTIONS}"
            )))
        }
        [_] => present[0],
        many => {
            return Err(step_err(format!(
                "step has {} actions ({}): give exactly one per [[step]]",
                many.len(),
                many.join(", ")
            )))
        }
    };
    // Arguments an action does not take are mistakes worth naming.
    let allowed: &[&str] = match action {
        "load" => &["core", "as"],
        "alloc_tensor" => &["core", "placement", "size"],
        "execute" => &["inputs", "outputs", "check"],
        "repeat" => &["do"],
        _ => &[],
    };
    for (k, sp) in [
        ("core", r.core.as_ref().map(|v| v.span())),
        ("as", r.as_name.as_ref().map(|v| v.span())),
        ("placement", r.placement.as_ref().map(|v| v.span())),
        ("size", r.size.as_ref().map(|v| v.span())),
        ("inputs", r.inputs.as_ref().map(|v| v.span())),
        ("outputs", r.outputs.as_ref().map(|v| v.span())),
        ("check", r.check.as_ref().map(|v| v.span())),
    ] {
        if let Some(sp) = sp {
            if !allowed.contains(&k) {
                return Err(src.err(sp, Some(k), format!("`{action}` steps do not take `{k}`")));
            }
        }
    }
    if r.body.is_some() && action != "repeat" {
        return Err(step_err(format!(
            "`{action}` steps do not take `do` (only `repeat` does)"
        )));
    }
    let core = r.core.as_ref().map_or(0, |c| *c.get_ref());
    let name_of = |v: &Spanned<String>, field: &str| -> Result<String, ScenarioError> {
        let n = v.get_ref().trim();
        if n.is_empty() {
            Err(src.err(v.span(), Some(field), "must not be empty"))
        } else {
            Ok(n.to_string())
        }
    };
    let action = match action {
        "load" => {
            let p = r.load.as_ref().ok_or_else(|| step_err("load".into()))?;
            let rel = PathBuf::from(p.get_ref());
            let full = if rel.is_absolute() {
                rel
            } else {
                dir.join(rel)
            };
            let manifest = match cache.get(&full) {
                Some(m) => m.clone(),
                None => {
                    let m = Rc::new(Manifest::from_path(&full).map_err(|e| {
                        let msg = e.to_string();
                        let shown = full.display().to_string();
                        let msg = if msg.contains(&shown) {
                            msg
                        } else {
                            format!("{shown}: {msg}")
                        };
                        src.err(p.span(), Some("load"), msg)
                    })?);
                    cache.insert(full.clone(), m.clone());
                    m
                }
            };
            let name = match &r.as_name {
                Some(a) => name_of(a, "as")?,
                None => manifest.name.clone(),
            };
            Action::Load {
                path: full,
                manifest,
                core,
                name,
            }
        }
        "unload" => Action::Unload {
            name: name_of(
                r.unload.as_ref().ok_or_else(|| step_err("unload".into()))?,
                "unload",
            )?,
        },
        "alloc_tensor" => {
            let n = r
                .alloc_tensor
                .as_ref()
                .ok_or_else(|| step_err("alloc_tensor".into()))?;
            let placement = match &r.placement {
                None => Placement::Device,
                Some(p) => match p.get_ref().trim().to_ascii_lowercase().as_str() {
                    "device" => Placement::Device,
                    "host" => Placement::Host,
                    "virtual" => Placement::Virtual,
                    other => {
                        return Err(src.err(
                            p.span(),
                            Some("placement"),
                            format!("{other:?} is not a placement (device, host or virtual)"),
                        ))
                    }
                },
            };
            let size = r
                .size
                .as_ref()
                .ok_or_else(|| step_err("field `size` is required for `alloc_tensor`".into()))?;
            Action::AllocTensor {
                name: name_of(n, "alloc_tensor")?,
                placement,
                core,
                size: size.get_ref().0,
            }
        }
        "free_tensor" => Action::FreeTensor {
            name: name_of(
                r.free_tensor
                    .as_ref()
                    .ok_or_else(|| step_err("free_tensor".into()))?,
                "free_tensor",
            )?,
        },
        "execute" => Action::Execute {
            model: name_of(
                r.execute
                    .as_ref()
                    .ok_or_else(|| step_err("execute".into()))?,
                "execute",
            )?,
            inputs: r
                .inputs
                .map(|m| m.into_inner().into_iter().collect())
                .unwrap_or_default(),
            outputs: r
                .outputs
                .map(|m| m.into_inner().into_iter().collect())
                .unwrap_or_default(),
            check: r.check.is_none_or(|c| c.into_inner()),
        },
        "expect" => Action::Expect(Box::new(convert_expect(
            src,
            line,
            r.expect.unwrap_or_default(),
        )?)),
        "reset_peak" => Action::ResetPeak {
            core: r.reset_peak.map_or(0, |c| c.into_inner()),
        },
        "fail_next_alloc" => Action::FailNextAlloc {
            nth: r.fail_next_alloc.map_or(1, |n| n.into_inner().0),
        },
        "snapshot" => Action::Snapshot {
            name: name_of(
                r.snapshot
                    .as_ref()
                    .ok_or_else(|| step_err("snapshot".into()))?,
                "snapshot",
            )?,
        },
        "close" => {
            let c = r.close.ok_or_else(|| step_err("close".into()))?;
            if !*c.get_ref() {
                return Err(src.err(
                    c.span(),
                    Some("close"),
                    "write `close = true` (or leave the step out)",
                ));
            }
            Action::Close
        }
        "repeat" => {
            let t = r.repeat.ok_or_else(|| step_err("repeat".into()))?;
            let body = r.body.unwrap_or_default();
            if body.is_empty() {
                return Err(src.err(
                    t.span(),
                    Some("repeat"),
                    "a `repeat` step needs its body as [[step.do]] tables",
                ));
            }
            let steps = body
                .into_iter()
                .map(|s| convert_step(src, dir, cache, s))
                .collect::<Result<Vec<_>, _>>()?;
            Action::Repeat {
                times: t.into_inner(),
                steps,
            }
        }
        _ => return Err(step_err(format!("unknown action (give one of {ACTIONS})"))),
    };
    Ok(Step {
        line,
        action,
        note: r.note,
    })
}

fn convert_expect(src: &Src<'_>, line: usize, e: RawExpect) -> Result<Expect, ScenarioError> {
    let sz = |v: &Option<Spanned<Size>>| v.as_ref().map(|s| s.get_ref().0);
    let mut x = Expect {
        status: e.status.as_ref().map(|s| s.get_ref().0),
        message_contains: e.message_contains.map(|s| s.into_inner()),
        core: e.core.as_ref().map(|c| *c.get_ref()),
        used: Bound {
            exact: sz(&e.used_bytes),
            at_most: sz(&e.used_at_most),
            at_least: sz(&e.used_at_least),
        },
        peak: Bound {
            exact: sz(&e.peak_bytes),
            at_most: sz(&e.peak_at_most),
            at_least: sz(&e.peak_at_least),
        },
        category: None,
        models_on_core: e.models_on_core.as_ref().map(|m| *m.get_ref()),
        model: None,
        driver_bytes: sz(&e.driver_bytes).map(|b| Bound {
            exact: Some(b),
            ..Default::default()
        }),
        unchanged_since: e.unchanged_since.as_ref().map(|n| n.get_ref().clone()),
    };
    let cat_bound = Bound {
        exact: sz(&e.bytes),
        at_most: sz(&e.bytes_at_most),
        at_least: sz(&e.bytes_at_least),
    };
    match &e.category {
        Some(c) => {
            let cat = Category::parse(c.get_ref()).map_err(|why| {
                src.err(
                    c.span(),
                    Some("category"),
                    format!(
                        "{:?} is not a category (tensors, constants, model_code, \
                         model_shared_scratchpad, runtime_memory, dma_rings, total, or a usage \
                         type such as DMA_RING): {why}",
                        c.get_ref()
                    ),
                )
            })?;
            if !cat_bound.is_set() {
                return Err(src.err(
                    c.span(),
                    Some("category"),
                    "give `bytes`, `bytes_at_most` or `bytes_at_least` with `category`",
                ));
            }
            x.category = Some((cat, cat_bound));
        }
        None if cat_bound.is_set() => {
            let sp = e
                .bytes
                .as_ref()
                .or(e.bytes_at_most.as_ref())
                .or(e.bytes_at_least.as_ref())
                .map_or(0..0, |s| s.span());
            return Err(src.err(sp, Some("bytes"), "`bytes*` needs a `category`"));
        }
        None => {}
    }
    match (&e.model, &e.model_bytes) {
        (Some(m), Some(b)) => {
            x.model = Some((
                m.get_ref().clone(),
                Bound {
                    exact: Some(b.get_ref().0),
                    ..Default::default()
                },
            ))
        }
        (Some(m), None) => {
            return Err(src.err(m.span(), Some("model"), "give `model_bytes` with `model`"))
        }
        (None, Some(b)) => {
            return Err(src.err(
                b.span(),
                Some("model_bytes"),
                "give `model` with `model_bytes`",
            ))
        }
        (None, None) => {}
    }
    let needs_core = x.used.is_set()
        || x.peak.is_set()
        || x.category.is_some()
        || x.models_on_core.is_some()
        || x.unchanged_since.is_some();
    if needs_core && x.core.is_none() {
        return Err(ScenarioError {
            file: src.file.to_path_buf(),
            line,
            column: 0,
            field: Some("expect.core".into()),
            message: "memory figures of a core need `core` (the logical core index)".into(),
            source_line: src.line_text(line),
        });
    }
    let anything = x.status.is_some()
        || x.message_contains.is_some()
        || needs_core
        || x.model.is_some()
        || x.driver_bytes.is_some();
    if !anything {
        return Err(ScenarioError {
            file: src.file.to_path_buf(),
            line,
            column: 0,
            field: Some("expect".into()),
            message:
                "expects nothing: give `status`, or a figure such as `used_at_most` with `core`"
                    .into(),
            source_line: src.line_text(line),
        });
    }
    Ok(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(text: &str) -> ScenarioError {
        Scenario::parse(Path::new("t.toml"), text).unwrap_err()
    }

    #[test]
    fn errors_name_line_and_field() {
        let e = parse_err(
            "device = \"sim:trn2\"\n[[step]]\nalloc_tensor = \"a\"\nsize = \"12 parsecs\"\n",
        );
        assert_eq!((e.line, e.field.as_deref()), (4, Some("size")), "{e}");
        let e = parse_err("[[step]]\nalloc_tensor = \"a\"\ncore = \"x\"\nsize = 1\n");
        assert_eq!((e.line, e.field.as_deref()), (3, Some("core")), "{e}");
        let e = parse_err("[[step]]\nalloc_tensor = \"a\"\nbogus = 1\n");
        assert_eq!(e.line, 3, "{e}");
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = parse_err("[[step]]\nunload = \"a\"\nfree_tensor = \"b\"\n");
        assert!(e.message.contains("2 actions"), "{e}");
        let e = parse_err("device = \"gpu\"\n[[step]]\nclose = true\n");
        assert_eq!((e.line, e.field.as_deref()), (1, Some("device")), "{e}");
        let e = parse_err("[[step]]\nexpect.used_at_most = \"1 GiB\"\n");
        assert_eq!(e.field.as_deref(), Some("expect.core"), "{e}");
        let e = parse_err("[[step]]\nexpect.status = \"NRT_NOPE\"\n");
        assert_eq!(
            (e.line, e.field.as_deref()),
            (2, Some("expect.status")),
            "{e}"
        );
        let e = parse_err("[[step]]\nunload = \"a\"\ncore = 1\n");
        assert_eq!((e.line, e.field.as_deref()), (3, Some("core")), "{e}");
        let e = parse_err("[[step]\n");
        assert_eq!(e.line, 1, "{e}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for text in [
            "",
            "\u{feff}",
            "ünïcödé = \"é\"\n[[step]]\nclose = \"ja\"\n",
            "[[step]]\nalloc_tensor = \"é\"\nsize = \"½ GiB\"\n",
            "[[step]]\nrepeat = 3\n",
            "[[step]]\nexpect = 3\n",
            "[[step]]\nfail_next_alloc = 0\n",
            "[[step]]\nexpect.status = -1\n",
            "[[step]]\nload = \"/nonexistent/ü.json\"\n",
            "visible_cores = \"5-2\"\n[[step]]\nclose = true\n",
            "[[step]]\nalloc_tensor = \"\"\nsize = 1\n",
        ] {
            let e = Scenario::parse(Path::new("g.toml"), text).unwrap_err();
            assert!(!e.message.is_empty(), "{text:?}");
        }
    }

    #[test]
    fn repeat_bodies_and_counts() {
        let s = Scenario::parse(
            Path::new("t.toml"),
            "[[step]]\nrepeat = 30\n[[step.do]]\nalloc_tensor = \"x\"\nsize = \"1 MiB\"\n[[step.do]]\nfree_tensor = \"x\"\n[[step]]\nexpect.driver_bytes = 0\n",
        )
        .unwrap();
        assert_eq!(s.total_operations(), 61);
        assert!(s.has_repeat());
        assert_eq!(s.steps[1].line, 8);
    }
}
