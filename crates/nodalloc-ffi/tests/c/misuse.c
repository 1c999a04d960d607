/* Frees (and a malloc_usable_size) that nodalloc must refuse by aborting, with a one-line
 * message naming the pointer.
 *
 * Usage: misuse MODE (stack, middle, double, double-small, double-medium, double-big,
 * double-handed-on, poison, middle-small, usable-middle-small, unused, overflow-freed-large,
 * underflow-freed-large, overflow-freed-large-realloc, write-freed-large, write-held-large,
 * read-held-large, forged-link, forged-link-handed-on). The program prints "pointer 0x…" (the
 * pointer it is about to free, as %p prints it) on stdout, then makes the bad call; the harness
 * expects SIGABRT and the message on stderr. Reaching the end is a failure (exit 1).
 */
#include "check.h"

#include <pthread.h>

#define MIB ((size_t)1024 * 1024)
/* A large block past the sizes whose freed span is held inaccessible (256 KiB to 2 MiB, where a
 * write after free faults at once): its free leaves canaries, which these cases check. */
#define BIG (3 * MIB)

static void announce(void *pointer) {
    printf("pointer %p\n", pointer);
    fflush(stdout);
}

/* Blocks of 1 KiB a thread allocated and freed before it ended. */
static char *handed_on[64];

static void *allocate_and_free_64(void *unused) {
    (void)unused;
    for (int i = 0; i < 64; i++) {
        handed_on[i] = malloc(opaque_size(1024));
        CHECK(handed_on[i] != NULL, "malloc(1024) failed");
    }
    for (int i = 0; i < 64; i++) {
        free(handed_on[i]);
    }
    return NULL;
}

