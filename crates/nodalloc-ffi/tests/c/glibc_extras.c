/* The rest of glibc's malloc interface: the __libc_* names, malloc_trim, mallinfo and mallinfo2,
 * mallopt, malloc_stats, malloc_info, and C23's free_sized and free_aligned_sized. Each must be
 * nodalloc's (a block from glibc's allocator would be a foreign pointer at nodalloc's free) and
 * report nodalloc's heap.
 *
 * Usage: glibc_extras (every check; the harness sets NODALLOC_RETAIN=256M and a long
 * NODALLOC_DECOMMIT_DELAY, so freed memory stays committed until malloc_trim), or
 * glibc_extras free-sized-mismatch (prints `pointer 0x…`, then frees that block with
 * free_sized and a size of another class: nodalloc must abort naming it).
 */
#include "check.h"

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)

/* Not in glibc 2.36's headers. */
void *__libc_malloc(size_t size);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *ptr, size_t size);
void __libc_free(void *ptr);
void *__libc_memalign(size_t align, size_t size);
void *__libc_valloc(size_t size);
void *__libc_pvalloc(size_t size);
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t align, size_t size);
/* glibc 2.36 has no free_sized to link against: the preloaded build finds nodalloc's with
 * dlsym. */
#define FREE_SIZED NODALLOC(free_sized)
#define FREE_ALIGNED_SIZED NODALLOC(free_aligned_sized)

/* nodalloc's node of a block: -1 for anything nodalloc did not hand out. */
static int node_of(void *block) { return NODALLOC(nodalloc_node_of)(block); }

static void libc_names_are_nodallocs(void) {
    void *block = __libc_malloc(opaque_size(100));
    CHECK(block != NULL && node_of(block) >= 0, "__libc_malloc: %p is not nodalloc's", block);
    fill(block, 100, 1);
    free(block);
    block = malloc(opaque_size(100));
    __libc_free(block);
    __libc_free(NULL);
    unsigned char *zeroed = __libc_calloc(opaque_size(10), opaque_size(100));
    CHECK(zeroed != NULL && node_of(zeroed) >= 0, "__libc_calloc: %p", (void *)zeroed);
    CHECK(first_nonzero(zeroed, 1000) == 1000, "__libc_calloc: not zeroed");
    fill(zeroed, 1000, 2);
    unsigned char *grown = __libc_realloc(zeroed, opaque_size(100 * KIB));
    CHECK(grown != NULL && node_of(grown) >= 0, "__libc_realloc: %p", (void *)grown);
    CHECK(first_mismatch(grown, 1000, 2) == 1000, "__libc_realloc lost the contents");
    __libc_free(grown);
    void *aligned = __libc_memalign(opaque_size(256), opaque_size(1000));
    CHECK(aligned != NULL && is_aligned(aligned, 256) && node_of(aligned) >= 0,
          "__libc_memalign: %p", aligned);
    free(aligned);
    void *page = __libc_valloc(opaque_size(10));
    CHECK(page != NULL && is_aligned(page, 4096) && node_of(page) >= 0, "__libc_valloc: %p", page);
    free(page);
    page = __libc_pvalloc(opaque_size(10));
    CHECK(page != NULL && is_aligned(page, 4096) && node_of(page) >= 0 &&
              malloc_usable_size(page) >= 4096,
          "__libc_pvalloc: %p, %zu usable", page, malloc_usable_size(page));
    free(page);
}

static void mallinfo_counts_the_live_blocks(void) {
    enum { SMALL = 16384, LARGE = 8 };
    static void *small[SMALL];
    static void *large[LARGE];
    struct mallinfo2 before = mallinfo2();
    CHECK(before.arena >= before.uordblks && before.fordblks == before.arena - before.uordblks,
          "arena %zu, uordblks %zu, fordblks %zu", before.arena, before.uordblks,
          before.fordblks);
    for (int i = 0; i < SMALL; i++) {
        small[i] = malloc(opaque_size(KIB));
        CHECK(small[i] != NULL, "malloc(1 KiB) failed");
        fill(small[i], KIB, (size_t)i);
    }
    for (int i = 0; i < LARGE; i++) {
        large[i] = malloc(opaque_size(MIB));
        CHECK(large[i] != NULL, "malloc(1 MiB) failed");
        fill(large[i], MIB, (size_t)i);
    }
    struct mallinfo2 full = mallinfo2();
    size_t grown = full.uordblks - before.uordblks;
    /* 24 MiB live: the classes round the sizes up a little. */
    CHECK(grown >= 24 * MIB && grown <= 28 * MIB, "uordblks grew by %zu for 24 MiB of blocks",
          grown);
    CHECK(full.arena >= full.uordblks && full.fordblks == full.arena - full.uordblks,
          "arena %zu, uordblks %zu, fordblks %zu", full.arena, full.uordblks, full.fordblks);
    CHECK(full.usmblks >= full.arena, "usmblks (the peak) %zu below arena %zu", full.usmblks,
          full.arena);
/* mallinfo is deprecated in glibc's header, and still exported: programs call it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
    struct mallinfo2 now = mallinfo2();
    CHECK(old.uordblks == (int)now.uordblks && old.arena == (int)now.arena,
          "mallinfo (%d, %d) and mallinfo2 (%zu, %zu) disagree", old.arena, old.uordblks,
          now.arena, now.uordblks);
    for (int i = 0; i < SMALL; i++) {
        CHECK(first_mismatch(small[i], KIB, (size_t)i) == KIB, "block %d damaged", i);
        free(small[i]);
    }
    for (int i = 0; i < LARGE; i++) {
        free(large[i]);
    }
    struct mallinfo2 after = mallinfo2();
    CHECK(full.uordblks - after.uordblks >= 24 * MIB,
          "uordblks fell by %zu after freeing 24 MiB", full.uordblks - after.uordblks);
}

/* Resident bytes of the process, from /proc/self/statm. */
static size_t resident_bytes(void) {
    FILE *statm = fopen("/proc/self/statm", "r");
    CHECK(statm != NULL, "cannot open /proc/self/statm");
    size_t pages_total = 0, pages_resident = 0;
    CHECK(fscanf(statm, "%zu %zu", &pages_total, &pages_resident) == 2, "statm unreadable");
    fclose(statm);
    return pages_resident * (size_t)sysconf(_SC_PAGESIZE);
}

static void malloc_trim_gives_the_free_memory_back(void) {
    enum { BLOCKS = 32 };
    static void *blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(opaque_size(MIB));
        CHECK(blocks[i] != NULL, "malloc(1 MiB) failed");
        fill(blocks[i], MIB, (size_t)i);
    }
    for (int i = 0; i < BLOCKS; i++) {
        free(blocks[i]);
    }
    struct mallinfo2 kept = mallinfo2();
    size_t resident = resident_bytes();
    /* NODALLOC_RETAIN=256M and the long delay keep the freed 32 MiB committed. */
    CHECK(kept.fordblks >= 24 * MIB, "only %zu free bytes stayed committed", kept.fordblks);
    CHECK(malloc_trim(0) == 1, "malloc_trim released nothing");
    struct mallinfo2 trimmed = mallinfo2();
    CHECK(trimmed.fordblks + 24 * MIB <= kept.fordblks,
          "free committed bytes %zu -> %zu after malloc_trim", kept.fordblks, trimmed.fordblks);
    size_t resident_after = resident_bytes();
    CHECK(resident_after + 24 * MIB <= resident, "RSS %zu -> %zu bytes after malloc_trim",
          resident, resident_after);
}

