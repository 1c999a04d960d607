/* Memory tiers from C and C++: nodalloc_malloc_cold, nodalloc_malloc_tier, and the hot/cold
 * `operator new(size_t, __hot_cold_t)` family (tcmalloc's, as LLVM's -optimize-hot-cold-new
 * emits it): cold requests (hints 0 to 127) land on the far node, hot ones (128 to 255) and
 * plain ones on the thread's node; every block is freed through the usual path.
 *
 * Usage: tiers FAR. FAR is the node far blocks must land on, or -1 when nodalloc sees no far
 * memory (then they are near: node 0, the main thread's node, as the harness starts it on
 * CPU 0).
 */
#include "check.h"

#include <initializer_list>
#include <new>

enum class __hot_cold_t : uint8_t;

typedef void *(*NewHint)(size_t, __hot_cold_t);
typedef void *(*NewNothrowHint)(size_t, const std::nothrow_t &, __hot_cold_t);
typedef void *(*NewAlignedHint)(size_t, std::align_val_t, __hot_cold_t);
typedef void *(*NewAlignedNothrowHint)(size_t, std::align_val_t, const std::nothrow_t &,
                                       __hot_cold_t);

#ifdef NODALLOC_PRELOADED
/* No C++ runtime defines these: under LD_PRELOAD they are found in nodalloc by name. */
#define OPERATOR(type, symbol) ((type)nodalloc_symbol(symbol))
#else
void *operator new(size_t, __hot_cold_t);
void *operator new[](size_t, __hot_cold_t);
void *operator new(size_t, const std::nothrow_t &, __hot_cold_t) noexcept;
void *operator new[](size_t, const std::nothrow_t &, __hot_cold_t) noexcept;
void *operator new(size_t, std::align_val_t, __hot_cold_t);
void *operator new[](size_t, std::align_val_t, __hot_cold_t);
void *operator new(size_t, std::align_val_t, const std::nothrow_t &, __hot_cold_t) noexcept;
void *operator new[](size_t, std::align_val_t, const std::nothrow_t &, __hot_cold_t) noexcept;
/* Linked: the program's own references to the operators, resolved to nodalloc at link time
 * (the overload picked by the pointer's type; `symbol` documents which one). */
#define OPERATOR(type, symbol) ((type)(operator_##type))
static void *(*const operator_NewHint)(size_t, __hot_cold_t) = operator new;
static void *(*const operator_NewArrayHint)(size_t, __hot_cold_t) = operator new[];
static void *(*const operator_NewNothrowHint)(size_t, const std::nothrow_t &,
                                              __hot_cold_t) noexcept = operator new;
static void *(*const operator_NewArrayNothrowHint)(size_t, const std::nothrow_t &,
                                                   __hot_cold_t) noexcept = operator new[];
static void *(*const operator_NewAlignedHint)(size_t, std::align_val_t, __hot_cold_t) =
    operator new;
static void *(*const operator_NewArrayAlignedHint)(size_t, std::align_val_t, __hot_cold_t) =
    operator new[];
static void *(*const operator_NewAlignedNothrowHint)(size_t, std::align_val_t,
                                                     const std::nothrow_t &,
                                                     __hot_cold_t) noexcept = operator new;
static void *(*const operator_NewArrayAlignedNothrowHint)(size_t, std::align_val_t,
                                                          const std::nothrow_t &,
                                                          __hot_cold_t) noexcept = operator new[];
#endif
typedef NewHint NewArrayHint;
typedef NewNothrowHint NewArrayNothrowHint;
typedef NewAlignedHint NewArrayAlignedHint;
typedef NewAlignedNothrowHint NewArrayAlignedNothrowHint;

/* A hint as the operators take it (a `uint8_t` underneath). */
static __hot_cold_t hot_cold(unsigned hint) { return (__hot_cold_t)opaque_int((int)hint); }

static const size_t sizes[] = {24, 4096, 300 * 1024};

static int far_node = -1;

/* The node a block asked for with `hint` must be on. */
static int expected_node(unsigned hint) { return hint < 128 && far_node >= 0 ? far_node : 0; }

static void check_block(void *block, size_t size, unsigned hint, size_t align, const char *what) {
    CHECK(block != NULL, "%s(%zu, hint %u) returned NULL", what, size, hint);
    CHECK(is_aligned(block, align), "%s(%zu, hint %u) = %p, not %zu-aligned", what, size, hint,
          block, align);
    memset(block, 0x5a, size);
    int node = NODALLOC(nodalloc_node_of)(block);
    CHECK(node == expected_node(hint), "%s(%zu, hint %u) landed on node %d, expected %d", what,
          size, hint, node, expected_node(hint));
}

static void c_entries_place_cold_blocks_far(void) {
    for (size_t size : sizes) {
        void *cold = NODALLOC(nodalloc_malloc_cold)(opaque_size(size));
        check_block(cold, size, 0, 16, "nodalloc_malloc_cold");
        void *far = NODALLOC(nodalloc_malloc_tier)(opaque_size(size), NODALLOC_TIER_FAR);
        check_block(far, size, 0, 16, "nodalloc_malloc_tier(FAR)");
        void *near = NODALLOC(nodalloc_malloc_tier)(opaque_size(size), NODALLOC_TIER_NEAR);
        check_block(near, size, 255, 16, "nodalloc_malloc_tier(NEAR)");
        /* realloc keeps the contents, whatever the tier the copy lands in. */
        cold = realloc(cold, opaque_size(size * 2));
        CHECK(cold != NULL && ((unsigned char *)cold)[size - 1] == 0x5a, "realloc of a far block");
        free(cold);
        free(far);
        free(near);
    }
    CHECK_FAILS_WITH(NODALLOC(nodalloc_malloc_tier)(opaque_size(16), opaque_int(2)), EINVAL);
    CHECK_FAILS_WITH(NODALLOC(nodalloc_malloc_tier)(opaque_size(16), opaque_int(-1)), EINVAL);
}

