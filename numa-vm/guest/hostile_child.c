/* The child of the hostile-environment tests (hostile.c): `numatest hostile.child nodalloc SPEC`
 * runs under nodalloc (LD_PRELOAD inherited) in whatever environment its parent made, and
 * proves that nodalloc starts there, serves a content-checked workload and fails cleanly
 * (NULL + ENOMEM) where memory really is not there. It prints one line
 * "CASE met=0|1 key=value ..." judged against SPEC, a comma-separated list of:
 *
 *   load=full|medium|light   full: 8192 x 64 B, 512 x 16 KiB, 24 x 1 MiB, 8 x 4 MiB live at
 *                     once (64.5 MiB); medium: 8192 x 64 B, 256 x 16 KiB, 16 x 1 MiB, 7 x 4 MiB
 *                     (48.5 MiB); light: 4096 x 64 B, 128 x 16 KiB, 4 x 1 MiB, 2 x 4 MiB
 *                     (14.3 MiB). Every object is filled with its own byte, checked, a quarter
 *                     of the medium ones grown by realloc (prefix checked), the odd objects freed,
 *                     as many calloc'd (must read zero), then everything freed. Any NULL or any
 *                     wrong byte fails the case.
 *   huge=ram2|MIB     one malloc of twice the guest's RAM plus swap (sysinfo(2): needs no /proc),
 *                     or of MIB MiB, and one realloc of a live 64 B block to that size, must
 *                     both return NULL with errno ENOMEM (the block intact); a 4 MiB malloc
 *                     after them must succeed.
 *   nodes=N           nodalloc_stats_print reports N node(s); with N = 1 every object of the
 *                     workload is on node 0 by nodalloc_node_of and nodalloc_malloc_on_node(64,
 *                     1) is refused with EINVAL.
 *   mbind_errno=E     a direct mbind(2) of a page of ours fails with errno E (the seccomp filter
 *                     is in force in the child).
 *   thp=MODE          /sys/kernel/mm/transparent_hugepage/enabled reads [MODE]; after the
 *                     workload, 32 MiB of 64 B objects (every byte written) and one 64 MiB block
 *                     with one byte written per MiB: AnonHugePages (/proc/self/smaps_rollup)
 *                     with the small objects live must be 0 under never and > 0 under always
 *                     and madvise (under madvise only because nodalloc saw the mode and advised
 *                     MADV_HUGEPAGE on its dense pools), and the sparse block must have at
 *                     most 4 MiB of its own pages resident (mincore(2)) in every mode (under always only because nodalloc advised
 *                     MADV_NOHUGEPAGE on memory it does not fill itself).
 *
 * The child may have no /sys (no_sysfs): it reads no topology, and its spec carries the
 * figures it is judged by.
 */
#include "harness.h"
#include "tests.h"

#include <linux/sysinfo.h>
#include <sys/mman.h>

struct hostile_spec {
    int load; /* 0 light, 1 medium, 2 full */
    unsigned long huge_bytes; /* 0: no huge request */
    int nodes;                /* -1: not checked */
    int mbind_errno;          /* -1: not checked */
    char thp[16];             /* "": not checked */
};

static void parse_hostile_spec(const char *text, struct hostile_spec *spec) {
    spec->load = 0;
    spec->huge_bytes = 0;
    spec->nodes = -1;
    spec->mbind_errno = -1;
    spec->thp[0] = 0;
    char copy[256];
    snprintf(copy, sizeof copy, "%s", text);
    char *saved = NULL;
    for (char *word = strtok_r(copy, ",", &saved); word; word = strtok_r(NULL, ",", &saved)) {
        if (!strcmp(word, "load=full"))
            spec->load = 2;
        else if (!strcmp(word, "load=medium"))
            spec->load = 1;
        else if (!strcmp(word, "load=light"))
            spec->load = 0;
        else if (!strcmp(word, "huge=ram2")) {
            struct sysinfo info;
            if (syscall(SYS_sysinfo, &info) != 0) /* sysinfo() is this program's own */
                die("sysinfo");
            spec->huge_bytes = 2UL * (info.totalram + info.totalswap) * info.mem_unit;
        } else if (!strncmp(word, "huge=", 5))
            spec->huge_bytes = strtoul(word + 5, NULL, 10) << 20;
        else if (!strncmp(word, "nodes=", 6))
            spec->nodes = atoi(word + 6);
        else if (!strncmp(word, "mbind_errno=", 12))
            spec->mbind_errno = atoi(word + 12);
        else if (!strncmp(word, "thp=", 4))
            snprintf(spec->thp, sizeof spec->thp, "%s", word + 4);
        else
            die("bad-hostile-spec");
    }
}

