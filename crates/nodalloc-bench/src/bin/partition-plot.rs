//! `partition-plot CSV DIR`: the plots of `scripts/partition-sweep.sh`. Reads the sweep's CSV
//! (`P,policy,ms,rss_after_kib,rss_idle_kib,python_s,python_kib,sqlite_s,sqlite_kib,
//! rss_time_ms,rss_time_final_kib`, `-` for a figure not measured) and draws, against P on a log axis (the mode off at P = 1, which is
//! the same allocator), each series as a ratio to its own figure with the mode off: RSS
//! (`partition_rss.png`) and time (`partition_time.png`).

use nodalloc_bench::plot::{line_plot, PlotSpec};
use std::path::Path;
use std::process::ExitCode;

/// One series: its name, and the CSV column it reads for the rows of one policy.
struct Series {
    name: &'static str,
    policy: &'static str,
    column: usize,
}

const RSS: [Series; 5] = [
    Series {
        name: "server-model RSS after churn",
        policy: "default",
        column: 3,
    },
    Series {
        name: "server-model, eager release",
        policy: "eager",
        column: 3,
    },
    Series {
        name: "python3 peak RSS",
        policy: "default",
        column: 6,
    },
    Series {
        name: "sqlite3 peak RSS",
        policy: "default",
        column: 8,
    },
    Series {
        name: "rss-time RSS after drain",
        policy: "default",
        column: 10,
    },
];

const TIME: [Series; 5] = [
    Series {
        name: "server-model",
        policy: "default",
        column: 2,
    },
    Series {
        name: "server-model, eager release",
        policy: "eager",
        column: 2,
    },
    Series {
        name: "python3",
        policy: "default",
        column: 5,
    },
    Series {
        name: "sqlite3",
        policy: "default",
        column: 7,
    },
    Series {
        name: "rss-time",
        policy: "default",
        column: 9,
    },
];

/// Points (P, figure ÷ figure with the mode off) of `series`; P = 0 is drawn at 1.
fn points(rows: &[Vec<String>], series: &Series) -> Vec<(f64, f64)> {
    let mut raw: Vec<(f64, f64)> = rows
        .iter()
        .filter(|row| row[1] == series.policy)
        .filter_map(|row| {
            let partitions: f64 = row[0].parse().ok()?;
            let value: f64 = row.get(series.column)?.parse().ok()?;
            Some((partitions.max(1.0), value))
        })
        .collect();
    raw.sort_by(|a, b| a.0.total_cmp(&b.0));
    let Some(&(_, off)) = raw.first().filter(|(p, v)| *p == 1.0 && *v > 0.0) else {
        return Vec::new();
    };
    raw.into_iter().map(|(p, v)| (p, v / off)).collect()
}

fn plot(dir: &Path, rows: &[Vec<String>], name: &str, title: &str, series: &[Series]) {
    let spec = PlotSpec {
        name: name.into(),
        title: title.into(),
        x_label: "P (NODALLOC_CALLSITE; 1 = off)".into(),
        y_label: "× the mode off".into(),
        log_x: true,
        log_y: false,
        lines: series
            .iter()
            .map(|s| (s.name.to_string(), points(rows, s)))
            .filter(|(_, points)| !points.is_empty())
            .collect(),
    };
    match line_plot(dir, &spec) {
        Ok(path) => println!("{}", path.display()),
        Err(error) => eprintln!("partition-plot: {name}: {error}"),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: partition-plot CSV DIR");
        return ExitCode::from(2);
    }
    let text = match std::fs::read_to_string(&args[1]) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("partition-plot: {}: {error}", args[1]);
            return ExitCode::FAILURE;
        }
    };
    let rows: Vec<Vec<String>> = text
        .lines()
        .filter(|line| !line.starts_with('P') && !line.trim().is_empty())
        .map(|line| line.split(',').map(|f| f.trim().to_string()).collect())
        .filter(|row: &Vec<String>| row.len() >= 11)
        .collect();
    let dir = Path::new(&args[2]);
    plot(
        dir,
        &rows,
        "partition_rss",
        "Call-site partitions: memory",
        &RSS,
    );
    plot(
        dir,
        &rows,
        "partition_time",
        "Call-site partitions: time",
        &TIME,
    );
    ExitCode::SUCCESS
}
