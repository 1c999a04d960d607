//! First-class heaps, side by side (issue 35's benchmarks), in one process:
//!
//! 1. **Tree**: build a binary search tree of N small nodes (random keys, 32-byte nodes) and
//!    drop it, per allocator: nodalloc's `malloc`/`free` path (`NodAlloc`) freeing node by
//!    node, a `nodalloc::Heap` and a `nodalloc::LocalHeap` dropped whole, mimalloc per object and `mi_heap_destroy`
//!    (libmimalloc's heap API), glibc per object, and `bumpalo` (a bump arena dropped whole).
//!    Build and drop times are medians over the rounds.
//! 2. **Bounded heaps** (FancyAllocator's bounded-arena table): a mixed workload (allocations
//!    of 16 B – 64 KiB, log-uniform, and frees of random live blocks) in a heap with a limit
//!    of 32 – 512 MiB: throughput, and the share of allocations that succeed.
//!
//! Usage: `cargo run --release -p nodalloc-bench --bin heaps -- [NODES] [ROUNDS]`
//! (defaults 1 000 000 and 5). Prints a Markdown table of each.

use nodalloc::{Heap, NodAlloc};
use std::alloc::{GlobalAlloc, Layout};
use std::time::Instant;

#[repr(C)]
struct Node {
    key: u64,
    left: *mut Node,
    right: *mut Node,
    value: u64,
}

const NODE: Layout = Layout::new::<Node>();

/// Set for the allocation-only table: nodes are chained as a list (each node's `left` the
/// previous node), so the build is the allocations and one write each.
static FLAT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Inserts `keys` into a tree whose nodes come from `alloc`; the root.
fn build(keys: &[u64], mut alloc: impl FnMut() -> *mut u8) -> *mut Node {
    let mut root: *mut Node = core::ptr::null_mut();
    let flat = FLAT.load(std::sync::atomic::Ordering::Relaxed);
    for &key in keys {
        let node = alloc() as *mut Node;
        assert!(!node.is_null(), "allocation failed");
        // SAFETY: a fresh block of a Node's size and alignment; tree nodes are live until freed.
        unsafe {
            node.write(Node {
                key,
                left: core::ptr::null_mut(),
                right: core::ptr::null_mut(),
                value: key ^ 0x5555,
            });
            if flat {
                (*node).left = root;
                root = node;
                continue;
            }
            let mut slot = &mut root;
            while !(*slot).is_null() {
                slot = if key < (**slot).key {
                    &mut (**slot).left
                } else {
                    &mut (**slot).right
                };
            }
            *slot = node;
        }
    }
    root
}

/// Frees every node of the tree with `free`, children first (an explicit stack: no recursion
/// a million deep).
fn free_tree(root: *mut Node, mut free: impl FnMut(*mut u8)) {
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        if node.is_null() {
            continue;
        }
        // SAFETY: a live node of the tree, freed once, after its children were pushed.
        unsafe {
            stack.push((*node).left);
            stack.push((*node).right);
        }
        free(node as *mut u8);
    }
}

/// The sum of the tree's values (so the build is not optimised away, and the tree is read).
fn checksum(root: *mut Node) -> u64 {
    let mut sum = 0u64;
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        if node.is_null() {
            continue;
        }
        // SAFETY: a live node of the tree.
        unsafe {
            sum = sum.wrapping_add((*node).value);
            stack.push((*node).left);
            stack.push((*node).right);
        }
    }
    sum
}

fn keys(count: usize) -> Vec<u64> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        })
        .collect()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values[values.len() / 2]
}

/// One way to build and drop a tree: `run` builds it, checks it, and drops it, returning the
/// build and drop times in seconds.
struct Contender {
    name: &'static str,
    run: fn(&[u64]) -> (f64, f64),
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed().as_secs_f64())
}

