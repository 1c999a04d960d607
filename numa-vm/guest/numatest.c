/* numatest: nodalloc's multi-node behaviour, measured inside a QEMU guest with emulated NUMA
 * nodes; built and run by numa-vm/run (docs/NUMA.md).
 *
 *   numatest sysinfo
 *   numatest <test> <allocator>
 *   numatest <test>.child nodalloc <argument>   (started by a test itself: run_child)
 *
 * The allocator is whatever malloc the process runs with (LD_PRELOAD or none); its name only
 * labels the output and decides the verdict: nodalloc's figures are checked against its targets
 * (pass/fail), every other allocator's figures are reported as info. Each result is one line:
 *
 *   RESULT <test> <allocator> <pass|fail|info> key=value ...
 *
 * Where memory is, is asked of the kernel (move_pages with no target nodes), never of the
 * allocator. No libnuma: raw syscalls keep the guest image to libc. The test's own bookkeeping
 * lives in mmap'd memory so that the allocator under test sees only the measured objects, and
 * output goes through write(2) from stack buffers so stdio never allocates behind our back.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/sysinfo.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_NODES 64
#define PAGE 4096UL

/* ---------------------------------------------------------------- output */

static const char *allocator = "?";
static const char *current_test = "setup";
static int is_nodalloc;

static void out(const char *format, ...) {
    char line[4096];
    va_list args;
    va_start(args, format);
    int length = vsnprintf(line, sizeof line, format, args);
    va_end(args);
    if (length < 0)
        return;
    if ((size_t)length >= sizeof line)
        length = sizeof line - 1;
    ssize_t done = 0;
    while (done < length) {
        ssize_t n = write(1, line + done, length - done);
        if (n <= 0)
            return;
        done += n;
    }
}

/* Ends the test with a result line that names what went wrong: a crash of the test itself is
 * a failure for nodalloc and a reported oddity for the peers. */
static _Noreturn void die(const char *what) {
    out("RESULT %s %s %s error=%s errno=%d\n", current_test, allocator,
        is_nodalloc ? "fail" : "info", what, errno);
    exit(2);
}

/* A verdict for a nodalloc target; peers only ever report. */
static const char *verdict(int met) {
    if (!is_nodalloc)
        return "info";
    return met ? "pass" : "fail";
}

/* Fractions are printed as "on/total(pct%)" so the raw counts survive into the report. */
static void fraction(char *buffer, size_t size, long part, long total) {
    if (total == 0)
        snprintf(buffer, size, "%ld/%ld(-)", part, total);
    else
        snprintf(buffer, size, "%ld/%ld(%.3f%%)", part, total, 100.0 * part / total);
}

/* Appends to a text buffer; a full buffer truncates instead of overrunning (snprintf returns
 * the length it wanted, not the length it wrote). */
static void append(char *buffer, size_t size, size_t *used, const char *format, ...) {
    if (*used >= size - 1)
        return;
    va_list args;
    va_start(args, format);
    int length = vsnprintf(buffer + *used, size - *used, format, args);
    va_end(args);
    if (length > 0)
        *used = *used + (size_t)length < size ? *used + (size_t)length : size - 1;
}

/* ---------------------------------------------------------------- memory for bookkeeping */

static void *xmap(size_t bytes) {
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        die("mmap");
    return p;
}

static void xunmap(void *p, size_t bytes) { munmap(p, bytes ? bytes : 1); }

/* ---------------------------------------------------------------- the machine, from /sys */

struct node {
    int os_id;
    int has_memory;
    cpu_set_t cpus;
    int cpu_count;
    int distance[MAX_NODES]; /* to each online node, indexed like `nodes` */
};

static struct node nodes[MAX_NODES]; /* online nodes, /sys order */
static int node_count;
/* nodalloc's numbering: index among nodes with memory, /sys order -> position in `nodes`. */
static int usable[MAX_NODES];
static int usable_count;
/* Usable nodes that have CPUs, as nodalloc indices: the nodes threads are bound to. */
static int cpu_nodes[MAX_NODES];
static int cpu_node_count;

static int read_text(const char *path, char *buffer, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t total = 0;
    for (;;) {
        ssize_t n = read(fd, buffer + total, size - 1 - total);
        if (n <= 0)
            break;
        total += n;
    }
    close(fd);
    buffer[total] = 0;
    return (int)total;
}

/* Calls `each` for every number in a kernel list such as "0-3,8,10-11". */
static void parse_list(const char *text, void (*each)(int, void *), void *context) {
    const char *p = text;
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\n')
            p++;
        if (*p < '0' || *p > '9')
            break;
        char *end;
        long first = strtol(p, &end, 10);
        long last = first;
        p = end;
        if (*p == '-') {
            last = strtol(p + 1, &end, 10);
            p = end;
        }
        for (long i = first; i <= last; i++)
            each((int)i, context);
    }
}

static void add_cpu(int cpu, void *set) { CPU_SET(cpu, (cpu_set_t *)set); }

static void add_online(int id, void *unused) {
    (void)unused;
    if (node_count < MAX_NODES)
        nodes[node_count++].os_id = id;
}

static void mark_memory(int id, void *unused) {
    (void)unused;
    for (int i = 0; i < node_count; i++)
        if (nodes[i].os_id == id)
            nodes[i].has_memory = 1;
}

static void read_topology(void) {
    char text[8192], path[256];
    if (read_text("/sys/devices/system/node/online", text, sizeof text) < 0)
        die("no-/sys/devices/system/node");
    parse_list(text, add_online, NULL);
    if (read_text("/sys/devices/system/node/has_memory", text, sizeof text) >= 0)
        parse_list(text, mark_memory, NULL);
    for (int i = 0; i < node_count; i++) {
        struct node *n = &nodes[i];
        CPU_ZERO(&n->cpus);
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", n->os_id);
        if (read_text(path, text, sizeof text) >= 0)
            parse_list(text, add_cpu, &n->cpus);
        n->cpu_count = CPU_COUNT(&n->cpus);
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d/distance", n->os_id);
        if (read_text(path, text, sizeof text) >= 0) {
            char *p = text;
            for (int j = 0; j < node_count; j++)
                n->distance[j] = (int)strtol(p, &p, 10);
        }
        if (n->has_memory) {
            usable[usable_count] = i;
            if (n->cpu_count > 0)
                cpu_nodes[cpu_node_count++] = usable_count;
            usable_count++;
        }
    }
}

/* The /sys node (position in `nodes`) behind nodalloc's index `index`. */
static struct node *usable_node(int index) { return &nodes[usable[index]]; }

static int os_id_of_index(int index) {
    return index >= 0 && index < usable_count ? usable_node(index)->os_id : -1;
}

static int cpu_node_os_id(int k) { return os_id_of_index(cpu_nodes[k % cpu_node_count]); }

static void cpuset_text(const cpu_set_t *set, char *buffer, size_t size) {
    size_t used = 0;
    buffer[0] = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, set))
            append(buffer, size, &used, "%s%d", used ? "," : "", cpu);
    if (!used)
        snprintf(buffer, size, "none");
}

static int cpuset_subset(const cpu_set_t *inner, const cpu_set_t *outer) {
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, inner) && !CPU_ISSET(cpu, outer))
            return 0;
    return 1;
}

/* ---------------------------------------------------------------- kernel probes */

/* The node of each page (addresses rounded down to pages): the kernel's word, not the
 * allocator's. Negative status: page absent (-ENOENT) or not queryable. */
static void page_nodes(void **pages, unsigned long count, int *status) {
    for (unsigned long i = 0; i < count; i++)
        pages[i] = (void *)((uintptr_t)pages[i] & ~(PAGE - 1));
    if (count && syscall(SYS_move_pages, 0, count, pages, NULL, status, 0) != 0)
        die("move_pages");
}

