//! The heap-misuse suite (`tests/c/misuse_suite.cpp` and `tests/c/public_suite.c`) against
//! `libnodalloc.so` under `LD_PRELOAD`, in default and in secure mode. It holds two sets of
//! cases, scored apart:
//!
//! - **The public suite of record**, mimalloc-bench's `bench/security`: one case per program
//!   of it, 116 in all (37 C programs at 8, 4096 and 262144 bytes, 5 C++ programs at 4096), each
//!   doing what that program does and named as its binary is (`double_free_small`), listed in
//!   the table `tests/c/public_cases.def`. The C programs are reproduced by a C program,
//!   `public_suite.c`, built as the public suite builds them, and the C++ ones by
//!   `misuse_suite.cpp`: a C++ process allocates before `main` (libstdc++'s emergency exception
//!   pool), which moves a C program's first blocks away from where they land in the public
//!   binaries, and with them the verdicts of overflows and underflows. The verdict is the public
//!   suite's (its `bench.sh`): a program is caught when it dies, or exits, before printing its
//!   `NOT_CAUGHT` line, within 1 s; one that prints the line is missed, whatever happens after.
//!   The table's caught columns (the programs nodalloc caught in every run of the public suite
//!   itself) must be caught, and the score of each mode, `public suite: N of 116`, must reach
//!   their count; a program the table marks as caught in some runs only (`?`) is held neither
//!   way.
//! - **The project's extra cases** (`tests/c/misuse_cases.def`: one bad operation per case, each
//!   category at 8, 4096 and 262144 bytes, among neighbours and followed by what a program does
//!   next). The table's caught columns (the sizes at which nodalloc caught a category every time
//!   when the table was filled) must be caught, and an abort must name the pointer the program
//!   announced (or a block it announced as nearby: an overflow is found in the neighbour it
//!   reached). A case is caught when the process dies of a signal, exits non-zero, or ends
//!   without its `unnoticed CATEGORY SIZE` line (the cases whose harm is an outcome print it only
//!   when they observe the outcome).
//!
//! In both, a fault (SIGSEGV, SIGBUS: a guard page, an inaccessible `malloc(0)`, or a link
//! followed into unmapped memory) is accepted without a message, and so is, against the debug
//! library, the panic of one of its checks where the release library would fault; any other
//! abort must carry a `nodalloc: ` message. The programs read the tables as X-macros, so a new
//! case is a function there and a row in a table. Each mode's scores are printed
//! (`cargo test --release -p nodalloc-ffi --test misuse_suite -- --nocapture`);
//! `scripts/misuse-score.sh` compares them with glibc and other allocators.

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

/// The table of the public suite's programs (`PUBLIC_CASE(...)` rows for its C programs, which
/// `public_suite.c` includes, `PUBLIC_CASE_CXX(...)` for its C++ ones, which `misuse_suite.cpp`
/// includes), read the same way.
const PUBLIC_TABLE: &str = include_str!("c/public_cases.def");

/// Programs in mimalloc-bench's `bench/security`, as its CMakeLists builds them: 37 C programs
/// at three sizes and 5 C++ programs once.
const PUBLIC_PROGRAMS: usize = 116;

/// The public suite's bound on a program (`timeout 1s` in its `bench.sh`): one that has not
/// ended by then is not caught.
const PUBLIC_TIME_LIMIT: Duration = Duration::from_secs(1);

/// The compiler flags of the public suite's build (`bench/security/CMakeLists.txt`) that keep a
/// misuse from being inlined or folded away: both programs are built with them.
const PUBLIC_BUILD_FLAGS: [&str; 4] = [
    "-fno-inline",
    "-fno-builtin-inline",
    "-fno-inline-small-functions",
    "-fno-ipa-pure-const",
];

/// The rest of the public suite's flags for its C programs: its build type, Release, and the
/// warning it silences. `public_suite.c` is built with these and [`PUBLIC_BUILD_FLAGS`] alone,
/// as the public binaries are.
const PUBLIC_C_BUILD_FLAGS: [&str; 3] = ["-O3", "-DNDEBUG", "-Wno-free-nonheap-object"];

/// C++'s sized deallocation, which the public suite's C++ programs are built with, and so is
/// `misuse_suite.cpp`.
const PUBLIC_CXX_BUILD_FLAGS: [&str; 1] = ["-fsized-deallocation"];

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
    parse_rows(text, parse_row, |row| row.category)
}

