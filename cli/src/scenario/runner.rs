//! Running a scenario: each step on a [`Session`], its expectations checked, progress and
//! failures reported as the run goes.

use std::fmt::{self, Write as _};
use std::io::Write;
use std::path::PathBuf;

use nrt_core::abi::NRT_STATUS;
use nrt_core::cstr::Printable;
use nrt_core::LogicalCore;

use super::model::{Action, Bound, Expect, Scenario, Step};
use super::session::{Session, StepError};
use super::units::fmt_bytes;

/// One thing that went wrong in a run.
#[derive(Clone, Debug)]
pub struct Failure {
    /// Step label (`3`, `4.2`), with the iteration for repeated steps.
    pub step: String,
    /// Line in the scenario file.
    pub line: usize,
    /// Why.
    pub reason: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The reason quotes names from the scenario: shown escaped wherever it is printed.
        write!(
            f,
            "step {} (line {}): {}",
            self.step,
            self.line,
            Printable(&self.reason)
        )
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// Operations performed (repeats expanded).
    pub operations: u64,
    /// Expectations checked.
    pub expectations: u64,
    /// What failed.
    pub failures: Vec<Failure>,
    /// Whether the run stopped before the last step (an unexpected failure).
    pub stopped: bool,
    /// OOM tables written.
    pub oom_files: Vec<PathBuf>,
}

impl RunReport {
    /// Whether every expectation held and nothing failed unexpectedly.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// How a run reports as it goes.
pub struct RunOptions<'a> {
    /// Where step lines go (`None` = silent).
    pub out: Option<&'a mut dyn Write>,
    /// Style step results with ANSI colour.
    pub color: bool,
    /// Called after every operation with the count done so far.
    pub progress: Option<&'a mut dyn FnMut(u64)>,
}

struct Runner<'a, 'o> {
    s: &'a mut Session,
    opts: RunOptions<'o>,
    report: RunReport,
}

fn paint(on: bool, style: anstyle::Style, text: &str) -> String {
    if on {
        format!("{}{text}{}", style.render(), style.render_reset())
    } else {
        text.to_string()
    }
}

const GREEN: anstyle::Style =
    anstyle::Style::new().fg_color(Some(anstyle::Color::Ansi(anstyle::AnsiColor::Green)));
const RED: anstyle::Style = anstyle::Style::new()
    .fg_color(Some(anstyle::Color::Ansi(anstyle::AnsiColor::Red)))
    .bold();
const DIM: anstyle::Style = anstyle::Style::new().dimmed();

impl Runner<'_, '_> {
    fn say(&mut self, line: &str) {
        if let Some(o) = self.opts.out.as_mut() {
            let _ = writeln!(o, "{line}");
        }
    }

    fn tick(&mut self) {
        self.report.operations += 1;
        if let Some(p) = self.opts.progress.as_mut() {
            p(self.report.operations);
        }
    }

    fn fail(&mut self, label: &str, line: usize, reason: String) {
        self.report.failures.push(Failure {
            step: label.to_string(),
            line,
            reason,
        });
    }

