//! What `nrt_load` takes (public API §2): a compiled NEFF (read by `nrt-neff` as a stream,
//! docs/NEFF.md, docs/NEFF-FORMAT.md) or a model manifest (docs/MANIFEST.md), and the one load
//! path both take.
//!
//! [`load_source`] is `nrt_load`'s path. It tells the two apart by their first bytes (a NEFF's
//! header is binary, a manifest is JSON text; a path that is not a regular file is a NEFF of
//! no bytes, refused by its first gate). A NEFF is read as a stream: as soon as its footprint
//! is known it is loaded through [`nrt_core::Models::load`] (all-or-nothing, the core's
//! rollback) and each weight goes from the inflater into its WEIGHT allocation in chunks. Any
//! refusal after the load — a later member, a truncated weight, a digest mismatch, a failed
//! copy — unloads the model again, so the ledger and the driver end as they began.
//!
//! [`ModelFile`] is a validated description that holds no weight bytes: what `neff inspect`,
//! `plan` and the tensor table need.
#![deny(unsafe_code)]

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::Mutex;

use nrt_core::abi::NRT_STATUS;
use nrt_core::{LogicalCore, ModelHandle, Nrt};
use nrt_neff::pack::{PackAlloc, PackModel, PackTensor};
use nrt_neff::{
    NeffError, NeffFile, NeffModel, ReadError, ReadOptions, Reservation, Source, TensorInfo,
    WeightSink,
};

use crate::manifest::{sniff_neff, Location, Manifest, ManifestError, MAX_MANIFEST_BYTES};

/// Why a model file could not be read or loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {msg}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        msg: String,
    },
    /// The manifest is invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The NEFF is refused (neff-format §3–§9).
    #[error("NEFF refused: {0}")]
    Neff(#[from] NeffError),
    /// The core refused or failed the load (rolled back).
    #[error("load failed: {0}")]
    Core(#[from] nrt_core::Error),
    /// [`load_source`]: the core refused or failed the load of a validated model, or a copy
    /// into it failed (rolled back), with what the model asked for.
    #[error("load failed: {error}")]
    Load {
        /// The core's error.
        error: nrt_core::Error,
        /// The model's name.
        model: String,
        /// Device bytes its allocations ask for (before page rounding).
        requested_device_bytes: u64,
        /// The logical core it was loaded onto.
        vnc: i64,
    },
}

impl LoadError {
    /// The public status: the NEFF's (`NRT_INVALID` / `NRT_UNSUPPORTED_NEFF_VERSION`), the
    /// core's, or `NRT_INVALID` for a bad manifest or an unreadable file.
    pub fn status(&self) -> NRT_STATUS {
        match self {
            LoadError::Io { .. } | LoadError::Manifest(_) => NRT_STATUS::NRT_INVALID,
            LoadError::Neff(e) => e.status(),
            LoadError::Core(e) | LoadError::Load { error: e, .. } => e.status(),
        }
    }
}

/// A validated model file. A NEFF's holds no weight bytes.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum ModelFile {
    /// A JSON model manifest.
    Manifest(Manifest),
    /// A NEFF container.
    Neff(Box<NeffModel>),
}

/// The NEFF reader's options from the environment: `NEURON_RT_ALLOW_LEGACY_NEFF=1`
/// (neff-format §7, §8.6) and `NRT_DMEM_VERIFY_NEFF=1`, which checks each NEFF's payload digest
/// as it streams (libnrt checks it only when asked; docs/NEFF.md).
pub fn read_options_from_env() -> ReadOptions {
    let on = |k: &str| std::env::var(k).is_ok_and(|v| v == "1");
    ReadOptions {
        allow_legacy_neff: on("NEURON_RT_ALLOW_LEGACY_NEFF"),
        verify: on("NRT_DMEM_VERIFY_NEFF"),
        ..ReadOptions::default()
    }
}

/// Bytes looked at to tell a NEFF from a manifest: the NEFF header, whose integer fields always
/// hold NUL bytes (a manifest never does); nothing past it is read before its gates pass.
const SNIFF_BYTES: u64 = nrt_neff::header::HEADER_LEN as u64;

/// Whether `src` holds a NEFF (else a manifest): a path that is not a regular file counts as
/// one, so that its first gate refuses it.
fn is_neff(src: &dyn Source) -> Result<bool, LoadError> {
    if src.not_regular().is_some() {
        return Ok(true);
    }
    let mut head = Vec::new();
    src.open_at(0, SNIFF_BYTES)
        .and_then(|r| r.take(SNIFF_BYTES).read_to_end(&mut head))
        .map_err(|e| LoadError::Io {
            path: "the model".into(),
            msg: e.to_string(),
        })?;
    Ok(sniff_neff(&head).is_some())
}

