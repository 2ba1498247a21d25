//! `nrt-dmem neff inspect FILE [--json] [--verify]` and `nrt-dmem neff pack MANIFEST -o FILE`:
//! what a NEFF holds and what loading it would book, before anything is loaded (the file read
//! as a stream, its weights never held); and a NEFF written from a manifest and read back.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use nrt_core::abi::dma_mem_usage_type_t as U;
use nrt_neff::{Basis, NeffModel, Source};
use serde_json::{json, Value};

use super::CliError;
use nrt_host::model_file;
use nrt_host::Manifest;

/// `neff` arguments.
#[derive(Debug, Args)]
pub struct NeffArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: NeffCommand,
}

/// `neff inspect` / `neff pack`.
#[derive(Debug, Subcommand)]
pub enum NeffCommand {
    /// Read a NEFF and show its header, the gates it passed, its tensor table, subgraphs and
    /// the device-memory footprint per usage and tier (exact / estimated / declared bytes).
    /// Nothing is loaded; a refused NEFF exits 2 with libnrt's reason and status.
    Inspect {
        /// The NEFF file.
        file: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Check the payload's digest (MD5 / SHA-256) as it streams, as libnrt's verify flag
        /// does; also on with NRT_DMEM_VERIFY_NEFF=1.
        #[arg(long)]
        verify: bool,
    },
    /// Write a NEFF (pkg 2, MD5) from a model manifest (docs/MANIFEST.md, docs/NEFF.md), then
    /// read it back (digest verified) through the reader `nrt_load` uses.
    Pack {
        /// The manifest.
        manifest: PathBuf,
        /// Where to write the NEFF.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
    },
}

/// Runs `neff …`.
pub fn run(a: &NeffArgs, out: &mut dyn Write) -> Result<i32, CliError> {
    match &a.command {
        NeffCommand::Inspect { file, json, verify } => inspect(file, *json, *verify, out),
        NeffCommand::Pack { manifest, output } => pack(manifest, output, out),
    }
}

fn pack(manifest: &PathBuf, output: &PathBuf, out: &mut dyn Write) -> Result<i32, CliError> {
    let m = Manifest::from_path(manifest).map_err(|e| CliError::input(e.to_string()))?;
    let bytes = model_file::pack_to_file(&m, output)
        .map_err(|e| CliError::input(format!("{}: cannot pack: {e}", manifest.display())))?;
    // Read back as `nrt_load` reads it, the digest checked: what was written loads.
    let opts = nrt_neff::ReadOptions {
        verify: true,
        ..model_file::read_options_from_env()
    };
    let n = nrt_neff::read_file(output, &opts).map_err(|e| {
        CliError::input(format!(
            "{}: the NEFF written does not read back: {e}",
            output.display()
        ))
    })?;
    writeln!(
        out,
        "wrote {} ({bytes} bytes, NEFF pkg 2, model \"{}\"; read back: {} tensors, {} \
         subgraphs, {} device bytes)",
        output.display(),
        m.name,
        n.tensors.len(),
        n.subgraphs.len(),
        n.requested_device_bytes()
    )
    .map_err(CliError::output)?;
    Ok(0)
}

/// Bytes of one (tier, usage, location) row by how they are known.
#[derive(Default, Clone, Copy)]
struct Row {
    exact: u64,
    estimated: u64,
    declared: u64,
    count: u64,
}

impl Row {
    fn add(&mut self, basis: Basis, size: u64, known: u64) {
        self.count += 1;
        // What the NEFF itself holds is exact; the rest is the basis's.
        let k = if basis == Basis::Exact {
            size
        } else {
            known.min(size)
        };
        self.exact += k;
        match basis {
            Basis::Exact => {}
            Basis::Declared => self.declared += size - k,
            Basis::Estimated => self.estimated += size - k,
        }
    }
    fn total(&self) -> u64 {
        self.exact + self.estimated + self.declared
    }
}

/// The footprint per (tier, usage, location): MODEL (the subgraphs' allocators), GLOBAL (the
/// core's scratchpad pages and shared ext-ISA library), USER (the IO tensors the application
/// allocates).
fn footprint(n: &NeffModel) -> BTreeMap<(&'static str, u32, &'static str), Row> {
    let mut rows: BTreeMap<(&'static str, u32, &'static str), Row> = BTreeMap::new();
    for b in n.bookings.iter().flatten() {
        let loc = if b.host { "host" } else { "device" };
        rows.entry(("MODEL", b.usage as u32, loc))
            .or_default()
            .add(b.basis, b.size, b.known_bytes);
    }
    if n.scratchpad_bytes > 0 {
        let usage = U::DMA_MEM_USAGE_TYPE_SCRATCHPAD as u32;
        rows.entry(("GLOBAL", usage, "device")).or_default().add(
            Basis::Estimated,
            n.scratchpad_bytes,
            0,
        );
    }
    if let Some(g) = n.gpsimd {
        // One library is the shared ext-ISA copy (once per core); more are staged per model.
        let tier = if g.count == 1 { "GLOBAL" } else { "MODEL" };
        let total = g.bytes.saturating_mul(u64::from(g.count));
        rows.entry((tier, U::DMA_MEM_USAGE_TYPE_UCODE_LIB as u32, "device"))
            .or_default()
            .add(g.basis, total, g.neff_lib_bytes);
    }
    for t in &n.tensors {
        rows.entry(("USER", U::DMA_MEM_USAGE_TYPE_TENSOR as u32, "device"))
            .or_default()
            .add(Basis::Exact, t.size, t.size);
    }
    rows
}

