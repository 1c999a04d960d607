/* profile_node_labels (nodalloc only): a heap profile's samples carry the node their memory is
 * on. A child with NODALLOC_PROFILE=1 and NODALLOC_PROFILE_RATE=8K runs two threads, each
 * pinned to the CPUs of the node nodalloc binds it to (interleave order: the first created is
 * on CPU node 1, the second on CPU node 2 mod N, i.e. node 0 on 2 nodes); each allocates, at a
 * call site of its own, blocks of 256 B and keeps them, touched: 4 MiB on the first thread's
 * node, 8 MiB on the second's. Once both threads are joined (every block still live), the
 * child writes the profile with nodalloc_profile_dump to the guest's tmpfs, reads it back,
 * takes the gzip framing apart (the header checked, every deflate block a stored one, NLEN the
 * complement of LEN, the trailer's CRC-32 and length checked), walks the protocol buffer
 * (perftools.profiles.Profile: sample_type, samples, their `node` labels and the string
 * table) with a bounds-checked reader, so that a malformed file fails the test instead of
 * crashing it, and sums inuse_space per `node` label. The label is nodalloc's node index (as
 * nodalloc_node_of's), mapped to the /sys node for the report; on the guests of numa-vm/run
 * the two numberings agree for the CPU nodes.
 *
 * nodalloc passes when each thread's node sums to within 15 % of what the thread holds, every
 * sample has exactly one `node` label, and the kernel agrees with the labels: at least 99.9 %
 * of the distinct pages of each thread's blocks are on its node (move_pages), every block is
 * there by nodalloc_node_of, and so is every page of the blocks that were sampled (a sampled
 * block of a small class is served as a span of its own, so its usable size is far above the
 * 256 B asked for; that is how they are told apart here, for the report and that check).
 */
#include "harness.h"
#include "tests.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>

#define BLOCK_SIZE 256
#define FIRST_BLOCKS 16384  /* 4 MiB */
#define SECOND_BLOCKS 32768 /* 8 MiB */
#define PROFILE_RATE 8192
#define PROFILE_PATH "/tmp/numatest-profile.pb.gz"
#define PROFILE_MAX (64L << 20) /* a larger file is malformed here */
#define MAX_VALUES 16

/* ---------------------------------------------------------------- the two call sites */

/* Distinct constants keep the compiler from folding the two into one function (and so one
 * call site). */
static __attribute__((noinline)) void keep_first_blocks(char **blocks) {
    for (int i = 0; i < FIRST_BLOCKS; i++) {
        char *p = malloc(BLOCK_SIZE);
        if (!p)
            die("malloc");
        memset(p, 0x5a, BLOCK_SIZE);
        blocks[i] = p;
    }
}

static __attribute__((noinline)) void keep_second_blocks(char **blocks) {
    for (int i = 0; i < SECOND_BLOCKS; i++) {
        char *p = malloc(BLOCK_SIZE);
        if (!p)
            die("malloc");
        memset(p, 0xa5, BLOCK_SIZE);
        blocks[i] = p;
    }
}

static void *first_thread(void *argument) {
    struct worker *w = argument;
    thread_start(w);
    keep_first_blocks(w->context);
    return NULL;
}

static void *second_thread(void *argument) {
    struct worker *w = argument;
    thread_start(w);
    keep_second_blocks(w->context);
    return NULL;
}

/* ---------------------------------------------------------------- gzip, stored blocks only */

static uint32_t crc32_of(const uint8_t *data, size_t length) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < length; i++) {
        crc ^= data[i];
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? 0xedb88320u ^ (crc >> 1) : crc >> 1;
    }
    return ~crc;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Unwraps the gzip stream `in` into `out` (capacity at least in_length: stored data is never
 * longer than its stream). NULL on success, else what is wrong. */
