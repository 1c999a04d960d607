/* memory_tiers (run once, under nodalloc's preload; it judges the kernel, not an allocator, and
 * allocates nothing): what nodalloc's memory tiers will stand on. Reports the kernel's tiers
 * (each /sys/devices/virtual/memory_tiering/memory_tier<id>/nodelist, and which tier each
 * CPU-less node is in), whether set_mempolicy and mbind accept MPOL_WEIGHTED_INTERLEAVE over
 * every node with memory, the interleave weights (/sys/kernel/mm/mempolicy/
 * weighted_interleave/node<N>, which /init sets under numa-vm/run --far-node), and where the
 * pages of a region bound that way land. Judged only where numa-vm/run says the kernel has
 * these features (--kernel 6.12: NUMATEST_TIERED=1, NEEDS_TIERED_KERNEL): pass when the tiering
 * directory exists and mbind takes the mode. Elsewhere (Debian's 6.1 has neither weighted
 * interleave nor tiers from HMAT) the row is info.
 *
 * Also here: cold_on_far_node, interleave_large, far_node_full, near_limit (a near-tier limit
 * spilling to the far node) and tiering_workload.
 */
#include "harness.h"
#include "tests.h"

#include <fcntl.h>
#include <sys/mman.h>

/* The kernel's MPOL_DEFAULT and MPOL_WEIGHTED_INTERLEAVE (Linux 6.9), without libnuma. */
#define MPOL_DEFAULT_MODE 0
#define MPOL_WEIGHTED_INTERLEAVE_MODE 6
#define TIERING_DIRECTORY "/sys/devices/virtual/memory_tiering"
#define WEIGHTS_DIRECTORY "/sys/kernel/mm/mempolicy/weighted_interleave"
/* The weighted-interleave region is a whole number of rounds (a round: each node's weight in
 * pages), so the count per node is exact wherever the first round starts: 60 rounds (420 pages
 * for weights 3, 3, 1), fewer when the weights are large, never more than 16 MiB. */
#define INTERLEAVE_ROUNDS 60
#define MAX_INTERLEAVED_PAGES 4096
#define MAX_TIERS 32

struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* The ids of the memory_tier<id> directories, ascending; -1 when the directory is missing.
 * getdents64 on a stack buffer: opendir would allocate through the preloaded allocator. */
