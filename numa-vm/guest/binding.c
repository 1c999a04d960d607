/* binding.* (nodalloc only): how nodalloc binds threads to nodes, and that it never widens what
 * the program allowed. binding.spread, binding.one_cpu, binding.one_node and binding.attr start
 * threads under interleave binding from a process spread over the machine, narrowed to one CPU,
 * narrowed to one node, or with an affinity attribute per thread: no thread may end up outside
 * the mask it started with, and under spread each thread's mask lies within its home node and
 * the nodes share the threads evenly. binding.policies runs each NODALLOC_BIND policy (interleave,
 * saturate, map, none) in a child, since options are read at start-up, and checks every
 * worker's node, CPUs and memory against the policy.
 */
#include "harness.h"
#include "tests.h"

/* ---------------------------------------------------------------- binding.<case> */

static void *binding_thread(void *argument) {
    struct worker *w = argument;
    char *p = malloc(64); /* with or without the pthread_create wrapper, bound by now */
    if (!p)
        die("malloc");
    *p = 1;
    w->home_os_id = os_id_of_index(na_node_of(p));
    free(p);
    sched_getaffinity(0, sizeof w->pin, &w->pin);
    pthread_barrier_wait(w->context);
    return NULL;
}

/* Cases: spread (interleave over the whole machine), one_cpu (the parent narrows itself to one
 * CPU after its first malloc), one_node (the parent narrows itself to one node's CPUs after
 * its first malloc), attr (each thread is created with an affinity attribute of one node's
 * CPUs). In every case no thread may run outside the mask it started with; under spread each
 * thread's mask must lie within one node and the threads must cover the nodes evenly. */
void test_binding(const char *test) {
    const char *kind = strchr(test, '.') ? strchr(test, '.') + 1 : "spread";
    first_malloc(); /* the main thread is bound at its first malloc */
    int count = 2 * cpu_node_count;
    struct worker *workers = xmap(sizeof *workers * count);
    cpu_set_t allowed[MAX_NODES * 2];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, count);
    cpu_set_t narrowed;
    CPU_ZERO(&narrowed);
    int last_node = cpu_node_count - 1;
    const cpu_set_t *last_cpus = &usable_node(cpu_nodes[last_node])->cpus;
    if (!strcmp(kind, "one_cpu")) {
        /* The highest CPU of the last node: not node 0's, where the main thread was bound. */
        for (int cpu = CPU_SETSIZE - 1; cpu >= 0; cpu--)
            if (CPU_ISSET(cpu, last_cpus)) {
                CPU_SET(cpu, &narrowed);
                break;
            }
        pin_to(&narrowed);
    } else if (!strcmp(kind, "one_node")) {
        narrowed = *last_cpus;
        pin_to(&narrowed);
    } else if (strcmp(kind, "spread") && strcmp(kind, "attr")) {
        die("unknown-case");
    }
    for (int i = 0; i < count; i++) {
        workers[i].index = i;
        workers[i].context = &barrier;
        pthread_attr_t attributes;
        pthread_attr_init(&attributes);
        if (!strcmp(kind, "attr")) {
            allowed[i] = usable_node(cpu_nodes[i % cpu_node_count])->cpus;
            pthread_attr_setaffinity_np(&attributes, sizeof allowed[i], &allowed[i]);
        } else if (!strcmp(kind, "spread")) {
            CPU_ZERO(&allowed[i]);
            for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
                CPU_SET(cpu, &allowed[i]);
        } else {
            allowed[i] = narrowed;
        }
        if (pthread_create(&workers[i].thread, &attributes, binding_thread, &workers[i]) != 0)
            die("pthread_create");
        pthread_attr_destroy(&attributes);
    }
    join_workers(workers, count);

    int within_start_mask = 0, within_one_node = 0;
    int per_node[MAX_NODES] = {0};
    char masks[2048] = "";
    size_t used = 0;
    for (int i = 0; i < count; i++) {
        struct worker *w = &workers[i];
        within_start_mask += cpuset_subset(&w->pin, &allowed[i]);
        for (int k = 0; k < cpu_node_count; k++) {
            const cpu_set_t *cpus = &usable_node(cpu_nodes[k])->cpus;
            if (cpu_node_os_id(k) == w->home_os_id && cpuset_subset(&w->pin, cpus)) {
                within_one_node++;
                per_node[k]++;
            }
        }
        char mask[256];
        cpuset_text(&w->pin, mask, sizeof mask);
        append(masks, sizeof masks, &used, "%st%d:node%d:{%s}", i ? "," : "", i, w->home_os_id,
               mask);
    }
    int spread_even = 1;
    char spread[256] = "";
    used = 0;
    for (int k = 0; k < cpu_node_count; k++) {
        if (per_node[k] < count / cpu_node_count)
            spread_even = 0;
        append(spread, sizeof spread, &used, "%s%d", k ? "/" : "", per_node[k]);
    }
    int met = within_start_mask == count;
    if (!strcmp(kind, "spread"))
        met = met && within_one_node == count && spread_even;
    char narrowed_text[256];
    cpuset_text(&narrowed, narrowed_text, sizeof narrowed_text);
    out("RESULT %s %s %s threads=%d within_allowed_mask=%d/%d mask_within_home_node=%d/%d "
        "threads_per_node=%s narrowed_to={%s} masks=%s\n",
        test, allocator, verdict(met), count, within_start_mask, count, within_one_node, count,
        spread, strcmp(kind, "one_cpu") && strcmp(kind, "one_node") ? "-" : narrowed_text,
        masks);
}

