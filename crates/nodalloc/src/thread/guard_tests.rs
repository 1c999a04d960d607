//! Unit tests of what the thread heap guards beyond its caches: a suspected double free
//! confirmed in the node heap (ring, bag), the origin rule across a move to another node, and
//! the free fast path's lookup refusing what is not an object's start in a bag.

use super::tests::{allocate, attached, heaps};
use super::*;
use crate::size_class::class_of;

/// A suspected double free is confirmed wherever the freed object waits on this node: in the
/// thread's cache, in the class's ring (a big class's object the thread parked and then sent
/// on), or on its bag's free list (a drained cache); a never-carved object of a bag is an
/// invalid pointer; a live object, or one in another thread's cache, is none of these.
#[test]
fn a_freed_object_is_found_in_the_cache_the_ring_and_its_bag_and_an_uncarved_one_is_invalid() {
    use crate::node::Misuse;
    use crate::size_class::MAX_CACHED;
    let heaps = heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    let mut other = attached(heaps, NodeId(0));

    let big = class_of(MAX_CACHED + 1, 8).unwrap();
    let a = allocate(&mut heap, big);
    let b = allocate(&mut heap, big);
    assert_eq!(heap.find_freed(big, a), None, "a live object");
    // SAFETY: allocated above, freed once each.
    unsafe { heap.free(a, big) };
    assert_eq!(heap.find_freed(big, a), Some(Misuse::DoubleFree), "parked");
    // SAFETY: as above.
    unsafe { heap.free(b, big) };
    assert_eq!(heap.cached(big), 1);
    assert_eq!(
        heap.find_freed(big, a),
        Some(Misuse::DoubleFree),
        "in the ring"
    );
    assert_eq!(heap.find_freed(big, b), Some(Misuse::DoubleFree), "parked");
    // The walk gave the ring's batch back: the other thread still finds `a` there.
    assert_eq!(allocate(&mut other, big), a);
    assert_eq!(heap.find_freed(big, a), None, "handed out again");

    let small = class_of(64, 8).unwrap();
    let p = allocate(&mut heap, small);
    let q = allocate(&mut other, small);
    // SAFETY: allocated above, freed once each.
    unsafe {
        heap.free(p, small);
        other.free(q, small);
    }
    heap.flush();
    assert_eq!(heap.cached(small), 0);
    assert_eq!(
        heap.find_freed(small, p),
        Some(Misuse::DoubleFree),
        "in its bag"
    );
    assert_eq!(heap.find_freed(small, q), None, "in another thread's cache");
    // The last object of `q`'s bag: far past anything carved (a bag holds many batches).
    let start = heaps.arena().bag_at(q as usize).unwrap().start;
    let uncarved = (start + (small.capacity() - 1) * small.size()) as *mut u8;
    assert!(small.capacity() > 2 * small.batch());
    assert_eq!(
        heap.find_freed(small, uncarved),
        Some(Misuse::InvalidPointer)
    );
    other.flush();
    // SAFETY: allocated above and never freed.
    unsafe { other.free(b, big) };
}

