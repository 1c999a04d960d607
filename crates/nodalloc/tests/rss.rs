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
        Ok(pattern) if pattern.starts_with("sparse-") => sparse_pattern(&pattern[7..]),
        Ok("dense") => dense_small_objects(),
        Ok("holes") => holes(),
        Ok("untouched") => big_objects_come_untouched(),
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

include!("common/sparse_bounds.rs");

/// Allocates through the crate, runs one sparse pattern (see `SPARSE_BOUNDS_KIB`) and checks
/// its RSS growth.
fn sparse_pattern(pattern: &str) {
    let alloc = |size: usize, align: usize| {
        let layout = Layout::from_size_align(size, align).unwrap();
        // SAFETY: a valid non-zero layout.
        let p = unsafe { GLOBAL.alloc(layout) };
        assert!(!p.is_null(), "{layout:?}");
        (p, layout)
    };
    // Start the allocator before the first measurement.
    let warm = alloc(64, 8);
    let before = rss_bytes();
    let mut blocks = Vec::with_capacity(4096);
    match pattern {
        // One 512 MiB block, one byte written per MiB.
        "buffer" => {
            let (p, layout) = alloc(512 << 20, 8);
            for offset in (0..layout.size()).step_by(1 << 20) {
                // SAFETY: inside the block.
                unsafe { p.add(offset).write(1) };
            }
            blocks.push((p, layout));
        }
        // 4096 blocks of 100 000 B, the first 64 bytes of each written.
        "heads" => {
            for i in 0..4096 {
                let (p, layout) = alloc(100_000, 8);
                // SAFETY: the block holds 100 000 bytes.
                unsafe { p.write_bytes(i as u8, 64) };
                blocks.push((p, layout));
            }
        }
        // 256 blocks of 4 KiB at 2 MiB alignment, each written whole.
        "aligned" => {
            for i in 0..256 {
                let (p, layout) = alloc(4096, 2 << 20);
                assert_eq!(p as usize % (2 << 20), 0);
                // SAFETY: the block holds 4096 bytes.
                unsafe { p.write_bytes(i as u8, 4096) };
                blocks.push((p, layout));
            }
        }
        // One 128 MiB table, 2000 random 8-byte slots written.
        "table" => {
            let (p, layout) = alloc(128 << 20, 8);
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
            for _ in 0..2000 {
                let slot = (rng.next() as usize) % (layout.size() / 8);
                // SAFETY: inside the table, 8-aligned.
                unsafe { (p as *mut u64).add(slot).write(slot as u64) };
            }
            blocks.push((p, layout));
        }
        // 4096 zeroed blocks of 100 000 B (`alloc_zeroed`), the first 64 bytes of each written.
        "calloc" => {
            for i in 0..4096 {
                let layout = Layout::from_size_align(100_000, 8).unwrap();
                // SAFETY: a valid non-zero layout.
                let p = unsafe { GLOBAL.alloc_zeroed(layout) };
                assert!(!p.is_null());
                // SAFETY: the block holds 100 000 bytes.
                unsafe { p.write_bytes(i as u8, 64) };
                blocks.push((p, layout));
            }
        }
        other => panic!("unknown pattern {other}"),
    }
    let growth_kib = (rss_bytes().saturating_sub(before) >> 10) as u64;
    let bound = SPARSE_BOUNDS_KIB
        .iter()
        .find(|(name, _)| *name == pattern)
        .unwrap()
        .1;
    eprintln!("sparse {pattern}: rss growth {growth_kib} KiB (bound {bound} KiB)");
    assert!(
        growth_kib <= bound,
        "{pattern}: RSS grew by {growth_kib} KiB, bound {bound} KiB"
    );
    if pattern == "calloc" {
        // Zero past the written head; then reused blocks must read zero too.
        for &(p, layout) in &blocks {
            // SAFETY: the block holds `layout.size()` bytes.
            let bytes = unsafe { std::slice::from_raw_parts(p, layout.size()) };
            assert!(
                bytes[64..].iter().all(|&b| b == 0),
                "a zeroed block is not zero"
            );
            // SAFETY: as above; then freed once.
            unsafe {
                p.write_bytes(0xA5, layout.size());
                GLOBAL.dealloc(p, layout);
            }
        }
        for (p, layout) in blocks.iter_mut() {
            // SAFETY: a valid non-zero layout.
            *p = unsafe { GLOBAL.alloc_zeroed(*layout) };
            // SAFETY: the block holds `layout.size()` bytes.
            let bytes = unsafe { std::slice::from_raw_parts(*p, layout.size()) };
            assert!(
                bytes.iter().all(|&b| b == 0),
                "a reused zeroed block is not zero"
            );
        }
    }
    for (p, layout) in blocks.into_iter().chain([warm]) {
        // SAFETY: allocated above with this layout.
        unsafe { GLOBAL.dealloc(p, layout) };
    }
}

