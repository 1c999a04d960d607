//! `nodalloc-bench`: the allocator showdown.
//!
//! Runs every case with every allocator in one process, interleaved (each
//! repetition visits the allocators in a rotated order, so clock or thermal
//! drift and heap history affect all of them alike), and prints per case the
//! median, the spread, the ratio to the best and nodalloc's rank. Peak RSS
//! cannot be attributed to one allocator inside a shared process, so for the
//! cases where it matters the binary re-executes itself once per allocator
//! with the hidden `--rss-child ALLOC CASE` flag.

use clap::Parser;
use nodalloc_bench::suite::{cases, Case, Mode, RunResult, SuiteConfig, GROUPS};
use nodalloc_bench::{with_allocator, workloads, Allocator};
use std::fmt::Write as _;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "nodalloc-bench",
    about = "Side-by-side allocator showdown: nodalloc vs system, mimalloc, jemalloc, snmalloc, numalloc",
    after_help = "Workload groups for --only: single_size, bulk, threads, producer_consumer, \
                  realloc_growth, mixed, live_cliff, rss_payload (or an exact case name, see --list)."
)]
struct Cli {
    /// Run only these workload groups or case names (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "WORKLOAD")]
    only: Vec<String>,
    /// Allocators to compare (comma-separated); default: all that were built.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    allocators: Vec<String>,
    /// Thread counts for `threads` and `mixed` (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "N")]
    threads: Vec<usize>,
    /// Print machine-readable CSV rows to stdout instead of tables.
    #[arg(long)]
    csv: bool,
    /// Timed runs per allocator and case; the median is reported.
    #[arg(long, default_value_t = 5, value_name = "N")]
    repeat: usize,
    /// Quick parameters (the default).
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// Larger parameters and more thread counts.
    #[arg(long)]
    full: bool,
    /// Stop repeating an allocator on a case once its runs there have taken
    /// this many seconds (it keeps at least one run); keeps one pathological
    /// allocator from dominating the wall time. Default: 2 (quick), 20 (full).
    #[arg(long, value_name = "SECONDS")]
    cell_budget: Option<f64>,
    /// Skip the peak-RSS child processes.
    #[arg(long)]
    no_rss: bool,
    /// List the cases and exit.
    #[arg(long)]
    list: bool,
    /// Internal: run one case with one allocator, print its peak RSS.
    #[arg(long, num_args = 2, value_names = ["ALLOC", "CASE"], hide = true)]
    rss_child: Option<Vec<String>>,
}

impl Cli {
    fn config(&self) -> SuiteConfig {
        SuiteConfig {
            mode: if self.full { Mode::Full } else { Mode::Quick },
            threads: (!self.threads.is_empty()).then(|| self.threads.clone()),
        }
    }
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
    let all_cases = cases(&cfg);
    if cli.list {
        for c in &all_cases {
            println!("{:<18} {}", c.group, c.name);
        }
        return ExitCode::SUCCESS;
    }
    let selected: Vec<Case> = if cli.only.is_empty() {
        all_cases
    } else {
        for w in &cli.only {
            if !GROUPS.contains(&w.as_str()) && !all_cases.iter().any(|c| &c.name == w) {
                eprintln!(
                    "--only: unknown workload {w:?}; groups: {}",
                    GROUPS.join(", ")
                );
                return ExitCode::from(2);
            }
        }
        all_cases
            .into_iter()
            .filter(|c| cli.only.iter().any(|w| w == c.group || *w == c.name))
            .collect()
    };
    let allocs = match select_allocators(&cli.allocators) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("--allocators: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.repeat == 0 {
        eprintln!("--repeat must be at least 1");
        return ExitCode::from(2);
    }
    showdown(&cli, &selected, &allocs);
    ExitCode::SUCCESS
}

