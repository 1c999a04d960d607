/* NODALLOC_LIMIT under eight threads: every thread allocates (a mix of small blocks and 300 KiB
 * ones, each written in full) until nodalloc refuses 50 times; every refusal is NULL with errno
 * ENOMEM, every granted block keeps its contents, the peak committed bytes nodalloc reports stay
 * within the limit, and once everything is freed all eight threads can allocate again.
 *
 * Usage: limit LIMIT_BYTES (the harness also sets NODALLOC_LIMIT to the same value).
 */
#include "check.h"
#include "hostile.h"

#include <pthread.h>
#include <stdatomic.h>

#define THREADS 8
#define MAX_BLOCKS 100000
#define REFUSALS 50

struct block {
    unsigned char *data;
    size_t length;
};

/* Outside the heap, so bookkeeping never competes with the blocks for the limit. */
static struct block held[THREADS][MAX_BLOCKS];
static size_t held_count[THREADS];
static int refused[THREADS];
static int bad_errno[THREADS];
static pthread_barrier_t start;

static size_t seed_of(size_t thread, size_t i) { return thread * MAX_BLOCKS + i; }

static void *fill_to_the_limit(void *argument) {
    size_t t = (size_t)argument;
    pthread_barrier_wait(&start);
    for (size_t i = 0; i < MAX_BLOCKS && refused[t] < REFUSALS; i++) {
        size_t length = i % 10 == 0 ? 300000 : 64 + (i * 31 + t) % 8000;
        errno = 0;
        unsigned char *data =
            i % 7 == 3 ? calloc(opaque_size(1), opaque_size(length)) : malloc(opaque_size(length));
        if (data == NULL) {
            if (errno != ENOMEM) {
                bad_errno[t] = errno;
            }
            refused[t]++;
            continue;
        }
        /* Every page written: the memory is really used, not only reserved. */
        fill(data, length, seed_of(t, held_count[t]));
        held[t][held_count[t]].data = data;
        held[t][held_count[t]].length = length;
        held_count[t]++;
    }
    /* At the limit a growing realloc fails and leaves its block as it was. */
    if (held_count[t] > 0) {
        struct block *last = &held[t][held_count[t] - 1];
        errno = 0;
        void *grown = realloc(last->data, opaque_size(256 << 20));
        if (grown == NULL) {
            if (errno != ENOMEM) {
                bad_errno[t] = errno;
            }
        } else {
            /* Only possible if other threads freed meanwhile; they do not. */
            bad_errno[t] = -1;
            last->data = grown;
        }
    }
    return NULL;
}

static _Atomic int recovered;

static void *allocate_after_frees(void *argument) {
    size_t t = (size_t)argument;
    for (int round = 0; round < 4; round++) {
        size_t length = (size_t)(1 + round) << 20;
        unsigned char *data = malloc(opaque_size(length));
        if (data == NULL) {
            return NULL;
        }
        fill(data, length, t + 100 * (size_t)round);
        if (first_mismatch(data, length, t + 100 * (size_t)round) != length) {
            free(data);
            return NULL;
        }
        free(data);
    }
    recovered++;
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: limit LIMIT_BYTES");
    const size_t limit = strtoull(argv[1], NULL, 10);
    require_nodalloc();
    double peak = 0, reported_limit = 0;
    stats_peak_and_limit(&peak, &reported_limit);
    CHECK(reported_limit == (double)limit, "nodalloc reports a limit of %.0f B, expected %zu",
          reported_limit, limit);

    CHECK(pthread_barrier_init(&start, NULL, THREADS) == 0, "pthread_barrier_init failed");
    pthread_t threads[THREADS];
    for (size_t t = 0; t < THREADS; t++) {
        CHECK(pthread_create(&threads[t], NULL, fill_to_the_limit, (void *)t) == 0,
              "pthread_create failed");
    }
    size_t granted_bytes = 0;
    for (size_t t = 0; t < THREADS; t++) {
        CHECK(pthread_join(threads[t], NULL) == 0, "pthread_join failed");
        CHECK(refused[t] == REFUSALS, "thread %zu was refused %d times only", t, refused[t]);
        CHECK(bad_errno[t] == 0, "thread %zu: a refusal set errno %d, not ENOMEM", t,
              bad_errno[t]);
        for (size_t i = 0; i < held_count[t]; i++) {
            granted_bytes += held[t][i].length;
        }
    }
    stats_peak_and_limit(&peak, &reported_limit);
    CHECK(peak > 0 && peak <= (double)limit, "peak committed %.0f B over the limit of %zu B",
          peak, limit);
    /* The limit was really reached: most of it holds granted blocks. */
    CHECK(granted_bytes > limit / 2 && granted_bytes <= limit,
          "%zu bytes granted under a limit of %zu", granted_bytes, limit);
    /* The program goes on: stdio (which allocates) still works at the limit. */
    printf("at the limit: %zu bytes in blocks, peak committed %.1f MiB\n", granted_bytes,
           peak / 1048576);
    fflush(stdout);

    for (size_t t = 0; t < THREADS; t++) {
        for (size_t i = 0; i < held_count[t]; i++) {
            CHECK_PATTERN(held[t][i].data, held[t][i].length, seed_of(t, i));
            free(held[t][i].data);
        }
    }
    for (size_t t = 0; t < THREADS; t++) {
        CHECK(pthread_create(&threads[t], NULL, allocate_after_frees, (void *)t) == 0,
              "pthread_create failed");
    }
    for (size_t t = 0; t < THREADS; t++) {
        CHECK(pthread_join(threads[t], NULL) == 0, "pthread_join failed");
    }
    CHECK(recovered == THREADS, "only %d of %d threads could allocate after the frees",
          (int)recovered, THREADS);
    void *half = malloc(opaque_size(limit / 2));
    CHECK(half != NULL, "malloc(limit / 2) failed after the frees: %s", strerror(errno));
    fill(half, limit / 2, 9);
    CHECK_PATTERN(half, limit / 2, 9);
    free(half);
    stats_peak_and_limit(&peak, &reported_limit);
    CHECK(peak <= (double)limit, "peak committed %.0f B over the limit", peak);
    return finish("limit");
}
