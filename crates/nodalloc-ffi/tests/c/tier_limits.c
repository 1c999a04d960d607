/* Limits per memory tier (NODALLOC_NEAR_LIMIT, NODALLOC_FAR_LIMIT, NODALLOC_TIER_FULL,
 * nodalloc_set_tier_limit), on three simulated nodes of which node 2 is far memory
 * (NODALLOC_TIERS=far:2) and a near limit of 16 MiB, the thread on node 0, frees decommitted
 * at once (NODALLOC_DECOMMIT_DELAY=0, NODALLOC_RETAIN=0: a limit counts committed bytes, and
 * memory freed but still committed is reused without a charge).
 *
 * Usage: tier_limits spill|fail (as NODALLOC_TIER_FULL is set).
 * spill: 48 MiB of blocks all succeed; the live near bytes never pass the near limit and the
 * rest is on the far node. fail: malloc returns NULL with ENOMEM once the near tier is full,
 * never a far block, and succeeds again after frees; cold requests are still served far.
 * Then a far limit set at run time: a cold request past it comes near (spill) or fails (fail).
 * Every block is filled and checked before it is freed.
 */
#include "check.h"

#define MIB ((size_t)1 << 20)
#define NEAR_LIMIT (16 * MIB)
#define FAR_NODE 2
#define MAX_BLOCKS 4096

static void *blocks[MAX_BLOCKS];
static size_t lengths[MAX_BLOCKS];

static int node_of(void *p) { return NODALLOC(nodalloc_node_of)(p); }

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: tier_limits spill|fail");
    require_nodalloc();
    int fail = strcmp(argv[1], "fail") == 0;
    static const size_t sizes[] = {64 << 10, 100, 1 << 20, 3000};
    size_t near_bytes = 0, far_bytes = 0, count = 0, failed_at = 0;
    for (size_t asked = 0; asked < 48 * MIB && count < MAX_BLOCKS; count++) {
        size_t size = sizes[count % 4];
        errno = 0;
        void *p = malloc(opaque_size(size));
        if (p == NULL) {
            CHECK(fail, "malloc(%zu) failed after %zu MiB under spill (errno %d)", size,
                  asked / MIB, errno);
            CHECK(errno == ENOMEM, "malloc(%zu) failed with errno %d, not ENOMEM", size, errno);
            failed_at = near_bytes;
            break;
        }
        fill(p, size, count);
        blocks[count] = p;
        lengths[count] = size;
        asked += size;
        int node = node_of(p);
        CHECK(node >= 0 && node <= FAR_NODE, "block %p on node %d", p, node);
        if (node == FAR_NODE) {
            far_bytes += size;
        } else {
            near_bytes += size;
        }
        CHECK(near_bytes <= NEAR_LIMIT, "%zu live bytes near, past the near limit", near_bytes);
    }
    if (fail) {
        CHECK(failed_at != 0, "no malloc failed under fail (%zu MiB near)", near_bytes / MIB);
        CHECK(far_bytes == 0, "%zu bytes of plain mallocs landed far under fail", far_bytes);
        CHECK(failed_at >= NEAR_LIMIT / 2, "malloc failed early, at %zu bytes near", failed_at);
        /* Cold requests still have the far tier. */
        void *cold = NODALLOC(nodalloc_malloc_cold)(opaque_size(MIB));
        CHECK(cold != NULL && node_of(cold) == FAR_NODE, "a cold MiB under fail: %p on node %d",
              cold, cold ? node_of(cold) : -1);
        free(cold);
    } else {
        CHECK(far_bytes >= 24 * MIB, "only %zu bytes spilled far", far_bytes);
        CHECK(near_bytes >= NEAR_LIMIT / 2, "only %zu bytes near before spilling", near_bytes);
    }
    /* malloc_info's tier elements: the near tier's committed bytes within its limit, far
     * memory in use under spill. */
    char *text = NULL;
    size_t text_length = 0;
    FILE *stream = open_memstream(&text, &text_length);
    CHECK(stream != NULL && malloc_info(0, stream) == 0, "malloc_info failed");
    fclose(stream);
    size_t near_committed = 0, near_limit = 0, far_committed = 0;
    const char *near_tier = strstr(text, "<tier name=\"near\" ");
    const char *far_tier = strstr(text, "<tier name=\"far\" ");
    CHECK(near_tier != NULL && far_tier != NULL, "malloc_info without tiers: %s", text);
    CHECK(sscanf(near_tier, "<tier name=\"near\" allocated=\"%*u\" committed=\"%zu\" "
                            "limit=\"%zu\"",
                 &near_committed, &near_limit) == 2,
          "malloc_info's near tier: %.120s", near_tier);
    CHECK(sscanf(far_tier, "<tier name=\"far\" allocated=\"%*u\" committed=\"%zu\"",
                 &far_committed) == 1,
          "malloc_info's far tier: %.120s", far_tier);
    CHECK(near_limit == NEAR_LIMIT, "malloc_info's near limit %zu", near_limit);
    CHECK(near_committed <= NEAR_LIMIT && near_committed >= near_bytes,
          "malloc_info: %zu bytes committed near with %zu live", near_committed, near_bytes);
    CHECK(fail || far_committed >= far_bytes, "malloc_info: %zu bytes committed far, %zu live",
          far_committed, far_bytes);
    free(text);

    /* Frees make room in the near tier again. */
    for (size_t i = 0; i < count; i++) {
        if (blocks[i] != NULL) {
            CHECK_PATTERN(blocks[i], lengths[i], i);
            free(blocks[i]);
            blocks[i] = NULL;
        }
    }
    void *again = malloc(opaque_size(MIB));
    CHECK(again != NULL && node_of(again) != FAR_NODE, "after the frees, a MiB near: %p", again);
    free(again);

    /* A far limit set at run time, already reached. */
    CHECK(NODALLOC(nodalloc_set_tier_limit)(NODALLOC_TIER_FAR, 1) == 0, "far limit refused");
    errno = 0;
    void *cold = NODALLOC(nodalloc_malloc_cold)(opaque_size(MIB));
    if (fail) {
        CHECK(cold == NULL && errno == ENOMEM, "a cold MiB past the far limit under fail: %p",
              cold);
    } else {
        CHECK(cold != NULL && node_of(cold) != FAR_NODE,
              "a cold MiB past the far limit under spill: %p on node %d", cold,
              cold ? node_of(cold) : -1);
        memset(cold, 1, MIB);
        free(cold);
    }
    CHECK(NODALLOC(nodalloc_set_tier_limit)(NODALLOC_TIER_FAR, 0) == 0, "far limit not removed");
    cold = NODALLOC(nodalloc_malloc_cold)(opaque_size(MIB));
    CHECK(cold != NULL && node_of(cold) == FAR_NODE, "no far limit: a cold MiB on node %d",
          cold ? node_of(cold) : -1);
    free(cold);
    errno = 0;
    CHECK(NODALLOC(nodalloc_set_tier_limit)(opaque_int(2), 0) == -1 && errno == EINVAL,
          "an unknown tier was accepted");
    return finish("tier_limits");
}
