//! Heap profiles through the Rust face (`nodalloc::profile`): off by default (no bytes, an
//! error from `dump`); on, in a child process of this binary (`NODALLOC_TEST_CHILD`), the bytes
//! `pprof()` returns and the file `dump` writes are profiles Google's `pprof` reads, whose live
//! and allocated totals are the program's within ±10 %.

use nodalloc::NodAlloc;
use nodalloc_testkit::{pprof, pprof_total, skip, Need};
use std::path::PathBuf;

#[global_allocator]
static GLOBAL: NodAlloc = NodAlloc::new();

mod common;
use common::expect_child;

const KEPT: usize = 16 << 20;
const CHURNED: usize = 16 << 20;
const SIZE: usize = 1000;
/// A vector grown a byte at a time to this many bytes (capacity doubling: its large blocks are
/// mostly resized in place, each resize an allocation to the profile).
const GROWN: usize = 8 << 20;

#[test]
fn child_entry() {
    match std::env::var("NODALLOC_TEST_CHILD").as_deref() {
        Ok("profile") => allocate_and_write_profiles(),
        Ok("lean") => lean_lists_hand_out_each_block_once(),
        Ok("heaps") => profile_first_class_heaps(),
        Ok(other) => panic!("unknown scenario {other}"),
        Err(_) => {}
    }
}

#[inline(never)]
fn keep() -> Vec<Vec<u8>> {
    (0..KEPT / SIZE).map(|i| vec![i as u8; SIZE]).collect()
}

#[inline(never)]
fn grow() -> Vec<u8> {
    let mut grown = Vec::new();
    for i in 0..GROWN {
        grown.push(i as u8);
    }
    assert_eq!(grown.capacity(), GROWN);
    grown
}

#[inline(never)]
fn churn() {
    for i in 0..CHURNED / SIZE {
        std::hint::black_box(vec![i as u8; SIZE]);
    }
}

fn allocate_and_write_profiles() {
    assert!(nodalloc::profile::is_on());
    let kept = keep();
    let grown = grow();
    churn();
    let dir = PathBuf::from(std::env::var("PROFILE_DIR").unwrap());
    let bytes = nodalloc::profile::pprof().expect("profiling is on");
    std::fs::write(dir.join("bytes.pb"), bytes).unwrap();
    nodalloc::profile::dump(dir.join("dump.pb")).unwrap();
    let missing = nodalloc::profile::dump("/nonexistent-directory/profile.pb").unwrap_err();
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    std::hint::black_box((&kept, &grown));
    eprintln!("profiles written");
}

#[test]
fn with_profiling_off_there_is_no_profile() {
    if std::env::var_os("NODALLOC_PROFILE").is_some() {
        return;
    }
    assert!(!nodalloc::profile::is_on());
    assert!(nodalloc::profile::pprof().is_none());
    let refused = nodalloc::profile::dump(std::env::temp_dir().join("never.pb")).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::Unsupported);
}