/* ---------------------------------------------------------------- binding.policies */

/* The /sys node id of a CPU, -1 if none. */
static int node_of_cpu(int cpu) {
    for (int i = 0; i < node_count; i++)
        if (cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &nodes[i].cpus))
            return nodes[i].os_id;
    return -1;
}

static struct node *node_by_os_id(int os_id) {
    for (int i = 0; i < node_count; i++)
        if (nodes[i].os_id == os_id)
            return &nodes[i];
    return NULL;
}

/* The child: creates `count` workers one at a time, each keeps running until all exist (so no
 * heap is handed from an exited thread to a new one). Prints the main thread's mask and, per
 * worker, "W k cpu_before cpu_after node_of_index mask". */
struct policy_worker {
    pthread_t thread;
    int cpu_before, cpu_after, node_index;
    cpu_set_t mask;
};

static sem_t released;

static void *policy_thread(void *argument) {
    struct policy_worker *w = argument;
    w->cpu_before = sched_getcpu();
    char *volatile p = malloc(64);
    if (!p)
        die("malloc");
    *p = 1;
    w->node_index = na_node_of(p);
    w->cpu_after = sched_getcpu();
    sched_getaffinity(0, sizeof w->mask, &w->mask);
    sem_post(&started);
    while (sem_wait(&released) != 0 && errno == EINTR)
        ;
    free(p);
    return NULL;
}

void child_binding_policies(const char *argument) {
    int count = atoi(argument);
    first_malloc(); /* the main thread's heap first: it is heap 0 */
    cpu_set_t mask;
    sched_getaffinity(0, sizeof mask, &mask);
    char text[512];
    cpuset_text(&mask, text, sizeof text);
    out("M %s\n", text);
    sem_init(&released, 0, 0);
    struct policy_worker *workers = xmap(sizeof *workers * count);
    for (int i = 0; i < count; i++) {
        if (pthread_create(&workers[i].thread, NULL, policy_thread, &workers[i]) != 0)
            die("pthread_create");
        while (sem_wait(&started) != 0 && errno == EINTR)
            ;
    }
    for (int i = 0; i < count; i++)
        sem_post(&released);
    for (int i = 0; i < count; i++)
        pthread_join(workers[i].thread, NULL);
    for (int i = 0; i < count; i++) {
        cpuset_text(&workers[i].mask, text, sizeof text);
        out("W %d %d %d %d %s\n", i, workers[i].cpu_before, workers[i].cpu_after,
            workers[i].node_index, text);
    }
}

static void parse_mask(const char *text, cpu_set_t *set) {
    CPU_ZERO(set);
    if (strncmp(text, "none", 4))
        parse_list(text, add_cpu, set);
}

/* The node (/sys id) a policy gives the heap with index `index` (heap 0 is the main thread's,
 * which is never bound: worker k has index k + 1). */
static int policy_node(const char *policy, int index, const int *map, int map_length) {
    if (!strcmp(policy, "interleave"))
        return cpu_node_os_id(index);
    if (!strcmp(policy, "saturate")) {
        int total = 0;
        for (int k = 0; k < cpu_node_count; k++)
            total += usable_node(cpu_nodes[k])->cpu_count;
        int position = index % total;
        for (int k = 0; k < cpu_node_count; k++) {
            int cpus = usable_node(cpu_nodes[k])->cpu_count;
            if (position < cpus)
                return cpu_node_os_id(k);
            position -= cpus;
        }
        return cpu_node_os_id(0);
    }
    if (!strcmp(policy, "map"))
        return map[index % map_length];
    return -1; /* none: wherever the thread runs */
}

