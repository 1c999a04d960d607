//! The showdown's command line: the flags `src/main.rs` parses, and what the
//! suites derive from them (mode, repetitions, the selection of `--only` and
//! `--allocators`, the output directory).
//!
//! It lives in the library rather than in `main.rs` because every suite reads
//! its settings from it and the RSS children are re-executed with the same
//! parameters.

use crate::preload;
use crate::suites::rust::cases::SuiteConfig;
use crate::suites::Mode;
use crate::Allocator;
use clap::Parser;
use std::path::PathBuf;

const ABOUT: &str = "Side-by-side allocator showdown: nodalloc vs glibc, mimalloc, jemalloc, \
                     snmalloc, tcmalloc and numalloc";

#[derive(Parser, Debug)]
#[command(
    name = "nodalloc-bench",
    about = ABOUT,
    after_help = "Suites for --only: rust, c, http, program. Workload groups: single_size, bulk, \
                  threads, producer_consumer, realloc_growth, mixed, live_cliff, rss_payload, \
                  hoard_numa (rust); larson, xmalloc, cache_thrash, cache_scratch, mstress, \
                  glibc_simple, glibc_thread, malloc_large, xthread, churn, alloc_test, frag, latency, \
                  rss_time (c); http; \
                  sqlite3, python3, redis (program); callgrind (fast-path instruction counts, run by default when \
                  valgrind is installed). Or an exact case name, see --list.\n\n\
                  Allocators: nodalloc, glibc (alias system), mimalloc, jemalloc, snmalloc, \
                  numalloc (Rust crates), tcmalloc and nodalloc-secure (LD_PRELOAD suites only); \
                  nodalloc-callsite (NODALLOC_CALLSITE=64), nodalloc-background \
                  (NODALLOC_BACKGROUND=1), nodalloc-profile (NODALLOC_PROFILE=1) and jemalloc-prof \
                  (MALLOC_CONF=prof:true,lg_prof_sample:19), LD_PRELOAD suites, only when named."
)]
pub struct Cli {
    /// Run only these suites, workload groups or case names (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "WORKLOAD")]
    pub only: Vec<String>,
    /// Allocators to compare (comma-separated); default: all that are available.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub allocators: Vec<String>,
    /// Thread counts of the multi-threaded workloads (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "N")]
    pub threads: Vec<usize>,
    /// Print the CSV of raw runs to stdout instead of the tables.
    #[arg(long)]
    pub csv: bool,
    /// Timed runs per allocator and case; the median is reported.
    /// Default: 5 (quick) for the Rust suite, 3 for the others; 7 (full).
    #[arg(long, value_name = "N")]
    pub repeat: Option<usize>,
    /// Quick parameters (the default): the whole showdown in about 7 minutes on 2 CPUs.
    #[arg(long, conflicts_with = "full")]
    pub quick: bool,
    /// Larger parameters and more thread counts.
    #[arg(long)]
    pub full: bool,
    /// Directory for report.md, results.csv and the plots.
    /// Default: target/nodalloc-bench.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Stop repeating an allocator on a Rust case once its runs there have
    /// taken this many seconds (it keeps at least one run); keeps one
    /// pathological allocator from dominating the wall time. Default: 2
    /// (quick), 20 (full).
    #[arg(long, value_name = "SECONDS")]
    pub cell_budget: Option<f64>,
    /// Skip the peak-RSS child processes of the Rust suite.
    #[arg(long)]
    pub no_rss: bool,
    /// Skip the fast-path instruction counts (run under valgrind when it is
    /// installed).
    #[arg(long)]
    pub no_callgrind: bool,
    /// Object sizes of the fast-path counts (comma-separated). Default: 64;
    /// with this flag the table has one column per size and an `overhead`
    /// row (the measuring loop alone).
    #[arg(long, value_delimiter = ',', value_name = "BYTES")]
    pub callgrind_sizes: Vec<usize>,
    /// malloc+free pairs per fast-path count. Default: 100000.
    #[arg(long, value_name = "N")]
    pub callgrind_pairs: Option<u64>,
    /// List the cases and exit.
    #[arg(long)]
    pub list: bool,
    /// Internal: tiny parameters, for the tests of the harness itself.
    #[arg(long, hide = true, conflicts_with = "full")]
    pub tiny: bool,
    /// Internal: run one case with one allocator, print its peak RSS.
    #[arg(long, num_args = 2, value_names = ["ALLOC", "CASE"], hide = true)]
    pub rss_child: Option<Vec<String>>,
}

