//! Running a child process with a time bound, for tests: a hang must fail the test, not stall
//! the suite.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How a child run by [`run_bounded`] ended, with its output.
pub struct Finished {
    /// How it ended.
    pub status: ExitStatus,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl Finished {
    /// True when the child exited with status 0.
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

/// An exit status in words: `exit code N` or `killed by signal N`.
pub fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => format!("{status}"),
    }
}

/// The last `limit` bytes of `text` (from a character boundary).
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
