//! Tests of the sweep (`sweep.rs`): free pages inside quiet bags go back to the OS and their
//! objects are handed out again, busy bags are left alone, live objects never touched; and
//! the helpers that take and give back a class's objects (the node layer's other tests use
//! them).

use super::*;
use crate::arena::tests::test_arena;
use crate::ds::{next_of, set_next};
use crate::node::{upkeep_period, Misuse, Partition};
use crate::size_class::class_of;
use core::ptr::null_mut;
use std::collections::HashSet;

/// Whether the page holding `address` is resident.
fn resident(address: usize) -> bool {
    let page = address & !(PAGE_SIZE - 1);
    let mut vec = 0u8;
    // SAFETY: `page` is page aligned inside a mapping of ours; one byte of output.
    let result = unsafe { libc::mincore(page as *mut libc::c_void, PAGE_SIZE, &mut vec) };
    assert_eq!(result, 0);
    vec & 1 != 0
}

/// Every object of `class` node 0's region can hold, taken a bag at a time, until the
/// region refuses a bag.
pub(in crate::node) fn take_all(heaps: &NodeHeaps, class: SizeClass) -> Vec<*mut u8> {
    let mut objects = Vec::new();
    while let Some(batch) =
        heaps.take_from_bags(NodeId(0), Partition::DEFAULT, class, class.capacity())
    {
        let mut object = batch.head;
        while !object.is_null() {
            objects.push(object);
            // SAFETY: walking a batch the test holds.
            object = unsafe { next_of(object) };
        }
    }
    objects
}

/// Takes `count` objects of `class` from node 0's bags as a vector.
pub(in crate::node) fn take(heaps: &NodeHeaps, class: SizeClass, count: usize) -> Vec<*mut u8> {
    let batch = heaps
        .take_from_bags(NodeId(0), Partition::DEFAULT, class, count)
        .expect("memory");
    let mut objects = Vec::new();
    let mut object = batch.head;
    while !object.is_null() {
        objects.push(object);
        // SAFETY: walking a batch we own.
        object = unsafe { next_of(object) };
    }
    objects
}

/// Gives `objects` back to their bags as one chain.
pub(in crate::node) fn give_back(heaps: &NodeHeaps, class: SizeClass, objects: &[*mut u8]) {
    let mut chain = null_mut();
    for &object in objects {
        // SAFETY: we own the object; link it into our chain.
        unsafe { set_next(object, chain) };
        chain = object;
    }
    heaps
        .return_to_bags(NodeId(0), class, chain, false)
        .expect("valid objects");
}

/// The bag the sweep tests use: every object carved and written, then all but every
/// `keep_every`-th object freed. Returns the kept objects and the freed ones.
fn sparse_bag(
    heaps: &NodeHeaps,
    class: SizeClass,
    keep_every: usize,
) -> (Vec<*mut u8>, Vec<*mut u8>) {
    let mut objects = take(heaps, class, class.capacity());
    assert_eq!(objects.len(), class.capacity());
    objects.sort();
    for &object in &objects {
        // SAFETY: the object is ours, `class.size()` bytes.
        unsafe { core::ptr::write_bytes(object, 0xA5, class.size()) };
    }
    let (kept, freed): (Vec<_>, Vec<_>) = objects
        .iter()
        .enumerate()
        .partition(|(index, _)| index % keep_every == 0);
    let kept: Vec<_> = kept.into_iter().map(|(_, &object)| object).collect();
    let freed: Vec<_> = freed.into_iter().map(|(_, &object)| object).collect();
    give_back(heaps, class, &freed);
    (kept, freed)
}

fn intact(object: *mut u8, size: usize) -> bool {
    // SAFETY: a live object of ours, `size` bytes.
    unsafe { std::slice::from_raw_parts(object, size) }
        .iter()
        .all(|&b| b == 0xA5)
}

/// Checks that the objects `kept` of `class` are intact, then frees them with every other
/// object of their bags, so that the class's bags fall empty.
fn check_and_empty(heaps: &NodeHeaps, class: SizeClass, kept: &[*mut u8]) {
    for &object in kept {
        assert!(intact(object, class.size()));
    }
    let all = take(heaps, class, class.capacity());
    give_back(heaps, class, &all);
    give_back(heaps, class, kept);
}

/// Bytes node 0 has released inside bags still in use.
fn released_in_bags(heaps: &NodeHeaps) -> usize {
    heaps
        .node(NodeId(0))
        .released_in_bags
        .load(Ordering::Relaxed)
}

