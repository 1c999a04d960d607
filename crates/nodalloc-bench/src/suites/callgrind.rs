//! The `callgrind` suite: instructions per malloc+free pair on the fast path,
//! counted by valgrind's callgrind — deterministic where timings are not.
//!
//! The one implementation of that count in the workspace: the showdown runs
//! it by default (64 B, 100 000 pairs, when valgrind is installed) and
//! `crates/nodalloc-bench/callgrind.sh` runs it over several sizes through
//! `--only callgrind --callgrind-sizes ...`. Two faces per allocator:
//! - Rust (`GlobalAlloc`): the `fastpath ALLOC SIZE N` binary
//!   (`src/bin/fastpath.rs`), built with the showdown's own features;
//! - C (`LD_PRELOAD`): `pairs SIZE N` (`c/pairs.c`) with each malloc library
//!   preloaded.
//!
//! A count is `(Ir(N) - Ir(0)) / N`: process start-up, allocator
//! initialisation and the warm-up are the same in both runs and cancel out.

use super::{CaseId, Context, Suite};
use crate::cli::Cli;
use crate::preload::{self, PreloadAlloc};
use crate::report::{Report, Table};
use crate::Allocator;
use std::path::Path;
use std::process::Command;

/// The C face's program.
pub const PAIRS_C: &[(&str, &str)] = &[("pairs.c", include_str!("../../c/pairs.c"))];

/// Pairs per count when `--callgrind-pairs` is not given.
const DEFAULT_PAIRS: u64 = 100_000;

/// Whether snmalloc can run under valgrind: its default pagemap reservation
/// fails there ("Failed to initialise snmalloc"); the `snmalloc-valgrind`
/// feature builds its QEMU workaround (a coarser pagemap), which runs.
const SNMALLOC_UNDER_VALGRIND: bool = cfg!(feature = "snmalloc-valgrind");

pub struct CallgrindSuite {
    selected: bool,
    sizes: Vec<usize>,
    /// `--callgrind-sizes` given: one column per size and the loop's own
    /// cost as an `overhead` row.
    sweep: bool,
    pairs: u64,
}

impl CallgrindSuite {
    pub fn new(cli: &Cli) -> CallgrindSuite {
        let sweep = !cli.callgrind_sizes.is_empty();
        CallgrindSuite {
            selected: true,
            sizes: if sweep {
                cli.callgrind_sizes.clone()
            } else {
                vec![64]
            },
            sweep,
            pairs: cli.callgrind_pairs.unwrap_or(DEFAULT_PAIRS),
        }
    }
}

impl Suite for CallgrindSuite {
    fn name(&self) -> &'static str {
        "callgrind"
    }

    /// None listed: the suite is selected as a whole, by its name.
    fn cases(&self) -> Vec<CaseId> {
        Vec::new()
    }

    fn retain(&mut self, keep: &dyn Fn(&[&str]) -> bool) {
        self.selected = keep(&[self.name()]);
    }

    fn steps(&self) -> usize {
        usize::from(self.selected)
    }

    fn run(&self, ctx: &mut Context, rep: &mut Report) {
        if !ctx.cli.no_callgrind {
            self.count(ctx, rep);
        }
        ctx.bar.inc(1);
    }
}

