/*
 * classic.c -- classic allocator benchmarks for the nodalloc project.
 *
 * One self-contained C11 program, run once per allocator under LD_PRELOAD
 * (glibc, nodalloc, mimalloc, jemalloc, tcmalloc).  It only uses the standard
 * malloc family (malloc, free, realloc, malloc_usable_size) so it does not
 * depend on any particular allocator.  Large bookkeeping arrays (slot tables,
 * latency samples, RSS samples, queues) come from mmap or static storage so
 * they do not disturb the allocator being measured.
 *
 * Build:   cc -O2 -pthread -o classic classic.c
 * Usage:   classic WORKLOAD THREADS SCALE
 *          classic --list
 *
 *   THREADS  positive integer, number of worker threads.
 *   SCALE    non-negative integer work multiplier.  1 = quick (~0.2-1.5 s
 *            per workload on a 2-core machine with glibc at THREADS=2);
 *            0 = tiny (about 1% of the SCALE=1 work; for test suites).
 *   Bad arguments or an unknown workload: message on stderr, exit 2.
 *
 * Workloads (all written from their published descriptions):
 *
 *   larson        Larson & Krishnan server simulation.  Each thread owns an
 *                 array of 1000 slots holding blocks of random size
 *                 16..1000 B.  A round picks random slots, frees the block
 *                 and mallocs a new random-size one.  After a round the
 *                 thread spawns a replacement thread that inherits the slot
 *                 array and exits, so blocks are freed by a thread other
 *                 than the one that allocated them.  Several generations.
 *                 The initial blocks are allocated by the main thread.
 *   xmalloc       Producer/consumer.  max(1,T/2) producers allocate blocks of
 *                 16..256 B, tag them (sequence number, size and a checksum
 *                 of pointer+sequence) and push them in batches of 64
 *                 through a mutex-protected bounded queue; max(1,T-P)
 *                 consumers verify and free them.  A bitmap checks that
 *                 every object is freed exactly once.  THREADS=1 still runs
 *                 one producer and one consumer.
 *   cache-thrash  Hoard's cache-thrash (active false sharing): each thread
 *                 repeatedly mallocs an 8-byte object, writes each byte of
 *                 it 1000 times, frees it.
 *   cache-scratch Hoard's cache-scratch (passive false sharing): the main
 *                 thread mallocs one 8-byte object per worker back to back
 *                 and hands it over; the worker frees it and then repeatedly
 *                 mallocs an 8-byte object, writes it 1000 times, frees it.
 *   mstress       mimalloc-bench mstress/rptest style.  Each thread keeps
 *                 2000 slots; random operations malloc (sizes: 90% 16..256 B,
 *                 9.5% up to 16 KiB, 0.5% up to 256 KiB), free, realloc and
 *                 transfer a block to other threads through a shared
 *                 exchange array (cross-thread frees).  Every block holds a
 *                 tag derived from its identity and size in its first and
 *                 last 8 bytes, checked on free/realloc/adoption; malloc and
 *                 free counts must balance at the end.
 *   glibc-simple  glibc benchtests "malloc-simple" style, single thread
 *                 (THREADS is ignored): a tight malloc/free loop with sizes
 *                 cycling through 16,32,64,128 B, then bursts of malloc of
 *                 1000 blocks followed by freeing them in order.
 *   glibc-thread  glibc benchtests "malloc-thread" style: THREADS threads,
 *                 each a tight loop replacing random slots of a 100-slot
 *                 working set with blocks of random size 1..512 B.
 *   malloc-large  mimalloc-bench malloc-large: each thread allocates blocks
 *                 of 5..25 MiB, keeps them in a ring (about 20 live blocks
 *                 in total over all threads), writes every 4096th byte,
 *                 frees the oldest.  (SCALE=0: 3 blocks of 0.5..2.5 MiB.)
 *   frag          Internal fragmentation: single thread allocates a fixed
 *                 sequence of log-uniform sizes 1 B..64 KiB, keeps all live,
 *                 sums requested and malloc_usable_size bytes, frees all.
 *   latency       Per-call malloc latency: THREADS threads replace random
 *                 slots of a 4096-slot working set with log-uniform sizes
 *                 8 B..32 KiB; every malloc call is timed with
 *                 clock_gettime(CLOCK_MONOTONIC) pairs, minus the mean cost
 *                 of an empty pair (floored at 0; the mean is taken over the
 *                 quietest of 100 batches of 1000 pairs).  Samples live in
 *                 mmap'd memory.  Prints a CDF and percentiles.  (SCALE=0:
 *                 256 slots.)
 *   rss-time      RSS over time.  Ramp: allocate and fill mixed-size objects
 *                 (60% 16..256 B, 30% 512..2048 B, 10% 4..32 KiB) up to
 *                 256 MiB live (x SCALE); churn: free a random 90%, then
 *                 random free/replace at constant live bytes; drain: free
 *                 everything, then sleep 1 s in 10 ms steps.  A sampler
 *                 thread (no malloc; open/read of /proc/self/statm into a
 *                 fixed buffer) records RSS and live bytes every 10 ms.
 *
 * Output protocol (parsed by a Rust program).  The last line of stdout is
 *
 *   result workload=NAME threads=T ops=N elapsed_ns=E [key=value ...]
 *
 * threads = the THREADS argument; ops = malloc+free pairs actually done (for
 * latency: timed malloc calls); elapsed_ns = wall time of the measured part
 * only.  Extra fields (values never contain spaces):
 *   all:       workers=N  (threads actually running the workload)
 *   frag:      requested=BYTES usable=BYTES
 *   latency:   p50=NS p90=NS p99=NS p999=NS max=NS clock_overhead_ns=NS
 *   rss-time:  peak_rss_kib=K final_rss_kib=K peak_live_bytes=B
 * Before the result line:
 *   latency:   226 lines "cdf NS FRACTION" (fractions 0.005..0.99 in steps of
 *              0.005, then 0.0005 up to 0.999, then 0.0001 up to 0.9999,
 *              then 1.000000 = the maximum)
 *   rss-time:  one line per sample "sample T_MS RSS_KIB LIVE_BYTES PHASE",
 *              PHASE one of ramp/churn/drain.
 * On a check failure (content mismatch, unbalanced counts, malloc returning
 * NULL) it prints "classic: WORKLOAD: <what failed>" on stderr, exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Common helpers                                                           */
