//! Unit tests of parking and upkeep: a big class's one parked object per thread, the
//! statistics of where bytes sit, and which caches an upkeep pass keeps.

use super::tests::{allocate, attached, attached_without_upkeep, heaps};
use super::HOLDS_PER_UPKEEP;
use super::*;
use crate::size_class::class_of;

/// Classes above `MAX_CACHED`: a thread keeps only the last such object it freed (its
/// "parked" object); the one parked before goes to the node's ring, where any thread of
/// the node finds it. The statistics say where the bytes sit.
#[test]
fn big_classes_park_one_object_per_thread_and_the_statistics_show_where_bytes_sit() {
    use crate::size_class::MAX_CACHED;
    let heaps = heaps(1);
    let mut first = attached(heaps, NodeId(0));
    let mut second = attached(heaps, NodeId(0));

    let small = class_of(64, 8).unwrap();
    let p = allocate(&mut first, small);
    first.publish_all();
    let figures = heaps.collect_stats(2).classes()[small.index()];
    assert_eq!(figures.bags, 1);
    assert_eq!(figures.cached, (small.batch() - 1) * 64);
    assert_eq!(figures.free_in_bags, small.bag_bytes() - small.batch() * 64);
    assert_eq!(figures.in_rings, 0);
    // SAFETY: allocated above, freed once.
    unsafe { first.free(p, small) };
    first.flush();
    let figures = heaps.collect_stats(2).classes()[small.index()];
    assert_eq!(
        (figures.bags, figures.cached, figures.free_in_bags),
        (0, 0, 0)
    );

    // No upkeep from here on: the test arena's period is 1 ms, and an upkeep due inside the
    // calls below (a test thread preempted that long) moves what the figures count (it
    // returned the parked object once under a loaded `cargo test`, before upkeep spared the
    // class of the push that runs it; the node's upkeep still sweeps its rings).
    first.next_upkeep = u64::MAX;
    second.next_upkeep = u64::MAX;
    let big = class_of(MAX_CACHED + 1, 8).unwrap();
    // Not a class whose spans the region holds at their free (those are never parked).
    let other = class_of(3 * MAX_CACHED, 8).unwrap();
    assert_eq!(big.cache_limit(), 0);
    assert_ne!(big, other);
    assert!(!heaps.held_at_free(big) && !heaps.held_at_free(other));
    let a = allocate(&mut first, big);
    let b = allocate(&mut first, big);
    assert!(!a.is_null() && !b.is_null() && a != b);
    // SAFETY: allocated above, freed once each.
    unsafe {
        first.free(a, big);
        first.free(b, big);
    }
    assert_eq!(first.cached(big), 1, "only the last freed object stays");
    let figures = heaps.collect_stats(2).classes()[big.index()];
    assert_eq!(figures.in_rings, big.size());
    assert_eq!(figures.cached, 2 * big.size());
    // The other thread of the node gets the one that left; this thread its parked one.
    let bags = figures.bags;
    assert_eq!(allocate(&mut second, big), a);
    assert_eq!(
        first.alloc_cached(big),
        b,
        "the parked object is a fast-path hit"
    );
    assert_eq!(heaps.collect_stats(2).classes()[big.index()].bags, bags);
    // Parking an object of another big class sends the previous one to the ring.
    let c = allocate(&mut first, other);
    // SAFETY: allocated above, freed once each.
    unsafe {
        first.free(b, big);
        first.free(c, other);
    }
    assert_eq!((first.cached(big), first.cached(other)), (0, 1));
    assert_eq!(allocate(&mut second, big), b);
    // SAFETY: allocated above, freed once.
    unsafe { second.free(a, big) };
}

/// A class whose object is a span the region holds at its free (256 KiB) is not parked: the
/// object goes back to its bag at once, and the next allocation gets another; past the upkeep
/// period's budget of such frees, it parks like the other big classes.
#[test]
fn objects_of_a_held_class_go_back_at_once_and_the_next_allocation_gets_another() {
    let heaps = heaps(1);
    let mut heap = attached_without_upkeep(heaps, NodeId(0));
    let class = class_of(crate::size_class::MAX_SMALL, 8).unwrap();
    assert!(heaps.held_at_free(class));
    let a = allocate(&mut heap, class);
    // SAFETY: allocated above, freed once.
    unsafe { heap.free(a, class) };
    assert_eq!(heap.cached(class), 0);
    let mut previous = a;
    for _ in 1..HOLDS_PER_UPKEEP {
        let b = allocate(&mut heap, class);
        assert!(!b.is_null() && b != previous);
        // SAFETY: as above.
        unsafe { heap.free(b, class) };
        previous = b;
    }
    // Past the period's holds (a loop of such frees), the object parks: handed out again.
    assert_eq!(heap.holds_left, 0);
    let b = allocate(&mut heap, class);
    // SAFETY: as above.
    unsafe { heap.free(b, class) };
    assert_eq!(heap.cached(class), 1);
    assert_eq!(allocate(&mut heap, class), b);
}

/// An upkeep keeps the cache of a class used since its previous pass, even when a cut or a
/// park published that class's counts just before (which makes them look idle): the cut's
/// newest batch or the parked object stays, whether the upkeep falls due in that slow path or
/// in another class's later. A class unused since the previous pass is returned.
#[test]
fn an_upkeep_keeps_the_cache_of_every_class_used_since_its_last_pass() {
    use crate::size_class::MAX_CACHED;
    let heaps = heaps(1);
    let mut heap = attached_without_upkeep(heaps, NodeId(0));
    // An idle class with something cached, which the upkeep must still return.
    let idle = class_of(256, 8).unwrap();
    let q = allocate(&mut heap, idle);
    // SAFETY: allocated above, freed once.
    unsafe { heap.free(q, idle) };
    heap.publish_all();
    assert!(heap.cached(idle) > 0);
    // A pass now keeps it (used since the last one); the next one will not.
    heap.next_upkeep = 0;
    heap.upkeep();
    assert!(
        heap.cached(idle) > 0,
        "a class used since the last pass is kept"
    );
    heap.next_upkeep = u64::MAX;

    let class = class_of(64, 8).unwrap();
    let limit = class.cache_limit();
    let objects: Vec<*mut u8> = (0..limit).map(|_| allocate(&mut heap, class)).collect();
    for (i, &object) in objects.iter().enumerate() {
        if i == limit - 1 {
            // The push that reaches the limit cuts, with the upkeep due.
            heap.next_upkeep = 0;
        }
        // SAFETY: each object was allocated above and is freed once.
        unsafe { heap.free(object, class) };
    }
    assert!(heap.next_upkeep > 0, "the upkeep ran in the cut");
    assert_eq!(
        heap.cached(class),
        class.batch(),
        "the cut's newest batch stays"
    );
    assert_eq!(heap.cached(idle), 0, "an idle class is returned");

    let big = class_of(MAX_CACHED + 1, 8).unwrap();
    let a = allocate(&mut heap, big);
    let b = allocate(&mut heap, big);
    // SAFETY: allocated above, freed once each.
    unsafe {
        heap.free(a, big);
        heap.next_upkeep = 0;
        heap.free(b, big);
    }
    assert!(heap.next_upkeep > 0, "the upkeep ran in the park");
    assert_eq!(heap.cached(big), 1, "the parked object stays");
    assert_eq!(heap.alloc_cached(big), b);
}
