/* Heap profiles (NODALLOC_PROFILE=1): three call sites with known byte totals, two kept and
 * one freed, a profile written on demand (argv[1]) while another thread allocates, and a dump
 * to a path that cannot be written (an errno back, the program goes on). With argv[2], a child
 * forked after the allocations frees every keep_small block and writes its profile there
 * first. PROFILE_THREADS=N shares the sites' allocations among N threads. The harness reads
 * the profiles with Google's pprof. Prints the true bytes of each site. */

#include "check.h"

#include <pthread.h>
#ifndef PROFILE_NAME
#define PROFILE_NAME "profile"
#endif
#include <sys/wait.h>

/* Each site calls malloc itself (the tail call is opaque_pointer's), so the return address
 * is inside it, and keeps a frame (the program is built with frame pointers). */
#define SITE __attribute__((noinline, noipa))

SITE static void *keep_small(size_t size) { return opaque_pointer(malloc(size)); }
/* With PROFILE_HEAP set, keep_medium's blocks come from a first-class heap. */
static nodalloc_heap_t *medium_heap;
SITE static void *keep_medium(size_t size) {
    return opaque_pointer(medium_heap ? NODALLOC(nodalloc_heap_malloc)(medium_heap, size)
                                      : malloc(size));
}
SITE static void *churn(size_t size) { return opaque_pointer(malloc(size)); }

static volatile int stop;

static void *allocate_meanwhile(void *unused) {
    (void)unused;
    while (!stop) {
        void *p = malloc(opaque_size(100));
        CHECK(p != NULL, "malloc(100) failed");
        free(p);
    }
    return NULL;
}

static const size_t small = 48, small_total = 16u << 20;
static const size_t medium = 700, medium_total = 8u << 20;
static const size_t churned = 300, churn_total = 16u << 20;
static size_t small_count, medium_count, threads = 1;
static void **kept;

/* Share `index` of `threads` of the three sites' allocations. */
static void *allocate_share(void *index_pointer) {
    size_t index = (size_t)index_pointer;
    size_t from = small_count * index / threads, to = small_count * (index + 1) / threads;
    for (size_t i = from; i < to; i++) {
        kept[i] = keep_small(opaque_size(small));
        CHECK(kept[i] != NULL, "keep_small");
        memset(kept[i], 1, small);
    }
    from = medium_count * index / threads, to = medium_count * (index + 1) / threads;
    for (size_t i = from; i < to; i++) {
        void **slot = &kept[small_count + i];
        *slot = keep_medium(opaque_size(medium));
        CHECK(*slot != NULL, "keep_medium");
        memset(*slot, 1, 16);
    }
    size_t churn_count = churn_total / churned;
    from = churn_count * index / threads, to = churn_count * (index + 1) / threads;
    for (size_t i = from; i < to; i++) {
        void *p = churn(opaque_size(churned));
        CHECK(p != NULL, "churn");
        memset(p, 1, 16);
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    small_count = small_total / small, medium_count = medium_total / medium;
    const char *threads_wanted = getenv("PROFILE_THREADS");
    if (threads_wanted != NULL)
        threads = (size_t)atoi(threads_wanted);
    CHECK(threads >= 1 && threads <= 64, "PROFILE_THREADS=%zu", threads);
    if (getenv("PROFILE_HEAP") != NULL) {
        medium_heap = NODALLOC(nodalloc_heap_new)(NULL);
        CHECK(medium_heap != NULL, "nodalloc_heap_new");
    }
    kept = malloc((small_count + medium_count) * sizeof(void *));
    CHECK(kept != NULL, "the array of kept blocks");
    if (threads == 1) {
        allocate_share(0);
    } else {
        pthread_t workers[64];
        for (size_t t = 0; t < threads; t++)
            CHECK(pthread_create(&workers[t], NULL, allocate_share, (void *)t) == 0, "create");
        for (size_t t = 0; t < threads; t++)
            CHECK(pthread_join(workers[t], NULL) == 0, "join");
    }

    if (argc > 2) {
        pid_t child = fork();
        CHECK(child >= 0, "fork");
        if (child == 0) {
            for (size_t i = 0; i < small_count; i++)
                free(kept[i]);
            int result = NODALLOC(nodalloc_profile_dump)(argv[2]);
            CHECK(result == 0, "the child's dump: %s", strerror(result));
            _exit(0);
        }
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child, "waitpid");
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed: %d", status);
    }

    pthread_t other;
    CHECK(pthread_create(&other, NULL, allocate_meanwhile, NULL) == 0, "pthread_create");
    if (argc > 1) {
        int result = NODALLOC(nodalloc_profile_dump)(argv[1]);
        CHECK(result == 0, "nodalloc_profile_dump(%s): %s", argv[1], strerror(result));
    }
    int refused = NODALLOC(nodalloc_profile_dump)("/nonexistent-directory/profile.pb");
    CHECK(refused == ENOENT, "a dump to a missing directory: %d", refused);
    CHECK(NODALLOC(nodalloc_profile_dump)(NULL) == EINVAL, "a dump to NULL");
    stop = 1;
    CHECK(pthread_join(other, NULL) == 0, "pthread_join");

    printf("keep_small %zu\nkeep_medium %zu\nchurn %zu\narray %zu\n", small_count * small,
           medium_count * medium, (churn_total / churned) * churned,
           (small_count + medium_count) * sizeof(void *));
    return finish(PROFILE_NAME);
}
