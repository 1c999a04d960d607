//! Tests of the transfer rings: their byte budget, the budgets that follow a flow and grow
//! together within the node's, a wrapped count, a large block taking the span of a bag the
//! rings kept, and the shared-operation counts.

use super::*;
use crate::arena::tests::test_arena;
use crate::ds::{next_of, set_next};
use crate::size_class::class_of;
use core::ptr::null_mut;

/// A transfer ring holds at most `ring_objects` objects, however large the batches released
/// to it (a grown thread list cuts many batches' worth at once); the rest goes to the bags, and
/// every object is accounted for.
#[test]
fn a_ring_holds_no_more_than_its_byte_budget_whatever_the_batch_sizes() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
    let class = class_of(8192, 8).unwrap();
    let bound = ring_objects(class);
    let class_heap = heaps.class(NodeId(0), class);
    let ring = heaps.ring_in(NodeId(0), Partition::DEFAULT, class);
    for count in [
        1,
        class.batch(),
        3 * class.batch(),
        bound,
        bound + 1,
        10 * class.batch(),
    ] {
        let batch = heaps
            .take_from_bags(NodeId(0), Partition::DEFAULT, class, count)
            .unwrap();
        // A batch from the bags may be short; count what it holds.
        let mut held = 0;
        let mut object = batch.head;
        while !object.is_null() {
            held += 1;
            // SAFETY: walking the batch we were handed.
            object = unsafe { next_of(object) };
        }
        heaps.release(
            NodeId(0),
            Partition::DEFAULT,
            class,
            Batch {
                count: held,
                ..batch
            },
        );
        let in_ring = ring.in_ring.load(Ordering::Relaxed);
        assert!(
            in_ring <= bound,
            "{in_ring} objects in a ring bounded by {bound}"
        );
    }
    assert!(
        ring.in_ring.load(Ordering::Relaxed) > 0,
        "the ring took nothing"
    );
    heaps.flush_all();
    assert_eq!(ring.in_ring.load(Ordering::Relaxed), 0);
    assert_eq!(class_heap.out_of_bags.load(Ordering::Relaxed), 0);
}

/// A large block the region refuses while a ring holds the objects of a bag gets their span:
/// the rings go back to their bags before the refusal (under `RLIMIT_AS` the big classes'
/// rings held 11 MiB of a 128 MiB region when a 4 MiB block found no hole).
#[test]
fn a_large_block_the_region_refuses_gets_the_span_of_a_bag_the_rings_kept() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
    let class = class_of(16 << 10, 8).unwrap();
    let mut objects: Vec<usize> = super::sweep::tests::take_all(heaps, class)
        .into_iter()
        .map(|object| object as usize)
        .collect();
    assert!(
        heaps.arena.alloc_span(0, 1, 1, SpanUse::Large).is_none(),
        "the region is full"
    );
    // One bag's objects, every one of them, into the ring.
    objects.sort_unstable();
    let bag: Vec<usize> = objects[..class.capacity()].to_vec();
    assert!(class.capacity() <= ring_objects(class));
    let mut head = null_mut();
    for &object in bag.iter().rev() {
        // SAFETY: the test holds the object; it links it into its batch.
        unsafe { set_next(object as *mut u8, head) };
        head = object as *mut u8;
    }
    let batch = Batch {
        head,
        tail: *bag.last().unwrap() as *mut u8,
        count: bag.len(),
    };
    heaps.release(NodeId(0), Partition::DEFAULT, class, batch);
    let ring = heaps.ring_in(NodeId(0), Partition::DEFAULT, class);
    assert_eq!(ring.in_ring.load(Ordering::Relaxed), bag.len());
    assert!(heaps.arena.alloc_span(0, 1, 1, SpanUse::Large).is_none());
    let large = heaps.alloc_large(NodeId(0), class.bag_bytes(), 8);
    assert_eq!(
        large as usize, bag[0],
        "the bag's span, given back by the ring"
    );
    assert_eq!(ring.in_ring.load(Ordering::Relaxed), 0);
    heaps.free_large(large as usize);
}

