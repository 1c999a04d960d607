/*
 * Block-RSS probe: allocates N blocks of SIZE bytes (with `posix_memalign(4096)` when ALIGNED
 * is 1, `malloc` when 0), writes each whole, and prints what the process's resident set grew
 * by, against the bytes asked for; then frees every other block and prints the growth again.
 *
 *   cc -O2 -o /tmp/block_rss scripts/probes/block_rss.c
 *   LD_PRELOAD=target/release/libnodalloc.so /tmp/block_rss 10000 0 4096
 *
 * Nothing here is part of the library.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Resident KiB of the process, from /proc/self/statm (4 KiB pages); -1 if unreadable. */
static long resident_kib(void) {
    FILE *statm = fopen("/proc/self/statm", "r");
    long size = 0, resident = -1;
    if (statm == NULL)
        return -1;
    if (fscanf(statm, "%ld %ld", &size, &resident) != 2)
        resident = -1;
    fclose(statm);
    return resident < 0 ? -1 : resident * 4;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s N ALIGNED SIZE\n", argv[0]);
        return 2;
    }
    size_t n = strtoul(argv[1], NULL, 10);
    int aligned = atoi(argv[2]);
    size_t size = strtoul(argv[3], NULL, 10);
    void **blocks = malloc(n * sizeof *blocks);
    if (blocks == NULL || n == 0 || size == 0)
        return 1;
    long before = resident_kib();
    for (size_t i = 0; i < n; i++) {
        if (aligned) {
            if (posix_memalign(&blocks[i], 4096, size) != 0)
                return 1;
        } else if ((blocks[i] = malloc(size)) == NULL) {
            return 1;
        }
        memset(blocks[i], 1, size);
    }
    long live = resident_kib();
    for (size_t i = 0; i < n; i += 2)
        free(blocks[i]);
    long half = resident_kib();
    size_t asked = n * size / 1024;
    printf("asked %zu KiB: resident +%ld KiB (%.3f of it); half freed: +%ld KiB\n", asked,
           live - before, (double)(live - before) / (double)asked, half - before);
    return 0;
}
