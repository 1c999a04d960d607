/* Threads that outnumber the cores and come and go, passing blocks between them: waves of
 * THREADS threads (32 on a 2-CPU machine) run at once; each allocates blocks of mixed sizes
 * (16 B to 20 KiB, a few up to 300 KiB), fills each with a pattern derived from a seed stored
 * in the block, keeps some, frees some at once, and swaps others with a transfer array shared
 * by every thread of every wave, so a block is often freed by a thread of a later wave than
 * the one that allocated it. Whoever frees a block checks its pattern first. Between waves the
 * exited threads' caches wait in their pooled heaps for the next wave (and, with a short
 * upkeep period, go home from the maintenance thread while new threads take heaps): a block
 * handed out twice, or written while cached, shows as a damaged pattern.
 *
 * Usage: churn [WAVES] [THREADS] (default 12 waves of 32 threads).
 */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>

#define TRANSFER 2048
#define KEPT 48
#define OPERATIONS 6000

struct header {
    size_t length;
    size_t seed;
};

static _Atomic(struct header *) transfer[TRANSFER];
static atomic_ulong checked;

static size_t pick_length(unsigned long long *state) {
    uint64_t pick = next_random(state) % 1000;
    if (pick < 700)
        return 16 + next_random(state) % 240;
    if (pick < 990)
        return 256 + next_random(state) % (20 << 10);
    return (64 << 10) + next_random(state) % (236 << 10);
}

static struct header *make(unsigned long long *state) {
    size_t length = pick_length(state);
    struct header *block = malloc(opaque_size(length));
    CHECK(block != NULL, "malloc(%zu) failed", length);
    block->length = length;
    block->seed = (size_t)next_random(state);
    /* The pattern covers the bytes after the header, up to 256 of them and the last 64. */
    size_t body = length - sizeof *block;
    unsigned char *bytes = (unsigned char *)(block + 1);
    fill(bytes, body < 256 ? body : 256, block->seed);
    if (body > 320)
        fill(bytes + body - 64, 64, block->seed + 1);
    return block;
}

static void check_and_free(struct header *block) {
    if (block == NULL)
        return;
    size_t length = block->length;
    CHECK(length >= 16 && length <= (300 << 10), "block %p has a damaged length %zu",
          (void *)block, length);
    size_t body = length - sizeof *block;
    unsigned char *bytes = (unsigned char *)(block + 1);
    CHECK_PATTERN(bytes, body < 256 ? body : 256, block->seed);
    if (body > 320)
        CHECK_PATTERN(bytes + body - 64, 64, block->seed + 1);
    checked++;
    free(block);
}

static void *worker(void *argument) {
    unsigned long long state = (uintptr_t)argument * 0x9E3779B97F4A7C15ull + 1;
    struct header *kept[KEPT] = {0};
    for (int i = 0; i < OPERATIONS; i++) {
        int slot = (int)(next_random(&state) % KEPT);
        switch (next_random(&state) % 4) {
        case 0: /* swap a kept block with the transfer array's */
            kept[slot] = atomic_exchange(&transfer[next_random(&state) % TRANSFER], kept[slot]);
            break;
        case 1: /* a block freed at once */
            check_and_free(make(&state));
            break;
        default: /* replace a kept block */
            check_and_free(kept[slot]);
            kept[slot] = make(&state);
            break;
        }
    }
    /* Half of what is left outlives the thread in the transfer array. */
    for (int slot = 0; slot < KEPT; slot++) {
        if (slot % 2 == 0)
            check_and_free(kept[slot]);
        else
            check_and_free(
                atomic_exchange(&transfer[next_random(&state) % TRANSFER], kept[slot]));
    }
    return NULL;
}

int main(int argc, char **argv) {
    int waves = argc > 1 ? atoi(argv[1]) : 12;
    int threads = argc > 2 ? atoi(argv[2]) : 32;
    require_nodalloc();
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    CHECK(ids != NULL, "calloc failed");
    for (int wave = 0; wave < waves; wave++) {
        for (int t = 0; t < threads; t++)
            CHECK(pthread_create(&ids[t], NULL, worker,
                                 (void *)(uintptr_t)(wave * threads + t + 1)) == 0,
                  "pthread_create failed");
        for (int t = 0; t < threads; t++)
            CHECK(pthread_join(ids[t], NULL) == 0, "pthread_join failed");
    }
    for (int i = 0; i < TRANSFER; i++)
        check_and_free(atomic_exchange(&transfer[i], NULL));
    free(ids);
    printf("churn: %d waves of %d threads, %lu blocks checked when freed\n", waves, threads,
           (unsigned long)checked);
    return finish("churn");
}
