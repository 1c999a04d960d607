//! `nodalloc-bench`: the allocator showdown.
//!
//! Four suites, every allocator side by side in one run:
//! - `rust`: in-process workloads, each allocator called through its own
//!   instance, interleaved (each repetition visits the allocators in a rotated
//!   order, so clock or thermal drift and heap history affect all alike);
//!   peak RSS in child processes (the binary re-executes itself with the
//!   hidden `--rss-child ALLOC CASE` flag);
//! - `c`: the classic suite (`c/classic.c`) under `LD_PRELOAD`, with glibc,
//!   libnodalloc.so and the peers' Debian libraries (tcmalloc included);
//! - `http`: an axum server and its client in one process per allocator;
//! - `program`: sqlite3 and python3 under `LD_PRELOAD`.
//!
//! Ends with one table (each allocator's time and RSS as ratios to the best,
//! per case), the targets, and where `report.md`, `results.csv` and the plots
//! were written.

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use nodalloc_bench::csuite::{self, ClassicCase};
use nodalloc_bench::preload::{self, PreloadAlloc};
use nodalloc_bench::report::{self, Better, Record, Report, Table};
use nodalloc_bench::suite::{cases, Case, Kind, Mode, RunResult, SuiteConfig, GROUPS};
use nodalloc_bench::{with_allocator, workloads, Allocator};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

const ABOUT: &str = "Side-by-side allocator showdown: nodalloc vs glibc, mimalloc, jemalloc, \
                     snmalloc, tcmalloc and numalloc";

#[derive(Parser, Debug)]
#[command(
    name = "nodalloc-bench",
    about = ABOUT,
    after_help = "Suites for --only: rust, c, http, program. Workload groups: single_size, bulk, \
                  threads, producer_consumer, realloc_growth, mixed, live_cliff, rss_payload, \
                  hoard_numa (rust); larson, xmalloc, cache_thrash, cache_scratch, mstress, \
                  glibc_simple, glibc_thread, malloc_large, frag, latency, rss_time (c); http; \
                  sqlite3, python3 (program); callgrind (fast-path instruction counts, run by default when \
                  valgrind is installed). Or an exact case name, see --list.\n\n\
                  Allocators: nodalloc, glibc (alias system), mimalloc, jemalloc, snmalloc, \
                  numalloc (Rust crates), tcmalloc and nodalloc-secure (LD_PRELOAD suites only)."
)]
struct Cli {
    /// Run only these suites, workload groups or case names (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "WORKLOAD")]
    only: Vec<String>,
    /// Allocators to compare (comma-separated); default: all that are available.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    allocators: Vec<String>,
    /// Thread counts of the multi-threaded workloads (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "N")]
    threads: Vec<usize>,
    /// Print the CSV of raw runs to stdout instead of the tables.
    #[arg(long)]
    csv: bool,
    /// Timed runs per allocator and case; the median is reported.
    /// Default: 5 (quick) for the Rust suite, 3 for the others; 7 (full).
    #[arg(long, value_name = "N")]
    repeat: Option<usize>,
    /// Quick parameters (the default): the whole showdown in about 3 minutes.
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// Larger parameters and more thread counts.
    #[arg(long)]
    full: bool,
    /// Directory for report.md, results.csv and the plots.
    /// Default: target/nodalloc-bench.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Stop repeating an allocator on a Rust case once its runs there have
    /// taken this many seconds (it keeps at least one run); keeps one
    /// pathological allocator from dominating the wall time. Default: 2
    /// (quick), 20 (full).
    #[arg(long, value_name = "SECONDS")]
    cell_budget: Option<f64>,
    /// Skip the peak-RSS child processes of the Rust suite.
    #[arg(long)]
    no_rss: bool,
    /// Skip the fast-path instruction counts (run under valgrind when it is
    /// installed).
    #[arg(long)]
    no_callgrind: bool,
    /// List the cases and exit.
    #[arg(long)]
    list: bool,
    /// Internal: tiny parameters, for the tests of the harness itself.
    #[arg(long, hide = true, conflicts_with = "full")]
    tiny: bool,
    /// Internal: run one case with one allocator, print its peak RSS.
    #[arg(long, num_args = 2, value_names = ["ALLOC", "CASE"], hide = true)]
    rss_child: Option<Vec<String>>,
}

