//! The `http` suite: the `http` binary (an axum server and its keep-alive
//! client in one process, `src/bin/http.rs`) once per (size, Rust allocator,
//! repetition): requests per second, peak RSS, and the RSS the server keeps
//! after the load (a table).
//!
//! A separate process per run because the allocator is the process's
//! `#[global_allocator]` there, chosen by `NODALLOC_BENCH_ALLOCATOR`.

use super::{size_label, CaseId, Context, Mode, Suite};
use crate::preload::{self, PreloadAlloc};
use crate::report::{self, Better, Record, Report, Table};
use std::process::Command;
use std::time::Duration;

/// Response sizes.
const HTTP_SIZES: [u64; 4] = [32, 256, 16 << 10, 64 << 10];

fn http_case(size: u64) -> String {
    format!("http/{}", size_label(size as usize))
}

/// The response sizes that are selected.
pub struct HttpSuite {
    sizes: Vec<u64>,
}

impl HttpSuite {
    pub fn new() -> HttpSuite {
        HttpSuite {
            sizes: HTTP_SIZES.to_vec(),
        }
    }
}

impl Default for HttpSuite {
    fn default() -> Self {
        Self::new()
    }
}

impl Suite for HttpSuite {
    fn name(&self) -> &'static str {
        "http"
    }

    fn cases(&self) -> Vec<CaseId> {
        self.sizes
            .iter()
            .map(|&s| CaseId::new("http", http_case(s)))
            .collect()
    }

    fn retain(&mut self, keep: &dyn Fn(&[&str]) -> bool) {
        self.sizes
            .retain(|&s| keep(&["http", "http", &http_case(s)]));
    }

    /// One step for all sizes: the server binary is built once for all.
    fn steps(&self) -> usize {
        usize::from(!self.sizes.is_empty())
    }

    fn run(&self, ctx: &mut Context, rep: &mut Report) {
        run_sizes(ctx, &self.sizes, rep);
        ctx.bar.inc(1);
    }
}

/// Requests per run for a mode and response size: fewer for large bodies,
/// so every size takes about as long.
fn requests(mode: Mode, size: u64) -> u64 {
    match (mode, size) {
        (Mode::Tiny, _) => 50,
        (Mode::Full, s) if s >= 16 << 10 => 40_000,
        (Mode::Full, _) => 100_000,
        (_, s) if s >= 16 << 10 => 2_000,
        _ => 4_000,
    }
}

/// One process per (size, allocator, repetition), allocators rotated.
fn run_sizes(ctx: &Context, sizes: &[u64], rep: &mut Report) {
    // Always through cargo (a no-op when fresh): a binary left from an older
    // build would measure an older nodalloc.
    let bin =
        match preload::build_artifact(&["-p", "nodalloc-bench", "--bin", "http"], "http", true) {
            Ok(b) => b,
            Err(e) => {
                rep.skipped.push(format!("http: {e}"));
                return;
            }
        };
    let allocs = &ctx.rust_allocs;
    let repeat = ctx.cli.repeat("http");
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
        .map(|a| vec![a.report_name().to_string()])
        .collect();
    for &size in sizes {
        ctx.bar.set_message(http_case(size));
        let requests = requests(ctx.cli.mode(), size);
        after.header.push(size_label(size as usize));
        let mut recs: Vec<Record> = allocs
            .iter()
            .map(|a| {
                let mut r = Record::new(
                    "http",
                    "http",
                    &http_case(size),
                    a.report_name(),
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
                // Nothing preloaded: the allocator is chosen inside the process.
                let none = PreloadAlloc {
                    name: allocs[i].report_name().into(),
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
