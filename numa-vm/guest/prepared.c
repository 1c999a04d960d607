/* prepared_on_node: with the maintenance thread (NODALLOC_BACKGROUND=1), chunks it populates
 * ahead of a growing heap land on the node whose region they belong to. One thread per node with
 * CPUs, one after the other, grows its heap by 2 MiB of 256 B objects every few milliseconds
 * (demand the maintenance thread follows, so the thread carves from chunks populated for it);
 * the maintenance thread itself is bound to no node. The test checks that the count of prepared
 * chunks rose while each thread grew, and that at least 99.9 % of the pages the thread was handed
 * are on its node, as the kernel sees them.
 */
#include "harness.h"
#include "tests.h"

#include <time.h>

enum {
    OBJECT = 256,
    STEPS = 24,
    PER_STEP = (2 << 20) / OBJECT, /* 2 MiB of objects per step */
};

/* The maintenance thread's prepared chunks so far, from nodalloc's statistics, -1 if absent. */
static long prepared_chunks(void) {
    const char *text = nodalloc_stats_text();
    const char *line = strstr(text, "maintenance thread: ");
    if (!line)
        return -1;
    char *mark = strstr(line, " chunks and ");
    if (!mark)
        return -1;
    while (mark > line && mark[-1] >= '0' && mark[-1] <= '9')
        mark--;
    return strtol(mark, NULL, 10);
}

static void *growing_thread(void *argument) {
    struct worker *w = argument;
    thread_start(w);
    long total = (long)STEPS * PER_STEP;
    char **objects = xmap(sizeof *objects * total);
    struct page_set set;
    page_set_init(&set, 2 * total);
    struct timespec pause = {0, 3 * 1000 * 1000};
    for (int step = 0; step < STEPS; step++) {
        for (long i = step * (long)PER_STEP; i < (step + 1) * (long)PER_STEP; i++) {
            objects[i] = malloc(OBJECT);
            if (!objects[i])
                die("malloc");
            objects[i][0] = (char)i;
            page_set_add(&set, objects[i], OBJECT);
        }
        nanosleep(&pause, NULL);
    }
    long per_node[MAX_NODES], absent;
    page_set_count(&set, per_node, &absent);
    w->figures[0] = per_node[w->node_os_id];
    w->figures[1] = set.count;
    for (long i = 0; i < total; i++)
        free(objects[i]);
    xunmap(objects, sizeof *objects * total);
    xunmap(set.pages, sizeof *set.pages * set.capacity);
    return NULL;
}

void test_prepared_on_node(const char *test) {
    first_malloc(); /* the main thread takes nodalloc's binding index 0 */
    long on = 0, total = 0;
    int met = 1, mismatches = 0;
    char per_node[1024] = "";
    size_t used = 0;
    for (int k = 0; k < cpu_node_count; k++) {
        struct worker w;
        memset(&w, 0, sizeof w);
        w.index = k;
        worker_pin(&w, agreeing_cpu_node(k));
        /* No line before the first thread starts the maintenance thread: none prepared. */
        long before = prepared_chunks();
        start_workers(&w, 1, growing_thread);
        join_workers(&w, 1);
        long after = prepared_chunks();
        long prepared = after < 0 ? -1 : after - (before < 0 ? 0 : before);
        mismatches += home_mismatches(&w, 1);
        on += w.figures[0];
        total += w.figures[1];
        if (prepared < 1 || w.figures[0] * 1000 < w.figures[1] * 999)
            met = 0;
        append(per_node, sizeof per_node, &used, "%snode%d:%ld/%ld,prepared=%ld", k ? "," : "",
               w.node_os_id, w.figures[0], w.figures[1], prepared);
    }
    char share[64];
    fraction(share, sizeof share, on, total);
    out("RESULT %s %s %s pages=%s home_mismatch=%d per_node=%s\n", test, allocator,
        verdict(met && mismatches == 0), share, mismatches, per_node);
}
