//! The C ABI of `libnodalloc.so`, tested from C: the programs in `tests/c/` are compiled with
//! `cc` and run twice, once linked with `-lnodalloc` and once built without it and given the
//! library through `LD_PRELOAD` (the two ways the library is meant to be used). Each program
//! checks glibc's contract itself and prints `ok NAME: N checks` at the end; misuse is checked
//! from here, in a child that must die of SIGABRT with nodalloc's one-line message.

#[path = "../common/mod.rs"]
mod common;

mod background;
mod copies;
mod heaps;
mod hostile;
mod misuse;
mod partitions;
mod profile;
mod sparse;
mod tiers;

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
    // A `.cpp` program is C++ (built with `c++`); a `_clang` one is C built by a Clang with
    // allocation tokens; the others are C.
    let cxx = crate_dir().join("tests/c").join(format!("{name}.cpp"));
    let (source, compiler) = if cxx.is_file() {
        (cxx, "c++")
    } else if name.ends_with("_clang") {
        let clang = clang_with_tokens().expect("a Clang with -fsanitize=alloc-token");
        (crate_dir().join("tests/c").join(format!("{name}.c")), clang)
    } else {
        (crate_dir().join("tests/c").join(format!("{name}.c")), "cc")
    };
    let mut cc = Command::new(compiler);
    if name.ends_with("_clang") {
        // check.h's `noipa` is GCC's; Clang does not inline across `noinline` either.
        cc.args(["-fsanitize=alloc-token", "-Wno-unknown-attributes"]);
    }
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

/// The first Clang on `PATH` that instruments allocations with tokens
/// (`-fsanitize=alloc-token`, Clang 22 and later), or `None`.
fn clang_with_tokens() -> Option<&'static str> {
    static FOUND: OnceLock<Option<&'static str>> = OnceLock::new();
    *FOUND.get_or_init(|| {
        ["clang-22", "clang-23", "clang-24", "clang"]
            .into_iter()
            .find(|clang| {
                Command::new(clang)
                    .args([
                        "-fsanitize=alloc-token",
                        "-x",
                        "c",
                        "-c",
                        "-o",
                        "/dev/null",
                        "-",
                    ])
                    .stdin(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|status| status.success())
            })
    })
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

/// Starts `command` on CPU 0 alone. The main thread is never bound; it lives on the node of
/// the CPU it runs on: every simulated node holds CPU 0, so the main thread's home is node 0.
fn on_cpu_zero(command: &mut Command) {
    // SAFETY: sched_setaffinity is async-signal-safe and touches only the child.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
            Ok(())
        });
    }
}

#[test]
fn malloc_on_node_reaches_every_simulated_node() {
    for mode in MODES {
        let mut extras = command("extras", mode);
        extras.arg("4").env("NODALLOC_SIMULATE_NODES", "4");
        on_cpu_zero(&mut extras);
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

/// `PROGRAM CASE` with `env` must die of SIGABRT with a line on stderr starting with
/// `expected(pointer)` (see [`run_to_announced_misuse`]).
fn assert_program_aborts(
    program: &str,
    case: &str,
    env: &[(&str, &str)],
    expected: impl Fn(&str) -> String,
) {
    assert_program_aborts_with_one_of(program, case, env, |pointer| vec![expected(pointer)]);
}

/// [`assert_program_aborts`] where the line on stderr may start with any of `expected(pointer)`.
fn assert_program_aborts_with_one_of(
    program: &str,
    case: &str,
    env: &[(&str, &str)],
    expected: impl Fn(&str) -> Vec<String>,
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
                .any(|line| expected.iter().any(|prefix| line.starts_with(prefix))),
            "{program} {case} ({mode:?}): stderr lacks a line starting with one of \
             {expected:?}: {}",
            finished.describe()
        );
    }
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
