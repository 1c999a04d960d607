/* numatest's harness: main, the result line, and what every test group shares. numatest
 * measures nodalloc's multi-node behaviour inside a QEMU guest with emulated NUMA nodes; it is
 * built and run by numa-vm/run (docs/NUMA.md).
 *
 *   numatest sysinfo
 *   numatest list [FILTER]                      (the plan /init runs: tests.c, in run order)
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
 * Every group file (topology.c, placement.c, origin.c, binding.c, allowed_nodes.c, spill.c,
 * hostile.c, hostile_child.c, tiers.c, profile.c) keeps to these rules.
 */
#include "harness.h"
#include "tests.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <time.h>

/* ---------------------------------------------------------------- output */

const char *allocator = "?";
const char *current_test = "setup";
int is_nodalloc;
int informing;

void out(const char *format, ...) {
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
_Noreturn void die(const char *what) {
    out("RESULT %s %s %s error=%s errno=%d\n", current_test, allocator,
        is_nodalloc ? "fail" : "info", what, errno);
    exit(2);
}

/* A verdict for a nodalloc target; peers only ever report, and so does a test that cannot
 * judge on this kernel (informing). */
const char *verdict(int met) {
    if (!is_nodalloc || informing)
        return "info";
    return met ? "pass" : "fail";
}

/* Fractions are printed as "on/total(pct%)" so the raw counts survive into the report. */
void fraction(char *buffer, size_t size, long part, long total) {
    if (total == 0)
        snprintf(buffer, size, "%ld/%ld(-)", part, total);
    else
        snprintf(buffer, size, "%ld/%ld(%.3f%%)", part, total, 100.0 * part / total);
}

/* Appends to a text buffer; a full buffer truncates instead of overrunning (snprintf returns
 * the length it wanted, not the length it wrote). */
void append(char *buffer, size_t size, size_t *used, const char *format, ...) {
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

void *xmap(size_t bytes) {
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        die("mmap");
    return p;
}

void xunmap(void *p, size_t bytes) { munmap(p, bytes ? bytes : 1); }

/* ---------------------------------------------------------------- the machine, from /sys */

struct node nodes[MAX_NODES];
int node_count;
int usable[MAX_NODES];
int usable_count;
int cpu_nodes[MAX_NODES];
int cpu_node_count;

int read_text(const char *path, char *buffer, size_t size) {
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

int write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* Calls `each` for every number in a kernel list such as "0-3,8,10-11". */
void parse_list(const char *text, void (*each)(int, void *), void *context) {
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

void add_cpu(int cpu, void *set) { CPU_SET(cpu, (cpu_set_t *)set); }

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
struct node *usable_node(int index) { return &nodes[usable[index]]; }

int os_id_of_index(int index) {
    return index >= 0 && index < usable_count ? usable_node(index)->os_id : -1;
}

int cpu_node_os_id(int k) { return os_id_of_index(cpu_nodes[k % cpu_node_count]); }

void cpuset_text(const cpu_set_t *set, char *buffer, size_t size) {
    size_t used = 0;
    buffer[0] = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, set))
            append(buffer, size, &used, "%s%d", used ? "," : "", cpu);
    if (!used)
        snprintf(buffer, size, "none");
}

int cpuset_subset(const cpu_set_t *inner, const cpu_set_t *outer) {
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, inner) && !CPU_ISSET(cpu, outer))
            return 0;
    return 1;
}

/* MemTotal of a node in KiB, 0 if unknown. */
long node_memory_kib(int os_id) {
    char path[128], meminfo[4096];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/meminfo", os_id);
    if (read_text(path, meminfo, sizeof meminfo) < 0)
        return 0;
    char *p = strstr(meminfo, "MemTotal:");
    return p ? strtol(p + 9, NULL, 10) : 0;
}

/* The usable node nodalloc spills to from `index`: the nearest node with CPUs by its /sys
 * distance row (ties to the lower index); a CPU-less node only when no other node has CPUs.
 * That is the order nodalloc documents for stealing and spilling. */
