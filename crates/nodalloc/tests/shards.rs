//! Ring shards through the Rust face (`NODALLOC_RING_SHARDS`): 64 threads of one node hand
//! objects around a ring of threads, each object checked by the thread that frees it, and the
//! node's ring traffic spreads over its shards by the CPUs the threads run on. Each scenario
//! runs in a child process of this binary (options are read once, at the first allocation),
//! with nodalloc as its global allocator.

use nodalloc::NodAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc;

#[global_allocator]
static GLOBAL: NodAlloc = NodAlloc::new();

mod common;
use common::{expect_child, Rng};

const THREADS: usize = 64;
const ROUNDS: usize = 200;
const PER_ROUND: usize = 200;

/// The word an object of `size` at `address` holds at both ends while it travels.
fn pattern(address: usize, size: usize) -> u64 {
    (address as u64).rotate_left(17) ^ size as u64 ^ 0x5EED_0F5A_4D5E_11A5
}

/// Allocates and fills `PER_ROUND` objects of assorted small sizes.
fn make(rng: &mut Rng) -> Vec<(usize, usize)> {
    (0..PER_ROUND)
        .map(|_| {
            let size = 16 + (rng.next() % 2048) as usize;
            let layout = Layout::from_size_align(size, 8).unwrap();
            // SAFETY: a non-zero size.
            let p = unsafe { GLOBAL.alloc(layout) };
            assert!(!p.is_null());
            let word = pattern(p as usize, size);
            // SAFETY: both words lie inside the block just allocated (size >= 16, 8-aligned).
            unsafe {
                (p as *mut u64).write(word);
                (p.add((size - 8) & !7) as *mut u64).write(word);
            }
            (p as usize, size)
        })
        .collect()
}

/// Checks and frees objects another thread made.
fn check_and_free(objects: Vec<(usize, usize)>) {
    for (address, size) in objects {
        let p = address as *mut u8;
        let word = pattern(address, size);
        // SAFETY: a live block of `size` handed over by its maker, freed once here.
        unsafe {
            assert_eq!(
                (p as *const u64).read(),
                word,
                "{address:#x} damaged at its start"
            );
            assert_eq!(
                (p.add((size - 8) & !7) as *const u64).read(),
                word,
                "{address:#x} damaged at its end"
            );
            GLOBAL.dealloc(p, Layout::from_size_align(size, 8).unwrap());
        }
    }
}

/// 64 threads in a ring: each makes objects and sends them to the next, which checks and frees
/// them; then the node's ring traffic, per shard.
fn sixty_four_threads_pass_objects_around() {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS)
        .map(|_| mpsc::sync_channel::<Vec<(usize, usize)>>(4))
        .unzip();
    std::thread::scope(|scope| {
        for (index, receiver) in receivers.into_iter().enumerate() {
            let next = senders[(index + 1) % THREADS].clone();
            scope.spawn(move || {
                let mut rng = Rng(0x9E37_79B9 + index as u64);
                for _ in 0..ROUNDS {
                    next.send(make(&mut rng)).unwrap();
                    check_and_free(receiver.recv().unwrap());
                }
            });
        }
    });
    let stats = nodalloc::stats();
    let node = &stats.nodes()[0];
    assert_eq!(node.ring_shards, 2, "NODALLOC_RING_SHARDS=2");
    let shards = &node.shard_ring_operations[..node.ring_shards];
    let total: u64 = shards.iter().sum();
    assert!(total >= 1000, "only {total} batches went through the rings");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus >= 2 {
        for (shard, &count) in shards.iter().enumerate() {
            assert!(
                count * 20 >= total,
                "shard {shard} carried {count} of {total} batches: the CPUs did not share the rings"
            );
        }
    }
    eprintln!("spread ok: {cpus} CPUs, batches per shard {shards:?}");
}

#[test]
fn child_entry() {
    let Ok(scenario) = std::env::var("NODALLOC_TEST_CHILD") else {
        return;
    };
    match scenario.as_str() {
        "spread" => sixty_four_threads_pass_objects_around(),
        other => panic!("unknown scenario {other}"),
    }
}

#[test]
fn sixty_four_threads_of_one_node_check_every_object_and_share_the_ring_shards() {
    let stderr = expect_child("spread", &[("NODALLOC_RING_SHARDS", "2")], "spread ok");
    eprintln!(
        "{}",
        stderr.lines().find(|l| l.contains("spread ok")).unwrap()
    );
}