/// Takes `count` objects of `class` from node 0's bags and releases them as a thread's drained
/// batch would be (into the ring, or back to the bags when the ring refuses them).
fn release_from_bags(heaps: &NodeHeaps, class: SizeClass, count: usize) {
    let batch = heaps
        .take_from_bags(NodeId(0), Partition::DEFAULT, class, count)
        .unwrap();
    assert_eq!(batch.count, count);
    heaps.release(NodeId(0), Partition::DEFAULT, class, batch);
}

/// A ring's budget grows while threads overflow it and others take from it (doubling per
/// refusal that follows a pop, up to `ring_objects_max`), never without a taker, and falls back
/// to the base one halving per upkeep pass that saw no refusal.
#[test]
fn a_rings_budget_follows_a_flow_from_freeing_to_allocating_threads() {
    let heaps = NodeHeaps::create(test_arena(1, 256 << 20, 0)).unwrap();
    let class = class_of(64, 8).unwrap();
    let (base, max) = (ring_objects(class), ring_objects_max(class));
    assert!(max >= 4 * base, "{base} .. {max}");
    let class_heap = heaps.class(NodeId(0), class);
    let ring = heaps.ring_in(NodeId(0), Partition::DEFAULT, class);
    let in_ring = || ring.in_ring.load(Ordering::Relaxed);
    let release = |count: usize| release_from_bags(heaps, class, count);
    let step = class.batch();
    // Only frees: the ring fills to its base budget and stays there.
    for _ in 0..2 * base / step {
        release(step);
    }
    assert!(
        in_ring() <= base && in_ring() + step > base,
        "{}",
        in_ring()
    );
    assert_eq!(ring.budget(class), base);
    // A taker: each refusal after a pop doubles the budget, and the refused batch goes in.
    let mut budgets = vec![base];
    for _ in 0..16 {
        let taken = heaps
            .ring_refill(NodeId(0), Partition::DEFAULT, class)
            .unwrap();
        while in_ring() + step <= ring.budget(class).min(RING_SLOTS * step) {
            release(step);
        }
        let before = in_ring();
        release(step);
        assert!(in_ring() <= ring.budget(class));
        if ring.budget(class) > *budgets.last().unwrap() {
            // (Unless the ring's slots are what refused it.)
            assert!(
                in_ring() == before + step || before + step > RING_SLOTS * step,
                "the refused batch was not offered again: {before} -> {}",
                in_ring()
            );
            budgets.push(ring.budget(class));
        }
        // SAFETY: the popped batch's objects are ours, of `class`, from node 0.
        if let Err((object, misuse)) = heaps.return_to_bags(NodeId(0), class, taken.head, false) {
            panic!("{object:?}: {misuse:?}");
        }
    }
    assert!(budgets.len() >= 3, "the budget did not grow: {budgets:?}");
    assert!(budgets.windows(2).all(|w| w[1] == (2 * w[0]).min(max)));
    assert!(*budgets.last().unwrap() <= max);
    // The flow stops: each upkeep pass without a refusal halves the budget, down to the base.
    let grown = ring.budget(class);
    let period = upkeep_period(heaps.arena.decommit.delay_ns);
    let mut now = heaps.node(NodeId(0)).next_upkeep.load(Ordering::Relaxed) + 1;
    let mut passes = 0;
    while ring.budget(class) > base {
        heaps.upkeep(NodeId(0), now);
        now += period + 1;
        passes += 1;
        assert!(passes <= 8, "the budget did not decay");
    }
    assert!(passes >= 1 && grown > base);
    assert_eq!(ring.budget.load(Ordering::Relaxed), 0);
    heaps.flush_all();
    assert_eq!(class_heap.out_of_bags.load(Ordering::Relaxed), 0);
}

