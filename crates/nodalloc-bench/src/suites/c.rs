//! The `c` suite: the classic allocator benchmarks (`c/classic/`, compiled at
//! run time with the system's `cc`) under `LD_PRELOAD`, once per allocator.
//!
//! The timed workloads give one record per (case, allocator), every
//! repetition kept; the profiles (`frag`, `latency`, `rss-time`) give tables
//! and plot series. The compiled [`Tools`] are shared with the `program`
//! suite, which runs real programs the same way.

use super::{retain_cases, CaseId, Context, Mode, Suite};
use crate::preload::{
    compile_c, field, numeric_lines, result_fields, run_preloaded, ChildRun, PreloadAlloc, HWM_C,
};
use crate::report::{median, Better, Record, Report, Series, Table};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The classic program's sources, file name and text, built into the binary
/// so the showdown runs from anywhere.
pub const CLASSIC_C: &[(&str, &str)] = &[
    ("classic.h", include_str!("../../c/classic/classic.h")),
    ("main.c", include_str!("../../c/classic/main.c")),
    ("common.c", include_str!("../../c/classic/common.c")),
    ("handoff.c", include_str!("../../c/classic/handoff.c")),
    ("cache.c", include_str!("../../c/classic/cache.c")),
    ("stress.c", include_str!("../../c/classic/stress.c")),
    ("profiles.c", include_str!("../../c/classic/profiles.c")),
    ("traffic.c", include_str!("../../c/classic/traffic.c")),
    ("tstress.c", include_str!("../../c/classic/tstress.c")),
    ("server.c", include_str!("../../c/classic/server.c")),
];

/// The timed cases and the profiles that are selected.
pub struct CSuite {
    classic: Vec<ClassicCase>,
    profiles: Vec<&'static str>,
}

impl CSuite {
    pub fn new(mode: Mode, threads: Option<&[usize]>) -> CSuite {
        CSuite {
            classic: classic_cases(mode, threads),
            profiles: PROFILES.to_vec(),
        }
    }
}

/// A profile's `--only` identity: its group is its name with `_` for `-`.
fn profile_id(p: &str) -> CaseId {
    CaseId::new(p.replace('-', "_"), format!("c/{p}"))
}

impl Suite for CSuite {
    fn name(&self) -> &'static str {
        "c"
    }

    fn cases(&self) -> Vec<CaseId> {
        let timed = self.classic.iter().map(ClassicCase::id);
        timed
            .chain(self.profiles.iter().map(|p| profile_id(p)))
            .collect()
    }

    fn retain(&mut self, keep: &dyn Fn(&[&str]) -> bool) {
        let name = self.name();
        retain_cases(name, &mut self.classic, ClassicCase::id, keep);
        retain_cases(name, &mut self.profiles, |p| profile_id(p), keep);
    }

    fn steps(&self) -> usize {
        self.classic.len() + self.profiles.len()
    }

    fn run(&self, ctx: &mut Context, rep: &mut Report) {
        let allocs = ctx.preload_contenders(rep);
        let Some(tools) = ctx.c_tools(rep) else {
            ctx.bar.inc(self.steps() as u64);
            return;
        };
        let mode = ctx.cli.mode();
        let repeat = ctx.cli.repeat("c");
        for case in &self.classic {
            ctx.bar.set_message(case.name());
            rep.records
                .extend(run_classic(&tools, case, &allocs, mode, repeat));
            ctx.bar.inc(1);
        }
        for p in &self.profiles {
            ctx.bar.set_message(format!("c/{p}"));
            match *p {
                "frag" => rep.tables.push(run_frag(&tools, &allocs, mode)),
                "latency" => {
                    let t = ctx.cli.threads.first().copied().unwrap_or(2);
                    let (s, t) = run_latency(&tools, &allocs, mode, t);
                    rep.series.extend(s);
                    rep.tables.push(t);
                }
                _ => {
                    let (s, t) = run_rss_time(&tools, &allocs, mode);
                    rep.series.extend(s);
                    rep.tables.push(t);
                }
            }
            ctx.bar.inc(1);
        }
    }
}

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

    pub fn id(&self) -> CaseId {
        CaseId::new(self.group(), self.name())
    }
}

/// The timed workloads of the classic program.
pub const TIMED: [&str; 15] = [
    "larson",
    "xmalloc",
    "cache-thrash",
    "cache-scratch",
    "mstress",
    "glibc-simple",
    "glibc-thread",
    "malloc-large",
    "fill-walk",
    "grow",
    "bursts",
    "xthread",
    "churn",
    "alloc-test",
    "tstress",
];

/// The thread count of `tstress` in every mode.
pub const TSTRESS_THREADS: usize = 32;

/// Workloads whose output is a distribution or a curve, run once each.
pub const PROFILES: [&str; 3] = ["frag", "latency", "rss-time"];

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
        let single = matches!(w, "glibc-simple" | "malloc-large" | "fill-walk" | "grow");
        // tstress is mimalloc's stress test, which runs 32 threads whatever the machine: the
        // point is more threads than cores.
        if w == "tstress" {
            out.push(ClassicCase {
                workload: w,
                threads: TSTRESS_THREADS,
            });
            continue;
        }
        // alloc-test is measured single-threaded as well as at the thread counts.
        if w == "alloc-test" && !counts.contains(&1) {
            out.push(ClassicCase {
                workload: w,
                threads: 1,
            });
        }
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

/// Compiles the classic program and the probe into `dir`.
pub fn build_tools(dir: &Path) -> Result<Tools, String> {
    let classic = compile_c(CLASSIC_C, "classic", dir, false)?;
    let probe = compile_c(HWM_C, "hwm", dir, true).ok();
    Ok(Tools {
        classic,
        probe,
        scratch: dir.to_path_buf(),
    })
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
