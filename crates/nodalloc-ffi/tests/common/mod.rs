//! What the C ABI tests and the real-program tests share: finding `libnodalloc.so`, running a
//! child process with a time bound, and scratch directories.
//!
//! The library is the cdylib cargo builds for this package into `target/<profile>/`; a test
//! executable lives in `target/<profile>/deps/`, so the library is found from the test's own
//! path and always matches the profile under test.

// Each test crate that includes this module uses only part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The first line of nodalloc's statistics report.
pub const STATS_LINE_PREFIX: &str = "nodalloc 0.1.0:";

pub const SIGABRT: i32 = 6;

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

pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn succeeded(&self) -> bool {
        self.status.success()
    }

    /// The status, output and error output, for a failure message.
    pub fn describe(&self) -> String {
        format!(
            "{}\n--- stdout (last 4000 bytes) ---\n{}\n--- stderr (last 4000 bytes) ---\n{}",
            describe_status(self.status),
            tail(&self.stdout, 4000),
            tail(&self.stderr, 4000)
        )
    }
}

pub fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => format!("{status}"),
    }
}

fn tail(text: &str, limit: usize) -> &str {
    let mut start = text.len().saturating_sub(limit);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Runs `command` to completion, killing its whole process group and failing the test if it
/// takes longer than `limit` (a hang in the allocator must fail the test, not stall the suite;
/// the group takes forked children with it).
pub fn run_bounded(command: &mut Command, limit: Duration) -> Finished {
    let description = format!("{command:?}");
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {description}: {error}"));
    // Readers on their own threads: a child blocked on a full pipe would never exit.
    let stdout = reader(child.stdout.take().expect("piped stdout"));
    let stderr = reader(child.stderr.take().expect("piped stderr"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the child") {
            break status;
        }
        if started.elapsed() > limit {
            kill_group(child.id());
            // In case the `kill` program is missing: the direct child at least.
            let _ = child.kill();
            let _ = child.wait();
            // A descendant that escaped the group may hold the pipe open: do not wait for long.
            let stderr = stderr
                .recv_timeout(Duration::from_secs(1))
                .unwrap_or_default();
            panic!(
                "{description} did not finish within {limit:?} and was killed\n--- stderr ---\n{}",
                tail(&stderr, 4000)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Finished {
        status,
        stdout: stdout.recv().expect("stdout reader"),
        stderr: stderr.recv().expect("stderr reader"),
    }
}

/// Reads `pipe` to its end on a thread of its own and sends the text when done.
fn reader(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        let _ = sender.send(String::from_utf8_lossy(&bytes).into_owned());
    });
    receiver
}

fn kill_group(group: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .status();
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
