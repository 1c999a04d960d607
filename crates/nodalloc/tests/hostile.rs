//! nodalloc as the global allocator under hostile conditions: a 256 MiB address space, and
//! allocation from destructors that run after nodalloc has flushed and retired the thread's heap.
//!
//! Each scenario runs in a child process of this binary (`NODALLOC_TEST_CHILD`), so that a
//! resource limit applies to it alone and thread counts are not disturbed by other tests.
//! The C face's versions are in `nodalloc-ffi/tests/c_abi/` (`exit.c`, `rlimit.c`).

use nodalloc::NodAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[global_allocator]
static GLOBAL: NodAlloc = NodAlloc::new();

mod common;
use common::{child_command, expect_child, limit_address_space, run_bounded, Rng};

/// A byte pattern derived from a seed and an index, so a misplaced or overlapping block shows.
fn pattern(seed: usize, i: usize) -> u8 {
    (seed.wrapping_mul(131) ^ i.wrapping_mul(7) ^ (i >> 8)) as u8
}

fn filled(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| pattern(seed, i)).collect()
}

fn check(bytes: &[u8], seed: usize) {
    for (i, &byte) in bytes.iter().enumerate() {
        assert_eq!(
            byte,
            pattern(seed, i),
            "block of {} B (seed {seed}) differs at byte {i}",
            bytes.len()
        );
    }
}

/// Allocates, grows, checks and frees a block of every size range through std's collections.
fn churn(seed: usize) {
    for (k, len) in [1usize, 24, 100, 1000, 5000, 70_000, 300_000, 2 << 20]
        .into_iter()
        .enumerate()
    {
        let mut block = filled(seed + k, len);
        block.reserve(len * 2);
        check(&block, seed + k);
        block.truncate(len / 2 + 1);
        block.shrink_to_fit();
        check(&block, seed + k);
        let text = format!("{seed}-{k}-{len}");
        assert!(text.ends_with(&len.to_string()));
    }
}

#[test]
fn child_entry() {
    match std::env::var("NODALLOC_TEST_CHILD").as_deref() {
        Ok("address-space-256m") => address_space_256m(),
        Ok("late-destructors") => late_destructors(),
        Ok(other) => panic!("unknown scenario {other}"),
        Err(_) => {}
    }
}

// ---- RLIMIT_AS = 256 MiB ------------------------------------------------------------------

/// Four threads churn every size range with 16 MiB live each (64 MiB in all, 256 MiB allocated
/// over the run), checking contents; a request larger than the address space returns null;
/// serving goes on after it (8 MiB blocks and every size range).
fn address_space_256m() {
    // SAFETY: getrlimit writes the struct we pass.
    let limit = unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        assert_eq!(libc::getrlimit(libc::RLIMIT_AS, &mut limit), 0);
        limit.rlim_cur
    };
    assert_eq!(limit, 256 << 20, "run under RLIMIT_AS = 256 MiB");
    const LIVE: usize = 16 << 20;
    const TOTAL: usize = 64 << 20;
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rng = Rng(0xABCD_1234 ^ (t + 1));
                // Blocks never outgrow this: the bookkeeping does not allocate while churning.
                let mut live: std::collections::VecDeque<(usize, Layout, usize)> =
                    std::collections::VecDeque::with_capacity(8192);
                let (mut live_bytes, mut total) = (0usize, 0usize);
                let mut seed = (t as usize) << 40;
                while total < TOTAL {
                    let size = rng.size();
                    let layout = Layout::from_size_align(size, 8).unwrap();
                    // SAFETY: a valid layout.
                    let p = unsafe { GLOBAL.alloc(layout) };
                    assert!(
                        !p.is_null(),
                        "alloc of {size} B failed under RLIMIT_AS=256M"
                    );
                    let checked = size.min(512);
                    for i in 0..checked {
                        // SAFETY: we own `size` bytes at `p`.
                        unsafe { *p.add(i) = pattern(seed, i) };
                    }
                    live.push_back((p as usize, layout, seed));
                    seed += 1;
                    live_bytes += size;
                    total += size;
                    while live_bytes > LIVE || live.len() == live.capacity() {
                        let (p, layout, seed) = live.pop_front().unwrap();
                        let checked = layout.size().min(512);
                        // SAFETY: a live block of at least `checked` bytes.
                        check(
                            unsafe { std::slice::from_raw_parts(p as *const u8, checked) },
                            seed,
                        );
                        // SAFETY: allocated above with this layout.
                        unsafe { GLOBAL.dealloc(p as *mut u8, layout) };
                        live_bytes -= layout.size();
                    }
                }
                for (p, layout, _) in live {
                    // SAFETY: allocated above with this layout.
                    unsafe { GLOBAL.dealloc(p as *mut u8, layout) };
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    for size in [300usize << 20, 512 << 20, 1 << 30] {
        let layout = Layout::from_size_align(size, 4096).unwrap();
        // SAFETY: a valid layout the address space cannot hold.
        let p = unsafe { GLOBAL.alloc(layout) };
        assert!(p.is_null(), "{size} B granted in a 256 MiB address space");
    }
    // Serving goes on. (A 32 MiB block, a quarter of the heap, does not always find a hole
    // this soon after the churn: bags still cached fragment a 128 MiB region.)
    let after = filled(3, 8 << 20);
    check(&after, 3);
    drop(after);
    churn(11);
    let stats = nodalloc::stats();
    eprintln!(
        "address space 256m ok: mapped {} MiB, peak committed {} MiB",
        stats.mapped >> 20,
        stats.peak_committed >> 20
    );
}

// ---- destructors after the thread-exit flush ----------------------------------------------

