/* Clang's allocation tokens (-fsanitize=alloc-token): the `__alloc_token_*` family, called here
 * by hand as Clang's instrumentation calls it (the token last), so any compiler builds the test;
 * a program built by Clang 22 itself is tests/c/tokens_clang.c.
 *
 * Usage: tokens on|loose|off. `on` (a release library, NODALLOC_CALLSITE set): for every entry
 * point, two functions calling it with one token get one partition, recorded as that token;
 * with the fallback token 0 the partition is the caller's, recorded from its return address
 * (as for the plain function). `loose` (a debug build, whose entry points keep stack
 * frames and so cannot read their caller): the token checks alone. `off` (partitions off):
 * blocks have no partition. Every mode checks each entry's contract: alignment, zeroed calloc,
 * contents kept by realloc, glibc's errors, the block freed by the usual path.
 */
#include <new>

#include "check.h"

typedef void *(*Malloc)(size_t, size_t);
typedef void *(*Calloc)(size_t, size_t, size_t);
typedef void *(*Realloc)(void *, size_t, size_t);
typedef void *(*Reallocarray)(void *, size_t, size_t, size_t);
typedef void *(*AlignedAlloc)(size_t, size_t, size_t);
typedef int (*PosixMemalign)(void **, size_t, size_t, size_t);
typedef void *(*NewNothrow)(size_t, const std::nothrow_t &, size_t);
typedef void *(*NewAligned)(size_t, size_t, size_t);
typedef void *(*NewAlignedNothrow)(size_t, size_t, const std::nothrow_t &, size_t);
typedef void *(*NewHint)(size_t, uint8_t, size_t);
typedef void *(*NewNothrowHint)(size_t, const std::nothrow_t &, uint8_t, size_t);
typedef void *(*NewAlignedHint)(size_t, size_t, uint8_t, size_t);
typedef void *(*NewAlignedNothrowHint)(size_t, size_t, const std::nothrow_t &, uint8_t, size_t);

/* The symbols by name (no header declares them: Clang's instrumentation emits the calls). */
static void *token_symbol(const char *name) {
    void *function = dlsym(RTLD_DEFAULT, name);
    if (function == NULL) {
        fprintf(stderr, "%s not found: is this nodalloc?\n", name);
        exit(2);
    }
    return function;
}
#define TOKEN_FN(type, name) ((type)token_symbol("__alloc_token_" name))

/* One entry point, called as `call(token)`: a block of at least `size` bytes at `align`
 * (`zeroed`: calloc's), or null. */
struct Entry {
    const char *name;
    size_t size, align;
    bool zeroed;
    void *(*call)(size_t token);
};

static std::nothrow_t const &nothrow = std::nothrow;

