//! Peak RSS of one Rust case with one allocator, measured in a fresh process.
//!
//! Inside the showdown's process every allocator's heap history would be
//! mixed with the others', so the Rust suite ([`measure`]) re-executes the
//! running binary with the hidden `--rss-child ALLOC CASE` flag, which
//! `src/main.rs` hands to [`child`].

use crate::cli::Cli;
use crate::suites::rust::cases::{cases, Case, SuiteConfig};
use crate::Allocator;
use std::process::{Command, ExitCode};

/// Peak resident set size of this process so far, in KiB, per getrusage.
///
/// Linux carries `ru_maxrss` across `execve` (the kernel folds the pre-exec
/// address space's high-water mark into it), so in a child spawned by a parent
/// that is already large it starts at the parent's peak and a smaller workload
/// never moves it. That is why the child measures with [`hwm_kib`] and reports
/// this only alongside.
fn max_rss_kib() -> u64 {
    // SAFETY: `rusage` is plain old data for which all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`; RUSAGE_SELF is always valid.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage failed");
    // Linux reports ru_maxrss in KiB.
    ru.ru_maxrss.max(0) as u64
}

/// `VmHWM` from `/proc/self/status`, in KiB: the high-water mark of this
/// address space only, which starts afresh at `execve`.
fn hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}

/// Child side: one case, one allocator, fresh process; prints the result
/// line [`measure`] parses.
pub fn child(alloc: &str, case_name: &str, cfg: &SuiteConfig) -> ExitCode {
    let Some(alloc) = Allocator::from_name(alloc).filter(|a| a.is_available()) else {
        eprintln!("rss-child: unknown or unavailable allocator {alloc:?}");
        return ExitCode::from(2);
    };
    let Some(case) = cases(cfg).into_iter().find(|c| c.name == case_name) else {
        eprintln!("rss-child: unknown case {case_name:?}");
        return ExitCode::from(2);
    };
    // Raise the high-water mark by the harness's own bookkeeping first, so the
    // delta below is (close to) what the allocator under test added.
    let book = case.bookkeeping_bytes();
    if book > 0 {
        let mut v = vec![0u8; book];
        for i in (0..book).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&mut v);
    }
    let base = max_rss_kib();
    let base_hwm = hwm_kib();
    let r = case.run(alloc);
    let peak = max_rss_kib();
    let maxrss_delta = peak.saturating_sub(base);
    // Without /proc, fall back to getrusage, right when run from a small parent.
    let delta = match (base_hwm, hwm_kib()) {
        (Some(b), Some(p)) => p.saturating_sub(b),
        _ => maxrss_delta,
    };
    println!(
        "rss_delta_kib={delta} maxrss_delta_kib={maxrss_delta} payload_bytes={} elapsed_ns={} \
         huge_kib={}",
        r.payload_bytes.unwrap_or(0),
        r.elapsed.as_nanos(),
        r.huge_kib.unwrap_or(0)
    );
    ExitCode::SUCCESS
}

/// What a child measured.
#[derive(Clone, Debug)]
pub struct RssOutcome {
    pub delta_kib: u64,
    pub payload_bytes: u64,
    /// KiB on transparent huge pages at the peak (0 where not measured).
    pub huge_kib: u64,
}

/// Parent side: re-executes this binary for one (allocator, case), with the
/// mode and thread counts of this run so the child builds the same case.
pub fn measure(cli: &Cli, alloc: Allocator, case: &Case) -> Result<RssOutcome, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--rss-child").arg(alloc.name()).arg(&case.name);
    if cli.full {
        cmd.arg("--full");
    }
    if cli.tiny {
        cmd.arg("--tiny");
    }
    if !cli.threads.is_empty() {
        let t: Vec<String> = cli.threads.iter().map(|t| t.to_string()).collect();
        cmd.arg("--threads").arg(t.join(","));
    }
    let out = cmd.output().map_err(|e| format!("spawn: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "child {}: {}",
            out.status,
            err.lines().last().unwrap_or("")
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |key: &str| -> Result<u64, String> {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("child printed no {key}: {text:?}"))
    };
    Ok(RssOutcome {
        delta_kib: field("rss_delta_kib")?,
        payload_bytes: field("payload_bytes")?,
        huge_kib: field("huge_kib").unwrap_or(0),
    })
}
