/* 100 000 short-lived threads, in waves of eight: each allocates a few blocks of a few sizes,
 * frees some at once, hands the rest to the main thread (which checks and frees them), and
 * exits. RSS after all of them must stay within twice the RSS after a warm-up of 10 000 threads
 * (by then the retained free spans of the large blocks have been touched), and nodalloc must
 * count no more live thread heaps than at the start.
 *
 * Usage: threads100k [THREADS] (default 100000).
 */
#include "check.h"
#include "hostile.h"

#include <pthread.h>

#define WAVE 8
#define WARM_UP 10000
#define KEPT 4

struct work {
    size_t id;
    unsigned char *kept[KEPT];
    size_t kept_length[KEPT];
    int failed;
};

static const size_t lengths[] = {24, 100, 1000, 5000, 40000, 300000};
#define LENGTHS (sizeof lengths / sizeof lengths[0])

static void *short_life(void *argument) {
    struct work *work = argument;
    unsigned char *blocks[2 * LENGTHS];
    for (size_t i = 0; i < 2 * LENGTHS; i++) {
        size_t length = lengths[(i + work->id) % LENGTHS];
        blocks[i] = malloc(length);
        if (blocks[i] == NULL) {
            work->failed = 1;
            return NULL;
        }
        fill(blocks[i], length < 256 ? length : 256, work->id + i);
    }
    /* Most are freed here, a few outlive the thread. */
    for (size_t i = 0; i < 2 * LENGTHS; i++) {
        size_t length = lengths[(i + work->id) % LENGTHS];
        if (i < KEPT) {
            work->kept[i] = blocks[i];
            work->kept_length[i] = length;
        } else {
            free(blocks[i]);
        }
    }
    return NULL;
}

static void wave(size_t first_id) {
    pthread_t threads[WAVE];
    struct work works[WAVE];
    for (size_t t = 0; t < WAVE; t++) {
        memset(&works[t], 0, sizeof works[t]);
        works[t].id = first_id + t;
        CHECK(pthread_create(&threads[t], NULL, short_life, &works[t]) == 0,
              "pthread_create failed");
    }
    for (size_t t = 0; t < WAVE; t++) {
        CHECK(pthread_join(threads[t], NULL) == 0, "pthread_join failed");
        CHECK(!works[t].failed, "thread %zu could not allocate", works[t].id);
        for (size_t i = 0; i < KEPT; i++) {
            size_t length = works[t].kept_length[i];
            CHECK_PATTERN(works[t].kept[i], length < 256 ? length : 256, works[t].id + i);
            free(works[t].kept[i]);
        }
    }
}

int main(int argc, char **argv) {
    size_t total = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000;
    require_nodalloc();
    long threads_at_start = stats_live_threads();
    size_t id = 0;
    for (; id < WARM_UP; id += WAVE) {
        wave(id);
    }
    size_t after_warm_up = rss_bytes();
    size_t peak = after_warm_up;
    for (; id < total; id += WAVE) {
        wave(id);
        if (id % 8192 == 0) {
            size_t now = rss_bytes();
            peak = now > peak ? now : peak;
        }
    }
    size_t at_end = rss_bytes();
    peak = at_end > peak ? at_end : peak;
    long threads_at_end = stats_live_threads();
    printf("threads100k: %zu threads, rss after %d: %zu KiB, peak %zu KiB, at the end %zu KiB\n",
           id, WARM_UP, after_warm_up >> 10, peak >> 10, at_end >> 10);
    CHECK(peak <= 2 * after_warm_up, "RSS grew from %zu KiB to %zu KiB", after_warm_up >> 10,
          peak >> 10);
    CHECK(threads_at_end <= threads_at_start, "%ld thread heaps live at the end, %ld at the start",
          threads_at_end, threads_at_start);
    return finish("threads100k");
}
