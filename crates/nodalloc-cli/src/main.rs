//! `nodalloc`, the command-line face of the allocator.
//!
//! - `nodalloc run [--bind POLICY] [--limit SIZE] [--stats] -- CMD ARGS…` runs a program with
//!   `libnodalloc.so` preloaded and the matching `NODALLOC_*` options set, by `exec`, so the
//!   program keeps the process (its pid, its exit status, its signals).
//! - `nodalloc topology` prints the machine as the allocator sees it: usable nodes, their CPUs
//!   and memory, distances, the kernel modes that matter, and the binding policy in force.
//! - `nodalloc bench [--full] [...]` runs the allocator showdown (`nodalloc-bench`).
//! - `nodalloc profile top|diff|flamegraph FILE…` reads heap profiles (pprof's format).
//!
//! A face only translates: the topology comes from the core crate's `nodalloc::topology()`,
//! sizes are parsed by the core crate's parser, and the options' meaning stays with the library.

mod profile;

use clap::{Args, Parser, Subcommand};
use nodalloc::raw::CpuSet;
use nodalloc::{OvercommitMode, ThpMode, TierSource, Topology};
use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const LIBRARY_NAME: &str = "libnodalloc.so";

/// Exit status when `nodalloc run` itself fails before the command starts (as `env` does).
const EXIT_RUN_FAILED: u8 = 125;
/// Exit statuses of a command that exists but cannot be executed, or does not exist (shells').
const EXIT_NOT_EXECUTABLE: u8 = 126;
const EXIT_NOT_FOUND: u8 = 127;

#[derive(Parser)]
#[command(
    name = "nodalloc",
    version,
    about = "nodalloc, a NUMA-aware malloc: run programs \
                                                 under it, see the machine as it does"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command with libnodalloc.so preloaded (exit status and signals are the command's).
    Run(RunArgs),
    /// Show the NUMA topology, kernel modes and binding policy nodalloc uses on this machine.
    Topology,
    /// Run the allocator showdown (`nodalloc bench --full` for the long version); every
    /// argument goes to `nodalloc-bench` (see `nodalloc bench --help`).
    #[command(disable_help_flag = true)]
    Bench {
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<OsString>,
    },
    /// Read heap profiles (NODALLOC_PROFILE, `nodalloc run --profile`, or any pprof file):
    /// top functions, the change between two profiles, a flame graph.
    #[command(subcommand)]
    Profile(profile::ProfileCommand),
}

#[derive(Args)]
struct RunArgs {
    /// Thread binding: interleave, saturate, none or map:FILE (sets NODALLOC_BIND).
    #[arg(long, value_name = "POLICY", value_parser = parse_bind)]
    bind: Option<String>,
    /// Hard limit on committed heap bytes, e.g. 512M or 2G (sets NODALLOC_LIMIT).
    #[arg(long, value_name = "SIZE", value_parser = parse_limit)]
    limit: Option<u64>,
    /// Print nodalloc's statistics to stderr when the command exits (sets NODALLOC_STATS=1).
    #[arg(long)]
    stats: bool,
    /// Profile the command's heap and write the profile (pprof's format) to FILE when it
    /// exits; %p in FILE is the process id (sets NODALLOC_PROFILE=1 and NODALLOC_PROFILE_OUT).
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// Mean bytes allocated between two samples of --profile, e.g. 64K (sets
    /// NODALLOC_PROFILE_RATE; 512K by default).
    #[arg(long, value_name = "SIZE", value_parser = parse_rate, requires = "profile")]
    profile_rate: Option<u64>,
    /// The command and its arguments.
    #[arg(
        value_name = "COMMAND",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

fn parse_bind(text: &str) -> Result<String, String> {
    match text {
        "interleave" | "saturate" | "none" => Ok(text.to_string()),
        _ if text.starts_with("map:") && text.len() > 4 => Ok(text.to_string()),
        _ => Err("expected interleave, saturate, none or map:FILE".to_string()),
    }
}

fn parse_limit(text: &str) -> Result<u64, String> {
    nodalloc::raw::parse_size(text.as_bytes())
        .ok_or_else(|| "expected a size such as 4096, 64K, 512M or 2G".to_string())
}

fn parse_rate(text: &str) -> Result<u64, String> {
    match nodalloc::raw::parse_size(text.as_bytes()) {
        Some(rate) if rate > 0 => Ok(rate),
        _ => Err("expected a size of at least 1, such as 64K or 512K".to_string()),
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(args) => run(args),
        Command::Topology => topology(),
        Command::Bench { args } => bench(args),
        Command::Profile(command) => profile::run(command),
    }
}

/// `nodalloc bench ARGS`: runs `nodalloc-bench` from beside this executable or, in a source
/// checkout, through `cargo run --release -p nodalloc-bench` (which builds it first).
fn bench(args: Vec<OsString>) -> ExitCode {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("nodalloc-bench")))
        .filter(|path| path.is_file());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut command = match beside {
        Some(path) => std::process::Command::new(path),
        None if workspace.join("Cargo.toml").is_file() => {
            let mut c = std::process::Command::new(
                std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
            );
            c.current_dir(&workspace).args([
                "run",
                "--release",
                "-p",
                "nodalloc-bench",
                "--bin",
                "nodalloc-bench",
                "--",
            ]);
            c
        }
        None => {
            eprintln!(
                "nodalloc: nodalloc-bench is not beside this program and no source checkout \
                 was found; run `cargo run --release` in the nodalloc repository"
            );
            return ExitCode::from(EXIT_RUN_FAILED);
        }
    };
    let error = command.args(args).exec();
    eprintln!("nodalloc: cannot run the showdown: {error}");
    ExitCode::from(EXIT_NOT_EXECUTABLE)
}

