//! What `nrt_load` takes (public API §2): a compiled NEFF (read by `nrt-neff`, docs/NEFF-FORMAT.md)
//! or a model manifest (docs/MANIFEST.md), and the one load path both take.
//!
//! [`ModelFile::parse`] tells them apart (a NEFF's header is binary, a manifest is JSON text),
//! validates the whole file and allocates nothing; [`ModelFile::load`] then loads it through
//! [`nrt_core::Nrt::load_model`] — all-or-nothing, the core's rollback — and, for a NEFF, copies
//! the weights into their WEIGHT allocations; a failed copy unloads the model again, so the
//! ledger and the driver end as they began.
#![deny(unsafe_code)]

use std::path::Path;

use nrt_core::abi::NRT_STATUS;
use nrt_core::{LogicalCore, ModelHandle, Nrt};
use nrt_neff::pack::{PackAlloc, PackModel, PackTensor};
use nrt_neff::{NeffError, NeffModel, ReadOptions, Reservation, TensorInfo};

use crate::manifest::{sniff_neff, Location, Manifest, ManifestError};

/// Why a model file could not be read or loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The manifest is invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The NEFF is refused (neff-format §3–§9).
    #[error("NEFF refused: {0}")]
    Neff(#[from] NeffError),
    /// The core refused or failed the load (rolled back).
    #[error("load failed: {0}")]
    Core(#[from] nrt_core::Error),
}

impl LoadError {
    /// The public status: the NEFF's (`NRT_INVALID` / `NRT_UNSUPPORTED_NEFF_VERSION`), the
    /// core's, or `NRT_INVALID` for a bad manifest.
    pub fn status(&self) -> NRT_STATUS {
        match self {
            LoadError::Manifest(_) => NRT_STATUS::NRT_INVALID,
            LoadError::Neff(e) => e.status(),
            LoadError::Core(e) => e.status(),
        }
    }
}

/// A validated model file.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum ModelFile {
    /// A JSON model manifest.
    Manifest(Manifest),
    /// A NEFF container.
    Neff(Box<NeffModel>),
}

/// The NEFF reader's options from the environment libnrt reads:
/// `NEURON_RT_ALLOW_LEGACY_NEFF=1` (neff-format §7, §8.6).
pub fn read_options_from_env() -> ReadOptions {
    ReadOptions {
        allow_legacy_neff: std::env::var("NEURON_RT_ALLOW_LEGACY_NEFF").is_ok_and(|v| v == "1"),
        ..ReadOptions::default()
    }
}

impl ModelFile {
    /// Reads a model from `nrt_load`'s bytes: binary data (a NEFF's header always has NUL
    /// bytes) goes to the NEFF reader, text to the manifest parser. Nothing is allocated.
    pub fn parse(bytes: &[u8], opts: &ReadOptions) -> Result<Self, LoadError> {
        if sniff_neff(bytes).is_some() {
            Ok(ModelFile::Neff(Box::new(nrt_neff::read(bytes, opts)?)))
        } else {
            Ok(ModelFile::Manifest(Manifest::parse(bytes)?))
        }
    }

    /// Reads a model file from disk (see [`ModelFile::parse`]).
    pub fn from_path(path: impl AsRef<Path>, opts: &ReadOptions) -> Result<Self, LoadError> {
        let p = path.as_ref();
        let bytes = std::fs::read(p).map_err(|e| ManifestError::Io {
            path: p.display().to_string(),
            msg: e.to_string(),
        })?;
        Self::parse(&bytes, opts)
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        match self {
            ModelFile::Manifest(m) => &m.name,
            ModelFile::Neff(n) => &n.name,
        }
    }

    /// The IO tensor table (`nrt_get_model_tensor_info`): a NEFF's from its `neff.json`, a
    /// manifest's from its `inputs`/`outputs` (their `dtype` and `shape`).
    pub fn tensor_info(&self) -> Vec<TensorInfo> {
        match self {
            ModelFile::Neff(n) => n.tensors.clone(),
            ModelFile::Manifest(m) => m.io_tensors(),
        }
    }