int nearest_usable(int index) {
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

/* The first usable node without CPUs (nodalloc's index), -1 when there is none. */
int cpuless_node(void) {
    for (int k = 0; k < usable_count; k++)
        if (usable_node(k)->cpu_count == 0)
            return k;
    return -1;
}

/* ---------------------------------------------------------------- kernel probes */

/* The node of each page (addresses rounded down to pages): the kernel's word, not the
 * allocator's. Negative status: page absent (-ENOENT) or not queryable. */
void page_nodes(void **pages, unsigned long count, int *status) {
    for (unsigned long i = 0; i < count; i++)
        pages[i] = (void *)((uintptr_t)pages[i] & ~(PAGE - 1));
    if (count && syscall(SYS_move_pages, 0, count, pages, NULL, status, 0) != 0)
        die("move_pages");
}

void pin_to(const cpu_set_t *set) {
    if (sched_setaffinity(0, sizeof *set, set) != 0)
        die("sched_setaffinity");
}

double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* The bracketed word of the THP mode file ("always" in "[always] madvise never"), "" if none. */
void thp_mode(char *mode, size_t size) {
    char text[256];
    mode[0] = 0;
    if (read_text("/sys/kernel/mm/transparent_hugepage/enabled", text, sizeof text) < 0)
        return;
    char *open = strchr(text, '['), *close = open ? strchr(open, ']') : NULL;
    if (open && close && (size_t)(close - open) < size)
        snprintf(mode, size, "%.*s", (int)(close - open - 1), open + 1);
}

/* ---------------------------------------------------------------- nodalloc's extras */

int (*na_node_of)(const void *);
void *(*na_malloc_on_node)(size_t, int);
void *(*na_malloc_cold)(size_t);
void (*na_stats_print)(int);

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
    na_malloc_cold = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "nodalloc_malloc_cold");
    na_stats_print = (void (*)(int))dlsym(RTLD_DEFAULT, "nodalloc_stats_print");
}

/* nodalloc's home node of the calling thread as a /sys node id (-1 for other allocators): the
 * node of a fresh small object, which always comes from the thread's home region. */
