//! Transfer rings per class, sharded by CPU on nodes with many CPUs.
//!
//! Every thread of a node hands its batches over through the node's ring of each class, and on
//! a node with dozens of CPUs that one ring's head and tail become the line every core meets.
//! A node of more than [`CPUS_PER_SHARD`] CPUs therefore gives each class of its default
//! partition several rings (at most [`MAX_RING_SHARDS`]): a thread pushes into the ring of the
//! shard its CPU belongs to, and pops from it first, then from the other shards of its node in
//! turn, before it goes to the bags (Hoard's order: near before far, the node before other
//! nodes). Each shard has its own budget, grown and decayed by its own flow. Shard 0 is the ring
//! inside the class heap; the others live in one array beside the node heaps, untouched until
//! used. A node of up to [`CPUS_PER_SHARD`] CPUs has one shard, and nothing changes: the thread
//! reads no CPU and looks at no other ring.
//!
//! The class lock and its bags stay one per class: the rings take the steady traffic, the bags
//! only what overflows or runs dry, and each shard adds a ring's budget to what the node holds
//! before its threads meet at the lock.

use super::*;

/// CPUs of one node that share a ring shard; a node with more CPUs gets more shards.
pub const CPUS_PER_SHARD: usize = 16;

pub use crate::os::options::MAX_RING_SHARDS;

/// One transfer ring of a class heap, with the counts and the budget that follow its flow.
#[repr(C, align(64))]
pub(super) struct RingShard {
    ring: TransferRing,
    /// Objects in the ring (updated after each push and pop, so a hint).
    pub(super) in_ring: AtomicUsize,
    /// Set by every push and pop, cleared by upkeep: a ring left untouched for a whole upkeep
    /// period is drained into its bags so idle batches stop pinning memory.
    pub(super) touched: AtomicBool,
    /// The ring's grown budget in objects (0: the base, [`ring_objects`]), a pop since the
    /// budget last grew (someone takes what the ring holds), and a refused push since the last
    /// upkeep pass (see [`RingShard::raise_budget`] and [`RingShard::decay_budget`]).
    pub(super) budget: AtomicUsize,
    popped: AtomicBool,
    refused: AtomicBool,
    /// Batches pushed and popped through this ring by the program's threads, counted on
    /// sharded nodes only (statistics: how the shards share the traffic; see
    /// [`NodeHeaps::note_shard_operation`]).
    pub(super) operations: AtomicU64,
}

impl RingShard {
    /// The ring's oldest batch, counted in `ops` (the owning node heap's).
    pub(super) fn pop(&self, ops: &SharedOps) -> Option<Batch> {
        let mut retries = 0;
        let batch = self.ring.pop_counting_retries(&mut retries);
        ops.count_ring_retries(retries);
        let batch = batch?;
        if !self.popped.load(Ordering::Relaxed) {
            self.popped.store(true, Ordering::Relaxed);
        }
        ops.ring_pops.fetch_add(1, Ordering::Relaxed);
        self.in_ring.fetch_sub(batch.count, Ordering::Relaxed);
        Some(batch)
    }

    /// Pushes `batch` if the ring has a slot and would hold at most `max_objects` objects with
    /// it (see [`ring_objects`]); gives the batch back otherwise. Counted in `ops` (the owning
    /// node heap's).
    pub(super) fn push(
        &self,
        batch: Batch,
        max_objects: usize,
        ops: &SharedOps,
    ) -> Result<(), Batch> {
        let count = batch.count;
        // A hint: a pop's subtraction can overtake the push's addition, leaving it briefly
        // below zero (wrapped), as the statistics also read it.
        let in_ring = (self.in_ring.load(Ordering::Relaxed) as isize).max(0) as usize;
        if in_ring + count > max_objects {
            return Err(batch);
        }
        let mut retries = 0;
        let pushed = self
            .ring
            .push_counting_retries(batch, RING_SLOTS, &mut retries);
        ops.count_ring_retries(retries);
        pushed?;
        ops.ring_pushes.fetch_add(1, Ordering::Relaxed);
        self.in_ring.fetch_add(count, Ordering::Relaxed);
        Ok(())
    }

    /// True when the ring holds no batch (a hint).
    pub(super) fn is_empty(&self) -> bool {
        self.ring.len_hint() == 0
    }

