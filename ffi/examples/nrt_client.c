/*
 * nrt_client.c -- a C application of libnrt.so's memory API, run by tests/tests/c_client.rs
 * (natively and under valgrind) against nrt-dmem's libnrt.so on the simulated device.
 *
 * It uses only <nrt/nrt.h> (written as for AWS's header) plus <nrt/nrtx.h> for the extensions:
 * init and counts, memory stats (size-in/size-out), tensors of every placement, slices,
 * attached buffers, tensor sets, three models on one logical core, execute (outputs carry the
 * inputs' bytes), completion counts, unload, an out-of-memory load (status 4) with its report,
 * a NEFF refused, and bad input of every kind: NULL, freed and foreign pointers, windows past
 * the end, names too long, calls before nrt_init and after nrt_close.
 *
 * usage: nrt_client MODELS_DIR    (the device comes from NRT_DMEM_DEVICE, default sim:trn2)
 * Prints "N passed, M failed" last and exits non-zero when anything failed.
 */
#include <nrt/nrt.h>
#include <nrt/nrtx.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (cond) {                                                             \
            passed++;                                                           \
        } else {                                                                \
            failed++;                                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, "\n");                                              \
        }                                                                       \
    } while (0)

#define EXPECT(call, want)                                                      \
    do {                                                                        \
        NRT_STATUS st_ = (call);                                                \
        CHECK(st_ == (want), "%s -> %d, want %d; last error: %s", #call,        \
              (int)st_, (int)(want), nrtx_get_last_error_message());            \
    } while (0)

#define MIB ((size_t)1 << 20)

static const char *models_dir;
static int is_trn2; /* CAYMAN: LNC 2, host tensors refused */

static char *slurp(const char *name, size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", models_dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

static nrt_model_t *load(const char *file, int32_t vnc, NRT_STATUS want) {
    size_t n;
    char *json = slurp(file, &n);
    nrt_model_t *m = NULL;
    NRT_STATUS st = nrt_load(json, n, vnc, -1, &m);
    CHECK(st == want, "nrt_load(%s, vnc %d) -> %d, want %d: %s", file, vnc, (int)st, (int)want,
          nrtx_get_last_error_message());
    CHECK((st == NRT_SUCCESS) == (m != NULL), "nrt_load(%s) model pointer", file);
    free(json);
    return m;
}

static size_t used(uint32_t vnc) {
    nrt_vnc_memory_stats_t s;
    memset(&s, 0, sizeof s);
    size_t out = 0;
    NRT_STATUS st = nrt_get_vnc_memory_stats(vnc, &s, sizeof s, &out);
    CHECK(st == NRT_SUCCESS && out == sizeof s, "stats of vnc %u: %d", vnc, (int)st);
    return s.bytes_used;
}

static nrt_tensor_t *tensor(nrt_tensor_placement_t p, int vnc, size_t size, const char *name) {
    nrt_tensor_t *t = NULL;
    EXPECT(nrt_tensor_allocate(p, vnc, size, name, &t), NRT_SUCCESS);
    CHECK(t != NULL, "tensor %s allocated", name);
    return t;
}

static void fill(unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 31u + seed);
}

/* ---- before nrt_init -------------------------------------------------------------------- */

static void before_init(void) {
    uint32_t total = 0, visible = 0;
    EXPECT(nrt_get_total_vnc_count(&total), NRT_SUCCESS);
    CHECK(total == (is_trn2 ? 4u : 2u), "total vnc count before init: %u", total);
    EXPECT(nrt_get_visible_vnc_count(&visible), NRT_SUCCESS);
    CHECK(visible == total, "visible vnc count before init: %u", visible);

    nrt_tensor_t *t = NULL;
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "t", &t), NRT_UNINITIALIZED);
    CHECK(t == NULL, "no tensor before init");
    nrt_model_t *m = NULL;
    EXPECT(nrt_load("{}", 2, 0, -1, &m), NRT_UNINITIALIZED);
    nrt_vnc_memory_stats_t s;
    EXPECT(nrt_get_vnc_memory_stats(0, &s, sizeof s, NULL), NRT_UNINITIALIZED);
    nrt_tensor_set_t *set = NULL;
    EXPECT(nrt_allocate_tensor_set(&set), NRT_UNINITIALIZED);
    EXPECT(nrt_unload(NULL), NRT_UNINITIALIZED);
    CHECK(nrt_tensor_get_size(NULL) == 0, "size of NULL before init");
    nrt_tensor_free(&t); /* no-op */
    nrt_close();         /* no-op */
    EXPECT(nrt_init((nrt_framework_type_t)99, "1.0", NULL), NRT_INVALID);
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "t", &t), NRT_UNINITIALIZED);
    /* nrt_get_status_as_str is declared by the SDK's nrt_status.h but not exported by
     * libnrt 2.31 (ffi/README.md), so a client meant for both libraries does not call it. */
}

/* ---- init, counts, stats ---------------------------------------------------------------- */

static void init_and_stats(void) {
    EXPECT(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "2.0", ""), NRT_SUCCESS);
    CHECK(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "2.0", "") != NRT_SUCCESS, "second nrt_init refused");
    uint32_t total = 0, visible = 0;
    EXPECT(nrt_get_total_vnc_count(&total), NRT_SUCCESS);
    EXPECT(nrt_get_visible_vnc_count(&visible), NRT_SUCCESS);
    CHECK(total == (is_trn2 ? 4u : 2u) && visible == total, "counts %u/%u", total, visible);
    EXPECT(nrt_get_total_vnc_count(NULL), NRT_INVALID);

    nrt_vnc_memory_stats_t s;
    size_t out = 0;
    EXPECT(nrt_get_vnc_memory_stats(0, &s, sizeof s, &out), NRT_SUCCESS);
    CHECK(out == sizeof s, "stats_size_out %zu", out);
    /* The limit is one HBM channel: the preset's, or NRT_DMEM_SIM_CHANNEL_SIZE when a smaller
       simulated device was asked for (the valgrind run). */
    const char *chan_env = getenv("NRT_DMEM_SIM_CHANNEL_SIZE");
    size_t chan = chan_env && *chan_env ? (size_t)strtoull(chan_env, NULL, 10)
                                        : (is_trn2 ? (size_t)24 << 30 : (size_t)16 << 30);
    CHECK(s.bytes_limit == chan, "bytes_limit %zu (expected %zu)", s.bytes_limit, chan);
    CHECK(s.bytes_used < s.bytes_limit, "bytes_used %zu", s.bytes_used);
    /* An older caller knowing only bytes_used: only 8 bytes are written. */
    unsigned char raw[64];
    memset(raw, 0xEE, sizeof raw);
    EXPECT(nrt_get_vnc_memory_stats(0, (nrt_vnc_memory_stats_t *)(void *)raw, 8, &out),
           NRT_SUCCESS);
    CHECK(out == sizeof(nrt_vnc_memory_stats_t) && raw[8] == 0xEE, "size_in 8 honoured");
    /* A newer caller with a bigger struct: the tail stays untouched. */
    memset(raw, 0xEE, sizeof raw);
    EXPECT(nrt_get_vnc_memory_stats(0, (nrt_vnc_memory_stats_t *)(void *)raw, sizeof raw, &out),
           NRT_SUCCESS);
    CHECK(out == sizeof(nrt_vnc_memory_stats_t) && raw[sizeof(nrt_vnc_memory_stats_t)] == 0xEE,
          "size_in 64 honoured");
    EXPECT(nrt_get_vnc_memory_stats(0, NULL, 0, &out), NRT_SUCCESS);
    EXPECT(nrt_get_vnc_memory_stats(0, NULL, sizeof s, &out), NRT_INVALID);
    EXPECT(nrt_get_vnc_memory_stats(99, &s, sizeof s, &out), NRT_INVALID);
}

