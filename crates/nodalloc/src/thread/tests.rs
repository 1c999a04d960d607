//! Unit tests of the thread heap: the LRU drain, re-homing, remote frees going home, secure
//! mode, retirement, zeroed refills, stolen objects, the C hits' screen, on simulated
//! topologies (adaptive cache limits: `adapt_tests.rs`; parking and upkeep: `upkeep_tests.rs`).

use super::*;
use crate::arena::tests::test_arena;
use crate::node::{Partition, DENSE_OBJECT_MAX};
use crate::size_class::class_of;
use core::sync::atomic::Ordering;

pub(super) fn allocate(heap: &mut ThreadHeap, class: SizeClass) -> *mut u8 {
    let p = heap.alloc_cached(class);
    if p.is_null() {
        heap.alloc_slow(class)
    } else {
        p
    }
}

/// The random operation sequences below (and in `adapt_tests.rs` and `partition_tests.rs`) step
/// a xorshift generator.
pub(super) use crate::arena::tests::xorshift;

pub(super) fn heaps(nodes: usize) -> &'static NodeHeaps {
    NodeHeaps::create(test_arena(nodes, 64 << 20, 0)).unwrap()
}

/// A heap attached to `heaps`, homed on `node`.
pub(super) fn attached(heaps: &'static NodeHeaps, node: NodeId) -> Box<ThreadHeap> {
    let mut heap = Box::new(ThreadHeap::with_attach_hook(None));
    heap.attach(heaps, node);
    heap
}

/// [`attached`], with its upkeep never due: its limits move by its own traffic alone.
pub(super) fn attached_without_upkeep(heaps: &'static NodeHeaps, node: NodeId) -> Box<ThreadHeap> {
    let mut heap = attached(heaps, node);
    heap.next_upkeep = u64::MAX;
    heap
}

#[test]
fn a_fresh_heap_s_lists_are_the_empty_list() {
    // Written as zero bits (`with_attach_hook`): they must read as `FreeList::EMPTY`, in the
    // heap of the thread-local slot's kind and in one a pool writes over a used heap.
    let heap = Box::new(ThreadHeap::with_attach_hook(None));
    assert!(heap.lists.iter().all(FreeList::is_empty_list));
    let heaps = heaps(1);
    let mut used = attached(heaps, NodeId(0));
    let class = SizeClass(4);
    let object = allocate(&mut used, class);
    assert!(!object.is_null());
    assert!(!used.lists.iter().all(FreeList::is_empty_list));
    // SAFETY: the heap is ours and nothing refers to its old contents.
    unsafe { (&mut *used as *mut ThreadHeap).write(ThreadHeap::with_attach_hook(None)) };
    assert!(used.lists.iter().all(FreeList::is_empty_list));
}

/// A drain or a park whose upkeep re-homes the thread (it migrated to another node) still
/// gives the objects it cut from the list back to their own node, not the new home: the
/// node heap refuses foreign objects and aborts naming one.
#[test]
fn a_drain_that_re_homes_the_thread_returns_its_batch_to_the_old_node() {
    use crate::os::cpuset::CpuSet;
    let heaps = heaps(2);
    // Pin this test thread where it runs, and home its heap on the other node.
    let cpu = crate::os::current_cpu().unwrap();
    let mut set = CpuSet::new();
    set.insert(cpu);
    crate::os::set_thread_affinity(&set).unwrap();
    let here = heaps
        .arena()
        .topology
        .node_of_cpu(crate::os::current_cpu().unwrap());
    let away = NodeId(1 - here);
    for size in [64, 128 << 10] {
        let class = class_of(size, 8).unwrap();
        // Frees before upkeep is due: up to one below the drain (or one parked object).
        let quiet = class.cache_limit().saturating_sub(1).max(1);
        let want = quiet + 2 * class.batch().max(1) + 2;
        let mut heap = attached(heaps, away);
        heap.follow_cpu = true;
        heap.next_upkeep = u64::MAX;
        let mut objects = Vec::new();
        while objects.len() < want {
            let batch = heaps
                .take_from_bags(away, Partition::DEFAULT, class, want - objects.len())
                .unwrap();
            let mut object = batch.head;
            while !object.is_null() {
                objects.push(object);
                // SAFETY: walking the batch we were handed.
                object = unsafe { next_of(object) };
            }
        }
        for (index, &object) in objects.iter().enumerate() {
            if index == quiet {
                // From here on, the next drain or park runs its upkeep, which re-homes.
                heap.next_upkeep = 0;
            }
            // SAFETY: each object is live, of `class`, and freed once.
            unsafe { heap.free(object, class) };
        }
        assert_eq!(
            heap.node(),
            NodeId(here),
            "{size} B: the heap did not follow the thread"
        );
        heap.flush();
        heaps.flush_all();
        assert_eq!(
            heaps.class(away, class).out_of_bags.load(Ordering::Relaxed),
            0,
            "{size} B: objects are missing from their node's bags"
        );
    }
    crate::os::set_thread_affinity(heaps.arena().topology.process_cpus()).unwrap();
}

