/* Peak-RSS probe for the showdown's C-level suites.
 *
 * Preloaded after the allocator under test; at exit its destructor appends
 * "hwm_kib=N" (VmHWM of this process, the peak of its own address space) to
 * the file named by NODALLOC_BENCH_HWM_FILE. It never calls malloc: the
 * allocator under test must see only the program's own calls. Processes the
 * program starts (shells, compilers) append their own line; the harness takes
 * the largest.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void put_line(int fd, unsigned long kib)
{
    char buf[64] = "hwm_kib=";
    char digits[24];
    int n = 0, len = 8;
    do {
        digits[n++] = (char)('0' + kib % 10);
        kib /= 10;
    } while (kib && n < (int)sizeof digits);
    while (n)
        buf[len++] = digits[--n];
    buf[len++] = '\n';
    /* One write with O_APPEND: lines of concurrent processes do not mix. */
    (void)!write(fd, buf, (size_t)len);
}

__attribute__((destructor)) static void report_hwm(void)
{
    const char *path = getenv("NODALLOC_BENCH_HWM_FILE");
    if (!path || !*path)
        return;
    int st = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (st < 0)
        return;
    static char text[8192];
    ssize_t got = 0, r;
    while (got < (ssize_t)sizeof text - 1 &&
           (r = read(st, text + got, sizeof text - 1 - (size_t)got)) > 0)
        got += r;
    close(st);
    text[got > 0 ? got : 0] = '\0';
    const char *p = strstr(text, "VmHWM:");
    if (!p)
        return;
    p += 6;
    while (*p == ' ' || *p == '\t')
        p++;
    unsigned long kib = 0;
    while (*p >= '0' && *p <= '9')
        kib = kib * 10 + (unsigned long)(*p++ - '0');
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    put_line(fd, kib);
    close(fd);
}
