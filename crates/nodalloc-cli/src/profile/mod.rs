//! `nodalloc profile top|diff|flamegraph`: reading heap profiles in pprof's format (nodalloc's
//! own, or any other program's) without Go's `pprof` at hand. A report groups the samples by
//! function (a frame's name, its inlined functions expanded) or by one of nodalloc's labels
//! (`node`, `tier`, `partition`); a flame graph is drawn by `inferno` from folded stacks.

mod decode;
mod symbols;

use clap::{Args, Subcommand, ValueEnum};
use decode::Profile;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum ProfileCommand {
    /// The functions (or nodes, tiers, partitions) holding the most, as `pprof -top` lists them.
    Top {
        #[command(flatten)]
        view: View,
        /// The profile (pprof's format, gzip or not).
        file: PathBuf,
    },
    /// What changed from BASE to FILE, per function: growth first (a leak shows as the
    /// function whose live bytes keep growing between two profiles of one run).
    Diff {
        #[command(flatten)]
        view: View,
        /// The earlier profile.
        base: PathBuf,
        /// The later profile.
        file: PathBuf,
    },
    /// A flame graph (SVG, to standard output) of the sample type's stacks.
    Flamegraph {
        /// inuse_space, inuse_objects, alloc_space or alloc_objects (the profile's default
        /// when not given, inuse_space for nodalloc's).
        #[arg(long, value_name = "TYPE")]
        sample: Option<String>,
        /// Print the folded stacks ("caller;callee value" lines) instead of drawing them.
        #[arg(long)]
        folded: bool,
        /// The profile (pprof's format, gzip or not).
        file: PathBuf,
    },
}

#[derive(Args)]
pub struct View {
    /// inuse_space, inuse_objects, alloc_space or alloc_objects (the profile's default when
    /// not given, inuse_space for nodalloc's).
    #[arg(long, value_name = "TYPE")]
    sample: Option<String>,
    /// Group by function (the default) or by one of the samples' labels.
    #[arg(long, value_enum, default_value_t = By::Function)]
    by: By,
    /// Rows to show.
    #[arg(short = 'n', long, default_value_t = 20)]
    count: usize,
    /// Sort by cumulative values (what a function and its callees hold) instead of flat.
    #[arg(long)]
    cum: bool,
}

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum By {
    Function,
    /// nodalloc's node index (as its statistics and `nodalloc topology` number nodes).
    Node,
    /// The kernel's node number (numactl's).
    OsNode,
    Tier,
    Partition,
}

impl By {
    fn label(self) -> &'static str {
        match self {
            By::Function => "function",
            By::Node => "node",
            By::OsNode => "os_node",
            By::Tier => "tier",
            By::Partition => "partition",
        }
    }
}