/// Flows through the rings of many classes at once grow their budgets together by at most
/// `NODE_RING_GROWN_BYTES`: the first classes' rings reach their most, a later one stays
/// nearer its base, and the node's count of grown bytes is what the budgets add to their bases,
/// back to zero once the upkeep passes have decayed every budget.
#[test]
fn the_rings_of_a_node_grow_together_within_the_nodes_budget() {
    let heaps = NodeHeaps::create(test_arena(1, 512 << 20, 0)).unwrap();
    let node = NodeId(0);
    let classes: Vec<SizeClass> = [2048, 4096, 8192, 16384]
        .iter()
        .map(|&size| class_of(size, 8).unwrap())
        .collect();
    let grown = &heaps.node(node).ring_grown_bytes;
    let counted = || {
        classes
            .iter()
            .map(|&class| {
                let ring = heaps.ring_in(node, Partition::DEFAULT, class);
                (ring.budget(class) - ring_objects(class)) * class.size()
            })
            .sum::<usize>()
    };
    for &class in &classes {
        let ring = heaps.ring_in(node, Partition::DEFAULT, class);
        let step = class.batch();
        let release = || release_from_bags(heaps, class, step);
        for _ in 0..12 {
            // A taker, then a refused batch: the budget doubles if the node's budget allows.
            while ring.in_ring.load(Ordering::Relaxed) + step <= ring.budget(class) {
                release();
            }
            let taken = heaps.ring_refill(node, Partition::DEFAULT, class).unwrap();
            if let Err((object, misuse)) = heaps.return_to_bags(node, class, taken.head, false) {
                panic!("{object:?}: {misuse:?}");
            }
            release();
            release();
            assert!(grown.load(Ordering::Relaxed) <= NODE_RING_GROWN_BYTES);
            assert_eq!(grown.load(Ordering::Relaxed), counted());
        }
    }
    let first = classes[0];
    assert_eq!(
        heaps.ring_in(node, Partition::DEFAULT, first).budget(first),
        ring_objects_max(first)
    );
    let last = *classes.last().unwrap();
    assert!(heaps.ring_in(node, Partition::DEFAULT, last).budget(last) < ring_objects_max(last));
    assert!(grown.load(Ordering::Relaxed) > NODE_RING_GROWN_BYTES / 2);
    let period = upkeep_period(heaps.arena.decommit.delay_ns);
    let mut now = heaps.node(node).next_upkeep.load(Ordering::Relaxed) + 1;
    for _ in 0..16 {
        heaps.upkeep(node, now);
        now += period + 1;
        assert_eq!(grown.load(Ordering::Relaxed), counted());
    }
    assert_eq!(grown.load(Ordering::Relaxed), 0);
    heaps.flush_all();
}

/// The ring's object count is a hint that a pop's subtraction can leave briefly below zero
/// (wrapped); a release that reads it then must neither overflow nor lose its batch.
#[test]
fn a_release_that_reads_a_wrapped_ring_count_keeps_its_batch() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
    let class = class_of(64, 8).unwrap();
    let class_heap = heaps.class(NodeId(0), class);
    let ring = heaps.ring_in(NodeId(0), Partition::DEFAULT, class);
    let batch = heaps
        .take_from_bags(NodeId(0), Partition::DEFAULT, class, class.batch())
        .unwrap();
    ring.in_ring.store(usize::MAX, Ordering::Relaxed);
    heaps.release(NodeId(0), Partition::DEFAULT, class, batch);
    ring.in_ring.fetch_add(1, Ordering::Relaxed);
    heaps.flush_all();
    assert_eq!(class_heap.out_of_bags.load(Ordering::Relaxed), 0);
}

/// The node heap's shared-operation counters (`SharedOps`), read as one array.
fn shared_ops(heaps: &NodeHeaps, node: NodeId) -> [u64; 11] {
    let ops = &heaps.node(node).ops;
    [
        &ops.class_locks,
        &ops.contended_locks,
        &ops.ring_pushes,
        &ops.ring_pops,
        &ops.ring_retries,
        &ops.inbox_pushes,
        &ops.inbox_takes,
        &ops.bag_objects_taken,
        &ops.bag_objects_returned,
        &ops.heaps_attached,
        &ops.heaps_retired,
    ]
    .map(|counter| counter.load(Ordering::Relaxed))
}

/// What each step added to the counters since `before` (and moves `before` on).
fn ops_added(heaps: &NodeHeaps, before: &mut [u64; 11], span_locks: &mut u64) -> [u64; 12] {
    let now = shared_ops(heaps, NodeId(0));
    let spans = heaps.arena.usage(0).span_locks;
    let mut added = [0; 12];
    for (index, (now, before)) in now.iter().zip(before.iter()).enumerate() {
        added[index] = now - before;
    }
    added[11] = spans - *span_locks;
    (*before, *span_locks) = (now, spans);
    added
}

