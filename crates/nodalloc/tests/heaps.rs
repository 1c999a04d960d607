//! First-class heaps through the Rust face: collections in a heap, drops that give memory back,
//! exact limits under threads, frees from any path and thread, heaps made and dropped by many
//! threads, `fork` with live heaps.
//!
//! The scenarios that measure RSS run in a child process of this binary
//! (`NODALLOC_TEST_CHILD`), alone.

#![cfg_attr(feature = "nightly", feature(allocator_api))]

use allocator_api2::vec::Vec as HeapVec;
use nodalloc::{heap_of, Heap, HeapError, NodAlloc};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

#[global_allocator]
static GLOBAL: NodAlloc = NodAlloc::new();

mod common;
use common::{expect_child, Rng};

#[test]
fn child_entry() {
    match std::env::var("NODALLOC_TEST_CHILD").as_deref() {
        Ok("heap-drop-rss") => heap_drop_returns_memory(),
        Ok("process-limit") => the_process_limit_holds_over_heaps(),
        Ok(other) => panic!("unknown scenario {other}"),
        Err(_) => {}
    }
}

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let resident: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    resident * 4096
}

fn pattern(seed: u64, i: usize) -> u8 {
    (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as u8 ^ i as u8
}

/// A Vec and a HashMap of allocator-api2 live in a heap through a random workload: every
/// block they hold is the heap's, their contents stay intact, and the global heap's blocks
/// allocated meanwhile are never the heap's.
#[test]
fn collections_live_in_the_heap_through_a_random_workload() {
    let heap = Heap::builder().name("collections").build().unwrap();
    let mut vectors: std::vec::Vec<HeapVec<u64, &Heap>> = std::vec::Vec::new();
    let mut map: hashbrown::HashMap<u64, HeapVec<u8, &Heap>, _, &Heap> =
        hashbrown::HashMap::with_hasher_in(hashbrown::DefaultHashBuilder::default(), &heap);
    let mut globals = std::vec::Vec::new();
    let mut rng = Rng(0x5EED);
    for step in 0..20_000u64 {
        match rng.next() % 5 {
            0 => {
                let mut v = HeapVec::new_in(&heap);
                v.extend((0..rng.next() % 300).map(|i| i ^ step));
                vectors.push(v);
            }
            1 if !vectors.is_empty() => {
                let index = (rng.next() as usize) % vectors.len();
                let v = vectors.swap_remove(index);
                for (i, &value) in v.iter().enumerate() {
                    assert_eq!(value ^ i as u64, value ^ i as u64);
                }
            }
            2 => {
                let len = (rng.next() % 2000) as usize;
                let mut bytes = HeapVec::with_capacity_in(len, &heap);
                bytes.extend((0..len).map(|i| pattern(step, i)));
                map.insert(step, bytes);
            }
            3 => {
                let key = rng.next() % (step + 1);
                if let Some(bytes) = map.remove(&key) {
                    for (i, &b) in bytes.iter().enumerate() {
                        assert_eq!(b, pattern(key, i), "map entry {key} damaged at {i}");
                    }
                }
            }
            _ => globals.push(Box::new([step; 4])),
        }
    }
    for v in &vectors {
        if v.capacity() != 0 {
            assert_eq!(heap_of(v.as_ptr() as *const u8), Some(heap.id()));
        }
    }
    for (&key, bytes) in &map {
        if bytes.capacity() != 0 {
            assert!(heap.contains(bytes.as_ptr()));
        }
        for (i, &b) in bytes.iter().enumerate() {
            assert_eq!(b, pattern(key, i), "map entry {key} damaged at {i}");
        }
    }
    for (i, g) in globals.iter().enumerate() {
        assert_eq!(heap_of(g.as_ptr() as *const u8), None, "global block {i}");
    }
    let held = heap.stats();
    assert!(held.blocks > map.len(), "{held:?}");
    drop(map);
    drop(vectors);
    let after = heap.stats();
    assert_eq!((after.blocks, after.live), (0, 0), "{after:?}");
    assert_eq!(after.allocs, after.frees);
}

/// A heap that held 256 MiB is dropped without freeing a block: RSS falls back within a
/// bound, and the global heap's blocks are untouched.
fn heap_drop_returns_memory() {
    let globals: Vec<Box<[u8; 4096]>> = (0..1024).map(|i| Box::new([i as u8; 4096])).collect();
    let before = rss_bytes();
    let heap = Heap::builder().name("big").build().unwrap();
    let mut rng = Rng(42);
    let mut total = 0usize;
    while total < 256 << 20 {
        let size = 16 + (rng.next() % 8192) as usize;
        let block = heap.alloc(Layout::from_size_align(size, 8).unwrap());
        assert!(!block.is_null());
        // SAFETY: `size` writable bytes, never freed (the drop takes them).
        unsafe { block.write_bytes(0xA5, size) };
        total += size;
    }
    let large = heap.alloc(Layout::from_size_align(32 << 20, 4096).unwrap());
    // SAFETY: 32 MiB writable.
    unsafe { large.write_bytes(1, 32 << 20) };
    let full = rss_bytes();
    assert!(full > before + (256 << 20), "rss {before} -> {full}");
    let stats = heap.stats();
    drop(heap);
    nodalloc::purge();
    let after = rss_bytes();
    for (i, g) in globals.iter().enumerate() {
        assert!(g.iter().all(|&b| b == i as u8), "global block {i} damaged");
    }
    eprintln!(
        "heap-drop: before {} MiB, full {} MiB, after drop {} MiB (heap held {} bags, {} MiB committed)",
        before >> 20,
        full >> 20,
        after >> 20,
        stats.bags,
        stats.committed >> 20
    );
    assert!(
        after < before + (16 << 20),
        "RSS after the drop: {} MiB, before the heap: {} MiB",
        after >> 20,
        before >> 20
    );
}

/// The process-wide limit (`set_limit`, as `NODALLOC_LIMIT`) holds over heaps without limits
/// of their own: two heaps fill until the process limit refuses, and together they never hold
/// more than it.
fn the_process_limit_holds_over_heaps() {
    const LIMIT: usize = 64 << 20;
    assert!(nodalloc::set_limit(LIMIT));
    let (a, b) = (Heap::new(), Heap::new());
    let layout = Layout::from_size_align(3000, 8).unwrap();
    let mut refused = false;
    for i in 0..200_000 {
        let heap = if i % 2 == 0 { &a } else { &b };
        if heap.alloc(layout).is_null() {
            refused = true;
            break;
        }
    }
    let held = a.stats().committed + b.stats().committed;
    // The process is at its limit: room for the message first.
    drop((a, b));
    eprintln!(
        "process-limit: refused {refused}, heaps hold {} MiB",
        held >> 20
    );
    assert!(refused, "64 MiB limit never refused");
    assert!(
        held <= LIMIT,
        "heaps hold {held} bytes past the process limit"
    );
    assert!(held > LIMIT / 2, "heaps hold only {held} bytes");
}

#[test]
fn the_process_limit_holds_over_heaps_without_limits() {
    expect_child("process-limit", &[], "process-limit: ");
}

#[test]
fn a_dropped_heap_gives_its_memory_back() {
    let stderr = expect_child("heap-drop-rss", &[], "heap-drop: ");
    eprint!("{stderr}");
}

/// Eight threads allocate from one heap with a limit until it refuses: never past the limit
/// (the heap's peak), refusals return null, and freeing makes room again. A second heap's
/// limit is its own: a full heap takes nothing from it.
#[test]
fn a_heap_limit_is_exact_under_threads_and_recovers() {
    const LIMIT: usize = 24 << 20;
    let heap = Arc::new(
        Heap::builder()
            .name("bounded")
            .limit(LIMIT)
            .build()
            .unwrap(),
    );
    let other = Heap::builder()
        .name("other")
        .limit(4 << 20)
        .build()
        .unwrap();
    let refused = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let heap = Arc::clone(&heap);
            let refused = Arc::clone(&refused);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let mut rng = Rng(t + 1);
                let mut held = Vec::new();
                loop {
                    let size = match rng.next() % 10 {
                        0 => 300 << 10,
                        _ => 8 + (rng.next() % 20000) as usize,
                    };
                    let layout = Layout::from_size_align(size, 8).unwrap();
                    let block = heap.alloc(layout);
                    if block.is_null() {
                        refused.fetch_add(1, Ordering::Relaxed);
                        if rng.next() % 4 == 0 {
                            break;
                        }
                        continue;
                    }
                    held.push((block as usize, layout));
                }
                held
            })
        })
        .collect();
    let held: Vec<Vec<(usize, Layout)>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let stats = heap.stats();
    assert!(refused.load(Ordering::Relaxed) >= 8);
    assert!(
        stats.peak <= LIMIT,
        "peak {} past the limit {LIMIT}",
        stats.peak
    );
    assert!(stats.committed <= LIMIT);
    assert!(stats.committed > LIMIT / 2, "{stats:?}");
    // The other heap still reaches its own limit.
    let mut others = Vec::new();
    loop {
        let block = other.alloc(Layout::from_size_align(1000, 8).unwrap());
        if block.is_null() {
            break;
        }
        others.push(block);
    }
    assert!(other.stats().committed > 3 << 20, "{:?}", other.stats());
    // Freed from other threads than the ones that allocated, through the global allocator.
    let frees: Vec<_> = held
        .into_iter()
        .map(|blocks| {
            std::thread::spawn(move || {
                for (block, layout) in blocks {
                    // SAFETY: a live block of this layout, given up here.
                    unsafe { GLOBAL.dealloc(block as *mut u8, layout) };
                }
            })
        })
        .collect();
    for f in frees {
        f.join().unwrap();
    }
    let empty = heap.stats();
    // The heap's front lists may keep a few bags (two batches a class at most): 3.3-4.3 MB
    // measured over the 8 B-20 kB classes this test uses, against the 24 MiB it filled.
    assert_eq!(empty.blocks, 0, "{empty:?}");
    assert!(empty.committed <= 6 << 20, "{empty:?}");
    // Recovery: the whole limit is there again.
    let big = heap.alloc(Layout::from_size_align(LIMIT - (1 << 20), 4096).unwrap());
    assert!(!big.is_null(), "no room after every block came back");
    // SAFETY: allocated just above.
    unsafe {
        heap.dealloc(
            big,
            Layout::from_size_align(LIMIT - (1 << 20), 4096).unwrap(),
        )
    };
    for block in others {
        // SAFETY: live blocks of `other`.
        unsafe { other.dealloc(block, Layout::from_size_align(1000, 8).unwrap()) };
    }
}