static void pin_to(const cpu_set_t *set) {
    if (sched_setaffinity(0, sizeof *set, set) != 0)
        die("sched_setaffinity");
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------- nodalloc's extras */

static int (*na_node_of)(const void *);
static void *(*na_malloc_on_node)(size_t, int);
static void (*na_stats_print)(int);

/* The allocator the caller named must be the one the process runs with, or every comparison
 * is a lie: look for a symbol only that allocator exports. */
static void check_allocator(void) {
    const char *symbol = NULL;
    if (!strcmp(allocator, "nodalloc"))
        symbol = "nodalloc_node_of";
    else if (!strcmp(allocator, "jemalloc"))
        symbol = "mallctl";
    else if (!strcmp(allocator, "mimalloc"))
        symbol = "mi_malloc";
    if (symbol && !dlsym(RTLD_DEFAULT, symbol))
        die("allocator-not-loaded");
    na_node_of = (int (*)(const void *))dlsym(RTLD_DEFAULT, "nodalloc_node_of");
    na_malloc_on_node = (void *(*)(size_t, int))dlsym(RTLD_DEFAULT, "nodalloc_malloc_on_node");
    na_stats_print = (void (*)(int))dlsym(RTLD_DEFAULT, "nodalloc_stats_print");
}

/* nodalloc's home node of the calling thread as a /sys node id (-1 for other allocators): the
 * node of a fresh small object, which always comes from the thread's home region. */
static int nodalloc_home_os_id(void) {
    if (!is_nodalloc)
        return -1;
    char *p = malloc(64);
    if (!p)
        die("malloc");
    *p = 1;
    int index = na_node_of(p);
    free(p);
    return os_id_of_index(index);
}

/* A first malloc the compiler cannot elide (it may drop a bare free(malloc(n))): starts the
 * allocator and, under nodalloc, binds the calling thread. */
static void first_malloc(void) {
    char *volatile p = malloc(1);
    if (!p)
        die("malloc");
    *p = 1;
    free(p);
}

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

/* nodalloc binds the k-th thread that starts allocating (the main thread is 0) to node k mod N
 * of the nodes with CPUs. Tests that measure something other than binding pin their k-th
 * created thread to that same node, so that the pin and nodalloc's binding agree and the
 * figures are about where memory comes from; `placement` pins in plain node order, against it.
 * Threads start one at a time (see start_workers), or the order in which they reach nodalloc,
 * and so their nodes, would be the scheduler's choice. */
static int agreeing_cpu_node(int created) { return (created + 1) % cpu_node_count; }

static void worker_pin(struct worker *w, int cpu_node) {
    w->node_os_id = cpu_node_os_id(cpu_node);
    w->pin = usable_node(cpu_nodes[cpu_node])->cpus;
}

static sem_t started; /* posted by each worker once it is pinned and has allocated */

static void start_workers(struct worker *workers, int count, void *(*routine)(void *)) {
    for (int i = 0; i < count; i++) {
        if (pthread_create(&workers[i].thread, NULL, routine, &workers[i]) != 0)
            die("pthread_create");
        while (sem_wait(&started) != 0 && errno == EINTR)
            ;
    }
}

static void join_workers(struct worker *workers, int count) {
    for (int i = 0; i < count; i++)
        pthread_join(workers[i].thread, NULL);
}

/* Every measuring thread begins here: its pin, then one malloc. The malloc matters for the
 * peers too: glibc and jemalloc give a thread its cache at its first malloc, and a thread that
 * only ever freed would bypass it and hide the reuse the tests look for. */
static void thread_start(struct worker *w) {
    pin_to(&w->pin);
    first_malloc();
    w->home_os_id = nodalloc_home_os_id();
    sem_post(&started);
}

/* Counts workers whose nodalloc home is not the node they are pinned to. */
static int home_mismatches(struct worker *workers, int count) {
    int mismatches = 0;
    for (int i = 0; i < count; i++)
        if (is_nodalloc && workers[i].home_os_id != workers[i].node_os_id)
            mismatches++;
    return mismatches;
}

/* ---------------------------------------------------------------- sysinfo */

/* MemTotal of a node in KiB, 0 if unknown. */
static long node_memory_kib(int os_id) {
    char path[128], meminfo[4096];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/meminfo", os_id);
    if (read_text(path, meminfo, sizeof meminfo) < 0)
        return 0;
    char *p = strstr(meminfo, "MemTotal:");
    return p ? strtol(p + 9, NULL, 10) : 0;
}

static void sysinfo(void) {
    char cpus[512];
    out("SYSINFO nodes=%d usable=%d with_cpus=%d\n", node_count, usable_count, cpu_node_count);
    for (int i = 0; i < node_count; i++) {
        char row[512];
        size_t used = 0;
        row[0] = 0;
        for (int j = 0; j < node_count; j++)
            append(row, sizeof row, &used, "%s%d", j ? "," : "", nodes[i].distance[j]);
        cpuset_text(&nodes[i].cpus, cpus, sizeof cpus);
        long kib = node_memory_kib(nodes[i].os_id);
        out("SYSINFO node%d cpus=%s memory=%ldMiB distances=%s\n", nodes[i].os_id, cpus,
            kib / 1024, row);
    }
    char thp[256] = "?";
    if (read_text("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp) > 0)
        thp[strcspn(thp, "\n")] = 0;
    out("SYSINFO thp=\"%s\"\n", thp);
}

/* ---------------------------------------------------------------- topology (nodalloc only) */

static void *topology_thread(void *argument) {
    struct worker *w = argument;
    sched_getaffinity(0, sizeof w->pin, &w->pin);
    char *p = malloc(64);
    if (!p)
        die("malloc");
    *p = 1;
    w->figures[0] = na_node_of(p);
    free(p);
    sem_post(&started);
    return NULL;
}

/* The usable node nodalloc spills to from `index`: the nearest node with CPUs by its /sys
 * distance row (ties to the lower index); a CPU-less node only when no other node has CPUs.
 * That is the order nodalloc documents for stealing and spilling. */
static int nearest_usable(int index) {
    int best = -1;
    for (int j = 0; j < usable_count; j++) {
        if (j == index)
            continue;
        int cpuless = usable_node(j)->cpu_count == 0;
        int d = usable_node(index)->distance[usable[j]];
        if (best < 0) {
            best = j;
            continue;
        }
        int best_cpuless = usable_node(best)->cpu_count == 0;
        int best_d = usable_node(index)->distance[usable[best]];
        if (cpuless < best_cpuless || (cpuless == best_cpuless && d < best_d))
            best = j;
    }
    return best;
}

static void test_topology(void) {
    const char *test = "topology";
    if (!is_nodalloc) {
        out("RESULT %s %s info skipped=nodalloc-only\n", test, allocator);
        return;
    }
    /* 1. Node count: the first line of the statistics, "nodalloc <v>: N node(s), ...". */
    first_malloc();
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0)
        die("pipe");
    na_stats_print(pipe_fds[1]);
    close(pipe_fds[1]);
    char text[8192];
    ssize_t length = read(pipe_fds[0], text, sizeof text - 1);
    close(pipe_fds[0]);
    text[length > 0 ? length : 0] = 0;
    int reported = -1;
    char *colon = strstr(text, ": ");
    if (colon && strstr(colon, " node(s)"))
        reported = (int)strtol(colon + 2, NULL, 10);
    int count_ok = reported == usable_count && !strstr(text, "simulated");

    /* 2. Every node, CPU-less ones too: nodalloc_malloc_on_node(64, k) reports k, and the
     * kernel puts the page on the /sys node behind k. Also a 1 MiB object, every page. */
    int node_of_ok = 0, physical_ok = 0;
    for (int k = 0; k < usable_count; k++) {
        char *small = na_malloc_on_node(64, k);
        char *large = na_malloc_on_node(1 << 20, k);
        if (!small || !large)
            die("malloc_on_node");
        memset(small, 1, 64);
        memset(large, 1, 1 << 20);
        int good_pages = 0;
        void *pages[257];
        int status[257];
        pages[0] = small;
        for (int i = 0; i < 256; i++)
            pages[i + 1] = large + i * PAGE;
        page_nodes(pages, 257, status);
        for (int i = 0; i < 257; i++)
            good_pages += status[i] == os_id_of_index(k);
        node_of_ok += na_node_of(small) == k && na_node_of(large) == k;
        physical_ok += good_pages == 257;
        free(small);
        free(large);
    }
    int invalid_rejected = na_malloc_on_node(64, usable_count) == NULL && errno == EINVAL;

    /* 3. CPUs: one thread per node with CPUs; nodalloc binds each to a node, whose CPU set must
     * be exactly the /sys cpulist of that node. */
    struct worker *workers = xmap(sizeof *workers * cpu_node_count);
    for (int i = 0; i < cpu_node_count; i++)
        workers[i].index = i;
    start_workers(workers, cpu_node_count, topology_thread);
    join_workers(workers, cpu_node_count);
    int cpus_ok = 0, nodes_seen = 0;
    for (int i = 0; i < cpu_node_count; i++) {
        int home = (int)workers[i].figures[0];
        if (home >= 0 && home < usable_count &&
            CPU_EQUAL(&workers[i].pin, &usable_node(home)->cpus))
            cpus_ok++;
        int first = 1;
        for (int j = 0; j < i; j++)
            if (workers[j].figures[0] == home)
                first = 0;
        nodes_seen += first;
    }
    xunmap(workers, sizeof *workers * cpu_node_count);

    /* 4. Distances: the spill order. With NODALLOC_REGION_SIZE=64M (set by /init) a node's
     * region fills after a few 4 MiB objects and the next one must come from the nearest node
     * by the /sys distance row. */
    int nearest_ok = 0;
    char spills[256] = "";
    size_t spills_used = 0;
    for (int k = 0; k < usable_count && usable_count > 1; k++) {
        void *held[64];
        int held_count = 0, spill = -1;
        while (held_count < 64) {
            void *p = na_malloc_on_node(4 << 20, k);
            if (!p)
                break;
            held[held_count++] = p;
            if (na_node_of(p) != k) {
                spill = na_node_of(p);
                break;
            }
        }
        for (int i = 0; i < held_count; i++)
            free(held[i]);
        int expected = nearest_usable(k);
        nearest_ok += spill == expected;
        append(spills, sizeof spills, &spills_used, "%s%d>%d(want%d)", k ? "," : "",
               os_id_of_index(k), os_id_of_index(spill), os_id_of_index(expected));
    }
    int distances_needed = usable_count > 1 ? usable_count : 0;

    int met = count_ok && node_of_ok == usable_count && physical_ok == usable_count &&
              invalid_rejected && cpus_ok == cpu_node_count && nodes_seen == cpu_node_count &&
              nearest_ok == distances_needed;
    out("RESULT %s %s %s nodes_sys=%d nodes_nodalloc=%d node_of=%d/%d pages_on_node=%d/%d "
        "cpus=%d/%d spill_nearest=%d/%d spills=%s bad_node_einval=%d\n",
        test, allocator, verdict(met), usable_count, reported, node_of_ok, usable_count,
        physical_ok, usable_count, cpus_ok, cpu_node_count, nearest_ok, distances_needed,
        spills[0] ? spills : "-", invalid_rejected);
}

/* ---------------------------------------------------------------- placement */

struct size_range {
    const char *name;
    size_t size;
    int count;
};

static const struct size_range ranges[] = {
    {"small", 64, 16384},       /* 1 MiB of 64 B objects */
    {"medium", 16 << 10, 256},  /* 4 MiB of 16 KiB objects */
    {"large", 1 << 20, 8},      /* 8 MiB of 1 MiB objects */
    {"huge", 64 << 20, 1},      /* one 64 MiB object */
};
#define RANGE_COUNT (int)(sizeof ranges / sizeof ranges[0])

static int compare_pointers(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Pins itself to its node's CPUs first thing (before its first malloc), then allocates each
 * size range, touches every page and asks the kernel where each distinct page is.
 * figures[2r] = pages on the node, figures[2r+1] = distinct pages, for range r. */
static void *placement_thread(void *argument) {
    struct worker *w = argument;
    thread_start(w);
    for (int r = 0; r < RANGE_COUNT; r++) {
        const struct size_range *range = &ranges[r];
        char **objects = xmap(sizeof *objects * range->count);
        size_t pages_per_object = (range->size + PAGE - 1) / PAGE + 1;
        size_t page_capacity = pages_per_object * range->count;
        void **pages = xmap(sizeof *pages * page_capacity);
        int *status = xmap(sizeof *status * page_capacity);
        size_t page_count = 0;
        for (int i = 0; i < range->count; i++) {
            char *p = malloc(range->size);
            if (!p)
                die("malloc");
            for (size_t offset = 0; offset < range->size; offset += PAGE)
                p[offset] = (char)i;
            p[range->size - 1] = (char)i;
            objects[i] = p;
            uintptr_t first = (uintptr_t)p & ~(PAGE - 1);
            uintptr_t last = ((uintptr_t)p + range->size - 1) & ~(PAGE - 1);
            for (uintptr_t page = first; page <= last; page += PAGE)
                pages[page_count++] = (void *)page;
        }
        qsort(pages, page_count, sizeof *pages, compare_pointers);
        size_t distinct = 0;
        for (size_t i = 0; i < page_count; i++)
            if (i == 0 || pages[i] != pages[distinct - 1])
                pages[distinct++] = pages[i];
        page_nodes(pages, distinct, status);
        long on_node = 0;
        for (size_t i = 0; i < distinct; i++)
            on_node += status[i] == w->node_os_id;
        w->figures[2 * r] = on_node;
        w->figures[2 * r + 1] = (long)distinct;
        for (int i = 0; i < range->count; i++)
            free(objects[i]);
        xunmap(objects, sizeof *objects * range->count);
        xunmap(pages, sizeof *pages * page_capacity);
        xunmap(status, sizeof *status * page_capacity);
    }
    return NULL;
}

/* One thread per node with CPUs, one after the other. `placement`: the k-th thread is pinned
 * to the k-th node, the obvious order, which is never the node nodalloc's interleave order
 * binds it to (k + 1): nodalloc has bound the thread before its start routine pins it.
 * `placement_agreeing`: the k-th thread is pinned to node k + 1, where nodalloc binds it too,
 * which measures placement alone. */
static void test_placement(const char *test, int agreeing) {
    long on[RANGE_COUNT] = {0}, total[RANGE_COUNT] = {0};
    int mismatches = 0;
    char per_node[1024] = "";
    size_t used = 0;
    first_malloc(); /* the main thread takes nodalloc's binding index 0 */
    for (int k = 0; k < cpu_node_count; k++) {
        struct worker w;
        memset(&w, 0, sizeof w);
        w.index = k;
        worker_pin(&w, agreeing ? agreeing_cpu_node(k) : k);
        start_workers(&w, 1, placement_thread);
        join_workers(&w, 1);
        mismatches += home_mismatches(&w, 1);
        append(per_node, sizeof per_node, &used, "%snode%d:", k ? "," : "", w.node_os_id);
        for (int r = 0; r < RANGE_COUNT; r++) {
            on[r] += w.figures[2 * r];
            total[r] += w.figures[2 * r + 1];
            append(per_node, sizeof per_node, &used, "%s%ld/%ld", r ? "/" : "", w.figures[2 * r],
                   w.figures[2 * r + 1]);
        }
    }
    /* Target: at least 99.9 % of the pages of every size range on the thread's node. */
    int met = 1;
    char figures[1024];
    used = 0;
    for (int r = 0; r < RANGE_COUNT; r++) {
        char f[64];
        fraction(f, sizeof f, on[r], total[r]);
        append(figures, sizeof figures, &used, "%s=%s ", ranges[r].name, f);
        if (total[r] == 0 || on[r] * 1000 < total[r] * 999)
            met = 0;
    }
    if (is_nodalloc)
        append(figures, sizeof figures, &used, "home_mismatch=%d ", mismatches);
    out("RESULT %s %s %s %sper_node=%s\n", test, allocator, verdict(met), figures, per_node);
}

/* ---------------------------------------------------------------- origin_reuse */

#define REUSE_THREADS_PER_NODE 2
#define REUSE_OBJECTS 8192

struct reuse_shared {
    pthread_barrier_t barrier;
    char **handed[REUSE_THREADS_PER_NODE]; /* node-0 thread i's objects, freed by node-1 thread i */
    uintptr_t *freed;                      /* every handed address, sorted by the main thread */
    long freed_count;
};

static int was_freed(struct reuse_shared *s, void *p) {
    uintptr_t key = (uintptr_t)p;
    return bsearch(&key, s->freed, s->freed_count, sizeof key, compare_pointers) != NULL;
}

/* Role by node: the threads pinned to the first node with CPUs allocate and hand over, those
 * on the second free and then allocate; threads pinned elsewhere only keep the barriers.
 * figures: [0] role rank, [1] remote reuses (node 1) / reuses that came back (node 0),
 * [2] pages of the new objects on the thread's node, [3] their distinct pages. */
static void *reuse_thread(void *argument) {
    struct worker *w = argument;
    struct reuse_shared *s = w->context;
    thread_start(w);
    int role = w->node_os_id == cpu_node_os_id(0) ? 0 : w->node_os_id == cpu_node_os_id(1) ? 1 : -1;
    int rank = (int)w->figures[0];
    char **fresh = xmap(sizeof *fresh * REUSE_OBJECTS);

    if (role == 0) { /* 1: node 0 allocates and hands over */
        for (int i = 0; i < REUSE_OBJECTS; i++) {
            if (!(s->handed[rank][i] = malloc(64)))
                die("malloc");
            memset(s->handed[rank][i], 0xa0, 64);
        }
    }
    pthread_barrier_wait(&s->barrier);
    pthread_barrier_wait(&s->barrier); /* the main thread sorts the handed addresses */
    if (role == 1) /* 2: node 1 frees them */
        for (int i = 0; i < REUSE_OBJECTS; i++)
            free(s->handed[rank][i]);
    pthread_barrier_wait(&s->barrier);
    if (role == 1) { /* 3: node 1 allocates: any handed address is a remote reuse */
        for (int i = 0; i < REUSE_OBJECTS; i++) {
            if (!(fresh[i] = malloc(64)))
                die("malloc");
            memset(fresh[i], 0xb1, 64);
            w->figures[1] += was_freed(s, fresh[i]);
        }
    }
    pthread_barrier_wait(&s->barrier);
    if (role == 0) { /* 4: node 0 allocates: handed addresses coming home */
        for (int i = 0; i < REUSE_OBJECTS; i++) {
            if (!(fresh[i] = malloc(64)))
                die("malloc");
            memset(fresh[i], 0xc0, 64);
            w->figures[1] += was_freed(s, fresh[i]);
        }
    }
    if (role >= 0) {
        void **pages = xmap(sizeof *pages * REUSE_OBJECTS);
        int *status = xmap(sizeof *status * REUSE_OBJECTS);
        /* Distinct pages only: many 64 B objects share one. */
        for (int i = 0; i < REUSE_OBJECTS; i++)
            pages[i] = (void *)((uintptr_t)fresh[i] & ~(PAGE - 1));
        qsort(pages, REUSE_OBJECTS, sizeof *pages, compare_pointers);
        long distinct = 0;
        for (int i = 0; i < REUSE_OBJECTS; i++)
            if (i == 0 || pages[i] != pages[distinct - 1])
                pages[distinct++] = pages[i];
        page_nodes(pages, distinct, status);
        for (long i = 0; i < distinct; i++)
            w->figures[2] += status[i] == w->node_os_id;
        w->figures[3] = distinct;
        xunmap(pages, sizeof *pages * REUSE_OBJECTS);
        xunmap(status, sizeof *status * REUSE_OBJECTS);
    }
    pthread_barrier_wait(&s->barrier);
    if (role >= 0) /* the handed objects are gone already */
        for (int i = 0; i < REUSE_OBJECTS; i++)
            free(fresh[i]);
    xunmap(fresh, sizeof *fresh * REUSE_OBJECTS);
    return NULL;
}

static void test_origin_reuse(void) {
    const char *test = "origin_reuse";
    if (cpu_node_count < 2)
        die("needs-two-nodes-with-cpus");
    first_malloc();
    int count = REUSE_THREADS_PER_NODE * cpu_node_count;
    struct worker *workers = xmap(sizeof *workers * count);
    struct reuse_shared *s = xmap(sizeof *s);
    pthread_barrier_init(&s->barrier, NULL, count + 1);
    for (int i = 0; i < REUSE_THREADS_PER_NODE; i++)
        s->handed[i] = xmap(sizeof(char *) * REUSE_OBJECTS);
    s->freed = xmap(sizeof(uintptr_t) * REUSE_THREADS_PER_NODE * REUSE_OBJECTS);
    int ranks[MAX_NODES] = {0};
    for (int i = 0; i < count; i++) {
        int cpu_node = agreeing_cpu_node(i);
        workers[i].index = i;
        workers[i].context = s;
        workers[i].figures[0] = ranks[cpu_node]++;
        worker_pin(&workers[i], cpu_node);
    }
    start_workers(workers, count, reuse_thread);
    pthread_barrier_wait(&s->barrier);
    for (int i = 0; i < REUSE_THREADS_PER_NODE; i++)
        for (int j = 0; j < REUSE_OBJECTS; j++)
            s->freed[s->freed_count++] = (uintptr_t)s->handed[i][j];
    qsort(s->freed, s->freed_count, sizeof *s->freed, compare_pointers);
    for (int i = 0; i < 4; i++)
        pthread_barrier_wait(&s->barrier);
    join_workers(workers, count);

    long remote = 0, back = 0, on1 = 0, pages1 = 0, on0 = 0, pages0 = 0;
    for (int i = 0; i < count; i++) {
        if (workers[i].node_os_id == cpu_node_os_id(1)) {
            remote += workers[i].figures[1];
            on1 += workers[i].figures[2];
            pages1 += workers[i].figures[3];
        } else if (workers[i].node_os_id == cpu_node_os_id(0)) {
            back += workers[i].figures[1];
            on0 += workers[i].figures[2];
            pages0 += workers[i].figures[3];
        }
    }
    long handed = s->freed_count;
    char f_remote[64], f_back[64], f_local1[64], f_local0[64];
    fraction(f_remote, sizeof f_remote, remote, handed);
    fraction(f_back, sizeof f_back, back, handed);
    fraction(f_local1, sizeof f_local1, on1, pages1);
    fraction(f_local0, sizeof f_local0, on0, pages0);
    int mismatches = home_mismatches(workers, count);
    char extra[64] = "";
    if (is_nodalloc)
        snprintf(extra, sizeof extra, " home_mismatch=%d", mismatches);
    /* Target: node-1 threads never get a node-0 object back (0 remote reuses). */
    out("RESULT %s %s %s remote_reuse=%s came_back_to_node0=%s node1_new_pages_local=%s "
        "node0_new_pages_local=%s%s\n",
        test, allocator, verdict(remote == 0 && mismatches == 0), f_remote, f_back, f_local1,
        f_local0, extra);
}

/* ---------------------------------------------------------------- binding (nodalloc only) */

static void *binding_thread(void *argument) {
    struct worker *w = argument;
    char *p = malloc(64); /* with or without the pthread_create wrapper, bound by now */
    if (!p)
        die("malloc");
    *p = 1;
    w->home_os_id = os_id_of_index(na_node_of(p));
    free(p);
    sched_getaffinity(0, sizeof w->pin, &w->pin);
    pthread_barrier_wait(w->context);
    return NULL;
}

/* Cases: spread (interleave over the whole machine), one_cpu (the parent narrows itself to one
 * CPU after its first malloc), one_node (the parent narrows itself to one node's CPUs after
 * its first malloc), attr (each thread is created with an affinity attribute of one node's
 * CPUs). In every case no thread may run outside the mask it started with; under spread each
 * thread's mask must lie within one node and the threads must cover the nodes evenly. */
static void test_binding(const char *test) {
    const char *kind = strchr(test, '.') ? strchr(test, '.') + 1 : "spread";
    if (!is_nodalloc) {
        out("RESULT %s %s info skipped=nodalloc-only\n", test, allocator);
        return;
    }
    first_malloc(); /* the main thread is bound at its first malloc */
    int count = 2 * cpu_node_count;
    struct worker *workers = xmap(sizeof *workers * count);
    cpu_set_t allowed[MAX_NODES * 2];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, count);
    cpu_set_t narrowed;
    CPU_ZERO(&narrowed);
    int last_node = cpu_node_count - 1;
    const cpu_set_t *last_cpus = &usable_node(cpu_nodes[last_node])->cpus;
    if (!strcmp(kind, "one_cpu")) {
        /* The highest CPU of the last node: not node 0's, where the main thread was bound. */
        for (int cpu = CPU_SETSIZE - 1; cpu >= 0; cpu--)
            if (CPU_ISSET(cpu, last_cpus)) {
                CPU_SET(cpu, &narrowed);
                break;
            }
        pin_to(&narrowed);
    } else if (!strcmp(kind, "one_node")) {
        narrowed = *last_cpus;
        pin_to(&narrowed);
    } else if (strcmp(kind, "spread") && strcmp(kind, "attr")) {
        die("unknown-case");
    }
    for (int i = 0; i < count; i++) {
        workers[i].index = i;
        workers[i].context = &barrier;
        pthread_attr_t attributes;
        pthread_attr_init(&attributes);
        if (!strcmp(kind, "attr")) {
            allowed[i] = usable_node(cpu_nodes[i % cpu_node_count])->cpus;
            pthread_attr_setaffinity_np(&attributes, sizeof allowed[i], &allowed[i]);
        } else if (!strcmp(kind, "spread")) {
            CPU_ZERO(&allowed[i]);
            for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
                CPU_SET(cpu, &allowed[i]);
        } else {
            allowed[i] = narrowed;
        }
        if (pthread_create(&workers[i].thread, &attributes, binding_thread, &workers[i]) != 0)
            die("pthread_create");
        pthread_attr_destroy(&attributes);
    }
    join_workers(workers, count);

    int within_start_mask = 0, within_one_node = 0;
    int per_node[MAX_NODES] = {0};
    char masks[2048] = "";
    size_t used = 0;
    for (int i = 0; i < count; i++) {
        struct worker *w = &workers[i];
        within_start_mask += cpuset_subset(&w->pin, &allowed[i]);
        for (int k = 0; k < cpu_node_count; k++) {
            const cpu_set_t *cpus = &usable_node(cpu_nodes[k])->cpus;
            if (cpu_node_os_id(k) == w->home_os_id && cpuset_subset(&w->pin, cpus)) {
                within_one_node++;
                per_node[k]++;
            }
        }
        char mask[256];
        cpuset_text(&w->pin, mask, sizeof mask);
        append(masks, sizeof masks, &used, "%st%d:node%d:{%s}", i ? "," : "", i, w->home_os_id,
               mask);
    }
    int spread_even = 1;
    char spread[256] = "";
    used = 0;
    for (int k = 0; k < cpu_node_count; k++) {
        if (per_node[k] < count / cpu_node_count)
            spread_even = 0;
        append(spread, sizeof spread, &used, "%s%d", k ? "/" : "", per_node[k]);
    }
    int met = within_start_mask == count;
    if (!strcmp(kind, "spread"))
        met = met && within_one_node == count && spread_even;
    char narrowed_text[256];
    cpuset_text(&narrowed, narrowed_text, sizeof narrowed_text);
    out("RESULT %s %s %s threads=%d within_allowed_mask=%d/%d mask_within_home_node=%d/%d "
        "threads_per_node=%s narrowed_to={%s} masks=%s\n",
        test, allocator, verdict(met), count, within_start_mask, count, within_one_node, count,
        spread, strcmp(kind, "one_cpu") && strcmp(kind, "one_node") ? "-" : narrowed_text,
        masks);
}

/* ---------------------------------------------------------------- hoard_stress */

#define STRESS_GENERATIONS 3
#define STRESS_ROUNDS 64
#define STRESS_BATCH 128
#define STRESS_TOUCHES 20
#define STRESS_SAMPLE_EVERY 8

struct stress_shared {
    pthread_barrier_t barrier;
    int threads;
    char **mailbox[MAX_NODES * 4]; /* batch waiting for thread i, from thread i - 1 */
    size_t *mailbox_sizes[MAX_NODES * 4];
};

static uint64_t next_random(uint64_t *state) {
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

/* Each round: free the batch the predecessor (on another node) handed over, allocate a fresh
 * batch (64 B - 4 KiB), write every cache line of each object STRESS_TOUCHES times, ask the
 * kernel where a sample of the new objects is, hand the batch to the successor. The sample
 * measures what the allocator gives a thread right after it freed remote objects: Hoard's
 * cache-scratch, across nodes.
 * figures: [0] allocs+frees, [1] sampled pages remote, [2] sampled pages, [3] corrupt objects. */
static void *stress_thread(void *argument) {
    struct worker *w = argument;
    struct stress_shared *s = w->context;
    thread_start(w);
    uint64_t random = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(w->index + 1) * 0x100000001b3ULL;
    int next = (w->index + 1) % s->threads;
    char *batch[STRESS_BATCH];
    size_t sizes[STRESS_BATCH];
    void *pages[STRESS_BATCH / STRESS_SAMPLE_EVERY];
    int status[STRESS_BATCH / STRESS_SAMPLE_EVERY];
    pthread_barrier_wait(&s->barrier);
    for (int round = 0; round < STRESS_ROUNDS; round++) {
        char **received = s->mailbox[w->index];
        size_t *received_sizes = s->mailbox_sizes[w->index];
        if (round > 0) {
            for (int i = 0; i < STRESS_BATCH; i++) {
                /* The receiver checks what the sender wrote last. */
                if (received[i][received_sizes[i] - 1] != (char)(STRESS_TOUCHES))
                    w->figures[3]++;
                free(received[i]);
                w->figures[0]++;
            }
        }
        int samples = 0;
        for (int i = 0; i < STRESS_BATCH; i++) {
            size_t size = 64 + (next_random(&random) % (4096 - 64 + 1));
            char *p = malloc(size);
            if (!p)
                die("malloc");
            w->figures[0]++;
            for (int touch = 1; touch <= STRESS_TOUCHES; touch++) {
                for (size_t offset = 0; offset < size; offset += 64)
                    p[offset] = (char)touch;
                p[size - 1] = (char)touch;
            }
            batch[i] = p;
            sizes[i] = size;
            if (i % STRESS_SAMPLE_EVERY == 0)
                pages[samples++] = p;
        }
        page_nodes(pages, samples, status);
        for (int i = 0; i < samples; i++)
            w->figures[1] += status[i] != w->node_os_id;
        w->figures[2] += samples;
        pthread_barrier_wait(&s->barrier); /* everyone has freed what they received */
        memcpy(s->mailbox[next], batch, sizeof batch);
        memcpy(s->mailbox_sizes[next], sizes, sizeof sizes);
        pthread_barrier_wait(&s->barrier);
    }
    for (int i = 0; i < STRESS_BATCH; i++) {
        free(s->mailbox[w->index][i]);
        w->figures[0]++;
    }
    return NULL;
}

/* mimalloc's sampled remote pages from its run of this test, "remote/total", passed by /init
 * in NUMATEST_REFERENCE; nodalloc's target is relative to it. */
static int reference_fraction(long *remote, long *total) {
    const char *text = getenv("NUMATEST_REFERENCE");
    return text && sscanf(text, "%ld/%ld", remote, total) == 2 && *total > 0;
}

/* STRESS_GENERATIONS generations of 2N + 1 threads (N nodes with CPUs), each generation
 * started after the previous one exited: a thread pool that is torn down and rebuilt. The odd
 * count shifts every position to the next node from one generation to the next, so memory a
 * generation leaves behind is offered to threads on other nodes. The first generation alone
 * is the steady state; later ones add that churn. */
static void test_hoard_stress(void) {
    const char *test = "hoard_stress";
    if (cpu_node_count < 2)
        die("needs-two-nodes-with-cpus");
    first_malloc();
    int count = 2 * cpu_node_count + 1;
    struct worker *workers = xmap(sizeof *workers * count);
    struct stress_shared *s = xmap(sizeof *s);
    s->threads = count;
    for (int i = 0; i < count; i++) {
        s->mailbox[i] = xmap(sizeof(char *) * STRESS_BATCH);
        s->mailbox_sizes[i] = xmap(sizeof(size_t) * STRESS_BATCH);
    }
    long ops = 0, remote = 0, sampled = 0, corrupt = 0, first_remote = 0, first_sampled = 0;
    int mismatches = 0, created = 0;
    double elapsed = 0;
    for (int generation = 0; generation < STRESS_GENERATIONS; generation++) {
        pthread_barrier_init(&s->barrier, NULL, count + 1);
        memset(workers, 0, sizeof *workers * count);
        for (int i = 0; i < count; i++) {
            workers[i].index = i;
            workers[i].context = s;
            worker_pin(&workers[i], agreeing_cpu_node(created++));
        }
        start_workers(workers, count, stress_thread);
        pthread_barrier_wait(&s->barrier);
        double start = now_seconds();
        for (int round = 0; round < STRESS_ROUNDS; round++) {
            pthread_barrier_wait(&s->barrier);
            pthread_barrier_wait(&s->barrier);
        }
        join_workers(workers, count);
        elapsed += now_seconds() - start;
        pthread_barrier_destroy(&s->barrier);
        for (int i = 0; i < count; i++) {
            ops += workers[i].figures[0];
            remote += workers[i].figures[1];
            sampled += workers[i].figures[2];
            corrupt += workers[i].figures[3];
            if (generation == 0) {
                first_remote += workers[i].figures[1];
                first_sampled += workers[i].figures[2];
            }
        }
        mismatches += home_mismatches(workers, count);
    }

    char f_remote[64], f_first[64];
    fraction(f_remote, sizeof f_remote, remote, sampled);
    fraction(f_first, sizeof f_first, first_remote, first_sampled);
    long ref_remote = 0, ref_total = 0;
    const char *v;
    char target[128];
    if (!is_nodalloc) {
        v = "info";
        snprintf(target, sizeof target, "-");
    } else if (reference_fraction(&ref_remote, &ref_total) && ref_remote > 0) {
        /* Target: remote fraction at most a fifth of mimalloc's. */
        int met = remote * 5 * ref_total <= ref_remote * sampled && corrupt == 0 &&
                  mismatches == 0;
        v = met ? "pass" : "fail";
        snprintf(target, sizeof target, "<=1/5*mimalloc(%ld/%ld)", ref_remote, ref_total);
    } else {
        v = corrupt == 0 && mismatches == 0 ? "info" : "fail";
        snprintf(target, sizeof target, "none(mimalloc-remote=%ld/%ld)", ref_remote, ref_total);
    }
    char extra[64] = "";
    if (is_nodalloc)
        snprintf(extra, sizeof extra, " home_mismatch=%d", mismatches);
    out("RESULT %s %s %s ops_per_s=%.0f ops=%ld seconds=%.2f remote_pages=%s "
        "first_generation_remote=%s corrupt=%ld target=%s%s\n",
        test, allocator, v, ops / elapsed, ops, elapsed, f_remote, f_first, corrupt, target,
        extra);
}

/* ---------------------------------------------------------------- child processes */

/* nodalloc reads its options and the task memory policy once, at start-up: a test that varies
 * them runs this program again in a child (fork + exec of this program, exe_path) as
 * `numatest <child-mode> nodalloc <argument>`, with `assignments` ("NAME=VALUE") added to the
 * environment and, when `bind_mask` is not NULL (bit i = /sys node i, MAX_NODES bits), the
 * task memory policy MPOL_BIND to those nodes set before the exec (inherited across it, as numactl --membind does). The child's output (stdout
 * and stderr) lands in `output`; returns the child's wait status. */
#define MPOL_BIND_MODE 2
/* This program's path, read once at start-up: a child may exec it where /proc is gone. */
static char exe_path[512] = "/bin/numatest";
/* Set by a test for the next run_child: called in the child just before the exec (after the
 * environment and the memory policy), to make its environment hostile (rlimit, seccomp, mount
 * namespace). A non-zero return ends the child with status 6; the hook prints why. */
static int (*child_hook)(const void *);
static const void *child_hook_argument;
static int run_child(const char *mode, const char *argument, const char *const *assignments,
                     const unsigned long *bind_mask, char *output, size_t size) {
    int fds[2];
    if (pipe(fds) != 0)
        die("pipe");
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[1]);
        for (int i = 0; assignments && assignments[i]; i++) {
            char name[128];
            const char *equals = strchr(assignments[i], '=');
            size_t length = equals ? (size_t)(equals - assignments[i]) : 0;
            if (!equals || length >= sizeof name)
                _exit(3);
            memcpy(name, assignments[i], length);
            name[length] = 0;
            setenv(name, equals + 1, 1);
        }
        if (bind_mask) {
            /* maxnode counts one bit more than the kernel reads. */
            if (syscall(SYS_set_mempolicy, MPOL_BIND_MODE, bind_mask, MAX_NODES + 1UL) != 0) {
                out("CHILD set_mempolicy failed errno=%d\n", errno);
                _exit(4);
            }
        }
        if (child_hook && child_hook(child_hook_argument) != 0)
            _exit(6);
        execl(exe_path, "numatest", mode, "nodalloc", argument, (char *)NULL);
        out("CHILD exec %s failed errno=%d\n", exe_path, errno);
        _exit(5);
    }
    close(fds[1]);
    size_t used = 0;
    for (;;) {
        ssize_t n = read(fds[0], output + used, size - 1 - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        used += (size_t)n;
        if (used == size - 1) { /* full: drain the rest so the child never blocks */
            char sink[4096];
            while (read(fds[0], sink, sizeof sink) > 0)
                ;
            break;
        }
    }
    output[used] = 0;
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return status;
}

/* Runs a child that prints the RESULT line itself; passes its output on, and reports a failure
 * when it ended without one (crashed, killed, or the exec failed). */
static void run_reporting_child(const char *test, const char *mode, const char *argument,
                                const char *const *assignments) {
    static char output[1 << 16];
    int status = run_child(mode, argument, assignments, NULL, output, sizeof output);
    out("%s", output);
    if (!strstr(output, "RESULT ") || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        out("RESULT %s %s fail error=child exited=%d status=%d signal=%d\n", test, allocator,
            WIFEXITED(status), WIFEXITED(status) ? WEXITSTATUS(status) : -1,
            WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* The /sys node id of a CPU, -1 if none. */
static int node_of_cpu(int cpu) {
    for (int i = 0; i < node_count; i++)
        if (cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &nodes[i].cpus))
            return nodes[i].os_id;
    return -1;
}

static struct node *node_by_os_id(int os_id) {
    for (int i = 0; i < node_count; i++)
        if (nodes[i].os_id == os_id)
            return &nodes[i];
    return NULL;
}

/* ---------------------------------------------------------------- page sets */

/* Distinct pages of a set of objects, and how many of them the kernel has on each node. */
struct page_set {
    uintptr_t *pages;
    long count, capacity;
};

static void page_set_init(struct page_set *s, long capacity) {
    s->pages = xmap(sizeof *s->pages * capacity);
    s->count = 0;
    s->capacity = capacity;
}

static void page_set_add(struct page_set *s, const void *object, size_t size) {
    uintptr_t first = (uintptr_t)object & ~(PAGE - 1);
    uintptr_t last = ((uintptr_t)object + size - 1) & ~(PAGE - 1);
    for (uintptr_t page = first; page <= last; page += PAGE) {
        if (s->count == s->capacity)
            die("page-set-full");
        s->pages[s->count++] = page;
    }
}

/* Sorts and deduplicates, then fills per_node[os id] (and *absent: pages with no node). */
static void page_set_count(struct page_set *s, long *per_node, long *absent) {
    qsort(s->pages, s->count, sizeof *s->pages, compare_pointers);
    long distinct = 0;
    for (long i = 0; i < s->count; i++)
        if (distinct == 0 || s->pages[distinct - 1] != s->pages[i])
            s->pages[distinct++] = s->pages[i];
    s->count = distinct;
    for (int i = 0; i < MAX_NODES; i++)
        per_node[i] = 0;
    *absent = 0;
    enum { CHUNK = 1024 };
    void *batch[CHUNK];
    int status[CHUNK];
    for (long at = 0; at < distinct; at += CHUNK) {
        long n = distinct - at < CHUNK ? distinct - at : CHUNK;
        for (long i = 0; i < n; i++)
            batch[i] = (void *)s->pages[at + i];
        page_nodes(batch, n, status);
        for (long i = 0; i < n; i++) {
            if (status[i] >= 0 && status[i] < MAX_NODES)
                per_node[status[i]]++;
            else
                ++*absent;
        }
    }
}

/* "node:pages,..." for the nodes that hold any. */
static void per_node_text(const long *per_node, long absent, char *buffer, size_t size) {
    size_t used = 0;
    buffer[0] = 0;
    for (int i = 0; i < MAX_NODES; i++)
        if (per_node[i])
            append(buffer, size, &used, "%s%d:%ld", used ? "," : "", i, per_node[i]);
    if (absent)
        append(buffer, size, &used, "%sabsent:%ld", used ? "," : "", absent);
    if (!used)
        snprintf(buffer, size, "-");
}

/* An ordinary mix of touched objects: 2048 x 64 B, 32 x 16 KiB, 2 x 1 MiB, 1 x 4 MiB (about
 * 6.6 MiB; small enough for TCG). Kept (leaked) so that the pages stay put until counted. */
static void allocate_mix(struct page_set *s) {
    static const size_t sizes[] = {64, 16 << 10, 1 << 20, 4 << 20};
    static const int counts[] = {2048, 32, 2, 1};
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < counts[r]; i++) {
            char *p = malloc(sizes[r]);
            if (!p)
                die("malloc");
            for (size_t offset = 0; offset < sizes[r]; offset += PAGE)
                p[offset] = 1;
            p[sizes[r] - 1] = 1;
            page_set_add(s, p, sizes[r]);
        }
}

/* ---------------------------------------------------------------- binding.policies */

/* The child: creates `count` workers one at a time, each keeps running until all exist (so no
 * heap is handed from an exited thread to a new one). Prints the main thread's mask and, per
 * worker, "W k cpu_before cpu_after node_of_index mask". */
struct policy_worker {
    pthread_t thread;
    int cpu_before, cpu_after, node_index;
    cpu_set_t mask;
};

static sem_t released;

static void *policy_thread(void *argument) {
    struct policy_worker *w = argument;
    w->cpu_before = sched_getcpu();
    char *volatile p = malloc(64);
    if (!p)
        die("malloc");
    *p = 1;
    w->node_index = na_node_of(p);
    w->cpu_after = sched_getcpu();
    sched_getaffinity(0, sizeof w->mask, &w->mask);
    sem_post(&started);
    while (sem_wait(&released) != 0 && errno == EINTR)
        ;
    free(p);
    return NULL;
}

static void child_policy_workers(int count) {
    first_malloc(); /* the main thread's heap first: it is heap 0 */
    cpu_set_t mask;
    sched_getaffinity(0, sizeof mask, &mask);
    char text[512];
    cpuset_text(&mask, text, sizeof text);
    out("M %s\n", text);
    sem_init(&released, 0, 0);
    struct policy_worker *workers = xmap(sizeof *workers * count);
    for (int i = 0; i < count; i++) {
        if (pthread_create(&workers[i].thread, NULL, policy_thread, &workers[i]) != 0)
            die("pthread_create");
        while (sem_wait(&started) != 0 && errno == EINTR)
            ;
    }
    for (int i = 0; i < count; i++)
        sem_post(&released);
    for (int i = 0; i < count; i++)
        pthread_join(workers[i].thread, NULL);
    for (int i = 0; i < count; i++) {
        cpuset_text(&workers[i].mask, text, sizeof text);
        out("W %d %d %d %d %s\n", i, workers[i].cpu_before, workers[i].cpu_after,
            workers[i].node_index, text);
    }
}

static void parse_mask(const char *text, cpu_set_t *set) {
    CPU_ZERO(set);
    if (strncmp(text, "none", 4))
        parse_list(text, add_cpu, set);
}

/* The node (/sys id) a policy gives the heap with index `index` (heap 0 is the main thread's,
 * which is never bound: worker k has index k + 1). */
static int policy_node(const char *policy, int index, const int *map, int map_length) {
    if (!strcmp(policy, "interleave"))
        return cpu_node_os_id(index);
    if (!strcmp(policy, "saturate")) {
        int total = 0;
        for (int k = 0; k < cpu_node_count; k++)
            total += usable_node(cpu_nodes[k])->cpu_count;
        int position = index % total;
        for (int k = 0; k < cpu_node_count; k++) {
            int cpus = usable_node(cpu_nodes[k])->cpu_count;
            if (position < cpus)
                return cpu_node_os_id(k);
            position -= cpus;
        }
        return cpu_node_os_id(0);
    }
    if (!strcmp(policy, "map"))
        return map[index % map_length];
    return -1; /* none: wherever the thread runs */
}

static void test_binding_policies(void) {
    const char *test = "binding.policies";
    if (!is_nodalloc) {
        out("RESULT %s %s info skipped=nodalloc-only\n", test, allocator);
        return;
    }
    if (cpu_node_count < 2)
        die("needs-two-nodes-with-cpus");
    int count = 2 * cpu_node_count;
    /* The map: on 2 CPU nodes "1 1 0"; on 4, an asymmetric 5 entries (node 0 once, node 3
     * twice, a length that is no multiple of the node count), as /sys ids, with a comment and
     * a comma to exercise the parser. */
    int map[8], map_length = 0;
    if (cpu_node_count >= 4) {
        int pattern[] = {3, 3, 1, 0, 2};
        for (int i = 0; i < 5; i++)
            map[map_length++] = cpu_node_os_id(pattern[i]);
    } else {
        map[map_length++] = cpu_node_os_id(cpu_node_count - 1);
        map[map_length++] = cpu_node_os_id(cpu_node_count - 1);
        map[map_length++] = cpu_node_os_id(0);
    }
    char map_text[128];
    size_t used = 0;
    map_text[0] = 0;
    append(map_text, sizeof map_text, &used, "# numatest binding.policies\n");
    for (int i = 0; i < map_length; i++)
        append(map_text, sizeof map_text, &used, "%d%s", map[i], i == 0 ? ", " : " ");
    append(map_text, sizeof map_text, &used, "\n");
    const char *map_path = "/tmp/numatest-bind.map";
    if (write_file(map_path, map_text) != 0)
        die("write-map-file");

    cpu_set_t parent_mask;
    sched_getaffinity(0, sizeof parent_mask, &parent_mask);
    static const char *policies[] = {"interleave", "saturate", "map", "none"};
    char report[4096] = "";
    size_t report_used = 0;
    int all_met = 1;
    char count_text[16];
    snprintf(count_text, sizeof count_text, "%d", count);
    for (int p = 0; p < 4; p++) {
        const char *policy = policies[p];
        char assignment[160];
        if (!strcmp(policy, "map"))
            snprintf(assignment, sizeof assignment, "NODALLOC_BIND=map:%s", map_path);
        else
            snprintf(assignment, sizeof assignment, "NODALLOC_BIND=%s", policy);
        const char *assignments[] = {assignment, NULL};
        static char output[1 << 16];
        int status = run_child("binding.policies.child", count_text, assignments, NULL, output,
                               sizeof output);
        char words[200]; /* the child's first words, kept before the lines are split */
        size_t word_length = strnlen(output, sizeof words - 1);
        memcpy(words, output, word_length);
        words[word_length] = 0;
        int ok = 0, seen = 0, stable = 0;
        char got[512] = "", bad[1024] = "";
        size_t got_used = 0, bad_used = 0;
        cpu_set_t child_main;
        CPU_ZERO(&child_main);
        for (char *line = output; line && *line;) {
            char *end = strchr(line, '\n');
            if (end)
                *end = 0;
            if (line[0] == 'M' && line[1] == ' ') {
                parse_mask(line + 2, &child_main);
            } else if (line[0] == 'W' && line[1] == ' ') {
                int k, before, after, index;
                char mask_text[512];
                if (sscanf(line + 2, "%d %d %d %d %511s", &k, &before, &after, &index,
                           mask_text) == 5) {
                    cpu_set_t mask;
                    parse_mask(mask_text, &mask);
                    int node_of = os_id_of_index(index);
                    int run_node = node_of_cpu(after);
                    int want = policy_node(policy, k + 1, map, map_length);
                    int good;
                    if (want < 0) { /* none: mask unchanged, memory where it runs */
                        int migrated = node_of_cpu(before) != run_node;
                        stable += !migrated;
                        good = CPU_EQUAL(&mask, &parent_mask) && CPU_EQUAL(&mask, &child_main) &&
                               (migrated || node_of == run_node);
                    } else {
                        stable++;
                        cpu_set_t expected;
                        CPU_AND(&expected, &node_by_os_id(want)->cpus, &parent_mask);
                        good = CPU_EQUAL(&mask, &expected) && run_node == want &&
                               node_of == want;
                    }
                    seen++;
                    ok += good;
                    append(got, sizeof got, &got_used, "%s%d", k ? "," : "", node_of);
                    if (!good)
                        append(bad, sizeof bad, &bad_used,
                               "%st%d:want%d,cpu%d>%d(node%d),node_of%d,mask{%s}",
                               bad_used ? ";" : "", k, want, before, after, run_node, node_of,
                               mask_text);
                }
            }
            line = end ? end + 1 : NULL;
        }
        int exited = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        /* none: at least half the threads must not have migrated mid-probe, or nothing was
         * measured. */
        int met = exited && seen == count && ok == count && stable * 2 >= count;
        all_met = all_met && met;
        append(report, sizeof report, &report_used, " %s=%d/%d[%s]", policy, ok, count,
               got[0] ? got : "-");
        if (!strcmp(policy, "none"))
            append(report, sizeof report, &report_used, " none_unmigrated=%d/%d", stable,
                   count);
        if (!exited)
            append(report, sizeof report, &report_used, " %s_child_status=%d", policy, status);
        if (bad[0])
            append(report, sizeof report, &report_used, " %s_bad=%s", policy, bad);
        if (!exited || seen != count) {
            /* Keep the child's last words, on one line. */
            for (char *c = words; *c; c++)
                if (*c == '\n' || *c == ' ')
                    *c = '|';
            append(report, sizeof report, &report_used, " %s_output=%s", policy, words);
        }
    }
    char parent_text[256];
    cpuset_text(&parent_mask, parent_text, sizeof parent_text);
    char map_line[64];
    used = 0;
    map_line[0] = 0;
    for (int i = 0; i < map_length; i++)
        append(map_line, sizeof map_line, &used, "%s%d", i ? "," : "", map[i]);
    /* The figures list the node (nodalloc_node_of, as /sys id) of each worker's first block,
     * in creation order; worker k is heap k + 1 (the main thread's heap is 0). */
    out("RESULT %s %s %s workers=%d%s map=%s parent_mask={%s}\n", test, allocator,
        verdict(all_met), count, report, map_line, parent_text);
}

/* ---------------------------------------------------------------- mempolicy */

/* The node count from nodalloc's statistics ("nodalloc <v>: N node(s), ..."), -1 if absent. */
static int nodalloc_reported_nodes(void) {
    int fds[2];
    if (pipe(fds) != 0)
        die("pipe");
    na_stats_print(fds[1]);
    close(fds[1]);
    char text[8192];
    ssize_t length = read(fds[0], text, sizeof text - 1);
    close(fds[0]);
    text[length > 0 ? length : 0] = 0;
    char *colon = strstr(text, ": ");
    if (colon && strstr(colon, " node(s)"))
        return (int)strtol(colon + 2, NULL, 10);
    return -1;
}

static void *mix_thread(void *argument) {
    struct worker *w = argument;
    allocate_mix(w->context);
    sem_post(&started);
    return NULL;
}

static void add_int(int value, void *list) {
    int *l = list; /* l[0] = count, then the values */
    if (l[0] < MAX_NODES)
        l[1 + l[0]++] = value;
}

/* The child, started under MPOL_BIND to the /sys nodes in `list` ("1,3"): nodalloc must see
 * those nodes only, indexed densely in /sys order (index k = the k-th allowed node), refuse
 * every other index with EINVAL, and put every page of explicit (64 B and 4 MiB per index) and
 * ordinary allocations (main thread and one worker) on the allowed nodes. Prints one line:
 * "CASE met=0|1 key=value ...". */
static void child_mempolicy(const char *list) {
    int allowed[1 + MAX_NODES] = {0};
    parse_list(list, add_int, allowed);
    int n = allowed[0];
    unsigned long mask[MAX_NODES / 64 + 1] = {0};
    int mode = -1;
    if (syscall(SYS_get_mempolicy, &mode, mask, MAX_NODES + 1UL, NULL, 0UL) != 0)
        die("get_mempolicy");
    first_malloc();
    int reported = nodalloc_reported_nodes();
    int valid = 0, index_ok = 0, refused_einval = 0;
    long explicit_pages = 0, explicit_on_target = 0;
    struct page_set *set = xmap(sizeof *set);
    page_set_init(set, 1 << 16);
    struct page_set *one = xmap(sizeof *one);
    page_set_init(one, 2048);
    long per_node[MAX_NODES], absent;
    for (int k = 0; k < MAX_NODES; k++) {
        errno = 0;
        char *small = na_malloc_on_node(64, k);
        if (!small) {
            refused_einval += errno == EINVAL;
            continue;
        }
        valid++;
        char *large = na_malloc_on_node(4 << 20, k);
        if (!large)
            die("malloc_on_node-large");
        memset(small, 1, 64);
        for (size_t offset = 0; offset < (4 << 20); offset += PAGE)
            large[offset] = 1;
        one->count = 0;
        page_set_add(one, small, 64);
        page_set_add(one, large, 4 << 20);
        page_set_add(set, small, 64);
        page_set_add(set, large, 4 << 20);
        page_set_count(one, per_node, &absent);
        int target = k < n ? allowed[1 + k] : -1;
        explicit_pages += one->count;
        explicit_on_target += target >= 0 ? per_node[target] : 0;
        index_ok += k < n && na_node_of(small) == k && na_node_of(large) == k;
    }
    allocate_mix(set); /* the main thread */
    struct worker *workers = xmap(sizeof *workers);
    workers[0].context = set; /* the worker runs alone: the main thread waits on `started` */
    start_workers(workers, 1, mix_thread);
    join_workers(workers, 1);
    page_set_count(set, per_node, &absent);
    long on_allowed = 0;
    for (int i = 0; i < n; i++)
        on_allowed += per_node[allowed[1 + i]];
    char placed[256], f_allowed[64], f_explicit[64];
    per_node_text(per_node, absent, placed, sizeof placed);
    fraction(f_allowed, sizeof f_allowed, on_allowed, set->count);
    fraction(f_explicit, sizeof f_explicit, explicit_on_target, explicit_pages);
    int met = mode == MPOL_BIND_MODE && reported == n && valid == n && index_ok == n &&
              refused_einval == MAX_NODES - n && on_allowed == set->count &&
              explicit_on_target == explicit_pages;
    out("CASE met=%d membind={%s} task_policy=%d nodes_reported=%d/%d "
        "malloc_on_node_valid=%d/%d index_to_node=%d/%d refused_einval=%d "
        "explicit_pages_on_index_node=%s all_pages_on_allowed=%s pages_by_node=%s\n",
        met, list, mode, reported, n, valid, MAX_NODES, index_ok, n, refused_einval, f_explicit,
        f_allowed, placed);
}

/* Runs the child under each membind case and reports one line. Cases: the last node with CPUs
 * alone (not node 0, where memory would land by default anyway); and, with 3 or more nodes, the
 * CPU node 1 and the last node with memory (the CPU-less one when there is one), so that
 * nodalloc's dense indices differ from the /sys ids. */
static void test_mempolicy(void) {
    const char *test = "mempolicy";
    if (!is_nodalloc) {
        out("RESULT %s %s info skipped=nodalloc-only\n", test, allocator);
        return;
    }
    int cases[2][2], case_sizes[2], case_count = 0;
    cases[case_count][0] = cpu_node_os_id(cpu_node_count - 1);
    case_sizes[case_count++] = 1;
    if (usable_count >= 3 && cpu_node_count >= 2) {
        cases[case_count][0] = cpu_node_os_id(1);
        cases[case_count][1] = os_id_of_index(usable_count - 1);
        case_sizes[case_count++] = 2;
    }
    char report[4096] = "";
    size_t used = 0;
    int all_met = 1;
    for (int c = 0; c < case_count; c++) {
        unsigned long mask[MAX_NODES / 64 + 1] = {0};
        char list[64] = "";
        size_t list_used = 0;
        for (int i = 0; i < case_sizes[c]; i++) {
            mask[cases[c][i] / 64] |= 1UL << (cases[c][i] % 64);
            append(list, sizeof list, &list_used, "%s%d", i ? "," : "", cases[c][i]);
        }
        static char output[1 << 16];
        int status = run_child("mempolicy.child", list, NULL, mask, output, sizeof output);
        char *line = strstr(output, "CASE met=");
        int met = line && line[9] == '1' && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        all_met = all_met && met;
        if (line) {
            char *end = strchr(line, '\n');
            if (end)
                *end = 0;
            append(report, sizeof report, &used, " case%d:%s", c + 1, line + 5);
        } else {
            for (char *ch = output; *ch; ch++)
                if (*ch == '\n' || *ch == ' ')
                    *ch = '|';
            append(report, sizeof report, &used, " case%d:error=no-case status=%d output=%.200s",
                   c + 1, status, output);
        }
    }
    out("RESULT %s %s %s cases=%d%s\n", test, allocator, verdict(all_met), case_count, report);
}

/* ---------------------------------------------------------------- small_node_spill */

#define SPILL_BLOCK (4UL << 20)
#define SPILL_BLOCKS 24 /* 96 MiB held against 64 MiB regions */

static void *spill_thread(void *argument) {
    struct worker *w = argument;
    thread_start(w); /* pinned to node 0, where the map binds it too */
    char **blocks = w->context;
    for (int i = 0; i < SPILL_BLOCKS; i++) {
        blocks[i] = malloc(SPILL_BLOCK);
        if (blocks[i])
            for (size_t offset = 0; offset < SPILL_BLOCK; offset += PAGE)
                blocks[i][offset] = (char)i;
    }
    return NULL;
}

/* The child (NODALLOC_REGION_SIZE=64M, NODALLOC_BIND=map to node 0): one worker on node 0
 * holds 24 touched 4 MiB blocks. Node 0's region fills; the rest must come from the node
 * nearest to node 0 by its /sys row, and every page of every block must be on the node
 * nodalloc_node_of names. */
static void child_small_node_spill(void) {
    const char *test = "small_node_spill";
    first_malloc();
    char **blocks = xmap(sizeof *blocks * SPILL_BLOCKS);
    struct worker *workers = xmap(sizeof *workers);
    workers[0].context = blocks;
    worker_pin(&workers[0], 0);
    start_workers(workers, 1, spill_thread);
    join_workers(workers, 1);
    int home = cpu_nodes[0], nearest = nearest_usable(home);
    int non_null = 0, on_home = 0, on_nearest = 0, elsewhere = 0, first_spill = -1;
    int blocks_on_named = 0, ordered = 1;
    long pages = 0, pages_on_named = 0;
    char sequence[256] = "";
    size_t used = 0;
    int spilled = 0;
    for (int i = 0; i < SPILL_BLOCKS; i++) {
        if (!blocks[i])
            continue;
        non_null++;
        int index = na_node_of(blocks[i]);
        if (index == home) {
            on_home++;
            if (spilled)
                ordered = 0; /* back home after a spill: only at a region's end, never mid-way */
        } else {
            spilled = 1;
            if (first_spill < 0)
                first_spill = i;
            if (index == nearest)
                on_nearest++;
            else
                elsewhere++;
        }
        append(sequence, sizeof sequence, &used, "%s%d", i ? "," : "", os_id_of_index(index));
        void *addresses[SPILL_BLOCK / PAGE];
        int status[SPILL_BLOCK / PAGE];
        for (unsigned long p = 0; p < SPILL_BLOCK / PAGE; p++)
            addresses[p] = blocks[i] + p * PAGE;
        page_nodes(addresses, SPILL_BLOCK / PAGE, status);
        long good = 0;
        for (unsigned long p = 0; p < SPILL_BLOCK / PAGE; p++)
            good += status[p] == os_id_of_index(index);
        pages += SPILL_BLOCK / PAGE;
        pages_on_named += good;
        blocks_on_named += good == (long)(SPILL_BLOCK / PAGE);
    }
    char f_pages[64];
    fraction(f_pages, sizeof f_pages, pages_on_named, pages);
    /* 64 MiB regions hold at most 16 blocks of 4 MiB: the home node gives at most that, and at
     * least one block must have spilled (24 x 4 MiB = 96 MiB). */
    int met = non_null == SPILL_BLOCKS && on_home >= 1 && on_home <= 16 && on_nearest >= 1 &&
              elsewhere == 0 && ordered && blocks_on_named == SPILL_BLOCKS &&
              workers[0].home_os_id == cpu_node_os_id(0);
    out("RESULT %s %s %s blocks=%d non_null=%d home=node%d on_home=%d spilled_to_nearest=%d "
        "nearest=node%d elsewhere=%d first_spill=block%d pages_on_named_node=%s "
        "blocks_all_pages_on_named=%d/%d thread_home=node%d node_sequence=%s\n",
        test, allocator, verdict(met), SPILL_BLOCKS, non_null, os_id_of_index(home), on_home,
        on_nearest, os_id_of_index(nearest), elsewhere, first_spill, f_pages, blocks_on_named,
        SPILL_BLOCKS, workers[0].home_os_id, sequence);
}

static void test_small_node_spill(void) {
    const char *test = "small_node_spill";
    if (!is_nodalloc) {
        out("RESULT %s %s info skipped=nodalloc-only\n", test, allocator);
        return;
    }
    const char *map_path = "/tmp/numatest-node0.map";
    char map_text[32];
    snprintf(map_text, sizeof map_text, "%d\n", cpu_node_os_id(0));
    if (write_file(map_path, map_text) != 0)
        die("write-map-file");
    const char *assignments[] = {"NODALLOC_REGION_SIZE=64M",
                                 "NODALLOC_BIND=map:/tmp/numatest-node0.map", NULL};
    run_reporting_child(test, "small_node_spill.child", "-", assignments);
}

/* ---------------------------------------------------------------- cpuless_explicit */

/* The first usable node without CPUs, for the nodalloc-only tests that need one; -1 (after
 * reporting the test as skipped) under another allocator or when there is none. */
static int cpuless_node_or_skip(const char *test) {
    if (!is_nodalloc) {
        out("RESULT %s %s info skipped=nodalloc-only\n", test, allocator);
        return -1;
    }
    for (int k = 0; k < usable_count; k++)
        if (usable_node(k)->cpu_count == 0)
            return k;
    out("RESULT %s %s info skipped=no-cpuless-node\n", test, allocator);
    return -1;
}

static void test_cpuless_explicit(void) {
    const char *test = "cpuless_explicit";
    int cpuless = cpuless_node_or_skip(test);
    if (cpuless < 0)
        return;
    int cpuless_os = os_id_of_index(cpuless);
    /* Ordinary mallocs: the main thread, then one worker per CPU node (bound by nodalloc,
     * one at a time); none of their pages may be on the CPU-less node. */
    struct page_set *set = xmap(sizeof *set);
    page_set_init(set, 1 << 17);
    first_malloc();
    allocate_mix(set);
    struct worker *workers = xmap(sizeof *workers * cpu_node_count);
    for (int i = 0; i < cpu_node_count; i++)
        workers[i].context = set; /* one at a time: start_workers waits for each */
    start_workers(workers, cpu_node_count, mix_thread);
    join_workers(workers, cpu_node_count);
    long per_node[MAX_NODES], absent;
    page_set_count(set, per_node, &absent);
    char placed[256], f_ordinary[64];
    per_node_text(per_node, absent, placed, sizeof placed);
    fraction(f_ordinary, sizeof f_ordinary, per_node[cpuless_os], set->count);
    long ordinary_on_cpuless = per_node[cpuless_os];

    /* Explicit: 64 B and 4 MiB on the CPU-less node, every page there. */
    struct page_set *explicit = xmap(sizeof *explicit);
    page_set_init(explicit, 4096);
    char *small = na_malloc_on_node(64, cpuless);
    char *large = na_malloc_on_node(4 << 20, cpuless);
    if (!small || !large)
        die("malloc_on_node");
    memset(small, 1, 64);
    for (size_t offset = 0; offset < (4 << 20); offset += PAGE)
        large[offset] = 1;
    page_set_add(explicit, small, 64);
    page_set_add(explicit, large, 4 << 20);
    int named = na_node_of(small) == cpuless && na_node_of(large) == cpuless;
    page_set_count(explicit, per_node, &absent);
    char f_explicit[64];
    fraction(f_explicit, sizeof f_explicit, per_node[cpuless_os], explicit->count);
    int met = ordinary_on_cpuless == 0 && absent == 0 && named &&
              per_node[cpuless_os] == explicit->count;
    out("RESULT %s %s %s cpuless=node%d ordinary_pages_on_cpuless=%s ordinary_by_node=%s "
        "explicit_pages_on_cpuless=%s explicit_node_of=%d\n",
        test, allocator, verdict(met), cpuless_os, f_ordinary, placed, f_explicit, named);
}

/* ---------------------------------------------------------------- node_fills_up */

/* A node whose physical memory runs out (the 256 MiB memory-only node): 4 MiB blocks are
 * placed there with nodalloc_malloc_on_node until 1.5 times the node's size is held. Every block
 * must be served, the program keeps running, the node itself holds a large share, and the pages
 * that did not fit go to other nodes (the region's MPOL_PREFERRED lets the kernel fall back;
 * MPOL_BIND would fail). */

static void test_node_fills_up(void) {
    const char *test = "node_fills_up";
    int small = cpuless_node_or_skip(test);
    if (small < 0)
        return;
    int small_os = os_id_of_index(small);
    first_malloc();
    enum { BLOCK = 4 << 20, BLOCKS = 96 }; /* 384 MiB against a 256 MiB node */
    char **blocks = xmap(sizeof *blocks * BLOCKS);
    struct page_set *set = xmap(sizeof *set);
    page_set_init(set, BLOCKS * (BLOCK / PAGE) + 16);
    int served = 0;
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = na_malloc_on_node(BLOCK, small);
        if (!blocks[i])
            break;
        for (size_t offset = 0; offset < BLOCK; offset += PAGE)
            blocks[i][offset] = (char)i;
        page_set_add(set, blocks[i], BLOCK);
        served++;
    }
    long per_node[MAX_NODES], absent;
    page_set_count(set, per_node, &absent);
    long on_small = per_node[small_os], elsewhere = set->count - on_small - absent;
    int contents_ok = 1;
    for (int i = 0; i < served; i++) {
        if (blocks[i][BLOCK - PAGE] != (char)i)
            contents_ok = 0;
        free(blocks[i]);
    }
    char placed[256], f_small[64];
    per_node_text(per_node, absent, placed, sizeof placed);
    fraction(f_small, sizeof f_small, on_small, set->count);
    /* The node held at least half its size before the kernel fell back, and the rest went
     * elsewhere instead of failing. */
    long half_node_pages = node_memory_kib(small_os) / 2 / (PAGE / 1024);
    /* The kernel falls back by distance: the spilled pages belong on the nearest node. */
    int nearest_os = os_id_of_index(nearest_usable(small));
    long on_nearest = per_node[nearest_os];
    int met = served == BLOCKS && contents_ok && absent == 0 && on_small >= half_node_pages &&
              elsewhere > 0 && on_nearest * 10 >= elsewhere * 9;
    out("RESULT %s %s %s node=node%d blocks=%d/%d pages_on_node=%s spilled_pages=%ld "
        "spilled_to_nearest=%ld(node%d) by_node=%s contents_ok=%d\n",
        test, allocator, verdict(met), small_os, served, BLOCKS, f_small, elsewhere, on_nearest,
        nearest_os, placed, contents_ok);
}

/* ---------------------------------------------------------------- hostile environments */

/* Five nodalloc-only tests start nodalloc in an environment a program may meet in production
 * and check that it starts, serves a content-checked workload, fails cleanly (NULL + ENOMEM)
 * where memory really is not there, and says little: vm.overcommit_memory=2 (overcommit_never),
 * each transparent-huge-page mode (thp_modes), no /sys or no /proc (no_sysfs), an mbind that
 * always fails (mbind_fails), and RLIMIT_AS (ulimit_v). The parent (root in the guest) changes
 * the system setting or prepares a hook for run_child; the child, `numatest hostile.child
 * nodalloc SPEC`, runs under nodalloc (LD_PRELOAD inherited) and prints one line
 * "CASE met=0|1 key=value ..." judged against SPEC, a comma-separated list of:
 *
 *   load=full|medium|light   full: 8192 x 64 B, 512 x 16 KiB, 24 x 1 MiB, 8 x 4 MiB live at
 *                     once (64.5 MiB); medium: 8192 x 64 B, 256 x 16 KiB, 16 x 1 MiB, 7 x 4 MiB
 *                     (48.5 MiB); light: 4096 x 64 B, 128 x 16 KiB, 4 x 1 MiB, 2 x 4 MiB
 *                     (14.3 MiB). Every object is filled with its own byte, checked, a quarter
 *                     of the medium ones grown by realloc (prefix checked), the odd objects freed,
 *                     as many calloc'd (must read zero), then everything freed. Any NULL or any
 *                     wrong byte fails the case.
 *   huge=ram2|MIB     one malloc of twice the guest's RAM plus swap (sysinfo(2): needs no /proc),
 *                     or of MIB MiB, and one realloc of a live 64 B block to that size, must
 *                     both return NULL with errno ENOMEM (the block intact); a 4 MiB malloc
 *                     after them must succeed.
 *   nodes=N           nodalloc_stats_print reports N node(s); with N = 1 every object of the
 *                     workload is on node 0 by nodalloc_node_of and nodalloc_malloc_on_node(64,
 *                     1) is refused with EINVAL.
 *   mbind_errno=E     a direct mbind(2) of a page of ours fails with errno E (the seccomp filter
 *                     is in force in the child).
 *   thp=MODE          /sys/kernel/mm/transparent_hugepage/enabled reads [MODE]; after the
 *                     workload, 32 MiB of 64 B objects (every byte written) and one 64 MiB block
 *                     with one byte written per MiB: AnonHugePages (/proc/self/smaps_rollup)
 *                     with the small objects live must be 0 under never and > 0 under always
 *                     and madvise (under madvise only because nodalloc saw the mode and advised
 *                     MADV_HUGEPAGE on its dense pools), and the sparse block must cost at most
 *                     4 MiB of RSS in every mode (under always only because nodalloc advised
 *                     MADV_NOHUGEPAGE on memory it does not fill itself).
 *
 * The parent counts the lines of the child's stderr that begin with "nodalloc: " (warnings
 * and fatal errors; the statistics begin "nodalloc <version>:"). */

struct hostile_spec {
    int load; /* 0 light, 1 medium, 2 full */
    unsigned long huge_bytes; /* 0: no huge request */
    int nodes;                /* -1: not checked */
    int mbind_errno;          /* -1: not checked */
    char thp[16];             /* "": not checked */
};

static void parse_hostile_spec(const char *text, struct hostile_spec *spec) {
    spec->load = 0;
    spec->huge_bytes = 0;
    spec->nodes = -1;
    spec->mbind_errno = -1;
    spec->thp[0] = 0;
    char copy[256];
    snprintf(copy, sizeof copy, "%s", text);
    char *saved = NULL;
    for (char *word = strtok_r(copy, ",", &saved); word; word = strtok_r(NULL, ",", &saved)) {
        if (!strcmp(word, "load=full"))
            spec->load = 2;
        else if (!strcmp(word, "load=medium"))
            spec->load = 1;
        else if (!strcmp(word, "load=light"))
            spec->load = 0;
        else if (!strcmp(word, "huge=ram2")) {
            struct sysinfo info;
            if (syscall(SYS_sysinfo, &info) != 0) /* sysinfo() is this program's own */
                die("sysinfo");
            spec->huge_bytes = 2UL * (info.totalram + info.totalswap) * info.mem_unit;
        } else if (!strncmp(word, "huge=", 5))
            spec->huge_bytes = strtoul(word + 5, NULL, 10) << 20;
        else if (!strncmp(word, "nodes=", 6))
            spec->nodes = atoi(word + 6);
        else if (!strncmp(word, "mbind_errno=", 12))
            spec->mbind_errno = atoi(word + 12);
        else if (!strncmp(word, "thp=", 4))
            snprintf(spec->thp, sizeof spec->thp, "%s", word + 4);
        else
            die("bad-hostile-spec");
    }
}

/* AnonHugePages of this process in KiB, -1 if unreadable. */
static long anon_huge_kib(void) {
    char text[4096];
    if (read_text("/proc/self/smaps_rollup", text, sizeof text) < 0)
        return -1;
    char *p = strstr(text, "AnonHugePages:");
    return p ? strtol(p + 14, NULL, 10) : -1;
}

/* The bracketed word of the THP mode file ("always" in "[always] madvise never"), "" if none. */
static void thp_mode(char *mode, size_t size) {
    char text[256];
    mode[0] = 0;
    if (read_text("/sys/kernel/mm/transparent_hugepage/enabled", text, sizeof text) < 0)
        return;
    char *open = strchr(text, '['), *close = open ? strchr(open, ']') : NULL;
    if (open && close && (size_t)(close - open) < size)
        snprintf(mode, size, "%.*s", (int)(close - open - 1), open + 1);
}

struct hostile_figures {
    long objects, nulls, wrong_bytes, off_node0, peak_bytes, anon_huge_kib, sparse_rss_kib;
};

/* Fills an object with its own byte; checks it (returns the wrong bytes) where `check`. */
static long fill_or_check(unsigned char *p, size_t size, unsigned char value, int check) {
    if (!check) {
        memset(p, value, size);
        return 0;
    }
    long wrong = 0;
    for (size_t i = 0; i < size; i++)
        wrong += p[i] != value;
    return wrong;
}

/* Resident KiB of this process, -1 if unreadable. */
static long resident_kib(void) {
    char text[256];
    if (read_text("/proc/self/statm", text, sizeof text) < 0)
        return -1;
    char *rest = strchr(text, ' ');
    return rest ? strtol(rest + 1, NULL, 10) * (long)(PAGE / 1024) : -1;
}

/* The thp= probe: dense small objects (AnonHugePages while they are live) and a sparse block
 * (its RSS growth). */
static void thp_probe(struct hostile_figures *f) {
    enum { SIZE = 64 };
    size_t count = (32UL << 20) / SIZE;
    unsigned char **objects = xmap(sizeof *objects * count);
    for (size_t i = 0; i < count; i++) {
        objects[i] = malloc(SIZE);
        if (!objects[i]) {
            f->nulls++;
            break;
        }
        fill_or_check(objects[i], SIZE, (unsigned char)i, 0);
    }
    f->anon_huge_kib = anon_huge_kib();
    long before = resident_kib();
    size_t sparse_bytes = 64UL << 20;
    volatile unsigned char *sparse = malloc(sparse_bytes);
    if (sparse) {
        for (size_t i = 0; i < sparse_bytes; i += 1UL << 20)
            sparse[i] = 1;
        f->sparse_rss_kib = resident_kib() - before;
        free((void *)sparse);
    } else {
        f->nulls++;
    }
    for (size_t i = 0; i < count && objects[i]; i++) {
        f->wrong_bytes += fill_or_check(objects[i], SIZE, (unsigned char)i, 1);
        free(objects[i]);
    }
    xunmap(objects, sizeof *objects * count);
}


static void hostile_workload(const struct hostile_spec *spec, struct hostile_figures *f) {
    static const size_t sizes[] = {64, 16 << 10, 1 << 20, 4 << 20};
    static const int load_counts[3][4] = {{4096, 128, 4, 2}, {8192, 256, 16, 7}, {8192, 512, 24, 8}};
    const int *counts = load_counts[spec->load];
    int total = 0;
    for (int r = 0; r < 4; r++)
        total += counts[r];
    unsigned char **objects = xmap(sizeof *objects * total);
    size_t *lengths = xmap(sizeof *lengths * total);
    memset(f, 0, sizeof *f);
    f->anon_huge_kib = -1;
    f->sparse_rss_kib = -1;
    int n = 0;
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < counts[r]; i++, n++) {
            lengths[n] = sizes[r];
            objects[n] = malloc(sizes[r]);
            if (!objects[n]) {
                f->nulls++;
                continue;
            }
            fill_or_check(objects[n], sizes[r], (unsigned char)(n * 7 + 1), 0);
            f->peak_bytes += (long)sizes[r];
            if (spec->nodes == 1 && na_node_of(objects[n]) != 0)
                f->off_node0++;
        }
    f->objects = n;
    for (int k = 0; k < n; k++)
        if (objects[k])
            f->wrong_bytes += fill_or_check(objects[k], lengths[k], (unsigned char)(k * 7 + 1), 1);
    /* A quarter of the medium objects grow to 48 KiB: the old bytes must come along. */
    int first_medium = counts[0];
    for (int k = first_medium; k < first_medium + counts[1]; k += 4) {
        if (!objects[k])
            continue;
        unsigned char *grown = realloc(objects[k], 48 << 10);
        if (!grown) {
            f->nulls++;
            continue;
        }
        f->wrong_bytes += fill_or_check(grown, lengths[k], (unsigned char)(k * 7 + 1), 1);
        objects[k] = grown;
        lengths[k] = 48 << 10;
        fill_or_check(grown, lengths[k], (unsigned char)(k * 7 + 1), 0);
    }
    /* Free the odd ones, calloc as many in their place: recycled memory must read zero. */
    for (int k = 1; k < n; k += 2) {
        free(objects[k]);
        objects[k] = calloc(1, lengths[k]);
        if (!objects[k]) {
            f->nulls++;
            continue;
        }
        f->wrong_bytes += fill_or_check(objects[k], lengths[k], 0, 1);
        fill_or_check(objects[k], lengths[k], (unsigned char)(k * 7 + 1), 0);
        if (spec->nodes == 1 && na_node_of(objects[k]) != 0)
            f->off_node0++;
    }
    for (int k = 0; k < n; k++)
        if (objects[k]) {
            f->wrong_bytes += fill_or_check(objects[k], lengths[k], (unsigned char)(k * 7 + 1), 1);
            free(objects[k]);
        }
    xunmap(objects, sizeof *objects * total);
    xunmap(lengths, sizeof *lengths * total);
    if (spec->thp[0])
        thp_probe(f);
}

static void child_hostile(const char *text) {
    struct hostile_spec spec;
    parse_hostile_spec(text, &spec);
    char report[1024] = "";
    size_t used = 0;
    int met = 1;
    first_malloc();
    if (spec.mbind_errno >= 0) {
        void *page = xmap(PAGE);
        unsigned long mask = 1; /* node 0 */
        errno = 0;
        long result = syscall(SYS_mbind, page, PAGE, MPOL_BIND_MODE, &mask, 65UL, 0UL);
        int direct = result == 0 ? 0 : errno;
        met = met && direct == spec.mbind_errno;
        append(report, sizeof report, &used, " direct_mbind_errno=%d/%d", direct,
               spec.mbind_errno);
        xunmap(page, PAGE);
    }
    if (spec.thp[0]) {
        char mode[16];
        thp_mode(mode, sizeof mode);
        met = met && !strcmp(mode, spec.thp);
        append(report, sizeof report, &used, " thp=%s/%s", mode, spec.thp);
    }
    struct hostile_figures f;
    double began = now_seconds();
    hostile_workload(&spec, &f);
    met = met && f.nulls == 0 && f.wrong_bytes == 0;
    append(report, sizeof report, &used,
           " objects=%ld peak_live=%.1fMiB nulls=%ld wrong_bytes=%ld workload_s=%.2f", f.objects,
           f.peak_bytes / 1048576.0, f.nulls, f.wrong_bytes, now_seconds() - began);
    if (spec.thp[0]) {
        int huge_ok = !strcmp(spec.thp, "never") ? f.anon_huge_kib == 0 : f.anon_huge_kib > 0;
        int sparse_ok = f.sparse_rss_kib >= 0 && f.sparse_rss_kib <= 4096;
        met = met && huge_ok && sparse_ok;
        append(report, sizeof report, &used, " anon_huge_dense=%ldKiB sparse_64MiB_rss=%ldKiB",
               f.anon_huge_kib, f.sparse_rss_kib);
    }
    if (spec.nodes >= 0) {
        int reported = nodalloc_reported_nodes();
        met = met && reported == spec.nodes;
        append(report, sizeof report, &used, " nodes_reported=%d/%d", reported, spec.nodes);
        if (spec.nodes == 1) {
            errno = 0;
            void *elsewhere = na_malloc_on_node(64, 1);
            int refused = elsewhere == NULL && errno == EINVAL;
            met = met && f.off_node0 == 0 && refused;
            append(report, sizeof report, &used, " objects_off_node0=%ld node1_refused_einval=%d",
                   f.off_node0, refused);
        }
    }
    if (spec.huge_bytes) {
        errno = 0;
        void *huge = malloc(spec.huge_bytes);
        int malloc_errno = errno;
        int malloc_ok = huge == NULL && malloc_errno == ENOMEM;
        free(huge);
        char *small = malloc(64);
        if (!small)
            die("malloc");
        memset(small, 0x5a, 64);
        errno = 0;
        void *grown = realloc(small, spec.huge_bytes);
        int realloc_errno = errno;
        int realloc_ok = grown == NULL && realloc_errno == ENOMEM &&
                         fill_or_check((unsigned char *)small, 64, 0x5a, 1) == 0;
        free(grown ? grown : small);
        char *after = malloc(4 << 20);
        if (after)
            memset(after, 1, 4 << 20);
        free(after);
        met = met && malloc_ok && realloc_ok && after != NULL;
        append(report, sizeof report, &used,
               " huge=%luMiB malloc_null_enomem=%d(errno=%d) realloc_null_enomem=%d(errno=%d) "
               "4MiB_after=%d",
               spec.huge_bytes >> 20, malloc_ok, malloc_errno, realloc_ok, realloc_errno,
               after != NULL);
    }
    out("CASE met=%d spec=%s%s\n", met, text, report);
}

/* Counts the lines of `output` that begin with "nodalloc: " (nodalloc's warnings and fatal
 * errors) and, of those, the ones that contain `word` (when not NULL). */
static int nodalloc_messages(const char *output, const char *word, int *with_word) {
    int count = 0;
    if (with_word)
        *with_word = 0;
    for (const char *line = output; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t length = end ? (size_t)(end - line) : strlen(line);
        if (length >= 10 && !strncmp(line, "nodalloc: ", 10)) {
            count++;
            if (word && with_word && memmem(line, length, word, strlen(word)))
                ++*with_word;
        }
        line = end ? end + 1 : NULL;
    }
    return count;
}

/* Runs one child case; appends " NAME:[<the child's CASE figures> messages=N said=... exit=S]"
 * to the report and returns whether the case is met: the child's own verdict, exit status 0, at
 * most `max_messages` "nodalloc: " lines (with `exact_word`: exactly one, and it contains the
 * word), and `required` (when not NULL) somewhere in the child's output. */
static int hostile_case(const char *name, const char *spec, const char *const *assignments,
                        int max_messages, const char *exact_word, const char *required,
                        char *report, size_t size, size_t *used) {
    static char output[1 << 16];
    int status = run_child("hostile.child", spec, assignments, NULL, output, sizeof output);
    child_hook = NULL;
    child_hook_argument = NULL;
    int with_word = 0;
    int messages = nodalloc_messages(output, exact_word, &with_word);
    int messages_ok = exact_word ? messages == 1 && with_word == 1 : messages <= max_messages;
    char *line = strstr(output, "CASE met=");
    int exited = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    int signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    int has_required = !required || strstr(output, required) != NULL;
    int met = line && line[9] == '1' && exited == 0 && messages_ok && has_required;
    /* The messages, one line each, so a failure shows what nodalloc said. */
    char said[512] = "";
    size_t said_used = 0;
    for (const char *at = strstr(output, "nodalloc: "); at; at = strstr(at + 1, "nodalloc: ")) {
        if (at != output && at[-1] != '\n')
            continue;
        const char *end = strchr(at, '\n');
        append(said, sizeof said, &said_used, "%s%.*s", said_used ? "|" : "",
               (int)(end ? end - at : (long)strlen(at)), at);
    }
    for (char *ch = said; *ch; ch++)
        if (*ch == ' ')
            *ch = '_';
    if (line) {
        char *end = strchr(line, '\n');
        if (end)
            *end = 0;
        append(report, size, used, " %s:[%s messages=%d%s%s%s%s exit=%d signal=%d]", name,
               line + 5, messages, said_used ? " said=" : "", said,
               required ? (has_required ? " found=" : " missing=") : "", required ? required : "",
               exited, signal);
    } else {
        for (char *ch = output; *ch; ch++)
            if (*ch == '\n' || *ch == ' ')
                *ch = '|';
        append(report, size, used, " %s:[error=no-case exit=%d signal=%d output=%.300s]", name,
               exited, signal, output);
    }
    return met;
}

static int nodalloc_only(const char *test) {
    if (!is_nodalloc)
        out("RESULT %s %s info skipped=nodalloc-only\n", test, allocator);
    return is_nodalloc;
}

/* Writes a one-line system setting and reads it back; 0 when it took. */
static int set_setting(const char *path, const char *value) {
    char back[256];
    if (write_file(path, value) != 0 || read_text(path, back, sizeof back) < 0)
        return -1;
    return 0;
}

/* ---- overcommit_never */

static long meminfo_kib(const char *key) {
    char text[8192];
    if (read_text("/proc/meminfo", text, sizeof text) < 0)
        return -1;
    char *p = strstr(text, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static void test_overcommit_never(void) {
    const char *test = "overcommit_never";
    if (!nodalloc_only(test))
        return;
    const char *path = "/proc/sys/vm/overcommit_memory";
    char saved[32] = "";
    if (read_text(path, saved, sizeof saved) < 0)
        die("read-overcommit_memory");
    saved[strcspn(saved, "\n")] = 0;
    char now[32] = "";
    if (set_setting(path, "2") != 0 || read_text(path, now, sizeof now) < 0 || now[0] != '2')
        die("write-overcommit_memory");
    long limit = meminfo_kib("CommitLimit:"), committed = meminfo_kib("Committed_AS:");
    char report[4096] = "";
    size_t used = 0;
    int met = hostile_case("mode2", "load=full,huge=ram2", NULL, 0, NULL, NULL, report,
                           sizeof report, &used);
    int restored = set_setting(path, saved) == 0 && read_text(path, now, sizeof now) >= 0 &&
                   !strncmp(now, saved, strlen(saved));
    out("RESULT %s %s %s commit_limit=%ldMiB committed_before=%ldMiB restored=%s:%d%s\n", test,
        allocator, verdict(met && restored), limit / 1024, committed / 1024, saved, restored,
        report);
}

/* ---- thp_modes */

static void test_thp_modes(void) {
    const char *test = "thp_modes";
    if (!nodalloc_only(test))
        return;
    const char *path = "/sys/kernel/mm/transparent_hugepage/enabled";
    char saved[16];
    thp_mode(saved, sizeof saved);
    if (!saved[0]) {
        out("RESULT %s %s info skipped=no-thp reason=%s-unreadable-errno-%d\n", test, allocator,
            path, errno);
        return;
    }
    static const char *const modes[] = {"always", "madvise", "never"};
    char report[4096] = "";
    size_t used = 0;
    int met = 1;
    for (int m = 0; m < 3; m++) {
        char mode[16] = "", spec[64];
        if (set_setting(path, modes[m]) == 0)
            thp_mode(mode, sizeof mode);
        if (strcmp(mode, modes[m])) {
            append(report, sizeof report, &used, " %s:[error=cannot-set read=%s]", modes[m],
                   mode);
            met = 0;
            continue;
        }
        snprintf(spec, sizeof spec, "load=light,thp=%s", modes[m]);
        met = hostile_case(modes[m], spec, NULL, 0, NULL, NULL, report, sizeof report, &used) &&
              met;
    }
    char now[16];
    set_setting(path, saved);
    thp_mode(now, sizeof now);
    int restored = !strcmp(now, saved);
    out("RESULT %s %s %s restored=%s:%d%s\n", test, allocator, verdict(met && restored), saved,
        restored, report);
}

/* ---- no_sysfs */

/* In the child: a private mount namespace without the listed mounts ("/sys", "/proc", both). */
static int hook_unmount(const void *argument) {
    const char *const *targets = argument;
    if (unshare(CLONE_NEWNS) != 0) {
        out("CHILD unshare failed errno=%d\n", errno);
        return -1;
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        out("CHILD mount-private failed errno=%d\n", errno);
        return -1;
    }
    for (int i = 0; targets[i]; i++) {
        if (umount2(targets[i], MNT_DETACH) != 0) {
            out("CHILD umount %s failed errno=%d\n", targets[i], errno);
            return -1;
        }
    }
    /* Gone for this child only: the probe files must be unreadable now. */
    char probe[64];
    for (int i = 0; targets[i]; i++) {
        const char *file = !strcmp(targets[i], "/sys") ? "/sys/devices/system/node/online"
                                                        : "/proc/self/status";
        if (read_text(file, probe, sizeof probe) >= 0) {
            out("CHILD %s still readable\n", file);
            return -1;
        }
    }
    return 0;
}

static void test_no_sysfs(void) {
    const char *test = "no_sysfs";
    if (!nodalloc_only(test))
        return;
    static const char *const no_sys[] = {"/sys", NULL};
    static const char *const no_proc[] = {"/proc", NULL};
    static const char *const neither[] = {"/sys", "/proc", NULL};
    static const char *const stats[] = {"NODALLOC_STATS=1", NULL};
    char report[8192] = "", spec[64], nodes_line[32];
    size_t used = 0;
    int met = 1;
    /* Each child also prints its statistics at exit (NODALLOC_STATS=1): "...: N node(s)". */
    child_hook = hook_unmount;
    child_hook_argument = no_sys;
    met = hostile_case("no_sys", "load=light,nodes=1", stats, 2, NULL, ": 1 node(s)", report,
                       sizeof report, &used) && met;
    /* Without /proc (Mems_allowed, meminfo, overcommit mode) /sys still gives the nodes. */
    snprintf(spec, sizeof spec, "load=light,nodes=%d", usable_count);
    snprintf(nodes_line, sizeof nodes_line, ": %d node(s)", usable_count);
    child_hook = hook_unmount;
    child_hook_argument = no_proc;
    met = hostile_case("no_proc", spec, stats, 2, NULL, nodes_line, report, sizeof report,
                       &used) && met;
    child_hook = hook_unmount;
    child_hook_argument = neither;
    met = hostile_case("neither", "load=light,nodes=1", stats, 2, NULL, ": 1 node(s)", report,
                       sizeof report, &used) && met;
    /* The namespace was the children's: this process still has /sys and /proc. */
    char probe[64];
    int parent_keeps = read_text("/sys/devices/system/node/online", probe, sizeof probe) > 0 &&
                       read_text("/proc/self/status", probe, sizeof probe) > 0;
    out("RESULT %s %s %s parent_keeps_sys_and_proc=%d%s\n", test, allocator,
        verdict(met && parent_keeps), parent_keeps, report);
}

/* ---- mbind_fails */

/* In the child: a seccomp filter that fails mbind(2) with the errno at `argument`. */
static int hook_seccomp_mbind(const void *argument) {
    unsigned int error = *(const int *)argument;
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mbind, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (error & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {.len = sizeof filter / sizeof filter[0], .filter = filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        out("CHILD no_new_privs failed errno=%d\n", errno);
        return -1;
    }
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
        out("CHILD seccomp failed errno=%d\n", errno);
        return -1;
    }
    return 0;
}

static void test_mbind_fails(void) {
    const char *test = "mbind_fails";
    if (!nodalloc_only(test))
        return;
    if (usable_count < 2) {
        out("RESULT %s %s info skipped=one-node(nodalloc-issues-no-mbind)\n", test, allocator);
        return;
    }
    static const int errors[] = {EPERM, EINVAL};
    static const char *const names[] = {"eperm", "einval"};
    char report[4096] = "", spec[64];
    size_t used = 0;
    int met = 1;
    for (int c = 0; c < 2; c++) {
        snprintf(spec, sizeof spec, "load=light,nodes=%d,mbind_errno=%d", usable_count,
                 errors[c]);
        child_hook = hook_seccomp_mbind;
        child_hook_argument = &errors[c];
        met = hostile_case(names[c], spec, NULL, 1, "mbind", NULL, report, sizeof report,
                           &used) && met;
    }
    out("RESULT %s %s %s regions=%d%s\n", test, allocator, verdict(met), usable_count, report);
}

/* ---- ulimit_v */

static int hook_rlimit_as(const void *argument) {
    unsigned long bytes = *(const unsigned long *)argument;
    struct rlimit limit = {.rlim_cur = bytes, .rlim_max = bytes};
    if (setrlimit(RLIMIT_AS, &limit) != 0) {
        out("CHILD setrlimit failed errno=%d\n", errno);
        return -1;
    }
    return 0;
}

static void test_ulimit_v(void) {
    const char *test = "ulimit_v";
    if (!nodalloc_only(test))
        return;
    static const unsigned long limit = 256UL << 20;
    char report[4096] = "";
    size_t used = 0;
    child_hook = hook_rlimit_as;
    child_hook_argument = &limit;
    /* 48.5 MiB live at the peak (nodalloc's heap under a 256 MiB limit is one 64 MiB region
     * per node, or one region in all where the limit has no room for one per node: then one
     * warning says so); a 512 MiB request is past the limit itself. */
    int met = hostile_case("as256M", "load=medium,huge=512", NULL, 1, NULL, NULL, report,
                           sizeof report, &used);
    out("RESULT %s %s %s rlimit_as=%luMiB nodes=%d%s\n", test, allocator, verdict(met),
        limit >> 20, usable_count, report);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv) {
    ssize_t length = readlink("/proc/self/exe", exe_path, sizeof exe_path - 1);
    if (length > 0)
        exe_path[length] = 0;
    /* A hostile child may have no /sys: it reads no topology (its spec carries the figures). */
    int hostile_child = argc == 4 && !strcmp(argv[1], "hostile.child");
    if (!hostile_child)
        read_topology();
    sem_init(&started, 0, 0);
    if (argc == 2 && !strcmp(argv[1], "sysinfo")) {
        sysinfo();
        return 0;
    }
    if (argc == 4 && !strcmp(argv[2], "nodalloc")) {
        /* A child started by a test (run_child): nodalloc with the options it was given. */
        allocator = argv[2];
        is_nodalloc = 1;
        check_allocator();
        if (!strcmp(argv[1], "binding.policies.child")) {
            current_test = "binding.policies";
            child_policy_workers(atoi(argv[3]));
        } else if (!strcmp(argv[1], "mempolicy.child")) {
            current_test = "mempolicy";
            child_mempolicy(argv[3]);
        } else if (!strcmp(argv[1], "small_node_spill.child")) {
            current_test = "small_node_spill";
            child_small_node_spill();
        } else if (hostile_child) {
            current_test = "hostile";
            child_hostile(argv[3]);
        } else {
            die("unknown-child");
        }
        return 0;
    }
    if (argc != 3) {
        out("usage: numatest sysinfo | numatest <test> <allocator>\n");
        return 2;
    }
    const char *test = argv[1];
    allocator = argv[2];
    is_nodalloc = !strcmp(allocator, "nodalloc");
    current_test = test;
    check_allocator();
    if (usable_count < 1 || cpu_node_count < 1)
        die("no-usable-node");
    if (!strcmp(test, "topology"))
        test_topology();
    else if (!strcmp(test, "placement"))
        test_placement(test, 0);
    else if (!strcmp(test, "placement_agreeing"))
        test_placement(test, 1);
    else if (!strcmp(test, "origin_reuse"))
        test_origin_reuse();
    else if (!strcmp(test, "binding.policies"))
        test_binding_policies();
    else if (!strcmp(test, "mempolicy"))
        test_mempolicy();
    else if (!strcmp(test, "small_node_spill"))
        test_small_node_spill();
    else if (!strcmp(test, "cpuless_explicit"))
        test_cpuless_explicit();
    else if (!strcmp(test, "node_fills_up"))
        test_node_fills_up();
    else if (!strcmp(test, "overcommit_never"))
        test_overcommit_never();
    else if (!strcmp(test, "thp_modes"))
        test_thp_modes();
    else if (!strcmp(test, "no_sysfs"))
        test_no_sysfs();
    else if (!strcmp(test, "mbind_fails"))
        test_mbind_fails();
    else if (!strcmp(test, "ulimit_v"))
        test_ulimit_v();
    else if (!strncmp(test, "binding", 7))
        test_binding(test);
    else if (!strcmp(test, "hoard_stress"))
        test_hoard_stress();
    else
        die("unknown-test");
    return 0;
}
