/* repin_reuse, taskset_migration and two_node_mask: origin-aware free when a thread changes
 * node after its heap exists. A thread whose heap is homed on one node and that then runs on
 * another (it re-pinned itself, or another thread moved it as `taskset -p` does) must not get
 * the first node's memory back from its own malloc, whatever it frees there. two_node_mask
 * gives a thread a mask over CPUs of two nodes before it allocates: its memory must come from
 * a node the mask allows, and its mask may never grow. All three run for the peers too, whose
 * figures are the comparison; all need two nodes with CPUs.
 */
#include "harness.h"
#include "tests.h"

#include <stdatomic.h>

/* ---------------------------------------------------------------- shared helpers */

/* The /sys node id of a CPU, -1 if none. */
static int node_of_cpu_id(int cpu) {
    for (int i = 0; i < node_count; i++)
        if (cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &nodes[i].cpus))
            return nodes[i].os_id;
    return -1;
}

static int in_sorted(const uintptr_t *set, long count, const void *p) {
    uintptr_t key = (uintptr_t)p;
    return bsearch(&key, set, count, sizeof key, compare_pointers) != NULL;
}

/* The node of the page holding each object's first byte (page_nodes rounds its array down,
 * so it works on a copy). */
static void object_nodes(char *const *objects, long count, int *status) {
    enum { CHUNK = 1024 };
    void *batch[CHUNK];
    for (long at = 0; at < count; at += CHUNK) {
        long n = count - at < CHUNK ? count - at : CHUNK;
        for (long i = 0; i < n; i++)
            batch[i] = objects[at + i];
        page_nodes(batch, n, status + at);
    }
}

/* nodalloc's node of an object as a /sys id; -1 for the peers. */
static int named_node(const void *p) {
    return is_nodalloc && p ? os_id_of_index(na_node_of(p)) : -1;
}

static void pin_thread(const cpu_set_t *set) {
    if (pthread_setaffinity_np(pthread_self(), sizeof *set, set) != 0)
        die("pthread_setaffinity_np");
}

/* ---------------------------------------------------------------- repin_reuse */

#define REPIN_LITTLE 16

struct repin {
    size_t size;
    long count;
    char **handed;    /* allocated by a thread on the first node, freed by the re-pinned one */
    uintptr_t *freed; /* the same addresses, sorted */
    char **fresh;     /* what the re-pinned thread allocated after freeing them */
    int *status;
    int own;          /* .own: the re-pinned thread allocates and frees them itself, before the pin */
    /* figures of the re-pinned thread */
    int home_before, cpu_node_after_pin, home_after;
};

static void *repin_producer(void *argument) {
    struct worker *w = argument;
    struct repin *r = w->context;
    thread_start(w);
    for (long i = 0; i < r->count; i++) {
        if (!(r->handed[i] = malloc(r->size)))
            die("malloc");
        memset(r->handed[i], 0xa0, r->size < 64 ? r->size : 64);
    }
    return NULL;
}

/* Starts pinned to the first node, allocates a little (kept live: only the handed objects are
 * freed), pins itself to the second node's CPUs, frees every handed object, then allocates as
 * many of the same size. */
static void *repin_thread(void *argument) {
    struct worker *w = argument;
    struct repin *r = w->context;
    thread_start(w);
    char *little[REPIN_LITTLE];
    for (int i = 0; i < REPIN_LITTLE; i++) {
        if (!(little[i] = malloc(r->size)))
            die("malloc");
        memset(little[i], 0xb0, r->size < 64 ? r->size : 64);
    }
    r->home_before = named_node(little[0]);
    if (r->own) {
        /* Its own objects, freed on the first node: its cache holds the newest of them when
         * it moves, and after the move it only allocates. */
        for (long i = 0; i < r->count; i++) {
            if (!(r->handed[i] = malloc(r->size)))
                die("malloc");
            memset(r->handed[i], 0xa1, r->size < 64 ? r->size : 64);
        }
        for (long i = 0; i < r->count; i++)
            r->freed[i] = (uintptr_t)r->handed[i];
        qsort(r->freed, r->count, sizeof *r->freed, compare_pointers);
        for (long i = 0; i < r->count; i++)
            free(r->handed[i]);
    }
    pin_thread(&usable_node(cpu_nodes[1])->cpus);
    r->cpu_node_after_pin = node_of_cpu_id(sched_getcpu());
    for (long i = 0; i < r->count && !r->own; i++)
        free(r->handed[i]);
    for (long i = 0; i < r->count; i++) {
        if (!(r->fresh[i] = malloc(r->size)))
            die("malloc");
        memset(r->fresh[i], 0xc1, r->size < 64 ? r->size : 64);
    }
    r->home_after = named_node(r->fresh[r->count - 1]);
    object_nodes(r->fresh, r->count, r->status);
    for (long i = 0; i < r->count; i++)
        free(r->fresh[i]);
    for (int i = 0; i < REPIN_LITTLE; i++)
        free(little[i]);
    return NULL;
}

