/* nodalloc: a NUMA-aware malloc for Linux.
 *
 * Use it without recompiling:   LD_PRELOAD=/path/to/libnodalloc.so ./program
 * or link it:                   cc prog.c -lnodalloc    (pkg-config --libs nodalloc)
 *
 * Every malloc-family function below behaves as glibc's does (errno, alignment rules,
 * free(NULL), realloc(p, 0) frees p and returns NULL). The nodalloc_* extras are declared here.
 */
#ifndef NODALLOC_H
#define NODALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void *malloc(size_t size);
void free(void *ptr);
void *calloc(size_t count, size_t size);
void *realloc(void *ptr, size_t size);
void *reallocarray(void *ptr, size_t count, size_t size);
int posix_memalign(void **out, size_t alignment, size_t size);
void *aligned_alloc(size_t alignment, size_t size);
void *memalign(size_t alignment, size_t size);
void *valloc(size_t size);
void *pvalloc(size_t size);
size_t malloc_usable_size(void *ptr);

/* Writes nodalloc's statistics (first line: "nodalloc <version>: ...") to file descriptor `fd`
 * without allocating. */
void nodalloc_stats_print(int fd);

/* With heap profiling on (NODALLOC_PROFILE=1): writes the heap profile, in pprof's
 * profile.proto format, to the file at `path` (replaced whole once written). Returns 0, or an
 * errno value: ENODATA with profiling off, EINVAL for a null path, or why the file could not be
 * written. Allocates nothing; may be called from any thread while others allocate. */
int nodalloc_profile_dump(const char *path);

/* The NUMA node (index into nodalloc's usable nodes) whose memory holds `ptr`, or -1 if nodalloc
 * did not hand it out. */
int nodalloc_node_of(const void *ptr);

/* Allocates `size` bytes on node `node` whatever the calling thread's node; free it with free().
 * To place many blocks of a structure on a node, a heap on that node (nodalloc_heap_new below)
 * keeps them together, within a limit if it has one, and frees them all at once.
 * When nodalloc's region of the node is full, the block comes from the nearest node's region,
 * as any allocation's would (under NODALLOC_POLICY=bind, never when the node's memory runs
 * out). NULL with errno EINVAL for a node that does not exist, ENOMEM when memory runs out. */
void *nodalloc_malloc_on_node(size_t size, int node);

/* Memory tiers (README "Memory tiers"): near memory is the calling thread's node's, far memory
 * the nearest far node's (CXL, a memory-only node; see `nodalloc topology`). */
#define NODALLOC_TIER_NEAR 0
#define NODALLOC_TIER_FAR 1

/* Allocates `size` bytes of far memory, for cold data: on the far node of the calling thread's
 * node, from that node's own bags (nodalloc_node_of names it); free it with free(). On a machine
 * without far memory, or when the far tier is full (its limit reached or its memory used up),
 * the block is near, as malloc's; with NODALLOC_TIER_FULL=fail a full far tier is NULL with
 * errno ENOMEM instead. NULL with errno ENOMEM when memory runs out. C++: the hot/cold `operator new(size_t,
 * __hot_cold_t)` forms (tcmalloc's, which LLVM's -optimize-hot-cold-new emits) do the same for
 * hints below 128. */
void *nodalloc_malloc_cold(size_t size);

/* Allocates `size` bytes in tier NODALLOC_TIER_NEAR (as malloc) or NODALLOC_TIER_FAR (as
 * nodalloc_malloc_cold). NULL with errno EINVAL for another tier. */
void *nodalloc_malloc_tier(size_t size, int tier);

/* Sets a hard limit on the bytes nodalloc commits (0 removes it). Returns 0, or -1 with errno. */
int nodalloc_set_limit(size_t bytes);

/* Sets a hard limit on the bytes nodalloc commits in tier NODALLOC_TIER_NEAR or NODALLOC_TIER_FAR
 * (0 removes it), as NODALLOC_NEAR_LIMIT and NODALLOC_FAR_LIMIT do; nodalloc_set_limit's limit
 * still holds over both. Past it, a request of that tier is served from the other tier, or
 * fails with NULL and ENOMEM under NODALLOC_TIER_FULL=fail; frees make room again. Returns 0,
 * or -1 with errno EINVAL for another tier. */
