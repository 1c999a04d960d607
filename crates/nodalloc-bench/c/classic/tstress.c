/*
 * tstress.c -- many more threads than cores, objects handed between threads, and threads that
 * end and are replaced while their objects live on (issue 14: mimalloc's own stress test, where
 * nodalloc trailed every peer).  Written from the published description of mimalloc's
 * test-stress (32 threads, sizes linear in powers of two with a few very large ones, objects
 * filled and checked, a shared transfer array that outlives rounds of threads joined and
 * recreated); no code taken.
 *
 *   tstress     Rounds of THREADS threads (the showdown runs it at 32 on any machine).  Thread i
 *               makes A = 1000 x (i mod 8 + 1) allocations into its own array and R = A / 2
 *               more that it retains until it ends, in random order; after each allocation it
 *               frees a random entry of its array with probability 2/3 and, with probability
 *               1/4, swaps a random entry with one of 1000 transfer slots shared by every
 *               thread of every round (so objects are freed by other threads, often after
 *               their allocating thread has ended).  Sizes, from calloc: 2^0..2^4 words for the
 *               array, 2^0..2^6 for retained objects (plus a length word); one object in 50 is
 *               that times 100 (up to 51 KiB), or, for 4 in 50 of those, times 1000 (up to
 *               512 KiB), or, for 1 in 50, times 10 000 (up to 5 MiB).  At its end a thread
 *               frees its array and what it retained.  The main thread joins the round, frees
 *               each transfer slot with probability 1/2 and starts the next round; it frees the
 *               rest at the end.  Every word of an object is written with a pattern of its
 *               address and checked by whoever frees it.  SCALE multiplies the rounds (50 per
 *               unit, as in the original; SCALE = 0: 2 rounds of 1/100 the allocations).
 *               Bookkeeping arrays come from mmap, once, outside the rounds.
 */
#include "classic.h"

#define TS_TRANSFER 1000
#define TS_BASE 1000 /* allocations of thread 0 per round at SCALE >= 1 */
#define TS_SHIFT 5   /* objects of the array: 1..16 words; retained ones: 1..64 words */
#define TS_MAX_WORDS (64 * 10000 + 1)

static _Atomic(uint64_t *) ts_transfer[TS_TRANSFER];
static _Atomic uint64_t ts_allocs;

typedef struct {
    int id;
    uint64_t round;
    uint64_t allocs; /* into `data` */
    uint64_t retain; /* into `kept` */
    uint64_t **data; /* room for `allocs` */
    uint64_t **kept; /* room for `retain` */
} ts_arg_t;

/* Word 0 holds the object's length in words; word i holds the pattern below. */
static inline uint64_t ts_pattern(const uint64_t *p, uint64_t i)
{
    return mix64((uint64_t)(uintptr_t)p + i) | 1;
}

/* An object of 2^0..2^(shift-1) words, or (one in 50) that times 100, 1000 (4 in 50 of those)
 * or 10 000 (1 in 50 of those), zeroed by calloc and then filled; word 0 holds its length. */
static uint64_t *ts_alloc(rng_t *rng, unsigned shift)
{
    uint64_t words = (uint64_t)1 << rng_below(rng, shift);
    if (rng_below(rng, 50) == 0) {
        uint64_t tier = rng_below(rng, 50);
        words *= tier == 0 ? 10000 : tier < 5 ? 1000 : 100;
    }
    words += 1; /* the length word */
    uint64_t *p = calloc(words, 8);
    if (p == NULL)
        die("calloc(%llu, 8) returned NULL", (unsigned long long)words);
    p[0] = words;
    for (uint64_t i = 1; i < words; i++)
        p[i] = ts_pattern(p, i);
    return p;
}

