/* First-class heaps through the C API (nodalloc_heap_*), blocks freed with plain free().
 *
 * Usage: heaps            the whole contract (below), ending in "ok heaps: ..."
 *        heaps CASE       a misuse, after printing "pointer <heap handle>": double-destroy,
 *                         malloc-after-destroy (both must abort naming the heap); or after
 *                         printing "pointer <block>": free-after-destroy (a block freed after
 *                         its heap was destroyed: must abort naming the block).
 *
 * Contract: blocks of every size (small, 4 KiB, large, aligned, calloc zeroed) come from the
 * heap (nodalloc_heap_of) and hold their contents; free() of heap blocks from another thread
 * returns them to the heap (stats); realloc() keeps a block in its heap; a limit is exact (NULL +
 * ENOMEM past it, room again after frees) and heaps cannot take each other's room; destroy gives
 * everything back; bad options are EINVAL; malloc's blocks are no heap's.
 */
#include "check.h"

#include <pthread.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define COUNT 3000

static nodalloc_heap_t *new_heap(int node, size_t limit, const char *name) {
    nodalloc_heap_options_t options = {.node = node, .limit = limit, .name = name};
    return NODALLOC(nodalloc_heap_new)(&options);
}

static nodalloc_heap_stats_t stats_of(nodalloc_heap_t *heap) {
    nodalloc_heap_stats_t stats;
    CHECK(NODALLOC(nodalloc_heap_stats)(heap, &stats) == 0, "nodalloc_heap_stats failed");
    return stats;
}

static void *blocks[COUNT];
static size_t lengths[COUNT];

static void *free_half(void *argument) {
    (void)argument;
    for (size_t i = 0; i < COUNT; i += 2) {
        CHECK_PATTERN(blocks[i], lengths[i], i);
        free(blocks[i]);
        blocks[i] = NULL;
    }
    return NULL;
}

static size_t size_of(size_t i) {
    static const size_t sizes[] = {1, 24, 100, 700, 4096, 5000, 40 * KIB, 300 * KIB};
    return sizes[i % 8] + i % 13;
}

