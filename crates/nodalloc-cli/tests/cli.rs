//! The `nodalloc` command as a user runs it: `topology` on the real and on a simulated machine,
//! `run` with and without a library to preload, and `bench` handing over to the showdown.
//!
//! `run` needs `libnodalloc.so` beside the `nodalloc` binary, i.e. in this profile's target
//! directory: these tests build it there first with `cargo build -p nodalloc-ffi`, since
//! `cargo test` does not build a cdylib by itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nodalloc_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_nodalloc"))
}

/// `nodalloc` with an environment free of nodalloc's options and preloads, whatever the
/// environment of `cargo test`.
fn nodalloc_command(program: &Path) -> Command {
    let mut command = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("NODALLOC_") {
            command.env_remove(&name);
        }
    }
    command.env_remove("LD_PRELOAD");
    command
}

fn output(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|error| panic!("cannot run {command:?}: {error}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The library beside the `nodalloc` binary, built for this profile and target directory (see
/// `nodalloc_testkit::library`).
fn library() -> PathBuf {
    nodalloc_testkit::library()
}

fn node_lines(report: &str) -> Vec<&str> {
    report
        .lines()
        .filter(|line| line.trim_start().starts_with("node ") && line.contains(": os node "))
        .collect()
}

#[test]
fn topology_prints_one_line_per_node_of_this_machine() {
    let result = output(nodalloc_command(nodalloc_binary()).arg("topology"));
    let report = text(&result.stdout);
    assert!(
        result.status.success(),
        "nodalloc topology failed: {}",
        text(&result.stderr)
    );
    let first = report.lines().next().unwrap_or_default();
    let count: usize = first
        .strip_prefix("nodes: ")
        .and_then(|rest| rest.split(',').next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no `nodes: N` first line in:\n{report}"));
    assert!(count >= 1, "no nodes in:\n{report}");
    assert_eq!(node_lines(&report).len(), count, "report:\n{report}");
    for expected in [
        "distances:",
        "process cpus: ",
        "transparent huge pages: ",
        "overcommit: ",
        "address space limit (RLIMIT_AS): ",
        "binding: interleave",
        "transfer rings: ",
    ] {
        assert!(
            report.lines().any(|line| line.starts_with(expected)),
            "no line starting with `{expected}` in:\n{report}"
        );
    }
}

#[test]
fn topology_shows_four_simulated_nodes_and_their_distances() {
    let result = output(
        nodalloc_command(nodalloc_binary())
            .arg("topology")
            .env("NODALLOC_SIMULATE_NODES", "4")
            .env("NODALLOC_BIND", "saturate")
            .env("NODALLOC_RING_SHARDS", "3"),
    );
    let report = text(&result.stdout);
    assert!(
        result.status.success(),
        "nodalloc topology failed: {}",
        text(&result.stderr)
    );
    assert!(
        report.starts_with("nodes: 4, simulated"),
        "report:\n{report}"
    );
    assert!(
        report.contains("\ntransfer rings: 3 per size class and node"),
        "report:\n{report}"
    );
    let nodes = node_lines(&report);
    assert_eq!(nodes.len(), 4, "report:\n{report}");
    for (index, line) in nodes.iter().enumerate() {
        assert!(
            line.trim_start()
                .starts_with(&format!("node {index}: os node {index}, cpus ")),
            "node line {line:?}"
        );
    }
    // Simulated distances grow by 10 per step: the last row is 40 30 20 10.
    let last_row: Vec<&str> = report
        .lines()
        .find(|line| line.split_whitespace().next() == Some("3") && !line.contains("node"))
        .unwrap_or_else(|| panic!("no distance row for node 3 in:\n{report}"))
        .split_whitespace()
        .collect();
    assert_eq!(last_row, ["3", "40", "30", "20", "10"]);
    assert!(
        report.contains("binding: saturate (fill a node's CPUs before the next)"),
        "report:\n{report}"
    );
}

#[test]
fn topology_shows_the_far_nodes_and_each_nodes_far_node() {
    let result = output(
        nodalloc_command(nodalloc_binary())
            .arg("topology")
            .env("NODALLOC_SIMULATE_NODES", "3")
            .env("NODALLOC_TIERS", "near:0,1;far:2"),
    );
    let report = text(&result.stdout);
    assert!(result.status.success(), "{}", text(&result.stderr));
    let tiers: Vec<&str> = report
        .lines()
        .skip_while(|line| !line.starts_with("memory tiers: "))
        .take(4)
        .collect();
    assert_eq!(
        tiers,
        [
            "memory tiers: from NODALLOC_TIERS",
            "  node 0: near, far memory on node 2 (no kernel tier)",
            "  node 1: near, far memory on node 2 (no kernel tier)",
            "  node 2: far (no kernel tier)",
        ],
        "report:\n{report}"
    );
    // This machine's own view: one kernel tier or none, and no far node on one node.
    let result = output(nodalloc_command(nodalloc_binary()).arg("topology"));
    let report = text(&result.stdout);
    assert!(
        report.contains("\nmemory tiers: one tier, no far memory"),
        "report:\n{report}"
    );
    // A list naming no usable node is refused with a warning, and the detected choice stands.
    let result = output(
        nodalloc_command(nodalloc_binary())
            .arg("topology")
            .env("NODALLOC_TIERS", "far:9"),
    );
    assert!(result.status.success());
    let warnings = text(&result.stderr);
    assert!(
        warnings.contains("NODALLOC_TIERS names node 9, which is not a usable node"),
        "stderr:\n{warnings}"
    );
    assert!(text(&result.stdout).contains("\nmemory tiers: one tier, no far memory"));
}

/// Linux's "text file busy": a program file some process still holds open for writing.
const ETXTBSY: i32 = 26;

#[test]
fn run_without_a_library_names_every_place_it_looked() {
    // A copy of the binary in a directory with no libnodalloc.so beside it or in ../lib.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli-without-library-{}", std::process::id()));
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("creating the scratch directory");
    let copy = bin.join("nodalloc");
    std::fs::copy(nodalloc_binary(), &copy).expect("copying the nodalloc binary");
    for system in ["/usr/local/lib/libnodalloc.so", "/usr/lib/libnodalloc.so"] {
        assert!(
            !Path::new(system).exists(),
            "{system} exists, so this test cannot make the library impossible to find"
        );
    }

    // The copy's descriptor, open for writing while it was made, lives on briefly in children
    // that other tests fork meanwhile (until they exec): running it then fails with ETXTBSY.
    let mut attempts = 0;
    let result = loop {
        match nodalloc_command(&copy).args(["run", "--", "true"]).output() {
            Err(error) if error.raw_os_error() == Some(ETXTBSY) && attempts < 100 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            result => break result.unwrap_or_else(|error| panic!("cannot run the copy: {error}")),
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(125), "stderr: {stderr}");
    assert!(
        stderr.contains("cannot find libnodalloc.so"),
        "stderr: {stderr}"
    );
    for place in [
        bin.join("libnodalloc.so"),
        dir.join("lib").join("libnodalloc.so"),
        PathBuf::from("/usr/local/lib/libnodalloc.so"),
        PathBuf::from("/usr/lib/libnodalloc.so"),
    ] {
        assert!(
            stderr.contains(&place.display().to_string()),
            "the error does not name {}: {stderr}",
            place.display()
        );
    }
    assert!(
        stderr.contains("cargo build --release -p nodalloc-ffi"),
        "the error does not say how to build the library: {stderr}"
    );
}

#[test]
fn run_with_stats_preloads_nodalloc_and_prints_its_statistics() {
    library();
    // bash, because it allocates and leaves stderr open at exit: the report is written at the
    // first allocation's atexit, so `true` (no allocation) prints none, and coreutils programs
    // close stderr in an atexit handler of their own before nodalloc's runs.
    let result = output(nodalloc_command(nodalloc_binary()).args([
        "run",
        "--stats",
        "--",
        "bash",
        "-c",
        "echo hello",
    ]));
    let stderr = text(&result.stderr);
    assert!(result.status.success(), "stderr: {stderr}");
    assert_eq!(text(&result.stdout), "hello\n");
    assert!(
        stderr
            .lines()
            .any(|line| line.starts_with("nodalloc 0.1.0:")),
        "no statistics on stderr: {stderr}"
    );
}

#[test]
fn run_sets_the_options_asked_for_and_prepends_the_preload() {
    let library = std::fs::canonicalize(library()).expect("the library's path");
    let result = output(
        nodalloc_command(nodalloc_binary())
            .args(["run", "--bind", "none", "--limit", "64M", "--"])
            .args(["sh", "-c", "printf '%s|%s|%s|%s\\n' \"$LD_PRELOAD\" \"$NODALLOC_BIND\" \"$NODALLOC_LIMIT\" \"${NODALLOC_STATS-unset}\""])
            .env("LD_PRELOAD", "libc.so.6"),
    );
    assert!(result.status.success(), "stderr: {}", text(&result.stderr));
    assert_eq!(
        text(&result.stdout),
        format!("{}:libc.so.6|none|67108864|unset\n", library.display())
    );
}

/// `--profile FILE` (relative: made absolute, for a command that changes directory) and
/// `--profile-rate` set the profile's options; the profile is written at the command's exit.
#[test]
fn run_with_a_profile_sets_its_options_and_the_command_writes_it() {
    library();
    let dir = std::env::temp_dir().join(format!("nodalloc-cli-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let result = output(
        nodalloc_command(nodalloc_binary())
            .current_dir(&dir)
            .args(["run", "--profile", "heap.%p.pb", "--profile-rate", "64K", "--"])
            .args(["bash", "-c", "cd /; printf '%s|%s|%s\\n' \"$NODALLOC_PROFILE\" \"$NODALLOC_PROFILE_OUT\" \"$NODALLOC_PROFILE_RATE\""]),
    );
    assert!(result.status.success(), "stderr: {}", text(&result.stderr));
    let dir = std::fs::canonicalize(&dir).unwrap();
    assert_eq!(
        text(&result.stdout),
        format!("1|{}/heap.%p.pb|65536\n", dir.display())
    );
    let written: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        written.len() == 1 && written[0].starts_with("heap.") && written[0].ends_with(".pb"),
        "the command's exit profile: {written:?}"
    );
    assert!(std::fs::metadata(dir.join(&written[0])).unwrap().len() > 100);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_passes_the_commands_exit_status_through() {
    library();
    let result =
        output(nodalloc_command(nodalloc_binary()).args(["run", "--", "sh", "-c", "exit 7"]));
    assert_eq!(
        result.status.code(),
        Some(7),
        "stderr: {}",
        text(&result.stderr)
    );
    let missing =
        output(nodalloc_command(nodalloc_binary()).args(["run", "--", "/nonexistent/program"]));
    assert_eq!(missing.status.code(), Some(127));
    assert!(text(&missing.stderr).contains("cannot run /nonexistent/program"));
}

#[test]
fn run_rejects_an_unknown_binding_policy() {
    let result =
        output(nodalloc_command(nodalloc_binary()).args(["run", "--bind", "spread", "--", "true"]));
    assert_eq!(result.status.code(), Some(2));
    assert!(
        text(&result.stderr).contains("interleave, saturate, none or map:FILE"),
        "stderr: {}",
        text(&result.stderr)
    );
}

#[test]
fn bench_hands_its_arguments_to_the_showdown() {
    // Beside this `nodalloc` when the showdown was built into the same profile, else through
    // `cargo run` in this checkout; either way the arguments must arrive unchanged.
    let listed = output(nodalloc_command(nodalloc_binary()).args(["bench", "--list"]));
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let stdout = text(&listed.stdout);
    for case in [
        "single_size/64B",
        "c/larson/2t",
        "http/32B",
        "program/sqlite3",
    ] {
        assert!(
            stdout.lines().any(|line| line.ends_with(case)),
            "`nodalloc bench --list` lacks {case}:\n{stdout}"
        );
    }
    let refused = output(nodalloc_command(nodalloc_binary()).args(["bench", "--only", "nosuch"]));
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(text(&refused.stderr).contains("unknown workload"));
}
