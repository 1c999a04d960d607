//! `program/redis`: a real server under load. `redis-server` runs with the
//! allocator under test in `LD_PRELOAD`, listening only on a unix socket in a
//! fresh temporary directory, while `redis-benchmark` (nothing preloaded)
//! sends it a bounded number of pipelined requests; then the server is shut
//! down. Per allocator: the client's wall time, requests/s per request type
//! (a table) and the server's peak RSS (`VmHWM`, read from `/proc` just
//! before the shutdown: the probe library is not needed for a process we
//! started ourselves and still hold).
//!
//! Debian's redis links `libjemalloc.so.2` dynamically (`redis-server
//! --version` says `malloc=jemalloc-5.3.0`, and `INFO memory` reports
//! `mem_allocator:jemalloc-5.3.0` whatever is preloaded: it is a compile-time
//! string). A preloaded library still wins: `malloc`, `free`, `calloc`,
//! `realloc` and `malloc_usable_size` bind to the first definition in the
//! lookup order, and preloads come before the program's own libraries. Only
//! jemalloc's extensions (`mallctl`, `nallocx`, `malloc_stats_print`) still
//! bind to libjemalloc, for the statistics of `INFO` and a shortcut in
//! `sdsResize` that skips a `realloc` which would not change the size. So
//! the `glibc` contender preloads glibc's own `libc.so.6`, or it would
//! measure jemalloc. Each run checks that the preloaded library is mapped
//! (`ld.so` only warns when it cannot preload one).
//!
//! Called by the `program` suite (`programs.rs`).

use super::c::{repeat_rotated, Sample};
use super::programs::find_in_path;
use super::Mode;
use crate::preload::{self, PreloadAlloc};
use crate::report::{median, Better, Record, Table};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// `redis-benchmark -t`: writes, reads, list pushes and pops (the list grows
/// to the test's request count and is emptied again), counters, hash fields.
const TESTS: [&str; 6] = ["set", "get", "lpush", "lpop", "incr", "hset"];
/// `-d`: bytes per value, a small web object or session record.
const VALUE_BYTES: u32 = 256;
/// `-c`: concurrent connections, more than the server's one event loop can
/// serve at once, so requests queue as they do in production.
const CLIENTS: u32 = 16;
/// `-P`: requests per round trip; without pipelining the socket round trip
/// hides the allocator.
const PIPELINE: u32 = 8;

/// Longest wait for the server to answer `PING` after it is started.
const START_LIMIT: Duration = Duration::from_secs(20);
/// Longest client run (quick mode takes about 3.5 s on 2 cores).
const CLIENT_LIMIT: Duration = Duration::from_secs(300);
/// Longest wait for the server to exit after `SHUTDOWN NOSAVE`.
const STOP_LIMIT: Duration = Duration::from_secs(20);

/// Requests per test; also `-r`, the key space, so `SET` and `HSET` keep
/// about 63 % of them as distinct live keys and fields (random draws with
/// replacement). Quick mode: about 3.5 s per client run on this 2-core VM.
fn requests_per_test(mode: Mode) -> u64 {
    match mode {
        Mode::Tiny => 500,
        Mode::Quick => 200_000,
        Mode::Full => 1_000_000,
    }
}

/// The server and client binaries, or why the case cannot run here.
pub fn redis_binaries() -> Result<(PathBuf, PathBuf), String> {
    let server = find_in_path("redis-server")
        .ok_or("redis-server not found in PATH (install the Debian package redis-server)")?;
    let client = find_in_path("redis-benchmark")
        .ok_or("redis-benchmark not found in PATH (install the Debian package redis-tools)")?;
    Ok((server, client))
}

