//! The C ABI of `libnodalloc.so`, tested from C: the programs in `tests/c/` are compiled with
//! `cc` and run twice, once linked with `-lnodalloc` and once built without it and given the
//! library through `LD_PRELOAD` (the two ways the library is meant to be used). Each program
//! checks glibc's contract itself and prints `ok NAME: N checks` at the end; misuse is checked
//! from here, in a child that must die of SIGABRT with nodalloc's one-line message.

mod common;

use common::{
    clean_command, describe_status, library, run_bounded, Finished, SIGABRT, STATS_LINE_PREFIX,
};
use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Generous: the slowest program (threads_fork) takes a few seconds against a debug build.
const TIME_LIMIT: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Mode {
    /// Linked with `-lnodalloc` (and an rpath to the library).
    Linked,
    /// Linked against nothing but libc; `LD_PRELOAD` brings nodalloc in at run time.
    Preloaded,
}

const MODES: [Mode; 2] = [Mode::Linked, Mode::Preloaded];

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The program `name` (`tests/c/NAME.c`) built for `mode`, compiled once per test run.
fn program(name: &str, mode: Mode) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<(String, Mode), PathBuf>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(path) = built.get(&(name.to_string(), mode)) {
        return path.clone();
    }
    let path = compile(name, mode);
    built.insert((name.to_string(), mode), path.clone());
    path
}

fn compile(name: &str, mode: Mode) -> PathBuf {
    let library = library();
    let library_dir = library.parent().expect("the library's directory");
    // One directory per profile: the scratch directory is shared by all profiles, and a linked
    // program carries the rpath of its profile's library.
    let profile = library_dir
        .file_name()
        .expect("the profile directory's name")
        .to_string_lossy();
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c_abi-{profile}"));
    std::fs::create_dir_all(&out_dir).expect("creating the C programs' directory");
    let suffix = match mode {
        Mode::Linked => "linked",
        Mode::Preloaded => "preloaded",
    };
    let output = out_dir.join(format!("{name}-{suffix}"));
    // Built under a private name and renamed into place, so that two test runs sharing a target
    // directory never execute a half-written file.
    let partial = out_dir.join(format!("{name}-{suffix}.{}.partial", std::process::id()));
    // A `.cpp` program is C++ (built with `c++`); the others are C.
    let cxx = crate_dir().join("tests/c").join(format!("{name}.cpp"));
    let (source, compiler) = if cxx.is_file() {
        (cxx, "c++")
    } else {
        (crate_dir().join("tests/c").join(format!("{name}.c")), "cc")
    };
    let mut cc = Command::new(compiler);
    // Frame pointers and a dynamic symbol table: `callsite.c` walks frames and names its
    // functions with dladdr.
    cc.args(["-O1", "-g", "-fno-omit-frame-pointer", "-rdynamic"])
        .args(["-Wall", "-Werror", "-pthread", "-I"])
        .arg(crate_dir().join("include"))
        .arg("-o")
        .arg(&partial)
        .arg(&source);
    match mode {
        Mode::Linked => {
            cc.arg("-L")
                .arg(library_dir)
                .arg("-lnodalloc")
                .arg(format!("-Wl,-rpath,{}", library_dir.display()));
        }
        Mode::Preloaded => {
            cc.arg("-DNODALLOC_PRELOADED");
        }
    }
    let result = cc
        .output()
        .unwrap_or_else(|error| panic!("cannot run `cc` to build {}: {error}", source.display()));
    assert!(
        result.status.success(),
        "compiling {} failed: {:?}\n{}",
        source.display(),
        cc,
        String::from_utf8_lossy(&result.stderr)
    );
    std::fs::rename(&partial, &output).expect("moving the compiled program into place");
    output
}

/// A command that runs `name` built for `mode`, with the library preloaded if the mode says so.
fn command(name: &str, mode: Mode) -> Command {
    let mut command = clean_command(program(name, mode));
    if mode == Mode::Preloaded {
        command.env("LD_PRELOAD", library());
    }
    command
}

fn run_passing(name: &str, mode: Mode, command: &mut Command) -> Finished {
    run_passing_result(name, mode, run_bounded(command, TIME_LIMIT))
}

