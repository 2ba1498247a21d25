/*
 * atexit.c -- calls into libnrt.so from an atexit handler, run by tests/tests/c_client.rs.
 *
 * When exit() runs the atexit handlers, the main thread's thread-local storage has already
 * been destroyed (glibc runs the TLS destructors first). A failing call must still return its
 * status there -- not abort the process with a panic that crosses the C ABI -- and
 * nrtx_get_last_error_message() must still return a valid string.
 *
 * usage: atexit [init]    ("init": nrt_init in main, nrt_close in the handler)
 * Prints one line per check; exits 0 only when main returned and every handler check passed.
 */
#include <nrt/nrt.h>
#include <nrt/nrtx.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int with_init;

static void cleanup(void) {
    int failed = 0;
    NRT_STATUS st = nrt_unload(NULL);
    NRT_STATUS want = with_init ? NRT_INVALID : NRT_UNINITIALIZED;
    const char *msg = nrtx_get_last_error_message();
    printf("atexit: nrt_unload(NULL) -> %d, last error: \"%s\"\n", (int)st, msg ? msg : "(null)");
    if (st != want || msg == NULL) {
        failed = 1;
    }
    nrt_tensor_t *t = NULL;
    st = nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_VIRTUAL, -1, 0, "empty", &t);
    printf("atexit: nrt_tensor_allocate(size 0) -> %d\n", (int)st);
    if (st != (with_init ? NRT_INVALID : NRT_UNINITIALIZED) || t != NULL) {
        failed = 1;
    }
    nrt_tensor_free(&t); /* NULL: a no-op */
    if (with_init) {
        nrt_close();
        st = nrt_unload(NULL);
        printf("atexit: nrt_unload(NULL) after nrt_close -> %d\n", (int)st);
        if (st != NRT_CLOSED) {
            failed = 1;
        }
    }
    nrt_close(); /* not initialized (any more): a no-op, logged */
    msg = nrtx_get_last_error_message();
    if (msg == NULL || strlen(msg) > 4096) {
        failed = 1;
    }
    printf("atexit: %s\n", failed ? "FAILED" : "ok");
    fflush(stdout);
    if (failed) {
        _Exit(1);
    }
}

int main(int argc, char **argv) {
    with_init = argc > 1 && strcmp(argv[1], "init") == 0;
    if (atexit(cleanup) != 0) {
        return 2;
    }
    if (with_init && nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "2.0", "") != NRT_SUCCESS) {
        fprintf(stderr, "nrt_init failed: %s\n", nrtx_get_last_error_message());
        return 2;
    }
    /* A failing call in main: the thread-local last error now holds a message (and a
     * destructor that exit() runs before the handlers). */
    NRT_STATUS st = nrt_unload(NULL);
    printf("main: nrt_unload(NULL) -> %d\n", (int)st);
    printf("main: returning\n");
    return 0;
}