/* ---- tensors ------------------------------------------------------------------------------ */

static void tensors(void) {
    unsigned char a[4096], b[4096];
    size_t base = used(0);

    nrt_tensor_t *dev = tensor(NRT_TENSOR_PLACEMENT_DEVICE, 0, MIB, "dev_a");
    CHECK(nrt_tensor_get_size(dev) == MIB, "size of dev_a");
    CHECK(used(0) >= base + MIB, "stats count the device tensor");
    fill(a, sizeof a, 7);
    EXPECT(nrt_tensor_write(dev, a, 8192, sizeof a), NRT_SUCCESS);
    memset(b, 0, sizeof b);
    EXPECT(nrt_tensor_read(dev, b, 8192, sizeof b), NRT_SUCCESS);
    CHECK(memcmp(a, b, sizeof a) == 0, "device tensor round trip");
    EXPECT(nrt_tensor_memset(dev, 0, 0x1AB, 4096), NRT_SUCCESS);
    EXPECT(nrt_tensor_read(dev, b, 0, 16), NRT_SUCCESS);
    CHECK(b[0] == 0xAB && b[15] == 0xAB, "memset converts value to unsigned char");
    CHECK(nrt_tensor_get_va(dev) == NULL, "no host address for a device tensor");
    nrt_tensor_device_allocation_info_t info;
    memset(&info, 0, sizeof info);
    EXPECT(nrt_tensor_get_device_allocation_info(dev, &info), NRT_SUCCESS);
    CHECK(info.size == MIB && info.physical_address != 0 && info.hbm_index == 0,
          "allocation info pa=%llx size=%zu hbm=%d", (unsigned long long)info.physical_address,
          info.size, info.hbm_index);

    nrt_tensor_t *dev2 = tensor(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, NULL);
    EXPECT(nrt_tensor_copy(dev, 8192, dev2, 0, 4096), NRT_SUCCESS);
    EXPECT(nrt_tensor_read(dev2, b, 0, 4096), NRT_SUCCESS);
    CHECK(memcmp(a, b, 4096) == 0, "device to device copy");

    /* VIRTUAL: ordinary host memory, with a host address. */
    nrt_tensor_t *virt = tensor(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, 4096, "virt");
    unsigned char *va = nrt_tensor_get_va(virt);
    CHECK(va != NULL, "virtual tensor has a host address");
    if (va) {
        fill(va, 4096, 3);
        EXPECT(nrt_tensor_read(virt, b, 0, 4096), NRT_SUCCESS);
        CHECK(memcmp(va, b, 4096) == 0, "host address and read agree");
    }
    EXPECT(nrt_tensor_get_device_allocation_info(virt, &info), NRT_INVALID);
    EXPECT(nrt_tensor_copy(dev, 8192, virt, 0, 4096), NRT_SUCCESS);
    EXPECT(nrt_tensor_read(virt, b, 0, 4096), NRT_SUCCESS);
    CHECK(memcmp(a, b, 4096) == 0, "device to virtual copy");

    /* HOST: DMA-able host memory; refused on trn2 (CAYMAN) with NRT_RESOURCE. */
    nrt_tensor_t *host = NULL;
    if (is_trn2) {
        EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, 4096, "host", &host),
               NRT_RESOURCE);
        CHECK(host == NULL, "no host tensor on trn2");
    } else {
        host = tensor(NRT_TENSOR_PLACEMENT_HOST, -1, 4096, "host");
        EXPECT(nrt_tensor_write(host, a, 0, 4096), NRT_SUCCESS);
        memset(b, 0, sizeof b);
        EXPECT(nrt_tensor_read(host, b, 0, 4096), NRT_SUCCESS);
        CHECK(memcmp(a, b, 4096) == 0, "host tensor round trip");
        EXPECT(nrt_tensor_get_device_allocation_info(host, &info), NRT_SUCCESS);
        EXPECT(nrt_tensor_copy(host, 0, dev2, 0, 4096), NRT_SUCCESS);
        nrt_tensor_free(&host);
        CHECK(host == NULL, "free NULLs the pointer");
    }

    /* Slices share ref-counted storage: freed with the last user. */
    nrt_tensor_t *slice = NULL;
    EXPECT(nrt_tensor_allocate_slice(dev, 8192, 4096, "slice", &slice), NRT_SUCCESS);
    CHECK(nrt_tensor_get_size(slice) == 4096, "slice size");
    EXPECT(nrt_tensor_read(slice, b, 0, 4096), NRT_SUCCESS);
    CHECK(memcmp(a, b, 4096) == 0, "slice sees its source");
    fill(a, 16, 99);
    EXPECT(nrt_tensor_write(slice, a, 0, 16), NRT_SUCCESS);
    EXPECT(nrt_tensor_read(dev, b, 8192, 16), NRT_SUCCESS);
    CHECK(memcmp(a, b, 16) == 0, "writes through a slice land in the source");
    EXPECT(nrt_tensor_allocate_slice(dev, 4096, MIB, "too_big", &slice), NRT_INVALID);
    CHECK(slice != NULL, "failed slice leaves the out-pointer alone");
    size_t with_dev = used(0);
    nrt_tensor_free(&dev);
    CHECK(used(0) == with_dev, "storage lives while a slice uses it");
    EXPECT(nrt_tensor_read(slice, b, 0, 16), NRT_SUCCESS);
    CHECK(memcmp(a, b, 16) == 0, "slice readable after its source is freed");
    nrt_tensor_free(&slice);
    CHECK(used(0) + MIB <= with_dev, "the last user frees the storage");

    /* Empty tensor + caller buffer: the buffer is never freed by the runtime. */
    nrt_tensor_t *empty = NULL;
    EXPECT(nrt_tensor_allocate_empty("empty", &empty), NRT_SUCCESS);
    EXPECT(nrt_tensor_read(empty, b, 0, 16), NRT_INVALID);
    char *mine = malloc(256);
    EXPECT(nrt_tensor_attach_buffer(empty, NULL, 256), NRT_INVALID);
    EXPECT(nrt_tensor_attach_buffer(empty, mine, 0), NRT_INVALID);
    EXPECT(nrt_tensor_attach_buffer(empty, mine, 256), NRT_SUCCESS);
    EXPECT(nrt_tensor_write(empty, "hello", 0, 6), NRT_SUCCESS);
    CHECK(strcmp(mine, "hello") == 0, "writes land in the caller's buffer");
    CHECK(nrt_tensor_get_va(empty) == mine, "va of an attached buffer");
    CHECK(nrt_tensor_get_size(empty) == 256, "size of an attached buffer");
    nrt_tensor_free(&empty);
    strcpy(mine, "still mine"); /* valgrind: the buffer must still be ours */
    free(mine);

    /* Completion counters on a tensor never written by an execution. */
    EXPECT(nrt_tensor_check_output_completion(dev2, 0, 0), NRT_SUCCESS);
    EXPECT(nrt_tensor_check_output_completion(dev2, 0, 1), NRT_TIMEOUT);
    EXPECT(nrt_tensor_check_output_completion(dev2, 2000, 1), NRT_TIMEOUT);
    EXPECT(nrt_tensor_reset_output_completion(dev2), NRT_SUCCESS);

    nrt_tensor_free(&dev2);
    nrt_tensor_free(&virt);
    CHECK(used(0) == base, "all tensor memory returned (%zu vs %zu)", used(0), base);
}

