/* Soak: a mixed workload on many threads for a given time, with RSS checked against the bytes
 * the program holds.
 *
 * Usage: soak SECONDS [THREADS] (default 8 threads).
 *
 * Each thread allocates sizes from 16 B to 1 MiB, skewed small (60 % up to 256 B, 30 % up to
 * 4 KiB, 9 % up to 64 KiB, 1 % up to 1 MiB), writes every byte, and keeps blocks for lifetimes
 * from none to minutes: 30 % are freed at once, the rest go to a short ring (512 slots), a
 * medium ring (4096 slots, random replacement) or a long-lived table (256 slots whose blocks
 * expire 5 s to 3 min after they were made); 1 in 16 is swapped through a shared mailbox and
 * freed by whichever thread takes it (cross-thread frees). Every block carries its size and seed
 * in its first 16 bytes and is checked (header, every 4 KiB, last byte) before it is freed.
 *
 * The main thread reads the bytes live in blocks every 20 ms and samples RSS (/proc/self/statm)
 * every second. After a warm-up (a third of the run, at most 30 s) every sample must satisfy
 *     RSS <= 1.5 x recent live + allowance
 * where recent live is the most bytes live at any read within the last second (nodalloc keeps
 * the memory of a recent peak of use for one or two decommit delays, 100-200 ms, so that use
 * which falls and rises again does not fault it in again: what it must never hold is much more
 * than the program held lately). The ratio is the 1.3 this workload held until the cap on young
 * free memory followed demand, plus what that lets a busy heap keep committed: up to an eighth
 * of the bytes in use, which the bags' free slots put above the live bytes (1.3 + 1.3 / 8,
 * rounded up). The allowance is the RSS measured at the start, with every
 * thread started but before the first block: code, libraries, stacks, stdio, nodalloc's
 * metadata at rest, all of which the workload's own bytes do not cover. Prints a line per sample, a summary line, and exits 1
 * if any sample broke the bound.
 */
#include "check.h"
#include "hostile.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define MAX_THREADS 64
#define SHORT_SLOTS 512
#define MEDIUM_SLOTS 4096
#define LONG_SLOTS 256
#define MAILBOX_SLOTS 1024
#define RATIO 1.5

struct header {
    size_t length;
    size_t seed;
};

struct long_slot {
    unsigned char *block;
    double expires;
};

static _Atomic long live_bytes;
static _Atomic unsigned long operations;
static _Atomic unsigned long cross_thread_frees;
static _Atomic int stop;
static _Atomic int started;
static _Atomic int go;
static _Atomic(unsigned char *) mailbox[MAILBOX_SLOTS];

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t random_length(unsigned long long *state) {
    unsigned long long r = next_random(state);
    switch (r % 100) {
    case 0 ... 59:
        return 16 + (r >> 8) % 241;
    case 60 ... 89:
        return 256 + (r >> 8) % 3841;
    case 90 ... 98:
        return 4096 + (r >> 8) % (60 << 10);
    default:
        return (64 << 10) + (r >> 8) % (960 << 10);
    }
}

static unsigned char *make_block(unsigned long long *state, size_t seed) {
    size_t length = random_length(state);
    unsigned char *block = malloc(length);
    CHECK(block != NULL, "malloc(%zu) failed", length);
    struct header header = {length, seed};
    memcpy(block, &header, sizeof header);
    memset(block + sizeof header, (int)(seed & 0xff), length - sizeof header);
    live_bytes += (long)length;
    return block;
}

static void check_and_free(unsigned char *block) {
    if (block == NULL) {
        return;
    }
    struct header header;
    memcpy(&header, block, sizeof header);
    CHECK(header.length >= 16 && header.length <= (1 << 20), "block %p has a bad header (%zu)",
          (void *)block, header.length);
    unsigned char expected = (unsigned char)(header.seed & 0xff);
    for (size_t i = sizeof header; i < header.length; i += 4096) {
        CHECK(block[i] == expected, "block %p (%zu B, seed %zu) differs at byte %zu",
              (void *)block, header.length, header.seed, i);
    }
    CHECK(header.length == sizeof header || block[header.length - 1] == expected,
          "block %p (%zu B) differs at its last byte", (void *)block, header.length);
    live_bytes -= (long)header.length;
    free(block);
}

static void *worker(void *argument) {
    size_t id = (size_t)argument;
    unsigned long long state = 0x9E3779B97F4A7C15ull * (id + 1);
    unsigned char **short_ring = calloc(SHORT_SLOTS, sizeof *short_ring);
    unsigned char **medium = calloc(MEDIUM_SLOTS, sizeof *medium);
    struct long_slot *long_lived = calloc(LONG_SLOTS, sizeof *long_lived);
    CHECK(short_ring && medium && long_lived, "calloc of the rings failed");
    started++;
    while (!go) {
        usleep(1000);
    }
    size_t seed = id << 48, short_next = 0, long_next = 0;
    unsigned long local_ops = 0;
    double now = now_seconds();
    while (!stop) {
        unsigned long long r = next_random(&state);
        unsigned char *block = make_block(&state, seed++);
        switch (r % 100) {
        case 0 ... 29:
            check_and_free(block);
            break;
        case 30 ... 59:
            check_and_free(short_ring[short_next]);
            short_ring[short_next] = block;
            short_next = (short_next + 1) % SHORT_SLOTS;
            break;
        case 60 ... 93: {
            size_t slot = (r >> 16) % MEDIUM_SLOTS;
            check_and_free(medium[slot]);
            medium[slot] = block;
            break;
        }
        default: {
            /* One long-lived slot looked at per visit: expired (or empty) ones are renewed. */
            struct long_slot *slot = &long_lived[long_next];
            long_next = (long_next + 1) % LONG_SLOTS;
            if (slot->block == NULL || slot->expires <= now) {
                check_and_free(slot->block);
                slot->block = block;
                slot->expires = now + 5 + (double)((r >> 20) % 175);
            } else {
                check_and_free(block);
            }
            break;
        }
        }
        if ((r >> 40) % 16 == 0) {
            unsigned char *passed = make_block(&state, seed++);
            unsigned char *taken = atomic_exchange(&mailbox[(r >> 24) % MAILBOX_SLOTS], passed);
            if (taken != NULL) {
                cross_thread_frees++;
            }
            check_and_free(taken);
        }
        if (++local_ops % 1024 == 0) {
            operations += 1024;
            now = now_seconds();
        }
    }
    for (size_t i = 0; i < SHORT_SLOTS; i++) {
        check_and_free(short_ring[i]);
    }
    for (size_t i = 0; i < MEDIUM_SLOTS; i++) {
        check_and_free(medium[i]);
    }
    for (size_t i = 0; i < LONG_SLOTS; i++) {
        check_and_free(long_lived[i].block);
    }
    free(short_ring);
    free(medium);
    free(long_lived);
    return NULL;
}

