//! `nrt/nrtx.h`: what the public API lacks and users ask for (public API §6) — the per-usage
//! ledger of a logical core (spec §3.4), peaks and their reset (CUDA-style), the largest free
//! block of each HBM (fragmentation), a model's footprint, the OOM report as text, and the last
//! error message. Named `nrtx_` so they can never collide with a future `nrt_` function; the
//! structs follow `nrt_get_vnc_memory_stats`'s size-in/size-out protocol and only grow at
//! their end.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, CString};
use std::sync::LazyLock;

use nrt_core::abi::{dma_mem_usage_type_t, NRT_STATUS as CoreStatus};
use nrt_core::{Error, LogicalCore};

use crate::global::{self, entry, lock, put_sized, Fail, Res};
use crate::status::NRT_STATUS;
use crate::types::nrt_model_t;

/// Entries of a per-usage array: one per `dma_mem_usage_type_t` (0..=21) plus the total.
pub const NRTX_USAGE_TYPE_COUNT: usize = 23;
/// Index of the total in a per-usage array.
pub const NRTX_USAGE_TOTAL: usize = 22;

/// An index of a per-usage array: libnrt 2.31's `dma_mem_usage_type_t` value (spec §3.3,
/// facts v2), so C callers need not include the layout header.
pub type nrtx_usage_type_t = u32;
/// `DMA_MEM_USAGE_TYPE_GENERIC`.
pub const NRTX_USAGE_GENERIC: nrtx_usage_type_t = 0;
/// `DMA_MEM_USAGE_TYPE_INSTR_PE`.
pub const NRTX_USAGE_INSTR_PE: nrtx_usage_type_t = 1;
/// `DMA_MEM_USAGE_TYPE_INSTR_ACT`.
pub const NRTX_USAGE_INSTR_ACT: nrtx_usage_type_t = 2;
/// `DMA_MEM_USAGE_TYPE_INSTR_POOL`.
pub const NRTX_USAGE_INSTR_POOL: nrtx_usage_type_t = 3;
/// `DMA_MEM_USAGE_TYPE_IO`.
pub const NRTX_USAGE_IO: nrtx_usage_type_t = 4;
/// `DMA_MEM_USAGE_TYPE_DRAM_SPILL`.
pub const NRTX_USAGE_DRAM_SPILL: nrtx_usage_type_t = 5;
/// `DMA_MEM_USAGE_TYPE_WEIGHT`.
pub const NRTX_USAGE_WEIGHT: nrtx_usage_type_t = 6;
/// `DMA_MEM_USAGE_TYPE_NOTIFICATION`.
pub const NRTX_USAGE_NOTIFICATION: nrtx_usage_type_t = 7;
/// `DMA_MEM_USAGE_TYPE_ACT_TABLE`.
pub const NRTX_USAGE_ACT_TABLE: nrtx_usage_type_t = 8;
/// `DMA_MEM_USAGE_TYPE_INSTR_DVE`.
pub const NRTX_USAGE_INSTR_DVE: nrtx_usage_type_t = 9;
/// `DMA_MEM_USAGE_TYPE_INSTR_SP`.
pub const NRTX_USAGE_INSTR_SP: nrtx_usage_type_t = 10;
/// `DMA_MEM_USAGE_TYPE_SCRATCHPAD`.
pub const NRTX_USAGE_SCRATCHPAD: nrtx_usage_type_t = 11;
/// `DMA_MEM_USAGE_TYPE_TENSOR`.
pub const NRTX_USAGE_TENSOR: nrtx_usage_type_t = 12;
/// `DMA_MEM_USAGE_TYPE_UCODE_LIB`.
pub const NRTX_USAGE_UCODE_LIB: nrtx_usage_type_t = 13;
/// `DMA_MEM_USAGE_TYPE_POOL_STDIO`.
pub const NRTX_USAGE_POOL_STDIO: nrtx_usage_type_t = 14;
/// `DMA_MEM_USAGE_TYPE_CC`.
pub const NRTX_USAGE_CC: nrtx_usage_type_t = 15;
/// `DMA_MEM_USAGE_TYPE_SCRATCHPAD_NOT_SHARED`.
pub const NRTX_USAGE_SCRATCHPAD_NOT_SHARED: nrtx_usage_type_t = 16;
/// `DMA_MEM_USAGE_TYPE_XT_CC`.
pub const NRTX_USAGE_XT_CC: nrtx_usage_type_t = 17;
/// `DMA_MEM_USAGE_TYPE_DMA_RING`.
pub const NRTX_USAGE_DMA_RING: nrtx_usage_type_t = 18;
/// `DMA_MEM_USAGE_TYPE_DMA_RING_SPILL`.
pub const NRTX_USAGE_DMA_RING_SPILL: nrtx_usage_type_t = 19;
/// `DMA_MEM_USAGE_TYPE_DMA_RING_IO`.
pub const NRTX_USAGE_DMA_RING_IO: nrtx_usage_type_t = 20;
/// `DMA_MEM_USAGE_TYPE_DMA_RING_COLLECTIVES`.
pub const NRTX_USAGE_DMA_RING_COLLECTIVES: nrtx_usage_type_t = 21;

