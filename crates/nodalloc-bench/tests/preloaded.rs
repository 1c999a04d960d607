//! The suites that run other programs: the classic C workloads (each checks
//! its own objects and counts and exits non-zero on a failure) at tiny scale
//! under glibc and under libnodalloc.so, the HTTP server binary, and the whole
//! showdown end to end with tiny parameters.

use nodalloc_bench::preload::{self, result_fields, run_preloaded, PreloadAlloc};
use nodalloc_bench::suites::c::{self, Tools};
use nodalloc_bench::suites::Mode;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nodalloc-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn tools() -> &'static Tools {
    static T: OnceLock<Tools> = OnceLock::new();
    T.get_or_init(|| c::build_tools(&scratch("tools")).expect("cc builds the classic program"))
}

fn contenders() -> Vec<PreloadAlloc> {
    let lib = preload::nodalloc_lib().expect("libnodalloc.so builds");
    vec![
        PreloadAlloc {
            name: "glibc".into(),
            lib: None,
            env: vec![],
        },
        PreloadAlloc {
            name: "nodalloc".into(),
            lib: Some(lib),
            env: vec![],
        },
    ]
}

fn run(workload: &str, threads: usize, alloc: &PreloadAlloc) -> String {
    let t = tools();
    let mut cmd = Command::new(&t.classic);
    cmd.args([workload, &threads.to_string(), "0"]);
    let run = run_preloaded(
        cmd,
        alloc,
        t.probe.as_deref(),
        &t.scratch,
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("{workload} under {}: {e}", alloc.name));
    assert!(
        run.hwm_kib.unwrap_or(0) > 0,
        "the probe reported no peak RSS"
    );
    run.stdout
}

#[test]
fn every_classic_workload_passes_its_checks() {
    let listed = Command::new(&tools().classic)
        .arg("--list")
        .output()
        .unwrap();
    let listed = String::from_utf8(listed.stdout).unwrap();
    for w in c::TIMED.iter().chain(c::PROFILES.iter()) {
        assert!(listed.lines().any(|l| l == *w), "classic --list lacks {w}");
    }
    for alloc in contenders() {
        for w in c::TIMED {
            for threads in [1, 4] {
                let out = run(w, threads, &alloc);
                let f = result_fields(&out).unwrap();
                assert_eq!(f["workload"], w);
                let ops: u64 = preload::field(&f, "ops").unwrap();
                let ns: u64 = preload::field(&f, "elapsed_ns").unwrap();
                assert!(ops > 0 && ns > 0, "{w} {}: {out}", alloc.name);
            }
        }
    }
}

/// `server-model` (the call-site workload, run by hand until partitions join the showdown)
/// passes its checks and reports the RSS left with only its caches live.
#[test]
fn server_model_reports_the_rss_its_caches_keep() {
    for alloc in contenders() {
        for threads in [1, 4] {
            let out = run("server-model", threads, &alloc);
            let f = result_fields(&out).unwrap();
            let cache_bytes: u64 = preload::field(&f, "cache_bytes").unwrap();
            let after: u64 = preload::field(&f, "rss_after_kib").unwrap();
            let idle: u64 = preload::field(&f, "rss_idle_kib").unwrap();
            // At SCALE=0 each worker keeps 500 entries of 64..512 B.
            assert!(
                cache_bytes >= threads as u64 * 500 * 64,
                "{}: {out}",
                alloc.name
            );
            assert!(after > 0 && idle > 0, "{}: {out}", alloc.name);
        }
    }
}

#[test]
fn bad_arguments_are_refused() {
    let t = tools();
    for args in [
        &["nosuch", "1", "0"][..],
        &["larson", "0", "0"],
        &["larson"],
    ] {
        let st = Command::new(&t.classic).args(args).status().unwrap();
        assert_eq!(st.code(), Some(2), "classic {args:?}");
    }
}

#[test]
fn profiles_give_their_distributions() {
    let allocs = contenders();
    let t = tools();
    let frag = c::run_frag(t, &allocs, Mode::Tiny);
    for row in &frag.rows {
        let ratio: f64 = row[3]
            .parse()
            .unwrap_or_else(|_| panic!("frag row {row:?}"));
        assert!(ratio >= 1.0, "usable below requested: {row:?}");
    }
    let (series, table) = c::run_latency(t, &allocs, Mode::Tiny, 2);
    assert_eq!(series.len(), 2, "{table:?}");
    for s in &series {
        assert!(
            s.points.len() >= 50,
            "{}: {} CDF points",
            s.allocator,
            s.points.len()
        );
        assert!(
            s.points
                .windows(2)
                .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1),
            "{}: CDF not monotone",
            s.allocator
        );
    }
    let (series, table) = c::run_rss_time(t, &allocs, Mode::Tiny);
    assert_eq!(series.len(), 2, "{table:?}");
    for s in &series {
        assert!(
            s.points.len() >= 3,
            "{}: {} RSS samples",
            s.allocator,
            s.points.len()
        );
        assert!(s.points.iter().all(|p| p.1 > 0.0));
    }
}

#[test]
fn http_server_serves_and_checks_every_size() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_http"));
    for alloc in ["system", "nodalloc", "mimalloc"] {
        for size in ["32", "65536"] {
            let out = Command::new(&bin)
                .args([size, "40", "2"])
                .env("NODALLOC_BENCH_ALLOCATOR", alloc)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{alloc} {size}: {stdout} {:?}",
                out.stderr
            );
            let f = result_fields(&stdout).unwrap();
            assert_eq!(f["allocator"], alloc);
            assert_eq!(f["requests"], "40");
            assert!(preload::field::<u64>(&f, "rss_after_kib").unwrap() > 0);
        }
    }
}

#[test]
fn showdown_end_to_end() {
    let dir = scratch("showdown");
    let out = Command::new(env!("CARGO_BIN_EXE_nodalloc-bench"))
        .args([
            "--tiny",
            "--only",
            "bulk,glibc_simple,latency,rss_time,http/32B",
            "--allocators",
            "nodalloc,glibc,mimalloc",
            "--repeat",
            "2",
            "--out",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for needle in [
        "| bulk/100x16B",
        "| c/glibc-simple/1t",
        "| http/32B",
        "## Targets",
        "nodalloc",
    ] {
        assert!(
            stdout.contains(needle),
            "stdout lacks {needle:?}:\n{stdout}"
        );
    }
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("malloc latency"), "{md}");
    assert!(md.contains("RSS over time"), "{md}");
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    // 3 bulk cases + glibc-simple + http/32B, 3 allocators, 2 runs each.
    let runs = csv.lines().skip(1).filter(|l| !l.is_empty()).count();
    assert_eq!(runs, 5 * 3 * 2, "{csv}");
    for plot in ["latency_cdf", "rss_over_time"] {
        assert!(
            ["png", "svg"]
                .iter()
                .any(|e| dir.join(format!("{plot}.{e}")).exists()),
            "no {plot} plot"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