    /// Device bytes the model's allocations ask for over all subgraphs (before page rounding;
    /// libraries and scratchpad not included).
    pub fn requested_device_bytes(&self) -> u64 {
        match self {
            ModelFile::Manifest(m) => m.requested_bytes(Location::Device),
            ModelFile::Neff(n) => n.requested_device_bytes(),
        }
    }

    /// Loads the model onto logical core `vnc` (spec §5): all-or-nothing. For a NEFF, first the
    /// checks that need the live device (KELF target, CAYMAN's reservation and EVTACCEL
    /// geometry; `allow_legacy` = `NEURON_RT_ALLOW_LEGACY_NEFF=1`), then the core's load,
    /// then the weights' copy-in; a failed copy unloads the model.
    pub fn load(
        &self,
        nrt: &Nrt<'_>,
        vnc: LogicalCore,
        allow_legacy: bool,
    ) -> Result<ModelHandle, LoadError> {
        self.load_with(nrt, vnc, allow_legacy, Weights::Copy)
    }

    /// [`ModelFile::load`], with the weights copied in or only checked against their
    /// allocations (`weights`).
    pub fn load_with(
        &self,
        nrt: &Nrt<'_>,
        vnc: LogicalCore,
        allow_legacy: bool,
        weights: Weights,
    ) -> Result<ModelHandle, LoadError> {
        match self {
            ModelFile::Manifest(m) => Ok(nrt.load_model(vnc, &m.spec().as_spec())?),
            ModelFile::Neff(n) => load_neff(nrt, vnc, n, allow_legacy, weights),
        }
    }
}

impl ModelFile {
    /// Frees a NEFF's weight bytes ([`NeffModel::drop_weight_bytes`]): the file can then only
    /// be loaded with [`Weights::Check`].
    pub fn drop_weight_bytes(&mut self) {
        if let ModelFile::Neff(n) = self {
            n.drop_weight_bytes();
        }
    }
}

/// `nrt_load`'s `vnc = -1` (public API §2: "first free"): the first visible logical core with
/// no model on it; when every core has one, the core with the fewest (the lowest index on a
/// tie). The one statement of the rule: libnrt.so's `nrt_load` and the planner use it.
pub fn first_free_core(nrt: &Nrt<'_>) -> i64 {
    (0..i64::from(nrt.visible_vnc_count()))
        .min_by_key(|&v| {
            nrt.models_on(LogicalCore::from_c(v), &mut [])
                .unwrap_or(usize::MAX)
        })
        .unwrap_or(0)
}

/// What a NEFF load does with the weights (neff-format §8.2: HBM alloc + copy).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Weights {
    /// Copy each into its WEIGHT allocation, as `nrt_load` does.
    Copy,
    /// Check that each has its allocation, as a copy would, and copy nothing: for a device
    /// whose contents nobody reads. A plan's scratch device is one: what fits does not depend
    /// on the bytes, and a simulated device commits host memory for every byte written, so a
    /// plan that fills a trn2 would otherwise hold up to its 96 GiB of HBM in host memory.
    Check,
}

/// Reads and loads `nrt_load`'s bytes in one call: [`ModelFile::parse`] with the environment's
/// options, then [`ModelFile::load`]. Returns the handle and the file (for its tensor table).
pub fn load_bytes(
    nrt: &Nrt<'_>,
    vnc: LogicalCore,
    bytes: &[u8],
) -> Result<(ModelHandle, ModelFile), LoadError> {
    let opts = read_options_from_env();
    let f = ModelFile::parse(bytes, &opts)?;
    let h = f.load(nrt, vnc, opts.allow_legacy_neff)?;
    Ok((h, f))
}

fn load_neff(
    nrt: &Nrt<'_>,
    vnc: LogicalCore,
    n: &NeffModel,
    allow_legacy: bool,
    weights: Weights,
) -> Result<ModelHandle, LoadError> {
    let v = nrt.virtual_core(vnc)?;
    let arch = nrt.geom(v.tpbs[0].device_id).arch;
    n.check_arch(arch, allow_legacy)?;
    let storage = n.spec()?;
    let h = nrt.load_model(vnc, &storage.as_spec())?;
    if let Err(e) = copy_weights(nrt, h, n, weights) {
        // The model was never handed out: unloading it is the rollback.
        if let Err(u) = nrt.unload_model(h) {
            log::error!(
                "unloading model {} after a failed weight copy: {u}",
                h.h_model().id
            );
        }
        return Err(e);
    }
    Ok(h)
}

