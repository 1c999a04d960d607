/*
 * common.c -- the classic program's shared helpers that are not inline (see
 * classic.h): the run's parameters, the error exit, bookkeeping memory from
 * mmap, worker threads behind a start barrier and the result line.
 */
#include "classic.h"

const char *g_name = "?";
int g_threads = 1;
unsigned g_scale = 1;

void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "classic: %s: ", g_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

void *xmmap(size_t size)
{
    if (size == 0)
        size = 1;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED)
        die("mmap(%zu) failed: %s", size, strerror(errno));
    return p;
}

void xmunmap(void *p, size_t size)
{
    if (size == 0)
        size = 1;
    munmap(p, size);
}

typedef struct {
    pthread_barrier_t bar;
} start_gate_t;

static start_gate_t g_gate;

void gate_wait(void)
{
    pthread_barrier_wait(&g_gate.bar);
}

uint64_t run_threads(int n, void *(*fn)(void *), void *args, size_t arg_size)
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

void run_iter_workers(void *(*fn)(void *), uint64_t base_iters)
{
    int T = g_threads;
    iter_arg_t *args = xmmap(sizeof(iter_arg_t) * (size_t)T);
    uint64_t iters = scaled(base_iters);
    for (int i = 0; i < T; i++) {
        args[i].id = i;
        args[i].iters = iters;
    }
    uint64_t elapsed = run_threads(T, fn, args, sizeof(iter_arg_t));
    xmunmap(args, sizeof(iter_arg_t) * (size_t)T);
    print_result(iters * (uint64_t)T, elapsed, T, "");
}

void print_result(uint64_t ops, uint64_t elapsed, int workers, const char *extra)
{
    printf("result workload=%s threads=%d ops=%llu elapsed_ns=%llu workers=%d%s%s\n", g_name,
           g_threads, (unsigned long long)ops, (unsigned long long)elapsed, workers,
           extra && *extra ? " " : "", extra ? extra : "");
    fflush(stdout);
}

/* Resident set in KiB from /proc/self/statm, without touching malloc. */
uint64_t rss_kib(void)
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
    long page_kib = sysconf(_SC_PAGESIZE) / 1024;
    return pages * (uint64_t)(page_kib > 0 ? page_kib : 4);
}

void print_rounds_result(uint64_t ops, uint64_t elapsed, int workers, uint64_t threads_created)
{
    char extra[64];
    snprintf(extra, sizeof extra, "threads_created=%llu", (unsigned long long)threads_created);
    print_result(ops, elapsed, workers, extra);
}
