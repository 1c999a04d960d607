//! The showdown's results and everything written from them: the Markdown
//! report, the CSV of raw runs and the PNG plots.
//!
//! Every suite (in-process Rust cases, C programs under `LD_PRELOAD`, the HTTP
//! server, real programs) reduces to [`Record`]s — one per (case, allocator)
//! with the value of every repetition — plus [`Series`] for the curves that
//! are plotted rather than tabulated. [`Report::summarize`] ranks them and
//! [`Report::targets`] checks the project's performance targets; both are pure
//! functions of the records, so the tests can feed them made-up numbers.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

/// Which direction of a metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// Times, latencies: smaller wins.
    Lower,
    /// Throughputs (requests/s): larger wins.
    Higher,
}

/// All repetitions of one case with one allocator.
#[derive(Clone, Debug)]
pub struct Record {
    /// `rust` (in-process), `c` (LD_PRELOAD), `http`, `program`.
    pub suite: String,
    /// The workload family, what `--only` selects.
    pub group: String,
    /// Unique across the report, e.g. `c/larson/2t`.
    pub case: String,
    pub allocator: String,
    pub better: Better,
    /// Unit of `samples`, e.g. `ns/op`, `req/s`, `ms`.
    pub unit: String,
    /// One value per repetition.
    pub samples: Vec<f64>,
    /// Operations per repetition (for the table's caption).
    pub ops: u64,
    /// Peak resident set of a fresh process running the case, in KiB.
    pub peak_rss_kib: Option<u64>,
    /// Position on a plot's x axis (thread count, object size), if any.
    pub x: Option<f64>,
    /// Set when the allocator failed the case; `samples` is then empty.
    pub failure: Option<String>,
}

impl Record {
    pub fn new(suite: &str, group: &str, case: &str, allocator: &str, better: Better) -> Record {
        Record {
            suite: suite.into(),
            group: group.into(),
            case: case.into(),
            allocator: allocator.into(),
            better,
            unit: "ns/op".into(),
            samples: Vec::new(),
            ops: 0,
            peak_rss_kib: None,
            x: None,
            failure: None,
        }
    }

    pub fn median(&self) -> Option<f64> {
        median(&self.samples)
    }

    /// The median as a cost: smaller is better whatever the metric.
    pub fn cost(&self) -> Option<f64> {
        let m = self.median()?;
        match self.better {
            Better::Lower => Some(m),
            Better::Higher if m > 0.0 => Some(1.0 / m),
            Better::Higher => None,
        }
    }

    fn range(&self) -> Option<(f64, f64)> {
        let lo = self.samples.iter().copied().reduce(f64::min)?;
        let hi = self.samples.iter().copied().reduce(f64::max)?;
        Some((lo, hi))
    }
}

/// Points of one allocator's curve on one plot.
#[derive(Clone, Debug)]
pub struct Series {
    /// Which plot, e.g. `latency_cdf`, `rss_over_time`.
    pub plot: String,
    pub allocator: String,
    pub points: Vec<(f64, f64)>,
}

/// A free-form table (callgrind counts, fragmentation) appended to the report.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub title: String,
    pub note: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