/// Checks that a run of `name` passed (exit 0 and its final `ok` line).
fn run_passing_result(name: &str, mode: Mode, finished: Finished) -> Finished {
    assert!(
        finished.succeeded(),
        "{name} ({mode:?}) failed: {}",
        finished.describe()
    );
    let ok_line = format!("ok {name}: ");
    assert!(
        finished
            .stdout
            .lines()
            .any(|line| line.starts_with(&ok_line)),
        "{name} ({mode:?}) exited 0 without its final `{ok_line}…` line: {}",
        finished.describe()
    );
    finished
}

fn has_stats_line(stderr: &str) -> bool {
    stderr
        .lines()
        .any(|line| line.starts_with(STATS_LINE_PREFIX))
}

#[test]
fn malloc_calloc_realloc_reallocarray_and_free_keep_glibcs_contract() {
    for mode in MODES {
        let finished = run_passing("basic", mode, &mut command("basic", mode));
        assert!(
            !has_stats_line(&finished.stderr),
            "basic ({mode:?}) printed statistics without NODALLOC_STATS: {}",
            finished.describe()
        );
    }
}

#[test]
fn aligned_allocation_functions_keep_glibcs_contract_and_stats_print_at_exit() {
    for mode in MODES {
        let mut aligned = command("aligned", mode);
        aligned.env("NODALLOC_STATS", "1");
        let finished = run_passing("aligned", mode, &mut aligned);
        assert!(
            has_stats_line(&finished.stderr),
            "aligned ({mode:?}) with NODALLOC_STATS=1 printed no line starting with \
             `{STATS_LINE_PREFIX}` on stderr: {}",
            finished.describe()
        );
    }
}

#[test]
fn nodalloc_extras_report_nodes_place_blocks_limit_commits_and_print_stats() {
    for mode in MODES {
        run_passing("extras", mode, &mut command("extras", mode));
    }
}

/// glibc's other malloc functions (`__libc_*`, `malloc_trim`, `mallinfo`/`mallinfo2`,
/// `mallopt`, `malloc_stats`, `malloc_info`) and C23's `free_sized`/`free_aligned_sized` are
/// nodalloc's and report its heap. Freed memory stays committed until `malloc_trim` here (a
/// big retained budget, a long delay), so the trim has something to give back.
#[test]
fn glibcs_other_malloc_functions_are_nodallocs_and_report_its_heap() {
    for mode in MODES {
        for secure in ["0", "1"] {
            let mut program = command("glibc_extras", mode);
            program
                .env("NODALLOC_RETAIN", "256M")
                .env("NODALLOC_DECOMMIT_DELAY", "600000")
                .env("NODALLOC_SECURE", secure);
            let finished = run_passing("glibc_extras", mode, &mut program);
            assert!(
                has_stats_line(&finished.stderr),
                "malloc_stats ({mode:?}, NODALLOC_SECURE={secure}) printed no line starting \
                 with `{STATS_LINE_PREFIX}` on stderr: {}",
                finished.describe()
            );
        }
    }
}

#[test]
fn free_sized_with_a_size_of_another_class_aborts_naming_the_block() {
    for secure in ["0", "1"] {
        let env = [("NODALLOC_SECURE", secure)];
        assert_program_aborts("glibc_extras", "free-sized-mismatch", &env, |pointer| {
            format!("nodalloc: free_sized with a size other than malloc's for block {pointer}")
        });
    }
}

#[test]
fn malloc_on_node_reaches_every_simulated_node() {
    for mode in MODES {
        let mut extras = command("extras", mode);
        extras.arg("4").env("NODALLOC_SIMULATE_NODES", "4");
        // The main thread is never bound; it lives on the node of the CPU it runs on. Started on
        // CPU 0 alone, every simulated node holds CPU 0 and the main thread's home is node 0.
        // SAFETY: sched_setaffinity is async-signal-safe and touches only the child.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut extras, || {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
                Ok(())
            });
        }
        run_passing("extras", mode, &mut extras);
    }
}

#[test]
fn a_thread_mask_the_program_chose_is_kept_and_others_are_bound() {
    for mode in MODES {
        let mut affinity = command("affinity", mode);
        affinity.env("NODALLOC_SIMULATE_NODES", "2");
        let finished = run_passing("affinity", mode, &mut affinity);
        assert!(
            finished.stdout.contains("ok affinity") || finished.stdout.contains("skip:"),
            "affinity ({mode:?}): {}",
            finished.describe()
        );
    }
}

