/* Allocation at the edges of a thread's and a process's life, and exit() under load.
 *
 * Usage:
 *   exit handlers     atexit handlers (one registered from inside another, one that starts and
 *                     joins a thread) malloc/realloc/calloc/free with content checks; threads
 *                     allocate from a C++-style thread_local destructor (__cxa_thread_atexit_impl,
 *                     run before the pthread key destructors) and from a pthread key destructor
 *                     created after the first malloc, which re-arms itself for three rounds: the
 *                     later rounds run after nodalloc's own key destructor has retired the
 *                     thread's heap (checked: nodalloc no longer counts the thread). A _Thread_local
 *                     block is freed there too. Prints `ok exit: N checks` from the last atexit
 *                     handler to run.
 *   exit main         four threads in tight malloc/free loops (holding blocks, passing some to
 *                     each other) while the main thread calls exit(0)
 *   exit worker       the same, but one of the workers calls exit(0)
 * A hang (a lock nodalloc holds at exit, a destructor waiting for a busy thread) is caught by
 * the harness's time limit.
 */
#include "check.h"
#include "hostile.h"

#include <pthread.h>
#include <stdatomic.h>

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)

/* ---------------------------------------------------------------- handlers ---------------- */

#define HANDLER_THREADS 4
#define KEY_ROUNDS 3

extern int __cxa_thread_atexit_impl(void (*destructor)(void *), void *object, void *dso_handle);
extern void *__dso_handle;

static pthread_key_t late_key;
static _Thread_local unsigned char *thread_block;
static _Thread_local size_t thread_block_length;
static _Atomic int key_rounds_done;
static _Atomic int rounds_after_retirement;
static _Atomic int tls_destructors_done;
static long threads_before_workers;

/* A few blocks of every size range: filled, checked, grown by realloc (contents kept), zeroed
 * by calloc, freed. `seed` keeps blocks of different callers apart. */
static void churn(size_t seed) {
    static const size_t sizes[] = {1, 24, 100, 1000, 5000, 70 * KIB, 300 * KIB, 2 * MIB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t length = sizes[i];
        unsigned char *block = malloc(opaque_size(length));
        CHECK(block != NULL, "malloc(%zu) failed", length);
        fill(block, length, seed + i);
        size_t grown = length * 3 + 17;
        unsigned char *moved = realloc(block, opaque_size(grown));
        CHECK(moved != NULL, "realloc(%zu -> %zu) failed", length, grown);
        CHECK_PATTERN(moved, length, seed + i);
        unsigned char *shrunk = realloc(moved, opaque_size(length / 2 + 1));
        CHECK(shrunk != NULL, "realloc shrink failed");
        CHECK_PATTERN(shrunk, length / 2 + 1, seed + i);
        unsigned char *zeroed = calloc(opaque_size(length), 1);
        CHECK(zeroed != NULL, "calloc(%zu) failed", length);
        CHECK(first_nonzero(zeroed, length) == length, "calloc(%zu) not zeroed", length);
        free(zeroed);
        free(shrunk);
    }
}

struct key_value {
    int round;
    unsigned char *block;
    size_t length;
    size_t seed;
};

static void late_key_destructor(void *value) {
    struct key_value *state = value;
    CHECK_PATTERN(state->block, state->length, state->seed);
    /* From round 2 on, glibc calls only re-armed keys: nodalloc's destructor ran in round 1,
     * whichever index its key has. */
    if (state->round >= 2) {
        long live = stats_live_threads();
        CHECK(live >= 0 && live <= threads_before_workers,
              "round %d: nodalloc still counts the exiting thread (%ld live, %ld before)",
              state->round, live, threads_before_workers);
        rounds_after_retirement++;
    }
    churn(state->seed * 10 + (size_t)state->round);
    if (thread_block != NULL) {
        CHECK_PATTERN(thread_block, thread_block_length, 77);
        free(thread_block);
        thread_block = NULL;
    }
    unsigned char *grown = realloc(state->block, opaque_size(state->length * 2));
    CHECK(grown != NULL, "realloc in a key destructor failed");
    CHECK_PATTERN(grown, state->length, state->seed);
    free(grown);
    key_rounds_done++;
    if (state->round < KEY_ROUNDS) {
        struct key_value *next = malloc(opaque_size(sizeof *next));
        CHECK(next != NULL, "malloc in a key destructor failed");
        next->round = state->round + 1;
        next->length = 3000 + (size_t)state->round * 50000;
        next->seed = state->seed + 1;
        next->block = malloc(opaque_size(next->length));
        CHECK(next->block != NULL, "malloc in a key destructor failed");
        fill(next->block, next->length, next->seed);
        CHECK(pthread_setspecific(late_key, next) == 0, "re-arming the key failed");
    }
    free(state);
}