fn usage_name(u: u32) -> &'static str {
    U::from_raw(u).map_or("?", |u| u.short_name())
}

fn shape(s: &[u32]) -> String {
    format!(
        "[{}]",
        s.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    )
}

fn inspect(
    file: &PathBuf,
    as_json: bool,
    verify: bool,
    out: &mut dyn Write,
) -> Result<i32, CliError> {
    let src = nrt_neff::NeffFile::open(file)
        .map_err(|e| CliError::input(format!("reading {}: {e}", file.display())))?;
    let mut opts = model_file::read_options_from_env();
    opts.verify |= verify;
    let n = nrt_neff::read_source(&src, &opts).map_err(|e| {
        CliError::input(format!(
            "{}: NEFF refused ({:?}, {}): {e}",
            file.display(),
            e.status(),
            e.status() as u32
        ))
    })?;
    let rows = footprint(&n);
    let text = if as_json {
        let mut s =
            serde_json::to_string_pretty(&inspect_json(&n, &rows, src.len())).unwrap_or_default();
        s.push('\n');
        s
    } else {
        inspect_text(&n, &rows, file, src.len())
    };
    out.write_all(text.as_bytes()).map_err(CliError::output)?;
    Ok(0)
}

fn inspect_text(
    n: &NeffModel,
    rows: &BTreeMap<(&'static str, u32, &'static str), Row>,
    file: &std::path::Path,
    len: u64,
) -> String {
    use std::fmt::Write as _;
    let h = &n.header;
    let mut s = String::new();
    let _ = writeln!(s, "NEFF {} ({len} bytes)", file.display());
    let _ = writeln!(
        s,
        "header: pkg {} {}, header_size {:#x}, data_size {:#x}, version {}.{}, features {:#x}",
        h.pkg_version,
        if h.pkg_version == 1 {
            "(tar + SHA-256)"
        } else {
            "(gzip(tar) + MD5)"
        },
        h.header_size,
        h.data_size,
        h.major,
        h.minor,
        h.feature_bits
    );
    let _ = writeln!(
        s,
        "        name {:?}, uuid {}, build {:?}, requested cores {}, vnc_size {}",
        h.name,
        h.uuid_string(),
        h.build_version,
        h.requested_tpb_count,
        h.vnc_size
    );
    let _ = writeln!(s, "gates passed:");
    for g in &n.gates {
        let _ = writeln!(s, "  {:<17} {}", g.name, g.detail);
    }
    let a = &n.archive;
    let _ = writeln!(
        s,
        "archive: {}, {} bytes inflated, {} members, {} directories skipped, {} pass{}{}",
        if a.gzip { "gzip(tar)" } else { "tar" },
        a.inflated_bytes,
        a.members,
        a.directories,
        a.passes,
        if a.passes == 1 { "" } else { "es" },
        if a.skipped.is_empty() {
            String::new()
        } else {
            format!(", dropped {}", a.skipped.join(", "))
        }
    );
    let _ = writeln!(
        s,
        "kelf: {} version {} target {:?}{}",
        n.kelf.member,
        n.kelf.version,
        n.kelf.target,
        match n.kelf.arch {
            None => " (the live device's arch)".to_string(),
            Some(a) => format!(" (arch {a})"),
        }
    );
    let _ = writeln!(s, "tensors:");
    let _ = writeln!(
        s,
        "  {:<7} {:<24} {:<9} {:<16} {:>12}",
        "usage", "name", "dtype", "shape", "bytes"
    );
    for t in &n.tensors {
        let _ = writeln!(
            s,
            "  {:<7} {:<24} {:<9} {:<16} {:>12}",
            if t.usage == nrt_neff::TensorUsage::Input {
                "input"
            } else {
                "output"
            },
            t.name,
            t.dtype.name(),
            shape(&t.shape),
            t.size
        );
    }
    let _ = writeln!(s, "subgraphs:");
    for (sg, b) in n.subgraphs.iter().zip(&n.bookings) {
        let engines: Vec<String> = sg
            .engines
            .iter()
            .map(|e| match &e.bin {
                Some(_) => format!("{} {} B", e.engine, e.bin_bytes),
                None => format!("{} -", e.engine),
            })
            .collect();
        let _ = writeln!(
            s,
            "  {} ({}): {} vars, {} DMA queues, {} GPSIMD libs, engines: {}{}",
            sg.name,
            sg.def_member,
            sg.vars.len(),
            sg.queues.len(),
            sg.ucode_libs.len(),
            engines.join(", "),
            match (sg.has_reservation_key, sg.reservations.first()) {
                (false, _) => ", no SBUF reservation key".to_string(),
                (true, None) => ", SBUF reservation []".to_string(),
                (true, Some(r)) => format!(
                    ", SBUF evtaccel partitions {}+{} offset {:#x} size {}",
                    r.start_partition, r.num_partitions, r.offset, r.size
                ),
            }
        );
        let _ = writeln!(
            s,
            "    {:<22} {:>12} {:<9} {:<24} source",
            "usage", "bytes", "basis", "hint"
        );
        for a in b {
            let _ = writeln!(
                s,
                "    {:<22} {:>12} {:<9} {:<24} {}",
                format!(
                    "{}{}",
                    a.usage.short_name(),
                    if a.host { " (host)" } else { "" }
                ),
                a.size,
                a.basis.name(),
                a.hint,
                a.source
            );
        }
    }
    let _ = writeln!(
        s,
        "footprint per usage and tier (bytes, before page rounding):"
    );
    let _ = writeln!(
        s,
        "  {:<6} {:<22} {:<6} {:>12} {:>12} {:>12} {:>12}",
        "tier", "usage", "where", "total", "exact", "estimated", "declared"
    );
    let mut total = Row::default();
    for ((tier, usage, loc), r) in rows {
        let _ = writeln!(
            s,
            "  {:<6} {:<22} {:<6} {:>12} {:>12} {:>12} {:>12}",
            tier,
            usage_name(*usage),
            loc,
            r.total(),
            r.exact,
            r.estimated,
            r.declared
        );
        if *tier != "USER" {
            total.exact += r.exact;
            total.estimated += r.estimated;
            total.declared += r.declared;
        }
    }
    let _ = writeln!(
        s,
        "  load total: {} bytes ({} exact, {} estimated, {} declared); USER tensors are the \
         application's; UCODE_LIB is staged on trn1/inf2 only; estimates follow docs/NEFF.md",
        total.total(),
        total.exact,
        total.estimated,
        total.declared
    );
    s
}

