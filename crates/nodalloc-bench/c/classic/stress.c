/*
 * stress.c -- timed mixes of malloc, free and realloc: mstress, glibc-simple,
 * glibc-thread, malloc-large, fill-walk, grow and bursts.
 *
 * Each workload is described in main.c, which calls it through its table.
 */
#include "classic.h"

#include <sys/resource.h>

/* ------------------------------------------------------------------------ */
/* mstress                                                                  */
/* ------------------------------------------------------------------------ */

#define MS_SLOTS 2000
#define MS_XCHG 256

/* Block layout: first 8 bytes w0 = (id << 24) | size, last 8 bytes mix(w0).
 * Sizes are 16..256 KiB, so the two words never overlap and size fits in 24
 * bits.  id = thread (12 bits) << 28 | per-thread counter (28 bits). */
typedef struct {
    void *p;
    uint64_t w0;
} ms_slot_t;

typedef struct {
    int id;
    uint64_t steps;
    uint64_t mallocs, frees, reallocs, adopted;
} ms_arg_t;

static _Atomic(void *) ms_xchg[MS_XCHG];

static inline size_t ms_size(rng_t *r)
{
    uint64_t x = rng_below(r, 1000);
    if (x < 900)
        return rng_range(r, 16, 256);
    if (x < 995)
        return rng_range(r, 257, 16384);
    return rng_range(r, 16385, 262144);
}

static inline void ms_check(const void *p, uint64_t w0, const char *what)
{
    size_t sz = (size_t)(w0 & 0xffffff);
    if (get64(p, 0) != w0)
        die("%s: block %p header %#llx, expected %#llx", what, p,
            (unsigned long long)get64(p, 0), (unsigned long long)w0);
    if (get64(p, sz - 8) != mix64(w0))
        die("%s: block %p (size %zu) has a corrupted trailer", what, p, sz);
}

static inline void ms_tag(void *p, uint64_t w0)
{
    put64(p, 0, w0);
    put64(p, (size_t)(w0 & 0xffffff) - 8, mix64(w0));
}

static void *ms_thread(void *arg)
{
    ms_arg_t *a = arg;
    rng_t rng = rng_seed(5, (uint64_t)a->id);
    ms_slot_t *slots = xmmap(sizeof(ms_slot_t) * MS_SLOTS);
    uint64_t counter = 0;
    uint64_t idbase = ((uint64_t)a->id & 0xfff) << 28;
    uint64_t mallocs = 0, frees = 0, reallocs = 0, adopted = 0;
#define MS_NEWW0(sz) (((idbase | (counter++ & 0xfffffff)) << 24) | (uint64_t)(sz))
    gate_wait();
    for (uint64_t i = 0; i < a->steps; i++) {
        ms_slot_t *s = &slots[rng_below(&rng, MS_SLOTS)];
        if (s->p == NULL) {
            size_t sz = ms_size(&rng);
            s->p = xmalloc(sz);
            s->w0 = MS_NEWW0(sz);
            ms_tag(s->p, s->w0);
            mallocs++;
            continue;
        }
        uint64_t op = rng_below(&rng, 100);
        if (op < 45) { /* free */
            ms_check(s->p, s->w0, "free");
            free(s->p);
            frees++;
            s->p = NULL;
        } else if (op < 75) { /* realloc */
            ms_check(s->p, s->w0, "realloc");
            size_t old = (size_t)(s->w0 & 0xffffff);
            size_t sz = ms_size(&rng);
            char *np = realloc(s->p, sz);
            if (np == NULL)
                die("realloc(%zu) returned NULL", sz);
            if (get64(np, 0) != s->w0)
                die("realloc %zu -> %zu lost the header", old, sz);
            if (sz >= old && get64(np, old - 8) != mix64(s->w0))
                die("realloc %zu -> %zu lost the trailer", old, sz);
            s->p = np;
            s->w0 = MS_NEWW0(sz);
            ms_tag(np, s->w0);
            reallocs++;
        } else if (op < 95) { /* replace */
            ms_check(s->p, s->w0, "replace");
            free(s->p);
            frees++;
            size_t sz = ms_size(&rng);
            s->p = xmalloc(sz);
            s->w0 = MS_NEWW0(sz);
            ms_tag(s->p, s->w0);
            mallocs++;
        } else { /* hand the block to whichever thread comes next */
            ms_check(s->p, s->w0, "transfer");
            void *q = atomic_exchange_explicit(&ms_xchg[rng_below(&rng, MS_XCHG)], s->p,
                                               memory_order_acq_rel);
            s->p = q;
            if (q != NULL) {
                uint64_t w0 = get64(q, 0);
                size_t sz = (size_t)(w0 & 0xffffff);
                if (sz < 16 || sz > 262144)
                    die("adopted block %p has a corrupted header %#llx", q,
                        (unsigned long long)w0);
                ms_check(q, w0, "adopt");
                s->w0 = w0;
                adopted++;
            }
        }
    }
#undef MS_NEWW0
    for (size_t k = 0; k < MS_SLOTS; k++) {
        if (slots[k].p) {
            ms_check(slots[k].p, slots[k].w0, "teardown");
            free(slots[k].p);
            frees++;
        }
    }
    xmunmap(slots, sizeof(ms_slot_t) * MS_SLOTS);
    a->mallocs = mallocs;
    a->frees = frees;
    a->reallocs = reallocs;
    a->adopted = adopted;
    return NULL;
}

