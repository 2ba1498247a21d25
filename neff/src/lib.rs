//! # nrt-neff
//!
//! The NEFF container reader and writer of nrt-dmem (docs/ARCHITECTURE.md, "Crates"), after
//! docs/NEFF-FORMAT.md (cited as §N):
//!
//! - [`header`]: the 1024-byte header and libnrt's load gates in libnrt's order (§2, §3);
//! - [`source`]: where the bytes come from (`nrt_load`'s buffer, a file), re-readable;
//! - [`archive`]: the streaming gzip/tar walk (§4), with path-traversal, special-file and
//!   archive-bomb refusals;
//! - [`stream`]: the read itself — header gates on the first 1 KiB, the archive walked member by
//!   member, metadata buffered under a cap, weights streamed into a [`WeightSink`];
//! - [`meta`]: the metadata tiers — `neff.json` (IO tensors, §6), the KELF descriptor (§7),
//!   each `def.json` (§8) and their payloads (§9);
//! - [`footprint`]: the §10.2 mapping to libnrt's usage types, per subgraph (MODEL) and per
//!   model (GLOBAL), each figure exact, estimated ([`convention`]) or declared;
//! - [`pack`]: a writer (pkg 2, MD5), used by `nrt-dmem neff pack` and the tests, and the §12
//!   fixture generator.
//!
//! [`read`] (a buffer), [`read_file`] and [`read_source`] turn a NEFF into a [`NeffModel`] —
//! owned, fully validated, holding no weight bytes — whose [`NeffModel::spec`] lends the core a
//! [`ModelSpec`], as `nrt_host::Manifest::spec` does for a manifest; [`read_with`] also streams
//! the weights into a sink (`nrt_load` copies them into their device allocations there).
#![deny(unsafe_code)]

pub mod archive;
pub mod convention;
mod error;
pub mod footprint;
pub mod header;
mod index;
pub mod meta;
pub mod pack;
pub mod source;
pub mod stream;

use nrt_core::abi::{constants, dma_mem_location_t};
use nrt_core::model::{ModelAlloc, ModelSpec, SbufCarveout, TensorDecl};
use nrt_core::ulib::UlibRequest;

pub use error::{NeffError, Result};
pub use footprint::{Basis, Booked, GpsimdBooking};
pub use header::{Gate, Header};
pub use meta::{Dtype, Kelf, Reservation, SubgraphDef, TensorInfo, TensorUsage};
pub use source::{NeffFile, Source};
pub use stream::{read_with, NoWeights, ReadError, WeightSink};

use index::{collect_all, View};

/// Most subgraphs of a model (the core's `MAX_SUBGRAPHS`, spec §5.2).
pub const MAX_SUBGRAPHS: usize = 8;

/// Default [`ReadOptions::max_metadata_bytes`]: 256 MiB.
pub const DEFAULT_MAX_METADATA: u64 = 256 << 20;

/// How to read a NEFF.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// Check the payload digest (§3 gates 8/9; libnrt's internal verify flag): MD5 (pkg 2) or
    /// SHA-256 (pkg 1) of the payload as stored, computed as it streams. Default off, as
    /// libnrt's plain `nrt_load`; `NRT_DMEM_VERIFY_NEFF=1` or `neff inspect --verify` turn it
    /// on (docs/NEFF.md).
    pub verify: bool,
    /// `NEURON_RT_ALLOW_LEGACY_NEFF=1`: an arch mismatch and a missing CAYMAN
    /// `runtime_statebuffer_reservation` are warnings, not refusals (§7, §8.6).
    pub allow_legacy_neff: bool,
    /// Most bytes of metadata members (`*.json`: `def.json`, KELF, engine JSONs, ucode
    /// manifests) held at once; a member the parse needs that is larger is refused. The IO
    /// tensor table has its own, smaller cap ([`meta::MAX_IO_TABLE_BYTES`]).
    pub max_metadata_bytes: u64,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            verify: false,
            allow_legacy_neff: false,
            max_metadata_bytes: DEFAULT_MAX_METADATA,
        }
    }
}

