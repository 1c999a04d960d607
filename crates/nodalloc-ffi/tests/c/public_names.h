/* The public suite's binaries' names and sizes, shared by public_suite.c (its C programs) and
 * misuse_suite.cpp (its C++ ones). Plain C; included after check.h (its CHECK). */
#ifndef NODALLOC_PUBLIC_NAMES_H
#define NODALLOC_PUBLIC_NAMES_H

/* A SIZE argument: 8, 4096 or 262144 (exits naming it otherwise). */
static inline size_t public_size_arg(const char *text) {
    char *end = NULL;
    size_t size = strtoul(text, &end, 10);
    CHECK(*end == 0 && (size == 8 || size == 4096 || size == 262144),
          "SIZE must be 8, 4096 or 262144, not %s", text);
    return size;
}

/* 0, 1 or 2 for 8, 4096 or 262144 bytes. */
static inline int public_size_index(size_t size) { return size == 8 ? 0 : size == 4096 ? 1 : 2; }

/* Whether `sizes` (a table's sizes column, "8 4096 262144") holds `size`. */
static inline int public_built_at(const char *sizes, size_t size) {
    const char *cursor = sizes;
    while (*cursor != 0) {
        char *end = NULL;
        size_t built = strtoul(cursor, &end, 10);
        if (end == cursor) {
            return 0;
        }
        if (built == size) {
            return 1;
        }
        cursor = end + strspn(end, " ");
    }
    return 0;
}

/* The public suite's name for a program's binary: PROGRAM_small, _medium or _large for one
 * built at the three sizes, PROGRAM alone for one built once. */
static inline void public_binary_name(const char *program, const char *sizes, size_t size,
                                      char *name, size_t capacity) {
    if (strchr(sizes, ' ') == NULL) {
        snprintf(name, capacity, "%s", program);
    } else {
        static const char *const SUFFIXES[] = {"small", "medium", "large"};
        snprintf(name, capacity, "%s_%s", program, SUFFIXES[public_size_index(size)]);
    }
}

#endif