/* Runs while glibc runs C++ thread_local destructors, before any pthread key destructor. */
static void tls_destructor(void *object) {
    unsigned char *block = object;
    CHECK_PATTERN(block, 4000, 55);
    churn(900);
    free(block);
    tls_destructors_done++;
}

static void *handler_thread(void *argument) {
    size_t id = (size_t)argument;
    unsigned char *first = malloc(opaque_size(64));
    CHECK(first != NULL, "a thread's first malloc failed");
    free(first);
    thread_block_length = 9000 + id;
    thread_block = malloc(opaque_size(thread_block_length));
    CHECK(thread_block != NULL, "malloc failed");
    fill(thread_block, thread_block_length, 77);

    unsigned char *for_tls = malloc(opaque_size(4000));
    CHECK(for_tls != NULL, "malloc failed");
    fill(for_tls, 4000, 55);
    CHECK(__cxa_thread_atexit_impl(tls_destructor, for_tls, &__dso_handle) == 0,
          "__cxa_thread_atexit_impl failed");

    struct key_value *state = malloc(opaque_size(sizeof *state));
    CHECK(state != NULL, "malloc failed");
    state->round = 1;
    state->length = 1000 + id;
    state->seed = 1000 * (id + 1);
    state->block = malloc(opaque_size(state->length));
    CHECK(state->block != NULL, "malloc failed");
    fill(state->block, state->length, state->seed);
    CHECK(pthread_setspecific(late_key, state) == 0, "pthread_setspecific failed");
    churn(id);
    return NULL;
}

static unsigned char *handed_between_handlers;

static void report_handler(void) {
    /* Registered first, so it runs last. */
    CHECK(handed_between_handlers == NULL, "the consuming handler did not run");
    churn(5000);
    printf("ok exit: %lu checks\n", (unsigned long)checks_passed);
    fflush(stdout);
}

static void consume_handler(void) {
    CHECK(handed_between_handlers != NULL, "the producing handler did not run");
    CHECK_PATTERN(handed_between_handlers, 200 * KIB, 31);
    free(handed_between_handlers);
    handed_between_handlers = NULL;
}

static void registered_from_a_handler(void) { churn(7000); }

static void *thread_started_at_exit(void *argument) {
    (void)argument;
    churn(8000);
    return malloc(opaque_size(333));
}

static void produce_handler(void) {
    churn(6000);
    handed_between_handlers = malloc(opaque_size(200 * KIB));
    CHECK(handed_between_handlers != NULL, "malloc in an atexit handler failed");
    fill(handed_between_handlers, 200 * KIB, 31);
    CHECK(atexit(registered_from_a_handler) == 0, "atexit from a handler failed");
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, thread_started_at_exit, NULL) == 0,
          "pthread_create in an atexit handler failed");
    void *result = NULL;
    CHECK(pthread_join(thread, &result) == 0, "pthread_join failed");
    CHECK(result != NULL, "the thread started at exit could not allocate");
    free(result);
}