/* RSS without stdio (no allocation while sampling). */
static size_t rss_now(void) {
    char text[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    ssize_t length = read(fd, text, sizeof text - 1);
    close(fd);
    if (length <= 0) {
        return 0;
    }
    text[length] = '\0';
    char *after = NULL;
    strtoul(text, &after, 10);
    return (size_t)strtoul(after, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv) {
    CHECK(argc >= 2, "usage: soak SECONDS [THREADS]");
    const long seconds = strtol(argv[1], NULL, 10);
    const size_t threads = argc > 2 ? strtoul(argv[2], NULL, 10) : 8;
    CHECK(seconds >= 3 && threads >= 1 && threads <= MAX_THREADS, "bad arguments");
    require_nodalloc();
    const long warm_up = seconds / 3 < 30 ? seconds / 3 : 30;

    pthread_t workers[MAX_THREADS];
    for (size_t t = 0; t < threads; t++) {
        CHECK(pthread_create(&workers[t], NULL, worker, (void *)t) == 0, "pthread_create failed");
    }
    while (started < (int)threads) {
        usleep(1000);
    }
    const size_t allowance = rss_now();
    printf("soak: %ld s, %zu threads, warm-up %ld s, allowance (RSS at start) %zu KiB, bound: "
           "RSS <= %.1f x recent live + allowance\n",
           seconds, threads, warm_up, allowance >> 10, RATIO);
    fflush(stdout);
    go = 1;

    const double start = now_seconds();
    double worst_ratio = 0, worst_at = 0, worst_excess = -1e18;
    size_t peak_rss = 0, peak_live = 0, violations = 0;
    for (long tick = 1; tick <= seconds; tick++) {
        double wake = start + (double)tick;
        long recent = 0;
        while (now_seconds() < wake) {
            long now_live = live_bytes;
            recent = now_live > recent ? now_live : recent;
            usleep(20000);
        }
        size_t rss = rss_now();
        long live = live_bytes;
        recent = live > recent ? live : recent;
        double ratio = live > 0 ? (double)rss / (double)live : 0;
        /* What the 1.3 bounds: RSS beyond the allowance, per byte live lately. */
        double over_allowance =
            recent > 0 ? ((double)rss - (double)allowance) / (double)recent : 0;
        double bound = RATIO * (double)recent + (double)allowance;
        int checked = tick > warm_up;
        peak_rss = rss > peak_rss ? rss : peak_rss;
        peak_live = (size_t)live > peak_live ? (size_t)live : peak_live;
        if (checked) {
            if (over_allowance > worst_ratio) {
                worst_ratio = over_allowance;
                worst_at = (double)tick;
            }
            if ((double)rss - bound > worst_excess) {
                worst_excess = (double)rss - bound;
            }
            if ((double)rss > bound) {
                violations++;
            }
        }
        printf("t=%ld rss=%zu KiB live=%ld KiB recent live=%ld KiB rss/live=%.3f "
               "(rss-allowance)/recent live=%.3f ops=%lu%s%s\n",
               tick, rss >> 10, live >> 10, recent >> 10, ratio, over_allowance,
               (unsigned long)operations, checked ? "" : " (warm-up)",
               checked && (double)rss > bound ? " OVER" : "");
        fflush(stdout);
    }
    stop = 1;
    for (size_t t = 0; t < threads; t++) {
        CHECK(pthread_join(workers[t], NULL) == 0, "pthread_join failed");
    }
    for (size_t i = 0; i < MAILBOX_SLOTS; i++) {
        check_and_free(atomic_exchange(&mailbox[i], NULL));
    }
    CHECK(live_bytes == 0, "%ld bytes still counted live after every block was freed",
          (long)live_bytes);
    printf("soak summary: %ld s, %zu threads, %lu ops, %lu cross-thread frees, worst "
           "(RSS-allowance)/recent live %.3f (t=%.0f s), peak RSS %zu MiB, peak live %zu MiB, allowance %zu KiB, worst "
           "margin %+.1f MiB, %zu samples over the bound\n",
           seconds, threads, (unsigned long)operations, (unsigned long)cross_thread_frees,
           worst_ratio, worst_at, peak_rss >> 20, peak_live >> 20, allowance >> 10,
           worst_excess / 1048576, violations);
    CHECK(violations == 0, "%zu samples had RSS over %.1f x recent live + %zu KiB", violations, RATIO,
          allowance >> 10);
    CHECK(operations > 0, "no operations");
    return finish("soak");
}