/* ------------------------------------------------------------------------ */

static const char *g_name = "?";  /* current workload, for messages */
static int g_threads = 1;         /* THREADS argument */
static unsigned g_scale = 1;      /* SCALE argument */

/* Keeps the compiler from eliding malloc/free pairs whose memory is unused:
 * the pointer "escapes" into an empty asm, which costs nothing at run time
 * (unlike a shared global, which would add true sharing between threads). */
static inline void escape(void *p)
{
    __asm__ volatile("" : : "r"(p) : "memory");
}

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "classic: %s: ", g_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Work count for SCALE: base * SCALE, or base / 100 for SCALE = 0. */
static uint64_t scaled(uint64_t base)
{
    uint64_t n = g_scale == 0 ? base / 100 : base * g_scale;
    return n ? n : 1;
}

/* Zeroed memory straight from the kernel, not from the allocator. */
static void *xmmap(size_t size)
{
    if (size == 0)
        size = 1;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED)
        die("mmap(%zu) failed: %s", size, strerror(errno));
    return p;
}

static void xmunmap(void *p, size_t size)
{
    if (size == 0)
        size = 1;
    munmap(p, size);
}

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (p == NULL)
        die("malloc(%zu) returned NULL", n);
    return p;
}

/* splitmix64: small, fast, good enough; one fixed seed per thread. */
typedef struct {
    uint64_t s;
} rng_t;

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rng_next(rng_t *r)
{
    r->s += 0x9E3779B97F4A7C15ull;
    return mix64(r->s);
}

static rng_t rng_seed(uint64_t workload_salt, uint64_t thread)
{
    rng_t r = {mix64(workload_salt * 0x100000001B3ull + thread + 1)};
    return r;
}

/* Uniform in [0, n), n <= 2^32. */
static inline uint64_t rng_below(rng_t *r, uint64_t n)
{
    return ((rng_next(r) >> 32) * n) >> 32;
}

/* Uniform in [lo, hi]. */
static inline size_t rng_range(rng_t *r, size_t lo, size_t hi)
{
    return lo + (size_t)rng_below(r, (uint64_t)(hi - lo + 1));
}

/* Approximately log-uniform in [lo, hi] (lo >= 1): a uniformly chosen octave
 * [2^b, 2^(b+1)) between lo and hi, then uniform within it. */
static inline size_t rng_logu(rng_t *r, size_t lo, size_t hi)
{
    int blo = 63 - __builtin_clzll((unsigned long long)lo);
    int bhi = 63 - __builtin_clzll((unsigned long long)hi);
    int b = blo + (int)rng_below(r, (uint64_t)(bhi - blo + 1));
    size_t a = (size_t)1 << b;
    size_t z = a * 2 - 1;
    if (a < lo)
        a = lo;
    if (z > hi)
        z = hi;
    return rng_range(r, a, z);
}

static inline void put64(void *p, size_t off, uint64_t v)
{
    memcpy((char *)p + off, &v, 8);
}

static inline uint64_t get64(const void *p, size_t off)
{
    uint64_t v;
    memcpy(&v, (const char *)p + off, 8);
    return v;
}

/* Threads run fn(arg_i); a start barrier makes the timed section begin when
 * every worker exists.  Returns the elapsed ns from the barrier to the last
 * join. */
typedef struct {
    pthread_barrier_t bar;
} start_gate_t;

static start_gate_t g_gate;

static void gate_wait(void)
{
    pthread_barrier_wait(&g_gate.bar);
}

static uint64_t run_threads(int n, void *(*fn)(void *), void *args, size_t arg_size)
{
    pthread_t *tids = xmmap(sizeof(pthread_t) * (size_t)n);
    if (pthread_barrier_init(&g_gate.bar, NULL, (unsigned)n + 1) != 0)
        die("pthread_barrier_init failed");
    for (int i = 0; i < n; i++) {
        int rc = pthread_create(&tids[i], NULL, fn, (char *)args + arg_size * (size_t)i);
        if (rc != 0)
            die("pthread_create failed: %s", strerror(rc));
    }
    pthread_barrier_wait(&g_gate.bar);
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++)
        pthread_join(tids[i], NULL);
    uint64_t t1 = now_ns();
    pthread_barrier_destroy(&g_gate.bar);
    xmunmap(tids, sizeof(pthread_t) * (size_t)n);
    return t1 - t0;
}

