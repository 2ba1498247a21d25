//! The device-memory footprint of a NEFF (neff-format §10.2): per subgraph, what its MODEL
//! allocator books, by usage; per model, the GLOBAL pieces (scratchpad pages, the shared
//! ext-ISA library) — each figure marked exact, estimated (a [`crate::convention`]) or
//! declared (the `nrt_dmem` extension).

use nrt_core::abi::dma_mem_usage_type_t as U;

use crate::convention as conv;
use crate::meta::{SubgraphDef, UcodeLib, VarKind};

/// Longest allocation hint the core keeps (`MEM_REF_NAME_LEN_MAX`, 47 bytes).
pub const HINT_MAX: usize = 47;

/// How a byte figure is known.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Basis {
    /// Read from the NEFF (payload sizes, var sizes).
    Exact,
    /// A project convention (docs/NEFF.md), the sources being silent.
    Estimated,
    /// Stated by the NEFF's `nrt_dmem` extension (what `neff pack` writes).
    Declared,
}

impl Basis {
    /// `exact` / `estimated` / `declared`.
    pub fn name(self) -> &'static str {
        match self {
            Basis::Exact => "exact",
            Basis::Estimated => "estimated",
            Basis::Declared => "declared",
        }
    }
}

/// One allocation a subgraph's MODEL allocator makes at load (§10.2 row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Booked {
    /// Usage type.
    pub usage: U,
    /// On the host (`HOST_DRAM`) rather than the device.
    pub host: bool,
    /// Bytes.
    pub size: u64,
    /// Alignment (0 = the driver's natural).
    pub align: u64,
    /// Hint (≤ 47 bytes): the var or queue name, or the engine's image name.
    pub hint: String,
    /// How `size` is known.
    pub basis: Basis,
    /// Of `size`, the bytes read from the NEFF itself (all of it when exact; the raw `.bin`
    /// for an instruction image, a lower bound; none when declared).
    pub known_bytes: u64,
    /// What in the NEFF it comes from.
    pub source: String,
    /// For a weight: its index in the subgraph's `weights` (copied in after the allocation).
    pub weight: Option<usize>,
}

/// The GPSIMD library set of the model (§8.5, §10.2), as the core's request takes it:
/// `count` libraries of `bytes` each.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct GpsimdBooking {
    /// Libraries: the NEFF's own plus the runtime's default ext-ISA library.
    pub count: u32,
    /// Bytes booked per library: the largest of the set (the core books every one alike).
    pub bytes: u64,
    /// NEFF-supplied libraries among `count`.
    pub neff_libs: u32,
    /// Their bytes, exactly.
    pub neff_lib_bytes: u64,
    /// How `bytes` is known.
    pub basis: Basis,
}

/// A device booking of the convention's size (`Basis::Estimated`): the shape shared by the
/// instruction images, DMA rings, engine tables, pointer tables and io queues.
fn estimated(
    usage: U,
    size: u64,
    align: u64,
    name: &str,
    known_bytes: u64,
    source: String,
) -> Booked {
    Booked {
        usage,
        host: false,
        size,
        align,
        hint: hint(name, usage),
        basis: Basis::Estimated,
        known_bytes,
        source,
        weight: None,
    }
}

/// `s` cut to the core's hint length at a character boundary; the usage name when empty.
pub fn hint(s: &str, usage: U) -> String {
    if s.is_empty() {
        return usage.short_name().to_ascii_lowercase();
    }
    let mut n = s.len().min(HINT_MAX);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    s[..n].to_string()
}