/// Where `libnodalloc.so` is looked for, in order: beside this executable (a cargo target
/// directory, or an install that keeps both together), `../lib` from it (a `prefix/bin` and
/// `prefix/lib` install), then the system library directories.
fn library_candidates() -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join(LIBRARY_NAME));
        if let Some(prefix) = dir.parent() {
            candidates.push(prefix.join("lib").join(LIBRARY_NAME));
        }
    }
    candidates.push(Path::new("/usr/local/lib").join(LIBRARY_NAME));
    candidates.push(Path::new("/usr/lib").join(LIBRARY_NAME));
    candidates
}

/// `LD_PRELOAD` with `library` first; a list that already holds it is left as it is, since
/// loading the library twice would put two allocators in one process.
fn preload_with(library: &Path, existing: Option<&OsStr>) -> OsString {
    let Some(existing) = existing.filter(|value| !value.is_empty()) else {
        return library.as_os_str().to_owned();
    };
    // ld.so separates LD_PRELOAD entries with colons or spaces.
    let already = existing
        .to_string_lossy()
        .split([':', ' '])
        .any(|entry| Path::new(entry) == library);
    if already {
        return existing.to_owned();
    }
    let mut value = library.as_os_str().to_owned();
    value.push(":");
    value.push(existing);
    value
}

fn run(args: RunArgs) -> ExitCode {
    let candidates = library_candidates();
    let Some(library) = candidates.iter().find(|path| path.is_file()) else {
        eprintln!("nodalloc: cannot find {LIBRARY_NAME}; looked in:");
        for candidate in &candidates {
            eprintln!("  {}", candidate.display());
        }
        eprintln!(
            "build it with `cargo build --release -p nodalloc-ffi` and put \
             target/release/{LIBRARY_NAME} next to this program or in one of those places"
        );
        return ExitCode::from(EXIT_RUN_FAILED);
    };
    // ld.so ignores a preload entry it cannot open by a relative path from another directory.
    let library = std::fs::canonicalize(library).unwrap_or_else(|_| library.clone());

    let (program, arguments) = args.command.split_first().expect("clap requires a command");
    let mut command = std::process::Command::new(program);
    command.args(arguments).env(
        "LD_PRELOAD",
        preload_with(&library, std::env::var_os("LD_PRELOAD").as_deref()),
    );
    if let Some(bind) = &args.bind {
        command.env("NODALLOC_BIND", bind);
    }
    if let Some(limit) = args.limit {
        command.env("NODALLOC_LIMIT", limit.to_string());
    }
    if args.stats {
        command.env("NODALLOC_STATS", "1");
    }
    if let Some(path) = &args.profile {
        // The command may change directory: the library takes an absolute path.
        let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
        command
            .env("NODALLOC_PROFILE", "1")
            .env("NODALLOC_PROFILE_OUT", path);
    }
    if let Some(rate) = args.profile_rate {
        command.env("NODALLOC_PROFILE_RATE", rate.to_string());
    }
    // `exec` returns only on failure.
    let error = command.exec();
    eprintln!(
        "nodalloc: cannot run {}: {error}",
        Path::new(program).display()
    );
    ExitCode::from(if error.kind() == std::io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_NOT_EXECUTABLE
    })
}