/// A thread that allocates objects of a sparse class in a row takes the rest of a bag at one
/// refill and hands it out object by object, in address order, each counted as allocated; its
/// flush gives back the objects it did not hand out, so once the program's are freed no bag is
/// left out.
#[test]
fn sparse_allocations_in_a_row_come_from_runs_and_the_flush_gives_the_rest_back() {
    let heaps = heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    let class = class_of(5 << 10, 8).unwrap();
    let capacity = class.capacity();
    assert!(class.size() > DENSE_OBJECT_MAX && capacity >= 4);
    let class_heap = heaps.class(NodeId(0), class);
    let mut objects: Vec<*mut u8> = (0..capacity + 3)
        .map(|_| allocate(&mut heap, class))
        .collect();
    // A zeroed allocation takes the run's next object too, and it reads as zero.
    let zeroed = heap.alloc_zeroed(class, class.size());
    assert_eq!(
        zeroed as usize,
        objects[capacity + 2] as usize + class.size()
    );
    // SAFETY: the object holds `class.size()` bytes and is the test's.
    let bytes = unsafe { core::slice::from_raw_parts(zeroed, class.size()) };
    assert!(bytes.iter().all(|&b| b == 0));
    objects.push(zeroed);
    let n = objects.len();
    for bag in objects.chunks(capacity) {
        assert!(
            bag.windows(2)
                .all(|w| w[1] as usize == w[0] as usize + class.size()),
            "a run hands its bag out in address order"
        );
    }
    assert_eq!(class_heap.bags.load(Ordering::Relaxed), 2);
    assert_eq!(class_heap.out_of_bags.load(Ordering::Relaxed), 2 * capacity);
    heap.publish_all();
    assert_eq!(class_heap.allocs.load(Ordering::Relaxed), n as u64);
    for &object in &objects {
        // SAFETY: each object was allocated above and is freed once.
        unsafe { heap.free(object, class) };
    }
    heap.flush();
    // What the drains left in the ring goes back too.
    heaps.flush_all();
    assert_eq!(class_heap.out_of_bags.load(Ordering::Relaxed), 0);
    assert_eq!(class_heap.bags.load(Ordering::Relaxed), 0);
    assert_eq!(class_heap.frees.load(Ordering::Relaxed), n as u64);
}

#[test]
fn cache_stays_within_its_limit_and_drains_the_oldest_batch() {
    let heaps = heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    let class = class_of(64, 8).unwrap();
    let n = 10 * class.cache_limit();
    let objects: Vec<*mut u8> = (0..n).map(|_| allocate(&mut heap, class)).collect();
    let first_freed = objects[0];
    for &object in &objects {
        // SAFETY: each object was allocated above and is freed once.
        unsafe { heap.free(object, class) };
        assert!(heap.cached(class) <= class.cache_limit());
    }
    assert!(heap.cached(class) >= class.batch());
    // The least recently freed objects left; the most recent stay (LIFO reuse).
    let again = heap.alloc_cached(class);
    assert_eq!(again, objects[n - 1]);
    let mut cached = Vec::new();
    while heap.cached(class) > 0 {
        cached.push(heap.alloc_cached(class));
    }
    assert!(
        !cached.contains(&first_freed),
        "the oldest object should have been drained"
    );
}