static void *call_malloc(size_t t) { return TOKEN_FN(Malloc, "malloc")(opaque_size(40), t); }
static void *call_calloc(size_t t) { return TOKEN_FN(Calloc, "calloc")(opaque_size(3), 24, t); }
static void *call_realloc(size_t t) {
    return TOKEN_FN(Realloc, "realloc")(NULL, opaque_size(72), t);
}
static void *call_reallocarray(size_t t) {
    return TOKEN_FN(Reallocarray, "reallocarray")(NULL, opaque_size(5), 40, t);
}
static void *call_aligned_alloc(size_t t) {
    return TOKEN_FN(AlignedAlloc, "aligned_alloc")(64, opaque_size(192), t);
}
static void *call_memalign(size_t t) {
    return TOKEN_FN(AlignedAlloc, "memalign")(128, opaque_size(256), t);
}
static void *call_valloc(size_t t) { return TOKEN_FN(Malloc, "valloc")(opaque_size(100), t); }
static void *call_pvalloc(size_t t) { return TOKEN_FN(Malloc, "pvalloc")(opaque_size(100), t); }
static void *call_posix_memalign(size_t t) {
    void *p = NULL;
    int error = TOKEN_FN(PosixMemalign, "posix_memalign")(&p, 64, opaque_size(100), t);
    return error == 0 ? p : NULL;
}
static void *call_new(size_t t) { return TOKEN_FN(Malloc, "_Znwm")(opaque_size(48), t); }
static void *call_new_array(size_t t) { return TOKEN_FN(Malloc, "_Znam")(opaque_size(56), t); }
static void *call_new_nothrow(size_t t) {
    return TOKEN_FN(NewNothrow, "_ZnwmRKSt9nothrow_t")(opaque_size(64), nothrow, t);
}
static void *call_new_array_nothrow(size_t t) {
    return TOKEN_FN(NewNothrow, "_ZnamRKSt9nothrow_t")(opaque_size(80), nothrow, t);
}
static void *call_new_aligned(size_t t) {
    return TOKEN_FN(NewAligned, "_ZnwmSt11align_val_t")(opaque_size(96), 64, t);
}
static void *call_new_array_aligned(size_t t) {
    return TOKEN_FN(NewAligned, "_ZnamSt11align_val_t")(opaque_size(112), 128, t);
}
static void *call_new_aligned_nothrow(size_t t) {
    return TOKEN_FN(NewAlignedNothrow, "_ZnwmSt11align_val_tRKSt9nothrow_t")(opaque_size(120),
                                                                           64, nothrow, t);
}
static void *call_new_array_aligned_nothrow(size_t t) {
    return TOKEN_FN(NewAlignedNothrow, "_ZnamSt11align_val_tRKSt9nothrow_t")(opaque_size(136),
                                                                           256, nothrow, t);
}
/* Hot hints (255): the block is as the token form without the hint. */
static void *call_new_hot(size_t t) {
    return TOKEN_FN(NewHint, "_Znwm12__hot_cold_t")(opaque_size(48), 255, t);
}
static void *call_new_array_hot(size_t t) {
    return TOKEN_FN(NewHint, "_Znam12__hot_cold_t")(opaque_size(56), 255, t);
}
static void *call_new_nothrow_hot(size_t t) {
    return TOKEN_FN(NewNothrowHint, "_ZnwmRKSt9nothrow_t12__hot_cold_t")(opaque_size(64),
                                                                         nothrow, 200, t);
}
static void *call_new_array_nothrow_hot(size_t t) {
    return TOKEN_FN(NewNothrowHint, "_ZnamRKSt9nothrow_t12__hot_cold_t")(opaque_size(80),
                                                                         nothrow, 128, t);
}
static void *call_new_aligned_hot(size_t t) {
    return TOKEN_FN(NewAlignedHint, "_ZnwmSt11align_val_t12__hot_cold_t")(opaque_size(96), 64,
                                                                          255, t);
}
static void *call_new_array_aligned_hot(size_t t) {
    return TOKEN_FN(NewAlignedHint, "_ZnamSt11align_val_t12__hot_cold_t")(opaque_size(112), 128,
                                                                          255, t);
}
static void *call_new_aligned_nothrow_hot(size_t t) {
    return TOKEN_FN(NewAlignedNothrowHint,
                    "_ZnwmSt11align_val_tRKSt9nothrow_t12__hot_cold_t")(opaque_size(120), 64,
                                                                        nothrow, 255, t);
}
static void *call_new_array_aligned_nothrow_hot(size_t t) {
    return TOKEN_FN(NewAlignedNothrowHint,
                    "_ZnamSt11align_val_tRKSt9nothrow_t12__hot_cold_t")(opaque_size(136), 256,
                                                                        nothrow, 255, t);
}

