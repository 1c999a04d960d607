/* malloc/free pairs of 64 bytes: a warm-up that fills the thread's cache, then `run_pairs`
 * alone, which callgrind measures (`--toggle-collect=run_pairs`): the fast paths in their
 * steady state, with nothing else in the count. */
#include "check.h"

__attribute__((noinline)) static void run_pairs(long count) {
    for (long i = 0; i < count; i++) {
        void *p = malloc(opaque_size(64));
        CHECK(p != NULL, "malloc(64)");
        free(opaque_pointer(p));
    }
}

__attribute__((noinline)) static void warm_up(long count) {
    for (long i = 0; i < count; i++) {
        void *p = malloc(opaque_size(64));
        CHECK(p != NULL, "malloc(64)");
        free(opaque_pointer(p));
    }
}

int main(int argc, char **argv) {
    long count = argc > 1 ? atol(argv[1]) : 10000;
    warm_up(1000);
    run_pairs(count);
    printf("ok pairs: %ld pairs\n", count);
    return 0;
}
