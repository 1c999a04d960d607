/* overcommit_never, thp_modes, no_sysfs, mbind_fails, ulimit_v (nodalloc only): nodalloc in an
 * environment a program may meet in production starts, serves a content-checked workload,
 * fails cleanly (NULL + ENOMEM) where memory really is not there, and says little:
 * vm.overcommit_memory=2 (overcommit_never), each transparent-huge-page mode (thp_modes), no
 * /sys or no /proc (no_sysfs), an mbind that always fails (mbind_fails), and RLIMIT_AS
 * (ulimit_v). The parent (root in the guest) changes the system setting or prepares a hook for
 * run_child; the child (hostile_child.c) runs the workload its SPEC describes and judges
 * itself. The parent counts the lines of the child's stderr that begin with "nodalloc: "
 * (warnings and fatal errors; the statistics begin "nodalloc <version>:").
 */
#include "harness.h"
#include "tests.h"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>

/* Counts the lines of `output` that begin with "nodalloc: " (nodalloc's warnings and fatal
 * errors) and, of those, the ones that contain `word` (when not NULL). */
static int nodalloc_messages(const char *output, const char *word, int *with_word) {
    int count = 0;
    if (with_word)
        *with_word = 0;
    for (const char *line = output; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t length = end ? (size_t)(end - line) : strlen(line);
        if (length >= 10 && !strncmp(line, "nodalloc: ", 10)) {
            count++;
            if (word && with_word && memmem(line, length, word, strlen(word)))
                ++*with_word;
        }
        line = end ? end + 1 : NULL;
    }
    return count;
}

/* Runs one child case; appends " NAME:[<the child's CASE figures> messages=N said=... exit=S]"
 * to the report and returns whether the case is met: the child's own verdict, exit status 0, at
 * most `max_messages` "nodalloc: " lines (with `exact_word`: exactly one, and it contains the
 * word), and `required` (when not NULL) somewhere in the child's output. */
static int hostile_case(const char *name, const char *spec, const char *const *assignments,
                        int max_messages, const char *exact_word, const char *required,
                        char *report, size_t size, size_t *used) {
    static char output[1 << 16];
    int status = run_child("hostile.child", spec, assignments, NULL, output, sizeof output);
    child_hook = NULL;
    child_hook_argument = NULL;
    int with_word = 0;
    int messages = nodalloc_messages(output, exact_word, &with_word);
    int messages_ok = exact_word ? messages == 1 && with_word == 1 : messages <= max_messages;
    char *line = strstr(output, "CASE met=");
    int exited = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    int signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    int has_required = !required || strstr(output, required) != NULL;
    int met = line && line[9] == '1' && exited == 0 && messages_ok && has_required;
    /* The messages, one line each, so a failure shows what nodalloc said. */
    char said[512] = "";
    size_t said_used = 0;
    for (const char *at = strstr(output, "nodalloc: "); at; at = strstr(at + 1, "nodalloc: ")) {
        if (at != output && at[-1] != '\n')
            continue;
        const char *end = strchr(at, '\n');
        append(said, sizeof said, &said_used, "%s%.*s", said_used ? "|" : "",
               (int)(end ? end - at : (long)strlen(at)), at);
    }
    for (char *ch = said; *ch; ch++)
        if (*ch == ' ')
            *ch = '_';
    if (line) {
        char *end = strchr(line, '\n');
        if (end)
            *end = 0;
        append(report, size, used, " %s:[%s messages=%d%s%s%s%s exit=%d signal=%d]", name,
               line + 5, messages, said_used ? " said=" : "", said,
               required ? (has_required ? " found=" : " missing=") : "", required ? required : "",
               exited, signal);
    } else {
        for (char *ch = output; *ch; ch++)
            if (*ch == '\n' || *ch == ' ')
                *ch = '|';
        append(report, size, used, " %s:[error=no-case exit=%d signal=%d output=%.300s]", name,
               exited, signal, output);
    }
    return met;
}

/* Writes a one-line system setting and reads it back; 0 when it took. */
static int set_setting(const char *path, const char *value) {
    char back[256];
    if (write_file(path, value) != 0 || read_text(path, back, sizeof back) < 0)
        return -1;
    return 0;
}