// The C names are the core's enum, value for value.
const _: () = {
    assert!(NRTX_USAGE_GENERIC == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_GENERIC as u32);
    assert!(NRTX_USAGE_INSTR_PE == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_INSTR_PE as u32);
    assert!(NRTX_USAGE_INSTR_ACT == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_INSTR_ACT as u32);
    assert!(NRTX_USAGE_INSTR_POOL == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_INSTR_POOL as u32);
    assert!(NRTX_USAGE_IO == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_IO as u32);
    assert!(NRTX_USAGE_DRAM_SPILL == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_DRAM_SPILL as u32);
    assert!(NRTX_USAGE_WEIGHT == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_WEIGHT as u32);
    assert!(
        NRTX_USAGE_NOTIFICATION == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_NOTIFICATION as u32
    );
    assert!(NRTX_USAGE_ACT_TABLE == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_ACT_TABLE as u32);
    assert!(NRTX_USAGE_INSTR_DVE == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_INSTR_DVE as u32);
    assert!(NRTX_USAGE_INSTR_SP == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_INSTR_SP as u32);
    assert!(NRTX_USAGE_SCRATCHPAD == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_SCRATCHPAD as u32);
    assert!(NRTX_USAGE_TENSOR == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_TENSOR as u32);
    assert!(NRTX_USAGE_UCODE_LIB == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_UCODE_LIB as u32);
    assert!(NRTX_USAGE_POOL_STDIO == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_POOL_STDIO as u32);
    assert!(NRTX_USAGE_CC == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_CC as u32);
    assert!(
        NRTX_USAGE_SCRATCHPAD_NOT_SHARED
            == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_SCRATCHPAD_NOT_SHARED as u32
    );
    assert!(NRTX_USAGE_XT_CC == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_XT_CC as u32);
    assert!(NRTX_USAGE_DMA_RING == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_DMA_RING as u32);
    assert!(
        NRTX_USAGE_DMA_RING_SPILL == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_DMA_RING_SPILL as u32
    );
    assert!(NRTX_USAGE_DMA_RING_IO == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_DMA_RING_IO as u32);
    assert!(
        NRTX_USAGE_DMA_RING_COLLECTIVES
            == dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_DMA_RING_COLLECTIVES as u32
    );
};

