/*
 * nrt/nrt_version.h -- GENERATED, do not edit.
 *
 * The runtime's version (nrt_version.h): nrt_get_version. Generated from ffi/src/version.rs by
 * ffi/tests/headers.rs; regenerate with `cargo xtask headers`.
 */
#ifndef NRT_DMEM_NRT_NRT_VERSION_H
#define NRT_DMEM_NRT_NRT_VERSION_H

#include <stddef.h>
#include <stdint.h>
#include "nrt/nrt_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Bytes of `nrt_version_t.rt_detail`. */
#define RT_VERSION_DETAIL_LEN 128

/** Bytes of `nrt_version_t.git_hash`. */
#define GIT_HASH_LEN 64

/** The runtime's version (224 bytes). */
typedef struct nrt_version {
    /** Major version of the libnrt release this library implements (2). */
    uint64_t rt_major;
    /** Its minor version (31). */
    uint64_t rt_minor;
    /** Its patch version. */
    uint64_t rt_patch;
    /** Its maintenance version. */
    uint64_t rt_maintenance;
    /** NUL-terminated description: nrt-dmem, its own version and the device it simulates. */
    char rt_detail[RT_VERSION_DETAIL_LEN];
    /** NUL-terminated source revision (empty when the build did not record one). */
    char git_hash[GIT_HASH_LEN];
} nrt_version_t;

/**
 * Fills `ver` with the runtime's version: `rt_major`.`rt_minor` = 2.31 (the libnrt API this
 * library implements), `rt_detail` = "nrt-dmem VERSION ...", `git_hash` = the build's
 * revision when known. Copies `min(size, sizeof(nrt_version_t))` bytes, so a caller built
 * against a shorter struct gets its prefix. NULL `ver` is NRT_INVALID. Can be called
 * before `nrt_init`.
 *
 * Safety:
 * `ver` is NULL or valid for writes of `size` bytes.
 */
NRT_STATUS nrt_get_version(nrt_version_t *ver, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* NRT_DMEM_NRT_NRT_VERSION_H */
