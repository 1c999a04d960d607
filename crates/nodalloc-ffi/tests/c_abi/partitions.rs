//! Call-site partitions (`NODALLOC_CALLSITE`), C++ operators and the partitions' statistics.

use super::*;
use crate::misuse::assert_bad_free_aborts_with;

/// Runs `name` (set up by `configure`) until it passes, or fails for another reason than a
/// partition collision, at most four times. Partitions are a hash of addresses, which
/// address-space randomisation moves, so two call sites share a partition now and then (about
/// one run in twenty for `callsite.c`): the program then reports a site recorded from another
/// function, or two sites in one partition. A fresh run draws fresh addresses; a lost call
/// site fails every run.
fn run_passing_across_collisions(name: &str, mode: Mode, configure: impl Fn(&mut Command)) {
    for attempt in 1.. {
        let mut program = command(name, mode);
        configure(&mut program);
        let finished = run_bounded(&mut program, TIME_LIMIT);
        let collided = finished.stderr.contains("was recorded from")
            || finished.stderr.contains("share partition");
        if finished.succeeded() || !collided || attempt == 4 {
            run_passing_result(name, mode, finished);
            return;
        }
    }
}

/// Every allocating entry point records its caller (at depth 1 and 2), and the depth walk
/// survives hostile frame pointers; with the mode off, blocks have no partition. A debug build
/// of the library keeps stack frames in its entry points, so it cannot read the caller there:
/// against it the program only checks that blocks have partitions and the walk survives.
#[test]
fn every_allocating_entry_point_names_its_caller_for_call_site_partitions() {
    let depths: &[&str] = if cfg!(debug_assertions) {
        &["loose"]
    } else {
        &["1", "2"]
    };
    for mode in MODES {
        for &depth in depths {
            run_passing_across_collisions("callsite", mode, |callsite| {
                callsite.arg(depth).env("NODALLOC_CALLSITE", "4096").env(
                    "NODALLOC_CALLSITE_DEPTH",
                    if depth == "loose" { "2" } else { depth },
                );
            });
        }
        let mut off = command("callsite", mode);
        off.arg("off");
        run_passing("callsite", mode, &mut off);
    }
}

/// Clang's allocation tokens (`__alloc_token_*`, every form): a token is the call site of
/// its partition, the fallback token 0 leaves the caller's return address as for the plain
/// function, and each entry keeps its plain function's contract, with partitions on and off.
#[test]
fn allocation_tokens_key_call_site_partitions_and_keep_each_entrys_contract() {
    let check = if cfg!(debug_assertions) {
        "loose"
    } else {
        "on"
    };
    for mode in MODES {
        run_passing_across_collisions("tokens", mode, |tokens| {
            tokens.arg(check).env("NODALLOC_CALLSITE", "4096");
        });
        let mut off = command("tokens", mode);
        off.arg("off");
        run_passing("tokens", mode, &mut off);
    }
}

/// The same from the real producer: a program built by Clang with `-fsanitize=alloc-token`
/// (linked with `-lnodalloc`, which defines the functions its calls name): one type from two
/// functions shares a partition, two types get two, and a call Clang could not type is keyed
/// by its caller (with the release library, whose entry points read their caller).
#[test]
fn a_program_built_with_clangs_allocation_tokens_gets_a_partition_per_type() {
    if clang_with_tokens().is_none() {
        nodalloc_testkit::skip(
            nodalloc_testkit::Need::OnCi,
            "no Clang with -fsanitize=alloc-token (clang-22: scripts/setup.sh installs it)",
        );
        return;
    }
    // A debug build of the library keeps frames in its entry points: the typed calls alone.
    let check: &[&str] = if cfg!(debug_assertions) {
        &["loose"]
    } else {
        &[]
    };
    run_passing_across_collisions("tokens_clang", Mode::Linked, |tokens| {
        tokens.args(check).env("NODALLOC_CALLSITE", "4096");
    });
}

