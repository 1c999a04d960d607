//! What the C ABI tests and the real-program tests share: finding `libnodalloc.so`, running a
//! child process with a time bound (both from `nodalloc-testkit`), and scratch directories.
//!
//! The library is the cdylib cargo builds for this package into `target/<profile>/`; a test
//! executable lives in `target/<profile>/deps/`, so the library is found from the test's own
//! path and always matches the profile under test.

// Each test crate that includes this module uses only part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The first line of nodalloc's statistics report.
pub const STATS_LINE_PREFIX: &str = "nodalloc 0.1.0:";

pub const SIGABRT: i32 = 6;

// Each test crate uses part of it (as of the rest of this module).
#[allow(unused_imports)]
pub use nodalloc_testkit::{describe_status, run_bounded, Finished};

/// The absolute path of `libnodalloc.so`, built for this test executable's profile first (see
/// `nodalloc_testkit::library`).
pub fn library() -> PathBuf {
    nodalloc_testkit::library()
}

/// A command whose environment holds no `NODALLOC_*` variable and no `LD_PRELOAD`, whatever the
/// environment of `cargo test`, so that each test sets exactly what it means.
pub fn clean_command(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("NODALLOC_") {
            command.env_remove(&name);
        }
    }
    command.env_remove("LD_PRELOAD");
    command
}

/// Whether `program` can be found on `PATH`.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false)
}

/// A fresh directory under cargo's scratch space for integration tests, removed when dropped.
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    pub fn new(purpose: &str) -> ScratchDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{purpose}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|error| panic!("cannot create {}: {error}", path.display()));
        ScratchDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