/// A manifest's bytes from `src`, at most [`MAX_MANIFEST_BYTES`].
fn manifest_bytes(src: &dyn Source) -> Result<Vec<u8>, LoadError> {
    let io = |msg: String| LoadError::Io {
        path: "the model manifest".into(),
        msg,
    };
    if src.len() > MAX_MANIFEST_BYTES {
        return Err(io(format!(
            "{} bytes: a model manifest takes at most {MAX_MANIFEST_BYTES}",
            src.len()
        )));
    }
    let mut b = Vec::new();
    src.open_at(0, src.len())
        .and_then(|mut r| r.read_to_end(&mut b))
        .map_err(|e| io(e.to_string()))?;
    Ok(b)
}

fn open(path: &Path) -> Result<NeffFile, LoadError> {
    NeffFile::open(path).map_err(|e| LoadError::Io {
        path: path.display().to_string(),
        msg: e.to_string(),
    })
}

impl ModelFile {
    /// Reads a model from `src`: a NEFF (validated as it streams; its weights are checked
    /// against their declarations and not kept) or a manifest. Nothing is allocated.
    pub fn read(src: &dyn Source, opts: &ReadOptions) -> Result<Self, LoadError> {
        if is_neff(src)? {
            Ok(ModelFile::Neff(Box::new(nrt_neff::read_source(src, opts)?)))
        } else {
            Ok(ModelFile::Manifest(Manifest::parse(&manifest_bytes(src)?)?))
        }
    }

    /// [`ModelFile::read`] of `nrt_load`'s bytes.
    pub fn parse(bytes: &[u8], opts: &ReadOptions) -> Result<Self, LoadError> {
        Self::read(&bytes, opts)
    }

