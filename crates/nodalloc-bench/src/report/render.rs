//! The report as text and files: the Markdown report, the CSV of raw runs,
//! the plots, and the summary `src/main.rs` prints on stdout. Everything here
//! is a function of the [`Report`]'s records, tables and series.

use super::{Better, CaseSummary, Ranked, Report, SUBJECT};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

impl Report {
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

    /// The summary `src/main.rs` prints on stdout: per case, nodalloc's rank
    /// and every allocator's time ratio (and RSS ratio where measured), then
    /// the targets and what was skipped.
    pub fn console(&self) -> String {
        let mut s = format!("# {}\n\n", self.title);
        s += "Each cell: time (or 1/throughput) relative to the best allocator of the case, \
              then peak RSS relative to the smallest where measured; `~` = inside the noise \
              (run ranges overlap with the best's). rank = nodalloc's place.\n\n";
        s += &self.matrix();
        s += "\n## Targets\n\n";
        s += &self.targets_table();
        if !self.skipped.is_empty() {
            s += "\nSkipped:\n";
            for k in &self.skipped {
                let _ = writeln!(s, "- {k}");
            }
        }
        s
    }

    /// One row per case, one column per allocator.
    fn matrix(&self) -> String {
        let cases = self.summarize();
        let mut allocs: Vec<String> = Vec::new();
        for r in &self.records {
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
                    c.row(SUBJECT)
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
        markdown_table(&h, &rows)
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
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
