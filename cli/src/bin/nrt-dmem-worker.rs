//! `nrt-dmem-worker`: one runtime driven line by line from stdin, for the multi-process tests
//! of the shared device (cli/tests/shared.rs). Configured by the environment
//! the runtime reads (`NRT_DMEM_DEVICE=sim:trn2@name`, `NEURON_RT_VISIBLE_CORES`, …).
//!
//! Commands, one per line; each answers one line, `ok …` or `err <NRT_STATUS> <message>`:
//!
//! ```text
//! alloc NAME BYTES CORE     device tensor of BYTES on logical core CORE
//! free NAME                 free that tensor
//! load MANIFEST CORE AS     load a model manifest onto CORE under the name AS
//! unload AS                 unload it
//! exec AS                   execute it (inputs patterned, outputs checked)
//! stats                     `ok own=<bytes> device=<bytes> procs=<pid:bytes,…>`
//! audit                     `ok allocations=<n> bytes=<n>` (the pools walked and checked)
//! oom                       `ok <first line of the last OOM table>` (after a failed alloc)
//! exit                      close the runtime and exit 0
//! ```
//!
//! On start it prints `ready <pid>` once the runtime is up, or `fail <message>` and exits 3.
#![deny(unsafe_code)]

use std::io::{BufRead, Write};
use std::rc::Rc;

use nrt_core::tensor::Placement;
use nrt_dmem_cli::scenario::{Session, StepError};
use nrt_host::{Manifest, RuntimeConfig};

fn main() {
    // Warnings (a damaged file re-created) go to stderr as RUST_LOG asks.
    let _ = env_logger::try_init();
    let cfg = match RuntimeConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            println!("fail {e}");
            std::process::exit(3);
        }
    };
    let mut s = match Session::start(cfg) {
        Ok(s) => s,
        Err(e) => {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(x) = src {
                msg.push_str(": ");
                msg.push_str(&x.to_string());
                src = x.source();
            }
            println!("fail {msg}");
            std::process::exit(3);
        }
    };
    println!("ready {}", std::process::id());
    let _ = std::io::stdout().flush();
    let mut last_oom = String::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let w: Vec<&str> = line.split_whitespace().collect();
        let r: Result<String, StepError> = match w.as_slice() {
            ["alloc", name, bytes, core] => match (bytes.parse(), core.parse()) {
                (Ok(b), Ok(c)) => s
                    .alloc_tensor(name, Placement::Device, c, b)
                    .map(|_| String::new())
                    .inspect_err(|e| {
                        if let StepError::Nrt(err) = e {
                            if let Some((_, t)) = nrt_host::runtime::oom_table(&s.nrt(), err) {
                                last_oom = t;
                            }
                        }
                    }),
                _ => Err(StepError::Usage("alloc NAME BYTES CORE".into())),
            },
            ["free", name] => s.free_tensor(name).map(|_| String::new()),
            ["load", path, core, name] => match (Manifest::from_path(path), core.parse()) {
                (Ok(m), Ok(c)) => s
                    .load(&Rc::new(m), c, name)
                    .map(|_| String::new())
                    .inspect_err(|e| {
                        if let StepError::Nrt(err) = e {
                            if let Some((_, t)) = nrt_host::runtime::oom_table(&s.nrt(), err) {
                                last_oom = t;
                            }
                        }
                    }),
                (Err(e), _) => Err(StepError::Usage(e.to_string())),
                _ => Err(StepError::Usage("load MANIFEST CORE AS".into())),
            },
            ["unload", name] => s.unload(name).map(|_| String::new()),
            ["exec", name] => s.execute(name, &[], &[], true).map(|b| format!("{b}")),
            ["stats"] => Ok(stats(&s)),
            ["audit"] => match s.runtime().shared().map(|d| d.audit()) {
                Some(Ok((n, b))) => Ok(format!("allocations={n} bytes={b}")),
                Some(Err(e)) => Err(StepError::Check(e)),
                None => Err(StepError::Usage("not on a shared device".into())),
            },
            ["oom"] => Ok(last_oom.lines().next().unwrap_or("").to_string()),
            ["exit"] => break,
            _ => Err(StepError::Usage(format!("unknown command `{line}`"))),
        };
        match r {
            Ok(m) => println!("ok {m}"),
            Err(e) => {
                let status = e.status().map_or("USAGE", |s| s.name());
                println!("err {status} {e}");
            }
        }
        let _ = std::io::stdout().flush();
    }
    drop(s);
}

fn stats(s: &Session) -> String {
    match s.runtime().shared() {
        Some(d) => {
            let snap = d.snapshot();
            // This process's bytes: its slot's (the pools' own figures are device-wide).
            let own: u64 = snap
                .procs
                .iter()
                .filter(|p| p.slot == d.slot())
                .map(|p| p.total_bytes())
                .sum();
            let procs: Vec<String> = snap
                .procs
                .iter()
                .map(|p| format!("{}:{}", p.pid, p.total_bytes()))
                .collect();
            format!(
                "own={own} device={} procs={}",
                snap.device_bytes(0),
                procs.join(",")
            )
        }
        None => match s.nrt().driver_pool_bytes_in_use() {
            Ok(b) => format!("own={b}"),
            Err(e) => format!("own=? ({e})"),
        },
    }
}
