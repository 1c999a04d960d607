//! The child-process scenarios of `global_allocator.rs` (each runs in a child with the
//! environment its test sets: a simulated topology, a limit, an address-space cap) and the
//! cross-thread stress they share.

use super::common::*;
use super::GLOBAL;
use std::alloc::{GlobalAlloc, Layout};

/// Pins the calling thread to `cpu` alone.
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it.
    let pinned = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set)
    };
    assert_eq!(pinned, 0);
}

/// The `repin` scenario.
pub fn repin() {
    // Default interleave on two simulated nodes (node 0 = CPU 0, node 1 = CPU 1).
    let affinity = || {
        // SAFETY: a zeroed cpu_set_t is valid; the kernel fills it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set);
            (libc::CPU_ISSET(0, &set), libc::CPU_ISSET(1, &set))
        }
    };
    // Workers are bound by the policy; one re-pinned by the program re-homes at once.
    for worker in 0..4 {
        std::thread::spawn(move || {
            let first = Box::new([1u8; 64]);
            let home = nodalloc::node_of(first.as_ptr()).unwrap();
            let other = 1 - home;
            pin(other);
            let objects: Vec<Box<[u8; 64]>> = (0..200).map(|_| Box::new([2; 64])).collect();
            let large = vec![3u8; 1 << 20];
            assert_eq!(
                nodalloc::current_node(),
                other,
                "worker {worker} kept its old home"
            );
            assert!(objects
                .iter()
                .all(|o| nodalloc::node_of(o.as_ptr()) == Some(other)));
            assert_eq!(nodalloc::node_of(large.as_ptr()), Some(other));
        })
        .join()
        .unwrap();
    }
    // A program that narrows itself to one node's CPUs: no thread it creates runs
    // outside that mask, whichever node the policy would give it.
    std::thread::spawn(move || {
        pin(0);
        let children: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    let _touch = Box::new([0u8; 64]);
                    affinity()
                })
            })
            .collect();
        for child in children {
            assert_eq!(
                child.join().unwrap(),
                (true, false),
                "a child's mask was widened"
            );
        }
    })
    .join()
    .unwrap();
    eprintln!("repin ok");
}

/// The `rehome` scenario.
pub fn rehome() {
    // Two simulated nodes on two CPUs: node 0 is CPU 0, node 1 is CPU 1.
    let churn = || {
        let objects: Vec<Box<[u8; 64]>> = (0..5000).map(|_| Box::new([1; 64])).collect();
        drop(objects);
    };
    std::thread::spawn(move || {
        pin(1);
        churn();
        assert_eq!(nodalloc::current_node(), 1);
        let early = Box::new([9u8; 64]);
        assert_eq!(nodalloc::node_of(early.as_ptr()), Some(1));
        pin(0);
        for _ in 0..10 {
            std::thread::sleep(std::time::Duration::from_millis(15));
            churn();
        }
        assert_eq!(
            nodalloc::current_node(),
            0,
            "the heap did not follow the thread"
        );
        let late = Box::new([9u8; 64]);
        assert_eq!(nodalloc::node_of(late.as_ptr()), Some(0));
        drop(early);
        eprintln!("rehome ok");
    })
    .join()
    .unwrap();
}