/// The rows of a table in `text`, each line parsed by `parse`; `key` names a row, which must be
/// the only one of its name.
fn parse_rows<'a, R>(
    text: &'a str,
    parse: fn(&'a str) -> Result<R, String>,
    key: fn(&R) -> &'a str,
) -> Result<Vec<R>, String> {
    let mut rows: Vec<R> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("//") {
            continue;
        }
        let row = parse(line).map_err(|why| format!("line {}: {why}: {line}", index + 1))?;
        if rows.iter().any(|earlier| key(earlier) == key(&row)) {
            return Err(format!(
                "line {}: {} has a row already",
                index + 1,
                key(&row)
            ));
        }
        rows.push(row);
    }
    Ok(rows)
}

/// The fields of `MACRO(...)` on one line, trimmed.
fn macro_fields<'a>(line: &'a str, name: &str) -> Result<Vec<&'a str>, String> {
    line.strip_prefix(name)
        .and_then(|rest| rest.strip_prefix('('))
        .and_then(|rest| rest.strip_suffix(')'))
        .map(|arguments| arguments.split(',').map(str::trim).collect())
        .ok_or_else(|| format!("not a {name}(...) row on one line"))
}

/// Fails unless `function` is a C or C++ identifier, as the function column must be.
fn check_identifier(function: &str) -> Result<(), String> {
    let identifier = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if function.is_empty()
        || function.starts_with(|c: char| c.is_ascii_digit())
        || !function.chars().all(identifier)
    {
        return Err(format!("function {function:?} is not an identifier"));
    }
    Ok(())
}

/// `MISUSE_CASE("category", function, "default sizes", "secure sizes")`.
fn parse_row(line: &str) -> Result<Row<'_>, String> {
    let fields = macro_fields(line, "MISUSE_CASE")?;
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
    check_identifier(function)?;
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

/// What the public table expects of a program in one mode.
#[derive(Debug, Default, PartialEq)]
struct Expected {
    /// The sizes at which nodalloc must catch it.
    caught: Vec<usize>,
    /// The sizes at which it catches it in some runs only (`?SIZE`): held neither way.
    sometimes: Vec<usize>,
}

/// The language of a public program, which says which of the two programs reproduces it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Language {
    /// A `PUBLIC_CASE` row, reproduced by `public_suite.c`.
    C,
    /// A `PUBLIC_CASE_CXX` row, reproduced by `misuse_suite.cpp`.
    Cxx,
}

impl Language {
    /// The macro of its rows in the public table.
    fn row_macro(self) -> &'static str {
        match self {
            Language::C => "PUBLIC_CASE",
            Language::Cxx => "PUBLIC_CASE_CXX",
        }
    }

    /// The sizes the public suite builds its programs in this language at (its CMakeLists).
    fn sizes(self) -> &'static [usize] {
        match self {
            Language::C => &SIZES,
            Language::Cxx => &[4096],
        }
    }

    /// The name of the program that reproduces them (its source's, as [`compile`] names it).
    fn program_name(self) -> &'static str {
        match self {
            Language::C => "public_suite",
            Language::Cxx => "misuse_suite",
        }
    }

    /// The program that reproduces them.
    fn program(self) -> &'static Path {
        match self {
            Language::C => public_program(),
            Language::Cxx => program(),
        }
    }
}

/// One row of the public table: a program of the public suite, its language, the sizes it is
/// built at, and what nodalloc must catch of it per mode.
#[derive(Debug, PartialEq)]
struct PublicRow<'a> {
    program: &'a str,
    language: Language,
    sizes: Vec<usize>,
    expected_default: Expected,
    expected_secure: Expected,
}

/// What the public table holds nodalloc to for one run of a program.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expectation {
    Caught,
    Sometimes,
    /// Not caught when the table was filled: a catch is reported, not required.
    Missed,
}

impl Expected {
    /// What is expected of the program at `size`.
    fn at(&self, size: usize) -> Expectation {
        if self.caught.contains(&size) {
            Expectation::Caught
        } else if self.sometimes.contains(&size) {
            Expectation::Sometimes
        } else {
            Expectation::Missed
        }
    }
}