impl Cli {
    fn mode(&self) -> Mode {
        if self.tiny {
            Mode::Tiny
        } else if self.full {
            Mode::Full
        } else {
            Mode::Quick
        }
    }

    fn config(&self) -> SuiteConfig {
        SuiteConfig {
            mode: self.mode(),
            threads: (!self.threads.is_empty()).then(|| self.threads.clone()),
        }
    }

    fn repeat(&self, suite: &str) -> usize {
        match (self.repeat, self.full, suite) {
            (Some(n), ..) => n,
            (None, true, _) => 7,
            (None, false, "rust") => 5,
            (None, false, _) => 3,
        }
    }

    /// Whether `--only` selects something with these names.
    fn selects(&self, names: &[&str]) -> bool {
        self.only.is_empty() || self.only.iter().any(|w| names.contains(&w.as_str()))
    }
}

/// The Rust allocators' names in the report: the system allocator is glibc's.
fn report_name(a: Allocator) -> &'static str {
    match a {
        Allocator::System => "glibc",
        other => other.name(),
    }
}

/// Every allocator name the command line accepts.
const PRELOAD_ONLY: [&str; 2] = ["tcmalloc", "nodalloc-secure"];

fn canonical(name: &str) -> String {
    match name.trim().to_ascii_lowercase().as_str() {
        "system" => "glibc".into(),
        other => other.into(),
    }
}

/// The selection of `--allocators`, validated; empty means all.
fn allocator_filter(names: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for n in names {
        let c = canonical(n);
        let rust = Allocator::ALL.iter().find(|a| report_name(**a) == c);
        if rust.is_none() && !PRELOAD_ONLY.contains(&c.as_str()) {
            let mut known: Vec<&str> = Allocator::ALL.iter().map(|a| report_name(*a)).collect();
            known.extend(PRELOAD_ONLY);
            return Err(format!(
                "unknown allocator {n:?}; known: {}",
                known.join(", ")
            ));
        }
        if let Some(a) = rust {
            if !a.is_available() {
                return Err(format!("{a} was not built (cargo feature `{a}` is off)"));
            }
        }
        if !out.contains(&c) {
            out.push(c);
        }
    }
    Ok(out)
}

fn wanted(filter: &[String], name: &str) -> bool {
    filter.is_empty() || filter.iter().any(|f| f == name)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let cfg = cli.config();
    if let Some(args) = &cli.rss_child {
        return rss_child(&args[0], &args[1], &cfg);
    }
    if cli.threads.contains(&0) {
        eprintln!("--threads: thread counts must be at least 1");
        return ExitCode::from(2);
    }
    if cli.repeat == Some(0) {
        eprintln!("--repeat must be at least 1");
        return ExitCode::from(2);
    }
    let filter = match allocator_filter(&cli.allocators) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("--allocators: {e}");
            return ExitCode::from(2);
        }
    };
    let plan = Plan::new(&cfg);
    if cli.list {
        for (suite, group, name) in plan.listing() {
            println!("{suite:<8} {group:<18} {name}");
        }
        return ExitCode::SUCCESS;
    }
    for w in &cli.only {
        if !plan.knows(w) {
            eprintln!(
                "--only: unknown workload {w:?}; see --help for the groups, --list for the cases"
            );
            return ExitCode::from(2);
        }
    }
    let plan = plan.selected(&cli);
    if plan.is_empty() && !cli.only.iter().any(|w| w == "callgrind") {
        eprintln!("--only selected nothing");
        return ExitCode::from(2);
    }
    showdown(&cli, &plan, &filter)
}

/// Every case of every suite in this mode, and the selection.
struct Plan {
    rust: Vec<Case>,
    classic: Vec<ClassicCase>,
    profiles: Vec<&'static str>,
    http: Vec<u64>,
    programs: Vec<&'static str>,
}

/// Response sizes of the HTTP suite.
const HTTP_SIZES: [u64; 4] = [32, 256, 16 << 10, 64 << 10];

fn http_case(size: u64) -> String {
    format!("http/{}", nodalloc_bench::suite::size_label(size as usize))
}

impl Plan {
    fn new(cfg: &SuiteConfig) -> Plan {
        Plan {
            rust: cases(cfg),
            classic: csuite::classic_cases(cfg.mode, cfg.threads.as_deref()),
            profiles: csuite::PROFILES.to_vec(),
            http: HTTP_SIZES.to_vec(),
            programs: csuite::PROGRAMS.to_vec(),
        }
    }