static void mallopt_accepts_glibcs_parameters(void) {
    CHECK(mallopt(M_ARENA_MAX, 1) == 1, "mallopt(M_ARENA_MAX)");
    CHECK(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1, "mallopt(M_MMAP_THRESHOLD)");
    CHECK(mallopt(M_TRIM_THRESHOLD, 1 << 20) == 1, "mallopt(M_TRIM_THRESHOLD)");
    CHECK(mallopt(M_MXFAST, 64) == 1, "mallopt(M_MXFAST)");
    CHECK(mallopt(opaque_int(12345), 1) == 0, "mallopt of an unknown parameter succeeded");
}

static void malloc_info_writes_xml_of_the_heap(void) {
    void *live = malloc(opaque_size(10 * MIB));
    fill(live, 10 * MIB, 3);
    char *text = NULL;
    size_t length = 0;
    FILE *stream = open_memstream(&text, &length);
    CHECK(stream != NULL, "open_memstream failed");
    CHECK(malloc_info(0, stream) == 0, "malloc_info failed");
    fclose(stream);
    const char *start = "<malloc version=\"1\">\n<heap nr=\"0\">\n";
    CHECK(strncmp(text, start, strlen(start)) == 0, "malloc_info starts with: %.60s", text);
    CHECK(strstr(text, "</malloc>\n") != NULL, "malloc_info has no </malloc>: %s", text);
    /* The totals' committed bytes, after the last heap. */
    const char *totals = strstr(text, "</heap>\n<total type=\"fast\"");
    CHECK(totals != NULL, "malloc_info has no totals: %s", text);
    const char *current = strstr(totals, "<system type=\"current\" size=\"");
    CHECK(current != NULL, "malloc_info has no current size: %s", text);
    size_t committed = strtoull(current + strlen("<system type=\"current\" size=\""), NULL, 10);
    CHECK(committed >= 10 * MIB, "malloc_info: %zu bytes committed with 10 MiB live", committed);
    free(text);
    free(live);
    errno = 0;
    stream = open_memstream(&text, &length);
    CHECK(malloc_info(opaque_int(1), stream) == -1 && errno == EINVAL,
          "malloc_info with options 1: errno %d", errno);
    fclose(stream);
    free(text);
}

static void free_sized_frees(void) {
    FREE_SIZED(NULL, 0);
    FREE_SIZED(malloc(opaque_size(100)), 100);
    FREE_SIZED(calloc(opaque_size(10), opaque_size(10)), 100);
    void *grown = realloc(malloc(opaque_size(10)), opaque_size(5000));
    CHECK(grown != NULL, "realloc failed");
    FREE_SIZED(grown, 5000);
    FREE_SIZED(malloc(opaque_size(MIB)), MIB);
    FREE_ALIGNED_SIZED(aligned_alloc(opaque_size(64), opaque_size(128)), 64, 128);
    FREE_ALIGNED_SIZED(aligned_alloc(opaque_size(4096), opaque_size(8192)), 4096, 8192);
    /* Every block went back: the same sizes come out of the same memory again. */
    void *again = malloc(opaque_size(100));
    CHECK(again != NULL && node_of(again) >= 0, "malloc after free_sized");
    free(again);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "free-sized-mismatch") == 0) {
        void *block = malloc(opaque_size(100));
        printf("pointer %p\n", block);
        fflush(stdout);
        FREE_SIZED(block, opaque_size(5000));
        printf("free_sized of a 100-byte block with 5000 went unnoticed\n");
        return 0;
    }
    libc_names_are_nodallocs();
    mallinfo_counts_the_live_blocks();
    malloc_trim_gives_the_free_memory_back();
    mallopt_accepts_glibcs_parameters();
    malloc_info_writes_xml_of_the_heap();
    free_sized_frees();
    /* glibc's malloc_stats prints to stderr; the harness looks for nodalloc's statistics. */
    malloc_stats();
    printf("ok glibc_extras: %lu checks\n", (unsigned long)checks_passed);
    return 0;
}
