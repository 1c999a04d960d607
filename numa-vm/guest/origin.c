/* origin_reuse and hoard_stress: a freed object goes back to the node it came from, so a
 * thread that frees memory another node allocated never gets that memory back from its next
 * malloc. origin_reuse hands small objects from the first node's threads to the second's,
 * which free them and allocate: nodalloc must reuse none of them there (how many the first
 * node gets back is reported). hoard_stress is the same hand-over in a ring of threads over
 * every node, with mixed sizes, written cache lines and a thread pool torn down and rebuilt
 * (Hoard's cache-scratch, across nodes): nodalloc's remote pages must stay within a fifth of
 * mimalloc's, taken from mimalloc's own run. Both need two nodes with CPUs, and both run for
 * the peers, whose figures are the comparison.
 */
#include "harness.h"
#include "tests.h"

/* ---------------------------------------------------------------- origin_reuse */

#define REUSE_THREADS_PER_NODE 2
#define REUSE_OBJECTS 8192

struct reuse_shared {
    pthread_barrier_t barrier;
    char **handed[REUSE_THREADS_PER_NODE]; /* node-0 thread i's objects, freed by node-1 thread i */
    uintptr_t *freed;                      /* every handed address, sorted by the main thread */
    long freed_count;
};

static int was_freed(struct reuse_shared *s, void *p) {
    uintptr_t key = (uintptr_t)p;
    return bsearch(&key, s->freed, s->freed_count, sizeof key, compare_pointers) != NULL;
}

/* Role by node: the threads pinned to the first node with CPUs allocate and hand over, those
 * on the second free and then allocate; threads pinned elsewhere only keep the barriers.
 * figures: [0] role rank, [1] remote reuses (node 1) / reuses that came back (node 0),
 * [2] pages of the new objects on the thread's node, [3] their distinct pages. */
static void *reuse_thread(void *argument) {
    struct worker *w = argument;
    struct reuse_shared *s = w->context;
    thread_start(w);
    int role = w->node_os_id == cpu_node_os_id(0) ? 0 : w->node_os_id == cpu_node_os_id(1) ? 1 : -1;
    int rank = (int)w->figures[0];
    char **fresh = xmap(sizeof *fresh * REUSE_OBJECTS);

    if (role == 0) { /* 1: node 0 allocates and hands over */
        for (int i = 0; i < REUSE_OBJECTS; i++) {
            if (!(s->handed[rank][i] = malloc(64)))
                die("malloc");
            memset(s->handed[rank][i], 0xa0, 64);
        }
    }
    pthread_barrier_wait(&s->barrier);
    pthread_barrier_wait(&s->barrier); /* the main thread sorts the handed addresses */
    if (role == 1) /* 2: node 1 frees them */
        for (int i = 0; i < REUSE_OBJECTS; i++)
            free(s->handed[rank][i]);
    pthread_barrier_wait(&s->barrier);
    if (role == 1) { /* 3: node 1 allocates: any handed address is a remote reuse */
        for (int i = 0; i < REUSE_OBJECTS; i++) {
            if (!(fresh[i] = malloc(64)))
                die("malloc");
            memset(fresh[i], 0xb1, 64);
            w->figures[1] += was_freed(s, fresh[i]);
        }
    }
    pthread_barrier_wait(&s->barrier);
    if (role == 0) { /* 4: node 0 allocates: handed addresses coming home */
        for (int i = 0; i < REUSE_OBJECTS; i++) {
            if (!(fresh[i] = malloc(64)))
                die("malloc");
            memset(fresh[i], 0xc0, 64);
            w->figures[1] += was_freed(s, fresh[i]);
        }
    }
    if (role >= 0) {
        void **pages = xmap(sizeof *pages * REUSE_OBJECTS);
        int *status = xmap(sizeof *status * REUSE_OBJECTS);
        /* Distinct pages only: many 64 B objects share one. */
        for (int i = 0; i < REUSE_OBJECTS; i++)
            pages[i] = (void *)((uintptr_t)fresh[i] & ~(PAGE - 1));
        qsort(pages, REUSE_OBJECTS, sizeof *pages, compare_pointers);
        long distinct = 0;
        for (int i = 0; i < REUSE_OBJECTS; i++)
            if (i == 0 || pages[i] != pages[distinct - 1])
                pages[distinct++] = pages[i];
        page_nodes(pages, distinct, status);
        for (long i = 0; i < distinct; i++)
            w->figures[2] += status[i] == w->node_os_id;
        w->figures[3] = distinct;
        xunmap(pages, sizeof *pages * REUSE_OBJECTS);
        xunmap(status, sizeof *status * REUSE_OBJECTS);
    }
    pthread_barrier_wait(&s->barrier);
    if (role >= 0) /* the handed objects are gone already */
        for (int i = 0; i < REUSE_OBJECTS; i++)
            free(fresh[i]);
    xunmap(fresh, sizeof *fresh * REUSE_OBJECTS);
    return NULL;
}