static const char *gunzip_stored(const uint8_t *in, size_t in_length, uint8_t *out,
                                 size_t *out_length, int *blocks) {
    const uint8_t *p = in, *end = in + in_length;
    *out_length = 0;
    *blocks = 0;
    if (in_length < 18)
        return "gzip-too-short";
    if (p[0] != 0x1f || p[1] != 0x8b)
        return "gzip-bad-magic";
    if (p[2] != 8)
        return "gzip-not-deflate";
    uint8_t flags = p[3];
    if (flags & 0xe0)
        return "gzip-reserved-flags";
    p += 10;
    if (flags & 4) { /* FEXTRA */
        if (end - p < 2)
            return "gzip-truncated-extra";
        size_t extra = (size_t)p[0] | (size_t)p[1] << 8;
        p += 2;
        if ((size_t)(end - p) < extra)
            return "gzip-truncated-extra";
        p += extra;
    }
    for (int bit = 8; bit <= 16; bit += 8) { /* FNAME, FCOMMENT: NUL-terminated */
        if (!(flags & bit))
            continue;
        while (p < end && *p)
            p++;
        if (p == end)
            return "gzip-truncated-name";
        p++;
    }
    if (flags & 2) { /* FHCRC */
        if (end - p < 2)
            return "gzip-truncated-header-crc";
        p += 2;
    }
    for (;;) {
        if (end - p < 5)
            return "deflate-truncated-block-header";
        uint8_t head = p[0];
        int final = head & 1, type = (head >> 1) & 3;
        if (type != 0)
            return "deflate-block-not-stored";
        size_t length = (size_t)p[1] | (size_t)p[2] << 8;
        size_t complement = (size_t)p[3] | (size_t)p[4] << 8;
        if ((length ^ complement) != 0xffff)
            return "deflate-nlen-mismatch";
        p += 5;
        if ((size_t)(end - p) < length)
            return "deflate-truncated-block";
        if (*out_length + length > in_length)
            return "deflate-longer-than-stream";
        memcpy(out + *out_length, p, length);
        *out_length += length;
        p += length;
        ++*blocks;
        if (final)
            break;
    }
    if (end - p != 8)
        return end - p < 8 ? "gzip-truncated-trailer" : "gzip-data-after-trailer";
    if (le32(p) != crc32_of(out, *out_length))
        return "gzip-crc-mismatch";
    if (le32(p + 4) != (uint32_t)*out_length)
        return "gzip-length-mismatch";
    return NULL;
}

/* ---------------------------------------------------------------- protocol buffers */

struct field {
    uint64_t number;
    int wire;
    uint64_t varint;     /* wire 0 */
    const uint8_t *data; /* wire 1, 2, 5 */
    size_t length;
};

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end)
            return -1;
        uint8_t byte = *(*p)++;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *value = v;
            return 0;
        }
    }
    return -1; /* more than 10 bytes */
}

/* The next field of a message at *p; -1 when it is malformed or runs past `end`. */
static int next_field(const uint8_t **p, const uint8_t *end, struct field *f) {
    uint64_t key;
    if (read_varint(p, end, &key) != 0)
        return -1;
    f->number = key >> 3;
    f->wire = (int)(key & 7);
    if (f->number == 0 || f->number > 0x1fffffff)
        return -1;
    f->data = NULL;
    f->length = 0;
    f->varint = 0;
    switch (f->wire) {
    case 0:
        return read_varint(p, end, &f->varint);
    case 1:
    case 5: {
        size_t size = f->wire == 1 ? 8 : 4;
        if ((size_t)(end - *p) < size)
            return -1;
        f->data = *p;
        f->length = size;
        *p += size;
        return 0;
    }
    case 2: {
        uint64_t length;
        if (read_varint(p, end, &length) != 0 || length > (uint64_t)(end - *p))
            return -1;
        f->data = *p;
        f->length = (size_t)length;
        *p += length;
        return 0;
    }
    default: /* groups (3, 4) and the undefined 6, 7 */
        return -1;
    }
}

struct text {
    const uint8_t *data;
    size_t length;
};

struct profile {
    struct text *strings;
    size_t string_count;
    int inuse_space; /* index of inuse_space among the values, -1 if absent */
    size_t value_types;
    long samples;
    long samples_per_node[MAX_NODES];
    long long inuse_per_node[MAX_NODES];
    long unlabelled;        /* samples without a node label */
    long unlabelled_inuse;
};

static int text_is(const struct profile *pr, uint64_t index, const char *word) {
    if (index >= pr->string_count)
        return 0;
    size_t length = strlen(word);
    return pr->strings[index].length == length &&
           memcmp(pr->strings[index].data, word, length) == 0;
}

