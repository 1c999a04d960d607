/* malloc, free, calloc, realloc, reallocarray and malloc_usable_size: glibc's contract, including
 * its error cases, over sizes from 0 bytes to several MiB (small size classes, the 256 KiB
 * boundary, large objects). */
#include "check.h"

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)
/* The largest small object; the sizes around it switch between bags and spans. */
#define LARGEST_SMALL (256 * KIB)

/* Sizes worth probing: every size up to 512 B (each small class and its neighbours), then each
 * power of two from 512 B to 8 MiB and its neighbours. */
static size_t probe_sizes(size_t *sizes, size_t capacity) {
    size_t count = 0;
    for (size_t size = 0; size <= 512 && count < capacity; size++) {
        sizes[count++] = size;
    }
    for (size_t power = 1024; power <= 8 * MIB && count + 3 <= capacity; power *= 2) {
        sizes[count++] = power - 1;
        sizes[count++] = power;
        sizes[count++] = power + 1;
    }
    sizes[count++] = LARGEST_SMALL - 8;
    sizes[count++] = 3 * LARGEST_SMALL / 2;
    return count;
}

/* glibc gives 16-byte alignment to every block; a block smaller than 16 bytes cannot hold an
 * object needing more than its own size's alignment, which is all C asks. */
static size_t fundamental_alignment(size_t size) {
    size_t alignment = 16;
    while (alignment > 1 && size < alignment && size > 0) {
        alignment /= 2;
    }
    return alignment;
}

static void malloc_gives_distinct_aligned_usable_blocks(void) {
    size_t sizes[700];
    size_t count = probe_sizes(sizes, 690);
    void *blocks[700];
    size_t usable[700];
    for (size_t i = 0; i < count; i++) {
        blocks[i] = malloc(opaque_size(sizes[i]));
        CHECK(blocks[i] != NULL, "malloc(%zu) failed: %s", sizes[i], strerror(errno));
        CHECK(is_aligned(blocks[i], fundamental_alignment(sizes[i])),
              "malloc(%zu) = %p is not %zu-aligned", sizes[i], blocks[i],
              fundamental_alignment(sizes[i]));
        usable[i] = malloc_usable_size(blocks[i]);
        CHECK(usable[i] >= sizes[i], "malloc_usable_size(malloc(%zu)) = %zu", sizes[i],
              usable[i]);
        /* The whole usable size is the caller's to write. */
        fill(blocks[i], usable[i], i);
    }
    /* Checked only once all blocks exist: an overlap shows as another block's pattern. */
    for (size_t i = 0; i < count; i++) {
        CHECK_PATTERN(blocks[i], usable[i], i);
        CHECK(malloc_usable_size(blocks[i]) == usable[i],
              "malloc_usable_size(%p) changed from %zu to %zu", blocks[i], usable[i],
              malloc_usable_size(blocks[i]));
    }
    for (size_t i = 0; i < count; i++) {
        free(blocks[i]);
    }
}

static void malloc_zero_returns_a_unique_freeable_pointer(void) {
    void *first = malloc(opaque_size(0));
    void *second = malloc(opaque_size(0));
    CHECK(first != NULL && second != NULL, "malloc(0) returned NULL (glibc never does)");
    CHECK(first != second, "two live malloc(0) blocks share the address %p", first);
    free(first);
    free(second);
}

static void impossible_sizes_fail_with_enomem(void) {
    CHECK_FAILS_WITH(malloc(opaque_size(SIZE_MAX)), ENOMEM);
    CHECK_FAILS_WITH(malloc(opaque_size(SIZE_MAX - 4096)), ENOMEM);
    CHECK_FAILS_WITH(malloc(opaque_size((size_t)PTRDIFF_MAX + 1)), ENOMEM);
    CHECK_FAILS_WITH(malloc(opaque_size((size_t)1 << 60)), ENOMEM);
    /* The allocator still works after refusing. */
    void *block = malloc(opaque_size(100));
    CHECK(block != NULL, "malloc(100) failed after a refused malloc");
    free(block);
}

static void free_of_null_does_nothing(void) {
    for (int i = 0; i < 1000; i++) {
        free(opaque_pointer(NULL));
    }
    CHECK(malloc_usable_size(opaque_pointer(NULL)) == 0, "malloc_usable_size(NULL) = %zu",
          malloc_usable_size(opaque_pointer(NULL)));
}