/// Memory of one logical core with peaks (`nrtx_get_vnc_memory_stats`); starts with the same
/// two fields as `nrt_vnc_memory_stats_t`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, zerocopy::IntoBytes, zerocopy::Immutable)]
pub struct nrtx_vnc_memory_stats_t {
    /// Device bytes in use (as `nrt_vnc_memory_stats_t.bytes_used`).
    pub bytes_used: u64,
    /// Size of the HBM the logical core allocates from (as `nrt_vnc_memory_stats_t.bytes_limit`).
    pub bytes_limit: u64,
    /// High-water mark of `bytes_used` since `nrt_init` or the last
    /// `nrtx_reset_vnc_memory_peak`.
    pub bytes_peak: u64,
    /// Host DMA bytes booked to the logical core.
    pub host_bytes_used: u64,
    /// High-water mark of `host_bytes_used`.
    pub host_bytes_peak: u64,
}

/// Device-wide memory of one device (`nrtx_get_device_memory_stats`): what
/// every process holds and what this one holds. On a shared simulated device
/// (`NRT_DMEM_DEVICE=sim:trn2@name`) the figures cover every process using it; elsewhere
/// only this process is known (`processes` = 1, `shared` = 0).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, zerocopy::IntoBytes, zerocopy::Immutable)]
pub struct nrtx_device_memory_stats_t {
    /// HBM bytes the device's pools hold, all processes.
    pub device_bytes_used: u64,
    /// HBM bytes the device has (all channels, firmware carve-outs included).
    pub device_bytes_total: u64,
    /// HBM bytes this process holds on the device.
    pub process_device_bytes_used: u64,
    /// Host DMA bytes of the device's pool, all processes.
    pub host_bytes_used: u64,
    /// Processes attached to the device.
    pub processes: u32,
    /// 1 on a shared simulated device, else 0.
    pub shared: u32,
}

/// The usage ledger of one logical core (`nrtx_get_vnc_usage`): bytes per
/// `dma_mem_usage_type_t`, index `NRTX_USAGE_TOTAL` holding the total. Names of the indices:
/// `nrtx_get_usage_type_name`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, zerocopy::IntoBytes, zerocopy::Immutable)]
pub struct nrtx_vnc_usage_t {
    /// Device bytes per usage type.
    pub device: [u64; NRTX_USAGE_TYPE_COUNT],
    /// Device high-water mark per usage type.
    pub device_peak: [u64; NRTX_USAGE_TYPE_COUNT],
    /// Host DMA bytes per usage type.
    pub host: [u64; NRTX_USAGE_TYPE_COUNT],
    /// Host DMA high-water mark per usage type.
    pub host_peak: [u64; NRTX_USAGE_TYPE_COUNT],
}

/// One HBM of one device as the driver sees it (`nrtx_get_hbm_stats`): free bytes, the
/// largest free block — the biggest allocation of more than 512 KiB that can still succeed
/// there — and the small-object region's own figures (public ABI §3: requests of at most
/// 512 KiB try that 1 GiB region first, then the main pool). A request of `n` page-rounded
/// bytes succeeds now iff `n <= largest_free_block`, or `n <= 512 KiB` and
/// `n <= small_object_largest_free_block`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, zerocopy::IntoBytes, zerocopy::Immutable)]
pub struct nrtx_hbm_stats_t {
    /// Device index.
    pub device: u32,
    /// HBM index on the device.
    pub hbm_index: u32,
    /// Devices attached (to iterate: device < num_devices).
    pub num_devices: u32,
    /// HBMs on this device (to iterate: hbm_index < num_hbm).
    pub num_hbm: u32,
    /// Bytes the driver manages on this HBM.
    pub capacity: u64,
    /// Bytes free.
    pub free: u64,
    /// The largest request of more than 512 KiB that would succeed now (page-rounded). Under
    /// the driver's placement (genalloc, the simulated device's default) the driver falls
    /// back to the small-object region when the main pool cannot hold such a request, so it
    /// is the larger of the two regions' largest free blocks; in the simulator's TLSF mode it
    /// is the main pool's alone (docs/PLACEMENT.md, rule 4). Exact on the simulated device. On `/dev/neuron` it is an upper bound: the driver's
    /// chunk dump gives no channel base and does not tell the small-object region apart, so
    /// the free space past the last chunk, region included, counts as one block.
    pub largest_free_block: u64,
    /// Live allocations.
    pub allocations: u64,
    /// Bytes free in the small-object region (part of `free`; 0 when the driver does not
    /// tell the region apart).
    pub small_object_free: u64,
    /// The largest free block of the small-object region, the first choice of requests of at
    /// most 512 KiB (and, under genalloc, the fallback of larger ones).
    pub small_object_largest_free_block: u64,
}

