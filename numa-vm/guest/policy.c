/* policy_bind and policy_bind.node_full (nodalloc only): NODALLOC_POLICY=bind, where every
 * region is mbind-ed MPOL_BIND to its node instead of MPOL_PREFERRED. A program that asks for
 * more than a node holds must see allocations fail cleanly (NULL with ENOMEM) or be served
 * only where the policy allows: every page of a served block on the node nodalloc names for
 * it, never a page the kernel put elsewhere. No crash, no OOM kill. policy_bind exhausts
 * nodalloc's region of a node (64 MiB regions, as small_node_spill); policy_bind.node_full
 * exhausts the node's physical memory (the CPU-less node when there is one, else the last CPU
 * node), placing blocks there with nodalloc_malloc_on_node. Options are read at start-up, so
 * each case runs in a child.
 */
#include "harness.h"
#include "tests.h"

#define POLICY_BLOCK (4UL << 20)

/* Pages of a block on the node nodalloc names for it. */
static long pages_on_named(char *block, int named_os) {
    enum { PAGES = POLICY_BLOCK / PAGE };
    void *addresses[PAGES];
    int status[PAGES];
    for (unsigned long p = 0; p < PAGES; p++)
        addresses[p] = block + p * PAGE;
    page_nodes(addresses, PAGES, status);
    long good = 0;
    for (unsigned long p = 0; p < PAGES; p++)
        good += status[p] == named_os;
    return good;
}

static long vmstat_oom_kills(void) {
    char text[16384];
    if (read_text("/proc/vmstat", text, sizeof text) < 0)
        return -1;
    char *p = strstr(text, "\noom_kill ");
    return p ? strtol(p + 10, NULL, 10) : -1;
}

/* ---------------------------------------------------------------- policy_bind (region) */

#define REGION_BLOCKS 24 /* 96 MiB held against 64 MiB regions */

struct region_case {
    char *blocks[REGION_BLOCKS];
    int errors[REGION_BLOCKS];
};

static void *region_thread(void *argument) {
    struct worker *w = argument;
    struct region_case *c = w->context;
    thread_start(w);
    for (int i = 0; i < REGION_BLOCKS; i++) {
        errno = 0;
        c->blocks[i] = malloc(POLICY_BLOCK);
        c->errors[i] = errno;
        if (c->blocks[i])
            for (size_t offset = 0; offset < POLICY_BLOCK; offset += PAGE)
                c->blocks[i][offset] = (char)i;
    }
    return NULL;
}

static void child_region(void) {
    const char *test = "policy_bind";
    first_malloc();
    struct region_case *c = xmap(sizeof *c);
    struct worker *workers = xmap(sizeof *workers);
    workers[0].context = c;
    worker_pin(&workers[0], 0);
    start_workers(workers, 1, region_thread);
    join_workers(workers, 1);
    int home_os = cpu_node_os_id(0);
    int served = 0, on_home = 0, spilled = 0, null_enomem = 0, null_other = 0, whole = 0;
    char sequence[256] = "";
    size_t used = 0;
    for (int i = 0; i < REGION_BLOCKS; i++) {
        if (!c->blocks[i]) {
            null_enomem += c->errors[i] == ENOMEM;
            null_other += c->errors[i] != ENOMEM;
            append(sequence, sizeof sequence, &used, "%sNULL", i ? "," : "");
            continue;
        }
        served++;
        int named = os_id_of_index(na_node_of(c->blocks[i]));
        on_home += named == home_os;
        spilled += named != home_os;
        whole += pages_on_named(c->blocks[i], named) == (long)(POLICY_BLOCK / PAGE);
        append(sequence, sizeof sequence, &used, "%s%d", i ? "," : "", named);
    }
    /* After the failures, if any: the heap still serves small and large requests. */
    char *small = malloc(64), *again = malloc(POLICY_BLOCK / 4);
    int still_serves = small && again;
    free(small);
    free(again);
    for (int i = 0; i < REGION_BLOCKS; i++)
        free(c->blocks[i]);
    int met = null_other == 0 && whole == served && still_serves && served >= 1 &&
              workers[0].home_os_id == home_os;
    out("RESULT %s %s %s blocks=%d served=%d on_home=%d spilled=%d null_enomem=%d "
        "null_other_errno=%d served_all_pages_on_named_node=%d/%d still_serves=%d "
        "thread_home=node%d node_sequence=%s\n",
        test, allocator, verdict(met), REGION_BLOCKS, served, on_home, spilled, null_enomem,
        null_other, whole, served, still_serves, workers[0].home_os_id, sequence);
}

/* ---------------------------------------------------------------- policy_bind.node_full */

/* The node whose memory runs out: the CPU-less node if any (smaller), else the last CPU node
 * (away from node 0, which holds the kernel and the initramfs). */
