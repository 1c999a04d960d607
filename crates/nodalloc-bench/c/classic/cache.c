/*
 * cache.c -- Hoard's false-sharing workloads: cache-thrash and cache-scratch.
 *
 * Each workload is described in main.c, which calls it through its table.
 */
#include "classic.h"

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

void wl_cache_thrash(void) { wl_cache(0); }
void wl_cache_scratch(void) { wl_cache(1); }
