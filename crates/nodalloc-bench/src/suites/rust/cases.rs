//! The Rust suite's cases and their parameters per mode, shared by the
//! showdown's Rust suite, its `--rss-child` re-executions (so the child runs
//! exactly the case the parent measured), the criterion benches and the tests.

use crate::suites::{size_label, Mode};
use crate::workloads::{self, Ledger};
use crate::{with_allocator, Allocator};
use std::alloc::GlobalAlloc;
use std::time::{Duration, Instant};

/// What the Rust cases are built from: the mode and `--threads`.
#[derive(Clone, Debug)]
pub struct SuiteConfig {
    pub mode: Mode,
    /// Overrides the thread counts of `threads` and `mixed`.
    pub threads: Option<Vec<usize>>,
}

/// Workload groups, the names accepted by `--only`.
pub const GROUPS: [&str; 9] = [
    "single_size",
    "bulk",
    "threads",
    "producer_consumer",
    "realloc_growth",
    "mixed",
    "live_cliff",
    "rss_payload",
    "hoard_numa",
];

/// The sizes of the single-thread sweep.
pub const SINGLE_SIZES: [usize; 14] = [
    8,
    16,
    32,
    64,
    128,
    256,
    512,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
];

/// The sizes of the RSS/payload workload: just above 512, 1024 and 2048, where
/// power-of-two-ish size classes waste the most.
pub const RSS_SIZES: [usize; 3] = [520, 1100, 2100];

#[derive(Clone, Debug)]
pub enum Kind {
    Single { size: usize, iters: u64 },
    Bulk { n: usize, size: usize, rounds: u64 },
    Threads { t: usize, ops: u64 },
    ProducerConsumer { n: u64 },
    LiveCliff { n: usize },
    Realloc { max: usize, step: usize },
    Mixed { t: usize, ops: u64, size_div: u64 },
    RssPayload { size: usize, total: usize },
    HoardNuma { t: usize, per_thread: u64 },
}

#[derive(Clone, Debug)]
pub struct Case {
    pub group: &'static str,
    /// Unique, e.g. `single_size/64B`; what `--rss-child` takes.
    pub name: String,
    pub kind: Kind,
    /// Whether the showdown measures peak RSS for this case in child processes.
    pub rss: bool,
}

/// One timed run of a case with one allocator.
#[derive(Clone, Copy, Debug)]
pub struct RunResult {
    pub elapsed: Duration,
    /// Allocation+free pairs (reallocs for `realloc_growth`), for ns/op.
    pub ops: u64,
    pub ledger: Ledger,
    /// `live_cliff` only: ns per allocation over the first and last 10 %.
    pub first_ns: Option<f64>,
    pub last_ns: Option<f64>,
    /// Bytes of payload live at the peak, where that is exact.
    pub payload_bytes: Option<u64>,
    /// `rss_payload` only: KiB of the process on transparent huge pages at the peak.
    pub huge_kib: Option<u64>,
}