static void calloc_zeroes_fresh_and_reused_memory(void) {
    static const size_t sizes[] = {1,    8,     24,          100,          1000,
                                   4096, 40000, LARGEST_SMALL, LARGEST_SMALL + 1, 3 * MIB};
    enum { PER_SIZE = 16 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t size = sizes[s];
        void *dirty[PER_SIZE];
        /* Dirty blocks of this size, freed so that calloc is likely to get them back. */
        for (int i = 0; i < PER_SIZE; i++) {
            dirty[i] = malloc(opaque_size(size));
            CHECK(dirty[i] != NULL, "malloc(%zu) failed", size);
            memset(dirty[i], 0xa5, malloc_usable_size(dirty[i]));
        }
        for (int i = PER_SIZE - 1; i >= 0; i--) {
            free(dirty[i]);
        }
        for (int i = 0; i < PER_SIZE; i++) {
            unsigned char *block = calloc(opaque_size(1), opaque_size(size));
            CHECK(block != NULL, "calloc(1, %zu) failed", size);
            size_t nonzero = first_nonzero(block, size);
            CHECK(nonzero == size, "calloc(1, %zu) = %p has a nonzero byte at %zu", size,
                  (void *)block, nonzero);
            dirty[i] = block;
        }
        for (int i = 0; i < PER_SIZE; i++) {
            free(dirty[i]);
        }
    }
    unsigned char *array = calloc(opaque_size(1000), opaque_size(24));
    CHECK(array != NULL, "calloc(1000, 24) failed");
    CHECK(first_nonzero(array, 24000) == 24000, "calloc(1000, 24) is not zeroed");
    free(array);
}

static void calloc_of_zero_returns_a_freeable_pointer(void) {
    void *none = calloc(opaque_size(0), opaque_size(16));
    void *empty = calloc(opaque_size(16), opaque_size(0));
    CHECK(none != NULL && empty != NULL, "calloc with a zero count or size returned NULL");
    free(none);
    free(empty);
}

static void calloc_overflow_fails_with_enomem(void) {
    CHECK_FAILS_WITH(calloc(opaque_size(SIZE_MAX / 2 + 1), opaque_size(2)), ENOMEM);
    CHECK_FAILS_WITH(calloc(opaque_size((size_t)1 << 32), opaque_size((size_t)1 << 32)), ENOMEM);
    CHECK_FAILS_WITH(calloc(opaque_size(SIZE_MAX), opaque_size(SIZE_MAX)), ENOMEM);
    CHECK_FAILS_WITH(calloc(opaque_size(3), opaque_size(SIZE_MAX / 3 + 1)), ENOMEM);
    /* No overflow, just too big. */
    CHECK_FAILS_WITH(calloc(opaque_size(1), opaque_size(SIZE_MAX)), ENOMEM);
}

static void realloc_of_null_allocates(void) {
    void *block = realloc(opaque_pointer(NULL), opaque_size(100));
    CHECK(block != NULL, "realloc(NULL, 100) failed");
    CHECK(malloc_usable_size(block) >= 100, "realloc(NULL, 100) gave %zu usable bytes",
          malloc_usable_size(block));
    fill(block, 100, 7);
    CHECK_PATTERN(block, 100, 7);
    free(block);
    void *large = realloc(opaque_pointer(NULL), opaque_size(2 * MIB));
    CHECK(large != NULL, "realloc(NULL, 2 MiB) failed");
    fill(large, 2 * MIB, 8);
    CHECK_PATTERN(large, 2 * MIB, 8);
    free(large);
}

static void realloc_to_zero_frees_and_returns_null(void) {
    static const size_t sizes[] = {1, 100, 4096, LARGEST_SMALL + 1, 2 * MIB};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        void *block = malloc(opaque_size(sizes[s]));
        CHECK(block != NULL, "malloc(%zu) failed", sizes[s]);
        void *result = realloc(block, opaque_size(0));
        CHECK(result == NULL, "realloc(malloc(%zu), 0) = %p, glibc frees and returns NULL",
              sizes[s], result);
    }
}

/* One block walked through sizes that cross every boundary (class to class, small to large,
 * large to small, growing and shrinking in place or not): the common prefix always survives. */
