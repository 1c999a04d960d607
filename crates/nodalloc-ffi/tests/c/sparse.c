/* Resident memory of programs that touch what they allocate sparsely, or densely.
 *
 * Run with one pattern name; prints "PATTERN rss_growth_kib=N huge_kib=N" (RSS growth over
 * the pattern, and the process's AnonHugePages at its end) and "ok sparse: N checks". The
 * bounds live in tests/c_abi.rs; this program only checks contents and addresses.
 *
 *   buffer    one 512 MiB block, one byte written per MiB
 *   heads     4096 blocks of 100 000 B, the first 64 bytes of each written
 *   aligned   256 blocks of 4 KiB at 2 MiB alignment, each written whole
 *   table     one 128 MiB block, 2000 random 8-byte slots written
 *   calloc    4096 blocks of 100 000 B from calloc, the first 64 bytes of each written; then
 *             every byte checked, the blocks filled, freed and calloc'd again (reused memory
 *             must read zero too)
 *   dense     256 MiB of 64-byte objects, every byte written (should sit on huge pages)
 *   churn     a fragmenting churn of small objects (90 % freed at random), then a phase of
 *             medium objects (1-8 KiB, only their first bytes written); prints the peak growth
 *             and, as drained_kib=N, the growth left after everything is freed and the
 *             program idles 1.5 s, allocating a little
 *   untouched 64 blocks of 16 KiB: prints, as resident_after_malloc=N, how many of their
 *             first pages are resident before the program writes them (malloc writes nothing
 *             into a block carved for the first time), then writes, checks and frees them
 *   holes     8192 blocks of 1-64 KiB, every byte written, 90 % freed at random; prints, as
 *             kept_kib=N, the growth left after the program idles 2 s allocating a little, and
 *             live_kib=N, the bytes the survivors hold (their pages must be all that stays)
 *   first     the process's first block of 1 000 B and of 2 000 B, each written whole: prints,
 *             as bag_pages=N, how many pages of the two 32 KiB units holding them are resident
 *             (a thread's first refill of a class takes a page's worth of objects, and the
 *             marks run a page ahead, so the rest of each bag stays untouched)
 */
#include "check.h"

#include <sys/mman.h>
#include <time.h>

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static long huge_kib(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kib = 0;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

static void report(const char *pattern, long before) {
    printf("%s rss_growth_kib=%ld huge_kib=%ld\n", pattern, rss_kib() - before, huge_kib());
}

static void pattern_buffer(void) {
    long before = rss_kib();
    size_t size = opaque_size(512ul << 20);
    volatile char *p = malloc(size);
    CHECK(p != NULL, "malloc(512 MiB)");
    for (size_t i = 0; i < size; i += 1 << 20)
        p[i] = (char)i;
    report("buffer", before);
    free((void *)p);
}

static void pattern_heads(void) {
    enum { COUNT = 4096 };
    static char *blocks[COUNT];
    long before = rss_kib();
    for (int i = 0; i < COUNT; i++) {
        blocks[i] = malloc(opaque_size(100000));
        CHECK(blocks[i] != NULL, "malloc(100000) #%d", i);
        memset(blocks[i], i, 64);
    }
    report("heads", before);
    for (int i = 0; i < COUNT; i++) {
        CHECK(blocks[i][63] == (char)i, "block %d kept its head", i);
        free(blocks[i]);
    }
}

static void pattern_aligned(void) {
    enum { COUNT = 256 };
    static char *blocks[COUNT];
    long before = rss_kib();
    for (int i = 0; i < COUNT; i++) {
        blocks[i] = aligned_alloc(opaque_size(2u << 20), opaque_size(4096));
        CHECK(blocks[i] != NULL, "aligned_alloc #%d", i);
        CHECK(((uintptr_t)blocks[i] & ((2u << 20) - 1)) == 0, "%p is 2 MiB aligned",
              (void *)blocks[i]);
        memset(blocks[i], i, 4096);
    }
    report("aligned", before);
    for (int i = 0; i < COUNT; i++)
        free(blocks[i]);
}

/* Every byte of `block` past `from` is zero. */
static int zero_from(const unsigned char *block, size_t from, size_t size) {
    for (size_t i = from; i < size; i++)
        if (block[i])
            return 0;
    return 1;
}

static void pattern_calloc(void) {
    enum { COUNT = 4096, SIZE = 100000 };
    static unsigned char *blocks[COUNT];
    long before = rss_kib();
    for (int i = 0; i < COUNT; i++) {
        blocks[i] = calloc(1, opaque_size(SIZE));
        CHECK(blocks[i] != NULL, "calloc(1, 100000) #%d", i);
        memset(blocks[i], i, 64);
    }
    report("calloc", before);
    for (int i = 0; i < COUNT; i++) {
        CHECK(zero_from(blocks[i], 64, SIZE), "calloc'd block %d is not zero", i);
        memset(blocks[i], 0xA5, SIZE);
        free(blocks[i]);
    }
    for (int i = 0; i < COUNT; i++) {
        blocks[i] = calloc(opaque_size(SIZE), 1);
        CHECK(blocks[i] != NULL && zero_from(blocks[i], 0, SIZE),
              "reused calloc'd block %d is not zero", i);
    }
    for (int i = 0; i < COUNT; i++)
        free(blocks[i]);
}

static void pattern_table(void) {
    long before = rss_kib();
    size_t slots = opaque_size(128ul << 20) / 8;
    volatile unsigned long long *table = malloc(slots * 8);
    CHECK(table != NULL, "malloc(128 MiB)");
    unsigned long long state = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 2000; i++)
        table[next_random(&state) % slots] = state;
    report("table", before);
    free((void *)table);
}