/// A child allocates 16 MiB it keeps and 16 MiB it frees, in 1 000-byte vectors, and grows one
/// vector to 8 MiB a byte at a time, sampled every 8 KiB on average, and writes its profile both
/// ways: pprof reads both, with 24 MiB live and 48 MiB allocated (each capacity the vector had
/// counts, whether its block was resized in place or moved), ±10 %. (A binary without frame pointers gives shallow stacks: the totals
/// are what this checks, not the functions.)
#[test]
fn the_rust_face_writes_profiles_pprof_reads_with_the_programs_totals() {
    let Some(pprof) = pprof() else {
        return skip(
            Need::OnCi,
            "needs Google's pprof (scripts/setup.sh installs it)",
        );
    };
    let dir = std::env::temp_dir().join(format!("nodalloc-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    expect_child(
        "profile",
        &[
            ("NODALLOC_PROFILE", "1"),
            ("NODALLOC_PROFILE_RATE", "8K"),
            ("PROFILE_DIR", dir.to_str().unwrap()),
        ],
        "profiles written",
    );
    let near = |what: &str, found: u64, truth: usize| {
        let error = (found as f64 - truth as f64).abs() / truth as f64;
        assert!(
            error <= 0.10,
            "{what}: {found} in the profile, {truth} true"
        );
    };
    // What the child kept: the vectors and their array (and a little of the test harness).
    let kept = KEPT + KEPT / SIZE * std::mem::size_of::<Vec<u8>>() + GROWN;
    for file in ["bytes.pb", "dump.pb"] {
        let profile = dir.join(file);
        near(file, pprof_total(&pprof, &profile, "inuse_space"), kept);
        near(
            file,
            pprof_total(&pprof, &profile, "alloc_space"),
            // The grown vector's capacities: 8, 16, … GROWN bytes, about twice GROWN.
            kept + CHURNED + GROWN,
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Sizes of the lean-mode scenario: a small class, a medium one and one of the sparse pool,
/// whose budgets at a 16 KiB rate are about 340, 16 and 1 allocations.
const LEAN_SIZES: [usize; 3] = [48, 1000, 12_000];

/// Fills `block` (of `size` bytes) with words derived from `tag`.
fn fill(block: *mut u8, size: usize, tag: u64) {
    for word in 0..size / 8 {
        // SAFETY: the block holds `size` bytes, 8-aligned.
        unsafe { (block as *mut u64).add(word).write(tag ^ word as u64) };
    }
}

/// Checks what [`fill`] wrote, then frees the block.
fn check_and_free(block: *mut u8, size: usize, tag: u64) {
    for word in 0..size / 8 {
        // SAFETY: as in `fill`; the block is still the caller's.
        let found = unsafe { (block as *const u64).add(word).read() };
        assert_eq!(
            found,
            tag ^ word as u64,
            "block {block:p} of {size} B overwritten"
        );
    }
    // SAFETY: allocated below with this layout.
    unsafe { std::alloc::dealloc(block, std::alloc::Layout::from_size_align(size, 8).unwrap()) };
}

fn allocate(size: usize, tag: u64) -> *mut u8 {
    // SAFETY: a non-zero size.
    let block = unsafe { std::alloc::alloc(std::alloc::Layout::from_size_align(size, 8).unwrap()) };
    assert!(!block.is_null());
    fill(block, size, tag);
    block
}

/// Lean mode's lists and stashes under the patterns that move objects between them: a thread
/// that only frees (another thread's blocks), waves of allocations and frees, and a
/// malloc/free alternation right after a wave. Every block carries a pattern checked when it
/// is freed (a block handed out twice is overwritten by its second owner), no live address is
/// handed out twice, and the counts of allocations and frees agree at the end.
fn lean_lists_hand_out_each_block_once() {
    use std::collections::HashSet;
    assert!(nodalloc::profile::is_on());
    let (sender, receiver) = std::sync::mpsc::sync_channel::<Vec<(usize, usize, u64)>>(4);
    let consumer = std::thread::spawn(move || {
        for batch in receiver {
            for (block, size, tag) in batch {
                check_and_free(block as *mut u8, size, tag);
            }
        }
    });
    let producer = std::thread::spawn(move || {
        for round in 0..400u64 {
            let batch = (0..64u64)
                .map(|i| {
                    let size = LEAN_SIZES[(i % 3) as usize];
                    let tag = round << 32 | i;
                    (allocate(size, tag) as usize, size, tag)
                })
                .collect();
            sender.send(batch).unwrap();
        }
    });
    let mut live = HashSet::new();
    for round in 0..60u64 {
        for &size in &LEAN_SIZES {
            let wave: Vec<(*mut u8, u64)> = (0..300u64)
                .map(|i| {
                    let tag = 1 << 63 | round << 32 | i;
                    let block = allocate(size, tag);
                    assert!(live.insert(block as usize), "{block:p} handed out twice");
                    (block, tag)
                })
                .collect();
            for (block, tag) in wave {
                live.remove(&(block as usize));
                check_and_free(block, size, tag);
            }
            for i in 0..500u64 {
                let tag = 3 << 62 | round << 32 | i;
                check_and_free(allocate(size, tag), size, tag);
            }
        }
    }
    producer.join().unwrap();
    consumer.join().unwrap();
    nodalloc::purge();
    let stats = nodalloc::stats();
    // 1000 B: a class the test harness does not use itself (nor is every allocation of it a
    // sample, served as a large block, as most of 12 000 B are at this rate).
    let class = stats
        .classes()
        .iter()
        .find(|class| class.size == 1024)
        .unwrap();
    assert_eq!(class.allocs, class.frees, "class {} B", class.size);
    eprintln!("lean lists checked");
}

/// Lean mode (profiling on, call-site partitions off) at a rate that keeps every list short
/// and moves objects through the stashes all the time (see [`lean_lists_hand_out_each_block_once`]).
#[test]
fn lean_mode_hands_out_each_block_once_and_loses_none() {
    expect_child(
        "lean",
        &[("NODALLOC_PROFILE", "1"), ("NODALLOC_PROFILE_RATE", "16K")],
        "lean lists checked",
    );
}

/// Bytes the first-class heaps' scenario keeps in a shared heap (1 000-byte blocks, 4 KiB
/// blocks and 300 KiB large blocks) and in a thread-local one (200-byte blocks).
const HEAP_SHARED: usize = 4 << 20;
const HEAP_LOCAL: usize = 2 << 20;

/// Fills a `nodalloc::Heap` and a `nodalloc::LocalHeap`, writes a profile, drops both heaps
/// (their blocks go with them, without a free each) and writes a second one.
fn profile_first_class_heaps() {
    use std::alloc::Layout;
    assert!(nodalloc::profile::is_on());
    let dir = PathBuf::from(std::env::var("PROFILE_DIR").unwrap());
    let shared = nodalloc::Heap::new();
    let local = nodalloc::LocalHeap::new();
    for (size, share) in [(1000, 2), (4096, 1), (300 << 10, 1)] {
        let layout = Layout::from_size_align(size, 8).unwrap();
        for _ in 0..HEAP_SHARED / 4 * share / size {
            assert!(!shared.alloc(layout).is_null());
        }
    }
    let small = Layout::from_size_align(200, 8).unwrap();
    for i in 0..HEAP_LOCAL / 200 {
        let block = local.alloc(small);
        assert!(!block.is_null());
        if i % 2 == 1 {
            // Half freed again one by one: their samples leave the profile.
            // SAFETY: allocated just above with this layout.
            unsafe { local.dealloc(block, small) };
        }
    }
    nodalloc::profile::dump(dir.join("held.pb")).unwrap();
    drop(shared);
    drop(local);
    nodalloc::profile::dump(dir.join("dropped.pb")).unwrap();
    eprintln!("heap profiles written");
}

/// First-class heaps are profiled as `malloc` is: what a `Heap` and a `LocalHeap` hold shows
/// in `inuse_space` (the blocks a `LocalHeap` freed do not), and leaves it when the heaps are
/// dropped whole. Sampled every 1 KiB on average: at 8 KiB the estimate of the 5 MiB held
/// strayed by up to 9.7 % in 35 runs and by 10.3 % in one CI run, past the 10 % bound; at 1 KiB
/// it stayed within 3.9 % in 20.
#[test]
fn first_class_heaps_are_sampled_and_leave_the_profile_with_their_drop() {
    let Some(pprof) = pprof() else {
        return skip(
            Need::OnCi,
            "needs Google's pprof (scripts/setup.sh installs it)",
        );
    };
    let dir = std::env::temp_dir().join(format!("nodalloc-heap-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    expect_child(
        "heaps",
        &[
            ("NODALLOC_PROFILE", "1"),
            ("NODALLOC_PROFILE_RATE", "1K"),
            ("PROFILE_DIR", dir.to_str().unwrap()),
        ],
        "heap profiles written",
    );
    let held = pprof_total(&pprof, &dir.join("held.pb"), "inuse_space");
    let dropped = pprof_total(&pprof, &dir.join("dropped.pb"), "inuse_space");
    let truth = HEAP_SHARED + HEAP_LOCAL / 2;
    let found = held.saturating_sub(dropped);
    let error = (found as f64 - truth as f64).abs() / truth as f64;
    assert!(
        error <= 0.10,
        "{found} B live in the heaps by the profile ({held} held, {dropped} after the drop), {truth} true"
    );
    assert!(dropped < 256 << 10, "{dropped} B still live after the drop");
    std::fs::remove_dir_all(&dir).unwrap();
}