/// The `small-address-space` scenario.
pub fn small_address_space() {
    // Under `ulimit -v 2G` the 1 TiB default reservation cannot exist: the arena must
    // have shrunk to fit, and still serve a churn of every size range (a bounded live
    // set of about 64 MiB, 512 MiB allocated in all, on four threads).
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rng = Rng(0x1234_5678 ^ (t + 1));
                let mut live: Vec<(usize, Layout)> = Vec::with_capacity(256);
                let mut total = 0usize;
                while total < 128 << 20 {
                    let size = rng.size();
                    let layout = Layout::from_size_align(size, 8).unwrap();
                    // SAFETY: a valid layout.
                    let p = unsafe { GLOBAL.alloc(layout) };
                    assert!(!p.is_null(), "alloc of {size} B failed under RLIMIT_AS");
                    fill(p, size.min(512));
                    live.push((p as usize, layout));
                    total += size;
                    if live.iter().map(|(_, l)| l.size()).sum::<usize>() > 16 << 20 {
                        let (p, layout) = live.swap_remove(0);
                        check(p as *const u8, layout.size().min(512));
                        // SAFETY: allocated above with this layout.
                        unsafe { GLOBAL.dealloc(p as *mut u8, layout) };
                    }
                }
                for (p, layout) in live {
                    // SAFETY: allocated above with this layout.
                    unsafe { GLOBAL.dealloc(p as *mut u8, layout) };
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    eprintln!("small address space ok");
}

/// The `fork` scenario.
pub fn fork() {
    // Busy threads allocate and free across threads while the main thread forks; every
    // child must be able to allocate (no allocator lock left held) and exit 0.
    use std::sync::atomic::{AtomicBool, Ordering};
    static STOP: AtomicBool = AtomicBool::new(false);
    let workers: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let mut kept: Vec<Vec<u8>> = Vec::new();
                let mut i = 0usize;
                while !STOP.load(Ordering::Relaxed) {
                    kept.push(vec![t as u8; 16 + (i * 37) % 5000]);
                    if kept.len() > 100 {
                        kept.drain(..50);
                    }
                    if i % 64 == 0 {
                        let big = vec![1u8; 400_000];
                        assert_eq!(big[399_999], 1);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    for round in 0..200 {
        // SAFETY: fork in a multi-threaded process; the child only allocates through
        // nodalloc (no other locks) and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let mut objects: Vec<Box<[u8; 100]>> = Vec::new();
            for i in 0..1000 {
                objects.push(Box::new([i as u8; 100]));
            }
            let large = vec![7u8; 1 << 20];
            let ok = objects.iter().enumerate().all(|(i, o)| o[99] == i as u8) && large[12345] == 7;
            // SAFETY: leaving the child without running the parent's atexit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 3 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child {round} failed: {status}"
        );
    }
    STOP.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().unwrap();
    }
    eprintln!("fork ok");
}

/// The `limit` scenario.
pub fn limit() {
    const LIMIT: usize = 64 << 20;
    const THREADS: usize = 8;
    // Reserved before any thread meets the limit: std aborts the process when its own
    // allocation fails, and a growing Vec would.
    let vectors: Vec<Vec<(usize, Layout)>> =
        (0..THREADS).map(|_| Vec::with_capacity(100_000)).collect();
    // So is the vector the main thread collects them in: joining one thread frees none
    // of the others' blocks, so the heap may still be at the limit while it fills.
    let mut all = Vec::with_capacity(THREADS);
    // Every thread is spawned (which allocates) before any of them starts filling.
    let start = std::sync::Arc::new(std::sync::Barrier::new(THREADS));
    let threads: Vec<_> = vectors
        .into_iter()
        .enumerate()
        .map(|(t, mut held)| {
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let mut refused = 0;
                for i in 0..100_000usize {
                    let size = if i % 10 == 0 {
                        300_000
                    } else {
                        64 + (i * 31 + t) % 8000
                    };
                    let layout = Layout::from_size_align(size, 8).unwrap();
                    // SAFETY: a valid layout.
                    let p = unsafe { GLOBAL.alloc(layout) };
                    if p.is_null() {
                        refused += 1;
                        if refused > 50 {
                            break;
                        }
                        continue;
                    }
                    // SAFETY: we own `size` bytes at `p`.
                    unsafe { p.write_bytes(t as u8, size) };
                    held.push((p as usize, layout));
                }
                (held, refused)
            })
        })
        .collect();
    for (t, handle) in threads.into_iter().enumerate() {
        let (held, refused) = handle.join().unwrap();
        assert!(refused > 0, "a thread never met the limit");
        all.push((t, held));
    }
    let stats = nodalloc::stats();
    assert_eq!(stats.limit, LIMIT);
    assert!(
        stats.peak_committed <= LIMIT,
        "peak {} over the limit",
        stats.peak_committed
    );
    let granted: usize = all
        .iter()
        .flat_map(|(_, held)| held.iter().map(|(_, layout)| layout.size()))
        .sum();
    assert!(
        granted > LIMIT / 2,
        "only {granted} bytes granted under the limit"
    );
    for (t, held) in all {
        for (p, layout) in held {
            // SAFETY: allocated above with this layout and still live.
            let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, layout.size()) };
            assert!(
                bytes.iter().all(|&b| b == t as u8),
                "a block lost its contents"
            );
            // SAFETY: allocated above with this layout.
            unsafe { GLOBAL.dealloc(p as *mut u8, layout) };
        }
    }
    // No purge: the frees alone make room, for every thread at once (the freed spans
    // are still committed and the heap is fragmented by the bags left in caches).
    let again: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                for size in [1 << 20, 2 << 20, 3 << 20, 4 << 20] {
                    let layout = Layout::from_size_align(size, 8).unwrap();
                    // SAFETY: a valid layout.
                    let p = unsafe { GLOBAL.alloc(layout) };
                    assert!(
                        !p.is_null(),
                        "thread {t}: no room for {size} B after the frees"
                    );
                    // SAFETY: we own `size` bytes at `p`; freed once.
                    unsafe {
                        p.write_bytes(1, size);
                        GLOBAL.dealloc(p, layout);
                    }
                }
            })
        })
        .collect();
    for thread in again {
        thread.join().unwrap();
    }
    let layout = Layout::from_size_align(LIMIT / 2, 8).unwrap();
    // SAFETY: a valid layout; after the frees there is room again.
    let p = unsafe { GLOBAL.alloc(layout) };
    assert!(
        !p.is_null(),
        "no room for half the limit after freeing everything"
    );
    // SAFETY: allocated above.
    unsafe { GLOBAL.dealloc(p, layout) };
    let peak = nodalloc::stats().peak_committed;
    assert!(peak <= LIMIT, "peak {peak} over the limit");
    eprintln!("limit ok: {THREADS} threads, peak {peak}");
}