/* ---- tensor sets -------------------------------------------------------------------------- */

static void sets(void) {
    nrt_tensor_t *t1 = tensor(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, 64, "t1");
    nrt_tensor_t *t2 = tensor(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, 64, "t2");
    nrt_tensor_set_t *set = NULL;
    EXPECT(nrt_allocate_tensor_set(&set), NRT_SUCCESS);
    CHECK(set != NULL, "set allocated");
    nrt_tensor_t *got = NULL;
    EXPECT(nrt_add_tensor_to_tensor_set(set, "a", t1), NRT_SUCCESS);
    EXPECT(nrt_get_tensor_from_tensor_set(set, "a", &got), NRT_SUCCESS);
    CHECK(got == t1, "get returns what was added");
    EXPECT(nrt_add_tensor_to_tensor_set(set, "a", t2), NRT_SUCCESS);
    EXPECT(nrt_get_tensor_from_tensor_set(set, "a", &got), NRT_SUCCESS);
    CHECK(got == t2, "add replaces a name");
    EXPECT(nrt_add_tensor_to_tensor_set(set, "b", t1), NRT_SUCCESS);
    EXPECT(nrt_get_tensor_from_tensor_set(set, "missing", &got), NRT_INVALID);
    EXPECT(nrt_get_tensor_from_tensor_set(set, NULL, &got), NRT_INVALID);
    EXPECT(nrt_get_tensor_from_tensor_set(set, "a", NULL), NRT_INVALID);
    EXPECT(nrt_add_tensor_to_tensor_set(set, NULL, t1), NRT_INVALID);
    EXPECT(nrt_add_tensor_to_tensor_set(set, "c", NULL), NRT_INVALID);
    EXPECT(nrt_add_tensor_to_tensor_set(NULL, "c", t1), NRT_INVALID);
    EXPECT(nrt_allocate_tensor_set(NULL), NRT_INVALID);
    /* A set holds as many tensors as it is given: 1 000 names, each found again. */
    char many[16];
    for (int i = 0; i < 1000; i++) {
        snprintf(many, sizeof many, "x%d", i);
        EXPECT(nrt_add_tensor_to_tensor_set(set, many, i % 2 ? t1 : t2), NRT_SUCCESS);
    }
    for (int i = 0; i < 1000; i += 111) {
        snprintf(many, sizeof many, "x%d", i);
        EXPECT(nrt_get_tensor_from_tensor_set(set, many, &got), NRT_SUCCESS);
        CHECK(got == (i % 2 ? t1 : t2), "entry %d of a 1000-tensor set", i);
    }
    nrt_tensor_set_t *copy = set;
    nrt_destroy_tensor_set(&set);
    CHECK(set == NULL, "destroy NULLs the pointer");
    nrt_destroy_tensor_set(&set);  /* NULL: no-op */
    nrt_destroy_tensor_set(&copy); /* stale copy: detected, no crash */
    nrt_destroy_tensor_set(NULL);
    EXPECT(nrt_get_tensor_from_tensor_set(copy, "a", &got), NRT_INVALID);
    /* A stale pointer never reaches a newer set, even where the allocator hands the destroyed
     * set's memory out again: destroying through it is a no-op and the new set keeps working. */
    for (int i = 0; i < 8; i++) {
        nrt_tensor_set_t *old = NULL, *fresh = NULL;
        EXPECT(nrt_allocate_tensor_set(&old), NRT_SUCCESS);
        nrt_tensor_set_t *stale = old;
        nrt_destroy_tensor_set(&old);
        EXPECT(nrt_allocate_tensor_set(&fresh), NRT_SUCCESS);
        CHECK(fresh != stale, "a new set never gets a destroyed set's pointer");
        EXPECT(nrt_add_tensor_to_tensor_set(fresh, "a", t1), NRT_SUCCESS);
        nrt_destroy_tensor_set(&stale); /* not a live set: no-op (logged) */
        CHECK(stale == NULL, "destroy NULLs a stale pointer too");
        EXPECT(nrt_get_tensor_from_tensor_set(fresh, "a", &got), NRT_SUCCESS);
        CHECK(got == t1, "the new set survived a stale destroy");
        nrt_destroy_tensor_set(&fresh);
    }
    nrt_tensor_free(&t1);
    nrt_tensor_free(&t2);
}

