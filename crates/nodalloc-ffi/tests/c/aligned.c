/* posix_memalign, aligned_alloc, memalign, valloc and pvalloc: every power-of-two alignment from
 * 1 B to 1 MiB, sizes below, at and above the alignment, contents checked; every one from 2 MiB
 * to 1 GiB with its head, tail and neighbours checked; and glibc's error conventions
 * (posix_memalign returns the error; the others set errno). */
#include "check.h"

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)
#define MAX_ALIGNMENT MIB

enum aligned_function { POSIX_MEMALIGN, ALIGNED_ALLOC, MEMALIGN };
static const char *const function_names[] = {"posix_memalign", "aligned_alloc", "memalign"};

static void *allocate_aligned(enum aligned_function function, size_t alignment, size_t size) {
    switch (function) {
    case POSIX_MEMALIGN: {
        void *block = NULL;
        int error = posix_memalign(&block, opaque_size(alignment), opaque_size(size));
        CHECK(error == 0, "posix_memalign(%zu, %zu) returned %d", alignment, size, error);
        return block;
    }
    case ALIGNED_ALLOC:
        return aligned_alloc(opaque_size(alignment), opaque_size(size));
    case MEMALIGN:
        return memalign(opaque_size(alignment), opaque_size(size));
    }
    return NULL;
}

/* An aligned block that must be there: non-null, aligned and nodalloc's. */
static void *allocate_checked(enum aligned_function function, size_t alignment, size_t size) {
    const char *name = function_names[function];
    errno = 0;
    void *block = allocate_aligned(function, alignment, size);
    CHECK(block != NULL, "%s(%zu, %zu) failed: %s", name, alignment, size, strerror(errno));
    CHECK(is_aligned(block, alignment), "%s(%zu, %zu) = %p is misaligned", name, alignment, size,
          block);
    CHECK(NODALLOC(nodalloc_node_of)(block) >= 0, "%s(%zu, %zu) = %p is not nodalloc's", name,
          alignment, size, block);
    return block;
}

/* For each alignment, blocks of several sizes stay live together, so that an overlap between
 * aligned blocks (or with their padding) shows in the contents. */
static void every_alignment_gives_aligned_distinct_usable_blocks(enum aligned_function function) {
    const char *name = function_names[function];
    /* posix_memalign requires a multiple of sizeof(void *); smaller ones are tested as errors. */
    size_t first = function == POSIX_MEMALIGN ? sizeof(void *) : 1;
    for (size_t alignment = first; alignment <= MAX_ALIGNMENT; alignment *= 2) {
        size_t sizes[] = {1, 8, alignment - 1 > 0 ? alignment - 1 : 1, alignment, alignment + 1,
                          3 * alignment, 100, 5000, 300 * KIB};
        enum { COUNT = sizeof sizes / sizeof sizes[0] };
        void *blocks[COUNT];
        size_t usable[COUNT];
        for (size_t i = 0; i < COUNT; i++) {
            blocks[i] = allocate_checked(function, alignment, sizes[i]);
            usable[i] = malloc_usable_size(blocks[i]);
            CHECK(usable[i] >= sizes[i], "malloc_usable_size(%s(%zu, %zu)) = %zu", name,
                  alignment, sizes[i], usable[i]);
            fill(blocks[i], usable[i], alignment + i);
        }
        for (size_t i = 0; i < COUNT; i++) {
            CHECK_PATTERN(blocks[i], usable[i], alignment + i);
        }
        /* realloc of an aligned block keeps its contents (the alignment may be lost). */
        void *moved = realloc(blocks[COUNT - 1], opaque_size(2 * sizes[COUNT - 1]));
        CHECK(moved != NULL, "realloc of a %s block failed", name);
        CHECK_PATTERN(moved, sizes[COUNT - 1], alignment + COUNT - 1);
        blocks[COUNT - 1] = moved;
        for (size_t i = 0; i < COUNT; i++) {
            free(blocks[i]);
        }
    }
}