/// `PUBLIC_CASE("program", function, "sizes", "default caught", "secure caught")`, or
/// `PUBLIC_CASE_CXX(...)` with the same fields for a C++ program.
fn parse_public_row(line: &str) -> Result<PublicRow<'_>, String> {
    let (language, fields) = [Language::Cxx, Language::C]
        .into_iter()
        .find_map(|language| {
            macro_fields(line, language.row_macro())
                .ok()
                .map(|fields| (language, fields))
        })
        .ok_or("not a PUBLIC_CASE(...) or PUBLIC_CASE_CXX(...) row on one line")?;
    let [program, function, built, caught_default, caught_secure] = fields[..] else {
        return Err(format!("{} fields, not 5", fields.len()));
    };
    let program = quoted(program)?;
    if program.is_empty()
        || !program
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(format!(
            "program {program:?} is not a public program's name (lower-case words joined by '_')"
        ));
    }
    check_identifier(function)?;
    let sizes = sizes(quoted(built)?)?;
    if sizes != language.sizes() {
        return Err(format!(
            "built at {sizes:?}: the public suite builds a {} row's program at {:?}",
            language.row_macro(),
            language.sizes()
        ));
    }
    let expected_default = expected(quoted(caught_default)?)?;
    let expected_secure = expected(quoted(caught_secure)?)?;
    for expected in [&expected_default, &expected_secure] {
        if let Some(size) = expected
            .caught
            .iter()
            .chain(&expected.sometimes)
            .find(|size| !sizes.contains(size))
        {
            return Err(format!("caught at {size}, a size it is not built at"));
        }
    }
    Ok(PublicRow {
        program,
        language,
        sizes,
        expected_default,
        expected_secure,
    })
}

/// A caught column of the public table: sizes as in [`sizes`], those caught in some runs only
/// written `?SIZE`.
fn expected(column: &str) -> Result<Expected, String> {
    let mut expected = Expected::default();
    if column == "-" {
        return Ok(expected);
    }
    let (marks, plain): (Vec<bool>, Vec<&str>) = column
        .split(' ')
        .map(|word| match word.strip_prefix('?') {
            Some(size) => (true, size),
            None => (false, word),
        })
        .unzip();
    // The sizes parser checks each size, and that each comes once whatever its mark.
    let sizes = sizes(&plain.join(" ")).map_err(|why| format!("{why} (in {column:?})"))?;
    for (size, sometimes) in sizes.into_iter().zip(marks) {
        if sometimes {
            expected.sometimes.push(size);
        } else {
            expected.caught.push(size);
        }
    }
    Ok(expected)
}

/// The public table's rows; a test fails here if it does not parse.
fn public_table() -> Vec<PublicRow<'static>> {
    parse_rows(PUBLIC_TABLE, parse_public_row, |row| row.program)
        .unwrap_or_else(|why| panic!("tests/c/public_cases.def, {why}"))
}

/// One program of the public suite at one size: one of its binaries.
#[derive(Debug)]
struct PublicCase<'a> {
    /// The binary's name in the public suite (`double_free_small`, `invalid_array_delete_char`).
    name: String,
    row: &'a PublicRow<'a>,
    size: usize,
}

impl PublicCase<'_> {
    /// The program's arguments: `PROGRAM SIZE`.
    fn arguments(&self) -> String {
        format!("{} {}", self.row.program, self.size)
    }

    /// As `public_suite list-public` (or `misuse_suite`'s, for a C++ program) prints it: `NAME
    /// PROGRAM SIZE`.
    fn listing(&self) -> String {
        format!("{} {}", self.name, self.arguments())
    }

    /// The command that runs it, for a message: `public_suite PROGRAM SIZE`.
    fn command(&self) -> String {
        format!("{} {}", self.row.language.program_name(), self.arguments())
    }

    fn expectation(&self, mode: Mode) -> Expectation {
        match mode {
            Mode::Default => self.row.expected_default.at(self.size),
            Mode::Secure => self.row.expected_secure.at(self.size),
        }
    }
}

