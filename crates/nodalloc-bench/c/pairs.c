/* pairs SIZE N: N malloc+free pairs of SIZE bytes through whatever malloc the process uses
 * (glibc, or a library put in front with LD_PRELOAD). The C face of the showdown's callgrind
 * suite (src/suites/callgrind.rs compiles and runs it): instructions per pair
 * = (Ir(N) - Ir(0)) / N, since start-up and the warm-up are the same in both runs. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: pairs SIZE N\n");
        return 2;
    }
    size_t size = strtoul(argv[1], NULL, 10);
    long n = strtol(argv[2], NULL, 10);
    for (int i = 0; i < 64; i++) free(malloc(size)); /* warm the thread cache */
    for (long i = 0; i < n; i++) {
        void *volatile p = malloc(size);
        if (!p) return 1;
        free(p);
    }
    return 0;
}
