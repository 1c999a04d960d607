//! Real programs with `libnodalloc.so` in `LD_PRELOAD`: each run's standard output must equal
//! the same run's without nodalloc, and with `NODALLOC_STATS=1` its standard error must hold
//! nodalloc's statistics line (proof that nodalloc really was the allocator).
//!
//! Needs `python3`, `perl`, `bash`, `git`, `gcc` and `sqlite3` on `PATH` (Debian packages
//! `python3`, `perl`, `bash`, `git`, `gcc`, `sqlite3`); a missing one fails its test and names
//! the package.

mod common;

use common::{clean_command, library, on_path, run_bounded, ScratchDir, STATS_LINE_PREFIX};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Each of these runs takes well under a few seconds; the bound only catches a hang.
const TIME_LIMIT: Duration = Duration::from_secs(60);

fn require(program: &str, package: &str) {
    assert!(
        on_path(program),
        "`{program}` is not installed, so it cannot be tested under nodalloc: install the Debian \
         package `{package}` (apt-get install {package})"
    );
}

/// Runs the command `make(dir)` twice, each time in its own fresh `dir`: without nodalloc, then
/// with it preloaded and printing its statistics. Both must succeed with the same stdout.
/// Returns that stdout.
fn same_output_with_nodalloc(what: &str, make: &dyn Fn(&Path) -> Command) -> String {
    let plain_dir = ScratchDir::new("plain");
    let plain = run_bounded(&mut make(plain_dir.path()), TIME_LIMIT);
    assert!(
        plain.succeeded(),
        "{what} failed even without nodalloc: {}",
        plain.describe()
    );

    let preloaded_dir = ScratchDir::new("preloaded");
    let mut command = make(preloaded_dir.path());
    command
        .env("LD_PRELOAD", library())
        .env("NODALLOC_STATS", "1");
    let preloaded = run_bounded(&mut command, TIME_LIMIT);
    assert!(
        preloaded.succeeded(),
        "{what} failed under nodalloc: {}",
        preloaded.describe()
    );
    assert!(
        preloaded
            .stderr
            .lines()
            .any(|line| line.starts_with(STATS_LINE_PREFIX)),
        "{what} under nodalloc with NODALLOC_STATS=1 printed no `{STATS_LINE_PREFIX}` line on \
         stderr: was nodalloc loaded? {}",
        preloaded.describe()
    );
    if let Some((index, (expected, seen))) = plain
        .stdout
        .lines()
        .zip(preloaded.stdout.lines())
        .enumerate()
        .find(|(_, (expected, seen))| expected != seen)
    {
        panic!(
            "{what}: line {} of stdout differs under nodalloc\n  without: {expected}\n  with:    \
             {seen}",
            index + 1
        );
    }
    assert_eq!(
        plain.stdout.lines().count(),
        preloaded.stdout.lines().count(),
        "{what}: stdout has a different number of lines under nodalloc ({})",
        preloaded.describe()
    );
    assert_eq!(plain.stdout, preloaded.stdout, "{what}: stdout differs");
    preloaded.stdout
}

fn in_dir(program: &str, dir: &Path) -> Command {
    let mut command = clean_command(program);
    command.current_dir(dir);
    command
}

