/* The entry points of numatest's test groups, one block per file, for the table in tests.c.
 * A test receives its own name (the RESULT line's first word); a child receives the argument
 * its parent passed to run_child. The harness has already skipped the peers where the table
 * says so and checked the nodes the test needs.
 */
#ifndef NUMATEST_TESTS_H
#define NUMATEST_TESTS_H

/* topology.c */
void test_topology(const char *test);

/* placement.c */
void test_placement_plain(const char *test);
void test_placement_agreeing(const char *test);

/* prepared.c */
void test_prepared_on_node(const char *test);

/* origin.c */
void test_origin_reuse(const char *test);
void test_hoard_stress(const char *test);

/* binding.c */
void test_binding(const char *test);
void test_binding_policies(const char *test);
void child_binding_policies(const char *argument);

/* allowed_nodes.c */
void test_mempolicy(const char *test);
void child_mempolicy(const char *list);
void test_cpuless_explicit(const char *test);

/* spill.c */
void test_small_node_spill(const char *test);
void child_small_node_spill(const char *argument);
void test_node_fills_up(const char *test);

/* rehome.c */
void test_repin_reuse(const char *test);
void test_taskset_migration(const char *test);
void test_two_node_mask(const char *test);

/* policy.c */
void test_policy_bind(const char *test);
void child_policy_bind(const char *argument);

/* profile.c */
void test_profile_node_labels(const char *test);
void child_profile_node_labels(const char *argument);

/* hostile.c */
void test_overcommit_never(const char *test);
void test_thp_modes(const char *test);
void test_no_sysfs(const char *test);
void test_mbind_fails(const char *test);
void test_ulimit_v(const char *test);

/* hostile_child.c */
void child_hostile(const char *text);

/* tiers.c */
void test_memory_tiers(const char *test);
void test_cold_on_far_node(const char *test);
void test_auto_tiering(const char *test);
void test_auto_tiering_refused(const char *test);
/* In a child: a seccomp filter that fails mbind(2) with the errno at `argument` (hostile.c). */
int hook_seccomp_mbind(const void *argument);
void child_auto_tiering(const char *argument);
void test_heaps_on_node(const char *test);
void test_near_limit(const char *test);
void child_near_limit(const char *argument);
void test_interleave_large(const char *test);
void child_interleave_large(const char *argument);
void test_far_node_full(const char *test);
void test_tiering_workload(const char *test);

#endif