/* ---- models ------------------------------------------------------------------------------- */

static nrt_tensor_set_t *new_set(void) {
    nrt_tensor_set_t *s = NULL;
    EXPECT(nrt_allocate_tensor_set(&s), NRT_SUCCESS);
    return s;
}

/* Executes `m` with inputs/outputs named as its manifest declares and checks that output k
 * holds input k's bytes followed by zeros. */
static void run(nrt_model_t *m, int n_in, const char **in_names, const size_t *in_sizes,
                int n_out, const char **out_names, const size_t *out_sizes) {
    nrt_tensor_set_t *ins = new_set(), *outs = new_set();
    nrt_tensor_t *it[4] = {0}, *ot[4] = {0};
    unsigned char *want[4] = {0};
    for (int k = 0; k < n_in; k++) {
        it[k] = tensor(k % 2 ? NRT_TENSOR_PLACEMENT_VIRTUAL : NRT_TENSOR_PLACEMENT_DEVICE, 0,
                       in_sizes[k], in_names[k]);
        want[k] = malloc(in_sizes[k]);
        fill(want[k], in_sizes[k], 11u * (unsigned)k + 1u);
        EXPECT(nrt_tensor_write(it[k], want[k], 0, in_sizes[k]), NRT_SUCCESS);
        EXPECT(nrt_add_tensor_to_tensor_set(ins, in_names[k], it[k]), NRT_SUCCESS);
    }
    for (int k = 0; k < n_out; k++) {
        ot[k] = tensor(NRT_TENSOR_PLACEMENT_DEVICE, 0, out_sizes[k], out_names[k]);
        EXPECT(nrt_tensor_memset(ot[k], 0, 0xFF, out_sizes[k]), NRT_SUCCESS);
        EXPECT(nrt_add_tensor_to_tensor_set(outs, out_names[k], ot[k]), NRT_SUCCESS);
    }
    EXPECT(nrt_execute(m, ins, outs), NRT_SUCCESS);
    for (int k = 0; k < n_out; k++) {
        unsigned char *got = malloc(out_sizes[k]);
        EXPECT(nrt_tensor_read(ot[k], got, 0, out_sizes[k]), NRT_SUCCESS);
        size_t n = 0;
        if (k < n_in) {
            n = in_sizes[k] < out_sizes[k] ? in_sizes[k] : out_sizes[k];
            CHECK(memcmp(got, want[k], n) == 0, "output %s carries input %s", out_names[k],
                  in_names[k]);
        }
        int zero = 1;
        for (size_t i = n; i < out_sizes[k]; i++)
            zero &= got[i] == 0;
        CHECK(zero, "output %s zero-filled past the input", out_names[k]);
        free(got);
        EXPECT(nrt_tensor_check_output_completion(ot[k], 0, 1), NRT_SUCCESS);
    }
    /* A second execution bumps the completion count again. */
    EXPECT(nrt_execute(m, ins, outs), NRT_SUCCESS);
    if (n_out > 0) {
        EXPECT(nrt_tensor_check_output_completion(ot[0], -1, 2), NRT_SUCCESS);
        EXPECT(nrt_tensor_check_output_completion(ot[0], 1000, 3), NRT_TIMEOUT);
        EXPECT(nrt_tensor_reset_output_completion(ot[0]), NRT_SUCCESS);
        EXPECT(nrt_tensor_check_output_completion(ot[0], 0, 1), NRT_TIMEOUT);
    }
    /* Binding errors: a missing input, a wrongly sized output. */
    if (n_in > 0) {
        nrt_tensor_set_t *partial = new_set();
        for (int k = 1; k < n_in; k++)
            EXPECT(nrt_add_tensor_to_tensor_set(partial, in_names[k], it[k]), NRT_SUCCESS);
        EXPECT(nrt_execute(m, partial, outs), NRT_INVALID);
        nrt_destroy_tensor_set(&partial);
    }
    if (n_out > 0) {
        nrt_tensor_t *small = tensor(NRT_TENSOR_PLACEMENT_DEVICE, 0, out_sizes[0] + 4096, "wrong");
        EXPECT(nrt_add_tensor_to_tensor_set(outs, out_names[0], small), NRT_SUCCESS);
        EXPECT(nrt_execute(m, ins, outs), NRT_INVALID);
        nrt_tensor_free(&small);
    }
    EXPECT(nrt_execute(m, NULL, outs), NRT_INVALID);
    EXPECT(nrt_execute(m, ins, NULL), NRT_INVALID);
    EXPECT(nrt_execute(NULL, ins, outs), NRT_INVALID);
    for (int k = 0; k < n_in; k++) {
        nrt_tensor_free(&it[k]);
        free(want[k]);
    }
    for (int k = 0; k < n_out; k++)
        nrt_tensor_free(&ot[k]);
    nrt_destroy_tensor_set(&ins);
    nrt_destroy_tensor_set(&outs);
}