void wl_mstress(void)
{
    int T = g_threads;
    ms_arg_t *args = xmmap(sizeof(ms_arg_t) * (size_t)T);
    for (int i = 0; i < MS_XCHG; i++)
        atomic_store(&ms_xchg[i], NULL);
    for (int i = 0; i < T; i++) {
        args[i].id = i;
        args[i].steps = scaled(3000000);
    }
    uint64_t elapsed = run_threads(T, ms_thread, args, sizeof(ms_arg_t));
    /* Blocks still parked in the exchange array are freed by main (timed). */
    uint64_t t1 = now_ns();
    uint64_t mallocs = 0, frees = 0, reallocs = 0, adopted = 0;
    for (int i = 0; i < MS_XCHG; i++) {
        void *q = atomic_exchange(&ms_xchg[i], NULL);
        if (q) {
            uint64_t w0 = get64(q, 0);
            size_t sz = (size_t)(w0 & 0xffffff);
            if (sz < 16 || sz > 262144)
                die("parked block %p has a corrupted header", q);
            ms_check(q, w0, "drain");
            free(q);
            frees++;
        }
    }
    elapsed += now_ns() - t1;
    for (int i = 0; i < T; i++) {
        mallocs += args[i].mallocs;
        frees += args[i].frees;
        reallocs += args[i].reallocs;
        adopted += args[i].adopted;
    }
    if (mallocs != frees)
        die("counts do not balance: %llu mallocs, %llu frees", (unsigned long long)mallocs,
            (unsigned long long)frees);
    xmunmap(args, sizeof(ms_arg_t) * (size_t)T);
    char extra[96];
    snprintf(extra, sizeof extra, "reallocs=%llu transfers=%llu", (unsigned long long)reallocs,
             (unsigned long long)adopted);
    print_result(mallocs + reallocs, elapsed, T, extra);
}

/* ------------------------------------------------------------------------ */
/* glibc-simple                                                             */
/* ------------------------------------------------------------------------ */

#define GS_BURST 1000

static void *gs_blocks[GS_BURST];