pub fn run(command: ProfileCommand) -> ExitCode {
    let result = match command {
        ProfileCommand::Top { view, file } => top(&view, &file),
        ProfileCommand::Diff { view, base, file } => diff(&view, &base, &file),
        ProfileCommand::Flamegraph {
            sample,
            folded,
            file,
        } => flamegraph(sample.as_deref(), folded, &file),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("nodalloc profile: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Flat and cumulative values per row of a report, and the total.
struct Table {
    flat: HashMap<String, i64>,
    cum: HashMap<String, i64>,
    total: i64,
    unit: String,
    kind: String,
}

fn table(profile: &Profile, sample: Option<&str>, by: By) -> Result<Table, String> {
    let index = profile.type_index(sample)?;
    let (kind, unit) = profile.types[index].clone();
    let mut flat: HashMap<String, i64> = HashMap::new();
    let mut cum: HashMap<String, i64> = HashMap::new();
    let mut total = 0;
    for sample in &profile.samples {
        let value = sample.values.get(index).copied().unwrap_or(0);
        if value == 0 {
            continue;
        }
        total += value;
        if by == By::Function {
            if let Some(leaf) = sample.stack.first() {
                *flat.entry(leaf.clone()).or_default() += value;
            }
            let mut seen: Vec<&String> = Vec::new();
            for name in &sample.stack {
                if !seen.contains(&name) {
                    seen.push(name);
                    *cum.entry(name.clone()).or_default() += value;
                }
            }
        } else {
            let row = sample
                .labels
                .iter()
                .find(|(key, _)| key == by.label())
                .map(|(_, value)| format!("{}={value}", by.label()))
                .unwrap_or_else(|| format!("no {} label", by.label()));
            *flat.entry(row.clone()).or_default() += value;
            *cum.entry(row).or_default() += value;
        }
    }
    Ok(Table {
        flat,
        cum,
        total,
        unit,
        kind,
    })
}

/// A value in its unit: bytes as B/KiB/MiB/GiB, anything else as a number.
fn show(value: i64, unit: &str) -> String {
    if unit != "bytes" {
        return value.to_string();
    }
    let size = value.unsigned_abs() as f64;
    let sign = if value < 0 { "-" } else { "" };
    match size {
        s if s >= (1u64 << 30) as f64 => format!("{sign}{:.2}GiB", s / (1u64 << 30) as f64),
        s if s >= (1u64 << 20) as f64 => format!("{sign}{:.2}MiB", s / (1u64 << 20) as f64),
        s if s >= 1024.0 => format!("{sign}{:.2}KiB", s / 1024.0),
        s => format!("{sign}{s}B"),
    }
}

fn percent(part: i64, whole: i64) -> String {
    if whole == 0 {
        return "-".to_string();
    }
    format!("{:.2}%", part as f64 * 100.0 / whole as f64)
}

fn top(view: &View, file: &std::path::Path) -> Result<(), String> {
    let profile = decode::read(file)?;
    let table = table(&profile, view.sample.as_deref(), view.by)?;
    let mut rows: Vec<(&String, i64, i64)> = table
        .cum
        .iter()
        .map(|(name, &cum)| (name, table.flat.get(name).copied().unwrap_or(0), cum))
        .collect();
    rows.sort_by(|a, b| {
        let key = |row: &(&String, i64, i64)| if view.cum { row.2 } else { row.1 };
        key(b).cmp(&key(a)).then(b.2.cmp(&a.2)).then(a.0.cmp(b.0))
    });
    let mut out = std::io::stdout().lock();
    let period = if profile.period > 0 {
        format!(
            ", sampled every {} on average",
            show(profile.period, "bytes")
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{}: {} total in {} stacks{period}",
        table.kind,
        show(table.total, &table.unit),
        profile.samples.len()
    );
    let _ = writeln!(
        out,
        "{:>12} {:>8} {:>8} {:>12} {:>8}  {}",
        "flat",
        "flat%",
        "sum%",
        "cum",
        "cum%",
        view.by.label()
    );
    let mut sum = 0;
    for (name, flat, cum) in rows.into_iter().take(view.count) {
        sum += flat;
        let _ = writeln!(
            out,
            "{:>12} {:>8} {:>8} {:>12} {:>8}  {name}",
            show(flat, &table.unit),
            percent(flat, table.total),
            percent(sum, table.total),
            show(cum, &table.unit),
            percent(cum, table.total),
        );
    }
    Ok(())
}

fn diff(view: &View, base: &std::path::Path, file: &std::path::Path) -> Result<(), String> {
    let before = table(&decode::read(base)?, view.sample.as_deref(), view.by)?;
    let after = table(&decode::read(file)?, view.sample.as_deref(), view.by)?;
    let mut names: Vec<&String> = before.cum.keys().chain(after.cum.keys()).collect();
    names.sort();
    names.dedup();
    let value = |table: &Table, name: &String, cum: bool| {
        let map = if cum { &table.cum } else { &table.flat };
        map.get(name).copied().unwrap_or(0)
    };
    let mut rows: Vec<(&String, i64, i64, i64)> = names
        .into_iter()
        .map(|name| {
            let delta = value(&after, name, view.cum) - value(&before, name, view.cum);
            (
                name,
                delta,
                value(&before, name, view.cum),
                value(&after, name, view.cum),
            )
        })
        .filter(|row| row.1 != 0)
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let unit = &after.unit;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{}: {} -> {} ({})",
        after.kind,
        show(before.total, unit),
        show(after.total, unit),
        show(after.total - before.total, unit)
    );
    let which = if view.cum { "cum" } else { "flat" };
    let _ = writeln!(
        out,
        "{:>12} {:>12} {:>12}  {}",
        "change",
        format!("{which} before"),
        format!("{which} after"),
        view.by.label()
    );
    for (name, delta, old, new) in rows.into_iter().take(view.count) {
        let _ = writeln!(
            out,
            "{:>12} {:>12} {:>12}  {name}",
            show(delta, unit),
            show(old, unit),
            show(new, unit)
        );
    }
    Ok(())
}

/// Folded stacks: one line per distinct stack, root first, with its summed value.
fn folded(profile: &Profile, sample: Option<&str>) -> Result<(Vec<String>, String), String> {
    let index = profile.type_index(sample)?;
    let mut stacks: HashMap<String, i64> = HashMap::new();
    for sample in &profile.samples {
        let value = sample.values.get(index).copied().unwrap_or(0);
        if value <= 0 {
            continue;
        }
        let names: Vec<String> = sample
            .stack
            .iter()
            .rev()
            .map(|name| name.replace(';', ":"))
            .collect();
        *stacks.entry(names.join(";")).or_default() += value;
    }
    let mut lines: Vec<String> = stacks
        .into_iter()
        .map(|(stack, value)| format!("{stack} {value}"))
        .collect();
    lines.sort();
    Ok((lines, profile.types[index].0.clone()))
}

fn flamegraph(
    sample: Option<&str>,
    only_folded: bool,
    file: &std::path::Path,
) -> Result<(), String> {
    let profile = decode::read(file)?;
    let (lines, kind) = folded(&profile, sample)?;
    let mut out = std::io::stdout().lock();
    if only_folded {
        for line in &lines {
            let _ = writeln!(out, "{line}");
        }
        return Ok(());
    }
    if lines.is_empty() {
        return Err(format!("{}: no samples of {kind}", file.display()));
    }
    let mut options = inferno::flamegraph::Options::default();
    options.title = format!("{kind}: {}", file.display());
    options.count_name = if kind.ends_with("space") {
        "bytes".to_string()
    } else {
        "objects".to_string()
    };
    options.colors =
        inferno::flamegraph::color::Palette::Basic(inferno::flamegraph::color::BasicPalette::Mem);
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut out)
        .map_err(|e| format!("drawing the flame graph: {e}"))
}