pub fn geomean(v: &[f64]) -> Option<f64> {
    if v.is_empty() || v.iter().any(|x| *x <= 0.0 || !x.is_finite()) {
        return None;
    }
    Some((v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
}

/// One allocator's line in a case's ranking.
#[derive(Clone, Debug)]
pub struct Ranked {
    pub allocator: String,
    pub median: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub runs: usize,
    /// Cost relative to the best allocator (1.00 = best).
    pub ratio: Option<f64>,
    pub rank: Option<usize>,
    pub rss_kib: Option<u64>,
    /// RSS relative to the smallest RSS in the case.
    pub rss_ratio: Option<f64>,
    /// This allocator's range of runs overlaps the best one's: the
    /// difference is inside the noise.
    pub within_noise: bool,
    pub failure: Option<String>,
}

/// A case, ranked.
#[derive(Clone, Debug)]
pub struct CaseSummary {
    pub suite: String,
    pub group: String,
    pub case: String,
    pub unit: String,
    pub better: Better,
    pub ops: u64,
    /// Best first; failures last.
    pub rows: Vec<Ranked>,
}

impl CaseSummary {
    pub fn row(&self, allocator: &str) -> Option<&Ranked> {
        self.rows.iter().find(|r| r.allocator == allocator)
    }
}

/// Whether one target was met.
#[derive(Clone, Debug)]
pub struct TargetCheck {
    pub target: String,
    pub measured: String,
    /// None when there was not enough data to judge.
    pub met: Option<bool>,
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub title: String,
    /// The command line that produced the report.
    pub command: String,
    /// Machine description (CPUs, memory, kernel, THP mode).
    pub machine: Vec<String>,
    pub records: Vec<Record>,
    pub series: Vec<Series>,
    pub tables: Vec<Table>,
    /// What was skipped and why (missing library, compiler, ...).
    pub skipped: Vec<String>,
}

/// The allocator the report speaks for.
pub const SUBJECT: &str = "nodalloc";
/// The peer the targets are stated against.
pub const REFERENCE: &str = "mimalloc";

impl Report {
    /// Cases in the order their first record was added, each ranked.
    pub fn summarize(&self) -> Vec<CaseSummary> {
        let mut order: Vec<&str> = Vec::new();
        let mut by_case: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
        for r in &self.records {
            if !by_case.contains_key(r.case.as_str()) {
                order.push(&r.case);
            }
            by_case.entry(&r.case).or_default().push(r);
        }
        order
            .into_iter()
            .map(|case| summarize_case(&by_case[case]))
            .collect()
    }

    /// The project's targets, judged on this report's numbers.
    pub fn targets(&self) -> Vec<TargetCheck> {
        let cases = self.summarize();
        let mut time = Vec::new();
        let mut rss = Vec::new();
        let mut worst: Option<(f64, String, String)> = None;
        let mut over = Vec::new();
        for c in &cases {
            let records: Vec<&Record> = self.records.iter().filter(|r| r.case == c.case).collect();
            let find = |a: &str| {
                records
                    .iter()
                    .find(|r| r.allocator == a && r.failure.is_none())
            };
            let (Some(n), m) = (find(SUBJECT), find(REFERENCE)) else {
                continue;
            };
            if let (Some(nc), Some(mc)) = (n.cost(), m.and_then(|m| m.cost())) {
                time.push(nc / mc);
            }
            if let (Some(nr), Some(mr)) = (n.peak_rss_kib, m.and_then(|m| m.peak_rss_kib)) {
                if nr > 0 && mr > 0 {
                    rss.push(nr as f64 / mr as f64);
                }
            }
            // Peers are the other allocators, not nodalloc's own variants (secure mode).
            let best_peer = records
                .iter()
                .filter(|r| !r.allocator.starts_with(SUBJECT) && r.failure.is_none())
                .filter_map(|r| Some((r.cost()?, r.allocator.clone())))
                .min_by(|a, b| a.0.total_cmp(&b.0));
            if let (Some(nc), Some((pc, peer))) = (n.cost(), best_peer) {
                let ratio = nc / pc;
                if ratio > 1.5 {
                    over.push(format!("{} {ratio:.2}× {peer}", c.case));
                }
                if worst.as_ref().is_none_or(|w| ratio > w.0) {
                    worst = Some((ratio, c.case.clone(), peer));
                }
            }
        }
        let mut out = Vec::new();
        let gm = geomean(&time);
        out.push(TargetCheck {
            target: format!("time geomean ≤ 0.85× {REFERENCE}"),
            measured: gm.map_or("no common cases".into(), |g| {
                format!("{g:.3}× over {} cases", time.len())
            }),
            met: gm.map(|g| g <= 0.85),
        });
        let gm = geomean(&rss);
        out.push(TargetCheck {
            target: format!("peak-RSS geomean ≤ 0.9× {REFERENCE}"),
            measured: gm.map_or("no common cases".into(), |g| {
                format!("{g:.3}× over {} cases", rss.len())
            }),
            met: gm.map(|g| g <= 0.9),
        });
        out.push(TargetCheck {
            target: "no workload worse than 1.5× the best peer".into(),
            measured: match &worst {
                None => "no cases".into(),
                Some((r, case, peer)) if over.is_empty() => {
                    format!("worst {case}: {r:.2}× {peer}")
                }
                Some(_) => format!("over 1.5×: {}", over.join("; ")),
            },
            met: worst.as_ref().map(|_| over.is_empty()),
        });
        for case in ["producer_consumer", "c/xmalloc/2t"] {
            let Some(c) = cases.iter().find(|c| c.case == case) else {
                continue;
            };
            let cost = |a: &str| {
                self.records
                    .iter()
                    .find(|r| r.case == c.case && r.allocator == a && r.failure.is_none())
                    .and_then(|r| r.cost())
            };
            if let (Some(n), Some(m)) = (cost(SUBJECT), cost(REFERENCE)) {
                out.push(TargetCheck {
                    target: format!("{case} ≤ 0.8× {REFERENCE}"),
                    measured: format!("{:.3}×", n / m),
                    met: Some(n / m <= 0.8),
                });
            }
        }
        out
    }

    /// [`Report::targets`] as a Markdown table.
    pub fn targets_table(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .targets()
            .into_iter()
            .map(|t| {
                let met = match t.met {
                    Some(true) => "met",
                    Some(false) => "missed",
                    None => "not measured",
                };
                vec![t.target, t.measured, met.into()]
            })
            .collect();
        markdown_table(&["target", "measured", "result"], &rows)
    }

    /// The report as Markdown; `plots` are file names relative to the report.
    pub fn markdown(&self, plots: &[(String, String)]) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# {}\n", self.title);
        if !self.command.is_empty() {
            let _ = writeln!(s, "Command: `{}`\n", self.command);
        }
        for m in &self.machine {
            let _ = writeln!(s, "- {m}");
        }
        if !self.machine.is_empty() {
            s.push('\n');
        }
        s += "Ratios are costs relative to the best allocator of the case (1.00 = best; for \
              throughputs the inverse). A ratio marked `~` is inside the noise: that \
              allocator's range of runs overlaps the best one's.\n\n";

        s += "## Targets\n\n";
        s += &self.targets_table();

        let cases = self.summarize();
        s += "\n## Summary\n\n";
        s += &summary_table(&cases);

        if !plots.is_empty() {
            s += "\n## Plots\n\n";
            for (title, file) in plots {
                let _ = writeln!(s, "### {title}\n\n![{title}]({file})\n");
            }
        }

        s += "\n## Cases\n";
        for c in &cases {
            let _ = writeln!(
                s,
                "\n### {} ({} suite, {} {})\n",
                c.case,
                c.suite,
                c.ops,
                if c.better == Better::Lower {
                    "ops per run"
                } else {
                    "requests per run"
                }
            );
            s += &case_table(c);
        }
        for t in &self.tables {
            let _ = writeln!(s, "\n## {}\n", t.title);
            if !t.note.is_empty() {
                let _ = writeln!(s, "{}\n", t.note);
            }
            let header: Vec<&str> = t.header.iter().map(String::as_str).collect();
            s += &markdown_table(&header, &t.rows);
        }
        if !self.skipped.is_empty() {
            s += "\n## Skipped\n\n";
            for k in &self.skipped {
                let _ = writeln!(s, "- {k}");
            }
        }
        s
    }

    /// Every repetition of every record, one row each.
    pub fn csv(&self) -> String {
        let mut s = String::from(
            "suite,group,case,allocator,unit,better,run,value,ops,peak_rss_kib,x,failure\n",
        );
        for r in &self.records {
            let rss = r.peak_rss_kib.map(|v| v.to_string()).unwrap_or_default();
            let x = r.x.map(|v| v.to_string()).unwrap_or_default();
            let better = match r.better {
                Better::Lower => "lower",
                Better::Higher => "higher",
            };
            let fail = r.failure.as_deref().map(csv_field).unwrap_or_default();
            let row_start = format!(
                "{},{},{},{},{},{better}",
                csv_field(&r.suite),
                csv_field(&r.group),
                csv_field(&r.case),
                csv_field(&r.allocator),
                csv_field(&r.unit)
            );
            if r.samples.is_empty() {
                let _ = writeln!(s, "{row_start},,,{},{rss},{x},{fail}", r.ops);
            }
            for (i, v) in r.samples.iter().enumerate() {
                let _ = writeln!(s, "{row_start},{i},{v},{},{rss},{x},{fail}", r.ops);
            }
        }
        s
    }

    /// Writes `report.md`, `results.csv` and the plots into `dir`; returns
    /// the paths written.
    pub fn write(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let mut written = Vec::new();
        let mut plots = Vec::new();
        for spec in self.plot_specs() {
            match crate::plot::line_plot(dir, &spec) {
                Ok(path) => {
                    let file = path.file_name().unwrap().to_string_lossy().into_owned();
                    plots.push((spec.title.clone(), file));
                    written.push(path);
                }
                Err(e) => eprintln!("plot {}: {e}", spec.name),
            }
        }
        let csv = dir.join("results.csv");
        std::fs::write(&csv, self.csv())?;
        written.push(csv);
        let md = dir.join("report.md");
        std::fs::write(&md, self.markdown(&plots))?;
        written.insert(0, md);
        Ok(written)
    }

    /// The plots this report's data can fill.
    pub fn plot_specs(&self) -> Vec<crate::plot::PlotSpec> {
        use crate::plot::PlotSpec;
        let mut specs = Vec::new();
        let from_records = |group: &str| -> Vec<(String, Vec<(f64, f64)>)> {
            let mut by_alloc: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
            for r in self.records.iter().filter(|r| r.group == group) {
                if let (Some(x), Some(y)) = (r.x, r.median()) {
                    by_alloc
                        .entry(r.allocator.clone())
                        .or_default()
                        .push((x, y));
                }
            }
            by_alloc
                .into_iter()
                .map(|(a, mut p)| {
                    p.sort_by(|a, b| a.0.total_cmp(&b.0));
                    (a, p)
                })
                .filter(|(_, p)| p.len() >= 2)
                .collect()
        };
        let from_series = |plot: &str| -> Vec<(String, Vec<(f64, f64)>)> {
            self.series
                .iter()
                .filter(|s| s.plot == plot && !s.points.is_empty())
                .map(|s| (s.allocator.clone(), s.points.clone()))
                .collect()
        };
        let mut push = |spec: PlotSpec| {
            if !spec.lines.is_empty() {
                specs.push(spec);
            }
        };
        push(PlotSpec {
            name: "size_sweep".into(),
            title: "Single-thread malloc+free by size".into(),
            x_label: "object size (bytes)".into(),
            y_label: "ns per alloc+free pair".into(),
            log_x: true,
            log_y: true,
            lines: from_records("single_size"),
        });
        push(PlotSpec {
            name: "thread_scaling".into(),
            title: "Thread scaling (10 000 ops per thread)".into(),
            x_label: "threads".into(),
            y_label: "ns per alloc+free pair".into(),
            log_x: false,
            log_y: false,
            lines: from_records("threads"),
        });
        push(PlotSpec {
            name: "latency_cdf".into(),
            title: "malloc latency CDF (C, LD_PRELOAD)".into(),
            x_label: "latency (ns)".into(),
            y_label: "fraction of calls".into(),
            log_x: true,
            log_y: false,
            lines: from_series("latency_cdf"),
        });
        push(PlotSpec {
            name: "rss_over_time".into(),
            title: "RSS through churn and drain (C, LD_PRELOAD)".into(),
            x_label: "time (ms)".into(),
            y_label: "RSS (MiB)".into(),
            log_x: false,
            log_y: false,
            lines: from_series("rss_over_time"),
        });
        specs
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn summarize_case(records: &[&Record]) -> CaseSummary {
    let first = records[0];
    let costs: Vec<(usize, f64)> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.failure.is_none())
        .filter_map(|(i, r)| Some((i, r.cost()?)))
        .collect();
    let best = costs.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1));
    let min_rss = records
        .iter()
        .filter_map(|r| r.peak_rss_kib)
        .filter(|v| *v > 0)
        .min();
    let mut rows: Vec<Ranked> = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let cost = costs.iter().find(|c| c.0 == i).map(|c| c.1);
            let ratio = cost.zip(best).map(|(c, b)| c / b.1);
            let within_noise = match (best, r.range()) {
                (Some((bi, _)), Some((lo, hi))) if bi != i => records[bi]
                    .range()
                    .is_some_and(|(blo, bhi)| lo <= bhi && blo <= hi),
                _ => false,
            };
            let (min, max) = r.range().unzip();
            Ranked {
                allocator: r.allocator.clone(),
                median: r.median(),
                min,
                max,
                runs: r.samples.len(),
                ratio,
                rank: None,
                rss_kib: r.peak_rss_kib,
                rss_ratio: r
                    .peak_rss_kib
                    .zip(min_rss)
                    .map(|(v, m)| v as f64 / m as f64),
                within_noise,
                failure: r.failure.clone(),
            }
        })
        .collect();
    rows.sort_by(|a, b| match (a.ratio, b.ratio) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.allocator.cmp(&b.allocator),
    });
    for (i, r) in rows.iter_mut().enumerate() {
        if r.ratio.is_some() {
            r.rank = Some(i + 1);
        }
    }
    CaseSummary {
        suite: first.suite.clone(),
        group: first.group.clone(),
        case: first.case.clone(),
        unit: first.unit.clone(),
        better: first.better,
        ops: first.ops,
        rows,
    }
}