#[test]
fn impossible_options_are_errors() {
    assert_eq!(
        Heap::builder().node(1 << 20).build().err(),
        Some(HeapError::NoSuchNode(1 << 20))
    );
    assert_eq!(
        Heap::builder().limit(100).build().err(),
        Some(HeapError::LimitTooSmall(100))
    );
    let heap = Heap::builder().node(0).limit(32 << 10).build().unwrap();
    assert_eq!(heap.stats().node, 0);
    // One bag's worth, no more.
    let first = heap.alloc(Layout::new::<[u8; 64]>());
    assert!(!first.is_null());
    assert!(heap
        .alloc(Layout::from_size_align(40 << 10, 8).unwrap())
        .is_null());
}

/// Threads create heaps, fill them, free half the blocks from another thread, and drop them,
/// over and over: every block reads back what was written, and nothing is left over.
#[test]
fn heaps_made_and_dropped_by_many_threads() {
    let before = nodalloc::stats();
    let threads: Vec<_> = (0..6u64)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rng = Rng(0xC0FFEE + t);
                for round in 0..40u64 {
                    let heap = Heap::builder().name("churn").build().unwrap();
                    let mut blocks = Vec::new();
                    for _ in 0..200 {
                        let size = 1 + (rng.next() % 3000) as usize;
                        let block = heap.alloc(Layout::from_size_align(size, 8).unwrap());
                        assert!(!block.is_null());
                        // SAFETY: `size` writable bytes.
                        unsafe { block.write_bytes(round as u8 ^ t as u8, size) };
                        blocks.push((block as usize, size));
                    }
                    let (half, rest) = blocks.split_at(100);
                    let half = half.to_vec();
                    std::thread::spawn(move || {
                        for (block, size) in half {
                            // SAFETY: a live block of `size` bytes.
                            let bytes =
                                unsafe { std::slice::from_raw_parts(block as *const u8, size) };
                            assert!(bytes.iter().all(|&b| b == round as u8 ^ t as u8));
                            // SAFETY: a live heap block, given up here.
                            unsafe { nodalloc::raw::free_any(block as *mut u8) };
                        }
                    })
                    .join()
                    .unwrap();
                    for &(block, size) in rest {
                        // SAFETY: as above.
                        let bytes = unsafe { std::slice::from_raw_parts(block as *const u8, size) };
                        assert!(bytes.iter().all(|&b| b == round as u8 ^ t as u8));
                    }
                    assert_eq!(heap.stats().blocks, 100);
                    drop(heap);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Other tests of this binary make heaps at the same time: at least ours were counted.
    let after = nodalloc::stats();
    assert!(after.heaps_created - before.heaps_created >= 240);
    assert!(after.heaps_dropped - before.heaps_dropped >= 240);
}

/// A forked child uses and drops the heaps it inherited while the parent goes on with its own.
#[test]
fn fork_with_live_heaps() {
    let heap = Heap::builder().name("forked").build().unwrap();
    let keep: Vec<*mut u8> = (0..1000)
        .map(|i| {
            let b = heap.alloc(Layout::from_size_align(64 + i % 500, 8).unwrap());
            // SAFETY: at least 64 writable bytes.
            unsafe { b.write_bytes(7, 64) };
            b
        })
        .collect();
    let busy = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let worker = {
        let busy = Arc::clone(&busy);
        std::thread::spawn(move || {
            while busy.load(Ordering::Relaxed) {
                let h = Heap::new();
                for _ in 0..100 {
                    h.alloc(Layout::new::<[u8; 200]>());
                }
            }
        })
    };
    for _ in 0..20 {
        // SAFETY: the child only allocates through nodalloc and exits with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = keep.iter().all(|&b| {
                // SAFETY: the blocks are live in the child's copy too.
                let bytes = unsafe { std::slice::from_raw_parts(b, 64) };
                bytes.iter().all(|&x| x == 7)
            });
            let child = Heap::new();
            let fresh = child.alloc(Layout::new::<[u8; 5000]>());
            let ok = ok && !fresh.is_null() && heap.stats().blocks == 1000;
            drop(child);
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
    busy.store(false, Ordering::Relaxed);
    worker.join().unwrap();
    assert_eq!(heap.stats().blocks, 1000);
}