/// All cases for `cfg`, in presentation order.
pub fn cases(cfg: &SuiteConfig) -> Vec<Case> {
    let mode = cfg.mode;
    let pick = |tiny: u64, quick: u64, full: u64| match mode {
        Mode::Tiny => tiny,
        Mode::Quick => quick,
        Mode::Full => full,
    };
    let mut out = Vec::new();
    let mut push = |group: &'static str, name: String, kind: Kind, rss: bool| {
        out.push(Case {
            group,
            name,
            kind,
            rss,
        })
    };

    for size in SINGLE_SIZES {
        // Same byte volume per size, clamped so tiny sizes do not run for
        // ever and huge ones still do enough iterations to be timed.
        let iters = match mode {
            Mode::Tiny => 20,
            Mode::Quick => ((1u64 << 30) / size as u64).clamp(64, 1_000_000),
            Mode::Full => ((16u64 << 30) / size as u64).clamp(512, 10_000_000),
        };
        push(
            "single_size",
            format!("single_size/{}", size_label(size)),
            Kind::Single { size, iters },
            false,
        );
    }

    let bulk_n = pick(100, 1000, 1000) as usize;
    for size in [16, 256, 4096] {
        push(
            "bulk",
            format!("bulk/{bulk_n}x{}", size_label(size)),
            Kind::Bulk {
                n: bulk_n,
                size,
                rounds: pick(2, 200, 2000),
            },
            false,
        );
    }

    let default_threads: &[usize] = match mode {
        Mode::Tiny => &[2, 4],
        _ => &[2, 4, 8],
    };
    let thread_counts = cfg.threads.as_deref().unwrap_or(default_threads);
    for &t in thread_counts {
        push(
            "threads",
            format!("threads/{t}t"),
            Kind::Threads {
                t,
                ops: pick(500, 10_000, 100_000),
            },
            false,
        );
    }

    push(
        "producer_consumer",
        "producer_consumer".into(),
        Kind::ProducerConsumer {
            n: pick(2_000, 200_000, 2_000_000),
        },
        false,
    );

    push(
        "realloc_growth",
        "realloc_growth".into(),
        Kind::Realloc {
            max: pick(1 << 20, 16 << 20, 64 << 20) as usize,
            step: 64 << 10,
        },
        false,
    );

    let mixed_threads: &[usize] = match mode {
        Mode::Tiny => &[2],
        Mode::Quick => &[2],
        Mode::Full => &[2, 4, 8],
    };
    let mixed_threads = cfg.threads.as_deref().unwrap_or(mixed_threads);
    for &t in mixed_threads {
        push(
            "mixed",
            format!("mixed/{t}t"),
            Kind::Mixed {
                t,
                ops: pick(3_000, 100_000, 1_000_000),
                size_div: pick(16, 1, 1),
            },
            true,
        );
    }

    let hoard_threads: &[usize] = match mode {
        Mode::Full => &[2, 4, 8],
        _ => &[4],
    };
    for &t in cfg.threads.as_deref().unwrap_or(hoard_threads) {
        push(
            "hoard_numa",
            format!("hoard_numa/{t}t"),
            Kind::HoardNuma {
                t,
                per_thread: pick(500, 50_000, 200_000),
            },
            false,
        );
    }

    // The memory-hungry cases go last: an allocator that keeps (or runs out
    // of) address space after them would otherwise carry that state into
    // every later case of the shared process.
    push(
        "live_cliff",
        "live_cliff".into(),
        Kind::LiveCliff {
            n: pick(5_000, 2_300_000, 2_300_000) as usize,
        },
        true,
    );

    for size in RSS_SIZES {
        push(
            "rss_payload",
            format!("rss_payload/{}", size_label(size)),
            Kind::RssPayload {
                size,
                total: pick(256 << 10, 100_000_000, 200_000_000) as usize,
            },
            true,
        );
    }
    out
}

impl Case {
    /// Runs the case once with `alloc` and times it.
    pub fn run(&self, alloc: Allocator) -> RunResult {
        with_allocator!(alloc, |a| run_on(&self.kind, a))
    }

    /// Bytes of harness bookkeeping (pointer vectors) the case allocates from
    /// the system allocator; the RSS child pre-touches that much before taking
    /// its baseline so the bookkeeping is not charged to the allocator.
    pub fn bookkeeping_bytes(&self) -> usize {
        let ptr = std::mem::size_of::<usize>();
        match self.kind {
            Kind::LiveCliff { n } => n * ptr,
            Kind::RssPayload { size, total } => total / size.max(1) * ptr,
            Kind::Bulk { n, .. } => n * ptr,
            _ => 0,
        }
    }
}

fn run_on<A: GlobalAlloc + Sync>(kind: &Kind, a: &'static A) -> RunResult {
    let start = Instant::now();
    let mut first_ns = None;
    let mut last_ns = None;
    let mut payload_bytes = None;
    let mut huge_kib = None;
    let ledger = match *kind {
        Kind::Single { size, iters } => workloads::single_size(a, size, iters),
        Kind::Bulk { n, size, rounds } => workloads::bulk(a, n, size, rounds),
        Kind::Threads { t, ops } => workloads::threads(a, t, ops),
        Kind::ProducerConsumer { n } => workloads::producer_consumer(a, n),
        Kind::LiveCliff { n } => {
            let c = workloads::live_cliff(a, n);
            first_ns = Some(c.first_ns);
            last_ns = Some(c.last_ns);
            payload_bytes = Some(c.ledger.peak_live_bytes);
            c.ledger
        }
        Kind::Realloc { max, step } => workloads::realloc_growth(a, max, step),
        Kind::Mixed { t, ops, size_div } => workloads::mixed(a, t, ops, size_div),
        Kind::HoardNuma { t, per_thread } => workloads::hoard_numa(a, t, per_thread),
        Kind::RssPayload { size, total } => {
            let l = workloads::rss_payload_with_peak(a, size, total, || {
                huge_kib = workloads::anon_huge_kib();
            });
            payload_bytes = Some(l.peak_live_bytes);
            l
        }
    };
    let elapsed = start.elapsed();
    let ops = match kind {
        Kind::Realloc { .. } => ledger.reallocs,
        _ => ledger.allocs,
    };
    RunResult {
        elapsed,
        ops,
        ledger,
        first_ns,
        last_ns,
        payload_bytes,
        huge_kib,
    }
}
