/*
 * classic -- classic allocator benchmarks for the nodalloc project.
 *
 * main.c: the program's description, its argument parsing and the table of
 * workloads; the workloads themselves are in the other files of this
 * directory (see classic.h).  The showdown's C suite (src/suites/c.rs)
 * compiles them all at run time with the system's cc.
 *
 * One C11 program, run once per allocator under LD_PRELOAD
 * (glibc, nodalloc, mimalloc, jemalloc, tcmalloc).  It only uses the standard
 * malloc family (malloc, free, realloc, malloc_usable_size) so it does not
 * depend on any particular allocator.  Large bookkeeping arrays (slot tables,
 * latency samples, RSS samples, queues) come from mmap or static storage so
 * they do not disturb the allocator being measured.
 *
 * Build:   cc -O2 -pthread -o classic *.c
 * Usage:   classic WORKLOAD THREADS SCALE
 *          classic --list
 *
 *   THREADS  positive integer, number of worker threads.
 *   SCALE    non-negative integer work multiplier.  1 = quick (~0.2-1.5 s
 *            per workload on a 2-core machine with glibc at THREADS=2);
 *            0 = tiny (about 1% of the SCALE=1 work; for test suites).
 *   Bad arguments or an unknown workload: message on stderr, exit 2.
 *
 * Workloads (all written from their published descriptions; xthread, churn and
 * alloc-test are described in traffic.c, tstress in tstress.c, server-model in server.c):
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
 *   fill-walk     (THREADS is ignored) four rounds of 64 MiB (x SCALE) of
 *                 blocks of one size (520, 1100, 2100, 64 B): allocate and
 *                 fill every block, read them all back in allocation order,
 *                 free them.  Rewards blocks handed out in address order and
 *                 memory kept from one round to the next.
 *   grow          (THREADS is ignored) 100 buffers (x SCALE), one after the
 *                 other, each grown by realloc an eighth at a time from 1 KiB
 *                 to 4 MiB and filled as it grows; ops = reallocs.  Rewards
 *                 growing a block in place over copying it at every step.
 *   bursts        Bursts with pauses: each thread keeps 4096 blocks (x SCALE)
 *                 of 1..16 KiB, filled; a round frees three in four, sleeps
 *                 250 ms, then allocates and fills the freed slots again.
 *                 Four rounds; only the refills are timed (elapsed = the
 *                 slowest thread's).  Rewards memory kept over a pause that
 *                 the program takes back at once.  (SCALE=0: two rounds,
 *                 10 ms pauses.)
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
 *   bursts:    refill_faults=N  (the threads' minor page faults in the refills)
 *   rss-time:  peak_rss_kib=K final_rss_kib=K peak_live_bytes=B
 *   server-model: rss_after_kib=K rss_idle_kib=K cache_bytes=B rss_per_cache_byte=X
 * Before the result line:
 *   latency:   226 lines "cdf NS FRACTION" (fractions 0.005..0.99 in steps of
 *              0.005, then 0.0005 up to 0.999, then 0.0001 up to 0.9999,
 *              then 1.000000 = the maximum)
 *   rss-time:  one line per sample "sample T_MS RSS_KIB LIVE_BYTES PHASE",
 *              PHASE one of ramp/churn/drain.
 * On a check failure (content mismatch, unbalanced counts, malloc returning
 * NULL) it prints "classic: WORKLOAD: <what failed>" on stderr, exits 1.
 */
#include "classic.h"

/* ------------------------------------------------------------------------ */
/* main                                                                     */
/* ------------------------------------------------------------------------ */

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
    {"fill-walk", wl_fill_walk},
    {"grow", wl_grow},
    {"bursts", wl_bursts},
    {"frag", wl_frag},
    {"latency", wl_latency},
    {"rss-time", wl_rss_time},
    {"server-model", wl_server_model},
    {"xthread", wl_xthread},
    {"churn", wl_churn},
    {"alloc-test", wl_alloc_test},
    {"tstress", wl_tstress},
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