void wl_glibc_simple(void)
{
    static const size_t sizes[4] = {16, 32, 64, 128};
    uint64_t loop = scaled(20000000);
    uint64_t bursts = scaled(10000);
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < loop; i++) {
        void *p = xmalloc(sizes[i & 3]);
        escape(p);
        free(p);
    }
    uint64_t t1 = now_ns();
    for (uint64_t r = 0; r < bursts; r++) {
        size_t sz = sizes[r & 3];
        for (int j = 0; j < GS_BURST; j++) {
            gs_blocks[j] = xmalloc(sz);
            escape(gs_blocks[j]);
        }
        for (int j = 0; j < GS_BURST; j++)
            free(gs_blocks[j]);
    }
    uint64_t t2 = now_ns();
    char extra[96];
    snprintf(extra, sizeof extra, "loop_ns=%llu burst_ns=%llu", (unsigned long long)(t1 - t0),
             (unsigned long long)(t2 - t1));
    print_result(loop + bursts * GS_BURST, t2 - t0, 1, extra);
}

/* ------------------------------------------------------------------------ */
/* glibc-thread                                                             */
/* ------------------------------------------------------------------------ */

#define GT_SLOTS 100

static void *gt_thread(void *arg)
{
    iter_arg_t *a = arg;
    rng_t rng = rng_seed(7, (uint64_t)a->id);
    void *slots[GT_SLOTS];
    memset(slots, 0, sizeof slots);
    gate_wait();
    for (uint64_t i = 0; i < a->iters; i++) {
        size_t k = (size_t)rng_below(&rng, GT_SLOTS);
        free(slots[k]);
        size_t sz = rng_range(&rng, 1, 512);
        char *p = xmalloc(sz);
        p[0] = (char)i;
        slots[k] = p;
    }
    for (int k = 0; k < GT_SLOTS; k++)
        free(slots[k]);
    return NULL;
}

void wl_glibc_thread(void)
{
    run_iter_workers(gt_thread, 10000000);
}

/* ------------------------------------------------------------------------ */
/* malloc-large                                                             */
/* ------------------------------------------------------------------------ */

#define ML_TOTAL_LIVE 20
#define ML_MAX_RING 20

typedef struct {
    int id;
    int depth;
    uint64_t iters;
    size_t min_size, max_size;
} ml_arg_t;

static void ml_check(const char *p, size_t sz)
{
    size_t last = (sz - 1) & ~(size_t)4095;
    if (p[0] != (char)(sz >> 12) || p[last] != (char)((last >> 12) ^ sz))
        die("large block %p (%zu bytes) was corrupted", (const void *)p, sz);
}

static void *ml_thread(void *arg)
{
    ml_arg_t *a = arg;
    rng_t rng = rng_seed(8, (uint64_t)a->id);
    char *ring[ML_MAX_RING];
    size_t sizes[ML_MAX_RING];
    memset(ring, 0, sizeof ring);
    gate_wait();
    for (uint64_t i = 0; i < a->iters; i++) {
        int k = (int)(i % (uint64_t)a->depth);
        if (ring[k]) { /* the oldest */
            ml_check(ring[k], sizes[k]);
            free(ring[k]);
        }
        size_t sz = rng_range(&rng, a->min_size, a->max_size);
        char *p = xmalloc(sz);
        for (size_t off = 0; off < sz; off += 4096)
            p[off] = (char)((off >> 12) ^ sz);
        p[0] = (char)(sz >> 12);
        ring[k] = p;
        sizes[k] = sz;
    }
    for (int k = 0; k < a->depth; k++) {
        if (ring[k]) {
            ml_check(ring[k], sizes[k]);
            free(ring[k]);
        }
    }
    return NULL;
}

void wl_malloc_large(void)
{
    int T = g_threads;
    int depth = (ML_TOTAL_LIVE + T - 1) / T;
    if (depth < 2)
        depth = 2;
    ml_arg_t *args = xmmap(sizeof(ml_arg_t) * (size_t)T);
    /* SCALE=0 (smoke test): 3 blocks per thread of a tenth of the size. */
    uint64_t iters = g_scale == 0 ? 3 : scaled(50);
    size_t div = g_scale == 0 ? 10 : 1;
    for (int i = 0; i < T; i++) {
        args[i].id = i;
        args[i].depth = depth;
        args[i].iters = iters;
        args[i].min_size = ((size_t)5 << 20) / div;
        args[i].max_size = ((size_t)25 << 20) / div;
    }
    uint64_t elapsed = run_threads(T, ml_thread, args, sizeof(ml_arg_t));
    xmunmap(args, sizeof(ml_arg_t) * (size_t)T);
    char extra[64];
    snprintf(extra, sizeof extra, "ring_depth=%d", depth);
    print_result(iters * (uint64_t)T, elapsed, T, extra);
}