/// When the node heaps ask for the threads' caches (a large block about to be refused for want
/// of a hole), a heap gives back everything it caches at its next refill, of whatever class.
#[test]
fn a_heap_gives_its_caches_back_at_its_next_refill_when_asked() {
    let heaps = heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    let (kept, other) = (class_of(64, 8).unwrap(), class_of(2048, 8).unwrap());
    let objects: Vec<*mut u8> = (0..kept.batch())
        .map(|_| allocate(&mut heap, kept))
        .collect();
    for &object in &objects {
        // SAFETY: each object was allocated above and is freed once.
        unsafe { heap.free(object, kept) };
    }
    let cached = heap.cached(kept);
    assert!(cached >= objects.len());
    // A refill of another class, not asked: the cache stays.
    let first = allocate(&mut heap, other);
    assert_eq!(heap.cached(kept), cached);
    // Asked: the next refill gives it back.
    heaps.ask_for_caches();
    while heap.cached(other) > 0 {
        heap.alloc_cached(other);
    }
    let second = allocate(&mut heap, other);
    assert_eq!(heap.cached(kept), 0, "the kept class's list went back");
    // SAFETY: allocated above, freed once each.
    unsafe {
        heap.free(first, other);
        heap.free(second, other);
    }
}

#[test]
fn nth_marker_survives_pops_below_the_batch() {
    let heaps = heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    let class = class_of(16, 8).unwrap();
    let batch = class.batch();
    let mut live: Vec<*mut u8> = Vec::new();
    let mut rng = 12345u64;
    // Random push/pop sequences: the list must stay consistent (count = walk length).
    for _ in 0..20_000 {
        xorshift(&mut rng);
        if rng % 3 == 0 && !live.is_empty() {
            let object = live.swap_remove((rng as usize / 3) % live.len());
            // SAFETY: allocated below, freed once.
            unsafe { heap.free(object, class) };
        } else {
            let object = allocate(&mut heap, class);
            assert!(!live.contains(&object), "an object was handed out twice");
            live.push(object);
        }
        let list = &heap.lists[class.index()];
        assert!(list.len() <= list.limit());
        assert!(list.limit() >= 2 * batch);
    }
    assert_list_consistent(&heap, class);
}

#[test]
fn remote_frees_go_home_and_are_never_reused_by_the_freeing_node() {
    let heaps = heaps(2);
    let mut home = attached(heaps, NodeId(0));
    let mut remote = attached(heaps, NodeId(1));
    let class = class_of(128, 8).unwrap();
    let objects: Vec<*mut u8> = (0..1000).map(|_| allocate(&mut home, class)).collect();
    for &object in &objects {
        assert_eq!(heaps.arena().origin_of(object as usize), Some(0));
        // SAFETY: allocated above, freed once, by the other node's thread.
        unsafe { remote.free(object, class) };
    }
    remote.flush_outboxes();
    assert_eq!(
        heaps.node(NodeId(0)).remote_frees.load(Ordering::Relaxed),
        1000
    );
    // Node 1's thread allocates: it must never get one of node 0's objects back.
    for _ in 0..2000 {
        let p = allocate(&mut remote, class);
        assert_eq!(heaps.arena().origin_of(p as usize), Some(1));
        assert!(!objects.contains(&p));
    }
    // Node 0's thread gets them back (after its inbox is sorted on its slow path).
    let mut reused = 0;
    for _ in 0..3000 {
        let p = allocate(&mut home, class);
        if objects.contains(&p) {
            reused += 1;
        }
    }
    assert_eq!(reused, 1000);
}

#[test]
fn frees_to_a_node_without_threads_are_sorted_by_other_nodes_upkeep() {
    let heaps = heaps(2);
    let class = class_of(256, 8).unwrap();
    // Objects placed on node 1, as alloc_on_node does; no thread ever lives there.
    let batch = heaps
        .take_from_bags(NodeId(1), Partition::DEFAULT, class, 32)
        .unwrap();
    let mut objects = Vec::new();
    let mut object = batch.head;
    while !object.is_null() {
        objects.push(object);
        // SAFETY: walking the batch we were handed.
        object = unsafe { next_of(object) };
    }
    assert_eq!(
        heaps.class(NodeId(1), class).bags.load(Ordering::Relaxed),
        1
    );
    let mut heap = attached(heaps, NodeId(0));
    for &object in &objects {
        // SAFETY: each object is live and freed once.
        unsafe { heap.free(object, class) };
    }
    heap.flush_outboxes();
    // Node 1's maintenance is overdue after two periods (1 ms each in test arenas).
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(3));
        heap.upkeep();
    }
    assert_eq!(
        heaps.class(NodeId(1), class).bags.load(Ordering::Relaxed),
        0,
        "node 1's bag was never emptied"
    );
}

