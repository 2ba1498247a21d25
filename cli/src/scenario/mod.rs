//! Scenarios: an ordered list of runtime operations with expectations, read from a TOML file
//! (`nrt-dmem run <scenario.toml>`, documented in `docs/SCENARIOS.md`), and the [`Session`] that
//! carries them out on a [`HostRuntime`](nrt_host::HostRuntime) — the same workbench the demo
//! uses.
//!
//! A scenario names the device, the logical-core size and the visible cores, then lists
//! `[[step]]` tables, each with exactly one action key (`load`, `unload`, `alloc_tensor`,
//! `free_tensor`, `execute`, `expect`, `reset_peak`, `fail_next_alloc`, `close`, `repeat`).
//! Every problem in the file is reported with its file, line, column and field
//! ([`ScenarioError`]); running it yields a [`RunReport`] whose failures name the step and line.
//!
//! One job per file: `units` (sizes, counts, statuses as written), `category` (what
//! `expect.category` names, the report rows), `schema` (the TOML as written, its located
//! errors, the conversion), `model` (the validated [`Scenario`] and its [`Step`]s), `session`
//! (the [`Session`] workbench the demo shares) and `runner` ([`run`]: steps carried out,
//! expectations checked). Everything a caller uses is re-exported here.
#![deny(unsafe_code)]

mod category;
mod model;
mod runner;
mod schema;
mod session;
mod units;

pub use category::{Category, DEVICE_CLASSES, REPORT_ROWS};
pub use model::{Action, Bound, Expect, ManifestRef, Scenario, Step};
pub use runner::{run, Failure, RunOptions, RunReport};
pub use schema::ScenarioError;
pub use session::{total_footprint, Footprint, LoadedModel, NamedTensor, Session, StepError};
pub use units::{fmt_bytes, parse_size, parse_status};
