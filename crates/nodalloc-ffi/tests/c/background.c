/* The maintenance thread (NODALLOC_BACKGROUND: release by default, or 1).
 *
 * Usage: background none|thread|quiet|exit EXPECTED_THREADS. `none` never creates a thread: allocates,
 * frees, sleeps, and checks that the process has EXPECTED_THREADS threads (1: no maintenance
 * thread). `thread` creates and joins one worker (the safe point where the library starts the
 * maintenance thread), churns small blocks, sleeps through several upkeep periods and checks
 * the thread count (2 with the option: main and maintenance); then forks a child that
 * allocates, creates a thread of its own (the child's maintenance thread starts there), checks
 * its count the same way and exits. The harness checks the exit report's maintenance line.
 *
 * `quiet` forks a child that closes every file descriptor and blocks every signal before its
 * first thread (so the maintenance thread starts in that state), frees 64 MiB of touched large
 * blocks, and reports through its exit status alone that its resident memory fell back within
 * a second while it made no allocator call (the maintenance thread made the releases: with `1`
 * the child's own frees leave them to it; by default the decommit rule keeps memory the program
 * used lately and the thread's upkeep passes give it back).
 * `exit` frees 128 MiB of touched blocks and calls exit() at once, while the maintenance
 * thread has the releases to make: the process must end cleanly, every time.
 */
#include "check.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* Resident memory in KiB (/proc/self/statm), -1 when unreadable; no stdio (fds may be closed). */
static long resident_kib(void) {
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0) {
        return -1;
    }
    char text[128];
    ssize_t length = read(fd, text, sizeof text - 1);
    close(fd);
    if (length <= 0) {
        return -1;
    }
    text[length] = 0;
    long size = 0, resident = 0;
    if (sscanf(text, "%ld %ld", &size, &resident) != 2) {
        return -1;
    }
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

enum { BIG_BLOCKS = 64, BIG_BLOCK = 1 << 20 };

static char *blocks[256];

/* Allocates `count` touched 1 MiB blocks. */
static int touch(int count) {
    for (int i = 0; i < count; i++) {
        blocks[i] = malloc(opaque_size(BIG_BLOCK));
        if (blocks[i] == NULL) {
            return 0;
        }
        memset(blocks[i], i + 1, BIG_BLOCK);
    }
    return 1;
}

/* Frees the blocks `touch` allocated. */
static void free_touched(int count) {
    for (int i = 0; i < count; i++) {
        free(blocks[i]);
    }
}

/* Allocates `count` touched 1 MiB blocks and frees them. */
static int touch_and_free(int count) {
    if (!touch(count)) {
        return 0;
    }
    free_touched(count);
    return 1;
}

/* The `quiet` child: exit status 0 when the releases happened, a distinct code per failure. */
static int quiet_child(void) {
    sigset_t all;
    sigfillset(&all);
    if (sigprocmask(SIG_BLOCK, &all, NULL) != 0) {
        return 10;
    }
    struct rlimit files;
    long highest = getrlimit(RLIMIT_NOFILE, &files) == 0 ? (long)files.rlim_cur : 1024;
    for (long fd = 0; fd < highest && fd < 65536; fd++) {
        close((int)fd);
    }
    start_and_join_a_thread();
    long before = resident_kib();
    if (!touch(BIG_BLOCKS)) {
        return 11;
    }
    /* Read while the blocks are live: once they are freed, the maintenance thread may release
     * them before any read here, which is what is tested, not a failure. */
    long peak = resident_kib();
    free_touched(BIG_BLOCKS);
    if (before < 0 || peak - before < BIG_BLOCKS * (BIG_BLOCK / 1024) / 2) {
        return 12; /* the blocks were not resident: nothing to learn */
    }
    for (int waited = 0; waited < 100; waited++) {
        sleep_ms(10);
        if (resident_kib() - before < BIG_BLOCKS * (BIG_BLOCK / 1024) / 4) {
            return 0;
        }
    }
    return 13; /* still resident after a second */
}

int main(int argc, char **argv) {
    CHECK(argc == 3, "usage: background none|thread|quiet|exit EXPECTED_THREADS");
    require_nodalloc();
    int expected = atoi(argv[2]);
    if (strcmp(argv[1], "quiet") == 0) {
        pid_t child = fork();
        CHECK(child >= 0, "fork failed");
        if (child == 0) {
            _exit(quiet_child());
        }
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child, "waitpid failed");
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the child without fds and signals failed (status %#x; exit codes: 11 malloc, "
              "12 not resident, 13 not released)",
              status);
        return finish("background");
    }
    if (strcmp(argv[1], "exit") == 0) {
        start_and_join_a_thread();
        CHECK(touch_and_free(2 * BIG_BLOCKS), "malloc of a 1 MiB block failed");
        fflush(stdout);
        finish("background");
        exit(0);
    }
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