    /// The objects of `class` the ring may hold now: its base budget, or more once grown.
    pub(super) fn budget(&self, class: SizeClass) -> usize {
        self.budget.load(Ordering::Relaxed).max(ring_objects(class))
    }

    /// After a push that `budget` (the ring's budget of `class`) refused: doubles the budget,
    /// up to [`ring_objects_max`], if a thread took a batch from the ring since it last grew
    /// (a flow from threads that free to threads that allocate, which the ring should carry
    /// rather than the bags) and the node's rings have grown by less than
    /// [`NODE_RING_GROWN_BYTES`] with it (`grown`, the node's count); the new budget, or `None`
    /// when it stays. Every refusal also keeps the budget from shrinking at the next upkeep
    /// pass. The budget changes by compare-and-swap, so `grown` counts what the budgets hold.
    pub(super) fn raise_budget(
        &self,
        class: SizeClass,
        budget: usize,
        grown: &AtomicUsize,
    ) -> Option<usize> {
        if !self.refused.load(Ordering::Relaxed) {
            self.refused.store(true, Ordering::Relaxed);
        }
        let max = ring_objects_max(class);
        if budget >= max || !self.popped.swap(false, Ordering::Relaxed) {
            return None;
        }
        let raised = (budget * 2).min(max);
        let add = (raised - budget) * class.size();
        if !charge_within(grown, add, NODE_RING_GROWN_BYTES) {
            return None;
        }
        // The field holds 0 for the base budget (see `budget`).
        let stored = if budget == ring_objects(class) {
            0
        } else {
            budget
        };
        if self
            .budget
            .compare_exchange(stored, raised, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            // Another thread moved the budget meanwhile: its step stands.
            grown.fetch_sub(add, Ordering::Relaxed);
            return None;
        }
        Some(raised)
    }

    /// The upkeep pass's step for the ring's budget: halved (back to the base at most) unless
    /// a push was refused since the last pass, so memory the flow needed stops being kept a few
    /// periods after the flow ends. A ring holding more than its new budget drains by its pops.
    ///
    /// It reads before it writes: the pass visits every class of every node, and a write to a
    /// class nobody uses would make its page of the node heaps resident (up to 228 KiB a node
    /// for a program that uses a few classes).
    pub(super) fn decay_budget(&self, class: SizeClass, grown: &AtomicUsize) {
        if self.refused.load(Ordering::Relaxed) && self.refused.swap(false, Ordering::Relaxed) {
            return;
        }
        let budget = self.budget.load(Ordering::Relaxed);
        if budget == 0 {
            return;
        }
        let base = ring_objects(class);
        let halved = budget / 2;
        let next = if halved <= base { 0 } else { halved };
        if self
            .budget
            .compare_exchange(budget, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            grown.fetch_sub((budget - next.max(base)) * class.size(), Ordering::Relaxed);
        }
    }
}

/// Ring shards each node has: `requested` (from `NODALLOC_RING_SHARDS`, 0 for automatic), or one
/// per [`CPUS_PER_SHARD`] CPUs of the node with the most, at most [`MAX_RING_SHARDS`].
pub(super) fn shard_count(topology: &Topology, requested: usize) -> usize {
    let count = if requested != 0 {
        requested
    } else {
        (0..topology.node_count())
            .map(|node| topology.node(node).cpus.count().div_ceil(CPUS_PER_SHARD))
            .max()
            .unwrap_or(1)
    };
    count.clamp(1, MAX_RING_SHARDS)
}

/// Fills `table` (one byte per CPU) with the shard of each CPU of `topology`: a node's CPUs, in
/// order, split into `shards` runs of equal length, so neighbouring CPUs (often one core's
/// hyperthreads, or one cache's cores) share a shard.
pub(super) fn fill_cpu_shards(topology: &Topology, shards: usize, table: &mut [u8]) {
    for node in 0..topology.node_count() {
        let cpus = &topology.node(node).cpus;
        let count = cpus.count().max(1);
        for (position, cpu) in cpus.iter().enumerate() {
            if let Some(entry) = table.get_mut(cpu) {
                *entry = (position * shards / count) as u8;
            }
        }
    }
}

impl NodeHeaps {
    /// Ring shards per class of each node's default partition.
    pub(crate) fn ring_shards(&self) -> usize {
        self.shards
    }

