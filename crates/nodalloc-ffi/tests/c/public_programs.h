/* The C programs of the public suite of record (mimalloc-bench's bench/security), one function
 * per program, for public_suite.c, which includes this file once per ALLOCATION_SIZE the public
 * suite builds them at: SIZE is that size, a constant of type size_t as each public binary's
 * ALLOCATION_SIZE is a constant, and INSTANCE(function) the function's name at that size
 * (public_double_free_small, _medium, _large). No include guard, on purpose. What the functions
 * reproduce, and how, is public_suite.c's header; each does what its program does and nothing
 * more, in the same order, with its NOT_CAUGHT line at the same point. */

/* Overflows and underflows. A single byte is flipped (xor 'A'), not written, so that it changes
 * whatever it held; a memcpy copies zeros from the stack and frees nothing afterwards. */

static int INSTANCE(public_32_byte_memcpy_overflow)(void) {
    const char zeros[SIZE + 32] = {0};
    char *p = (char *)malloc_opaque(SIZE);
    memcpy_opaque(p, zeros, sizeof zeros);
    not_caught();
    return 0;
}

static int INSTANCE(public_32_byte_memcpy_underflow)(void) {
    const char zeros[SIZE] = {0};
    char *p = (char *)malloc_opaque(SIZE);
    memcpy_opaque(p - 32, zeros, sizeof zeros);
    not_caught();
    return 0;
}

static int INSTANCE(public_32_byte_overflow)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    p[SIZE - 1 + 32] ^= 'A';
    free_opaque(p);
    not_caught();
    return 0;
}

static int INSTANCE(public_32_byte_underflow)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    p[-32] ^= 'A';
    free_opaque(p);
    not_caught();
    return 0;
}

static int INSTANCE(public_one_byte_memcpy_overflow)(void) {
    const char zeros[SIZE + 1] = {0};
    char *p = (char *)malloc_opaque(SIZE);
    memcpy_opaque(p, zeros, sizeof zeros);
    not_caught();
    return 0;
}

static int INSTANCE(public_one_byte_memcpy_underflow)(void) {
    const char zeros[SIZE] = {0};
    char *p = (char *)malloc_opaque(SIZE);
    memcpy_opaque(p - 1, zeros, sizeof zeros);
    not_caught();
    return 0;
}

static int INSTANCE(public_one_byte_overflow)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    p[SIZE] ^= 'A';
    free_opaque(p);
    not_caught();
    return 0;
}

static int INSTANCE(public_one_byte_underflow)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    p[-1] ^= 'A';
    free_opaque(p);
    not_caught();
    return 0;
}

static int INSTANCE(public_one_mbyte_memcpy_overflow)(void) {
    const char zeros[SIZE + MIB] = {0};
    char *p = (char *)malloc_opaque(SIZE);
    memcpy_opaque(p, zeros, sizeof zeros);
    not_caught();
    return 0;
}

static int INSTANCE(public_one_mbyte_memcpy_underflow)(void) {
    const char zeros[SIZE] = {0};
    char *p = (char *)malloc_opaque(SIZE);
    memcpy_opaque(p - MIB, zeros, sizeof zeros);
    not_caught();
    return 0;
}

static int INSTANCE(public_one_mbyte_overflow)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    p[SIZE - 1 + MIB] ^= 'A';
    free_opaque(p);
    not_caught();
    return 0;
}

static int INSTANCE(public_one_mbyte_underflow)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    *(p - MIB) ^= 'A';
    free_opaque(p);
    not_caught();
    return 0;
}

/* Double frees. */

static int INSTANCE(public_double_free)(void) {
    void *p = malloc_opaque(SIZE);
    free_opaque(p);
    free_opaque(p);
    not_caught();
    return 0;
}

static int INSTANCE(public_double_free_delayed)(void) {
    void *p = malloc_opaque(SIZE);
    free_opaque(p);
    for (int i = 0; i < 1024; i++) {
        free_opaque(malloc_opaque(SIZE));
    }
    free_opaque(p);
    not_caught();
    return 0;
}

static int INSTANCE(public_double_free_interleaved)(void) {
    void *p = malloc_opaque(SIZE);
    void *q = malloc_opaque(SIZE);
    free_opaque(p);
    free_opaque(q);
    free_opaque(p);
    not_caught();
    return 0;
}

static int INSTANCE(public_double_free_reuse)(void) {
    /* Its first output (no newline) comes before the frees: stdout's buffer is allocated there. */
    void *p = malloc_opaque(SIZE);
    printf("p = %p", p);
    free_opaque(p);
    free_opaque(p);
    for (size_t i = 0; i < 256 * 1024; i++) {
        void *q = malloc_opaque(SIZE);
        printf("q = %p", q);
        free_opaque(q);
    }
    not_caught();
    return 0;
}

static int INSTANCE(public_double_free_single_reuse)(void) {
    void *p = malloc_opaque(SIZE);
    free_opaque(p);
    void *q = malloc_opaque(SIZE);
    free_opaque(p);
    free_opaque(q);
    not_caught();
    return 0;
}

/* Invalid frees. */