/// The origin rule across a move: a thread re-pinned to another node's CPU, with objects of its
/// old node in its cache, frees more of them and allocates again. Its first allocation after
/// the move notices the new CPU (the rseq word) and re-homes the heap, sending what it cached
/// to the old node first, so none of those objects comes back to it: neither the ones freed
/// before the move nor the ones freed after it.
#[test]
fn a_thread_moved_to_another_node_gets_none_of_its_old_nodes_objects_back() {
    use crate::os::cpuset::CpuSet;
    let heaps = heaps(2);
    let topology = &heaps.arena().topology;
    let cpus: Vec<usize> = topology.process_cpus().iter().collect();
    let Some((&from, &to)) = cpus.iter().find_map(|a| {
        cpus.iter()
            .find(|b| topology.node_of_cpu(**b) != topology.node_of_cpu(*a))
            .map(|b| (a, b))
    }) else {
        return; // One CPU: nowhere to move.
    };
    let pin = |cpu: usize| {
        let mut set = CpuSet::new();
        set.insert(cpu);
        crate::os::set_thread_affinity(&set).unwrap();
    };
    pin(from);
    let old = NodeId(topology.node_of_cpu(from));
    let mut heap = attached(heaps, old);
    heap.set_binding(None, true);
    heap.next_upkeep = u64::MAX;
    let class = class_of(64, 8).unwrap();
    let objects: Vec<*mut u8> = (0..2000).map(|_| allocate(&mut heap, class)).collect();
    let (before, after) = objects.split_at(1000);
    for &object in before {
        // SAFETY: each object is live, of `class`, and freed once.
        unsafe { heap.free(object, class) };
    }
    assert!(heap.cached(class) > 0);
    pin(to);
    for &object in after {
        // SAFETY: as above.
        unsafe { heap.free(object, class) };
    }
    let again: Vec<*mut u8> = (0..2000).map(|_| allocate(&mut heap, class)).collect();
    assert_eq!(
        heap.node(),
        NodeId(topology.node_of_cpu(to)),
        "the heap did not follow"
    );
    let reused = again.iter().filter(|p| objects.contains(p)).count();
    let foreign = again
        .iter()
        .filter(|p| heaps.arena().origin_of(**p as usize) == Some(old.index()))
        .count();
    assert_eq!(
        (reused, foreign),
        (0, 0),
        "objects of the old node came back"
    );
    for &object in &again {
        // SAFETY: allocated above, freed once.
        unsafe { heap.free(object, class) };
    }
    heap.flush();
    pin(from);
    assert_eq!(heap.node(), NodeId(topology.node_of_cpu(to)));
    // A thread that only allocates after a move: its cache holds objects of the node it left.
    let cached: Vec<*mut u8> = (0..64).map(|_| allocate(&mut heap, class)).collect();
    for &object in &cached {
        // SAFETY: as above.
        unsafe { heap.free(object, class) };
    }
    assert!(heap.cached(class) > 0);
    pin(to);
    let served: Vec<*mut u8> = (0..64).map(|_| allocate(&mut heap, class)).collect();
    let foreign = served
        .iter()
        .filter(|p| heaps.arena().origin_of(**p as usize) == Some(old.index()))
        .count();
    assert_eq!(
        foreign, 0,
        "the cache of the node left behind served an allocation"
    );
    for &object in &served {
        // SAFETY: as above.
        unsafe { heap.free(object, class) };
    }
    heap.flush();
    crate::os::set_thread_affinity(topology.process_cpus()).unwrap();
}

/// The free fast path's lookup (`home_class_of`) finds the class of an object's start in a bag
/// of the home region and refuses everything else: an interior pointer, a large object, a
/// freed span, a unit never used (an all-zero tag, whose class bits would name class 0).
#[test]
fn the_home_lookup_finds_bag_objects_and_refuses_every_other_unit() {
    let heaps = heaps(1);
    let heap = attached(heaps, NodeId(0));
    for size in [16, 64, 1024, 8 << 10] {
        let class = class_of(size, 8).unwrap();
        let mut heap = attached(heaps, NodeId(0));
        let p = allocate(&mut heap, class);
        assert_eq!(heap.home_class_of(p), Some(class.slot()), "size {size}");
        assert_eq!(
            heap.home_class_of(p.wrapping_add(8)),
            None,
            "size {size}: interior"
        );
        // SAFETY: `p` is a live object of `class` from this heap.
        unsafe { heap.free(p, class) };
    }
    let large = heaps.alloc_large(NodeId(0), 1 << 20, 8);
    assert!(!large.is_null());
    let (region_base, region_bytes) = (heap.home.region_base, heap.home.region_bytes);
    for offset in [0, 8, 4096, 64 << 10] {
        let p = large.wrapping_add(offset);
        assert_eq!(heap.home_class_of(p), None, "large object + {offset}");
    }
    heaps.free_large(large as usize);
    assert_eq!(heap.home_class_of(large), None, "a freed span");
    // The region's last unit: never used by this test's few objects (its tag is all zero).
    let unused = (region_base + region_bytes - 4096) as *const u8;
    assert_eq!(heap.home_class_of(unused), None, "a unit never used");
}
