//! The maintenance thread (`NODALLOC_BACKGROUND`).

use super::*;
use crate::hostile::exit_while_threads_allocate;

/// A program's first `pthread_create` starts the maintenance thread (and a forked child's first
/// thread starts the child's), which makes upkeep passes while the program sleeps: by default
/// (`release`: passes only), with `1` (the full thread) and with `release` spelled out; a
/// program that creates no thread never gets one, nor does any program with `0`.
#[test]
fn the_maintenance_thread_starts_at_the_first_thread_and_works_while_the_program_sleeps() {
    for mode in MODES {
        for (case, option, threads) in [
            ("none", Some("1"), "1"),
            ("none", None, "1"),
            ("thread", Some("1"), "2"),
            ("thread", None, "2"),
            ("thread", Some("release"), "2"),
            ("thread", Some("0"), "1"),
        ] {
            let mut background = command("background", mode);
            background.args([case, threads]).env("NODALLOC_STATS", "1");
            match option {
                Some(option) => background.env("NODALLOC_BACKGROUND", option),
                None => background.env_remove("NODALLOC_BACKGROUND"),
            };
            let finished = run_passing("background", mode, &mut background);
            let passes = finished
                .stderr
                .lines()
                .find_map(|line| line.strip_prefix("  maintenance thread: "))
                .and_then(|rest| rest.split(' ').next())
                .and_then(|count| count.parse::<u64>().ok())
                .unwrap_or(0);
            if case == "thread" && option != Some("0") {
                assert!(
                    passes >= 2,
                    "background {case}, option {option:?} ({mode:?}): {passes} maintenance \
                     passes: {}",
                    finished.describe()
                );
            } else {
                assert_eq!(passes, 0, "background {case}, option {option:?} ({mode:?})");
            }
        }
    }
}

/// `background quiet THREADS` (`tests/c/background.c`: touched blocks freed, then no allocator
/// call while RSS is watched) with nothing retained, and `NODALLOC_BACKGROUND` set to
/// `background` (`None`: the default).
fn quiet_program(mode: Mode, threads: usize, background: Option<&str>) -> Command {
    let mut quiet = command("background", mode);
    quiet
        .args(["quiet", &threads.to_string()])
        .env("NODALLOC_RETAIN", "0");
    match background {
        Some(value) => quiet.env("NODALLOC_BACKGROUND", value),
        None => quiet.env_remove("NODALLOC_BACKGROUND"),
    };
    quiet
}

/// A program that closes every file descriptor and blocks every signal before its first thread
/// still gets its memory back from the maintenance thread; a program that exits straight after
/// freeing 128 MiB, while the thread has those releases to make, ends cleanly every time.
#[test]
fn the_maintenance_thread_works_without_fds_or_signals_and_exit_interrupts_it_cleanly() {
    for mode in MODES {
        run_passing("background", mode, &mut quiet_program(mode, 2, Some("1")));
        for _ in 0..10 {
            let mut exiting = command("background", mode);
            exiting.args(["exit", "2"]).env("NODALLOC_BACKGROUND", "1");
            run_passing("background", mode, &mut exiting);
        }
    }
}

/// The default maintenance thread (`release`: upkeep passes only, frees make their own
/// releases) gives a quiet multi-threaded program's memory back: 64 MiB of touched blocks freed,
/// then no allocator call at all, and RSS is down again within a second. With the thread off the
/// decommit rule keeps what the program used lately for its next use, and nothing runs to give
/// it back: the same child reports the memory still resident (its exit code 13).
#[test]
fn a_quiet_programs_memory_goes_back_with_the_default_maintenance_thread() {
    for mode in MODES {
        run_passing("background", mode, &mut quiet_program(mode, 2, None));
        let finished = run_bounded(&mut quiet_program(mode, 1, Some("0")), TIME_LIMIT);
        assert!(
            !finished.succeeded() && finished.stderr.contains("status 0xd00"),
            "without the thread the memory should stay until the next call ({mode:?}): {}",
            finished.describe()
        );
    }
}

/// The hostile runs again with the maintenance thread at work: a thousand forks while threads
/// exchange blocks, the exact memory limit under eight threads, and exit while threads allocate.
#[test]
fn forks_the_limit_and_exit_hold_with_the_maintenance_thread() {
    const LIMIT: usize = 64 << 20;
    for mode in MODES {
        let mut threads_fork = command("threads_fork", mode);
        threads_fork.env("NODALLOC_BACKGROUND", "1");
        run_passing("threads_fork", mode, &mut threads_fork);
        let mut limit = command("limit", mode);
        limit
            .arg(LIMIT.to_string())
            .env("NODALLOC_LIMIT", "64M")
            .env("NODALLOC_BACKGROUND", "1");
        run_passing("limit", mode, &mut limit);
        for who in ["main", "worker"] {
            for run in 0..5 {
                exit_while_threads_allocate(mode, who, run, &[("NODALLOC_BACKGROUND", "1")]);
            }
        }
    }
}