/// The device memory a loaded model holds (`nrtx_get_model_memory`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, zerocopy::IntoBytes, zerocopy::Immutable)]
pub struct nrtx_model_memory_t {
    /// Logical core it is loaded on.
    pub vnc: u32,
    /// Subgraphs (one MODEL heap each).
    pub subgraphs: u32,
    /// Allocations in its heaps.
    pub allocations: u64,
    /// Bytes in its heaps (device and host).
    pub bytes: u64,
    /// Device bytes per usage type (index `NRTX_USAGE_TOTAL` = total).
    pub device_by_usage: [u64; NRTX_USAGE_TYPE_COUNT],
    /// Shared scratchpad pages it holds.
    pub scratchpad_pages: u32,
    /// 1 when it uses its core's shared ext-isa library copy.
    pub shared_ext_isa: u32,
}

/// Memory of logical core `vnc` with peaks. Size-in/size-out as `nrt_get_vnc_memory_stats`.
///
/// # Safety
/// `stats` is NULL or valid for writes of `stats_size_in` bytes; `stats_size_out` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrtx_get_vnc_memory_stats(
    vnc: u32,
    stats: *mut nrtx_vnc_memory_stats_t,
    stats_size_in: usize,
    stats_size_out: *mut usize,
) -> NRT_STATUS {
    entry("nrtx_get_vnc_memory_stats", || {
        global::with_rt(|r| {
            let n = r.rt.nrt();
            let s = n.ledger().memory_stats(LogicalCore::from_c(vnc))?;
            let u = n.ledger().logical_core_usage(LogicalCore::from_c(vnc))?;
            let v = nrtx_vnc_memory_stats_t {
                bytes_used: s.bytes_used,
                bytes_limit: s.bytes_limit,
                bytes_peak: s.bytes_peak,
                host_bytes_used: u.host[NRTX_USAGE_TOTAL],
                host_bytes_peak: u.host_peak[NRTX_USAGE_TOTAL],
            };
            // SAFETY: caller contract.
            unsafe {
                put_sized(
                    &v,
                    stats,
                    stats_size_in,
                    stats_size_out,
                    ["stats", "stats_size_in"],
                )
            }
        })
    })
}

/// Resets every peak of logical core `vnc` (device and host, per usage type and total) to the
/// current value.
#[no_mangle]
pub extern "C" fn nrtx_reset_vnc_memory_peak(vnc: u32) -> NRT_STATUS {
    entry("nrtx_reset_vnc_memory_peak", || {
        global::with_rt(|r| Ok(r.rt.nrt().ledger().reset_peak(LogicalCore::from_c(vnc))?))
    })
}

/// The usage ledger of logical core `vnc`: current and peak bytes per usage type, device and
/// host. Size-in/size-out as `nrt_get_vnc_memory_stats`.
///
/// # Safety
/// `usage` is NULL or valid for writes of `usage_size_in` bytes; `usage_size_out` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrtx_get_vnc_usage(
    vnc: u32,
    usage: *mut nrtx_vnc_usage_t,
    usage_size_in: usize,
    usage_size_out: *mut usize,
) -> NRT_STATUS {
    entry("nrtx_get_vnc_usage", || {
        global::with_rt(|r| {
            let u =
                r.rt.nrt()
                    .ledger()
                    .logical_core_usage(LogicalCore::from_c(vnc))?;
            let v = nrtx_vnc_usage_t {
                device: u.device,
                device_peak: u.device_peak,
                host: u.host,
                host_peak: u.host_peak,
            };
            // SAFETY: caller contract.
            unsafe {
                put_sized(
                    &v,
                    usage,
                    usage_size_in,
                    usage_size_out,
                    ["usage", "usage_size_in"],
                )
            }
        })
    })
}

