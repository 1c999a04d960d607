/* Heap profiles (NODALLOC_PROFILE=1): three call sites with known byte totals, two kept and
 * one freed, a profile written on demand (argv[1]) while another thread allocates, and a dump
 * to a path that cannot be written (an errno back, the program goes on). With argv[2], a child
 * forked after the allocations frees every keep_small block and writes its profile there
 * first. The harness reads the profiles with Google's pprof. Prints the true bytes of each
 * site. */

#include "check.h"

#include <pthread.h>
#include <sys/wait.h>

/* Each site calls malloc itself (the tail call is opaque_pointer's), so the return address
 * is inside it, and keeps a frame (the program is built with frame pointers). */
#define SITE __attribute__((noinline, noipa))

SITE static void *keep_small(size_t size) { return opaque_pointer(malloc(size)); }
SITE static void *keep_medium(size_t size) { return opaque_pointer(malloc(size)); }
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

int main(int argc, char **argv) {
    const size_t small = 48, small_total = 16u << 20;
    const size_t medium = 700, medium_total = 8u << 20;
    const size_t churned = 300, churn_total = 16u << 20;
    size_t small_count = small_total / small, medium_count = medium_total / medium;
    void **kept = malloc((small_count + medium_count) * sizeof(void *));
    CHECK(kept != NULL, "the array of kept blocks");
    size_t k = 0;
    for (size_t i = 0; i < small_count; i++) {
        kept[k] = keep_small(opaque_size(small));
        CHECK(kept[k] != NULL, "keep_small");
        memset(kept[k++], 1, small);
    }
    for (size_t i = 0; i < medium_count; i++) {
        kept[k] = keep_medium(opaque_size(medium));
        CHECK(kept[k] != NULL, "keep_medium");
        memset(kept[k++], 1, 16);
    }
    for (size_t i = 0; i < churn_total / churned; i++) {
        void *p = churn(opaque_size(churned));
        CHECK(p != NULL, "churn");
        memset(p, 1, 16);
        free(p);
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
    return finish("profile");
}