static void print_result(uint64_t ops, uint64_t elapsed, int workers, const char *extra)
{
    printf("result workload=%s threads=%d ops=%llu elapsed_ns=%llu workers=%d%s%s\n", g_name,
           g_threads, (unsigned long long)ops, (unsigned long long)elapsed, workers,
           extra && *extra ? " " : "", extra ? extra : "");
    fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* larson                                                                   */
/* ------------------------------------------------------------------------ */

#define LARSON_SLOTS 1000
#define LARSON_GENERATIONS 10
#define LARSON_TAG 0x6c6172736f6e2121ull

typedef struct {
    void **slots;
    rng_t rng;
    uint64_t rounds;   /* replacements per generation */
    uint64_t ops;
    int gen;
    int has_parent;
    pthread_t parent;  /* previous generation, joined by the next one */
    pthread_t last;    /* final generation, joined by main */
} larson_lane_t;

static pthread_mutex_t larson_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t larson_cv = PTHREAD_COND_INITIALIZER;
static int larson_done;

static void *larson_thread(void *arg)
{
    larson_lane_t *L = arg;
    if (L->has_parent)
        pthread_join(L->parent, NULL);
    void **slots = L->slots;
    rng_t rng = L->rng;
    for (uint64_t i = 0; i < L->rounds; i++) {
        size_t k = (size_t)rng_below(&rng, LARSON_SLOTS);
        void *old = slots[k];
        if (get64(old, 0) != ((uint64_t)(uintptr_t)old ^ LARSON_TAG))
            die("block %p in slot %zu was corrupted", old, k);
        free(old);
        size_t sz = rng_range(&rng, 16, 1000);
        void *p = xmalloc(sz);
        put64(p, 0, (uint64_t)(uintptr_t)p ^ LARSON_TAG);
        ((char *)p)[sz - 1] = (char)sz;
        slots[k] = p;
    }
    L->rng = rng;
    L->ops += L->rounds;
    L->gen++;
    if (L->gen < LARSON_GENERATIONS) {
        pthread_t child;
        L->parent = pthread_self();
        L->has_parent = 1;
        int rc = pthread_create(&child, NULL, larson_thread, L);
        if (rc != 0)
            die("pthread_create failed: %s", strerror(rc));
        /* L now belongs to the child. */
    } else {
        pthread_mutex_lock(&larson_mu);
        L->last = pthread_self();
        larson_done++;
        pthread_cond_signal(&larson_cv);
        pthread_mutex_unlock(&larson_mu);
    }
    return NULL;
}

static void wl_larson(void)
{
    int T = g_threads;
    uint64_t total_rounds = scaled(10000000);
    uint64_t rounds = total_rounds / LARSON_GENERATIONS;
    if (rounds == 0)
        rounds = 1;
    larson_lane_t *lanes = xmmap(sizeof(larson_lane_t) * (size_t)T);
    for (int t = 0; t < T; t++) {
        lanes[t].slots = xmmap(sizeof(void *) * LARSON_SLOTS);
        lanes[t].rng = rng_seed(1, (uint64_t)t);
        lanes[t].rounds = rounds;
        /* Initial blocks come from the main thread, as in the original. */
        for (size_t k = 0; k < LARSON_SLOTS; k++) {
            size_t sz = rng_range(&lanes[t].rng, 16, 1000);
            void *p = xmalloc(sz);
            put64(p, 0, (uint64_t)(uintptr_t)p ^ LARSON_TAG);
            lanes[t].slots[k] = p;
        }
    }
    larson_done = 0;
    uint64_t t0 = now_ns();
    for (int t = 0; t < T; t++) {
        pthread_t tid;
        int rc = pthread_create(&tid, NULL, larson_thread, &lanes[t]);
        if (rc != 0)
            die("pthread_create failed: %s", strerror(rc));
        /* Generation 0 is joined by generation 1, and so on; main joins
         * only the last one. */
        (void)tid;
    }
    pthread_mutex_lock(&larson_mu);
    while (larson_done < T)
        pthread_cond_wait(&larson_cv, &larson_mu);
    pthread_mutex_unlock(&larson_mu);
    for (int t = 0; t < T; t++)
        pthread_join(lanes[t].last, NULL);
    uint64_t t1 = now_ns();

    uint64_t ops = 0;
    for (int t = 0; t < T; t++) {
        ops += lanes[t].ops;
        for (size_t k = 0; k < LARSON_SLOTS; k++) {
            void *p = lanes[t].slots[k];
            if (get64(p, 0) != ((uint64_t)(uintptr_t)p ^ LARSON_TAG))
                die("block %p was corrupted", p);
            free(p);
        }
        xmunmap(lanes[t].slots, sizeof(void *) * LARSON_SLOTS);
    }
    if (ops != (uint64_t)T * rounds * LARSON_GENERATIONS)
        die("op count %llu does not match the plan", (unsigned long long)ops);
    xmunmap(lanes, sizeof(larson_lane_t) * (size_t)T);
    char extra[64];
    snprintf(extra, sizeof extra, "generations=%d", LARSON_GENERATIONS);
    print_result(ops, t1 - t0, T, extra);
}

/* ------------------------------------------------------------------------ */
/* xmalloc                                                                  */
/* ------------------------------------------------------------------------ */

#define XM_BATCH 64
#define XM_QCAP 256

typedef struct {
    void *p[XM_BATCH];
    uint32_t n;
} xm_batch_t;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t not_empty;
    pthread_cond_t not_full;
    xm_batch_t *ring; /* XM_QCAP entries, mmap'd */
    uint32_t head, count;
    int producers_left;
} xm_queue_t;

