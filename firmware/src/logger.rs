//! With the `log` feature: nrt-core's log lines (routed by its `fmt` module to the `log`
//! facade) go to stderr through this `log::Log`, one `write(2)` per line from a stack buffer.
//! (A `defmt` image would instead need a `#[defmt::global_logger]` and the `defmt.x` linker
//! script; this host stand-in does not ship one.)

use core::fmt::Write;

use log::{LevelFilter, Log, Metadata, Record};

use crate::out::Out;

struct RawLogger;

impl Log for RawLogger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &Record<'_>) {
        if self.enabled(r.metadata()) {
            let mut w = Out::<256>::new(2);
            let _ = writeln!(w, "[{:<5} {}] {}", r.level(), r.target(), r.args());
        }
    }

    fn flush(&self) {}
}

static LOGGER: RawLogger = RawLogger;

/// Installs the logger at `level` (`trace`, `debug`, `info`, `warn`, `error`, `off`; default
/// `info`).
pub fn init(level: Option<&str>) {
    let filter = match level {
        Some("trace") => LevelFilter::Trace,
        Some("debug") => LevelFilter::Debug,
        Some("warn") => LevelFilter::Warn,
        Some("error") => LevelFilter::Error,
        Some("off") => LevelFilter::Off,
        _ => LevelFilter::Info,
    };
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(filter);
    }
}