void test_origin_reuse(const char *test) {
    first_malloc();
    int count = REUSE_THREADS_PER_NODE * cpu_node_count;
    struct worker *workers = xmap(sizeof *workers * count);
    struct reuse_shared *s = xmap(sizeof *s);
    pthread_barrier_init(&s->barrier, NULL, count + 1);
    for (int i = 0; i < REUSE_THREADS_PER_NODE; i++)
        s->handed[i] = xmap(sizeof(char *) * REUSE_OBJECTS);
    s->freed = xmap(sizeof(uintptr_t) * REUSE_THREADS_PER_NODE * REUSE_OBJECTS);
    int ranks[MAX_NODES] = {0};
    for (int i = 0; i < count; i++) {
        int cpu_node = agreeing_cpu_node(i);
        workers[i].index = i;
        workers[i].context = s;
        workers[i].figures[0] = ranks[cpu_node]++;
        worker_pin(&workers[i], cpu_node);
    }
    start_workers(workers, count, reuse_thread);
    pthread_barrier_wait(&s->barrier);
    for (int i = 0; i < REUSE_THREADS_PER_NODE; i++)
        for (int j = 0; j < REUSE_OBJECTS; j++)
            s->freed[s->freed_count++] = (uintptr_t)s->handed[i][j];
    qsort(s->freed, s->freed_count, sizeof *s->freed, compare_pointers);
    for (int i = 0; i < 4; i++)
        pthread_barrier_wait(&s->barrier);
    join_workers(workers, count);

    long remote = 0, back = 0, on1 = 0, pages1 = 0, on0 = 0, pages0 = 0;
    for (int i = 0; i < count; i++) {
        if (workers[i].node_os_id == cpu_node_os_id(1)) {
            remote += workers[i].figures[1];
            on1 += workers[i].figures[2];
            pages1 += workers[i].figures[3];
        } else if (workers[i].node_os_id == cpu_node_os_id(0)) {
            back += workers[i].figures[1];
            on0 += workers[i].figures[2];
            pages0 += workers[i].figures[3];
        }
    }
    long handed = s->freed_count;
    char f_remote[64], f_back[64], f_local1[64], f_local0[64];
    fraction(f_remote, sizeof f_remote, remote, handed);
    fraction(f_back, sizeof f_back, back, handed);
    fraction(f_local1, sizeof f_local1, on1, pages1);
    fraction(f_local0, sizeof f_local0, on0, pages0);
    int mismatches = home_mismatches(workers, count);
    char extra[64] = "";
    if (is_nodalloc)
        snprintf(extra, sizeof extra, " home_mismatch=%d", mismatches);
    /* Target: node-1 threads never get a node-0 object back (0 remote reuses). */
    out("RESULT %s %s %s remote_reuse=%s came_back_to_node0=%s node1_new_pages_local=%s "
        "node0_new_pages_local=%s%s\n",
        test, allocator, verdict(remote == 0 && mismatches == 0), f_remote, f_back, f_local1,
        f_local0, extra);
}

