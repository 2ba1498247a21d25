//! An outside integrator, std: a host agent written as an outside user of
//! `nrt-host` would, with no `unsafe` (`#![forbid(unsafe_code)]`). It starts a
//! [`HostRuntime`] on the simulated trn2, loads a model from a manifest, runs one worker thread
//! per logical core (tensors allocated, written, read back and freed through the core's
//! `Copy + Send` handles), reads the memory statistics, and closes.
#![forbid(unsafe_code)]

use nrt_core::ledger::VncMemoryStats;
use nrt_core::tensor::Placement;
use nrt_core::{DeviceTotals, Error, LogicalCore};
use nrt_host::{HostRuntime, Manifest, RuntimeConfig};

/// The model the agent serves: 4 MiB of weights on the device.
pub const MANIFEST: &str = r#"{ "format": "nrt-dmem-model/2", "name": "agent-model",
  "allocations": [ { "usage": "WEIGHT", "location": "device", "size": 4194304 } ],
  "inputs": [ { "name": "x", "size": 4096 } ],
  "outputs": [ { "name": "y", "size": 4096 } ] }"#;

/// What the agent saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentReport {
    /// Logical cores the agent served (one worker each).
    pub cores: u32,
    /// Round trips each worker completed (allocate, write, read back equal, free).
    pub round_trips: Vec<u32>,
    /// Logical core 0's statistics while the model was loaded.
    pub core0_loaded: VncMemoryStats,
    /// Device 0's totals while the model was loaded.
    pub device0_loaded: DeviceTotals,
    /// Logical core 0's statistics after the model was unloaded and every tensor freed.
    pub core0_idle: VncMemoryStats,
    /// What a statistics call answers once the runtime is closed.
    pub stats_after_close: Result<VncMemoryStats, Error>,
}

/// Why the agent stopped.
#[derive(Debug)]
pub enum AgentError {
    /// Bring-up failed.
    Start(nrt_host::runtime::StartError),
    /// The manifest was refused.
    Manifest(nrt_host::ManifestError),
    /// A runtime call failed.
    Nrt(Error),
    /// A worker read back other bytes than it wrote.
    Corrupt {
        /// The worker's logical core.
        core: u32,
    },
}

impl From<Error> for AgentError {
    fn from(e: Error) -> Self {
        AgentError::Nrt(e)
    }
}

/// Serves `rounds` tensor round trips on each of the first `workers` logical cores.
pub fn serve(workers: u32, rounds: u32) -> Result<AgentReport, AgentError> {
    let rt = HostRuntime::start(RuntimeConfig::default()).map_err(AgentError::Start)?;
    let nrt = rt.nrt();
    let cores = workers.min(nrt.visible_logical_core_count());
    let manifest = Manifest::parse(MANIFEST.as_bytes()).map_err(AgentError::Manifest)?;
    let spec = manifest.spec();
    let core0 = nrt.logical_core(0)?;
    let model = nrt.models().load(core0, &spec.as_spec())?;

    let round_trips = std::thread::scope(|s| {
        let workers: Vec<_> = (0..cores)
            .map(|core| {
                let rt = &rt;
                s.spawn(move || -> Result<u32, AgentError> {
                    let nrt = rt.nrt();
                    let payload = [core as u8 ^ 0x5a; 256];
                    let mut back = [0u8; 256];
                    for _ in 0..rounds {
                        let t = nrt.tensors().allocate(
                            Placement::Device,
                            LogicalCore::new(core).into(),
                            4096,
                            Some("work"),
                        )?;
                        nrt.tensors().write(t, &payload, 128)?;
                        nrt.tensors().read(t, &mut back, 128)?;
                        nrt.tensors().free(t)?;
                        if back != payload {
                            return Err(AgentError::Corrupt { core });
                        }
                    }
                    Ok(rounds)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a worker panicked"))
            .collect::<Result<Vec<u32>, AgentError>>()
    })?;

    let core0_loaded = nrt.ledger().memory_stats(core0)?;
    let device0_loaded = nrt.ledger().device_totals(0)?;
    nrt.models().unload(model)?;
    let core0_idle = nrt.ledger().memory_stats(core0)?;
    rt.close()?;
    let stats_after_close = nrt.ledger().memory_stats(core0);
    Ok(AgentReport {
        cores,
        round_trips,
        core0_loaded,
        device0_loaded,
        core0_idle,
        stats_after_close,
    })
}