static USAGE_NAMES: LazyLock<Vec<CString>> = LazyLock::new(|| {
    (0..NRTX_USAGE_TYPE_COUNT as u32)
        .map(|u| {
            let name = match dma_mem_usage_type_t::from_raw(u) {
                Some(dma_mem_usage_type_t::DMA_MEM_USAGE_TYPE_MAX) | None => "TOTAL",
                Some(t) => t.short_name(),
            };
            CString::new(name).unwrap_or_default()
        })
        .collect()
});

/// The name of usage index `usage` ("GENERIC", "WEIGHT", "TENSOR", …, "TOTAL" for
/// `NRTX_USAGE_TOTAL`); NULL past the last index. The string is static.
#[no_mangle]
pub extern "C" fn nrtx_get_usage_type_name(usage: u32) -> *const c_char {
    global::entry_value("nrtx_get_usage_type_name", std::ptr::null(), || {
        Ok(USAGE_NAMES
            .get(usage as usize)
            .map_or(std::ptr::null(), |s| s.as_ptr()))
    })
}

/// Device-wide memory of `device` (an attached device index): every process's bytes and this
/// process's. Size-in/size-out as `nrt_get_vnc_memory_stats`.
///
/// # Safety
/// `stats` is NULL or valid for writes of `stats_size_in` bytes; `stats_size_out` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrtx_get_device_memory_stats(
    device: u32,
    stats: *mut nrtx_device_memory_stats_t,
    stats_size_in: usize,
    stats_size_out: *mut usize,
) -> NRT_STATUS {
    entry("nrtx_get_device_memory_stats", || {
        global::with_rt(|r| {
            let n = r.rt.nrt();
            if device >= n.num_devices() {
                return Err(Error::DeviceOutOfRange(device).into());
            }
            let g = n.geom(device);
            let drv = r.rt.driver();
            let mut used = 0;
            for h in 0..g.channels {
                let p = drv.pool_stats(device, false, h).map_err(Error::Driver)?;
                used += p.capacity - p.free;
            }
            let host = drv
                .pool_stats(device, true, 0)
                .map_or(0, |p| p.capacity - p.free);
            let total = u64::from(g.channels) * g.channel_size;
            let v = match r.rt.shared() {
                Some(s) => {
                    let snap = s.snapshot();
                    let mine = snap
                        .procs
                        .iter()
                        .find(|p| p.slot == s.slot())
                        .map_or(0, |p| p.device_bytes(device as usize));
                    nrtx_device_memory_stats_t {
                        device_bytes_used: used,
                        device_bytes_total: total,
                        process_device_bytes_used: mine,
                        host_bytes_used: host,
                        processes: snap.procs.len() as u32,
                        shared: 1,
                    }
                }
                None => nrtx_device_memory_stats_t {
                    device_bytes_used: used,
                    device_bytes_total: total,
                    process_device_bytes_used: used,
                    host_bytes_used: host,
                    processes: 1,
                    shared: 0,
                },
            };
            // SAFETY: caller contract.
            unsafe {
                put_sized(
                    &v,
                    stats,
                    stats_size_in,
                    stats_size_out,
                    ["stats", "stats_size_in"],
                )
            }
        })
    })
}