/* Alignments past a huge page, up to 1 GiB: blocks smaller than, equal to and larger than the
 * alignment (aligned_alloc(4 MiB, 12 MiB) once came back only 2 MiB aligned). Only the head and
 * the last byte are written: the sizes reach gigabytes of address space. */
static void huge_alignments_up_to_a_gibibyte_are_honoured(enum aligned_function function) {
    const char *name = function_names[function];
    for (size_t alignment = 2 * MIB; alignment <= 1024 * MIB; alignment *= 2) {
        size_t sizes[] = {1, 4 * KIB, alignment, 3 * alignment};
        enum { COUNT = sizeof sizes / sizeof sizes[0] };
        unsigned char *blocks[COUNT];
        for (size_t i = 0; i < COUNT; i++) {
            blocks[i] = allocate_checked(function, alignment, sizes[i]);
            CHECK(malloc_usable_size(blocks[i]) >= sizes[i], "malloc_usable_size(%s(%zu, %zu))",
                  name, alignment, sizes[i]);
            size_t head = sizes[i] < 4 * KIB ? sizes[i] : 4 * KIB;
            memset(blocks[i], (int)(i + 1), head);
            blocks[i][sizes[i] - 1] = (unsigned char)(i + 1);
        }
        for (size_t i = 0; i < COUNT; i++) {
            size_t head = sizes[i] < 4 * KIB ? sizes[i] : 4 * KIB;
            for (size_t j = 0; j < head; j += 512)
                CHECK(blocks[i][j] == i + 1, "%s(%zu, %zu): byte %zu overwritten", name,
                      alignment, sizes[i], j);
            CHECK(blocks[i][sizes[i] - 1] == i + 1, "%s(%zu, %zu): last byte overwritten", name,
                  alignment, sizes[i]);
            free(blocks[i]);
        }
    }
}

/* Blocks taken from the thread's cache at an alignment above 16: each round frees every block
 * it took, and plain mallocs of the sizes the aligned requests round to put blocks of the same
 * classes in the cache, so the next round's requests come from cached objects of classes that
 * `malloc` also serves. Every block must still be aligned, distinct and usable. */
static void cached_blocks_at_alignments_above_16_are_aligned(enum aligned_function function) {
    enum { COUNT = 64 };
    void *blocks[COUNT];
    for (size_t alignment = 32; alignment <= 4096; alignment *= 2) {
        for (size_t size = 1; size <= 1200; size += 37) {
            size_t rounded = (size + alignment - 1) & ~(alignment - 1);
            for (int round = 0; round < 3; round++) {
                for (int i = 0; i < COUNT; i++) {
                    blocks[i] = allocate_checked(function, alignment, size);
                    fill(blocks[i], size, (size_t)i + round);
                }
                for (int i = 0; i < COUNT; i++) {
                    CHECK_PATTERN(blocks[i], size, (size_t)i + round);
                    free(blocks[i]);
                }
                for (int i = 0; i < COUNT; i++) {
                    blocks[i] = malloc(opaque_size(rounded));
                    CHECK(blocks[i] != NULL, "malloc(%zu) failed", rounded);
                }
                for (int i = 0; i < COUNT; i++) {
                    free(blocks[i]);
                }
            }
        }
    }
}

static void posix_memalign_rejects_bad_alignments_with_einval(void) {
    static const size_t bad[] = {0, 1, 2, 3, 4, 5, 12, 24, 48, 100, 4095, 4097,
                                 3 * MIB, SIZE_MAX, SIZE_MAX / 2, SIZE_MAX / 2 + 2};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *sentinel = &checks_passed;
        void *block = sentinel;
        /* posix_memalign reports through its result and leaves errno alone. */
        errno = EDOM;
        int error = posix_memalign(&block, opaque_size(bad[i]), opaque_size(64));
        int saved_errno = errno;
        CHECK(error == EINVAL, "posix_memalign(alignment %zu) returned %d, expected EINVAL",
              bad[i], error);
        CHECK(saved_errno == EDOM, "posix_memalign(alignment %zu) changed errno to %d", bad[i],
              saved_errno);
        CHECK(block == sentinel, "failed posix_memalign(alignment %zu) wrote %p to *out", bad[i],
              block);
    }
}