/* Two adjacent 1 MiB blocks (spans of their own), and a third after them that stays. */
static void adjacent_big_blocks(char **block, char **next) {
    *block = malloc(opaque_size(BIG));
    *next = malloc(opaque_size(BIG));
    char *barrier = malloc(opaque_size(BIG));
    CHECK(*block != NULL && *next != NULL && barrier != NULL, "malloc(3 MiB) failed");
    CHECK(*next == *block + BIG, "3 MiB blocks not adjacent: %p, %p", (void *)*block, (void *)*next);
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: misuse MODE (see the comment at the top)");
    no_core_files();
    require_nodalloc();

    const char *mode = argv[1];
    if (strcmp(mode, "stack") == 0) {
        char on_stack[64];
        memset(on_stack, 1, sizeof on_stack);
        void *pointer = opaque_pointer(on_stack);
        announce(pointer);
        free(pointer);
    } else if (strcmp(mode, "middle") == 0) {
        char *block = malloc(opaque_size(MIB));
        CHECK(block != NULL, "malloc(1 MiB) failed");
        memset(block, 2, MIB);
        void *pointer = opaque_pointer(block + MIB / 2);
        announce(pointer);
        free(pointer);
    } else if (strcmp(mode, "double") == 0) {
        char *block = malloc(opaque_size(MIB));
        CHECK(block != NULL, "malloc(1 MiB) failed");
        memset(block, 3, MIB);
        /* The second free goes through an integer, where the compiler's use-after-free
         * warning cannot follow it. */
        uintptr_t address = (uintptr_t)block;
        announce(block);
        free(block);
        free((void *)opaque_size(address));
    } else if (strcmp(mode, "double-small") == 0) {
        /* A small block freed twice with another free in between: the second free finds the
         * block in the thread's cache. */
        char *block = malloc(opaque_size(48));
        char *other = malloc(opaque_size(48));
        CHECK(block != NULL && other != NULL, "malloc(48) failed");
        uintptr_t address = (uintptr_t)block;
        announce(block);
        free(block);
        free(other);
        free((void *)opaque_size(address));
    } else if (strcmp(mode, "double-medium") == 0) {
        /* 8 KiB: a class whose bags sit in the sparse pool (off the free fast path), freed twice
         * with another free in between. */
        char *block = malloc(opaque_size(8 << 10));
        char *other = malloc(opaque_size(8 << 10));
        CHECK(block != NULL && other != NULL, "malloc(8 KiB) failed");
        uintptr_t address = (uintptr_t)block;
        announce(block);
        free(block);
        free(other);
        free((void *)opaque_size(address));
    } else if (strcmp(mode, "double-big") == 0) {
        /* 100 KiB: a class threads keep one object of (the last freed), freed twice. */
        char *block = malloc(opaque_size(100 << 10));
        CHECK(block != NULL, "malloc(100 KiB) failed");
        memset(block, 4, 100 << 10);
        uintptr_t address = (uintptr_t)block;
        announce(block);
        free(block);
        free((void *)opaque_size(address));
    } else if (strcmp(mode, "double-handed-on") == 0) {
        /* 256 KiB, freed twice with another free of its size in between: the thread keeps the
         * last one it freed, so the block has gone on to the node heap's ring by then. */
        char *block = malloc(opaque_size(256 << 10));
        char *other = malloc(opaque_size(256 << 10));
        CHECK(block != NULL && other != NULL, "malloc(256 KiB) failed");
        uintptr_t address = (uintptr_t)block;
        announce(block);
        free(block);
        free(other);
        free((void *)opaque_size(address));
    } else if (strcmp(mode, "poison") == 0) {
        /* A freed block's first word (its free-list link) overwritten with the address of a
         * global, then malloc of its size twice: the second would hand out the global. */
        static char target[64];
        char *block = malloc(opaque_size(48));
        CHECK(block != NULL, "malloc(48) failed");
        uintptr_t address = (uintptr_t)block;
        announce(block);
        free(block);
        *(volatile uintptr_t *)opaque_size(address) = (uintptr_t)opaque_pointer(target);
        char *first = malloc(opaque_size(48));
        char *second = malloc(opaque_size(48));
        fprintf(stderr, "misuse poison: malloc returned %p, then %p\n", (void *)first, (void *)second);
    } else if (strcmp(mode, "middle-small") == 0) {
        char *block = malloc(opaque_size(200));
        CHECK(block != NULL, "malloc(200) failed");
        void *pointer = opaque_pointer(block + 16);
        announce(pointer);
        free(pointer);
    } else if (strcmp(mode, "usable-middle-small") == 0) {
        /* malloc_usable_size of a pointer into a small block: its hit must not size it. */
        char *block = malloc(opaque_size(200));
        CHECK(block != NULL, "malloc(200) failed");
        void *pointer = opaque_pointer(block + 16);
        announce(pointer);
        size_t usable = malloc_usable_size(pointer);
        fprintf(stderr, "misuse usable-middle-small: malloc_usable_size returned %zu\n", usable);
    } else if (strcmp(mode, "unused") == 0) {
        /* Inside the thread's own region (a terabyte by default, at least 64 MiB) but far past
         * anything handed out: metadata nothing ever wrote, possibly never committed. */
        char *block = malloc(opaque_size(64));
        CHECK(block != NULL, "malloc(64) failed");
        void *pointer = opaque_pointer(block + 40 * MIB + 64);
        announce(pointer);
        free(pointer);
    } else if (strncmp(mode, "overflow-freed-large", 20) == 0) {
        /* Two adjacent 3 MiB blocks; the second is freed, then a write past the end of the first
         * lands in its first word. Freeing the first merges the two spans; growing it in place
         * (overflow-freed-large-realloc) takes the second's span. */
        char *block, *next;
        adjacent_big_blocks(&block, &next);
        announce(next);
        free(next);
        memset((void *)opaque_size((uintptr_t)block + BIG), 0x41, 8);
        if (strcmp(mode, "overflow-freed-large-realloc") == 0) {
            char *grown = realloc(block, opaque_size(BIG + BIG / 2));
            fprintf(stderr, "misuse %s: realloc returned %p (was %p)\n", mode, (void *)grown,
                    (void *)opaque_size((uintptr_t)block));
        } else {
            free(block);
        }
    } else if (strcmp(mode, "underflow-freed-large") == 0) {
        /* The first of two adjacent 3 MiB blocks is freed, then a write before the start of the
         * second lands in its last word. Freeing the second merges the two spans. */
        char *block, *next;
        adjacent_big_blocks(&block, &next);
        announce(block);
        free(block);
        memset((void *)opaque_size((uintptr_t)next - 1), 0x41, 1);
        free(next);
    } else if (strcmp(mode, "write-freed-large") == 0) {
        /* A write after free into a freed 3 MiB block's first word, then a malloc that reuses
         * its memory. */
        char *block = malloc(opaque_size(BIG));
        char *barrier = malloc(opaque_size(BIG));
        CHECK(block != NULL && barrier != NULL, "malloc(3 MiB) failed");
        memset(block, 1, BIG);
        uintptr_t address = (uintptr_t)block;
        announce(block);
        free(block);
        memset((void *)opaque_size(address), 0x41, 4);
        char *again = malloc(opaque_size(BIG));
        fprintf(stderr, "misuse write-freed-large: malloc returned %p\n", (void *)again);
    } else if (strcmp(mode, "write-held-large") == 0 || strcmp(mode, "read-held-large") == 0) {
        /* A block of 1 MiB (the sizes whose freed span is held inaccessible) used after its
         * free: the access faults. "accessing" is printed just before it. */
        char *block = malloc(opaque_size(MIB));
        CHECK(block != NULL, "malloc(1 MiB) failed");
        memset(block, 1, MIB);
        uintptr_t address = (uintptr_t)block;
        announce(block);
        free(block);
        printf("accessing\n");
        fflush(stdout);
        if (mode[0] == 'w') {
            memset((void *)opaque_size(address), 0x41, MIB);
        } else {
            printf("read %d\n", *(volatile char *)opaque_size(address + MIB - 1));
        }
        char *again = malloc(opaque_size(MIB));
        fprintf(stderr, "misuse %s: malloc returned %p\n", mode, (void *)again);
    } else if (strcmp(mode, "forged-link") == 0) {
        /* A write after free puts the address of a live block (what a dangling `next` field
         * holds) into a freed block's first word; the second malloc of its size would hand the
         * live block out again. */
        char *block = malloc(opaque_size(48));
        char *live = malloc(opaque_size(48));
        CHECK(block != NULL && live != NULL, "malloc(48) failed");
        uintptr_t address = (uintptr_t)block;
        announce(block);
        free(block);
        *(volatile uintptr_t *)opaque_size(address) = (uintptr_t)live;
        char *first = malloc(opaque_size(48));
        char *second = malloc(opaque_size(48));
        fprintf(stderr, "misuse forged-link: malloc returned %p, then %p (live %p)\n",
                (void *)first, (void *)second, (void *)live);
    } else if (strcmp(mode, "forged-link-handed-on") == 0) {
        /* As forged-link, for blocks a finished thread left to its node heap. */
        pthread_t thread;
        CHECK(pthread_create(&thread, NULL, allocate_and_free_64, NULL) == 0, "pthread_create");
        CHECK(pthread_join(thread, NULL) == 0, "pthread_join");
        char *live = malloc(opaque_size(48));
        CHECK(live != NULL, "malloc(48) failed");
        announce(handed_on[10]);
        *(volatile uintptr_t *)opaque_size((uintptr_t)handed_on[10]) = (uintptr_t)live;
        for (int i = 0; i < 256; i++) {
            CHECK(malloc(opaque_size(1024)) != live, "malloc(1024) returned the live block %p",
                  (void *)live);
        }
    } else {
        CHECK(0, "unknown mode %s", mode);
    }
    fprintf(stderr, "misuse %s: the bad free returned\n", mode);
    return 1;
}