/// Every binary of the public suite, in the table's order: a program built at several sizes is
/// `PROGRAM_small`, `_medium` and `_large` (8, 4096, 262144 bytes), one built once is `PROGRAM`.
fn public_cases<'a>(rows: &'a [PublicRow<'a>]) -> Vec<PublicCase<'a>> {
    rows.iter()
        .flat_map(|row| {
            row.sizes.iter().map(move |&size| {
                let name = if row.sizes.len() == 1 {
                    row.program.to_string()
                } else {
                    let suffix = match size {
                        8 => "small",
                        4096 => "medium",
                        _ => "large",
                    };
                    format!("{}_{suffix}", row.program)
                };
                PublicCase { name, row, size }
            })
        })
        .collect()
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

/// Builds `tests/c/SOURCE` with `compiler` and `flags` into a program named for the source
/// (not linked with nodalloc: it runs under `LD_PRELOAD`).
fn compile(source: &str, compiler: &str, flags: &[&str]) -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let profile = library()
        .parent()
        .and_then(Path::file_name)
        .expect("the profile directory's name")
        .to_string_lossy()
        .into_owned();
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("misuse_suite-{profile}"));
    std::fs::create_dir_all(&out_dir).expect("creating the program's directory");
    let name = source.split('.').next().expect("a source file's name");
    let output = out_dir.join(name);
    // Built under a private name and renamed into place: two test runs may share the directory.
    let partial = out_dir.join(format!("{name}.{}.partial", std::process::id()));
    let source = crate_dir.join("tests/c").join(source);
    let mut command = Command::new(compiler);
    command
        .args(flags)
        .args(["-Wall", "-Werror", "-DNODALLOC_PRELOADED", "-I"])
        .arg(crate_dir.join("include"))
        .arg("-o")
        .arg(&partial)
        .arg(&source);
    let result = command.output().unwrap_or_else(|error| {
        panic!(
            "cannot run `{compiler}` to build {}: {error}",
            source.display()
        )
    });
    assert!(
        result.status.success(),
        "compiling {} failed: {command:?}\n{}",
        source.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    std::fs::rename(&partial, &output).expect("moving the compiled program into place");
    output
}

/// `misuse_suite.cpp` (the project's cases and the public suite's C++ programs), built once for
/// the tests of this file.
fn program() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let mut flags = vec![
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-rdynamic",
            "-pthread",
        ];
        flags.extend(PUBLIC_BUILD_FLAGS.iter().chain(&PUBLIC_CXX_BUILD_FLAGS));
        compile("misuse_suite.cpp", "c++", &flags)
    })
}

/// `public_suite.c` (the public suite's C programs), built once for the tests of this file, as
/// the public suite builds its C programs.
fn public_program() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let flags = [PUBLIC_C_BUILD_FLAGS.as_slice(), &PUBLIC_BUILD_FLAGS].concat();
        compile("public_suite.c", "cc", &flags)
    })
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

/// The public programs' binaries in `language` that its program's `list-public` prints (`NAME
/// PROGRAM SIZE`), in its order.
fn listed_public(language: Language) -> Vec<String> {
    let listed = run_bounded(
        clean_command(language.program()).arg("list-public"),
        TIME_LIMIT,
    );
    assert!(
        listed.succeeded(),
        "{} list-public: {}",
        language.program_name(),
        listed.describe()
    );
    listed.stdout.lines().map(str::to_string).collect()
}

