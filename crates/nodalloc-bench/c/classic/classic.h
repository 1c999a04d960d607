/*
 * classic.h -- what the files of the classic program share: the run's
 * parameters, the helpers every workload uses (timing, bookkeeping memory
 * from mmap, the PRNG, worker threads behind a start barrier, the result
 * line) and the entry point of every workload, which main.c dispatches to.
 *
 * One workload family per file: handoff.c (larson, xmalloc), cache.c
 * (cache-thrash, cache-scratch), stress.c (mstress, glibc-simple,
 * glibc-thread, malloc-large, fill-walk, grow, bursts), profiles.c (frag,
 * latency, rss-time), traffic.c (xthread, churn, alloc-test), tstress.c (tstress), server.c (server-model); helpers
 * that are not inline live in common.c.  main.c describes the program and its
 * output protocol.  Small helpers are `static inline` here so that every
 * workload's hot loop compiles as it did when the program was one file.
 */
#ifndef CLASSIC_H
#define CLASSIC_H

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

/* Set by main before the workload runs. */
extern const char *g_name; /* current workload, for messages */
extern int g_threads;      /* THREADS argument */
extern unsigned g_scale;   /* SCALE argument */

/* Keeps the compiler from eliding malloc/free pairs whose memory is unused:
 * the pointer "escapes" into an empty asm, which costs nothing at run time
 * (unlike a shared global, which would add true sharing between threads). */
static inline void escape(void *p)
{
    __asm__ volatile("" : : "r"(p) : "memory");
}

/* Prints "classic: WORKLOAD: <message>" on stderr and exits 1. */
void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Work count for SCALE: base * SCALE, or base / 100 for SCALE = 0. */
static inline uint64_t scaled(uint64_t base)
{
    uint64_t n = g_scale == 0 ? base / 100 : base * g_scale;
    return n ? n : 1;
}

/* Zeroed memory straight from the kernel, not from the allocator. */
void *xmmap(size_t size);
void xmunmap(void *p, size_t size);

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

static inline rng_t rng_seed(uint64_t workload_salt, uint64_t thread)
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
 * every worker exists: each worker calls gate_wait() once it is ready.
 * run_threads returns the elapsed ns from the barrier to the last join. */
void gate_wait(void);
uint64_t run_threads(int n, void *(*fn)(void *), void *args, size_t arg_size);

/* The argument of a worker that runs `iters` iterations, and the workload that runs g_threads
 * such workers of `fn` (each scaled(base_iters) iterations) and prints iterations as ops. */
typedef struct {
    int id;
    uint64_t iters;
} iter_arg_t;
void run_iter_workers(void *(*fn)(void *), uint64_t base_iters);

/* The last line of stdout: "result workload=W threads=T ops=N elapsed_ns=E
 * workers=N", then `extra` (space-separated key=value fields) if any. */
void print_result(uint64_t ops, uint64_t elapsed, int workers, const char *extra);
/* The result line of a workload run in rounds of short-lived threads (threads_created=N). */
void print_rounds_result(uint64_t ops, uint64_t elapsed, int workers, uint64_t threads_created);

/* Resident set in KiB from /proc/self/statm, without touching malloc (0 if unreadable). */
uint64_t rss_kib(void);

/* The workloads, one family per file. */
void wl_larson(void);        /* handoff.c */
void wl_xmalloc(void);       /* handoff.c */
void wl_cache_thrash(void);  /* cache.c */
void wl_cache_scratch(void); /* cache.c */
void wl_mstress(void);       /* stress.c */
void wl_glibc_simple(void);  /* stress.c */
void wl_glibc_thread(void);  /* stress.c */
void wl_malloc_large(void);  /* stress.c */
void wl_fill_walk(void);     /* stress.c */
void wl_grow(void);          /* stress.c */
void wl_bursts(void);        /* stress.c */
void wl_frag(void);          /* profiles.c */
void wl_latency(void);       /* profiles.c */
void wl_rss_time(void);      /* profiles.c */
void wl_xthread(void);       /* traffic.c */
void wl_churn(void);         /* traffic.c */
void wl_alloc_test(void);    /* traffic.c */
void wl_tstress(void);       /* tstress.c */
void wl_server_model(void); /* server.c */

#endif /* CLASSIC_H */