    fn listing(&self) -> Vec<(&'static str, String, String)> {
        let mut out = Vec::new();
        for c in &self.rust {
            out.push(("rust", c.group.to_string(), c.name.clone()));
        }
        for c in &self.classic {
            out.push(("c", c.group(), c.name()));
        }
        for p in &self.profiles {
            out.push(("c", p.replace('-', "_"), format!("c/{p}")));
        }
        for &s in &self.http {
            out.push(("http", "http".into(), http_case(s)));
        }
        for p in &self.programs {
            out.push(("program", p.to_string(), format!("program/{p}")));
        }
        out
    }

    fn knows(&self, w: &str) -> bool {
        ["rust", "c", "http", "program", "callgrind"].contains(&w)
            || GROUPS.contains(&w)
            || self
                .listing()
                .iter()
                .any(|(_, group, name)| group == w || name == w)
    }

    fn selected(self, cli: &Cli) -> Plan {
        let sel = |suite: &str, group: &str, name: &str| cli.selects(&[suite, group, name]);
        Plan {
            rust: self
                .rust
                .into_iter()
                .filter(|c| sel("rust", c.group, &c.name))
                .collect(),
            classic: self
                .classic
                .into_iter()
                .filter(|c| sel("c", &c.group(), &c.name()))
                .collect(),
            profiles: self
                .profiles
                .into_iter()
                .filter(|p| sel("c", &p.replace('-', "_"), &format!("c/{p}")))
                .collect(),
            http: self
                .http
                .into_iter()
                .filter(|&s| sel("http", "http", &http_case(s)))
                .collect(),
            programs: self
                .programs
                .into_iter()
                .filter(|p| sel("program", p, &format!("program/{p}")))
                .collect(),
        }
    }

    fn is_empty(&self) -> bool {
        self.steps() == 0
    }

    fn steps(&self) -> usize {
        self.rust.len()
            + self.classic.len()
            + self.profiles.len()
            + usize::from(!self.http.is_empty())
            + self.programs.len()
    }

    fn needs_preload(&self) -> bool {
        !self.classic.is_empty() || !self.profiles.is_empty() || !self.programs.is_empty()
    }
}

/// Peak resident set size of this process so far, in KiB, per getrusage.
///
/// Linux carries `ru_maxrss` across `execve` (the kernel folds the pre-exec
/// address space's high-water mark into it), so in a child spawned by a parent
/// that is already large it starts at the parent's peak and a smaller workload
/// never moves it. That is why the child measures with [`hwm_kib`] and reports
/// this only alongside.
fn max_rss_kib() -> u64 {
    // SAFETY: `rusage` is plain old data for which all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`; RUSAGE_SELF is always valid.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage failed");
    // Linux reports ru_maxrss in KiB.
    ru.ru_maxrss.max(0) as u64
}

/// `VmHWM` from `/proc/self/status`, in KiB: the high-water mark of this
/// address space only, which starts afresh at `execve`.
fn hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}

/// Child side of the RSS measurement: one case, one allocator, fresh process.
fn rss_child(alloc: &str, case_name: &str, cfg: &SuiteConfig) -> ExitCode {
    let Some(alloc) = Allocator::from_name(alloc).filter(|a| a.is_available()) else {
        eprintln!("rss-child: unknown or unavailable allocator {alloc:?}");
        return ExitCode::from(2);
    };
    let Some(case) = cases(cfg).into_iter().find(|c| c.name == case_name) else {
        eprintln!("rss-child: unknown case {case_name:?}");
        return ExitCode::from(2);
    };
    // Raise the high-water mark by the harness's own bookkeeping first, so the
    // delta below is (close to) what the allocator under test added.
    let book = case.bookkeeping_bytes();
    if book > 0 {
        let mut v = vec![0u8; book];
        for i in (0..book).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&mut v);
    }
    let base = max_rss_kib();
    let base_hwm = hwm_kib();
    let r = case.run(alloc);
    let peak = max_rss_kib();
    let maxrss_delta = peak.saturating_sub(base);
    // Without /proc, fall back to getrusage, right when run from a small parent.
    let delta = match (base_hwm, hwm_kib()) {
        (Some(b), Some(p)) => p.saturating_sub(b),
        _ => maxrss_delta,
    };
    println!(
        "rss_delta_kib={delta} maxrss_delta_kib={maxrss_delta} payload_bytes={} elapsed_ns={} \
         huge_kib={}",
        r.payload_bytes.unwrap_or(0),
        r.elapsed.as_nanos(),
        r.huge_kib.unwrap_or(0)
    );
    ExitCode::SUCCESS
}