/// Panics unless the public table describes the public suite's 116 binaries, and those of each
/// language are what its program lists, in its order.
fn assert_public_table_is_the_programs_list(cases: &[PublicCase]) {
    for language in [Language::C, Language::Cxx] {
        let in_table: Vec<String> = cases
            .iter()
            .filter(|case| case.row.language == language)
            .map(PublicCase::listing)
            .collect();
        let listed = listed_public(language);
        assert!(
            in_table == listed,
            "the {} rows of tests/c/public_cases.def and `{} list-public` differ:\n\
             table:  {in_table:?}\nlisted: {listed:?}",
            language.row_macro(),
            language.program_name()
        );
    }
    assert_eq!(
        cases.len(),
        PUBLIC_PROGRAMS,
        "tests/c/public_cases.def describes {} binaries, the public suite builds {PUBLIC_PROGRAMS}",
        cases.len()
    );
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
    /// From the start of the process to its end.
    elapsed: Duration,
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
        self.death_failure(&|line| {
            announced.iter().any(|address| {
                line.split(|c: char| !c.is_ascii_alphanumeric())
                    .any(|word| word == *address)
            })
        })
        .map(|why| format!("{why} naming {pointer}"))
    }

    /// Why a death is not nodalloc's catch, if it is not: a fault is, and an abort whose
    /// `nodalloc: ` message `names` accepts (or, against the debug library, the panic of one of
    /// its checks).
    fn death_failure(&self, names: &dyn Fn(&str) -> bool) -> Option<String> {
        match self.finished.status.signal() {
            Some(SIGSEGV | SIGBUS) => None,
            Some(SIGABRT) => {
                let named = self
                    .finished
                    .stderr
                    .lines()
                    .any(|line| line.starts_with("nodalloc: ") && names(line));
                // Where the release library faults on a smashed link, the debug library's own
                // checks (misaligned dereference, debug assertions) panic first, and a panic
                // inside the allocator aborts.
                let debug_check = cfg!(debug_assertions)
                    && self
                        .finished
                        .stderr
                        .contains("panicked at crates/nodalloc/");
                (!named && !debug_check).then(|| "aborted without a nodalloc message".to_string())
            }
            _ => Some(format!(
                "caught, but by {}, not by nodalloc's abort or a fault",
                describe_status(self.finished.status)
            )),
        }
    }

    /// Whether a public program printed its `NOT_CAUGHT` line (after output of its own on the
    /// same line, possibly: `double_free_reuse` prints pointers with no newline).
    fn printed_not_caught(&self, case: &PublicCase) -> bool {
        self.finished
            .stdout
            .contains(&format!("NOT_CAUGHT {}", case.name))
    }

    /// The public suite's verdict: the program ended without printing its line, within 1 s.
    fn caught_by_public_rule(&self, case: &PublicCase) -> bool {
        !self.printed_not_caught(case) && self.elapsed <= PUBLIC_TIME_LIMIT
    }

    /// Why a public program the table holds caught does not pass, if it does not.
    fn public_failure(&self, case: &PublicCase) -> Option<String> {
        if self.printed_not_caught(case) {
            return Some("not caught: it printed its NOT_CAUGHT line".to_string());
        }
        if self.elapsed > PUBLIC_TIME_LIMIT {
            return Some(format!(
                "not caught: it ran {:.2} s, past the public suite's {PUBLIC_TIME_LIMIT:?}",
                self.elapsed.as_secs_f64()
            ));
        }
        if self.finished.succeeded() {
            // A program that prints only when it sees the harm, and did not see it.
            return None;
        }
        self.death_failure(&|_| true)
    }

    fn describe_ending(&self) -> String {
        let message = self
            .finished
            .stderr
            .lines()
            .find(|line| line.starts_with("nodalloc: "));
        match message {
            Some(message) => format!("{}: {message}", describe_status(self.finished.status)),
            None => describe_status(self.finished.status),
        }
    }
}

/// Runs every case (a program and its arguments) in `mode`, WORKERS at a time, in the order of
/// `cases`.
fn run_all(mode: Mode, cases: &[(&Path, String)]) -> Vec<Outcome> {
    run_all_with(mode, cases, &[])
}

