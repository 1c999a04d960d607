/* Differential fuzzing of the C entry points: a seeded random sequence of malloc, calloc,
 * realloc, reallocarray, posix_memalign, aligned_alloc, memalign, valloc, pvalloc, free and
 * malloc_usable_size, checked against a shadow model that knows every live block, its size,
 * its alignment and the pattern written into it.
 *
 * Usage: fuzz SEED OPS [THREADS]. Each thread runs OPS operations from SEED + its index; blocks
 * are passed between threads through a shared slot table, so frees and reallocs cross threads.
 * Any disagreement prints the seed, the operation number and what differed, and exits 1: the
 * seed reproduces it (`fuzz SEED OPS THREADS`). scripts/fuzz.sh runs it for a long time.
 */
#include "check.h"

#include <pthread.h>

#define SLOTS 4096
#define KIB ((size_t)1024)

struct block {
    unsigned char *pointer;
    size_t size;
    size_t alignment;
    size_t seed;
};

/* Slots are claimed by one thread at a time through their lock (a block can move between
 * threads, which is what makes a free remote). */
static struct block slots[SLOTS];
static pthread_mutex_t slot_locks[SLOTS];

static unsigned long long seed_base;
static unsigned long operations;

/* Sizes weighted as programs use them: mostly small, some medium, a few large, rare huge. */
static size_t random_size(unsigned long long *state) {
    unsigned long long r = next_random(state);
    switch (r % 100) {
    case 0 ... 59: return (size_t)(next_random(state) % 257);
    case 60 ... 89: return 257 + (size_t)(next_random(state) % (16 * KIB));
    case 90 ... 98: return 16 * KIB + (size_t)(next_random(state) % (400 * KIB));
    default: return 400 * KIB + (size_t)(next_random(state) % (6 * 1024 * KIB));
    }
}

/* The bytes of a block the model checks: all of a small block, the ends and every page start
 * of a big one (a full check of multi-MiB blocks would make the run a memcmp benchmark). */
static void write_pattern(struct block *b) {
    if (b->size <= 8 * KIB) {
        fill(b->pointer, b->size, b->seed);
        return;
    }
    fill(b->pointer, 4 * KIB, b->seed);
    fill(b->pointer + b->size - 4 * KIB, 4 * KIB, b->seed + 1);
    for (size_t at = 4 * KIB; at + 8 <= b->size - 4 * KIB; at += 4 * KIB) {
        fill(b->pointer + at, 8, b->seed + at);
    }
}

static void check_pattern(const struct block *b, unsigned long op, const char *when) {
    size_t bad;
    if (b->size <= 8 * KIB) {
        bad = first_mismatch(b->pointer, b->size, b->seed);
        CHECK(bad == b->size, "seed %llu op %lu (%s): block %p of %zu B differs at byte %zu",
              seed_base, op, when, (void *)b->pointer, b->size, bad);
        return;
    }
    bad = first_mismatch(b->pointer, 4 * KIB, b->seed);
    CHECK(bad == 4 * KIB, "seed %llu op %lu (%s): block %p of %zu B differs at byte %zu",
          seed_base, op, when, (void *)b->pointer, b->size, bad);
    bad = first_mismatch(b->pointer + b->size - 4 * KIB, 4 * KIB, b->seed + 1);
    CHECK(bad == 4 * KIB, "seed %llu op %lu (%s): block %p of %zu B differs near its end",
          seed_base, op, when, (void *)b->pointer, b->size);
    for (size_t at = 4 * KIB; at + 8 <= b->size - 4 * KIB; at += 4 * KIB) {
        CHECK(first_mismatch(b->pointer + at, 8, b->seed + at) == 8,
              "seed %llu op %lu (%s): block %p of %zu B differs at page offset %zu", seed_base,
              op, when, (void *)b->pointer, b->size, at);
    }
}

/* The invariants of a fresh block: aligned, usable size at least the request. */
static void check_new(const struct block *b, unsigned long op, const char *how) {
    CHECK(is_aligned(b->pointer, b->alignment), "seed %llu op %lu: %s(%zu, align %zu) = %p",
          seed_base, op, how, b->size, b->alignment, (void *)b->pointer);
    CHECK(malloc_usable_size(b->pointer) >= b->size,
          "seed %llu op %lu: %s(%zu): usable size %zu", seed_base, op, how, b->size,
          malloc_usable_size(b->pointer));
}

static size_t random_alignment(unsigned long long *state) {
    return (size_t)1 << (3 + next_random(state) % 18); /* 8 B .. 1 MiB */
}

