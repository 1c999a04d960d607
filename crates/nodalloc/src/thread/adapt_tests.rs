//! Tests of the adaptive cache limits (`adapt.rs`): bursts freed again settle in the thread's
//! list, the classes of 1–4 KiB keep their base limit, a class used both ways grows its limit
//! and its refills, a burst bigger than the list cycles through the ring, and grown limits stay
//! within their bounds under random traffic.

use super::adapt::THREAD_GROWN_BYTES;
use super::cache::{cache_limit_max, GROWN_CLASS_MAX};
use super::tests::{allocate, assert_list_consistent, attached_without_upkeep, heaps, xorshift};
use super::*;
use crate::node::DENSE_OBJECT_MAX;
use crate::size_class::class_of;
use core::sync::atomic::Ordering;

/// Sum over classes of what the grown limits add, in bytes.
fn grown_bytes(heap: &ThreadHeap) -> usize {
    (0..NUM_CLASSES)
        .map(|index| SizeClass(index as u8))
        // An unconfigured list (a class the heap has not used) has grown nothing.
        .filter(|class| class.cache_limit() != 0 && heap.lists[class.index()].is_configured())
        .map(|class| (heap.lists[class.index()].limit() - class.cache_limit()) * class.size())
        .sum()
}

/// `rounds` times: `heap` allocates `objects` objects of `class`, then frees them all in
/// allocation order; per round, how far `count` moved (and the list checked after each).
fn burst_rounds(
    heap: &mut ThreadHeap,
    class: SizeClass,
    objects: usize,
    rounds: usize,
    count: impl Fn() -> u64,
) -> Vec<u64> {
    (0..rounds)
        .map(|_| {
            let before = count();
            let burst: Vec<*mut u8> = (0..objects).map(|_| allocate(heap, class)).collect();
            for &object in &burst {
                // SAFETY: allocated above, freed once.
                unsafe { heap.free(object, class) };
            }
            assert_list_consistent(heap, class);
            count() - before
        })
        .collect()
}

/// A thread that allocates a burst of 900 blocks and frees them all, round after round, soon
/// keeps the whole burst in its list (a limit of 1 024 at most for 64 B): once the list has
/// overflowed, every refill grows the limit, so the frees stop cutting batches to the node's
/// ring. (Growing only at the first refill after a cut, the limit lost more to the frees' cuts
/// than it gained, and every round went through the ring.) A thread that only allocates never
/// grows its limit.
#[test]
fn bursts_freed_again_settle_in_the_threads_list_and_a_producer_never_grows() {
    let heaps = heaps(1);
    let mut heap = attached_without_upkeep(heaps, NodeId(0));
    let class = class_of(64, 8).unwrap();
    let ops = &heaps.node(NodeId(0)).ops;
    let pushes_per_round = burst_rounds(&mut heap, class, 900, 12, || {
        ops.ring_pushes.load(Ordering::Relaxed)
    });
    assert!(pushes_per_round[0] > 0, "{pushes_per_round:?}");
    assert!(
        pushes_per_round[6..].iter().all(|&n| n == 0),
        "{pushes_per_round:?}"
    );
    assert!(heap.lists[class.index()].limit() >= 900);

    let mut producer = attached_without_upkeep(heaps, NodeId(0));
    let held: Vec<*mut u8> = (0..2000).map(|_| allocate(&mut producer, class)).collect();
    assert_eq!(producer.lists[class.index()].limit(), class.cache_limit());
    for object in held {
        // SAFETY: allocated above, freed once.
        unsafe { heap.free(object, class) };
    }
}