static void models(void) {
    size_t base = used(0), base1 = used(1);

    nrt_model_t *bert = load("bert-base.json", -1, NRT_SUCCESS);
    size_t after_bert = used(0);
    CHECK(after_bert >= base + 218964480u, "bert's constants are booked (%zu)", after_bert - base);
    nrt_model_t *resnet = load("resnet50.json", 0, NRT_SUCCESS);
    CHECK(used(0) >= after_bert + 51114064u, "resnet's constants are booked");
    nrt_model_t *custom = load("custom-op-3libs.json", 0, NRT_SUCCESS);
    nrt_model_t *llama = load("llama3-8b-tp8-shard.json", 1, NRT_SUCCESS);
    CHECK(used(1) >= base1 + ((size_t)2 << 30), "llama shard's 2 GB are on vnc 1");

    nrtx_model_memory_t mm;
    size_t out = 0;
    EXPECT(nrtx_get_model_memory(bert, &mm, sizeof mm, &out), NRT_SUCCESS);
    CHECK(out == sizeof mm && mm.vnc == 0 && mm.subgraphs == 1 && mm.bytes >= 218964480u &&
              mm.device_by_usage[NRTX_USAGE_WEIGHT] >= 218964480u,
          "bert footprint: vnc %u, %llu bytes", mm.vnc, (unsigned long long)mm.bytes);
    EXPECT(nrtx_get_model_memory(llama, &mm, sizeof mm, &out), NRT_SUCCESS);
    CHECK(mm.vnc == 1 && mm.subgraphs == 2, "llama footprint");

    const char *bert_in[] = {"input_ids", "attention_mask", "token_type_ids"};
    const size_t bert_in_sz[] = {512, 512, 512};
    const char *bert_out[] = {"last_hidden_state", "pooler_output"};
    const size_t bert_out_sz[] = {196608, 1536};
    run(bert, 3, bert_in, bert_in_sz, 2, bert_out, bert_out_sz);

    const char *rn_in[] = {"input"};
    const size_t rn_in_sz[] = {602112};
    const char *rn_out[] = {"output"};
    const size_t rn_out_sz[] = {4000};
    run(resnet, 1, rn_in, rn_in_sz, 1, rn_out, rn_out_sz);

    const char *co_in[] = {"x", "mask"};
    const size_t co_in_sz[] = {65536, 8192};
    const char *co_out[] = {"y"};
    const size_t co_out_sz[] = {65536};
    run(custom, 2, co_in, co_in_sz, 1, co_out, co_out_sz);

    /* Unload frees exactly the model's memory. */
    size_t before = used(0);
    EXPECT(nrtx_get_model_memory(resnet, &mm, sizeof mm, &out), NRT_SUCCESS);
    EXPECT(nrt_unload(resnet), NRT_SUCCESS);
    CHECK(used(0) == before - mm.device_by_usage[NRTX_USAGE_TOTAL],
          "unload returns the model's device bytes");
    EXPECT(nrt_unload(resnet), NRT_INVALID_HANDLE);
    EXPECT(nrtx_get_model_memory(resnet, &mm, sizeof mm, &out), NRT_INVALID_HANDLE);
    nrt_tensor_set_t *s = new_set();
    EXPECT(nrt_execute(resnet, s, s), NRT_INVALID_HANDLE);
    /* A stale model pointer never reaches a newer model, even where the allocator would hand an
     * unloaded model's memory out again: it stays NRT_INVALID_HANDLE and unloads nothing. */
    nrt_model_t *old[16];
    for (int i = 0; i < 16; i++) {
        old[i] = load("resnet50.json", 0, NRT_SUCCESS);
        EXPECT(nrt_unload(old[i]), NRT_SUCCESS);
    }
    nrt_model_t *live = load("resnet50.json", 0, NRT_SUCCESS);
    for (int i = 0; i < 16; i++) {
        CHECK(live != old[i] && live != resnet, "a new model never gets an unloaded one's pointer");
        EXPECT(nrt_unload(old[i]), NRT_INVALID_HANDLE);
        EXPECT(nrtx_get_model_memory(old[i], &mm, sizeof mm, &out), NRT_INVALID_HANDLE);
    }
    EXPECT(nrt_unload(resnet), NRT_INVALID_HANDLE);
    EXPECT(nrtx_get_model_memory(live, &mm, sizeof mm, &out), NRT_SUCCESS);
    EXPECT(nrt_unload(live), NRT_SUCCESS);
    /* A set pointer is not a model (one handle space for both). */
    EXPECT(nrt_unload((nrt_model_t *)s), NRT_INVALID_HANDLE);
    nrt_destroy_tensor_set(&s);
    EXPECT(nrt_unload(bert), NRT_SUCCESS);
    EXPECT(nrt_unload(custom), NRT_SUCCESS);
    EXPECT(nrt_unload(llama), NRT_SUCCESS);
    CHECK(used(0) == base, "vnc 0 back to its base after unloading (%zu vs %zu)", used(0), base);
    CHECK(used(1) == base1, "vnc 1 back to its base after unloading");
    EXPECT(nrt_unload(NULL), NRT_INVALID);
}

/* ---- OOM, NEFF, bad manifests -------------------------------------------------------------- */

static const char OOM_MODEL[] =
    "{ \"format\": \"nrt-dmem-model/2\", \"name\": \"too-big\",\n"
    "  \"allocations\": [\n"
    "    { \"usage\": \"INSTR_PE\", \"location\": \"device\", \"size\": 1048576 },\n"
    "    { \"usage\": \"WEIGHT\", \"location\": \"device\", \"size\": 68719476736,"
    " \"hint\": \"weights_64GiB\" } ] }";