/// Copies each weight into its WEIGHT allocation (neff-format §8.2: HBM alloc + copy). The
/// k-th dmem of a subgraph's MODEL heap is its k-th spec allocation (the heap keeps them in
/// allocation order; the model's own GPSIMD libraries come after them).
fn copy_weights(
    nrt: &Nrt<'_>,
    h: ModelHandle,
    n: &NeffModel,
    weights: Weights,
) -> Result<(), LoadError> {
    struct Slot {
        dev: u32,
        handle: u64,
        at: u64,
        size: u64,
        hint: String,
    }
    let mut slots: Vec<Vec<Slot>> = (0..n.subgraphs.len()).map(|_| Vec::new()).collect();
    nrt.for_each_model_dmem(h, |sg, d| {
        if let Some(s) = slots.get_mut(sg as usize) {
            s.push(Slot {
                dev: d.device_id,
                handle: d.mem_handle,
                at: d.align_offset,
                size: d.size,
                hint: nrt_core::dmem::dmem_hint(d).to_string(),
            });
        }
    })?;
    for (sg, slots) in slots.iter().enumerate() {
        for (k, len) in n.copy_in_lens(sg) {
            let want = &n.bookings[sg][k];
            let d = slots
                .get(k)
                .filter(|d| d.hint == want.hint && d.size >= len as u64)
                .ok_or(nrt_core::Error::InvalidModel(
                    "a weight's allocation is not where the load made it",
                ))?;
            if weights == Weights::Copy {
                let bytes = want.weight.and_then(|w| n.weight_bytes(sg, w)).ok_or(
                    nrt_core::Error::InvalidModel(
                        "a weight's bytes were dropped (NeffModel::drop_weight_bytes)",
                    ),
                )?;
                nrt.driver()
                    .copy_in(d.dev, d.handle, d.at, bytes)
                    .map_err(nrt_core::Error::Driver)?;
            }
        }
    }
    Ok(())
}

/// What `neff pack` writes for a manifest: its allocations, libraries, scratchpad, carveout
/// and tensors (with their `dtype` and `shape`).
pub fn pack_model(m: &Manifest) -> Result<PackModel, NeffError> {
    let tensor = |t: &crate::manifest::Tensor| PackTensor {
        name: t.name.clone(),
        dtype: t.dtype,
        shape: t.shape.clone(),
    };
    let sbuf_carveout = match m.sbuf_carveout {
        Some(c) if c.ty != 1 => {
            return Err(NeffError::invalid(format!(
                "carveout type {} cannot be written: a NEFF reservation is \"evtaccel\" (1)",
                c.ty
            )))
        }
        Some(c) => Some(Reservation {
            ty: 1,
            offset: c.offset,
            size: c.size,
            start_partition: c.partition_start,
            num_partitions: c.partition_count,
        }),
        None => None,
    };
    Ok(PackModel {
        name: m.name.clone(),
        subgraphs: m.subgraphs,
        allocations: m
            .allocations
            .iter()
            .map(|a| PackAlloc {
                usage: a.usage,
                host: a.location == Location::Host,
                size: a.size,
                align: a.align,
                hint: a.hint.clone(),
            })
            .collect(),
        gpsimd_libs: m.gpsimd_libs.map(|g| (g.count, g.bytes)),
        scratchpad_bytes: m.scratchpad_bytes,
        sbuf_carveout,
        inputs: m.inputs.iter().map(tensor).collect(),
        outputs: m.outputs.iter().map(tensor).collect(),
    })
}

/// `pack(manifest)`: a NEFF (pkg 2, MD5) describing the manifest; reading it back gives the
/// manifest's spec.
pub fn pack(m: &Manifest) -> Result<Vec<u8>, NeffError> {
    nrt_neff::pack::pack(&pack_model(m)?)
}
