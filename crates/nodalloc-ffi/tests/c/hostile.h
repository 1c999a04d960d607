/* Helpers shared by the hostile-condition C programs (exit, limit, rlimit, threads100k, soak):
 * nodalloc's statistics read back from a memfd, and the process's resident set size.
 * Include after check.h.
 */
#ifndef NODALLOC_TEST_HOSTILE_H
#define NODALLOC_TEST_HOSTILE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* nodalloc's report (nodalloc_stats_print, which does not allocate) as text in `text`. */
__attribute__((unused)) static void stats_text(char *text, size_t capacity) {
    text[0] = '\0';
    int fd = memfd_create("nodalloc-stats", MFD_CLOEXEC);
    if (fd < 0) {
        return;
    }
    NODALLOC(nodalloc_stats_print)(fd);
    ssize_t length = pread(fd, text, capacity - 1, 0);
    close(fd);
    text[length > 0 ? length : 0] = '\0';
}

/* "12.5 MiB" → bytes; *end past the unit. */
__attribute__((unused)) static double parse_size(const char *text, const char **end) {
    char *after = NULL;
    double value = strtod(text, &after);
    while (*after == ' ') {
        after++;
    }
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double scale = 1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++, scale *= 1024) {
        size_t n = strlen(units[i]);
        if (strncmp(after, units[i], n) == 0 && (after[n] < 'A' || after[n] > 'z')) {
            after += n;
            value *= scale;
            break;
        }
    }
    if (end != NULL) {
        *end = after;
    }
    return value;
}

/* The live thread heaps nodalloc counts ("…, N thread(s)"); -1 if the report has none. */
__attribute__((unused)) static long stats_live_threads(void) {
    char text[4096];
    stats_text(text, sizeof text);
    const char *at = strstr(text, "node(s), ");
    if (at == NULL) {
        return -1;
    }
    return strtol(at + strlen("node(s), "), NULL, 10);
}

/* The peak committed bytes and the limit, as the report prints them (rounded to 0.1 of a unit:
 * the exact comparison is the crate's test; this one catches anything larger). 0 if absent. */
__attribute__((unused)) static void stats_peak_and_limit(double *peak, double *limit) {
    char text[4096];
    stats_text(text, sizeof text);
    const char *at = strstr(text, "peak committed ");
    *peak = at != NULL ? parse_size(at + strlen("peak committed "), NULL) : 0;
    at = strstr(text, "(limit ");
    *limit = at != NULL ? parse_size(at + strlen("(limit "), NULL) : 0;
}

/* Resident set size of this process, from /proc/self/statm. */
__attribute__((unused)) static size_t rss_bytes(void) {
    FILE *statm = fopen("/proc/self/statm", "r");
    if (statm == NULL) {
        return 0;
    }
    unsigned long size = 0, resident = 0;
    if (fscanf(statm, "%lu %lu", &size, &resident) != 2) {
        resident = 0;
    }
    fclose(statm);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

#endif
