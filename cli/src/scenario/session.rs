//! The session workbench: a runtime with the models and tensors a scenario (or the demo) made,
//! by name, and the operations steps perform on them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use nrt_core::abi::{dma_mem_location_t, dma_mem_usage_type_t, NRT_STATUS};
use nrt_core::model::ModelSpec;
use nrt_core::tensor::Placement;
use nrt_core::{CoreSel, LogicalCore, Nrt};
use nrt_core::{ModelHandle, TensorHandle};

use nrt_host::config::RuntimeConfig;
use nrt_host::runtime::{HostRuntime, StartError};

use super::model::{Expect, ManifestRef};
use super::units::fmt_bytes;

/// A model loaded by a session.
#[derive(Clone)]
pub struct LoadedModel {
    /// The name steps use.
    pub name: String,
    /// Its handle.
    pub handle: ModelHandle,
    /// Logical core.
    pub core: i64,
    /// Its manifest.
    pub manifest: ManifestRef,
}

/// A tensor allocated by a session.
#[derive(Clone)]
pub struct NamedTensor {
    /// Name.
    pub name: String,
    /// The tensor.
    pub tensor: TensorHandle,
    /// Placement.
    pub placement: Placement,
    /// Logical core.
    pub core: i64,
    /// Bytes.
    pub size: u64,
}

/// Why a session operation failed.
#[derive(Debug, Clone)]
pub enum StepError {
    /// The runtime refused (carries an `NRT_STATUS`).
    Nrt(nrt_core::Error),
    /// The scenario asked for something that does not exist (unknown name, …).
    Usage(String),
    /// Execution ran but the bytes read back are wrong.
    Check(String),
}

impl StepError {
    /// The status the runtime returned (`None` for scenario mistakes).
    pub fn status(&self) -> Option<NRT_STATUS> {
        match self {
            StepError::Nrt(e) => Some(e.status()),
            _ => None,
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::Nrt(e) => write!(f, "{} ({}): {e}", e.status().name(), e.status() as u32),
            StepError::Usage(m) | StepError::Check(m) => f.write_str(m),
        }
    }
}

impl From<nrt_core::Error> for StepError {
    fn from(e: nrt_core::Error) -> Self {
        StepError::Nrt(e)
    }
}

/// A model's device and host bytes per usage type (`[22]` = total): `(device, host)`.
pub type Footprint = ([u64; 23], [u64; 23]);

/// The sum of per-subgraph footprints: a model's whole footprint.
pub fn total_footprint(per: &[Footprint]) -> Footprint {
    let mut total = ([0u64; 23], [0u64; 23]);
    for (dev, host) in per {
        for u in 0..23 {
            total.0[u] += dev[u];
            total.1[u] += host[u];
        }
    }
    total
}

/// A runtime with the models and tensors a scenario (or the demo) made, by name.
pub struct Session {
    rt: HostRuntime,
    models: Vec<LoadedModel>,
    tensors: Vec<NamedTensor>,
    /// Where the last OOM table was written (or why it could not be).
    pub last_oom_file: Option<Result<PathBuf, String>>,
    snapshots: BTreeMap<String, Vec<[u64; 23]>>,
}

const CHUNK: usize = 64 << 10;

fn pattern_chunk(seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9) | 1;
    (0..CHUNK)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

/// The bytes written at chunk `i` of input `k`: the seeded pattern stamped with `i`, so a
/// misplaced chunk is caught too.
fn stamped(base: &[u8], i: u64, len: usize) -> Vec<u8> {
    let mut c = base[..len].to_vec();
    for (d, s) in c.iter_mut().zip(i.to_le_bytes()) {
        *d ^= s;
    }
    c
}

impl Session {
    /// Starts a runtime for `cfg`.
    pub fn start(cfg: RuntimeConfig) -> Result<Self, StartError> {
        Ok(Session {
            rt: HostRuntime::start(cfg)?,
            models: Vec::new(),
            tensors: Vec::new(),
            last_oom_file: None,
            snapshots: BTreeMap::new(),
        })
    }

    /// The runtime.
    pub fn runtime(&self) -> &HostRuntime {
        &self.rt
    }