/* ---- overcommit_never */

static long meminfo_kib(const char *key) {
    char text[8192];
    if (read_text("/proc/meminfo", text, sizeof text) < 0)
        return -1;
    char *p = strstr(text, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

void test_overcommit_never(const char *test) {
    const char *path = "/proc/sys/vm/overcommit_memory";
    char saved[32] = "";
    if (read_text(path, saved, sizeof saved) < 0)
        die("read-overcommit_memory");
    saved[strcspn(saved, "\n")] = 0;
    char now[32] = "";
    if (set_setting(path, "2") != 0 || read_text(path, now, sizeof now) < 0 || now[0] != '2')
        die("write-overcommit_memory");
    long limit = meminfo_kib("CommitLimit:"), committed = meminfo_kib("Committed_AS:");
    char report[4096] = "";
    size_t used = 0;
    int met = hostile_case("mode2", "load=full,huge=ram2", NULL, 0, NULL, NULL, report,
                           sizeof report, &used);
    int restored = set_setting(path, saved) == 0 && read_text(path, now, sizeof now) >= 0 &&
                   !strncmp(now, saved, strlen(saved));
    out("RESULT %s %s %s commit_limit=%ldMiB committed_before=%ldMiB restored=%s:%d%s\n", test,
        allocator, verdict(met && restored), limit / 1024, committed / 1024, saved, restored,
        report);
}

/* ---- thp_modes */

void test_thp_modes(const char *test) {
    const char *path = "/sys/kernel/mm/transparent_hugepage/enabled";
    char saved[16];
    thp_mode(saved, sizeof saved);
    if (!saved[0]) {
        out("RESULT %s %s info skipped=no-thp reason=%s-unreadable-errno-%d\n", test, allocator,
            path, errno);
        return;
    }
    static const char *const modes[] = {"always", "madvise", "never"};
    char report[4096] = "";
    size_t used = 0;
    int met = 1;
    for (int m = 0; m < 3; m++) {
        char mode[16] = "", spec[64];
        if (set_setting(path, modes[m]) == 0)
            thp_mode(mode, sizeof mode);
        if (strcmp(mode, modes[m])) {
            append(report, sizeof report, &used, " %s:[error=cannot-set read=%s]", modes[m],
                   mode);
            met = 0;
            continue;
        }
        snprintf(spec, sizeof spec, "load=light,thp=%s", modes[m]);
        met = hostile_case(modes[m], spec, NULL, 0, NULL, NULL, report, sizeof report, &used) &&
              met;
    }
    char now[16];
    set_setting(path, saved);
    thp_mode(now, sizeof now);
    int restored = !strcmp(now, saved);
    out("RESULT %s %s %s restored=%s:%d%s\n", test, allocator, verdict(met && restored), saved,
        restored, report);
}

/* ---- no_sysfs */

/* In the child: a private mount namespace without the listed mounts ("/sys", "/proc", both). */
static int hook_unmount(const void *argument) {
    const char *const *targets = argument;
    if (unshare(CLONE_NEWNS) != 0) {
        out("CHILD unshare failed errno=%d\n", errno);
        return -1;
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        out("CHILD mount-private failed errno=%d\n", errno);
        return -1;
    }
    for (int i = 0; targets[i]; i++) {
        if (umount2(targets[i], MNT_DETACH) != 0) {
            out("CHILD umount %s failed errno=%d\n", targets[i], errno);
            return -1;
        }
    }
    /* Gone for this child only: the probe files must be unreadable now. */
    char probe[64];
    for (int i = 0; targets[i]; i++) {
        const char *file = !strcmp(targets[i], "/sys") ? "/sys/devices/system/node/online"
                                                        : "/proc/self/status";
        if (read_text(file, probe, sizeof probe) >= 0) {
            out("CHILD %s still readable\n", file);
            return -1;
        }
    }
    return 0;
}

void test_no_sysfs(const char *test) {
    static const char *const no_sys[] = {"/sys", NULL};
    static const char *const no_proc[] = {"/proc", NULL};
    static const char *const neither[] = {"/sys", "/proc", NULL};
    static const char *const stats[] = {"NODALLOC_STATS=1", NULL};
    char report[8192] = "", spec[64], nodes_line[32];
    size_t used = 0;
    int met = 1;
    /* Each child also prints its statistics at exit (NODALLOC_STATS=1): "...: N node(s)". */
    child_hook = hook_unmount;
    child_hook_argument = no_sys;
    met = hostile_case("no_sys", "load=light,nodes=1", stats, 2, NULL, ": 1 node(s)", report,
                       sizeof report, &used) && met;
    /* Without /proc (Mems_allowed, meminfo, overcommit mode) /sys still gives the nodes. */
    snprintf(spec, sizeof spec, "load=light,nodes=%d", usable_count);
    snprintf(nodes_line, sizeof nodes_line, ": %d node(s)", usable_count);
    child_hook = hook_unmount;
    child_hook_argument = no_proc;
    met = hostile_case("no_proc", spec, stats, 2, NULL, nodes_line, report, sizeof report,
                       &used) && met;
    child_hook = hook_unmount;
    child_hook_argument = neither;
    met = hostile_case("neither", "load=light,nodes=1", stats, 2, NULL, ": 1 node(s)", report,
                       sizeof report, &used) && met;
    /* The namespace was the children's: this process still has /sys and /proc. */
    char probe[64];
    int parent_keeps = read_text("/sys/devices/system/node/online", probe, sizeof probe) > 0 &&
                       read_text("/proc/self/status", probe, sizeof probe) > 0;
    out("RESULT %s %s %s parent_keeps_sys_and_proc=%d%s\n", test, allocator,
        verdict(met && parent_keeps), parent_keeps, report);
}

/* ---- mbind_fails */

/* In the child: a seccomp filter that fails mbind(2) with the errno at `argument`. */
int hook_seccomp_mbind(const void *argument) {
    unsigned int error = *(const int *)argument;
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mbind, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (error & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {.len = sizeof filter / sizeof filter[0], .filter = filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        out("CHILD no_new_privs failed errno=%d\n", errno);
        return -1;
    }
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
        out("CHILD seccomp failed errno=%d\n", errno);
        return -1;
    }
    return 0;
}

void test_mbind_fails(const char *test) {
    if (usable_count < 2) {
        out("RESULT %s %s info skipped=one-node(nodalloc-issues-no-mbind)\n", test, allocator);
        return;
    }
    static const int errors[] = {EPERM, EINVAL};
    static const char *const names[] = {"eperm", "einval"};
    char report[4096] = "", spec[64];
    size_t used = 0;
    int met = 1;
    for (int c = 0; c < 2; c++) {
        snprintf(spec, sizeof spec, "load=light,nodes=%d,mbind_errno=%d", usable_count,
                 errors[c]);
        child_hook = hook_seccomp_mbind;
        child_hook_argument = &errors[c];
        met = hostile_case(names[c], spec, NULL, 1, "mbind", NULL, report, sizeof report,
                           &used) && met;
    }
    out("RESULT %s %s %s regions=%d%s\n", test, allocator, verdict(met), usable_count, report);
}

/* ---- ulimit_v */

static int hook_rlimit_as(const void *argument) {
    unsigned long bytes = *(const unsigned long *)argument;
    struct rlimit limit = {.rlim_cur = bytes, .rlim_max = bytes};
    if (setrlimit(RLIMIT_AS, &limit) != 0) {
        out("CHILD setrlimit failed errno=%d\n", errno);
        return -1;
    }
    return 0;
}

void test_ulimit_v(const char *test) {
    static const unsigned long limit = 256UL << 20;
    char report[4096] = "";
    size_t used = 0;
    child_hook = hook_rlimit_as;
    child_hook_argument = &limit;
    /* 48.5 MiB live at the peak (nodalloc's heap under a 256 MiB limit is one 64 MiB region
     * per node, or one region in all where the limit has no room for one per node: then one
     * warning says so); a 512 MiB request is past the limit itself. */
    int met = hostile_case("as256M", "load=medium,huge=512", NULL, 1, NULL, NULL, report,
                           sizeof report, &used);
    out("RESULT %s %s %s rlimit_as=%luMiB nodes=%d%s\n", test, allocator, verdict(met),
        limit >> 20, usable_count, report);
}