#[derive(Clone, Debug)]
struct RssOutcome {
    delta_kib: u64,
    payload_bytes: u64,
    /// KiB on transparent huge pages at the peak (0 where not measured).
    huge_kib: u64,
}

/// Parent side: re-executes this binary for one (allocator, case).
fn measure_rss(cli: &Cli, alloc: Allocator, case: &Case) -> Result<RssOutcome, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--rss-child").arg(alloc.name()).arg(&case.name);
    if cli.full {
        cmd.arg("--full");
    }
    if cli.tiny {
        cmd.arg("--tiny");
    }
    if !cli.threads.is_empty() {
        let t: Vec<String> = cli.threads.iter().map(|t| t.to_string()).collect();
        cmd.arg("--threads").arg(t.join(","));
    }
    let out = cmd.output().map_err(|e| format!("spawn: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "child {}: {}",
            out.status,
            err.lines().last().unwrap_or("")
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |key: &str| -> Result<u64, String> {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("child printed no {key}: {text:?}"))
    };
    Ok(RssOutcome {
        delta_kib: field("rss_delta_kib")?,
        payload_bytes: field("payload_bytes")?,
        huge_kib: field("huge_kib").unwrap_or(0),
    })
}

/// Runs one Rust case with every allocator, interleaved; one record each.
/// The live-object cliff and the RSS per payload byte go to `extra` rows.
fn rust_case(cli: &Cli, case: &Case, allocs: &[Allocator], extra: &mut Extra) -> Vec<Record> {
    let repeat = cli.repeat("rust");
    let budget = Duration::from_secs_f64(
        cli.cell_budget
            .unwrap_or(if cli.full { 20.0 } else { 2.0 })
            .max(0.0),
    );
    let mut runs: Vec<Vec<RunResult>> = vec![Vec::with_capacity(repeat); allocs.len()];
    let mut spent = vec![Duration::ZERO; allocs.len()];
    for rep in 0..repeat {
        for k in 0..allocs.len() {
            let i = (k + rep) % allocs.len();
            if !runs[i].is_empty() && spent[i] >= budget {
                continue;
            }
            let r = case.run(allocs[i]);
            spent[i] += r.elapsed;
            runs[i].push(r);
        }
    }
    allocs
        .iter()
        .zip(&runs)
        .map(|(&a, runs)| {
            let mut r = Record::new(
                "rust",
                case.group,
                &case.name,
                report_name(a),
                Better::Lower,
            );
            r.unit = match case.kind {
                Kind::Realloc { .. } => "ns/realloc".into(),
                _ => "ns/op".into(),
            };
            r.ops = runs[0].ops;
            r.samples = runs
                .iter()
                .map(|x| x.elapsed.as_nanos() as f64 / x.ops.max(1) as f64)
                .collect();
            r.x = match case.kind {
                Kind::Single { size, .. } => Some(size as f64),
                Kind::Threads { t, .. } | Kind::Mixed { t, .. } | Kind::HoardNuma { t, .. } => {
                    Some(t as f64)
                }
                _ => None,
            };
            let med = |f: fn(&RunResult) -> Option<f64>| {
                report::median(&runs.iter().filter_map(f).collect::<Vec<_>>())
            };
            if let (Some(first), Some(last)) = (med(|x| x.first_ns), med(|x| x.last_ns)) {
                extra.cliff.push(vec![
                    report_name(a).into(),
                    format!("{first:.1}"),
                    format!("{last:.1}"),
                    format!("{:.2}", last / first),
                ]);
            }
            if case.rss && !cli.no_rss {
                match measure_rss(cli, a, case) {
                    Ok(o) => {
                        r.peak_rss_kib = Some(o.delta_kib.max(1));
                        if matches!(case.kind, Kind::RssPayload { .. }) && o.payload_bytes > 0 {
                            extra.payload.push(vec![
                                case.name.clone(),
                                report_name(a).into(),
                                format!("{:.1} MiB", o.delta_kib as f64 / 1024.0),
                                format!(
                                    "{:.3}",
                                    o.delta_kib as f64 * 1024.0 / o.payload_bytes as f64
                                ),
                                format!("{:.1} MiB", o.huge_kib as f64 / 1024.0),
                            ]);
                        }
                    }
                    Err(e) => r.failure = Some(format!("RSS child: {e}")),
                }
            }
            r
        })
        .collect()
}