static xm_queue_t xmq;
static _Atomic uint64_t **xm_bitmaps; /* one bitmap per producer */
static uint64_t xm_per_producer;
static int xm_producers;

typedef struct {
    int id;
    uint64_t count; /* produced or consumed */
} xm_arg_t;

static void xm_push(const xm_batch_t *b)
{
    pthread_mutex_lock(&xmq.mu);
    while (xmq.count == XM_QCAP)
        pthread_cond_wait(&xmq.not_full, &xmq.mu);
    xmq.ring[(xmq.head + xmq.count) % XM_QCAP] = *b;
    xmq.count++;
    pthread_cond_signal(&xmq.not_empty);
    pthread_mutex_unlock(&xmq.mu);
}

static void *xm_producer(void *arg)
{
    xm_arg_t *a = arg;
    rng_t rng = rng_seed(2, (uint64_t)a->id);
    xm_batch_t b;
    b.n = 0;
    gate_wait();
    for (uint64_t i = 0; i < xm_per_producer; i++) {
        size_t sz = rng_range(&rng, 16, 256);
        char *p = xmalloc(sz);
        uint64_t seq = ((uint64_t)a->id << 40) | i;
        uint64_t w0 = (seq << 12) | sz;
        put64(p, 0, w0);
        put64(p, sz - 8, mix64(w0 ^ (uint64_t)(uintptr_t)p));
        b.p[b.n++] = p;
        if (b.n == XM_BATCH) {
            xm_push(&b);
            b.n = 0;
        }
    }
    if (b.n)
        xm_push(&b);
    a->count = xm_per_producer;
    pthread_mutex_lock(&xmq.mu);
    xmq.producers_left--;
    pthread_cond_broadcast(&xmq.not_empty);
    pthread_mutex_unlock(&xmq.mu);
    return NULL;
}

static void *xm_consumer(void *arg)
{
    xm_arg_t *a = arg;
    xm_batch_t b;
    uint64_t consumed = 0;
    gate_wait();
    for (;;) {
        pthread_mutex_lock(&xmq.mu);
        while (xmq.count == 0 && xmq.producers_left > 0)
            pthread_cond_wait(&xmq.not_empty, &xmq.mu);
        if (xmq.count == 0) {
            pthread_mutex_unlock(&xmq.mu);
            break;
        }
        b = xmq.ring[xmq.head];
        xmq.head = (xmq.head + 1) % XM_QCAP;
        xmq.count--;
        pthread_cond_signal(&xmq.not_full);
        pthread_mutex_unlock(&xmq.mu);
        for (uint32_t j = 0; j < b.n; j++) {
            char *p = b.p[j];
            uint64_t w0 = get64(p, 0);
            size_t sz = (size_t)(w0 & 0xfff);
            uint64_t seq = w0 >> 12;
            uint64_t pid = seq >> 40, idx = seq & ((1ull << 40) - 1);
            if (sz < 16 || sz > 256 || pid >= (uint64_t)xm_producers || idx >= xm_per_producer)
                die("object %p has a corrupted header %#llx", (void *)p, (unsigned long long)w0);
            if (get64(p, sz - 8) != mix64(w0 ^ (uint64_t)(uintptr_t)p))
                die("object %p (producer %llu, #%llu) has a corrupted trailer", (void *)p,
                    (unsigned long long)pid, (unsigned long long)idx);
            uint64_t bit = 1ull << (idx & 63);
            uint64_t old = atomic_fetch_or_explicit(&xm_bitmaps[pid][idx >> 6], bit,
                                                    memory_order_relaxed);
            if (old & bit)
                die("object (producer %llu, #%llu) freed twice", (unsigned long long)pid,
                    (unsigned long long)idx);
            free(p);
            consumed++;
        }
    }
    a->count = consumed;
    return NULL;
}

static void *xm_thread(void *arg)
{
    xm_arg_t *a = arg;
    return a->id < xm_producers ? xm_producer(a) : xm_consumer(a);
}

static void wl_xmalloc(void)
{
    int T = g_threads;
    int P = T / 2 > 0 ? T / 2 : 1;
    int C = T - P > 0 ? T - P : 1;
    int W = P + C;
    xm_producers = P;
    /* Fixed total work, split over the producers. */
    xm_per_producer = scaled(8000000) / (uint64_t)P;
    if (xm_per_producer == 0)
        xm_per_producer = 1;
    size_t words = (size_t)((xm_per_producer + 63) / 64);
    xm_bitmaps = xmmap(sizeof(*xm_bitmaps) * (size_t)P);
    for (int i = 0; i < P; i++)
        xm_bitmaps[i] = xmmap(words * 8);
    pthread_mutex_init(&xmq.mu, NULL);
    pthread_cond_init(&xmq.not_empty, NULL);
    pthread_cond_init(&xmq.not_full, NULL);
    xmq.ring = xmmap(sizeof(xm_batch_t) * XM_QCAP);
    xmq.head = xmq.count = 0;
    xmq.producers_left = P;

    xm_arg_t *args = xmmap(sizeof(xm_arg_t) * (size_t)W);
    for (int i = 0; i < W; i++) /* ids < P are producers */
        args[i].id = i;
    uint64_t elapsed = run_threads(W, xm_thread, args, sizeof(xm_arg_t));

    uint64_t produced = 0, consumed = 0;
    for (int i = 0; i < W; i++) {
        if (i < P)
            produced += args[i].count;
        else
            consumed += args[i].count;
    }
    if (produced != consumed || produced != xm_per_producer * (uint64_t)P)
        die("counts do not balance: produced %llu, freed %llu", (unsigned long long)produced,
            (unsigned long long)consumed);
    for (int i = 0; i < P; i++) {
        uint64_t seen = 0;
        for (size_t w = 0; w < words; w++)
            seen += (uint64_t)__builtin_popcountll(atomic_load(&xm_bitmaps[i][w]));
        if (seen != xm_per_producer)
            die("producer %d: %llu of %llu objects freed", i, (unsigned long long)seen,
                (unsigned long long)xm_per_producer);
        xmunmap((void *)xm_bitmaps[i], words * 8);
    }
    xmunmap(xm_bitmaps, sizeof(*xm_bitmaps) * (size_t)P);
    xmunmap(xmq.ring, sizeof(xm_batch_t) * XM_QCAP);
    xmunmap(args, sizeof(xm_arg_t) * (size_t)W);
    char extra[64];
    snprintf(extra, sizeof extra, "producers=%d consumers=%d", P, C);
    print_result(produced, elapsed, W, extra);
}