static void hot_cold_operators_follow_the_hint(void) {
    static const unsigned hints[] = {0, 1, 127, 128, 200, 255};
    for (unsigned hint : hints) {
        for (size_t size : sizes) {
            void *p = OPERATOR(NewHint, "_Znwm12__hot_cold_t")(opaque_size(size), hot_cold(hint));
            check_block(p, size, hint, 16, "new");
            operator delete(p);
            p = OPERATOR(NewArrayHint, "_Znam12__hot_cold_t")(opaque_size(size), hot_cold(hint));
            check_block(p, size, hint, 16, "new[]");
            operator delete[](p);
            p = OPERATOR(NewNothrowHint, "_ZnwmRKSt9nothrow_t12__hot_cold_t")(
                opaque_size(size), std::nothrow, hot_cold(hint));
            check_block(p, size, hint, 16, "new(nothrow)");
            operator delete(p, std::nothrow);
            p = OPERATOR(NewArrayNothrowHint, "_ZnamRKSt9nothrow_t12__hot_cold_t")(
                opaque_size(size), std::nothrow, hot_cold(hint));
            check_block(p, size, hint, 16, "new[](nothrow)");
            operator delete[](p, std::nothrow);
            for (size_t align : {(size_t)64, (size_t)4096}) {
                std::align_val_t al = (std::align_val_t)opaque_size(align);
                p = OPERATOR(NewAlignedHint, "_ZnwmSt11align_val_t12__hot_cold_t")(
                    opaque_size(size), al, hot_cold(hint));
                check_block(p, size, hint, align, "new(align)");
                operator delete(p, al);
                p = OPERATOR(NewArrayAlignedHint, "_ZnamSt11align_val_t12__hot_cold_t")(
                    opaque_size(size), al, hot_cold(hint));
                check_block(p, size, hint, align, "new[](align)");
                operator delete[](p, al);
                p = OPERATOR(NewAlignedNothrowHint,
                             "_ZnwmSt11align_val_tRKSt9nothrow_t12__hot_cold_t")(
                    opaque_size(size), al, std::nothrow, hot_cold(hint));
                check_block(p, size, hint, align, "new(align, nothrow)");
                operator delete(p, al, std::nothrow);
                p = OPERATOR(NewArrayAlignedNothrowHint,
                             "_ZnamSt11align_val_tRKSt9nothrow_t12__hot_cold_t")(
                    opaque_size(size), al, std::nothrow, hot_cold(hint));
                check_block(p, size, hint, align, "new[](align, nothrow)");
                operator delete[](p, al, std::nothrow);
            }
        }
    }
}

static void impossible_requests_fail_as_cxx_requires(void) {
    /* Too big for any node: the nothrow forms give NULL, the throwing ones throw. */
    size_t huge = opaque_size((size_t)1 << 62);
    CHECK(OPERATOR(NewNothrowHint, "_ZnwmRKSt9nothrow_t12__hot_cold_t")(huge, std::nothrow, hot_cold(0)) ==
              NULL,
          "a cold nothrow new of 2^62 bytes succeeded");
    bool threw = false;
    try {
        void *p = OPERATOR(NewHint, "_Znwm12__hot_cold_t")(huge, hot_cold(0));
        operator delete(p);
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    CHECK(threw, "a cold new of 2^62 bytes did not throw std::bad_alloc");
    CHECK_FAILS_WITH(NODALLOC(nodalloc_malloc_cold)(huge), ENOMEM);
}

/* The far tier's committed bytes, from malloc_info's tier element. */
static size_t far_committed_now(void) {
    char *text = NULL;
    size_t text_length = 0, committed = 0;
    FILE *stream = open_memstream(&text, &text_length);
    CHECK(stream != NULL && malloc_info(0, stream) == 0, "malloc_info failed");
    fclose(stream);
    const char *far_tier = strstr(text, "<tier name=\"far\" ");
    CHECK(far_tier != NULL &&
              sscanf(far_tier, "<tier name=\"far\" allocated=\"%*u\" committed=\"%zu\"",
                     &committed) == 1,
          "malloc_info without a far tier: %s", text);
    free(text);
    return committed;
}

/* Cold blocks made and freed by the thousand, 200 000 in all (12 MiB), at most 64 KiB live:
 * the far node's freed objects are taken back and reused (the node has no thread of its own
 * to drain its inbox), so the far tier's committed bytes grow by at most 1 MiB. */
static void cold_churn_reuses_far_memory(void) {
    static void *blocks[1000];
    if (far_node < 0)
        return;
    size_t before = far_committed_now();
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 1000; i++) {
            blocks[i] = NODALLOC(nodalloc_malloc_cold)(opaque_size(64));
            CHECK(blocks[i] != NULL && NODALLOC(nodalloc_node_of)(blocks[i]) == far_node,
                  "cold block %d", i);
        }
        for (int i = 0; i < 1000; i++) {
            free(blocks[i]);
        }
    }
    size_t after = far_committed_now();
    CHECK(after <= before + ((size_t)1 << 20),
          "far committed grew from %zu to %zu bytes over a churn of 64 KiB live", before, after);
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: tiers FAR");
    far_node = atoi(argv[1]);
    c_entries_place_cold_blocks_far();
    hot_cold_operators_follow_the_hint();
    impossible_requests_fail_as_cxx_requires();
    cold_churn_reuses_far_memory();
    return finish("tiers");
}
