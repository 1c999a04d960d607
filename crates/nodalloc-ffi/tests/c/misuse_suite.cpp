/* The heap-misuse suite: one bad operation per case, run under any allocator (scored by
 * scripts/misuse-score.sh and checked for nodalloc by tests/misuse_suite.rs). Two sets of cases:
 * the project's own categories (misuse_cases.def) and the programs of the public suite of record,
 * mimalloc-bench's bench/security (public_cases.def): its C++ programs here (see "The public
 * suite" below), its C programs in public_suite.c, a C program as they are.
 *
 * Usage: misuse_suite CATEGORY SIZE or misuse_suite PROGRAM SIZE (SIZE is 8, 4096 or 262144; a
 * public program runs at the sizes its table row builds it at), misuse_suite list (every
 * category, one per line) or misuse_suite list-public (every public C++ binary: NAME PROGRAM
 * SIZE, NAME as the public suite names it). The categories are the rows of misuse_cases.def, the
 * table that also holds, per mode, the sizes at which nodalloc must catch each: a new case is a
 * function here and a row there. The public C++ programs are the PUBLIC_CASE_CXX rows of
 * public_cases.def, likewise.
 *
 * A case of the project allocates, prints "pointer 0x…" (the pointer the misuse concerns, as %p
 * prints it) and possibly "nearby 0x…" lines (blocks the damage may reach, which an allocator's
 * report may name instead), then makes the bad operation, then what a real program would do next
 * (frees the damaged block and its neighbours, allocates and frees more of the same size), which
 * gives the allocator a chance to notice. If the process is still alive it prints "unnoticed
 * CATEGORY SIZE" and exits 0. A case whose harm is an outcome rather than a crash (an address
 * handed out twice, a forged address handed out, a freed address handed straight back) prints
 * "unnoticed" only when it observes that outcome, and "outcome avoided" otherwise.
 *
 * Caught means: killed by a signal, a non-zero exit, or no "unnoticed" line. A public program
 * prints "NOT_CAUGHT NAME" where the public one prints NOT_CAUGHT, and is judged by the public
 * rule (below). The program runs under glibc, nodalloc and other allocators alike, so it names no
 * allocator's extras.
 */
#include "check.h"
#include "public_names.h"

#include <new>
#include <string>
#include <pthread.h>
#include <sys/mman.h>

#define MIB ((size_t)1024 * 1024)

/* Blocks allocated around the block a case damages. */
#define HOOD 16
#define TARGET (HOOD / 2)

/* A global the free-list poisoning aims malloc at, and the fake chunk of free-fake-chunk. */
alignas(4096) static unsigned char global_area[2 * MIB];

static void announce(const void *pointer) {
    printf("pointer %p\n", pointer);
    fflush(stdout);
}

static void nearby(const void *pointer) {
    printf("nearby %p\n", pointer);
    fflush(stdout);
}

__attribute__((noipa)) static void *xmalloc(size_t size) {
    void *block = malloc(opaque_size(size));
    CHECK(block != NULL || size == 0, "malloc(%zu) failed", size);
    return block;
}

/* Frees through an integer, where the compiler's use-after-free and free-of-non-heap warnings
 * cannot follow. */
__attribute__((noipa)) static void free_address(uintptr_t address) {
    free((void *)opaque_size(address));
}

__attribute__((noipa)) static void *realloc_address(uintptr_t address, size_t size) {
    return realloc((void *)opaque_size(address), opaque_size(size));
}

__attribute__((noipa)) static void write_bytes(uintptr_t address, int value, size_t length) {
    memset((void *)opaque_size(address), value, length);
}

__attribute__((noipa)) static void write_word(uintptr_t address, uintptr_t value) {
    memcpy((void *)opaque_size(address), &value, sizeof value);
}

__attribute__((noipa)) static unsigned read_bytes(uintptr_t address, size_t length) {
    const volatile unsigned char *bytes = (const volatile unsigned char *)opaque_size(address);
    unsigned sum = 0;
    for (size_t i = 0; i < length; i++) {
        sum += bytes[i];
    }
    return sum;
}