fn topology() -> ExitCode {
    let Some(topology) = nodalloc::topology() else {
        eprintln!("nodalloc: the allocator could not start (see the warnings above)");
        return ExitCode::FAILURE;
    };
    print!(
        "{}",
        describe(topology, std::env::var("NODALLOC_BIND").ok())
    );
    let shards = nodalloc::stats()
        .nodes()
        .first()
        .map_or(1, |node| node.ring_shards);
    println!(
        "transfer rings: {shards} per size class and node (NODALLOC_RING_SHARDS; automatic: \
         one per 16 CPUs of the largest node)"
    );
    ExitCode::SUCCESS
}

/// The report `nodalloc topology` prints; `bind` is the value of `NODALLOC_BIND`, if set.
fn describe(topology: &Topology, bind: Option<String>) -> String {
    let mut out = String::new();
    let count = topology.node_count();
    let kind = if topology.is_simulated() {
        "simulated (NODALLOC_SIMULATE_NODES; no mbind)"
    } else {
        "from /sys"
    };
    out += &format!("nodes: {count}, {kind}\n");
    for index in 0..count {
        let node = topology.node(index);
        let memory = if node.memory_bytes == 0 {
            "unknown".to_string()
        } else {
            human_bytes(node.memory_bytes)
        };
        out += &format!(
            "  node {index}: os node {}, cpus {} ({}), memory {memory}\n",
            node.os_id,
            cpu_list(&node.cpus),
            node.cpus.count()
        );
    }
    out += "distances:\n";
    out += &format!("  {:>6}", "");
    for to in 0..count {
        out += &format!(" {to:>4}");
    }
    out += "\n";
    for from in 0..count {
        out += &format!("  {from:>6}");
        for to in 0..count {
            out += &format!(" {:>4}", topology.distance(from, to));
        }
        out += "\n";
    }
    out += &format!(
        "process cpus: {} ({})\n",
        cpu_list(topology.process_cpus()),
        topology.process_cpus().count()
    );
    out += &format!(
        "transparent huge pages: {}\n",
        match topology.thp_mode() {
            ThpMode::Always => "always",
            ThpMode::Madvise => "madvise",
            ThpMode::Never => "never",
            ThpMode::Unknown => "unknown (not readable)",
        }
    );
    out += &format!(
        "overcommit: {}\n",
        match topology.overcommit_mode() {
            OvercommitMode::Heuristic => "heuristic (vm.overcommit_memory=0)",
            OvercommitMode::Always => "always (vm.overcommit_memory=1)",
            OvercommitMode::Never => "never (vm.overcommit_memory=2)",
        }
    );
    out += &format!(
        "address space limit (RLIMIT_AS): {}\n",
        match topology.address_space_limit() {
            Some(bytes) => human_bytes(bytes),
            None => "unlimited".to_string(),
        }
    );
    out += &format!("binding: {}\n", describe_binding(bind.as_deref(), count));
    out += &describe_tiers(topology);
    out
}

/// The memory tiers part of the report: how the far nodes were chosen, and per node whether it
/// is near or far, its kernel tier and where its far memory comes from.
fn describe_tiers(topology: &Topology) -> String {
    let source = match topology.tier_source() {
        TierSource::None => "one tier, no far memory (far requests are served near)",
        TierSource::Kernel => "from the kernel's memory tiers",
        TierSource::CpuLess => "one kernel tier: the nodes without CPUs are far",
        TierSource::Option => "from NODALLOC_TIERS",
    };
    let mut out = format!("memory tiers: {source}\n");
    for node in 0..topology.node_count() {
        let tier = topology.kernel_tier_of(node).map_or_else(
            || "no kernel tier".to_string(),
            |id| format!("kernel tier {id}"),
        );
        let role = if topology.is_far(node) {
            "far".to_string()
        } else {
            match topology.far_node_of(node) {
                Some(far) => format!("near, far memory on node {far}"),
                None => "near".to_string(),
            }
        };
        let weight = topology
            .interleave_weight(node)
            .map_or_else(String::new, |weight| {
                format!(", interleave weight {weight}")
            });
        out += &format!("  node {node}: {role} ({tier}{weight})\n");
    }
    out
}