static int tier_ids(int *ids, int capacity) {
    int fd = open(TIERING_DIRECTORY, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int count = 0;
    char buffer[4096] __attribute__((aligned(8)));
    for (;;) {
        long length = syscall(SYS_getdents64, fd, buffer, sizeof buffer);
        if (length <= 0)
            break;
        for (long at = 0; at < length;) {
            struct linux_dirent64 *entry = (struct linux_dirent64 *)(buffer + at);
            at += entry->d_reclen;
            const char *prefix = "memory_tier";
            if (strncmp(entry->d_name, prefix, strlen(prefix)) != 0 || count == capacity)
                continue;
            int id = (int)strtol(entry->d_name + strlen(prefix), NULL, 10);
            int k = count++;
            for (; k > 0 && ids[k - 1] > id; k--)
                ids[k] = ids[k - 1];
            ids[k] = id;
        }
    }
    close(fd);
    return count;
}

static void mark_node(int id, void *mask) {
    if (id >= 0 && id < MAX_NODES)
        ((unsigned long *)mask)[id / 64] |= 1UL << (id % 64);
}

static int in_mask(const unsigned long *mask, int id) { return (mask[id / 64] >> (id % 64)) & 1; }

/* A node's weighted-interleave weight, -1 when the file is missing. */
static int weight_of(int os_id) {
    char path[128], text[32];
    snprintf(path, sizeof path, WEIGHTS_DIRECTORY "/node%d", os_id);
    if (read_text(path, text, sizeof text) < 0)
        return -1;
    return (int)strtol(text, NULL, 10);
}

void test_memory_tiers(const char *test) {
    char report[2048];
    size_t used = 0;
    report[0] = 0;

    /* 1. The tiers, and whether each CPU-less node has a tier without CPU nodes (a tier of
     * its own, what HMAT's worse latency and bandwidth should give the far node). */
    int ids[MAX_TIERS];
    int tiers = tier_ids(ids, MAX_TIERS);
    int tiering = tiers >= 0;
    unsigned long tier_nodes[MAX_TIERS][MAX_NODES / 64 + 1];
    memset(tier_nodes, 0, sizeof tier_nodes);
    append(report, sizeof report, &used, " tiering=%s tiers=%d", tiering ? "present" : "absent",
           tiering ? tiers : 0);
    for (int t = 0; t < tiers; t++) {
        char path[160], nodelist[256];
        snprintf(path, sizeof path, TIERING_DIRECTORY "/memory_tier%d/nodelist", ids[t]);
        if (read_text(path, nodelist, sizeof nodelist) < 0)
            snprintf(nodelist, sizeof nodelist, "unreadable");
        nodelist[strcspn(nodelist, "\n")] = 0;
        parse_list(nodelist, mark_node, tier_nodes[t]);
        append(report, sizeof report, &used, " tier%d=%s", ids[t], nodelist[0] ? nodelist : "-");
    }
    int cpuless = 0, apart = 0;
    for (int k = 0; k < usable_count; k++) {
        struct node *n = usable_node(k);
        if (n->cpu_count > 0)
            continue;
        cpuless++;
        int tier = -1, shared = 0;
        for (int t = 0; t < tiers; t++) {
            if (!in_mask(tier_nodes[t], n->os_id))
                continue;
            tier = ids[t];
            for (int c = 0; c < cpu_node_count; c++)
                shared |= in_mask(tier_nodes[t], cpu_node_os_id(c));
        }
        apart += tier >= 0 && !shared;
        append(report, sizeof report, &used, " node%d_tier=%d(%s)", n->os_id, tier,
               tier < 0 ? "none" : shared ? "with-cpu-nodes" : "own");
    }

    /* 2. The weights of every node with memory. */
    unsigned long all[MAX_NODES / 64 + 1] = {0};
    int weights[MAX_NODES], weight_sum = 0, weighted = 1;
    append(report, sizeof report, &used, " weights=");
    for (int k = 0; k < usable_count; k++) {
        int id = os_id_of_index(k);
        mark_node(id, all);
        weights[k] = weight_of(id);
        weighted &= weights[k] > 0;
        weight_sum += weights[k] > 0 ? weights[k] : 1;
        append(report, sizeof report, &used, "%s%d:%d", k ? "," : "", id, weights[k]);
    }

    /* 3. The mode as the task policy (then back to the default), and as a region's policy:
     * where the region's pages land, against what the weights promise. maxnode counts one bit
     * more than the kernel reads. */
    int task_ok = syscall(SYS_set_mempolicy, MPOL_WEIGHTED_INTERLEAVE_MODE, all,
                          MAX_NODES + 1UL) == 0;
    int task_errno = task_ok ? 0 : errno;
    if (task_ok && syscall(SYS_set_mempolicy, MPOL_DEFAULT_MODE, NULL, 0UL) != 0)
        die("set_mempolicy-default");
    append(report, sizeof report, &used, " set_mempolicy=%s",
           task_ok ? "ok" : task_errno == EINVAL ? "EINVAL" : "error");
    long rounds = INTERLEAVE_ROUNDS;
    if (rounds * weight_sum > MAX_INTERLEAVED_PAGES)
        rounds = MAX_INTERLEAVED_PAGES / weight_sum > 0 ? MAX_INTERLEAVED_PAGES / weight_sum : 1;
    long count = rounds * weight_sum;
    size_t bytes = count * PAGE;
    char *region = xmap(bytes);
    /* A transparent huge page would put 512 pages on one node at once. */
    madvise(region, bytes, MADV_NOHUGEPAGE);
    int bound = syscall(SYS_mbind, region, bytes, MPOL_WEIGHTED_INTERLEAVE_MODE, all,
                        MAX_NODES + 1UL, 0U) == 0;
    int bind_errno = bound ? 0 : errno;
    append(report, sizeof report, &used, " mbind=%s",
           bound ? "ok" : bind_errno == EINVAL ? "EINVAL" : "error");
    if (bound) {
        void **pages = xmap(count * sizeof *pages);
        int *status = xmap(count * sizeof *status);
        for (long i = 0; i < count; i++) {
            region[i * PAGE] = 1;
            pages[i] = region + i * PAGE;
        }
        page_nodes(pages, count, status);
        long per_node[MAX_NODES] = {0}, absent = 0;
        for (long i = 0; i < count; i++) {
            if (status[i] >= 0 && status[i] < MAX_NODES)
                per_node[status[i]]++;
            else
                absent++;
        }
        xunmap(pages, count * sizeof *pages);
        xunmap(status, count * sizeof *status);
        char text[512];
        per_node_text(per_node, absent, text, sizeof text);
        /* With every weight readable, each node holds its share of the whole rounds. */
        int as_weighted = weighted && absent == 0;
        for (int k = 0; k < usable_count && as_weighted; k++)
            as_weighted = per_node[os_id_of_index(k)] == rounds * weights[k];
        append(report, sizeof report, &used, " pages=%s as_weighted=%s", text,
               !weighted ? "-" : as_weighted ? "yes" : "no");
    }
    xunmap(region, bytes);

    out("RESULT %s %s %s required=%s cpuless_in_own_tier=%d/%d%s\n", test, allocator,
        verdict(tiering && bound), informing ? "no" : "yes", apart, cpuless, report);
}

/* ---------------------------------------------------------------- cold_on_far_node */

/* Cold blocks of one thread: 64 B, 16 KiB and a 4 MiB one from nodalloc_malloc_cold, every page
 * touched; plain mallocs beside them (those below 1 MiB checked at home). figures: [0] cold
 * pages on the node nodalloc_node_of names for them, [1] cold pages, [2] cold blocks whose
 * node_of is a node without CPUs, [3] cold blocks, [4] plain pages on the thread's home node,
 * [5] plain pages. */
static void *cold_thread(void *argument) {
    struct worker *w = argument;
    thread_start(w);
    static const size_t sizes[] = {64, 16 << 10, 4 << 20};
    static const int counts[] = {4096, 64, 1};
    struct page_set *cold = xmap(sizeof *cold), *plain = xmap(sizeof *plain);
    page_set_init(cold, 1 << 14);
    page_set_init(plain, 1 << 14);
    void *blocks[4096 + 64 + 1 + 4096 + 64 + 1];
    int block_count = 0, cold_on_cpuless = 0, cold_blocks = 0, named = -2;
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < counts[s]; i++) {
            char *c = na_malloc_cold(sizes[s]);
            char *p = malloc(sizes[s]);
            if (!c || !p)
                die("malloc_cold");
            memset(c, 1, sizes[s]);
            memset(p, 2, sizes[s]);
            int node = na_node_of(c);
            struct node *n = node >= 0 ? usable_node(node) : NULL;
            cold_on_cpuless += n && n->cpu_count == 0;
            cold_blocks++;
            /* One far node per thread: every cold block names the same one. */
            named = named == -2 ? node : (named == node ? node : -1);
            page_set_add(cold, c, sizes[s]);
            /* A plain block of 1 MiB and more may be interleaved with the far node
             * (NODALLOC_INTERLEAVE, on where the weights are set): interleave_large's. */
            if (sizes[s] < (1 << 20))
                page_set_add(plain, p, sizes[s]);
            blocks[block_count++] = c;
            blocks[block_count++] = p;
        }
    }
    long per_node[MAX_NODES], absent;
    page_set_count(cold, per_node, &absent);
    w->figures[0] = named >= 0 && absent == 0 ? per_node[os_id_of_index(named)] : 0;
    w->figures[1] = cold->count;
    w->figures[2] = cold_on_cpuless;
    w->figures[3] = cold_blocks;
    page_set_count(plain, per_node, &absent);
    w->figures[4] = per_node[w->home_os_id];
    w->figures[5] = plain->count;
    for (int i = 0; i < block_count; i++)
        free(blocks[i]);
    return NULL;
}