/* What a program does next: allocate `count` blocks of `size`, use them, free them, twice. */
static void churn(size_t size, int count) {
    void *blocks[64];
    CHECK(count <= 64, "churn of %d", count);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < count; i++) {
            blocks[i] = xmalloc(size);
            if (blocks[i] != NULL) {
                write_bytes((uintptr_t)blocks[i], 0x5a, size < 64 ? size : 64);
            }
        }
        for (int i = 0; i < count; i++) {
            free(blocks[i]);
        }
    }
}

/* HOOD blocks of `size`; the odd ones are freed again, so that the target (even) has free
 * blocks as well as live ones around it. All are announced as nearby. */
static void make_hood(char **hood, size_t size) {
    for (int i = 0; i < HOOD; i++) {
        hood[i] = (char *)xmalloc(size);
        fill(hood[i], size, i);
    }
    for (int i = 1; i < HOOD; i += 2) {
        free(hood[i]);
    }
    for (int i = 0; i < HOOD; i++) {
        if (i != TARGET) {
            nearby(hood[i]);
        }
    }
}

/* Frees the live blocks of the neighbourhood (the target included), then churns. */
static void end_hood(char **hood, size_t size) {
    for (int i = 0; i < HOOD; i += 2) {
        free(hood[i]);
    }
    churn(size, 16);
}

static int duplicates(void **blocks, int count) {
    for (int i = 0; i < count; i++) {
        for (int j = i + 1; j < count; j++) {
            if (blocks[i] != NULL && blocks[i] == blocks[j]) {
                return 1;
            }
        }
    }
    return 0;
}

/* ---- Double frees ---- */

static int double_free(size_t size) {
    char *a = (char *)xmalloc(size);
    char *b = (char *)xmalloc(size);
    uintptr_t address = (uintptr_t)a;
    announce(a);
    free(a);
    free_address(address);
    free(b);
    churn(size, 8);
    return 1;
}

static int double_free_interleaved(size_t size) {
    char *a = (char *)xmalloc(size);
    char *b = (char *)xmalloc(size);
    uintptr_t address = (uintptr_t)a;
    announce(a);
    free(a);
    free(b);
    free_address(address);
    churn(size, 8);
    return 1;
}

static int double_free_after_100(size_t size) {
    char *a = (char *)xmalloc(size);
    void *others[100];
    for (int i = 0; i < 100; i++) {
        others[i] = xmalloc(size);
    }
    uintptr_t address = (uintptr_t)a;
    announce(a);
    free(a);
    for (int i = 0; i < 100; i++) {
        free(others[i]);
    }
    free_address(address);
    churn(size, 8);
    return 1;
}

static void *free_in_thread(void *block) {
    free(block);
    return NULL;
}

static int double_free_other_thread(size_t size) {
    char *a = (char *)xmalloc(size);
    uintptr_t address = (uintptr_t)a;
    announce(a);
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, free_in_thread, a) == 0, "pthread_create failed");
    CHECK(pthread_join(thread, NULL) == 0, "pthread_join failed");
    free_address(address);
    churn(size, 8);
    return 1;
}

static int double_free_after_realloc(size_t size) {
    /* Grows until realloc moves the block; the old address is then freed again. */
    char *current = (char *)xmalloc(size);
    char *blocker = (char *)xmalloc(size);
    uintptr_t stale = 0;
    for (size_t grown = size * 2; grown <= 64 * MIB; grown *= 2) {
        uintptr_t before = (uintptr_t)current;
        current = (char *)realloc_address(before, grown);
        CHECK(current != NULL, "realloc to %zu failed", grown);
        if ((uintptr_t)current != before) {
            stale = before;
            break;
        }
    }
    CHECK(stale != 0, "realloc never moved the block");
    announce((void *)stale);
    free_address(stale);
    free(current);
    free(blocker);
    churn(size, 8);
    return 1;
}

static int double_free_duplicates(size_t size) {
    char *a = (char *)xmalloc(size);
    uintptr_t address = (uintptr_t)a;
    announce(a);
    free(a);
    free_address(address);
    void *blocks[16];
    for (int i = 0; i < 16; i++) {
        blocks[i] = xmalloc(size);
    }
    int seen = duplicates(blocks, 16);
    if (seen) {
        fprintf(stderr, "two of the next 16 mallocs of %zu bytes returned the same address\n",
                size);
    }
    for (int i = 0; i < 16; i++) {
        if (!seen) {
            free(blocks[i]);
        }
    }
    return seen;
}