/// The classes of 1 KiB to a page and a line keep their base limit under the traffic that
/// grows a smaller class's (each round allocates three base limits and frees them all): their
/// two batches of 32 KiB already fit the transfer ring, and a longer list would only keep
/// objects from the threads that want them (see `GROWN_CLASS_MAX`).
#[test]
fn the_classes_of_one_to_four_kib_keep_their_base_limit_when_used_both_ways() {
    let heaps = heaps(1);
    let mut heap = attached_without_upkeep(heaps, NodeId(0));
    let small = class_of(GROWN_CLASS_MAX, 8).unwrap();
    assert_eq!(small.size(), GROWN_CLASS_MAX);
    let medium: Vec<SizeClass> = (0..NUM_CLASSES)
        .map(|index| SizeClass(index as u8))
        .filter(|class| class.size() > GROWN_CLASS_MAX && class.size() <= DENSE_OBJECT_MAX)
        .collect();
    assert!(medium.len() > 8, "{} classes of 1-4 KiB", medium.len());
    for &class in &medium {
        assert_eq!(
            cache_limit_max(class),
            class.cache_limit(),
            "{} B",
            class.size()
        );
    }
    for class in medium.iter().copied().step_by(3).chain([small]) {
        let base = class.cache_limit();
        for _ in 0..6 {
            let objects: Vec<*mut u8> = (0..3 * base).map(|_| allocate(&mut heap, class)).collect();
            for object in objects {
                // SAFETY: allocated above, freed once.
                unsafe { heap.free(object, class) };
            }
            assert_list_consistent(&heap, class);
        }
        let limit = heap.lists[class.index()].limit();
        if class == small {
            assert!(
                limit > base,
                "{} B: limit {limit} did not grow",
                class.size()
            );
        } else {
            assert_eq!(limit, base, "{} B: limit grew", class.size());
        }
    }
    heap.flush();
}

/// A class whose list overflows and runs dry in turn keeps more objects, and takes half its
/// grown limit from the bags at a refill (a class used both ways goes to the class lock less
/// often); flushing the heap puts every limit back to its base and gives the node's budget back.
#[test]
fn a_class_used_both_ways_grows_its_limit_and_its_refills_until_the_heap_is_flushed() {
    let heaps = heaps(1);
    let mut heap = attached_without_upkeep(heaps, NodeId(0));
    let class = class_of(1024, 8).unwrap();
    let base = class.cache_limit();
    for round in 0..6 {
        let objects: Vec<*mut u8> = (0..3 * base).map(|_| allocate(&mut heap, class)).collect();
        for &object in &objects {
            // SAFETY: allocated above, freed once.
            unsafe { heap.free(object, class) };
        }
        assert_list_consistent(&heap, class);
        let limit = heap.lists[class.index()].limit();
        assert!(limit <= cache_limit_max(class));
        if round > 0 {
            assert!(limit > base, "round {round}: limit {limit} did not grow");
        }
    }
    // Empty the list and the ring: the next refill comes from the bags.
    let limit = heap.lists[class.index()].limit();
    let mut held: Vec<*mut u8> = (0..heap.lists[class.index()].len())
        .map(|_| allocate(&mut heap, class))
        .collect();
    heaps.flush_all();
    held.push(allocate(&mut heap, class));
    assert_eq!(heap.lists[class.index()].len(), limit / 2 - 1);
    for object in held {
        // SAFETY: allocated above, freed once.
        unsafe { heap.free(object, class) };
    }
    let budget = &heaps.node(NodeId(0)).grown_cache_bytes;
    assert_eq!(heap.grown_bytes, grown_bytes(&heap));
    assert_eq!(budget.load(Ordering::Relaxed), heap.grown_bytes);
    assert!(heap.grown_bytes > 0);
    heap.flush();
    assert_eq!(heap.lists[class.index()].limit(), base);
    assert_eq!(heap.grown_bytes, 0);
    assert_eq!(budget.load(Ordering::Relaxed), 0);
}