static void realloc_keeps_the_common_prefix_across_sizes(void) {
    static const size_t walk[] = {
        1,           7,     8,   9,     17,   100,  128,   129,         1000,
        4096,        32768, 100000,     LARGEST_SMALL - 1, LARGEST_SMALL, LARGEST_SMALL + 1,
        1 * MIB,     4 * MIB + 3,       3 * MIB,           300 * KIB,   200 * KIB,
        5 * MIB,     1000,  24,  16 * KIB, 8 * MIB,         10,          1};
    size_t size = walk[0];
    unsigned char *block = malloc(opaque_size(size));
    CHECK(block != NULL, "malloc(%zu) failed", size);
    fill(block, size, 1);
    for (size_t step = 1; step < sizeof walk / sizeof walk[0]; step++) {
        size_t next = walk[step];
        unsigned char *moved = realloc(block, opaque_size(next));
        CHECK(moved != NULL, "realloc(%p, %zu) failed", (void *)block, next);
        size_t kept = size < next ? size : next;
        CHECK_PATTERN(moved, kept, step);
        CHECK(malloc_usable_size(moved) >= next, "realloc to %zu left %zu usable bytes", next,
              malloc_usable_size(moved));
        fill(moved, next, step + 1);
        block = moved;
        size = next;
    }
    free(block);
}

/* A block resized from one small class to another whose list holds a block moves into that
 * block, and goes back to its own list: the next malloc of its size gets it again, its
 * contents carried over up to the smaller size. */
static void realloc_between_small_classes_hands_the_old_block_back(void) {
    static const size_t moves[][2] = {{24, 200}, {200, 24}, {1000, 3000}, {3000, 40},
                                      {64, 65},  {16, 16 * KIB}, {48 * KIB, 100}};
    for (size_t i = 0; i < sizeof moves / sizeof moves[0]; i++) {
        size_t from = moves[i][0], to = moves[i][1];
        free(malloc(opaque_size(to)));
        unsigned char *block = malloc(opaque_size(from));
        CHECK(block != NULL, "malloc(%zu) failed", from);
        fill(block, from, i);
        uintptr_t address = (uintptr_t)block;
        unsigned char *moved = realloc(block, opaque_size(to));
        CHECK(moved != NULL && (uintptr_t)moved != address, "realloc(%zu -> %zu) gave %p for %#lx",
              from, to, (void *)moved, (unsigned long)address);
        CHECK_PATTERN(moved, from < to ? from : to, i);
        CHECK(malloc_usable_size(moved) >= to, "realloc to %zu left %zu usable bytes", to,
              malloc_usable_size(moved));
        void *again = malloc(opaque_size(from));
        CHECK((uintptr_t)again == address,
              "realloc(%zu -> %zu) moved out of %#lx, the next malloc(%zu) gave %p", from, to,
              (unsigned long)address, from, again);
        free(again);
        free(moved);
    }
}

/* A block that realloc grows to 32 KiB or more becomes a block of its own pages, which later
 * growth extends in place while the pages after it are free: a buffer that keeps growing (a
 * string built piece by piece) is neither copied at every step nor leaves a freed block in each
 * size class it passed through. Shrunk below 32 KiB again, it moves back into a size class. Run
 * first, while the heap's frontier follows the block. */
static void realloc_grows_a_big_block_in_place(void) {
    /* The classes the block passes through hold free blocks, which a realloc through the
     * classes would move it into. */
    for (size_t warm = 40 * KIB; warm <= 240 * KIB; warm += 8 * KIB) {
        free(malloc(opaque_size(warm)));
    }
    size_t size = 20 * KIB;
    unsigned char *block = malloc(opaque_size(size));
    CHECK(block != NULL, "malloc(%zu) failed", size);
    fill(block, size, 40);
    size_t moves = 0;
    for (size_t next = 40 * KIB, step = 41; next <= 240 * KIB; next += 8 * KIB, step++) {
        uintptr_t address = (uintptr_t)block;
        unsigned char *grown = realloc(block, opaque_size(next));
        CHECK(grown != NULL, "realloc(%#lx, %zu) failed", (unsigned long)address, next);
        CHECK_PATTERN(grown, size, step - 1);
        CHECK(malloc_usable_size(grown) >= next, "realloc to %zu left %zu usable bytes", next,
              malloc_usable_size(grown));
        if ((uintptr_t)grown != address) {
            moves++;
        }
        fill(grown, next, step);
        block = grown;
        size = next;
    }
    /* The move out of the 20 KiB class, and at most one more (if something took the pages
     * after the block); through the size classes it moved at every one of the 26 steps. */
    CHECK(moves <= 2, "growing a block from 40 to 240 KiB by 8 KiB moved it %zu times", moves);
    uintptr_t address = (uintptr_t)block;
    unsigned char *small = realloc(block, opaque_size(100));
    CHECK(small != NULL && (uintptr_t)small != address, "realloc(%#lx, 100) gave %p",
          (unsigned long)address, (void *)small);
    CHECK_PATTERN(small, 100, 40 + 26);
    CHECK(malloc_usable_size(small) < 32 * KIB, "a block shrunk to 100 bytes keeps %zu usable",
          malloc_usable_size(small));
    free(small);
}