fn inspect_json(
    n: &NeffModel,
    rows: &BTreeMap<(&'static str, u32, &'static str), Row>,
    len: u64,
) -> Value {
    let h = &n.header;
    json!({
        "file_bytes": len,
        "header": {
            "pkg_version": h.pkg_version, "header_size": h.header_size, "data_size": h.data_size,
            "version_major": h.major, "version_minor": h.minor, "build_version": h.build_version,
            "name": h.name, "uuid": h.uuid_string(), "requested_tpb_count": h.requested_tpb_count,
            "feature_bits": h.feature_bits, "vnc_size": h.vnc_size,
        },
        "gates": n.gates.iter().map(|g| json!({ "gate": g.name, "detail": g.detail })).collect::<Vec<_>>(),
        "archive": {
            "gzip": n.archive.gzip, "inflated_bytes": n.archive.inflated_bytes,
            "members": n.archive.members, "directories": n.archive.directories,
            "skipped": n.archive.skipped, "passes": n.archive.passes,
        },
        "kelf": { "member": n.kelf.member, "version": n.kelf.version, "target": n.kelf.target, "arch": n.kelf.arch },
        "tensors": n.tensors.iter().map(|t| json!({
            "name": t.name,
            "usage": if t.usage == nrt_neff::TensorUsage::Input { "input" } else { "output" },
            "dtype": t.dtype.name(), "nrt_dtype": t.dtype.code(), "shape": t.shape, "size": t.size,
        })).collect::<Vec<_>>(),
        "subgraphs": n.subgraphs.iter().zip(&n.bookings).map(|(sg, b)| json!({
            "name": sg.name, "definition": sg.def_member, "vars": sg.vars.len(),
            "dma_queues": sg.queues.len(), "gpsimd_libs": sg.ucode_libs.len(),
            "engines": sg.engines.iter().map(|e| json!({ "engine": e.engine, "bin": e.bin, "bin_bytes": e.bin_bytes })).collect::<Vec<_>>(),
            "sbuf_reservation": sg.reservations.iter().map(|r| json!({
                "type": "evtaccel", "start_partition": r.start_partition, "partitions": r.num_partitions,
                "offset": r.offset, "size": r.size })).collect::<Vec<_>>(),
            "allocations": b.iter().map(|a| json!({
                "usage": a.usage.short_name(), "usage_value": a.usage as u32,
                "location": if a.host { "host" } else { "device" },
                "size": a.size, "align": a.align, "hint": a.hint, "basis": a.basis.name(),
                "known_bytes": a.known_bytes, "source": a.source,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "scratchpad_bytes": n.scratchpad_bytes,
        "gpsimd": n.gpsimd.map(|g| json!({ "count": g.count, "bytes_each": g.bytes,
            "neff_libs": g.neff_libs, "neff_lib_bytes": g.neff_lib_bytes, "basis": g.basis.name() })),
        "footprint": rows.iter().map(|((tier, usage, loc), r)| json!({
            "tier": tier, "usage": usage_name(*usage), "usage_value": usage, "location": loc,
            "bytes": r.total(), "exact": r.exact, "estimated": r.estimated, "declared": r.declared,
            "allocations": r.count,
        })).collect::<Vec<_>>(),
    })
}
