//! Unit tests of call-site partitions on the thread side (explicit scopes stand for call
//! sites): separation, whole-bag reclaim, the partition cache under random use, remote frees,
//! secure mode.

use super::tests::{allocate, attached};
use super::*;
use crate::arena::tests::{test_arena, test_arena_secure};
use crate::size_class::class_of;
use std::collections::HashMap;

/// Regions of 1 GiB: every (partition, class) in use holds at least one bag.
fn partitioned(nodes: usize, partitions: usize) -> &'static NodeHeaps {
    NodeHeaps::create_with(test_arena(nodes, 1 << 30, 0), partitions).unwrap()
}

/// The partition of scope `id` (as the thread heap computes it).
fn scope_part(heaps: &NodeHeaps, id: usize) -> Partition {
    super::partition::scope_partition(id, heaps.partitions())
}

/// Bags carved for `class` on every node and in every partition.
fn bags(heaps: &NodeHeaps, class: SizeClass) -> usize {
    heaps.collect_stats(1).classes()[class.index()].bags
}

#[test]
fn objects_of_two_scopes_never_share_a_bag_and_the_fast_paths_stay_out_of_play() {
    let heaps = partitioned(1, 64);
    let mut heap = attached(heaps, NodeId(0));
    for size in [16, 64, 1000, 16 << 10] {
        let class = class_of(size, 8).unwrap();
        let mut objects = Vec::new();
        for i in 0..3 * class.capacity() {
            let scope = 1 + i % 2;
            heap.enter_scope(scope);
            let p = allocate(&mut heap, class);
            assert!(!p.is_null());
            assert_eq!(heaps.partition_of(p as usize), scope_part(heaps, scope));
            assert!(
                heap.home_class_of(p).is_none(),
                "the free fast path must miss"
            );
            objects.push(p);
        }
        assert!(
            heap.alloc_cached(class).is_null(),
            "the class lists must stay empty"
        );
        for p in objects {
            // SAFETY: allocated above, freed once.
            unsafe { heap.free(p, class) };
        }
        assert!(heap.alloc_cached(class).is_null());
    }
    assert_ne!(scope_part(heaps, 1), scope_part(heaps, 2));
}

/// A server's requests die together; one object in nine is a long-lived cache entry born
/// among them. Without partitions the cache entries pin nearly every bag the requests used;
/// with them, the requests' bags go back whole.
#[test]
fn a_request_scope_whose_objects_all_die_gives_its_bags_back_whole() {
    let class = class_of(64, 8).unwrap();
    let requests_count = 20 * class.capacity();
    let mut kept_bags = [0usize; 2];
    for (run, partitions) in [0usize, 64].into_iter().enumerate() {
        let heaps = partitioned(1, partitions);
        let mut heap = attached(heaps, NodeId(0));
        let (mut requests, mut cache) = (Vec::new(), Vec::new());
        for i in 0..requests_count {
            if i % 8 == 0 {
                heap.enter_scope(2);
                cache.push(allocate(&mut heap, class));
            }
            heap.enter_scope(1);
            requests.push(allocate(&mut heap, class));
        }
        for p in requests {
            // SAFETY: allocated above, freed once.
            unsafe { heap.free(p, class) };
        }
        heap.flush();
        heaps.flush_all();
        kept_bags[run] = bags(heaps, class);
        let stats = heaps.collect_stats(1);
        if partitions != 0 {
            let requests_partition = scope_part(heaps, 1).index();
            let top = stats.top_partitions();
            let figures = top
                .iter()
                .find(|p| p.partition == requests_partition)
                .expect("the requests' partition is reported");
            assert!(
                figures.reclaimed >= 20,
                "reclaimed whole: {}",
                figures.reclaimed
            );
            assert_eq!(figures.bags, 0);
            assert_eq!(figures.live, 0);
            let cache_figures = top
                .iter()
                .find(|p| p.partition == scope_part(heaps, 2).index())
                .unwrap();
            assert_eq!(cache_figures.live, cache.len() * class.size());
            assert_eq!(
                top[0].partition, cache_figures.partition,
                "most live bytes first"
            );
        }
        drop(cache);
    }
    let cache_bags = (requests_count / 8).div_ceil(class.capacity());
    assert!(
        kept_bags[0] >= 18,
        "without partitions: {} bags",
        kept_bags[0]
    );
    assert!(
        kept_bags[1] <= cache_bags + 1,
        "with partitions: {} bags for {} of cache",
        kept_bags[1],
        cache_bags
    );
}

