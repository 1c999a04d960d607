/* memcpy, memmove and memset on heap blocks (checked in secure mode, src/copy.rs).
 *
 * Usage: copies correct | copies CASE. `correct` makes only correct calls: copies exactly to a
 * block's end at many sizes, zero-size copies, copies on the stack and on globals, overlapping
 * moves inside a block, whole-block fills, realloc growth that copies, 256 KiB to 3 MiB
 * blocks freed and allocated again in loops, and a first-class heap's blocks copied to their
 * end and grown; it checks every byte it wrote and prints
 * "ok copies: …". A CASE prints "pointer 0x…" (the block the misuse concerns) and then makes one
 * bad call: memcpy-past (one byte past a 100-byte block), memmove-past, memset-past,
 * memcpy-before (a copy starting 16 bytes before a 4 KiB block), memcpy-freed (into a freed
 * block), memcpy-large-past (one byte past a 300 KiB block), memcpy-heap-past (4 KiB into a
 * first-class heap's 100-byte block), and the public suite's overflows, which default mode's
 * bound catches too: memcpy-slot-past, memmove-slot-past and memset-slot-past (32 bytes past an
 * 8-byte block, into its neighbour), memcpy-page-past (32 bytes past a 4 KiB block, into the
 * line that spaces its class's objects); reaching the end is a failure (exit 1).
 */
#include "check.h"

#include <malloc.h>

#define MIB ((size_t)1024 * 1024)

static char global_area[65536];

static void announce(void *pointer) {
    printf("pointer %p\n", pointer);
    fflush(stdout);
}

/* The libc calls, kept from being folded or inlined by the compiler. */
__attribute__((noipa)) static void *copy(void *to, const void *from, size_t n) {
    return memcpy(to, from, n);
}

__attribute__((noipa)) static void *move(void *to, const void *from, size_t n) {
    return memmove(to, from, n);
}

__attribute__((noipa)) static void *set(void *to, int byte, size_t n) { return memset(to, byte, n); }

static void check_bytes(const unsigned char *p, size_t n, unsigned char byte, const char *what) {
    for (size_t i = 0; i < n; i++) {
        CHECK(p[i] == byte, "%s: byte %zu is %u, not %u", what, i, p[i], byte);
    }
}