static void ts_free(uint64_t *p)
{
    if (p == NULL)
        return;
    uint64_t words = p[0];
    if (words < 2 || words > TS_MAX_WORDS)
        die("object %p has a damaged length word (%llu)", (void *)p, (unsigned long long)words);
    for (uint64_t i = 1; i < words; i++)
        if (p[i] != ts_pattern(p, i))
            die("object %p (%llu words) was damaged at word %llu", (void *)p,
                (unsigned long long)words, (unsigned long long)i);
    free(p);
}

static void *ts_thread(void *arg)
{
    ts_arg_t *a = arg;
    rng_t rng = rng_seed(24, a->round * 4096 + (uint64_t)a->id);
    uint64_t allocs = a->allocs, retain = a->retain;
    uint64_t top = 0, kept = 0, done = 0;
    while (allocs > 0 || retain > 0) {
        if (retain == 0 || (allocs > 0 && rng_below(&rng, 2) == 0)) {
            a->data[top++] = ts_alloc(&rng, TS_SHIFT);
            allocs--;
        } else {
            a->kept[kept++] = ts_alloc(&rng, TS_SHIFT + 2);
            retain--;
        }
        done++;
        if (top > 0 && rng_below(&rng, 3) != 0) {
            uint64_t k = rng_below(&rng, top);
            ts_free(a->data[k]);
            a->data[k] = NULL;
        }
        if (top > 0 && rng_below(&rng, 4) == 0) {
            uint64_t k = rng_below(&rng, top);
            uint64_t s = rng_below(&rng, TS_TRANSFER);
            a->data[k] = atomic_exchange_explicit(&ts_transfer[s], a->data[k],
                                                  memory_order_acq_rel);
        }
    }
    for (uint64_t k = 0; k < top; k++)
        ts_free(a->data[k]);
    for (uint64_t k = 0; k < kept; k++)
        ts_free(a->kept[k]);
    atomic_fetch_add_explicit(&ts_allocs, done, memory_order_relaxed);
    return NULL;
}

void wl_tstress(void)
{
    int T = g_threads;
    uint64_t rounds = g_scale == 0 ? 2 : 50 * (uint64_t)g_scale;
    uint64_t base = g_scale == 0 ? TS_BASE / 100 : TS_BASE;
    pthread_t *tids = xmmap(sizeof(pthread_t) * (size_t)T);
    ts_arg_t *args = xmmap(sizeof(ts_arg_t) * (size_t)T);
    for (int i = 0; i < T; i++) {
        args[i].id = i;
        args[i].allocs = base * (uint64_t)(i % 8 + 1);
        args[i].retain = args[i].allocs / 2;
        args[i].data = xmmap(sizeof(uint64_t *) * args[i].allocs);
        args[i].kept = xmmap(sizeof(uint64_t *) * args[i].retain);
    }
    rng_t rng = rng_seed(25, 0);
    uint64_t start = now_ns();
    for (uint64_t r = 0; r < rounds; r++) {
        for (int i = 0; i < T; i++) {
            args[i].round = r;
            if (pthread_create(&tids[i], NULL, ts_thread, &args[i]) != 0)
                die("pthread_create failed");
        }
        for (int i = 0; i < T; i++)
            pthread_join(tids[i], NULL);
        for (int s = 0; s < TS_TRANSFER; s++) {
            if (rng_below(&rng, 2) == 0)
                ts_free(atomic_exchange(&ts_transfer[s], NULL));
        }
    }
    uint64_t elapsed = now_ns() - start;
    for (int s = 0; s < TS_TRANSFER; s++)
        ts_free(atomic_exchange(&ts_transfer[s], NULL));
    for (int i = 0; i < T; i++) {
        xmunmap(args[i].data, sizeof(uint64_t *) * args[i].allocs);
        xmunmap(args[i].kept, sizeof(uint64_t *) * args[i].retain);
    }
    xmunmap(args, sizeof(ts_arg_t) * (size_t)T);
    xmunmap(tids, sizeof(pthread_t) * (size_t)T);
    print_rounds_result(atomic_load(&ts_allocs), elapsed, T, rounds * (uint64_t)T);
}