/* repin_reuse (64 B x 20000), repin_reuse.4k (4 KiB x 20000), repin_reuse.100k (100 KiB x
 * 2000); repin_reuse.own (64 B x 20000): the re-pinned thread allocates and frees the objects
 * itself before it moves, then only allocates (no free after the move to notice it).
 * Measured over the re-pinned thread's allocations after the frees: `reused` = how
 * many are addresses it had just freed, `on_first_node` = how many the kernel has on the first
 * node (the page of the object's first byte), `on_second_node` likewise. Target: both
 * reused and on_first_node 0. */
void test_repin_reuse(const char *test) {
    struct repin *r = xmap(sizeof *r);
    r->size = 64;
    r->count = 20000;
    if (strstr(test, ".4k")) {
        r->size = 4096;
    } else if (strstr(test, ".100k")) {
        r->size = 100 << 10;
        r->count = 2000;
    }
    r->own = strstr(test, ".own") != NULL;
    first_malloc();
    r->handed = xmap(sizeof *r->handed * r->count);
    r->freed = xmap(sizeof *r->freed * r->count);
    r->fresh = xmap(sizeof *r->fresh * r->count);
    r->status = xmap(sizeof *r->status * r->count);
    struct worker *workers = xmap(sizeof *workers * 2);
    for (int i = 0; i < 2; i++) {
        workers[i].index = i;
        workers[i].context = r;
        worker_pin(&workers[i], 0);
    }
    if (!r->own) {
        start_workers(&workers[0], 1, repin_producer);
        join_workers(&workers[0], 1);
        for (long i = 0; i < r->count; i++)
            r->freed[i] = (uintptr_t)r->handed[i];
        qsort(r->freed, r->count, sizeof *r->freed, compare_pointers);
    }
    start_workers(&workers[1], 1, repin_thread);
    join_workers(&workers[1], 1);

    int first = cpu_node_os_id(0), second = cpu_node_os_id(1);
    long reused = 0, on_first = 0, on_second = 0, other = 0;
    for (long i = 0; i < r->count; i++) {
        reused += in_sorted(r->freed, r->count, r->fresh[i]);
        if (r->status[i] == first)
            on_first++;
        else if (r->status[i] == second)
            on_second++;
        else
            other++;
    }
    char f_reused[64], f_first[64], f_second[64];
    fraction(f_reused, sizeof f_reused, reused, r->count);
    fraction(f_first, sizeof f_first, on_first, r->count);
    fraction(f_second, sizeof f_second, on_second, r->count);
    /* The setup itself: the thread was homed on the first node and the pin moved it. */
    int setup = r->cpu_node_after_pin == second &&
                (!is_nodalloc || r->home_before == first);
    out("RESULT %s %s %s size=%zu objects=%ld reused=%s on_first_node=%s on_second_node=%s "
        "elsewhere_or_absent=%ld home_before=node%d cpu_after_pin=node%d home_after=node%d\n",
        test, allocator, verdict(setup && reused == 0 && on_first == 0), r->size, r->count,
        f_reused, f_first, f_second, other, r->home_before, r->cpu_node_after_pin,
        r->home_after);
}

/* ---------------------------------------------------------------- taskset_migration */

#define MIGRATION_LIVE 20000 /* objects live at once: the node-0 stash, then a ring */
#define MIGRATION_ROUND 64
#define MIGRATION_MIN_ROUNDS (MIGRATION_LIVE / MIGRATION_ROUND) /* every stash object freed */
#define MIGRATION_MIN_MS 300.0 /* three upkeep periods of nodalloc's default (100 ms) */
#define MIGRATION_MAX_ROUNDS 200000
#define MIGRATION_GRACE_ROUNDS 1

struct migration {
    atomic_int tid;
    atomic_int stage; /* 1: the stash is ready and the thread loops; 2: it has been moved */
    char **ring;      /* live objects, oldest first from `head`: the stash at the move */
    uintptr_t *stash_sorted;
    long loops_waiting, rounds;
    long remote, remote_late, stash_reuse, stash_reuse_late, on_second, absent;
    long last_remote_round;
    double move_seconds, last_remote_ms, elapsed_ms;
    int cpu_node_before, cpu_node_after, home_before, home_after;
};