static void oom_and_manifests(void) {
    nrt_model_t *resident = load("bert-base.json", 0, NRT_SUCCESS);
    size_t base = used(0);
    nrt_model_t *m = NULL;
    EXPECT(nrt_load(OOM_MODEL, strlen(OOM_MODEL), 0, -1, &m), NRT_RESOURCE);
    CHECK(m == NULL, "no model on OOM");
    CHECK(used(0) == base, "a failed load leaves no memory behind");
    size_t need = 0;
    EXPECT(nrtx_get_oom_report(NULL, 0, &need), NRT_SUCCESS);
    CHECK(need > 64, "report length %zu", need);
    char small[16];
    EXPECT(nrtx_get_oom_report(small, sizeof small, &need), NRT_RESOURCE);
    CHECK(strlen(small) == sizeof small - 1, "truncated report is NUL-terminated");
    char *report = malloc(need);
    EXPECT(nrtx_get_oom_report(report, need, &need), NRT_SUCCESS);
    CHECK(strstr(report, "Failed to allocate") != NULL && strstr(report, "constants") != NULL,
          "the report names the failed allocation");
    CHECK(strstr(report, "largest free block") != NULL, "the report shows free blocks");
    CHECK(strstr(report, "\nwhy: ") != NULL && strstr(report, "small-object region") != NULL,
          "the report says why, and shows the small-object region apart");
    CHECK(strstr(report, "while loading model \"too-big\"") != NULL,
          "the report says what the model asked for");
    CHECK(strstr(report, "weights_bf16") != NULL, "the report lists the resident model's weights");
    printf("---- OOM report ----\n%s--------------------\n", report);
    free(report);

    nrt_tensor_t *t = NULL;
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, (size_t)64 << 30, "huge", &t),
           NRT_RESOURCE);
    EXPECT(nrtx_get_oom_report(small, sizeof small, &need), NRT_RESOURCE);
    report = malloc(need);
    EXPECT(nrtx_get_oom_report(report, need, &need), NRT_SUCCESS);
    CHECK(strstr(report, "(usage: tensors) on ND 0:NC 0 (HBM 0, type TENSOR)") != NULL &&
              strstr(report, "too-big") == NULL,
          "a later OOM replaces the report");
    free(report);

    /* Binary blobs go to the NEFF reader: too short for a NEFF header, refused by its first
     * gate (libnrt's message) with nothing allocated. */
    size_t before_blob = used(0);
    static const unsigned char gz[] = {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0, 3};
    EXPECT(nrt_load(gz, sizeof gz, 0, -1, &m), NRT_INVALID);
    CHECK(strstr(nrtx_get_last_error_message(), "Invalid number of NEFF bytes received") != NULL,
          "the NEFF size gate names the problem");
    EXPECT(nrt_load("NEFF\x01\x02", 6, 0, -1, &m), NRT_INVALID);
    CHECK(used(0) == before_blob, "a refused NEFF allocates nothing");

    static const char unknown_key[] =
        "{\"format\":\"nrt-dmem-model/2\",\"name\":\"m\",\"allocations\":[],\n\"weights\":1}";
    EXPECT(nrt_load(unknown_key, strlen(unknown_key), 0, -1, &m), NRT_INVALID);
    CHECK(strstr(nrtx_get_last_error_message(), "weights") != NULL &&
              strstr(nrtx_get_last_error_message(), "line 2") != NULL,
          "unknown key named with its line: %s", nrtx_get_last_error_message());
    static const char bad_usage[] =
        "{\"format\":\"nrt-dmem-model/2\",\"name\":\"m\",\"allocations\":"
        "[{\"usage\":\"WEIGHTS\",\"location\":\"device\",\"size\":1}]}";
    EXPECT(nrt_load(bad_usage, strlen(bad_usage), 0, -1, &m), NRT_INVALID);
    CHECK(strstr(nrtx_get_last_error_message(), "DMA_RING_COLLECTIVES") != NULL,
          "unknown usage lists the valid names");
    static const char wrong_format[] = "{\"format\":\"nrt-dmem-model/9\",\"name\":\"m\",\"allocations\":[]}";
    EXPECT(nrt_load(wrong_format, strlen(wrong_format), 0, -1, &m), NRT_INVALID);
    EXPECT(nrt_load("{", 1, 0, -1, &m), NRT_INVALID);
    EXPECT(nrt_load(NULL, 10, 0, -1, &m), NRT_INVALID);
    EXPECT(nrt_load(OOM_MODEL, 0, 0, -1, &m), NRT_INVALID);
    EXPECT(nrt_load(unknown_key, strlen(unknown_key), 0, -1, NULL), NRT_INVALID);
    size_t n;
    char *json = slurp("resnet50.json", &n);
    EXPECT(nrt_load(json, n, 99, -1, &m), NRT_INVALID);
    EXPECT(nrt_load(json, n, -5, -1, &m), NRT_INVALID);
    free(json);
    CHECK(used(0) == base, "failed loads leave no memory behind");
    EXPECT(nrt_unload(resident), NRT_SUCCESS);
}

/* ---- nrtx: ledger, peaks, HBMs ---------------------------------------------------------------- */

static void extensions(void) {
    nrtx_vnc_usage_t u;
    size_t out = 0;
    EXPECT(nrtx_get_vnc_usage(0, &u, sizeof u, &out), NRT_SUCCESS);
    CHECK(out == sizeof u, "usage size");
    CHECK(u.device[NRTX_USAGE_TOTAL] == used(0), "ledger total equals bytes_used");
    CHECK(strcmp(nrtx_get_usage_type_name(NRTX_USAGE_TENSOR), "TENSOR") == 0,
          "usage name 12");
    CHECK(strcmp(nrtx_get_usage_type_name(NRTX_USAGE_WEIGHT), "WEIGHT") == 0,
          "usage name 6");
    CHECK(strcmp(nrtx_get_usage_type_name(NRTX_USAGE_TOTAL), "TOTAL") == 0, "usage name 22");
    CHECK(nrtx_get_usage_type_name(NRTX_USAGE_TYPE_COUNT) == NULL, "usage name past the end");

    size_t tensors_before = u.device[NRTX_USAGE_TENSOR];
    nrt_tensor_t *big = tensor(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64 * MIB, "big");
    EXPECT(nrtx_get_vnc_usage(0, &u, sizeof u, &out), NRT_SUCCESS);
    CHECK(u.device[NRTX_USAGE_TENSOR] >= tensors_before + 64 * MIB, "TENSOR row grows");
    nrt_tensor_free(&big);
    nrtx_vnc_memory_stats_t x;
    EXPECT(nrtx_get_vnc_memory_stats(0, &x, sizeof x, &out), NRT_SUCCESS);
    CHECK(x.bytes_peak >= x.bytes_used + 64 * MIB, "peak remembers the big tensor");
    CHECK(x.bytes_used == used(0), "same bytes_used as nrt_get_vnc_memory_stats");
    EXPECT(nrtx_reset_vnc_memory_peak(0), NRT_SUCCESS);
    EXPECT(nrtx_get_vnc_memory_stats(0, &x, sizeof x, &out), NRT_SUCCESS);
    CHECK(x.bytes_peak == x.bytes_used, "reset peak");
    EXPECT(nrtx_reset_vnc_memory_peak(99), NRT_INVALID);

    nrtx_hbm_stats_t h;
    EXPECT(nrtx_get_vnc_hbm_stats(0, &h, sizeof h, &out), NRT_SUCCESS);
    CHECK(h.capacity > 0 && h.free <= h.capacity && h.largest_free_block <= h.free,
          "hbm stats of vnc 0");
    CHECK(h.num_hbm == (is_trn2 ? 4u : 2u) && h.num_devices == 1, "hbm count %u", h.num_hbm);
    for (uint32_t d = 0; d < h.num_devices; d++)
        for (uint32_t i = 0; i < h.num_hbm; i++) {
            nrtx_hbm_stats_t e;
            EXPECT(nrtx_get_hbm_stats(d, i, &e, sizeof e, &out), NRT_SUCCESS);
            CHECK(e.hbm_index == i && e.largest_free_block > 0, "hbm %u", i);
        }
    /* Issue 21: largest_free_block is what a DEVICE tensor can get right now; one page more
       is not. The small-object region is reported apart and never counts for it. */
    EXPECT(nrtx_get_vnc_hbm_stats(0, &h, sizeof h, &out), NRT_SUCCESS);
    CHECK(out == sizeof h && h.small_object_free > 0 &&
              h.small_object_largest_free_block <= h.small_object_free &&
              h.largest_free_block + h.small_object_free <= h.free,
          "small-object region apart: free %llu largest %llu",
          (unsigned long long)h.small_object_free,
          (unsigned long long)h.small_object_largest_free_block);
    nrt_tensor_t *lt = NULL;
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, h.largest_free_block + 4096,
                               "largest+1 page", &lt),
           NRT_RESOURCE);
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, h.largest_free_block, "largest",
                               &lt),
           NRT_SUCCESS);
    nrtx_hbm_stats_t after;
    EXPECT(nrtx_get_vnc_hbm_stats(0, &after, sizeof after, &out), NRT_SUCCESS);
    CHECK(after.free == h.free - h.largest_free_block, "the largest block is gone");
    nrt_tensor_free(&lt);
    EXPECT(nrtx_get_hbm_stats(0, 99, &h, sizeof h, &out), NRT_INVALID);
    EXPECT(nrtx_get_hbm_stats(7, 0, &h, sizeof h, &out), NRT_INVALID);
    EXPECT(nrtx_get_vnc_usage(0, NULL, sizeof u, &out), NRT_INVALID);
}