/// `threads` threads allocate random sizes, fill them, pass half to a neighbour thread that
/// checks and frees them, and free the rest themselves. Ends with balanced statistics.
pub fn stress(threads: usize, ops: usize) {
    // Spread the workers over every node, not the harness thread's one.
    use_every_cpu();
    let before = nodalloc::stats();
    hand_off_ring(
        threads,
        ops,
        |rng| {
            let size = rng.size();
            // SAFETY: a valid non-zero layout.
            let p = unsafe { GLOBAL.alloc(Layout::from_size_align(size, 8).unwrap()) };
            assert!(!p.is_null());
            fill(p, size.min(512));
            (p as usize, size)
        },
        // SAFETY: each object was allocated by `make` with this layout and is freed once.
        |p, size| unsafe {
            GLOBAL.dealloc(p as *mut u8, Layout::from_size_align(size, 8).unwrap())
        },
    );
    let after = nodalloc::stats();
    let allocs = after.allocs - before.allocs;
    let frees = after.frees - before.frees;
    assert!(allocs >= (threads * ops) as u64, "allocs {allocs}");
    // The stress itself is balanced; std may have a few objects of its own in flight.
    assert!(
        allocs.abs_diff(frees) < 1000,
        "allocs {allocs} frees {frees}"
    );
    let topology = nodalloc::topology().unwrap();
    if topology.node_count() > 1 {
        assert!(
            after.remote_frees > before.remote_frees,
            "no cross-node frees on {} nodes",
            topology.node_count()
        );
    }
    eprintln!(
        "stress ok: {} nodes, {allocs} allocs, {} remote frees",
        topology.node_count(),
        after.remote_frees
    );
}

/// The `tiers` scenario (three simulated nodes, `NODALLOC_TIERS=near:0,1;far:2`): far blocks
/// of every size land on node 2 and near ones on the thread's node; a thread homed on the far
/// node itself has no far node, and its far requests stay on its node.
pub fn tiers() {
    let probe = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: a valid non-zero layout; freed below.
    let home_block = unsafe { GLOBAL.alloc(probe) };
    let home = nodalloc::node_of(home_block).expect("a block of nodalloc");
    let far = nodalloc::far_node();
    assert_eq!(far, if home == 2 { None } else { Some(2) }, "home {home}");
    for size in [0, 24, 4096, 300_000, 3 << 20] {
        for align in [8, 64, 4096] {
            let layout = Layout::from_size_align(size, align).unwrap();
            for (tier, expected) in [
                (nodalloc::Tier::Near, home),
                (nodalloc::Tier::Far, far.unwrap_or(home)),
            ] {
                let block = GLOBAL.alloc_in_tier(layout, tier);
                assert!(!block.is_null(), "{size} bytes at {align} in {tier:?}");
                assert_eq!(block as usize % align, 0);
                assert_eq!(
                    nodalloc::node_of(block),
                    Some(expected),
                    "{size} bytes at {align} in {tier:?}"
                );
                // SAFETY: the block holds `size` bytes; freed once with its layout.
                unsafe {
                    block.write_bytes(0xa5, size);
                    GLOBAL.dealloc(block, layout);
                }
            }
        }
    }
    // SAFETY: allocated above with `probe`.
    unsafe { GLOBAL.dealloc(home_block, probe) };
    eprintln!("tiers ok: home {home}, far {far:?}");
}