pub fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.3e}", v)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn fmt_ratio(r: &Ranked) -> String {
    match r.ratio {
        Some(x) if r.within_noise => format!("~{x:.2}"),
        Some(x) => format!("{x:.2}"),
        None => "–".into(),
    }
}

fn fmt_rss(kib: Option<u64>) -> String {
    kib.map_or("–".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
}

/// One case's table: every allocator, best first.
pub fn case_table(c: &CaseSummary) -> String {
    let has_rss = c.rows.iter().any(|r| r.rss_kib.is_some());
    let median_h = format!("median {}", c.unit);
    let mut header = vec!["allocator", "runs", median_h.as_str(), "min–max", "×best"];
    if has_rss {
        header.extend(["peak RSS", "RSS ×best"]);
    }
    let rows: Vec<Vec<String>> = c
        .rows
        .iter()
        .map(|r| {
            let mut cells = vec![r.allocator.clone(), r.runs.to_string()];
            match (&r.failure, r.median, r.min, r.max) {
                (Some(f), ..) => cells.extend([format!("failed: {f}"), "–".into(), "–".into()]),
                (None, Some(m), Some(lo), Some(hi)) => cells.extend([
                    fmt_value(m),
                    format!("{}–{}", fmt_value(lo), fmt_value(hi)),
                    fmt_ratio(r),
                ]),
                _ => cells.extend(["–".into(), "–".into(), "–".into()]),
            }
            if has_rss {
                cells.push(fmt_rss(r.rss_kib));
                cells.push(r.rss_ratio.map_or("–".into(), |x| format!("{x:.2}")));
            }
            cells
        })
        .collect();
    markdown_table(&header, &rows)
}

/// One line per case: nodalloc's rank, its ratio to the best and the best.
pub fn summary_table(cases: &[CaseSummary]) -> String {
    let rows: Vec<Vec<String>> = cases
        .iter()
        .map(|c| {
            let ranked = c.rows.iter().filter(|r| r.rank.is_some()).count();
            let best = c
                .rows
                .first()
                .filter(|r| r.rank.is_some())
                .map_or("–".to_string(), |r| r.allocator.clone());
            let (rank, ratio, rss) = match c.row(SUBJECT) {
                Some(n) => (
                    n.rank.map_or("failed".into(), |k| format!("{k}/{ranked}")),
                    fmt_ratio(n),
                    n.rss_ratio.map_or("–".into(), |x| format!("{x:.2}")),
                ),
                None => ("–".into(), "–".into(), "–".into()),
            };
            vec![c.case.clone(), rank, ratio, rss, best]
        })
        .collect();
    markdown_table(
        &["case", "nodalloc rank", "time ×best", "RSS ×best", "best"],
        &rows,
    )
}

/// A Markdown table (first column left-aligned, the rest right-aligned), so
/// output can be pasted into docs as is.
pub fn markdown_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count().max(3)).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(cols) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let pad = |s: &str, width: usize, left: bool| {
        let fill = " ".repeat(width.saturating_sub(s.chars().count()));
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
        out += &line(
            (0..cols)
                .map(|i| pad(r.get(i).map_or("", String::as_str), w[i], i == 0))
                .collect(),
        );
    }
    out
}
