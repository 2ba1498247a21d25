/*
 * An outside C integrator of libnrt.so, only <nrt/nrt.h>. Init, load a model, a DEVICE
 * tensor written and read back, the logical core's memory statistics, free, unload, close;
 * then the state table's answers after close (docs/STATES.md). Usage: trial MODEL_FILE.
 * Prints "trial ok" and exits 0 when every step gave what it should.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nrt/nrt.h>

#define EXPECT(cond)                                                                     \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);          \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)
#define CHECK(call) EXPECT((call) == NRT_SUCCESS)

static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    EXPECT(fseek(f, 0, SEEK_END) == 0);
    long n = ftell(f);
    EXPECT(n > 0 && fseek(f, 0, SEEK_SET) == 0);
    void *buf = malloc((size_t)n);
    EXPECT(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static nrt_vnc_memory_stats_t stats(uint32_t vnc) {
    nrt_vnc_memory_stats_t s;
    size_t out = 0;
    memset(&s, 0, sizeof s);
    CHECK(nrt_get_vnc_memory_stats(vnc, &s, sizeof s, &out));
    EXPECT(out == sizeof s);
    return s;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s MODEL\n", argv[0]); return 2; }
    size_t size = 0;
    void *bytes = read_file(argv[1], &size);

    CHECK(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""));
    EXPECT(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") == NRT_FAILURE); /* already initialised */
    nrt_vnc_memory_stats_t idle = stats(0);

    nrt_model_t *model = NULL;
    CHECK(nrt_load(bytes, size, 0, 1, &model));
    free(bytes);
    nrt_vnc_memory_stats_t loaded = stats(0);
    EXPECT(loaded.bytes_used > idle.bytes_used && loaded.bytes_limit > 0);

    nrt_tensor_t *t = NULL;
    CHECK(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "trial", &t));
    EXPECT(t != NULL && nrt_tensor_get_size(t) == 4096);
    EXPECT(stats(0).bytes_used == loaded.bytes_used + 4096);
    const char msg[] = "hello from C";
    char back[sizeof msg];
    CHECK(nrt_tensor_write(t, msg, 100, sizeof msg));
    CHECK(nrt_tensor_read(t, back, 100, sizeof back));
    EXPECT(memcmp(msg, back, sizeof msg) == 0);
    EXPECT(nrt_tensor_read(t, back, 4090, sizeof back) != NRT_SUCCESS); /* past the end */
    /* A placement that is not DEVICE, HOST or VIRTUAL is the caller's bug. */
    nrt_tensor_t *bad = NULL;
    EXPECT(nrt_tensor_allocate((nrt_tensor_placement_t)7, 0, 64, "bad", &bad) == NRT_INVALID);
    EXPECT(bad == NULL);
    nrt_tensor_free(&t);
    EXPECT(t == NULL);
    EXPECT(stats(0).bytes_used == loaded.bytes_used);

    CHECK(nrt_unload(model));
    EXPECT(stats(0).bytes_used == idle.bytes_used);
    nrt_close();

    /* After close: every call that needs a runtime answers NRT_CLOSED (docs/STATES.md). */
    nrt_vnc_memory_stats_t s;
    size_t out = 0;
    EXPECT(nrt_get_vnc_memory_stats(0, &s, sizeof s, &out) == NRT_CLOSED);
    EXPECT(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "late", &t) == NRT_CLOSED);
    EXPECT(nrt_tensor_allocate((nrt_tensor_placement_t)7, 0, 64, "late", &t) == NRT_CLOSED);
    printf("trial ok: model %zu B, idle %zu B\n", loaded.bytes_used - idle.bytes_used,
           idle.bytes_used);
    return 0;
}