/// AnonHugePages of this process, in KiB (`None` without /proc/self/smaps_rollup).
fn huge_kib() -> Option<usize> {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = rollup.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// 256 MiB of 64-byte objects, every byte written: the bags sit on huge pages.
fn dense_small_objects() {
    const SIZE: usize = 64;
    const COUNT: usize = (256 << 20) / SIZE;
    let layout = Layout::from_size_align(SIZE, 8).unwrap();
    let mut objects: Vec<*mut u8> = Vec::with_capacity(COUNT);
    let before = rss_bytes();
    let huge_before = huge_kib().unwrap_or(0);
    for i in 0..COUNT {
        // SAFETY: a valid layout.
        let p = unsafe { GLOBAL.alloc(layout) };
        assert!(!p.is_null());
        // SAFETY: the object holds SIZE bytes.
        unsafe { p.write_bytes(i as u8, SIZE) };
        objects.push(p);
    }
    let objects_kib = (rss_bytes() - before) >> 10;
    let huge = huge_kib().unwrap_or(0) - huge_before;
    eprintln!("dense: rss growth {objects_kib} KiB, of it on huge pages {huge} KiB");
    // The pointer array (2 MiB per 256 KiB of objects) is a large block on base pages.
    let small_kib = objects_kib - ((COUNT * 8) >> 10);
    assert!(
        huge * 10 >= small_kib * 9,
        "only {huge} of {small_kib} KiB of small objects on huge pages"
    );
    // The statistics see the same: the node's bags of small objects sit on huge pages.
    let stats = nodalloc::stats();
    let node = stats.nodes()[0];
    eprintln!(
        "dense: stats say huge pages {} KiB, {}% of {} KiB of bags",
        node.huge_pages >> 10,
        node.huge_page_percent(),
        node.dense_bags >> 10
    );
    assert!(node.huge_page_percent() >= 90, "{node:?}");
    for p in objects {
        // SAFETY: allocated above with this layout.
        unsafe { GLOBAL.dealloc(p, layout) };
    }
}

/// Objects of 16 KiB from fresh bags: an allocation writes nothing into them (no link, no
/// page faulted in inside `alloc`), so their first pages are not resident until the program
/// touches them; then they are, and everything frees.
fn big_objects_come_untouched() {
    const COUNT: usize = 64;
    let layout = Layout::from_size_align(16 << 10, 8).unwrap();
    let objects: Vec<*mut u8> = (0..COUNT)
        // SAFETY: a valid layout.
        .map(|_| unsafe { GLOBAL.alloc(layout) })
        .collect();
    let resident = |objects: &[*mut u8]| {
        objects
            .iter()
            .filter(|&&p| {
                let mut vector = 0u8;
                // SAFETY: mincore of the page of a live allocation into one byte.
                let ok = unsafe { libc::mincore((p as usize & !4095) as *mut _, 1, &mut vector) };
                assert_eq!(ok, 0, "mincore");
                vector & 1 != 0
            })
            .count()
    };
    let before = resident(&objects);
    for &p in &objects {
        assert!(!p.is_null() && p as usize % 4096 == 0, "{p:?}");
        // SAFETY: the object is ours, 16 KiB long.
        unsafe { p.write_bytes(0x5A, layout.size()) };
    }
    let after = resident(&objects);
    eprintln!(
        "untouched {before} of {COUNT} first pages resident after alloc, {after} after the writes"
    );
    assert_eq!((before, after), (0, COUNT));
    for p in objects {
        // SAFETY: allocated above with this layout.
        unsafe { GLOBAL.dealloc(p, layout) };
    }
}

#[test]
fn big_objects_are_handed_out_untouched() {
    let stderr = expect_child("untouched", &[], "untouched ");
    eprintln!("{}", stderr.trim());
}

#[test]
fn sparse_patterns_cost_the_pages_they_touch() {
    for (pattern, _) in SPARSE_BOUNDS_KIB {
        let stderr = expect_child(&format!("sparse-{pattern}"), &[], "sparse ");
        eprintln!("{}", stderr.trim());
    }
}

/// Blocks of 1-64 KiB written whole, 90 % freed at random, then at most two idle seconds
/// (allocating a little; the sweep waits for bags a second quiet): only the survivors' pages
/// may stay (`holes_bound_kib`).
fn holes() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut blocks = Vec::with_capacity(8192);
    let before = rss_bytes();
    for i in 0..8192 {
        let size = 1024 + (rng.next() % (63 * 1024 + 1)) as usize;
        let layout = Layout::from_size_align(size, 8).unwrap();
        // SAFETY: a valid non-zero layout.
        let p = unsafe { GLOBAL.alloc(layout) };
        assert!(!p.is_null());
        // SAFETY: the block holds `size` bytes.
        unsafe { p.write_bytes(i as u8, size) };
        blocks.push((p, layout, i as u8));
    }
    let mut live = 0;
    blocks.retain(|&(p, layout, _)| {
        if rng.next() % 10 != 0 {
            // SAFETY: allocated above with this layout, freed once.
            unsafe { GLOBAL.dealloc(p, layout) };
            false
        } else {
            live += layout.size();
            true
        }
    });
    let live_kib = (live >> 10) as u64;
    let kept_kib = || (rss_bytes().saturating_sub(before) >> 10) as u64;
    let mut idle_ms = 0;
    while idle_ms < 2000 && kept_kib() > holes_bound_kib(live_kib) {
        std::thread::sleep(Duration::from_millis(50));
        idle_ms += 50;
        for size in [1 << 20, 64] {
            let layout = Layout::from_size_align(size, 8).unwrap();
            // SAFETY: a valid layout; freed at once.
            unsafe { GLOBAL.dealloc(GLOBAL.alloc(layout), layout) };
        }
    }
    let kept_kib = kept_kib();
    let released = nodalloc::stats().released_in_bags;
    eprintln!(
        "holes: {kept_kib} KiB kept for {live_kib} KiB live after {idle_ms} ms idle, \
         {released} bytes released in bags"
    );
    assert!(
        kept_kib <= holes_bound_kib(live_kib),
        "{kept_kib} KiB kept for {live_kib} KiB live"
    );
    for (p, layout, byte) in blocks {
        // SAFETY: a live block of `layout.size()` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(p, layout.size()) };
        assert!(bytes.iter().all(|&b| b == byte), "a survivor lost data");
        // SAFETY: allocated above with this layout.
        unsafe { GLOBAL.dealloc(p, layout) };
    }
}

#[test]
fn a_heap_freed_at_random_keeps_only_the_survivors_pages() {
    let stderr = expect_child("holes", &[], "holes: ");
    eprintln!("{}", stderr.trim());
}

#[test]
fn dense_small_objects_sit_on_huge_pages() {
    if nodalloc_testkit::skipped_without_thp() {
        return;
    }
    let stderr = expect_child("dense", &[], "dense: ");
    eprintln!("{}", stderr.trim());
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
