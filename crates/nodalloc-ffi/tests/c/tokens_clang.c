/* Allocation tokens from their real producer: this program is built by Clang 22 or later with
 * -fsanitize=alloc-token (tests/c_abi/partitions.rs; linked with -lnodalloc, which defines the
 * `__alloc_token_*` functions the instrumented calls name), and runs with call-site partitions
 * on (NODALLOC_CALLSITE).
 *
 * Clang's default token is a hash of the allocated type: two functions allocating one type
 * share a partition (by return address they would have two), two types get two partitions,
 * and the partition's recorded site is the token, no address in this program. A malloc whose
 * type Clang cannot infer gets the fallback token, and nodalloc keys it by its caller as it
 * keys a plain malloc.
 *
 * Usage: tokens_clang [loose]. `loose` (a debug library, whose entry points keep stack frames
 * and so cannot read their caller) checks the typed calls alone.
 */
#include "check.h"

struct node {
    struct node *next;
    long value;
};

struct blob {
    char bytes[24];
};

/* Global, so -rdynamic lets dladdr name them. */
__attribute__((noinline)) struct node *make_node_a(void) {
    struct node *n = malloc(sizeof(struct node));
    __asm__ volatile("" ::: "memory");
    return n;
}
__attribute__((noinline)) struct node *make_node_b(void) {
    struct node *n = malloc(sizeof(struct node));
    __asm__ volatile("" ::: "memory");
    return n;
}
__attribute__((noinline)) struct blob *make_blob(void) {
    struct blob *n = malloc(sizeof(struct blob));
    __asm__ volatile("" ::: "memory");
    return n;
}
/* A size Clang cannot type: the fallback token. */
__attribute__((noinline)) void *untyped_a(size_t size) {
    void *p = malloc(size);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) void *untyped_b(size_t size) {
    void *p = malloc(size);
    __asm__ volatile("" ::: "memory");
    return p;
}

static int partition(const void *p) { return nodalloc_partition_of(p); }

int main(int argc, char **argv) {
    require_nodalloc();
    int loose = argc > 1 && strcmp(argv[1], "loose") == 0;
    struct node *a = make_node_a(), *b = make_node_b();
    struct blob *c = make_blob();
    CHECK(a && b && c, "allocation failed");
    int pa = partition(a), pb = partition(b), pc = partition(c);
    CHECK(pa >= 0 && pc >= 0, "blocks without partitions (%d, %d)", pa, pc);
    CHECK(pa == pb, "struct node from two functions: partitions %d and %d", pa, pb);
    CHECK(pa != pc, "struct node and struct blob share partition %d", pa);
    const char *site = symbol_of(nodalloc_partition_site(pa));
    CHECK(strcmp(site, "make_node_a") != 0 && strcmp(site, "make_node_b") != 0,
          "struct node's partition %d was recorded from %s, a return address", pa, site);

    void *u = untyped_a(opaque_size(40)), *v = untyped_b(opaque_size(40));
    int pu = partition(u), pv = partition(v);
    CHECK(pu >= 0 && pv >= 0, "untyped blocks without partitions (%d, %d)", pu, pv);
    if (!loose) {
        CHECK(pu != pv, "untyped mallocs of two functions share partition %d", pu);
        const char *su = symbol_of(nodalloc_partition_site(pu));
        const char *sv = symbol_of(nodalloc_partition_site(pv));
        CHECK(strcmp(su, "untyped_a") == 0, "partition %d was recorded from %s", pu, su);
        CHECK(strcmp(sv, "untyped_b") == 0, "partition %d was recorded from %s", pv, sv);
    }

    a->value = 1;
    memset(c->bytes, 2, sizeof c->bytes);
    free(a);
    free(b);
    free(c);
    free(u);
    free(v);
    return finish("tokens_clang");
}