static int full_node_index(void) {
    int cpuless = cpuless_node();
    return cpuless >= 0 ? cpuless : cpu_nodes[cpu_node_count - 1];
}

/* Blocks of 4 MiB on the node, every page touched, until 1.5 times its MemTotal or the first
 * NULL. Prints a progress line every 8 blocks: if the child is killed, the parent still knows
 * how far it got. */
static void child_node_full(void) {
    first_malloc();
    int index = full_node_index(), os = os_id_of_index(index);
    long limit = node_memory_kib(os) * 1024 / (long)POLICY_BLOCK * 3 / 2;
    char **blocks = xmap(sizeof *blocks * (limit + 1));
    long served = 0, whole = 0;
    int error = 0;
    for (long i = 0; i < limit; i++) {
        errno = 0;
        blocks[i] = na_malloc_on_node(POLICY_BLOCK, index);
        if (!blocks[i]) {
            error = errno;
            break;
        }
        for (size_t offset = 0; offset < POLICY_BLOCK; offset += PAGE)
            blocks[i][offset] = (char)i;
        served++;
        if (served % 8 == 0)
            out("PROGRESS served=%ld\n", served);
    }
    for (long i = 0; i < served; i++)
        whole += pages_on_named(blocks[i], os) == (long)(POLICY_BLOCK / PAGE);
    char *small = malloc(64);
    int still_serves = small != NULL;
    free(small);
    for (long i = 0; i < served; i++)
        free(blocks[i]);
    out("CHILD node=node%d asked=%ld served=%ld first_null_errno=%d whole=%ld still_serves=%d\n",
        os, limit, served, error, whole, still_serves);
}

void child_policy_bind(const char *argument) {
    if (!strcmp(argument, "region"))
        child_region();
    else if (!strcmp(argument, "node_full"))
        child_node_full();
    else
        die("unknown-case");
}

void test_policy_bind(const char *test) {
    if (!strchr(test, '.')) {
        const char *map_path = "/tmp/numatest-policy-node0.map";
        char map_text[32];
        snprintf(map_text, sizeof map_text, "%d\n", cpu_node_os_id(0));
        if (write_file(map_path, map_text) != 0)
            die("write-map-file");
        const char *assignments[] = {"NODALLOC_POLICY=bind", "NODALLOC_REGION_SIZE=64M",
                                     "NODALLOC_BIND=map:/tmp/numatest-policy-node0.map", NULL};
        run_reporting_child(test, "policy_bind.child", "region", assignments);
        return;
    }
    /* node_full: the child prints no RESULT itself; its fate is judged here. */
    static char output[1 << 16];
    const char *assignments[] = {"NODALLOC_POLICY=bind", NULL};
    long kills_before = vmstat_oom_kills();
    double start = now_seconds();
    int status = run_child("policy_bind.child", "node_full", assignments, NULL, output,
                           sizeof output);
    double seconds = now_seconds() - start;
    long kills = vmstat_oom_kills() - kills_before;
    int os = os_id_of_index(full_node_index());
    long node_mib = node_memory_kib(os) / 1024;
    long asked = -1, served = -1, whole = -1, progress = 0;
    int error = -1, still_serves = 0;
    char *line = strstr(output, "CHILD node=");
    if (line)
        sscanf(line, "CHILD node=node%*d asked=%ld served=%ld first_null_errno=%d whole=%ld "
                     "still_serves=%d",
               &asked, &served, &error, &whole, &still_serves);
    for (char *p = output; (p = strstr(p, "PROGRESS served=")) != NULL; p++)
        progress = strtol(p + 16, NULL, 10);
    int exited = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    int signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    /* Clean: the child ended normally, every served block wholly on the node, a NULL (if the
     * node could not hold the request) with ENOMEM, and the heap still serving afterwards. */
    int met = exited && line && whole == served && (error == 0 || error == ENOMEM) &&
              still_serves && kills == 0;
    out("RESULT %s %s %s node=node%d node_mib=%ld blocks_asked=%ld served=%ld "
        "last_progress=%ld first_null_errno=%d served_all_pages_on_node=%ld still_serves=%d "
        "child_exited=%d signal=%d oom_kills=%ld seconds=%.1f\n",
        test, allocator, verdict(met), os, node_mib, asked, served, progress, error, whole,
        still_serves, exited, signal, kills, seconds);
    if (!exited) {
        /* The child's last line, for the log. */
        size_t length = strlen(output);
        while (length > 0 && output[length - 1] == '\n')
            output[--length] = 0;
        char *last = strrchr(output, '\n');
        out("policy_bind.node_full: the child's last line: %s\n", last ? last + 1 : output);
    }
}
