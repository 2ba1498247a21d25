/*
 * nrt/nrtx.h -- GENERATED, do not edit.
 *
 * nrt-dmem extensions (nrtx_*): the per-usage memory ledger of a logical core, peaks and their
 * reset, free bytes and the largest free block of each HBM, a model's footprint, the
 * out-of-memory report as text, the last error message. Generated from ffi/src/nrtx.rs by
 * ffi/tests/headers.rs; regenerate with `cargo xtask headers`.
 */
#ifndef NRT_DMEM_NRT_NRTX_H
#define NRT_DMEM_NRT_NRTX_H

#include <stddef.h>
#include <stdint.h>
#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Entries of a per-usage array: one per `dma_mem_usage_type_t` (0..=21) plus the total. */
#define NRTX_USAGE_TYPE_COUNT 23

/** Index of the total in a per-usage array. */
#define NRTX_USAGE_TOTAL 22

/**
 * An index of a per-usage array: libnrt 2.31's `dma_mem_usage_type_t` value (spec section 3.3,
 * facts v2), so C callers need not include the layout header.
 */
typedef enum nrtx_usage_type {
    /** `DMA_MEM_USAGE_TYPE_GENERIC`. */
    NRTX_USAGE_GENERIC = 0,
    /** `DMA_MEM_USAGE_TYPE_INSTR_PE`. */
    NRTX_USAGE_INSTR_PE = 1,
    /** `DMA_MEM_USAGE_TYPE_INSTR_ACT`. */
    NRTX_USAGE_INSTR_ACT = 2,
    /** `DMA_MEM_USAGE_TYPE_INSTR_POOL`. */
    NRTX_USAGE_INSTR_POOL = 3,
    /** `DMA_MEM_USAGE_TYPE_IO`. */
    NRTX_USAGE_IO = 4,
    /** `DMA_MEM_USAGE_TYPE_DRAM_SPILL`. */
    NRTX_USAGE_DRAM_SPILL = 5,
    /** `DMA_MEM_USAGE_TYPE_WEIGHT`. */
    NRTX_USAGE_WEIGHT = 6,
    /** `DMA_MEM_USAGE_TYPE_NOTIFICATION`. */
    NRTX_USAGE_NOTIFICATION = 7,
    /** `DMA_MEM_USAGE_TYPE_ACT_TABLE`. */
    NRTX_USAGE_ACT_TABLE = 8,
    /** `DMA_MEM_USAGE_TYPE_INSTR_DVE`. */
    NRTX_USAGE_INSTR_DVE = 9,
    /** `DMA_MEM_USAGE_TYPE_INSTR_SP`. */
    NRTX_USAGE_INSTR_SP = 10,
    /** `DMA_MEM_USAGE_TYPE_SCRATCHPAD`. */
    NRTX_USAGE_SCRATCHPAD = 11,
    /** `DMA_MEM_USAGE_TYPE_TENSOR`. */
    NRTX_USAGE_TENSOR = 12,
    /** `DMA_MEM_USAGE_TYPE_UCODE_LIB`. */
    NRTX_USAGE_UCODE_LIB = 13,
    /** `DMA_MEM_USAGE_TYPE_POOL_STDIO`. */
    NRTX_USAGE_POOL_STDIO = 14,
    /** `DMA_MEM_USAGE_TYPE_CC`. */
    NRTX_USAGE_CC = 15,
    /** `DMA_MEM_USAGE_TYPE_SCRATCHPAD_NOT_SHARED`. */
    NRTX_USAGE_SCRATCHPAD_NOT_SHARED = 16,
    /** `DMA_MEM_USAGE_TYPE_XT_CC`. */
    NRTX_USAGE_XT_CC = 17,
    /** `DMA_MEM_USAGE_TYPE_DMA_RING`. */
    NRTX_USAGE_DMA_RING = 18,
    /** `DMA_MEM_USAGE_TYPE_DMA_RING_SPILL`. */
    NRTX_USAGE_DMA_RING_SPILL = 19,
    /** `DMA_MEM_USAGE_TYPE_DMA_RING_IO`. */
    NRTX_USAGE_DMA_RING_IO = 20,
    /** `DMA_MEM_USAGE_TYPE_DMA_RING_COLLECTIVES`. */
    NRTX_USAGE_DMA_RING_COLLECTIVES = 21,
} nrtx_usage_type_t;

/**
 * Memory of one logical core with peaks (`nrtx_get_vnc_memory_stats`); starts with the same
 * two fields as `nrt_vnc_memory_stats_t`.
 */
typedef struct nrtx_vnc_memory_stats {
    /** Device bytes in use (as `nrt_vnc_memory_stats_t.bytes_used`). */
    uint64_t bytes_used;
    /** Size of the HBM the logical core allocates from (as `nrt_vnc_memory_stats_t.bytes_limit`). */
    uint64_t bytes_limit;
    /**
     * High-water mark of `bytes_used` since `nrt_init` or the last
     * `nrtx_reset_vnc_memory_peak`.
     */
    uint64_t bytes_peak;
    /** Host DMA bytes booked to the logical core. */
    uint64_t host_bytes_used;
    /** High-water mark of `host_bytes_used`. */
    uint64_t host_bytes_peak;
} nrtx_vnc_memory_stats_t;