/* realloc's hit path (a block of the thread's cache, moved into a cached block of the new
 * class) leaves a growing block to the span too: with the classes of 40 to 64 KiB holding
 * several freed blocks each, a 20 KiB block grown to 40 KiB becomes a span of two 32 KiB units,
 * and growing it to 48, 56 and 64 KiB keeps it where it is. Moved into the cached blocks, it
 * would move at each of those steps. */
static void realloc_of_a_growing_block_passes_the_cached_classes_by(void) {
    for (int round = 0; round < 3; round++) {
        for (size_t warm = 40 * KIB; warm <= 64 * KIB; warm += 8 * KIB) {
            void *blocks[8];
            for (size_t i = 0; i < 8; i++) {
                blocks[i] = malloc(opaque_size(warm));
                CHECK(blocks[i] != NULL, "malloc(%zu) failed", warm);
            }
            for (size_t i = 0; i < 8; i++) {
                free(blocks[i]);
            }
        }
    }
    unsigned char *block = malloc(opaque_size(20 * KIB));
    CHECK(block != NULL, "malloc(20 KiB) failed");
    fill(block, 20 * KIB, 70);
    block = realloc(block, opaque_size(40 * KIB));
    CHECK(block != NULL, "realloc(20 KiB -> 40 KiB) failed");
    CHECK_PATTERN(block, 20 * KIB, 70);
    for (size_t next = 48 * KIB; next <= 64 * KIB; next += 8 * KIB) {
        uintptr_t address = (uintptr_t)block;
        unsigned char *grown = realloc(block, opaque_size(next));
        CHECK((uintptr_t)grown == address, "realloc(%#lx, %zu) moved the block to %p",
              (unsigned long)address, next, (void *)grown);
        CHECK_PATTERN(grown, 20 * KIB, 70);
        block = grown;
    }
    free(block);
}

static void failed_realloc_leaves_the_block_intact(void) {
    static const size_t sizes[] = {100, 5000, LARGEST_SMALL + 1, 2 * MIB};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t size = sizes[s];
        void *block = malloc(opaque_size(size));
        CHECK(block != NULL, "malloc(%zu) failed", size);
        fill(block, size, 99);
        CHECK_FAILS_WITH(realloc(block, opaque_size(SIZE_MAX)), ENOMEM);
        CHECK_FAILS_WITH(realloc(block, opaque_size((size_t)1 << 60)), ENOMEM);
        CHECK_PATTERN(block, size, 99);
        CHECK(malloc_usable_size(block) >= size, "block shrank after a failed realloc");
        free(block);
    }
}

static void reallocarray_multiplies_and_refuses_overflow(void) {
    int *numbers = reallocarray(opaque_pointer(NULL), opaque_size(10), sizeof(int));
    CHECK(numbers != NULL, "reallocarray(NULL, 10, 4) failed");
    for (int i = 0; i < 10; i++) {
        numbers[i] = i * i;
    }
    numbers = reallocarray(numbers, opaque_size(100000), sizeof(int));
    CHECK(numbers != NULL, "reallocarray(p, 100000, 4) failed");
    for (int i = 0; i < 10; i++) {
        CHECK(numbers[i] == i * i, "reallocarray lost element %d", i);
    }
    numbers[99999] = 7;
    CHECK(malloc_usable_size(numbers) >= 400000, "reallocarray(p, 100000, 4) gave %zu bytes",
          malloc_usable_size(numbers));

    CHECK_FAILS_WITH(reallocarray(numbers, opaque_size(SIZE_MAX / 2 + 1), opaque_size(4)),
                     ENOMEM);
    CHECK_FAILS_WITH(reallocarray(numbers, opaque_size((size_t)1 << 33),
                                  opaque_size((size_t)1 << 33)),
                     ENOMEM);
    /* A refused reallocarray leaves the array alone. */
    for (int i = 0; i < 10; i++) {
        CHECK(numbers[i] == i * i, "failed reallocarray changed element %d", i);
    }
    CHECK(numbers[99999] == 7, "failed reallocarray changed the last element");
    CHECK_FAILS_WITH(reallocarray(opaque_pointer(NULL), opaque_size(SIZE_MAX), opaque_size(2)),
                     ENOMEM);
    free(numbers);
}

/* Memory that glibc itself allocates (strdup, asprintf, getline, open_memstream) comes from the
 * interposed malloc, and free takes it back. */