/* A sample: its values and its node label, added to the sums. NULL or what is wrong. */
static const char *walk_sample(struct profile *pr, const uint8_t *p, const uint8_t *end) {
    int64_t values[MAX_VALUES] = {0};
    size_t value_count = 0;
    int node = -1, node_labels = 0;
    struct field f;
    while (p < end) {
        if (next_field(&p, end, &f) != 0)
            return "sample-malformed";
        if (f.number == 1) { /* location ids: packed or not, only checked to parse */
            if (f.wire == 2) {
                const uint8_t *q = f.data, *q_end = f.data + f.length;
                uint64_t id;
                while (q < q_end)
                    if (read_varint(&q, q_end, &id) != 0)
                        return "sample-location-ids-malformed";
            } else if (f.wire != 0) {
                return "sample-location-ids-wire-type";
            }
        } else if (f.number == 2) { /* values: packed or not */
            if (f.wire == 2) {
                const uint8_t *q = f.data, *q_end = f.data + f.length;
                uint64_t v;
                while (q < q_end) {
                    if (read_varint(&q, q_end, &v) != 0)
                        return "sample-values-malformed";
                    if (value_count == MAX_VALUES)
                        return "sample-too-many-values";
                    values[value_count++] = (int64_t)v;
                }
            } else if (f.wire == 0) {
                if (value_count == MAX_VALUES)
                    return "sample-too-many-values";
                values[value_count++] = (int64_t)f.varint;
            } else {
                return "sample-values-wire-type";
            }
        } else if (f.number == 3) { /* Label {1 key, 2 str, 3 num, 4 num_unit} */
            if (f.wire != 2)
                return "label-wire-type";
            const uint8_t *q = f.data, *q_end = f.data + f.length;
            uint64_t key = 0, str = 0;
            struct field g;
            while (q < q_end) {
                if (next_field(&q, q_end, &g) != 0)
                    return "label-malformed";
                if (g.number == 1 && g.wire == 0)
                    key = g.varint;
                else if (g.number == 2 && g.wire == 0)
                    str = g.varint;
                else if (g.number <= 4 && g.wire != 0)
                    return "label-wire-type";
            }
            if (key >= pr->string_count || str >= pr->string_count)
                return "label-string-index-out-of-range";
            if (!text_is(pr, key, "node"))
                continue;
            node_labels++;
            const struct text *t = &pr->strings[str];
            if (t->length == 0 || t->length > 3)
                return "node-label-not-a-number";
            int number = 0;
            for (size_t i = 0; i < t->length; i++) {
                if (t->data[i] < '0' || t->data[i] > '9')
                    return "node-label-not-a-number";
                number = number * 10 + (t->data[i] - '0');
            }
            if (number >= MAX_NODES)
                return "node-label-out-of-range";
            node = number;
        }
    }
    if (value_count != pr->value_types)
        return "sample-value-count-differs-from-sample-types";
    if (node_labels > 1)
        return "sample-with-two-node-labels";
    pr->samples++;
    int64_t inuse = values[pr->inuse_space];
    if (node < 0) {
        pr->unlabelled++;
        pr->unlabelled_inuse += inuse;
    } else {
        pr->samples_per_node[node]++;
        pr->inuse_per_node[node] += inuse;
    }
    return NULL;
}

/* Walks a whole Profile message. NULL or what is wrong. */
static const char *walk_profile(struct profile *pr, const uint8_t *data, size_t length) {
    const uint8_t *end = data + length, *p;
    struct field f;
    memset(pr, 0, sizeof *pr);
    pr->inuse_space = -1;
    /* First pass: every field parses; count the strings. */
    size_t strings = 0;
    for (p = data; p < end;) {
        if (next_field(&p, end, &f) != 0)
            return "profile-malformed";
        if (f.number == 6) {
            if (f.wire != 2)
                return "string-table-wire-type";
            strings++;
        }
    }
    if (strings == 0)
        return "no-string-table";
    pr->strings = xmap(strings * sizeof *pr->strings);
    for (p = data; p < end;) {
        next_field(&p, end, &f);
        if (f.number == 6) {
            pr->strings[pr->string_count].data = f.data;
            pr->strings[pr->string_count].length = f.length;
            pr->string_count++;
        }
    }
    if (pr->strings[0].length != 0)
        return "string-table-0-not-empty";
    /* The sample types, in order: which value is inuse_space. */
    for (p = data; p < end;) {
        next_field(&p, end, &f);
        if (f.number != 1)
            continue;
        if (f.wire != 2)
            return "sample-type-wire-type";
        const uint8_t *q = f.data, *q_end = f.data + f.length;
        uint64_t type = 0;
        struct field g;
        while (q < q_end) {
            if (next_field(&q, q_end, &g) != 0)
                return "sample-type-malformed";
            if (g.number == 1 && g.wire == 0)
                type = g.varint;
        }
        if (type >= pr->string_count)
            return "sample-type-string-index-out-of-range";
        if (text_is(pr, type, "inuse_space") && pr->inuse_space < 0)
            pr->inuse_space = (int)pr->value_types;
        if (++pr->value_types > MAX_VALUES)
            return "too-many-sample-types";
    }
    if (pr->inuse_space < 0)
        return "no-inuse_space-sample-type";
    /* The samples. */
    for (p = data; p < end;) {
        next_field(&p, end, &f);
        if (f.number != 2)
            continue;
        if (f.wire != 2)
            return "sample-wire-type";
        const char *wrong = walk_sample(pr, f.data, f.data + f.length);
        if (wrong)
            return wrong;
    }
    return NULL;
}

