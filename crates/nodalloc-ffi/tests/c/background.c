/* The maintenance thread (NODALLOC_BACKGROUND=1).
 *
 * Usage: background none|thread EXPECTED_THREADS. `none` never creates a thread: allocates,
 * frees, sleeps, and checks that the process has EXPECTED_THREADS threads (1: no maintenance
 * thread). `thread` creates and joins one worker (the safe point where the library starts the
 * maintenance thread), churns small blocks, sleeps through several upkeep periods and checks
 * the thread count (2 with the option: main and maintenance); then forks a child that
 * allocates, creates a thread of its own (the child's maintenance thread starts there), checks
 * its count the same way and exits. The harness checks the exit report's maintenance line.
 */
#include "check.h"

#include <pthread.h>
#include <sys/wait.h>
#include <time.h>

static int thread_count(void) {
    FILE *status = fopen("/proc/self/status", "r");
    CHECK(status != NULL, "cannot open /proc/self/status");
    char line[256];
    int threads = -1;
    while (fgets(line, sizeof line, status) != NULL) {
        if (sscanf(line, "Threads: %d", &threads) == 1) {
            break;
        }
    }
    fclose(status);
    return threads;
}

static void churn(int rounds) {
    enum { BLOCKS = 20000 };
    static void *blocks[BLOCKS];
    for (int round = 0; round < rounds; round++) {
        for (int i = 0; i < BLOCKS; i++) {
            blocks[i] = malloc(opaque_size(16 + (size_t)(i % 64) * 8));
            CHECK(blocks[i] != NULL, "malloc failed");
            memset(blocks[i], round, 16);
        }
        for (int i = 0; i < BLOCKS; i++) {
            free(blocks[i]);
        }
    }
}

static void sleep_ms(long ms) {
    struct timespec duration = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&duration, NULL);
}

static void *worker(void *argument) {
    churn(1);
    return argument;
}

static void start_and_join_a_thread(void) {
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, worker, NULL) == 0, "pthread_create failed");
    CHECK(pthread_join(thread, NULL) == 0, "pthread_join failed");
}

int main(int argc, char **argv) {
    CHECK(argc == 3, "usage: background none|thread EXPECTED_THREADS");
    require_nodalloc();
    int expected = atoi(argv[2]);
    if (strcmp(argv[1], "none") == 0) {
        churn(3);
        sleep_ms(250);
        CHECK(thread_count() == expected, "%d threads, expected %d", thread_count(), expected);
        return finish("background");
    }
    start_and_join_a_thread();
    churn(5);
    sleep_ms(350);
    CHECK(thread_count() == expected, "%d threads, expected %d", thread_count(), expected);
    pid_t child = fork();
    CHECK(child >= 0, "fork failed");
    if (child == 0) {
        /* Only the forking thread exists here; the child's first thread brings a new
         * maintenance thread. */
        churn(1);
        CHECK(thread_count() == 1, "the child has %d threads before its first", thread_count());
        start_and_join_a_thread();
        churn(2);
        sleep_ms(250);
        CHECK(thread_count() == expected, "the child has %d threads, expected %d",
              thread_count(), expected);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child, "waitpid failed");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed (status %#x)", status);
    churn(1);
    return finish("background");
}