struct Late {
    round: usize,
    block: Vec<u8>,
    seed: usize,
}

static LATE_KEY: AtomicUsize = AtomicUsize::new(usize::MAX);
static ROUNDS_DONE: AtomicUsize = AtomicUsize::new(0);
static ROUNDS_AFTER_RETIREMENT: AtomicUsize = AtomicUsize::new(0);
static TLS_DROPS_DONE: AtomicUsize = AtomicUsize::new(0);
static THREADS_BEFORE: AtomicUsize = AtomicUsize::new(0);
/// Blocks allocated after the flush, checked and freed by the main thread.
static HANDED_OUT: Mutex<Vec<(Vec<u8>, usize)>> = Mutex::new(Vec::new());
const ROUNDS: usize = 3;

/// A pthread key destructor created after nodalloc's own exit key: it runs after nodalloc's
/// (and, from its second round, certainly after it: glibc calls only re-armed keys then).
extern "C" fn late_key_destructor(value: *mut libc::c_void) {
    // SAFETY: the value is a Box<Late> leaked by `arm`.
    let late = unsafe { Box::from_raw(value as *mut Late) };
    check(&late.block, late.seed);
    if late.round >= 2 {
        let live = nodalloc::stats().threads;
        assert!(
            live <= THREADS_BEFORE.load(Ordering::Relaxed),
            "round {}: nodalloc still counts the exiting thread ({live} live)",
            late.round
        );
        ROUNDS_AFTER_RETIREMENT.fetch_add(1, Ordering::Relaxed);
    }
    churn(late.seed * 10 + late.round);
    let mut grown = late.block;
    grown.resize(grown.len() + 100_000, 0);
    check(&grown[..grown.len() - 100_000], late.seed);
    drop(grown);
    // Memory allocated here outlives the thread: the main thread checks and frees it.
    let seed = late.seed * 100 + late.round;
    HANDED_OUT
        .lock()
        .unwrap()
        .push((filled(seed, 5000 + late.round * 40_000), seed));
    ROUNDS_DONE.fetch_add(1, Ordering::Relaxed);
    if late.round < ROUNDS {
        arm(late.round + 1, late.seed + 1);
    }
}

fn arm(round: usize, seed: usize) {
    let late = Box::new(Late {
        round,
        block: filled(seed, 1000 + round * 3000),
        seed,
    });
    let key = LATE_KEY.load(Ordering::Relaxed) as libc::pthread_key_t;
    // SAFETY: `key` is a live key; the destructor takes the box back.
    let set = unsafe { libc::pthread_setspecific(key, Box::into_raw(late) as *const libc::c_void) };
    assert_eq!(set, 0);
}

/// A thread_local! value whose Drop allocates. std runs these (through glibc's
/// `__cxa_thread_atexit_impl`) before any pthread key destructor, so before nodalloc's flush;
/// it hands a block to the late key destructor, which frees it after the flush.
struct DropAllocates {
    block: Vec<u8>,
    seed: usize,
}

impl Drop for DropAllocates {
    fn drop(&mut self) {
        check(&self.block, self.seed);
        churn(self.seed);
        let moved = std::mem::take(&mut self.block);
        check(&moved, self.seed);
        arm(1, self.seed);
        drop(moved);
        TLS_DROPS_DONE.fetch_add(1, Ordering::Relaxed);
    }
}

thread_local! {
    static DROP_ALLOCATES: RefCell<Option<DropAllocates>> = const { RefCell::new(None) };
}

fn late_destructors() {
    // The allocator and its exit key exist (this process has allocated); a key made now has a
    // higher index, so its destructor follows nodalloc's.
    let _first = Box::new(1u64);
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: writes a new key; the destructor is an extern "C" fn living for the process.
    let created = unsafe { libc::pthread_key_create(&mut key, Some(late_key_destructor)) };
    assert_eq!(created, 0);
    LATE_KEY.store(key as usize, Ordering::Relaxed);
    THREADS_BEFORE.store(nodalloc::stats().threads, Ordering::Relaxed);
    const THREADS: usize = 4;
    for t in 0..THREADS {
        std::thread::spawn(move || {
            let seed = 1000 * (t + 1);
            DROP_ALLOCATES.with(|slot| {
                *slot.borrow_mut() = Some(DropAllocates {
                    block: filled(seed, 20_000),
                    seed,
                })
            });
            churn(t);
        })
        .join()
        .unwrap();
    }
    assert_eq!(TLS_DROPS_DONE.load(Ordering::Relaxed), THREADS);
    assert_eq!(ROUNDS_DONE.load(Ordering::Relaxed), THREADS * ROUNDS);
    assert_eq!(
        ROUNDS_AFTER_RETIREMENT.load(Ordering::Relaxed),
        THREADS * (ROUNDS - 1)
    );
    let handed = std::mem::take(&mut *HANDED_OUT.lock().unwrap());
    assert_eq!(handed.len(), THREADS * ROUNDS);
    for (block, seed) in handed {
        check(&block, seed);
    }
    churn(99);
    eprintln!("late destructors ok");
}

#[test]
fn a_256_mib_address_space_serves_a_64_mib_live_workload_and_refuses_more() {
    let mut command = child_command("address-space-256m", &[]);
    // `ulimit -v 262144` in the child only.
    limit_address_space(&mut command, 256 << 20);
    let (ok, stderr) = run_bounded(command);
    assert!(ok, "child failed under RLIMIT_AS=256M:\n{stderr}");
    assert!(stderr.contains("address space 256m ok"), "{stderr}");
}

#[test]
fn thread_local_and_late_key_destructors_allocate_after_the_exit_flush() {
    expect_child("late-destructors", &[], "late destructors ok");
}
