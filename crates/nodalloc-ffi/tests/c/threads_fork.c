/* Cross-thread frees under fork: four threads pass blocks to each other through a shared queue
 * (each consumer checks the producer's pattern, then frees a block another thread allocated)
 * while the main thread forks 1000 times. Every child allocates and frees a few hundred blocks,
 * frees some blocks its parent allocated, and exits; the parent checks each child's status.
 * A lock held across fork, or a heap left inconsistent in the child, shows as a child that
 * hangs (its alarm kills it) or fails its checks.
 */
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#define THREADS 4
#define FORKS 1000
#define QUEUE_CAPACITY 4096
/* Each thread runs at least this many operations, even if the forks finish first. */
#define MIN_OPERATIONS 50000
#define PARENT_BLOCKS 64
#define PAUSE_EVERY 256
#define PAUSE_MICROSECONDS 200
/* A child that has not finished by then is stuck (normally a child takes well under 10 ms). */
#define CHILD_ALARM_SECONDS 30

struct item {
    unsigned char *block;
    size_t length;
    size_t seed;
};

static struct {
    pthread_mutex_t lock;
    struct item items[QUEUE_CAPACITY];
    size_t head, count;
} queue = {.lock = PTHREAD_MUTEX_INITIALIZER};

static atomic_int forks_done;
static atomic_ulong cross_thread_frees;

/* Swaps `incoming` (if any) into the queue and returns the oldest item when the queue is full or
 * when asked to take one; an item with a NULL block when there is none. */
static struct item exchange(const struct item *incoming, int take) {
    struct item out = {NULL, 0, 0};
    pthread_mutex_lock(&queue.lock);
    if ((take || queue.count == QUEUE_CAPACITY) && queue.count > 0) {
        out = queue.items[queue.head];
        queue.head = (queue.head + 1) % QUEUE_CAPACITY;
        queue.count--;
    }
    if (incoming != NULL) {
        queue.items[(queue.head + queue.count) % QUEUE_CAPACITY] = *incoming;
        queue.count++;
    }
    pthread_mutex_unlock(&queue.lock);
    return out;
}

static size_t random_length(unsigned long long *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    unsigned shape = (unsigned)(*state >> 24) & 1023;
    size_t value = (size_t)(*state >> 33);
    /* Mostly small blocks, some medium, and a few large ones (above 256 KiB), which take a
     * different path through the allocator. */
    if (shape < 960) {
        return value % 1024;
    }
    if (shape < 1022) {
        return value % (16 * 1024);
    }
    return 256 * 1024 + value % (256 * 1024);
}

static void consume(struct item item) {
    if (item.block == NULL) {
        return;
    }
    CHECK_PATTERN(item.block, item.length, item.seed);
    free(item.block);
    atomic_fetch_add_explicit(&cross_thread_frees, 1, memory_order_relaxed);
}

static void *worker(void *argument) {
    size_t thread = (size_t)argument;
    unsigned long long state = 0x1234567ull + thread * 0x9e3779b97f4a7c15ull;
    /* Blocks this thread allocates and frees itself, beside the ones it passes on. */
    struct item own[32] = {{0}};
    for (size_t operation = 0;
         operation < MIN_OPERATIONS || atomic_load(&forks_done) < FORKS; operation++) {
        size_t seed = (thread << 48) | operation;
        size_t length = random_length(&state);
        unsigned char *block = malloc(length);
        CHECK(block != NULL, "thread %zu: malloc(%zu) failed", thread, length);
        fill(block, length, seed);
        struct item made = {block, length, seed};
        if (operation % 3 == 0) {
            struct item *slot = &own[operation % 32];
            if (slot->block != NULL) {
                CHECK_PATTERN(slot->block, slot->length, slot->seed);
                free(slot->block);
            }
            *slot = made;
            consume(exchange(NULL, 1));
        } else {
            consume(exchange(&made, operation % 3 == 1));
        }
        /* Pauses leave CPU time to the forking thread and its children (two cores are shared
         * by six runnable threads otherwise), without stopping the traffic. */
        if (operation % PAUSE_EVERY == PAUSE_EVERY - 1) {
            usleep(PAUSE_MICROSECONDS);
        }
    }
    for (size_t i = 0; i < 32; i++) {
        if (own[i].block != NULL) {
            CHECK_PATTERN(own[i].block, own[i].length, own[i].seed);
            free(own[i].block);
        }
    }
    return NULL;
}

