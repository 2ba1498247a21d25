//! Logging for C callers: libnrt writes its messages to stderr at the level
//! `NEURON_RT_LOG_LEVEL` names (ERROR by default), so does this library. The logger is
//! installed on the first call into the library unless the host process already installed
//! one (a Rust program linking the rlib keeps its own).

use std::io::Write;
use std::sync::Once;

use log::{Level, LevelFilter, Log, Metadata, Record};

struct Stderr;

static LOGGER: Stderr = Stderr;
static INSTALL: Once = Once::new();

impl Log for Stderr {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let level = match r.level() {
            Level::Error => "ERROR",
            Level::Warn => "WARN ",
            Level::Info => "INFO ",
            Level::Debug => "DEBUG",
            Level::Trace => "TRACE",
        };
        // One write per line so lines from several threads do not interleave.
        // (No thread id: `std::thread::current()` would leave a handle valgrind reports.)
        let line = format!(
            "{} {} NRT:{} {}\n",
            std::process::id(),
            level,
            r.target(),
            r.args()
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// `NEURON_RT_LOG_LEVEL` as the real runtime reads it (`ERROR`, `WARN`/`WARNING`, `INFO`,
/// `DEBUG`, `TRACE`, `OFF`/`NONE`, any case; default ERROR). `Err` carries a value that is none
/// of these (the level is then ERROR).
pub fn level_from_env() -> Result<LevelFilter, String> {
    let v = std::env::var("NEURON_RT_LOG_LEVEL").unwrap_or_default();
    match v.trim().to_ascii_uppercase().as_str() {
        "TRACE" => Ok(LevelFilter::Trace),
        "DEBUG" => Ok(LevelFilter::Debug),
        "INFO" => Ok(LevelFilter::Info),
        "WARN" | "WARNING" => Ok(LevelFilter::Warn),
        "OFF" | "NONE" => Ok(LevelFilter::Off),
        "ERROR" | "" => Ok(LevelFilter::Error),
        _ => Err(v),
    }
}

/// Installs the stderr logger once (a no-op when the process has a logger already).
pub fn install() {
    INSTALL.call_once(|| {
        if log::set_logger(&LOGGER).is_ok() {
            match level_from_env() {
                Ok(level) => log::set_max_level(level),
                Err(bad) => {
                    log::set_max_level(LevelFilter::Error);
                    log::error!(
                        target: "nrt",
                        "NEURON_RT_LOG_LEVEL={bad:?} is not ERROR, WARN, INFO, DEBUG, TRACE or OFF; logging errors only"
                    );
                }
            }
        }
    });
}