/// Bags of `class` on node 0.
fn bags_of(heaps: &NodeHeaps, class: SizeClass) -> usize {
    heaps.class(NodeId(0), class).bags.load(Ordering::Relaxed)
}

#[test]
fn a_sweep_gives_back_the_free_pages_of_a_sparse_bag_and_hands_each_object_out_again() {
    for (size, keep_every) in [(8192, 3), (5000, 4), (256, 40), (1024, 9), (100_000, 2)] {
        let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
        let class = class_of(size, 8).unwrap();
        let (kept, freed) = sparse_bag(heaps, class, keep_every);
        let pages_of = |objects: &[*mut u8]| -> HashSet<usize> {
            let mut pages = HashSet::new();
            for &object in objects {
                let start = object as usize;
                let mut page = start & !(PAGE_SIZE - 1);
                while page < start + class.size() {
                    pages.insert(page);
                    page += PAGE_SIZE;
                }
            }
            pages
        };
        let live_pages = pages_of(&kept);
        let free_pages: Vec<_> = pages_of(&freed).difference(&live_pages).copied().collect();
        assert!(!free_pages.is_empty());
        assert!(free_pages.iter().all(|&page| resident(page)));

        heaps.flush_all();
        let released = released_in_bags(heaps);
        let gone = free_pages.iter().filter(|&&page| !resident(page)).count();
        assert!(
            gone * 2 >= free_pages.len(),
            "{size} B: {gone} of {} wholly free pages released",
            free_pages.len()
        );
        assert!(
            released >= gone * PAGE_SIZE,
            "{size} B: {released} bytes counted"
        );
        for &object in &kept {
            assert!(
                intact(object, class.size()),
                "{size} B: a kept object lost data"
            );
        }
        // A second free of an object whose granule went back to the OS (its bit is clear)
        // is still a double free.
        let gone_object = *freed
            .iter()
            .find(|&&object| !resident(object as usize))
            .expect("an object in a released granule");
        // SAFETY: a chain of one, as a program's second free makes it.
        unsafe { set_next(gone_object, null_mut()) };
        assert!(matches!(
            heaps.return_to_bags(NodeId(0), class, gone_object, false),
            Err((object, Misuse::DoubleFree)) if object == gone_object
        ));

        // Every freed object comes back exactly once, none of the kept ones, and the
        // released granules are listed again on the way.
        let again = take(heaps, class, freed.len() + 1);
        let again_set: HashSet<_> = again.iter().copied().collect();
        assert_eq!(
            again_set.len(),
            again.len(),
            "{size} B: an object handed out twice"
        );
        let freed_set: HashSet<_> = freed.iter().copied().collect();
        let from_bag = again_set.intersection(&freed_set).count();
        assert_eq!(from_bag, freed.len(), "{size} B: a freed object was lost");
        assert!(
            kept.iter().all(|object| !again_set.contains(object)),
            "{size} B: a live object was handed out"
        );
        assert_eq!(released_in_bags(heaps), 0);
        give_back(heaps, class, &again);
        give_back(heaps, class, &kept);
        assert_eq!(bags_of(heaps, class), 0);
    }
}

#[test]
fn only_bags_quiet_for_the_whole_quiet_time_are_swept() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
    let class = class_of(8192, 8).unwrap();
    let stamp = heaps
        .node(NodeId(0))
        .next_upkeep
        .load(Ordering::Relaxed)
        .max(1);
    let (kept, _) = sparse_bag(heaps, class, 4);
    let released = || released_in_bags(heaps);
    // The stamp is the deadline of the pass after the returns, a period after them.
    let delay = heaps.arena.decommit.delay_ns;
    let wait = quiet_time(delay) - upkeep_period(delay);
    assert!(wait >= upkeep_period(delay));
    // The pass whose deadline the returns saw, and the last one within the quiet time:
    // not quiet yet.
    for due in [stamp, stamp + wait] {
        heaps.sweep_node(NodeId(0), due, false);
        assert_eq!(
            released(),
            0,
            "a bag swept {} ns after its objects came back",
            due - stamp
        );
    }
    // The next pass: quiet for the whole quiet time.
    heaps.sweep_node(NodeId(0), stamp + wait + 1, false);
    assert!(released() > 0, "a quiet bag was not swept");
    // Swept once, the bag is left alone until an object comes back.
    let before = released();
    let again = take(heaps, class, 1);
    heaps.sweep_node(NodeId(0), stamp + wait + 2, false);
    assert!(released() <= before);
    give_back(heaps, class, &again);
    for &object in &kept {
        assert!(intact(object, class.size()));
    }
    let all = take(heaps, class, class.capacity());
    give_back(heaps, class, &all);
    give_back(heaps, class, &kept);
    assert_eq!(bags_of(heaps, class), 0);
    assert_eq!(released(), 0);
}