impl CallgrindSuite {
    fn count(&self, ctx: &mut Context, rep: &mut Report) {
        let filter = ctx.filter;
        let libraries: Vec<PreloadAlloc> = ctx
            .libraries(rep)
            .iter()
            .filter(|a| filter.wants(&a.name))
            .cloned()
            .collect();
        ctx.bar.set_message("callgrind: fast-path instructions");
        let has_valgrind = Command::new("valgrind")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !has_valgrind {
            rep.skipped
                .push("callgrind counts: valgrind not installed".into());
            return;
        }
        let scratch = ctx.scratch();
        if let Err(e) = std::fs::create_dir_all(&scratch) {
            rep.skipped
                .push(format!("callgrind: {}: {e}", scratch.display()));
            return;
        }
        let mut rows = Vec::new();
        // Always through cargo (a no-op when fresh): a binary left from an
        // older build would count an older nodalloc.
        match preload::build_artifact(
            &["-p", "nodalloc-bench", "--bin", "fastpath"],
            "fastpath",
            true,
        ) {
            Ok(exe) => {
                let mut subjects: Vec<(&str, &str)> = ctx
                    .rust_allocs
                    .iter()
                    .filter(|&&a| a != Allocator::Snmalloc || SNMALLOC_UNDER_VALGRIND)
                    .map(|a| (a.report_name(), a.name()))
                    .collect();
                if self.sweep {
                    subjects.push(("overhead", "overhead"));
                }
                for (shown, name) in subjects {
                    let make = |size: usize, n: u64| {
                        let mut c = Command::new(&exe);
                        c.args([name, &size.to_string(), &n.to_string()]);
                        c
                    };
                    rows.push(self.row(shown, "Rust (GlobalAlloc)", make, &scratch));
                }
            }
            Err(e) => rep.skipped.push(format!("callgrind, Rust face: {e}")),
        }
        match preload::compile_c(PAIRS_C, "pairs", &scratch, false) {
            Ok(pairs) => {
                for a in &libraries {
                    let make = |size: usize, n: u64| {
                        let mut c = Command::new(&pairs);
                        c.args([size.to_string(), n.to_string()]);
                        match &a.lib {
                            Some(lib) => c.env("LD_PRELOAD", lib),
                            None => c.env_remove("LD_PRELOAD"),
                        };
                        c
                    };
                    rows.push(self.row(&a.name, "C (LD_PRELOAD)", make, &scratch));
                }
            }
            Err(e) => rep.skipped.push(format!("callgrind, C face: {e}")),
        }
        rep.tables.push(self.table(rows));
    }

    /// One allocator's counts, one cell per size.
    fn row(
        &self,
        allocator: &str,
        face: &str,
        make: impl Fn(usize, u64) -> Command,
        scratch: &Path,
    ) -> Vec<String> {
        let mut row = vec![allocator.to_string(), face.to_string()];
        for &size in &self.sizes {
            row.push(
                per_pair(|n| make(size, n), self.pairs, scratch)
                    .map_or_else(|e| format!("failed: {e}"), |v| format!("{v:.1}")),
            );
        }
        row
    }

    fn table(&self, rows: Vec<Vec<String>>) -> Table {
        let n = self.pairs;
        let snmalloc = if SNMALLOC_UNDER_VALGRIND {
            "snmalloc is its valgrind build (feature `snmalloc-valgrind`)."
        } else {
            "snmalloc needs its valgrind build: crates/nodalloc-bench/callgrind.sh."
        };
        let mut header = vec!["allocator".to_string(), "face".to_string()];
        let title = if self.sweep {
            header.extend(self.sizes.iter().map(|s| format!("{s} B")));
            "Fast path: instructions per malloc+free pair by size (callgrind)".to_string()
        } else {
            header.push("instructions/pair".into());
            format!(
                "Fast path: instructions per {} B malloc+free pair (callgrind)",
                self.sizes[0]
            )
        };
        Table {
            title,
            note: format!(
                "valgrind --tool=callgrind, (Ir({n}) - Ir(0)) / {n}; includes the loop (the \
                 `overhead` row; the size passes through `black_box` on every pair). {snmalloc}"
            ),
            header,
            rows,
        }
    }
}

/// Instructions `cmd` executes under callgrind, or why it could not be counted.
pub fn callgrind_instructions(cmd: Command, scratch: &Path) -> Result<u64, String> {
    let out_file = scratch.join(format!("callgrind.out.{}", std::process::id()));
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let envs: Vec<_> = cmd
        .get_envs()
        .map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned())))
        .collect();
    let mut vg = Command::new("valgrind");
    vg.arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(program)
        .args(args);
    for (k, v) in envs {
        match v {
            Some(v) => vg.env(k, v),
            None => vg.env_remove(k),
        };
    }
    let out = vg.output().map_err(|e| format!("valgrind: {e}"))?;
    let _ = std::fs::remove_file(&out_file);
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "valgrind: {}",
            err.lines().last().unwrap_or("failed")
        ));
    }
    err.lines()
        .find_map(|l| l.split("Collected :").nth(1))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "callgrind printed no total".into())
}

/// Instructions per alloc+free pair: (Ir(n) - Ir(0)) / n, so start-up cancels.
pub fn per_pair(make: impl Fn(u64) -> Command, n: u64, scratch: &Path) -> Result<f64, String> {
    let zero = callgrind_instructions(make(0), scratch)?;
    let full = callgrind_instructions(make(n), scratch)?;
    Ok(full.saturating_sub(zero) as f64 / n as f64)
}
