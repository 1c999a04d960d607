//! `http SIZE REQUESTS CONNECTIONS`: an axum server on loopback and a
//! self-contained HTTP/1.1 keep-alive client in one process, every allocation
//! of both going through the allocator named by `NODALLOC_BENCH_ALLOCATOR`
//! (one of the showdown's Rust contenders; default `system`). Run by the
//! showdown's `http` suite (`src/suites/http.rs`), once per run.
//!
//! Each request gets a freshly built response body of SIZE bytes; the client
//! checks every body's length and content. Prints one line:
//! `result allocator=A size=S requests=N elapsed_ns=E rss_after_kib=R hwm_kib=H`
//! where `rss_after_kib` is the resident set after the load, with the server
//! still up (what the process keeps), and `hwm_kib` its peak.

use axum::body::Body;
use axum::extract::Path;
use axum::routing::get;
use axum::Router;
use nodalloc_bench::allocators::{JEMALLOC, MIMALLOC, NODALLOC, NUMALLOC, SNMALLOC, SYSTEM};
use nodalloc_bench::Allocator;
use std::alloc::{GlobalAlloc, Layout};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

/// The process's allocator, chosen from the environment at the first call.
struct Switch;

/// 0: not chosen yet; otherwise 1 + index into `Allocator::ALL`.
static CHOICE: AtomicU8 = AtomicU8::new(0);

const ENV: &std::ffi::CStr = c"NODALLOC_BENCH_ALLOCATOR";

#[cold]
fn choose() -> u8 {
    // SAFETY: `getenv` with a NUL-terminated name; it does not allocate, and
    // the returned pointer (if not null) is a NUL-terminated string that stays
    // valid while the environment is not modified (nothing modifies it here).
    let value = unsafe { libc::getenv(ENV.as_ptr()) };
    let name: &[u8] = if value.is_null() {
        b"system"
    } else {
        // SAFETY: see above: a valid C string.
        unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes()
    };
    let index = Allocator::ALL
        .iter()
        .position(|a| a.is_available() && a.name().as_bytes() == name)
        .unwrap_or(1); // System
    let c = index as u8 + 1;
    // The first caller's choice wins; every later call sees the same value.
    match CHOICE.compare_exchange(0, c, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => c,
        Err(prev) => prev,
    }
}

#[inline(always)]
fn choice() -> u8 {
    match CHOICE.load(Ordering::Acquire) {
        0 => choose(),
        c => c,
    }
}

macro_rules! dispatch {
    (|$a:ident| $body:expr) => {
        match choice() {
            1 => {
                let $a = &NODALLOC;
                $body
            }
            3 => {
                let $a = &MIMALLOC;
                $body
            }
            4 => {
                let $a = &JEMALLOC;
                $body
            }
            5 => {
                let $a = &SNMALLOC;
                $body
            }
            6 => {
                let $a = &NUMALLOC;
                $body
            }
            _ => {
                let $a = &SYSTEM;
                $body
            }
        }
    };
}

// SAFETY: every call is forwarded to one allocator, the same one for the whole
// life of the process (CHOICE is set once, before the first allocation
// returns), so each block is freed or resized by the allocator that made it,
// with the caller's layout, as that allocator's GlobalAlloc contract requires.
unsafe impl GlobalAlloc for Switch {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees (non-zero size).
        dispatch!(|a| unsafe { a.alloc(layout) })
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        dispatch!(|a| unsafe { a.alloc_zeroed(layout) })
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from the chosen one.
        dispatch!(|a| unsafe { a.dealloc(ptr, layout) })
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`, plus the caller's guarantees on new_size.
        dispatch!(|a| unsafe { a.realloc(ptr, layout, new_size) })
    }
}

#[global_allocator]
static GLOBAL: Switch = Switch;

/// Every response body is this pattern, repeated and cut to size.
const PATTERN: &[u8; 64] = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ.\n";

async fn respond(Path(size): Path<usize>) -> Body {
    let size = size.min(16 << 20);
    let mut body = Vec::with_capacity(size);
    while body.len() < size {
        let n = (size - body.len()).min(PATTERN.len());
        body.extend_from_slice(&PATTERN[..n]);
    }
    Body::from(body)
}

/// Index of the first byte of `body` that is not the pattern.
fn bad_byte(body: &[u8]) -> Option<usize> {
    body.chunks(PATTERN.len())
        .position(|c| c != &PATTERN[..c.len()])
        .map(|chunk| chunk * PATTERN.len())
}

fn status_kib(key: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()
}

/// One keep-alive connection doing `n` requests; checks every body.
fn client(port: u16, size: usize, n: u64) -> Result<(), String> {
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let request = format!("GET /{size} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let mut line = String::new();
    let mut body = vec![0u8; size];
    for i in 0..n {
        writer
            .write_all(request.as_bytes())
            .map_err(|e| e.to_string())?;
        let mut length = None;
        loop {
            line.clear();
            if reader.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err(format!("connection closed at request {i}"));
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse::<usize>().ok();
                }
            }
        }
        if length != Some(size) {
            return Err(format!(
                "request {i}: content-length {length:?}, want {size}"
            ));
        }
        reader.read_exact(&mut body).map_err(|e| e.to_string())?;
        if let Some(j) = bad_byte(&body) {
            return Err(format!("request {i}: body is wrong from byte {j}"));
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let parse = |i: usize| args.get(i).and_then(|s| s.parse::<u64>().ok());
    let (Some(size), Some(requests), Some(conns)) = (parse(1), parse(2), parse(3)) else {
        eprintln!("usage: http SIZE REQUESTS CONNECTIONS");
        return ExitCode::from(2);
    };
    let conns = conns.max(1);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("http: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("http: bind: {e}");
            return ExitCode::FAILURE;
        }
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    let app = Router::new().route("/:size", get(respond));
    runtime.spawn(async move { axum::serve(listener, app).await });

    let start = Instant::now();
    let per_conn = requests.div_ceil(conns);
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..conns)
            .map(|_| s.spawn(move || client(port, size as usize, per_conn)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("client panicked".into())))
            .collect()
    });
    let elapsed = start.elapsed();
    if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
        eprintln!("http: client: {e}");
        return ExitCode::FAILURE;
    }
    let allocator = Allocator::ALL[choice() as usize - 1];
    println!(
        "result allocator={allocator} size={size} requests={} elapsed_ns={} rss_after_kib={} \
         hwm_kib={}",
        per_conn * conns,
        elapsed.as_nanos(),
        status_kib("VmRSS:").unwrap_or(0),
        status_kib("VmHWM:").unwrap_or(0),
    );
    // Exit without tearing the runtime down: its worker threads may be parked
    // in the server loop.
    std::process::exit(0)
}
