/* What every test group of numatest shares: the result line and its verdict, bookkeeping memory
 * the allocator under test never sees, the machine as /sys describes it, the kernel's word on
 * where a page is, nodalloc's extra entry points, pinned worker threads, child processes that
 * start nodalloc afresh, and page sets. harness.c defines them and main; tests.c lists the
 * tests. The rules that keep the measurements honest are stated once, in harness.c.
 */
#ifndef NUMATEST_HARNESS_H
#define NUMATEST_HARNESS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_NODES 64
#define PAGE 4096UL
/* The kernel's MPOL_BIND, without libnuma's header. */
#define MPOL_BIND_MODE 2

/* ---------------------------------------------------------------- output */

extern const char *allocator;
extern const char *current_test;
extern int is_nodalloc;
/* Set for a test whose verdicts only inform here (NEEDS_TIERED_KERNEL on a kernel numa-vm/run
 * does not vouch for): verdict() then gives info even for nodalloc. */
extern int informing;

void out(const char *format, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void die(const char *what);
const char *verdict(int met);
void fraction(char *buffer, size_t size, long part, long total);
void append(char *buffer, size_t size, size_t *used, const char *format, ...)
    __attribute__((format(printf, 4, 5)));

/* ---------------------------------------------------------------- memory for bookkeeping */

void *xmap(size_t bytes);
void xunmap(void *p, size_t bytes);

/* ---------------------------------------------------------------- the machine, from /sys */

struct node {
    int os_id;
    int has_memory;
    cpu_set_t cpus;
    int cpu_count;
    int distance[MAX_NODES]; /* to each online node, indexed like `nodes` */
};

extern struct node nodes[MAX_NODES]; /* online nodes, /sys order */
extern int node_count;
/* nodalloc's numbering: index among nodes with memory, /sys order -> position in `nodes`. */
extern int usable[MAX_NODES];
extern int usable_count;
/* Usable nodes that have CPUs, as nodalloc indices: the nodes threads are bound to. */
extern int cpu_nodes[MAX_NODES];
extern int cpu_node_count;

int read_text(const char *path, char *buffer, size_t size);
int write_file(const char *path, const char *text);
void parse_list(const char *text, void (*each)(int, void *), void *context);
void add_cpu(int cpu, void *set);
struct node *usable_node(int index);
int os_id_of_index(int index);
int cpu_node_os_id(int k);
void cpuset_text(const cpu_set_t *set, char *buffer, size_t size);
int cpuset_subset(const cpu_set_t *inner, const cpu_set_t *outer);
long node_memory_kib(int os_id);
int nearest_usable(int index);
int cpuless_node(void);

/* ---------------------------------------------------------------- kernel probes */

void page_nodes(void **pages, unsigned long count, int *status);
void pin_to(const cpu_set_t *set);
double now_seconds(void);
void thp_mode(char *mode, size_t size);
int compare_pointers(const void *a, const void *b);

/* ---------------------------------------------------------------- nodalloc's extras */

extern int (*na_node_of)(const void *);
extern void *(*na_malloc_on_node)(size_t, int);
extern void *(*na_malloc_cold)(size_t);
extern void (*na_stats_print)(int);

int nodalloc_home_os_id(void);
const char *nodalloc_stats_text(void);
int nodalloc_reported_nodes(void);
void first_malloc(void);

/* ---------------------------------------------------------------- threads */

struct worker {
    pthread_t thread;
    int index;       /* creation order, from 0 */
    int node_os_id;  /* the node the test pins the thread to */
    cpu_set_t pin;   /* its CPUs */
    int home_os_id;  /* nodalloc's home node as the thread saw it (-1 for peers) */
    void *context;
    /* per-test figures */
    long figures[16];
};

extern sem_t started; /* posted by each worker once it is pinned and has allocated */

int agreeing_cpu_node(int created);
void worker_pin(struct worker *w, int cpu_node);
void start_workers(struct worker *workers, int count, void *(*routine)(void *));
void join_workers(struct worker *workers, int count);
void thread_start(struct worker *w);
int home_mismatches(struct worker *workers, int count);

/* ---------------------------------------------------------------- child processes */

extern int (*child_hook)(const void *);
extern const void *child_hook_argument;

int run_child(const char *mode, const char *argument, const char *const *assignments,
              const unsigned long *bind_mask, char *output, size_t size);
void run_reporting_child(const char *test, const char *mode, const char *argument,
                         const char *const *assignments);

/* ---------------------------------------------------------------- page sets */

/* Distinct pages of a set of objects, and how many of them the kernel has on each node. */
struct page_set {
    uintptr_t *pages;
    long count, capacity;
};

void page_set_init(struct page_set *s, long capacity);
void page_set_add(struct page_set *s, const void *object, size_t size);
void page_set_count(struct page_set *s, long *per_node, long *absent);
void per_node_text(const long *per_node, long absent, char *buffer, size_t size);

/* ---------------------------------------------------------------- the table of tests */

/* Who runs a test besides nodalloc. */
enum peers {
    PEERS_MEASURED,  /* every allocator: the peers' figures are the comparison */
    PEERS_SKIPPED,   /* nodalloc's own machinery: a peer reports skipped=nodalloc-only */
    PEERS_UNPLANNED, /* a peer runs it when asked, but /init does not ask: nothing to compare */
};

/* What the machine must have. Without two nodes with CPUs the test cannot measure anything
 * and fails; a CPU-less node only exists with numa-vm/run --memory-only-node or --far-node, so
 * without one the test is skipped and /init does not plan it. A test that probes the kernel's
 * memory tiers and weighted interleave runs everywhere, but judges only where numa-vm/run
 * chose a kernel that has them (--kernel 6.12 sets NUMATEST_TIERED=1); elsewhere its nodalloc
 * row is info, which numa-vm/run's summary accepts for these tests alone. */
enum needs {
    NEEDS_TWO_CPU_NODES = 1,
    NEEDS_CPULESS_NODE = 2,
    NEEDS_TIERED_KERNEL = 4,
};

struct test {
    const char *name;
    /* The test, run as `numatest <name> <allocator>`; NULL for an entry that only names a
     * child mode shared by several tests. */
    void (*run)(const char *test);
    /* Its child, run as `numatest <name>.child nodalloc <argument>` (run_child), or NULL. */
    void (*child)(const char *argument);
    enum peers peers;
    unsigned needs;
    /* The child may run where /sys is gone: it reads no topology. */
    int child_without_sys;
    /* What /init adds to the environment of every run of the test (NULL: nothing). */
    const char *environment;
};

/* In run order: /init plans them as `numatest list` names them. */
extern const struct test tests[];
extern const int test_count;

#endif