/// With the `nightly` feature, std's own collections take a heap (`core::alloc::Allocator`).
#[cfg(feature = "nightly")]
#[test]
fn std_collections_take_a_heap_on_nightly() {
    let heap = Heap::builder().name("std").build().unwrap();
    let mut numbers: std::vec::Vec<u64, &Heap> = std::vec::Vec::new_in(&heap);
    numbers.extend(0..10_000u64);
    let boxed = Box::new_in([7u8; 100], &heap);
    assert!(heap.contains(numbers.as_ptr() as *const u8));
    assert!(heap.contains(boxed.as_ptr()));
    assert_eq!(numbers.iter().sum::<u64>(), 10_000 * 9_999 / 2);
    drop((numbers, boxed));
    assert_eq!(heap.stats().blocks, 0);
}

/// A local heap: collections in it, blocks freed through its cache and through other paths
/// (another thread's `dealloc`), statistics that do not count its cached objects, a limit that
/// refills after the cache gives its objects back, and a drop that gives everything back.
#[test]
fn a_local_heap_serves_its_thread_and_takes_frees_from_anywhere() {
    let local = Heap::builder()
        .name("local")
        .limit(4 << 20)
        .build_local()
        .unwrap();
    let mut map: hashbrown::HashMap<
        u64,
        HeapVec<u8, &nodalloc::LocalHeap>,
        _,
        &nodalloc::LocalHeap,
    > = hashbrown::HashMap::with_hasher_in(hashbrown::DefaultHashBuilder::default(), &local);
    for key in 0..2000u64 {
        let mut bytes = HeapVec::with_capacity_in(1 + (key % 300) as usize, &local);
        bytes.extend((0..bytes.capacity()).map(|i| pattern(key, i)));
        map.insert(key, bytes);
    }
    for key in (0..2000u64).step_by(2) {
        let bytes = map.remove(&key).unwrap();
        assert!(bytes.iter().enumerate().all(|(i, &b)| b == pattern(key, i)));
    }
    assert_eq!(local.stats().blocks, 1000 + 1, "{:?}", local.stats());
    // Blocks allocated here, freed by another thread through the global allocator.
    let layout = Layout::from_size_align(200, 8).unwrap();
    let blocks: Vec<usize> = (0..500).map(|_| local.alloc(layout) as usize).collect();
    assert!(blocks
        .iter()
        .all(|&b| b != 0 && local.contains(b as *const u8)));
    std::thread::spawn(move || {
        for b in blocks {
            // SAFETY: live heap blocks of this layout, given up here.
            unsafe { GLOBAL.dealloc(b as *mut u8, layout) };
        }
    })
    .join()
    .unwrap();
    drop(map);
    let stats = local.stats();
    assert_eq!(stats.blocks, 0, "{stats:?}");
    // The limit: fill it, free everything through the cache, and it is whole again.
    let small = Layout::from_size_align(1000, 8).unwrap();
    let mut held = Vec::new();
    loop {
        let b = local.alloc(small);
        if b.is_null() {
            break;
        }
        held.push(b);
    }
    assert!(local.stats().peak <= 4 << 20);
    for b in held {
        // SAFETY: live blocks of this layout.
        unsafe { local.dealloc(b, small) };
    }
    let big = Layout::from_size_align(3 << 20, 4096).unwrap();
    assert!(!local.alloc(big).is_null(), "{:?}", local.stats());
}

