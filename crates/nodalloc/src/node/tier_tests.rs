//! Tests of memory tiers in the node layer: a near node's refills past its tier's limit, and
//! automatic tiering's moves of quiet partitions' bags.

use super::*;
use crate::size_class::class_of;

/// Small objects at a tier's limit: a near node's refills take the far node's bags once the
/// near tier is full (its steal reaches the far node last), and none at all while requests are
/// bound to their tier; frees make room in the tier again.
#[test]
fn small_objects_past_the_near_limit_come_from_the_far_node_unless_bound() {
    let arena = crate::arena::tests::tiered_test_arena();
    let heaps = NodeHeaps::create(arena).unwrap();
    let class = class_of(64, 8).unwrap();
    let bag = class.bag_bytes();
    arena.tier_budget(false).set_limit(4 * bag);
    let origin = |p: *mut u8| arena.origin_of(p as usize).unwrap();
    let mut near = Vec::new();
    loop {
        let p = heaps.alloc_single(NodeId(0), Partition::DEFAULT, class);
        assert!(!p.is_null());
        if origin(p) == 2 {
            // SAFETY: just handed out, of `class`, from node 2.
            unsafe { heaps.free_single(NodeId(2), class, p) };
            break;
        }
        near.push(p);
    }
    assert_eq!(
        near.len(),
        4 * class.capacity(),
        "four bags' objects near, then far"
    );
    arena.set_tier_bound(true);
    assert!(
        heaps
            .alloc_single(NodeId(1), Partition::DEFAULT, class)
            .is_null(),
        "bound: neither a new near bag nor the far node's objects"
    );
    for p in near.drain(..) {
        // SAFETY: handed out above, of `class`, and not freed since.
        unsafe { heaps.free_single(NodeId(origin(p)), class, p) };
    }
    let p = heaps.alloc_single(NodeId(1), Partition::DEFAULT, class);
    assert!(!p.is_null() && origin(p) != 2, "room again near");
    // SAFETY: as above.
    unsafe { heaps.free_single(NodeId(origin(p)), class, p) };
    arena.set_tier_bound(false);
    arena.tier_budget(false).set_limit(0);
}

/// Automatic tiering on a simulated machine with a far node (nothing is bound there, so the
/// moves are records alone): a busy partition stays hot; one quiet for the cooling period
/// turns cold, its refills come from the far node and its full bag is recorded as moved
/// (`placed_node` names the far node for its objects) while a partial bag stays; busy again,
/// it comes back near. A moved bag whose objects all come back returns to its region.
#[test]
fn automatic_tiering_cools_quiet_partitions_moves_their_full_bags_and_warms_busy_ones() {
    let arena = crate::arena::tests::tiered_test_arena();
    let heaps = NodeHeaps::create_with(arena, 8).unwrap();
    let ms = 1_000_000u64;
    assert!(heaps.set_tiering(1000 * ms));
    let (busy, cache) = (Partition(3), Partition(5));
    let class = class_of(64, 8).unwrap();
    let capacity = class.capacity();
    // The cache fills one bag whole and starts a second; every object stays out.
    let full = heaps
        .take_from_bags(NodeId(0), cache, class, capacity)
        .unwrap();
    assert_eq!(full.count, capacity);
    let partial = heaps.take_from_bags(NodeId(0), cache, class, 4).unwrap();
    heaps.note_activity(cache);
    let first = full.head;
    let other_bag = partial.head;
    assert_ne!(
        arena.bag_at(first as usize).unwrap().start,
        arena.bag_at(other_bag as usize).unwrap().start
    );
    let mut now = 1_000 * ms;
    heaps.tiering_pass(now);
    // Ten seconds of passes every 100 ms: the request partition is busy in each.
    for _ in 0..100 {
        now += 100 * ms;
        for _ in 0..10 {
            heaps.note_activity(busy);
        }
        heaps.tiering_pass(now);
    }
    assert!(!heaps.is_cold(busy), "a busy partition stays hot");
    assert!(heaps.is_cold(cache), "a quiet one turns cold");
    assert_eq!(heaps.cold_source(NodeId(0), cache), Some(NodeId(2)));
    assert_eq!(heaps.cold_source(NodeId(0), busy), None);
    assert_eq!(
        heaps.cold_source(NodeId(2), cache),
        None,
        "the far node has no far node"
    );
    assert_eq!(
        heaps.placed_node(NodeId(0), first as usize),
        NodeId(2),
        "full bag moved"
    );
    assert_eq!(
        heaps.placed_node(NodeId(0), other_bag as usize),
        NodeId(0),
        "a bag with objects still to hand out stays"
    );
    assert_eq!(heaps.bags_moved(), (1, 0));
    let stats = heaps.collect_stats(0);
    assert!(stats.tiering && stats.cold_partitions == 1 && stats.bags_moved_far == 1);
    // Busy again: back near, the bag too.
    now += 100 * ms;
    for _ in 0..20 {
        heaps.note_activity(cache);
    }
    heaps.tiering_pass(now);
    assert!(!heaps.is_cold(cache));
    assert_eq!(heaps.placed_node(NodeId(0), first as usize), NodeId(0));
    assert_eq!(heaps.bags_moved(), (1, 1));
    // Cold again, moved again; then every object comes back: the bag goes home whole.
    for _ in 0..12 {
        now += 100 * ms;
        heaps.tiering_pass(now);
    }
    assert!(heaps.is_cold(cache));
    assert_eq!(heaps.bags_moved(), (2, 1));
    // Under a tier's limit no bag moves far (it would stay charged near): warm, then cool
    // again with a near limit set; the bag comes back and stays.
    for _ in 0..20 {
        heaps.note_activity(cache);
    }
    now += 100 * ms;
    heaps.tiering_pass(now);
    assert_eq!(heaps.bags_moved(), (2, 2));
    arena.tier_budget(false).set_limit(1 << 30);
    for _ in 0..12 {
        now += 100 * ms;
        heaps.tiering_pass(now);
    }
    assert!(heaps.is_cold(cache));
    assert_eq!(heaps.bags_moved(), (2, 2), "no move far under a limit");
    assert_eq!(heaps.placed_node(NodeId(0), first as usize), NodeId(0));
    arena.tier_budget(false).set_limit(0);
    for _ in 0..2 {
        now += 100 * ms;
        heaps.tiering_pass(now);
    }
    assert_eq!(heaps.bags_moved(), (3, 2), "without the limit, far again");
    let start = arena.bag_at(first as usize).unwrap().start;
    // Both chains were handed out above, whole, and hold nothing the test uses.
    heaps
        .return_to_bags(NodeId(0), class, full.head, false)
        .unwrap();
    heaps
        .return_to_bags(NodeId(0), class, partial.head, false)
        .unwrap();
    assert!(
        arena.bag_at(start).is_none(),
        "the moved bag went back to its region"
    );
}