/* The moved thread: pinned to the first node, it builds a stash of 20000 node-0 objects of
 * 64 B, then allocates and frees 64 B in a loop until the main thread, from outside, sets its
 * affinity to the second node's CPUs (sched_setaffinity on its tid, as taskset -p does). Then
 * rounds of: free the 64 oldest live objects (the stash first), allocate 64 (kept, newest
 * last), ask the kernel where the 64 new ones are; at least 312 rounds (every stash object
 * freed) and at least 300 ms. */
static void *migration_thread(void *argument) {
    struct worker *w = argument;
    struct migration *m = w->context;
    thread_start(w);
    atomic_store(&m->tid, (int)syscall(SYS_gettid));
    for (long i = 0; i < MIGRATION_LIVE; i++) {
        if (!(m->ring[i] = malloc(64)))
            die("malloc");
        memset(m->ring[i], 0xa0, 64);
        m->stash_sorted[i] = (uintptr_t)m->ring[i];
    }
    qsort(m->stash_sorted, MIGRATION_LIVE, sizeof *m->stash_sorted, compare_pointers);
    m->home_before = named_node(m->ring[0]);
    m->cpu_node_before = node_of_cpu_id(sched_getcpu());
    char *transient[MIGRATION_ROUND];
    atomic_store(&m->stage, 1);
    while (atomic_load(&m->stage) == 1) {
        for (int i = 0; i < MIGRATION_ROUND; i++) {
            if (!(transient[i] = malloc(64)))
                die("malloc");
            transient[i][0] = 1;
        }
        for (int i = 0; i < MIGRATION_ROUND; i++)
            free(transient[i]);
        m->loops_waiting++;
    }
    m->cpu_node_after = node_of_cpu_id(sched_getcpu());
    int first = cpu_node_os_id(0), second = cpu_node_os_id(1);
    m->last_remote_round = -1;
    m->last_remote_ms = -1;
    long head = 0; /* ring index of the oldest live object */
    char *fresh[MIGRATION_ROUND];
    void *pages[MIGRATION_ROUND];
    int status[MIGRATION_ROUND];
    long round = 0;
    for (;; round++) {
        double elapsed = (now_seconds() - m->move_seconds) * 1000;
        if ((round >= MIGRATION_MIN_ROUNDS && elapsed >= MIGRATION_MIN_MS) ||
            round >= MIGRATION_MAX_ROUNDS) {
            m->elapsed_ms = elapsed;
            break;
        }
        for (int i = 0; i < MIGRATION_ROUND; i++)
            free(m->ring[(head + i) % MIGRATION_LIVE]);
        for (int i = 0; i < MIGRATION_ROUND; i++) {
            if (!(fresh[i] = malloc(64)))
                die("malloc");
            memset(fresh[i], 0xc1, 64);
            pages[i] = fresh[i];
        }
        page_nodes(pages, MIGRATION_ROUND, status);
        int late = round >= MIGRATION_GRACE_ROUNDS, any = 0;
        for (int i = 0; i < MIGRATION_ROUND; i++) {
            int reused = in_sorted(m->stash_sorted, MIGRATION_LIVE, fresh[i]);
            int remote = status[i] == first;
            m->stash_reuse += reused;
            m->stash_reuse_late += late && reused;
            m->remote += remote;
            m->remote_late += late && remote;
            m->on_second += status[i] == second;
            m->absent += status[i] < 0;
            any |= remote || reused;
            m->ring[(head + i) % MIGRATION_LIVE] = fresh[i];
        }
        if (any) {
            m->last_remote_round = round;
            m->last_remote_ms = (now_seconds() - m->move_seconds) * 1000;
        }
        head = (head + MIGRATION_ROUND) % MIGRATION_LIVE;
    }
    m->rounds = round;
    m->home_after = named_node(m->ring[(head + MIGRATION_LIVE - 1) % MIGRATION_LIVE]);
    for (long i = 0; i < MIGRATION_LIVE; i++)
        free(m->ring[i]);
    return NULL;
}

/* Measured over every allocation after the move (counted from the thread's first operation
 * once it sees the move: the loop it was in when moved is not counted): `on_first_node`
 * (kernel: the new object's page is on the first node) and `stash_reuse` (the address of a
 * stash object: node-0 memory it allocated before the move and freed after it). Target: both
 * 0 after the first round (MIGRATION_GRACE_ROUNDS: the first 64 frees and 64 mallocs after the
 * move are the thread's "next few operations"). Also reported: the last round with a node-0
 * object and its time after the move. */
