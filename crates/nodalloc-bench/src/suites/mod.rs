//! The showdown's suites behind one [`Suite`] trait, the [`Plan`] that holds
//! all of them, and the [`Context`] they run in.
//!
//! `src/main.rs` builds the plan from the command line, narrows it to what
//! `--only` selects and runs it; each suite turns its runs into report
//! records, tables, plot series and "skipped" notes. The order of
//! [`Plan::new`] is the order of the report.
//!
//! The `LD_PRELOAD` suites (`c`, `program`, `callgrind`) share what is costly
//! to set up (building `libnodalloc.so`, finding the peers' libraries,
//! compiling the C programs); [`Context`] does it once, for whichever of them
//! asks first, so a failure is reported once however many suites needed it.

pub mod c;
pub mod callgrind;
pub mod http;
pub mod programs;
pub mod redis;
pub mod rust;

use crate::cli::{AllocatorFilter, Cli};
use crate::preload::{self, PreloadAlloc};
use crate::report::Report;
use crate::Allocator;
use c::Tools;
use indicatif::ProgressBar;
use std::path::PathBuf;

/// How much work every case does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Tiny parameters for `cargo test` in debug mode.
    Tiny,
    /// The default: the whole showdown in well under two minutes on 2 cores.
    Quick,
    /// Roughly 5-10x more work per case, plus more thread counts.
    Full,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Tiny => "tiny",
            Mode::Quick => "quick",
            Mode::Full => "full",
        }
    }
}

/// `64B`, `16KiB`, `4MiB`: object and response sizes in case names.
pub fn size_label(size: usize) -> String {
    if size >= 1 << 20 && size.is_multiple_of(1 << 20) {
        format!("{}MiB", size >> 20)
    } else if size >= 1 << 10 && size.is_multiple_of(1 << 10) {
        format!("{}KiB", size >> 10)
    } else {
        format!("{size}B")
    }
}

/// A case as `--list` shows it and `--only` selects it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseId {
    /// The workload family, e.g. `single_size`, `larson`.
    pub group: String,
    /// Unique across the showdown, e.g. `c/larson/2t`.
    pub name: String,
}

impl CaseId {
    pub fn new(group: impl Into<String>, name: impl Into<String>) -> CaseId {
        CaseId {
            group: group.into(),
            name: name.into(),
        }
    }
}

/// One family of measurements of the showdown.
pub trait Suite {
    /// What `--only` selects the whole suite by (`rust`, `c`, ...).
    fn name(&self) -> &'static str;
    /// The cases in run order, for `--list` and `--only`.
    fn cases(&self) -> Vec<CaseId>;
    /// Keeps the cases `keep` accepts; `keep` is asked about the suite's
    /// name, a group and a case name at once.
    fn retain(&mut self, keep: &dyn Fn(&[&str]) -> bool);
    /// Progress-bar steps of [`Suite::run`]; 0 when nothing is left to run.
    fn steps(&self) -> usize;
    /// Runs what is left: records, tables, series and skipped notes go to
    /// `rep`, one progress step per [`Suite::steps`].
    fn run(&self, ctx: &mut Context, rep: &mut Report);
}

/// Keeps the cases of `cases` whose [`CaseId`] `keep` accepts, with the
/// suite's name; the common body of [`Suite::retain`].
pub fn retain_cases<T>(
    suite: &str,
    cases: &mut Vec<T>,
    id: impl Fn(&T) -> CaseId,
    keep: &dyn Fn(&[&str]) -> bool,
) {
    cases.retain(|c| {
        let id = id(c);
        keep(&[suite, &id.group, &id.name])
    });
}

/// Every suite of the showdown, in run (and report) order.
pub struct Plan {
    suites: Vec<Box<dyn Suite>>,
}

/// The order of the suites in `--list`, the one `--help` names them in.
const LIST_ORDER: [&str; 5] = ["rust", "c", "http", "program", "callgrind"];

impl Plan {
    pub fn new(cli: &Cli) -> Plan {
        let cfg = cli.config();
        Plan {
            suites: vec![
                Box::new(rust::RustSuite::new(&cfg)),
                Box::new(c::CSuite::new(cfg.mode, cfg.threads.as_deref())),
                Box::new(programs::ProgramSuite::new()),
                Box::new(http::HttpSuite::new()),
                Box::new(callgrind::CallgrindSuite::new(cli)),
            ],
        }
    }