/// `repeat` runs per allocator, allocators rotated: the records (client
/// wall time in ms, server peak RSS) and a table of requests/s per test.
pub fn run_redis(
    allocs: &[PreloadAlloc],
    mode: Mode,
    repeat: usize,
) -> Result<(Vec<Record>, Table), String> {
    let (server, client) = redis_binaries()?;
    let n = requests_per_test(mode);
    let total = n * TESTS.len() as u64;
    let mut records: Vec<Record> = allocs
        .iter()
        .map(|a| {
            let mut r = Record::new("program", "redis", "program/redis", &a.name, Better::Lower);
            r.unit = "ms".into();
            r.ops = total;
            r
        })
        .collect();
    // Per allocator and run: requests/s of each test, the server's RSS at the end.
    let mut rps: Vec<Vec<Vec<f64>>> = vec![Vec::new(); allocs.len()];
    let mut rss_end: Vec<Vec<f64>> = vec![Vec::new(); allocs.len()];
    repeat_rotated(&mut records, repeat, |i| {
        let run = run_once(&server, &client, &allocs[i], n)?;
        rps[i].push(run.rps);
        rss_end[i].push(run.rss_end_kib as f64);
        Ok(Sample {
            value: run.wall.as_secs_f64() * 1e3,
            ops: total,
            hwm_kib: Some(run.hwm_kib),
        })
    });
    let mut table = Table {
        title: "redis under load".into(),
        note: format!(
            "`redis-benchmark -n {n} -r {n} -t {} -d {VALUE_BYTES} -c {CLIENTS} -P {PIPELINE}` \
             over a unix socket, server under `LD_PRELOAD`, client not: requests/s per test \
             as the client reports them, all = every request / the client's wall time, and \
             the server's RSS after the last test (medians of the runs).",
            TESTS.join(",")
        ),
        header: vec!["allocator".into()],
        rows: Vec::new(),
    };
    table.header.extend(TESTS.iter().map(|t| t.to_uppercase()));
    table.header.extend(["all".into(), "RSS at end".into()]);
    for (i, r) in records.iter().enumerate() {
        let mut row = vec![name_cell(r)];
        for t in 0..TESTS.len() {
            let per_run: Vec<f64> = rps[i].iter().map(|v| v[t]).collect();
            row.push(median(&per_run).map_or("–".into(), |v| format!("{v:.0}")));
        }
        row.push(r.median().map_or("–".into(), |ms| {
            format!("{:.0}", total as f64 / (ms / 1e3))
        }));
        row.push(median(&rss_end[i]).map_or("–".into(), |k| format!("{:.1} MiB", k / 1024.0)));
        table.rows.push(row);
    }
    Ok((records, table))
}

/// The allocator's name, with the failure when it failed.
fn name_cell(r: &Record) -> String {
    match &r.failure {
        Some(e) => format!("{} (failed: {e})", r.allocator),
        None => r.allocator.clone(),
    }
}

/// What one server run measured.
struct RedisRun {
    wall: Duration,
    /// Requests/s per test, in `TESTS` order.
    rps: Vec<f64>,
    hwm_kib: u64,
    rss_end_kib: u64,
}

/// A started `redis-server` and its directory; dropping it kills the server
/// if it still runs and removes the directory, so no failure leaks either.
struct Server {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    /// The last line of the server's log or stderr, for an error message.
    fn last_words(&self) -> String {
        // stderr first: it has what ld.so and the allocator say.
        ["stderr", "redis.log"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(self.dir.join(f)).ok())
            .filter_map(|s| {
                let line = s.lines().rev().find(|l| !l.trim().is_empty())?;
                Some(line.trim().to_string())
            })
            .next()
            .unwrap_or_else(|| "no message".into())
    }

    /// An error that the server is gone, with its exit status and last words.
    fn exited(&mut self, when: &str) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(st)) => Some(format!(
                "redis-server exited {when} ({st}): {}",
                self.last_words()
            )),
            Ok(None) => None,
            Err(e) => Some(format!("redis-server: wait: {e}")),
        }
    }
}

/// The library that provides `malloc` for `alloc`: its own, or glibc's
/// (preloaded too, since redis may link its own allocator).
fn malloc_library(alloc: &PreloadAlloc) -> Result<PathBuf, String> {
    match &alloc.lib {
        Some(lib) => Ok(lib.clone()),
        None => preload::find_lib("libc.so.6")
            .ok_or_else(|| "libc.so.6 not found in the usual library directories".into()),
    }
}