void test_taskset_migration(const char *test) {
    struct migration *m = xmap(sizeof *m);
    m->ring = xmap(sizeof *m->ring * MIGRATION_LIVE);
    m->stash_sorted = xmap(sizeof *m->stash_sorted * MIGRATION_LIVE);
    first_malloc();
    struct worker *workers = xmap(sizeof *workers);
    workers[0].context = m;
    worker_pin(&workers[0], 0);
    start_workers(workers, 1, migration_thread);
    while (atomic_load(&m->stage) != 1)
        usleep(1000);
    usleep(20000); /* mid-loop */
    const cpu_set_t *second_cpus = &usable_node(cpu_nodes[1])->cpus;
    m->move_seconds = now_seconds();
    if (sched_setaffinity(atomic_load(&m->tid), sizeof *second_cpus, second_cpus) != 0)
        die("sched_setaffinity-tid");
    atomic_store(&m->stage, 2);
    join_workers(workers, 1);

    long total = m->rounds * MIGRATION_ROUND;
    char f_second[64], f_remote[64];
    fraction(f_second, sizeof f_second, m->on_second, total);
    fraction(f_remote, sizeof f_remote, m->remote, total);
    int setup = m->cpu_node_before == cpu_node_os_id(0) &&
                m->cpu_node_after == cpu_node_os_id(1) &&
                (!is_nodalloc || m->home_before == cpu_node_os_id(0));
    out("RESULT %s %s %s allocs_after_move=%ld rounds=%ld ms=%.0f on_first_node=%s "
        "stash_reuse=%ld after_first_round:on_first_node=%ld,stash_reuse=%ld "
        "last_remote_round=%ld last_remote_ms=%.1f on_second_node=%s absent=%ld "
        "loops_before_move=%ld cpu=node%d->node%d home=node%d->node%d\n",
        test, allocator, verdict(setup && m->remote_late == 0 && m->stash_reuse_late == 0),
        total, m->rounds, m->elapsed_ms, f_remote, m->stash_reuse, m->remote_late,
        m->stash_reuse_late, m->last_remote_round, m->last_remote_ms, f_second, m->absent,
        m->loops_waiting, m->cpu_node_before, m->cpu_node_after, m->home_before, m->home_after);
}

/* ---------------------------------------------------------------- two_node_mask */

struct two_mask {
    cpu_set_t mask;   /* what the program set: the attribute, or the thread's own pin */
    cpu_set_t before; /* read at the top of the start routine (self-pinned: after the pin) */
    cpu_set_t after;  /* read after its allocations */
    int self_pinned;
    long per_node[MAX_NODES], absent;
    int cpu_node;
    int named; /* nodalloc's node of its first 64 B object */
};

#define TWO_MASK_SMALL 4096
#define TWO_MASK_MEDIUM 64
#define TWO_MASK_LARGE 2

static void *two_mask_thread(void *argument) {
    struct two_mask *t = argument;
    if (t->self_pinned)
        pin_to(&t->mask);
    sched_getaffinity(0, sizeof t->before, &t->before);
    char *small[TWO_MASK_SMALL], *medium[TWO_MASK_MEDIUM], *large[TWO_MASK_LARGE];
    struct page_set *set = xmap(sizeof *set);
    /* An object may straddle one page boundary more than its size needs. */
    page_set_init(set, TWO_MASK_SMALL * 2 + TWO_MASK_MEDIUM * 5 + TWO_MASK_LARGE * 258);
    for (int i = 0; i < TWO_MASK_SMALL; i++) {
        if (!(small[i] = malloc(64)))
            die("malloc");
        memset(small[i], 1, 64);
        page_set_add(set, small[i], 64);
    }
    for (int i = 0; i < TWO_MASK_MEDIUM; i++) {
        if (!(medium[i] = malloc(16 << 10)))
            die("malloc");
        memset(medium[i], 2, 16 << 10);
        page_set_add(set, medium[i], 16 << 10);
    }
    for (int i = 0; i < TWO_MASK_LARGE; i++) {
        if (!(large[i] = malloc(1 << 20)))
            die("malloc");
        memset(large[i], 3, 1 << 20);
        page_set_add(set, large[i], 1 << 20);
    }
    t->named = named_node(small[0]);
    t->cpu_node = node_of_cpu_id(sched_getcpu());
    sched_getaffinity(0, sizeof t->after, &t->after);
    page_set_count(set, t->per_node, &t->absent);
    for (int i = 0; i < TWO_MASK_SMALL; i++)
        free(small[i]);
    for (int i = 0; i < TWO_MASK_MEDIUM; i++)
        free(medium[i]);
    for (int i = 0; i < TWO_MASK_LARGE; i++)
        free(large[i]);
    return NULL;
}

