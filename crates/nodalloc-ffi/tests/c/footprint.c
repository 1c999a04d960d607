/* The whole footprint of a small program: a few blocks of the commonest sizes, one thread,
 * then a third of a second idle while the maintenance thread makes its passes. Prints
 * "footprint hwm_kib=N code_kib=N libm=0|1 libgcc=0|1 thread_stack_kib=N" (the peak resident
 * set from /proc/self/status, the resident memory of libnodalloc's code at the end, whether
 * libm and libgcc_s are mapped: the program itself links neither, and the resident pages of
 * the thread's stack once it has allocated and freed a block) and "ok footprint: N checks".
 * Run under LD_PRELOAD and without it (glibc) by tests/c_abi/sparse.rs, which bounds the
 * difference: what a process pays for loading nodalloc at all. */
#include "check.h"

#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

/* The resident pages of the calling thread's stack, in KiB (mincore over its mapping). */
static long own_stack_kib(void) {
    pthread_attr_t attributes;
    void *low;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &attributes) != 0)
        return -1;
    int got = pthread_attr_getstack(&attributes, &low, &size);
    pthread_attr_destroy(&attributes);
    static unsigned char resident[1 << 16];
    size_t pages = size / 4096;
    if (got != 0 || pages > sizeof resident || mincore(low, size, resident) != 0)
        return -1;
    long kib = 0;
    for (size_t i = 0; i < pages; i++)
        kib += (resident[i] & 1) * 4;
    return kib;
}

static long thread_stack_kib = -1;

/* Whether a library whose file name starts with `name` (as "/libm." or "/libm-") is mapped. */
static int maps_library(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    char dot[64], dash[64];
    snprintf(dot, sizeof dot, "/%s.", name);
    snprintf(dash, sizeof dash, "/%s-", name);
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, dot) || strstr(line, dash))
            found = 1;
    if (f)
        fclose(f);
    return found;
}

static void *worker(void *argument) {
    unsigned char *block = malloc(opaque_size(100));
    CHECK(block != NULL, "malloc(100) on a thread");
    fill(block, 100, 7);
    CHECK(first_mismatch(block, 100, 7) == 100, "a thread's block keeps its bytes");
    free(block);
    thread_stack_kib = own_stack_kib();
    return argument;
}

/* The resident memory of the code of libnodalloc (its executable mappings), in KiB: 0 when it is
 * not loaded. */
static long library_code_kib(void) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int code = 0;
    long kib = 0;
    while (f && fgets(line, sizeof line, f)) {
        char permissions[8];
        if (sscanf(line, "%*x-%*x %7s", permissions) == 1 && strchr(line, '/'))
            code = permissions[2] == 'x' && strstr(line, "libnodalloc") != NULL;
        else if (code && !strncmp(line, "Rss:", 4))
            kib += atol(line + 4);
    }
    if (f)
        fclose(f);
    return kib;
}

int main(void) {
    static const size_t sizes[] = {16, 64, 100, 500, 4096};
    void *blocks[5];
    for (int i = 0; i < 5; i++) {
        blocks[i] = malloc(opaque_size(sizes[i]));
        CHECK(blocks[i] != NULL, "malloc(%zu)", sizes[i]);
        fill(blocks[i], sizes[i], (size_t)i);
    }
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, worker, NULL) == 0, "pthread_create");
    CHECK(pthread_join(thread, NULL) == 0, "pthread_join");
    struct timespec third = {0, 350 * 1000 * 1000};
    nanosleep(&third, NULL);
    for (int i = 0; i < 5; i++) {
        CHECK(first_mismatch(blocks[i], sizes[i], (size_t)i) == sizes[i], "block %d intact", i);
        free(blocks[i]);
    }
    long hwm = status_kib("VmHWM:");
    CHECK(hwm > 0, "VmHWM read");
    CHECK(thread_stack_kib > 0, "the thread's stack measured");
    printf("footprint hwm_kib=%ld code_kib=%ld libm=%d libgcc=%d thread_stack_kib=%ld\n", hwm,
           library_code_kib(), maps_library("libm"), maps_library("libgcc_s"), thread_stack_kib);
    printf("ok footprint: %lu checks\n", checks_passed);
    return 0;
}