fn start_server(server: &Path, alloc: &PreloadAlloc) -> Result<Server, String> {
    // Unique per run (tests may run several at once); in the temporary
    // directory because a socket path must fit in 108 bytes.
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "nodalloc-redis-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let socket = dir.join("redis.sock");
    if socket.as_os_str().len() > 100 {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(format!("socket path too long: {}", socket.display()));
    }
    let lib = malloc_library(alloc)?;
    let stderr = std::fs::File::create(dir.join("stderr")).map_err(|e| format!("stderr: {e}"))?;
    let mut cmd = Command::new(server);
    cmd.args(["--port", "0", "--unixsocket"])
        .arg(&socket)
        .args([
            "--unixsocketperm",
            "700",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--daemonize", "no", "--loglevel", "warning", "--dir"])
        .arg(&dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .env("LD_PRELOAD", &lib)
        .envs(alloc.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    let child = cmd
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", server.display()))?;
    let mut s = Server { child, dir, socket };
    let start = Instant::now();
    loop {
        if let Some(e) = s.exited("at start") {
            return Err(e);
        }
        if matches!(command(&s.socket, "PING"), Ok(r) if r.starts_with("+PONG")) {
            break;
        }
        if start.elapsed() > START_LIMIT {
            return Err(format!(
                "redis-server did not answer within {START_LIMIT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    check_preloaded(s.child.id(), &lib)?;
    Ok(s)
}

/// Fails unless `lib` is mapped into process `pid`: `ld.so` only warns
/// ("cannot be preloaded: ignored") and runs the program without it.
fn check_preloaded(pid: u32, lib: &Path) -> Result<(), String> {
    let want = std::fs::canonicalize(lib).map_err(|e| format!("{}: {e}", lib.display()))?;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| format!("/proc/{pid}/maps: {e}"))?;
    let mapped = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .any(|p| std::fs::canonicalize(p).is_ok_and(|p| p == want));
    if mapped {
        Ok(())
    } else {
        Err(format!("{} is not mapped into redis-server", lib.display()))
    }
}

/// Sends one inline command and returns the first chunk of the reply.
fn command(socket: &Path, cmd: &str) -> std::io::Result<String> {
    let mut s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(format!("{cmd}\r\n").as_bytes())?;
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// `VmHWM` and `VmRSS` of process `pid`, in KiB.
fn memory_kib(pid: u32) -> Result<(u64, u64), String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    let field = |key: &str| -> Result<u64, String> {
        status
            .lines()
            .find_map(|l| {
                l.strip_prefix(key)?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse()
                    .ok()
            })
            .ok_or_else(|| format!("/proc/{pid}/status has no {key}"))
    };
    Ok((field("VmHWM:")?, field("VmRSS:")?))
}

/// Requests/s per test, in `TESTS` order, from `redis-benchmark --csv`
/// (`"SET","250000.00",...` after a header line).
pub fn parse_rps(csv: &str) -> Result<Vec<f64>, String> {
    let rows: Vec<(String, f64)> = csv
        .lines()
        .filter_map(|l| {
            let mut f = l.split(',').map(|x| x.trim().trim_matches('"'));
            let name = f.next()?.to_lowercase();
            let rps = f.next()?.parse().ok()?;
            Some((name, rps))
        })
        .collect();
    TESTS
        .iter()
        .map(|t| {
            rows.iter()
                .find(|(name, _)| name == t)
                .map(|&(_, v)| v)
                .ok_or_else(|| format!("redis-benchmark printed no {t} result"))
        })
        .collect()
}

/// One server under one allocator, one client run against it.
fn run_once(
    server: &Path,
    client: &Path,
    alloc: &PreloadAlloc,
    n: u64,
) -> Result<RedisRun, String> {
    let mut s = start_server(server, alloc)?;
    let mut bench = Command::new(client);
    bench
        .arg("-s")
        .arg(&s.socket)
        .args(["-n", &n.to_string(), "-r", &n.to_string()])
        .args(["-t", &TESTS.join(","), "-d", &VALUE_BYTES.to_string()])
        .args(["-c", &CLIENTS.to_string(), "-P", &PIPELINE.to_string()])
        .arg("--csv");
    // Nothing preloaded into the client: only the server is measured.
    let none = PreloadAlloc {
        name: format!("redis-benchmark-{}", alloc.name),
        lib: None,
        env: Vec::new(),
    };
    let run = preload::run_preloaded(bench, &none, None, &s.dir, CLIENT_LIMIT)
        .map_err(|e| format!("redis-benchmark: {e}"));
    if let Some(e) = s.exited("under load") {
        return Err(e);
    }
    let run = run?;
    let rps = parse_rps(&run.stdout)?;
    let pid = s.child.id();
    let (hwm_kib, rss_end_kib) = memory_kib(pid)?;
    // The reply never comes: the server closes the connection as it exits.
    let _ = command(&s.socket, "SHUTDOWN NOSAVE");
    let start = Instant::now();
    let status = loop {
        match s.child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if start.elapsed() > STOP_LIMIT => {
                return Err(format!("redis-server did not stop within {STOP_LIMIT:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("redis-server: wait: {e}")),
        }
    };
    if !status.success() {
        return Err(format!(
            "redis-server exited at shutdown ({status}): {}",
            s.last_words()
        ));
    }
    Ok(RedisRun {
        wall: run.wall,
        rps,
        hwm_kib,
        rss_end_kib,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn benchmark_csv_gives_every_test_in_order() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\"\n\
                   \"SET\",\"250000.00\",\"0.3\"\n\"GET\",\"276243.09\",\"0.3\"\n\
                   \"INCR\",\"3.5\",\"0.3\"\n\"LPUSH\",\"4\",\"0.3\"\n\
                   \"LPOP\",\"5\",\"0.3\"\n\"HSET\",\"6\",\"0.3\"\n";
        assert_eq!(
            parse_rps(csv).unwrap(),
            vec![250000.0, 276243.09, 4.0, 5.0, 3.5, 6.0]
        );
        assert!(parse_rps("\"SET\",\"1\"\n").is_err());
    }

    /// Runs only where redis is installed (`scripts/setup.sh` installs it).
    #[test]
    fn redis_serves_its_load_under_glibc() {
        if redis_binaries().is_err() {
            eprintln!("redis-server not installed: skipped");
            return;
        }
        let glibc = PreloadAlloc {
            name: "glibc".into(),
            lib: None,
            env: Vec::new(),
        };
        let (records, table) = run_redis(&[glibc], Mode::Tiny, 1).unwrap();
        assert_eq!(records[0].failure, None);
        assert_eq!(records[0].samples.len(), 1);
        assert!(records[0].peak_rss_kib.unwrap_or(0) > 0);
        assert_eq!(table.rows.len(), 1);
    }
}