/* In a child, only write and _exit: stdio buffers and atexit handlers belong to the parent. */
static void child_fail(const char *message, size_t value) {
    char text[160];
    int length = snprintf(text, sizeof text, "child %d: %s (%zu)\n", (int)getpid(), message,
                          value);
    if (write(2, text, (size_t)length) < 0) {
        _exit(4);
    }
    _exit(3);
}

static void child(struct item *parent_blocks, size_t round) {
    alarm(CHILD_ALARM_SECONDS);
    unsigned long long state = round * 0x9e3779b97f4a7c15ull + 1;
    enum { LIVE = 50 };
    struct item live[LIVE] = {{0}};
    for (size_t i = 0; i < 300; i++) {
        struct item *slot = &live[i % LIVE];
        if (slot->block != NULL) {
            if (first_mismatch(slot->block, slot->length, slot->seed) != slot->length) {
                child_fail("a child's block was corrupted", i);
            }
            free(slot->block);
        }
        slot->length = random_length(&state);
        slot->seed = i;
        slot->block = malloc(slot->length);
        if (slot->block == NULL) {
            child_fail("malloc failed in the child", slot->length);
        }
        fill(slot->block, slot->length, slot->seed);
    }
    for (size_t i = 0; i < LIVE; i++) {
        free(live[i].block);
    }
    /* Blocks the parent allocated (before the fork) are the child's copies now: it may free
     * them. */
    for (size_t i = round % 2; i < PARENT_BLOCKS; i += 2) {
        struct item *inherited = &parent_blocks[i];
        if (first_mismatch(inherited->block, inherited->length, inherited->seed) !=
            inherited->length) {
            child_fail("an inherited block was corrupted", i);
        }
        free(inherited->block);
    }
    _exit(0);
}

int main(void) {
    require_nodalloc();
    struct item parent_blocks[PARENT_BLOCKS];
    unsigned long long state = 42;
    for (size_t i = 0; i < PARENT_BLOCKS; i++) {
        size_t length = random_length(&state);
        parent_blocks[i] = (struct item){malloc(length), length, i};
        CHECK(parent_blocks[i].block != NULL, "malloc(%zu) failed", length);
        fill(parent_blocks[i].block, length, i);
    }
    /* Output written before fork must not be flushed again by a child. */
    fflush(stdout);

    pthread_t threads[THREADS];
    for (size_t t = 0; t < THREADS; t++) {
        CHECK(pthread_create(&threads[t], NULL, worker, (void *)t) == 0, "pthread_create failed");
    }
    for (size_t round = 0; round < FORKS; round++) {
        pid_t pid = fork();
        CHECK(pid >= 0, "fork %zu failed: %s", round, strerror(errno));
        if (pid == 0) {
            child(parent_blocks, round);
        }
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid, "waitpid failed: %s", strerror(errno));
        CHECK(!WIFSIGNALED(status), "child %zu was killed by signal %d%s", round,
              WTERMSIG(status),
              WTERMSIG(status) == SIGALRM ? " (its alarm: it hung, likely on a lock)" : "");
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %zu exited with %d", round,
              WEXITSTATUS(status));
        /* The parent keeps allocating between forks, so forks happen in varied heap states. */
        size_t replaced = round % PARENT_BLOCKS;
        CHECK_PATTERN(parent_blocks[replaced].block, parent_blocks[replaced].length,
                      parent_blocks[replaced].seed);
        free(parent_blocks[replaced].block);
        size_t length = random_length(&state);
        parent_blocks[replaced] = (struct item){malloc(length), length, 1000 + round};
        CHECK(parent_blocks[replaced].block != NULL, "malloc(%zu) failed", length);
        fill(parent_blocks[replaced].block, length, 1000 + round);
        atomic_fetch_add(&forks_done, 1);
    }
    for (size_t t = 0; t < THREADS; t++) {
        CHECK(pthread_join(threads[t], NULL) == 0, "pthread_join failed");
    }
    for (struct item left = exchange(NULL, 1); left.block != NULL; left = exchange(NULL, 1)) {
        consume(left);
    }
    for (size_t i = 0; i < PARENT_BLOCKS; i++) {
        CHECK_PATTERN(parent_blocks[i].block, parent_blocks[i].length, parent_blocks[i].seed);
        free(parent_blocks[i].block);
    }
    CHECK(atomic_load(&cross_thread_frees) >= THREADS * MIN_OPERATIONS / 2,
          "only %lu blocks went through the queue", atomic_load(&cross_thread_frees));
    printf("%d forks, %lu blocks passed between threads\n", FORKS,
           atomic_load(&cross_thread_frees));
    return finish("threads_fork");
}