fn select_allocators(names: &[String]) -> Result<Vec<Allocator>, String> {
    if names.is_empty() {
        return Ok(Allocator::available());
    }
    let mut out = Vec::new();
    for n in names {
        let a = Allocator::from_name(n).ok_or_else(|| {
            let known: Vec<_> = Allocator::ALL.iter().map(|a| a.name()).collect();
            format!("unknown allocator {n:?}; known: {}", known.join(", "))
        })?;
        if !a.is_available() {
            return Err(format!("{a} was not built (cargo feature `{a}` is off)"));
        }
        if !out.contains(&a) {
            out.push(a);
        }
    }
    Ok(out)
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
        "rss_delta_kib={delta} maxrss_delta_kib={maxrss_delta} payload_bytes={} elapsed_ns={}",
        r.payload_bytes.unwrap_or(0),
        r.elapsed.as_nanos()
    );
    ExitCode::SUCCESS
}

#[derive(Clone, Debug)]
struct RssOutcome {
    delta_kib: u64,
    payload_bytes: u64,
    /// The child's single run: a cold heap in a fresh process.
    elapsed: Duration,
}

/// Parent side: re-executes this binary for one (allocator, case).
fn measure_rss(cli: &Cli, alloc: Allocator, case: &Case) -> Result<RssOutcome, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--rss-child").arg(alloc.name()).arg(&case.name);
    if cli.full {
        cmd.arg("--full");
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
        elapsed: Duration::from_nanos(field("elapsed_ns")?),
    })
}

struct Row {
    alloc: Allocator,
    runs: usize,
    median: Duration,
    min: Duration,
    max: Duration,
    ns_per_op: f64,
    ops: u64,
    ratio: f64,
    rank: usize,
    first_ns: Option<f64>,
    last_ns: Option<f64>,
    rss: Option<Result<RssOutcome, String>>,
}

fn median_f64(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn summarize(alloc: Allocator, runs: &[RunResult]) -> Row {
    let mut times: Vec<Duration> = runs.iter().map(|r| r.elapsed).collect();
    times.sort();
    let n = times.len();
    let median = if n % 2 == 1 {
        times[n / 2]
    } else {
        (times[n / 2 - 1] + times[n / 2]) / 2
    };
    let ops = runs[0].ops;
    Row {
        alloc,
        runs: n,
        median,
        min: times[0],
        max: times[n - 1],
        ns_per_op: median.as_nanos() as f64 / ops.max(1) as f64,
        ops,
        ratio: 1.0,
        rank: 0,
        first_ns: median_f64(runs.iter().filter_map(|r| r.first_ns).collect()),
        last_ns: median_f64(runs.iter().filter_map(|r| r.last_ns).collect()),
        rss: None,
    }
}

fn fmt_dur(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

/// Same unit for both ends, so the spread reads at a glance.
fn fmt_spread(min: Duration, max: Duration) -> String {
    let (scale, unit) = if max.as_secs_f64() >= 1.0 {
        (1.0, "s")
    } else if max.as_secs_f64() >= 1e-3 {
        (1e3, "ms")
    } else {
        (1e6, "µs")
    };
    format!(
        "{:.2}–{:.2} {unit}",
        min.as_secs_f64() * scale,
        max.as_secs_f64() * scale
    )
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 100.0 {
        format!("{ns:.0}")
    } else {
        format!("{ns:.1}")
    }
}

/// A Markdown table (right-aligned numbers), so output can be pasted into
/// docs as is.
fn markdown_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let pad = |s: &str, width: usize, left: bool| {
        let fill = " ".repeat(width - s.chars().count());
        if left {
            format!("{s}{fill}")
        } else {
            format!("{fill}{s}")
        }
    };
    let mut out = String::new();
    let line = |cells: Vec<String>| format!("| {} |\n", cells.join(" | "));
    out += &line((0..cols).map(|i| pad(header[i], w[i], i == 0)).collect());
    out += &line(
        (0..cols)
            .map(|i| {
                if i == 0 {
                    "-".repeat(w[i])
                } else {
                    format!("{}:", "-".repeat(w[i] - 1))
                }
            })
            .collect(),
    );
    for r in rows {
        out += &line((0..cols).map(|i| pad(&r[i], w[i], i == 0)).collect());
    }
    out
}

fn op_unit(case: &Case) -> &'static str {
    use nodalloc_bench::suite::Kind;
    match case.kind {
        Kind::Realloc { .. } => "reallocs",
        _ => "alloc+free pairs",
    }
}

