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
