//! `placement_study [--seeds N] [--first-seed K]`: the placement-policy study of
//! `docs/PERFORMANCE.md` ("Why 0.97 utilisation is missed on trace A"). Replays trace A
//! (100 000 churn ops) with seeds `0xA11C0001 + k·7919`, k = K..K+N (default 0..10: the seeds of
//! `utilisation_at_first_failure_over_seeds`), under each policy of
//! `nrt_bench::placement::study_policies`, and prints a markdown table of utilisation at the
//! first refused fill request on stdout; progress goes to stderr. The model and the policies
//! are documented in `nrt_bench::placement`.

use std::process::ExitCode;
use std::time::Instant;

use nrt_bench::placement::{study, Case, Row};
use nrt_bench::TraceSpec;

const USAGE: &str = "usage: placement_study [--seeds N] [--first-seed K]
  --seeds N       number of trace-A seed variants (default 10)
  --first-seed K  first variant k, seed 0xA11C0001 + k*7919 (default 0, the issue's trace);
                  e.g. --first-seed 10 for held-out seeds";

/// Churn ops of trace A, as in the `nrt-bench` figures.
const CHURN_OPS: usize = 100_000;

/// Bound on the seed variants, so `0xA11C0001 + k·7919` cannot overflow.
const MAX_VARIANT: u64 = 1 << 40;

/// Command-line options.
struct Options {
    seeds: u64,
    first_seed: u64,
}

/// Parses the arguments; `Err` carries the message to print (usage included), `Ok(None)` means
/// `--help` was printed.
fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Options>, String> {
    let mut o = Options {
        seeds: 10,
        first_seed: 0,
    };
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let target = match a.as_str() {
            "--seeds" => &mut o.seeds,
            "--first-seed" => &mut o.first_seed,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        };
        let value = args.next().unwrap_or_default();
        *target = value
            .parse()
            .map_err(|_| format!("`{a}` needs a whole number, got `{value}`\n{USAGE}"))?;
    }
    if o.seeds == 0 {
        return Err(format!("`--seeds` must be at least 1\n{USAGE}"));
    }
    if o.first_seed.saturating_add(o.seeds) > MAX_VARIANT {
        return Err(format!(
            "`--first-seed` + `--seeds` must stay below {MAX_VARIANT}\n{USAGE}"
        ));
    }
    Ok(Some(o))
}

/// The markdown table: one line per row, the first seed's value then the spread.
fn print_table(rows: &[Row], o: &Options) {
    let first = if o.first_seed == 0 {
        "issue seed (k=0)".to_string()
    } else {
        format!("first seed (k={})", o.first_seed)
    };
    let last = o.first_seed + o.seeds - 1;
    println!(
        "| policy (trace A, utilisation at the first refused fill request) | {first} | mean k={}..{last} | min | max |",
        o.first_seed
    );
    println!("|---|---:|---:|---:|---:|");
    for row in rows {
        let s = row.spread();
        let first = row.per_seed.first().copied().unwrap_or(f64::NAN);
        println!(
            "| {} | {first:.4} | {:.4} | {:.4} | {:.4} |",
            row.label, s.mean, s.min, s.max
        );
    }
}

fn main() -> ExitCode {
    let o = match parse(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => return ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("placement_study: {msg}");
            return ExitCode::from(2);
        }
    };
    let t0 = Instant::now();
    let spec = TraceSpec::trace_a(CHURN_OPS);
    let cases: Vec<Case> = (o.first_seed..o.first_seed + o.seeds)
        .map(|k| Case::generate(spec.seed_variant(k)))
        .collect();
    eprintln!(
        "placement_study: {} traces and death times in {:.1} s",
        cases.len(),
        t0.elapsed().as_secs_f64()
    );
    let rows = study(&cases, |label| {
        eprintln!("  [{:6.1} s] {label}", t0.elapsed().as_secs_f64());
    });
    print_table(&rows, &o);
    eprintln!(
        "placement_study: done in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}
