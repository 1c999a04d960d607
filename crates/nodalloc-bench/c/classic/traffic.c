/*
 * traffic.c -- the patterns where nodalloc's C library trailed its peers (issue 14): mixed sizes
 * handed between threads, threads that come and go while their objects survive, and a mixed-size
 * alloc/free loop.  Written from the published descriptions of the rpmalloc benchmark's
 * cross-thread mode, mimalloc's stress test and the alloc-test benchmark; no code taken.
 *
 *   xthread     THREADS threads in a ring.  Each round a thread allocates 64 blocks of sizes
 *               spread linearly over 8 B..16 KiB, frees half of them itself and hands the other
 *               half to the next thread through a single-producer single-consumer mailbox, then
 *               frees what the previous thread handed it.  Every block carries its size and a
 *               check word, verified by whichever thread frees it.
 *   churn       Rounds of 4 x THREADS short-lived threads (more threads than cores).  Each does
 *               random operations on 32 blocks of its own (replace with a new block of a mostly
 *               small size, up to 32 KiB) and on 1024 transfer slots shared by every thread of
 *               every round (swap one of its blocks with a slot's, so blocks move between
 *               threads, and outlive the thread that allocated them).  A thread that ends leaves
 *               its blocks in the transfer slots; the main thread frees what is left at the end.
 *   alloc-test  THREADS threads, each replacing random slots of a 1024-slot working set with
 *               blocks of log-uniform size 16 B..8 KiB (one in ten 8..64 KiB), touching the
 *               first and last word.  Run at 1 thread and at THREADS.
 */
#include "classic.h"

/* A block (at least 16 bytes) holds its size in its first word and a check derived from its
 * address and size in its last. */
static inline uint64_t check_of(const void *p, size_t size)
{
    return mix64((uint64_t)(uintptr_t)p ^ (size * 0x9E3779B97F4A7C15ull));
}

static void *tagged_alloc(size_t size)
{
    if (size < 16)
        size = 16;
    void *p = xmalloc(size);
    put64(p, 0, size);
    put64(p, size - 8, check_of(p, size));
    return p;
}

static void tagged_free(void *block)
{
    size_t size = (size_t)get64(block, 0);
    if (size < 16 || size > (64u << 10))
        die("block %p has a damaged size word (%zu)", block, size);
    if (get64(block, size - 8) != check_of(block, size))
        die("block %p (%zu bytes) was damaged", block, size);
    free(block);
}

/* ------------------------------------------------------------------------ */
/* xthread                                                                  */
/* ------------------------------------------------------------------------ */

#define XT_BATCH 64
#define XT_MAILBOX 8192 /* a power of two */

typedef struct {
    _Alignas(64) _Atomic uint64_t head; /* written by the consumer */
    _Alignas(64) _Atomic uint64_t tail; /* written by the producer */
    void *slots[XT_MAILBOX];
} mailbox_t;

typedef struct {
    int id;
    uint64_t rounds;
    mailbox_t *inbox;  /* filled by the previous thread */
    mailbox_t *outbox; /* the next thread's inbox */
} xt_arg_t;

/* Threads that have finished their rounds.  A finished thread keeps emptying its inbox until
 * every thread has finished, so a sender never waits on a mailbox nobody empties. */
static _Atomic int xt_finished;

/* Frees everything waiting in `box`; returns how many. */
static uint64_t xt_drain(mailbox_t *box)
{
    uint64_t head = atomic_load_explicit(&box->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&box->tail, memory_order_acquire);
    for (uint64_t i = head; i < tail; i++)
        tagged_free(box->slots[i & (XT_MAILBOX - 1)]);
    atomic_store_explicit(&box->head, tail, memory_order_release);
    return tail - head;
}

static void xt_send(xt_arg_t *a, void *block)
{
    mailbox_t *box = a->outbox;
    uint64_t tail = atomic_load_explicit(&box->tail, memory_order_relaxed);
    /* Full: free our own inbox meanwhile, so a ring of full mailboxes cannot deadlock. */
    while (tail - atomic_load_explicit(&box->head, memory_order_acquire) == XT_MAILBOX) {
        if (xt_drain(a->inbox) == 0)
            sched_yield();
    }
    box->slots[tail & (XT_MAILBOX - 1)] = block;
    atomic_store_explicit(&box->tail, tail + 1, memory_order_release);
}

static void *xt_thread(void *arg)
{
    xt_arg_t *a = arg;
    rng_t rng = rng_seed(21, (uint64_t)a->id);
    void *batch[XT_BATCH];
    gate_wait();
    for (uint64_t r = 0; r < a->rounds; r++) {
        for (int i = 0; i < XT_BATCH; i++)
            batch[i] = tagged_alloc(rng_range(&rng, 8, 16 << 10));
        for (int i = 0; i < XT_BATCH; i += 2)
            tagged_free(batch[i]);
        for (int i = 1; i < XT_BATCH; i += 2)
            xt_send(a, batch[i]);
        xt_drain(a->inbox);
    }
    atomic_fetch_add_explicit(&xt_finished, 1, memory_order_acq_rel);
    while (atomic_load_explicit(&xt_finished, memory_order_acquire) < g_threads) {
        if (xt_drain(a->inbox) == 0)
            sched_yield();
    }
    return NULL;
}

