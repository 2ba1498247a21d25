/*
 * The Neuron documentation's application flow, written only against the public SDK headers
 * (<nrt/nrt.h>, <nrt/nrt_experimental.h>, <nrt/nrt_version.h>): init -> load ->
 * nrt_get_model_tensor_info -> one tensor per input/output in two sets -> write -> execute ->
 * read -> free -> unload -> close. Then the new calls' bad inputs. Usage: doc_flow MODEL_FILE.
 * Exits 0 and prints "doc_flow ok" when every step succeeds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nrt/nrt.h>
#include <nrt/nrt_experimental.h>
#include <nrt/nrt_version.h>

_Static_assert(sizeof(nrt_tensor_info_t) == 296, "nrt_tensor_info_t");
_Static_assert(sizeof(nrt_version_t) == 224, "nrt_version_t");
_Static_assert(sizeof(nrt_instance_info_t) == 32, "nrt_instance_info_t");
_Static_assert(NRT_DTYPE_FLOAT32 == 10 && NRT_DTYPE_BFLOAT16 == 6, "nrt_dtype_t");
_Static_assert(NRT_TENSOR_USAGE_OUTPUT == 1, "nrt_tensor_usage_t");

#define CHECK(call)                                                                      \
    do {                                                                                 \
        NRT_STATUS st_ = (call);                                                         \
        if (st_ != NRT_SUCCESS) {                                                        \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, (int)st_); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)
#define EXPECT(cond)                                                                     \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);          \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n);
    EXPECT(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s MODEL\n", argv[0]); return 2; }
    size_t neff_size = 0;
    void *neff = read_file(argv[1], &neff_size);

    CHECK(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""));
    nrt_model_t *model = NULL;
    CHECK(nrt_load(neff, neff_size, -1, -1, &model));
    nrt_model_info_t minfo;
    size_t minfo_size = 0;
    CHECK(nrt_get_model_info(model, &minfo, sizeof minfo, &minfo_size));
    EXPECT(minfo_size == sizeof minfo);

    nrt_tensor_info_array_t *info = NULL;
    CHECK(nrt_get_model_tensor_info(model, &info));
    nrt_tensor_set_t *sets[2] = {NULL, NULL}; /* [NRT_TENSOR_USAGE_INPUT], [.._OUTPUT] */
    CHECK(nrt_allocate_tensor_set(&sets[0]));
    CHECK(nrt_allocate_tensor_set(&sets[1]));
    nrt_tensor_t **tensors = calloc(info->tensor_count + 1, sizeof *tensors);
    for (uint64_t i = 0; i < info->tensor_count; i++) {
        const nrt_tensor_info_t *t = &info->tensor_array[i];
        size_t elems = 1;
        for (uint32_t d = 0; d < t->ndim; d++) elems *= t->shape[d];
        EXPECT(t->ndim >= 1 && elems > 0 && t->size % elems == 0);
        CHECK(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, (int)minfo.vnc, t->size, t->name,
                                  &tensors[i]));
        CHECK(nrt_add_tensor_to_tensor_set(sets[t->usage], t->name, tensors[i]));
        if (t->usage == NRT_TENSOR_USAGE_INPUT) {
            unsigned char *data = malloc(t->size);
            for (size_t b = 0; b < t->size; b++) data[b] = (unsigned char)(b * 7 + i);
            CHECK(nrt_tensor_write(tensors[i], data, 0, t->size));
            free(data);
        }
    }
    CHECK(nrt_execute(model, sets[0], sets[1]));
    for (uint64_t i = 0; i < info->tensor_count; i++) {
        const nrt_tensor_info_t *t = &info->tensor_array[i];
        if (t->usage != NRT_TENSOR_USAGE_OUTPUT) continue;
        void *out = malloc(t->size);
        CHECK(nrt_tensor_read(tensors[i], out, 0, t->size));
        free(out);
    }
    for (uint64_t i = 0; i < info->tensor_count; i++) nrt_tensor_free(&tensors[i]);
    free(tensors);
    nrt_destroy_tensor_set(&sets[0]);
    nrt_destroy_tensor_set(&sets[1]);
    printf("%s: %llu tensors\n", argv[1], (unsigned long long)info->tensor_count);
    CHECK(nrt_free_model_tensor_info(info));

    /* Bad inputs of the new calls. */
    EXPECT(nrt_free_model_tensor_info(NULL) == NRT_SUCCESS);
    EXPECT(nrt_get_model_tensor_info(model, NULL) == NRT_INVALID);
    EXPECT(nrt_get_model_tensor_info(NULL, &info) == NRT_INVALID);
    EXPECT(nrt_get_model_info(model, NULL, sizeof minfo, NULL) == NRT_INVALID);
    uint32_t n = 0;
    EXPECT(nrt_get_model_vnc_count(model, NULL) == NRT_INVALID);
    CHECK(nrt_get_model_nc_count(model, &n));
    EXPECT(n == 1);
    CHECK(nrt_unload(model));
    info = NULL;
    EXPECT(nrt_get_model_tensor_info(model, &info) == NRT_INVALID_HANDLE && info == NULL);
    EXPECT(nrt_get_model_info(model, &minfo, sizeof minfo, NULL) == NRT_INVALID_HANDLE);
    EXPECT(nrt_get_model_instance_count(model, &n) == NRT_INVALID_HANDLE);
    EXPECT(nrt_execute_repeat(model, NULL, NULL, 1) == NRT_INVALID_HANDLE);

    nrt_version_t ver;
    memset(&ver, 0xEE, sizeof ver);
    EXPECT(nrt_get_version(NULL, sizeof ver) == NRT_INVALID);
    CHECK(nrt_get_version(&ver, 16)); /* a short buffer: only its prefix is written */
    EXPECT(ver.rt_major == 2 && ver.rt_minor == 31 && ver.rt_patch == 0xEEEEEEEEEEEEEEEEull);
    CHECK(nrt_get_version(&ver, sizeof ver));
    EXPECT(strncmp(ver.rt_detail, "nrt-dmem ", 9) == 0);
    nrt_instance_info_t inst;
    EXPECT(nrt_get_instance_info(NULL, sizeof inst) == NRT_INVALID);
    CHECK(nrt_get_instance_info(&inst, sizeof inst));
    EXPECT(inst.family == NRT_INSTANCE_TRN2 && strcmp(inst.arch_name, "trn2") == 0);
    uint32_t total = 0, total_v = 0;
    CHECK(nrt_get_total_nc_count(&total));
    CHECK(nrt_get_total_vnc_count(&total_v));
    EXPECT(total == total_v && total > 0);
    EXPECT(nrt_get_visible_nc_count(NULL) == NRT_INVALID);
    EXPECT(nrt_tensor_read_batch(NULL, 1, false) == NRT_INVALID);
    EXPECT(nrt_tensor_write_batch(NULL, 0, false) == NRT_SUCCESS);
    EXPECT(nrt_load_collectives(neff, neff_size, -1, -1, 0, 2, &model) == NRT_FAILURE);
    EXPECT(nrt_load_collectives(neff, neff_size, -1, -1, 3, 2, &model) == NRT_INVALID);
    CHECK(nrt_load_collectives(neff, neff_size, -1, -1, 0, 1, &model));
    CHECK(nrt_unload(model));
    EXPECT(nrt_trace_start(false) == NRT_FAILURE);
    nrt_close();
    free(neff);
    printf("doc_flow ok\n");
    return 0;
}