/// Runs the HTTP suite: one process per (size, allocator, repetition).
fn http_suite(cli: &Cli, sizes: &[u64], allocs: &[Allocator], rep: &mut Report, bar: &ProgressBar) {
    let bin =
        match preload::build_artifact(&["-p", "nodalloc-bench", "--bin", "http"], "http", false) {
            Ok(b) => b,
            Err(e) => {
                rep.skipped.push(format!("http: {e}"));
                return;
            }
        };
    let repeat = cli.repeat("http");
    let mut after = Table {
        title: "HTTP server RSS after load".into(),
        note: "Resident set of the server process after all requests, server still up \
               (median of the runs)."
            .into(),
        header: vec!["allocator".into()],
        rows: Vec::new(),
    };
    let mut after_kib: Vec<Vec<String>> = allocs
        .iter()
        .map(|a| vec![report_name(*a).to_string()])
        .collect();
    for &size in sizes {
        bar.set_message(http_case(size));
        let requests: u64 = match (cli.mode(), size) {
            (Mode::Tiny, _) => 50,
            (Mode::Full, s) if s >= 16 << 10 => 40_000,
            (Mode::Full, _) => 100_000,
            (_, s) if s >= 16 << 10 => 2_000,
            _ => 4_000,
        };
        after
            .header
            .push(nodalloc_bench::suite::size_label(size as usize));
        let mut recs: Vec<Record> = allocs
            .iter()
            .map(|a| {
                let mut r = Record::new(
                    "http",
                    "http",
                    &http_case(size),
                    report_name(*a),
                    Better::Higher,
                );
                r.unit = "req/s".into();
                r.ops = requests;
                r.x = Some(size as f64);
                r
            })
            .collect();
        let mut hwm = vec![Vec::new(); allocs.len()];
        let mut rss_after = vec![Vec::new(); allocs.len()];
        for k in 0..repeat {
            for j in 0..allocs.len() {
                let i = (j + k) % allocs.len();
                if recs[i].failure.is_some() {
                    continue;
                }
                let mut cmd = Command::new(&bin);
                cmd.arg(size.to_string())
                    .arg(requests.to_string())
                    .arg("2")
                    .env("NODALLOC_BENCH_ALLOCATOR", allocs[i].name());
                let none = PreloadAlloc {
                    name: report_name(allocs[i]).into(),
                    lib: None,
                    env: Vec::new(),
                };
                let res = preload::run_preloaded(
                    cmd,
                    &none,
                    None,
                    &std::env::temp_dir(),
                    Duration::from_secs(300),
                )
                .and_then(|run| {
                    let f = preload::result_fields(&run.stdout)?;
                    let ns: f64 = preload::field(&f, "elapsed_ns")?;
                    let n: f64 = preload::field(&f, "requests")?;
                    let h: f64 = preload::field(&f, "hwm_kib")?;
                    let a: f64 = preload::field(&f, "rss_after_kib")?;
                    Ok((n / (ns / 1e9), h, a))
                });
                match res {
                    Ok((rps, h, a)) => {
                        recs[i].samples.push(rps);
                        hwm[i].push(h);
                        rss_after[i].push(a);
                    }
                    Err(e) => {
                        recs[i].samples.clear();
                        recs[i].failure = Some(e);
                    }
                }
            }
        }
        for i in 0..allocs.len() {
            recs[i].peak_rss_kib = report::median(&hwm[i]).map(|v| v as u64);
            after_kib[i].push(
                report::median(&rss_after[i])
                    .map_or("–".into(), |v| format!("{:.1} MiB", v / 1024.0)),
            );
        }
        rep.records.extend(recs);
    }
    after.rows = after_kib;
    rep.tables.push(after);
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn machine() -> Vec<String> {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .map_or("?".into(), |k| format!("{:.1} GiB", k / 1024.0 / 1024.0));
    let nodes = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.starts_with("node") && n[4..].parse::<u32>().is_ok()
                })
                .count()
        })
        .unwrap_or(0)
        .max(1);
    let git = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(preload::workspace_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let date = Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d %H:%M UTC")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    vec![
        format!("machine: {cpus} CPUs ({model}), {mem}, {nodes} NUMA node(s)"),
        format!(
            "kernel {}, transparent huge pages: {}",
            read_trim("/proc/sys/kernel/osrelease").unwrap_or_default(),
            read_trim("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default()
        ),
        format!(
            "nodalloc {} at commit {}, {}",
            env!("CARGO_PKG_VERSION"),
            git.unwrap_or_else(|| "?".into()),
            date.unwrap_or_default()
        ),
    ]
}