fn nodalloc_per_object(keys: &[u64]) -> (f64, f64) {
    let global = NodAlloc::new();
    // SAFETY: a valid layout; blocks freed below with it.
    let (root, built) = timed(|| build(keys, || unsafe { global.alloc(NODE) }));
    std::hint::black_box(checksum(root));
    // SAFETY: each node was allocated with NODE.
    let ((), dropped) = timed(|| free_tree(root, |p| unsafe { global.dealloc(p, NODE) }));
    (built, dropped)
}

fn nodalloc_heap(keys: &[u64]) -> (f64, f64) {
    let heap = Heap::new();
    let (root, built) = timed(|| build(keys, || heap.alloc(NODE)));
    std::hint::black_box(checksum(root));
    let ((), dropped) = timed(|| drop(heap));
    (built, dropped)
}

fn nodalloc_local_heap(keys: &[u64]) -> (f64, f64) {
    let heap = nodalloc::LocalHeap::new();
    let (root, built) = timed(|| build(keys, || heap.alloc(NODE)));
    std::hint::black_box(checksum(root));
    let ((), dropped) = timed(|| drop(heap));
    (built, dropped)
}

fn mimalloc_per_object(keys: &[u64]) -> (f64, f64) {
    let alloc = || {
        // SAFETY: mimalloc's malloc, paired with mi_free below.
        unsafe { libmimalloc_sys::mi_malloc_aligned(NODE.size(), NODE.align()) as *mut u8 }
    };
    let (root, built) = timed(|| build(keys, alloc));
    std::hint::black_box(checksum(root));
    // SAFETY: blocks of mi_malloc_aligned.
    let ((), dropped) =
        timed(|| free_tree(root, |p| unsafe { libmimalloc_sys::mi_free(p.cast()) }));
    (built, dropped)
}

fn mimalloc_heap(keys: &[u64]) -> (f64, f64) {
    // SAFETY: mimalloc's heap API, used from the thread that made the heap.
    let heap = unsafe { libmimalloc_sys::mi_heap_new() };
    let alloc = || {
        // SAFETY: a heap of this thread's, alive until the destroy below.
        unsafe {
            libmimalloc_sys::mi_heap_malloc_aligned(heap, NODE.size(), NODE.align()) as *mut u8
        }
    };
    let (root, built) = timed(|| build(keys, alloc));
    std::hint::black_box(checksum(root));
    // SAFETY: the heap and every block in it are dropped; nothing uses them after.
    let ((), dropped) = timed(|| unsafe { libmimalloc_sys::mi_heap_destroy(heap) });
    (built, dropped)
}

fn glibc_per_object(keys: &[u64]) -> (f64, f64) {
    // SAFETY: glibc's malloc and free, paired (32-byte nodes are 16-aligned by malloc).
    let (root, built) = timed(|| build(keys, || unsafe { libc::malloc(NODE.size()) as *mut u8 }));
    std::hint::black_box(checksum(root));
    // SAFETY: blocks of libc::malloc.
    let ((), dropped) = timed(|| free_tree(root, |p| unsafe { libc::free(p.cast()) }));
    (built, dropped)
}

fn bumpalo_arena(keys: &[u64]) -> (f64, f64) {
    let bump = bumpalo::Bump::new();
    let (root, built) = timed(|| build(keys, || bump.alloc_layout(NODE).as_ptr()));
    std::hint::black_box(checksum(root));
    let ((), dropped) = timed(|| drop(bump));
    (built, dropped)
}

const CONTENDERS: [Contender; 7] = [
    Contender {
        name: "nodalloc, free per node",
        run: nodalloc_per_object,
    },
    Contender {
        name: "nodalloc Heap, dropped whole",
        run: nodalloc_heap,
    },
    Contender {
        name: "nodalloc LocalHeap, dropped whole",
        run: nodalloc_local_heap,
    },
    Contender {
        name: "mimalloc, free per node",
        run: mimalloc_per_object,
    },
    Contender {
        name: "mimalloc heap, mi_heap_destroy",
        run: mimalloc_heap,
    },
    Contender {
        name: "glibc, free per node",
        run: glibc_per_object,
    },
    Contender {
        name: "bumpalo, dropped whole",
        run: bumpalo_arena,
    },
];

