/* The public suite of record's C programs, for the heap-misuse suite (scored by
 * scripts/misuse-score.sh, checked for nodalloc by tests/misuse_suite.rs): mimalloc-bench's
 * bench/security builds each of its 37 C programs at ALLOCATION_SIZE 8, 4096 and 262144, and this
 * program reproduces each binary. They are the PUBLIC_CASE rows of public_cases.def; its
 * PUBLIC_CASE_CXX rows, the suite's five C++ programs, are misuse_suite.cpp's.
 *
 * Usage: public_suite PROGRAM SIZE (SIZE is 8, 4096 or 262144) or public_suite list-public (every
 * binary: NAME PROGRAM SIZE, NAME as the public suite names it).
 *
 * It is a C program, built as the public suite builds its C programs (cc -O3 -DNDEBUG and the
 * flags below), because a verdict can depend on the process around the program: a C++ program
 * starts with libstdc++, which allocates its emergency exception pool (about 73 KiB) with malloc
 * before main. Under nodalloc that block takes the place of a C program's first 256 KiB block, the
 * program's own block lands elsewhere with mapped memory beside it, and the overflows and
 * underflows that fault in the public binaries write into that memory instead. Here, as in the
 * public binaries, the program's first allocation is the process's first.
 *
 * One function per program (public_programs.h), instantiated at each size by including that file
 * three times, so that SIZE is a constant as the program's ALLOCATION_SIZE is (its stack arrays
 * have a fixed size): doing what that program does and nothing more, the same allocator calls
 * with the same sizes, the same bad accesses, in the same order, and its NOT_CAUGHT line at the
 * same point. Nothing is printed or allocated before the misuse: the first output allocates
 * stdout's buffer (4096 bytes for a pipe or a file), and in several of these programs that
 * allocation is what makes the allocator look at the damage (secure mode's check of its
 * quarantine at the thread's next call, a free list popped through a smashed link), so it has to
 * come where the program's own first output comes. A verdict is the public one: a program that
 * prints its line is missed, whatever happens after; one that dies or exits before it is caught.
 *
 * The public programs call malloc, free and memcpy through wrappers that their build keeps the
 * compiler from inlining or analysing (-fno-inline -fno-inline-small-functions
 * -fno-ipa-pure-const, which tests/misuse_suite.rs passes for this program too), so that no
 * misuse is folded away; the wrappers here are noipa besides. The program runs under glibc,
 * nodalloc and other allocators alike, so it names no allocator's extras.
 */
#include "check.h"
#include "public_names.h"

#define MIB ((size_t)1024 * 1024)

/* The name the public suite gives the binary being run (see public_binary_name). */
static char public_name[64];

/* The public programs' NOT_CAUGHT line, with the binary's name after it. */
static void not_caught(void) {
    printf("NOT_CAUGHT %s\n", public_name);
    fflush(stdout);
}

__attribute__((noipa)) static void *malloc_opaque(size_t size) { return malloc(size); }

__attribute__((noipa)) static void free_opaque(void *block) { free(block); }

__attribute__((noipa)) static void *realloc_opaque(void *block, size_t size) {
    return realloc(block, size);
}

__attribute__((noipa)) static void *memcpy_opaque(void *to, const void *from, size_t length) {
    return memcpy(to, from, length);
}

/* nop, nop, nop, nop, ret (x86-64), padded to the 8 bytes the public program copies: it copies
 * sizeof of its pointer to the code, the code's 5 bytes and what follows them. */
static const unsigned char heap_code[8] = {0x90, 0x90, 0x90, 0x90, 0xc3, 0, 0, 0};

/* INSTANCE(public_double_free) is public_double_free_small, _medium or _large, as SIZE_NAME. */
#define INSTANCE_NAME(function, size_name) function##_##size_name
#define INSTANCE_EXPANDED(function, size_name) INSTANCE_NAME(function, size_name)
#define INSTANCE(function) INSTANCE_EXPANDED(function, SIZE_NAME)

#define SIZE ((size_t)8)
#define SIZE_NAME small
#include "public_programs.h"
#undef SIZE
#undef SIZE_NAME

#define SIZE ((size_t)4096)
#define SIZE_NAME medium
#include "public_programs.h"
#undef SIZE
#undef SIZE_NAME

#define SIZE ((size_t)262144)
#define SIZE_NAME large
#include "public_programs.h"
#undef SIZE
#undef SIZE_NAME

typedef struct {
    const char *name;
    /* The sizes the public suite builds it at, as the table writes them ("8 4096 262144"). */
    const char *sizes;
    /* At 8, 4096 and 262144 bytes. */
    int (*run[3])(void);
} PublicProgram;

/* Every C program of the public suite, in the order of its table (public_cases.def), which also
 * says at which sizes nodalloc must catch each; this program ignores those columns, and the C++
 * programs' rows. */
static const PublicProgram PUBLIC_PROGRAMS[] = {
#define PUBLIC_CASE(name, function, sizes, caught_default, caught_secure)                      \
    {name, sizes, {function##_small, function##_medium, function##_large}},
#define PUBLIC_CASE_CXX(name, function, sizes, caught_default, caught_secure)
#include "public_cases.def"
#undef PUBLIC_CASE
#undef PUBLIC_CASE_CXX
};

static const size_t SIZES[] = {8, 4096, 262144};

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "list-public") == 0) {
        for (size_t i = 0; i < COUNT(PUBLIC_PROGRAMS); i++) {
            for (size_t j = 0; j < COUNT(SIZES); j++) {
                if (public_built_at(PUBLIC_PROGRAMS[i].sizes, SIZES[j])) {
                    char name[sizeof public_name];
                    public_binary_name(PUBLIC_PROGRAMS[i].name, PUBLIC_PROGRAMS[i].sizes, SIZES[j], name,
                                       sizeof name);
                    printf("%s %s %zu\n", name, PUBLIC_PROGRAMS[i].name, SIZES[j]);
                }
            }
        }
        return 0;
    }
    CHECK(argc == 3, "usage: public_suite PROGRAM SIZE | public_suite list-public");
    no_core_files();

    const char *name = argv[1];
    size_t size = public_size_arg(argv[2]);
    /* The program runs as it is, from here: no output before its own. */
    for (size_t i = 0; i < COUNT(PUBLIC_PROGRAMS); i++) {
        const PublicProgram *program = &PUBLIC_PROGRAMS[i];
        if (strcmp(program->name, name) == 0) {
            CHECK(public_built_at(program->sizes, size), "the public suite builds %s at %s bytes, not %zu",
                  program->name, program->sizes, size);
            public_binary_name(program->name, program->sizes, size, public_name, sizeof public_name);
            return program->run[public_size_index(size)]();
        }
    }
    CHECK(0, "unknown program %s (public_suite list-public names them; the C++ programs are "
             "misuse_suite's)",
          name);
    return 2;
}