/// Each shared-structure operation of a single thread counts exactly once: a refill from a
/// new bag takes the class lock and a span lock once and a batch of objects out of the bag;
/// a release to the ring is one push, a ring refill one pop; a return to the bags takes the
/// class lock once and returns every object (and the emptied bag's span lock); a remote free
/// is one inbox push, and its sorting one take with one class lock. Nobody else runs, so
/// nothing is contended and no ring operation retries; the snapshot reports the same figures.
#[test]
fn shared_operations_are_counted_once_each_with_their_objects() {
    // Order of `ops_added`: class locks, contended, ring pushes, ring pops, ring retries, inbox
    // pushes, inbox takes, objects taken, objects returned, heaps attached, retired, span locks.
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
    let node = NodeId(0);
    let class = class_of(64, 8).unwrap();
    let want = class.batch();
    let (mut before, mut spans) = ([0; 11], 0);
    assert_eq!(ops_added(heaps, &mut before, &mut spans), [0; 12]);

    let batch = heaps
        .take_from_bags(node, Partition::DEFAULT, class, want)
        .unwrap();
    assert_eq!(batch.count, want);
    let taken = want as u64;
    assert_eq!(
        ops_added(heaps, &mut before, &mut spans),
        [1, 0, 0, 0, 0, 0, 0, taken, 0, 0, 0, 1],
        "a refill from a new bag"
    );

    heaps.release(node, Partition::DEFAULT, class, batch);
    assert_eq!(
        ops_added(heaps, &mut before, &mut spans),
        [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        "a release into the ring"
    );
    let popped = heaps.ring_refill(node, Partition::DEFAULT, class).unwrap();
    assert_eq!(popped, batch);
    assert!(heaps.ring_refill(node, Partition::DEFAULT, class).is_none());
    assert_eq!(
        ops_added(heaps, &mut before, &mut spans),
        [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
        "a refill from the ring (then an empty ring, not a pop)"
    );

    // Half the batch to the inbox, as another node's thread would send it, half to the bags.
    let mut split = batch.head;
    for _ in 1..want / 2 {
        // SAFETY: walking the batch we hold.
        split = unsafe { next_of(split) };
    }
    // SAFETY: as above; `split` is inside the batch.
    let rest = unsafe { next_of(split) };
    // SAFETY: `split` is ours; the first half now ends there.
    unsafe { set_next(split, null_mut()) };
    // SAFETY: a well-formed chain of freed objects of node 0, ours to give.
    unsafe { heaps.send_remote(node, rest, batch.tail, want - want / 2) };
    assert_eq!(
        ops_added(heaps, &mut before, &mut spans),
        [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
        "a remote free's chain"
    );
    heaps
        .return_to_bags(node, class, batch.head, false)
        .unwrap();
    let half = (want / 2) as u64;
    assert_eq!(
        ops_added(heaps, &mut before, &mut spans),
        [1, 0, 0, 0, 0, 0, 0, 0, half, 0, 0, 0],
        "a return to the bags"
    );
    heaps.drain_inbox(node);
    heaps.drain_inbox(node);
    // The bag's last objects come back: it goes to the region under its span lock.
    assert_eq!(
        ops_added(heaps, &mut before, &mut spans),
        [1, 0, 0, 0, 0, 0, 1, 0, taken - half, 0, 0, 1],
        "an inbox sorted into the bags (then an empty inbox, not a take)"
    );

    let stats = heaps.collect_stats(0);
    let node_stats = &stats.nodes()[0].shared;
    assert_eq!(
        [
            node_stats.class_locks,
            node_stats.ring_pushes,
            node_stats.ring_pops,
            node_stats.inbox_pushes,
            node_stats.inbox_takes,
            node_stats.bag_objects_taken,
            node_stats.bag_objects_returned,
            node_stats.span_locks,
        ],
        [3, 1, 1, 1, 1, taken, taken, spans]
    );
    assert_eq!(
        (stats.shared.class_locks, stats.shared.span_locks),
        (3, spans)
    );
    assert_eq!(node_stats.contended_locks + node_stats.ring_retries, 0);
}
