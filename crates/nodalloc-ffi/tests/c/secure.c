/* Misuse that secure mode (NODALLOC_SECURE=1) must stop, through the C API.
 *
 * Usage: secure MODE, MODE one of
 *   double-drained     a block freed, pushed out of the thread's cache by 300 other frees, freed
 *                      again: secure mode aborts with "free(): double free of 0x…" (the
 *                      allocation bitmap), and so does the default mode (the freed mark,
 *                      confirmed where the block waits: the node's ring or its bag)
 *   write-after-free   the first word of a freed block overwritten with 0x4141414141414141, then
 *                      malloc: secure mode aborts with "corrupted free list: freed object 0x…
 *                      holds 0x4141414141414141, …" instead of following the value
 *   overflow           one byte written past malloc_usable_size of a large block (the size asked
 *                      for), then free: secure mode aborts with "heap overflow: bytes past the
 *                      end of block 0x…" (the canary after the block's bytes is damaged)
 *   overflow-realloc   the same after realloc grew and then shrank the block
 *   overflow-page      a linear write past the end of a large block, byte after byte: it must
 *                      fault (SIGSEGV) on the guard page within a page and a trailer
 * The program prints "pointer 0x…" (the block concerned, as %p prints it) on stdout before the
 * bad call; reaching the end is a failure (exit 1).
 */
#include "check.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)
#define OTHERS 300

static void announce(void *pointer) {
    printf("pointer %p\n", pointer);
    fflush(stdout);
}

/* Writes one byte past the usable end of a block after checking all of it is usable, then
 * frees it. */
static void overflow(char *block) {
    size_t usable = malloc_usable_size(block);
    memset(block, 5, usable);
    announce(block);
    printf("writing byte %zu of a block of %zu usable bytes\n", usable, usable);
    fflush(stdout);
    ((volatile char *)block)[usable] = 1;
    free(block);
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: secure double-drained|write-after-free|overflow|overflow-page|overflow-realloc");
    no_core_files();
    require_nodalloc();

    const char *mode = argv[1];
    if (strcmp(mode, "double-drained") == 0) {
        char *block = malloc(opaque_size(48));
        char *others[OTHERS];
        for (int i = 0; i < OTHERS; i++) {
            others[i] = malloc(opaque_size(48));
            CHECK(others[i] != NULL, "malloc(48) failed");
        }
        CHECK(block != NULL, "malloc(48) failed");
        uintptr_t address = (uintptr_t)block;
        announce(block);
        free(block);
        for (int i = 0; i < OTHERS; i++) {
            free(others[i]);
        }
        free((void *)opaque_size(address));
    } else if (strcmp(mode, "write-after-free") == 0) {
        char *block = malloc(opaque_size(48));
        CHECK(block != NULL, "malloc(48) failed");
        uintptr_t address = (uintptr_t)block;
        announce(block);
        free(block);
        /* Through an integer, where the compiler's use-after-free warning cannot follow. */
        *(volatile uint64_t *)opaque_size(address) = 0x4141414141414141ull;
        char *next = malloc(opaque_size(48));
        char *after = malloc(opaque_size(48));
        fprintf(stderr, "secure write-after-free: malloc returned %p, then %p\n", (void *)next,
                (void *)after);
    } else if (strcmp(mode, "overflow") == 0) {
        char *block = malloc(opaque_size(MIB + 100));
        CHECK(block != NULL, "malloc(1 MiB + 100) failed");
        size_t usable = malloc_usable_size(block);
        CHECK(usable >= MIB + 100 && usable < MIB + 100 + 4096,
              "usable size %zu: not the request rounded to a page", usable);
        overflow(block);
    } else if (strcmp(mode, "overflow-page") == 0) {
        char *block = malloc(opaque_size(MIB + 100));
        CHECK(block != NULL, "malloc(1 MiB + 100) failed");
        size_t usable = malloc_usable_size(block);
        memset(block, 5, usable);
        announce(block);
        printf("writing byte %zu of a block of %zu usable bytes, and on\n", usable, usable);
        fflush(stdout);
        for (size_t i = usable; i < usable + 4096 + 64; i++)
            ((volatile char *)block)[i] = 1;
    } else if (strcmp(mode, "overflow-realloc") == 0) {
        char *block = malloc(opaque_size(300 * KIB));
        CHECK(block != NULL, "malloc(300 KiB) failed");
        fill(block, 300 * KIB, 7);
        block = realloc(block, opaque_size(3 * MIB));
        CHECK(block != NULL, "realloc to 3 MiB failed");
        CHECK_PATTERN(block, 300 * KIB, 7);
        block = realloc(block, opaque_size(2 * MIB + 10));
        CHECK(block != NULL, "realloc to 2 MiB failed");
        CHECK_PATTERN(block, 300 * KIB, 7);
        overflow(block);
    } else {
        CHECK(0, "unknown mode %s", mode);
    }
    fprintf(stderr, "secure %s: the misuse went unnoticed\n", mode);
    return 1;
}