/// The statistics list live heaps with their name, node, live and committed bytes and limit,
/// in the snapshot and in the text `NODALLOC_STATS` prints.
#[test]
fn the_statistics_list_live_heaps() {
    let heap = Heap::builder()
        .name("listed-heap")
        .limit(64 << 20)
        .build()
        .unwrap();
    let big = heap.alloc(Layout::from_size_align(40 << 20, 4096).unwrap());
    assert!(!big.is_null());
    let stats = nodalloc::stats();
    let line = stats
        .top_heaps()
        .iter()
        .find(|line| line.name() == b"listed-heap")
        .expect("the heap is listed (it holds the most live bytes of this binary's heaps)");
    assert_eq!(line.index, heap.id().index());
    assert_eq!(line.limit, 64 << 20);
    assert!(
        line.live >= 40 << 20 && line.committed >= line.live,
        "{line:?}"
    );
    let mut fds = [0; 2];
    // SAFETY: a pipe for the statistics text.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    stats.write_to(fds[1]);
    // SAFETY: closing our write end.
    unsafe { libc::close(fds[1]) };
    let mut text = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        // SAFETY: reading into our buffer.
        let got = unsafe { libc::read(fds[0], buffer.as_mut_ptr().cast(), buffer.len()) };
        if got <= 0 {
            break;
        }
        text.extend_from_slice(&buffer[..got as usize]);
    }
    // SAFETY: closing our read end.
    unsafe { libc::close(fds[0]) };
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.lines()
            .any(|l| l.contains("'listed-heap' on node ") && l.contains("(limit 64.0 MiB)")),
        "no line for the heap in:\n{text}"
    );
}
