/*
 * server.c -- server-model: a request-serving program whose allocation sites have different
 * lifetimes, for measuring how much memory a heap keeps after churn when long-lived objects
 * are born among short-lived ones (the question call-site partitions answer).
 *
 * Each of THREADS workers serves requests, advancing a random one of those in flight at each
 * step: 32 in flight for the first third of its requests, 1024 during a burst (the middle
 * third), 32 again for the last third.
 * A request is born with a parse buffer (2..16 KiB, one call site), then makes 8..48 small
 * request objects (16..256 B, another site) over its steps and a response (512 B..8 KiB, a
 * third site); when it completes, everything it made is freed, and one request in eight
 * replaces a random entry of the worker's long-lived cache (12 000 entries of 64..512 B at
 * SCALE=1, made by a fourth site), so cache objects are born throughout the run, among the
 * requests' objects. After the churn, every request in flight is finished and freed; the cache
 * stays.
 *
 * Reported: rss_after_kib (RSS once only the caches are live, measured as the workers have
 * joined), rss_idle_kib (the same after one idle second, for allocators that give memory back
 * after a delay), cache_bytes (the caches' live bytes) and rss_per_cache_byte (idle RSS per
 * cache byte).  Every object carries a check
 * word in its first and last 8 bytes, verified when freed.
 */
#include "classic.h"

#define CALM 32
#define BURST 1024
#define MAX_OBJECTS 48

typedef struct {
    void *parse;
    size_t parse_size;
    void *objects[MAX_OBJECTS];
    size_t sizes[MAX_OBJECTS];
    int made, want;
    void *response;
    size_t response_size;
} request_t;

typedef struct {
    void *p;
    size_t size;
} entry_t;

typedef struct {
    int id;
    uint64_t requests;
    size_t cache_entries;
    uint64_t ops;
    uint64_t cache_bytes;
    entry_t *cache; /* left live for the main thread to measure, then free */
} server_arg_t;

static inline uint64_t server_check(const void *p, size_t size)
{
    return mix64((uint64_t)(uintptr_t)p * 31 + size);
}

/* Inlined into each call site below: each kind of object reaches malloc from its own
 * function, not through one shared helper. */
__attribute__((always_inline)) static inline void *server_new(size_t size)
{
    void *p = xmalloc(size);
    put64(p, 0, server_check(p, size));
    put64(p, size - 8, server_check(p, size) ^ 1);
    return p;
}

static void server_free(void *p, size_t size)
{
    if (get64(p, 0) != server_check(p, size) || get64(p, size - 8) != (server_check(p, size) ^ 1))
        die("object %p of %zu bytes lost its check words", p, size);
    free(p);
}

/* The call sites: each kind of object is made by its own function, as in a real server
 * (noipa: the compiler would otherwise fold the four identical functions into one). */
__attribute__((noinline, noipa)) static void *parse_buffer_new(size_t size) { return server_new(size); }
__attribute__((noinline, noipa)) static void *request_object_new(size_t size) { return server_new(size); }
__attribute__((noinline, noipa)) static void *response_new(size_t size) { return server_new(size); }
__attribute__((noinline, noipa)) static void *cache_entry_new(size_t size) { return server_new(size); }

static void request_start(request_t *r, rng_t *rng)
{
    r->parse_size = rng_logu(rng, 2 << 10, 16 << 10);
    r->parse = parse_buffer_new(r->parse_size);
    r->made = 0;
    r->want = (int)rng_range(rng, 8, MAX_OBJECTS);
    r->response = NULL;
}

/* One step of a request; returns 1 when it has completed (and freed what it made). */
static int request_step(request_t *r, rng_t *rng, entry_t *cache, size_t entries, uint64_t *ops)
{
    if (r->made < r->want) {
        int burst = (int)rng_range(rng, 1, 4);
        for (int k = 0; k < burst && r->made < r->want; k++) {
            size_t size = rng_logu(rng, 16, 256);
            r->sizes[r->made] = size;
            r->objects[r->made++] = request_object_new(size);
        }
        return 0;
    }
    if (r->response == NULL) {
        r->response_size = rng_logu(rng, 512, 8 << 10);
        r->response = response_new(r->response_size);
        return 0;
    }
    if (rng_below(rng, 8) == 0) {
        entry_t *e = &cache[rng_below(rng, entries)];
        server_free(e->p, e->size);
        e->size = rng_logu(rng, 64, 512);
        e->p = cache_entry_new(e->size);
        (*ops)++;
    }
    for (int k = 0; k < r->made; k++)
        server_free(r->objects[k], r->sizes[k]);
    server_free(r->response, r->response_size);
    server_free(r->parse, r->parse_size);
    *ops += (uint64_t)r->made + 2;
    return 1;
}

