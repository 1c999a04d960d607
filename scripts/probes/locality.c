/*
 * Allocation locality probe: preloaded in front of a malloc library, it asks how close each
 * block a thread gets lies to the block the same thread got last of the same size (sizes up to
 * 1 KiB, in 16-byte steps). A library that hands a thread consecutive blocks of one page (a
 * page or bag the thread owns) scores high; one that hands out whatever was freed last, or
 * whatever a refill brought from anywhere, scores low. The program touches what it allocates,
 * so the score says how many lines and pages its writes and later reads spread over. No timing:
 * the shares hardly move between runs whatever the machine's load (mimalloc's test-stress: within
 * 0.3 points), though a program whose threads race (xmalloc-test) moves them more.
 *
 * Counts malloc and calloc (not C++'s operator new, which each library exports itself). Prints
 * one line on stderr at exit:
 *   locality: N pairs, next within 64 B X%, within 4 KiB Y%, just above the last Z%, the
 *   thread's last freed block W%
 * "just above": the block starts above the last one by at most its size rounded up to 16 bytes
 * plus 16 (the next object of a bag or page in address order). "The thread's last freed block":
 * the block is the one the thread freed last (of any size), handed straight back (LIFO reuse).
 *
 * Built and run by scripts/locality.sh; nothing here is part of the library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

static void *(*next_malloc)(size_t);
static void *(*next_calloc)(size_t, size_t);
static void (*next_free)(void *);
static __thread uintptr_t last[66];
static __thread uintptr_t last_freed;
static unsigned long long pairs, within_line, within_page, just_above, reused;

/* dlsym may call calloc before the next library's is known: served from here. */
static char bootstrap[65536];
static size_t bootstrap_used;
static int resolving;

static void resolve(void) {
    if (next_malloc)
        return;
    resolving = 1;
    next_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    resolving = 0;
}

static void note(void *block, size_t size) {
    if (!block || size == 0 || size > 1024)
        return;
    size_t bucket = (size + 15) / 16;
    uintptr_t address = (uintptr_t)block, before = last[bucket];
    last[bucket] = address;
    if (!before)
        return;
    uintptr_t distance = address > before ? address - before : before - address;
    __atomic_fetch_add(&pairs, 1, __ATOMIC_RELAXED);
    if (address == last_freed)
        __atomic_fetch_add(&reused, 1, __ATOMIC_RELAXED);
    if (distance <= 64)
        __atomic_fetch_add(&within_line, 1, __ATOMIC_RELAXED);
    if (distance <= 4096)
        __atomic_fetch_add(&within_page, 1, __ATOMIC_RELAXED);
    if (address > before && distance <= 16 * bucket + 16)
        __atomic_fetch_add(&just_above, 1, __ATOMIC_RELAXED);
}

void *malloc(size_t size) {
    resolve();
    void *block = next_malloc(size);
    note(block, size);
    return block;
}

void *calloc(size_t count, size_t size) {
    if (resolving) {
        size_t bytes = (count * size + 15) & ~(size_t)15;
        if (bytes > sizeof bootstrap - bootstrap_used)
            return NULL;
        void *block = bootstrap + bootstrap_used;
        bootstrap_used += bytes;
        return block;
    }
    resolve();
    void *block = next_calloc(count, size);
    if (count != 0 && size <= SIZE_MAX / count)
        note(block, count * size);
    return block;
}

/* Remembers the thread's last freed block; realloc passes through untouched. */
void free(void *block) {
    if ((char *)block >= bootstrap && (char *)block < bootstrap + sizeof bootstrap)
        return;
    resolve();
    last_freed = (uintptr_t)block;
    next_free(block);
}

__attribute__((destructor)) static void report(void) {
    char line[200];
    double all = pairs ? (double)pairs : 1.0;
    int length = snprintf(line, sizeof line,
        "locality: %llu pairs, next within 64 B %.1f%%, within 4 KiB %.1f%%, just above the last %.1f%%, "
        "the thread's last freed block %.1f%%\n",
        pairs, 100.0 * within_line / all, 100.0 * within_page / all, 100.0 * just_above / all,
        100.0 * reused / all);
    if (length > 0 && write(2, line, (size_t)length) < 0)
        return;
}