int main(int argc, char **argv) {
    require_nodalloc();
    if (argc == 2 && strcmp(argv[1], "free-after-destroy") == 0) {
        nodalloc_heap_t *heap = NODALLOC(nodalloc_heap_new)(NULL);
        CHECK(heap != NULL, "nodalloc_heap_new(NULL) failed");
        void *block = NODALLOC(nodalloc_heap_malloc)(heap, opaque_size(100));
        CHECK(block != NULL, "heap malloc failed");
        NODALLOC(nodalloc_heap_destroy)(heap);
        printf("pointer %p\n", block);
        fflush(stdout);
        free(block);
        printf("NOT_CAUGHT\n");
        return 1;
    }
    if (argc == 2 && strcmp(argv[1], "placement") == 0) {
        /* Run with NODALLOC_SIMULATE_NODES=3 NODALLOC_TIERS=far:2: a heap on node 1 and a heap
         * on the far node hand out blocks of those nodes, small and large. */
        static const size_t sizes[] = {16, 3000, 70 * KIB, 2 * MIB};
        nodalloc_heap_t *on_one = new_heap(1, 0, "one");
        nodalloc_heap_t *far = new_heap(NODALLOC_HEAP_NODE_FAR, 0, "far");
        CHECK(on_one != NULL && far != NULL, "heaps failed: %s", strerror(errno));
        CHECK(stats_of(on_one).node == 1 && stats_of(far).node == 2, "heap nodes %d and %d",
              stats_of(on_one).node, stats_of(far).node);
        for (size_t i = 0; i < 400; i++) {
            void *a = NODALLOC(nodalloc_heap_malloc)(on_one, opaque_size(sizes[i % 4]));
            void *b = NODALLOC(nodalloc_heap_malloc)(far, opaque_size(sizes[i % 4]));
            CHECK(a != NULL && b != NULL, "heap malloc(%zu) failed", sizes[i % 4]);
            CHECK(NODALLOC(nodalloc_node_of)(a) == 1, "a block of the node-1 heap is on node %d",
                  NODALLOC(nodalloc_node_of)(a));
            CHECK(NODALLOC(nodalloc_node_of)(b) == 2, "a block of the far heap is on node %d",
                  NODALLOC(nodalloc_node_of)(b));
            if (i % 2 == 0) {
                free(a);
                free(b);
            }
        }
        NODALLOC(nodalloc_heap_destroy)(on_one);
        NODALLOC(nodalloc_heap_destroy)(far);
        return finish("heaps");
    }
    if (argc == 2) {
        nodalloc_heap_t *heap = NODALLOC(nodalloc_heap_new)(NULL);
        CHECK(heap != NULL, "nodalloc_heap_new(NULL) failed");
        NODALLOC(nodalloc_heap_destroy)(heap);
        printf("pointer %p\n", (void *)heap);
        fflush(stdout);
        if (strcmp(argv[1], "double-destroy") == 0) {
            NODALLOC(nodalloc_heap_destroy)(heap);
        } else if (strcmp(argv[1], "malloc-after-destroy") == 0) {
            (void)NODALLOC(nodalloc_heap_malloc)(heap, opaque_size(64));
        }
        printf("NOT_CAUGHT\n");
        return 1;
    }

    /* Bad options. */
    errno = 0;
    CHECK(new_heap(4096, 0, "x") == NULL && errno == EINVAL, "a heap on node 4096: errno %d",
          errno);
    errno = 0;
    CHECK(new_heap(-1, 100, "x") == NULL && errno == EINVAL, "a 100-byte limit: errno %d", errno);

    /* Blocks of every size, contents, ownership, stats. */
    nodalloc_heap_t *heap = new_heap(-1, 0, "c-heap");
    CHECK(heap != NULL, "nodalloc_heap_new failed: %s", strerror(errno));
    size_t live = 0;
    for (size_t i = 0; i < COUNT; i++) {
        lengths[i] = size_of(i);
        blocks[i] = NODALLOC(nodalloc_heap_malloc)(heap, opaque_size(lengths[i]));
        CHECK(blocks[i] != NULL, "heap malloc(%zu) failed", lengths[i]);
        CHECK(NODALLOC(nodalloc_heap_of)(blocks[i]) == heap, "block %zu of size %zu is not the heap's",
              i, lengths[i]);
        CHECK(is_aligned(blocks[i], 16), "block %zu misaligned", i);
        fill(blocks[i], lengths[i], i);
        live += lengths[i];
    }
    nodalloc_heap_stats_t stats = stats_of(heap);
    CHECK(stats.blocks == COUNT, "stats say %zu blocks, not %d", stats.blocks, COUNT);
    CHECK(stats.live >= live && stats.committed >= stats.live, "live %zu < %zu or committed %zu",
          stats.live, live, stats.committed);
    CHECK(strcmp(stats.name, "c-heap") == 0, "name '%s'", stats.name);
    void *global = malloc(opaque_size(64));
    CHECK(NODALLOC(nodalloc_heap_of)(global) == NULL, "malloc's block is a heap's");
    free(global);

    /* calloc zeroes (also over memory the heap used before), aligned_alloc aligns. */
    for (size_t i = 0; i < 200; i++) {
        unsigned char *z = NODALLOC(nodalloc_heap_calloc)(heap, opaque_size(i + 1), opaque_size(37));
        CHECK(z != NULL, "heap calloc failed");
        for (size_t j = 0; j < (i + 1) * 37; j++) {
            CHECK(z[j] == 0, "calloc block byte %zu is %d", j, z[j]);
        }
        memset(z, 0xEE, (i + 1) * 37);
        free(z);
    }
    for (size_t align = 16; align <= 2 * MIB; align *= 4) {
        void *a = NODALLOC(nodalloc_heap_aligned_alloc)(heap, opaque_size(align), opaque_size(100));
        CHECK(a != NULL && is_aligned(a, align), "aligned_alloc(%zu) gave %p", align, a);
        CHECK(NODALLOC(nodalloc_heap_of)(a) == heap, "aligned block not the heap's");
        free(a);
    }
    errno = 0;
    CHECK(NODALLOC(nodalloc_heap_aligned_alloc)(heap, opaque_size(24), opaque_size(8)) == NULL &&
              errno == EINVAL,
          "aligned_alloc(24) errno %d", errno);

    /* free() from another thread. */
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, free_half, NULL) == 0, "pthread_create failed");
    CHECK(pthread_join(thread, NULL) == 0, "pthread_join failed");
    stats = stats_of(heap);
    CHECK(stats.blocks == COUNT / 2, "after freeing half: %zu blocks", stats.blocks);

    /* realloc keeps a block in its heap, contents kept. */
    for (size_t i = 1; i < COUNT; i += 2) {
        size_t grown = lengths[i] * 3 + 10;
        void *p = realloc(blocks[i], opaque_size(grown));
        CHECK(p != NULL, "realloc failed");
        CHECK(NODALLOC(nodalloc_heap_of)(p) == heap, "realloc moved block %zu out of its heap", i);
        CHECK_PATTERN(p, lengths[i], i);
        blocks[i] = p;
    }
    for (size_t i = 1; i < COUNT; i += 2) {
        free(blocks[i]);
    }
    stats = stats_of(heap);
    /* The heap's front lists may keep a few bags (two batches a class at most). */
    CHECK(stats.blocks == 0 && stats.committed <= 4 * MIB, "emptied heap: %zu blocks, %zu committed",
          stats.blocks, stats.committed);

    /* Limits: exact, ENOMEM, recovery, heaps independent. */
    nodalloc_heap_t *bounded = new_heap(-1, 8 * MIB, "bounded");
    nodalloc_heap_t *other = new_heap(-1, 2 * MIB, "other");
    CHECK(bounded != NULL && other != NULL, "bounded heaps failed");
    size_t count = 0;
    for (;;) {
        errno = 0;
        void *p = NODALLOC(nodalloc_heap_malloc)(bounded, opaque_size(size_of(count)));
        if (p == NULL) {
            CHECK(errno == ENOMEM, "a full heap failed with errno %d", errno);
            break;
        }
        CHECK(count < COUNT, "the 8 MiB heap never filled");
        blocks[count++] = p;
    }
    stats = stats_of(bounded);
    CHECK(stats.peak <= 8 * MIB && stats.committed > 4 * MIB, "limit 8 MiB: peak %zu, committed %zu",
          stats.peak, stats.committed);
    size_t other_bytes = 0;
    while (NODALLOC(nodalloc_heap_malloc)(other, opaque_size(1000)) != NULL) {
        other_bytes += 1000;
    }
    CHECK(other_bytes > MIB, "the other heap got only %zu bytes", other_bytes);
    CHECK(stats_of(other).peak <= 2 * MIB, "other heap past its limit");
    for (size_t i = 0; i < count; i++) {
        free(blocks[i]);
    }
    void *big = NODALLOC(nodalloc_heap_malloc)(bounded, opaque_size(7 * MIB));
    CHECK(big != NULL, "no room in the bounded heap after every block came back");
    fill(big, 7 * MIB, 9);
    CHECK_PATTERN(big, 7 * MIB, 9);

    /* Destroy gives everything back (other's blocks were never freed). */
    NODALLOC(nodalloc_heap_destroy)(other);
    NODALLOC(nodalloc_heap_destroy)(bounded);
    NODALLOC(nodalloc_heap_destroy)(heap);
    /* Slots are reused: a new heap works. */
    nodalloc_heap_t *again = NODALLOC(nodalloc_heap_new)(NULL);
    CHECK(again != NULL && again != other, "a new heap after destroys: %p", (void *)again);
    void *p = NODALLOC(nodalloc_heap_malloc)(again, opaque_size(100));
    CHECK(p != NULL, "malloc in the new heap failed");
    NODALLOC(nodalloc_heap_destroy)(again);
    return finish("heaps");
}