static void *run(void *argument) {
    size_t index = (size_t)argument;
    unsigned long long state = seed_base * 0x9E3779B97F4A7C15ULL + index + 1;
    for (unsigned long op = 0; op < operations; op++) {
        size_t slot = (size_t)(next_random(&state) % SLOTS);
        pthread_mutex_lock(&slot_locks[slot]);
        struct block *b = &slots[slot];
        if (b->pointer != NULL) {
            check_pattern(b, op, "before use");
            unsigned long long action = next_random(&state) % 10;
            if (action < 5) {
                free(b->pointer);
                b->pointer = NULL;
            } else {
                size_t size = random_size(&state);
                unsigned char *moved = action < 9
                    ? realloc(b->pointer, size)
                    : reallocarray(b->pointer, size ? 1 : 0, size);
                if (size == 0) {
                    /* glibc: realloc(p, 0) and reallocarray(p, 0, 0) free p, return NULL. */
                    CHECK(moved == NULL, "seed %llu op %lu: realloc(p, 0) = %p", seed_base, op,
                          (void *)moved);
                    b->pointer = NULL;
                } else {
                    CHECK(moved != NULL, "seed %llu op %lu: realloc to %zu failed", seed_base, op,
                          size);
                    /* realloc keeps malloc's alignment only. */
                    size_t kept = size < b->size ? size : b->size;
                    struct block old_view = *b;
                    old_view.pointer = moved;
                    old_view.size = kept;
                    if (kept == b->size) {
                        check_pattern(&old_view, op, "after realloc");
                    } else {
                        /* Shrunk: the first bytes (or first page) must have survived. */
                        size_t prefix = kept < 4 * KIB ? kept : 4 * KIB;
                        CHECK(first_mismatch(moved, prefix, b->seed) == prefix,
                              "seed %llu op %lu: realloc to %zu lost the prefix", seed_base, op,
                              size);
                    }
                    b->pointer = moved;
                    b->size = size;
                    b->alignment = 16;
                    b->seed = next_random(&state);
                    check_new(b, op, "realloc");
                    write_pattern(b);
                }
            }
        } else {
            size_t size = random_size(&state);
            size_t alignment = 16;
            unsigned char *p = NULL;
            const char *how = "malloc";
            switch (next_random(&state) % 8) {
            case 0: case 1: case 2: p = malloc(size); break;
            case 3: {
                size_t count = 1 + next_random(&state) % 8;
                p = calloc(count, size / count + 1);
                size = count * (size / count + 1);
                how = "calloc";
                if (p != NULL) {
                    CHECK(first_nonzero(p, size) == size, "seed %llu op %lu: calloc(%zu) not zeroed",
                          seed_base, op, size);
                }
                break;
            }
            case 4: {
                alignment = random_alignment(&state);
                void *out = NULL;
                int error = posix_memalign(&out, alignment, size);
                CHECK(error == 0, "seed %llu op %lu: posix_memalign(%zu, %zu) = %d", seed_base, op,
                      alignment, size, error);
                p = out;
                how = "posix_memalign";
                break;
            }
            case 5: alignment = random_alignment(&state); p = aligned_alloc(alignment, size); how = "aligned_alloc"; break;
            case 6: alignment = random_alignment(&state); p = memalign(alignment, size); how = "memalign"; break;
            default:
                alignment = 4096;
                if (next_random(&state) % 2) {
                    p = valloc(size);
                    how = "valloc";
                } else {
                    p = pvalloc(size);
                    how = "pvalloc";
                }
                break;
            }
            CHECK(p != NULL, "seed %llu op %lu: %s(%zu, align %zu) failed", seed_base, op, how, size,
                  alignment);
            b->pointer = p;
            b->size = size;
            b->alignment = alignment;
            b->seed = next_random(&state);
            check_new(b, op, how);
            write_pattern(b);
        }
        pthread_mutex_unlock(&slot_locks[slot]);
    }
    return NULL;
}

/* No two live blocks may overlap. */
static int by_address(const void *a, const void *b) {
    const struct block *x = a, *y = b;
    return (x->pointer > y->pointer) - (x->pointer < y->pointer);
}

int main(int argc, char **argv) {
    CHECK(argc >= 3, "usage: fuzz SEED OPS [THREADS]");
    require_nodalloc();
    seed_base = strtoull(argv[1], NULL, 10);
    operations = strtoul(argv[2], NULL, 10);
    int threads = argc > 3 ? atoi(argv[3]) : 4;
    for (size_t i = 0; i < SLOTS; i++) {
        pthread_mutex_init(&slot_locks[i], NULL);
    }
    pthread_t workers[64];
    CHECK(threads > 0 && threads <= 64, "1 to 64 threads");
    for (int i = 0; i < threads; i++) {
        CHECK(pthread_create(&workers[i], NULL, run, (void *)(size_t)i) == 0, "pthread_create");
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(workers[i], NULL);
    }
    static struct block live[SLOTS];
    size_t count = 0;
    for (size_t i = 0; i < SLOTS; i++) {
        if (slots[i].pointer != NULL) {
            check_pattern(&slots[i], operations, "at the end");
            live[count++] = slots[i];
        }
    }
    qsort(live, count, sizeof live[0], by_address);
    for (size_t i = 1; i < count; i++) {
        CHECK(live[i - 1].pointer + live[i - 1].size <= live[i].pointer,
              "seed %llu: blocks %p (%zu B) and %p overlap", seed_base,
              (void *)live[i - 1].pointer, live[i - 1].size, (void *)live[i].pointer);
    }
    for (size_t i = 0; i < count; i++) {
        free(live[i].pointer);
    }
    return finish("fuzz");
}