/// The mixed workload in a heap with a limit of `limit` bytes: `ops` operations; returns the
/// operations per second and the share of allocations that succeeded.
fn bounded(limit: usize, ops: usize) -> (f64, f64) {
    let heap = Heap::builder()
        .name("bounded")
        .limit(limit)
        .build()
        .expect("a heap");
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut live: Vec<(usize, Layout)> = Vec::with_capacity(1 << 16);
    let (mut tried, mut served) = (0u64, 0u64);
    let start = Instant::now();
    for _ in 0..ops {
        if live.is_empty() || next() % 10 < 6 {
            // 16 B to 64 KiB, log-uniform.
            let shift = 4 + next() % 13;
            let size = (1usize << shift) + (next() as usize % (1 << shift));
            let layout = Layout::from_size_align(size, 8).unwrap();
            tried += 1;
            let block = heap.alloc(layout);
            if !block.is_null() {
                served += 1;
                // SAFETY: at least 16 writable bytes.
                unsafe { block.write_bytes(1, 16) };
                live.push((block as usize, layout));
            }
        } else {
            let index = next() as usize % live.len();
            let (block, layout) = live.swap_remove(index);
            // SAFETY: a live block of the heap.
            unsafe { heap.dealloc(block as *mut u8, layout) };
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    for (block, layout) in live {
        // SAFETY: as above.
        unsafe { heap.dealloc(block as *mut u8, layout) };
    }
    (ops as f64 / seconds, served as f64 / tried as f64)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let nodes: usize = args.next().map_or(1_000_000, |a| a.parse().expect("NODES"));
    let rounds: usize = args.next().map_or(5, |a| a.parse().expect("ROUNDS"));
    let keys = keys(nodes);
    for flat in [false, true] {
        FLAT.store(flat, std::sync::atomic::Ordering::Relaxed);
        tree_table(&keys, rounds, flat);
    }
    bounded_table();
}

fn tree_table(keys: &[u64], rounds: usize, flat: bool) {
    let nodes = keys.len();
    if flat {
        println!("\n## {nodes} nodes of 32 B chained as a list (the allocations alone), then dropped (median of {rounds} rounds, interleaved)\n");
    } else {
        println!("## Tree of {nodes} nodes of 32 B (random keys): build, then drop (median of {rounds} rounds, interleaved)\n");
    }
    println!("| allocator | build (ms) | drop (ms) | build + drop (ms) |");
    println!("| --- | ---: | ---: | ---: |");
    let mut times: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); CONTENDERS.len()];
    for _ in 0..rounds {
        for (contender, (builds, drops)) in CONTENDERS.iter().zip(times.iter_mut()) {
            let (built, dropped) = (contender.run)(keys);
            builds.push(built);
            drops.push(dropped);
        }
    }
    for (contender, (builds, drops)) in CONTENDERS.iter().zip(times) {
        let totals: Vec<f64> = builds.iter().zip(&drops).map(|(b, d)| b + d).collect();
        println!(
            "| {} | {:.1} | {:.2} | {:.1} |",
            contender.name,
            median(builds) * 1e3,
            median(drops) * 1e3,
            median(totals) * 1e3
        );
    }
}

fn bounded_table() {
    println!("\n## Bounded heaps: a mixed workload (60 % allocations of 16 B – 64 KiB, 40 % frees), 2 M operations\n");
    println!("| heap limit | operations / s (M) | allocations served |");
    println!("| ---: | ---: | ---: |");
    for limit_mib in [32usize, 64, 128, 256, 512] {
        let (rate, share) = bounded(limit_mib << 20, 2_000_000);
        println!(
            "| {limit_mib} MiB | {:.2} | {:.1} % |",
            rate / 1e6,
            share * 100.0
        );
    }
}
