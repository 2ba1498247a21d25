/*
 * dropin.c -- the drop-in claim: a program that includes only <nrt/nrt.h> and links with
 * -lnrt, exactly as it would against AWS's libnrt, builds and runs on nrt-dmem's library
 * (simulated device). Valid C and C++. It uses nothing libnrt 2.31 does not export (no
 * nrt_get_status_as_str, which its nrt_status.h declares but the library does not export).
 */
#include <nrt/nrt.h>

#include <stdio.h>
#include <string.h>

int main(void) {
    NRT_STATUS st = nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "");
    if (st != NRT_SUCCESS) {
        fprintf(stderr, "nrt_init: status %d\n", (int)st);
        return 1;
    }
    uint32_t n = 0;
    nrt_get_visible_vnc_count(&n);
    nrt_tensor_t *t = NULL;
    st = nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 1024, "dropin", &t);
    char out[6] = {0};
    if (st == NRT_SUCCESS)
        st = nrt_tensor_write(t, "hello", 0, 6);
    if (st == NRT_SUCCESS)
        st = nrt_tensor_read(t, out, 0, 6);
    nrt_vnc_memory_stats_t s;
    size_t sz = 0;
    if (st == NRT_SUCCESS)
        st = nrt_get_vnc_memory_stats(0, &s, sizeof s, &sz);
    nrt_tensor_free(&t);
    nrt_close();
    if (st != NRT_SUCCESS || strcmp(out, "hello") != 0 || t != NULL) {
        fprintf(stderr, "dropin failed: status %d\n", (int)st);
        return 1;
    }
    printf("dropin: %u logical cores, %zu of %zu bytes used, round trip ok\n", n, s.bytes_used,
           s.bytes_limit);
    return 0;
}
