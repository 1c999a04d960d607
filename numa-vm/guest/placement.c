/* placement and placement_agreeing: memory a thread allocates is on the node it runs on, for
 * every size range (64 B to a 64 MiB object), as the kernel sees it once every page is touched.
 * placement pins each thread before its first malloc in plain node order, against the order
 * nodalloc binds threads in, so it measures who wins the clash between a user's pin and
 * nodalloc's binding; placement_agreeing pins where nodalloc binds anyway and measures
 * placement alone. The peers run placement too: their figures are the comparison.
 */
#include "harness.h"
#include "tests.h"

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

void test_placement_plain(const char *test) { test_placement(test, 0); }

void test_placement_agreeing(const char *test) { test_placement(test, 1); }
