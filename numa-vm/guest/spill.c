/* small_node_spill and node_fills_up (nodalloc only): what happens when a node has no more room.
 * When a thread's home region is full, nodalloc serves the rest from the nearest node (with
 * CPUs) by the home node's /sys distance row, never farther, never back and forth, and names
 * the node it used truthfully (every page is where nodalloc_node_of says). When a node's
 * physical memory runs out (the memory-only node of numa-vm/run --memory-only-node), every
 * block asked of it is still served: the node holds at least half its size and the kernel puts
 * the rest on the nearest node.
 */
#include "harness.h"
#include "tests.h"

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
void child_small_node_spill(const char *argument) {
    (void)argument;
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

void test_small_node_spill(const char *test) {
    const char *map_path = "/tmp/numatest-node0.map";
    char map_text[32];
    snprintf(map_text, sizeof map_text, "%d\n", cpu_node_os_id(0));
    if (write_file(map_path, map_text) != 0)
        die("write-map-file");
    const char *assignments[] = {"NODALLOC_REGION_SIZE=64M",
                                 "NODALLOC_BIND=map:/tmp/numatest-node0.map", NULL};
    run_reporting_child(test, "small_node_spill.child", "-", assignments);
}

/* ---------------------------------------------------------------- node_fills_up */

/* A node whose physical memory runs out (the 256 MiB memory-only node): 4 MiB blocks are
 * placed there with nodalloc_malloc_on_node until 1.5 times the node's size is held. Every block
 * must be served, the program keeps running, the node itself holds a large share, and the pages
 * that did not fit go to other nodes (the region's MPOL_PREFERRED lets the kernel fall back;
 * MPOL_BIND would fail). */
void test_node_fills_up(const char *test) {
    int small = cpuless_node();
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