/// What the archive walk found (for `neff inspect`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArchiveSummary {
    /// gzip-compressed payload.
    pub gzip: bool,
    /// Tar bytes in the archive (inflated size).
    pub inflated_bytes: u64,
    /// Members (regular files, the dropped ones not included).
    pub members: usize,
    /// Directory entries skipped.
    pub directories: usize,
    /// Members dropped (the wavegraph debug member).
    pub skipped: Vec<String>,
    /// Passes over the payload: 1 when the weights streamed in the first (or nobody took
    /// them), 2 when a weight came before the metadata naming it; one more per tier of metadata
    /// members whose names do not end in `.json`.
    pub passes: u32,
}

/// A validated NEFF: its header, tensor table, subgraphs and footprint. It holds no weight
/// bytes: they stream from the archive into their allocations ([`read_with`]).
#[derive(Clone, Debug)]
pub struct NeffModel {
    /// The header.
    pub header: Header,
    /// The gates passed, in order.
    pub gates: Vec<Gate>,
    /// The archive walk.
    pub archive: ArchiveSummary,
    /// Model name: the header's `name`, else `neff-<uuid>`.
    pub name: String,
    /// IO tensor table: inputs, then outputs (§6).
    pub tensors: Vec<TensorInfo>,
    /// The KELF descriptor (§7).
    pub kelf: Kelf,
    /// Subgraphs (§8).
    pub subgraphs: Vec<SubgraphDef>,
    /// MODEL-allocator bookings per subgraph (§10.2).
    pub bookings: Vec<Vec<Booked>>,
    /// Scratchpad bytes (virtual vars → the core's shared pages).
    pub scratchpad_bytes: u64,
    /// The GPSIMD library set.
    pub gpsimd: Option<GpsimdBooking>,
    /// The EVTACCEL carveout (§8.6), the first subgraph's.
    pub carveout: Option<Reservation>,
}

/// The EVTACCEL geometry check of model-add on CAYMAN (§8.6).
pub fn check_evtaccel(r: &Reservation) -> Result<()> {
    let bad = |what: String| {
        Err(NeffError::invalid(format!(
            "Failed to verify Event Accel State Buffer carveout: {what}"
        )))
    };
    if r.start_partition != constants::EVTACCEL_PARTITION_START {
        return bad(format!("start partition {} != 0", r.start_partition));
    }
    if r.num_partitions != constants::EVTACCEL_PARTITION_COUNT {
        return bad(format!("{} partitions != 128", r.num_partitions));
    }
    if r.offset != constants::EVTACCEL_PARTITION_BYTE_OFFSET {
        return bad(format!("offset {:#x} != 0x37ff8", r.offset));
    }
    if r.size != constants::EVTACCEL_SIZE {
        return bad(format!("size {} != 8", r.size));
    }
    Ok(())
}

/// Reads and validates a NEFF held in memory (§3 → §10): header gates, archive, every metadata
/// tier and the footprint; the weights are checked against their declarations as they stream
/// past, not kept. Nothing is allocated on any device; an error names the first refusal.
pub fn read(bytes: &[u8], opts: &ReadOptions) -> Result<NeffModel> {
    read_source(&bytes, opts)
}

/// [`read`] from any [`Source`].
pub fn read_source(src: &dyn Source, opts: &ReadOptions) -> Result<NeffModel> {
    match read_with(src, opts, &mut NoWeights) {
        Ok(m) => Ok(m),
        Err(ReadError::Neff(e)) => Err(e),
        Err(ReadError::Sink(never)) => match never {},
    }
}

/// [`read`] from a file ([`NeffFile::open`]: a directory, a device or a FIFO holds no bytes and
/// is refused by the size-floor gate). An error opening it is `NRT_INVALID`.
pub fn read_file(path: impl AsRef<std::path::Path>, opts: &ReadOptions) -> Result<NeffModel> {
    let p = path.as_ref();
    let f = NeffFile::open(p)
        .map_err(|e| NeffError::invalid(format!("cannot open {}: {e}", p.display())))?;
    read_source(&f, opts)
}