static int handlers(void) {
    require_nodalloc();
    /* After the first malloc: this key's index follows nodalloc's exit key. */
    CHECK(pthread_key_create(&late_key, late_key_destructor) == 0, "pthread_key_create failed");
    threads_before_workers = stats_live_threads();
    CHECK(threads_before_workers >= 1, "nodalloc counts %ld threads", threads_before_workers);
    for (size_t id = 0; id < HANDLER_THREADS; id++) {
        pthread_t thread;
        CHECK(pthread_create(&thread, NULL, handler_thread, (void *)id) == 0,
              "pthread_create failed");
        CHECK(pthread_join(thread, NULL) == 0, "pthread_join failed");
    }
    CHECK(tls_destructors_done == HANDLER_THREADS, "%d thread_local destructors ran",
          (int)tls_destructors_done);
    CHECK(key_rounds_done == HANDLER_THREADS * KEY_ROUNDS, "%d key destructor rounds ran",
          (int)key_rounds_done);
    CHECK(rounds_after_retirement == HANDLER_THREADS * (KEY_ROUNDS - 1),
          "%d rounds ran after the heap was retired", (int)rounds_after_retirement);
    CHECK(atexit(report_handler) == 0, "atexit failed");
    CHECK(atexit(consume_handler) == 0, "atexit failed");
    CHECK(atexit(produce_handler) == 0, "atexit failed");
    return 0;
}

/* ---------------------------------------------------------------- exit under load -------- */

#define WORKERS 4
#define SLOTS 256
#define MAILBOX 64

static _Atomic(unsigned char *) mailbox[MAILBOX];
static _Atomic unsigned long iterations[WORKERS];
static int worker_calls_exit;
/* Set once the main thread has seen every worker busy; worker 0 then exits (worker variant). */
static _Atomic unsigned long exit_at;

static void *busy_worker(void *argument) {
    size_t id = (size_t)argument;
    unsigned char *held[SLOTS] = {0};
    unsigned long long state = 0x9E3779B97F4A7C15ull * (id + 1);
    for (unsigned long i = 0;; i++) {
        next_random(&state);
        size_t slot = state % SLOTS;
        size_t length = (state >> 20) % 16 == 0 ? 4096 + (state >> 32) % (600 * KIB)
                                                  : 16 + (state >> 32) % 2000;
        free(held[slot]);
        held[slot] = malloc(length);
        if (held[slot] == NULL) {
            abort();
        }
        memset(held[slot], (int)id, length < 256 ? length : 256);
        /* Hand a block to whichever thread takes this mailbox slot next. */
        unsigned char *passed = malloc(16 + (state >> 40) % 500);
        if (passed == NULL) {
            abort();
        }
        free(atomic_exchange(&mailbox[(state >> 8) % MAILBOX], passed));
        iterations[id] = i;
        if (worker_calls_exit && id == 0 && exit_at != 0 && i >= exit_at) {
            exit(0);
        }
    }
    return NULL;
}

static int exit_under_load(int from_worker) {
    require_nodalloc();
    worker_calls_exit = from_worker;
    pthread_t threads[WORKERS];
    for (size_t id = 0; id < WORKERS; id++) {
        CHECK(pthread_create(&threads[id], NULL, busy_worker, (void *)id) == 0,
              "pthread_create failed");
    }
    /* Let every worker get going. */
    for (size_t id = 0; id < WORKERS; id++) {
        while (iterations[id] < 2000) {
            usleep(100);
        }
    }
    printf("ok exit: %lu checks\n", (unsigned long)checks_passed);
    fflush(stdout);
    if (from_worker) {
        exit_at = iterations[0] + 5000;
        pthread_join(threads[0], NULL);
        /* Not reached: worker 0 ends the process. */
        return 3;
    }
    exit(0);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "handlers") == 0) {
        return handlers();
    }
    if (argc == 2 && strcmp(argv[1], "main") == 0) {
        return exit_under_load(0);
    }
    if (argc == 2 && strcmp(argv[1], "worker") == 0) {
        return exit_under_load(1);
    }
    fprintf(stderr, "usage: exit handlers|main|worker\n");
    return 2;
}
