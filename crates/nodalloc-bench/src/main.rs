//! `nodalloc-bench`: the allocator showdown, what `cargo run --release` at the
//! repository root runs.
//!
//! Every allocator side by side in one run, suite after suite (see
//! `src/suites/`): `rust` (in-process workloads), `c` (the classic C
//! benchmarks under `LD_PRELOAD`), `program` (sqlite3, python3 and a redis
//! server under load, under `LD_PRELOAD`), `http` (an axum server and its
//! client) and `callgrind`
//! (fast-path instruction counts). Ends with one table (each allocator's time
//! and RSS as ratios to the best, per case), the targets, and where
//! `report.md`, `results.csv` and the plots were written.
//!
//! The binary is also its own helper process: with the hidden `--rss-child`
//! flag it runs one Rust case for a peak-RSS measurement (`src/rss.rs`).

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use nodalloc_bench::cli::{AllocatorFilter, Cli};
use nodalloc_bench::report::Report;
use nodalloc_bench::suites::{Context, Plan};
use nodalloc_bench::{machine, rss, Allocator};
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(args) = &cli.rss_child {
        return rss::child(&args[0], &args[1], &cli.config());
    }
    if let Err(e) = cli.validate() {
        eprintln!("{e}");
        return ExitCode::from(2);
    }
    let filter = match AllocatorFilter::parse(&cli.allocators) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("--allocators: {e}");
            return ExitCode::from(2);
        }
    };
    let mut plan = Plan::new(&cli);
    if cli.list {
        for (suite, case) in plan.listing() {
            println!("{suite:<8} {:<18} {}", case.group, case.name);
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
    plan.select(&cli);
    if plan.steps() == 0 {
        eprintln!("--only selected nothing");
        return ExitCode::from(2);
    }
    showdown(&cli, &plan, &filter)
}

/// Runs the plan, writes the report and prints its summary.
fn showdown(cli: &Cli, plan: &Plan, filter: &AllocatorFilter) -> ExitCode {
    let started = Instant::now();
    let mut rep = Report {
        title: format!("nodalloc showdown ({} mode)", cli.mode().name()),
        command: std::iter::once("nodalloc-bench".to_string())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        machine: machine::describe(),
        ..Report::default()
    };
    if !Allocator::Numalloc.is_available() && filter.wants("numalloc") {
        rep.skipped
            .push("numalloc: not built (cargo feature `numalloc` off)".into());
    }
    let bar = ProgressBar::new(plan.steps() as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:32}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut ctx = Context::new(cli, filter, bar);
    plan.run(&mut ctx, &mut rep);

    ctx.bar.set_message("writing the report");
    let written = rep.write(&ctx.out_dir);
    ctx.bar.finish_and_clear();
    if cli.csv {
        print!("{}", rep.csv());
    } else {
        print!("{}", rep.console());
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
            eprintln!(
                "\ncould not write the report to {}: {e}",
                ctx.out_dir.display()
            );
            ExitCode::FAILURE
        }
    };
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
    status
}