/* ------------------------------------------------------------------------ */
/* fill-walk                                                                */
/* ------------------------------------------------------------------------ */

/* Sizes of the rounds: just above 512, 1024 and 2048 B, and a small one. */
static const size_t fw_sizes[4] = {520, 1100, 2100, 64};

void wl_fill_walk(void)
{
    uint64_t total = scaled(64) << 20; /* bytes per round */
    uint64_t ops = 0, sum = 0;
    uint64_t t0 = now_ns();
    for (int round = 0; round < 4; round++) {
        size_t size = fw_sizes[round];
        size_t n = (size_t)(total / size);
        uint64_t **blocks = xmmap(sizeof(void *) * n);
        for (size_t i = 0; i < n; i++) {
            blocks[i] = xmalloc(size);
            for (size_t k = 0; k < size / 8; k++)
                blocks[i][k] = (uint64_t)i + k;
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t *b = blocks[i];
            for (size_t k = 0; k < size / 8; k++)
                sum += b[k] - k;
        }
        for (size_t i = 0; i < n; i++)
            free(blocks[i]);
        xmunmap(blocks, sizeof(void *) * n);
        uint64_t want = (uint64_t)n * (n - 1) / 2 * (size / 8);
        if (sum != want)
            die("a block lost its contents at %zu B", size);
        sum = 0;
        ops += n;
    }
    print_result(ops, now_ns() - t0, 1, NULL);
}

/* ------------------------------------------------------------------------ */
/* bursts                                                                   */
/* ------------------------------------------------------------------------ */

/* Bursts with pauses, as a server or a batch job that wakes, works and waits: every thread
 * keeps 4096 blocks (x SCALE) of 1..16 KiB, each filled.  A round frees three blocks in four
 * (checking each), sleeps (250 ms; 10 ms at SCALE=0), then allocates and fills the freed
 * slots again.  Only the refills are timed: they reward memory kept over a pause that the
 * program takes back at once, and show the page faults of memory returned during it.  Four
 * rounds (two at SCALE=0). */
typedef struct {
    int id;
    size_t slots;
    int rounds;
    unsigned pause_ms;
    uint64_t timed_ns, ops, faults;
} bu_arg_t;

static void bu_fill(unsigned char *p, size_t size, uint64_t tag)
{
    memset(p, (int)(tag & 0xff), size);
    put64(p, 0, tag);
    put64(p, size - 8, tag ^ size);
}

static long bu_thread_faults(void)
{
    struct rusage usage;
    return getrusage(RUSAGE_THREAD, &usage) == 0 ? usage.ru_minflt : 0;
}