/* ---------------------------------------------------------------- reading the file */

/* The whole file in a fresh mapping (*length bytes); NULL with errno when it cannot be read. */
static uint8_t *read_whole(const char *path, size_t *length) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return NULL;
    }
    if (st.st_size <= 0 || st.st_size > PROFILE_MAX) {
        close(fd);
        errno = EFBIG;
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    uint8_t *buffer = xmap(size);
    size_t done = 0;
    while (done < size) {
        ssize_t n = read(fd, buffer + done, size - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    close(fd);
    *length = done;
    return buffer;
}

/* ---------------------------------------------------------------- the test */

/* What a thread's blocks say about where they are. figures: [0] distinct pages, [1] on the
 * thread's node, [2] blocks nodalloc_node_of places elsewhere, [3] sampled blocks, [4] their
 * pages, [5] of them on the thread's node. */
static void locate_blocks(struct worker *w, int count) {
    char **blocks = w->context;
    int index = -1;
    for (int k = 0; k < usable_count; k++)
        if (os_id_of_index(k) == w->node_os_id)
            index = k;
    struct page_set *all = xmap(sizeof *all), *sampled = xmap(sizeof *sampled);
    page_set_init(all, 2L * count);
    page_set_init(sampled, 2L * count);
    long elsewhere = 0, sampled_blocks = 0;
    for (int i = 0; i < count; i++) {
        page_set_add(all, blocks[i], BLOCK_SIZE);
        if (na_node_of(blocks[i]) != index)
            elsewhere++;
        if (malloc_usable_size(blocks[i]) >= PAGE) {
            sampled_blocks++;
            page_set_add(sampled, blocks[i], BLOCK_SIZE);
        }
    }
    long per_node[MAX_NODES], absent;
    page_set_count(all, per_node, &absent);
    w->figures[0] = all->count;
    w->figures[1] = per_node[w->node_os_id];
    w->figures[2] = elsewhere;
    page_set_count(sampled, per_node, &absent);
    w->figures[3] = sampled_blocks;
    w->figures[4] = sampled->count;
    w->figures[5] = per_node[w->node_os_id];
}

/* The mean bytes a sampled 256 B block stands for at the test's rate, 256 / (1 - e^-(256/R)),
 * for the report (a series: numatest links no libm). */
static double sample_weight(void) {
    double x = (double)BLOCK_SIZE / PROFILE_RATE, term = 1, e = 0;
    for (int k = 1; k < 30; k++) {
        term *= -x / k;
        e += term; /* e^-x - 1 */
    }
    return BLOCK_SIZE / -e;
}

void child_profile_node_labels(const char *argument) {
    (void)argument;
    const char *test = "profile_node_labels";
    int (*dump)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "nodalloc_profile_dump");
    if (!dump)
        die("no-nodalloc_profile_dump");
    first_malloc(); /* the main thread takes binding index 0 */
    struct worker *workers = xmap(2 * sizeof *workers);
    static const int counts[2] = {FIRST_BLOCKS, SECOND_BLOCKS};
    for (int k = 0; k < 2; k++) {
        workers[k].index = k;
        worker_pin(&workers[k], agreeing_cpu_node(k));
        workers[k].context = xmap(sizeof(char *) * counts[k]);
    }
    /* One at a time: the order nodalloc binds them in is the creation order. */
    start_workers(&workers[0], 1, first_thread);
    start_workers(&workers[1], 1, second_thread);
    join_workers(workers, 2);

    int error = dump(PROFILE_PATH);
    if (error != 0) {
        out("RESULT %s %s fail error=nodalloc_profile_dump errno=%d\n", test, allocator, error);
        return;
    }
    size_t file_length = 0;
    uint8_t *file = read_whole(PROFILE_PATH, &file_length);
    if (!file) {
        out("RESULT %s %s fail error=read-profile errno=%d\n", test, allocator, errno);
        return;
    }
    uint8_t *raw = xmap(file_length);
    size_t raw_length = 0;
    int gzip_blocks = 0;
    const char *wrong = gunzip_stored(file, file_length, raw, &raw_length, &gzip_blocks);
    struct profile *pr = xmap(sizeof *pr);
    if (!wrong)
        wrong = walk_profile(pr, raw, raw_length);
    if (wrong) {
        out("RESULT %s %s fail error=malformed-profile reason=%s file_bytes=%zu "
            "profile_bytes=%zu stored_blocks=%d\n",
            test, allocator, wrong, file_length, raw_length, gzip_blocks);
        return;
    }

    /* Where the blocks are, by the kernel and by nodalloc. */
    for (int k = 0; k < 2; k++)
        locate_blocks(&workers[k], counts[k]);

    int met = pr->unlabelled == 0;
    char sums[1024], pages[512], others[256];
    size_t used = 0, pages_used = 0, others_used = 0;
    sums[0] = pages[0] = others[0] = 0;
    double weight = sample_weight();
    long long labelled_total = 0;
    for (int k = 0; k < 2; k++) {
        struct worker *w = &workers[k];
        int label = -1; /* nodalloc's index of the thread's node: the label it should carry */
        for (int j = 0; j < usable_count; j++)
            if (os_id_of_index(j) == w->node_os_id)
                label = j;
        long long truth = (long long)counts[k] * BLOCK_SIZE;
        long long sum = label >= 0 ? pr->inuse_per_node[label] : 0;
        long samples = label >= 0 ? pr->samples_per_node[label] : 0;
        int within = label >= 0 && (sum > truth ? sum - truth : truth - sum) * 100 <= truth * 15;
        met = met && within;
        append(sums, sizeof sums, &used,
               "node%d(label=%d):inuse_space=%lld/truth=%lld(%+.1f%%,samples=%ld,"
               "sampled_blocks=%ld~%.0fB) ",
               w->node_os_id, label, sum, truth, 100.0 * (double)(sum - truth) / (double)truth,
               samples, w->figures[3], w->figures[3] * weight);
        char f_all[64];
        fraction(f_all, sizeof f_all, w->figures[1], w->figures[0]);
        int placed = w->figures[0] > 0 && w->figures[1] * 1000 >= w->figures[0] * 999 &&
                     w->figures[2] == 0 && w->figures[5] == w->figures[4];
        met = met && placed;
        append(pages, sizeof pages, &pages_used,
               "%snode%d:pages=%s,node_of_elsewhere=%ld,sampled_pages=%ld/%ld,home=node%d",
               k ? ";" : "", w->node_os_id, f_all, w->figures[2], w->figures[5], w->figures[4],
               w->home_os_id);
    }
    for (int n = 0; n < MAX_NODES; n++) {
        labelled_total += pr->inuse_per_node[n];
        int ours = 0;
        for (int k = 0; k < 2; k++)
            ours |= os_id_of_index(n) == workers[k].node_os_id;
        if (!ours && pr->samples_per_node[n])
            append(others, sizeof others, &others_used, "%s%d:%lld/%ld", others_used ? "," : "",
                   n, pr->inuse_per_node[n], pr->samples_per_node[n]);
    }
    out("RESULT %s %s %s %ssamples=%ld unlabelled=%ld(%ldB) other_labels=%s labelled_total=%lld "
        "placement=%s file_bytes=%zu profile_bytes=%zu stored_blocks=%d rate=%d\n",
        test, allocator, verdict(met), sums, pr->samples, pr->unlabelled, pr->unlabelled_inuse,
        others_used ? others : "-", labelled_total, pages, file_length, raw_length, gzip_blocks,
        PROFILE_RATE);
}

void test_profile_node_labels(const char *test) {
    const char *assignments[] = {"NODALLOC_PROFILE=1", "NODALLOC_PROFILE_RATE=8K", NULL};
    run_reporting_child(test, "profile_node_labels.child", "-", assignments);
}
