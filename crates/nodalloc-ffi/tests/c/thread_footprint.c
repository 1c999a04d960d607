/* What a thread costs in resident memory: 64 threads start, each takes one block of 64 bytes
 * (or none: argument "idle"), writes it, and waits on a barrier; the main thread reads VmRSS
 * before starting them and while they wait. Prints "thread_footprint kib_per_thread=N" (the
 * growth over the threads, in KiB, rounded up) and "ok thread_footprint: N checks". Run under
 * LD_PRELOAD and without it (glibc) by tests/c_abi/sparse.rs, which bounds the difference: a
 * thread's heap writes only its first fields and the lists of the classes it uses. */
#include "check.h"

#include <pthread.h>

enum { THREADS = 64 };

static pthread_barrier_t started, finished;
static int allocate;

static void *worker(void *argument) {
    unsigned char *block = NULL;
    if (allocate) {
        block = malloc(opaque_size(64));
        CHECK(block != NULL, "malloc(64) on a thread");
        fill(block, 64, 3);
    }
    pthread_barrier_wait(&started);
    pthread_barrier_wait(&finished);
    if (block) {
        CHECK(first_mismatch(block, 64, 3) == 64, "a thread's block keeps its bytes");
        free(block);
    }
    return argument;
}

int main(int argc, char **argv) {
    allocate = !(argc > 1 && !strcmp(argv[1], "idle"));
    /* The allocator started, and the first pool of thread heaps mapped, before the baseline. */
    free(malloc(opaque_size(64)));
    CHECK(pthread_barrier_init(&started, NULL, THREADS + 1) == 0, "barrier");
    CHECK(pthread_barrier_init(&finished, NULL, THREADS + 1) == 0, "barrier");
    long before = status_kib("VmRSS:");
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&threads[i], NULL, worker, NULL) == 0, "pthread_create %d", i);
    pthread_barrier_wait(&started);
    long during = status_kib("VmRSS:");
    pthread_barrier_wait(&finished);
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_join(threads[i], NULL) == 0, "pthread_join %d", i);
    CHECK(before > 0 && during > 0, "VmRSS read");
    long growth = during > before ? during - before : 0;
    printf("thread_footprint kib_per_thread=%ld\n", (growth + THREADS - 1) / THREADS);
    printf("ok thread_footprint: %lu checks\n", checks_passed);
    return 0;
}