/// The metadata tiers through `ar` (§5–§10): the model, or the first refusal (or, through the
/// view's misses, what the archive seen so far lacks).
pub(crate) fn parse_model(ar: &View<'_>, header: &Header, opts: &ReadOptions) -> Result<NeffModel> {
    let (tensors, kelf_member) = meta::parse_neff_json(ar)?;
    let kelf = meta::parse_kelf(ar, &kelf_member)?;
    if kelf.graphs.len() > MAX_SUBGRAPHS {
        return Err(NeffError::invalid(format!(
            "{}: {} subgraphs, at most {MAX_SUBGRAPHS}",
            kelf.member,
            kelf.graphs.len()
        )));
    }
    let subgraphs = collect_all(
        kelf.graphs
            .iter()
            .map(|(name, def)| meta::parse_def(ar, name, def)),
    )?;
    let model = NeffModel {
        name: if header.name.is_empty() {
            format!("neff-{}", header.uuid_string())
        } else {
            header.name.clone()
        },
        archive: ArchiveSummary::default(),
        bookings: subgraphs.iter().map(footprint::book_subgraph).collect(),
        scratchpad_bytes: footprint::scratchpad_bytes(&subgraphs),
        gpsimd: footprint::gpsimd(&subgraphs),
        carveout: subgraphs
            .iter()
            .find_map(|s| s.reservations.first().copied()),
        header: header.clone(),
        gates: Vec::new(),
        tensors,
        kelf,
        subgraphs,
    };
    // An explicit CAYMAN target is checked now; "*" waits for the live device (check_arch).
    if let Some(arch) = model.kelf.arch {
        model.check_target_tier(arch, opts.allow_legacy_neff)?;
    }
    Ok(model)
}

impl NeffModel {
    /// Inputs of the tensor table.
    pub fn inputs(&self) -> impl Iterator<Item = &TensorInfo> {
        self.tensors
            .iter()
            .filter(|t| t.usage == TensorUsage::Input)
    }

    /// Outputs of the tensor table.
    pub fn outputs(&self) -> impl Iterator<Item = &TensorInfo> {
        self.tensors
            .iter()
            .filter(|t| t.usage == TensorUsage::Output)
    }

    /// The arch-dependent checks of the live device (`arch` on the HAL scale SUNDA 2 /
    /// CAYMAN 3 / MARIANA 4): the KELF target must match (§7) unless `allow_legacy`; on
    /// CAYMAN every subgraph needs `runtime_statebuffer_reservation` (unless `allow_legacy`)
    /// and an EVTACCEL carveout must have its geometry (§8.6).
    pub fn check_arch(&self, arch: u32, allow_legacy: bool) -> Result<()> {
        if let Some(t) = self.kelf.arch {
            if t != arch && !allow_legacy {
                return Err(NeffError::invalid(format!(
                    "NEFF_ARCH_INCOMPAT: the NEFF targets '{}' (arch {t}) but the device is arch \
                     {arch}; set NEURON_RT_ALLOW_LEGACY_NEFF=1 to load it anyway",
                    self.kelf.target
                )));
            }
        }
        self.check_target_tier(arch, allow_legacy)
    }

    fn check_target_tier(&self, arch: u32, allow_legacy: bool) -> Result<()> {
        if arch != meta::ARCH_CAYMAN {
            return Ok(());
        }
        for sg in &self.subgraphs {
            if !sg.has_reservation_key && !allow_legacy {
                return Err(NeffError::invalid(format!(
                    "Missing or corrupted runtime_statebuffer_reservation field in def.json \
                     ({}); set NEURON_RT_ALLOW_LEGACY_NEFF=1 for a legacy NEFF",
                    sg.def_member
                )));
            }
            for r in &sg.reservations {
                check_evtaccel(r).map_err(|e| e.context(&sg.def_member))?;
            }
        }
        Ok(())
    }