/* Needs a node without CPUs (numa-vm/run --memory-only-node or --far-node): one worker per CPU
 * node, one at a time. Met when every cold page is on the node nodalloc_node_of names for its
 * block, that node has no CPUs (with one kernel tier the memory-only nodes are far; with the
 * HMAT of --far-node the far node's own tier is), and at least 99 % of the plain pages are on
 * the thread's home node. */
void test_cold_on_far_node(const char *test) {
    first_malloc();
    struct worker *workers = xmap(sizeof *workers * cpu_node_count);
    long cold_on = 0, cold = 0, on_cpuless = 0, blocks = 0, plain_home = 0, plain = 0;
    char per_thread[512] = "";
    size_t used = 0;
    for (int k = 0; k < cpu_node_count; k++) {
        workers[k].index = k;
        worker_pin(&workers[k], agreeing_cpu_node(k));
        start_workers(&workers[k], 1, cold_thread);
        join_workers(&workers[k], 1);
        long *f = workers[k].figures;
        cold_on += f[0], cold += f[1], on_cpuless += f[2], blocks += f[3];
        plain_home += f[4], plain += f[5];
        append(per_thread, sizeof per_thread, &used, "%snode%d:%ld/%ld", k ? "," : "",
               workers[k].home_os_id, f[0], f[1]);
    }
    char f_cold[64], f_plain[64];
    fraction(f_cold, sizeof f_cold, cold_on, cold);
    fraction(f_plain, sizeof f_plain, plain_home, plain);
    int met = cold > 0 && cold_on == cold && on_cpuless == blocks && plain_home * 100 >= plain * 99;
    out("RESULT %s %s %s cold_pages_on_far=%s cold_blocks_on_cpuless=%ld/%ld "
        "plain_pages_home=%s per_thread=%s\n",
        test, allocator, verdict(met), f_cold, on_cpuless, blocks, f_plain, per_thread);
}

/* ---------------------------------------------------------------- interleave_large */

#define INTERLEAVED_BYTES (64UL << 20)
#define MPOL_F_ADDR_FLAG (1 << 1)

/* The memory policy of the mapping at `address` (get_mempolicy with MPOL_F_ADDR), -1 on error. */
static int policy_at(void *address) {
    int mode = -1;
    unsigned long mask[MAX_NODES / 64 + 1];
    if (syscall(SYS_get_mempolicy, &mode, mask, (unsigned long)MAX_NODES, address,
                (unsigned long)MPOL_F_ADDR_FLAG) != 0)
        return -1;
    return mode;
}

/* figures: [0] pages of the small block at home, [1] its pages, [2] large block pages at home,
 * [3] on the far node, [4] its pages, [5] the large block's policy, [6] its span's policy after
 * its free. */
