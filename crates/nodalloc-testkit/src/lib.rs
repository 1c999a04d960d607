//! What nodalloc's tests share.
//!
//! **The C library, built for the test.** [`library`] builds `libnodalloc.so` for the calling
//! test executable's profile and target directory (once per executable) and returns its path:
//! every harness that runs programs on the library uses it. [`run_bounded`] runs a child to its
//! end or kills its process group past a time limit (the library's build is one such child).
//!
//! **Skips that CI can see.** A test whose precondition is missing (transparent huge pages
//! off, one CPU) cannot check what it is for. libtest has no "skipped" outcome and hides a
//! passing test's output, so an early `return` looks like a pass. [`skip`] instead:
//!
//! - appends `<test name>\t<reason>` to the file `NODALLOC_SKIP_LOG` names, if set (the test
//!   command sets it and counts the lines in its closing `N passed, N failed, N skipped`);
//! - under `CI=true`, fails the test when the precondition is one the CI machine has
//!   ([`Need::OnCi`]): there a skip means the environment or the code regressed.
//!
//! ```
//! use nodalloc_testkit::{skip, Need};
//!
//! fn two_threads_meet_on_two_cpus(cpus: usize) {
//!     if cpus < 2 {
//!         return skip(Need::OnCi, "needs two CPUs");
//!     }
//!     // ... the check itself
//! }
//! ```

mod process;

pub use process::{describe_status, run_bounded, Finished};

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// Whether the machines the project runs its tests on have a precondition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// The CI machine has it (THP in `madvise` or `always` mode, two CPUs): a skip under
    /// `CI=true` fails the test.
    OnCi,
    /// Some machines the tests run on lack it: the skip is counted, never a failure.
    Optional,
}

/// Records that the calling test skipped its check because `reason`; the caller returns right
/// after. Panics (fails the test) under `CI=true` when `need` is [`Need::OnCi`].
pub fn skip(need: Need, reason: &str) {
    let current = std::thread::current();
    let test = current.name().unwrap_or("(unnamed test)");
    if need == Need::OnCi && on_ci() {
        panic!("{test}: skipped on CI, which must have this: {reason}");
    }
    eprintln!("skipped: {reason}");
    if let Some(path) = std::env::var_os("NODALLOC_SKIP_LOG") {
        let line = format!("{test}\t{reason}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(error) = written {
            panic!("{test}: cannot record its skip in {path:?}: {error}");
        }
    }
}

/// For a test that needs transparent huge pages: true (after recording the skip, see [`skip`])
/// when they are off, so the test returns; false when it can run. CI has them.
pub fn skipped_without_thp() -> bool {
    if thp_available() {
        return false;
    }
    skip(Need::OnCi, "transparent huge pages are off on this machine");
    true
}

/// True when the tests run under CI (`CI=true`, as CI services and `.ci/run` set it).
pub fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true")
}

/// True when the kernel offers transparent huge pages to a program that asks (its mode is
/// `always` or `madvise`, not `never`, and the file exists). `NODALLOC_TEST_THP_MODE=never`
/// makes the tests see THP off (how the test command's skip rule is itself tried).
pub fn thp_available() -> bool {
    if std::env::var("NODALLOC_TEST_THP_MODE").is_ok_and(|mode| mode == "never") {
        return false;
    }
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|mode| !mode.contains("[never]"))
}

/// `target/<profile>/` (or `target/<triple>/<profile>/`) of the calling test executable, where
/// cargo puts the workspace's libraries and binaries for that profile.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe.parent().expect("the test executable's directory");
    assert_eq!(
        deps.file_name(),
        Some(OsStr::new("deps")),
        "the test executable {} is not in a cargo `deps` directory",
        exe.display()
    );
    deps.parent().expect("target/<profile>").to_path_buf()
}