    /// Runs `steps`; returns false to stop the whole run.
    fn run_steps(
        &mut self,
        steps: &[Step],
        prefix: &str,
        iteration: Option<u64>,
        quiet: bool,
    ) -> bool {
        let mut i = 0;
        while i < steps.len() {
            let step = &steps[i];
            let label = match iteration {
                Some(it) => format!("{prefix}{} (iteration {})", i + 1, it + 1),
                None => format!("{prefix}{}", i + 1),
            };
            let next_expect_status = match steps.get(i + 1).map(|s| &s.action) {
                Some(Action::Expect(x)) if x.status.is_some() || x.message_contains.is_some() => {
                    Some(&**x)
                }
                _ => None,
            };
            if let Action::Repeat { times, steps: body } = &step.action {
                let text = format!("repeat {times} × {} steps", body.len());
                let before = self.report.failures.len();
                for it in 0..*times {
                    if !self.run_steps(body, &format!("{}.", label), Some(it), true) {
                        return false;
                    }
                    if self.report.failures.len() > before {
                        break;
                    }
                }
                let ok = self.report.failures.len() == before;
                self.line(&label, step, &text, ok, None, quiet);
                i += 1;
                continue;
            }
            if let Action::Expect(x) = &step.action {
                // An expect with a status right after a step is consumed with it (below); one
                // here checks figures only — or a status with nothing before it.
                self.tick();
                self.report.expectations += 1;
                let mut why = self.s.check_figures(x);
                if x.status.is_some_and(|s| s != NRT_STATUS::NRT_SUCCESS) {
                    why.insert(
                        0,
                        "expects a failure status, but no step precedes it".into(),
                    );
                }
                let ok = why.is_empty();
                let text = describe_expect(x);
                self.line(&label, step, &text, ok, why.first().cloned(), quiet);
                for w in why {
                    self.fail(&label, step.line, w);
                }
                i += 1;
                continue;
            }
            self.tick();
            let (text, result) = self.perform(&step.action);
            let oom = self.s.last_oom_file.take();
            let mut detail: Option<String> = None;
            if let Some(Ok(p)) = &oom {
                self.report.oom_files.push(p.clone());
            }
            match (result, next_expect_status) {
                (Ok(extra), None) => {
                    self.line(&label, step, &format!("{text}{extra}"), true, None, quiet);
                    i += 1;
                }
                (Err(e), None) => {
                    let reason = format!("{text}: unexpected failure: {e}");
                    detail = Some(e.to_string());
                    self.line(&label, step, &text, false, detail.clone(), quiet);
                    self.print_oom(&oom);
                    self.fail(&label, step.line, reason);
                    return false;
                }
                (r, Some(x)) => {
                    // The next step is this step's status expectation.
                    self.tick();
                    self.report.expectations += 1;
                    let xline = steps[i + 1].line;
                    let xlabel = match iteration {
                        Some(it) => format!("{prefix}{} (iteration {})", i + 2, it + 1),
                        None => format!("{prefix}{}", i + 2),
                    };
                    let got = match &r {
                        Ok(_) => NRT_STATUS::NRT_SUCCESS,
                        Err(e) => match e.status() {
                            Some(s) => s,
                            None => {
                                // A scenario mistake is never an expected status.
                                self.line(&label, step, &text, false, Some(e.to_string()), quiet);
                                self.fail(&label, step.line, format!("{text}: {e}"));
                                return false;
                            }
                        },
                    };
                    let mut why = Vec::new();
                    if let Some(want) = x.status {
                        if want != got {
                            why.push(format!(
                                "status is {} ({}), expected {} ({}){}",
                                got.name(),
                                got as u32,
                                want.name(),
                                want as u32,
                                match &r {
                                    Err(e) => format!(": {e}"),
                                    Ok(_) => String::new(),
                                }
                            ));
                        }
                    }
                    if let Some(want) = &x.message_contains {
                        let msg = r.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
                        if !msg.contains(want.as_str()) {
                            why.push(format!("message {msg:?} does not contain {want:?}"));
                        }
                    }
                    why.extend(self.s.check_figures(x));
                    let shown = match &r {
                        Ok(extra) => format!("{text}{extra}"),
                        Err(e) => format!("{text} → {}", e.status().map_or("?", |s| s.name())),
                    };
                    let ok = why.is_empty();
                    self.line(&label, step, &shown, true, None, quiet);
                    self.print_oom(&oom);
                    self.line(
                        &xlabel,
                        &steps[i + 1],
                        &describe_expect(x),
                        ok,
                        why.first().cloned(),
                        quiet,
                    );
                    for w in why {
                        self.fail(&xlabel, xline, w);
                    }
                    i += 2;
                }
            }
            let _ = detail;
        }
        true
    }

    fn print_oom(&mut self, oom: &Option<Result<PathBuf, String>>) {
        match oom {
            Some(Ok(p)) => {
                let t = format!("         OOM table written to {}", p.display());
                self.say(&t)
            }
            Some(Err(e)) => {
                let t = format!("         could not write the OOM table: {e}");
                self.say(&t)
            }
            None => {}
        }
    }

    fn line(
        &mut self,
        label: &str,
        step: &Step,
        text: &str,
        ok: bool,
        why: Option<String>,
        quiet: bool,
    ) {
        if quiet && ok {
            return;
        }
        let c = self.opts.color;
        let mark = if ok {
            paint(c, GREEN, "ok  ")
        } else {
            paint(c, RED, "FAIL")
        };
        let loc = paint(c, DIM, &format!("line {:>3}", step.line));
        // The text, note and reason carry names from the scenario file: shown escaped.
        let mut l = format!("  {mark} {label:>5}  {loc}  {}", Printable(text));
        if let Some(n) = &step.note {
            let n = format!("# {}", Printable(n));
            let _ = write!(l, "  {}", paint(c, DIM, &n));
        }
        self.say(&l);
        if let Some(w) = why {
            let t = format!("             {}", paint(c, RED, &Printable(&w).to_string()));
            self.say(&t);
        }
    }

