/* threads [N]: the cost of a thread's life under the process's malloc. N threads (default
 * 10 000), one at a time: each is created, allocates and frees a 64-byte and a 1000-byte block,
 * and is joined. Prints microseconds per thread; run it under /usr/bin/time for user and system
 * time. Thread-heap set-up and retirement dominate what the allocator adds:
 *   cc -O2 -pthread -o /tmp/threads crates/nodalloc-bench/c/threads.c
 *   LD_PRELOAD=target/release/libnodalloc.so /usr/bin/time /tmp/threads */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void *body(void *arg) {
    void *volatile p = malloc(64);
    free(p);
    p = malloc(1000);
    free(p);
    return arg;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int i = 0; i < n; i++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, body, NULL) != 0) {
            fprintf(stderr, "threads: pthread_create failed\n");
            return 1;
        }
        pthread_join(thread, NULL);
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("%.1f us/thread\n", ns / 1e3 / n);
    return 0;
}