    /// (suite, case) for `--list`.
    pub fn listing(&self) -> Vec<(&'static str, CaseId)> {
        let mut out: Vec<(&'static str, CaseId)> = self
            .suites
            .iter()
            .flat_map(|s| s.cases().into_iter().map(move |c| (s.name(), c)))
            .collect();
        out.sort_by_key(|(s, _)| LIST_ORDER.iter().position(|l| l == s));
        out
    }

    /// Whether `w` names a suite, a group or a case.
    pub fn knows(&self, w: &str) -> bool {
        self.suites.iter().any(|s| s.name() == w)
            || rust::cases::GROUPS.contains(&w)
            || self
                .listing()
                .iter()
                .any(|(_, c)| c.group == w || c.name == w)
    }

    /// Narrows every suite to what `--only` selects.
    pub fn select(&mut self, cli: &Cli) {
        for s in &mut self.suites {
            s.retain(&|names| cli.selects(names));
        }
    }

    pub fn steps(&self) -> usize {
        self.suites.iter().map(|s| s.steps()).sum()
    }

    pub fn run(&self, ctx: &mut Context, rep: &mut Report) {
        for s in &self.suites {
            if s.steps() > 0 {
                s.run(ctx, rep);
            }
        }
    }
}

/// What the suites of one showdown share.
pub struct Context<'a> {
    pub cli: &'a Cli,
    pub filter: &'a AllocatorFilter,
    /// The Rust contenders that take part, in table order.
    pub rust_allocs: Vec<Allocator>,
    pub out_dir: PathBuf,
    pub bar: ProgressBar,
    libraries: Option<Vec<PreloadAlloc>>,
    tools: Option<Result<Tools, String>>,
}

impl<'a> Context<'a> {
    pub fn new(cli: &'a Cli, filter: &'a AllocatorFilter, bar: ProgressBar) -> Context<'a> {
        Context {
            cli,
            filter,
            rust_allocs: filter.rust_allocators(),
            out_dir: cli.out_dir(),
            bar,
            libraries: None,
            tools: None,
        }
    }

    /// Scratch space for compiled helpers and their outputs.
    pub fn scratch(&self) -> PathBuf {
        self.out_dir.join("bin")
    }

    /// The malloc libraries found on this machine, `libnodalloc.so` built
    /// from this workspace (unfiltered: `--allocators` applies per suite).
    pub fn libraries(&mut self, rep: &mut Report) -> &[PreloadAlloc] {
        if self.libraries.is_none() {
            self.bar.set_message("building libnodalloc.so");
            let (found, skipped) = preload::contenders(preload::nodalloc_lib());
            rep.skipped.extend(skipped);
            self.libraries = Some(found);
        }
        self.libraries.as_deref().unwrap_or_default()
    }

    /// The contenders of the suites that run C programs: the libraries plus
    /// nodalloc in secure mode (when this nodalloc has it), as selected, and
    /// nodalloc with call-site partitions (`NODALLOC_CALLSITE=64`), the
    /// maintenance thread (`NODALLOC_BACKGROUND=1`) or heap profiling
    /// (`NODALLOC_PROFILE=1`), and jemalloc with its profiling, when named.
    pub fn preload_contenders(&mut self, rep: &mut Report) -> Vec<PreloadAlloc> {
        let mut allocs = self.libraries(rep).to_vec();
        // jemalloc's heap profiling at nodalloc's default rate, beside nodalloc's (issue 36).
        if self.filter.named("jemalloc-prof") {
            if let Some(j) = allocs.iter().find(|a| a.name == "jemalloc").cloned() {
                allocs.push(PreloadAlloc {
                    name: "jemalloc-prof".into(),
                    env: vec![("MALLOC_CONF".into(), "prof:true,lg_prof_sample:19".into())],
                    ..j
                });
            }
        }
        if let Some(n) = allocs.iter().find(|a| a.name == "nodalloc").cloned() {
            if preload::secure_mode_available() {
                allocs.push(PreloadAlloc {
                    name: "nodalloc-secure".into(),
                    env: vec![("NODALLOC_SECURE".into(), "1".into())],
                    ..n.clone()
                });
            }
            // Options still being measured, as contenders of their own when named.
            for (name, option, value) in [
                ("nodalloc-callsite", "NODALLOC_CALLSITE", "64"),
                ("nodalloc-background", "NODALLOC_BACKGROUND", "1"),
                ("nodalloc-profile", "NODALLOC_PROFILE", "1"),
            ] {
                if self.filter.named(name) {
                    allocs.push(PreloadAlloc {
                        name: name.into(),
                        env: vec![(option.into(), value.into())],
                        ..n.clone()
                    });
                }
            }
        }
        allocs.retain(|a| self.filter.wants(&a.name));
        allocs
    }

    /// The classic program and the peak-RSS probe, compiled on first use;
    /// `None` (said once under "Skipped") when the compiler fails.
    pub fn c_tools(&mut self, rep: &mut Report) -> Option<Tools> {
        if self.tools.is_none() {
            self.bar.set_message("building the C programs");
            let built = c::build_tools(&self.scratch());
            match &built {
                Err(e) => rep.skipped.push(format!("C suites: {e}")),
                Ok(t) if t.probe.is_none() => rep
                    .skipped
                    .push("peak RSS of C programs: the probe library did not build".into()),
                Ok(_) => {}
            }
            self.tools = Some(built);
        }
        self.tools.as_ref().and_then(|t| t.as_ref().ok()).cloned()
    }
}
