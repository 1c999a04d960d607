/* topology (nodalloc only): nodalloc sees the machine as /sys describes it. It counts the nodes
 * with memory, CPU-less ones included; an object asked of node k is reported on k and every one
 * of its pages is on the /sys node behind k; a thread it binds gets exactly that node's CPUs;
 * and when a node's region is full it spills to the nearest node with CPUs by the /sys
 * distance row (not by the column, which differs on the asymmetric 4-node guest). Checked
 * through nodalloc's own entry points, each answer against the kernel's.
 */
#include "harness.h"
#include "tests.h"

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

void test_topology(const char *test) {
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