/// The closing table: per case, nodalloc's rank and every allocator's time
/// ratio (and RSS ratio where measured).
fn matrix(rep: &Report) -> String {
    let cases = rep.summarize();
    let mut allocs: Vec<String> = Vec::new();
    for r in &rep.records {
        if !allocs.contains(&r.allocator) {
            allocs.push(r.allocator.clone());
        }
    }
    let mut header = vec!["case".to_string(), "rank".to_string()];
    header.extend(allocs.iter().cloned());
    let rows: Vec<Vec<String>> = cases
        .iter()
        .map(|c| {
            let ranked = c.rows.iter().filter(|r| r.rank.is_some()).count();
            let mut row = vec![
                c.case.clone(),
                c.row(report::SUBJECT)
                    .and_then(|r| r.rank)
                    .map_or("–".into(), |k| format!("{k}/{ranked}")),
            ];
            for a in &allocs {
                row.push(match c.row(a) {
                    None => "".into(),
                    Some(r) if r.failure.is_some() => "failed".into(),
                    Some(r) => {
                        let t = r.ratio.map_or("–".into(), |x| {
                            format!("{}{x:.2}", if r.within_noise { "~" } else { "" })
                        });
                        match r.rss_ratio {
                            Some(m) => format!("{t} / {m:.2}"),
                            None => t,
                        }
                    }
                });
            }
            row
        })
        .collect();
    let h: Vec<&str> = header.iter().map(String::as_str).collect();
    report::markdown_table(&h, &rows)
}

