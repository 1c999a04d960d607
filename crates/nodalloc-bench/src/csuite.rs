//! The suites that run programs under `LD_PRELOAD`: the classic allocator
//! benchmarks (`c/classic.c`) and real programs (sqlite3, python3).
//!
//! Each turns its runs into report [`Record`]s (one per case and allocator,
//! every repetition kept), plot [`Series`] and extra [`Table`]s.

use crate::preload::{
    compile_c, field, numeric_lines, result_fields, run_preloaded, ChildRun, PreloadAlloc,
    CLASSIC_C, HWM_C,
};
use crate::report::{median, Better, Record, Series, Table};
use crate::suite::Mode;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A timed classic workload at one thread count.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassicCase {
    /// The program's workload name, e.g. `cache-thrash`.
    pub workload: &'static str,
    pub threads: usize,
}

impl ClassicCase {
    /// The `--only` group: the workload name with `_` for `-`.
    pub fn group(&self) -> String {
        self.workload.replace('-', "_")
    }

    pub fn name(&self) -> String {
        format!("c/{}/{}t", self.workload, self.threads)
    }
}

/// The timed workloads of `classic.c`.
pub const TIMED: [&str; 8] = [
    "larson",
    "xmalloc",
    "cache-thrash",
    "cache-scratch",
    "mstress",
    "glibc-simple",
    "glibc-thread",
    "malloc-large",
];

/// Workloads whose output is a distribution or a curve, run once each.
pub const PROFILES: [&str; 3] = ["frag", "latency", "rss-time"];

/// The real programs.
pub const PROGRAMS: [&str; 2] = ["sqlite3", "python3"];

/// Everything the C-level suites accept in `--only`.
pub fn groups() -> Vec<String> {
    let mut g: Vec<String> = TIMED
        .iter()
        .chain(PROFILES.iter())
        .map(|w| w.replace('-', "_"))
        .collect();
    g.extend(PROGRAMS.iter().map(|p| p.to_string()));
    g
}

/// The timed cases for a mode; `threads` overrides the thread counts of the
/// multi-threaded workloads.
pub fn classic_cases(mode: Mode, threads: Option<&[usize]>) -> Vec<ClassicCase> {
    let default: &[usize] = match mode {
        Mode::Full => &[1, 2, 4, 8],
        _ => &[2],
    };
    let counts = threads.unwrap_or(default);
    let mut out = Vec::new();
    for w in TIMED {
        let single = matches!(w, "glibc-simple" | "malloc-large");
        if single {
            out.push(ClassicCase {
                workload: w,
                threads: 1,
            });
        } else {
            for &t in counts {
                out.push(ClassicCase {
                    workload: w,
                    threads: t,
                });
            }
        }
    }
    out
}

/// `classic`'s SCALE for a mode.
pub fn scale(mode: Mode) -> u32 {
    match mode {
        Mode::Tiny => 0,
        Mode::Quick => 1,
        Mode::Full => 4,
    }
}

/// The compiled helpers.
#[derive(Clone, Debug)]
pub struct Tools {
    pub classic: PathBuf,
    pub probe: Option<PathBuf>,
    pub scratch: PathBuf,
}

impl Tools {
    /// Runs `cmd` under `alloc` with the probe, bounded by the run limit.
    pub fn run(&self, cmd: Command, alloc: &PreloadAlloc) -> Result<ChildRun, String> {
        run_preloaded(cmd, alloc, self.probe.as_deref(), &self.scratch, RUN_LIMIT)
    }
}

/// Compiles `classic` and the probe into `dir`.
pub fn build_tools(dir: &Path) -> Result<Tools, String> {
    let classic = compile_c(CLASSIC_C, "classic", dir, false)?;
    let probe = compile_c(HWM_C, "hwm", dir, true).ok();
    Ok(Tools {
        classic,
        probe,
        scratch: dir.to_path_buf(),
    })
}

/// Everything a suite produced.
#[derive(Default, Debug)]
pub struct Output {
    pub records: Vec<Record>,
    pub series: Vec<Series>,
    pub tables: Vec<Table>,
}

const RUN_LIMIT: Duration = Duration::from_secs(300);

fn classic_cmd(tools: &Tools, workload: &str, threads: usize, scale: u32) -> Command {
    let mut c = Command::new(&tools.classic);
    c.arg(workload)
        .arg(threads.to_string())
        .arg(scale.to_string());
    c
}

