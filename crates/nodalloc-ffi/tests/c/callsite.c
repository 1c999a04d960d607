/* Call-site partitions (NODALLOC_CALLSITE): every allocating entry point names its caller.
 * The calling functions are global: dladdr only names symbols of the dynamic table.
 *
 * Usage: callsite DEPTH (1 or 2, as NODALLOC_CALLSITE_DEPTH is set), callsite off (the mode
 * is off), or callsite loose (against a debug build of the library, whose unoptimised entry
 * points keep stack frames and so cannot read their caller: every block must still have a
 * partition, and the hostile frames must still be survived). Built with frame pointers and
 * -rdynamic (so dladdr names this program's functions).
 *
 * At depth 1, for each entry point, two functions call it; their blocks must land in two
 * partitions, and each partition's recorded call site must lie in the function that called.
 * Then a wrapper
 * (xmalloc) called from two functions: at depth 1 both blocks share the wrapper's partition,
 * at depth 2 each lands in its caller's. Last, malloc is called with hostile frame pointers
 * (misaligned, far above the stack, a frame that points to itself): the depth walk must not
 * fault or loop.
 */
#include "check.h"

#define SITE(name, call)                                                                       \
    __attribute__((noinline, noipa)) void *name##_a(void) {                             \
        void *p = (call);                                                                      \
        __asm__ volatile("" ::: "memory");                                                     \
        return p;                                                                              \
    }                                                                                          \
    __attribute__((noinline, noipa)) void *name##_b(void) {                             \
        void *p = (call);                                                                      \
        __asm__ volatile("" ::: "memory");                                                     \
        return p;                                                                              \
    }

/* Each site's block is kept live: frees are not what is checked. */
SITE(site_malloc, malloc(opaque_size(40)))
SITE(site_calloc, calloc(opaque_size(3), 24))
SITE(site_realloc_null, realloc(NULL, opaque_size(72)))
SITE(site_realloc_move, realloc(malloc(opaque_size(16)), opaque_size(3000)))
SITE(site_reallocarray, reallocarray(NULL, opaque_size(5), 40))
SITE(site_aligned_alloc, aligned_alloc(64, opaque_size(192)))
SITE(site_memalign, memalign(128, opaque_size(256)))
SITE(site_valloc, valloc(opaque_size(100)))
SITE(site_medium, malloc(opaque_size(12000)))

/* posix_memalign is called by a helper: its callers are the helper. */
__attribute__((noinline, noipa)) void *site_posix_memalign_a(void) {
    void *p = NULL;
    int error = posix_memalign(&p, 64, opaque_size(100));
    __asm__ volatile("" ::: "memory");
    return error == 0 ? p : NULL;
}
__attribute__((noinline, noipa)) void *site_posix_memalign_b(void) {
    void *p = NULL;
    int error = posix_memalign(&p, 64, opaque_size(100));
    __asm__ volatile("" ::: "memory");
    return error == 0 ? p : NULL;
}

/* `p`'s partition must have been recorded as called from the function named `caller`. */
static int loose;

static int check_site(const char *entry, void *p, const char *caller) {
    int partition = NODALLOC(nodalloc_partition_of)(p);
    CHECK(partition >= 0, "%s from %s: block %p has no partition", entry, caller, p);
    if (loose) {
        return -1 - (int)(uintptr_t)caller[strlen(caller) - 1];
    }
    const char *symbol = symbol_of(NODALLOC(nodalloc_partition_site)(partition));
    CHECK(strcmp(symbol, caller) == 0, "%s from %s: partition %d was recorded from %s", entry,
          caller, partition, symbol);
    return partition;
}