/* ---- Invalid frees ---- */

static int free_interior(size_t size) {
    char *p = (char *)xmalloc(size);
    char *pointer = p + (size == 8 ? 4 : size / 2);
    announce(pointer);
    free_address((uintptr_t)pointer);
    free(p);
    churn(size, 8);
    return 1;
}

static int free_plus_4096(size_t size) {
    char *p = (char *)xmalloc(size);
    char *pointer = p + 4096;
    announce(pointer);
    free_address((uintptr_t)pointer);
    free(p);
    churn(size, 8);
    return 1;
}

static int free_minus_16(size_t size) {
    char *p = (char *)xmalloc(size);
    char *pointer = p - 16;
    announce(pointer);
    free_address((uintptr_t)pointer);
    free(p);
    churn(size, 8);
    return 1;
}

__attribute__((noipa)) static void free_stack_block(size_t size) {
    /* 16-aligned, as a malloc'd block would be. */
    char *on_stack = (char *)__builtin_alloca(opaque_size(size + 16));
    char *pointer = (char *)(((uintptr_t)on_stack + 15) & ~(uintptr_t)15);
    memset(pointer, 1, size);
    announce(pointer);
    free_address((uintptr_t)pointer);
}

static int free_stack(size_t size) {
    free_stack_block(size);
    churn(size, 8);
    return 1;
}

static int free_global(size_t size) {
    unsigned char *pointer = global_area + 64;
    memset(pointer, 1, size);
    announce(pointer);
    free_address((uintptr_t)pointer);
    churn(size, 8);
    return 1;
}

static int free_wild(size_t size) {
    /* Far from the program, its libraries, its stack and its heap (32 TiB). */
    uintptr_t pointer = ((uintptr_t)1 << 45) + size * 16;
    announce((void *)pointer);
    free_address(pointer);
    churn(size, 8);
    return 1;
}

static int free_mmap(size_t size) {
    size_t length = (size + 4095) & ~(size_t)4095;
    void *mapped = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(mapped != MAP_FAILED, "mmap of %zu bytes failed", length);
    memset(mapped, 1, size);
    announce(mapped);
    free_address((uintptr_t)mapped);
    churn(size, 8);
    return 1;
}

static int free_fake_chunk(size_t size) {
    /* A block in a global, dressed as a glibc chunk of the right size (the "house of spirit"),
     * followed by chunks that look in use. */
    uintptr_t *words = (uintptr_t *)(global_area + 4096);
    size_t chunk = (size + 8 + 15) & ~(size_t)15;
    if (chunk < 32) {
        chunk = 32;
    }
    words[0] = 0;
    words[1] = chunk | 1;
    for (size_t offset = chunk; offset < chunk + 256; offset += 32) {
        uintptr_t *next = (uintptr_t *)((unsigned char *)words + offset);
        next[0] = 0;
        next[1] = 32 | 1;
    }
    unsigned char *pointer = (unsigned char *)(words + 2);
    announce(pointer);
    free_address((uintptr_t)pointer);
    void *blocks[8];
    int handed_out = 0;
    for (int i = 0; i < 8; i++) {
        blocks[i] = xmalloc(size);
        handed_out |= blocks[i] == pointer;
    }
    if (handed_out) {
        fprintf(stderr, "malloc(%zu) returned the fake chunk %p\n", size, (void *)pointer);
    }
    for (int i = 0; i < 8; i++) {
        if (blocks[i] != pointer) {
            free(blocks[i]);
        }
    }
    churn(size, 8);
    return 1;
}

static int realloc_freed(size_t size) {
    char *p = (char *)xmalloc(size);
    uintptr_t address = (uintptr_t)p;
    announce(p);
    free(p);
    void *moved = realloc_address(address, size * 2);
    free(moved);
    churn(size, 8);
    return 1;
}

static int realloc_interior(size_t size) {
    char *p = (char *)xmalloc(size);
    char *pointer = p + (size == 8 ? 4 : size / 2);
    announce(pointer);
    void *moved = realloc_address((uintptr_t)pointer, size * 2);
    free(moved);
    free(p);
    churn(size, 8);
    return 1;
}

/* ---- Overflows and underflows ---- */