/* AnonHugePages of this process in KiB, -1 if unreadable. */
static long anon_huge_kib(void) {
    char text[4096];
    if (read_text("/proc/self/smaps_rollup", text, sizeof text) < 0)
        return -1;
    char *p = strstr(text, "AnonHugePages:");
    return p ? strtol(p + 14, NULL, 10) : -1;
}

struct hostile_figures {
    long objects, nulls, wrong_bytes, off_node0, peak_bytes, anon_huge_kib, sparse_rss_kib;
};

/* Fills an object with its own byte; checks it (returns the wrong bytes) where `check`. */
static long fill_or_check(unsigned char *p, size_t size, unsigned char value, int check) {
    if (!check) {
        memset(p, value, size);
        return 0;
    }
    long wrong = 0;
    for (size_t i = 0; i < size; i++)
        wrong += p[i] != value;
    return wrong;
}

/* Resident KiB of the pages spanning [start, start + bytes), by mincore(2): the block's own
 * cost, untouched by memory the allocator releases elsewhere meanwhile. -1 if mincore fails. */
static long resident_in_kib(void *start, size_t bytes) {
    uintptr_t first = (uintptr_t)start & ~(uintptr_t)(PAGE - 1);
    size_t pages = ((uintptr_t)start + bytes - first + PAGE - 1) / PAGE;
    unsigned char *vec = xmap(pages);
    long resident = -1;
    if (mincore((void *)first, pages * PAGE, vec) == 0) {
        resident = 0;
        for (size_t i = 0; i < pages; i++)
            resident += vec[i] & 1;
        resident *= (long)(PAGE / 1024);
    }
    xunmap(vec, pages);
    return resident;
}

/* The thp= probe: dense small objects (AnonHugePages while they are live) and a sparse block
 * (its RSS growth). */
static void thp_probe(struct hostile_figures *f) {
    enum { SIZE = 64 };
    size_t count = (32UL << 20) / SIZE;
    unsigned char **objects = xmap(sizeof *objects * count);
    for (size_t i = 0; i < count; i++) {
        objects[i] = malloc(SIZE);
        if (!objects[i]) {
            f->nulls++;
            break;
        }
        fill_or_check(objects[i], SIZE, (unsigned char)i, 0);
    }
    f->anon_huge_kib = anon_huge_kib();
    size_t sparse_bytes = 64UL << 20;
    volatile unsigned char *sparse = malloc(sparse_bytes);
    if (sparse) {
        for (size_t i = 0; i < sparse_bytes; i += 1UL << 20)
            sparse[i] = 1;
        f->sparse_rss_kib = resident_in_kib((void *)sparse, sparse_bytes);
        free((void *)sparse);
    } else {
        f->nulls++;
    }
    for (size_t i = 0; i < count && objects[i]; i++) {
        f->wrong_bytes += fill_or_check(objects[i], SIZE, (unsigned char)i, 1);
        free(objects[i]);
    }
    xunmap(objects, sizeof *objects * count);
}

static void hostile_workload(const struct hostile_spec *spec, struct hostile_figures *f) {
    static const size_t sizes[] = {64, 16 << 10, 1 << 20, 4 << 20};
    static const int load_counts[3][4] = {{4096, 128, 4, 2}, {8192, 256, 16, 7}, {8192, 512, 24, 8}};
    const int *counts = load_counts[spec->load];
    int total = 0;
    for (int r = 0; r < 4; r++)
        total += counts[r];
    unsigned char **objects = xmap(sizeof *objects * total);
    size_t *lengths = xmap(sizeof *lengths * total);
    memset(f, 0, sizeof *f);
    f->anon_huge_kib = -1;
    f->sparse_rss_kib = -1;
    int n = 0;
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < counts[r]; i++, n++) {
            lengths[n] = sizes[r];
            objects[n] = malloc(sizes[r]);
            if (!objects[n]) {
                f->nulls++;
                continue;
            }
            fill_or_check(objects[n], sizes[r], (unsigned char)(n * 7 + 1), 0);
            f->peak_bytes += (long)sizes[r];
            if (spec->nodes == 1 && na_node_of(objects[n]) != 0)
                f->off_node0++;
        }
    f->objects = n;
    for (int k = 0; k < n; k++)
        if (objects[k])
            f->wrong_bytes += fill_or_check(objects[k], lengths[k], (unsigned char)(k * 7 + 1), 1);
    /* A quarter of the medium objects grow to 48 KiB: the old bytes must come along. */
    int first_medium = counts[0];
    for (int k = first_medium; k < first_medium + counts[1]; k += 4) {
        if (!objects[k])
            continue;
        unsigned char *grown = realloc(objects[k], 48 << 10);
        if (!grown) {
            f->nulls++;
            continue;
        }
        f->wrong_bytes += fill_or_check(grown, lengths[k], (unsigned char)(k * 7 + 1), 1);
        objects[k] = grown;
        lengths[k] = 48 << 10;
        fill_or_check(grown, lengths[k], (unsigned char)(k * 7 + 1), 0);
    }
    /* Free the odd ones, calloc as many in their place: recycled memory must read zero. */
    for (int k = 1; k < n; k += 2) {
        free(objects[k]);
        objects[k] = calloc(1, lengths[k]);
        if (!objects[k]) {
            f->nulls++;
            continue;
        }
        f->wrong_bytes += fill_or_check(objects[k], lengths[k], 0, 1);
        fill_or_check(objects[k], lengths[k], (unsigned char)(k * 7 + 1), 0);
        if (spec->nodes == 1 && na_node_of(objects[k]) != 0)
            f->off_node0++;
    }
    for (int k = 0; k < n; k++)
        if (objects[k]) {
            f->wrong_bytes += fill_or_check(objects[k], lengths[k], (unsigned char)(k * 7 + 1), 1);
            free(objects[k]);
        }
    xunmap(objects, sizeof *objects * total);
    xunmap(lengths, sizeof *lengths * total);
    if (spec->thp[0])
        thp_probe(f);
}

