/* C++'s operator new and delete, every form, served by nodalloc (tests/c_abi.rs compiles this
 * file with c++; the other programs are C). Usage: cxx sites|loose. `sites` (a release library
 * with NODALLOC_CALLSITE set) also checks that two functions' `new` land in two partitions
 * named after them; `loose` (any build) checks the operators' contract alone.
 *
 * Checked: blocks come from nodalloc; arrays, aligned and nothrow forms; a failed `new`
 * throws std::bad_alloc after running the new-handler, and a failed nothrow `new` returns
 * nullptr; sized and aligned deletes.
 */
#include <new>

#include "check.h"

struct Small {
    char data[40];
};

struct alignas(256) Aligned {
    char data[100];
};

/* Global and extern "C": dladdr names them. */
extern "C" __attribute__((noinline, noipa)) Small *make_a() {
    Small *p = new Small();
    __asm__ volatile("" ::: "memory");
    return p;
}
extern "C" __attribute__((noinline, noipa)) Small *make_b() {
    Small *p = new Small();
    __asm__ volatile("" ::: "memory");
    return p;
}

static int handler_calls;

static void out_of_memory_handler() {
    handler_calls++;
    std::set_new_handler(nullptr);
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: cxx sites|loose");
    require_nodalloc();
    bool sites = strcmp(argv[1], "sites") == 0;

    Small *a = make_a(), *b = make_b();
    CHECK(NODALLOC(nodalloc_node_of)(a) >= 0, "new Small is not nodalloc's (%p)", (void *)a);
    if (sites) {
        int pa = NODALLOC(nodalloc_partition_of)(a), pb = NODALLOC(nodalloc_partition_of)(b);
        CHECK(pa >= 0 && pb >= 0, "no partitions (%d, %d)", pa, pb);
        CHECK(pa != pb, "both functions' new share partition %d", pa);
        const char *sa = symbol_of(NODALLOC(nodalloc_partition_site)(pa));
        const char *sb = symbol_of(NODALLOC(nodalloc_partition_site)(pb));
        CHECK(strcmp(sa, "make_a") == 0, "partition %d was recorded from %s", pa, sa);
        CHECK(strcmp(sb, "make_b") == 0, "partition %d was recorded from %s", pb, sb);
    }
    delete a;
    delete b;

    int *array = new int[opaque_size(1000)];
    CHECK(NODALLOC(nodalloc_node_of)(array) >= 0, "new int[] is not nodalloc's");
    for (int i = 0; i < 1000; i++) {
        array[i] = i;
    }
    delete[] array;

    Aligned *aligned = new Aligned();
    CHECK(((uintptr_t)aligned & 255) == 0, "new Aligned at %p", (void *)aligned);
    CHECK(NODALLOC(nodalloc_node_of)(aligned) >= 0, "new Aligned is not nodalloc's");
    delete aligned;
    Aligned *aligned_array = new Aligned[opaque_size(7)];
    CHECK(((uintptr_t)aligned_array & 255) == 0, "new Aligned[] at %p", (void *)aligned_array);
    delete[] aligned_array;
    /* Again and again: after the first, from the thread's cache, where plain blocks of the same
     * classes (a malloc of the rounded size) go too. */
    for (int i = 0; i < 200; i++) {
        Aligned *again = new Aligned();
        CHECK(((uintptr_t)again & 255) == 0, "new Aligned at %p, round %d", (void *)again, i);
        delete again;
        void *small = ::operator new(opaque_size(40), std::align_val_t(64));
        CHECK(((uintptr_t)small & 63) == 0, "aligned new(40, 64) at %p, round %d", small, i);
        ::operator delete(small, std::align_val_t(64));
        free(malloc(opaque_size(i % 2 ? 64 : 256)));
    }
    void *aligned_nothrow = ::operator new[](opaque_size(64), std::align_val_t(128), std::nothrow);
    CHECK(aligned_nothrow != nullptr && ((uintptr_t)aligned_nothrow & 127) == 0,
          "aligned nothrow new at %p", aligned_nothrow);
    ::operator delete[](aligned_nothrow, std::align_val_t(128), std::nothrow);

    void *sized = ::operator new(opaque_size(300));
    memset(sized, 7, 300);
    ::operator delete(sized, 300);

    size_t huge = opaque_size((size_t)1 << 62);
    char *none = new (std::nothrow) char[huge];
    CHECK(none == nullptr, "nothrow new of 2^62 bytes returned %p", (void *)none);
    bool caught = false;
    try {
        char *never = new char[huge];
        __asm__ volatile("" : : "r"(never) : "memory");
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK(caught, "new of 2^62 bytes did not throw std::bad_alloc");
    std::set_new_handler(out_of_memory_handler);
    caught = false;
    try {
        void *never = ::operator new(huge, std::align_val_t(64));
        __asm__ volatile("" : : "r"(never) : "memory");
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK(caught && handler_calls == 1, "aligned new of 2^62: caught %d, handler calls %d",
          caught, handler_calls);

    return finish("cxx");
}