/// Google's `pprof`, the reader of record of heap profiles: `$PPROF`, `pprof` on `PATH`,
/// `$GOPATH/bin/pprof` or `~/go/bin/pprof` (where `scripts/setup.sh` has `go install` put it),
/// the first that runs; `None` when none does.
pub fn pprof() -> Option<PathBuf> {
    let runs = |path: &Path| {
        Command::new(path)
            .arg("-help")
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stderr).contains("pprof"))
    };
    let mut candidates: Vec<PathBuf> = std::env::var_os("PPROF")
        .into_iter()
        .map(Into::into)
        .collect();
    candidates.push("pprof".into());
    for (variable, below) in [("GOPATH", "bin/pprof"), ("HOME", "go/bin/pprof")] {
        if let Some(dir) = std::env::var_os(variable) {
            candidates.push(Path::new(&dir).join(below));
        }
    }
    candidates.into_iter().find(|path| runs(path))
}

/// The total `pprof -top` reports for `sample` of `profile` ("… of N total"), in bytes (0 for
/// a profile with nothing in it, which pprof reports without a unit).
pub fn pprof_total(pprof: &Path, profile: &Path, sample: &str) -> u64 {
    let out = Command::new(pprof)
        .args(["-top", "-unit=B", "-nodecount=1"])
        .arg(format!("-sample_index={sample}"))
        .arg(profile)
        .output()
        .expect("running pprof");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|line| {
            if line.ends_with(" of 0 total") {
                return Some(0);
            }
            let end = line.find("B total")?;
            let start = line[..end].rfind(' ')? + 1;
            line[start..end].parse().ok()
        })
        .unwrap_or_else(|| panic!("no total in pprof's output: {text}"))
}

/// A build of the library from scratch (core crate included) takes well under a minute.
const BUILD_TIME_LIMIT: Duration = Duration::from_secs(600);

/// The absolute path of `libnodalloc.so` for the calling test executable's profile and target
/// directory, built (or brought up to date) first, once per executable.
///
/// `cargo test` does not build a package's cdylib (a test cannot link to one), so a plain
/// `cargo test` would find no library, or one left over from before the last change to its
/// source; `cargo build -p nodalloc-ffi` for the same profile is a no-op when nothing changed.
pub fn library() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build_library(&profile_dir())).clone()
}

fn build_library(dir: &Path) -> PathBuf {
    let profile = dir
        .file_name()
        .and_then(OsStr::to_str)
        .expect("the profile directory's name")
        .to_string();
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--quiet", "-p", "nodalloc-ffi"]);
    let profile_flag = match profile.as_str() {
        "debug" => String::new(),
        "release" => "--release".to_string(),
        other => format!("--profile={other}"),
    };
    if !profile_flag.is_empty() {
        cargo.arg(&profile_flag);
    }
    // `target/<profile>`, or `target/<triple>/<profile>` when built with `--target`; cargo
    // marks the target directory itself with CACHEDIR.TAG.
    let parent = dir.parent().expect("the target directory");
    if parent.join("CACHEDIR.TAG").is_file() {
        cargo.arg("--target-dir").arg(parent);
    } else {
        cargo
            .arg("--target-dir")
            .arg(parent.parent().expect("the target directory"))
            .arg("--target")
            .arg(parent.file_name().expect("the target triple directory"));
    }
    let built = run_bounded(&mut cargo, BUILD_TIME_LIMIT);
    let library = dir.join("libnodalloc.so");
    assert!(
        built.succeeded() && library.is_file(),
        "building the library for these tests failed ({cargo:?}); build it by hand with \
         `cargo build {profile_flag} -p nodalloc-ffi` from the workspace root to see why: {}",
        built.describe()
    );
    library
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, so that no other test of this binary sees the variables it sets.
    #[test]
    fn a_skip_is_recorded_with_its_test_and_fails_on_ci_when_ci_has_the_need() {
        let path = std::env::temp_dir().join(format!("skip-log-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        std::env::set_var("NODALLOC_SKIP_LOG", &path);
        std::env::set_var("CI", "false");
        skip(Need::OnCi, "a reason");
        std::env::set_var("CI", "true");
        skip(Need::Optional, "another");
        let on_ci = std::panic::catch_unwind(|| skip(Need::OnCi, "a third"));
        std::env::remove_var("CI");
        std::env::remove_var("NODALLOC_SKIP_LOG");
        let log = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let name = "tests::a_skip_is_recorded_with_its_test_and_fails_on_ci_when_ci_has_the_need";
        assert_eq!(log, format!("{name}\ta reason\n{name}\tanother\n"));
        assert!(on_ci.is_err(), "a skip of what CI has must fail there");
    }
}