fn showdown(cli: &Cli, plan: &Plan, filter: &[String]) -> ExitCode {
    let started = Instant::now();
    let mode = cli.mode();
    let rust_allocs: Vec<Allocator> = Allocator::available()
        .into_iter()
        .filter(|a| wanted(filter, report_name(*a)))
        .collect();
    let mut rep = Report {
        title: format!(
            "nodalloc showdown ({} mode)",
            match mode {
                Mode::Tiny => "tiny",
                Mode::Quick => "quick",
                Mode::Full => "full",
            }
        ),
        command: std::iter::once("nodalloc-bench".to_string())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        machine: machine(),
        ..Report::default()
    };
    if !Allocator::Numalloc.is_available() && wanted(filter, "numalloc") {
        rep.skipped
            .push("numalloc: not built (cargo feature `numalloc` off)".into());
    }
    let bar = ProgressBar::new(plan.steps() as u64 + 1);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:32}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );

    // First use of an allocator pays one-time setup (arena creation, TLS,
    // region reservation); do it outside every measurement.
    if !plan.rust.is_empty() {
        bar.set_message("warm-up");
        for &a in &rust_allocs {
            with_allocator!(a, |x| {
                workloads::single_size(x, 64, 1000);
                workloads::single_size(x, 4096, 100);
                workloads::threads(x, 2, 1000);
            });
        }
    }
    let mut extra = Extra::default();
    for case in &plan.rust {
        bar.set_message(case.name.clone());
        rep.records
            .extend(rust_case(cli, case, &rust_allocs, &mut extra));
        bar.inc(1);
    }
    rust_tables(&mut rep, extra);

    let out_dir = cli.out.clone().unwrap_or_else(default_out_dir);
    let wants_callgrind =
        !cli.no_callgrind && (cli.only.is_empty() || cli.only.iter().any(|w| w == "callgrind"));
    // The libraries to preload, found (and libnodalloc.so built) once for every suite using them.
    let mut libraries = Vec::new();
    if plan.needs_preload() || wants_callgrind {
        bar.set_message("building libnodalloc.so");
        let (found, skipped) = preload::contenders(preload::nodalloc_lib());
        rep.skipped.extend(skipped);
        libraries = found;
    }
    if plan.needs_preload() {
        bar.set_message("building the C programs");
        let mut allocs = libraries.clone();
        if let Some(n) = allocs.iter().find(|a| a.name == "nodalloc").cloned() {
            if secure_mode_available() {
                allocs.push(PreloadAlloc {
                    name: "nodalloc-secure".into(),
                    env: vec![("NODALLOC_SECURE".into(), "1".into())],
                    ..n
                });
            }
        }
        allocs.retain(|a| wanted(filter, &a.name));
        match csuite::build_tools(&out_dir.join("bin")) {
            Err(e) => {
                rep.skipped.push(format!("C suites: {e}"));
                bar.inc((plan.classic.len() + plan.profiles.len() + plan.programs.len()) as u64);
            }
            Ok(tools) => {
                if tools.probe.is_none() {
                    rep.skipped
                        .push("peak RSS of C programs: the probe library did not build".into());
                }
                for case in &plan.classic {
                    bar.set_message(case.name());
                    rep.records.extend(csuite::run_classic(
                        &tools,
                        case,
                        &allocs,
                        mode,
                        cli.repeat("c"),
                    ));
                    bar.inc(1);
                }
                for p in &plan.profiles {
                    bar.set_message(format!("c/{p}"));
                    match *p {
                        "frag" => rep.tables.push(csuite::run_frag(&tools, &allocs, mode)),
                        "latency" => {
                            let t = cli.threads.first().copied().unwrap_or(2);
                            let (s, t) = csuite::run_latency(&tools, &allocs, mode, t);
                            rep.series.extend(s);
                            rep.tables.push(t);
                        }
                        _ => {
                            let (s, t) = csuite::run_rss_time(&tools, &allocs, mode);
                            rep.series.extend(s);
                            rep.tables.push(t);
                        }
                    }
                    bar.inc(1);
                }
                for p in &plan.programs {
                    bar.set_message(format!("program/{p}"));
                    match csuite::run_program(&tools, p, &allocs, mode, cli.repeat("program")) {
                        Ok(r) => rep.records.extend(r),
                        Err(e) => rep.skipped.push(format!("program/{p}: {e}")),
                    }
                    bar.inc(1);
                }
            }
        }
    }
    if !plan.http.is_empty() {
        http_suite(cli, &plan.http, &rust_allocs, &mut rep, &bar);
        bar.inc(1);
    }
    if wants_callgrind {
        bar.set_message("callgrind: fast-path instructions");
        callgrind_table(&mut rep, &rust_allocs, &libraries, filter, &out_dir);
    }
    bar.set_message("writing the report");
    let written = rep.write(&out_dir);
    bar.finish_and_clear();

    if cli.csv {
        print!("{}", rep.csv());
    } else {
        println!("# {}\n", rep.title);
        println!(
            "Each cell: time (or 1/throughput) relative to the best allocator of the case, \
             then peak RSS relative to the smallest where measured; `~` = inside the noise \
             (run ranges overlap with the best's). rank = nodalloc's place.\n"
        );
        print!("{}", matrix(&rep));
        println!("\n## Targets\n");
        print!("{}", rep.targets_table());
        if !rep.skipped.is_empty() {
            println!("\nSkipped:");
            for s in &rep.skipped {
                println!("- {s}");
            }
        }
    }
    let status = match &written {
        Ok(paths) => {
            eprintln!("\nreport written:");
            for p in paths {
                eprintln!("  {}", p.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("\ncould not write the report to {}: {e}", out_dir.display());
            ExitCode::FAILURE
        }
    };
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
    status
}

/// `target/nodalloc-bench`, next to the running binary's profile directory.
fn default_out_dir() -> PathBuf {
    preload::profile_dir()
        .ok()
        .and_then(|p| p.parent().map(|t| t.join("nodalloc-bench")))
        .unwrap_or_else(|| PathBuf::from("target/nodalloc-bench"))
}

/// Whether this nodalloc knows `NODALLOC_SECURE` (then the C suites also run
/// it in secure mode).
fn secure_mode_available() -> bool {
    nodalloc::options()
        .iter()
        .any(|o| o.name == "NODALLOC_SECURE")
}

/// Rows of the Rust suite's extra tables.
#[derive(Default)]
struct Extra {
    cliff: Vec<Vec<String>>,
    payload: Vec<Vec<String>>,
}

/// The Rust suite's extra tables: the live-object cliff and RSS per payload byte.
fn rust_tables(rep: &mut Report, extra: Extra) {
    if !extra.cliff.is_empty() {
        rep.tables.push(Table {
            title: "Live-object cliff (Rust, `live_cliff`)".into(),
            note: "ns per allocation over the first and the last 10 % of 2.3 M live 64 B \
                   objects: a ratio well above 1 means allocation slows as the heap grows."
                .into(),
            header: ["allocator", "first 10 % ns", "last 10 % ns", "last/first"]
                .map(String::from)
                .to_vec(),
            rows: extra.cliff,
        });
    }
    if !extra.payload.is_empty() {
        rep.tables.push(Table {
            title: "RSS per payload byte (Rust, `rss_payload`)".into(),
            note: "Peak RSS growth of a fresh process holding 100 MB (quick; 200 MB full) of objects just above a \
                   power of two, divided by the payload; and how much of the process sits on transparent huge \
                   pages at that peak (AnonHugePages)."
                .into(),
            header: ["case", "allocator", "peak RSS Δ", "RSS/payload", "on huge pages"]
                .map(String::from)
                .to_vec(),
            rows: extra.payload,
        });
    }
}

/// Pairs counted per allocator under callgrind.
const CALLGRIND_PAIRS: u64 = 100_000;

/// Instructions per 64 B alloc+free pair, by callgrind: the Rust face of each
/// in-process contender (`fastpath` binary) and the C face of each library
/// (`pairs` under LD_PRELOAD). Deterministic where timings are not.
fn callgrind_table(
    rep: &mut Report,
    allocs: &[Allocator],
    libraries: &[PreloadAlloc],
    filter: &[String],
    out: &Path,
) {
    let has_valgrind = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_valgrind {
        rep.skipped
            .push("callgrind counts: valgrind not installed".into());
        return;
    }
    let scratch = out.join("bin");
    let mut rows = Vec::new();
    match preload::build_artifact(
        &["-p", "nodalloc-bench", "--bin", "fastpath"],
        "fastpath",
        false,
    ) {
        Ok(bin) => {
            for &a in allocs {
                // snmalloc's default pagemap reservation fails under valgrind;
                // crates/nodalloc-bench/callgrind.sh builds its workaround.
                if a == Allocator::Snmalloc {
                    continue;
                }
                let make = |n: u64| {
                    let mut c = Command::new(&bin);
                    c.args([a.name(), "64", &n.to_string()]);
                    c
                };
                rows.push(vec![
                    report_name(a).to_string(),
                    "Rust (GlobalAlloc)".into(),
                    csuite::per_pair(make, CALLGRIND_PAIRS, &scratch)
                        .map_or_else(|e| format!("failed: {e}"), |v| format!("{v:.1}")),
                ]);
            }
        }
        Err(e) => rep.skipped.push(format!("callgrind, Rust face: {e}")),
    }
    let pairs = preload::compile_c(csuite::PAIRS_C, "pairs", &scratch, false);
    match pairs {
        Ok(pairs) => {
            for a in libraries.iter().filter(|a| wanted(filter, &a.name)) {
                let make = |n: u64| {
                    let mut c = Command::new(&pairs);
                    c.args(["64", &n.to_string()]);
                    match &a.lib {
                        Some(lib) => c.env("LD_PRELOAD", lib),
                        None => c.env_remove("LD_PRELOAD"),
                    };
                    c
                };
                rows.push(vec![
                    a.name.clone(),
                    "C (LD_PRELOAD)".into(),
                    csuite::per_pair(make, CALLGRIND_PAIRS, &scratch)
                        .map_or_else(|e| format!("failed: {e}"), |v| format!("{v:.1}")),
                ]);
            }
        }
        Err(e) => rep.skipped.push(format!("callgrind, C face: {e}")),
    }
    rep.tables.push(Table {
        title: "Fast path: instructions per 64 B malloc+free pair (callgrind)".into(),
        note: format!(
            "valgrind --tool=callgrind, (Ir({CALLGRIND_PAIRS}) - Ir(0)) / {CALLGRIND_PAIRS}; \
             includes the loop (about 6 instructions). snmalloc needs its valgrind build: \
             crates/nodalloc-bench/callgrind.sh."
        ),
        header: ["allocator", "face", "instructions/pair"]
            .map(String::from)
            .to_vec(),
        rows,
    });
}
