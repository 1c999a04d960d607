/* Shared by the C ABI test programs (compiled and run by tests/c_abi.rs; C, and C++ for
 * cxx.cpp).
 *
 * Every program is built twice: linked with -lnodalloc, and without it (NODALLOC_PRELOADED
 * defined) to run under LD_PRELOAD. The second build must not name nodalloc's extras at link
 * time, so NODALLOC(f) finds them with dlsym; it also proves that the allocator answering malloc
 * really is nodalloc and not glibc.
 *
 * The compiler knows what malloc, calloc and free mean and may fold away an allocation whose
 * result it can see, or a read of calloc'd memory it knows is zero. Sizes, alignments and
 * pointers that must reach the library as written go through opaque_*, and contents are checked
 * in functions the optimiser may not look into (noipa).
 */
#ifndef NODALLOC_TEST_CHECK_H
#define NODALLOC_TEST_CHECK_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/prctl.h>
#include <sys/resource.h>

#include "nodalloc.h"

#ifdef __cplusplus
#include <atomic>
static std::atomic<unsigned long> checks_passed;
#else
static _Atomic unsigned long checks_passed;
#endif

#define CHECK(condition, ...)                                                                  \
    do {                                                                                       \
        if (!(condition)) {                                                                    \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #condition);      \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
            exit(1);                                                                           \
        }                                                                                      \
        checks_passed++;                                                                       \
    } while (0)

/* For a program whose crash or abort is expected: it leaves no core file behind. */
__attribute__((unused)) static void no_core_files(void) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

/* errno after a call that must fail: captured at once, before a CHECK message can change it. */
#define CHECK_FAILS_WITH(expression, expected_errno)                                           \
    do {                                                                                       \
        errno = 0;                                                                             \
        void *failed_result_ = (expression);                                                   \
        int failed_errno_ = errno;                                                             \
        CHECK(failed_result_ == NULL, "%s returned %p, expected NULL", #expression,             \
              failed_result_);                                                                 \
        CHECK(failed_errno_ == (expected_errno), "%s: errno %d (%s), expected %d (%s)",        \
              #expression, failed_errno_, strerror(failed_errno_), (expected_errno),           \
              strerror(expected_errno));                                                       \
    } while (0)

/* One step of a xorshift generator: deterministic sequences for the tests. */
__attribute__((unused)) static unsigned long long next_random(unsigned long long *state) {
    unsigned long long x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return x;
}

#ifdef NODALLOC_PRELOADED
__attribute__((unused)) static void *nodalloc_symbol(const char *name) {
    void *function = dlsym(RTLD_DEFAULT, name);
    if (function == NULL) {
        fprintf(stderr, "%s not found: is libnodalloc.so in LD_PRELOAD?\n", name);
        exit(2);
    }
    return function;
}
#define NODALLOC(name) ((__typeof__(&name))nodalloc_symbol(#name))
#else
#define NODALLOC(name) (name)
#endif

__attribute__((noipa, unused)) static size_t opaque_size(size_t value) { return value; }
__attribute__((noipa, unused)) static void *opaque_pointer(void *value) { return value; }
__attribute__((noipa, unused)) static int opaque_int(int value) { return value; }

__attribute__((unused)) static int is_aligned(const void *pointer, size_t alignment) {
    return ((uintptr_t)pointer & (alignment - 1)) == 0;
}

/* A field of /proc/self/status in KiB (as "VmRSS:"), or -1 when it cannot be read. */
__attribute__((unused)) static long status_kib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    size_t length = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, length))
            sscanf(line + length, " %ld", &kib);
    if (f)
        fclose(f);
    return kib;
}

/* A byte pattern that differs between blocks (seed) and along a block (index), so that two
 * blocks sharing memory, or a copy shifted by some bytes, are both seen. */
__attribute__((unused)) static unsigned char pattern_byte(size_t seed, size_t index) {
    return (unsigned char)((seed * 131 + index * 7 + (index >> 8)) ^ (seed >> 3));
}

__attribute__((noipa, unused)) static void fill(void *block, size_t length, size_t seed) {
    unsigned char *bytes = (unsigned char *)block;
    for (size_t i = 0; i < length; i++) {
        bytes[i] = pattern_byte(seed, i);
    }
}

/* Index of the first byte that does not hold the pattern, or `length` if all do. */
__attribute__((noipa, unused)) static size_t first_mismatch(const void *block, size_t length,
                                                     size_t seed) {
    const unsigned char *bytes = (const unsigned char *)block;
    for (size_t i = 0; i < length; i++) {
        if (bytes[i] != pattern_byte(seed, i)) {
            return i;
        }
    }
    return length;
}

__attribute__((noipa, unused)) static size_t first_nonzero(const void *block, size_t length) {
    const unsigned char *bytes = (const unsigned char *)block;
    for (size_t i = 0; i < length; i++) {
        if (bytes[i] != 0) {
            return i;
        }
    }
    return length;
}

#define CHECK_PATTERN(block, length, seed)                                                     \
    do {                                                                                       \
        size_t mismatch_ = first_mismatch((block), (length), (seed));                          \
        CHECK(mismatch_ == (length), "block %p of %zu bytes (seed %zu) differs at byte %zu",    \
              (void *)(block), (size_t)(length), (size_t)(seed), mismatch_);                   \
    } while (0)

/* Fails unless malloc is nodalloc's: under LD_PRELOAD a silently ignored preload would
 * otherwise test glibc. */
__attribute__((unused)) static void require_nodalloc(void) {
    void *probe = malloc(opaque_size(24));
    CHECK(probe != NULL, "malloc(24) failed");
    int node = NODALLOC(nodalloc_node_of)(probe);
    CHECK(node >= 0, "malloc is not nodalloc's: nodalloc_node_of(malloc(24)) = %d", node);
    free(probe);
}

/* The dynamic symbol whose code holds `address` (programs are built with -rdynamic), or "?". */
__attribute__((unused)) static const char *symbol_of(void *address) {
    Dl_info info;
    if (address == NULL || dladdr(address, &info) == 0 || info.dli_sname == NULL) {
        return "?";
    }
    return info.dli_sname;
}

__attribute__((unused)) static int finish(const char *program) {
    printf("ok %s: %lu checks\n", program, (unsigned long)checks_passed);
    return 0;
}

#endif