/* ---------------------------------------------------------------- hoard_stress */

#define STRESS_GENERATIONS 3
#define STRESS_ROUNDS 64
#define STRESS_BATCH 128
#define STRESS_TOUCHES 20
#define STRESS_SAMPLE_EVERY 8

struct stress_shared {
    pthread_barrier_t barrier;
    int threads;
    char **mailbox[MAX_NODES * 4]; /* batch waiting for thread i, from thread i - 1 */
    size_t *mailbox_sizes[MAX_NODES * 4];
};

static uint64_t next_random(uint64_t *state) {
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

/* Each round: free the batch the predecessor (on another node) handed over, allocate a fresh
 * batch (64 B - 4 KiB), write every cache line of each object STRESS_TOUCHES times, ask the
 * kernel where a sample of the new objects is, hand the batch to the successor. The sample
 * measures what the allocator gives a thread right after it freed remote objects: Hoard's
 * cache-scratch, across nodes.
 * figures: [0] allocs+frees, [1] sampled pages remote, [2] sampled pages, [3] corrupt objects. */
static void *stress_thread(void *argument) {
    struct worker *w = argument;
    struct stress_shared *s = w->context;
    thread_start(w);
    uint64_t random = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(w->index + 1) * 0x100000001b3ULL;
    int next = (w->index + 1) % s->threads;
    char *batch[STRESS_BATCH];
    size_t sizes[STRESS_BATCH];
    void *pages[STRESS_BATCH / STRESS_SAMPLE_EVERY];
    int status[STRESS_BATCH / STRESS_SAMPLE_EVERY];
    pthread_barrier_wait(&s->barrier);
    for (int round = 0; round < STRESS_ROUNDS; round++) {
        char **received = s->mailbox[w->index];
        size_t *received_sizes = s->mailbox_sizes[w->index];
        if (round > 0) {
            for (int i = 0; i < STRESS_BATCH; i++) {
                /* The receiver checks what the sender wrote last. */
                if (received[i][received_sizes[i] - 1] != (char)(STRESS_TOUCHES))
                    w->figures[3]++;
                free(received[i]);
                w->figures[0]++;
            }
        }
        int samples = 0;
        for (int i = 0; i < STRESS_BATCH; i++) {
            size_t size = 64 + (next_random(&random) % (4096 - 64 + 1));
            char *p = malloc(size);
            if (!p)
                die("malloc");
            w->figures[0]++;
            for (int touch = 1; touch <= STRESS_TOUCHES; touch++) {
                for (size_t offset = 0; offset < size; offset += 64)
                    p[offset] = (char)touch;
                p[size - 1] = (char)touch;
            }
            batch[i] = p;
            sizes[i] = size;
            if (i % STRESS_SAMPLE_EVERY == 0)
                pages[samples++] = p;
        }
        page_nodes(pages, samples, status);
        for (int i = 0; i < samples; i++)
            w->figures[1] += status[i] != w->node_os_id;
        w->figures[2] += samples;
        pthread_barrier_wait(&s->barrier); /* everyone has freed what they received */
        memcpy(s->mailbox[next], batch, sizeof batch);
        memcpy(s->mailbox_sizes[next], sizes, sizeof sizes);
        pthread_barrier_wait(&s->barrier);
    }
    for (int i = 0; i < STRESS_BATCH; i++) {
        free(s->mailbox[w->index][i]);
        w->figures[0]++;
    }
    return NULL;
}

/* mimalloc's sampled remote pages from its run of this test, "remote/total", passed by /init
 * in NUMATEST_REFERENCE; nodalloc's target is relative to it. */
static int reference_fraction(long *remote, long *total) {
    const char *text = getenv("NUMATEST_REFERENCE");
    return text && sscanf(text, "%ld/%ld", remote, total) == 2 && *total > 0;
}

/* STRESS_GENERATIONS generations of 2N + 1 threads (N nodes with CPUs), each generation
 * started after the previous one exited: a thread pool that is torn down and rebuilt. The odd
 * count shifts every position to the next node from one generation to the next, so memory a
 * generation leaves behind is offered to threads on other nodes. The first generation alone
 * is the steady state; later ones add that churn. */
void test_hoard_stress(const char *test) {
    first_malloc();
    int count = 2 * cpu_node_count + 1;
    struct worker *workers = xmap(sizeof *workers * count);
    struct stress_shared *s = xmap(sizeof *s);
    s->threads = count;
    for (int i = 0; i < count; i++) {
        s->mailbox[i] = xmap(sizeof(char *) * STRESS_BATCH);
        s->mailbox_sizes[i] = xmap(sizeof(size_t) * STRESS_BATCH);
    }
    long ops = 0, remote = 0, sampled = 0, corrupt = 0, first_remote = 0, first_sampled = 0;
    int mismatches = 0, created = 0;
    double elapsed = 0;
    for (int generation = 0; generation < STRESS_GENERATIONS; generation++) {
        pthread_barrier_init(&s->barrier, NULL, count + 1);
        memset(workers, 0, sizeof *workers * count);
        for (int i = 0; i < count; i++) {
            workers[i].index = i;
            workers[i].context = s;
            worker_pin(&workers[i], agreeing_cpu_node(created++));
        }
        start_workers(workers, count, stress_thread);
        pthread_barrier_wait(&s->barrier);
        double start = now_seconds();
        for (int round = 0; round < STRESS_ROUNDS; round++) {
            pthread_barrier_wait(&s->barrier);
            pthread_barrier_wait(&s->barrier);
        }
        join_workers(workers, count);
        elapsed += now_seconds() - start;
        pthread_barrier_destroy(&s->barrier);
        for (int i = 0; i < count; i++) {
            ops += workers[i].figures[0];
            remote += workers[i].figures[1];
            sampled += workers[i].figures[2];
            corrupt += workers[i].figures[3];
            if (generation == 0) {
                first_remote += workers[i].figures[1];
                first_sampled += workers[i].figures[2];
            }
        }
        mismatches += home_mismatches(workers, count);
    }

    char f_remote[64], f_first[64];
    fraction(f_remote, sizeof f_remote, remote, sampled);
    fraction(f_first, sizeof f_first, first_remote, first_sampled);
    long ref_remote = 0, ref_total = 0;
    const char *v;
    char target[128];
    if (!is_nodalloc) {
        v = "info";
        snprintf(target, sizeof target, "-");
    } else if (reference_fraction(&ref_remote, &ref_total) && ref_remote > 0) {
        /* Target: remote fraction at most a fifth of mimalloc's. */
        int met = remote * 5 * ref_total <= ref_remote * sampled && corrupt == 0 &&
                  mismatches == 0;
        v = met ? "pass" : "fail";
        snprintf(target, sizeof target, "<=1/5*mimalloc(%ld/%ld)", ref_remote, ref_total);
    } else {
        v = corrupt == 0 && mismatches == 0 ? "info" : "fail";
        snprintf(target, sizeof target, "none(mimalloc-remote=%ld/%ld)", ref_remote, ref_total);
    }
    char extra[64] = "";
    if (is_nodalloc)
        snprintf(extra, sizeof extra, " home_mismatch=%d", mismatches);
    out("RESULT %s %s %s ops_per_s=%.0f ops=%ld seconds=%.2f remote_pages=%s "
        "first_generation_remote=%s corrupt=%ld target=%s%s\n",
        test, allocator, v, ops / elapsed, ops, elapsed, f_remote, f_first, corrupt, target,
        extra);
}