static const Entry entries[] = {
    {"malloc", 40, 16, false, call_malloc},
    {"calloc", 72, 16, true, call_calloc},
    {"realloc", 72, 16, false, call_realloc},
    {"reallocarray", 200, 16, false, call_reallocarray},
    {"aligned_alloc", 192, 64, false, call_aligned_alloc},
    {"memalign", 256, 128, false, call_memalign},
    {"valloc", 100, 4096, false, call_valloc},
    {"pvalloc", 4096, 4096, false, call_pvalloc},
    {"posix_memalign", 100, 64, false, call_posix_memalign},
    {"_Znwm", 48, 16, false, call_new},
    {"_Znam", 56, 16, false, call_new_array},
    {"_ZnwmRKSt9nothrow_t", 64, 16, false, call_new_nothrow},
    {"_ZnamRKSt9nothrow_t", 80, 16, false, call_new_array_nothrow},
    {"_ZnwmSt11align_val_t", 96, 64, false, call_new_aligned},
    {"_ZnamSt11align_val_t", 112, 128, false, call_new_array_aligned},
    {"_ZnwmSt11align_val_tRKSt9nothrow_t", 120, 64, false, call_new_aligned_nothrow},
    {"_ZnamSt11align_val_tRKSt9nothrow_t", 136, 256, false, call_new_array_aligned_nothrow},
    {"_Znwm12__hot_cold_t", 48, 16, false, call_new_hot},
    {"_Znam12__hot_cold_t", 56, 16, false, call_new_array_hot},
    {"_ZnwmRKSt9nothrow_t12__hot_cold_t", 64, 16, false, call_new_nothrow_hot},
    {"_ZnamRKSt9nothrow_t12__hot_cold_t", 80, 16, false, call_new_array_nothrow_hot},
    {"_ZnwmSt11align_val_t12__hot_cold_t", 96, 64, false, call_new_aligned_hot},
    {"_ZnamSt11align_val_t12__hot_cold_t", 112, 128, false, call_new_array_aligned_hot},
    {"_ZnwmSt11align_val_tRKSt9nothrow_t12__hot_cold_t", 120, 64, false,
     call_new_aligned_nothrow_hot},
    {"_ZnamSt11align_val_tRKSt9nothrow_t12__hot_cold_t", 136, 256, false,
     call_new_array_aligned_nothrow_hot},
};

/* Two callers of an entry (global and extern "C": dladdr names them). */
extern "C" __attribute__((noinline, noipa)) void *caller_a(const Entry *entry, size_t token) {
    void *p = entry->call(token);
    __asm__ volatile("" ::: "memory");
    return p;
}
extern "C" __attribute__((noinline, noipa)) void *caller_b(const Entry *entry, size_t token) {
    void *p = entry->call(token);
    __asm__ volatile("" ::: "memory");
    return p;
}

/* True when `site` is a return address inside the function that starts at `function` (the
 * call_* functions are a few dozen bytes long). */
static bool site_in(void *site, void *(*function)(size_t)) {
    uintptr_t start = (uintptr_t)function;
    return (uintptr_t)site > start && (uintptr_t)site < start + 256;
}