#define CHECK_ENTRY(name)                                                                      \
    do {                                                                                       \
        void *a = name##_a(), *b = name##_b();                                                 \
        CHECK(a != NULL && b != NULL, "%s failed", #name);                                     \
        int pa = check_site(#name, a, #name "_a");                                             \
        int pb = check_site(#name, b, #name "_b");                                             \
        CHECK(pa != pb, "%s: both callers share partition %d", #name, pa);                      \
    } while (0)

/* A wrapper with a frame pointer that does not tail-call malloc. */
__attribute__((noinline, noipa)) void *xmalloc(size_t size) {
    void *p = malloc(size);
    if (p == NULL) {
        abort();
    }
    __asm__ volatile("" ::: "memory");
    return p;
}
SITE(wrapped, xmalloc(opaque_size(56)))

/* Calls malloc with `frame` in rbp, as a caller without frame pointers may leave it. */
__attribute__((noinline, noipa)) void *malloc_with_frame(size_t size, uintptr_t frame) {
    void *result;
    /* Past the red zone, 16-aligned for the call, rbp saved twice (to keep the alignment). */
    __asm__ volatile("mov %%rsp, %%r12\n\t"
                     "sub $128, %%rsp\n\t"
                     "and $-16, %%rsp\n\t"
                     "push %%rbp\n\t"
                     "push %%rbp\n\t"
                     "mov %2, %%rbp\n\t"
                     "call malloc@PLT\n\t"
                     "pop %%rbp\n\t"
                     "pop %%rbp\n\t"
                     "mov %%r12, %%rsp\n\t"
                     : "=a"(result), "+D"(size)
                     : "r"(frame)
                     : "rcx", "rdx", "rsi", "r8", "r9", "r10", "r11", "r12", "xmm0", "xmm1",
                       "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                       "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
    return result;
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: callsite 1|2|off|loose");
    require_nodalloc();
    if (strcmp(argv[1], "off") == 0) {
        void *p = malloc(opaque_size(40));
        CHECK(NODALLOC(nodalloc_partition_of)(p) == -1, "partitions are off");
        free(p);
        /* Without partitions a block freed by one call site is the next one another gets (the
         * reuse that the partitioned run below must not show). */
        void *x = site_malloc_a();
        uintptr_t freed = (uintptr_t)x;
        free(x);
        void *y = site_malloc_b();
        CHECK((uintptr_t)y == freed, "mode off: the freed block %#lx was not reused (got %p)",
              (unsigned long)freed, y);
        free(y);
        return finish("callsite");
    }
    loose = strcmp(argv[1], "loose") == 0;
    int depth = loose ? 2 : atoi(argv[1]);
    if (depth == 2 && !loose) {
        /* At depth 2 an entry called straight from a function is named by that function's
         * caller (main), so only the wrapper is checked below. */
        goto wrapper;
    }
    CHECK_ENTRY(site_malloc);
    CHECK_ENTRY(site_calloc);
    CHECK_ENTRY(site_realloc_null);
    CHECK_ENTRY(site_realloc_move);
    CHECK_ENTRY(site_reallocarray);
    CHECK_ENTRY(site_posix_memalign);
    CHECK_ENTRY(site_aligned_alloc);
    CHECK_ENTRY(site_memalign);
    CHECK_ENTRY(site_valloc);
    CHECK_ENTRY(site_medium);

    /* A block freed by one call site is never handed to another (a dangling pointer of one
     * kind of object cannot come to alias a new object of another kind). */
    for (int i = 0; i < 1000 && !loose; i++) {
        void *x = site_malloc_a();
        uintptr_t freed = (uintptr_t)x;
        free(x);
        void *y = site_malloc_b();
        CHECK((uintptr_t)y != freed, "the block %#lx freed by site_malloc_a went to site_malloc_b",
              (unsigned long)freed);
        free(y);
    }

wrapper:;
    void *a = wrapped_a(), *b = wrapped_b();
    int pa = NODALLOC(nodalloc_partition_of)(a), pb = NODALLOC(nodalloc_partition_of)(b);
    if (loose) {
        CHECK(pa >= 0 && pb >= 0, "wrapped blocks without partitions");
    } else if (depth == 1) {
        CHECK(pa == pb, "depth 1: the wrapper's callers share its partition (%d, %d)", pa, pb);
        check_site("xmalloc", a, "xmalloc");
    } else {
        check_site("xmalloc", a, "wrapped_a");
        check_site("xmalloc", b, "wrapped_b");
    }

    /* Hostile frame pointers: the walk must stop, not fault or loop. */
    uintptr_t here = (uintptr_t)&argc;
    uintptr_t loop[2];
    loop[0] = (uintptr_t)&loop[0];
    loop[1] = 0x1234;
    uintptr_t frames[] = {0, 1, here + 3, here + ((uintptr_t)1 << 40), (uintptr_t)&loop[0],
                          UINTPTR_MAX - 7};
    for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++) {
        void *p = malloc_with_frame(opaque_size(24), frames[i]);
        CHECK(p != NULL, "malloc with frame %#lx failed", (unsigned long)frames[i]);
        free(p);
    }
    __asm__ volatile("" : : "r"(loop) : "memory");
    return finish("callsite");
}