/// A class whose bags hold one object in sixteen (what idle caches pin after the program
/// freed the rest) is swept after one period; one that holds a quarter waits the quiet
/// time.
#[test]
fn a_drained_class_is_swept_after_one_period() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
    let node = heaps.node(NodeId(0));
    let stamp = node.next_upkeep.load(Ordering::Relaxed).max(1);
    let released = || released_in_bags(heaps);
    let held = class_of(8192, 8).unwrap();
    let (held_kept, _) = sparse_bag(heaps, held, 4);
    heaps.sweep_node(NodeId(0), stamp + 1, false);
    assert_eq!(
        released(),
        0,
        "a class the program holds was swept after one period"
    );
    let drained = class_of(1024, 8).unwrap();
    let (drained_kept, _) = sparse_bag(heaps, drained, 16);
    heaps.sweep_node(NodeId(0), stamp + 2, false);
    assert!(released() > 0, "a drained class waited");
    for (class, kept) in [(held, held_kept), (drained, drained_kept)] {
        check_and_empty(heaps, class, &kept);
    }
    assert_eq!(released(), 0);
}

#[test]
fn a_class_whose_released_pages_come_back_after_a_pause_waits_out_twice_the_pause() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
    let class = class_of(8192, 8).unwrap();
    let node = heaps.node(NodeId(0));
    let released = || released_in_bags(heaps);
    const SECOND: u64 = 1_000_000_000;
    let delay = heaps.arena.decommit.delay_ns;
    let wait = quiet_time(delay) - upkeep_period(delay);
    // The objects came back 1.5 s ago; the next pass sweeps them.
    let then = os::monotonic_ns() - 3 * SECOND / 2;
    node.next_upkeep.store(then, Ordering::Relaxed);
    let (kept, freed) = sparse_bag(heaps, class, 4);
    heaps.sweep_node(NodeId(0), then + wait + 1, false);
    assert!(released() > 0, "a quiet bag was not swept");
    // Now, after the pause, the program takes every freed object again: the released
    // granules are listed again and fault back in.
    let again = take(heaps, class, freed.len() + 1);
    assert_eq!(released(), 0);
    let now = os::monotonic_ns();
    node.next_upkeep.store(now, Ordering::Relaxed);
    give_back(heaps, class, &again);
    // The quiet time no longer does: the class waits twice the pause (3 s or more).
    heaps.sweep_node(NodeId(0), now + wait + 1, false);
    heaps.sweep_node(NodeId(0), now + 2 * SECOND, false);
    assert_eq!(released(), 0, "swept within the pause the program showed");
    heaps.sweep_node(NodeId(0), now + 9 * SECOND, false);
    assert!(released() > 0, "the stretched wait never ended");
    // A class whose releases nobody takes back keeps the quiet time (another class, whose
    // stretch is its own).
    let other = class_of(16384, 8).unwrap();
    node.next_upkeep.store(now, Ordering::Relaxed);
    let before = released();
    let (other_kept, _) = sparse_bag(heaps, other, 4);
    heaps.sweep_node(NodeId(0), now + wait + 1, false);
    assert!(released() > before, "a class without evidence waited");
    check_and_empty(heaps, class, &kept);
    check_and_empty(heaps, other, &other_kept);
    assert_eq!(released(), 0);
}

#[test]
fn the_busiest_bags_are_not_swept() {
    let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
    // 64-byte objects, one in eight kept: a page of 64 holds 8 live ones on average.
    let class = class_of(64, 8).unwrap();
    let (kept, _) = sparse_bag(heaps, class, 8);
    heaps.flush_all();
    assert_eq!(released_in_bags(heaps), 0);
    let all = take(heaps, class, class.capacity() - kept.len());
    give_back(heaps, class, &all);
    give_back(heaps, class, &kept);
    assert_eq!(bags_of(heaps, class), 0);
}

/// Sweeps under contention: bags of a page-spanning class and of a small one are carved,
/// filled, emptied and swept concurrently; no live object may change or be handed out twice.
#[test]
fn sweeps_never_touch_live_objects_under_contention() {
    for size in [6000, 512] {
        crate::node::tests::hand_over_under_contention(class_of(size, 8).unwrap(), true);
    }
}
