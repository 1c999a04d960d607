//! The machine description at the top of the report: enough to tell whether
//! two reports can be compared (CPU, memory, NUMA nodes, kernel, transparent
//! huge pages, nodalloc commit, date). Called once by `src/main.rs`.

use crate::preload;
use std::process::Command;

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Lines for the report's header: CPUs, memory, NUMA nodes, kernel and THP
/// mode, this nodalloc's version and commit, and the date.
pub fn describe() -> Vec<String> {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .map_or("?".into(), |k| format!("{:.1} GiB", k / 1024.0 / 1024.0));
    let nodes = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.starts_with("node") && n[4..].parse::<u32>().is_ok()
                })
                .count()
        })
        .unwrap_or(0)
        .max(1);
    let git = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(preload::workspace_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let date = Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d %H:%M UTC")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    vec![
        format!("machine: {cpus} CPUs ({model}), {mem}, {nodes} NUMA node(s)"),
        format!(
            "kernel {}, transparent huge pages: {}",
            read_trim("/proc/sys/kernel/osrelease").unwrap_or_default(),
            read_trim("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default()
        ),
        format!(
            "nodalloc {} at commit {}, {}",
            env!("CARGO_PKG_VERSION"),
            git.unwrap_or_else(|| "?".into()),
            date.unwrap_or_default()
        ),
    ]
}