void wl_xthread(void)
{
    int T = g_threads;
    mailbox_t *boxes = xmmap(sizeof(mailbox_t) * (size_t)T);
    xt_arg_t *args = xmmap(sizeof(xt_arg_t) * (size_t)T);
    uint64_t rounds = scaled(20000);
    for (int i = 0; i < T; i++) {
        args[i].id = i;
        args[i].rounds = rounds;
        args[i].inbox = &boxes[i];
        args[i].outbox = &boxes[(i + 1) % T];
    }
    uint64_t elapsed = run_threads(T, xt_thread, args, sizeof(xt_arg_t));
    /* Blocks sent after the receiver's last drain. */
    for (int i = 0; i < T; i++)
        xt_drain(&boxes[i]);
    xmunmap(args, sizeof(xt_arg_t) * (size_t)T);
    xmunmap(boxes, sizeof(mailbox_t) * (size_t)T);
    print_result(rounds * XT_BATCH * (uint64_t)T, elapsed, T, "");
}

/* ------------------------------------------------------------------------ */
/* churn                                                                    */
/* ------------------------------------------------------------------------ */

#define CH_TRANSFER 1024
#define CH_LOCAL 32

static _Atomic(void *) ch_transfer[CH_TRANSFER];
static _Atomic uint64_t ch_allocs;

typedef struct {
    int id;
    uint64_t ops;
} ch_arg_t;

static size_t ch_size(rng_t *rng)
{
    uint64_t pick = rng_below(rng, 100);
    if (pick < 80)
        return rng_range(rng, 8, 128);
    if (pick < 95)
        return rng_range(rng, 129, 1024);
    return rng_range(rng, 1025, 32 << 10);
}

static void *ch_thread(void *arg)
{
    ch_arg_t *a = arg;
    rng_t rng = rng_seed(22, (uint64_t)a->id);
    void *local[CH_LOCAL] = {0};
    uint64_t allocs = 0;
    for (uint64_t i = 0; i < a->ops; i++) {
        int k = (int)rng_below(&rng, CH_LOCAL);
        if (rng_below(&rng, 4) == 0) {
            /* Swap with a transfer slot: the block we get was freed by nobody yet and may
             * have been allocated by a thread that has ended. */
            int s = (int)rng_below(&rng, CH_TRANSFER);
            local[k] = atomic_exchange_explicit(&ch_transfer[s], local[k], memory_order_acq_rel);
        } else {
            if (local[k])
                tagged_free(local[k]);
            local[k] = tagged_alloc(ch_size(&rng));
            allocs++;
        }
    }
    /* The thread ends; its blocks survive it in the transfer slots. */
    for (int k = 0; k < CH_LOCAL; k++) {
        if (!local[k])
            continue;
        int s = (int)rng_below(&rng, CH_TRANSFER);
        void *old = atomic_exchange_explicit(&ch_transfer[s], local[k], memory_order_acq_rel);
        if (old)
            tagged_free(old);
    }
    atomic_fetch_add_explicit(&ch_allocs, allocs, memory_order_relaxed);
    return NULL;
}

void wl_churn(void)
{
    int workers = 4 * g_threads;
    uint64_t rounds = g_scale == 0 ? 2 : 20 * (uint64_t)g_scale;
    uint64_t ops = g_scale == 0 ? 2000 : 20000;
    pthread_t *tids = xmmap(sizeof(pthread_t) * (size_t)workers);
    ch_arg_t *args = xmmap(sizeof(ch_arg_t) * (size_t)workers);
    uint64_t start = now_ns();
    for (uint64_t r = 0; r < rounds; r++) {
        for (int i = 0; i < workers; i++) {
            args[i].id = (int)(r * (uint64_t)workers) + i;
            args[i].ops = ops;
            if (pthread_create(&tids[i], NULL, ch_thread, &args[i]) != 0)
                die("pthread_create failed");
        }
        for (int i = 0; i < workers; i++)
            pthread_join(tids[i], NULL);
    }
    uint64_t elapsed = now_ns() - start;
    for (int s = 0; s < CH_TRANSFER; s++) {
        void *left = atomic_exchange(&ch_transfer[s], NULL);
        if (left)
            tagged_free(left);
    }
    xmunmap(args, sizeof(ch_arg_t) * (size_t)workers);
    xmunmap(tids, sizeof(pthread_t) * (size_t)workers);
    print_rounds_result(atomic_load(&ch_allocs), elapsed, workers, rounds * (uint64_t)workers);
}

/* ------------------------------------------------------------------------ */
/* alloc-test                                                               */
/* ------------------------------------------------------------------------ */

#define AT_SLOTS 1024

static void *at_thread(void *arg)
{
    iter_arg_t *a = arg;
    rng_t rng = rng_seed(23, (uint64_t)a->id);
    void **slots = xmmap(sizeof(void *) * AT_SLOTS);
    gate_wait();
    for (uint64_t i = 0; i < a->iters; i++) {
        int k = (int)rng_below(&rng, AT_SLOTS);
        if (slots[k])
            tagged_free(slots[k]);
        size_t size = rng_below(&rng, 10) == 0 ? rng_logu(&rng, 8 << 10, 64 << 10)
                                               : rng_logu(&rng, 16, 8 << 10);
        slots[k] = tagged_alloc(size);
    }
    for (int k = 0; k < AT_SLOTS; k++)
        if (slots[k])
            tagged_free(slots[k]);
    xmunmap(slots, sizeof(void *) * AT_SLOTS);
    return NULL;
}

void wl_alloc_test(void)
{
    run_iter_workers(at_thread, 2000000);
}
