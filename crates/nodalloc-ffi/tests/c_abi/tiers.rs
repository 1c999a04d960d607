//! Memory tiers from C and C++ (`tests/c/tiers.cpp`): cold requests on the far node, hot and
//! plain ones near, on simulated nodes with `NODALLOC_TIERS` naming the far one (where pages
//! land is the NUMA guest's to prove; here the placement logic and the entry points), and near
//! on this machine, which has no far memory.

use super::*;

/// `tiers` for `mode`, started on CPU 0 alone (so the main thread's node is node 0 on every
/// simulated topology), expecting far blocks on `far` (-1: near).
fn tiers(mode: Mode, far: i32, env: &[(&str, &str)]) {
    let mut program = command("tiers", mode);
    program.arg(far.to_string()).envs(env.iter().copied());
    on_cpu_zero(&mut program);
    run_passing("tiers", mode, &mut program);
}

#[test]
fn cold_requests_land_on_the_far_node_and_hot_ones_near() {
    for mode in MODES {
        for secure in ["0", "1"] {
            tiers(
                mode,
                2,
                &[
                    ("NODALLOC_SIMULATE_NODES", "3"),
                    ("NODALLOC_TIERS", "near:0,1;far:2"),
                    ("NODALLOC_SECURE", secure),
                ],
            );
        }
    }
}

#[test]
fn without_far_memory_cold_requests_are_served_near() {
    for mode in MODES {
        tiers(mode, -1, &[]);
        // Simulated nodes all have CPUs: no far node unless the option names one.
        tiers(mode, -1, &[("NODALLOC_SIMULATE_NODES", "2")]);
        // A list naming no usable node is refused (with a warning): still near.
        tiers(
            mode,
            -1,
            &[
                ("NODALLOC_SIMULATE_NODES", "2"),
                ("NODALLOC_TIERS", "far:7"),
            ],
        );
    }
}

/// Limits per tier: past the near limit, blocks spill to the far node (`spill`) or malloc fails
/// with ENOMEM and recovers after frees (`fail`); a far limit set at run time sends cold
/// requests near or fails them; the exit statistics show the limits.
#[test]
fn a_full_tier_spills_to_the_other_or_fails_as_asked() {
    for mode in MODES {
        for policy in ["spill", "fail"] {
            let mut program = command("tier_limits", mode);
            program.arg(policy).envs([
                ("NODALLOC_SIMULATE_NODES", "3"),
                ("NODALLOC_TIERS", "far:2"),
                ("NODALLOC_NEAR_LIMIT", "16M"),
                ("NODALLOC_TIER_FULL", policy),
                ("NODALLOC_STATS", "1"),
                // Frees decommit at once: memory freed and still committed is reused without
                // a charge, so the run-time far limit would not be met where it is checked.
                ("NODALLOC_DECOMMIT_DELAY", "0"),
                ("NODALLOC_RETAIN", "0"),
            ]);
            on_cpu_zero(&mut program);
            let finished = run_passing("tier_limits", mode, &mut program);
            assert!(
                finished
                    .stderr
                    .lines()
                    .any(|line| line.starts_with("  near memory: committed ")
                        && line.ends_with("(limit 16.0 MiB)")),
                "no near-memory line with its limit ({mode:?}, {policy}): {}",
                finished.describe()
            );
        }
    }
}