/// A thread that allocates a thousand 4 KiB objects and then frees them all, round after round
/// (4 MiB, far more than its list keeps), parks what overflows its list in the node's ring once
/// the ring's budget has grown to the flow: a later round neither takes an object from the bags
/// nor returns one to them (a bag that falls empty would go back to its pool, and the next round
/// would carve it again).
#[test]
fn a_burst_bigger_than_the_list_cycles_through_the_ring_not_the_bags() {
    let heaps = heaps(1);
    let mut heap = attached_without_upkeep(heaps, NodeId(0));
    let class = class_of(4096, 8).unwrap();
    let ops = &heaps.node(NodeId(0)).ops;
    let through_bags = || {
        ops.bag_objects_taken.load(Ordering::Relaxed)
            + ops.bag_objects_returned.load(Ordering::Relaxed)
    };
    let per_round = burst_rounds(&mut heap, class, 1000, 12, through_bags);
    assert!(per_round[0] >= 1000, "{per_round:?}");
    assert!(per_round[8..].iter().all(|&n| n == 0), "{per_round:?}");
}

/// Random traffic over every cached class: lists stay consistent and within their limits,
/// limits within their bounds, and the grown bytes within the thread's budget, counted the
/// same by the heap and the node.
#[test]
fn grown_limits_stay_within_their_bounds_under_random_traffic() {
    let heaps = heaps(1);
    let mut heap = attached_without_upkeep(heaps, NodeId(0));
    let classes: Vec<SizeClass> = (0..NUM_CLASSES)
        .map(|index| SizeClass(index as u8))
        .filter(|class| class.cache_limit() != 0)
        .collect();
    let mut live: Vec<Vec<*mut u8>> = vec![Vec::new(); NUM_CLASSES];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for step in 0..200_000 {
        xorshift(&mut rng);
        let class = classes[(rng >> 8) as usize % classes.len()];
        let objects = &mut live[class.index()];
        // Drift: each class's live count wanders up and down in bursts of a batch or more.
        let burst = 1 + (rng >> 40) as usize % (3 * class.batch());
        // Each class's live bytes stay under 512 KiB, so the test's region never runs out.
        let full = (objects.len() + burst) * class.size() > 512 << 10;
        let freed = ((rng >> 20) % 2 != 0 || full) && !objects.is_empty();
        if !freed {
            for _ in 0..burst {
                let object = allocate(&mut heap, class);
                assert!(!object.is_null());
                objects.push(object);
            }
        } else {
            for _ in 0..burst.min(objects.len()) {
                let object = objects.pop().unwrap();
                // SAFETY: allocated above, freed once.
                unsafe { heap.free(object, class) };
            }
        }
        // A free leaves the list within its limit; a refill may bring a batch another grown
        // list cut (up to the class's largest limit), which the next free cuts back.
        let list = &heap.lists[class.index()];
        assert!(
            list.len() <= cache_limit_max(class),
            "{} B: list too long",
            class.size()
        );
        if freed {
            assert!(
                list.len() <= list.limit(),
                "{} B over its limit",
                class.size()
            );
        }
        assert!(list.limit() >= class.cache_limit() && list.limit() <= cache_limit_max(class));
        assert!(heap.grown_bytes <= THREAD_GROWN_BYTES);
        // Every step where the list is nearly empty (its tail recorded by a slow push).
        if step % 4096 == 0 || list.len() <= 2 {
            assert_list_consistent(&heap, class);
            assert_eq!(heap.grown_bytes, grown_bytes(&heap));
        }
    }
    let budget = &heaps.node(NodeId(0)).grown_cache_bytes;
    assert_eq!(budget.load(Ordering::Relaxed), heap.grown_bytes);
    assert!(heap.grown_bytes > 0, "no class grew under drifting traffic");
    for (index, objects) in live.iter().enumerate() {
        for &object in objects {
            // SAFETY: allocated above, freed once.
            unsafe { heap.free(object, SizeClass(index as u8)) };
        }
    }
    heap.flush();
    assert_eq!(budget.load(Ordering::Relaxed), 0);
    heaps.flush_all();
    for class in classes {
        assert_eq!(
            heaps
                .class(NodeId(0), class)
                .out_of_bags
                .load(Ordering::Relaxed),
            0,
            "{} B: objects are missing from the bags",
            class.size()
        );
    }
}