static int overflow_1(size_t size) {
    char *hood[HOOD];
    make_hood(hood, size);
    announce(hood[TARGET]);
    write_bytes((uintptr_t)hood[TARGET] + size, 0x41, 1);
    end_hood(hood, size);
    return 1;
}

static int overflow_usable_1(size_t size) {
    char *hood[HOOD];
    make_hood(hood, size);
    size_t usable = malloc_usable_size(hood[TARGET]);
    announce(hood[TARGET]);
    write_bytes((uintptr_t)hood[TARGET] + usable, 0x41, 1);
    end_hood(hood, size);
    return 1;
}

static int overflow_memcpy_32(size_t size) {
    char *hood[HOOD];
    make_hood(hood, size);
    char source[32];
    memset(source, 0x41, sizeof source);
    announce(hood[TARGET]);
    memcpy((void *)opaque_size((uintptr_t)hood[TARGET] + size), source, sizeof source);
    end_hood(hood, size);
    return 1;
}

static int overflow_4096(size_t size) {
    char *hood[HOOD];
    make_hood(hood, size);
    announce(hood[TARGET]);
    write_bytes((uintptr_t)hood[TARGET] + size, 0x41, 4096);
    end_hood(hood, size);
    return 1;
}

static int overflow_far(size_t size) {
    char *hood[HOOD];
    make_hood(hood, size);
    announce(hood[TARGET]);
    uintptr_t far = (uintptr_t)hood[TARGET] + size + MIB;
    write_bytes(far, 0x41, 1);
    CHECK(read_bytes(far, 1) == 0x41, "the byte 1 MiB past the end did not keep its value");
    end_hood(hood, size);
    return 1;
}

static int overread_4096(size_t size) {
    char *hood[HOOD];
    make_hood(hood, size);
    announce(hood[TARGET]);
    unsigned sum = read_bytes((uintptr_t)hood[TARGET] + size, 4096);
    opaque_int((int)sum);
    end_hood(hood, size);
    return 1;
}

static int overflow_after_shrink(size_t size) {
    char *p = (char *)xmalloc(size);
    char *after = (char *)xmalloc(size);
    fill(p, size, 1);
    char *shrunk = (char *)realloc_address((uintptr_t)p, size / 2);
    CHECK(shrunk != NULL, "realloc to %zu failed", size / 2);
    announce(shrunk);
    /* Writes the old size, as if the program had not noticed the shrink. */
    write_bytes((uintptr_t)shrunk + size / 2, 0x41, size - size / 2);
    free(shrunk);
    free(after);
    churn(size / 2, 8);
    churn(size, 8);
    return 1;
}

static int underflow_1(size_t size) {
    char *hood[HOOD];
    make_hood(hood, size);
    announce(hood[TARGET]);
    write_bytes((uintptr_t)hood[TARGET] - 1, 0x41, 1);
    end_hood(hood, size);
    return 1;
}

static int underflow_16(size_t size) {
    char *hood[HOOD];
    make_hood(hood, size);
    announce(hood[TARGET]);
    write_bytes((uintptr_t)hood[TARGET] - 16, 0x41, 16);
    end_hood(hood, size);
    return 1;
}

/* ---- Use after free ---- */

/* A target block with live and free blocks around it, freed. */
static uintptr_t freed_in_hood(char **hood, size_t size) {
    make_hood(hood, size);
    uintptr_t address = (uintptr_t)hood[TARGET];
    announce(hood[TARGET]);
    free(hood[TARGET]);
    hood[TARGET] = (char *)xmalloc(size); /* freed with the others at the end */
    return address;
}

static int uaf_write_first(size_t size) {
    char *hood[HOOD];
    char *p = (char *)xmalloc(size);
    uintptr_t address = (uintptr_t)p;
    make_hood(hood, size);
    announce(p);
    free(p);
    write_word(address, (uintptr_t)0x4141414141414141);
    end_hood(hood, size);
    return 1;
}

static int uaf_write_middle(size_t size) {
    char *hood[HOOD];
    char *p = (char *)xmalloc(size);
    uintptr_t address = (uintptr_t)p;
    make_hood(hood, size);
    announce(p);
    free(p);
    write_bytes(address + (size == 8 ? 4 : size / 2), 0x41, 4);
    end_hood(hood, size);
    return 1;
}