/// The `tier-scope` scenario (as `tiers`): inside `tier(Far)` every allocation of the thread,
/// small, large and through collections, lands on the far node; an inner `tier(Near)` brings
/// them home, and so does the scope's end; blocks freed in either place go back to their node.
pub fn tier_scope() {
    let probe = Box::new(0u64);
    let home = nodalloc::node_of(&*probe as *const u64 as *const u8).expect("nodalloc's");
    let far = nodalloc::far_node().unwrap_or(home);
    let node_of = |p: *const u8| nodalloc::node_of(p).expect("nodalloc's");
    let mut kept = Vec::new();
    {
        let _far = nodalloc::tier(nodalloc::Tier::Far);
        for size in [8usize, 100, 5000, 300_000, 3 << 20] {
            let block = vec![7u8; size];
            assert_eq!(
                node_of(block.as_ptr()),
                far,
                "{size} bytes in the far scope"
            );
            kept.push(block);
        }
        let map: std::collections::HashMap<u32, String> =
            (0..1000).map(|i| (i, format!("value {i}"))).collect();
        assert_eq!(node_of(map[&500].as_ptr()), far);
        {
            let _near = nodalloc::tier(nodalloc::Tier::Near);
            let block = Box::new([1u8; 100]);
            assert_eq!(node_of(block.as_ptr()), home, "near inside far");
        }
        let block = Box::new([2u8; 100]);
        assert_eq!(
            node_of(block.as_ptr()),
            far,
            "far again after the inner scope"
        );
        drop(map);
    }
    let block = Box::new([3u8; 100]);
    assert_eq!(node_of(block.as_ptr()), home, "home after the scope");
    for (i, block) in kept.iter().enumerate() {
        assert!(block.iter().all(|&b| b == 7), "block {i} kept its contents");
    }
    let stats = nodalloc::stats();
    if far != home {
        assert!(stats.nodes()[far].far && !stats.nodes()[home].far);
        assert!(
            stats.far_allocated >= 3 << 20 && stats.far_allocated <= stats.allocated,
            "far allocated {} of {}",
            stats.far_allocated,
            stats.allocated
        );
        assert!(stats.far_committed >= stats.far_allocated);
    }
    drop(kept);
    eprintln!("tier-scope ok: home {home}, far {far}");
}

/// Automatic tiering through partition scopes (run with 3 simulated nodes of which node 2 is
/// far, `NODALLOC_CALLSITE=64`, `NODALLOC_TIERING=auto`, `NODALLOC_COOLING=200`): a cache built in
/// one scope and left alone turns cold and its full bags are recorded as moved to the far node,
/// while a scope that keeps allocating and freeing stays near; new allocations of the cold
/// scope come from the far node; the cache busy again comes back near. Every entry keeps its
/// contents.
pub fn auto_tiering() {
    const CACHE: usize = 5;
    const REQUESTS: usize = 9;
    assert!(nodalloc::start_background(), "the maintenance thread runs");
    let node_of = |p: *const u8| nodalloc::node_of(p).expect("nodalloc's");
    let cache: Vec<Box<[u8; 512]>> = {
        let _scope = nodalloc::partition(CACHE);
        (0..8192).map(|i| Box::new([i as u8; 512])).collect()
    };
    let home = node_of(cache[0].as_ptr());
    let far = nodalloc::far_node().expect("a far node");
    let far_share = |cache: &[Box<[u8; 512]>]| {
        cache
            .iter()
            .filter(|entry| node_of(entry.as_ptr()) == far)
            .count()
            * 100
            / cache.len()
    };
    let mut requests: Vec<Box<[u8; 256]>> = Vec::new();
    let started = std::time::Instant::now();
    while far_share(&cache) < 90 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the cache did not go far: {}% far after 20 s",
            far_share(&cache)
        );
        let _scope = nodalloc::partition(REQUESTS);
        requests.clear();
        requests.extend((0..4096).map(|i| Box::new([i as u8; 256])));
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let cooled = started.elapsed();
    assert!(
        requests
            .iter()
            .all(|request| node_of(request.as_ptr()) == home),
        "the busy scope's objects stay near"
    );
    let stats = nodalloc::stats();
    assert!(stats.tiering && stats.cold_partitions >= 1 && stats.bags_moved_far >= 100);
    let fresh = {
        let _scope = nodalloc::partition(CACHE);
        Box::new([9u8; 512])
    };
    assert_eq!(
        node_of(fresh.as_ptr()),
        far,
        "a new entry of the cold scope is far"
    );
    drop(fresh);
    // The cache scope busy again: its entries come back near.
    let started = std::time::Instant::now();
    while far_share(&cache) > 10 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the cache did not come back: {}% far after 20 s",
            far_share(&cache)
        );
        let _scope = nodalloc::partition(CACHE);
        let churn: Vec<Box<[u8; 512]>> = (0..4096).map(|_| Box::new([0u8; 512])).collect();
        drop(churn);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    for (i, entry) in cache.iter().enumerate() {
        assert!(
            entry.iter().all(|&b| b == i as u8),
            "entry {i} kept its contents"
        );
    }
    assert!(nodalloc::stats().bags_moved_near >= 100);
    eprintln!(
        "auto-tiering ok: cold after {} ms, home {home}, far {far}",
        cooled.as_millis()
    );
}
