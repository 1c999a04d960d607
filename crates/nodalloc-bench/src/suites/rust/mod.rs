//! The `rust` suite: in-process workloads, each allocator called through its
//! own instance.
//!
//! Repetitions are interleaved (each one visits the allocators in a rotated
//! order, so clock or thermal drift and heap history affect all alike); peak
//! RSS comes from child processes ([`crate::rss`]). Besides one record per
//! (case, allocator) it fills two tables: the live-object cliff and the RSS
//! per payload byte.

pub mod cases;

use super::{retain_cases, CaseId, Context, Suite};
use crate::cli::Cli;
use crate::report::{self, Better, Record, Report, Table};
use crate::{rss, with_allocator, workloads, Allocator};
use cases::{Case, Kind, RunResult, SuiteConfig};
use std::time::Duration;

pub struct RustSuite {
    cases: Vec<Case>,
}

impl RustSuite {
    pub fn new(cfg: &SuiteConfig) -> RustSuite {
        RustSuite {
            cases: cases::cases(cfg),
        }
    }
}

fn case_id(c: &Case) -> CaseId {
    CaseId::new(c.group, c.name.clone())
}

impl Suite for RustSuite {
    fn name(&self) -> &'static str {
        "rust"
    }

    fn cases(&self) -> Vec<CaseId> {
        self.cases.iter().map(case_id).collect()
    }

    fn retain(&mut self, keep: &dyn Fn(&[&str]) -> bool) {
        retain_cases(self.name(), &mut self.cases, case_id, keep);
    }

    fn steps(&self) -> usize {
        self.cases.len()
    }

    fn run(&self, ctx: &mut Context, rep: &mut Report) {
        // First use of an allocator pays one-time setup (arena creation, TLS,
        // region reservation); do it outside every measurement.
        ctx.bar.set_message("warm-up");
        for &a in &ctx.rust_allocs {
            with_allocator!(a, |x| {
                workloads::single_size(x, 64, 1000);
                workloads::single_size(x, 4096, 100);
                workloads::threads(x, 2, 1000);
            });
        }
        let mut extra = Extra::default();
        for case in &self.cases {
            ctx.bar.set_message(case.name.clone());
            rep.records
                .extend(run_case(ctx.cli, case, &ctx.rust_allocs, &mut extra));
            ctx.bar.inc(1);
        }
        extra.push_tables(rep);
    }
}

/// Rows of the suite's extra tables.
#[derive(Default)]
struct Extra {
    cliff: Vec<Vec<String>>,
    payload: Vec<Vec<String>>,
}

impl Extra {
    /// The live-object cliff and RSS per payload byte, where there are rows.
    fn push_tables(self, rep: &mut Report) {
        if !self.cliff.is_empty() {
            rep.tables.push(Table {
                title: "Live-object cliff (Rust, `live_cliff`)".into(),
                note: "ns per allocation over the first and the last 10 % of 2.3 M live 64 B \
                       objects: a ratio well above 1 means allocation slows as the heap grows."
                    .into(),
                header: ["allocator", "first 10 % ns", "last 10 % ns", "last/first"]
                    .map(String::from)
                    .to_vec(),
                rows: self.cliff,
            });
        }
        if !self.payload.is_empty() {
            rep.tables.push(Table {
                title: "RSS per payload byte (Rust, `rss_payload`)".into(),
                note: "Peak RSS growth of a fresh process holding 100 MB (quick; 200 MB full) of objects just above a \
                       power of two, divided by the payload; and how much of the process sits on transparent huge \
                       pages at that peak (AnonHugePages)."
                    .into(),
                header: ["case", "allocator", "peak RSS Δ", "RSS/payload", "on huge pages"]
                    .map(String::from)
                    .to_vec(),
                rows: self.payload,
            });
        }
    }
}

/// Runs one case with every allocator, interleaved; one record each.
/// The live-object cliff and the RSS per payload byte go to `extra` rows.
fn run_case(cli: &Cli, case: &Case, allocs: &[Allocator], extra: &mut Extra) -> Vec<Record> {
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
                a.report_name(),
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
                    a.report_name().into(),
                    format!("{first:.1}"),
                    format!("{last:.1}"),
                    format!("{:.2}", last / first),
                ]);
            }
            if case.rss && !cli.no_rss {
                match rss::measure(cli, a, case) {
                    Ok(o) => {
                        r.peak_rss_kib = Some(o.delta_kib.max(1));
                        if matches!(case.kind, Kind::RssPayload { .. }) && o.payload_bytes > 0 {
                            extra.payload.push(vec![
                                case.name.clone(),
                                a.report_name().into(),
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