    /// Each weight's copy as `(allocation index, byte length)`: indexes into
    /// [`NeffModel::bookings`]`[sg]` (= the spec's allocation list), the weights with a payload.
    pub fn copy_in_lens(&self, sg: usize) -> Vec<(usize, u64)> {
        let (Some(b), Some(s)) = (self.bookings.get(sg), self.subgraphs.get(sg)) else {
            return Vec::new();
        };
        b.iter()
            .enumerate()
            .filter_map(|(k, a)| Some((k, s.weights.get(a.weight?)?.len)))
            .collect()
    }

    /// Lends the model to the core as a [`ModelSpec`] (through [`NeffSpec::as_spec`]): one
    /// MODEL allocator per subgraph (spec §5.2), each booking its own `def.json`'s footprint.
    /// When every subgraph books the same list (the common SPMD case) the core gets it once.
    pub fn spec(&self) -> Result<NeffSpec<'_>> {
        let first = self.bookings.first().map(Vec::as_slice).unwrap_or_default();
        let key = |b: &Booked| (b.usage, b.host, b.size, b.align, b.hint.clone());
        let uniform = self
            .bookings
            .iter()
            .all(|b| b.len() == first.len() && b.iter().map(key).eq(first.iter().map(key)));
        fn decl(t: &TensorInfo) -> TensorDecl<'_> {
            TensorDecl {
                name: &t.name,
                size: t.size,
                dtype: t.dtype.raw(),
                shape: &t.shape,
            }
        }
        fn alloc(b: &Booked) -> ModelAlloc<'_> {
            ModelAlloc {
                usage: b.usage,
                location: if b.host {
                    dma_mem_location_t::HOST_DRAM
                } else {
                    dma_mem_location_t::TONGA_DRAM
                },
                size: b.size,
                align: b.align,
                hint: &b.hint,
            }
        }
        let (allocations, subgraph_ends) = if uniform {
            (first.iter().map(alloc).collect(), Vec::new())
        } else {
            let mut ends = Vec::with_capacity(self.bookings.len());
            let mut all = Vec::new();
            for b in &self.bookings {
                all.extend(b.iter().map(alloc));
                ends.push(all.len());
            }
            (all, ends)
        };
        Ok(NeffSpec {
            m: self,
            allocations,
            subgraph_ends,
            inputs: self.inputs().map(decl).collect(),
            outputs: self.outputs().map(decl).collect(),
        })
    }

    /// Device bytes the MODEL allocators ask for over all subgraphs (before page rounding).
    pub fn requested_device_bytes(&self) -> u64 {
        self.bookings
            .iter()
            .flatten()
            .filter(|b| !b.host)
            .map(|b| b.size)
            .fold(0, u64::saturating_add)
    }
}

/// Storage a [`ModelSpec`] borrows: returned by [`NeffModel::spec`].
pub struct NeffSpec<'m> {
    m: &'m NeffModel,
    allocations: Vec<ModelAlloc<'m>>,
    subgraph_ends: Vec<usize>,
    inputs: Vec<TensorDecl<'m>>,
    outputs: Vec<TensorDecl<'m>>,
}

impl NeffSpec<'_> {
    /// The core's view of the NEFF.
    pub fn as_spec(&self) -> ModelSpec<'_> {
        ModelSpec {
            name: &self.m.name,
            subgraphs: self.m.subgraphs.len() as u32,
            allocations: &self.allocations,
            subgraph_ends: &self.subgraph_ends,
            gpsimd_libs: self.m.gpsimd.map(|g| UlibRequest {
                count: g.count,
                bytes: g.bytes,
            }),
            scratchpad_bytes: self.m.scratchpad_bytes,
            sbuf_carveout: self.m.carveout.map(|c| SbufCarveout {
                ty: c.ty,
                partition_start: c.start_partition,
                partition_count: c.num_partitions,
                offset: c.offset,
                size: c.size,
            }),
            inputs: &self.inputs,
            outputs: &self.outputs,
        }
    }
}