fn hbm_stats(r: &global::Runtime, device: u32, hbm: u32) -> Res<nrtx_hbm_stats_t> {
    let n = r.rt.nrt();
    if device >= n.num_devices() {
        return Err(Error::DeviceOutOfRange(device).into());
    }
    let g = n.geom(device);
    if hbm >= g.channels {
        return Err(Error::HbmOutOfRange {
            hbm,
            channels: g.channels,
        }
        .into());
    }
    let s = n
        .driver()
        .pool_stats(device, false, hbm)
        .map_err(Error::Driver)?;
    Ok(nrtx_hbm_stats_t {
        device,
        hbm_index: hbm,
        num_devices: n.num_devices(),
        num_hbm: g.channels,
        capacity: s.capacity,
        free: s.free,
        largest_free_block: s.largest_free,
        allocations: s.allocations,
        small_object_free: s.small_object_free,
        small_object_largest_free_block: s.small_object_largest_free,
    })
}

/// Free bytes and the largest free block of HBM `hbm_index` of device `device`. Start at
/// (0, 0) and iterate with `num_devices` / `num_hbm`. Size-in/size-out as
/// `nrt_get_vnc_memory_stats`.
///
/// # Safety
/// `stats` is NULL or valid for writes of `stats_size_in` bytes; `stats_size_out` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrtx_get_hbm_stats(
    device: u32,
    hbm_index: u32,
    stats: *mut nrtx_hbm_stats_t,
    stats_size_in: usize,
    stats_size_out: *mut usize,
) -> NRT_STATUS {
    entry("nrtx_get_hbm_stats", || {
        global::with_rt(|r| {
            let v = hbm_stats(r, device, hbm_index)?;
            // SAFETY: caller contract.
            unsafe {
                put_sized(
                    &v,
                    stats,
                    stats_size_in,
                    stats_size_out,
                    ["stats", "stats_size_in"],
                )
            }
        })
    })
}

/// As `nrtx_get_hbm_stats`, for the HBM that holds logical core `vnc`'s tensors.
///
/// # Safety
/// `stats` is NULL or valid for writes of `stats_size_in` bytes; `stats_size_out` is NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nrtx_get_vnc_hbm_stats(
    vnc: u32,
    stats: *mut nrtx_hbm_stats_t,
    stats_size_in: usize,
    stats_size_out: *mut usize,
) -> NRT_STATUS {
    entry("nrtx_get_vnc_hbm_stats", || {
        global::with_rt(|r| {
            let nrt = r.rt.nrt();
            let v = nrt.logical_core_entry(LogicalCore::from_c(vnc))?;
            let s = hbm_stats(
                r,
                v.tpbs[0].device_id,
                nrt.logical_core_hbm(LogicalCore::from_c(vnc))?,
            )?;
            // SAFETY: caller contract.
            unsafe {
                put_sized(
                    &s,
                    stats,
                    stats_size_in,
                    stats_size_out,
                    ["stats", "stats_size_in"],
                )
            }
        })
    })
}

/// The device memory `model` holds. Size-in/size-out as `nrt_get_vnc_memory_stats`.
///
/// # Safety
/// `mem` is NULL or valid for writes of `mem_size_in` bytes; `mem_size_out` is NULL or valid
/// for a write; `model` is any pointer value (looked up, never dereferenced).
#[no_mangle]
pub unsafe extern "C" fn nrtx_get_model_memory(
    model: *const nrt_model_t,
    mem: *mut nrtx_model_memory_t,
    mem_size_in: usize,
    mem_size_out: *mut usize,
) -> NRT_STATUS {
    entry("nrtx_get_model_memory", || {
        global::with_rt(|r| {
            let i = r.rt.nrt().models().info(r.model(model)?)?;
            let v = nrtx_model_memory_t {
                // A model's core is one the runtime found it on: always an index.
                vnc: i.vnc.index().unwrap_or(u32::MAX),
                subgraphs: i.subgraphs,
                allocations: i.allocations,
                bytes: i.bytes,
                device_by_usage: i.by_usage,
                scratchpad_pages: i.scratchpad_pages,
                shared_ext_isa: i.shared_ulib as u32,
            };
            // SAFETY: caller contract.
            unsafe { put_sized(&v, mem, mem_size_in, mem_size_out, ["mem", "mem_size_in"]) }
        })
    })
}