/// Secure mode: the fast paths see nothing (list heads stay null, the region check never
/// matches), every object is handed out once at a time, and frees of another node's objects
/// travel home as encoded chains and are reused there.
#[test]
fn secure_heaps_keep_the_fast_paths_empty_and_send_remote_frees_home() {
    let heaps = NodeHeaps::create(crate::arena::tests::test_arena_secure(2, true)).unwrap();
    let mut home = attached(heaps, NodeId(0));
    let mut remote = attached(heaps, NodeId(1));
    let class = class_of(96, 8).unwrap();
    let mut live: Vec<*mut u8> = Vec::new();
    let mut rng = 99u64;
    for _ in 0..20_000 {
        xorshift(&mut rng);
        if rng % 3 == 0 && !live.is_empty() {
            let object = live.swap_remove((rng as usize / 3) % live.len());
            // SAFETY: allocated below, freed once.
            unsafe { home.free(object, class) };
        } else {
            assert!(home.alloc_cached(class).is_null(), "the fast path served");
            let object = home.alloc_slow(class);
            assert!(!live.contains(&object), "an object was handed out twice");
            live.push(object);
        }
        assert!(home.lists[class.index()].head.is_null());
    }
    // Everything still live is freed by the other node's thread: home through the inbox.
    let sent = live.len();
    for &object in &live {
        // SAFETY: allocated above, freed once.
        unsafe { remote.free(object, class) };
    }
    remote.flush_outboxes();
    heaps.drain_inbox(NodeId(0));
    let mut reused = 0;
    for _ in 0..4 * sent {
        let object = home.alloc_slow(class);
        assert_eq!(heaps.arena().origin_of(object as usize), Some(0));
        if live.contains(&object) {
            reused += 1;
        }
    }
    assert_eq!(
        reused, sent,
        "every object freed remotely came back to its node"
    );
}

#[test]
fn retired_heap_serves_late_calls_without_caching() {
    let heaps = heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    let class = class_of(32, 8).unwrap();
    let p = heap.alloc_slow(class);
    heap.retire();
    assert_eq!(heap.state, HeapState::Retired);
    let q = heap.alloc_slow(class);
    assert!(!q.is_null() && q != p);
    // SAFETY: both allocated above, freed once.
    unsafe {
        heap.free(p, class);
        heap.free(q, class);
    }
    assert_eq!(heap.cached(class), 0);
    // Every bag of the class fell empty and went back: nothing is carved.
    assert_eq!(
        heaps.class(NodeId(0), class).bags.load(Ordering::Relaxed),
        0
    );
}

/// A thread heap counts on its node once when it attaches (a thread's start) and once when it
/// retires (its exit); a retired heap's late calls and a second retire add nothing.
#[test]
fn a_thread_heap_is_counted_attached_and_retired_once_each() {
    let heaps = heaps(1);
    let ops = &heaps.node(NodeId(0)).ops;
    let counts = || {
        (
            ops.heaps_attached.load(Ordering::Relaxed),
            ops.heaps_retired.load(Ordering::Relaxed),
        )
    };
    let mut heap = attached(heaps, NodeId(0));
    assert_eq!(counts(), (1, 0));
    let class = class_of(32, 8).unwrap();
    let p = allocate(&mut heap, class);
    heap.retire();
    assert_eq!(counts(), (1, 1));
    // SAFETY: allocated above, freed once.
    unsafe { heap.free(p, class) };
    heap.retire();
    assert_eq!(counts(), (1, 1));
}

/// Walks a list: its length must be its count, and its last object its tail.
pub(super) fn assert_list_consistent(heap: &ThreadHeap, class: SizeClass) {
    let list = &heap.lists[class.index()];
    let mut walked = 0;
    let mut object = list.head;
    let mut last = null_mut();
    while !object.is_null() {
        last = object;
        // SAFETY: walking our own free list.
        object = unsafe { next_of(object) };
        walked += 1;
    }
    assert_eq!(walked, list.len(), "count and list disagree");
    if walked > 0 {
        assert_eq!(last, list.tail(), "tail is not the last object");
    }
}