static void *interleave_thread(void *argument) {
    struct worker *w = argument;
    thread_start(w);
    int far_os = *(int *)w->context;
    long per_node[MAX_NODES], absent;
    /* Below the threshold first (so it cannot reuse the large block's span): at home. */
    char *small = malloc(512 << 10);
    if (!small)
        die("malloc");
    memset(small, 1, 512 << 10);
    struct page_set *set = xmap(sizeof *set);
    page_set_init(set, 1 << 15);
    page_set_add(set, small, 512 << 10);
    page_set_count(set, per_node, &absent);
    w->figures[0] = per_node[w->home_os_id];
    w->figures[1] = set->count;
    char *large = malloc(INTERLEAVED_BYTES);
    if (!large)
        die("malloc");
    memset(large, 2, INTERLEAVED_BYTES);
    page_set_init(set, 1 << 15);
    page_set_add(set, large, INTERLEAVED_BYTES);
    page_set_count(set, per_node, &absent);
    w->figures[2] = per_node[w->home_os_id];
    w->figures[3] = far_os >= 0 ? per_node[far_os] : 0;
    w->figures[4] = set->count;
    /* The address as a number: the span's policy is read after the block's free. */
    uintptr_t middle = (uintptr_t)large + INTERLEAVED_BYTES / 2;
    w->figures[5] = policy_at((void *)middle);
    free(large);
    w->figures[6] = policy_at((void *)middle);
    free(small);
    return NULL;
}

/* On --kernel 6.12 --far-node (weights 3 for CPU nodes, 1 for the far node, set by /init),
 * with NODALLOC_INTERLEAVE=auto (the child below; off by default): a 64 MiB block's pages split
 * between the thread's node and the far node as their weights (within 5 % of the ratio), its
 * mapping's policy is MPOL_WEIGHTED_INTERLEAVE (6) while it lives and the region's
 * MPOL_PREFERRED (1) once freed, and a 512 KiB block stays at home. */
void test_interleave_large(const char *test) {
    const char *assignments[] = {"NODALLOC_INTERLEAVE=auto", NULL};
    run_reporting_child(test, "interleave_large.child", "-", assignments);
}

void child_interleave_large(const char *argument) {
    (void)argument;
    const char *test = "interleave_large";
    /* As run_test decides for the parent: only a kernel with the weights judges. */
    const char *tiered = getenv("NUMATEST_TIERED");
    informing = !(tiered && !strcmp(tiered, "1"));
    int far_os = os_id_of_index(cpuless_node());
    first_malloc();
    struct worker w;
    memset(&w, 0, sizeof w);
    w.context = &far_os;
    worker_pin(&w, agreeing_cpu_node(0));
    start_workers(&w, 1, interleave_thread);
    join_workers(&w, 1);
    long *f = w.figures;
    int home_weight = weight_of(w.home_os_id), far_weight = far_os >= 0 ? weight_of(far_os) : -1;
    int met = far_os >= 0 && home_weight > 0 && far_weight > 0 && f[3] > 0;
    if (met) {
        /* home/far against home_weight/far_weight, within 5 %. */
        double ratio = (double)f[2] / (double)f[3];
        double expected = (double)home_weight / (double)far_weight;
        met = ratio >= expected * 0.95 && ratio <= expected * 1.05 && f[2] + f[3] == f[4];
    }
    met = met && f[5] == 6 && f[6] == 1 && f[0] * 100 >= f[1] * 99;
    char f_small[64];
    fraction(f_small, sizeof f_small, f[0], f[1]);
    out("RESULT %s %s %s large_home=%ld large_far=%ld large_pages=%ld weights=%d:%d "
        "policy_live=%ld policy_freed=%ld small_home=%s\n",
        test, allocator, verdict(met), f[2], f[3], f[4], home_weight, far_weight, f[5], f[6],
        f_small);
}

/* ---------------------------------------------------------------- far_node_full */

#define FULL_BLOCK (4UL << 20)
#define FULL_BLOCKS 80 /* 320 MiB of cold blocks against a 256 MiB far node */

/* More cold memory than the far node holds: every request succeeds (the kernel places what
 * the far node cannot take on the nearest other node, as the region's preferred policy lets
 * it), the far node fills first, and every block's contents survive. */
void test_far_node_full(const char *test) {
    int far_os = os_id_of_index(cpuless_node());
    first_malloc();
    char **blocks = xmap(sizeof *blocks * FULL_BLOCKS);
    int failed = 0;
    for (int i = 0; i < FULL_BLOCKS; i++) {
        blocks[i] = na_malloc_cold(FULL_BLOCK);
        if (!blocks[i]) {
            failed++;
            continue;
        }
        memset(blocks[i], i + 1, FULL_BLOCK);
    }
    struct page_set *set = xmap(sizeof *set);
    page_set_init(set, (long)(FULL_BLOCKS * (FULL_BLOCK / PAGE)) + 16);
    for (int i = 0; i < FULL_BLOCKS; i++)
        if (blocks[i])
            page_set_add(set, blocks[i], FULL_BLOCK);
    long per_node[MAX_NODES], absent;
    page_set_count(set, per_node, &absent);
    int intact = 1;
    for (int i = 0; i < FULL_BLOCKS; i++)
        if (blocks[i] &&
            (blocks[i][0] != (char)(i + 1) || blocks[i][FULL_BLOCK - 1] != (char)(i + 1)))
            intact = 0;
    for (int i = 0; i < FULL_BLOCKS; i++)
        free(blocks[i]);
    char placed[256];
    per_node_text(per_node, absent, placed, sizeof placed);
    long far_pages = far_os >= 0 ? per_node[far_os] : 0;
    /* The far node holds 256 MiB, part of it the kernel's: at least half of it ours. */
    int met = far_os >= 0 && failed == 0 && intact && absent == 0 &&
              far_pages * (long)PAGE >= (128L << 20);
    out("RESULT %s %s %s cold_blocks=%d failed=%d intact=%d far_node=node%d far_mib=%ld "
        "pages_by_node=%s\n",
        test, allocator, verdict(met), FULL_BLOCKS, failed, intact, far_os,
        far_pages * (long)PAGE >> 20, placed);
}

