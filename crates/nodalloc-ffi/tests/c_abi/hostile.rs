//! Hostile conditions (docs/RELIABILITY.md): exit, limits, many threads, secure mode, the soak.

use super::*;

/// A run of `exit` that hangs is killed after this long (a normal run takes well under 1 s).
const EXIT_TIME_LIMIT: Duration = Duration::from_secs(10);

#[test]
fn atexit_handlers_and_thread_destructors_after_nodallocs_flush_can_allocate() {
    for mode in MODES {
        let mut handlers = command("exit", mode);
        handlers.arg("handlers");
        run_passing("exit", mode, &mut handlers);
        // Statistics at exit: nodalloc's own atexit report runs among the program's handlers.
        let mut with_stats = command("exit", mode);
        with_stats.arg("handlers").env("NODALLOC_STATS", "1");
        let finished = run_passing("exit", mode, &mut with_stats);
        assert!(has_stats_line(&finished.stderr), "{}", finished.describe());
    }
}

/// `exit` while four threads allocate, free and pass blocks to each other: from the main thread
/// and from a worker, 20 times each per mode, some runs with the exit report or four simulated
/// nodes (frees in flight between nodes). Each run must end, with status 0, within 10 s.
#[test]
fn exit_while_other_threads_allocate_does_not_hang() {
    for mode in MODES {
        for who in ["main", "worker"] {
            for run in 0..20 {
                let nodes: &[(&str, &str)] = if run % 4 >= 2 {
                    &[("NODALLOC_SIMULATE_NODES", "4")]
                } else {
                    &[]
                };
                exit_while_threads_allocate(mode, who, run, nodes);
            }
        }
    }
}

/// One run of `exit WHO` with `env` (and the exit report on odd runs): it must end, with
/// status 0 and its `ok` line, within the exit time limit.
pub(crate) fn exit_while_threads_allocate(mode: Mode, who: &str, run: usize, env: &[(&str, &str)]) {
    let mut exit = command("exit", mode);
    exit.arg(who).envs(env.iter().copied());
    if run % 2 == 1 {
        exit.env("NODALLOC_STATS", "1");
    }
    let finished = run_bounded(&mut exit, EXIT_TIME_LIMIT);
    assert!(
        finished.succeeded() && finished.stdout.contains("ok exit: "),
        "exit {who} ({mode:?}) {env:?}, run {run}: {}",
        finished.describe()
    );
}

/// NODALLOC_LIMIT=64M and eight threads racing to it: NULL + ENOMEM past it, peak committed
/// within it, every thread can allocate again after the frees.
#[test]
fn the_memory_limit_holds_under_eight_threads_and_frees_make_room() {
    const LIMIT: usize = 64 << 20;
    for mode in MODES {
        let mut limit = command("limit", mode);
        limit.arg(LIMIT.to_string()).env("NODALLOC_LIMIT", "64M");
        run_passing("limit", mode, &mut limit);
    }
}

