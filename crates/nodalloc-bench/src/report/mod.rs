//! The showdown's results and everything written from them: the Markdown
//! report, the CSV of raw runs and the PNG plots.
//!
//! Every suite (in-process Rust cases, C programs under `LD_PRELOAD`, the HTTP
//! server, real programs) reduces to [`Record`]s — one per (case, allocator)
//! with the value of every repetition — plus [`Series`] for the curves that
//! are plotted rather than tabulated. [`Report::summarize`] ranks them and
//! [`Report::targets`] checks the project's performance targets; both are pure
//! functions of the records, so the tests can feed them made-up numbers.
//! Turning them into text and files is `render`'s part.
//!
//! Filled by the suites (`src/suites/`), written by `src/main.rs`.

mod render;

pub use render::{case_table, fmt_value, markdown_table, summary_table};

use std::collections::BTreeMap;

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