static void posix_memalign_refuses_impossible_sizes_with_enomem(void) {
    static const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 64, (size_t)1 << 60};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *block = NULL;
        errno = EDOM;
        int error = posix_memalign(&block, opaque_size(64), opaque_size(sizes[i]));
        CHECK(error == ENOMEM, "posix_memalign(64, %zu) returned %d, expected ENOMEM", sizes[i],
              error);
        CHECK(block == NULL, "failed posix_memalign wrote %p to *out", block);
    }
}

/* glibc 2.38 and later: aligned_alloc takes only powers of two. */
static void aligned_alloc_rejects_bad_alignments_with_einval(void) {
    static const size_t bad[] = {0, 3, 5, 12, 24, 48, 100, 4095, 4097, 3 * MIB, SIZE_MAX,
                                 SIZE_MAX / 2};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_FAILS_WITH(aligned_alloc(opaque_size(bad[i]), opaque_size(64)), EINVAL);
    }
}

/* memalign is older and laxer: an alignment that is not a power of two is rounded up to one,
 * and only an alignment too large to round (above SIZE_MAX / 2 + 1) is an error. */
static void memalign_rounds_up_odd_alignments_and_rejects_huge_ones(void) {
    static const size_t odd[] = {3, 12, 24, 48, 100, 4095, 4097, 3 * KIB * 100};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        size_t rounded = 1;
        while (rounded < odd[i]) {
            rounded *= 2;
        }
        void *block = memalign(opaque_size(odd[i]), opaque_size(100));
        CHECK(block != NULL, "memalign(%zu, 100) failed: %s", odd[i], strerror(errno));
        CHECK(is_aligned(block, rounded), "memalign(%zu, 100) = %p is not %zu-aligned", odd[i],
              block, rounded);
        fill(block, 100, i);
        CHECK_PATTERN(block, 100, i);
        free(block);
    }
    void *zero = memalign(opaque_size(0), opaque_size(100));
    CHECK(zero != NULL, "memalign(0, 100) failed (glibc treats it as malloc)");
    free(zero);
    CHECK_FAILS_WITH(memalign(opaque_size(SIZE_MAX), opaque_size(64)), EINVAL);
    CHECK_FAILS_WITH(memalign(opaque_size(SIZE_MAX / 2 + 2), opaque_size(64)), EINVAL);
}

static void aligned_functions_refuse_impossible_sizes_with_enomem(void) {
    CHECK_FAILS_WITH(aligned_alloc(opaque_size(64), opaque_size(SIZE_MAX)), ENOMEM);
    CHECK_FAILS_WITH(aligned_alloc(opaque_size(4096), opaque_size(SIZE_MAX - 100)), ENOMEM);
    CHECK_FAILS_WITH(memalign(opaque_size(64), opaque_size(SIZE_MAX)), ENOMEM);
    CHECK_FAILS_WITH(memalign(opaque_size(MIB), opaque_size(SIZE_MAX - MIB)), ENOMEM);
    CHECK_FAILS_WITH(valloc(opaque_size(SIZE_MAX)), ENOMEM);
    CHECK_FAILS_WITH(valloc(opaque_size((size_t)1 << 60)), ENOMEM);
    CHECK_FAILS_WITH(pvalloc(opaque_size(SIZE_MAX)), ENOMEM);
    CHECK_FAILS_WITH(pvalloc(opaque_size(SIZE_MAX - 4096)), ENOMEM);
}

