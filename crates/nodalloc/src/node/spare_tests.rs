//! Tests of the spares: empty bags a class keeps for its next bags (`spares.rs`,
//! `keeps_as_spare`), given back by the sweep, a purge, or another class's new bag.

use super::sweep::tests::{give_back, take, take_all};
use super::*;
use crate::arena::tests::test_arena_spares;
use crate::size_class::class_of;

/// Node 0's spare bytes, and the bags `class` has there (spares included).
fn spares_and_bags(heaps: &NodeHeaps, class: SizeClass) -> (usize, usize) {
    (
        heaps.node(NodeId(0)).spare_bytes.load(Ordering::Relaxed),
        heaps.class(NodeId(0), class).bags.load(Ordering::Relaxed),
    )
}

/// A bag that falls empty stays with its class, and the class's next new bag is that one: the
/// same objects, and no trip to the region (its span lock untaken).
#[test]
fn a_bag_that_falls_empty_is_the_next_bag_of_its_class_without_the_region() {
    let heaps = NodeHeaps::create(test_arena_spares(1, 1 << 20)).unwrap();
    let class = class_of(16 << 10, 8).unwrap();
    assert!(class.capacity() > 1);
    let objects = take(heaps, class, class.capacity());
    give_back(heaps, class, &objects);
    assert_eq!(spares_and_bags(heaps, class), (class.bag_bytes(), 1));
    let span_locks = heaps.arena.usage(0).span_locks;
    let mut again = take(heaps, class, class.capacity());
    assert_eq!(heaps.arena.usage(0).span_locks, span_locks);
    again.sort();
    let mut objects = objects;
    objects.sort();
    assert_eq!(again, objects);
    assert_eq!(spares_and_bags(heaps, class), (0, 1));
    give_back(heaps, class, &again);
}

/// A node keeps no more spare bytes than its budget: past it, a bag that falls empty goes back
/// to the region as it did without spares.
#[test]
fn spares_stay_within_the_nodes_budget() {
    let class = class_of(16 << 10, 8).unwrap();
    let heaps = NodeHeaps::create(test_arena_spares(1, class.bag_bytes())).unwrap();
    let objects = take(heaps, class, 3 * class.capacity());
    give_back(heaps, class, &objects);
    assert_eq!(spares_and_bags(heaps, class), (class.bag_bytes(), 1));
}

/// The sweep gives back the spares emptied before its pass fell due (not younger ones), and a
/// purge every spare.
#[test]
fn quiet_spares_go_back_at_the_sweep_and_every_spare_at_a_purge() {
    let heaps = NodeHeaps::create(test_arena_spares(1, 8 << 20)).unwrap();
    let class = class_of(16 << 10, 8).unwrap();
    let stamp = heaps
        .node(NodeId(0))
        .next_upkeep
        .load(Ordering::Relaxed)
        .max(1);
    let objects = take(heaps, class, class.capacity());
    give_back(heaps, class, &objects);
    assert_eq!(spares_and_bags(heaps, class), (class.bag_bytes(), 1));
    // A pass due before the stamp the return wrote (the node's next pass then): the spare is
    // younger than the pass.
    heaps.sweep_node(NodeId(0), stamp - 1, false);
    assert_eq!(spares_and_bags(heaps, class), (class.bag_bytes(), 1));
    heaps.sweep_node(NodeId(0), stamp, false);
    assert_eq!(spares_and_bags(heaps, class), (0, 0));

    let objects = take(heaps, class, class.capacity());
    give_back(heaps, class, &objects);
    assert_eq!(spares_and_bags(heaps, class), (class.bag_bytes(), 1));
    heaps.flush_all();
    assert_eq!(spares_and_bags(heaps, class), (0, 0));
}

/// A class that needs a new bag first gives other classes' spares back to the region, so a
/// program that moves from one size to another finds their spans there.
#[test]
fn another_class_needing_a_new_bag_gives_the_spares_back_first() {
    let heaps = NodeHeaps::create(test_arena_spares(1, 8 << 20)).unwrap();
    let first = class_of(16 << 10, 8).unwrap();
    let second = class_of(12 << 10, 8).unwrap();
    assert_ne!(first, second);
    let objects = take(heaps, first, first.capacity());
    give_back(heaps, first, &objects);
    assert_eq!(spares_and_bags(heaps, first), (first.bag_bytes(), 1));
    let other = take(heaps, second, 1);
    assert_eq!(spares_and_bags(heaps, first), (0, 0));
    give_back(heaps, second, &other);
}

/// The reclaim gives back the oldest spare first (the list's last, found without a walk); the
/// newer spare stays and is its class's next bag.
#[test]
fn the_oldest_spare_goes_back_first() {
    let heaps = NodeHeaps::create(test_arena_spares(1, 8 << 20)).unwrap();
    let first = class_of(16 << 10, 8).unwrap();
    let second = class_of(12 << 10, 8).unwrap();
    assert!(second.bag_bytes() <= first.bag_bytes());
    let older = take(heaps, first, first.capacity());
    let newer = take(heaps, first, first.capacity());
    give_back(heaps, first, &older);
    give_back(heaps, first, &newer);
    assert_eq!(spares_and_bags(heaps, first), (2 * first.bag_bytes(), 2));
    let other = take(heaps, second, 1);
    assert_eq!(spares_and_bags(heaps, first), (first.bag_bytes(), 1));
    let mut again = take(heaps, first, first.capacity());
    again.sort();
    let mut newer = newer;
    newer.sort();
    assert_eq!(again, newer, "the newer spare stayed");
    give_back(heaps, first, &again);
    give_back(heaps, second, &other);
}

