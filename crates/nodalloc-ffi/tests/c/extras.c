/* nodalloc's own functions: nodalloc_node_of, nodalloc_malloc_on_node, nodalloc_set_limit and
 * nodalloc_stats_print.
 *
 * Usage: extras [NODES]. NODES (default 1) is how many nodes nodalloc should see: the harness
 * passes 4 together with NODALLOC_SIMULATE_NODES=4.
 */
#include "check.h"

#include <limits.h>
#include <sys/mman.h>

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)

static int some_global;

static void node_of_names_node_zero_for_the_main_threads_blocks(void) {
    static const size_t sizes[] = {1, 24, 4096, 100 * KIB, 256 * KIB, 256 * KIB + 1, 4 * MIB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *block = malloc(opaque_size(sizes[i]));
        CHECK(block != NULL, "malloc(%zu) failed", sizes[i]);
        /* The main thread lives on the node of its CPU: node 0 here (on one node, or started
         * on CPU 0 alone with simulated nodes, as the harness does). */
        int node = NODALLOC(nodalloc_node_of)(block);
        CHECK(node == 0, "nodalloc_node_of(malloc(%zu)) = %d, expected 0", sizes[i], node);
        /* Any byte inside the block belongs to the same node. */
        int last = NODALLOC(nodalloc_node_of)((char *)block + sizes[i] - 1);
        CHECK(last == 0, "nodalloc_node_of(last byte of malloc(%zu)) = %d", sizes[i], last);
        free(block);
    }
    void *zeroed = calloc(opaque_size(10), opaque_size(10));
    CHECK(NODALLOC(nodalloc_node_of)(zeroed) == 0, "nodalloc_node_of(calloc) != 0");
    free(zeroed);
    void *aligned = aligned_alloc(opaque_size(4096), opaque_size(4096));
    CHECK(NODALLOC(nodalloc_node_of)(aligned) == 0, "nodalloc_node_of(aligned_alloc) != 0");
    free(aligned);
}

static void node_of_is_minus_one_for_memory_nodalloc_did_not_hand_out(void) {
    int on_stack = 0;
    CHECK(NODALLOC(nodalloc_node_of)(opaque_pointer(&on_stack)) == -1,
          "nodalloc_node_of(stack) = %d", NODALLOC(nodalloc_node_of)(opaque_pointer(&on_stack)));
    CHECK(NODALLOC(nodalloc_node_of)(opaque_pointer(&some_global)) == -1,
          "nodalloc_node_of(global) = %d",
          NODALLOC(nodalloc_node_of)(opaque_pointer(&some_global)));
    CHECK(NODALLOC(nodalloc_node_of)(opaque_pointer(NULL)) == -1, "nodalloc_node_of(NULL) = %d",
          NODALLOC(nodalloc_node_of)(opaque_pointer(NULL)));
    CHECK(NODALLOC(nodalloc_node_of)((void *)(uintptr_t)opaque_size(SIZE_MAX - 15)) == -1,
          "nodalloc_node_of(0xfff...f0) is not -1");
    void *mapped = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(mapped != MAP_FAILED, "mmap failed");
    CHECK(NODALLOC(nodalloc_node_of)(mapped) == -1, "nodalloc_node_of(mmap'd page) = %d",
          NODALLOC(nodalloc_node_of)(mapped));
    munmap(mapped, 4096);
}

static void malloc_on_node_places_blocks_on_every_node(int nodes) {
    static const size_t sizes[] = {1, 100, 4096, 256 * KIB, 256 * KIB + 1, 3 * MIB};
    for (int node = 0; node < nodes; node++) {
        void *blocks[sizeof sizes / sizeof sizes[0]];
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            errno = 0;
            blocks[i] = NODALLOC(nodalloc_malloc_on_node)(opaque_size(sizes[i]), node);
            CHECK(blocks[i] != NULL, "nodalloc_malloc_on_node(%zu, %d) failed: %s", sizes[i],
                  node, strerror(errno));
            CHECK(NODALLOC(nodalloc_node_of)(blocks[i]) == node,
                  "nodalloc_malloc_on_node(%zu, %d) landed on node %d", sizes[i], node,
                  NODALLOC(nodalloc_node_of)(blocks[i]));
            CHECK(is_aligned(blocks[i], sizes[i] < 16 ? 1 : 16),
                  "nodalloc_malloc_on_node(%zu, %d) = %p is misaligned", sizes[i], node,
                  blocks[i]);
            CHECK(malloc_usable_size(blocks[i]) >= sizes[i],
                  "nodalloc_malloc_on_node(%zu, %d) has %zu usable bytes", sizes[i], node,
                  malloc_usable_size(blocks[i]));
            fill(blocks[i], sizes[i], (size_t)node * 100 + i);
        }
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            CHECK_PATTERN(blocks[i], sizes[i], (size_t)node * 100 + i);
        }
        /* realloc keeps the contents; free takes the block back whatever its node. */
        void *moved = realloc(blocks[1], opaque_size(1000));
        CHECK(moved != NULL, "realloc of a block from node %d failed", node);
        CHECK_PATTERN(moved, 100, (size_t)node * 100 + 1);
        blocks[1] = moved;
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            free(blocks[i]);
        }
    }
}

