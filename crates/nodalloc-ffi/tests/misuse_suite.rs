//! The heap-misuse suite (`tests/c/misuse_suite.cpp`: one bad operation per case, each category
//! at 8, 4096 and 262144 bytes) against `libnodalloc.so` under `LD_PRELOAD`, in default and in
//! secure mode. Every case runs; the cases of the table `tests/c/misuse_cases.def` (per category
//! and mode, the sizes at which nodalloc caught it every time when the table was filled; the
//! program includes the same file for its categories) must be caught, and an abort must
//! name the pointer the program announced (or a block it announced as nearby: an overflow is
//! found in the neighbour it reached). A fault (SIGSEGV, SIGBUS: a guard page, or a link
//! followed into unmapped memory) is accepted without a message, and so is, against the debug
//! library, the panic of one of its checks where the release library would fault. The score of each mode is
//! printed (`cargo test --release -p nodalloc-ffi --test misuse_suite -- --nocapture`);
//! `scripts/misuse-score.sh` compares it with glibc and other allocators.
//!
//! A case is caught when the process dies of a signal, exits non-zero, or ends without its
//! `unnoticed CATEGORY SIZE` line (the cases whose harm is an outcome print it only when they
//! observe the outcome).

mod common;

use common::{clean_command, describe_status, library, run_bounded, Finished, SIGABRT};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Per case; a case takes milliseconds against the release library.
const TIME_LIMIT: Duration = Duration::from_secs(60);

/// Cases running at once.
const WORKERS: usize = 4;

const SIZES: [usize; 3] = [8, 4096, 262144];

const SIGBUS: i32 = 7;
const SIGSEGV: i32 = 11;

/// The table of categories (`MISUSE_CASE(...)` rows; its header says why cases are or are not
/// caught). `misuse_suite.cpp` includes the same file as an X-macro for its categories.
const TABLE: &str = include_str!("c/misuse_cases.def");

/// One row of the table: a category and, per mode, the sizes at which nodalloc must catch it.
#[derive(Debug, PartialEq)]
struct Row<'a> {
    category: &'a str,
    caught_default: Vec<usize>,
    caught_secure: Vec<usize>,
}

/// The rows of `text` (the table's format), or what is wrong with the first line that is not a
/// blank line, a `//` comment or a row on one line.
fn parse_table(text: &str) -> Result<Vec<Row<'_>>, String> {
    let mut rows: Vec<Row> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("//") {
            continue;
        }
        let row = parse_row(line).map_err(|why| format!("line {}: {why}: {line}", index + 1))?;
        if rows.iter().any(|earlier| earlier.category == row.category) {
            return Err(format!(
                "line {}: category {} has a row already",
                index + 1,
                row.category
            ));
        }
        rows.push(row);
    }
    Ok(rows)
}

/// `MISUSE_CASE("category", function, "default sizes", "secure sizes")`.
fn parse_row(line: &str) -> Result<Row<'_>, String> {
    let arguments = line
        .strip_prefix("MISUSE_CASE(")
        .and_then(|rest| rest.strip_suffix(')'))
        .ok_or("not a MISUSE_CASE(...) row on one line")?;
    let fields: Vec<&str> = arguments.split(',').map(str::trim).collect();
    let [category, function, caught_default, caught_secure] = fields[..] else {
        return Err(format!("{} fields, not 4", fields.len()));
    };
    let category = quoted(category)?;
    if category.is_empty()
        || !category
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(format!(
            "category {category:?} is not lower-case words joined by '-'"
        ));
    }
    let identifier = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if function.is_empty()
        || function.starts_with(|c: char| c.is_ascii_digit())
        || !function.chars().all(identifier)
    {
        return Err(format!("function {function:?} is not a C++ identifier"));
    }
    Ok(Row {
        category,
        caught_default: sizes(quoted(caught_default)?)?,
        caught_secure: sizes(quoted(caught_secure)?)?,
    })
}

fn quoted(field: &str) -> Result<&str, String> {
    field
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .ok_or_else(|| format!("{field} is not a quoted string"))
}

/// A size column: sizes of [`SIZES`] separated by spaces, each once, or `-` for none.
fn sizes(column: &str) -> Result<Vec<usize>, String> {
    if column == "-" {
        return Ok(Vec::new());
    }
    let mut sizes = Vec::new();
    for word in column.split(' ') {
        let size: usize = word
            .parse()
            .map_err(|_| format!("size column {column:?}: {word:?} is not a number"))?;
        if !SIZES.contains(&size) {
            return Err(format!(
                "size column {column:?}: {size} is not one of {SIZES:?}"
            ));
        }
        if sizes.contains(&size) {
            return Err(format!("size column {column:?}: {size} twice"));
        }
        sizes.push(size);
    }
    Ok(sizes)
}

/// The table's rows; a test fails here if it does not parse.
fn table() -> Vec<Row<'static>> {
    parse_table(TABLE).unwrap_or_else(|why| panic!("tests/c/misuse_cases.def, {why}"))
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Default,
    Secure,
}