#[test]
fn python_dict_json_and_threads_give_the_same_output_under_nodalloc() {
    require("python3", "python3");
    const SCRIPT: &str = r#"
import hashlib, json, threading

table = {f"key{i}": i * i for i in range(200_000)}
print(len(table), sum(table.values()), table["key199999"])

text = json.dumps(table, sort_keys=True)
back = json.loads(text)
print(back == table, len(text), hashlib.sha256(text.encode()).hexdigest())

sums = [0] * 4
def work(index):
    numbers = list(range(index * 500_000, (index + 1) * 500_000))
    sums[index] = sum(numbers)
threads = [threading.Thread(target=work, args=(index,)) for index in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(sums, sum(sums))
"#;
    let output = same_output_with_nodalloc("python3", &|dir| {
        let mut python = in_dir("python3", dir);
        python.arg("-c").arg(SCRIPT);
        python
    });
    assert!(
        output.contains("200000 2666646666700000 39999600001"),
        "python3 printed: {output}"
    );
}

#[test]
fn perl_hash_sorted_gives_the_same_output_under_nodalloc() {
    require("perl", "perl");
    const SCRIPT: &str = r#"
my %table;
$table{"k$_"} = $_ * 3 for 0 .. 99_999;
print "$_ $table{$_}\n" for sort keys %table;
print scalar(keys %table), "\n";
"#;
    let output = same_output_with_nodalloc("perl", &|dir| {
        let mut perl = in_dir("perl", dir);
        perl.arg("-e").arg(SCRIPT);
        perl
    });
    assert_eq!(output.lines().count(), 100_001);
    assert_eq!(output.lines().next(), Some("k0 0"));
    assert_eq!(output.lines().last(), Some("100000"));
}

#[test]
fn bash_string_building_gives_the_same_output_under_nodalloc() {
    require("bash", "bash");
    const SCRIPT: &str = r#"
text=""
for ((i = 0; i < 5000; i++)); do
    text="$text$i,"
done
words=(${text//,/ })
printf '%d %d %s %s\n' "${#text}" "${#words[@]}" "${words[0]}" "${words[4999]}"
printf '%s\n' "${text:0:40}"
"#;
    let output = same_output_with_nodalloc("bash", &|dir| {
        let mut bash = in_dir("bash", dir);
        bash.arg("-c").arg(SCRIPT);
        bash
    });
    assert!(
        output.starts_with("23890 5000 0 4999\n"),
        "bash printed: {output}"
    );
}

#[test]
fn git_commits_and_log_are_identical_under_nodalloc() {
    require("git", "git");
    let output = same_output_with_nodalloc("git", &|dir| {
        // One shell script, so that every git process of the session runs in the same mode.
        // Fixed names and dates make the commit hashes reproducible.
        let mut shell = in_dir("sh", dir);
        shell
            .arg("-c")
            .arg(
                "set -e
                 git init -q -b main .
                 git config user.name 'Nodalloc Test'
                 git config user.email test@example.invalid
                 echo first > a.txt
                 git add a.txt
                 git commit -q -m 'add a.txt'
                 seq 1 10000 > b.txt
                 git add b.txt
                 git commit -q -m 'add b.txt'
                 git log --format=%s
                 git log --format=%H
                 git count-objects",
            )
            .env("HOME", dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z");
        shell
    });
    assert!(
        output.starts_with("add b.txt\nadd a.txt\n"),
        "git log printed: {output}"
    );
}

#[test]
fn gcc_compiles_a_program_that_runs_the_same_under_nodalloc() {
    require("gcc", "gcc");
    const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int compare(const void *a, const void *b) {
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

int main(void) {
    enum { COUNT = 100000 };
    unsigned *numbers = malloc(COUNT * sizeof *numbers);
    unsigned state = 1;
    for (int i = 0; i < COUNT; i++) {
        state = state * 1103515245u + 12345u;
        numbers[i] = state >> 8;
    }
    qsort(numbers, COUNT, sizeof *numbers, compare);
    char *text = strdup("sorted");
    unsigned long long sum = 0;
    for (int i = 0; i < COUNT; i += 1000) {
        sum += numbers[i];
    }
    printf("%s %u %u %llu\n", text, numbers[0], numbers[COUNT - 1], sum);
    free(text);
    free(numbers);
    return 0;
}
"#;
    let output = same_output_with_nodalloc("gcc", &|dir| {
        std::fs::write(dir.join("sort.c"), PROGRAM).expect("writing sort.c");
        // The compiler (gcc, cc1, as, collect2, ld) and the program it built all run in the
        // same mode.
        let mut shell = in_dir("sh", dir);
        shell
            .arg("-c")
            .arg("gcc -O2 -Wall -Werror -o sort sort.c && ./sort");
        shell
    });
    assert!(
        output.starts_with("sorted "),
        "the program printed: {output}"
    );
}

#[test]
fn sqlite_inserts_and_aggregates_the_same_under_nodalloc() {
    require("sqlite3", "sqlite3");
    const SQL: &str = "
        CREATE TABLE numbers(x INTEGER);
        BEGIN;
        WITH RECURSIVE counter(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM counter WHERE x < 100000)
        INSERT INTO numbers SELECT x FROM counter;
        COMMIT;
        CREATE INDEX numbers_by_x ON numbers(x);
        SELECT count(*), sum(x) FROM numbers;
        SELECT x FROM numbers WHERE x % 25000 = 0 ORDER BY x DESC;
    ";
    let output = same_output_with_nodalloc("sqlite3", &|dir| {
        let mut sqlite = in_dir("sqlite3", dir);
        sqlite.arg(dir.join("test.db")).arg(SQL);
        sqlite
    });
    assert_eq!(output, "100000|5000050000\n100000\n75000\n50000\n25000\n");
}
