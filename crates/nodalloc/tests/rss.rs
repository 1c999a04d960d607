//! Memory goes back to the OS: after a large fragmented heap is freed, committed memory falls
//! within the decommit delay; waves of short-lived threads keep RSS flat.
//!
//! Each scenario runs in a child process of this binary (`NODALLOC_TEST_CHILD`), alone, so RSS
//! is not disturbed by other tests and options can be set.

use nodalloc::NodAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::time::Duration;

#[global_allocator]
static GLOBAL: NodAlloc = NodAlloc::new();

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let resident: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    resident * 4096
}

#[test]
fn child_entry() {
    match std::env::var("NODALLOC_TEST_CHILD").as_deref() {
        Ok("fragmented") => fragmented_heap_is_returned(),
        Ok("thread-waves") => thread_waves_keep_rss_flat(),
        Ok(other) => panic!("unknown scenario {other}"),
        Err(_) => {}
    }
}

mod common;
use common::{expect_child, Rng};

fn fragmented_heap_is_returned() {
    const TOTAL: usize = 256 << 20;
    let mut rng = Rng(0xDEADBEEF);
    let mut objects = Vec::with_capacity(TOTAL / 1024);
    let mut bytes = 0;
    while bytes < TOTAL {
        let size = 16 + (rng.next() % 4080) as usize;
        let layout = Layout::from_size_align(size, 8).unwrap();
        // SAFETY: a valid layout.
        let p = unsafe { GLOBAL.alloc(layout) };
        // SAFETY: touch the whole object so its pages are resident.
        unsafe { p.write_bytes(0xA5, size) };
        objects.push((p, layout));
        bytes += size;
    }
    let peak = nodalloc::stats().committed;
    let peak_rss = rss_bytes();
    // Free in random order, keeping one object in a thousand to fragment the heap.
    for i in (1..objects.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        objects.swap(i, j);
    }
    let kept: Vec<_> = objects.iter().step_by(1000).copied().collect();
    for (i, &(p, layout)) in objects.iter().enumerate() {
        if i % 1000 != 0 {
            // SAFETY: allocated above with this layout, freed once.
            unsafe { GLOBAL.dealloc(p, layout) };
        }
    }
    drop(objects);
    // The program goes on at a low rate (a large and a small allocation per 60 ms, past the
    // 50 ms delay): its own allocator activity returns what has fallen due. Idle caches need a
    // tick to be seen idle, a tick to go back to their bags, and a delay to be decommitted.
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(60));
        for size in [1 << 20, 64] {
            let layout = Layout::from_size_align(size, 8).unwrap();
            // SAFETY: a valid layout; freed at once.
            unsafe { GLOBAL.dealloc(GLOBAL.alloc(layout), layout) };
        }
    }
    let after = nodalloc::stats().committed;
    let after_rss = rss_bytes();
    eprintln!("fragmented: committed {peak} -> {after}, rss {peak_rss} -> {after_rss}");
    assert!(peak >= TOTAL);
    assert!(
        after < peak / 8,
        "committed fell only from {peak} to {after}"
    );
    assert!(
        after_rss < peak_rss / 4,
        "RSS fell only from {peak_rss} to {after_rss}"
    );
    for (p, layout) in kept {
        // SAFETY: the kept objects are still live.
        unsafe { GLOBAL.dealloc(p, layout) };
    }
}

/// `threads` short-lived threads, four at a time: each allocates objects of a few sizes (two
/// of 300 KiB, large objects, among them), frees half at once and returns the rest to the
/// creator, which checks and frees them. The thread leaks nothing.
fn wave(threads: usize) {
    for _ in 0..threads / 4 {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut rng = Rng(0x1234 + t as u64);
                    let mut objects: Vec<Vec<u8>> = (0..24)
                        .map(|i| {
                            let len = match i % 6 {
                                0 => 24,
                                1 => 100,
                                2 => 1000,
                                3 => 16 + (rng.next() % 4000) as usize,
                                4 => 40_000,
                                _ => 300_000,
                            };
                            // Small blocks written in full; large ones at both ends (a
                            // full write of 120 GB over the run would dominate it).
                            let mut block = if len < 10_000 {
                                vec![i as u8; len]
                            } else {
                                vec![0u8; len]
                            };
                            block[0] = i as u8;
                            block[len - 1] = i as u8;
                            block
                        })
                        .collect();
                    objects.retain(|o| o[0] % 2 == 0);
                    objects
                })
            })
            .collect();
        for handle in handles {
            let objects = handle.join().unwrap();
            assert_eq!(objects.len(), 12);
            for o in &objects {
                assert_eq!(o[o.len() - 1], o[0], "a block lost its contents");
                if o.len() < 10_000 {
                    assert!(o.iter().all(|&b| b == o[0]), "a block lost its contents");
                }
            }
        }
    }
}

/// Threads after the warm-up: 100 000 in the release pass (about 10 s); a debug build takes
/// three times as long per thread, so it runs 10 000.
const SHORT_THREADS: usize = if cfg!(debug_assertions) {
    10_000
} else {
    100_000
};

fn thread_waves_keep_rss_flat() {
    wave(1000);
    let after_warm_up = rss_bytes();
    let mut peak = after_warm_up;
    for _ in 0..SHORT_THREADS / 1000 {
        wave(1000);
        peak = peak.max(rss_bytes());
    }
    let at_end = rss_bytes();
    eprintln!(
        "thread waves: rss after 1000 threads {} KiB, peak {} KiB, after {} threads {} KiB",
        after_warm_up >> 10,
        peak >> 10,
        1000 + SHORT_THREADS,
        at_end >> 10
    );
    assert!(
        peak <= 2 * after_warm_up,
        "RSS grew from {after_warm_up} to {peak}"
    );
    let stats = nodalloc::stats();
    assert!(
        stats.threads <= 8,
        "{} thread heaps still live",
        stats.threads
    );
}

#[test]
fn freed_fragmented_heap_is_decommitted_after_the_delay() {
    expect_child(
        "fragmented",
        &[("NODALLOC_DECOMMIT_DELAY", "50")],
        "fragmented: committed",
    );
}

#[test]
fn a_hundred_thousand_short_threads_keep_rss_flat() {
    let stderr = expect_child("thread-waves", &[], "thread waves:");
    eprintln!("{}", stderr.trim());
}
