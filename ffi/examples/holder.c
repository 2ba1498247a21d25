/*
 * A process that holds device memory and waits: what `nrt-dmem inspect` is pointed at
 * (docs/INSPECT.md). Usage: holder VNC:MODEL_FILE...
 *
 * Loads each model on its logical core, allocates two device tensors on every visible logical
 * core (the first holds a 32-byte marker, 512 KiB in, that is nowhere in host memory), then
 * prints what it holds as the C API reports it:
 *
 *   model <vnc> <allocations> <bytes> <device bytes>     one line per model, in load order
 *   vnc <vnc> <bytes_used>                               nrt_get_vnc_memory_stats per core
 *   total <sum of bytes_used>
 *   ready <pid>
 *
 * and waits for a line on stdin (with HOLDER_CHURN set, allocating and freeing a tensor on
 * logical core 0 all the while). Then it frees everything, closes the runtime (tdrv_ctx_0
 * goes NULL), prints "closed" and waits for a second line (or end of input) before it exits.
 */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <nrt/nrt.h>
#include <nrt/nrtx.h>

#define MAX_MODELS 8

static void die(const char *what, NRT_STATUS st) {
    fprintf(stderr, "holder: %s failed: %d (%s)\n", what, (int)st, nrtx_get_last_error_message());
    exit(1);
}

static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    if (fseek(f, 0, SEEK_END) != 0) { perror(path); exit(1); }
    long n = ftell(f);
    if (n <= 0 || fseek(f, 0, SEEK_SET) != 0) { fprintf(stderr, "%s: empty\n", path); exit(1); }
    void *buf = malloc((size_t)n);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) { perror(path); exit(1); }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void wait_line(void) {
    int c;
    do { c = getchar(); } while (c != EOF && c != '\n');
}

int main(int argc, char **argv) {
    if (argc < 2 || argc - 1 > MAX_MODELS) {
        fprintf(stderr, "usage: %s VNC:MODEL_FILE... (at most %d)\n", argv[0], MAX_MODELS);
        return 2;
    }
    NRT_STATUS st = nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "");
    if (st != NRT_SUCCESS) die("nrt_init", st);

    nrt_model_t *models[MAX_MODELS];
    int nmodels = 0;
    for (int i = 1; i < argc; i++) {
        char *colon = NULL;
        long vnc = strtol(argv[i], &colon, 10);
        if (!colon || *colon != ':') { fprintf(stderr, "bad argument %s\n", argv[i]); return 2; }
        size_t size = 0;
        void *bytes = read_file(colon + 1, &size);
        st = nrt_load(bytes, size, (int32_t)vnc, 1, &models[nmodels]);
        free(bytes);
        if (st != NRT_SUCCESS) die(colon + 1, st);
        nmodels++;
    }

    uint32_t vncs = 0;
    st = nrt_get_visible_vnc_count(&vncs);
    if (st != NRT_SUCCESS) die("nrt_get_visible_vnc_count", st);
    nrt_tensor_t **tensors = calloc(2u * vncs, sizeof *tensors);
    if (!tensors) return 1;
    for (uint32_t v = 0; v < vncs; v++) {
        st = nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, (int)v, 1u << 20, "held_input",
                                 &tensors[2 * v]);
        if (st != NRT_SUCCESS) die("nrt_tensor_allocate", st);
        st = nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, (int)v, 3000 + v, "held_output",
                                 &tensors[2 * v + 1]);
        if (st != NRT_SUCCESS) die("nrt_tensor_allocate", st);
    }

    /* A marker in device memory, 512 KiB into the first tensor: made at run time and wiped
     * from host memory after the write, so a core dump holds it only if it holds the
     * simulated device memory. */
    unsigned char marker[32], back[32];
    for (int i = 0; i < 32; i++) marker[i] = (unsigned char)(0xA5 ^ (i * 29 + 7));
    st = nrt_tensor_write(tensors[0], marker, 512u << 10, sizeof marker);
    if (st != NRT_SUCCESS) die("nrt_tensor_write", st);
    st = nrt_tensor_read(tensors[0], back, 512u << 10, sizeof back);
    if (st != NRT_SUCCESS) die("nrt_tensor_read", st);
    int same = 1;
    for (int i = 0; i < 32; i++) same &= back[i] == marker[i];
    if (!same) { fprintf(stderr, "holder: the marker did not read back\n"); return 1; }
    for (int i = 0; i < 32; i++) ((volatile unsigned char *)marker)[i] = ((volatile unsigned char *)back)[i] = 0;

    for (int i = 0; i < nmodels; i++) {
        nrtx_model_memory_t mm;
        st = nrtx_get_model_memory(models[i], &mm, sizeof mm, NULL);
        if (st != NRT_SUCCESS) die("nrtx_get_model_memory", st);
        printf("model %u %llu %llu %llu\n", mm.vnc, (unsigned long long)mm.allocations,
               (unsigned long long)mm.bytes,
               (unsigned long long)mm.device_by_usage[NRTX_USAGE_TOTAL]);
    }
    unsigned long long total = 0;
    for (uint32_t v = 0; v < vncs; v++) {
        nrt_vnc_memory_stats_t s;
        st = nrt_get_vnc_memory_stats(v, &s, sizeof s, NULL);
        if (st != NRT_SUCCESS) die("nrt_get_vnc_memory_stats", st);
        printf("vnc %u %llu\n", v, (unsigned long long)s.bytes_used);
        total += s.bytes_used;
    }
    printf("total %llu\nready %ld\n", total, (long)getpid());
    fflush(stdout);
    if (getenv("HOLDER_CHURN")) {
        /* Allocate and free a tensor on logical core 0 over and over until stdin has a line:
         * a process whose lists and ledger change while it is read. */
        struct pollfd in = {0, POLLIN, 0};
        while (poll(&in, 1, 0) == 0) {
            nrt_tensor_t *t = NULL;
            if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "churn", &t) ==
                NRT_SUCCESS)
                nrt_tensor_free(&t);
        }
    }
    wait_line();

    for (uint32_t v = 0; v < 2u * vncs; v++) nrt_tensor_free(&tensors[v]);
    free(tensors);
    for (int i = 0; i < nmodels; i++) {
        st = nrt_unload(models[i]);
        if (st != NRT_SUCCESS) die("nrt_unload", st);
    }
    nrt_close();
    printf("closed\n");
    fflush(stdout);
    wait_line();
    return 0;
}
