/* numatest: nodalloc's multi-node behaviour, measured inside a QEMU guest with emulated NUMA
 * nodes; built and run by numa-vm/run (docs/NUMA.md).
 *
 *   numatest sysinfo
 *   numatest <test> <allocator>
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
#include <sys/mman.h>
#include <sys/syscall.h>
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
        char path[128], meminfo[4096];
        long kib = 0;
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d/meminfo", nodes[i].os_id);
        if (read_text(path, meminfo, sizeof meminfo) >= 0) {
            char *p = strstr(meminfo, "MemTotal:");
            if (p)
                kib = strtol(p + 9, NULL, 10);
        }
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

/* The usable node nearest to `index` by its /sys distance row, ties to the lower index: the
 * order nodalloc documents for stealing and spilling. */
static int nearest_usable(int index) {
    int best = -1;
    for (int j = 0; j < usable_count; j++) {
        if (j == index)
            continue;
        int d = usable_node(index)->distance[usable[j]];
        if (best < 0 || d < usable_node(index)->distance[usable[best]])
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

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv) {
    read_topology();
    sem_init(&started, 0, 0);
    if (argc == 2 && !strcmp(argv[1], "sysinfo")) {
        sysinfo();
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
    else if (!strncmp(test, "binding", 7))
        test_binding(test);
    else if (!strcmp(test, "hoard_stress"))
        test_hoard_stress();
    else
        die("unknown-test");
    return 0;
}