/**
 * Device-wide memory of one device (`nrtx_get_device_memory_stats`): what
 * every process holds and what this one holds. On a shared simulated device
 * (`NRT_DMEM_DEVICE=sim:trn2@name`) the figures cover every process using it; elsewhere
 * only this process is known (`processes` = 1, `shared` = 0).
 */
typedef struct nrtx_device_memory_stats {
    /** HBM bytes the device's pools hold, all processes. */
    uint64_t device_bytes_used;
    /** HBM bytes the device has (all channels, firmware carve-outs included). */
    uint64_t device_bytes_total;
    /** HBM bytes this process holds on the device. */
    uint64_t process_device_bytes_used;
    /** Host DMA bytes of the device's pool, all processes. */
    uint64_t host_bytes_used;
    /** Processes attached to the device. */
    uint32_t processes;
    /** 1 on a shared simulated device, else 0. */
    uint32_t shared;
} nrtx_device_memory_stats_t;

/**
 * The usage ledger of one logical core (`nrtx_get_vnc_usage`): bytes per
 * `dma_mem_usage_type_t`, index `NRTX_USAGE_TOTAL` holding the total. Names of the indices:
 * `nrtx_get_usage_type_name`.
 */
typedef struct nrtx_vnc_usage {
    /** Device bytes per usage type. */
    uint64_t device[NRTX_USAGE_TYPE_COUNT];
    /** Device high-water mark per usage type. */
    uint64_t device_peak[NRTX_USAGE_TYPE_COUNT];
    /** Host DMA bytes per usage type. */
    uint64_t host[NRTX_USAGE_TYPE_COUNT];
    /** Host DMA high-water mark per usage type. */
    uint64_t host_peak[NRTX_USAGE_TYPE_COUNT];
} nrtx_vnc_usage_t;

/**
 * One HBM of one device as the driver sees it (`nrtx_get_hbm_stats`): free bytes, the
 * largest free block -- the biggest allocation of more than 512 KiB that can still succeed
 * there -- and the small-object region's own figures (public ABI section 3: requests of at most
 * 512 KiB try that 1 GiB region first, then the main pool). A request of `n` page-rounded
 * bytes succeeds now iff `n <= largest_free_block`, or `n <= 512 KiB` and
 * `n <= small_object_largest_free_block`.
 */
typedef struct nrtx_hbm_stats {
    /** Device index. */
    uint32_t device;
    /** HBM index on the device. */
    uint32_t hbm_index;
    /** Devices attached (to iterate: device < num_devices). */
    uint32_t num_devices;
    /** HBMs on this device (to iterate: hbm_index < num_hbm). */
    uint32_t num_hbm;
    /** Bytes the driver manages on this HBM. */
    uint64_t capacity;
    /** Bytes free. */
    uint64_t free;
    /**
     * The largest request of more than 512 KiB that would succeed now (page-rounded). Under
     * the driver's placement (genalloc, the simulated device's default) the driver falls
     * back to the small-object region when the main pool cannot hold such a request, so it
     * is the larger of the two regions' largest free blocks; in the simulator's TLSF mode it
     * is the main pool's alone (docs/PLACEMENT.md, rule 4). Exact on the simulated device. On `/dev/neuron` it is an upper bound: the driver's
     * chunk dump gives no channel base and does not tell the small-object region apart, so
     * the free space past the last chunk, region included, counts as one block.
     */
    uint64_t largest_free_block;
    /** Live allocations. */
    uint64_t allocations;
    /**
     * Bytes free in the small-object region (part of `free`; 0 when the driver does not
     * tell the region apart).
     */
    uint64_t small_object_free;
    /**
     * The largest free block of the small-object region, the first choice of requests of at
     * most 512 KiB (and, under genalloc, the fallback of larger ones).
     */
    uint64_t small_object_largest_free_block;
} nrtx_hbm_stats_t;

/** The device memory a loaded model holds (`nrtx_get_model_memory`). */
typedef struct nrtx_model_memory {
    /** Logical core it is loaded on. */
    uint32_t vnc;
    /** Subgraphs (one MODEL heap each). */
    uint32_t subgraphs;
    /** Allocations in its heaps. */
    uint64_t allocations;
    /** Bytes in its heaps (device and host). */
    uint64_t bytes;
    /** Device bytes per usage type (index `NRTX_USAGE_TOTAL` = total). */
    uint64_t device_by_usage[NRTX_USAGE_TYPE_COUNT];
    /** Shared scratchpad pages it holds. */
    uint32_t scratchpad_pages;
    /** 1 when it uses its core's shared ext-isa library copy. */
    uint32_t shared_ext_isa;
} nrtx_model_memory_t;