/// Random allocations and frees over 500 scopes (P = 300) and classes from 16 bytes to
/// uncached ones, enough pairs to evict lists from the partition cache all the time: every
/// object is handed out once, lands in its scope's partition, keeps its contents, and once
/// everything is freed every bag goes back to the region.
#[test]
fn random_use_of_many_partitions_hands_each_object_out_once_and_returns_every_bag() {
    let heaps = partitioned(1, 300);
    let mut heap = attached(heaps, NodeId(0));
    let sizes = [16, 48, 64, 256, 1024, 4096, 20_000, 100_000];
    let mut live: HashMap<usize, (SizeClass, usize)> = HashMap::new();
    let mut order: Vec<usize> = Vec::new();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..60_000 {
        super::tests::xorshift(&mut state);
        if state % 3 != 0 || order.is_empty() {
            let scope = (state >> 8) as usize % 500;
            let class = class_of(sizes[(state >> 20) as usize % sizes.len()], 8).unwrap();
            heap.enter_scope(scope);
            let p = allocate(&mut heap, class);
            assert!(!p.is_null());
            assert_eq!(heaps.partition_of(p as usize), scope_part(heaps, scope));
            let stamp = p as usize ^ scope;
            // SAFETY: a live object of at least 16 bytes, ours.
            unsafe { (p.add(8) as *mut usize).write(stamp) };
            assert!(
                live.insert(p as usize, (class, stamp)).is_none(),
                "handed out twice"
            );
            order.push(p as usize);
        } else {
            let at = (state >> 24) as usize % order.len();
            let p = order.swap_remove(at);
            let (class, stamp) = live.remove(&p).unwrap();
            // SAFETY: as above.
            assert_eq!(unsafe { ((p + 8) as *const usize).read() }, stamp);
            // SAFETY: allocated above, freed once.
            unsafe { heap.free(p as *mut u8, class) };
        }
    }
    for p in order {
        let (class, _) = live.remove(&p).unwrap();
        // SAFETY: as above.
        unsafe { heap.free(p as *mut u8, class) };
    }
    assert!(heap.grown_bytes <= super::adapt::THREAD_GROWN_BYTES);
    heap.flush();
    assert_eq!(heap.grown_bytes, 0, "growth left counted after the flush");
    assert_eq!(
        heaps
            .node(NodeId(0))
            .grown_cache_bytes
            .load(core::sync::atomic::Ordering::Relaxed),
        0
    );
    heaps.flush_all();
    let stats = heaps.collect_stats(1);
    for class in stats.classes() {
        assert_eq!(class.bags, 0, "class {} keeps bags", class.size);
        assert_eq!(class.allocs, class.frees, "class {}", class.size);
    }
    assert!(stats.partitions_used > 250);
    assert!(stats.bags_reclaimed > 0);
}

/// Objects freed by a thread of another node go home through the inbox, each to its own
/// partition's bags, even when the chain mixes partitions.
#[test]
fn remote_frees_of_mixed_partitions_go_back_to_their_own_bags() {
    let heaps = partitioned(2, 16);
    let mut owner = attached(heaps, NodeId(0));
    let mut other = attached(heaps, NodeId(1));
    let class = class_of(128, 8).unwrap();
    let mut objects = Vec::new();
    for i in 0..4 * class.capacity() {
        owner.enter_scope(3 + i % 2);
        objects.push(allocate(&mut owner, class));
    }
    for &p in &objects {
        // SAFETY: allocated above, freed once, by a thread of the other node.
        unsafe { other.free(p, class) };
    }
    other.flush();
    owner.flush();
    heaps.flush_all();
    assert_eq!(bags(heaps, class), 0);
    let stats = heaps.collect_stats(2);
    assert_eq!(stats.remote_frees, objects.len() as u64);
    assert_eq!(stats.classes()[class.index()].frees, objects.len() as u64);
}