/* ------------------------------------------------------------------------ */
/* cache-thrash and cache-scratch                                           */
/* ------------------------------------------------------------------------ */

#define CACHE_OBJ 8
#define CACHE_REPS 1000

typedef struct {
    int id;
    uint64_t iters;
    void *handed; /* cache-scratch: object allocated by main */
    uint64_t ops;
} cache_arg_t;

static inline void cache_write(char *p)
{
    volatile char *v = p;
    for (int r = 0; r < CACHE_REPS; r++) {
        for (int k = 0; k < CACHE_OBJ; k++) {
            v[k] = (char)(k + r);
            (void)v[k];
        }
    }
    if (v[CACHE_OBJ - 1] != (char)(CACHE_OBJ - 1 + CACHE_REPS - 1))
        die("object %p lost a write", (void *)p);
}

static void *thrash_thread(void *arg)
{
    cache_arg_t *a = arg;
    gate_wait();
    for (uint64_t i = 0; i < a->iters; i++) {
        char *p = xmalloc(CACHE_OBJ);
        escape(p);
        cache_write(p);
        free(p);
    }
    a->ops = a->iters;
    return NULL;
}

static void *scratch_thread(void *arg)
{
    cache_arg_t *a = arg;
    gate_wait();
    cache_write(a->handed);
    free(a->handed);
    for (uint64_t i = 0; i < a->iters; i++) {
        char *p = xmalloc(CACHE_OBJ);
        escape(p);
        cache_write(p);
        free(p);
    }
    a->ops = a->iters + 1;
    return NULL;
}

static void wl_cache(int scratch)
{
    int T = g_threads;
    cache_arg_t *args = xmmap(sizeof(cache_arg_t) * (size_t)T);
    uint64_t iters = scaled(80000);
    for (int i = 0; i < T; i++) {
        args[i].id = i;
        args[i].iters = iters;
        if (scratch) /* back to back, so likely in one cache line */
            args[i].handed = xmalloc(CACHE_OBJ);
    }
    uint64_t elapsed = run_threads(T, scratch ? scratch_thread : thrash_thread, args,
                                   sizeof(cache_arg_t));
    uint64_t ops = 0;
    for (int i = 0; i < T; i++)
        ops += args[i].ops;
    xmunmap(args, sizeof(cache_arg_t) * (size_t)T);
    char extra[64];
    snprintf(extra, sizeof extra, "obj_size=%d repetitions=%d", CACHE_OBJ, CACHE_REPS);
    print_result(ops, elapsed, T, extra);
}

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

static void wl_mstress(void)
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

static void wl_glibc_simple(void)
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

typedef struct {
    int id;
    uint64_t iters;
} gt_arg_t;