static int uaf_memset(size_t size) {
    char *hood[HOOD];
    char *p = (char *)xmalloc(size);
    uintptr_t address = (uintptr_t)p;
    make_hood(hood, size);
    announce(p);
    free(p);
    write_bytes(address, 0x41, size);
    end_hood(hood, size);
    return 1;
}

static int uaf_read(size_t size) {
    char *hood[HOOD];
    uintptr_t address = freed_in_hood(hood, size);
    opaque_int((int)read_bytes(address, size < 64 ? size : 64));
    end_hood(hood, size);
    return 1;
}

static int uaf_write_then_malloc(size_t size) {
    /* A write into the middle of a freed block, then mallocs of its size until it comes back
     * (or 256 of them). */
    char *p = (char *)xmalloc(size);
    char *other = (char *)xmalloc(size);
    uintptr_t address = (uintptr_t)p;
    announce(p);
    free(p);
    write_bytes(address + (size == 8 ? 4 : size / 2), 0x41, 4);
    void *blocks[256];
    int count = 0;
    while (count < 256) {
        blocks[count] = xmalloc(size);
        if ((uintptr_t)blocks[count++] == address) {
            break;
        }
    }
    for (int i = 0; i < count; i++) {
        free(blocks[i]);
    }
    free(other);
    churn(size, 8);
    return 1;
}

static int freelist_poison(size_t size) {
    /* The link a freed block may hold in its first word, overwritten with a global's address:
     * does malloc hand the global out? */
    unsigned char *target = global_area + MIB;
    char *p = (char *)xmalloc(size);
    char *other = (char *)xmalloc(size);
    uintptr_t address = (uintptr_t)p;
    announce(p);
    free(p);
    write_word(address, (uintptr_t)target);
    void *blocks[16];
    int forged = 0;
    for (int i = 0; i < 16; i++) {
        blocks[i] = xmalloc(size);
        forged |= blocks[i] == target;
    }
    if (forged) {
        fprintf(stderr, "malloc(%zu) returned the global %p\n", size, (void *)target);
        return 1;
    }
    for (int i = 0; i < 16; i++) {
        free(blocks[i]);
    }
    free(other);
    return 0;
}

/* ---- Zero-size blocks: SIZE picks how many bytes (1, 8, 16) go through malloc(0) ---- */

static size_t zero_length(size_t size) { return size == 8 ? 1 : size == 4096 ? 8 : 16; }

static int zero_write(size_t size) {
    void *before = xmalloc(0);
    char *z = (char *)xmalloc(0);
    void *after = xmalloc(0);
    CHECK(z != NULL, "malloc(0) returned NULL");
    announce(z);
    write_bytes((uintptr_t)z, 0x41, zero_length(size));
    free(z);
    free(before);
    free(after);
    churn(0, 8);
    return 1;
}

static int zero_read(size_t size) {
    void *before = xmalloc(0);
    char *z = (char *)xmalloc(0);
    void *after = xmalloc(0);
    CHECK(z != NULL, "malloc(0) returned NULL");
    announce(z);
    opaque_int((int)read_bytes((uintptr_t)z, zero_length(size)));
    free(z);
    free(before);
    free(after);
    churn(0, 8);
    return 1;
}

/* ---- Reuse ---- */

static int reuse_immediate(size_t size) {
    char *p = (char *)xmalloc(size);
    char *other = (char *)xmalloc(size);
    uintptr_t address = (uintptr_t)p;
    announce(p);
    free(p);
    char *q = (char *)xmalloc(size);
    int same = (uintptr_t)q == address;
    free(q);
    free(other);
    return same;
}

/* ---- C++ ---- */

/* The case being run, for a destructor that gives up (below). */
static const char *case_name = "";
static size_t case_size;

/* A non-trivial destructor gives new[] an array cookie (the element count in front of the
 * array), which is what makes mismatched forms free a pointer other than the block's.
 * `delete[]` of a plain `new` object reads its count from whatever lies before the object and
 * runs that many destructors before the allocator is called at all: past 2^24 of them (a
 * count no array here has), the destructors give up and report the case unnoticed, where a
 * count of random bits would otherwise loop for ever. */
static unsigned long destructors;
template <size_t N> struct Object {
    unsigned char bytes[N];
    ~Object() {
        if (++destructors > (1ul << 24)) {
            printf("destructors ran over memory that was never an array\nunnoticed %s %zu\n",
                   case_name, case_size);
            fflush(stdout);
            _exit(0);
        }
    }
};