impl Mode {
    fn secure_setting(self) -> &'static str {
        match self {
            Mode::Default => "0",
            Mode::Secure => "1",
        }
    }

    /// The cases of `rows` nodalloc must catch in this mode, as `CATEGORY SIZE`.
    fn caught(self, rows: &[Row]) -> Vec<String> {
        rows.iter()
            .flat_map(|row| {
                let sizes = match self {
                    Mode::Default => &row.caught_default,
                    Mode::Secure => &row.caught_secure,
                };
                sizes.iter().map(|size| format!("{} {size}", row.category))
            })
            .collect()
    }
}

/// Builds `tests/c/misuse_suite.cpp` (not linked with nodalloc: it runs under `LD_PRELOAD`).
fn compile() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let profile = library()
        .parent()
        .and_then(Path::file_name)
        .expect("the profile directory's name")
        .to_string_lossy()
        .into_owned();
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("misuse_suite-{profile}"));
    std::fs::create_dir_all(&out_dir).expect("creating the program's directory");
    let output = out_dir.join("misuse_suite");
    // Built under a private name and renamed into place: two test runs may share the directory.
    let partial = out_dir.join(format!("misuse_suite.{}.partial", std::process::id()));
    let source = crate_dir.join("tests/c/misuse_suite.cpp");
    let mut cxx = Command::new("c++");
    cxx.args(["-O1", "-g", "-fno-omit-frame-pointer", "-rdynamic"])
        .args(["-Wall", "-Werror", "-pthread", "-DNODALLOC_PRELOADED", "-I"])
        .arg(crate_dir.join("include"))
        .arg("-o")
        .arg(&partial)
        .arg(&source);
    let result = cxx
        .output()
        .unwrap_or_else(|error| panic!("cannot run `c++` to build {}: {error}", source.display()));
    assert!(
        result.status.success(),
        "compiling {} failed: {cxx:?}\n{}",
        source.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    std::fs::rename(&partial, &output).expect("moving the compiled program into place");
    output
}

/// The program, built once for the tests of this file.
fn program() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(compile)
}

/// The categories `misuse_suite list` prints, in its order.
fn listed_categories(program: &Path) -> Vec<String> {
    let listed = run_bounded(clean_command(program).arg("list"), TIME_LIMIT);
    assert!(
        listed.succeeded(),
        "misuse_suite list: {}",
        listed.describe()
    );
    listed.stdout.lines().map(str::to_string).collect()
}

/// Panics unless the table's rows are the categories the program lists, each once, in its order
/// (the program takes them from the table: a difference means the two read it differently).
fn assert_table_is_the_programs_list(rows: &[Row], listed: &[String]) {
    let in_table: Vec<&str> = rows.iter().map(|row| row.category).collect();
    let missing: Vec<&String> = listed
        .iter()
        .filter(|category| !in_table.contains(&category.as_str()))
        .collect();
    let extra: Vec<&&str> = in_table
        .iter()
        .filter(|category| !listed.iter().any(|listed| listed == *category))
        .collect();
    assert!(
        in_table == listed,
        "tests/c/misuse_cases.def and `misuse_suite list` differ: listed, not in the table: \
         {missing:?}; in the table, not listed: {extra:?}; table order {in_table:?}, listed \
         order {listed:?}"
    );
}

/// Every case of `categories`, as `CATEGORY SIZE`.
fn cases(categories: &[String]) -> Vec<String> {
    let cases: Vec<String> = categories
        .iter()
        .flat_map(|category| SIZES.iter().map(move |size| format!("{category} {size}")))
        .collect();
    assert!(cases.len() >= 100, "only {} cases", cases.len());
    cases
}

struct Outcome {
    case: String,
    finished: Finished,
}

impl Outcome {
    fn caught(&self) -> bool {
        let unnoticed = format!("unnoticed {}", self.case);
        !self.finished.succeeded() || !self.finished.stdout.lines().any(|line| line == unnoticed)
    }

    /// The pointer the case announced, then the nearby blocks it announced.
    fn announced(&self) -> Vec<&str> {
        let stdout = &self.finished.stdout;
        let pointer = stdout
            .lines()
            .filter_map(|line| line.strip_prefix("pointer "));
        let nearby = stdout
            .lines()
            .filter_map(|line| line.strip_prefix("nearby "));
        pointer.chain(nearby).collect()
    }