static void pattern_dense(void) {
    enum { SIZE = 64 };
    size_t count = (256ul << 20) / SIZE;
    char **objects = malloc(opaque_size(count * sizeof(char *)));
    CHECK(objects != NULL, "malloc of the pointer array");
    long before = rss_kib();
    for (size_t i = 0; i < count; i++) {
        objects[i] = malloc(opaque_size(SIZE));
        CHECK(objects[i] != NULL, "malloc(64) #%zu", i);
        memset(objects[i], (int)i, SIZE);
    }
    report("dense", before);
    for (size_t i = 0; i < count; i++)
        free(objects[i]);
    free(objects);
}

/* A malloc and free the compiler cannot fold away (it removes free(malloc(n)) pairs). */
static void malloc_and_free(size_t size) {
    void *volatile block = malloc(opaque_size(size));
    free(block);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Idles 50 ms a step, allocating a little each time as a quiet program would. */
static void idle(int steps) {
    for (int step = 0; step < steps; step++) {
        sleep_ms(50);
        malloc_and_free(64);
        malloc_and_free(1 << 20);
    }
}

static void pattern_churn(void) {
    enum { SMALL = 2000000, MEDIUM = 100000 };
    char **small = malloc(opaque_size(SMALL * sizeof(char *)));
    char **medium = malloc(opaque_size(MEDIUM * sizeof(char *)));
    CHECK(small != NULL && medium != NULL, "pointer arrays");
    /* The arrays are resident before the first measurement: only the objects count. */
    memset(small, 0, SMALL * sizeof(char *));
    memset(medium, 0, MEDIUM * sizeof(char *));
    unsigned long long state = 0x2545F4914F6CDD1Dull;
    long before = rss_kib(), peak = 0;
    /* Small objects of 16-256 bytes, all written, then 90 % freed at random. */
    for (int i = 0; i < SMALL; i++) {
        size_t size = 16 + next_random(&state) % 241;
        small[i] = malloc(opaque_size(size));
        CHECK(small[i] != NULL, "small #%d", i);
        memset(small[i], i, size);
    }
    for (int i = 0; i < SMALL; i++)
        if (next_random(&state) % 10 != 0) {
            free(small[i]);
            small[i] = NULL;
        }
    /* Medium objects, only their first 16 bytes written. */
    for (int i = 0; i < MEDIUM; i++) {
        size_t size = 1024 + next_random(&state) % (7 * 1024 + 1);
        medium[i] = malloc(opaque_size(size));
        CHECK(medium[i] != NULL, "medium #%d", i);
        memset(medium[i], i, 16);
        if (i % 1000 == 0 && rss_kib() > peak)
            peak = rss_kib();
    }
    if (rss_kib() > peak)
        peak = rss_kib();
    for (int i = 0; i < SMALL; i++)
        free(small[i]);
    for (int i = 0; i < MEDIUM; i++)
        free(medium[i]);
    /* Idle 1.5 s, allocating a little every 50 ms as a quiet program would. */
    idle(30);
    printf("churn rss_growth_kib=%ld drained_kib=%ld huge_kib=%ld\n", peak - before,
           rss_kib() - before, huge_kib());
    free(small);
    free(medium);
}

static void pattern_holes(void) {
    enum { COUNT = 8192 };
    char **blocks = malloc(opaque_size(COUNT * sizeof(char *)));
    size_t *sizes = malloc(opaque_size(COUNT * sizeof(size_t)));
    CHECK(blocks != NULL && sizes != NULL, "arrays");
    memset(blocks, 0, COUNT * sizeof(char *));
    memset(sizes, 0, COUNT * sizeof(size_t));
    unsigned long long state = 0x9E3779B97F4A7C15ull;
    long before = rss_kib();
    for (int i = 0; i < COUNT; i++) {
        sizes[i] = 1024 + next_random(&state) % (63 * 1024 + 1);
        blocks[i] = malloc(opaque_size(sizes[i]));
        CHECK(blocks[i] != NULL, "block #%d", i);
        memset(blocks[i], (char)i, sizes[i]);
    }
    long peak = rss_kib() - before;
    size_t live = 0;
    for (int i = 0; i < COUNT; i++) {
        if (next_random(&state) % 10 != 0) {
            free(blocks[i]);
            blocks[i] = NULL;
        } else {
            live += sizes[i];
        }
    }
    /* Two seconds: the sweep leaves a class the program still holds quiet for one. */
    idle(40);
    long kept = rss_kib() - before;
    for (int i = 0; i < COUNT; i++) {
        if (blocks[i] != NULL) {
            CHECK(blocks[i][0] == (char)i && blocks[i][sizes[i] - 1] == (char)i,
                  "block %d kept its contents", i);
            free(blocks[i]);
        }
    }
    printf("holes rss_growth_kib=%ld kept_kib=%ld live_kib=%zu\n", peak, kept, live / 1024);
    free(blocks);
    free(sizes);
}

static void pattern_untouched(void) {
    enum { COUNT = 64, SIZE = 16 << 10 };
    static char *blocks[COUNT];
    long page = sysconf(_SC_PAGESIZE);
    int resident = 0;
    for (int i = 0; i < COUNT; i++) {
        blocks[i] = malloc(opaque_size(SIZE));
        CHECK(blocks[i] != NULL, "malloc(16 KiB)");
    }
    for (int i = 0; i < COUNT; i++) {
        unsigned char vector = 0;
        CHECK(mincore((void *)((uintptr_t)blocks[i] & ~(uintptr_t)(page - 1)), 1, &vector) == 0,
              "mincore(%p)", (void *)blocks[i]);
        resident += vector & 1;
    }
    for (int i = 0; i < COUNT; i++)
        memset(blocks[i], i, SIZE);
    for (int i = 0; i < COUNT; i++) {
        CHECK(blocks[i][0] == (char)i && blocks[i][SIZE - 1] == (char)i, "block %d kept its bytes", i);
        free(blocks[i]);
    }
    printf("untouched rss_growth_kib=0 resident_after_malloc=%d\n", resident);
}

static void pattern_first(void) {
    enum { UNIT = 32 << 10 };
    static const size_t sizes[] = {1000, 2000};
    size_t pages = UNIT / (size_t)sysconf(_SC_PAGESIZE);
    int resident = 0;
    for (int i = 0; i < 2; i++) {
        unsigned char *block = malloc(opaque_size(sizes[i]));
        CHECK(block != NULL, "malloc(%zu)", sizes[i]);
        fill(block, sizes[i], (size_t)i);
        unsigned char vector[UNIT / 4096];
        void *unit = (void *)((uintptr_t)block & ~(uintptr_t)(UNIT - 1));
        CHECK(pages <= sizeof vector && mincore(unit, UNIT, vector) == 0, "mincore(%p)", unit);
        for (size_t j = 0; j < pages; j++)
            resident += vector[j] & 1;
        CHECK(first_mismatch(block, sizes[i], (size_t)i) == sizes[i], "block %d kept its bytes", i);
        free(block);
    }
    printf("first rss_growth_kib=0 bag_pages=%d\n", resident);
}

int main(int argc, char **argv) {
    /* Start the allocator (and stdio's buffers) before the first measurement. */
    malloc_and_free(64);
    printf("start\n");
    const char *pattern = argc > 1 ? argv[1] : "";
    if (!strcmp(pattern, "buffer"))
        pattern_buffer();
    else if (!strcmp(pattern, "heads"))
        pattern_heads();
    else if (!strcmp(pattern, "aligned"))
        pattern_aligned();
    else if (!strcmp(pattern, "table"))
        pattern_table();
    else if (!strcmp(pattern, "calloc"))
        pattern_calloc();
    else if (!strcmp(pattern, "dense"))
        pattern_dense();
    else if (!strcmp(pattern, "churn"))
        pattern_churn();
    else if (!strcmp(pattern, "holes"))
        pattern_holes();
    else if (!strcmp(pattern, "untouched"))
        pattern_untouched();
    else if (!strcmp(pattern, "first"))
        pattern_first();
    else
        CHECK(0, "unknown pattern '%s'", pattern);
    printf("ok sparse: %lu checks\n", checks_passed);
    return 0;
}
