//! Helpers shared by the crate's integration tests.

use std::process::Command;

/// A xorshift generator: deterministic sequences for tests, no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A size weighted as programs allocate: 60 % up to 256 B, 30 % up to 4 KiB, 9 % up to
    /// 256 KiB, 1 % up to 4 MiB.
    #[allow(dead_code)]
    pub fn size(&mut self) -> usize {
        match self.next() % 100 {
            0..=59 => 1 + (self.next() % 256) as usize,
            60..=89 => 256 + (self.next() % 4096) as usize,
            90..=98 => 4096 + (self.next() % (256 << 10)) as usize,
            _ => (256 << 10) + (self.next() % (4 << 20)) as usize,
        }
    }
}

/// A command that re-runs this binary's `child_entry` for `scenario`.
pub fn child_command(scenario: &str, env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"]);
    command.env("NODALLOC_TEST_CHILD", scenario);
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

/// Runs a child to completion within two minutes (a deadlock fails the test instead of hanging
/// it); returns (success, stderr).
pub fn run_bounded(mut command: Command) -> (bool, String) {
    let mut child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the test binary");
    let mut pipe = child.stderr.take().unwrap();
    // Read concurrently, so a chatty child never blocks on a full pipe.
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut pipe, &mut text).ok();
        text
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!(
                "child did not finish within 120 s (deadlock?):\n{}",
                reader.join().unwrap()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    (status.success(), reader.join().unwrap())
}

/// Runs a scenario in a child process with extra environment; returns (success, stderr).
pub fn run_child(scenario: &str, env: &[(&str, &str)]) -> (bool, String) {
    run_bounded(child_command(scenario, env))
}

/// Runs a scenario and fails unless it succeeds and reports `marker` on stderr.
#[allow(dead_code)]
pub fn expect_child(scenario: &str, env: &[(&str, &str)], marker: &str) -> String {
    let (ok, stderr) = run_child(scenario, env);
    assert!(ok, "scenario {scenario} failed:\n{stderr}");
    assert!(
        stderr.contains(marker),
        "scenario {scenario} did not report `{marker}`:\n{stderr}"
    );
    stderr
}

/// `ulimit -v BYTES` for the child `command` starts, not for the test process. The child fails
/// to start if the kernel refuses the limit.
#[allow(dead_code)]
pub fn limit_address_space(command: &mut Command, bytes: u64) {
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, move || {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Lets the calling thread (and the threads it starts) run on every CPU. A test thread was bound
/// to a node at its first allocation and its children would inherit that mask (nodalloc never
/// widens one); a program that wants its workers spread over every node does this.
#[allow(dead_code)]
pub fn use_every_cpu() {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it; setting our own affinity.
    unsafe {
        // Every CPU number: the kernel keeps those the process may use. (Counting them with
        // `available_parallelism` would read this thread's own, possibly narrowed, mask.)
        let mut all: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut all);
        }
        libc::sched_setaffinity(0, std::mem::size_of_val(&all), &all);
    }
}

/// A byte pattern derived from an address, so a misplaced or overlapping object shows.
#[allow(dead_code)]
pub fn pattern(address: usize, i: usize) -> u8 {
    ((address >> 4) as u8)
        .wrapping_mul(31)
        .wrapping_add(i as u8)
}

/// Fills `size` bytes at `p` with the pattern of `p`.
#[allow(dead_code)]
pub fn fill(p: *mut u8, size: usize) {
    for i in 0..size {
        // SAFETY: the caller owns `size` bytes at `p`.
        unsafe { *p.add(i) = pattern(p as usize, i) };
    }
}

/// Checks the `size` bytes [`fill`] wrote at `p`.
#[allow(dead_code)]
pub fn check(p: *const u8, size: usize) {
    check_moved(p, p as usize, size);
}

/// As [`check`], for contents filled at `filled_at` and moved to `p` (by `realloc`).
#[allow(dead_code)]
pub fn check_moved(p: *const u8, filled_at: usize, size: usize) {
    for i in 0..size {
        // SAFETY: the caller owns `size` bytes at `p`.
        let byte = unsafe { *p.add(i) };
        assert_eq!(
            byte,
            pattern(filled_at, i),
            "object {p:p} corrupted at byte {i} of {size}"
        );
    }
}

/// `threads` threads in a ring: each makes `ops` objects with `make` (which returns the
/// object's address and size, filled as [`fill`] does over its first 512 bytes), hands about
/// half to the next thread, which checks and frees them with `release`, keeps the rest (at most
/// 64 at a time, a random one freed beyond that) and frees what it kept at the end. Objects
/// still in flight when the workers are done are freed by the caller's thread.
#[allow(dead_code)]
pub fn hand_off_ring(
    threads: usize,
    ops: usize,
    make: fn(&mut Rng) -> (usize, usize),
    release: fn(usize, usize),
) {
    use std::sync::mpsc;
    let checked_release = move |p: usize, size: usize| {
        check(p as *const u8, size.min(512));
        release(p, size);
    };
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads)
        .map(|_| mpsc::channel::<(usize, usize)>())
        .unzip();
    let mut handles = Vec::new();
    for (t, receiver) in receivers.into_iter().enumerate() {
        let next = senders[(t + 1) % threads].clone();
        handles.push(std::thread::spawn(move || {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
            let mut live: Vec<(usize, usize)> = Vec::new();
            for _ in 0..ops {
                let object = make(&mut rng);
                if rng.next() % 2 == 0 {
                    next.send(object).unwrap();
                } else {
                    live.push(object);
                }
                if live.len() > 64 {
                    let (p, size) = live.swap_remove((rng.next() % 64) as usize);
                    checked_release(p, size);
                }
                while let Ok((p, size)) = receiver.try_recv() {
                    checked_release(p, size);
                }
            }
            drop(next);
            for (p, size) in live {
                checked_release(p, size);
            }
            receiver
        }));
    }
    drop(senders);
    // Every worker is done before any receiver is dropped: a slower one may still send.
    let receivers: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for receiver in receivers {
        while let Ok((p, size)) = receiver.try_recv() {
            checked_release(p, size);
        }
    }
}
