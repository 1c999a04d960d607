/* What a fork costs in pages: blocks of a few size classes in use, then FORKS forks, each child
 * allocating, checking and freeing a block and leaving with _exit; the parent waits for each.
 * Prints "fork_pages child_faults=N parent_faults=M" (minor faults per fork: the children's,
 * from RUSAGE_CHILDREN, and the parent's over the loop) and "ok fork_pages: N checks". Every
 * page the allocator writes around fork (its fork handlers take and release locks) is a page
 * copied on write, in the child and again in the parent: tests/c_abi/sparse.rs bounds these
 * figures against the same program under glibc. */
#include "check.h"

#include <sys/resource.h>
#include <sys/wait.h>

#define FORKS 40
#define KEPT 64

static long minor_faults(int who) {
    struct rusage usage;
    CHECK(getrusage(who, &usage) == 0, "getrusage");
    return usage.ru_minflt;
}

int main(void) {
    static const size_t sizes[] = {16, 48, 100, 256, 1000, 4096};
    void *kept[KEPT];
    for (int i = 0; i < KEPT; i++) {
        size_t size = sizes[i % 6];
        kept[i] = malloc(opaque_size(size));
        CHECK(kept[i] != NULL, "malloc(%zu)", size);
        fill(kept[i], size, (size_t)i);
    }
    long parent_before = minor_faults(RUSAGE_SELF);
    for (int i = 0; i < FORKS; i++) {
        pid_t child = fork();
        CHECK(child >= 0, "fork");
        if (child == 0) {
            unsigned char *block = malloc(opaque_size(100));
            if (block == NULL)
                _exit(2);
            fill(block, 100, 9);
            int intact = first_mismatch(block, 100, 9) == 100 &&
                         first_mismatch(kept[5], sizes[5], 5) == sizes[5];
            free(block);
            _exit(intact ? 0 : 3);
        }
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child, "waitpid");
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d exited cleanly (%d)", i,
              status);
    }
    long parent_faults = minor_faults(RUSAGE_SELF) - parent_before;
    long child_faults = minor_faults(RUSAGE_CHILDREN);
    for (int i = 0; i < KEPT; i++) {
        size_t size = sizes[i % 6];
        CHECK(first_mismatch(kept[i], size, (size_t)i) == size, "block %d intact", i);
        free(kept[i]);
    }
    printf("fork_pages child_faults=%ld parent_faults=%ld\n", child_faults / FORKS,
           parent_faults / FORKS);
    return finish("fork_pages");
}