/// The MODEL-allocator bookings of one subgraph, in the order the loader makes them.
pub fn book_subgraph(sg: &SubgraphDef) -> Vec<Booked> {
    let mut out = Vec::new();
    let declared = sg.extension.is_some();
    // Instruction images (§9): one per engine slot, a convention unless declared.
    if !declared {
        for e in &sg.engines {
            out.push(estimated(
                conv::instr_usage(e.engine),
                conv::instr_image_bytes(e.bin_bytes),
                conv::INSTR_IMAGE_ALIGN,
                &format!("{}_instr_{}", sg.name, e.engine),
                e.bin_bytes,
                match &e.bin {
                    Some(b) => format!("{b} ({} B) + assembly", e.bin_bytes),
                    None => format!("{} placeholder (no program)", e.engine),
                },
            ));
        }
    }
    // Weights (file vars): payload size, var alignment, copied in (§8.2). A payload of no
    // bytes allocates nothing.
    for (i, w) in sg.weights.iter().enumerate() {
        if w.len == 0 {
            continue;
        }
        let usage = U::DMA_MEM_USAGE_TYPE_WEIGHT;
        out.push(Booked {
            usage,
            host: false,
            size: w.len,
            align: w.alignment,
            hint: hint(&w.var, usage),
            basis: Basis::Exact,
            known_bytes: w.len,
            source: format!("file var {} ({})", w.var, w.member),
            weight: Some(i),
        });
    }
    // tmp-buf vars: SCRATCHPAD_NOT_SHARED at their size and alignment (§8.2, §10.2).
    for v in sg.vars.iter().filter(|v| v.kind == VarKind::TmpBuf) {
        let usage = U::DMA_MEM_USAGE_TYPE_SCRATCHPAD_NOT_SHARED;
        let size = v.size.unwrap_or(0);
        if size == 0 {
            continue;
        }
        out.push(Booked {
            usage,
            host: false,
            size,
            align: v.alignment,
            hint: hint(&v.name, usage),
            basis: Basis::Exact,
            known_bytes: size,
            source: format!("tmp-buf var {}", v.name),
            weight: None,
        });
    }
    if let Some(ext) = &sg.extension {
        for d in &ext.allocations {
            let usage = U::from_raw(d.usage).unwrap_or(U::DMA_MEM_USAGE_TYPE_GENERIC);
            out.push(Booked {
                usage,
                host: d.host,
                size: d.size,
                align: d.align,
                hint: hint(&d.hint, usage),
                basis: Basis::Declared,
                known_bytes: 0,
                source: "nrt_dmem extension".to_string(),
                weight: None,
            });
        }
        return out;
    }
    // DMA rings, one per queue instance (§8.3; sizes and usage per type SILENT).
    for q in &sg.queues {
        out.push(estimated(
            conv::ring_usage(&q.ty),
            conv::DMA_RING_BYTES_PER_INSTANCE.saturating_mul(q.instances),
            conv::DMA_RING_ALIGN,
            &q.name,
            0,
            format!(
                "dma_queue {} ({}, {} instance(s))",
                q.name, q.ty, q.instances
            ),
        ));
    }
    // Engine tables (ACT activation sets, DVE tables): their members' bytes.
    for e in &sg.engines {
        for (m, bytes) in e.tables.iter().filter(|(_, b)| *b > 0) {
            out.push(estimated(
                conv::ENGINE_TABLE_USAGE,
                *bytes,
                0,
                m,
                *bytes,
                format!("{} table {m}", e.engine),
            ));
        }
    }
    // Per-var tables: `each` bytes for every var of the listed kinds, one row per table.
    let mut per_var = |kinds: &[VarKind], usage, each: u64, table: &str, what: &str| {
        let n = sg.vars.iter().filter(|v| kinds.contains(&v.kind)).count() as u64;
        if n > 0 {
            out.push(estimated(
                usage,
                n * each,
                0,
                &format!("{}_{table}", sg.name),
                0,
                format!("{n} {what} var(s)"),
            ));
        }
    };
    // Pointer tables: one entry per pointer/list/remote var.
    per_var(
        &[VarKind::Pointer, VarKind::List, VarKind::Remote],
        U::DMA_MEM_USAGE_TYPE_GENERIC,
        conv::POINTER_ENTRY_BYTES,
        "mr_pointers",
        "pointer/list/remote",
    );
    // IO queues: per input/output var.
    per_var(
        &[VarKind::Input, VarKind::Output],
        U::DMA_MEM_USAGE_TYPE_IO,
        conv::IO_QUEUE_BYTES_PER_TENSOR,
        "io_queues",
        "input/output",
    );
    out
}

/// The scratchpad bytes of the model: the largest subgraph extent of `virtual` vars
/// ([`conv::virtual_extent`]), claimed as the core's shared pages (§10.2 GLOBAL).
pub fn scratchpad_bytes(sgs: &[SubgraphDef]) -> u64 {
    sgs.iter()
        .map(|sg| {
            conv::virtual_extent(
                sg.vars
                    .iter()
                    .filter(|v| v.kind == VarKind::Virtual)
                    .map(|v| (v.backing_off, v.size.unwrap_or(0), v.alignment)),
            )
        })
        .max()
        .unwrap_or(0)
}

/// The model's GPSIMD library set (§8.5, §10.2): every subgraph's NEFF libraries (a member
/// named twice counts once) plus the runtime's default ext-ISA library, whose bytes the
/// `nrt_dmem` extension states or [`conv::DEFAULT_EXTISA_LIB_BYTES`] estimates.
pub fn gpsimd(sgs: &[SubgraphDef]) -> Option<GpsimdBooking> {
    let mut libs: Vec<&UcodeLib> = Vec::new();
    for l in sgs.iter().flat_map(|s| s.ucode_libs.iter()) {
        if !libs.iter().any(|x| x.member == l.member) {
            libs.push(l);
        }
    }
    let ext = sgs.first().and_then(|s| s.extension.as_ref());
    let (default, basis) = match ext {
        Some(e) => (e.default_ulib_bytes, Basis::Declared),
        None => (Some(conv::DEFAULT_EXTISA_LIB_BYTES), Basis::Estimated),
    };
    let count = libs.len() as u32 + u32::from(default.is_some());
    if count == 0 {
        return None;
    }
    let neff_max = libs.iter().map(|l| l.bytes).max().unwrap_or(0);
    let bytes = neff_max.max(default.unwrap_or(0));
    let uniform = libs.iter().all(|l| l.bytes == bytes);
    Some(GpsimdBooking {
        count,
        bytes,
        neff_libs: libs.len() as u32,
        neff_lib_bytes: libs.iter().map(|l| l.bytes).sum(),
        basis: if default.is_none() && uniform {
            Basis::Exact
        } else {
            basis
        },
    })
}
