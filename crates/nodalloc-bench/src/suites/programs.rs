//! The `program` suite: real programs (sqlite3, python3) under `LD_PRELOAD`,
//! once per allocator: wall time and peak RSS; and a real server under load,
//! redis (`redis.rs`): the client's wall time and the server's peak RSS.
//!
//! Runs after the `c` suite and shares its compiled [`Tools`] (the peak-RSS
//! probe) and its way of repeating runs with the allocators rotated.

use super::c::{repeat_rotated, Sample, Tools};
use super::{redis, retain_cases, CaseId, Context, Mode, Suite};
use crate::preload::PreloadAlloc;
use crate::report::{Better, Record, Report};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The real programs; `redis` is the server (`redis.rs`).
pub const PROGRAMS: [&str; 3] = ["sqlite3", "python3", "redis"];

/// The programs that are selected.
pub struct ProgramSuite {
    programs: Vec<&'static str>,
}

impl ProgramSuite {
    pub fn new() -> ProgramSuite {
        ProgramSuite {
            programs: PROGRAMS.to_vec(),
        }
    }
}

impl Default for ProgramSuite {
    fn default() -> Self {
        Self::new()
    }
}

fn program_id(p: &str) -> CaseId {
    CaseId::new(p, format!("program/{p}"))
}

impl Suite for ProgramSuite {
    fn name(&self) -> &'static str {
        "program"
    }

    fn cases(&self) -> Vec<CaseId> {
        self.programs.iter().map(|p| program_id(p)).collect()
    }

    fn retain(&mut self, keep: &dyn Fn(&[&str]) -> bool) {
        retain_cases(self.name(), &mut self.programs, |p| program_id(p), keep);
    }

    fn steps(&self) -> usize {
        self.programs.len()
    }

    fn run(&self, ctx: &mut Context, rep: &mut Report) {
        let allocs = ctx.preload_contenders(rep);
        // redis needs no compiled tools: it is measured from outside.
        let tools = if self.programs.iter().any(|p| *p != "redis") {
            ctx.c_tools(rep)
        } else {
            None
        };
        let repeat = ctx.cli.repeat("program");
        let mode = ctx.cli.mode();
        for p in &self.programs {
            ctx.bar.set_message(format!("program/{p}"));
            let result = match (*p, &tools) {
                ("redis", _) => redis::run_redis(&allocs, mode, repeat).map(|(r, table)| {
                    rep.tables.push(table);
                    r
                }),
                (_, Some(tools)) => run_program(tools, p, &allocs, mode, repeat),
                // c_tools has said why under "Skipped".
                (_, None) => Ok(Vec::new()),
            };
            match result {
                Ok(r) => rep.records.extend(r),
                Err(e) => rep.skipped.push(format!("program/{p}: {e}")),
            }
            ctx.bar.inc(1);
        }
    }
}

/// A real program's command for a mode, or why it cannot run here.
pub fn program_command(program: &str, mode: Mode, scratch: &Path) -> Result<Command, String> {
    let path = find_in_path(program).ok_or_else(|| format!("{program} not found in PATH"))?;
    let n: u64 = match mode {
        Mode::Tiny => 2_000,
        Mode::Quick => 50_000,
        Mode::Full => 1_500_000,
    };
    match program {
        "sqlite3" => {
            let db = scratch.join("bench.db");
            let _ = std::fs::remove_file(&db);
            let script = format!(
                "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;
                 CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v BLOB, n REAL);
                 WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<{n})
                 INSERT INTO t(k, v, n) SELECT hex(randomblob(12)), randomblob(abs(random()) % 200),
                   random() / 7.0 FROM c;
                 CREATE INDEX tk ON t(k);
                 CREATE INDEX tn ON t(n);
                 SELECT count(*), sum(length(v)) FROM t;
                 SELECT substr(k, 1, 2) AS p, count(*), avg(n) FROM t GROUP BY p ORDER BY p LIMIT 3;
                 UPDATE t SET v = randomblob(64) WHERE id % 3 = 0;
                 DELETE FROM t WHERE id % 5 = 0;
                 SELECT count(*) FROM t;
                 VACUUM;"
            );
            let mut c = Command::new(path);
            c.arg(db).arg(script);
            Ok(c)
        }
        "python3" => {
            // Builds, serialises, parses, indexes and sorts n records.
            let script = [
                "import json, random",
                "random.seed(7)",
                &format!("n = {n}"),
                "recs = [{'id': i, 'name': 'user%d' % i, 'score': random.random(),",
                "         'tags': [str(random.random()) for _ in range(i % 7)]} for i in range(n)]",
                "text = json.dumps(recs)",
                "back = json.loads(text)",
                "assert len(back) == n",
                "index = {}",
                "for r in back:",
                "    index.setdefault(r['name'][-2:], []).append(r)",
                "words = ' '.join(r['name'] for r in back).split()",
                "words.sort(key=lambda w: w[::-1])",
                "del recs, back, text",
                "assert sum(len(v) for v in index.values()) == n",
                "print('ok', n, len(words))",
            ]
            .join("\n");
            let mut c = Command::new(path);
            c.arg("-c").arg(script);
            Ok(c)
        }
        other => Err(format!("unknown program {other}")),
    }
}

/// The first file named `program` in a directory of `PATH`.
pub fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// One real program, `repeat` runs per allocator: wall time and peak RSS.
pub fn run_program(
    tools: &Tools,
    program: &str,
    allocs: &[PreloadAlloc],
    mode: Mode,
    repeat: usize,
) -> Result<Vec<Record>, String> {
    // Fail early (and once) when the program is not installed.
    program_command(program, mode, &tools.scratch)?;
    let case = format!("program/{program}");
    let mut records: Vec<Record> = allocs
        .iter()
        .map(|a| {
            let mut r = Record::new("program", program, &case, &a.name, Better::Lower);
            r.unit = "ms".into();
            r.ops = 1;
            r
        })
        .collect();
    repeat_rotated(&mut records, repeat, |i| {
        let cmd = program_command(program, mode, &tools.scratch)?;
        let run = tools.run(cmd, &allocs[i])?;
        Ok(Sample {
            value: run.wall.as_secs_f64() * 1e3,
            ops: 1,
            hwm_kib: run.hwm_kib,
        })
    });
    let _ = std::fs::remove_file(tools.scratch.join("bench.db"));
    Ok(records)
}