/* ---------------------------------------------------------------- tiering_workload */

#define CACHE_ENTRY 512
#define CACHE_ENTRIES (128 * 1024) /* 64 MiB of rarely read cache entries */
#define REQUEST 256
#define REQUESTS (64 * 1024) /* 16 MiB of request objects live at a time */
#define REQUEST_ROUNDS 8

/* One run of the workload: a cache built with `cache_alloc` (rarely read afterwards) while
 * request objects are allocated, touched and freed in rounds with plain malloc. Reports the
 * MiB of the cache and of the last round's requests on near (CPU) nodes and on the far node. */
static void tiering_run(void *(*cache_alloc)(size_t), long *cache_near, long *cache_far,
                        long *hot_near, long *hot_far, int far_os) {
    char **cache = xmap(sizeof *cache * CACHE_ENTRIES);
    char **requests = xmap(sizeof *requests * REQUESTS);
    for (int round = 0; round < REQUEST_ROUNDS; round++) {
        for (int i = 0; i < CACHE_ENTRIES / REQUEST_ROUNDS; i++) {
            int k = round * (CACHE_ENTRIES / REQUEST_ROUNDS) + i;
            cache[k] = cache_alloc(CACHE_ENTRY);
            if (!cache[k])
                die("cache-alloc");
            memset(cache[k], k, CACHE_ENTRY);
        }
        for (int i = 0; i < REQUESTS; i++) {
            requests[i] = malloc(REQUEST);
            if (!requests[i])
                die("malloc");
            memset(requests[i], i, REQUEST);
        }
        if (round + 1 < REQUEST_ROUNDS)
            for (int i = 0; i < REQUESTS; i++)
                free(requests[i]);
    }
    long per_node[MAX_NODES], absent;
    struct page_set *set = xmap(sizeof *set);
    page_set_init(set, 2 * CACHE_ENTRIES + 64); /* an entry may straddle two pages */
    for (int i = 0; i < CACHE_ENTRIES; i++)
        page_set_add(set, cache[i], CACHE_ENTRY);
    page_set_count(set, per_node, &absent);
    long far = far_os >= 0 ? per_node[far_os] : 0;
    *cache_far = far * (long)PAGE >> 20;
    *cache_near = (set->count - far - absent) * (long)PAGE >> 20;
    page_set_init(set, 2 * REQUESTS + 64);
    for (int i = 0; i < REQUESTS; i++)
        page_set_add(set, requests[i], REQUEST);
    page_set_count(set, per_node, &absent);
    far = far_os >= 0 ? per_node[far_os] : 0;
    *hot_far = far * (long)PAGE >> 20;
    *hot_near = (set->count - far - absent) * (long)PAGE >> 20;
    for (int i = 0; i < REQUESTS; i++)
        free(requests[i]);
    for (int i = 0; i < CACHE_ENTRIES; i++)
        free(cache[i]);
}

/* The tiering benchmark's placement half: with a far node, what stays in DRAM. Every
 * allocator runs it with plain malloc (first touch: everything near); nodalloc runs it a second
 * time with its cache allocated by nodalloc_malloc_cold (the hint a program or MemProf gives).
 * nodalloc passes when the hinted cache is at least 99 % far and its requests stay near. */
void test_tiering_workload(const char *test) {
    int far_os = os_id_of_index(cpuless_node());
    first_malloc();
    long cache_near, cache_far, hot_near, hot_far;
    tiering_run(malloc, &cache_near, &cache_far, &hot_near, &hot_far, far_os);
    char plain[160];
    snprintf(plain, sizeof plain, "plain:cache_near=%ldMiB,cache_far=%ldMiB,hot_near=%ldMiB,"
             "hot_far=%ldMiB", cache_near, cache_far, hot_near, hot_far);
    if (!is_nodalloc) {
        out("RESULT %s %s info %s\n", test, allocator, plain);
        return;
    }
    tiering_run(na_malloc_cold, &cache_near, &cache_far, &hot_near, &hot_far, far_os);
    int met = cache_far > 0 && cache_far * 100 >= (cache_near + cache_far) * 99 && hot_far == 0;
    out("RESULT %s %s %s %s hinted:cache_near=%ldMiB,cache_far=%ldMiB,hot_near=%ldMiB,"
        "hot_far=%ldMiB\n",
        test, allocator, verdict(met), plain, cache_near, cache_far, hot_near, hot_far);
}

/* ---------------------------------------------------------------- near_limit */

#define LIMITED_NEAR (48L << 20)
#define LIMITED_ASKED (96L << 20)
#define LIMITED_BLOCK (256L << 10)

/* With NODALLOC_NEAR_LIMIT=48M (the child below; NODALLOC_TIER_FULL=spill, the default): a thread
 * of a CPU node allocates and fills 96 MiB in 256 KiB blocks; every block succeeds, at most
 * 48 MiB of their pages are on the CPU nodes and the rest on the far node, each block's pages
 * on the node nodalloc_node_of names, and every block's contents intact. */
