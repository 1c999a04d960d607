//! **Prepared bags**: the maintenance thread carves bags of big classes ahead of demand.
//!
//! Bags of classes above [`DENSE_OBJECT_MAX`] come from the sparse pool, which is never
//! populated ahead (a program may touch its big objects sparsely). Carving such a bag writes
//! each object's link into the object's first page, so a refill that carves faults one page per
//! object in, inside the program's `malloc`: in a heap that grows, nearly every refill of a big
//! class paid page faults.
//!
//! While a class has demand (a thread of the node started a bag of it in the last
//! [`PREPARE_WINDOW_NS`]), the maintenance thread keeps [`WAITING_BAGS`] bags of it carved
//! ahead: it takes the span, writes every object's link (faulting in the first page of each
//! object: the pages a carve would touch, and those the program touches when it uses the
//! object), sets all the bag's free bits and appends the bag to the class's partial list,
//! behind the bags that threads already use. A refill then takes resident objects. Once demand pauses, prepared bags
//! no thread took from go back to the pool like any free span.
//!
//! Only while the pool of big objects keeps less than a bag's worth of free memory committed:
//! a bag a thread starts from committed free memory (a bag that fell empty, a freed large
//! block) faults nothing in, so preparing one saves nothing. Without that rule the thread
//! prepared 1 700–2 700 bags per run of the latency and churn cases (bags of big classes hold
//! few objects and fall empty all the time), most of its CPU (docs/JOURNAL.md "Prepared bags only
//! where a bag would fault").
//!
//! A prepared bag is the only bag on a partial list with no object out (`live == 0`): any other
//! bag goes back to its pool the moment its last object returns. That tells a refill that it
//! starts a prepared bag, and the maintenance thread which bags to take back.
//!
//! Not in secure mode (random carving order, encoded links checked against the allocation
//! bitmap), not with call-site partitions, and not under a hard limit: a prepared bag is
//! committed memory that an allocation the limit refuses could not get back.
//!
//! Layer: part of the node heap, called by the maintenance thread; calls `arena`.

use super::bags::{push_back, unlink};
use super::*;
use crate::arena::region::PREPARE_WINDOW_NS;
use crate::arena::Pool;

/// Prepared bags a class with demand keeps waiting per node at first. Big classes hold 1 to
/// 11 objects per bag; a class whose threads take every waiting bag between two steps of the
/// maintenance thread gets twice as many, up to [`MAX_WAITING_BAGS`] and
/// [`MAX_WAITING_BYTES`].
pub(crate) const WAITING_BAGS: usize = 2;

/// The most prepared bags a class keeps waiting per node.
const MAX_WAITING_BAGS: usize = 16;

/// The most bytes of bags a class keeps waiting per node (at least one bag): a thread cache's
/// grown limit for one class.
const MAX_WAITING_BYTES: usize = 256 << 10;

/// The most bytes of bags all classes of a node keep waiting together, so a small program is
/// not doubled by bags it may never use.
const MAX_NODE_WAITING_BYTES: usize = 8 << 20;

impl NodeHeaps {
    /// The maintenance thread's step for prepared bags on every node. True while some class has
    /// demand (the caller comes back soon).
    pub(super) fn prepare_bags(&self, now: u64) -> bool {
        if self.arena.is_secure() || self.partitions() != 0 || self.is_limited() {
            return false;
        }
        let mut wanted = false;
        for node in self.nodes() {
            // Free memory still committed in the pool of big objects (the dense pool of a
            // merged region): a bag a thread starts from it faults nothing in, so there is
            // nothing to prepare it for.
            let big = if self.arena.is_merged() {
                Pool::Dense
            } else {
                Pool::Sparse
            };
            let dirty = self.arena.pool(node.index(), big).dirty_bytes();
            // A class no thread took a bag of yet has started none, so nothing is prepared
            // for it (and its lock stays untaken: see `NodeHeap::used`).
            self.for_each_used_class(node, |class| {
                if class.size() > DENSE_OBJECT_MAX {
                    wanted |= self.prepare_class(node, class, now, dirty);
                }
            });
        }
        wanted
    }