/// The report: the OOM table the core captured at the moment of the last device OOM (before
/// anything was rolled back); without an OOM since `nrt_init`, device 0's table now.
pub(crate) fn oom_report_text(r: &global::Runtime, failed: Option<Error>) -> String {
    let n = r.rt.nrt();
    if let Some((_, table)) = failed.and_then(|e| nrt_host::runtime::oom_table(&n, &e)) {
        return table;
    }
    let mut s = String::from("no device out-of-memory error since nrt_init\n");
    let _ = n.ledger().dump(&mut s, 0, None, 8);
    s
}

/// The out-of-memory report as text, captured when the last device out-of-memory of this
/// runtime happened: "Failed to allocate … (usage: …) on ND d:NC c" followed by the memory of
/// that device at that moment — per NeuronCore and category, each HBM's free bytes and largest
/// free block, and the largest live allocations. Without an OOM since `nrt_init`, the same
/// table for device 0 now.
///
/// Writes at most `buf_size_in` bytes (NUL-terminated) to `buf` and the full length including
/// the NUL to `*buf_size_out`. NRT_RESOURCE when the text was truncated; pass `buf` NULL and
/// `buf_size_in` 0 to ask for the length only.
///
/// # Safety
/// `buf` is NULL or valid for writes of `buf_size_in` bytes; `buf_size_out` is NULL or valid
/// for a write.
#[no_mangle]
pub unsafe extern "C" fn nrtx_get_oom_report(
    buf: *mut c_char,
    buf_size_in: usize,
    buf_size_out: *mut usize,
) -> NRT_STATUS {
    entry("nrtx_get_oom_report", || {
        global::with_rt(|r| {
            let text = lock(&r.oom_report)
                .clone()
                .unwrap_or_else(|| oom_report_text(r, None));
            // SAFETY: caller contract.
            unsafe { put_text(&text, buf, buf_size_in, buf_size_out) }
        })
    })
}

/// Copies `text` as a C string into a caller buffer (size-in/size-out); NRT_RESOURCE when
/// truncated.
///
/// # Safety
/// `buf` is NULL or valid for writes of `size_in` bytes; `size_out` is NULL or writable.
unsafe fn put_text(text: &str, buf: *mut c_char, size_in: usize, size_out: *mut usize) -> Res {
    let need = text.len() + 1;
    if !size_out.is_null() {
        // SAFETY: caller contract.
        unsafe { size_out.write(need) };
    }
    if buf.is_null() {
        return if size_in == 0 {
            Ok(())
        } else {
            Err(Fail::invalid("buf is NULL but buf_size_in is not 0"))
        };
    }
    if size_in == 0 {
        return Err(Fail::new(
            CoreStatus::NRT_RESOURCE,
            format_args!("buffer of 0 bytes; the text needs {need}"),
        ));
    }
    let n = text.len().min(size_in - 1);
    // SAFETY: `buf` holds `size_in > n` bytes; `text` is ours, so no overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
    if n < text.len() {
        return Err(Fail::new(
            CoreStatus::NRT_RESOURCE,
            format_args!("buffer of {size_in} bytes truncated the text; it needs {need}"),
        ));
    }
    Ok(())
}

/// The message of the last call on this thread that failed ("function: what went wrong", the
/// same text the log shows), or "" when none did. The string stays valid until the next
/// failing call on this thread or the thread's exit; copy it to keep it. Called while the
/// thread's storage is torn down (from an atexit handler, for example), it returns a static
/// text saying the message is not available. Never NULL.
#[no_mangle]
pub extern "C" fn nrtx_get_last_error_message() -> *const c_char {
    std::panic::catch_unwind(global::last_error_ptr)
        .unwrap_or(global::LAST_ERROR_UNAVAILABLE.as_ptr())
}