static void malloc_on_node_rejects_missing_nodes_with_einval(int nodes) {
    const int bad[] = {nodes, nodes + 1, 32, 64, 1024, INT_MAX, -1, INT_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_FAILS_WITH(NODALLOC(nodalloc_malloc_on_node)(opaque_size(64), opaque_int(bad[i])),
                         EINVAL);
    }
    CHECK_FAILS_WITH(NODALLOC(nodalloc_malloc_on_node)(opaque_size(SIZE_MAX), 0), ENOMEM);
}

static void set_limit_refuses_allocations_beyond_it_until_removed(void) {
    const size_t limit = 256 * MIB, beyond = 512 * MIB;
    CHECK(NODALLOC(nodalloc_set_limit)(limit) == 0, "nodalloc_set_limit(256 MiB) failed: %s",
          strerror(errno));
    void *small = malloc(opaque_size(1000));
    void *medium = malloc(opaque_size(MIB));
    CHECK(small != NULL && medium != NULL, "allocations far below the limit failed");
    fill(medium, MIB, 5);

    CHECK_FAILS_WITH(malloc(opaque_size(beyond)), ENOMEM);
    CHECK_FAILS_WITH(calloc(opaque_size(1), opaque_size(beyond)), ENOMEM);
    CHECK_FAILS_WITH(aligned_alloc(opaque_size(4096), opaque_size(beyond)), ENOMEM);
    CHECK_FAILS_WITH(NODALLOC(nodalloc_malloc_on_node)(opaque_size(beyond), 0), ENOMEM);
    void *unset = NULL;
    CHECK(posix_memalign(&unset, opaque_size(64), opaque_size(beyond)) == ENOMEM,
          "posix_memalign beyond the limit did not return ENOMEM");
    /* A realloc refused by the limit leaves the block as it was. */
    CHECK_FAILS_WITH(realloc(medium, opaque_size(beyond)), ENOMEM);
    CHECK_PATTERN(medium, MIB, 5);

    /* Many allocations that together exceed the limit: one of them is refused, and every one
     * granted before it is usable. */
    enum { MAX_CHUNKS = 64 };
    void *chunks[MAX_CHUNKS];
    int granted = 0;
    while (granted < MAX_CHUNKS) {
        chunks[granted] = malloc(opaque_size(8 * MIB));
        if (chunks[granted] == NULL) {
            CHECK(errno == ENOMEM, "refused malloc set errno %d, not ENOMEM", errno);
            break;
        }
        memset(chunks[granted], granted, 8 * MIB);
        granted++;
    }
    CHECK(granted < MAX_CHUNKS, "%d allocations of 8 MiB all succeeded under a 256 MiB limit",
          granted);
    CHECK(granted >= 16, "only %d allocations of 8 MiB fit under a 256 MiB limit", granted);
    for (int i = 0; i < granted; i++) {
        free(chunks[i]);
    }
    /* Freed memory counts no more: the same allocations fit again. */
    void *again = malloc(opaque_size(64 * MIB));
    CHECK(again != NULL, "64 MiB under the limit failed after freeing: %s", strerror(errno));
    free(again);

    CHECK(NODALLOC(nodalloc_set_limit)(0) == 0, "nodalloc_set_limit(0) failed");
    void *large = malloc(opaque_size(beyond));
    CHECK(large != NULL, "malloc(512 MiB) failed after the limit was removed: %s",
          strerror(errno));
    ((char *)large)[0] = 1;
    ((char *)large)[beyond - 1] = 1;
    free(large);
    void *grown = realloc(medium, opaque_size(beyond));
    CHECK(grown != NULL, "realloc to 512 MiB failed after the limit was removed");
    CHECK_PATTERN(grown, MIB, 5);
    free(grown);
    free(small);
}

/* The statistics go to the descriptor given, starting with the version line. */
static void stats_print_writes_the_report_to_the_descriptor(void) {
    FILE *file = tmpfile();
    CHECK(file != NULL, "tmpfile failed");
    int fd = fileno(file);
    NODALLOC(nodalloc_stats_print)(fd);
    long length = lseek(fd, 0, SEEK_END);
    CHECK(length > 20, "nodalloc_stats_print wrote %ld bytes", length);
    char head[64] = {0};
    CHECK(pread(fd, head, sizeof head - 1, 0) > 0, "cannot read the report back");
    CHECK(strncmp(head, "nodalloc 0.1.0:", 15) == 0, "the report starts with \"%s\"", head);
    fclose(file);
    /* A bad descriptor is the caller's problem, not a crash. */
    NODALLOC(nodalloc_stats_print)(opaque_int(-1));
    NODALLOC(nodalloc_stats_print)(opaque_int(1 << 20));
}

int main(int argc, char **argv) {
    int nodes = argc > 1 ? atoi(argv[1]) : 1;
    require_nodalloc();
    node_of_names_node_zero_for_the_main_threads_blocks();
    node_of_is_minus_one_for_memory_nodalloc_did_not_hand_out();
    malloc_on_node_places_blocks_on_every_node(nodes);
    malloc_on_node_rejects_missing_nodes_with_einval(nodes);
    set_limit_refuses_allocations_beyond_it_until_removed();
    stats_print_writes_the_report_to_the_descriptor();
    return finish("extras");
}
