/*
 * profiles.c -- the workloads whose output is a distribution or a curve rather
 * than a time: frag, latency and rss-time.
 *
 * Each workload is described in main.c, which calls it through its table.
 */
#include "classic.h"

/* ------------------------------------------------------------------------ */
/* frag                                                                     */
/* ------------------------------------------------------------------------ */

void wl_frag(void)
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

void wl_latency(void)
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

static void rss_take_sample(void)
{
    if (rss_nsamples >= RSS_MAX_SAMPLES)
        return;
    rss_sample_t *s = &rss_samples[rss_nsamples];
    s->rss_kib = rss_kib();
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

/* A new object of a random size, filled, described in *obj; returns its size. */
static size_t rss_new(rng_t *r, rss_obj_t *obj)
{
    size_t sz = rss_size(r);
    obj->p = xmalloc(sz);
    obj->sz = sz;
    rss_fill(obj->p, sz);
    return sz;
}

static inline void rss_check(const rss_obj_t *o)
{
    char c = (char)((int)(o->sz & 0xff) | 1);
    if (o->p[0] != c || o->p[o->sz - 1] != c || o->p[o->sz / 2] != c)
        die("block %p (%zu bytes) was corrupted", (void *)o->p, o->sz);
}

void wl_rss_time(void)
{
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
        live += rss_new(&rng, &objs[n++]);
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
            live += rss_new(&rng, &objs[n++]);
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