/// A move the kernel leaves part done (a page a forked child still shares) is tried again on
/// the next pass; while retries complete nothing they wait twice as long each round; a bag
/// that went back to its region leaves the list.
#[test]
fn automatic_tiering_tries_again_the_moves_the_kernel_left_part_done() {
    let arena = crate::arena::tests::tiered_test_arena();
    let heaps = NodeHeaps::create_with(arena, 8).unwrap();
    let tiering = &heaps.partitions.tiering;
    let ms = 1_000_000u64;
    assert!(heaps.set_tiering(1000 * ms));
    let cache = Partition(5);
    let class = class_of(64, 8).unwrap();
    let capacity = class.capacity();
    let bags: Vec<Batch> = (0..3)
        .map(|_| {
            heaps
                .take_from_bags(NodeId(0), cache, class, capacity)
                .unwrap()
        })
        .collect();
    assert!(bags.iter().all(|bag| bag.count == capacity));
    heaps.note_activity(cache);
    let mut now = 1_000 * ms;
    heaps.tiering_pass(now);
    let mut pass = || {
        now += 100 * ms;
        heaps.tiering_pass(now);
    };
    // Two of the three moves far are left part done: both wait, and the next pass completes
    // them.
    tiering.play_partly.store(2, Ordering::Relaxed);
    while !heaps.is_cold(cache) {
        pass();
    }
    assert_eq!(heaps.bags_moved(), (3, 0));
    assert_eq!(heaps.moves_partly(), (2, 2));
    pass();
    assert_eq!(heaps.moves_partly(), (2, 0), "retried and completed");
    for bag in &bags {
        assert_eq!(heaps.placed_node(NodeId(0), bag.head as usize), NodeId(2));
    }
    // Busy again, every move back near left part done, and every retry too (a child that
    // lives on): 40 passes try each bag in 6 rounds (waits of 1, 2, 4, 8 and 16 passes), not
    // in 40.
    tiering.play_partly.store(usize::MAX, Ordering::Relaxed);
    for _ in 0..20 {
        heaps.note_activity(cache);
    }
    pass();
    assert!(!heaps.is_cold(cache));
    assert_eq!(heaps.bags_moved(), (3, 3));
    assert_eq!(heaps.moves_partly(), (5, 3));
    for _ in 0..40 {
        for _ in 0..20 {
            heaps.note_activity(cache);
        }
        pass();
    }
    let (tries, waiting) = heaps.moves_partly();
    assert_eq!(waiting, 3);
    assert_eq!(tries - 5, 6 * 3, "retries back off while none completes");
    // The child exits: the retries complete within the longest wait.
    tiering.play_partly.store(0, Ordering::Relaxed);
    for _ in 0..=tiering::MAX_RETRY_WAIT {
        for _ in 0..20 {
            heaps.note_activity(cache);
        }
        pass();
    }
    assert_eq!(heaps.moves_partly(), (tries, 0));
    // A bag that leaves before its retry leaves the list: one move far left part done, then
    // every object comes back (the bags go home).
    tiering.play_partly.store(1, Ordering::Relaxed);
    while !heaps.is_cold(cache) {
        pass();
    }
    assert_eq!(heaps.moves_partly().1, 1);
    tiering.retry_in.store(0, Ordering::Relaxed);
    for bag in &bags {
        // Each chain was handed out whole above and holds nothing the test uses.
        heaps
            .return_to_bags(NodeId(0), class, bag.head, false)
            .unwrap();
    }
    pass();
    assert_eq!(heaps.moves_partly(), (tries + 1, 0));
}