/**
 * Memory of logical core `vnc` with peaks. Size-in/size-out as `nrt_get_vnc_memory_stats`.
 *
 * Safety:
 * `stats` is NULL or valid for writes of `stats_size_in` bytes; `stats_size_out` is NULL or
 * valid for a write.
 */
NRT_STATUS nrtx_get_vnc_memory_stats(uint32_t vnc, nrtx_vnc_memory_stats_t *stats, size_t stats_size_in, size_t *stats_size_out);

/**
 * Resets every peak of logical core `vnc` (device and host, per usage type and total) to the
 * current value.
 */
NRT_STATUS nrtx_reset_vnc_memory_peak(uint32_t vnc);

/**
 * The usage ledger of logical core `vnc`: current and peak bytes per usage type, device and
 * host. Size-in/size-out as `nrt_get_vnc_memory_stats`.
 *
 * Safety:
 * `usage` is NULL or valid for writes of `usage_size_in` bytes; `usage_size_out` is NULL or
 * valid for a write.
 */
NRT_STATUS nrtx_get_vnc_usage(uint32_t vnc, nrtx_vnc_usage_t *usage, size_t usage_size_in, size_t *usage_size_out);

/**
 * The name of usage index `usage` ("GENERIC", "WEIGHT", "TENSOR", ..., "TOTAL" for
 * `NRTX_USAGE_TOTAL`); NULL past the last index. The string is static.
 */
const char *nrtx_get_usage_type_name(uint32_t usage);

/**
 * Device-wide memory of `device` (an attached device index): every process's bytes and this
 * process's. Size-in/size-out as `nrt_get_vnc_memory_stats`.
 *
 * Safety:
 * `stats` is NULL or valid for writes of `stats_size_in` bytes; `stats_size_out` is NULL or
 * valid for a write.
 */
NRT_STATUS nrtx_get_device_memory_stats(uint32_t device, nrtx_device_memory_stats_t *stats, size_t stats_size_in, size_t *stats_size_out);

/**
 * Free bytes and the largest free block of HBM `hbm_index` of device `device`. Start at
 * (0, 0) and iterate with `num_devices` / `num_hbm`. Size-in/size-out as
 * `nrt_get_vnc_memory_stats`.
 *
 * Safety:
 * `stats` is NULL or valid for writes of `stats_size_in` bytes; `stats_size_out` is NULL or
 * valid for a write.
 */
NRT_STATUS nrtx_get_hbm_stats(uint32_t device, uint32_t hbm_index, nrtx_hbm_stats_t *stats, size_t stats_size_in, size_t *stats_size_out);

/**
 * As `nrtx_get_hbm_stats`, for the HBM that holds logical core `vnc`'s tensors.
 *
 * Safety:
 * `stats` is NULL or valid for writes of `stats_size_in` bytes; `stats_size_out` is NULL or
 * valid for a write.
 */
NRT_STATUS nrtx_get_vnc_hbm_stats(uint32_t vnc, nrtx_hbm_stats_t *stats, size_t stats_size_in, size_t *stats_size_out);

/**
 * The device memory `model` holds. Size-in/size-out as `nrt_get_vnc_memory_stats`.
 *
 * Safety:
 * `mem` is NULL or valid for writes of `mem_size_in` bytes; `mem_size_out` is NULL or valid
 * for a write; `model` is any pointer value (looked up, never dereferenced).
 */
NRT_STATUS nrtx_get_model_memory(const nrt_model_t *model, nrtx_model_memory_t *mem, size_t mem_size_in, size_t *mem_size_out);

/**
 * The out-of-memory report as text, captured when the last device out-of-memory of this
 * runtime happened: "Failed to allocate ... (usage: ...) on ND d:NC c" followed by the memory of
 * that device at that moment -- per NeuronCore and category, each HBM's free bytes and largest
 * free block, and the largest live allocations. Without an OOM since `nrt_init`, the same
 * table for device 0 now.
 *
 * Writes at most `buf_size_in` bytes (NUL-terminated) to `buf` and the full length including
 * the NUL to `*buf_size_out`. NRT_RESOURCE when the text was truncated; pass `buf` NULL and
 * `buf_size_in` 0 to ask for the length only.
 *
 * Safety:
 * `buf` is NULL or valid for writes of `buf_size_in` bytes; `buf_size_out` is NULL or valid
 * for a write.
 */
NRT_STATUS nrtx_get_oom_report(char *buf, size_t buf_size_in, size_t *buf_size_out);

/**
 * The message of the last call on this thread that failed ("function: what went wrong", the
 * same text the log shows), or "" when none did. The string stays valid until the next
 * failing call on this thread or the thread's exit; copy it to keep it. Called while the
 * thread's storage is torn down (from an atexit handler, for example), it returns a static
 * text saying the message is not available. Never NULL.
 */
const char *nrtx_get_last_error_message(void);

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NRT_NRTX_H */
