/*
 * handoff.c -- the workloads whose blocks are freed by another thread than
 * the one that allocated them: larson and xmalloc.
 *
 * Each workload is described in main.c, which calls it through its table.
 */
#include "classic.h"

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

void wl_larson(void)
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

void wl_xmalloc(void)
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
