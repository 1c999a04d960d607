/* A thread whose creation attributes carry an affinity keeps exactly that mask: nodalloc binds
 * threads to nodes (NODALLOC_BIND) but never changes a mask the program chose. A thread created
 * without one is bound as usual (its mask narrows to its node's CPUs), which shows the binding
 * is at work in the run. Needs several (simulated) nodes whose CPUs differ, and two CPUs.
 *
 * Usage: affinity (prints "ok affinity: N checks", or "skip: …" with fewer than two CPUs).
 */
#include "check.h"

#include <pthread.h>
#include <sched.h>

struct outcome {
    cpu_set_t before, after;
};

static void *worker(void *argument) {
    struct outcome *outcome = argument;
    CHECK(pthread_getaffinity_np(pthread_self(), sizeof outcome->before, &outcome->before) == 0,
          "pthread_getaffinity_np");
    for (int i = 0; i < 1000; i++) {
        char *block = malloc(opaque_size(64 + i));
        CHECK(block != NULL, "malloc");
        memset(block, 1, 64 + i);
        free(block);
    }
    CHECK(pthread_getaffinity_np(pthread_self(), sizeof outcome->after, &outcome->after) == 0,
          "pthread_getaffinity_np");
    return NULL;
}

int main(void) {
    require_nodalloc();
    cpu_set_t all;
    CHECK(sched_getaffinity(0, sizeof all, &all) == 0, "sched_getaffinity");
    if (CPU_COUNT(&all) < 2) {
        printf("skip: %d CPU\n", CPU_COUNT(&all));
        return 0;
    }
    /* Chosen by the program: every CPU the process may use, set explicitly. */
    pthread_attr_t attributes;
    CHECK(pthread_attr_init(&attributes) == 0, "pthread_attr_init");
    CHECK(pthread_attr_setaffinity_np(&attributes, sizeof all, &all) == 0, "setaffinity");
    struct outcome chosen, plain;
    pthread_t thread;
    CHECK(pthread_create(&thread, &attributes, worker, &chosen) == 0, "pthread_create");
    CHECK(pthread_join(thread, NULL) == 0, "pthread_join");
    CHECK(CPU_EQUAL(&chosen.before, &all) && CPU_EQUAL(&chosen.after, &all),
          "a mask the program chose was changed: %d CPUs at the start, %d after allocating, %d "
          "chosen",
          CPU_COUNT(&chosen.before), CPU_COUNT(&chosen.after), CPU_COUNT(&all));
    /* Not chosen: bound to one node's CPUs. */
    CHECK(pthread_create(&thread, NULL, worker, &plain) == 0, "pthread_create");
    CHECK(pthread_join(thread, NULL) == 0, "pthread_join");
    CHECK(CPU_COUNT(&plain.after) < CPU_COUNT(&all),
          "a thread without a chosen mask was not bound: %d of %d CPUs", CPU_COUNT(&plain.after),
          CPU_COUNT(&all));
    printf("ok affinity: %lu checks\n", (unsigned long)checks_passed);
    return 0;
}