#[test]
fn secure_mode_keeps_its_checks_with_partitions() {
    let heaps = NodeHeaps::create_with(test_arena_secure(1, false), 16).unwrap();
    let mut heap = attached(heaps, NodeId(0));
    let class = class_of(64, 8).unwrap();
    let mut objects = Vec::new();
    for i in 0..3 * class.capacity() {
        heap.enter_scope(i % 3);
        let p = allocate(&mut heap, class);
        assert_eq!(heaps.partition_of(p as usize), scope_part(heaps, i % 3));
        objects.push(p);
    }
    // Every object handed out is marked in the allocation bitmap: freeing it is accepted
    // once, and a second free of it would be refused (checked by the C ABI suite's death
    // tests, as a refusal aborts).
    for &p in &objects {
        assert!(heaps.note_freed(p, class).is_ok());
        heaps.note_allocated(p);
    }
    for p in objects {
        // SAFETY: allocated above, freed once.
        unsafe { heap.free(p, class) };
    }
    heap.flush();
    heaps.flush_all();
    assert_eq!(bags(heaps, class), 0);
}

/// Retirement (thread exit) returns the partition cache's objects and unmaps it; a later
/// call on the retired heap still allocates in its partition.
#[test]
fn retiring_a_heap_returns_its_partition_lists() {
    let heaps = partitioned(1, 8);
    let mut heap = attached(heaps, NodeId(0));
    let class = class_of(32, 8).unwrap();
    heap.enter_scope(5);
    let p = allocate(&mut heap, class);
    heap.retire();
    assert_eq!(super::partition::cache_keys_in_use(&heap), 0);
    let late = allocate(&mut heap, class);
    assert_eq!(heaps.partition_of(late as usize), scope_part(heaps, 5));
    for object in [p, late] {
        // SAFETY: allocated above, freed once.
        unsafe { heap.free(object, class) };
    }
    heaps.flush_all();
    assert_eq!(bags(heaps, class), 0);
}

/// A partition list used both ways grows its limit as a class list does, within the thread's
/// budget, and gives the growth back when it leaves the cache.
#[test]
fn partition_lists_grow_like_class_lists_and_give_their_growth_back() {
    use core::sync::atomic::Ordering;
    let heaps = partitioned(1, 16);
    let mut heap = attached(heaps, NodeId(0));
    let class = class_of(64, 8).unwrap();
    heap.enter_scope(3);
    for _ in 0..20 {
        let objects: Vec<_> = (0..4 * class.cache_limit())
            .map(|_| allocate(&mut heap, class))
            .collect();
        for p in objects {
            // SAFETY: allocated above, freed once.
            unsafe { heap.free(p, class) };
        }
    }
    let budget = &heaps.node(NodeId(0)).grown_cache_bytes;
    assert!(heap.grown_bytes > 0, "the list never grew");
    assert_eq!(budget.load(Ordering::Relaxed), heap.grown_bytes);
    heap.flush();
    assert_eq!(heap.grown_bytes, 0);
    assert_eq!(budget.load(Ordering::Relaxed), 0);
}

/// The C face's miss order: the partition hit pops the call site's list (nothing yet), the
/// miss path refills into that site's partition without a second pop, and the next hit of the
/// site takes from the refilled list; a freed object comes back to the same site first.
#[test]
fn a_call_site_miss_pops_its_partition_once_and_refills_it() {
    let heaps = partitioned(1, 64);
    let mut heap = attached(heaps, NodeId(0));
    let class = class_of(64, 8).unwrap();
    let site = 0x5555_1234_5678usize;
    let part = crate::node::partition_of_site(site, heaps.partitions());
    assert!(
        heap.partition_hit(class, site).is_null(),
        "an empty cache has nothing"
    );
    let first = heap.alloc_after_partition_hit(class);
    assert!(!first.is_null());
    assert_eq!(heaps.partition_of(first as usize), part);
    let second = heap.partition_hit(class, site);
    assert!(
        !second.is_null(),
        "the refill leaves the rest of its batch in the list"
    );
    assert_ne!(first, second);
    assert_eq!(heaps.partition_of(second as usize), part);
    // SAFETY: allocated above, freed once.
    unsafe { heap.free(second, class) };
    assert_eq!(
        heap.partition_hit(class, site),
        second,
        "last freed, first out"
    );
    let other = (1..)
        .map(|i| site + i * 4096)
        .find(|s| crate::node::partition_of_site(*s, heaps.partitions()) != part)
        .unwrap();
    let elsewhere = heap.partition_hit(class, other);
    assert!(elsewhere.is_null() || heaps.partition_of(elsewhere as usize) != part);
    for p in [first, second] {
        // SAFETY: allocated above, freed once.
        unsafe { heap.free(p, class) };
    }
}
