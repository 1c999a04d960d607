//! What nodalloc's tests share.
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

use std::io::Write;

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