    /// Does one action: `(description, Ok(extra text) | Err)`.
    fn perform(&mut self, a: &Action) -> (String, Result<String, StepError>) {
        match a {
            Action::Load {
                path,
                manifest,
                core,
                name,
            } => {
                let file = path.file_name().map_or_else(
                    || path.display().to_string(),
                    |f| f.to_string_lossy().into_owned(),
                );
                let text = format!("load {file} → core {core} as `{name}`");
                let r = self.s.load(manifest, *core, name).and_then(|h| {
                    let (d, _) = self.s.footprint(h)?;
                    Ok(format!(" ({} on device)", fmt_bytes(d[22])))
                });
                (text, r)
            }
            Action::Unload { name } => {
                let text = format!("unload `{name}`");
                let before = self.s.model(name).ok().map(|m| m.core).and_then(|c| {
                    self.s
                        .nrt()
                        .ledger()
                        .memory_stats(LogicalCore::from_c(c))
                        .ok()
                        .map(|st| (c, st.bytes_used))
                });
                let r = self.s.unload(name).map(|_| match before {
                    Some((c, b)) => {
                        let after = self
                            .s
                            .nrt()
                            .ledger()
                            .memory_stats(LogicalCore::from_c(c))
                            .map_or(b, |s| s.bytes_used);
                        format!(" (core {c}: {} freed)", fmt_bytes(b.saturating_sub(after)))
                    }
                    None => String::new(),
                });
                (text, r)
            }
            Action::AllocTensor {
                name,
                placement,
                core,
                size,
            } => (
                format!(
                    "alloc_tensor `{name}` {} {} on core {core}",
                    fmt_bytes(*size),
                    format!("{placement:?}").to_lowercase()
                ),
                self.s
                    .alloc_tensor(name, *placement, *core, *size)
                    .map(|_| String::new()),
            ),
            Action::FreeTensor { name } => (
                format!("free_tensor `{name}`"),
                self.s.free_tensor(name).map(|_| String::new()),
            ),
            Action::Execute {
                model,
                inputs,
                outputs,
                check,
            } => {
                let r = self.s.execute(model, inputs, outputs, *check).map(|w| {
                    if *check {
                        format!(": {} in, outputs verified", fmt_bytes(w))
                    } else {
                        String::new()
                    }
                });
                (format!("execute `{model}`"), r)
            }
            Action::ResetPeak { core } => (
                format!("reset_peak core {core}"),
                self.s
                    .nrt()
                    .ledger()
                    .reset_peak(LogicalCore::from_c(*core))
                    .map(|_| String::new())
                    .map_err(StepError::from),
            ),
            Action::FailNextAlloc { nth } => {
                let text =
                    format!("fail_next_alloc (allocation #{nth} from now fails with ENOMEM)");
                let r = match self.s.runtime().sim() {
                    Some(sim) => {
                        sim.fail_nth_alloc(*nth);
                        Ok(String::new())
                    }
                    None => Err(StepError::Usage(
                        "fail_next_alloc needs the simulated device (device = \"sim:…\")".into(),
                    )),
                };
                (text, r)
            }
            Action::Close => {
                let r = self.s.close().map(|_| match self.s.driver_bytes() {
                    Ok(b) => format!(": driver holds {}", fmt_bytes(b)),
                    Err(e) => format!(": driver pools unreadable ({e})"),
                });
                ("close".into(), r)
            }
            Action::Snapshot { name } => {
                self.s.snapshot(name);
                (format!("snapshot `{name}`"), Ok(String::new()))
            }
            Action::Expect(_) | Action::Repeat { .. } => (String::new(), Ok(String::new())),
        }
    }
}

fn describe_expect(x: &Expect) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(s) = x.status {
        parts.push(format!("status {}", s.name()));
    }
    if let Some(m) = &x.message_contains {
        parts.push(format!("message contains {m:?}"));
    }
    let b = |name: &str, b: &Bound, parts: &mut Vec<String>| {
        if let Some(v) = b.exact {
            parts.push(format!("{name} = {}", fmt_bytes(v)));
        }
        if let Some(v) = b.at_most {
            parts.push(format!("{name} ≤ {}", fmt_bytes(v)));
        }
        if let Some(v) = b.at_least {
            parts.push(format!("{name} ≥ {}", fmt_bytes(v)));
        }
    };
    if let Some(c) = x.core {
        b(&format!("core {c} used"), &x.used, &mut parts);
        b(&format!("core {c} peak"), &x.peak, &mut parts);
        if let Some((cat, bd)) = &x.category {
            b(&format!("core {c} {cat}"), bd, &mut parts);
        }
        if let Some(n) = x.models_on_core {
            parts.push(format!("core {c} models = {n}"));
        }
        if let Some(snap) = &x.unchanged_since {
            parts.push(format!("core {c} unchanged since `{snap}`"));
        }
    }
    if let Some((m, bd)) = &x.model {
        b(&format!("`{m}` footprint"), bd, &mut parts);
    }
    if let Some(bd) = &x.driver_bytes {
        b("driver bytes", bd, &mut parts);
    }
    format!("expect {}", parts.join(", "))
}

/// Runs a scenario's steps on `session`. Failed expectations are collected and the run goes
/// on; a step that fails without an `expect.status` right after it stops the run.
pub fn run(scenario: &Scenario, session: &mut Session, opts: RunOptions<'_>) -> RunReport {
    let mut r = Runner {
        s: session,
        opts,
        report: RunReport::default(),
    };
    let done = r.run_steps(&scenario.steps, "", None, false);
    r.report.stopped = !done;
    r.report
}