/// One run's measurement.
pub struct Sample {
    pub value: f64,
    pub ops: u64,
    pub hwm_kib: Option<u64>,
}

/// Runs `run(i)` for every record `i`, `repeat` times, rotating the order
/// every repetition (drift and heap history affect all alike). A failure ends
/// that allocator's runs and is kept in its record; peak RSS is the median of
/// the runs'.
pub fn repeat_rotated(
    records: &mut [Record],
    repeat: usize,
    mut run: impl FnMut(usize) -> Result<Sample, String>,
) {
    let n = records.len();
    let mut hwm: Vec<Vec<f64>> = vec![Vec::new(); n];
    for rep in 0..repeat {
        for k in 0..n {
            let i = (k + rep) % n;
            if records[i].failure.is_some() {
                continue;
            }
            match run(i) {
                Ok(s) => {
                    records[i].ops = s.ops;
                    records[i].samples.push(s.value);
                    hwm[i].extend(s.hwm_kib.map(|h| h as f64));
                }
                Err(e) => {
                    records[i].samples.clear();
                    records[i].failure = Some(e);
                }
            }
        }
    }
    for (r, h) in records.iter_mut().zip(&hwm) {
        if r.failure.is_none() {
            r.peak_rss_kib = median(h).map(|v| v as u64);
        }
    }
}

/// One timed case, `repeat` runs per allocator, allocators rotated per run.
pub fn run_classic(
    tools: &Tools,
    case: &ClassicCase,
    allocs: &[PreloadAlloc],
    mode: Mode,
    repeat: usize,
) -> Vec<Record> {
    let mut records: Vec<Record> = allocs
        .iter()
        .map(|a| {
            let mut r = Record::new("c", &case.group(), &case.name(), &a.name, Better::Lower);
            r.x = Some(case.threads as f64);
            r
        })
        .collect();
    repeat_rotated(&mut records, repeat, |i| {
        let cmd = classic_cmd(tools, case.workload, case.threads, scale(mode));
        let run = tools.run(cmd, &allocs[i])?;
        let f = result_fields(&run.stdout)?;
        let ops: u64 = field(&f, "ops")?;
        let ns: u64 = field(&f, "elapsed_ns")?;
        if ops == 0 {
            return Err("no operations done".into());
        }
        Ok(Sample {
            value: ns as f64 / ops as f64,
            ops,
            hwm_kib: run.hwm_kib,
        })
    });
    records
}

fn mib(kib: f64) -> String {
    format!("{:.1} MiB", kib / 1024.0)
}

/// What one run of a profile workload printed: stdout, result fields, peak RSS.
type Profile = (String, HashMap<String, String>, Option<u64>);

/// One run of a profile workload with `a`.
fn run_profile(
    tools: &Tools,
    a: &PreloadAlloc,
    workload: &str,
    threads: usize,
    mode: Mode,
) -> Result<Profile, String> {
    let cmd = classic_cmd(tools, workload, threads, scale(mode));
    let run = tools.run(cmd, a)?;
    let f = result_fields(&run.stdout)?;
    Ok((run.stdout, f, run.hwm_kib))
}