void test_near_limit(const char *test) {
    const char *assignments[] = {"NODALLOC_NEAR_LIMIT=48M", NULL};
    run_reporting_child(test, "near_limit.child", "-", assignments);
}

void child_near_limit(const char *argument) {
    (void)argument;
    const char *test = "near_limit";
    int far_os = os_id_of_index(cpuless_node());
    first_malloc();
    enum { BLOCKS = LIMITED_ASKED / LIMITED_BLOCK };
    char **blocks = xmap(sizeof *blocks * BLOCKS);
    int failed = 0, misnamed = 0, intact = 1;
    struct page_set *one = xmap(sizeof *one);
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(LIMITED_BLOCK);
        if (!blocks[i]) {
            failed++;
            continue;
        }
        memset(blocks[i], i + 1, LIMITED_BLOCK);
        long per_node[MAX_NODES], absent;
        page_set_init(one, LIMITED_BLOCK / PAGE + 2);
        page_set_add(one, blocks[i], LIMITED_BLOCK);
        page_set_count(one, per_node, &absent);
        int named = os_id_of_index(na_node_of(blocks[i]));
        if (named < 0 || per_node[named] != one->count)
            misnamed++;
    }
    struct page_set *set = xmap(sizeof *set);
    page_set_init(set, LIMITED_ASKED / PAGE + 16);
    for (int i = 0; i < BLOCKS; i++)
        if (blocks[i])
            page_set_add(set, blocks[i], LIMITED_BLOCK);
    long per_node[MAX_NODES], absent;
    page_set_count(set, per_node, &absent);
    for (int i = 0; i < BLOCKS; i++) {
        if (blocks[i] && (blocks[i][0] != (char)(i + 1) ||
                          blocks[i][LIMITED_BLOCK - 1] != (char)(i + 1)))
            intact = 0;
        free(blocks[i]);
    }
    long far_bytes = (far_os >= 0 ? per_node[far_os] : 0) * (long)PAGE;
    long near_bytes = (set->count - absent) * (long)PAGE - far_bytes;
    char placed[256];
    per_node_text(per_node, absent, placed, sizeof placed);
    int met = far_os >= 0 && failed == 0 && misnamed == 0 && intact && absent == 0 &&
              near_bytes <= LIMITED_NEAR && far_bytes >= LIMITED_ASKED - LIMITED_NEAR;
    out("RESULT %s %s %s near_mib=%ld far_mib=%ld limit_mib=%ld failed=%d misnamed=%d intact=%d "
        "pages_by_node=%s\n",
        test, allocator, verdict(met), near_bytes >> 20, far_bytes >> 20, LIMITED_NEAR >> 20,
        failed, misnamed, intact, placed);
}

/* ---------------------------------------------------------------- auto_tiering */

#define AUTO_ENTRY 512
#define AUTO_ENTRIES (64 * 1024) /* 32 MiB of cache entries */
#define AUTO_REQUEST 256
#define AUTO_REQUESTS 4096
#define AUTO_WAIT_S 40.0
#define AUTO_REFUSED_WAIT_S 3.0
/* How long the child forked while bags move lives on after its checks (a busy machine's child
 * may live that long by itself). */
#define AUTO_CHILD_LINGER_US 1500000

#define AUTO_SAMPLES 512
/* The share of the cold cache's pages that must reach the far node. The kernel moves no page
 * a forked child still shares (mbind without MPOL_MF_MOVE_ALL), silently: nodalloc asks where
 * each moved bag's pages went and tries the bags left part done again once the child is gone.
 * Before it did, the child forked below left 8-23 % of the cache near for good (a plateau of
 * 77-91 %, by how long the child lived). */
#define AUTO_COLD_FAR_PERCENT 98

struct auto_state {
    double wait_s;            /* how long each phase may wait for its placement */
    /* The placement over time: ms since the cache was built, cache pages far and in all,
     * request pages far and in all. */
    long samples[AUTO_SAMPLES][5];
    int sampled;
    volatile int stop;        /* the requests end */
    char **volatile requests; /* the request thread's objects (the second half lives on) */
    volatile int requests_ready;
    int far_os;
};

/* The two call sites: their return addresses are the partitions. */
__attribute__((noinline)) void *auto_cache_alloc(size_t size) {
    void *p = malloc(size);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) void *auto_request_alloc(size_t size) {
    void *p = malloc(size);
    __asm__ volatile("" ::: "memory");
    return p;
}

/* Pages of `count` blocks of `size`: far (on `far_os`) and in all, by move_pages. */
static void auto_count(char *const *blocks, int count, size_t size, int far_os, long *far,
                       long *total) {
    struct page_set *set = xmap(sizeof *set);
    page_set_init(set, 2L * count + 16);
    for (int i = 0; i < count; i++)
        page_set_add(set, blocks[i], size);
    long per_node[MAX_NODES], absent;
    page_set_count(set, per_node, &absent);
    *far = far_os >= 0 ? per_node[far_os] : 0;
    *total = set->count - absent;
    xunmap(set, sizeof *set);
}

/* From nodalloc's statistics: the maintenance thread's passes and CPU ms, the bags automatic
 * tiering moved far and back near, and its moves the kernel left part done (-1 for what is
 * absent). */
