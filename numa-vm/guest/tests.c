/* The one list of numatest's tests, in the order /init runs them (`numatest list`), with what
 * the harness needs to know about each: who besides nodalloc takes part, which nodes the
 * machine must have, and the environment /init starts it with. A child mode belongs to the
 * entry of the test that starts it; the hostile-environment tests share one, under its own
 * entry.
 */
#include "harness.h"
#include "tests.h"

const struct test tests[] = {
    /* A small region makes nodalloc spill, which shows the distance order it uses; the CPU
     * check reads the masks interleave binding gives. */
    {.name = "topology",
     .run = test_topology,
     .peers = PEERS_SKIPPED,
     .environment = "NODALLOC_REGION_SIZE=64M NODALLOC_BIND=interleave"},
    {.name = "placement", .run = test_placement_plain, .peers = PEERS_MEASURED},
    {.name = "placement_agreeing", .run = test_placement_agreeing, .peers = PEERS_UNPLANNED},
    /* Call-site partitions keep placement: every partition's bags come from its node's region. */
    {.name = "placement_partitioned",
     .run = test_placement_agreeing,
     .peers = PEERS_SKIPPED,
     .environment = "NODALLOC_CALLSITE=64"},
    /* Chunks the maintenance thread populates ahead of a growing heap are on its node. */
    {.name = "prepared_on_node",
     .run = test_prepared_on_node,
     .peers = PEERS_SKIPPED,
     .environment = "NODALLOC_BACKGROUND=1"},
    {.name = "origin_reuse",
     .run = test_origin_reuse,
     .peers = PEERS_MEASURED,
     .needs = NEEDS_TWO_CPU_NODES},
    {.name = "binding.spread",
     .run = test_binding,
     .peers = PEERS_SKIPPED,
     .environment = "NODALLOC_BIND=interleave"},
    {.name = "binding.one_cpu",
     .run = test_binding,
     .peers = PEERS_SKIPPED,
     .environment = "NODALLOC_BIND=interleave"},
    {.name = "binding.one_node",
     .run = test_binding,
     .peers = PEERS_SKIPPED,
     .environment = "NODALLOC_BIND=interleave"},
    {.name = "binding.attr",
     .run = test_binding,
     .peers = PEERS_SKIPPED,
     .environment = "NODALLOC_BIND=interleave"},
    /* binding.policies, mempolicy and small_node_spill set their options in the children they
     * start (options are read at start-up). */
    {.name = "binding.policies",
     .run = test_binding_policies,
     .child = child_binding_policies,
     .peers = PEERS_SKIPPED,
     .needs = NEEDS_TWO_CPU_NODES,
     .environment = "NODALLOC_BIND=interleave"},
    {.name = "mempolicy", .run = test_mempolicy, .child = child_mempolicy, .peers = PEERS_SKIPPED},
    {.name = "small_node_spill",
     .run = test_small_node_spill,
     .child = child_small_node_spill,
     .peers = PEERS_SKIPPED},
    {.name = "cpuless_explicit",
     .run = test_cpuless_explicit,
     .peers = PEERS_SKIPPED,
     .needs = NEEDS_CPULESS_NODE},
    {.name = "node_fills_up",
     .run = test_node_fills_up,
     .peers = PEERS_SKIPPED,
     .needs = NEEDS_CPULESS_NODE},
    /* /init passes mimalloc's figure (NUMATEST_REFERENCE) to nodalloc's run. */
    {.name = "hoard_stress",
     .run = test_hoard_stress,
     .peers = PEERS_MEASURED,
     .needs = NEEDS_TWO_CPU_NODES},
    /* A thread that changes node after its heap exists: re-pinned by itself (three sizes),
     * moved from outside; and a mask over two nodes set before the first malloc. */
    {.name = "repin_reuse",
     .run = test_repin_reuse,
     .peers = PEERS_MEASURED,
     .needs = NEEDS_TWO_CPU_NODES},
    {.name = "repin_reuse.4k",
     .run = test_repin_reuse,
     .peers = PEERS_MEASURED,
     .needs = NEEDS_TWO_CPU_NODES},
    {.name = "repin_reuse.100k",
     .run = test_repin_reuse,
     .peers = PEERS_MEASURED,
     .needs = NEEDS_TWO_CPU_NODES},
    {.name = "repin_reuse.own",
     .run = test_repin_reuse,
     .peers = PEERS_MEASURED,
     .needs = NEEDS_TWO_CPU_NODES},
    {.name = "taskset_migration",
     .run = test_taskset_migration,
     .peers = PEERS_MEASURED,
     .needs = NEEDS_TWO_CPU_NODES},
    {.name = "two_node_mask",
     .run = test_two_node_mask,
     .peers = PEERS_MEASURED,
     .needs = NEEDS_TWO_CPU_NODES},
    /* NODALLOC_POLICY=bind, set in the children: a node's region exhausted. */
    {.name = "policy_bind",
     .run = test_policy_bind,
     .child = child_policy_bind,
     .peers = PEERS_SKIPPED,
     .needs = NEEDS_TWO_CPU_NODES},
    /* Hostile environments, last: they change system settings (/init restores them). */
    {.name = "overcommit_never", .run = test_overcommit_never, .peers = PEERS_SKIPPED},
    {.name = "thp_modes", .run = test_thp_modes, .peers = PEERS_SKIPPED},
    {.name = "no_sysfs", .run = test_no_sysfs, .peers = PEERS_SKIPPED},
    {.name = "mbind_fails", .run = test_mbind_fails, .peers = PEERS_SKIPPED},
    {.name = "ulimit_v", .run = test_ulimit_v, .peers = PEERS_SKIPPED},
    /* The kernel's memory tiers and weighted interleave: run once (a peer would only repeat
     * the kernel's answer), judged where numa-vm/run chose a kernel that has them. */
    {.name = "cold_on_far_node",
     .run = test_cold_on_far_node,
     .peers = PEERS_SKIPPED,
     .needs = NEEDS_CPULESS_NODE},
    {.name = "far_node_full",
     .run = test_far_node_full,
     .peers = PEERS_SKIPPED,
     .needs = NEEDS_CPULESS_NODE},
    {.name = "tiering_workload",
     .run = test_tiering_workload,
     .peers = PEERS_MEASURED,
     .needs = NEEDS_CPULESS_NODE},
    {.name = "interleave_large",
     .run = test_interleave_large,
     .child = child_interleave_large,
     .peers = PEERS_SKIPPED,
     .needs = NEEDS_TIERED_KERNEL | NEEDS_CPULESS_NODE},
    {.name = "memory_tiers",
     .run = test_memory_tiers,
     .peers = PEERS_SKIPPED,
     .needs = NEEDS_TIERED_KERNEL},
    /* NODALLOC_POLICY=bind, a node's physical memory exhausted: after the others, since it
     * may end in the kernel's OOM killer. */
    {.name = "policy_bind.node_full", .run = test_policy_bind, .peers = PEERS_SKIPPED},
    /* The child of the five above, which may run without /sys. */
    {.name = "hostile", .child = child_hostile, .child_without_sys = 1},
};

const int test_count = (int)(sizeof tests / sizeof tests[0]);