static void *gt_thread(void *arg)
{
    gt_arg_t *a = arg;
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

static void wl_glibc_thread(void)
{
    int T = g_threads;
    gt_arg_t *args = xmmap(sizeof(gt_arg_t) * (size_t)T);
    uint64_t iters = scaled(10000000);
    for (int i = 0; i < T; i++) {
        args[i].id = i;
        args[i].iters = iters;
    }
    uint64_t elapsed = run_threads(T, gt_thread, args, sizeof(gt_arg_t));
    xmunmap(args, sizeof(gt_arg_t) * (size_t)T);
    print_result(iters * (uint64_t)T, elapsed, T, "");
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

static void wl_malloc_large(void)
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
/* frag                                                                     */
/* ------------------------------------------------------------------------ */

static void wl_frag(void)
{
    uint64_t n = scaled(40000);
    void **ptrs = xmmap(sizeof(void *) * n);
    rng_t rng = rng_seed(9, 0);
    uint64_t requested = 0, usable = 0;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++) {
        size_t sz = rng_logu(&rng, 1, 65536);
        char *p = xmalloc(sz);
        p[0] = 1;
        p[sz - 1] = 2;
        size_t u = malloc_usable_size(p);
        if (u < sz)
            die("malloc_usable_size(%p) = %zu < requested %zu", (void *)p, u, sz);
        requested += sz;
        usable += u;
        ptrs[i] = p;
    }
    for (uint64_t i = 0; i < n; i++)
        free(ptrs[i]);
    uint64_t t1 = now_ns();
    xmunmap(ptrs, sizeof(void *) * n);
    char extra[96];
    snprintf(extra, sizeof extra, "requested=%llu usable=%llu", (unsigned long long)requested,
             (unsigned long long)usable);
    print_result(n, t1 - t0, 1, extra);
}

/* ------------------------------------------------------------------------ */
/* latency                                                                  */
/* ------------------------------------------------------------------------ */

#define LAT_SLOTS 4096

typedef struct {
    int id;
    size_t nslots;
    uint64_t n;
    uint32_t *samples; /* n entries, part of one mmap'd array */
    uint64_t overhead;
} lat_arg_t;

static void *lat_thread(void *arg)
{
    lat_arg_t *a = arg;
    rng_t rng = rng_seed(10, (uint64_t)a->id);
    size_t nslots = a->nslots;
    void **slots = xmmap(sizeof(void *) * nslots);
    uint32_t *out = a->samples;
    uint64_t ov = a->overhead;
    /* Touch the sample pages now so page faults are not timed. */
    for (uint64_t i = 0; i < a->n; i += 1024)
        out[i] = 0;
    gate_wait();
    for (uint64_t i = 0; i < a->n; i++) {
        size_t k = (size_t)rng_below(&rng, nslots);
        free(slots[k]);
        size_t sz = rng_logu(&rng, 8, 32768);
        struct timespec s, e;
        clock_gettime(CLOCK_MONOTONIC, &s);
        char *p = malloc(sz);
        clock_gettime(CLOCK_MONOTONIC, &e);
        if (p == NULL)
            die("malloc(%zu) returned NULL", sz);
        p[0] = (char)i;
        slots[k] = p;
        int64_t d = (int64_t)(e.tv_sec - s.tv_sec) * 1000000000 + (e.tv_nsec - s.tv_nsec);
        d -= (int64_t)ov;
        if (d < 0)
            d = 0;
        out[i] = d > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)d;
    }
    for (size_t k = 0; k < nslots; k++)
        free(slots[k]);
    xmunmap(slots, sizeof(void *) * nslots);
    return NULL;
}

/* LSD radix sort of 32-bit values, scratch from mmap (qsort may malloc). */
static void radix_sort_u32(uint32_t *a, size_t n)
{
    uint32_t *tmp = xmmap(sizeof(uint32_t) * n);
    uint32_t *src = a, *dst = tmp;
    for (int shift = 0; shift < 32; shift += 8) {
        size_t count[257];
        memset(count, 0, sizeof count);
        for (size_t i = 0; i < n; i++)
            count[((src[i] >> shift) & 0xff) + 1]++;
        if (count[1] == n) /* every value has this byte = 0: nothing to do */
            continue;
        for (int b = 0; b < 256; b++)
            count[b + 1] += count[b];
        for (size_t i = 0; i < n; i++)
            dst[count[(src[i] >> shift) & 0xff]++] = src[i];
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, sizeof(uint32_t) * n);
    xmunmap(tmp, sizeof(uint32_t) * n);
}

static uint32_t quantile(const uint32_t *sorted, size_t n, double f)
{
    /* nearest rank */
    double r = f * (double)n;
    size_t idx = (size_t)r;
    if ((double)idx < r)
        idx++;
    if (idx == 0)
        idx = 1;
    if (idx > n)
        idx = n;
    return sorted[idx - 1];
}

static void wl_latency(void)
{
    int T = g_threads;
    /* Mean cost of an empty clock_gettime pair: the mean over a batch of
     * 1000 pairs, taking the quietest of 100 batches so that a preemption
     * or interrupt during the probe does not inflate it. */
    uint64_t overhead = UINT64_MAX;
    for (int b = 0; b < 100; b++) {
        uint64_t sum = 0;
        for (int i = 0; i < 1000; i++) {
            struct timespec s, e;
            clock_gettime(CLOCK_MONOTONIC, &s);
            clock_gettime(CLOCK_MONOTONIC, &e);
            sum += (uint64_t)((int64_t)(e.tv_sec - s.tv_sec) * 1000000000 +
                              (e.tv_nsec - s.tv_nsec));
        }
        if (sum / 1000 < overhead)
            overhead = sum / 1000;
    }

    uint64_t n = scaled(1500000);
    size_t total = (size_t)n * (size_t)T;
    uint32_t *samples = xmmap(sizeof(uint32_t) * total);
    lat_arg_t *args = xmmap(sizeof(lat_arg_t) * (size_t)T);
    for (int i = 0; i < T; i++) {
        args[i].id = i;
        args[i].n = n;
        /* SCALE=0 (smoke test) uses a smaller working set so that filling it
         * does not dominate. */
        args[i].nslots = g_scale == 0 ? LAT_SLOTS / 16 : LAT_SLOTS;
        args[i].samples = samples + (size_t)i * n;
        args[i].overhead = overhead;
    }
    uint64_t elapsed = run_threads(T, lat_thread, args, sizeof(lat_arg_t));
    xmunmap(args, sizeof(lat_arg_t) * (size_t)T);

    radix_sort_u32(samples, total);
    /* CDF: 0.005..0.9 by 0.005, 0.9..0.99 by 0.005, 0.99..0.999 by 0.0005,
     * 0.999..0.9999 by 0.0001, then the maximum (226 lines). */
    for (int i = 1; i <= 180; i++)
        printf("cdf %u %.6f\n", quantile(samples, total, i * 0.005), i * 0.005);
    for (int i = 1; i <= 18; i++)
        printf("cdf %u %.6f\n", quantile(samples, total, 0.9 + i * 0.005), 0.9 + i * 0.005);
    for (int i = 1; i <= 18; i++)
        printf("cdf %u %.6f\n", quantile(samples, total, 0.99 + i * 0.0005), 0.99 + i * 0.0005);
    for (int i = 1; i <= 9; i++)
        printf("cdf %u %.6f\n", quantile(samples, total, 0.999 + i * 0.0001), 0.999 + i * 0.0001);
    printf("cdf %u %.6f\n", samples[total - 1], 1.0);
    char extra[192];
    snprintf(extra, sizeof extra, "p50=%u p90=%u p99=%u p999=%u max=%u clock_overhead_ns=%llu",
             quantile(samples, total, 0.5), quantile(samples, total, 0.9),
             quantile(samples, total, 0.99), quantile(samples, total, 0.999),
             samples[total - 1], (unsigned long long)overhead);
    xmunmap(samples, sizeof(uint32_t) * total);
    print_result((uint64_t)total, elapsed, T, extra);
}