__attribute__((noipa)) static void *opaque_object(void *object) { return object; }

template <size_t N> static int new_array_delete() {
    Object<N> *array = new Object<N>[1];
    array = (Object<N> *)opaque_object(array);
    announce(array);
    delete array;
    churn(N, 8);
    return 1;
}

template <size_t N> static int new_delete_array() {
    Object<N> *object = new Object<N>;
    object = (Object<N> *)opaque_object(object);
    /* delete[] looks for the array cookie in front of the object and hands operator delete[]
     * the cookie's address. */
    announce((unsigned char *)object - sizeof(size_t));
    nearby(object);
    delete[] object;
    churn(N, 8);
    return 1;
}

static int delete_wrong_size(size_t size) {
    size_t wrong = size * 8;
    void *p = ::operator new(opaque_size(size));
    void *neighbour = ::operator new(opaque_size(size));
    memset(p, 1, size);
    announce(p);
    ::operator delete((void *)opaque_pointer(p), opaque_size(wrong));
    void *blocks[8];
    int reused = 0;
    for (int i = 0; i < 8; i++) {
        blocks[i] = ::operator new(opaque_size(wrong));
        reused |= blocks[i] == p;
    }
    if (reused) {
        fprintf(stderr, "new(%zu) returned the %zu-byte block deleted as %zu bytes\n", wrong, size,
                wrong);
    }
    for (int i = 0; i < 8; i++) {
        ::operator delete(blocks[i]);
    }
    ::operator delete(neighbour);
    churn(size, 8);
    return 1;
}

template <size_t N> static int malloc_delete() {
    Object<N> *object = (Object<N> *)xmalloc(sizeof(Object<N>));
    object = (Object<N> *)opaque_object(object);
    announce(object);
    delete object;
    churn(N, 8);
    return 1;
}

template <size_t N> static int new_free() {
    Object<N> *object = new Object<N>;
    announce(object);
    free_address((uintptr_t)object);
    churn(N, 8);
    return 1;
}

/* The C++ cases instantiated at each size. */
#define BY_SIZE(function)                                                                      \
    static int function##_(size_t size) {                                                      \
        return size == 8 ? function<8>() : size == 4096 ? function<4096>()                     \
                                                        : function<262144>();                  \
    }
BY_SIZE(new_array_delete)
BY_SIZE(new_delete_array)
BY_SIZE(malloc_delete)
BY_SIZE(new_free)

/* ---- The public suite: mimalloc-bench's bench/security, its C++ programs ----
 *
 * One function per C++ program of the public suite of record (the PUBLIC_CASE_CXX rows of
 * public_cases.def), doing what that program does and nothing more, and printing its NOT_CAUGHT
 * line at the same point; its C programs are public_suite.c's, a C program as they are (that
 * file's header says why, and how the reproductions are made). SIZE is the program's
 * ALLOCATION_SIZE. Unlike the cases above, nothing is announced, printed or allocated before the
 * misuse. A verdict is the public one: a program that prints its line is missed, whatever happens
 * after; one that dies or exits before it is caught. */

/* The name the public suite gives the binary being run (see public_binary_name). */
static char public_name[64];

/* The public programs' NOT_CAUGHT line, with the binary's name after it. */
static void not_caught(void) {
    printf("NOT_CAUGHT %s\n", public_name);
    fflush(stdout);
}

/* Run at 4096 only (the public suite builds its C++ programs once, at that ALLOCATION_SIZE).
 * The pointer goes through opaque_object only to keep the compiler's mismatched-new-delete
 * warning quiet: the operators called, and their arguments, are the public program's
 * (operator new(1) then operator delete[](p); new[] then a sized delete). */

/* The public suite's delete_type_size_mismatch, as it behaves: it deletes a `new char` as a
 * 72-byte struct, but GCC at -O3 removes the `new`/`delete` pair, so the program only prints its
 * line, and every allocator misses it. So does this one. (The misuse it meant, a sized delete of
 * the wrong size, is delete-wrong-size's among the project's cases.) */
template <size_t SIZE> static int public_delete_type_size_mismatch() {
    not_caught();
    return 0;
}