fn print_case(case: &Case, rows: &[Row], repeat: usize) {
    let Some(first) = rows.first() else { return };
    let has_cliff = rows.iter().any(|r| r.first_ns.is_some());
    let has_rss = rows.iter().any(|r| r.rss.is_some());
    let rss_ratio = matches!(
        case.kind,
        nodalloc_bench::suite::Kind::RssPayload { .. }
            | nodalloc_bench::suite::Kind::LiveCliff { .. }
    );
    let mut header = vec!["allocator", "runs", "median", "ns/op", "min–max", "×best"];
    if has_cliff {
        header.extend(["first 10% ns/alloc", "last 10% ns/alloc", "last/first"]);
    }
    if has_rss {
        header.extend(["cold run", "peak RSS Δ"]);
        if rss_ratio {
            header.push("RSS/payload");
        }
    }
    let mut table = Vec::new();
    for r in rows {
        let mut cells = vec![
            r.alloc.name().to_string(),
            r.runs.to_string(),
            fmt_dur(r.median),
            fmt_ns(r.ns_per_op),
            fmt_spread(r.min, r.max),
            format!("{:.2}", r.ratio),
        ];
        if has_cliff {
            let f = r.first_ns.unwrap_or(f64::NAN);
            let l = r.last_ns.unwrap_or(f64::NAN);
            cells.extend([fmt_ns(f), fmt_ns(l), format!("{:.2}", l / f)]);
        }
        if has_rss {
            match &r.rss {
                Some(Ok(o)) => {
                    cells.push(fmt_dur(o.elapsed));
                    cells.push(format!("{:.1} MiB", o.delta_kib as f64 / 1024.0));
                    if rss_ratio {
                        cells.push(if o.payload_bytes > 0 {
                            format!(
                                "{:.2}",
                                o.delta_kib as f64 * 1024.0 / o.payload_bytes as f64
                            )
                        } else {
                            "–".into()
                        });
                    }
                }
                Some(Err(_)) => {
                    cells.extend(["failed".into(), "failed".into()]);
                    if rss_ratio {
                        cells.push("–".into());
                    }
                }
                None => {
                    cells.extend(["–".into(), "–".into()]);
                    if rss_ratio {
                        cells.push("–".into());
                    }
                }
            }
        }
        table.push(cells);
    }
    println!(
        "### {} — {} {} per run, median of up to {repeat} runs\n",
        case.name,
        first.ops,
        op_unit(case)
    );
    print!("{}", markdown_table(&header, &table));
    if let Some(n) = rows.iter().find(|r| r.alloc == Allocator::Nodalloc) {
        println!(
            "\nnodalloc rank: {}/{} (×{:.2} of best, {})",
            n.rank,
            rows.len(),
            n.ratio,
            first.alloc
        );
    }
    for r in rows {
        if let Some(Err(e)) = &r.rss {
            println!("\nRSS child for {} failed: {e}", r.alloc);
        }
    }
    println!();
}

fn csv_header() {
    println!(
        "case,group,allocator,runs,ops,median_ns,min_ns,max_ns,ns_per_op,ratio_to_best,rank,\
         first10_ns_per_alloc,last10_ns_per_alloc,cold_run_ns,rss_delta_kib,rss_over_payload"
    );
}