/// [`run_all`] with `env` set for every case.
fn run_all_with(mode: Mode, cases: &[(&Path, String)], env: &[(&str, &str)]) -> Vec<Outcome> {
    let next = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::with_capacity(cases.len()));
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some((program, case)) = cases.get(index) else {
                    break;
                };
                let mut command = clean_command(program);
                command
                    .args(case.split(' '))
                    .env("LD_PRELOAD", library())
                    .env("NODALLOC_SECURE", mode.secure_setting())
                    .envs(env.iter().copied());
                let started = Instant::now();
                let finished = run_bounded(&mut command, TIME_LIMIT);
                let outcome = Outcome {
                    case: case.clone(),
                    finished,
                    elapsed: started.elapsed(),
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

/// Every case of the project's table is caught (with nodalloc's message naming the pointer when
/// it aborts), in default and in secure mode; prints each mode's score.
#[test]
fn the_misuse_cases_nodalloc_catches_stay_caught() {
    let started = Instant::now();
    let program = program();
    let rows = table();
    let categories = listed_categories(program);
    assert_table_is_the_programs_list(&rows, &categories);
    let cases = cases(&categories);
    let runs: Vec<(&Path, String)> = cases.iter().map(|case| (program, case.clone())).collect();
    // Printed at the end, in one piece: the public suite's test runs beside this one.
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for mode in [Mode::Default, Mode::Secure] {
        let required = mode.caught(&rows);
        let outcomes = run_all(mode, &runs);
        let caught = outcomes.iter().filter(|outcome| outcome.caught()).count();
        report.push(format!(
            "misuse suite, nodalloc {mode:?} mode: project's extra cases: {caught} of {} caught \
             ({} required)",
            outcomes.len(),
            required.len()
        ));
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
                report.push(format!(
                    "  caught, not in the table: {} ({})",
                    outcome.case,
                    describe_status(outcome.finished.status)
                ));
            }
        }
    }
    report.push(format!(
        "misuse suite, project's extra cases: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    println!("{}", report.join("\n"));
    assert!(
        failures.is_empty(),
        "{} misuse case(s) nodalloc should catch:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Every program of the public suite (mimalloc-bench's `bench/security`) that its table holds
/// caught is caught, by the public suite's rule, in default and in secure mode, and each mode's
/// score (`public suite: N of 116`) reaches the count of those; prints the scores.
#[test]
fn the_public_suites_programs_nodalloc_catches_stay_caught() {
    let started = Instant::now();
    let rows = public_table();
    let cases = public_cases(&rows);
    assert_public_table_is_the_programs_list(&cases);
    let arguments: Vec<(&Path, String)> = cases
        .iter()
        .map(|case| (case.row.language.program(), case.arguments()))
        .collect();
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for mode in [Mode::Default, Mode::Secure] {
        let outcomes = run_all(mode, &arguments);
        let runs: Vec<(&PublicCase, &Outcome)> = cases.iter().zip(&outcomes).collect();
        let caught = runs
            .iter()
            .filter(|(case, outcome)| outcome.caught_by_public_rule(case))
            .count();
        let expected = |expectation| {
            cases
                .iter()
                .filter(|case| case.expectation(mode) == expectation)
                .count()
        };
        let required = expected(Expectation::Caught);
        report.push(format!(
            "misuse suite, nodalloc {mode:?} mode: public suite: {caught} of {} (mimalloc-bench \
             bench/security; {required} required, {} caught in some runs only)",
            cases.len(),
            expected(Expectation::Sometimes)
        ));
        for (case, outcome) in &runs {
            let caught = outcome.caught_by_public_rule(case);
            match case.expectation(mode) {
                Expectation::Caught => {
                    if let Some(why) = outcome.public_failure(case) {
                        failures.push(format!(
                            "{} ({mode:?} mode, `{}`): {why}: {}",
                            case.name,
                            case.command(),
                            outcome.finished.describe()
                        ));
                    }
                }
                Expectation::Sometimes => report.push(format!(
                    "  caught in some runs only: {}, {} this run ({})",
                    case.name,
                    if caught { "caught" } else { "missed" },
                    outcome.describe_ending()
                )),
                Expectation::Missed if caught => report.push(format!(
                    "  caught, not in the table: {} ({})",
                    case.name,
                    outcome.describe_ending()
                )),
                Expectation::Missed => {}
            }
        }
        if caught < required {
            failures.push(format!(
                "{mode:?} mode: public suite {caught} of {}, below the {required} its table \
                 holds caught",
                cases.len()
            ));
        }
    }
    report.push(format!(
        "misuse suite, public suite: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    println!("{}", report.join("\n"));
    assert!(
        failures.is_empty(),
        "{} failure(s) of the public suite's programs:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The public programs default mode misses where glibc catches them by its copies' damage
/// (a `memcpy` of 32 bytes too many into an 8-byte or a 4 KiB block), and one more, die at the
/// copy with the copies bounded (`NODALLOC_CHECK_COPIES=1`), by the public suite's rule, and
/// print their line without it.
#[test]
fn bounded_copies_catch_the_public_memcpy_overflows_default_mode_misses() {
    let rows = public_table();
    let cases = public_cases(&rows);
    let chosen: Vec<&PublicCase> = cases
        .iter()
        .filter(|case| {
            matches!(
                (case.row.program, case.size),
                ("32_byte_memcpy_overflow", 8 | 4096) | ("one_byte_memcpy_overflow", 4096)
            )
        })
        .collect();
    assert_eq!(chosen.len(), 3);
    let arguments: Vec<(&Path, String)> = chosen
        .iter()
        .map(|case| (case.row.language.program(), case.arguments()))
        .collect();
    let mut failures = Vec::new();
    for (bounded, env) in [
        (true, &[("NODALLOC_CHECK_COPIES", "1")][..]),
        (false, &[][..]),
    ] {
        let outcomes = run_all_with(Mode::Default, &arguments, env);
        for (case, outcome) in chosen.iter().zip(&outcomes) {
            let caught = outcome.caught_by_public_rule(case);
            let named = outcome
                .finished
                .stderr
                .contains("nodalloc: heap overflow: a copy runs past the end of block");
            if bounded && !(caught && named) {
                failures.push(format!(
                    "{} bounded: not caught at the copy: {}",
                    case.name,
                    outcome.finished.describe()
                ));
            }
            if !bounded && caught {
                failures.push(format!(
                    "{} unbounded: caught, so the table's default column is out of date ({})",
                    case.name,
                    outcome.describe_ending()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The table (`tests/c/misuse_cases.def`) parses, size columns included, and names exactly the
/// categories `misuse_suite list` prints: none missing, none extra, none twice.
#[test]
fn the_case_table_parses_and_names_exactly_the_programs_categories() {
    let rows = table();
    let categories = listed_categories(program());
    assert_table_is_the_programs_list(&rows, &categories);
}

/// The public table (`tests/c/public_cases.def`) parses and names exactly the public suite's
/// 116 binaries, as `public_suite list-public` (the C programs) and `misuse_suite list-public`
/// (the C++ ones) print them.
#[test]
fn the_public_table_parses_and_names_exactly_the_programs_public_binaries() {
    let rows = public_table();
    let cases = public_cases(&rows);
    assert_public_table_is_the_programs_list(&cases);
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

    let public = |text| parse_rows(text, parse_public_row, |row: &PublicRow| row.program);
    let good = r#"PUBLIC_CASE("one_byte_underflow", f, "8 4096 262144", "8 4096", "8 ?4096")"#;
    let good_cxx = r#"PUBLIC_CASE_CXX("invalid_array_delete_char", g, "4096", "-", "4096")"#;
    let both = format!("{good}\n{good_cxx}");
    assert_eq!(
        public(&both),
        Ok(vec![
            PublicRow {
                program: "one_byte_underflow",
                language: Language::C,
                sizes: vec![8, 4096, 262144],
                expected_default: Expected {
                    caught: vec![8, 4096],
                    sometimes: vec![],
                },
                expected_secure: Expected {
                    caught: vec![8],
                    sometimes: vec![4096],
                },
            },
            PublicRow {
                program: "invalid_array_delete_char",
                language: Language::Cxx,
                sizes: vec![4096],
                expected_default: Expected::default(),
                expected_secure: Expected {
                    caught: vec![4096],
                    sometimes: vec![],
                },
            },
        ])
    );
    for bad in [
        r#"PUBLIC_CASE("one_byte_underflow", f, "8 4096 262144", "8 4096")"#,
        r#"PUBLIC_CASE("one-byte-underflow", f, "8 4096 262144", "8", "8")"#,
        r#"PUBLIC_CASE_CXX("invalid_array_delete_char", f, "4096", "8", "-")"#,
        r#"PUBLIC_CASE_CXX("invalid_array_delete_char", f, "-", "-", "-")"#,
        r#"PUBLIC_CASE_CXX("one_byte_underflow", f, "8 4096 262144", "-", "-")"#,
        r#"PUBLIC_CASE("invalid_array_delete_char", f, "4096", "-", "-")"#,
        r#"PUBLIC_CASE("one_byte_underflow", f, "4096 8 262144", "-", "-")"#,
        r#"PUBLIC_CASE_C("one_byte_underflow", f, "8 4096 262144", "-", "-")"#,
        r#"PUBLIC_CASE("one_byte_underflow", f, "8 4096 262144", "8 ?8", "-")"#,
        r#"PUBLIC_CASE("one_byte_underflow", f, "8 4096 262144", "??8", "-")"#,
        r#"PUBLIC_CASE("one_byte_underflow", f, "8 4096 262144", "-", "")"#,
        r#"MISUSE_CASE("double-free", double_free, "8 4096 262144", "-")"#,
    ] {
        assert!(public(bad).is_err(), "parsed: {bad}");
    }
    let twice = format!("{good}\n{good}");
    assert!(public(&twice).is_err(), "parsed a program twice");
}