template <size_t SIZE> static int public_invalid_array_delete_char() {
    char *object = (char *)opaque_object(new char);
    delete[] object;
    not_caught();
    return 0;
}

/* delete[] reads the array count from the word before the object, runs that many destructors
 * and gives operator delete[] the count's address. */
template <size_t SIZE> static int public_invalid_array_delete_string() {
    std::string *object = (std::string *)opaque_object(new std::string);
    delete[] object;
    not_caught();
    return 0;
}

template <size_t SIZE> static int public_invalid_delete_array_char() {
    char *array = (char *)opaque_object(new char[SIZE]);
    delete array;
    not_caught();
    return 0;
}

/* delete destroys the first string and hands operator delete the first string's address, 8 bytes
 * into the block (past the array count), with the size of one string. */
template <size_t SIZE> static int public_invalid_delete_array_string() {
    std::string *array = (std::string *)opaque_object(new std::string[SIZE]);
    delete array;
    not_caught();
    return 0;
}

struct PublicProgram {
    const char *name;
    /* The sizes the public suite builds it at, as the table writes them ("8 4096 262144"). */
    const char *sizes;
    /* At 8, 4096 and 262144 bytes. */
    int (*run[3])(void);
};

/* Every C++ program of the public suite, in the order of its table (public_cases.def), which
 * also says at which sizes nodalloc must catch each; this program ignores those columns, and the
 * C programs' rows (public_suite.c's). */
static const PublicProgram PUBLIC_PROGRAMS[] = {
#define PUBLIC_CASE(name, function, sizes, caught_default, caught_secure)
#define PUBLIC_CASE_CXX(name, function, sizes, caught_default, caught_secure)                  \
    {name, sizes, {function<8>, function<4096>, function<262144>}},
#include "public_cases.def"
#undef PUBLIC_CASE
#undef PUBLIC_CASE_CXX
};

struct Category {
    const char *name;
    int (*run)(size_t size);
};

/* Every category, in the order of the table (misuse_cases.def), which also says at which sizes
 * nodalloc must catch it; this program ignores those columns. */
static const Category CATEGORIES[] = {
#define MISUSE_CASE(name, function, caught_default, caught_secure) {name, function},
#include "misuse_cases.def"
#undef MISUSE_CASE
};

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "list") == 0) {
        for (const Category &category : CATEGORIES) {
            printf("%s\n", category.name);
        }
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "list-public") == 0) {
        for (const PublicProgram &program : PUBLIC_PROGRAMS) {
            for (size_t size : {(size_t)8, (size_t)4096, (size_t)262144}) {
                if (public_built_at(program.sizes, size)) {
                    char name[sizeof public_name];
                    public_binary_name(program.name, program.sizes, size, name, sizeof name);
                    printf("%s %s %zu\n", name, program.name, size);
                }
            }
        }
        return 0;
    }
    CHECK(argc == 3,
          "usage: misuse_suite CATEGORY SIZE | misuse_suite PROGRAM SIZE | misuse_suite list | "
          "misuse_suite list-public");
    no_core_files();

    const char *name = argv[1];
    size_t size = public_size_arg(argv[2]);
    /* A public program runs as it is, from here: no output before its own. */
    for (const PublicProgram &program : PUBLIC_PROGRAMS) {
        if (strcmp(program.name, name) == 0) {
            CHECK(public_built_at(program.sizes, size), "the public suite builds %s at %s bytes, not %zu",
                  program.name, program.sizes, size);
            public_binary_name(program.name, program.sizes, size, public_name, sizeof public_name);
            return program.run[public_size_index(size)]();
        }
    }
    /* The first output allocates stdout's buffer (4096 bytes for a pipe): done here, before the
     * case, it cannot take a block the case has just freed. */
    printf("case %s %zu\n", name, size);
    fflush(stdout);
    case_name = name;
    case_size = size;
    for (const Category &category : CATEGORIES) {
        if (strcmp(category.name, name) == 0) {
            if (category.run(size)) {
                printf("unnoticed %s %zu\n", name, size);
            } else {
                printf("outcome avoided %s %zu\n", name, size);
            }
            fflush(stdout);
            return 0;
        }
    }
    CHECK(0, "unknown category %s (misuse_suite list and list-public name them; the public C "
             "programs are public_suite's)",
          name);
    return 2;
}