fn print_csv(case: &Case, rows: &[Row]) {
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_default();
    for r in rows {
        let (cold, rss, ratio) = match &r.rss {
            Some(Ok(o)) => (
                o.elapsed.as_nanos().to_string(),
                o.delta_kib.to_string(),
                if o.payload_bytes > 0 {
                    format!(
                        "{:.4}",
                        o.delta_kib as f64 * 1024.0 / o.payload_bytes as f64
                    )
                } else {
                    String::new()
                },
            ),
            Some(Err(_)) => ("failed".into(), "failed".into(), String::new()),
            None => (String::new(), String::new(), String::new()),
        };
        println!(
            "{},{},{},{},{},{},{},{},{:.3},{:.4},{},{},{},{cold},{rss},{ratio}",
            case.name,
            case.group,
            r.alloc,
            r.runs,
            r.ops,
            r.median.as_nanos(),
            r.min.as_nanos(),
            r.max.as_nanos(),
            r.ns_per_op,
            r.ratio,
            r.rank,
            opt(r.first_ns),
            opt(r.last_ns),
        );
    }
}

fn showdown(cli: &Cli, cases: &[Case], allocs: &[Allocator]) {
    let started = Instant::now();
    let budget = Duration::from_secs_f64(
        cli.cell_budget
            .unwrap_or(if cli.full { 20.0 } else { 2.0 })
            .max(0.0),
    );
    // First use of an allocator pays one-time setup (arena creation, TLS,
    // region reservation); do it outside every measurement.
    for &a in allocs {
        with_allocator!(a, |x| {
            workloads::single_size(x, 64, 1000);
            workloads::single_size(x, 4096, 100);
            workloads::threads(x, 2, 1000);
        });
    }
    if cli.csv {
        csv_header();
    } else {
        let names: Vec<_> = allocs.iter().map(|a| a.name()).collect();
        println!(
            "# nodalloc showdown ({} mode, {} runs per cell, allocators: {})\n",
            if cli.full { "full" } else { "quick" },
            cli.repeat,
            names.join(", ")
        );
        if !Allocator::Numalloc.is_available() {
            println!("numalloc: not built (cargo feature `numalloc` off)\n");
        }
    }
    let mut summary: Vec<(String, usize, usize, f64, Allocator)> = Vec::new();
    for (ci, case) in cases.iter().enumerate() {
        let t0 = Instant::now();
        eprint!("[{}/{}] {} ...", ci + 1, cases.len(), case.name);
        let mut runs: Vec<Vec<RunResult>> = vec![Vec::with_capacity(cli.repeat); allocs.len()];
        let mut spent = vec![Duration::ZERO; allocs.len()];
        for rep in 0..cli.repeat {
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
        let mut rows: Vec<Row> = allocs
            .iter()
            .zip(&runs)
            .map(|(&a, r)| summarize(a, r))
            .collect();
        rows.sort_by_key(|r| r.median);
        let best = rows[0].median.as_secs_f64();
        for (i, r) in rows.iter_mut().enumerate() {
            r.rank = i + 1;
            r.ratio = r.median.as_secs_f64() / best;
        }
        if case.rss && !cli.no_rss {
            for r in rows.iter_mut() {
                r.rss = Some(measure_rss(cli, r.alloc, case));
            }
        }
        eprintln!(" {}", fmt_dur(t0.elapsed()));
        if cli.csv {
            print_csv(case, &rows);
        } else {
            print_case(case, &rows, cli.repeat);
        }
        if let Some(n) = rows.iter().find(|r| r.alloc == Allocator::Nodalloc) {
            summary.push((
                case.name.clone(),
                n.rank,
                rows.len(),
                n.ratio,
                rows[0].alloc,
            ));
        }
    }
    if !cli.csv && !summary.is_empty() {
        let table: Vec<Vec<String>> = summary
            .iter()
            .map(|(name, rank, of, ratio, best)| {
                vec![
                    name.clone(),
                    format!("{rank}/{of}"),
                    format!("{ratio:.2}"),
                    best.name().to_string(),
                ]
            })
            .collect();
        println!("## nodalloc summary\n");
        print!(
            "{}",
            markdown_table(&["case", "nodalloc rank", "×best", "best"], &table)
        );
        let mut s = String::new();
        let _ = write!(s, "\ntotal wall time {}", fmt_dur(started.elapsed()));
        println!("{s}");
    }
    eprintln!("done in {}", fmt_dur(started.elapsed()));
}