/* ------------------------------------------------------------------------ */
/* rss-time                                                                 */
/* ------------------------------------------------------------------------ */

enum { PH_RAMP, PH_CHURN, PH_DRAIN };
static const char *const rss_phase_names[] = {"ramp", "churn", "drain"};

typedef struct {
    uint64_t t_ms, rss_kib, live;
    int phase;
} rss_sample_t;

#define RSS_MAX_SAMPLES 200000
#define RSS_PERIOD_NS 10000000ull

static rss_sample_t *rss_samples;
static size_t rss_nsamples;
static _Atomic uint64_t rss_live;
static _Atomic int rss_phase;
static _Atomic int rss_stop;
static uint64_t rss_t0;
static long rss_page_kib;

/* Resident set in KiB from /proc/self/statm, without touching malloc. */
static uint64_t read_rss_kib(void)
{
    char buf[256];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *s = buf;
    while (*s && *s != ' ')
        s++; /* skip "size" */
    while (*s == ' ')
        s++;
    uint64_t pages = 0;
    while (*s >= '0' && *s <= '9')
        pages = pages * 10 + (uint64_t)(*s++ - '0');
    return pages * (uint64_t)rss_page_kib;
}

static void rss_take_sample(void)
{
    if (rss_nsamples >= RSS_MAX_SAMPLES)
        return;
    rss_sample_t *s = &rss_samples[rss_nsamples];
    s->rss_kib = read_rss_kib();
    s->live = atomic_load_explicit(&rss_live, memory_order_relaxed);
    s->phase = atomic_load_explicit(&rss_phase, memory_order_relaxed);
    s->t_ms = (now_ns() - rss_t0) / 1000000;
    rss_nsamples++;
}

static void *rss_sampler(void *arg)
{
    (void)arg;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!atomic_load(&rss_stop)) {
        rss_take_sample();
        next.tv_nsec += (long)RSS_PERIOD_NS;
        if (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
            ;
    }
    return NULL;
}

typedef struct {
    char *p;
    size_t sz;
} rss_obj_t;

static inline size_t rss_size(rng_t *r)
{
    uint64_t x = rng_below(r, 10);
    if (x < 6)
        return rng_range(r, 16, 256);
    if (x < 9)
        return rng_range(r, 512, 2048);
    return rng_range(r, 4096, 32768);
}

static inline void rss_fill(char *p, size_t sz)
{
    memset(p, (int)(sz & 0xff) | 1, sz);
}

static inline void rss_check(const rss_obj_t *o)
{
    char c = (char)((int)(o->sz & 0xff) | 1);
    if (o->p[0] != c || o->p[o->sz - 1] != c || o->p[o->sz / 2] != c)
        die("block %p (%zu bytes) was corrupted", (void *)o->p, o->sz);
}