    /// Bags carved ahead of demand so far, all nodes.
    pub(crate) fn bags_prepared(&self) -> u64 {
        self.nodes()
            .map(|node| self.node(node).bags_prepared.load(Ordering::Relaxed))
            .sum()
    }

    /// A waiting prepared bag of `class` on `node` is no longer waiting: a thread started it,
    /// or the maintenance thread took it back.
    pub(super) fn forget_waiting(&self, node: NodeId, class: SizeClass) {
        self.class(node, class)
            .prepared_waiting
            .fetch_sub(1, Ordering::Relaxed);
        self.node(node)
            .prepared_bytes
            .fetch_sub(class.bag_bytes(), Ordering::Relaxed);
    }

    /// Follows the demand for `class` on `node` and prepares or takes back its bags; none are
    /// prepared while the pool keeps `dirty` free bytes committed, at least a bag's worth.
    fn prepare_class(&self, node: NodeId, class: SizeClass, now: u64, dirty: usize) -> bool {
        let class_heap = self.class(node, class);
        let started = class_heap.started_bags.load(Ordering::Relaxed);
        if started != class_heap.prepare_seen.load(Ordering::Relaxed) {
            class_heap.prepare_seen.store(started, Ordering::Relaxed);
            class_heap
                .prepare_until
                .store(now.saturating_add(PREPARE_WINDOW_NS), Ordering::Relaxed);
        }
        let until = class_heap.prepare_until.load(Ordering::Relaxed);
        if until == 0 {
            return false;
        }
        if now >= until {
            class_heap.prepare_until.store(0, Ordering::Relaxed);
            class_heap.prepare_target.store(0, Ordering::Relaxed);
            self.take_back_prepared(node, class);
            return false;
        }
        // Threads that took every waiting bag since the last step outran it: keep twice as
        // many waiting from now on (until demand pauses).
        let most = (MAX_WAITING_BYTES / class.bag_bytes()).clamp(1, MAX_WAITING_BAGS);
        let target = match class_heap.prepare_target.load(Ordering::Relaxed) {
            0 => WAITING_BAGS.min(most),
            target if class_heap.prepared_waiting.load(Ordering::Relaxed) == 0 => {
                (2 * target).min(most)
            }
            target => target,
        };
        class_heap.prepare_target.store(target, Ordering::Relaxed);
        let waiting_bytes = &self.node(node).prepared_bytes;
        while dirty < class.bag_bytes()
            && class_heap.prepared_waiting.load(Ordering::Relaxed) < target
            && waiting_bytes.load(Ordering::Relaxed) + class.bag_bytes() <= MAX_NODE_WAITING_BYTES
        {
            if !self.prepare_bag(node, class) {
                break;
            }
        }
        true
    }

    /// Carves one bag of `class` from `node`'s region and appends it to the partial list.
    /// False when the region has no span for it.
    fn prepare_bag(&self, node: NodeId, class: SizeClass) -> bool {
        let arena = self.arena;
        let map = arena.map();
        let class_heap = self.class(node, class);
        let start = {
            let _guard = class_heap.lock_counted(&self.node(node).ops);
            let Some(start) =
                arena.alloc_span_on(node.index(), class.bag_units(), 1, SpanUse::Bag(class))
            else {
                return false;
            };
            // SAFETY: the class lock is held. Recorded so that a fork child, where this
            // thread does not exist, gives the span back (`recover_prepared_after_fork`).
            unsafe { *class_heap.preparing.get() = start };
            start
        };
        let bag = map.meta(map.unit_of(start));
        let size = class.size();
        let capacity = class.capacity();
        // Faulted in without the lock (the page faults are the slow part): the span is ours
        // alone until it is on the list, and its descriptor says nothing is carved yet, so a
        // stray free into it is refused. Each object's first page, by writing its link (null:
        // what a free object of a bag may hold; the bag's free bits list it).
        for index in 0..capacity {
            let object = (start + index * size) as *mut u8;
            // SAFETY: an object of a bag span nobody else can reach yet.
            unsafe { arena.write_link(object, null_mut()) };
        }
        let _guard = class_heap.lock_counted(&self.node(node).ops);
        // SAFETY: the class lock is held; `bag` is the descriptor of our new bag span.
        unsafe {
            *class_heap.preparing.get() = 0;
            let state = &mut (*bag).role.bag;
            map.free_bits(start).set_range(0, capacity, true);
            state.listed = capacity as u16;
            state.carved = capacity as u16;
            state.live = 0;
            state.zeroed = false;
            state.partition = Partition::DEFAULT.0;
            push_back(&mut *class_heap.partial.get(), bag);
        }
        class_heap.bags.fetch_add(1, Ordering::Relaxed);
        class_heap.prepared_waiting.fetch_add(1, Ordering::Relaxed);
        let node_heap = self.node(node);
        node_heap.bags_prepared.fetch_add(1, Ordering::Relaxed);
        node_heap
            .prepared_bytes
            .fetch_add(class.bag_bytes(), Ordering::Relaxed);
        true
    }

