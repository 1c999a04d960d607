//! `tiering-plot LOG DIR`: the plot of automatic tiering over time. Reads the `SERIES` lines the
//! NUMA guest's `auto_tiering` test prints (`numa-vm/run --kernel 6.12 --far-node --filter
//! auto_tiering > LOG`; `SERIES auto_tiering ms=… cache_near_kib=… cache_far_kib=…
//! request_near_kib=… request_far_kib=…`, pages read with `move_pages`) and draws the cache's
//! and the requests' MiB on near and on far memory against seconds since the cache was built
//! (`DIR/tiering_over_time.png`).

use nodalloc_bench::plot::{line_plot, PlotSpec};
use std::path::Path;
use std::process::ExitCode;

/// The series drawn: their names and the fields they read.
const SERIES: [(&str, &str); 4] = [
    ("cache, near", "cache_near_kib"),
    ("cache, far", "cache_far_kib"),
    ("requests, near", "request_near_kib"),
    ("requests, far", "request_far_kib"),
];

/// The value of `key=` in a `SERIES` line.
fn field(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))?
        .parse()
        .ok()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, log, dir] = args.as_slice() else {
        eprintln!("usage: tiering-plot LOG DIR");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(log) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("tiering-plot: {log}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let rows: Vec<&str> = text
        .lines()
        .filter_map(|line| line.find("SERIES auto_tiering ").map(|at| &line[at..]))
        .collect();
    let lines = SERIES
        .iter()
        .map(|(name, key)| {
            let points = rows
                .iter()
                .filter_map(|row| Some((field(row, "ms")? / 1000.0, field(row, key)? / 1024.0)))
                .collect();
            (name.to_string(), points)
        })
        .collect();
    let spec = PlotSpec {
        name: "tiering_over_time".into(),
        title: "Automatic tiering: a 32 MiB cache goes far when quiet, comes back when busy".into(),
        x_label: "seconds since the cache was built".into(),
        y_label: "MiB (pages by move_pages)".into(),
        log_x: false,
        log_y: false,
        lines,
    };
    match line_plot(Path::new(dir), &spec) {
        Ok(path) => {
            println!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("tiering-plot: {error}");
            ExitCode::FAILURE
        }
    }
}