impl Cli {
    pub fn mode(&self) -> Mode {
        if self.tiny {
            Mode::Tiny
        } else if self.full {
            Mode::Full
        } else {
            Mode::Quick
        }
    }

    pub fn config(&self) -> SuiteConfig {
        SuiteConfig {
            mode: self.mode(),
            threads: (!self.threads.is_empty()).then(|| self.threads.clone()),
        }
    }

    /// Rejects values clap accepts but the suites cannot use.
    pub fn validate(&self) -> Result<(), String> {
        if self.threads.contains(&0) {
            return Err("--threads: thread counts must be at least 1".into());
        }
        if self.repeat == Some(0) {
            return Err("--repeat must be at least 1".into());
        }
        if self.callgrind_sizes.contains(&0) || self.callgrind_pairs == Some(0) {
            return Err("--callgrind-sizes and --callgrind-pairs must be at least 1".into());
        }
        Ok(())
    }

    /// Timed runs per allocator and case of `suite`.
    pub fn repeat(&self, suite: &str) -> usize {
        match (self.repeat, self.full, suite) {
            (Some(n), ..) => n,
            (None, true, _) => 7,
            (None, false, "rust") => 5,
            (None, false, _) => 3,
        }
    }

    /// Whether `--only` selects something with these names.
    pub fn selects(&self, names: &[&str]) -> bool {
        self.only.is_empty() || self.only.iter().any(|w| names.contains(&w.as_str()))
    }

    /// Where the report goes: `--out`, else `target/nodalloc-bench` next to
    /// the running binary's profile directory.
    pub fn out_dir(&self) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            preload::profile_dir()
                .ok()
                .and_then(|p| p.parent().map(|t| t.join("nodalloc-bench")))
                .unwrap_or_else(|| PathBuf::from("target/nodalloc-bench"))
        })
    }
}

/// Allocators only the `LD_PRELOAD` suites have.
const PRELOAD_ONLY: [&str; 6] = [
    "tcmalloc",
    "nodalloc-secure",
    "nodalloc-callsite",
    "nodalloc-background",
    "nodalloc-profile",
    "jemalloc-prof",
];

/// The selection of `--allocators`, by report name; empty means all.
#[derive(Clone, Debug, Default)]
pub struct AllocatorFilter {
    names: Vec<String>,
}

impl AllocatorFilter {
    /// Validates the names: every one must be a contender some suite has,
    /// and a Rust one must have been built.
    pub fn parse(names: &[String]) -> Result<AllocatorFilter, String> {
        let mut out = Vec::new();
        for n in names {
            let c = match n.trim().to_ascii_lowercase().as_str() {
                "system" => "glibc".to_string(),
                other => other.to_string(),
            };
            let rust = Allocator::ALL.iter().find(|a| a.report_name() == c);
            if rust.is_none() && !PRELOAD_ONLY.contains(&c.as_str()) {
                let mut known: Vec<&str> = Allocator::ALL.iter().map(|a| a.report_name()).collect();
                known.extend(PRELOAD_ONLY);
                return Err(format!(
                    "unknown allocator {n:?}; known: {}",
                    known.join(", ")
                ));
            }
            if let Some(a) = rust {
                if !a.is_available() {
                    return Err(format!("{a} was not built (cargo feature `{a}` is off)"));
                }
            }
            if !out.contains(&c) {
                out.push(c);
            }
        }
        Ok(AllocatorFilter { names: out })
    }

    /// Whether the allocator with this report name takes part.
    pub fn wants(&self, name: &str) -> bool {
        self.names.is_empty() || self.named(name)
    }

    /// Whether `--allocators` names this allocator (for contenders that only run when asked).
    pub fn named(&self, name: &str) -> bool {
        self.names.iter().any(|f| f == name)
    }

    /// The Rust contenders that were built and are selected, in table order.
    pub fn rust_allocators(&self) -> Vec<Allocator> {
        Allocator::available()
            .into_iter()
            .filter(|a| self.wants(a.report_name()))
            .collect()
    }
}
