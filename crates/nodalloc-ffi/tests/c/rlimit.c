/* A small address space (the harness runs this with RLIMIT_AS = 256 MiB, `ulimit -v 262144`):
 * nodalloc must shrink its reservation to fit, serve four threads churning every size range with
 * 64 MiB live in all (256 MiB allocated over the run, contents checked), refuse a request the
 * address space cannot hold with NULL and ENOMEM, and go on serving afterwards.
 */
#include "check.h"

#include <pthread.h>
#include <sys/resource.h>

#define THREADS 4
#define MIB ((size_t)1 << 20)
#define LIVE_PER_THREAD (16 * MIB)
#define TOTAL_PER_THREAD (64 * MIB)
#define SLOTS 4096

struct block {
    unsigned char *data;
    size_t length;
    size_t seed;
};

static int failures[THREADS];

static size_t random_length(unsigned long long *state) {
    unsigned long long r = next_random(state);
    switch (r % 100) {
    case 0 ... 59:
        return 1 + (r >> 8) % 256;
    case 60 ... 89:
        return 256 + (r >> 8) % 4096;
    case 90 ... 98:
        return 4096 + (r >> 8) % (256 << 10);
    default:
        return (256 << 10) + (r >> 8) % (4 * MIB);
    }
}

static void *churn(void *argument) {
    size_t t = (size_t)argument;
    static struct block blocks[THREADS][SLOTS];
    struct block *mine = blocks[t];
    unsigned long long state = 0x12345678ull ^ (t + 1);
    size_t live = 0, total = 0, count = 0, oldest = 0, seed = t << 32;
    while (total < TOTAL_PER_THREAD) {
        size_t length = random_length(&state);
        unsigned char *data = malloc(length);
        if (data == NULL) {
            failures[t]++;
            return NULL;
        }
        fill(data, length < 512 ? length : 512, seed);
        mine[(oldest + count) % SLOTS] = (struct block){data, length, seed};
        count++;
        seed++;
        live += length;
        total += length;
        while (live > LIVE_PER_THREAD || count == SLOTS) {
            struct block *old = &mine[oldest];
            size_t checked = old->length < 512 ? old->length : 512;
            if (first_mismatch(old->data, checked, old->seed) != checked) {
                failures[t]++;
            }
            free(old->data);
            live -= old->length;
            oldest = (oldest + 1) % SLOTS;
            count--;
        }
    }
    for (; count > 0; count--, oldest = (oldest + 1) % SLOTS) {
        free(mine[oldest].data);
    }
    return NULL;
}

int main(void) {
    struct rlimit limit;
    CHECK(getrlimit(RLIMIT_AS, &limit) == 0, "getrlimit failed");
    CHECK(limit.rlim_cur == 256 * MIB, "run under RLIMIT_AS = 256 MiB (found %llu)",
          (unsigned long long)limit.rlim_cur);
    require_nodalloc();
    pthread_t threads[THREADS];
    for (size_t t = 0; t < THREADS; t++) {
        CHECK(pthread_create(&threads[t], NULL, churn, (void *)t) == 0, "pthread_create failed");
    }
    for (size_t t = 0; t < THREADS; t++) {
        CHECK(pthread_join(threads[t], NULL) == 0, "pthread_join failed");
        CHECK(failures[t] == 0, "thread %zu: %d allocations failed or lost their contents", t,
              failures[t]);
    }
    /* More than the whole address space: refused cleanly. */
    CHECK_FAILS_WITH(malloc(opaque_size(300 * MIB)), ENOMEM);
    CHECK_FAILS_WITH(calloc(opaque_size(1), opaque_size(512 * MIB)), ENOMEM);
    CHECK_FAILS_WITH(aligned_alloc(opaque_size(4096), opaque_size(1024 * MIB)), ENOMEM);
    /* And serving goes on (8 MiB: a quarter of the 128 MiB heap does not always find a hole
     * this soon after the churn, with bags still cached across the region). */
    unsigned char *after = malloc(opaque_size(8 * MIB));
    CHECK(after != NULL, "malloc(8 MiB) failed after the refusals: %s", strerror(errno));
    fill(after, 8 * MIB, 3);
    CHECK_PATTERN(after, 8 * MIB, 3);
    free(after);
    return finish("rlimit");
}