static void libc_internal_allocations_are_served_and_freed(void) {
    char *copy = strdup("nodalloc");
    CHECK(copy != NULL && strcmp(copy, "nodalloc") == 0, "strdup failed");
    CHECK(NODALLOC(nodalloc_node_of)(copy) >= 0, "strdup's block %p is not nodalloc's",
          (void *)copy);
    free(copy);

    char *text = NULL;
    int length = asprintf(&text, "%s-%d-%0200d", "formatted", 42, 7);
    CHECK(length == 213 && text != NULL, "asprintf returned %d", length);
    CHECK(NODALLOC(nodalloc_node_of)(text) >= 0, "asprintf's block is not nodalloc's");
    free(text);

    char *buffer = NULL;
    size_t buffer_size = 0;
    FILE *stream = open_memstream(&buffer, &buffer_size);
    CHECK(stream != NULL, "open_memstream failed");
    for (int i = 0; i < 10000; i++) {
        fprintf(stream, "line %d\n", i);
    }
    CHECK(fclose(stream) == 0, "fclose(memstream) failed");
    CHECK(buffer_size > 60000 && strncmp(buffer, "line 0\nline 1\n", 14) == 0,
          "open_memstream produced %zu bytes", buffer_size);
    free(buffer);
}

/* A long random mix of allocations, reallocations and frees, every live block's contents
 * checked before it is freed: reuse must never hand out memory that is still live. */
static void random_churn_keeps_every_live_block_intact(void) {
    enum { SLOTS = 1024, ROUNDS = 200000 };
    static void *blocks[SLOTS];
    static size_t lengths[SLOTS];
    static size_t seeds[SLOTS];
    unsigned long long state = 0x9e3779b97f4a7c15ull;
    for (size_t round = 0; round < ROUNDS; round++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        size_t slot = (size_t)(state >> 33) % SLOTS;
        unsigned shape = (unsigned)(state >> 20) & 1023;
        /* Mostly small blocks, some medium, a few large. */
        size_t length = shape < 900   ? (state >> 40) % 512
                        : shape < 1015 ? (state >> 40) % (64 * KIB)
                                       : (state >> 40) % (2 * MIB);
        if (blocks[slot] != NULL) {
            CHECK_PATTERN(blocks[slot], lengths[slot], seeds[slot]);
            if (shape & 1) {
                void *moved = realloc(blocks[slot], opaque_size(length));
                if (length == 0) {
                    CHECK(moved == NULL, "realloc(p, 0) returned %p", moved);
                    blocks[slot] = NULL;
                    continue;
                }
                CHECK(moved != NULL, "realloc(%zu) failed", length);
                size_t kept = lengths[slot] < length ? lengths[slot] : length;
                CHECK_PATTERN(moved, kept, seeds[slot]);
                blocks[slot] = moved;
            } else {
                free(blocks[slot]);
                blocks[slot] = malloc(opaque_size(length));
                CHECK(blocks[slot] != NULL, "malloc(%zu) failed", length);
            }
        } else {
            blocks[slot] = malloc(opaque_size(length));
            CHECK(blocks[slot] != NULL, "malloc(%zu) failed", length);
        }
        lengths[slot] = length;
        seeds[slot] = round;
        fill(blocks[slot], length, round);
    }
    for (size_t slot = 0; slot < SLOTS; slot++) {
        if (blocks[slot] != NULL) {
            CHECK_PATTERN(blocks[slot], lengths[slot], seeds[slot]);
            free(blocks[slot]);
        }
    }
}

int main(void) {
    require_nodalloc();
    realloc_grows_a_big_block_in_place();
    malloc_gives_distinct_aligned_usable_blocks();
    malloc_zero_returns_a_unique_freeable_pointer();
    impossible_sizes_fail_with_enomem();
    free_of_null_does_nothing();
    calloc_zeroes_fresh_and_reused_memory();
    calloc_of_zero_returns_a_freeable_pointer();
    calloc_overflow_fails_with_enomem();
    realloc_of_null_allocates();
    realloc_to_zero_frees_and_returns_null();
    realloc_keeps_the_common_prefix_across_sizes();
    realloc_between_small_classes_hands_the_old_block_back();
    realloc_of_a_growing_block_passes_the_cached_classes_by();
    failed_realloc_leaves_the_block_intact();
    reallocarray_multiplies_and_refuses_overflow();
    libc_internal_allocations_are_served_and_freed();
    random_churn_keeps_every_live_block_intact();
    return finish("basic");
}