/// Under a commit limit a bag that falls empty goes back at once: the memory a free gives back
/// must be there for any allocation, a large block or another class's bag.
#[test]
fn no_spares_are_kept_under_a_commit_limit() {
    let heaps = NodeHeaps::create(test_arena_spares(1, 8 << 20)).unwrap();
    heaps.set_limit(48 << 20);
    let class = class_of(16 << 10, 8).unwrap();
    let objects = take(heaps, class, class.capacity());
    give_back(heaps, class, &objects);
    assert_eq!(spares_and_bags(heaps, class), (0, 0));
}

/// Spares never make a large block fail: with the region full of them, a large block the
/// region refuses gets their spans back; so does another class that fills the region.
#[test]
fn a_region_full_of_spares_gives_them_back_before_refusing() {
    let heaps = NodeHeaps::create(test_arena_spares(1, usize::MAX)).unwrap();
    let class = class_of(16 << 10, 8).unwrap();
    // Every bag the region can hold, taken a bag at a time, then all given back: spares.
    let objects = take_all(heaps, class);
    let bags = heaps.class(NodeId(0), class).bags.load(Ordering::Relaxed);
    assert!(bags > 8, "the region held {bags} bags");
    give_back(heaps, class, &objects);
    assert_eq!(
        heaps.node(NodeId(0)).spare_bytes.load(Ordering::Relaxed),
        bags * class.bag_bytes(),
        "every bag is a spare"
    );
    let large = heaps.alloc_large(NodeId(0), 4 << 20, 8);
    assert!(!large.is_null(), "the spares went back for a large block");
    assert_eq!(heaps.node(NodeId(0)).spare_bytes.load(Ordering::Relaxed), 0);
    heaps.free_large(large as usize);
    // Spares again, then another class's bags fill the region: its new bags take them back.
    let objects = take(heaps, class, bags * class.capacity() / 2);
    give_back(heaps, class, &objects);
    assert!(heaps.node(NodeId(0)).spare_bytes.load(Ordering::Relaxed) > 0);
    let other = class_of(1 << 10, 8).unwrap();
    let mut taken = 0;
    while let Some(batch) =
        heaps.take_from_bags(NodeId(0), Partition::DEFAULT, other, other.capacity())
    {
        taken += batch.count;
    }
    assert_eq!(heaps.node(NodeId(0)).spare_bytes.load(Ordering::Relaxed), 0);
    assert!(taken * other.size() > bags * class.bag_bytes() / 2);
}

/// A new bag the region refuses after its class's reclaim (a bag's bytes of other classes'
/// spares, whose spans lay apart) reclaims every other spare and is tried once more: spares
/// never make a small allocation fail either.
#[test]
fn a_new_bag_refused_after_the_reclaim_gets_every_spare_back() {
    let heaps = NodeHeaps::create(test_arena_spares(1, usize::MAX)).unwrap();
    let classes = (0..NUM_CLASSES).map(|index| SizeClass(index as u8));
    let small = (classes.clone())
        .min_by_key(|class| (class.bag_units(), usize::MAX - class.size()))
        .unwrap();
    let big = classes.max_by_key(|class| class.bag_units()).unwrap();
    assert!(big.bag_units() >= 2 * small.bag_units());
    // Every bag of `small` the region can hold, its objects grouped by bag.
    let mut bags: std::collections::BTreeMap<usize, Vec<*mut u8>> = Default::default();
    while let Some(batch) =
        heaps.take_from_bags(NodeId(0), Partition::DEFAULT, small, small.capacity())
    {
        let mut object = batch.head;
        while !object.is_null() {
            bags.entry(object as usize / small.bag_bytes())
                .or_default()
                .push(object);
            // SAFETY: walking a batch the test holds.
            object = unsafe { crate::ds::next_of(object) };
        }
    }
    assert!(bags.len() > 2 * big.bag_units() / small.bag_units());
    // Every other bag falls empty first: the oldest spares, none beside another.
    let (first, second): (Vec<_>, Vec<_>) =
        bags.values().enumerate().partition(|(i, _)| i % 2 == 0);
    for (_, objects) in first.into_iter().chain(second) {
        give_back(heaps, small, objects);
    }
    assert_eq!(
        heaps.node(NodeId(0)).spare_bytes.load(Ordering::Relaxed),
        bags.len() * small.bag_bytes(),
        "every bag is a spare"
    );
    let batch = heaps.take_from_bags(NodeId(0), Partition::DEFAULT, big, 1);
    let batch = batch.expect("a bag of the big class over the spares' spans");
    assert_eq!(batch.count, 1);
    assert_eq!(heaps.class(NodeId(0), big).bags.load(Ordering::Relaxed), 1);
    give_back(heaps, big, &[batch.head]);
}
