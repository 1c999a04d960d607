/* Waves of short threads, one after another: each allocates BLOCKS blocks of one size, fills,
 * checks and frees them, and exits. An exited thread's caches wait in its pooled heap for the
 * next thread, so after the first wave the blocks go from one wave to the next without a trip
 * through the node heap: nodalloc's report counts almost no "objects from bags" per 1000
 * allocations (a round trip through the bags costs 1000: every block out of them again). Then
 * the program goes quiet, and within a few upkeep periods the maintenance thread sends the
 * kept caches home: the report's thread caches ("cached" less "in rings") fall below one
 * wave's bytes.
 *
 * Usage: waves [WAVES] (default 300).
 */
#include "check.h"
#include "hostile.h"

#include <pthread.h>
#include <time.h>

#define BLOCKS 48
#define SIZE 200

/* The blocks' usable size (their class), as the threads see it. */
static _Atomic size_t usable;

static void *wave_thread(void *argument) {
    size_t seed = (size_t)argument;
    unsigned char *blocks[BLOCKS];
    for (size_t i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(opaque_size(SIZE));
        CHECK(blocks[i] != NULL, "malloc(%d) failed", SIZE);
        fill(blocks[i], SIZE, seed + i);
    }
    usable = malloc_usable_size(blocks[0]);
    for (size_t i = 0; i < BLOCKS; i++) {
        CHECK_PATTERN(blocks[i], SIZE, seed + i);
        free(blocks[i]);
    }
    return NULL;
}

static char text[1 << 16];

/* The number after `label` in nodalloc's report, after `within` if given (a line's start),
 * parsed as a size ("12.5 KiB") or a plain number; -1 when the report has no such field. */
static double report_value(const char *within, const char *label) {
    stats_text(text, sizeof text);
    const char *at = within != NULL ? strstr(text, within) : text;
    at = at != NULL ? strstr(at, label) : NULL;
    return at != NULL ? parse_size(at + strlen(label), NULL) : -1;
}

int main(int argc, char **argv) {
    size_t waves = argc > 1 ? strtoull(argv[1], NULL, 10) : 300;
    require_nodalloc();
    for (size_t wave = 0; wave < waves; wave++) {
        pthread_t thread;
        CHECK(pthread_create(&thread, NULL, wave_thread, (void *)(wave * BLOCKS)) == 0,
              "pthread_create failed");
        CHECK(pthread_join(thread, NULL) == 0, "pthread_join failed");
    }
    double from_bags = report_value(NULL, "objects from bags ");
    printf("waves: %zu waves of %d blocks: %.1f objects from bags per 1000 allocations\n", waves,
           BLOCKS, from_bags);
    CHECK(from_bags >= 0, "the report has no shared-operation counts");
    CHECK(from_bags < 250, "%.1f objects per 1000 allocations came from the bags", from_bags);
    /* Quiet: the kept caches go home within a few upkeep periods (100 ms each by default).
     * The blocks' class line of the report ("class 208 B: …, cached …"; the main thread does
     * not allocate this size) says how much of the class is still cached. */
    char line[64];
    snprintf(line, sizeof line, "class %zu B: ", (size_t)usable);
    double cached = report_value(line, "cached ");
    printf("waves: %.0f B of the blocks' class cached after the last wave\n", cached);
    CHECK(cached > 0, "the report has no line starting \"%s\" with blocks cached", line);
    for (int tries = 0; tries < 50; tries++) {
        struct timespec pause = {0, 100 * 1000 * 1000};
        nanosleep(&pause, NULL);
        /* A class with no bag left has no line: nothing of it is cached. */
        cached = report_value(line, "cached ");
        if (cached < SIZE * BLOCKS / 4) {
            break;
        }
    }
    printf("waves: %.0f B of the blocks' class cached once quiet (-1: no bag left)\n", cached);
    CHECK(cached < SIZE * BLOCKS / 4, "%.0f B still cached after 5 s", cached);
    return finish("waves");
}