void test_binding_policies(const char *test) {
    int count = 2 * cpu_node_count;
    /* The map: on 2 CPU nodes "1 1 0"; on 4, an asymmetric 5 entries (node 0 once, node 3
     * twice, a length that is no multiple of the node count), as /sys ids, with a comment and
     * a comma to exercise the parser. */
    int map[8], map_length = 0;
    if (cpu_node_count >= 4) {
        int pattern[] = {3, 3, 1, 0, 2};
        for (int i = 0; i < 5; i++)
            map[map_length++] = cpu_node_os_id(pattern[i]);
    } else {
        map[map_length++] = cpu_node_os_id(cpu_node_count - 1);
        map[map_length++] = cpu_node_os_id(cpu_node_count - 1);
        map[map_length++] = cpu_node_os_id(0);
    }
    char map_text[128];
    size_t used = 0;
    map_text[0] = 0;
    append(map_text, sizeof map_text, &used, "# numatest binding.policies\n");
    for (int i = 0; i < map_length; i++)
        append(map_text, sizeof map_text, &used, "%d%s", map[i], i == 0 ? ", " : " ");
    append(map_text, sizeof map_text, &used, "\n");
    const char *map_path = "/tmp/numatest-bind.map";
    if (write_file(map_path, map_text) != 0)
        die("write-map-file");

    cpu_set_t parent_mask;
    sched_getaffinity(0, sizeof parent_mask, &parent_mask);
    static const char *policies[] = {"interleave", "saturate", "map", "none"};
    char report[4096] = "";
    size_t report_used = 0;
    int all_met = 1;
    char count_text[16];
    snprintf(count_text, sizeof count_text, "%d", count);
    for (int p = 0; p < 4; p++) {
        const char *policy = policies[p];
        char assignment[160];
        if (!strcmp(policy, "map"))
            snprintf(assignment, sizeof assignment, "NODALLOC_BIND=map:%s", map_path);
        else
            snprintf(assignment, sizeof assignment, "NODALLOC_BIND=%s", policy);
        const char *assignments[] = {assignment, NULL};
        static char output[1 << 16];
        int status = run_child("binding.policies.child", count_text, assignments, NULL, output,
                               sizeof output);
        char words[200]; /* the child's first words, kept before the lines are split */
        size_t word_length = strnlen(output, sizeof words - 1);
        memcpy(words, output, word_length);
        words[word_length] = 0;
        int ok = 0, seen = 0, stable = 0;
        char got[512] = "", bad[1024] = "";
        size_t got_used = 0, bad_used = 0;
        cpu_set_t child_main;
        CPU_ZERO(&child_main);
        for (char *line = output; line && *line;) {
            char *end = strchr(line, '\n');
            if (end)
                *end = 0;
            if (line[0] == 'M' && line[1] == ' ') {
                parse_mask(line + 2, &child_main);
            } else if (line[0] == 'W' && line[1] == ' ') {
                int k, before, after, index;
                char mask_text[512];
                if (sscanf(line + 2, "%d %d %d %d %511s", &k, &before, &after, &index,
                           mask_text) == 5) {
                    cpu_set_t mask;
                    parse_mask(mask_text, &mask);
                    int node_of = os_id_of_index(index);
                    int run_node = node_of_cpu(after);
                    int want = policy_node(policy, k + 1, map, map_length);
                    int good;
                    if (want < 0) { /* none: mask unchanged, memory where it runs */
                        int migrated = node_of_cpu(before) != run_node;
                        stable += !migrated;
                        good = CPU_EQUAL(&mask, &parent_mask) && CPU_EQUAL(&mask, &child_main) &&
                               (migrated || node_of == run_node);
                    } else {
                        stable++;
                        cpu_set_t expected;
                        CPU_AND(&expected, &node_by_os_id(want)->cpus, &parent_mask);
                        good = CPU_EQUAL(&mask, &expected) && run_node == want &&
                               node_of == want;
                    }
                    seen++;
                    ok += good;
                    append(got, sizeof got, &got_used, "%s%d", k ? "," : "", node_of);
                    if (!good)
                        append(bad, sizeof bad, &bad_used,
                               "%st%d:want%d,cpu%d>%d(node%d),node_of%d,mask{%s}",
                               bad_used ? ";" : "", k, want, before, after, run_node, node_of,
                               mask_text);
                }
            }
            line = end ? end + 1 : NULL;
        }
        int exited = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        /* none: at least half the threads must not have migrated mid-probe, or nothing was
         * measured. */
        int met = exited && seen == count && ok == count && stable * 2 >= count;
        all_met = all_met && met;
        append(report, sizeof report, &report_used, " %s=%d/%d[%s]", policy, ok, count,
               got[0] ? got : "-");
        if (!strcmp(policy, "none"))
            append(report, sizeof report, &report_used, " none_unmigrated=%d/%d", stable,
                   count);
        if (!exited)
            append(report, sizeof report, &report_used, " %s_child_status=%d", policy, status);
        if (bad[0])
            append(report, sizeof report, &report_used, " %s_bad=%s", policy, bad);
        if (!exited || seen != count) {
            /* Keep the child's last words, on one line. */
            for (char *c = words; *c; c++)
                if (*c == '\n' || *c == ' ')
                    *c = '|';
            append(report, sizeof report, &report_used, " %s_output=%s", policy, words);
        }
    }
    char parent_text[256];
    cpuset_text(&parent_mask, parent_text, sizeof parent_text);
    char map_line[64];
    used = 0;
    map_line[0] = 0;
    for (int i = 0; i < map_length; i++)
        append(map_line, sizeof map_line, &used, "%s%d", i ? "," : "", map[i]);
    /* The figures list the node (nodalloc_node_of, as /sys id) of each worker's first block,
     * in creation order; worker k is heap k + 1 (the main thread's heap is 0). */
    out("RESULT %s %s %s workers=%d%s map=%s parent_mask={%s}\n", test, allocator,
        verdict(all_met), count, report, map_line, parent_text);
}