    /// Ring shards of `part`: partitions have one (their ring holds one batch anyway).
    fn shards_of(&self, part: Partition) -> usize {
        if part == Partition::DEFAULT {
            self.shards
        } else {
            1
        }
    }

    /// The shard of the CPU the calling thread runs on (0 with one shard: no CPU is read).
    pub(super) fn shard_here(&self) -> usize {
        if self.shards == 1 {
            return 0;
        }
        match os::current_cpu() {
            // SAFETY: the table has `MAX_CPUS` entries, written before the heaps were shared.
            Some(cpu) if cpu < MAX_CPUS => unsafe { *self.cpu_shards.add(cpu) as usize },
            _ => 0,
        }
    }

    /// Ring shard `shard` of (`node`, `part`, `class`): shard 0 is the class heap's own.
    pub(super) fn ring_shard(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        shard: usize,
    ) -> &RingShard {
        if shard == 0 || part != Partition::DEFAULT {
            return self.ring_in(node, part, class);
        }
        debug_assert!(shard < self.shards);
        let index = (node.index() * (self.shards - 1) + shard - 1) * NUM_CLASSES + class.index();
        // SAFETY: `extra_rings` holds `nodes × (shards − 1) × NUM_CLASSES` zeroed shards (see
        // `create_sharded`), as long-lived as the heaps; all-zero is an empty ring.
        unsafe { &*self.extra_rings.add(index) }
    }

    /// Every ring shard of (`node`, `part`, `class`) that may hold a batch, with its index: none
    /// while no batch of the class's default partition ever went into a ring (see
    /// [`Self::rings_used`]).
    pub(super) fn ring_shards_of(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
    ) -> impl Iterator<Item = (usize, &RingShard)> {
        let shards = if self.rings_used(node, part, class) {
            self.shards_of(part)
        } else {
            0
        };
        self.first_ring_shards(node, part, class, shards)
    }

    /// Every ring shard of (`node`, `part`, `class`), used or not: for the double-free screen,
    /// which must find an object in a batch pushed by another thread whose note of the push it
    /// may not see yet.
    pub(super) fn every_ring_shard_of(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
    ) -> impl Iterator<Item = (usize, &RingShard)> {
        self.first_ring_shards(node, part, class, self.shards_of(part))
    }

    /// Ring shards 0 to `shards` (excluded) of (`node`, `part`, `class`), with their indices.
    fn first_ring_shards(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        shards: usize,
    ) -> impl Iterator<Item = (usize, &RingShard)> {
        (0..shards).map(move |shard| (shard, self.ring_shard(node, part, class, shard)))
    }

    /// False while no batch of `class` in the default partition of `node` ever went into one
    /// of its rings (`NodeHeap::rings_used`): nothing to pop, and the rings' pages untouched.
    /// True for the other partitions, whose rings are looked into as before.
    #[inline]
    pub(super) fn rings_used(&self, node: NodeId, part: Partition, class: SizeClass) -> bool {
        if part != Partition::DEFAULT {
            return true;
        }
        let (word, bit) = super::partition::class_bit(class);
        self.node(node).rings_used[word].load(Ordering::Relaxed) & bit != 0
    }