static void *bu_thread(void *arg)
{
    bu_arg_t *a = arg;
    rng_t rng = rng_seed(11, (uint64_t)a->id);
    unsigned char **blocks = xmmap(sizeof(void *) * a->slots);
    size_t *sizes = xmmap(sizeof(size_t) * a->slots);
    uint64_t *tags = xmmap(sizeof(uint64_t) * a->slots);
    for (size_t i = 0; i < a->slots; i++) {
        sizes[i] = rng_range(&rng, 1024, 16384);
        tags[i] = rng_next(&rng);
        blocks[i] = xmalloc(sizes[i]);
        bu_fill(blocks[i], sizes[i], tags[i]);
    }
    gate_wait();
    for (int round = 0; round < a->rounds; round++) {
        for (size_t i = 0; i < a->slots; i++) {
            if (rng_below(&rng, 4) == 0)
                continue;
            unsigned char *p = blocks[i];
            if (get64(p, 0) != tags[i] || get64(p, sizes[i] - 8) != (tags[i] ^ sizes[i]) ||
                p[sizes[i] / 2] != (unsigned char)(tags[i] & 0xff))
                die("block %p (%zu bytes) was corrupted", (void *)p, sizes[i]);
            free(p);
            blocks[i] = NULL;
        }
        usleep(a->pause_ms * 1000u);
        long faults = bu_thread_faults();
        uint64_t t0 = now_ns();
        for (size_t i = 0; i < a->slots; i++) {
            if (blocks[i] != NULL)
                continue;
            sizes[i] = rng_range(&rng, 1024, 16384);
            tags[i] = rng_next(&rng);
            blocks[i] = xmalloc(sizes[i]);
            bu_fill(blocks[i], sizes[i], tags[i]);
            a->ops++;
        }
        a->timed_ns += now_ns() - t0;
        a->faults += (uint64_t)(bu_thread_faults() - faults);
    }
    for (size_t i = 0; i < a->slots; i++)
        free(blocks[i]);
    xmunmap(tags, sizeof(uint64_t) * a->slots);
    xmunmap(sizes, sizeof(size_t) * a->slots);
    xmunmap(blocks, sizeof(void *) * a->slots);
    return NULL;
}

void wl_bursts(void)
{
    int T = g_threads;
    bu_arg_t *args = xmmap(sizeof(bu_arg_t) * (size_t)T);
    for (int i = 0; i < T; i++) {
        args[i].id = i;
        args[i].slots = (size_t)scaled(4096);
        args[i].rounds = g_scale == 0 ? 2 : 4;
        args[i].pause_ms = g_scale == 0 ? 10 : 250;
    }
    run_threads(T, bu_thread, args, sizeof(bu_arg_t));
    /* The slowest thread's refills are the run's time. */
    uint64_t timed = 0, ops = 0, faults = 0;
    for (int i = 0; i < T; i++) {
        if (args[i].timed_ns > timed)
            timed = args[i].timed_ns;
        ops += args[i].ops;
        faults += args[i].faults;
    }
    xmunmap(args, sizeof(bu_arg_t) * (size_t)T);
    char extra[64];
    snprintf(extra, sizeof extra, "refill_faults=%llu", (unsigned long long)faults);
    print_result(ops, timed, T, extra);
}

/* ------------------------------------------------------------------------ */
/* grow                                                                     */
/* ------------------------------------------------------------------------ */

/* Buffers that realloc grows by an eighth at a time, as a string built piece by piece or an
 * array appended to grows: from 1 KiB to 4 MiB, each step filled before the next, the whole
 * buffer checked at the end; 100 buffers (x SCALE) one after the other. */
void wl_grow(void)
{
    uint64_t buffers = scaled(100), ops = 0;
    uint64_t t0 = now_ns();
    for (uint64_t r = 0; r < buffers; r++) {
        size_t size = 1024;
        unsigned char *p = xmalloc(size);
        memset(p, (int)(r & 0xff), size);
        while (size < ((size_t)4 << 20)) {
            size_t next = size + size / 8;
            unsigned char *q = realloc(p, next);
            if (q == NULL)
                die("realloc(%zu) returned NULL", next);
            memset(q + size, (int)((r + next) & 0xff), next - size);
            p = q;
            size = next;
            ops++;
        }
        for (size_t k = 0; k < 1024; k++)
            if (p[k] != (unsigned char)(r & 0xff))
                die("a grown buffer lost its first bytes at %zu", k);
        for (size_t from = 1024; from < size;) {
            size_t next = from + from / 8;
            for (size_t k = from; k < next; k += 4096)
                if (p[k] != (unsigned char)((r + next) & 0xff))
                    die("a grown buffer lost byte %zu of %zu", k, size);
            from = next;
        }
        free(p);
    }
    print_result(ops, now_ns() - t0, 1, NULL);
}