/// One thread callocs objects of a sparse class (5 KiB) and another frees them, round after
/// round: the freer's overflow goes to the node's ring, and the allocating thread's zeroed
/// refills take it from there (once the ring's budget has grown to the flow), not one object at
/// a time from the bags under the class lock. Every object reads as zero, though each was
/// written whole before it was freed.
#[test]
fn zeroed_allocations_of_a_sparse_class_refill_from_the_ring_and_read_as_zero() {
    let heaps = heaps(1);
    let mut taker = attached_without_upkeep(heaps, NodeId(0));
    let mut freer = attached_without_upkeep(heaps, NodeId(0));
    let class = class_of(5 << 10, 8).unwrap();
    assert!(class.size() > DENSE_OBJECT_MAX);
    let ops = &heaps.node(NodeId(0)).ops;
    let mut taken_per_round = Vec::new();
    for round in 0..12u8 {
        let before = ops.bag_objects_taken.load(Ordering::Relaxed);
        let objects: Vec<*mut u8> = (0..200)
            .map(|_| {
                let object = taker.alloc_zeroed(class, class.size());
                assert!(!object.is_null());
                // SAFETY: the object holds `class.size()` bytes and is the test's.
                let bytes = unsafe { core::slice::from_raw_parts_mut(object, class.size()) };
                assert!(
                    bytes.iter().all(|&b| b == 0),
                    "round {round}: a dirty block"
                );
                bytes.fill(0xA0 | round);
                object
            })
            .collect();
        for &object in &objects {
            // SAFETY: allocated above, freed once (by a thread of the same node).
            unsafe { freer.free(object, class) };
        }
        taken_per_round.push(ops.bag_objects_taken.load(Ordering::Relaxed) - before);
    }
    assert!(taken_per_round[0] >= 200, "{taken_per_round:?}");
    assert!(
        taken_per_round[8..].iter().all(|&n| n == 0),
        "objects taken from the bags per round: {taken_per_round:?}"
    );
}

/// A plain allocation handed out from a sparse class's run notes the object untouched; a
/// zeroed allocation after it that pops a written object from the list clears it whole.
#[test]
fn a_zeroed_allocation_after_an_untouched_one_clears_a_cached_object_whole() {
    let heaps = heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    let class = class_of(5 << 10, 8).unwrap();
    let first = allocate(&mut heap, class);
    // SAFETY: the object holds `class.size()` bytes and is the test's.
    unsafe { core::slice::from_raw_parts_mut(first, class.size()) }.fill(0xEE);
    // SAFETY: allocated above, freed once.
    unsafe { heap.free(first, class) };
    let zeroed = heap.alloc_zeroed(class, class.size());
    assert_eq!(zeroed, first, "the list's object comes first");
    // SAFETY: as above.
    let bytes = unsafe { core::slice::from_raw_parts(zeroed, class.size()) };
    assert!(bytes.iter().all(|&b| b == 0));
}

/// Objects a refill stole from another node (the home region was exhausted) and that the
/// thread still caches go home to their own node when the list is cut or flushed, not into the
/// home node's ring or bags (which refuse foreign objects): with and without partitions.
#[test]
fn stolen_objects_left_in_a_cut_list_go_back_to_their_own_node() {
    for partitions in [0, 16] {
        let heaps = NodeHeaps::create_with(test_arena(2, 64 << 20, 0), partitions).unwrap();
        let mut heap = attached(heaps, NodeId(0));
        heap.enter_scope(5);
        let class = class_of(64, 8).unwrap();
        let mut objects = Vec::new();
        while heaps.node(NodeId(0)).steals.load(Ordering::Relaxed) == 0 {
            let p = allocate(&mut heap, class);
            assert!(!p.is_null());
            objects.push(p);
            assert!(objects.len() < 4 << 20, "the home region never ran out");
        }
        // The list now holds the rest of a stolen batch: free node-0 objects until cuts drain
        // it, then flush.
        let home: std::collections::HashSet<_> = objects
            .iter()
            .copied()
            .filter(|&p| heaps.origin_of(p as usize) == Some(NodeId(0)))
            .take(8 * class.cache_limit())
            .collect();
        for &p in &home {
            // SAFETY: allocated above, freed once.
            unsafe { heap.free(p, class) };
        }
        heap.flush();
        heaps.flush_all();
        // Everything else comes back too, and every bag of both nodes with it.
        for p in objects.into_iter().filter(|p| !home.contains(p)) {
            // SAFETY: allocated above, freed once.
            unsafe { heap.free(p, class) };
        }
        heap.flush();
        heaps.flush_all();
        let stats = heaps.collect_stats(1);
        assert_eq!(
            stats.classes()[class.index()].bags,
            0,
            "partitions {partitions}"
        );
    }
}