/* ---- bad input ------------------------------------------------------------------------------ */

static void bad_input(void) {
    unsigned char b[64];
    nrt_tensor_t *t = tensor(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "bad_input");
    size_t base = used(0);

    /* NULL pointers */
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "x", NULL), NRT_INVALID);
    EXPECT(nrt_tensor_allocate_empty("x", NULL), NRT_INVALID);
    EXPECT(nrt_tensor_allocate_slice(t, 0, 16, "x", NULL), NRT_INVALID);
    EXPECT(nrt_tensor_read(NULL, b, 0, 16), NRT_INVALID);
    EXPECT(nrt_tensor_write(NULL, b, 0, 16), NRT_INVALID);
    EXPECT(nrt_tensor_read(t, NULL, 0, 16), NRT_INVALID);
    EXPECT(nrt_tensor_write(t, NULL, 0, 16), NRT_INVALID);
    EXPECT(nrt_tensor_copy(NULL, 0, t, 0, 16), NRT_INVALID);
    EXPECT(nrt_tensor_copy(t, 0, NULL, 0, 16), NRT_INVALID);
    EXPECT(nrt_tensor_memset(NULL, 0, 0, 16), NRT_INVALID);
    EXPECT(nrt_tensor_attach_buffer(NULL, b, 16), NRT_INVALID);
    EXPECT(nrt_tensor_get_device_allocation_info(NULL, NULL), NRT_INVALID);
    EXPECT(nrt_tensor_get_device_allocation_info(t, NULL), NRT_INVALID);
    EXPECT(nrt_tensor_check_output_completion(NULL, 0, 0), NRT_INVALID);
    EXPECT(nrt_tensor_reset_output_completion(NULL), NRT_INVALID);
    EXPECT(nrt_tensor_allocate_slice(NULL, 0, 16, "x", &t), NRT_INVALID);
    CHECK(nrt_tensor_get_size(NULL) == 0 && nrt_tensor_get_va(NULL) == NULL, "NULL tensor");
    nrt_tensor_free(NULL);
    nrt_tensor_t *none = NULL;
    nrt_tensor_free(&none);

    /* Windows past the end (and overflowing) */
    EXPECT(nrt_tensor_read(t, b, 4096 - 8, 16), NRT_INVALID);
    EXPECT(nrt_tensor_write(t, b, 4096, 1), NRT_INVALID);
    EXPECT(nrt_tensor_read(t, b, SIZE_MAX, 2), NRT_INVALID);
    EXPECT(nrt_tensor_write(t, b, 1, SIZE_MAX), NRT_INVALID);
    EXPECT(nrt_tensor_memset(t, 4000, 0, 200), NRT_INVALID);
    EXPECT(nrt_tensor_memset(t, UINT64_MAX, 0, 2), NRT_INVALID);
    EXPECT(nrt_tensor_copy(t, 4000, t, 0, 200), NRT_INVALID);
    EXPECT(nrt_tensor_copy(t, 0, t, SIZE_MAX, 200), NRT_INVALID);
    nrt_tensor_t *s = NULL;
    EXPECT(nrt_tensor_allocate_slice(t, 4096, 1, "x", &s), NRT_INVALID);
    EXPECT(nrt_tensor_allocate_slice(t, 0, 0, "x", &s), NRT_INVALID);
    EXPECT(nrt_tensor_read(t, b, 4096, 0), NRT_SUCCESS);

    /* Names: 255 bytes (NRT_TENSOR_NAME_MAX - 1) is the limit */
    char name[300];
    memset(name, 'n', sizeof name);
    name[255] = 0;
    nrt_tensor_t *named = NULL;
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, 16, name, &named), NRT_SUCCESS);
    nrt_tensor_free(&named);
    name[255] = 'n';
    name[256] = 0;
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, 16, name, &named), NRT_INVALID);
    EXPECT(nrt_tensor_allocate_empty(name, &named), NRT_INVALID);
    EXPECT(nrt_tensor_allocate_slice(t, 0, 16, name, &named), NRT_INVALID);
    nrt_tensor_set_t *set = new_set();
    EXPECT(nrt_add_tensor_to_tensor_set(set, name, t), NRT_INVALID);
    name[299] = 0; /* still bounded: only 256 bytes are ever read */
    EXPECT(nrt_get_tensor_from_tensor_set(set, name, &named), NRT_INVALID);
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, 16, "\xff\xfe", &named),
           NRT_INVALID);

    /* Other arguments */
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 99, 16, "x", &named), NRT_INVALID);
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, -1, 16, "x", &named), NRT_INVALID);
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 0, "x", &named), NRT_INVALID);
    EXPECT(nrt_tensor_allocate((nrt_tensor_placement_t)7, 0, 16, "x", &named), NRT_INVALID);

    /* Freed and foreign tensors */
    nrt_tensor_t *stale = t;
    nrt_tensor_free(&t);
    CHECK(t == NULL, "free NULLs the caller's pointer");
    nrt_tensor_free(&t); /* second call with the NULL: no-op */
    EXPECT(nrt_tensor_read(stale, b, 0, 16), NRT_INVALID);
    EXPECT(nrt_tensor_write(stale, b, 0, 16), NRT_INVALID);
    EXPECT(nrt_add_tensor_to_tensor_set(set, "stale", stale), NRT_INVALID);
    CHECK(nrt_tensor_get_size(stale) == 0, "size of a freed tensor");
    nrt_tensor_free(&stale); /* double free through a copy: detected */
    CHECK(stale == NULL, "free NULLs a stale pointer too");
    unsigned char junk[512];
    memset(junk, 0x5A, sizeof junk);
    nrt_tensor_t *foreign = (nrt_tensor_t *)(void *)junk;
    EXPECT(nrt_tensor_read(foreign, b, 0, 16), NRT_INVALID);
    EXPECT(nrt_tensor_memset(foreign, 0, 0, 16), NRT_INVALID);
    nrt_tensor_t *live = tensor(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, 64, "live");
    nrt_tensor_t *inside = (nrt_tensor_t *)(void *)((char *)live + 8);
    EXPECT(nrt_tensor_read(inside, b, 0, 16), NRT_INVALID);
    nrt_tensor_free(&foreign);
    nrt_tensor_free(&live);

    /* Foreign models and sets */
    nrt_model_t *fm = (nrt_model_t *)(void *)junk;
    EXPECT(nrt_unload(fm), NRT_INVALID_HANDLE);
    EXPECT(nrt_execute(fm, set, set), NRT_INVALID_HANDLE);
    nrt_tensor_set_t *fs = (nrt_tensor_set_t *)junk;
    EXPECT(nrt_add_tensor_to_tensor_set(fs, "a", NULL), NRT_INVALID);
    EXPECT(nrt_get_tensor_from_tensor_set(fs, "a", &named), NRT_INVALID);
    nrt_destroy_tensor_set(&fs);
    nrt_destroy_tensor_set(&set);
    CHECK(used(0) + 4096 <= base, "bad input leaked no device memory");
}