/// `ulimit -v 262144`: the reservation shrinks to fit 256 MiB of address space, a workload with
/// 64 MiB live runs, a request larger than the address space fails with ENOMEM.
#[test]
fn a_256_mib_address_space_limit_serves_a_64_mib_live_workload() {
    for mode in MODES {
        let mut rlimit = command("rlimit", mode);
        // SAFETY: setrlimit is async-signal-safe and touches only the child.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut rlimit, || {
                let limit = libc::rlimit {
                    rlim_cur: 256 << 20,
                    rlim_max: 256 << 20,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        run_passing("rlimit", mode, &mut rlimit);
    }
}

/// 100 000 short-lived threads created with `pthread_create` under `LD_PRELOAD`: RSS at the end
/// within 2x of RSS after the first 1000, no thread heap left behind.
#[test]
fn a_hundred_thousand_short_threads_keep_rss_flat() {
    let mode = Mode::Preloaded;
    let finished = run_passing("threads100k", mode, &mut command("threads100k", mode));
    eprintln!("{}", finished.stdout.trim());
}

/// Waves of short threads one after another (`tests/c/waves.c`): an exited thread's caches
/// pass its blocks to the next thread (almost nothing from the bags), and go home once the
/// program is quiet.
#[test]
fn waves_of_short_threads_pass_their_caches_on_and_a_quiet_program_gets_them_back() {
    for mode in MODES {
        let finished = run_passing("waves", mode, &mut command("waves", mode));
        eprintln!("{}", finished.stdout.trim());
    }
}

/// 32 threads at a time on a 2-CPU machine, in waves, passing blocks to later waves through a
/// shared array (`tests/c/churn.c`), every block checked by the thread that frees it: with the
/// default settings, and with a 1 ms upkeep period, where the maintenance thread sends kept
/// caches home while the next wave's threads take heaps from the pool.
#[test]
fn thirty_two_threads_a_wave_passing_blocks_between_waves_lose_and_damage_none() {
    for mode in MODES {
        for delay in [None, Some("1")] {
            let mut churn = command("churn", mode);
            if let Some(delay) = delay {
                churn.env("NODALLOC_DECOMMIT_DELAY", delay);
            }
            let finished = run_passing("churn", mode, &mut churn);
            eprintln!("{} (delay {delay:?})", finished.stdout.trim());
        }
    }
}

/// Runs `secure CASE` (`tests/c/secure.c`) with `NODALLOC_SECURE=1`; see
/// [`run_to_announced_misuse`].
fn run_secure_misuse(case: &str, mode: Mode) -> (String, Finished) {
    run_to_announced_misuse("secure", case, &[("NODALLOC_SECURE", "1")], mode)
}

/// Secure mode: `secure CASE` must die of SIGABRT with a line on stderr starting with
/// `expected(pointer)`.
fn assert_secure_abort(case: &str, expected: impl Fn(&str) -> String) {
    assert_secure_program_aborts(case, &[("NODALLOC_SECURE", "1")], expected);
}

/// [`assert_secure_abort`] with `env` instead of secure mode's setting.
pub(crate) fn assert_secure_program_aborts(
    case: &str,
    env: &[(&str, &str)],
    expected: impl Fn(&str) -> String,
) {
    assert_program_aborts("secure", case, env, expected);
}

#[test]
fn secure_mode_catches_a_double_free_after_300_other_frees() {
    assert_secure_abort("double-drained", |pointer| {
        format!("nodalloc: free(): double free of {pointer}")
    });
}

#[test]
fn secure_mode_refuses_a_freed_block_written_to() {
    // The first word (the free-list link to be): the fill check sees it before the core's link
    // check would.
    assert_secure_abort("write-after-free", |pointer| {
        format!("nodalloc: write after free: freed block was written to: {pointer}")
    });
}

#[test]
fn secure_mode_catches_one_byte_past_a_large_block_at_its_free() {
    for case in ["overflow", "overflow-realloc"] {
        assert_secure_abort(case, |pointer| {
            format!("nodalloc: heap overflow: bytes past the end of block {pointer}")
        });
    }
}

#[test]
fn secure_mode_faults_on_the_guard_page_past_a_large_block() {
    for case in ["overflow-page"] {
        for mode in MODES {
            let (_, finished) = run_secure_misuse(case, mode);
            assert_eq!(
                finished.status.signal(),
                Some(libc::SIGSEGV),
                "secure {case} ({mode:?}) should fault on the guard page, but: {}",
                finished.describe()
            );
            assert!(
                finished.stdout.contains("writing byte"),
                "secure {case} ({mode:?}) faulted before the overflow: {}",
                finished.describe()
            );
        }
    }
}

/// `scripts/soak.sh` for 15 s: eight threads, sizes 16 B – 1 MiB, lifetimes from none to minutes,
/// cross-thread frees, contents checked; after a 5 s warm-up RSS must stay within 1.3 x the most
/// bytes live within the last second plus the RSS at start. Release builds only: a debug library is too slow for the churn
/// to mean anything (`cargo test --release -p nodalloc-ffi --test c_abi soak`).
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "the soak runs in the release pass of the test command"
)]
fn a_fifteen_second_soak_keeps_rss_within_1_5x_of_live_bytes() {
    let mode = Mode::Preloaded;
    let mut soak = command("soak", mode);
    soak.arg("15");
    let finished = run_passing("soak", mode, &mut soak);
    let summary = finished
        .stdout
        .lines()
        .find(|line| line.starts_with("soak summary: "))
        .unwrap_or("(no summary)");
    eprintln!("{summary}");
}