/// A thread's first free of a class it has not allocated yet is another thread's object: the
/// heap takes a batch of its own first, so its next allocations do not hand that object out
/// (two threads would write one cache line), and the object comes back last, not lost. Once
/// the list was refilled, frees are handed out newest first again.
#[test]
fn a_first_free_of_another_threads_object_goes_behind_a_batch_of_the_threads_own() {
    let heaps = heaps(1);
    for size in [8, 64, 1024] {
        let class = class_of(size, 8).unwrap();
        let mut owner = attached(heaps, NodeId(0));
        let handed = allocate(&mut owner, class);
        let neighbour = allocate(&mut owner, class);
        let mut thread = attached(heaps, NodeId(0));
        // SAFETY: `handed` is a live object of `class`, given up here.
        unsafe { thread.free(handed, class) };
        assert_eq!(
            thread.lists[class.index()].tail(),
            handed,
            "{size} B: not the oldest"
        );
        let cached = thread.cached(class);
        assert!(
            cached > 1,
            "{size} B: no batch of the thread's own ({cached} cached)"
        );
        let mut taken = Vec::new();
        for _ in 0..cached - 1 {
            let object = allocate(&mut thread, class);
            assert_ne!(
                object, handed,
                "{size} B: the other thread's object came back first"
            );
            taken.push(object);
        }
        assert_eq!(
            allocate(&mut thread, class),
            handed,
            "{size} B: the object was lost"
        );
        // A refilled list is newest first.
        let last = taken.pop().unwrap();
        // SAFETY: `last` is a live object of `class` this heap handed out.
        unsafe { thread.free(last, class) };
        assert_eq!(
            allocate(&mut thread, class),
            last,
            "{size} B: not newest first"
        );
        for object in taken.into_iter().chain([last, handed, neighbour]) {
            // SAFETY: live objects of `class`, each freed once.
            unsafe { thread.free(object, class) };
        }
        thread.flush();
        owner.flush();
    }
}

/// A write after free that puts a live block's address (or zero) into a cached block's link:
/// the pop after the one that hands the block out refuses the link (its slow path then aborts
/// naming the block) instead of handing the live block out a second time.
#[test]
fn a_pointer_or_zero_written_into_a_cached_link_is_refused_by_the_next_pop() {
    let heaps = heaps(1);
    let class = class_of(48, 8).unwrap();
    for forged in [None, Some(0usize)] {
        let mut heap = attached(heaps, NodeId(0));
        let freed = allocate(&mut heap, class);
        let live = allocate(&mut heap, class);
        // SAFETY: `freed` is ours; given up here.
        unsafe { heap.free(freed, class) };
        let word = forged.unwrap_or(live as usize);
        // SAFETY: the write after free under test, into the freed block's first word.
        unsafe { (freed as *mut usize).write(word) };
        assert_eq!(heap.alloc_cached(class), freed);
        assert!(
            heap.alloc_cached(class).is_null(),
            "the pop took the forged link {word:#x}"
        );
        assert_eq!(
            crate::ds::stored_link(heap.list_ref(class.slot()).head),
            word,
            "the refused head decodes back to the word written"
        );
        // Repair the list (as if nothing was cached) and let the heap go.
        heap.lists[class.index()].head = core::ptr::null_mut();
        let _ = live;
    }
}

/// A heap whose thread exits keeps its caches for the next thread (see `pool::recycle`): homed
/// on the same node, the next thread pops the objects the last one freed, on its fast path;
/// homed on another node, they go back to their own node's bags first. Nothing pops from a
/// parked heap.
#[test]
fn caches_a_thread_leaves_are_the_next_threads_on_its_node_and_go_home_otherwise() {
    let heaps = heaps(2);
    let class = class_of(200, 8).unwrap();
    let out_of_bags = |node: usize| {
        heaps
            .class(NodeId(node), class)
            .out_of_bags
            .load(Ordering::Relaxed)
    };
    for next_node in [0, 1] {
        let mut heap = attached(heaps, NodeId(0));
        let objects: Vec<_> = (0..8).map(|_| allocate(&mut heap, class)).collect();
        for &object in &objects {
            // SAFETY: handed out above, given up once.
            unsafe { heap.free(object, class) };
        }
        let cached = heap.cached(class);
        assert!(cached >= objects.len());
        assert!(
            super::pool::park(&mut heap),
            "an attached heap keeps its caches"
        );
        assert_eq!(heap.state(), HeapState::Fresh);
        assert!(
            heap.alloc_cached(class).is_null(),
            "a parked heap handed out an object"
        );
        heap.attach(heaps, NodeId(next_node));
        assert_eq!(heap.kept_since(), 0);
        if next_node == 0 {
            assert_eq!(heap.cached(class), cached, "the caches were not kept");
            let first = heap.alloc_cached(class);
            assert_eq!(
                first,
                objects[objects.len() - 1],
                "not the last object freed"
            );
            // SAFETY: handed out above, given up once.
            unsafe { heap.free(first, class) };
        } else {
            assert_eq!(
                heap.cached(class),
                0,
                "node 0's objects stayed in a node 1 heap"
            );
            assert_eq!(out_of_bags(0), 0, "node 0's objects did not go home");
        }
        heap.retire();
    }
    assert_eq!(out_of_bags(0), 0);
}