static int INSTANCE(public_invalid_free)(void) {
    free_opaque((void *)1);
    not_caught();
    return 0;
}

static int INSTANCE(public_invalid_free_alloca)(void) {
    free_opaque(__builtin_alloca(SIZE));
    not_caught();
    return 0;
}

static int INSTANCE(public_invalid_free_close)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    free_opaque(p + 4096);
    not_caught();
    return 0;
}

static int INSTANCE(public_invalid_free_far)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    free_opaque(p + 1024 * MIB);
    not_caught();
    return 0;
}

static int INSTANCE(public_invalid_free_stack)(void) {
    char on_stack[SIZE];
    free_opaque(on_stack);
    not_caught();
    return 0;
}

static int INSTANCE(public_invalid_free_unaligned)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    free_opaque(p + 1);
    not_caught();
    return 0;
}

static int INSTANCE(public_invalid_free_unaligned_multiple)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    free_opaque(p + 8);
    not_caught();
    return 0;
}

/* Outcomes: these print their line only when they see the harm, and exit 0 otherwise (a catch,
 * by the public rule). */

static int INSTANCE(public_impossibly_large_malloc)(void) {
    void *p = malloc_opaque((size_t)-2);
    if (p != NULL) {
        not_caught();
    }
    free_opaque(p);
    return 0;
}

static int INSTANCE(public_malloc_reuse)(void) {
    void *p = malloc_opaque(SIZE);
    void *freed = p;
    free_opaque(p);
    p = malloc_opaque(SIZE);
    if (p == freed) {
        not_caught();
    }
    return 0;
}

static int INSTANCE(public_malloc_reuse_downsize)(void) {
    void *p = malloc_opaque(SIZE);
    void *freed = p;
    free_opaque(p);
    p = malloc_opaque(SIZE / 2);
    if (p == freed) {
        not_caught();
    }
    return 0;
}

static int INSTANCE(public_zero_after_free)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    memset(p, 'A', SIZE);
    free_opaque(p);
    for (size_t i = 0; i < SIZE; i++) {
        if (p[i] != 0) {
            not_caught();
            return 0;
        }
    }
    return 0;
}

static int INSTANCE(public_zero_on_malloc)(void) {
    /* 4096 blocks filled and freed, so that an allocator handing out blocks in a random order
     * still hands one of them back, then one more block, which must read as zeros. */
    char *blocks[4096] = {0};
    for (int i = 0; i < 4096; i++) {
        blocks[i] = (char *)malloc_opaque(SIZE);
        memset(blocks[i], 'A', SIZE);
    }
    for (int i = 0; i < 4096; i++) {
        free_opaque(blocks[i]);
    }
    char *p = (char *)malloc_opaque(SIZE);
    for (size_t i = 0; i < SIZE; i++) {
        if (p[i] != 0) {
            not_caught();
            return 0;
        }
    }
    return 0;
}

/* The public suite's realloc_reuse, as it behaves: it allocates 8 bytes whatever its
 * ALLOCATION_SIZE, drops realloc's result and then compares the old pointer with a copy of itself,
 * which always holds, so it prints its line unless realloc dies. Every allocator misses it. */
static int INSTANCE(public_realloc_reuse)(void) {
    char *p = (char *)malloc_opaque(8);
    realloc_opaque(p, 1024);
    not_caught();
    return 0;
}

/* Use after free and the heap as code. */

static int INSTANCE(public_write_after_free)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    free_opaque(p);
    memset(p, 'A', SIZE);
    not_caught();
    return 0;
}

static int INSTANCE(public_write_after_free_reuse)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    free_opaque(p);
    memset(p, 'A', SIZE);
    for (size_t i = 0; i < 256 * 1024; i++) {
        free_opaque(malloc_opaque(SIZE));
    }
    not_caught();
    return 0;
}

/* Calls heap_code (public_suite.c), copied into the block. */
static int INSTANCE(public_executable_heap)(void) {
    char *p = (char *)malloc_opaque(SIZE);
    memcpy(p, heap_code, sizeof heap_code);
    void (*code)(void) = (void (*)(void))p;
    code();
    not_caught();
    return 0;
}

/* Zero-size blocks: the first output is the byte read (putchar). */

static int INSTANCE(public_read_zero_size)(void) {
    char *p = (char *)malloc_opaque(0);
    if (p == NULL) {
        return 1;
    }
    putchar(*p);
    not_caught();
    return 0;
}

static int INSTANCE(public_read_zero_size_free)(void) {
    char *p = (char *)malloc_opaque(0);
    if (p == NULL) {
        return 1;
    }
    putchar(*p);
    free_opaque(p);
    not_caught();
    return 0;
}

static int INSTANCE(public_write_zero_size)(void) {
    char *p = (char *)malloc_opaque(0);
    if (p == NULL) {
        return 1;
    }
    *p = 'A';
    not_caught();
    return 0;
}

static int INSTANCE(public_write_zero_size_free)(void) {
    char *p = (char *)malloc_opaque(0);
    if (p == NULL) {
        return 1;
    }
    *p = 'A';
    free_opaque(p);
    not_caught();
    return 0;
}