/* 2N threads, one at a time. Thread k's mask: the last CPU of CPU node k mod N and the first
 * CPU of node k+1 mod N (two nodes, never all of the machine's CPUs); threads 0..N-1 get it as
 * a pthread_attr affinity, threads N..2N-1 pin themselves to it first thing in their start
 * routine. Each allocates and touches 4096 x 64 B, 64 x 16 KiB, 2 x 1 MiB. Target: every page
 * on a node whose CPUs meet the mask, and the mask read after the allocations equal to the
 * mask the program set (a program that sets its own affinity is not bound). `not_widened`
 * (within the program's mask and not empty) tells narrowing from widening. */
void test_two_node_mask(const char *test) {
    first_malloc();
    int count = 2 * cpu_node_count;
    struct two_mask *threads = xmap(sizeof *threads * count);
    for (int k = 0; k < count; k++) {
        struct two_mask *t = &threads[k];
        const cpu_set_t *a = &usable_node(cpu_nodes[k % cpu_node_count])->cpus;
        const cpu_set_t *b = &usable_node(cpu_nodes[(k + 1) % cpu_node_count])->cpus;
        CPU_ZERO(&t->mask);
        for (int cpu = CPU_SETSIZE - 1; cpu >= 0; cpu--)
            if (CPU_ISSET(cpu, a)) {
                CPU_SET(cpu, &t->mask);
                break;
            }
        for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
            if (CPU_ISSET(cpu, b)) {
                CPU_SET(cpu, &t->mask);
                break;
            }
        t->self_pinned = k >= cpu_node_count;
        pthread_attr_t attributes;
        pthread_attr_init(&attributes);
        if (!t->self_pinned)
            pthread_attr_setaffinity_np(&attributes, sizeof t->mask, &t->mask);
        pthread_t thread;
        if (pthread_create(&thread, &attributes, two_mask_thread, t) != 0)
            die("pthread_create");
        pthread_attr_destroy(&attributes);
        pthread_join(thread, NULL);
    }

    long pages = 0, allowed_pages = 0;
    int not_widened = 0, unchanged = 0, unchanged_at_start = 0, all_allowed = 0;
    char detail[3072] = "";
    size_t used = 0;
    for (int k = 0; k < count; k++) {
        struct two_mask *t = &threads[k];
        long mine = 0, mine_allowed = 0;
        char where[256] = "";
        size_t where_used = 0;
        for (int n = 0; n < node_count; n++) {
            long here = t->per_node[nodes[n].os_id];
            if (!here)
                continue;
            cpu_set_t meet;
            CPU_AND(&meet, &nodes[n].cpus, &t->mask);
            mine += here;
            mine_allowed += CPU_COUNT(&meet) > 0 ? here : 0;
            append(where, sizeof where, &where_used, "%s%d:%ld", where_used ? "+" : "",
                   nodes[n].os_id, here);
        }
        mine += t->absent;
        pages += mine;
        allowed_pages += mine_allowed;
        all_allowed += mine_allowed == mine;
        int within = CPU_COUNT(&t->after) > 0 && cpuset_subset(&t->after, &t->mask);
        not_widened += within;
        unchanged += CPU_EQUAL(&t->after, &t->mask);
        unchanged_at_start += CPU_EQUAL(&t->before, &t->mask);
        char mask[128], after[128];
        cpuset_text(&t->mask, mask, sizeof mask);
        cpuset_text(&t->after, after, sizeof after);
        append(detail, sizeof detail, &used, "%st%d:%s:{%s}->{%s}:cpu_node%d:pages=%s%s", k ? "," : "",
               k, t->self_pinned ? "pin" : "attr", mask, after, t->cpu_node, where,
               t->absent ? ":absent" : "");
        if (is_nodalloc)
            append(detail, sizeof detail, &used, ":named=node%d", t->named);
    }
    char f_allowed[64];
    fraction(f_allowed, sizeof f_allowed, allowed_pages, pages);
    out("RESULT %s %s %s threads=%d pages_on_allowed_nodes=%s threads_all_allowed=%d/%d "
        "not_widened=%d/%d unchanged=%d/%d unchanged_at_start=%d/%d threads=%s\n",
        test, allocator, verdict(allowed_pages == pages && unchanged == count), count,
        f_allowed, all_allowed, count, not_widened, count, unchanged, count, unchanged_at_start,
        count, detail);
}