/* ---- close, after close, init again ------------------------------------------------------- */

static void close_and_reinit(void) {
    /* Leave things behind: nrt_close frees them. */
    nrt_tensor_t *dev = tensor(NRT_TENSOR_PLACEMENT_DEVICE, 0, MIB, "left_dev");
    nrt_tensor_t *old_dev = dev; /* kept: a stale pointer once the runtime closes */
    nrt_tensor_t *virt = tensor(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, MIB, "left_virt");
    nrt_tensor_t *sl = NULL;
    EXPECT(nrt_tensor_allocate_slice(virt, 0, 16, "left_slice", &sl), NRT_SUCCESS);
    nrt_model_t *m = load("resnet50.json", 0, NRT_SUCCESS);
    nrt_tensor_set_t *set = new_set();
    nrt_close();

    unsigned char b[16];
    nrt_vnc_memory_stats_t s;
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "x", &dev), NRT_CLOSED);
    EXPECT(nrt_tensor_read(dev, b, 0, 16), NRT_CLOSED);
    EXPECT(nrt_tensor_write(virt, b, 0, 16), NRT_CLOSED);
    EXPECT(nrt_unload(m), NRT_CLOSED);
    EXPECT(nrt_execute(m, set, set), NRT_CLOSED);
    EXPECT(nrt_load(OOM_MODEL, strlen(OOM_MODEL), 0, -1, &m), NRT_CLOSED);
    EXPECT(nrt_get_vnc_memory_stats(0, &s, sizeof s, NULL), NRT_CLOSED);
    EXPECT(nrt_add_tensor_to_tensor_set(set, "a", dev), NRT_CLOSED);
    EXPECT(nrtx_get_oom_report(NULL, 0, NULL), NRT_CLOSED);
    CHECK(nrt_tensor_get_size(dev) == 0, "size after close");
    nrt_tensor_free(&dev);
    CHECK(dev == NULL, "free after close NULLs the pointer");
    nrt_tensor_free(&sl);
    nrt_destroy_tensor_set(&set); /* sets outlive the runtime; destroying one still works */
    CHECK(set == NULL, "set destroyed after close");
    nrt_close(); /* twice: no-op */
    uint32_t total = 0;
    EXPECT(nrt_get_total_vnc_count(&total), NRT_SUCCESS);
    CHECK(total == (is_trn2 ? 4u : 2u), "total after close");

    /* Init again: a fresh runtime, nothing left from before. */
    EXPECT(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "2.0", NULL), NRT_SUCCESS);
    CHECK(used(0) < MIB, "the new runtime starts empty (%zu)", used(0));
    EXPECT(nrt_tensor_read(virt, b, 0, 16), NRT_INVALID);
    nrt_tensor_t *t = tensor(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "again");
    EXPECT(nrt_tensor_write(t, "again", 0, 6), NRT_SUCCESS);
    /* The new runtime's state block may sit where the old one did; its tensors still must not
     * reuse the old runtime's pointers, or a stale one would reach a live tensor. */
    enum { FRESH = 256 };
    nrt_tensor_t *fresh[FRESH];
    int aliased = 0;
    for (int i = 0; i < FRESH; i++) {
        fresh[i] = NULL;
        EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, 64, "fresh", &fresh[i]),
               NRT_SUCCESS);
        aliased += fresh[i] == old_dev || fresh[i] == virt || fresh[i] == sl;
    }
    CHECK(aliased == 0 && t != old_dev && t != virt && t != sl,
          "%d new tensors got a pointer of the closed runtime", aliased + (t == old_dev));
    nrt_tensor_free(&old_dev); /* stale: a no-op */
    CHECK(nrt_tensor_get_size(t) == 4096, "a stale free leaves the new tensor alone");
    for (int i = 0; i < FRESH; i++)
        nrt_tensor_free(&fresh[i]);
    nrt_model_t *m2 = load("bert-base.json", -1, NRT_SUCCESS);
    EXPECT(nrt_unload(m2), NRT_SUCCESS);
    nrt_tensor_free(&t);
    nrt_close();
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODELS_DIR\n", argv[0]);
        return 2;
    }
    models_dir = argv[1];
    const char *dev = getenv("NRT_DMEM_DEVICE");
    is_trn2 = dev == NULL || *dev == 0 || strstr(dev, "trn2") != NULL;
    printf("nrt_client on %s (NRT_MAJOR_VERSION %d)\n", dev ? dev : "sim:trn2 (default)",
           NRT_MAJOR_VERSION);

    before_init();
    init_and_stats();
    tensors();
    sets();
    models();
    oom_and_manifests();
    extensions();
    bad_input();
    close_and_reinit();

    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
