/*
 * Block-walk probe: ROUNDS times, allocates N blocks of SIZE bytes, writes the first, the middle
 * and the last word of each, then checks those words and frees every block in allocation order.
 * Prints the nanoseconds per block (allocation, writes, check and free). Blocks a page apart
 * share the cache sets of their heads and tails, so at SIZE 4096 the figure shows whether an
 * allocator's 4 KiB blocks spread over the cache (docs/JOURNAL.md, "the 4 KiB class's stride").
 *
 *   cc -O2 -o /tmp/block_walk scripts/probes/block_walk.c
 *   LD_PRELOAD=target/release/libnodalloc.so /tmp/block_walk 4096 1000 1000
 *
 * Nothing here is part of the library.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s SIZE N ROUNDS\n", argv[0]);
        return 2;
    }
    size_t size = strtoul(argv[1], NULL, 10);
    size_t n = strtoul(argv[2], NULL, 10);
    size_t rounds = strtoul(argv[3], NULL, 10);
    if (size < 8 || n == 0 || rounds == 0) {
        fprintf(stderr, "SIZE must be at least 8, N and ROUNDS at least 1\n");
        return 2;
    }
    uint64_t **blocks = malloc(n * sizeof *blocks);
    if (blocks == NULL)
        return 1;
    size_t words = size / 8;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (size_t r = 0; r < rounds; r++) {
        for (size_t i = 0; i < n; i++) {
            uint64_t *block = malloc(size);
            if (block == NULL)
                return 1;
            block[0] = i;
            block[words / 2] = i + r;
            block[words - 1] = i ^ r;
            blocks[i] = block;
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t *block = blocks[i];
            if (block[0] != i || block[words / 2] != i + r || block[words - 1] != (i ^ r))
                abort();
            free(block);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("%.1f\n", ns / ((double)n * rounds));
    free(blocks);
    return 0;
}