static void auto_figures(long *passes, long *cpu_ms, long *moved_far, long *moved_near,
                         long *partly) {
    const char *text = nodalloc_stats_text();
    *passes = *cpu_ms = *moved_far = *moved_near = *partly = -1;
    const char *line = strstr(text, "maintenance thread: ");
    if (line)
        sscanf(line, "maintenance thread: %ld passes, %ld ms of CPU", passes, cpu_ms);
    line = strstr(text, "bags moved far ");
    if (line)
        sscanf(line, "bags moved far %ld, back near %ld, %ld move", moved_far, moved_near,
               partly);
}

/* Records one sample of the placement `ms` after the cache was built. */
static void auto_sample(struct auto_state *state, char *const *cache, long ms) {
    if (state->sampled == AUTO_SAMPLES || !state->requests_ready)
        return;
    long *sample = state->samples[state->sampled++];
    sample[0] = ms;
    auto_count(cache, AUTO_ENTRIES, AUTO_ENTRY, state->far_os, &sample[1], &sample[2]);
    auto_count(state->requests + AUTO_REQUESTS / 2, AUTO_REQUESTS / 2, AUTO_REQUEST,
               state->far_os, &sample[3], &sample[4]);
}

static void *auto_request_thread(void *argument) {
    struct worker *w = argument;
    struct auto_state *state = w->context;
    thread_start(w);
    char **live = xmap(sizeof *live * AUTO_REQUESTS);
    for (int i = 0; i < AUTO_REQUESTS; i++)
        live[i] = auto_request_alloc(AUTO_REQUEST);
    state->requests = live;
    state->requests_ready = 1;
    /* Churn: half the requests replaced each round, the rest live on (what is counted). */
    while (!state->stop) {
        for (int i = 0; i < AUTO_REQUESTS / 2; i++) {
            free(live[i]);
            live[i] = auto_request_alloc(AUTO_REQUEST);
            if (!live[i])
                die("malloc");
            memset(live[i], i, AUTO_REQUEST);
        }
    }
    return NULL;
}

/* figures: [0] cache pages far once cold, [1] its pages, [2] seconds to get there, [3] request
 * pages far then, [4] their pages, [5] cache pages far once busy again, [6] its pages, [7]
 * seconds to get there, [8] wrong bytes, [9] the child forked while bags moved exited 0,
 * [10] a fork was made. */
static void *auto_cache_thread(void *argument) {
    struct worker *w = argument;
    struct auto_state *state = w->context;
    thread_start(w);
    char **cache = xmap(sizeof *cache * AUTO_ENTRIES);
    for (int i = 0; i < AUTO_ENTRIES; i++) {
        cache[i] = auto_cache_alloc(AUTO_ENTRY);
        if (!cache[i])
            die("malloc");
        memset(cache[i], i, AUTO_ENTRY);
    }
    long far = 0, total = 1;
    double began = now_seconds(), built = began;
    int forked = 0;
    while (now_seconds() - began < state->wait_s) {
        auto_sample(state, cache, (long)((now_seconds() - built) * 1000));
        auto_count(cache, AUTO_ENTRIES, AUTO_ENTRY, state->far_os, &far, &total);
        if (far * 100 >= total * AUTO_COLD_FAR_PERCENT)
            break;
        if (!forked && far > 0) {
            /* Bags are moving: a fork now waits for the maintenance thread's locks; the child
             * reads every entry, allocates and frees, and exits. */
            forked = 1;
            pid_t pid = fork();
            if (pid == 0) {
                long wrong = 0;
                for (int i = 0; i < AUTO_ENTRIES; i++)
                    wrong += cache[i][AUTO_ENTRY - 1] != (char)i;
                void *p = malloc(AUTO_ENTRY);
                free(p);
                /* The child lives on a while (as a busy machine's child may): the kernel
                 * moves no page it shares, so those bags wait for a later pass. */
                usleep(AUTO_CHILD_LINGER_US);
                _exit(wrong == 0 && p ? 0 : 1);
            }
            int status = 0;
            w->figures[9] = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                            WEXITSTATUS(status) == 0;
        }
        usleep(250000);
    }
    w->figures[10] = forked;
    w->figures[0] = far;
    w->figures[1] = total;
    w->figures[2] = (long)(now_seconds() - began);
    while (!state->requests_ready)
        usleep(1000);
    auto_count(state->requests + AUTO_REQUESTS / 2, AUTO_REQUESTS / 2, AUTO_REQUEST,
               state->far_os, &w->figures[3], &w->figures[4]);
    /* The cache site turns busy: entries made and dropped in batches (refills and returns),
     * until its old entries are back near. */
    char **scratch = xmap(sizeof *scratch * 4096);
    began = now_seconds();
    while (now_seconds() - began < state->wait_s) {
        double round = now_seconds();
        while (now_seconds() - round < 0.25) {
            for (int i = 0; i < 4096; i++)
                scratch[i] = auto_cache_alloc(AUTO_ENTRY);
            for (int i = 0; i < 4096; i++)
                free(scratch[i]);
        }
        auto_sample(state, cache, (long)((now_seconds() - built) * 1000));
        auto_count(cache, AUTO_ENTRIES, AUTO_ENTRY, state->far_os, &far, &total);
        if (far * 100 <= total * 10)
            break;
    }
    /* A last second of the cache left alone again (it cools once more). */
    for (int i = 0; i < 4; i++) {
        usleep(250000);
        auto_sample(state, cache, (long)((now_seconds() - built) * 1000));
    }
    w->figures[5] = far;
    w->figures[6] = total;
    w->figures[7] = (long)(now_seconds() - began);
    long wrong = 0;
    for (int i = 0; i < AUTO_ENTRIES; i++) {
        for (int b = 0; b < AUTO_ENTRY; b++)
            wrong += cache[i][b] != (char)i;
        free(cache[i]);
    }
    w->figures[8] = wrong;
    state->stop = 1;
    return NULL;
}