    /// Records that a batch of `class` is going into one of the rings of `node`'s default
    /// partition (before the push: a refill that does not see the bit yet takes from the bags
    /// instead, as it would from an empty ring).
    pub(super) fn note_rings_used(&self, node: NodeId, part: Partition, class: SizeClass) {
        if part != Partition::DEFAULT {
            return;
        }
        let (word, bit) = super::partition::class_bit(class);
        let used = &self.node(node).rings_used[word];
        if used.load(Ordering::Relaxed) & bit == 0 {
            used.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// A batch of `class` in partition `part` from `node`'s transfer rings, if they hold one (a
    /// refill tries them before [`Self::take_from_bags`]): the shard of the calling thread's CPU
    /// first, then the node's other shards in turn.
    pub fn ring_refill(&self, node: NodeId, part: Partition, class: SizeClass) -> Option<Batch> {
        if !self.rings_used(node, part, class) {
            return None;
        }
        let shards = self.shards_of(part);
        let home = if shards == 1 { 0 } else { self.shard_here() };
        let ops = &self.node(node).ops;
        (0..shards).find_map(|step| {
            let ring = self.ring_shard(node, part, class, (home + step) % shards);
            let batch = ring.pop(ops)?;
            ring.touched.store(true, Ordering::Relaxed);
            self.note_shard_operation(ring);
            Some(batch)
        })
    }

    /// Counts a push or pop of a thread on `ring` in its shard's statistics, on a sharded node
    /// (one shard's count is the node's ring pushes and pops: no second counter on a line every
    /// thread of the node writes).
    pub(super) fn note_shard_operation(&self, ring: &RingShard) {
        if self.shards > 1 {
            ring.operations.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Batches the program's threads pushed and popped through each ring shard of `node`, over
    /// all classes of its default partition (statistics; with one shard, every ring push and
    /// pop of the node).
    pub(crate) fn shard_operations(&self, node: NodeId) -> [u64; MAX_RING_SHARDS] {
        let mut operations = [0; MAX_RING_SHARDS];
        if self.shards == 1 {
            let ops = &self.node(node).ops;
            operations[0] =
                ops.ring_pushes.load(Ordering::Relaxed) + ops.ring_pops.load(Ordering::Relaxed);
            return operations;
        }
        for class in 0..NUM_CLASSES {
            let class = SizeClass(class as u8);
            for (shard, ring) in self.ring_shards_of(node, Partition::DEFAULT, class) {
                operations[shard] += ring.operations.load(Ordering::Relaxed);
            }
        }
        operations
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::tests::test_arena;
    use crate::size_class::class_of;

    /// Whether the page holding `address` is mapped in (`mincore`; a page only read maps the
    /// shared zero page, which counts).
    fn page_mapped(address: usize) -> bool {
        let page = address & !(crate::os::PAGE_SIZE - 1);
        let mut resident = 0u8;
        // SAFETY: one page of a live mapping (the node heaps' memory), one byte of result.
        let result = unsafe {
            libc::mincore(
                page as *mut libc::c_void,
                crate::os::PAGE_SIZE,
                &mut resident,
            )
        };
        assert_eq!(result, 0, "mincore");
        resident & 1 != 0
    }

    /// A refill of a class whose rings never held a batch goes to the bags without reading the
    /// rings (each spans a page of its own, which every class a program used cost it as a page
    /// fault); once a batch went into one, refills find it there.
    #[test]
    fn refills_leave_the_rings_of_a_class_alone_until_a_batch_goes_into_one() {
        let heaps = NodeHeaps::create(test_arena(1, 256 << 20, 0)).unwrap();
        let (node, part) = (NodeId(0), Partition::DEFAULT);
        // A class in the middle of the table: its ring's pages hold only its neighbours' rings,
        // which nothing here uses.
        let class = class_of(640, 8).unwrap();
        let ring = heaps.ring_shard(node, part, class, 0);
        let header = ring as *const RingShard as usize;
        assert!(
            !page_mapped(header),
            "the ring's page is mapped before any use"
        );
        assert_eq!(heaps.ring_refill(node, part, class), None);
        let batch = heaps
            .take_from_bags(node, part, class, class.batch())
            .unwrap();
        assert!(!page_mapped(header), "a refill read the class's empty ring");
        heaps.release(node, part, class, batch);
        assert!(page_mapped(header));
        let refilled = heaps
            .ring_refill(node, part, class)
            .expect("the released batch");
        assert_eq!((refilled.head, refilled.count), (batch.head, batch.count));
    }

    /// Shards follow the node's size (one per 16 CPUs of the largest node, at most eight) unless
    /// the option sets them, and split a node's CPUs into runs of neighbours.
    #[test]
    fn ring_shards_split_the_largest_nodes_cpus_into_runs_of_neighbours() {
        let topology_of = |cpus: usize| {
            let mut set = crate::os::cpuset::CpuSet::new();
            for cpu in 0..cpus {
                set.insert(cpu);
            }
            Box::new(Topology::single(set))
        };
        let cases = [
            (2, 0, 1),
            (16, 0, 1),
            (17, 0, 2),
            (64, 0, 4),
            (512, 0, 8),
            (2, 3, 3),
            (64, 1, 1),
        ];
        for (cpus, requested, expected) in cases {
            assert_eq!(
                shard_count(&topology_of(cpus), requested),
                expected,
                "{cpus} CPUs, {requested} requested"
            );
        }
        let mut table = [u8::MAX; 80];
        fill_cpu_shards(&topology_of(64), 4, &mut table);
        for (cpu, &shard) in table.iter().enumerate() {
            let expected = if cpu < 64 { (cpu / 16) as u8 } else { u8::MAX };
            assert_eq!(shard, expected, "CPU {cpu}");
        }
    }

    /// On a sharded node a batch in any shard reaches a refill (the thread's own shard first, then
    /// the others), the double-free screen looks into every shard, the statistics count each
    /// shard's traffic and what it holds, upkeep drains shards nobody touched, and `flush_all`
    /// empties them all.
    #[test]
    fn a_sharded_nodes_rings_serve_each_other_and_are_drained_whole() {
        const SHARDS: usize = 4;
        let heaps = NodeHeaps::create_sharded(test_arena(1, 256 << 20, 0), 0, SHARDS).unwrap();
        assert_eq!(heaps.ring_shards(), SHARDS);
        let (node, part) = (NodeId(0), Partition::DEFAULT);
        let class = class_of(64, 8).unwrap();
        let ops = &heaps.node(node).ops;
        let take = || {
            heaps
                .take_from_bags(node, part, class, class.batch())
                .unwrap()
        };
        let push_to = |shard: usize, batch: Batch| {
            heaps.note_rings_used(node, part, class);
            let ring = heaps.ring_shard(node, part, class, shard);
            assert!(ring.push(batch, ring.budget(class), ops).is_ok());
        };
        // One batch in the last shard: whatever CPU runs this, the refill finds it.
        let batch = take();
        push_to(SHARDS - 1, batch);
        let refilled = heaps
            .ring_refill(node, part, class)
            .expect("a batch in shard 3");
        assert_eq!((refilled.head, refilled.count), (batch.head, batch.count));
        assert_eq!(heaps.ring_refill(node, part, class), None);
        // The screen looks into every shard (and releases what it popped into the CPU's shard).
        push_to(SHARDS - 1, refilled);
        assert_eq!(
            heaps.find_freed(node, class, batch.head),
            Some(Misuse::DoubleFree),
            "the screen looks into every shard"
        );
        let refilled = heaps
            .ring_refill(node, part, class)
            .expect("the screen's batch");
        assert_eq!(refilled.head, batch.head);
        // One batch per shard, held in the class's statistics. Counted per shard: the threads'
        // operations (the refills' pops and the screen's release), not the test's own pushes.
        for shard in 0..SHARDS {
            push_to(shard, if shard == 0 { refilled } else { take() });
        }
        let operations = heaps.shard_operations(node);
        assert_eq!(operations.iter().sum::<u64>(), 3, "{operations:?}");
        assert_eq!(
            operations[SHARDS - 1],
            1,
            "the first refill: {operations:?}"
        );
        let stats = heaps.collect_stats(0);
        assert_eq!(stats.nodes[0].ring_shards, SHARDS);
        assert_eq!(stats.nodes[0].shard_ring_operations, operations);
        let in_rings = stats.classes[class.index()].in_rings;
        assert_eq!(in_rings, SHARDS * class.batch() * class.size());
        // Upkeep drains the shards nobody popped from or released into for a whole period (the
        // screen's look released its batches again, so one shard was touched: the second pass).
        let period = upkeep_period(heaps.arena.decommit.delay_ns);
        let far = os::monotonic_ns() + 10 * period;
        heaps.upkeep(node, far);
        heaps.upkeep(node, far + period + 1);
        for shard in 0..SHARDS {
            let ring = heaps.ring_shard(node, part, class, shard);
            assert!(ring.is_empty(), "shard {shard}");
        }
        let out_of_bags = || heaps.class(node, class).out_of_bags.load(Ordering::Relaxed);
        assert_eq!(out_of_bags(), 0);
        // And `flush_all` empties every shard whatever its state.
        for shard in 0..SHARDS {
            push_to(shard, take());
            let ring = heaps.ring_shard(node, part, class, shard);
            ring.touched.store(true, Ordering::Relaxed);
        }
        heaps.flush_all();
        for shard in 0..SHARDS {
            let ring = heaps.ring_shard(node, part, class, shard);
            assert!(ring.is_empty(), "shard {shard}");
        }
        assert_eq!(out_of_bags(), 0);
    }
}