static void valloc_gives_page_aligned_blocks(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    static const size_t sizes[] = {1, 100, 4095, 4096, 4097, 5000, 300 * KIB, MIB, 3 * MIB};
    void *blocks[sizeof sizes / sizeof sizes[0]];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        blocks[i] = valloc(opaque_size(sizes[i]));
        CHECK(blocks[i] != NULL, "valloc(%zu) failed", sizes[i]);
        CHECK(is_aligned(blocks[i], page), "valloc(%zu) = %p is not page aligned", sizes[i],
              blocks[i]);
        CHECK(malloc_usable_size(blocks[i]) >= sizes[i], "valloc(%zu) has %zu usable bytes",
              sizes[i], malloc_usable_size(blocks[i]));
        fill(blocks[i], sizes[i], i);
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        CHECK_PATTERN(blocks[i], sizes[i], i);
        free(blocks[i]);
    }
}

/* A page-aligned block of at most a page takes a page (the page class), not the next class
 * whose size is a multiple of a page; a thousand of them live together stay distinct. */
static void page_aligned_pages_take_a_page_each(void) {
    enum { COUNT = 1000 };
    static void *blocks[COUNT];
    for (size_t i = 0; i < COUNT; i++) {
        size_t size = i % 2 ? 4096 : 1 + i;
        blocks[i] = allocate_checked(MEMALIGN, 4096, size);
        CHECK(malloc_usable_size(blocks[i]) == 4096, "memalign(4096, %zu) has %zu usable bytes",
              size, malloc_usable_size(blocks[i]));
        fill(blocks[i], 4096, i);
    }
    for (size_t i = 0; i < COUNT; i++) {
        CHECK_PATTERN(blocks[i], 4096, i);
        free(blocks[i]);
    }
}

/* pvalloc rounds the size up to whole pages, and the rounded size is usable. */
static void pvalloc_gives_whole_pages(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    static const size_t sizes[] = {1, 100, 4095, 4096, 4097, 5000, 300 * KIB, MIB + 1};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t rounded = (sizes[i] + page - 1) / page * page;
        void *block = pvalloc(opaque_size(sizes[i]));
        CHECK(block != NULL, "pvalloc(%zu) failed", sizes[i]);
        CHECK(is_aligned(block, page), "pvalloc(%zu) = %p is not page aligned", sizes[i], block);
        CHECK(malloc_usable_size(block) >= rounded, "pvalloc(%zu) has %zu usable bytes, not %zu",
              sizes[i], malloc_usable_size(block), rounded);
        fill(block, rounded, i);
        CHECK_PATTERN(block, rounded, i);
        free(block);
    }
}

int main(void) {
    require_nodalloc();
    every_alignment_gives_aligned_distinct_usable_blocks(POSIX_MEMALIGN);
    every_alignment_gives_aligned_distinct_usable_blocks(ALIGNED_ALLOC);
    every_alignment_gives_aligned_distinct_usable_blocks(MEMALIGN);
    cached_blocks_at_alignments_above_16_are_aligned(POSIX_MEMALIGN);
    cached_blocks_at_alignments_above_16_are_aligned(ALIGNED_ALLOC);
    cached_blocks_at_alignments_above_16_are_aligned(MEMALIGN);
    huge_alignments_up_to_a_gibibyte_are_honoured(POSIX_MEMALIGN);
    huge_alignments_up_to_a_gibibyte_are_honoured(ALIGNED_ALLOC);
    huge_alignments_up_to_a_gibibyte_are_honoured(MEMALIGN);
    posix_memalign_rejects_bad_alignments_with_einval();
    posix_memalign_refuses_impossible_sizes_with_enomem();
    aligned_alloc_rejects_bad_alignments_with_einval();
    memalign_rounds_up_odd_alignments_and_rejects_huge_ones();
    aligned_functions_refuse_impossible_sizes_with_enomem();
    valloc_gives_page_aligned_blocks();
    page_aligned_pages_take_a_page_each();
    pvalloc_gives_whole_pages();
    return finish("aligned");
}