    /// [`ModelFile::read`] of a file: nothing past a NEFF's header is read until its gates pass.
    pub fn from_path(path: impl AsRef<Path>, opts: &ReadOptions) -> Result<Self, LoadError> {
        Self::read(&open(path.as_ref())?, opts)
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

    /// Loads the model's allocations onto logical core `vnc` (spec §5), all-or-nothing, without
    /// writing any weight: for a device whose contents nobody reads. A plan's scratch device is
    /// one: what fits does not depend on the bytes, and a simulated device commits host memory
    /// for every byte written. For a NEFF, first the checks that need the live device (KELF
    /// target, CAYMAN's reservation and EVTACCEL geometry; `allow_legacy` =
    /// `NEURON_RT_ALLOW_LEGACY_NEFF=1`), and each weight's allocation is checked to be where a
    /// copy would go. `nrt_load`'s path, which copies the weights, is [`load_source`].
    pub fn load_without_weights(
        &self,
        nrt: &Nrt<'_>,
        vnc: LogicalCore,
        allow_legacy: bool,
    ) -> Result<ModelHandle, LoadError> {
        match self {
            ModelFile::Manifest(m) => Ok(nrt.models().load(vnc, &m.spec().as_spec())?),
            ModelFile::Neff(n) => {
                let h = load_neff_spec(nrt, vnc, n, allow_legacy)?;
                if let Err(e) = weight_slots(nrt, h, n) {
                    unload_after_failure(nrt, h);
                    return Err(e.into());
                }
                Ok(h)
            }
        }
    }
}

/// `nrt_load`'s `vnc = -1` (public API §2: "first free"): the first visible logical core with
/// no model on it; when every core has one, the core with the fewest (the lowest index on a
/// tie). The one statement of the rule: libnrt.so's `nrt_load` and the planner use it.
pub fn first_free_core(nrt: &Nrt<'_>) -> i64 {
    (0..i64::from(nrt.visible_logical_core_count()))
        .min_by_key(|&v| {
            nrt.models()
                .on_core(LogicalCore::from_c(v), &mut [])
                .unwrap_or(usize::MAX)
        })
        .unwrap_or(0)
}

/// Where [`load_source`] puts a model.
#[derive(Copy, Clone, Debug)]
pub enum Place<'a> {
    /// This logical core.
    Core(LogicalCore),
    /// `vnc = -1`: [`first_free_core`], picked and loaded under `lock`, so that two such loads
    /// never pick the same free core. The pick happens once the model is validated.
    FirstFree(&'a Mutex<()>),
}

/// A model [`load_source`] loaded.
#[derive(Debug)]
pub struct Loaded {
    /// The model.
    pub handle: ModelHandle,
    /// Its description (no weight bytes).
    pub file: ModelFile,
    /// The logical core it went to.
    pub vnc: i64,
}

/// Reads and loads a model from `src` (`nrt_load`'s bytes, a file): see the module doc.
pub fn load_source(
    nrt: &Nrt<'_>,
    place: Place<'_>,
    src: &dyn Source,
    opts: &ReadOptions,
) -> Result<Loaded, LoadError> {
    if !is_neff(src)? {
        let m = Manifest::parse(&manifest_bytes(src)?)?;
        let (handle, vnc) = place_and_load(nrt, place, |vnc| {
            nrt.models()
                .load(vnc, &m.spec().as_spec())
                .map_err(|error| LoadError::Load {
                    error,
                    model: m.name.clone(),
                    requested_device_bytes: m.requested_bytes(Location::Device),
                    vnc: vnc.to_c(),
                })
        })?;
        return Ok(Loaded {
            handle,
            file: ModelFile::Manifest(m),
            vnc,
        });
    }
    let mut sink = Loader {
        nrt,
        place,
        allow_legacy: opts.allow_legacy_neff,
        loaded: None,
        slots: HashMap::new(),
    };
    let read = nrt_neff::read_with(src, opts, &mut sink);
    match (read, sink.loaded) {
        (Ok(n), Some((handle, vnc, _))) => Ok(Loaded {
            handle,
            file: ModelFile::Neff(Box::new(n)),
            vnc,
        }),
        (r, loaded) => {
            // The model was never handed out: unloading it is the rollback.
            if let Some((h, _, _)) = loaded {
                unload_after_failure(nrt, h);
            }
            Err(match r {
                Err(ReadError::Neff(e)) => LoadError::Neff(e),
                Err(ReadError::Sink(e)) => e,
                Ok(_) => {
                    nrt_core::Error::InvalidModel("the NEFF reader never began the load").into()
                }
            })
        }
    }
}

/// Reads and loads `nrt_load`'s bytes onto `vnc` with the environment's options (see
/// [`load_source`]). Returns the handle and the file (for its tensor table).
pub fn load_bytes(
    nrt: &Nrt<'_>,
    vnc: LogicalCore,
    bytes: &[u8],
) -> Result<(ModelHandle, ModelFile), LoadError> {
    let l = load_source(nrt, Place::Core(vnc), &bytes, &read_options_from_env())?;
    Ok((l.handle, l.file))
}

/// Reads and loads a model file onto `vnc` (see [`load_source`]).
pub fn load_path(
    nrt: &Nrt<'_>,
    vnc: LogicalCore,
    path: impl AsRef<Path>,
    opts: &ReadOptions,
) -> Result<(ModelHandle, ModelFile), LoadError> {
    let l = load_source(nrt, Place::Core(vnc), &open(path.as_ref())?, opts)?;
    Ok((l.handle, l.file))
}

/// Picks the core `place` says and runs `load` on it (under the pick lock for
/// [`Place::FirstFree`]).
fn place_and_load<T>(
    nrt: &Nrt<'_>,
    place: Place<'_>,
    load: impl FnOnce(LogicalCore) -> Result<T, LoadError>,
) -> Result<(T, i64), LoadError> {
    match place {
        Place::Core(vnc) => Ok((load(vnc)?, vnc.to_c())),
        Place::FirstFree(lock) => {
            let _picking = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let vnc = first_free_core(nrt);
            Ok((load(LogicalCore::from_c(vnc))?, vnc))
        }
    }
}

fn unload_after_failure(nrt: &Nrt<'_>, h: ModelHandle) {
    if let Err(u) = nrt.models().unload(h) {
        log::error!(
            "unloading model {} after a failed load: {u}",
            h.h_model().id
        );
    }
}

/// The device checks of a NEFF and the core's load of its footprint.
fn load_neff_spec(
    nrt: &Nrt<'_>,
    vnc: LogicalCore,
    n: &NeffModel,
    allow_legacy: bool,
) -> Result<ModelHandle, LoadError> {
    let v = nrt.logical_core_entry(vnc)?;
    let arch = nrt.geom(v.tpbs[0].device_id).arch;
    n.check_arch(arch, allow_legacy)?;
    let storage = n.spec()?;
    Ok(nrt.models().load(vnc, &storage.as_spec())?)
}

/// Where a weight goes: its WEIGHT allocation.
#[derive(Copy, Clone, Debug)]
struct Slot {
    dev: u32,
    handle: u64,
    at: u64,
    len: u64,
}

/// Each weight's allocation, by `(subgraph, weight index)`. The k-th dmem of a subgraph's MODEL
/// heap is its k-th spec allocation (the heap keeps them in allocation order; the model's own
/// GPSIMD libraries come after them); each is checked to be the weight's (hint, size).
fn weight_slots(
    nrt: &Nrt<'_>,
    h: ModelHandle,
    n: &NeffModel,
) -> nrt_core::Result<HashMap<(usize, usize), Slot>> {
    let mut dmems: Vec<Vec<(Slot, String)>> = (0..n.subgraphs.len()).map(|_| Vec::new()).collect();
    nrt.models().for_each_dmem(h, |sg, e| {
        let d = &e.info;
        if let Some(s) = dmems.get_mut(sg as usize) {
            s.push((
                Slot {
                    dev: d.device_id,
                    handle: d.mem_handle,
                    at: d.align_offset,
                    len: d.size,
                },
                e.hint.to_string(),
            ));
        }
    })?;
    let mut slots = HashMap::new();
    for (sg, dmems) in dmems.iter().enumerate() {
        for (k, len) in n.copy_in_lens(sg) {
            let want = &n.bookings[sg][k];
            let (slot, _) = dmems
                .get(k)
                .filter(|(d, hint)| *hint == want.hint && d.len >= len)
                .ok_or(nrt_core::Error::InvalidModel(
                    "a weight's allocation is not where the load made it",
                ))?;
            if let Some(w) = want.weight {
                slots.insert((sg, w), Slot { len, ..*slot });
            }
        }
    }
    Ok(slots)
}

/// The sink that loads a NEFF when its footprint is known and copies its weights in.
struct Loader<'n, 'r, 'p> {
    nrt: &'n Nrt<'r>,
    place: Place<'p>,
    allow_legacy: bool,
    /// The model once loaded: handle, logical core, (name, requested bytes).
    loaded: Option<(ModelHandle, i64, (String, u64))>,
    slots: HashMap<(usize, usize), Slot>,
}