/// `frag`: requested vs usable bytes, one run per allocator.
pub fn run_frag(tools: &Tools, allocs: &[PreloadAlloc], mode: Mode) -> Table {
    let mut rows = Vec::new();
    for a in allocs {
        let res = run_profile(tools, a, "frag", 1, mode).and_then(|(_, f, hwm)| {
            let req: f64 = field(&f, "requested")?;
            let usable: f64 = field(&f, "usable")?;
            Ok((req, usable, hwm))
        });
        rows.push(match res {
            Ok((req, usable, hwm)) => vec![
                a.name.clone(),
                mib(req / 1024.0),
                mib(usable / 1024.0),
                format!("{:.3}", usable / req.max(1.0)),
                hwm.map_or("–".into(), |h| mib(h as f64)),
                hwm.map_or("–".into(), |h| {
                    format!("{:.2}", h as f64 * 1024.0 / req.max(1.0))
                }),
            ],
            Err(e) => vec![a.name.clone(), format!("failed: {e}")],
        });
    }
    Table {
        title: "Internal fragmentation (C, `frag`)".into(),
        note: "Log-uniform sizes 1 B–64 KiB, all live at once: bytes requested, bytes \
               `malloc_usable_size` reports, and the process's peak RSS over the request."
            .into(),
        header: [
            "allocator",
            "requested",
            "usable",
            "usable/requested",
            "peak RSS",
            "RSS/requested",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}

/// `latency`: the CDF of malloc call latency and its percentiles.
pub fn run_latency(
    tools: &Tools,
    allocs: &[PreloadAlloc],
    mode: Mode,
    threads: usize,
) -> (Vec<Series>, Table) {
    let mut series = Vec::new();
    let mut rows = Vec::new();
    for a in allocs {
        let res = run_profile(tools, a, "latency", threads, mode).and_then(|(out, f, _)| {
            let p: Vec<f64> = ["p50", "p90", "p99", "p999", "max"]
                .iter()
                .map(|k| field::<f64>(&f, k))
                .collect::<Result<_, _>>()?;
            Ok((p, numeric_lines(&out, "cdf", 2)))
        });
        match res {
            Ok((p, cdf)) => {
                let mut row = vec![a.name.clone()];
                row.extend(p.iter().map(|v| format!("{v:.0}")));
                rows.push(row);
                series.push(Series {
                    plot: "latency_cdf".into(),
                    allocator: a.name.clone(),
                    // Latencies of 0 (under the clock's cost) cannot sit on a
                    // log axis; show them at 1 ns.
                    points: cdf.iter().map(|v| (v[0].max(1.0), v[1])).collect(),
                });
            }
            Err(e) => rows.push(vec![a.name.clone(), format!("failed: {e}")]),
        }
    }
    let table = Table {
        title: format!("malloc latency (C, `latency`, {threads} threads)"),
        note: "Every malloc call timed with clock_gettime (the mean cost of an empty pair \
               subtracted), working set of 4096 slots, sizes 8 B–32 KiB. Nanoseconds."
            .into(),
        header: ["allocator", "p50", "p90", "p99", "p99.9", "max"]
            .map(String::from)
            .to_vec(),
        rows,
    };
    (series, table)
}

/// `rss-time`: RSS through ramp, churn and drain.
pub fn run_rss_time(tools: &Tools, allocs: &[PreloadAlloc], mode: Mode) -> (Vec<Series>, Table) {
    let mut series = Vec::new();
    let mut rows = Vec::new();
    for a in allocs {
        let res = run_profile(tools, a, "rss-time", 1, mode).and_then(|(out, f, _)| {
            let peak: f64 = field(&f, "peak_rss_kib")?;
            let last: f64 = field(&f, "final_rss_kib")?;
            let live: f64 = field(&f, "peak_live_bytes")?;
            Ok((peak, last, live, numeric_lines(&out, "sample", 3)))
        });
        match res {
            Ok((peak, last, live, samples)) => {
                rows.push(vec![
                    a.name.clone(),
                    mib(live / 1024.0),
                    mib(peak),
                    format!("{:.2}", peak * 1024.0 / live.max(1.0)),
                    mib(last),
                ]);
                series.push(Series {
                    plot: "rss_over_time".into(),
                    allocator: a.name.clone(),
                    points: samples.iter().map(|v| (v[0], v[1] / 1024.0)).collect(),
                });
            }
            Err(e) => rows.push(vec![a.name.clone(), format!("failed: {e}")]),
        }
    }
    let table = Table {
        title: "RSS over time (C, `rss-time`)".into(),
        note: "Ramp to the peak of live bytes with mixed sizes, free a random 90 %, churn at \
               constant live bytes, free everything, then wait one second: what each \
               allocator holds at its peak and gives back at the end."
            .into(),
        header: [
            "allocator",
            "peak live",
            "peak RSS",
            "peak RSS/live",
            "RSS after drain",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    };
    (series, table)
}

/// A real program's command for a mode, or why it cannot run here.
pub fn program_command(program: &str, mode: Mode, scratch: &Path) -> Result<Command, String> {
    let path = find_in_path(program).ok_or_else(|| format!("{program} not found in PATH"))?;
    let n: u64 = match mode {
        Mode::Tiny => 2_000,
        Mode::Quick => 50_000,
        Mode::Full => 1_500_000,
    };
    match program {
        "sqlite3" => {
            let db = scratch.join("bench.db");
            let _ = std::fs::remove_file(&db);
            let script = format!(
                "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;
                 CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v BLOB, n REAL);
                 WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<{n})
                 INSERT INTO t(k, v, n) SELECT hex(randomblob(12)), randomblob(abs(random()) % 200),
                   random() / 7.0 FROM c;
                 CREATE INDEX tk ON t(k);
                 CREATE INDEX tn ON t(n);
                 SELECT count(*), sum(length(v)) FROM t;
                 SELECT substr(k, 1, 2) AS p, count(*), avg(n) FROM t GROUP BY p ORDER BY p LIMIT 3;
                 UPDATE t SET v = randomblob(64) WHERE id % 3 = 0;
                 DELETE FROM t WHERE id % 5 = 0;
                 SELECT count(*) FROM t;
                 VACUUM;"
            );
            let mut c = Command::new(path);
            c.arg(db).arg(script);
            Ok(c)
        }
        "python3" => {
            // Builds, serialises, parses, indexes and sorts n records.
            let script = [
                "import json, random",
                "random.seed(7)",
                &format!("n = {n}"),
                "recs = [{'id': i, 'name': 'user%d' % i, 'score': random.random(),",
                "         'tags': [str(random.random()) for _ in range(i % 7)]} for i in range(n)]",
                "text = json.dumps(recs)",
                "back = json.loads(text)",
                "assert len(back) == n",
                "index = {}",
                "for r in back:",
                "    index.setdefault(r['name'][-2:], []).append(r)",
                "words = ' '.join(r['name'] for r in back).split()",
                "words.sort(key=lambda w: w[::-1])",
                "del recs, back, text",
                "assert sum(len(v) for v in index.values()) == n",
                "print('ok', n, len(words))",
            ]
            .join("\n");
            let mut c = Command::new(path);
            c.arg("-c").arg(script);
            Ok(c)
        }
        other => Err(format!("unknown program {other}")),
    }
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// One real program, `repeat` runs per allocator: wall time and peak RSS.
pub fn run_program(
    tools: &Tools,
    program: &str,
    allocs: &[PreloadAlloc],
    mode: Mode,
    repeat: usize,
) -> Result<Vec<Record>, String> {
    // Fail early (and once) when the program is not installed.
    program_command(program, mode, &tools.scratch)?;
    let case = format!("program/{program}");
    let mut records: Vec<Record> = allocs
        .iter()
        .map(|a| {
            let mut r = Record::new("program", program, &case, &a.name, Better::Lower);
            r.unit = "ms".into();
            r.ops = 1;
            r
        })
        .collect();
    repeat_rotated(&mut records, repeat, |i| {
        let cmd = program_command(program, mode, &tools.scratch)?;
        let run = tools.run(cmd, &allocs[i])?;
        Ok(Sample {
            value: run.wall.as_secs_f64() * 1e3,
            ops: 1,
            hwm_kib: run.hwm_kib,
        })
    });
    let _ = std::fs::remove_file(tools.scratch.join("bench.db"));
    Ok(records)
}

/// The C fast-path program of the library's callgrind script.
pub const PAIRS_C: &str = include_str!("../../nodalloc-ffi/bench/pairs.c");

/// Instructions `cmd` executes under callgrind, or why it could not be counted.
pub fn callgrind_instructions(cmd: Command, scratch: &Path) -> Result<u64, String> {
    let out_file = scratch.join(format!("callgrind.out.{}", std::process::id()));
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let envs: Vec<_> = cmd
        .get_envs()
        .map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned())))
        .collect();
    let mut vg = Command::new("valgrind");
    vg.arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(program)
        .args(args);
    for (k, v) in envs {
        match v {
            Some(v) => vg.env(k, v),
            None => vg.env_remove(k),
        };
    }
    let out = vg.output().map_err(|e| format!("valgrind: {e}"))?;
    let _ = std::fs::remove_file(&out_file);
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "valgrind: {}",
            err.lines().last().unwrap_or("failed")
        ));
    }
    err.lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "callgrind printed no total".into())
}

/// Instructions per alloc+free pair: (Ir(n) - Ir(0)) / n, so start-up cancels.
pub fn per_pair(make: impl Fn(u64) -> Command, n: u64, scratch: &Path) -> Result<f64, String> {
    let zero = callgrind_instructions(make(0), scratch)?;
    let full = callgrind_instructions(make(n), scratch)?;
    Ok(full.saturating_sub(zero) as f64 / n as f64)
}