    /// Why a case of the table does not pass, if it does not.
    fn failure(&self) -> Option<String> {
        if !self.caught() {
            return Some("not caught".to_string());
        }
        if self.finished.succeeded() {
            // A case whose harm is an outcome, which nodalloc avoided.
            return None;
        }
        let announced = self.announced();
        let Some(pointer) = announced.first() else {
            return Some("caught before it announced its pointer".to_string());
        };
        match self.finished.status.signal() {
            Some(SIGSEGV | SIGBUS) => None,
            Some(SIGABRT) => {
                let named = self.finished.stderr.lines().any(|line| {
                    line.starts_with("nodalloc: ")
                        && announced.iter().any(|address| {
                            line.split(|c: char| !c.is_ascii_alphanumeric())
                                .any(|word| word == *address)
                        })
                });
                // Where the release library faults on a smashed link, the debug library's own
                // checks (misaligned dereference, debug assertions) panic first, and a panic
                // inside the allocator aborts.
                let debug_check = cfg!(debug_assertions)
                    && self
                        .finished
                        .stderr
                        .contains("panicked at crates/nodalloc/");
                (!named && !debug_check)
                    .then(|| format!("aborted without a nodalloc message naming {pointer}"))
            }
            _ => Some(format!(
                "caught, but by {}, not by nodalloc's abort or a fault",
                describe_status(self.finished.status)
            )),
        }
    }
}

/// Runs every case in `mode`, WORKERS at a time, in the order of `cases`.
fn run_all(program: &Path, mode: Mode, cases: &[String]) -> Vec<Outcome> {
    let next = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::with_capacity(cases.len()));
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = cases.get(index) else {
                    break;
                };
                let mut command = clean_command(program);
                command
                    .args(case.split(' '))
                    .env("LD_PRELOAD", library())
                    .env("NODALLOC_SECURE", mode.secure_setting());
                let finished = run_bounded(&mut command, TIME_LIMIT);
                let outcome = Outcome {
                    case: case.clone(),
                    finished,
                };
                outcomes
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push((index, outcome));
            });
        }
    });
    let mut outcomes = outcomes
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    outcomes.sort_by_key(|(index, _)| *index);
    outcomes.into_iter().map(|(_, outcome)| outcome).collect()
}

/// Every case of the table is caught (with nodalloc's message naming the pointer when it
/// aborts), in default and in secure mode; prints each mode's score.
#[test]
fn the_misuse_cases_nodalloc_catches_stay_caught() {
    let started = Instant::now();
    let program = program();
    let rows = table();
    let categories = listed_categories(program);
    assert_table_is_the_programs_list(&rows, &categories);
    let cases = cases(&categories);
    let mut failures = Vec::new();
    for mode in [Mode::Default, Mode::Secure] {
        let required = mode.caught(&rows);
        let outcomes = run_all(program, mode, &cases);
        let caught = outcomes.iter().filter(|outcome| outcome.caught()).count();
        println!(
            "misuse suite, nodalloc {mode:?} mode: {caught} of {} cases caught ({} required)",
            outcomes.len(),
            required.len()
        );
        for outcome in &outcomes {
            let listed = required.contains(&outcome.case);
            if listed {
                if let Some(why) = outcome.failure() {
                    failures.push(format!(
                        "{} ({mode:?} mode): {why}: {}",
                        outcome.case,
                        outcome.finished.describe()
                    ));
                }
            } else if outcome.caught() {
                println!(
                    "  caught, not in the table: {} ({})",
                    outcome.case,
                    describe_status(outcome.finished.status)
                );
            }
        }
    }
    println!("misuse suite: {:.1} s", started.elapsed().as_secs_f64());
    assert!(
        failures.is_empty(),
        "{} misuse case(s) nodalloc should catch:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The table (`tests/c/misuse_cases.def`) parses, size columns included, and names exactly the
/// categories `misuse_suite list` prints: none missing, none extra, none twice.
#[test]
fn the_case_table_parses_and_names_exactly_the_programs_categories() {
    let rows = table();
    let categories = listed_categories(program());
    assert_table_is_the_programs_list(&rows, &categories);
}

/// What the table's parser refuses, so that a row it misreads fails the tests instead of
/// changing what they hold nodalloc to.
#[test]
fn the_case_table_parser_refuses_malformed_rows() {
    let good = r#"MISUSE_CASE("double-free", double_free, "8 4096 262144", "-")"#;
    assert_eq!(
        parse_table(good),
        Ok(vec![Row {
            category: "double-free",
            caught_default: vec![8, 4096, 262144],
            caught_secure: vec![],
        }])
    );
    for bad in [
        r#"MISUSE_CASE("double-free", double_free, "8 4096 262144", "")"#,
        r#"MISUSE_CASE("double-free", double_free, "8 4096 262144", "16")"#,
        r#"MISUSE_CASE("double-free", double_free, "8 8", "-")"#,
        r#"MISUSE_CASE("double-free", double_free, "8  4096", "-")"#,
        r#"MISUSE_CASE("double-free", double_free, "8 4096")"#,
        r#"MISUSE_CASE(double-free, double_free, "8", "8")"#,
        r#"MISUSE_CASE("double-free", double-free, "8", "8")"#,
        "MISUSE_CASE(\"double-free\", double_free,\n    \"8\", \"8\")",
        "/* MISUSE_CASE(\"double-free\", double_free, \"8\", \"8\") */",
        "#if 0",
    ] {
        assert!(parse_table(bad).is_err(), "parsed: {bad}");
    }
    let twice = format!("{good}\n{good}");
    assert!(parse_table(&twice).is_err(), "parsed a category twice");
}