int nodalloc_home_os_id(void) {
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

/* nodalloc's statistics as nodalloc_stats_print writes them, read back through a pipe into a
 * static buffer (overwritten by the next call). */
const char *nodalloc_stats_text(void) {
    int fds[2];
    if (pipe(fds) != 0)
        die("pipe");
    na_stats_print(fds[1]);
    close(fds[1]);
    static char text[65536];
    size_t length = 0;
    ssize_t got;
    while (length < sizeof text - 1 &&
           (got = read(fds[0], text + length, sizeof text - 1 - length)) > 0)
        length += (size_t)got;
    close(fds[0]);
    text[length] = 0;
    return text;
}

/* The node count from nodalloc's statistics ("nodalloc <v>: N node(s), ..."), -1 if absent. */
int nodalloc_reported_nodes(void) {
    const char *colon = strstr(nodalloc_stats_text(), ": ");
    if (colon && strstr(colon, " node(s)"))
        return (int)strtol(colon + 2, NULL, 10);
    return -1;
}

/* A first malloc the compiler cannot elide (it may drop a bare free(malloc(n))): starts the
 * allocator and, under nodalloc, binds the calling thread. */
void first_malloc(void) {
    char *volatile p = malloc(1);
    if (!p)
        die("malloc");
    *p = 1;
    free(p);
}

/* ---------------------------------------------------------------- threads */

/* nodalloc binds the k-th thread that starts allocating (the main thread is 0) to node k mod N
 * of the nodes with CPUs. Tests that measure something other than binding pin their k-th
 * created thread to that same node, so that the pin and nodalloc's binding agree and the
 * figures are about where memory comes from; `placement` pins in plain node order, against it.
 * Threads start one at a time (see start_workers), or the order in which they reach nodalloc,
 * and so their nodes, would be the scheduler's choice. */
int agreeing_cpu_node(int created) { return (created + 1) % cpu_node_count; }

void worker_pin(struct worker *w, int cpu_node) {
    w->node_os_id = cpu_node_os_id(cpu_node);
    w->pin = usable_node(cpu_nodes[cpu_node])->cpus;
}

sem_t started;

void start_workers(struct worker *workers, int count, void *(*routine)(void *)) {
    for (int i = 0; i < count; i++) {
        if (pthread_create(&workers[i].thread, NULL, routine, &workers[i]) != 0)
            die("pthread_create");
        while (sem_wait(&started) != 0 && errno == EINTR)
            ;
    }
}

void join_workers(struct worker *workers, int count) {
    for (int i = 0; i < count; i++)
        pthread_join(workers[i].thread, NULL);
}

/* Every measuring thread begins here: its pin, then one malloc. The malloc matters for the
 * peers too: glibc and jemalloc give a thread its cache at its first malloc, and a thread that
 * only ever freed would bypass it and hide the reuse the tests look for. */
void thread_start(struct worker *w) {
    pin_to(&w->pin);
    first_malloc();
    w->home_os_id = nodalloc_home_os_id();
    sem_post(&started);
}

/* Counts workers whose nodalloc home is not the node they are pinned to. */
int home_mismatches(struct worker *workers, int count) {
    int mismatches = 0;
    for (int i = 0; i < count; i++)
        if (is_nodalloc && workers[i].home_os_id != workers[i].node_os_id)
            mismatches++;
    return mismatches;
}

/* ---------------------------------------------------------------- child processes */

/* This program's path, read once at start-up: a child may exec it where /proc is gone. */
static char exe_path[512] = "/bin/numatest";
/* Set by a test for the next run_child: called in the child just before the exec (after the
 * environment and the memory policy), to make its environment hostile (rlimit, seccomp, mount
 * namespace). A non-zero return ends the child with status 6; the hook prints why. */
int (*child_hook)(const void *);
const void *child_hook_argument;

/* nodalloc reads its options and the task memory policy once, at start-up: a test that varies
 * them runs this program again in a child (fork + exec of this program, exe_path) as
 * `numatest <child-mode> nodalloc <argument>`, with `assignments` ("NAME=VALUE") added to the
 * environment and, when `bind_mask` is not NULL (bit i = /sys node i, MAX_NODES bits), the
 * task memory policy MPOL_BIND to those nodes set before the exec (inherited across it, as
 * numactl --membind does). The child's output (stdout and stderr) lands in `output`; returns
 * the child's wait status. */
int run_child(const char *mode, const char *argument, const char *const *assignments,
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
void run_reporting_child(const char *test, const char *mode, const char *argument,
                                const char *const *assignments) {
    static char output[1 << 16];
    int status = run_child(mode, argument, assignments, NULL, output, sizeof output);
    /* Whole, not through out(), whose line holds 4 KiB: a child may print a series. */
    size_t length = strlen(output), done = 0;
    while (done < length) {
        ssize_t n = write(1, output + done, length - done);
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    if (!strstr(output, "RESULT ") || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        out("RESULT %s %s fail error=child exited=%d status=%d signal=%d\n", test, allocator,
            WIFEXITED(status), WIFEXITED(status) ? WEXITSTATUS(status) : -1,
            WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* ---------------------------------------------------------------- page sets */

int compare_pointers(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

void page_set_init(struct page_set *s, long capacity) {
    s->pages = xmap(sizeof *s->pages * capacity);
    s->count = 0;
    s->capacity = capacity;
}

void page_set_add(struct page_set *s, const void *object, size_t size) {
    uintptr_t first = (uintptr_t)object & ~(PAGE - 1);
    uintptr_t last = ((uintptr_t)object + size - 1) & ~(PAGE - 1);
    for (uintptr_t page = first; page <= last; page += PAGE) {
        if (s->count == s->capacity)
            die("page-set-full");
        s->pages[s->count++] = page;
    }
}

/* Sorts and deduplicates, then fills per_node[os id] (and *absent: pages with no node). */
void page_set_count(struct page_set *s, long *per_node, long *absent) {
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
void per_node_text(const long *per_node, long absent, char *buffer, size_t size) {
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
        long kib = node_memory_kib(nodes[i].os_id);
        out("SYSINFO node%d cpus=%s memory=%ldMiB distances=%s\n", nodes[i].os_id, cpus,
            kib / 1024, row);
    }
    char thp[256] = "?";
    if (read_text("/sys/kernel/mm/transparent_hugepage/enabled", thp, sizeof thp) > 0)
        thp[strcspn(thp, "\n")] = 0;
    out("SYSINFO thp=\"%s\"\n", thp);
}

/* ---------------------------------------------------------------- the table, and main */

/* True when `name` contains one of the comma-separated words of `filter` ("" matches all). */
static int filter_matches(const char *name, const char *filter) {
    if (!*filter)
        return 1;
    for (const char *word = filter; *word;) {
        size_t length = strcspn(word, ",");
        char part[128];
        if (length > 0 && length < sizeof part) {
            memcpy(part, word, length);
            part[length] = 0;
            if (strstr(name, part))
                return 1;
        }
        word += length;
        if (*word == ',')
            word++;
    }
    return 0;
}

/* One line per test this machine can run whose name contains `filter` (or one of its
 * comma-separated words), in run order: the
 * name, who runs it ("all", or "nodalloc" when /init leaves the peers out) and the
 * environment /init adds. A test that needs two nodes with CPUs is listed anyway: without them
 * it must fail, not vanish from the plan. */
static void list_tests(const char *filter) {
    for (int i = 0; i < test_count; i++) {
        const struct test *t = &tests[i];
        if (!t->run || !filter_matches(t->name, filter) ||
            ((t->needs & NEEDS_CPULESS_NODE) && cpuless_node() < 0))
            continue;
        out("%s %s%s%s\n", t->name, t->peers == PEERS_MEASURED ? "all" : "nodalloc",
            t->environment ? " " : "", t->environment ? t->environment : "");
    }
}

static const struct test *test_named(const char *name) {
    for (int i = 0; i < test_count; i++)
        if (!strcmp(tests[i].name, name))
            return &tests[i];
    return NULL;
}

/* The entry whose child mode is `mode` ("<name>.child"). */
static const struct test *child_named(const char *mode) {
    for (int i = 0; i < test_count; i++) {
        size_t length = strlen(tests[i].name);
        if (tests[i].child && !strncmp(mode, tests[i].name, length) &&
            !strcmp(mode + length, ".child"))
            return &tests[i];
    }
    return NULL;
}

/* What the table says before the test's own code runs: whether a peer takes part, and
 * whether the machine has the nodes the test needs. */
static void run_test(const struct test *t) {
    if (t->peers == PEERS_SKIPPED && !is_nodalloc) {
        out("RESULT %s %s info skipped=nodalloc-only\n", t->name, allocator);
        return;
    }
    if ((t->needs & NEEDS_TWO_CPU_NODES) && cpu_node_count < 2)
        die("needs-two-nodes-with-cpus");
    if ((t->needs & NEEDS_CPULESS_NODE) && cpuless_node() < 0) {
        out("RESULT %s %s info skipped=no-cpuless-node\n", t->name, allocator);
        return;
    }
    const char *tiered = getenv("NUMATEST_TIERED");
    if ((t->needs & NEEDS_TIERED_KERNEL) && !(tiered && !strcmp(tiered, "1")))
        informing = 1;
    t->run(t->name);
}

int main(int argc, char **argv) {
    ssize_t length = readlink("/proc/self/exe", exe_path, sizeof exe_path - 1);
    if (length > 0)
        exe_path[length] = 0;
    /* A child that may run without /sys reads no topology (its argument carries the figures). */
    const struct test *child = argc == 4 ? child_named(argv[1]) : NULL;
    if (!child || !child->child_without_sys)
        read_topology();
    sem_init(&started, 0, 0);
    if (argc == 2 && !strcmp(argv[1], "sysinfo")) {
        sysinfo();
        return 0;
    }
    if ((argc == 2 || argc == 3) && !strcmp(argv[1], "list")) {
        list_tests(argc == 3 ? argv[2] : "");
        return 0;
    }
    if (argc == 4 && !strcmp(argv[2], "nodalloc")) {
        /* A child started by a test (run_child): nodalloc with the options it was given. */
        allocator = argv[2];
        is_nodalloc = 1;
        check_allocator();
        if (!child)
            die("unknown-child");
        current_test = child->name;
        child->child(argv[3]);
        return 0;
    }
    if (argc != 3) {
        out("usage: numatest sysinfo | numatest list [FILTER] | numatest <test> <allocator>\n");
        return 2;
    }
    const char *test = argv[1];
    allocator = argv[2];
    is_nodalloc = !strcmp(allocator, "nodalloc");
    current_test = test;
    check_allocator();
    if (usable_count < 1 || cpu_node_count < 1)
        die("no-usable-node");
    const struct test *t = test_named(test);
    if (!t || !t->run)
        die("unknown-test");
    run_test(t);
    return 0;
}
