//! Every workload, every allocator, tiny parameters: the self-checks must pass.
//! Plus proof that the checks can fail.

use nodalloc_bench::check::{fill, tag_for, verify, verify_or_panic, FULL_FILL_LIMIT, PAGE};
use nodalloc_bench::suites::rust::cases::{cases, SuiteConfig, GROUPS, SINGLE_SIZES};
use nodalloc_bench::suites::Mode;
use nodalloc_bench::workloads::{self, Ledger};
use nodalloc_bench::{with_allocator, Allocator};
use std::alloc::{GlobalAlloc, Layout, System};

fn tiny() -> SuiteConfig {
    SuiteConfig {
        mode: Mode::Tiny,
        threads: None,
    }
}

#[test]
fn every_case_runs_on_every_allocator() {
    let all = cases(&tiny());
    for g in GROUPS {
        assert!(all.iter().any(|c| c.group == g), "no case for group {g}");
    }
    for alloc in Allocator::available() {
        for case in &all {
            let r = case.run(alloc);
            assert!(r.ops > 0, "{alloc} {}: no work done", case.name);
            assert_eq!(r.ledger.allocs, r.ledger.frees, "{alloc} {}", case.name);
        }
    }
}

#[test]
fn ledgers_count_what_was_asked() {
    for alloc in Allocator::available() {
        with_allocator!(alloc, |a| {
            assert_eq!(workloads::single_size(a, 24, 7).allocs, 7);
            assert_eq!(workloads::bulk(a, 10, 64, 3).allocs, 30);
            assert_eq!(workloads::producer_consumer(a, 500).frees, 500);
            assert_eq!(workloads::mixed(a, 2, 300, 16).allocs, 600);
            assert_eq!(workloads::hoard_numa(a, 3, 200).frees, 600);
            let c = workloads::live_cliff(a, 1000);
            assert_eq!(c.ledger.allocs, 1000);
            assert!(c.first_ns > 0.0 && c.last_ns > 0.0);
            assert_eq!(c.ledger.peak_live_bytes, 64_000);
            // 1 B -> 64 KiB, then 3 more steps to 256 KiB.
            assert_eq!(
                workloads::realloc_growth(a, 256 << 10, 64 << 10).reallocs,
                4
            );
            assert_eq!(workloads::rss_payload(a, 520, 52_000).allocs, 100);
            // The peak hook runs once, with every object live.
            let mut at_peak = 0;
            let ledger = workloads::rss_payload_with_peak(a, 520, 52_000, || at_peak += 1);
            assert_eq!((at_peak, ledger.peak_live_bytes), (1, 52_000));
            assert!(
                workloads::anon_huge_kib().is_some(),
                "AnonHugePages unreadable"
            );
        });
    }
}

#[test]
fn single_size_covers_the_whole_sweep() {
    for alloc in Allocator::available() {
        with_allocator!(alloc, |a| {
            for size in SINGLE_SIZES {
                workloads::single_size(a, size, 3);
            }
        });
    }
}

#[test]
fn threads_with_more_threads_than_cores() {
    for alloc in Allocator::available() {
        with_allocator!(alloc, |a| {
            let l = workloads::threads(a, 8, 300);
            assert_eq!(l.allocs, l.frees);
            assert!(l.allocs > 0);
        });
    }
}

#[test]
fn checker_detects_a_corrupted_object() {
    for size in [8, 13, 64, 520, FULL_FILL_LIMIT, 3 * PAGE + 5] {
        let layout = Layout::from_size_align(size, 8).unwrap();
        // SAFETY: non-zero layout; the pointer is checked, stays within
        // `size` bytes, and is freed once with the same layout.
        unsafe {
            let p = System.alloc(layout);
            assert!(!p.is_null());
            let tag = tag_for(p, 42);
            fill(p, size, tag);
            assert_eq!(verify(p, size, tag), Ok(()));
            // Flip one bit in the last byte (always covered by the pattern).
            *p.add(size - 1) ^= 1;
            let c = verify(p, size, tag).expect_err("corruption not detected");
            assert!(c.offset < size && c.offset + 8 >= size, "{c}");
            System.dealloc(p, layout);
        }
    }
}

#[test]
fn checker_detects_a_swapped_object() {
    // Two objects with the same contents-shape but different tags, as when
    // an allocator hands out the same block twice.
    let size = 128;
    let layout = Layout::from_size_align(size, 8).unwrap();
    // SAFETY: as above; both blocks are freed once.
    unsafe {
        let a = System.alloc(layout);
        let b = System.alloc(layout);
        assert!(!a.is_null() && !b.is_null());
        fill(a, size, tag_for(a, 0));
        fill(b, size, tag_for(b, 1));
        std::ptr::copy_nonoverlapping(b, a, size);
        assert!(verify(a, size, tag_for(a, 0)).is_err());
        System.dealloc(a, layout);
        System.dealloc(b, layout);
    }
}

#[test]
#[should_panic(expected = "corrupted at offset 16")]
fn verify_or_panic_names_the_offset() {
    let mut buf = [0u64; 8];
    let p = buf.as_mut_ptr().cast::<u8>();
    // SAFETY: `buf` is 64 bytes, 8-aligned, and outlives these calls.
    unsafe {
        let tag = tag_for(p, 0);
        fill(p, 64, tag);
        *p.add(17) = !*p.add(17);
        verify_or_panic(p, 64, tag, "test");
    }
}

#[test]
#[should_panic(expected = "unbalanced")]
fn ledger_catches_a_leak() {
    let mut l = with_allocator!(Allocator::System, |a| workloads::single_size(a, 8, 1));
    l.on_alloc(64);
    l.assert_balanced("leak");
}

#[test]
#[should_panic(expected = "unbalanced")]
fn ledger_catches_a_double_free() {
    let mut l = Ledger::default();
    l.on_alloc(64);
    l.on_free(64);
    l.on_free(64);
    l.assert_balanced("double free");
}

/// A deliberately broken allocator: every allocation overlaps the previous
/// one by half. The workload's checks must catch it.
struct Overlapping;

static ARENA: std::sync::Mutex<usize> = std::sync::Mutex::new(0);
static mut ARENA_BUF: [u64; 1 << 16] = [0; 1 << 16];

// SAFETY: hands out in-bounds, 8-aligned pointers into a static buffer (the
// overlap is the intended bug); dealloc does nothing, so nothing is freed
// twice. Only used single-threaded by the test below.
unsafe impl GlobalAlloc for Overlapping {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let mut next = ARENA.lock().unwrap();
        let size = layout.size().next_multiple_of(16);
        if *next + size > (1 << 19) {
            *next = 0;
        }
        let off = *next;
        *next += size / 2;
        // SAFETY: `off + size <= 512 KiB`, the size of ARENA_BUF in bytes.
        unsafe { std::ptr::addr_of_mut!(ARENA_BUF).cast::<u8>().add(off) }
    }
    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}

static OVERLAPPING: Overlapping = Overlapping;

#[test]
#[should_panic(expected = "corrupted")]
fn bulk_catches_an_allocator_that_overlaps_objects() {
    workloads::bulk(&OVERLAPPING, 10, 64, 1);
}
