//! The project's conventions for what the sources leave SILENT (neff-format §9, §10.2): every
//! size the runtime synthesises at load that no NEFF key states. They live here and nowhere
//! else; docs/NEFF.md gives each one's reason, and the footprint marks what they produce as
//! *estimated*.
//!
//! A NEFF written by `neff pack` carries the `nrt_dmem` extension in each `def.json`, which
//! states these allocations; the reader then books those (*declared*) instead of applying the
//! conventions below.

use nrt_core::abi::dma_mem_usage_type_t as U;

/// Bytes the runtime adds to each engine's raw `.bin` when it assembles the loaded image
/// (PREAMBLE + model switch + POSTAMBLE + FUNCTION blocks, §9): 64 KiB, the POSTAMBLE's stated
/// ceiling, standing for all of them. Every one of the five engine slots gets an image (all
/// five always exist, §8.4), an empty program included.
pub const INSTR_IMAGE_OVERHEAD: u64 = 64 << 10;

/// Alignment of an instruction image: `max(0x8000, seq_instr_block_size)` (§10.2) with the
/// block size unknown, so 0x8000.
pub const INSTR_IMAGE_ALIGN: u64 = 0x8000;

/// Descriptor ring bytes per DMA queue instance: 4096 descriptors of 16 bytes.
pub const DMA_RING_BYTES_PER_INSTANCE: u64 = 4096 * 16;

/// Alignment of a DMA ring (one 4 KiB page).
pub const DMA_RING_ALIGN: u64 = 4096;

/// Bytes per entry of a subgraph's pointer table (`pointer`/`list`/`remote` vars): one 64-bit
/// device address, as a `pointer` var's required size of 8 says (§8.2).
pub const POINTER_ENTRY_BYTES: u64 = 8;

/// IO-queue bytes per input/output var of a subgraph (one 4 KiB page each), booked as IO (4),
/// the usage §10.2 calls plausible for io queues.
pub const IO_QUEUE_BYTES_PER_TENSOR: u64 = 4096;

/// Bytes of the runtime's default ext-ISA GPSIMD library (from `libnrtucode_extisa.so`, not
/// the NEFF; §8.1), which joins every model's library set on SUNDA: 64 KiB.
pub const DEFAULT_EXTISA_LIB_BYTES: u64 = 64 << 10;

/// The assembled image an engine program of `bin_bytes` becomes.
pub const fn instr_image_bytes(bin_bytes: u64) -> u64 {
    bin_bytes.saturating_add(INSTR_IMAGE_OVERHEAD)
}

/// The usage of an engine's image: libnrt's table `{1, 2, 3, 9, 10}` indexed by engine (§10.2).
pub fn instr_usage(engine: &str) -> U {
    match engine {
        "pe" => U::DMA_MEM_USAGE_TYPE_INSTR_PE,
        "act" => U::DMA_MEM_USAGE_TYPE_INSTR_ACT,
        "pool" => U::DMA_MEM_USAGE_TYPE_INSTR_POOL,
        "dve" => U::DMA_MEM_USAGE_TYPE_INSTR_DVE,
        _ => U::DMA_MEM_USAGE_TYPE_INSTR_SP,
    }
}

/// The ring usage of a DMA queue type (which per type is SILENT, §10.2): the IO queues
/// (`in`/`out`) move the caller's tensors, so DMA_RING_IO (20); every other type is DMA_RING
/// (18).
pub fn ring_usage(queue_type: &str) -> U {
    match queue_type {
        "in" | "out" => U::DMA_MEM_USAGE_TYPE_DMA_RING_IO,
        _ => U::DMA_MEM_USAGE_TYPE_DMA_RING,
    }
}

/// Usage of the engine tables an engine JSON names (ACT `activation_function_sets`, DVE
/// `dve_tables`): ACT_TABLE (8) for both; for DVE's the usage is SILENT and ACT_TABLE is the
/// usage libnrt's name gives "engine configuration" tables.
pub const ENGINE_TABLE_USAGE: U = U::DMA_MEM_USAGE_TYPE_ACT_TABLE;

/// The scratchpad extent of a subgraph's `virtual` vars (how def.json yields the arena sizes is
/// SILENT, §10.2): the highest `backing_variable_off + size`; vars without an offset are packed
/// after it, each at its alignment.
pub fn virtual_extent(vars: impl IntoIterator<Item = (Option<u64>, u64, u64)>) -> u64 {
    let mut placed = Vec::new();
    let mut end = 0u64;
    for (off, size, align) in vars {
        match off {
            Some(o) => end = end.max(o.saturating_add(size)),
            None => placed.push((size, align)),
        }
    }
    for (size, align) in placed {
        let a = align.max(1);
        end = end
            .checked_next_multiple_of(a)
            .unwrap_or(u64::MAX)
            .saturating_add(size);
    }
    end
}