static void *server_thread(void *arg)
{
    server_arg_t *a = arg;
    rng_t rng = rng_seed(29, (uint64_t)a->id);
    entry_t *cache = xmmap(sizeof(entry_t) * a->cache_entries);
    request_t *flight = xmmap(sizeof(request_t) * BURST);
    uint64_t ops = 0;
    gate_wait();
    for (size_t i = 0; i < a->cache_entries; i++) {
        cache[i].size = rng_logu(&rng, 64, 512);
        cache[i].p = cache_entry_new(cache[i].size);
    }
    int in_flight = CALM;
    for (int i = 0; i < in_flight; i++)
        request_start(&flight[i], &rng);
    uint64_t started = (uint64_t)in_flight;
    while (started < a->requests) {
        int want = started < a->requests / 3 || started >= 2 * a->requests / 3 ? CALM : BURST;
        if (want > in_flight) {
            /* The burst begins: more requests arrive. */
            for (; in_flight < want; in_flight++, started++)
                request_start(&flight[in_flight], &rng);
            continue;
        }
        int i = (int)rng_below(&rng, (uint64_t)in_flight);
        if (!request_step(&flight[i], &rng, cache, a->cache_entries, &ops))
            continue;
        if (want < in_flight) {
            /* The burst ebbs: a completed request is not replaced. */
            flight[i] = flight[--in_flight];
            continue;
        }
        request_start(&flight[i], &rng);
        started++;
    }
    for (int i = 0; i < in_flight; i++)
        while (!request_step(&flight[i], &rng, cache, a->cache_entries, &ops))
            ;
    uint64_t bytes = 0;
    for (size_t i = 0; i < a->cache_entries; i++)
        bytes += cache[i].size;
    a->ops = ops;
    a->cache_bytes = bytes;
    a->cache = cache;
    xmunmap(flight, sizeof(request_t) * BURST);
    return NULL;
}

void wl_server_model(void)
{
    int T = g_threads;
    server_arg_t *args = xmmap(sizeof(server_arg_t) * (size_t)T);
    size_t entries = g_scale == 0 ? 500 : 12000 * (size_t)g_scale;
    for (int i = 0; i < T; i++) {
        args[i].id = i;
        args[i].requests = scaled(60000);
        args[i].cache_entries = entries;
    }
    uint64_t elapsed = run_threads(T, server_thread, args, sizeof(server_arg_t));
    uint64_t rss_after = rss_kib();
    /* Allocators that return memory after a delay get one second (idle: no allocation). */
    for (int i = 0; i < 100; i++) {
        struct timespec d = {0, 10 * 1000000L};
        nanosleep(&d, NULL);
    }
    uint64_t rss_idle = rss_kib();
    uint64_t ops = 0, cache_bytes = 0;
    for (int i = 0; i < T; i++) {
        ops += args[i].ops;
        cache_bytes += args[i].cache_bytes;
        for (size_t k = 0; k < entries; k++)
            server_free(args[i].cache[k].p, args[i].cache[k].size);
        xmunmap(args[i].cache, sizeof(entry_t) * entries);
    }
    char extra[200];
    snprintf(extra, sizeof extra,
             "rss_after_kib=%llu rss_idle_kib=%llu cache_bytes=%llu rss_per_cache_byte=%.2f",
             (unsigned long long)rss_after, (unsigned long long)rss_idle,
             (unsigned long long)cache_bytes,
             cache_bytes ? (double)rss_idle * 1024.0 / (double)cache_bytes : 0.0);
    xmunmap(args, sizeof(server_arg_t) * (size_t)T);
    print_result(ops, elapsed, T, extra);
}