int nodalloc_set_tier_limit(int tier, size_t bytes);

/* With call-site partitions (NODALLOC_CALLSITE=P): the partition (0 .. P-1) of the small block
 * at `ptr`, or -1 with the mode off or for anything but a small block of nodalloc. */
int nodalloc_partition_of(const void *ptr);

/* The first call site recorded for `partition` (a return address; for a call that Clang's
 * -fsanitize=alloc-token instrumented, its token), or NULL. The `__alloc_token_*` functions
 * those calls name are libnodalloc's (README "Call-site partitions"); no header declares them. */
void *nodalloc_partition_site(int partition);

/* First-class heaps (README "Heaps"): a heap per subsystem, on a chosen node, with its own limit,
 * destroyed whole. A heap may be used from any thread; its blocks are freed with plain free()
 * from any thread (realloc() keeps a block in its heap), and nodalloc_heap_destroy() gives every
 * block it still holds back at once. Using a handle after its heap was destroyed (a second
 * destroy, an allocation) aborts with a message naming the heap. */
typedef struct nodalloc_heap nodalloc_heap_t;

#define NODALLOC_HEAP_NODE_HERE (-1) /* the calling thread's node */
#define NODALLOC_HEAP_NODE_FAR (-2)  /* its far node (near on a machine without far memory) */

typedef struct nodalloc_heap_options {
    int node;         /* node index (as nodalloc_node_of's), CPU-less nodes included, or
                         NODALLOC_HEAP_NODE_HERE, NODALLOC_HEAP_NODE_FAR */
    size_t limit;     /* the most bytes the heap may hold (its bags and large blocks); 0: none */
    const char *name; /* for the statistics (first 40 bytes kept), or NULL */
} nodalloc_heap_options_t;

typedef struct nodalloc_heap_stats {
    int node;
    size_t limit;        /* 0: none */
    size_t committed;    /* bytes of the bags and large blocks the heap holds: what the limit counts */
    size_t peak;         /* the most it ever held */
    size_t live;         /* bytes of the blocks the program holds (at their class size) */
    size_t blocks;       /* blocks the program holds */
    size_t bags;
    size_t large_blocks; /* blocks above 256 KiB, and their bytes */
    size_t large_bytes;
    unsigned long long allocs, frees; /* since it was created */
    char name[41];
} nodalloc_heap_stats_t;

/* Creates a heap (options NULL: the calling thread's node, no limit, no name). NULL with errno
 * EINVAL for a node that does not exist or a limit below 32 KiB, EAGAIN when 1024 heaps are
 * alive, ENOMEM when memory runs out. */
nodalloc_heap_t *nodalloc_heap_new(const nodalloc_heap_options_t *options);
/* Destroys the heap and frees every block it still holds. */
void nodalloc_heap_destroy(nodalloc_heap_t *heap);
/* As malloc, calloc, aligned_alloc and realloc, in `heap`: NULL with errno ENOMEM past the
 * heap's limit (or NODALLOC_LIMIT) or when memory runs out. nodalloc_heap_realloc moves a block
 * of elsewhere into `heap`. */
void *nodalloc_heap_malloc(nodalloc_heap_t *heap, size_t size);
void *nodalloc_heap_calloc(nodalloc_heap_t *heap, size_t count, size_t size);
void *nodalloc_heap_aligned_alloc(nodalloc_heap_t *heap, size_t alignment, size_t size);
void *nodalloc_heap_realloc(nodalloc_heap_t *heap, void *ptr, size_t size);
/* Fills `out` with what the heap holds. 0, or -1 with errno EINVAL for a NULL `out`. */
int nodalloc_heap_stats(nodalloc_heap_t *heap, nodalloc_heap_stats_t *out);
/* The heap holding the live block `ptr`, or NULL for a block of no heap (malloc's). */
nodalloc_heap_t *nodalloc_heap_of(const void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* NODALLOC_H */