/* With NODALLOC_CALLSITE=4096, NODALLOC_TIERING=auto and NODALLOC_COOLING=1000 (the child
 * below): a cache site fills 32 MiB and goes quiet while a request site churns. The cache turns
 * cold and at least AUTO_COLD_FAR_PERCENT % of its pages move to the far node, the requests'
 * stay at least 99 % near; the cache site turning busy again brings at least 90 % of its pages
 * back near; every cache entry keeps its contents. */
void test_auto_tiering(const char *test) {
    const char *assignments[] = {"NODALLOC_CALLSITE=4096", "NODALLOC_TIERING=auto",
                                 "NODALLOC_COOLING=1000", NULL};
    run_reporting_child(test, "auto_tiering.child", "-", assignments);
}

/* The same with every mbind(2) failing with EPERM (a seccomp filter, as mbind_fails sets):
 * nodalloc warns and leaves placement to the kernel; the workload runs to its end (each phase
 * waits 3 s), every cache entry keeps its contents, and the process exits cleanly. */
void test_auto_tiering_refused(const char *test) {
    static const int eperm = EPERM;
    const char *assignments[] = {"NODALLOC_CALLSITE=4096", "NODALLOC_TIERING=auto",
                                 "NODALLOC_COOLING=1000", NULL};
    child_hook = hook_seccomp_mbind;
    child_hook_argument = &eperm;
    run_reporting_child(test, "auto_tiering.child", "refused", assignments);
    child_hook = NULL;
    child_hook_argument = NULL;
}

void child_auto_tiering(const char *argument) {
    int refused = !strcmp(argument, "refused");
    const char *test = refused ? "auto_tiering_refused" : "auto_tiering";
    struct auto_state state;
    memset(&state, 0, sizeof state);
    state.wait_s = refused ? AUTO_REFUSED_WAIT_S : AUTO_WAIT_S;
    state.far_os = os_id_of_index(cpuless_node());
    first_malloc();
    struct worker w[2];
    memset(w, 0, sizeof w);
    for (int i = 0; i < 2; i++) {
        w[i].context = &state;
        worker_pin(&w[i], agreeing_cpu_node(0));
    }
    start_workers(&w[1], 1, auto_request_thread);
    start_workers(&w[0], 1, auto_cache_thread);
    join_workers(w, 2);
    long passes, cpu_ms, moved_far, moved_near, partly;
    auto_figures(&passes, &cpu_ms, &moved_far, &moved_near, &partly);
    long *f = w[0].figures;
    int placed = f[1] > 0 && f[0] * 100 >= f[1] * AUTO_COLD_FAR_PERCENT && f[4] > 0 &&
                 f[3] * 100 <= f[4] * 1 && f[6] > 0 && f[5] * 100 <= f[6] * 10;
    /* A fork while bags moved (when one was seen moving) left a sound child. */
    int fork_ok = !f[10] || f[9];
    int met = state.far_os >= 0 && f[8] == 0 && fork_ok && (refused || placed);
    char cold[64], requests[64], back[64];
    fraction(cold, sizeof cold, f[0], f[1]);
    fraction(requests, sizeof requests, f[3], f[4]);
    fraction(back, sizeof back, f[5], f[6]);
    /* The series, for the benchmark's plot (docs/BENCHMARKS.md): MiB near and far. */
    for (int i = 0; i < state.sampled; i++) {
        long *sample = state.samples[i];
        long page_kib = (long)PAGE >> 10;
        out("SERIES %s ms=%ld cache_near_kib=%ld cache_far_kib=%ld request_near_kib=%ld "
            "request_far_kib=%ld\n",
            test, sample[0], (sample[2] - sample[1]) * page_kib, sample[1] * page_kib,
            (sample[4] - sample[3]) * page_kib, sample[3] * page_kib);
    }
    out("RESULT %s %s %s cache_far_when_cold=%s after_s=%ld request_far=%s "
        "cache_far_when_busy_again=%s after_s=%ld wrong_bytes=%ld far_node=node%d "
        "bags_moved_far=%ld back_near=%ld moves_left_part_done=%ld maintenance_passes=%ld "
        "maintenance_cpu_ms=%ld forked_while_moving=%ld child_ok=%ld\n",
        test, allocator, verdict(met), cold, f[2], requests, back, f[7], f[8], state.far_os,
        moved_far, moved_near, partly, passes, cpu_ms, f[10], f[9]);
}