/// The fuzzer's random sequences of every entry point, and threads exchanging blocks across
/// forks, with call-site partitions (and with secure mode beside them, or automatic tiering).
#[test]
fn random_sequences_and_forks_keep_their_contract_with_call_site_partitions() {
    for env in [
        &[("NODALLOC_CALLSITE", "64")][..],
        &[("NODALLOC_CALLSITE", "7"), ("NODALLOC_SECURE", "1")],
        // Automatic tiering on simulated nodes with a far one: partitions turn cold and bags
        // move (as records) while threads exchange blocks and fork.
        &[
            ("NODALLOC_CALLSITE", "64"),
            ("NODALLOC_TIERING", "auto"),
            ("NODALLOC_COOLING", "100"),
            ("NODALLOC_SIMULATE_NODES", "3"),
            ("NODALLOC_TIERS", "far:2"),
        ],
    ] {
        for mode in MODES {
            let mut fuzz = command("fuzz", mode);
            fuzz.args(["5", "20000", "4"]).envs(env.iter().copied());
            run_passing("fuzz", mode, &mut fuzz);
            let mut threads_fork = command("threads_fork", mode);
            threads_fork
                .env("NODALLOC_SIMULATE_NODES", "2")
                .envs(env.iter().copied());
            run_passing("threads_fork", mode, &mut threads_fork);
        }
    }
}

#[test]
fn misuse_is_still_caught_with_call_site_partitions() {
    let partitions = [("NODALLOC_CALLSITE", "64")];
    assert_bad_free_aborts_with("double-small", "double free of", &partitions);
    assert_bad_free_aborts_with("middle-small", "invalid pointer", &partitions);
    assert_bad_free_aborts_with("double-big", "double free of", &partitions);
    let secure = [("NODALLOC_CALLSITE", "64"), ("NODALLOC_SECURE", "1")];
    assert_bad_free_aborts_with("double-small", "double free of", &secure);
    assert_bad_free_aborts_with("double-medium", "double free of", &secure);
}

/// C++'s operators are nodalloc's: every form allocates and frees through it, failures run the
/// new-handler and throw `std::bad_alloc` (or return nullptr), and with call-site partitions
/// two functions' `new` land in two partitions named after them (release library only; a debug
/// build keeps frames in its entry points).
#[test]
fn cxx_operators_new_and_delete_are_nodallocs_and_keep_cxx_semantics() {
    let check = if cfg!(debug_assertions) {
        "loose"
    } else {
        "sites"
    };
    for mode in MODES {
        run_passing_across_collisions("cxx", mode, |cxx| {
            cxx.arg(check).env("NODALLOC_CALLSITE", "4096");
        });
        let mut plain = command("cxx", mode);
        plain.arg("loose");
        run_passing("cxx", mode, &mut plain);
    }
}

/// The exit statistics list the partitions: totals, then each top partition with its call site
/// named (`callsite.c` is built with -rdynamic, so dladdr knows its functions).
#[test]
fn statistics_name_the_call_sites_of_the_top_partitions() {
    for mode in MODES {
        let mut callsite = command("callsite", mode);
        callsite
            .arg("loose")
            .env("NODALLOC_CALLSITE", "4096")
            .env("NODALLOC_STATS", "1");
        let finished = run_passing("callsite", mode, &mut callsite);
        let stderr = &finished.stderr;
        assert!(
            stderr
                .lines()
                .any(|line| line.starts_with("  call-site partitions: ")
                    && line.contains(" of 4096 used")),
            "no partition totals ({mode:?}): {}",
            finished.describe()
        );
        let named = stderr
            .lines()
            .filter(|line| line.starts_with("    partition ") && line.contains(", site 0x"))
            .count();
        assert!(
            named >= 2,
            "fewer than two partitions with a named site ({mode:?}): {}",
            finished.describe()
        );
        // A debug build of the library records sites inside itself (see the test above).
        assert!(
            cfg!(debug_assertions) || stderr.contains("(main+") || stderr.contains("(site_"),
            "no call site of the program named ({mode:?}): {}",
            finished.describe()
        );
    }
}