/// The policy `NODALLOC_BIND` selects, as the allocator reads it (a bad value means the default,
/// and the allocator has already warned about it).
fn describe_binding(bind: Option<&str>, nodes: usize) -> String {
    let (policy, meaning) = match bind.map(str::trim) {
        None | Some("interleave") => ("interleave", "thread i on node i mod N".to_string()),
        Some("saturate") => ("saturate", "fill a node's CPUs before the next".to_string()),
        Some("none") => ("none", "threads follow the scheduler".to_string()),
        Some(map) if map.starts_with("map:") && map.len() > 4 => (
            map,
            format!("threads placed by the node list in {}", &map[4..]),
        ),
        Some(other) => (
            "interleave",
            format!("NODALLOC_BIND={other} is not valid, so the default"),
        ),
    };
    if nodes == 1 {
        format!("{policy} (no binding on one node)")
    } else {
        format!("{policy} ({meaning})")
    }
}

/// A CPU set in the kernel's list format: `0-3,8,10-11`.
fn cpu_list(cpus: &CpuSet) -> String {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for cpu in cpus.iter() {
        match ranges.last_mut() {
            Some((_, end)) if *end + 1 == cpu => *end = cpu,
            _ => ranges.push((cpu, cpu)),
        }
    }
    if ranges.is_empty() {
        return "none".to_string();
    }
    ranges
        .iter()
        .map(|&(start, end)| {
            if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(cpus: &[usize]) -> CpuSet {
        let mut set = CpuSet::new();
        for &cpu in cpus {
            set.insert(cpu);
        }
        set
    }

    #[test]
    fn cpu_list_joins_consecutive_cpus_into_ranges() {
        assert_eq!(cpu_list(&set(&[0, 1, 2, 3, 8, 10, 11])), "0-3,8,10-11");
        assert_eq!(cpu_list(&set(&[5])), "5");
        assert_eq!(cpu_list(&set(&[])), "none");
    }

    #[test]
    fn preload_puts_the_library_first_and_never_twice() {
        let library = Path::new("/opt/lib/libnodalloc.so");
        assert_eq!(preload_with(library, None), "/opt/lib/libnodalloc.so");
        assert_eq!(
            preload_with(library, Some(OsStr::new(""))),
            "/opt/lib/libnodalloc.so"
        );
        assert_eq!(
            preload_with(library, Some(OsStr::new("/x/libother.so"))),
            "/opt/lib/libnodalloc.so:/x/libother.so"
        );
        assert_eq!(
            preload_with(library, Some(OsStr::new("/x/a.so /opt/lib/libnodalloc.so"))),
            "/x/a.so /opt/lib/libnodalloc.so"
        );
    }

    #[test]
    fn binding_on_one_node_is_reported_as_none_happening() {
        assert_eq!(
            describe_binding(None, 1),
            "interleave (no binding on one node)"
        );
        assert_eq!(
            describe_binding(Some("saturate"), 2),
            "saturate (fill a node's CPUs before the next)"
        );
        assert!(describe_binding(Some("bogus"), 2).contains("not valid"));
    }

    #[test]
    fn sizes_are_printed_in_binary_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
    }

    #[test]
    fn run_options_accept_the_documented_forms_only() {
        assert!(parse_bind("map:/tmp/nodes").is_ok());
        assert!(parse_bind("map:").is_err());
        assert!(parse_bind("spread").is_err());
        assert_eq!(parse_limit("64M"), Ok(64 << 20));
        assert!(parse_limit("lots").is_err());
        assert_eq!(parse_rate("64K"), Ok(64 << 10));
        assert!(parse_rate("0").is_err());
    }
}