void child_hostile(const char *text) {
    struct hostile_spec spec;
    parse_hostile_spec(text, &spec);
    char report[1024] = "";
    size_t used = 0;
    int met = 1;
    first_malloc();
    if (spec.mbind_errno >= 0) {
        void *page = xmap(PAGE);
        unsigned long mask = 1; /* node 0 */
        errno = 0;
        long result = syscall(SYS_mbind, page, PAGE, MPOL_BIND_MODE, &mask, 65UL, 0UL);
        int direct = result == 0 ? 0 : errno;
        met = met && direct == spec.mbind_errno;
        append(report, sizeof report, &used, " direct_mbind_errno=%d/%d", direct,
               spec.mbind_errno);
        xunmap(page, PAGE);
    }
    if (spec.thp[0]) {
        char mode[16];
        thp_mode(mode, sizeof mode);
        met = met && !strcmp(mode, spec.thp);
        append(report, sizeof report, &used, " thp=%s/%s", mode, spec.thp);
    }
    struct hostile_figures f;
    double began = now_seconds();
    hostile_workload(&spec, &f);
    met = met && f.nulls == 0 && f.wrong_bytes == 0;
    append(report, sizeof report, &used,
           " objects=%ld peak_live=%.1fMiB nulls=%ld wrong_bytes=%ld workload_s=%.2f", f.objects,
           f.peak_bytes / 1048576.0, f.nulls, f.wrong_bytes, now_seconds() - began);
    if (spec.thp[0]) {
        int huge_ok = !strcmp(spec.thp, "never") ? f.anon_huge_kib == 0 : f.anon_huge_kib > 0;
        int sparse_ok = f.sparse_rss_kib >= 0 && f.sparse_rss_kib <= 4096;
        met = met && huge_ok && sparse_ok;
        append(report, sizeof report, &used, " anon_huge_dense=%ldKiB sparse_64MiB_rss=%ldKiB",
               f.anon_huge_kib, f.sparse_rss_kib);
    }
    if (spec.nodes >= 0) {
        int reported = nodalloc_reported_nodes();
        met = met && reported == spec.nodes;
        append(report, sizeof report, &used, " nodes_reported=%d/%d", reported, spec.nodes);
        if (spec.nodes == 1) {
            errno = 0;
            void *elsewhere = na_malloc_on_node(64, 1);
            int refused = elsewhere == NULL && errno == EINVAL;
            met = met && f.off_node0 == 0 && refused;
            append(report, sizeof report, &used, " objects_off_node0=%ld node1_refused_einval=%d",
                   f.off_node0, refused);
        }
    }
    if (spec.huge_bytes) {
        errno = 0;
        void *huge = malloc(spec.huge_bytes);
        int malloc_errno = errno;
        int malloc_ok = huge == NULL && malloc_errno == ENOMEM;
        free(huge);
        char *small = malloc(64);
        if (!small)
            die("malloc");
        memset(small, 0x5a, 64);
        errno = 0;
        void *grown = realloc(small, spec.huge_bytes);
        int realloc_errno = errno;
        int realloc_ok = grown == NULL && realloc_errno == ENOMEM &&
                         fill_or_check((unsigned char *)small, 64, 0x5a, 1) == 0;
        free(grown ? grown : small);
        char *after = malloc(4 << 20);
        if (after)
            memset(after, 1, 4 << 20);
        free(after);
        met = met && malloc_ok && realloc_ok && after != NULL;
        append(report, sizeof report, &used,
               " huge=%luMiB malloc_null_enomem=%d(errno=%d) realloc_null_enomem=%d(errno=%d) "
               "4MiB_after=%d",
               spec.huge_bytes >> 20, malloc_ok, malloc_errno, realloc_ok, realloc_errno,
               after != NULL);
    }
    out("CASE met=%d spec=%s%s\n", met, text, report);
}