static int correct(void) {
    static unsigned char source[3 * MIB];
    memset(source, 0x5a, sizeof source);
    size_t copied = 0;
    /* Exactly to the end, at every size class boundary region and a few large sizes. */
    static const size_t sizes[] = {1,     8,      15,     16,     24,     100,    1000,
                                   4096,  4097,   16384,  65536,  70000,  262144, 262145,
                                   MIB,   3 * MIB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        unsigned char *block = malloc(opaque_size(n));
        CHECK(block != NULL, "malloc(%zu) failed", n);
        copy(block, source, n);
        check_bytes(block, n, 0x5a, "memcpy to the end");
        set(block, 0x11, n);
        check_bytes(block, n, 0x11, "memset to the end");
        if (n > 1) {
            /* Overlapping moves, both directions, inside the block. */
            move(block + 1, block, n - 1);
            move(block, block + 1, n - 1);
        }
        copy(block + n, source, 0);
        copy(block, source, 0);
        set(block + n, 0, 0);
        /* Up to what malloc_usable_size allows (default mode's bound is the class's usable
         * bytes; secure mode's the size asked for, which it reports). */
        size_t usable = malloc_usable_size(block);
        CHECK(usable >= n, "malloc_usable_size(%zu-byte block) = %zu", n, usable);
        if (usable <= sizeof source) {
            copy(block, source, usable);
            set(block, 0x12, usable);
            check_bytes(block, usable, 0x12, "memset to the usable end");
        }
        copied += n;
        free(block);
    }
    /* Zero-size copies anywhere, non-heap destinations. */
    copy(NULL, NULL, 0);
    unsigned char on_stack[256];
    copy(on_stack, source, sizeof on_stack);
    check_bytes(on_stack, sizeof on_stack, 0x5a, "memcpy on the stack");
    set(global_area, 3, sizeof global_area);
    check_bytes((unsigned char *)global_area, sizeof global_area, 3, "memset on a global");
    /* calloc, and realloc growth (the library's own copies). */
    unsigned char *grown = calloc(1, 8);
    CHECK(grown != NULL, "calloc failed");
    for (size_t n = 16; n <= 2 * MIB; n *= 2) {
        set(grown, 0x22, n / 2);
        grown = realloc(grown, opaque_size(n));
        CHECK(grown != NULL, "realloc(%zu) failed", n);
        check_bytes(grown, n / 2, 0x22, "realloc's copy");
    }
    free(grown);
    /* Large blocks freed and allocated again in loops. */
    for (int round = 0; round < 2000; round++) {
        size_t n = round % 3 == 0 ? 262144 : round % 3 == 1 ? MIB : 3 * MIB;
        unsigned char *block = malloc(opaque_size(n));
        CHECK(block != NULL, "malloc(%zu) failed", n);
        copy(block, source, 4096);
        copy(block + n - 4096, source, 4096);
        check_bytes(block + n - 4096, 4096, 0x5a, "a reused large block");
        free(block);
    }
    /* A first-class heap's blocks (no trailer: their bound is their slot), copied to their
     * end and grown by realloc (the library's copy into the heap's new block), in rounds that
     * reuse the heap's memory. */
    for (int round = 0; round < 20; round++) {
        nodalloc_heap_t *heap = NODALLOC(nodalloc_heap_new)(NULL);
        CHECK(heap != NULL, "nodalloc_heap_new failed");
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            size_t n = sizes[i];
            unsigned char *block = NODALLOC(nodalloc_heap_malloc)(heap, opaque_size(n));
            CHECK(block != NULL, "heap malloc(%zu) failed", n);
            copy(block, source, n);
            set(block, 0x33, n);
            block = realloc(block, opaque_size(n * 3 + 10));
            CHECK(block != NULL, "heap realloc(%zu) failed", n * 3 + 10);
            check_bytes(block, n, 0x33, "a heap block's realloc copy");
            size_t grown = n * 3 + 10 < sizeof source ? n * 3 + 10 : sizeof source;
            copy(block, source, grown);
            copied += n + grown;
            free(block);
        }
        NODALLOC(nodalloc_heap_destroy)(heap);
    }
    printf("ok copies: %zu bytes copied to blocks' ends\n", copied);
    return 0;
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: copies correct | copies CASE (see the comment at the top)");
    no_core_files();
    require_nodalloc();
    const char *mode = argv[1];
    if (strcmp(mode, "correct") == 0) {
        return correct();
    }
    static unsigned char source[2 * MIB];
    if (strcmp(mode, "memcpy-past") == 0 || strcmp(mode, "memmove-past") == 0 ||
        strcmp(mode, "memset-past") == 0) {
        unsigned char *block = malloc(opaque_size(100));
        CHECK(block != NULL, "malloc(100) failed");
        announce(block);
        if (mode[3] == 'c') {
            copy(block, source, opaque_size(101));
        } else if (mode[3] == 'm') {
            move(block, source, opaque_size(101));
        } else {
            set(block, 0x41, opaque_size(101));
        }
    } else if (strcmp(mode, "memcpy-slot-past") == 0 || strcmp(mode, "memmove-slot-past") == 0 ||
               strcmp(mode, "memset-slot-past") == 0) {
        unsigned char *block = malloc(opaque_size(8));
        CHECK(block != NULL, "malloc(8) failed");
        announce(block);
        if (mode[3] == 'c') {
            copy(block, source, opaque_size(8 + 32));
        } else if (mode[3] == 'm') {
            move(block, source, opaque_size(8 + 32));
        } else {
            set(block, 0x41, opaque_size(8 + 32));
        }
    } else if (strcmp(mode, "memcpy-page-past") == 0) {
        unsigned char *block = malloc(opaque_size(4096));
        CHECK(block != NULL, "malloc(4096) failed");
        announce(block);
        copy(block, source, opaque_size(4096 + 32));
    } else if (strcmp(mode, "memcpy-before") == 0) {
        /* A block with a neighbour's slot before it in its bag (not the first of a bag, whose
         * preceding page may be unmapped: a fault, not this check). */
        unsigned char *block = NULL;
        for (int i = 0; i < 16 && block == NULL; i++) {
            unsigned char *candidate = malloc(opaque_size(4096));
            CHECK(candidate != NULL, "malloc(4096) failed");
            if ((uintptr_t)candidate % (32 * 1024) >= 8192) {
                block = candidate;
            }
        }
        CHECK(block != NULL, "no 4 KiB block past the start of its bag");
        announce(block);
        copy((void *)opaque_size((uintptr_t)block - 16), source, 4096);
    } else if (strcmp(mode, "memcpy-freed") == 0) {
        unsigned char *block = malloc(opaque_size(200));
        CHECK(block != NULL, "malloc(200) failed");
        uintptr_t address = (uintptr_t)block;
        announce(block);
        free(block);
        copy((void *)opaque_size(address), source, 8);
    } else if (strcmp(mode, "memcpy-large-past") == 0) {
        unsigned char *block = malloc(opaque_size(300 * 1024));
        CHECK(block != NULL, "malloc(300 KiB) failed");
        announce(block);
        copy(block, source, opaque_size(300 * 1024 + 1));
    } else if (strcmp(mode, "memcpy-heap-past") == 0) {
        /* A first-class heap's block keeps no size of its own: a copy past its slot. */
        nodalloc_heap_t *heap = NODALLOC(nodalloc_heap_new)(NULL);
        CHECK(heap != NULL, "nodalloc_heap_new failed");
        unsigned char *block = NODALLOC(nodalloc_heap_malloc)(heap, opaque_size(100));
        CHECK(block != NULL, "heap malloc(100) failed");
        announce(block);
        copy(block, source, opaque_size(4096));
    } else {
        CHECK(0, "unknown case %s", mode);
    }
    fprintf(stderr, "copies %s: the bad call returned\n", mode);
    return 1;
}
