//! The two forms of a [`Report`]: the human-readable text (one line a listed fact, then the
//! tables, the tally and the summary) and the JSON.

use super::*;

fn bytes(b: &[u8]) -> String {
    let parts: Vec<String> = b.iter().map(|x| x.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

impl Report {
    /// Human-readable report: one line per listed fact, then tables, tally and summary.
    pub fn to_text(&self) -> String {
        let mode = match self.mode {
            Mode::Default => "pinned facts, chosen facts tallied",
            Mode::Pinned => "pinned facts only",
            Mode::All => "all facts",
        };
        let versions: Vec<String> = self.dwarf_versions.iter().map(|v| v.to_string()).collect();
        let mut read = format!(
            "{} DWARF units, {} of them type units; DWARF {}",
            self.units,
            self.type_units,
            versions.join("+")
        );
        for (sec, how) in &self.compressed {
            read.push_str(&format!("; {sec} {how}-compressed"));
        }
        let mut o = format!(
            "nrt-layout check {} — {}{} ({}{})\n\n",
            self.elf,
            mode,
            if self.strict { ", strict" } else { "" },
            read,
            if self.skeleton_units > 0 {
                format!(
                    ", {} split-DWARF skeleton units skipped",
                    self.skeleton_units
                )
            } else {
                String::new()
            }
        );
        let width = self
            .facts
            .iter()
            .map(|f| f.subject.len())
            .chain(self.tables.iter().map(|t| t.symbol.len()))
            .max()
            .unwrap_or(0);
        for f in &self.facts {
            let what = match (&f.found, f.status) {
                (_, Status::Info) => f.found.clone().unwrap_or_default(),
                (None, _) => format!("expected {}, not in DWARF", f.expected),
                (Some(found), _) => format!("expected {}, found {}", f.expected, found),
            };
            let mut line = format!(
                "{:<8} {:<width$} {:<12} {}",
                f.status.as_str(),
                f.subject,
                f.fact,
                what
            );
            if f.status != Status::Info {
                line.push_str(&format!("  [{} §{}]", f.provenance, f.section));
            }
            if let Some(n) = &f.note {
                line.push_str(&format!("  ({n})"));
            }
            o.push_str(line.trim_end());
            o.push('\n');
        }
        if !self.first_differences.is_empty() {
            o.push_str("\nfirst differing member per struct:\n");
            for d in &self.first_differences {
                o.push_str(&format!(
                    "FIRST    {}: `{}` ({} expected {}, found {})\n",
                    d.strukt,
                    d.member,
                    d.fact,
                    d.expected,
                    d.found.as_deref().unwrap_or("nothing")
                ));
            }
        }
        o.push_str("\ncategory tables (spec §3.3):\n");
        for t in &self.tables {
            let against = if t.pinned {
                "v2 [tables]"
            } else {
                "the project's bytes, chosen"
            };
            match &t.found {
                None => o.push_str(&format!(
                    "{:<8} {:<width$} not present: the symbol is not in the ELF's symbol tables (not a failure)\n",
                    t.status.as_str(),
                    t.symbol
                )),
                Some(found) => {
                    let first = match t.first_diff {
                        Some(i) => format!("; first differing index [{i}]"),
                        None => String::new(),
                    };
                    o.push_str(&format!(
                        "{:<8} {:<width$} {} bytes against {against}{first}: found {}\n",
                        t.status.as_str(),
                        t.symbol,
                        t.expected.len(),
                        bytes(found)
                    ));
                    for d in &t.diffs {
                        o.push_str(&format!(
                            "{:<8}   [{}] expected {}, found {}{}\n",
                            "",
                            d.index,
                            d.expected,
                            d.found
                                .map_or("nothing (symbol too short)".into(), |b| b.to_string()),
                            if d.pinned { " (pinned)" } else { " (chosen)" }
                        ));
                    }
                }
            }
        }
        if self.mode == Mode::Default {
            o.push_str(&format!(
                "\nchosen facts (not failures): {} checked — {} agree, {} differ, {} missing; \
                 `--all` lists them\n",
                self.chosen.checked, self.chosen.agree, self.chosen.differ, self.chosen.missing
            ));
        }
        let s = &self.summary;
        o.push_str(&format!(
            "\nsummary: {} PASS, {} FAIL, {} MISSING, {} FINDING, {} INFO — {} (exit {})\n",
            s.pass,
            s.fail,
            s.missing,
            s.finding,
            s.info,
            if self.exit_code == 0 { "OK" } else { "FAILED" },
            self.exit_code
        ));
        o
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