/// A heap in secure mode, or under a hard limit, keeps no caches for the next thread.
#[test]
fn no_caches_are_kept_in_secure_mode_or_under_a_limit() {
    let heaps = heaps(1);
    heaps.set_limit(64 << 20);
    let mut heap = attached(heaps, NodeId(0));
    assert!(!heap.can_keep_caches());
    assert!(!super::pool::park(&mut heap));
    heap.retire();
    let secure = NodeHeaps::create(crate::arena::tests::test_arena_secure(1, false)).unwrap();
    let mut heap = attached(secure, NodeId(0));
    assert!(!super::pool::park(&mut heap));
    heap.retire();
}

/// The block a screen's `on_marked` was last handed (0: none), for the test below.
static MARKED: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// A screen's `on_marked` that notes the block (and keeps it out of the cache).
unsafe extern "C" fn note_marked(block: *mut u8, _heap: &mut ThreadHeap) {
    MARKED.store(block as usize, Ordering::Relaxed);
}

/// A `miss` for [`ThreadHeap::malloc_hit`] that serves nothing.
unsafe extern "C" fn no_miss(_size: usize, _heap: *mut core::ffi::c_void) -> *mut u8 {
    core::ptr::null_mut()
}

/// The C face's hits: a free of a home block writes the screen's mark and caches the block,
/// the next `malloc` of its size hands it back with the mark's word cleared, a second free of
/// a cached block goes to `on_marked` (and is not linked in twice), and what is no home block
/// is refused untouched.
#[test]
fn the_c_hits_apply_the_screen_both_ways() {
    let heaps = heaps(1);
    let mut heap = attached(heaps, NodeId(0));
    let screen = Screen {
        mark: 0xFFFF_FFFF_1234_5678,
        on_marked: note_marked,
    };
    let class = crate::size_class::class_of_malloc(64).unwrap();
    let block = allocate(&mut heap, class);
    let heap_ptr: *mut ThreadHeap = &mut *heap;
    // SAFETY: `heap_ptr` is the test's own heap; `block` is a live home block given up once.
    assert!(unsafe { ThreadHeap::free_hit(heap_ptr, block, screen) });
    // SAFETY: a cached block of at least 16 bytes.
    assert_eq!(unsafe { *(block.add(8) as *const usize) }, screen.mark);
    // SAFETY: as above; the block is cached, so its second free is the misuse under test.
    assert!(unsafe { ThreadHeap::free_hit(heap_ptr, block, screen) });
    assert_eq!(MARKED.swap(0, Ordering::Relaxed), block as usize);
    // SAFETY: the test's own heap.
    let again = unsafe { ThreadHeap::malloc_hit(heap_ptr, 64, no_miss) };
    assert_eq!(again, block, "cached once, handed out once");
    // SAFETY: handed out just now, at least 16 bytes.
    assert_eq!(unsafe { *(again.add(8) as *const usize) }, 0);
    let mut word = 0usize;
    // SAFETY: a stack word is no home block: refused, untouched.
    assert!(!unsafe { ThreadHeap::free_hit(heap_ptr, &mut word as *mut usize as *mut u8, screen) });
    // SAFETY: null is no block either.
    assert!(!unsafe { ThreadHeap::free_hit(heap_ptr, core::ptr::null_mut(), screen) });
    assert_eq!(MARKED.load(Ordering::Relaxed), 0);
    // SAFETY: handed out above, freed once.
    unsafe { heap.free(again, class) };
}