    /// The core runtime view.
    pub fn nrt(&self) -> Nrt<'_> {
        self.rt.nrt()
    }

    /// Loaded models, in load order.
    pub fn models(&self) -> &[LoadedModel] {
        &self.models
    }

    /// Live named tensors.
    pub fn tensors(&self) -> &[NamedTensor] {
        &self.tensors
    }

    /// A loaded model by name.
    pub fn model(&self, name: &str) -> Result<&LoadedModel, StepError> {
        self.models
            .iter()
            .find(|m| m.name == name)
            .ok_or_else(|| StepError::Usage(format!("no model named `{name}` is loaded")))
    }

    fn note_error(&mut self, e: StepError) -> StepError {
        if let StepError::Nrt(err) = &e {
            let written = nrt_host::runtime::write_oom_table(&self.rt.nrt(), err)
                .and_then(|r| r.map_err(|io| io.to_string()).transpose());
            if let Some(r) = written {
                match &r {
                    Ok(p) => {
                        log::info!(target: "nrt_dmem::oom", "OOM table written to {}", p.display())
                    }
                    Err(io) => {
                        log::warn!(target: "nrt_dmem::oom", "could not write the OOM table: {io}")
                    }
                }
                self.last_oom_file = Some(r);
            }
        }
        e
    }

    /// Loads `manifest` onto logical core `core` as `name`.
    pub fn load(
        &mut self,
        manifest: &ManifestRef,
        core: i64,
        name: &str,
    ) -> Result<ModelHandle, StepError> {
        if self.models.iter().any(|m| m.name == name) {
            return Err(StepError::Usage(format!(
                "a model named `{name}` is already loaded (give the load another `as`)"
            )));
        }
        let storage = manifest.spec();
        let spec: ModelSpec<'_> = storage.as_spec();
        let r = self
            .rt
            .nrt()
            .models()
            .load(LogicalCore::from_c(core), &spec);
        match r {
            Ok(h) => {
                log::info!(target: "nrt_dmem::session", "loaded {name} on core {core} (handle {})", h.h_model().id);
                self.rt.note_loaded(h, name);
                self.models.push(LoadedModel {
                    name: name.to_string(),
                    handle: h,
                    core,
                    manifest: manifest.clone(),
                });
                Ok(h)
            }
            Err(e) => Err(self.note_error(e.into())),
        }
    }

    /// Unloads a model by name.
    pub fn unload(&mut self, name: &str) -> Result<(), StepError> {
        let i = self
            .models
            .iter()
            .position(|m| m.name == name)
            .ok_or_else(|| StepError::Usage(format!("no model named `{name}` is loaded")))?;
        let h = self.models[i].handle;
        self.rt.nrt().models().unload(h)?;
        self.rt.note_unloaded(h);
        self.models.remove(i);
        Ok(())
    }

    /// Allocates a named tensor.
    pub fn alloc_tensor(
        &mut self,
        name: &str,
        placement: Placement,
        core: i64,
        size: u64,
    ) -> Result<TensorHandle, StepError> {
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(StepError::Usage(format!(
                "a tensor named `{name}` already exists"
            )));
        }
        let r =
            self.rt
                .nrt()
                .tensors()
                .allocate(placement, CoreSel::from_c(core), size, Some(name));
        match r {
            Ok(t) => {
                self.tensors.push(NamedTensor {
                    name: name.to_string(),
                    tensor: t,
                    placement,
                    core,
                    size,
                });
                Ok(t)
            }
            Err(e) => Err(self.note_error(e.into())),
        }
    }

    /// Frees a named tensor.
    pub fn free_tensor(&mut self, name: &str) -> Result<(), StepError> {
        let i = self
            .tensors
            .iter()
            .position(|t| t.name == name)
            .ok_or_else(|| StepError::Usage(format!("no tensor named `{name}`")))?;
        self.rt.nrt().tensors().free(self.tensors[i].tensor)?;
        self.tensors.remove(i);
        Ok(())
    }

    fn tensor(&self, name: &str) -> Result<&NamedTensor, StepError> {
        self.tensors
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| StepError::Usage(format!("no tensor named `{name}`")))
    }

    /// Executes `model`: binds each declared input/output to the named tensor `bind` gives for
    /// it, or to a device tensor created for this call on the model's core; with `check`,
    /// writes a pattern into every input first and verifies that each output reads back as the
    /// model's data path defines (output k = input k's bytes, zero-filled past them). Returns
    /// the bytes written to inputs.
    pub fn execute(
        &mut self,
        model: &str,
        inputs: &[(String, String)],
        outputs: &[(String, String)],
        check: bool,
    ) -> Result<u64, StepError> {
        let m = self.model(model)?.clone();
        let spec = &*m.manifest;
        for (decl, _) in inputs {
            if !spec.inputs.iter().any(|d| &d.name == decl) {
                return Err(StepError::Usage(format!(
                    "model `{model}` declares no input `{decl}`"
                )));
            }
        }
        for (decl, _) in outputs {
            if !spec.outputs.iter().any(|d| &d.name == decl) {
                return Err(StepError::Usage(format!(
                    "model `{model}` declares no output `{decl}`"
                )));
            }
        }
        let nrt = self.rt.nrt();
        let mut created: Vec<TensorHandle> = Vec::new();
        let mut sets = Vec::new();
        let result = (|| -> Result<u64, StepError> {
            let ins = nrt.sets().create()?;
            sets.push(ins);
            let outs = nrt.sets().create()?;
            sets.push(outs);
            let mut in_list = Vec::new();
            let mut out_list = Vec::new();
            for (set, decls, binds, list) in [
                (ins, &spec.inputs, inputs, &mut in_list),
                (outs, &spec.outputs, outputs, &mut out_list),
            ] {
                for d in decls {
                    let t = match binds.iter().find(|(k, _)| *k == d.name) {
                        Some((_, tn)) => self.tensor(tn)?.tensor,
                        None => {
                            let t = nrt.tensors().allocate(
                                Placement::Device,
                                CoreSel::from_c(m.core),
                                d.size,
                                Some(&d.name),
                            )?;
                            created.push(t);
                            t
                        }
                    };
                    nrt.sets().add(set, &d.name, t)?;
                    list.push((t, nrt.tensors().size(t)?));
                }
            }
            let mut written = 0u64;
            if check {
                for (k, (t, size)) in in_list.iter().enumerate() {
                    let base = pattern_chunk(k as u32 + 1);
                    let mut off = 0u64;
                    while off < *size {
                        let n = (*size - off).min(CHUNK as u64) as usize;
                        nrt.tensors()
                            .write(*t, &stamped(&base, off / CHUNK as u64, n), off)?;
                        off += n as u64;
                    }
                    written += size;
                }
            }
            self.rt.execute(m.handle, ins, outs)?;
            if check {
                let mut buf = vec![0u8; CHUNK];
                for (k, (t, size)) in out_list.iter().enumerate() {
                    let in_size = in_list.get(k).map_or(0, |x| x.1);
                    let base = pattern_chunk(k as u32 + 1);
                    let mut off = 0u64;
                    while off < *size {
                        let n = (*size - off).min(CHUNK as u64) as usize;
                        nrt.tensors().read(*t, &mut buf[..n], off)?;
                        let want: Vec<u8> = if off >= in_size {
                            vec![0; n]
                        } else {
                            let mut w = stamped(&base, off / CHUNK as u64, n);
                            let keep = (in_size - off).min(n as u64) as usize;
                            w[keep..].fill(0);
                            w
                        };
                        if let Some(p) = buf[..n].iter().zip(&want).position(|(a, b)| a != b) {
                            let name = spec.outputs.get(k).map_or("?", |d| d.name.as_str());
                            return Err(StepError::Check(format!(
                                "output `{name}` byte {} reads {:#04x}, expected {:#04x}",
                                off + p as u64,
                                buf[p],
                                want[p]
                            )));
                        }
                        off += n as u64;
                    }
                }
            }
            Ok(written)
        })();
        for s in sets {
            let _ = nrt.sets().destroy(s);
        }
        for t in created {
            let _ = nrt.tensors().free(t);
        }
        result.map_err(|e| self.note_error(e))
    }

    /// Device bytes of a loaded model's MODEL heaps, per usage (`[22]` = total), and its host
    /// bytes per usage.
    pub fn footprint(&self, h: ModelHandle) -> Result<Footprint, StepError> {
        Ok(total_footprint(&self.subgraph_footprints(h)?))
    }

    /// [`Self::footprint`] of each subgraph's MODEL heap (spec §5.2), in subgraph order.
    pub fn subgraph_footprints(&self, h: ModelHandle) -> Result<Vec<Footprint>, StepError> {
        let subgraphs = self.rt.nrt().models().info(h)?.subgraphs as usize;
        let mut per: Vec<Footprint> = vec![([0; 23], [0; 23]); subgraphs];
        self.rt.nrt().models().for_each_dmem(h, |sg, e| {
            let (sg, d) = (sg as usize, &e.info);
            if per.len() <= sg {
                per.resize(sg + 1, ([0; 23], [0; 23]));
            }
            let u = (d.mem_usage_type as usize).min(21);
            let (dev, host) = &mut per[sg];
            let row = if d.mem_type == dma_mem_location_t::HOST_DRAM as u32 {
                host
            } else {
                dev
            };
            row[u] += d.allocated_size;
            row[22] += d.allocated_size;
        })?;
        Ok(per)
    }

    /// Records every logical core's device usage under `name`.
    pub fn snapshot(&mut self, name: &str) {
        let nrt = self.rt.nrt();
        let rows = (0..nrt.visible_logical_core_count() as i64)
            .map(|v| {
                nrt.inspector()
                    .logical_core_usage(LogicalCore::from_c(v))
                    .map(|u| u.device)
                    .unwrap_or([0; 23])
            })
            .collect();
        self.snapshots.insert(name.to_string(), rows);
    }

    /// Closes the runtime (every model, tensor and shared resource goes back to the driver).
    pub fn close(&mut self) -> Result<(), StepError> {
        self.models.clear();
        self.tensors.clear();
        self.rt.close()?;
        Ok(())
    }

    /// Bytes in use in the driver's pools (this runtime's when the device is private to the
    /// process, every client's on a shared one); the core's error when the driver's statistics
    /// cannot be read or cannot be true.
    pub fn driver_bytes(&self) -> Result<u64, nrt_core::Error> {
        self.rt.nrt().driver_pool_bytes_in_use()
    }

    /// Checks an expectation's memory figures now; returns what missed.
    pub fn check_figures(&self, x: &Expect) -> Vec<String> {
        let mut out = Vec::new();
        let nrt = self.rt.nrt();
        // Expectations may follow a `close` step: they read what the runtime left.
        let ins = nrt.inspector();
        if let Some(core) = x.core {
            let stats = ins.memory_stats(LogicalCore::from_c(core));
            let usage = ins.logical_core_usage(LogicalCore::from_c(core));
            match (stats, usage) {
                (Ok(s), Ok(u)) => {
                    if let Some(why) = x.used.check(s.bytes_used) {
                        out.push(format!("core {core} used bytes {why}"));
                    }
                    if let Some(why) = x.peak.check(s.bytes_peak) {
                        out.push(format!("core {core} peak bytes {why}"));
                    }
                    if let Some((cat, b)) = &x.category {
                        if let Some(why) = b.check(cat.of(&u.device)) {
                            out.push(format!("core {core} {cat} bytes {why}"));
                        }
                    }
                }
                (Err(e), _) | (_, Err(e)) => {
                    if x.used.is_set() || x.peak.is_set() || x.category.is_some() {
                        out.push(format!("core {core}: {e}"));
                    }
                }
            }
            if let Some(snap) = &x.unchanged_since {
                let now = ins
                    .logical_core_usage(LogicalCore::from_c(core))
                    .map(|u| u.device);
                match (self.snapshots.get(snap), now) {
                    (None, _) => out.push(format!("no snapshot named `{snap}` was taken")),
                    (Some(rows), Ok(now)) => match rows.get(core as usize) {
                        Some(then) if *then == now => {}
                        Some(then) => {
                            let diffs: Vec<String> = dma_mem_usage_type_t::all()
                                .filter(|u| then[*u as usize] != now[*u as usize])
                                .map(|u| {
                                    format!(
                                        "{} {} → {}",
                                        u.short_name(),
                                        fmt_bytes(then[u as usize]),
                                        fmt_bytes(now[u as usize])
                                    )
                                })
                                .collect();
                            out.push(format!(
                                "core {core} changed since snapshot `{snap}`: {}",
                                diffs.join(", ")
                            ));
                        }
                        None => out.push(format!("core {core} was not in snapshot `{snap}`")),
                    },
                    (Some(_), Err(e)) => out.push(format!("core {core}: {e}")),
                }
            }
            if let Some(n) = x.models_on_core {
                match nrt.models().on_core(LogicalCore::from_c(core), &mut []) {
                    Ok(have) if have as u64 == n => {}
                    Ok(have) => out.push(format!(
                        "core {core} has {have} models resident, expected {n}"
                    )),
                    Err(e) => out.push(format!("core {core}: {e}")),
                }
            }
        }
        if let Some((name, b)) = &x.model {
            match self.model(name).and_then(|m| self.footprint(m.handle)) {
                Ok((dev, _)) => {
                    if let Some(why) = b.check(dev[22]) {
                        out.push(format!("model `{name}` device footprint {why}"));
                    }
                }
                Err(e) => out.push(format!("model `{name}`: {e}")),
            }
        }
        if let Some(b) = &x.driver_bytes {
            match self.driver_bytes() {
                Ok(bytes) => {
                    if let Some(why) = b.check(bytes) {
                        out.push(format!("driver bytes in use {why}"));
                    }
                }
                Err(e) => out.push(format!("driver bytes in use: {e}")),
            }
        }
        out
    }
}