/* The block's contract: aligned, zeroed for calloc, writable and readable over its size. */
static void check_block(const Entry *entry, void *p, size_t seed) {
    CHECK(p != NULL, "%s returned NULL", entry->name);
    CHECK(NODALLOC(nodalloc_node_of)(p) >= 0, "%s: %p is not nodalloc's", entry->name, p);
    CHECK(is_aligned(p, entry->align), "%s: %p is not aligned to %zu", entry->name, p,
          entry->align);
    if (entry->zeroed) {
        size_t nonzero = first_nonzero(p, entry->size);
        CHECK(nonzero == entry->size, "%s: byte %zu is not zero", entry->name, nonzero);
    }
    fill(p, entry->size, seed);
    CHECK_PATTERN(p, entry->size, seed);
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: tokens on|loose|off");
    require_nodalloc();
    bool on = strcmp(argv[1], "on") == 0;
    bool off = strcmp(argv[1], "off") == 0;
    size_t count = sizeof entries / sizeof entries[0];

    for (size_t i = 0; i < count; i++) {
        const Entry *entry = &entries[i];
        /* A token per entry, as Clang's type hashes are: any 64-bit value, the top bit set for
         * types that hold pointers. */
        size_t token = (0x9e3779b97f4a7c15ULL * (i + 1)) | (i % 2 ? 1ULL << 63 : 0);
        void *a = caller_a(entry, token), *b = caller_b(entry, token);
        check_block(entry, a, i);
        check_block(entry, b, i + 100);
        CHECK(a != b, "%s: one block twice", entry->name);
        int pa = NODALLOC(nodalloc_partition_of)(a), pb = NODALLOC(nodalloc_partition_of)(b);
        if (off) {
            CHECK(pa == -1 && pb == -1, "%s: partitions (%d, %d) with partitions off",
                  entry->name, pa, pb);
        } else {
            CHECK(pa >= 0 && pa == pb, "%s: one token, two partitions (%d, %d)", entry->name,
                  pa, pb);
            void *site = NODALLOC(nodalloc_partition_site)(pa);
            CHECK((size_t)site == token,
                  "%s: partition %d was recorded from %p, not token %#zx (share partition?)",
                  entry->name, pa, site, token);
        }
        /* The fallback token: the call site is the caller's, as for the plain function (the
         * call_* function that called the entry). */
        void *fallback = caller_b(entry, 0);
        check_block(entry, fallback, i + 200);
        if (on) {
            int partition = NODALLOC(nodalloc_partition_of)(fallback);
            void *site = NODALLOC(nodalloc_partition_site)(partition);
            CHECK(partition >= 0 &&
                      (site_in(site, entry->call) || strcmp(symbol_of(site), "caller_b") == 0),
                  "%s: token 0's partition %d was recorded from %p, not from its caller %p "
                  "(share partition?)",
                  entry->name, partition, site, (void *)entry->call);
        }
        free(a);
        free(b);
        free(fallback);
    }

    /* glibc's errors, token or not. */
    Realloc realloc_token = TOKEN_FN(Realloc, "realloc");
    void *grown = TOKEN_FN(Malloc, "malloc")(opaque_size(100), 7);
    fill(grown, 100, 9);
    grown = realloc_token(grown, opaque_size(5000), 7);
    CHECK(grown != NULL, "realloc with a token failed");
    CHECK_PATTERN(grown, 100, 9);
    grown = realloc_token(grown, opaque_size(30), 8);
    CHECK_PATTERN(grown, 30, 9);
    free(grown);
    CHECK_FAILS_WITH(TOKEN_FN(Reallocarray, "reallocarray")(NULL, opaque_size(SIZE_MAX / 2), 4, 7),
                     ENOMEM);
    CHECK_FAILS_WITH(TOKEN_FN(AlignedAlloc, "aligned_alloc")(opaque_size(48), 64, 7), EINVAL);
    CHECK_FAILS_WITH(TOKEN_FN(Calloc, "calloc")(opaque_size(SIZE_MAX / 2), 4, 7), ENOMEM);
    CHECK_FAILS_WITH(TOKEN_FN(Malloc, "malloc")(opaque_size(SIZE_MAX - 4096), 7), ENOMEM);
    void *unset = &argc;
    int error = TOKEN_FN(PosixMemalign, "posix_memalign")(&unset, opaque_size(24), 64, 7);
    CHECK(error == EINVAL && unset == &argc, "posix_memalign(24) with a token: %d", error);
    bool threw = false;
    try {
        TOKEN_FN(Malloc, "_Znwm")(opaque_size(SIZE_MAX - 4096), 7);
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    CHECK(threw, "a failed new with a token did not throw std::bad_alloc");
    CHECK(TOKEN_FN(NewNothrow, "_ZnwmRKSt9nothrow_t")(opaque_size(SIZE_MAX - 4096), nothrow,
                                                      7) == nullptr,
          "a failed nothrow new with a token did not return nullptr");
    return finish("tokens");
}
