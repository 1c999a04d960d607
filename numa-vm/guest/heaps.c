/* First-class heaps on a chosen node (nodalloc_heap_new with a node): a thread of the first
 * CPU node creates a heap on every usable node in turn (CPU-less memory nodes included),
 * allocates and fills 24 MiB of blocks of every size range from it, and counts where their
 * pages are (move_pages). nodalloc passes when, on every node, at least 99 % of the heap's
 * pages are on the heap's node, every block is the heap's (nodalloc_heap_of) and on that node
 * (nodalloc_node_of), and the heap's statistics name the node.
 */
#include "harness.h"
#include "tests.h"

#include <dlfcn.h>

#define HEAP_BYTES (24L << 20)
#define HEAP_BLOCKS 8192

typedef struct {
    int node;
    size_t limit;
    const char *name;
} heap_options;

typedef struct {
    int node;
    size_t limit, committed, peak, live, blocks, bags, large_blocks, large_bytes;
    unsigned long long allocs, frees;
    char name[41];
} heap_stats;

/* figures: per usable node index n, [n] pages on the heap's node and [8 + n] its pages; [15]
 * blocks that were not the heap's or named another node. */
static void *heaps_thread(void *argument) {
    struct worker *w = argument;
    thread_start(w);
    void *(*heap_new)(const heap_options *) = dlsym(RTLD_DEFAULT, "nodalloc_heap_new");
    void *(*heap_malloc)(void *, size_t) = dlsym(RTLD_DEFAULT, "nodalloc_heap_malloc");
    void *(*heap_of)(const void *) = dlsym(RTLD_DEFAULT, "nodalloc_heap_of");
    int (*heap_stats_of)(void *, heap_stats *) = dlsym(RTLD_DEFAULT, "nodalloc_heap_stats");
    void (*heap_destroy)(void *) = dlsym(RTLD_DEFAULT, "nodalloc_heap_destroy");
    if (!heap_new || !heap_malloc || !heap_of || !heap_stats_of || !heap_destroy)
        die("nodalloc_heap_* missing");
    static const size_t sizes[] = {48, 700, 3000, 20000, 1 << 20};
    struct page_set *set = xmap(sizeof *set);
    for (int n = 0; n < usable_count && n < 8; n++) {
        heap_options options = {.node = n, .limit = 0, .name = "guest"};
        void *heap = heap_new(&options);
        if (!heap)
            die("nodalloc_heap_new");
        heap_stats stats;
        if (heap_stats_of(heap, &stats) != 0 || stats.node != n)
            w->figures[15]++;
        page_set_init(set, HEAP_BYTES / PAGE + HEAP_BLOCKS * 2);
        long total = 0;
        for (int i = 0; total < HEAP_BYTES && i < HEAP_BLOCKS; i++) {
            size_t size = sizes[i % 5];
            char *p = heap_malloc(heap, size);
            if (!p)
                die("nodalloc_heap_malloc");
            memset(p, i, size);
            if (heap_of(p) != heap || na_node_of(p) != n)
                w->figures[15]++;
            page_set_add(set, p, size);
            total += (long)size;
        }
        long per_node[MAX_NODES], absent;
        page_set_count(set, per_node, &absent);
        w->figures[n] = per_node[os_id_of_index(n)];
        w->figures[8 + n] = set->count;
        heap_destroy(heap);
    }
    return NULL;
}

void test_heaps_on_node(const char *test) {
    first_malloc();
    struct worker *w = xmap(sizeof *w);
    w->index = 0;
    worker_pin(w, agreeing_cpu_node(0));
    start_workers(w, 1, heaps_thread);
    join_workers(w, 1);
    char per_node[512] = "";
    size_t used = 0;
    int met = w->figures[15] == 0;
    for (int n = 0; n < usable_count && n < 8; n++) {
        long on = w->figures[n], pages = w->figures[8 + n];
        met = met && pages > 0 && on * 100 >= pages * 99;
        struct node *node = usable_node(n);
        append(per_node, sizeof per_node, &used, "%snode%d%s:%ld/%ld", n ? "," : "",
               os_id_of_index(n), node && node->cpu_count == 0 ? "(cpuless)" : "", on, pages);
    }
    out("RESULT %s %s %s heap_pages_on_its_node=%s misplaced_blocks=%ld\n", test, allocator,
        verdict(met), per_node, w->figures[15]);
}