static void wl_rss_time(void)
{
    rss_page_kib = sysconf(_SC_PAGESIZE) / 1024;
    if (rss_page_kib <= 0)
        rss_page_kib = 4;
    uint64_t target = g_scale == 0 ? (256ull << 20) / 100 : (256ull << 20) * g_scale;
    uint64_t churn_steps = scaled(1000000);
    uint64_t sleep_ms = g_scale == 0 ? 20 : 1000;
    size_t cap = (size_t)(target / 16 + 64);
    rss_obj_t *objs = xmmap(sizeof(rss_obj_t) * cap);
    rss_samples = xmmap(sizeof(rss_sample_t) * RSS_MAX_SAMPLES);
    rss_nsamples = 0;
    atomic_store(&rss_live, 0);
    atomic_store(&rss_phase, PH_RAMP);
    atomic_store(&rss_stop, 0);
    rng_t rng = rng_seed(11, 0);
    uint64_t live = 0, peak_live = 0, ops = 0;
    size_t n = 0;

    pthread_t sampler;
    rss_t0 = now_ns();
    int rc = pthread_create(&sampler, NULL, rss_sampler, NULL);
    if (rc != 0)
        die("pthread_create failed: %s", strerror(rc));
    uint64_t t0 = now_ns();

    /* Phase 1: ramp. */
    while (live < target && n < cap) {
        size_t sz = rss_size(&rng);
        char *p = xmalloc(sz);
        rss_fill(p, sz);
        objs[n].p = p;
        objs[n].sz = sz;
        n++;
        live += sz;
        ops++;
        atomic_store_explicit(&rss_live, live, memory_order_relaxed);
    }
    peak_live = live;

    /* Phase 2: fragment (free a random 90%), then churn at constant live. */
    atomic_store_explicit(&rss_phase, PH_CHURN, memory_order_relaxed);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (rng_below(&rng, 10) != 0) {
            rss_check(&objs[i]);
            free(objs[i].p);
            live -= objs[i].sz;
            atomic_store_explicit(&rss_live, live, memory_order_relaxed);
        } else {
            objs[kept++] = objs[i];
        }
    }
    n = kept;
    uint64_t level = live;
    for (uint64_t i = 0; i < churn_steps && n > 0; i++) {
        size_t k = (size_t)rng_below(&rng, n);
        rss_check(&objs[k]);
        free(objs[k].p);
        live -= objs[k].sz;
        objs[k] = objs[--n];
        while (live < level && n < cap) {
            size_t sz = rss_size(&rng);
            char *p = xmalloc(sz);
            rss_fill(p, sz);
            objs[n].p = p;
            objs[n].sz = sz;
            n++;
            live += sz;
            ops++;
        }
        if (live > peak_live)
            peak_live = live;
        atomic_store_explicit(&rss_live, live, memory_order_relaxed);
    }

    /* Phase 3: drain, then give delayed-decommit allocators time. */
    atomic_store_explicit(&rss_phase, PH_DRAIN, memory_order_relaxed);
    for (size_t i = 0; i < n; i++) {
        rss_check(&objs[i]);
        free(objs[i].p);
        live -= objs[i].sz;
        atomic_store_explicit(&rss_live, live, memory_order_relaxed);
    }
    n = 0;
    uint64_t t1 = now_ns();
    if (live != 0)
        die("live bytes %llu after drain", (unsigned long long)live);
    for (uint64_t ms = 0; ms < sleep_ms; ms += 10) {
        struct timespec d = {0, 10 * 1000000L};
        nanosleep(&d, NULL);
    }
    atomic_store(&rss_stop, 1);
    pthread_join(sampler, NULL);
    rss_take_sample(); /* final */
    xmunmap(objs, sizeof(rss_obj_t) * cap);

    uint64_t peak_rss = 0, final_rss = 0;
    for (size_t i = 0; i < rss_nsamples; i++) {
        const rss_sample_t *s = &rss_samples[i];
        if (s->rss_kib > peak_rss)
            peak_rss = s->rss_kib;
        final_rss = s->rss_kib;
        printf("sample %llu %llu %llu %s\n", (unsigned long long)s->t_ms,
               (unsigned long long)s->rss_kib, (unsigned long long)s->live,
               rss_phase_names[s->phase]);
    }
    xmunmap(rss_samples, sizeof(rss_sample_t) * RSS_MAX_SAMPLES);
    char extra[160];
    snprintf(extra, sizeof extra,
             "peak_rss_kib=%llu final_rss_kib=%llu peak_live_bytes=%llu drain_sleep_ms=%llu",
             (unsigned long long)peak_rss, (unsigned long long)final_rss,
             (unsigned long long)peak_live, (unsigned long long)sleep_ms);
    print_result(ops, t1 - t0, 1, extra);
}

/* ------------------------------------------------------------------------ */
/* main                                                                     */
/* ------------------------------------------------------------------------ */

static void wl_cache_thrash(void) { wl_cache(0); }
static void wl_cache_scratch(void) { wl_cache(1); }

static const struct {
    const char *name;
    void (*fn)(void);
} workloads[] = {
    {"larson", wl_larson},
    {"xmalloc", wl_xmalloc},
    {"cache-thrash", wl_cache_thrash},
    {"cache-scratch", wl_cache_scratch},
    {"mstress", wl_mstress},
    {"glibc-simple", wl_glibc_simple},
    {"glibc-thread", wl_glibc_thread},
    {"malloc-large", wl_malloc_large},
    {"frag", wl_frag},
    {"latency", wl_latency},
    {"rss-time", wl_rss_time},
};

#define NWORKLOADS (sizeof workloads / sizeof workloads[0])

static void usage(void)
{
    fprintf(stderr, "usage: classic WORKLOAD THREADS SCALE\n       classic --list\nworkloads:");
    for (size_t i = 0; i < NWORKLOADS; i++)
        fprintf(stderr, " %s", workloads[i].name);
    fputc('\n', stderr);
}

/* Strict non-negative decimal integer parse. */
static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
    unsigned long v = 0;
    if (*s == 0)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        if (v > (max - (unsigned long)(*s - '0')) / 10)
            return -1;
        v = v * 10 + (unsigned long)(*s - '0');
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < NWORKLOADS; i++)
            printf("%s\n", workloads[i].name);
        return 0;
    }
    if (argc != 4) {
        usage();
        return 2;
    }
    size_t w;
    for (w = 0; w < NWORKLOADS; w++)
        if (strcmp(argv[1], workloads[w].name) == 0)
            break;
    if (w == NWORKLOADS) {
        fprintf(stderr, "classic: unknown workload '%s'\n", argv[1]);
        usage();
        return 2;
    }
    unsigned long threads, scale;
    if (parse_uint(argv[2], 4096, &threads) != 0 || threads == 0) {
        fprintf(stderr, "classic: THREADS must be an integer in 1..4096, got '%s'\n", argv[2]);
        return 2;
    }
    if (parse_uint(argv[3], 1000000, &scale) != 0) {
        fprintf(stderr, "classic: SCALE must be a non-negative integer, got '%s'\n", argv[3]);
        return 2;
    }
    g_name = workloads[w].name;
    g_threads = (int)threads;
    g_scale = (unsigned)scale;
    workloads[w].fn();
    return 0;
}