/// Seeds that once failed (none yet) are kept here and replayed on every run, beside a few
/// fresh ones; `scripts/fuzz.sh` runs random seeds for as long as it is given.
const FUZZ_REGRESSION_SEEDS: &[u64] = &[];

#[test]
fn random_sequences_of_every_entry_point_match_the_shadow_model() {
    let seeds = FUZZ_REGRESSION_SEEDS.iter().copied().chain([1, 2, 3]);
    for seed in seeds {
        for mode in MODES {
            let mut fuzz = command("fuzz", mode);
            fuzz.args([seed.to_string(), "20000".into(), "4".into()]);
            run_passing("fuzz", mode, &mut fuzz);
        }
    }
}

#[test]
fn threads_exchanging_blocks_survive_a_thousand_forks() {
    for mode in MODES {
        run_passing("threads_fork", mode, &mut command("threads_fork", mode));
    }
}

// ---- The maintenance thread (NODALLOC_BACKGROUND) ----

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

// ---- Call-site partitions (NODALLOC_CALLSITE) ----

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

/// The fuzzer's random sequences of every entry point, and threads exchanging blocks across
/// forks, with call-site partitions (and with secure mode beside them).
#[test]
fn random_sequences_and_forks_keep_their_contract_with_call_site_partitions() {
    for env in [
        &[("NODALLOC_CALLSITE", "64")][..],
        &[("NODALLOC_CALLSITE", "7"), ("NODALLOC_SECURE", "1")],
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

/// With four simulated nodes the four threads are bound to different nodes, so most frees are
/// remote: they travel through outboxes and inboxes, which fork must also leave consistent.
#[test]
fn threads_on_four_simulated_nodes_exchanging_blocks_survive_a_thousand_forks() {
    let mut threads_fork = command("threads_fork", Mode::Linked);
    threads_fork.env("NODALLOC_SIMULATE_NODES", "4");
    let finished = run_passing("threads_fork", Mode::Linked, &mut threads_fork);
    assert!(
        !finished.stderr.contains("warning"),
        "nodalloc warned: {}",
        finished.describe()
    );
}

/// Runs `PROGRAM CASE` with `env`; the program prints `pointer 0x…` (the block it is about to
/// misuse, as `%p` prints it) before the misuse. Returns that pointer and how the program ended.
fn run_to_announced_misuse(
    program: &str,
    case: &str,
    env: &[(&str, &str)],
    mode: Mode,
) -> (String, Finished) {
    let mut misuse = command(program, mode);
    misuse.arg(case).envs(env.iter().copied());
    let finished = run_bounded(&mut misuse, TIME_LIMIT);
    let pointer = finished
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("pointer "))
        .unwrap_or_else(|| {
            panic!(
                "{program} {case} ({mode:?}) did not get to the misuse: {}",
                finished.describe()
            )
        })
        .to_string();
    (pointer, finished)
}

/// Runs `misuse MODE`, which prints the pointer it is about to free and frees it, and checks
/// that it dies of SIGABRT with exactly `nodalloc: free(): WHAT 0x…` on stderr.
fn assert_bad_free_aborts(misuse: &str, what: &str) {
    assert_bad_free_aborts_with(misuse, what, &[]);
}

/// As [`assert_bad_free_aborts`], with `env` set.
fn assert_bad_free_aborts_with(misuse: &str, what: &str, env: &[(&str, &str)]) {
    for mode in MODES {
        let (pointer, finished) = run_to_announced_misuse("misuse", misuse, env, mode);
        assert_eq!(
            finished.status.signal(),
            Some(SIGABRT),
            "misuse {misuse} ({mode:?}) should die of SIGABRT, but: {}",
            finished.describe()
        );
        let expected = format!("nodalloc: free(): {what} {pointer}");
        assert!(
            finished.stderr.lines().any(|line| line == expected),
            "misuse {misuse} ({mode:?}) ({}): stderr lacks the line `{expected}`: {}",
            describe_status(finished.status),
            finished.describe()
        );
    }
}

/// Runs `misuse CASE` (no secure mode) and checks that it dies of SIGABRT with a line on stderr
/// starting with `expected(pointer)`.
fn assert_misuse_aborts(case: &str, expected: impl Fn(&str) -> String) {
    assert_program_aborts("misuse", case, &[], expected);
}

#[test]
fn a_live_block_written_into_a_freed_blocks_link_is_refused_not_handed_out() {
    for case in ["forged-link", "forged-link-handed-on"] {
        assert_misuse_aborts(case, |pointer| {
            format!("nodalloc: corrupted free list: freed block {pointer} held 0x")
        });
    }
}

#[test]
fn an_overflow_into_a_freed_large_neighbour_aborts_when_the_spans_merge_or_the_block_grows() {
    for case in ["overflow-freed-large", "overflow-freed-large-realloc"] {
        assert_misuse_aborts(case, |pointer| {
            format!(
                "nodalloc: heap corruption: the freed block at {pointer} was written to at its start"
            )
        });
    }
}

#[test]
fn an_underflow_into_a_freed_large_neighbour_aborts_when_the_spans_merge() {
    assert_misuse_aborts("underflow-freed-large", |pointer| {
        format!(
            "nodalloc: heap corruption: the freed block at {pointer} was written to at its last word"
        )
    });
}

#[test]
fn a_write_after_free_at_the_start_of_a_large_block_aborts_when_its_memory_is_reused() {
    assert_misuse_aborts("write-freed-large", |pointer| {
        format!(
            "nodalloc: heap corruption: the freed block at {pointer} was written to at its start"
        )
    });
}

#[test]
fn free_of_a_stack_pointer_aborts_naming_the_pointer() {
    assert_bad_free_aborts("stack", "invalid pointer");
}

#[test]
fn free_of_a_pointer_inside_a_large_block_aborts_naming_the_pointer() {
    assert_bad_free_aborts("middle", "invalid pointer");
}

#[test]
fn double_free_of_a_large_block_aborts_naming_the_pointer() {
    assert_bad_free_aborts("double", "double free of");
}

#[test]
fn double_free_of_a_small_block_aborts_naming_the_pointer() {
    assert_bad_free_aborts("double-small", "double free of");
}

#[test]
fn double_free_of_a_block_from_the_sparse_pool_aborts_naming_the_pointer() {
    assert_bad_free_aborts("double-medium", "double free of");
}

#[test]
fn double_free_of_a_block_above_the_cached_classes_aborts_naming_the_pointer() {
    assert_bad_free_aborts("double-big", "double free of");
}

#[test]
fn double_free_of_a_block_already_handed_on_to_the_node_heap_aborts_naming_the_pointer() {
    // A big block sent on to the ring by the next free, and a small one drained out of the
    // thread's cache by 300 others (secure.c's case, in default mode): the confirmation looks
    // in the ring and the bag.
    assert_bad_free_aborts("double-handed-on", "double free of");
    assert_secure_program_aborts("double-drained", &[], |pointer| {
        format!("nodalloc: free(): double free of {pointer}")
    });
}

#[test]
fn a_free_list_link_overwritten_with_an_address_outside_the_heap_is_never_followed() {
    for mode in MODES {
        let (pointer, finished) = run_to_announced_misuse("misuse", "poison", &[], mode);
        let expected = format!("nodalloc: corrupted free list: freed block {pointer} held 0x");
        assert!(
            finished.status.signal() == Some(SIGABRT)
                && finished
                    .stderr
                    .lines()
                    .any(|line| line.starts_with(&expected)),
            "misuse poison ({mode:?}) should abort with a line starting `{expected}`: {}",
            finished.describe()
        );
    }
}

#[test]
fn free_of_a_pointer_inside_a_small_block_aborts_naming_the_pointer() {
    assert_bad_free_aborts("middle-small", "invalid pointer");
}

#[test]
fn free_of_an_unused_address_of_the_region_aborts_naming_the_pointer() {
    // Both commit modes: with `demand`, the page map past the frontier was never committed (the
    // free fast path reads its tags all the same: they are mapped readable, as zero).
    assert_bad_free_aborts_with("unused", "invalid pointer", &[]);
    assert_bad_free_aborts_with(
        "unused",
        "invalid pointer",
        &[("NODALLOC_COMMIT", "demand")],
    );
}

// ---- Hostile conditions (docs/RELIABILITY.md): exit, limits, many threads, soak ----

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
fn exit_while_threads_allocate(mode: Mode, who: &str, run: usize, env: &[(&str, &str)]) {
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
fn assert_secure_program_aborts(
    case: &str,
    env: &[(&str, &str)],
    expected: impl Fn(&str) -> String,
) {
    assert_program_aborts("secure", case, env, expected);
}

/// `PROGRAM CASE` with `env` must die of SIGABRT with a line on stderr starting with
/// `expected(pointer)` (see [`run_to_announced_misuse`]).
fn assert_program_aborts(
    program: &str,
    case: &str,
    env: &[(&str, &str)],
    expected: impl Fn(&str) -> String,
) {
    for mode in MODES {
        let (pointer, finished) = run_to_announced_misuse(program, case, env, mode);
        assert_eq!(
            finished.status.signal(),
            Some(SIGABRT),
            "{program} {case} ({mode:?}) should die of SIGABRT, but: {}",
            finished.describe()
        );
        let expected = expected(&pointer);
        assert!(
            finished
                .stderr
                .lines()
                .any(|line| line.starts_with(&expected)),
            "{program} {case} ({mode:?}): stderr lacks a line starting with `{expected}`: {}",
            finished.describe()
        );
    }
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
fn a_fifteen_second_soak_keeps_rss_within_1_3x_of_live_bytes() {
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

// ---- Resident memory follows what the program touches (tests/c/sparse.c) ----

include!("../../nodalloc/tests/common/sparse_bounds.rs");

/// Runs `tests/c/sparse.c` on `pattern` and returns its report line's `key=N` figures.
fn sparse_figures(pattern: &str, mode: Mode) -> HashMap<String, u64> {
    let mut run = command("sparse", mode);
    run.arg(pattern);
    let finished = run_passing("sparse", mode, &mut run);
    let line = finished
        .stdout
        .lines()
        .find(|line| line.starts_with(&format!("{pattern} ")))
        .unwrap_or_else(|| panic!("no report line: {}", finished.describe()));
    eprintln!("{mode:?}: {line}");
    line.split_whitespace()
        .filter_map(|field| field.split_once('='))
        .map(|(key, value)| (key.to_string(), value.parse().expect("a number")))
        .collect()
}

#[test]
fn sparse_patterns_cost_the_pages_they_touch() {
    for mode in MODES {
        for (pattern, bound) in SPARSE_BOUNDS_KIB {
            let growth = sparse_figures(pattern, mode)["rss_growth_kib"];
            assert!(
                growth <= bound,
                "{pattern} ({mode:?}): RSS grew by {growth} KiB, bound {bound} KiB"
            );
        }
    }
}

/// Blocks of 16 KiB from fresh bags: `malloc` writes nothing into them (no link, no double-free
/// mark), so no page of theirs is faulted in before the program touches it.
#[test]
fn big_blocks_are_handed_out_untouched() {
    let resident = sparse_figures("untouched", Mode::Preloaded)["resident_after_malloc"];
    assert_eq!(
        resident, 0,
        "first pages resident after malloc, before any write"
    );
}

/// Blocks of 1-64 KiB written whole, 90 % freed at random: once the program has idled, only
/// the survivors' pages stay (the sweep gives back the free pages inside bags still in use).
#[test]
fn a_heap_freed_at_random_keeps_only_the_survivors_pages() {
    for mode in MODES {
        let figures = sparse_figures("holes", mode);
        let (kept, live) = (figures["kept_kib"], figures["live_kib"]);
        assert!(
            kept <= holes_bound_kib(live),
            "holes ({mode:?}): {kept} KiB kept for {live} KiB live"
        );
    }
}

/// A fragmenting churn, then medium objects; once everything is freed and the program has
/// idled 1.5 s, at most 32 MiB of the heap stays resident.
#[test]
fn a_drained_heap_after_a_fragmenting_churn_goes_back() {
    let drained = sparse_figures("churn", Mode::Preloaded)["drained_kib"];
    assert!(
        drained <= 32 * 1024,
        "churn: {drained} KiB left after the drain"
    );
}

/// 256 MiB of 64-byte objects: at least 90 % of them on huge pages where THP is available.
#[test]
fn dense_small_objects_sit_on_huge_pages() {
    if !nodalloc_testkit::thp_available() {
        return nodalloc_testkit::skip(
            nodalloc_testkit::Need::OnCi,
            "transparent huge pages are off on this machine",
        );
    }
    let figures = sparse_figures("dense", Mode::Preloaded);
    // The pointer array (32 MiB) is a large block on base pages.
    let small = figures["rss_growth_kib"].saturating_sub(32 * 1024);
    let huge = figures["huge_kib"];
    assert!(
        huge * 10 >= small * 9,
        "only {huge} of {small} KiB of small objects on huge pages"
    );
}