    /// In a forked child, after [`NodeHeaps::unlock_all`]: gives back the spans of bags the
    /// parent's maintenance thread was linking (their links are half written; no object of
    /// them was ever out).
    pub(super) fn recover_prepared_after_fork(&self) {
        for node in self.nodes() {
            self.for_each_used_class(node, |class| {
                let class_heap = self.class(node, class);
                // SAFETY: the child has one thread, this one, and the maintenance thread that
                // wrote `preparing` is gone: the read races with nothing. Reading first keeps
                // the lock (on a page of its own) unwritten, so uncopied, when nothing is due.
                if class.size() <= DENSE_OBJECT_MAX || unsafe { *class_heap.preparing.get() } == 0 {
                    return;
                }
                let _guard = class_heap.lock_counted(&self.node(node).ops);
                // SAFETY: the class lock is held.
                let start = core::mem::take(unsafe { &mut *class_heap.preparing.get() });
                if start != 0 {
                    // SAFETY: a bag span of `class` whose objects were never handed out.
                    unsafe { self.arena.free_span(start, class.bag_units()) };
                }
            });
        }
    }

    /// Returns the prepared bags of `class` on `node` that no thread took from to the pool.
    fn take_back_prepared(&self, node: NodeId, class: SizeClass) {
        let map = self.arena.map();
        let class_heap = self.class(node, class);
        let _guard = class_heap.lock_counted(&self.node(node).ops);
        // SAFETY: the class lock is held for the rest of this function.
        let partial = unsafe { &mut *class_heap.partial.get() };
        let mut bag = *partial;
        while !bag.is_null() {
            // SAFETY: the class lock is held and `bag` is on this class's partial list.
            unsafe {
                let next = (*bag).next;
                if (*bag).role.bag.live == 0 {
                    unlink(partial, bag);
                    class_heap.bags.fetch_sub(1, Ordering::Relaxed);
                    self.forget_waiting(node, class);
                    self.forget_released(node, class, bag);
                    let start = map.address_of(map.unit_of_meta(bag));
                    map.free_bits(start).clear(class.capacity());
                    // SAFETY: no object of the bag is out.
                    self.arena.free_span(start, (*bag).units);
                }
                bag = next;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::tests::test_arena;
    use crate::ds::set_next;
    use crate::size_class::class_of;
    use std::collections::HashSet;

    /// The objects of a batch.
    fn objects_of(batch: Batch) -> Vec<*mut u8> {
        crate::node::tests::batch_objects(&batch)
    }

    #[test]
    fn prepared_bags_follow_demand_hand_each_object_out_once_and_go_back_when_it_pauses() {
        let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
        let (node, part) = (NodeId(0), Partition::DEFAULT);
        // 8 KiB objects, four to a 32 KiB bag: up to eight bags may wait.
        let class = class_of(8_000, 8).unwrap();
        let capacity = class.capacity();
        let class_heap = heaps.class(node, class);
        let waiting = || class_heap.prepared_waiting.load(Ordering::Relaxed);
        let bags = || class_heap.bags.load(Ordering::Relaxed);
        let now = 1_000_000_000;
        assert!(!heaps.prepare_bags(now), "no demand yet");
        assert_eq!(heaps.bags_prepared(), 0);

        // A thread starts a bag: the class has demand, and two bags wait behind it.
        let mut taken = objects_of(heaps.take_from_bags(node, part, class, capacity).unwrap());
        assert!(heaps.prepare_bags(now));
        assert_eq!(
            (waiting(), bags(), heaps.bags_prepared()),
            (WAITING_BAGS, 3, 2)
        );
        // Refills take the waiting bags (no new span) until they are gone.
        for _ in 0..WAITING_BAGS * capacity {
            taken.extend(objects_of(
                heaps.take_from_bags(node, part, class, 1).unwrap(),
            ));
        }
        assert_eq!((waiting(), bags()), (0, 3));
        let distinct: HashSet<_> = taken.iter().collect();
        assert_eq!(distinct.len(), taken.len(), "an object handed out twice");
        // Every waiting bag was taken since the last step: twice as many wait now.
        assert!(heaps.prepare_bags(now + 1));
        assert_eq!(
            (waiting(), bags()),
            (2 * WAITING_BAGS, 3 + 2 * WAITING_BAGS)
        );

        // A free into a waiting bag (none of its objects is out) is a double free.
        let waiting_bag = heaps.take_from_bags(node, part, class, 1).unwrap().head;
        assert_eq!(waiting(), 2 * WAITING_BAGS - 1);
        let map = heaps.arena.map();
        // SAFETY: no other thread uses these heaps; the list's second bag still waits.
        let untouched = unsafe { (**class_heap.partial.get()).next };
        // SAFETY: as above.
        assert_eq!(unsafe { (*untouched).role.bag.live }, 0);
        let free = map.address_of(map.unit_of_meta(untouched)) as *mut u8;
        assert!(matches!(
            heaps.return_to_bags(node, class, free, false),
            Err((object, Misuse::DoubleFree)) if object == free
        ));
        taken.push(waiting_bag);

        // Everything comes back: every bag a thread took from goes back to the pool, the three
        // still waiting stay.
        for object in taken {
            // SAFETY: an object we own; a one-object chain.
            unsafe { heaps.arena.write_link(object, null_mut()) };
            heaps.return_to_bags(node, class, object, false).unwrap();
        }
        assert_eq!(
            (waiting(), bags()),
            (2 * WAITING_BAGS - 1, 2 * WAITING_BAGS - 1)
        );
        // The next step sees the bag started since the last one, and tops the waiting up.
        assert!(heaps.prepare_bags(now + 2));
        assert_eq!((waiting(), bags()), (2 * WAITING_BAGS, 2 * WAITING_BAGS));
        // Demand pauses: after the window the waiting bags go back too.
        assert!(!heaps.prepare_bags(now + 2 + PREPARE_WINDOW_NS));
        assert_eq!((waiting(), bags()), (0, 0));
        assert_eq!(heaps.arena.usage(0).active, 0);
        assert!(!heaps.prepare_bags(now + 3 + PREPARE_WINDOW_NS), "quiet");
    }

    #[test]
    fn waiting_bags_stay_within_their_class_and_node_budgets() {
        let heaps = NodeHeaps::create(test_arena(1, 256 << 20, 0)).unwrap();
        let (node, part) = (NodeId(0), Partition::DEFAULT);
        let big = || {
            (0..NUM_CLASSES)
                .map(|index| SizeClass(index as u8))
                .filter(|class| class.size() > DENSE_OBJECT_MAX)
        };
        for step in 0..4 {
            // Every big class takes every bag waiting for it: demand, and targets that double.
            for class in big() {
                while heaps
                    .class(node, class)
                    .prepared_waiting
                    .load(Ordering::Relaxed)
                    != 0
                {
                    heaps.take_from_bags(node, part, class, 1).unwrap();
                }
                heaps.take_from_bags(node, part, class, 1).unwrap();
            }
            assert!(heaps.prepare_bags(1 + step));
            let mut waiting_bytes = 0;
            for class in big() {
                let waiting = heaps
                    .class(node, class)
                    .prepared_waiting
                    .load(Ordering::Relaxed);
                let bytes = waiting * class.bag_bytes();
                assert!(
                    waiting <= MAX_WAITING_BAGS,
                    "{} B: {waiting} bags",
                    class.size()
                );
                assert!(
                    waiting <= 1 || bytes <= MAX_WAITING_BYTES,
                    "{} B: {bytes} bytes waiting",
                    class.size()
                );
                waiting_bytes += bytes;
            }
            let counted = heaps.node(node).prepared_bytes.load(Ordering::Relaxed);
            assert_eq!(counted, waiting_bytes);
            assert!(
                counted <= MAX_NODE_WAITING_BYTES,
                "{counted} bytes waiting on the node"
            );
        }
    }

    #[test]
    fn no_bags_are_prepared_while_the_pool_keeps_free_memory_committed() {
        // Everything freed stays committed until a purge.
        let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
        let (node, part) = (NodeId(0), Partition::DEFAULT);
        let class = class_of(8_000, 8).unwrap();
        let units = class.bag_units();
        let span = heaps
            .arena
            .alloc_span_on(0, 4 * units, 1, SpanUse::Bag(class))
            .unwrap();
        // SAFETY: a span of ours, never handed out, freed once.
        unsafe { heaps.arena.free_span(span, 4 * units) };
        // A thread starts a bag (from that free memory): the class has demand, but the next
        // bags would come from committed memory too, which faults nothing in.
        let taken = objects_of(
            heaps
                .take_from_bags(node, part, class, class.capacity())
                .unwrap(),
        );
        let now = 1_000_000_000;
        assert!(heaps.prepare_bags(now), "the demand was not seen");
        assert_eq!(
            heaps.bags_prepared(),
            0,
            "bags prepared from committed memory"
        );
        // Once the free memory went back to the OS, a bag would fault: they are prepared.
        heaps.purge();
        assert!(heaps.prepare_bags(now + 1));
        assert!(heaps.bags_prepared() >= WAITING_BAGS as u64);
        let mut chain = null_mut();
        for object in taken {
            // SAFETY: objects we took, each given back once.
            unsafe { set_next(object, chain) };
            chain = object;
        }
        heaps.return_to_bags(node, class, chain, false).unwrap();
    }

    #[test]
    fn no_bags_are_prepared_for_small_classes_or_under_a_limit() {
        let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
        let (node, part) = (NodeId(0), Partition::DEFAULT);
        let small = class_of(crate::os::PAGE_SIZE, 8).unwrap();
        let big = class_of(10_000, 8).unwrap();
        heaps.take_from_bags(node, part, small, 1).unwrap();
        assert!(
            !heaps.prepare_bags(1),
            "a dense class: its pool is populated instead"
        );
        heaps.set_limit(64 << 20);
        heaps.take_from_bags(node, part, big, 1).unwrap();
        assert!(
            !heaps.prepare_bags(2),
            "a prepared bag would be memory the limit cannot get"
        );
        assert_eq!(heaps.bags_prepared(), 0);
    }

    #[test]
    fn a_bag_a_fork_left_half_prepared_goes_back_to_its_pool() {
        let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
        let class = class_of(30_000, 8).unwrap();
        // The maintenance thread prepares bags of classes in use only.
        heaps.activate(NodeId(0), Partition::DEFAULT, class);
        let class_heap = heaps.class(NodeId(0), class);
        let start = heaps
            .arena
            .alloc_span_on(0, class.bag_units(), 1, SpanUse::Bag(class))
            .unwrap();
        // SAFETY: no other thread uses these heaps.
        unsafe { *class_heap.preparing.get() = start };
        assert_eq!(heaps.arena.usage(0).active, class.bag_bytes());
        heaps.recover_prepared_after_fork();
        assert_eq!(heaps.arena.usage(0).active, 0);
        // SAFETY: as above.
        assert_eq!(unsafe { *class_heap.preparing.get() }, 0);
    }
}