impl Loader<'_, '_, '_> {
    fn failed(&self, error: nrt_core::Error) -> LoadError {
        match &self.loaded {
            Some((_, vnc, (model, bytes))) => LoadError::Load {
                error,
                model: model.clone(),
                requested_device_bytes: *bytes,
                vnc: *vnc,
            },
            None => LoadError::Core(error),
        }
    }
}

impl WeightSink for Loader<'_, '_, '_> {
    type Error = LoadError;

    fn begin(&mut self, n: &NeffModel) -> Result<(), LoadError> {
        let nrt = self.nrt;
        let note = (n.name.clone(), n.requested_device_bytes());
        let (h, vnc) = place_and_load(nrt, self.place, |vnc| {
            load_neff_spec(nrt, vnc, n, self.allow_legacy).map_err(|e| match e {
                LoadError::Core(error) => LoadError::Load {
                    error,
                    model: note.0.clone(),
                    requested_device_bytes: note.1,
                    vnc: vnc.to_c(),
                },
                e => e,
            })
        })?;
        self.loaded = Some((h, vnc, note));
        self.slots = weight_slots(nrt, h, n).map_err(|e| self.failed(e))?;
        Ok(())
    }

    fn write(&mut self, sg: usize, w: usize, offset: u64, bytes: &[u8]) -> Result<(), LoadError> {
        let s = match self.slots.get(&(sg, w)) {
            Some(s) if offset.saturating_add(bytes.len() as u64) <= s.len => *s,
            _ => {
                return Err(self.failed(nrt_core::Error::InvalidModel(
                    "a weight's bytes do not fit its allocation",
                )))
            }
        };
        self.nrt
            .driver()
            .copy_in(s.dev, s.handle, s.at + offset, bytes)
            .map_err(|e| self.failed(nrt_core::Error::Driver(e)))
    }
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

/// [`pack`] into a file, weights generated as they are written (never held); the bytes written.
pub fn pack_to_file(m: &Manifest, path: impl AsRef<Path>) -> Result<u64, NeffError> {
    let p = path.as_ref();
    let f = std::fs::File::create(p)
        .map_err(|e| NeffError::invalid(format!("writing {}: {e}", p.display())))?;
    nrt_neff::pack::pack_to(&pack_model(m)?, std::io::BufWriter::new(f))
}
