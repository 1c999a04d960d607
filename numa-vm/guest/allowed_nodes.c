/* mempolicy and cpuless_explicit (nodalloc only): which nodes nodalloc puts memory on. Started
 * under a task memory policy that binds it to some nodes (as under numactl --membind), it must
 * see those nodes only, numbered densely in /sys order, refuse any other index, and keep every
 * page, explicit or ordinary, on them. A node without CPUs (numa-vm/run --memory-only-node)
 * holds nothing a thread did not ask of it by name, and everything that was. Both allocate
 * the same ordinary mix of sizes, from the main thread and from workers.
 */
#include "harness.h"
#include "tests.h"

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

static void *mix_thread(void *argument) {
    struct worker *w = argument;
    allocate_mix(w->context);
    sem_post(&started);
    return NULL;
}

/* ---------------------------------------------------------------- mempolicy */

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
void child_mempolicy(const char *list) {
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
void test_mempolicy(const char *test) {
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

/* ---------------------------------------------------------------- cpuless_explicit */

void test_cpuless_explicit(const char *test) {
    int cpuless = cpuless_node();
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
