//! Call-site partitions, the node side (btmalloc's idea: objects born at one call site tend to
//! die together). With `NODALLOC_CALLSITE=P`, every (node, partition, class) owns its own class
//! heap — ring and bags — so objects of different partitions never share a bag, and a bag whose
//! partition's objects all died goes back to the region whole.
//!
//! Partition 0 is the node heap's own class heaps (the only partition with the mode off). The
//! class heaps of partitions 1 ..< P live in one mapping of `nodes × P` [`PartitionHeap`]s that
//! is touched lazily: a class heap's page is written the first time its partition allocates
//! that class on that node. Those in use are marked *used* (per class) and *active* (per
//! partition) under the activation lock, which a fork's `lock_all` takes first: every class
//! heap whose lock a thread could hold is then one `lock_all` sees.
//!
//! A bag records its partition when it is carved ([`BagState::partition`]); frees and the
//! inbox find an object's class heap from its bag, so they need not be told the partition.
//!
//! [`BagState::partition`]: crate::arena::pagemap::BagState

use super::tiering::Tiering;
use super::*;
use crate::stats::{PartitionStats, Stats};

/// The most partitions `NODALLOC_CALLSITE` may ask for.
pub const MAX_PARTITIONS: usize = 4096;

const ACTIVE_WORDS: usize = MAX_PARTITIONS / 64;

/// A call-site partition, `0 ..< P` (`NODALLOC_CALLSITE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(transparent)]
pub struct Partition(pub(crate) u16);

impl Partition {
    /// The node heaps' own class heaps: every object's partition with the mode off.
    pub const DEFAULT: Partition = Partition(0);

    /// Its number, `0 ..< P`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What the process knows of one partition, over all nodes.
#[repr(C, align(64))]
pub struct PartitionInfo {
    /// The first call site seen allocating in it (0: none recorded, e.g. the Rust face's
    /// explicit partitions).
    pub site: AtomicUsize,
    /// Bags that went back to the region when their last object came back: reclaimed whole.
    pub reclaimed: AtomicU64,
    /// Times a refill took freed objects back out of a bag whose other objects were still out:
    /// a bag picked apart instead of draining.
    pub picked: AtomicU64,
    /// Automatic tiering (`tiering.rs`): refills, returns and far allocations so far.
    pub activity: AtomicU64,
    /// Automatic tiering: `activity` at the last pass, and when (monotonic ns) the partition
    /// was last busy (or first seen); written by the maintenance thread alone.
    pub seen: AtomicU64,
    pub busy_at: AtomicU64,
    /// Automatic tiering: the partition is cold (its new bags come from the far node).
    pub cold: AtomicBool,
}

/// One node's class heaps of one partition.
#[repr(C, align(64))]
pub(super) struct PartitionHeap {
    /// Bit `c` of word `c / 64`: class `c` is in use (set under the activation lock).
    used: [AtomicU64; 2],
    classes: [ClassHeap; NUM_CLASSES],
    /// The class heaps' transfer rings, by class.
    rings: [RingShard; NUM_CLASSES],
}

const _: () = assert!(NUM_CLASSES <= 128);

/// The partitions of an instance: their records and their class heaps.
pub(super) struct Partitions {
    /// P (0: the mode is off and nothing else here exists).
    count: usize,
    infos: *const PartitionInfo,
    /// Per node, `ACTIVE_WORDS` words: bit `p` set when partition `p` has a class heap in use
    /// on that node.
    active: *const AtomicU64,
    /// `nodes × count` heaps, node-major; index 0 of each node is unused (partition 0 is the
    /// node heap's).
    heaps: *const PartitionHeap,
    /// Taken to mark a class heap used, and by `lock_all` (before any class lock).
    activation: SpinLock,
    /// Automatic tiering's state (`tiering.rs`).
    pub(super) tiering: Tiering,
}

impl Partitions {
    pub(super) fn off() -> Partitions {
        Partitions {
            count: 0,
            infos: core::ptr::null(),
            active: core::ptr::null(),
            heaps: core::ptr::null(),
            activation: SpinLock::new(),
            tiering: Tiering::off(),
        }
    }

    /// Reserves the records and class heaps of `count` partitions (clamped to
    /// [`MAX_PARTITIONS`]) on `nodes` nodes, touching nothing. Off for a count of 0 or 1;
    /// `None` if the mapping fails.
    pub(super) fn reserve(count: usize, nodes: usize) -> Option<Partitions> {
        // One partition is no partitioning: the allocator as it is with the mode off.
        if count <= 1 {
            return Some(Partitions::off());
        }
        let count = count.min(MAX_PARTITIONS);
        let infos_bytes = count * core::mem::size_of::<PartitionInfo>();
        let active_bytes = (nodes * ACTIVE_WORDS * 8).next_multiple_of(64);
        let heaps_bytes = nodes * count * core::mem::size_of::<PartitionHeap>();
        let memory = os::reserve(infos_bytes + active_bytes + heaps_bytes)?;
        // SAFETY: offsets inside the fresh mapping, each a multiple of 64; all-zero memory is a
        // valid PartitionInfo, AtomicU64 and PartitionHeap (as for NodeHeap: empty rings and
        // lists, unlocked locks, zero counters).
        unsafe {
            Some(Partitions {
                count,
                infos: memory as *const PartitionInfo,
                active: memory.add(infos_bytes) as *const AtomicU64,
                heaps: memory.add(infos_bytes + active_bytes) as *const PartitionHeap,
                activation: SpinLock::new(),
                tiering: Tiering::off(),
            })
        }
    }
}

impl NodeHeaps {
    /// P, the number of call-site partitions (0: the mode is off).
    #[inline(always)]
    pub(crate) fn partitions(&self) -> usize {
        self.partitions.count
    }

    /// The record of `part` (`None` with the mode off).
    pub(crate) fn partition_info(&self, part: Partition) -> Option<&PartitionInfo> {
        if part.is_owned() {
            return self.owned_info(part);
        }
        if part.index() >= self.partitions.count {
            return None;
        }
        // SAFETY: `infos` holds `count` records (see `Partitions::reserve`).
        Some(unsafe { &*self.partitions.infos.add(part.index()) })
    }

    /// Records `site` as `part`'s call site if it has none yet.
    pub(crate) fn note_site(&self, part: Partition, site: usize) {
        if let Some(info) = self.partition_info(part) {
            if site != 0 && info.site.load(Ordering::Relaxed) == 0 {
                let _ = info
                    .site
                    .compare_exchange(0, site, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    }

    fn partition_heap(&self, node: NodeId, part: Partition) -> &PartitionHeap {
        debug_assert!(part.index() != 0 && part.index() < self.partitions.count);
        debug_assert!(node.index() < self.arena.node_count());
        // SAFETY: `heaps` holds `nodes × count` heaps (see `Partitions::reserve`).
        unsafe {
            &*self
                .partitions
                .heaps
                .add(node.index() * self.partitions.count + part.index())
        }
    }

    fn active_words(&self, node: NodeId) -> &[AtomicU64] {
        // SAFETY: `active` holds ACTIVE_WORDS words per node (see `Partitions::reserve`), and
        // the mode is on whenever a partition other than 0 exists.
        unsafe {
            core::slice::from_raw_parts(
                self.partitions.active.add(node.index() * ACTIVE_WORDS),
                ACTIVE_WORDS,
            )
        }
    }

    /// The transfer ring (shard 0) of the class heap of (`node`, `part`, `class`).
    pub(super) fn ring_in(&self, node: NodeId, part: Partition, class: SizeClass) -> &RingShard {
        if part.0 == 0 {
            return &self.node(node).rings[class.index()];
        }
        if part.is_owned() {
            return self.owned_ring(part, class);
        }
        &self.partition_heap(node, part).rings[class.index()]
    }

    /// The class heap of (`node`, `part`, `class`).
    #[inline]
    pub(crate) fn class_in(&self, node: NodeId, part: Partition, class: SizeClass) -> &ClassHeap {
        if part.0 == 0 {
            return self.class(node, class);
        }
        if part.is_owned() {
            return self.owned_class(part, class);
        }
        &self.partition_heap(node, part).classes[class.index()]
    }

    /// Marks the class heap of (`node`, `part`, `class`) in use, before its lock is first taken.
    pub(super) fn activate(&self, node: NodeId, part: Partition, class: SizeClass) {
        let (word, bit) = class_bit(class);
        if part.0 == 0 {
            let used = &self.node(node).used[word];
            if used.load(Ordering::Acquire) & bit == 0 {
                let _guard = self.partitions.activation.lock();
                used.fetch_or(bit, Ordering::Release);
            }
            return;
        }
        if part.is_owned() {
            if !self.owned_class_used(part, class) {
                let _guard = self.partitions.activation.lock();
                self.owned_activate(part, class);
            }
            return;
        }
        let heap = self.partition_heap(node, part);
        if heap.used[word].load(Ordering::Acquire) & bit != 0 {
            return;
        }
        let _guard = self.partitions.activation.lock();
        heap.used[word].fetch_or(bit, Ordering::Release);
        self.active_words(node)[part.index() / 64]
            .fetch_or(1 << (part.index() % 64), Ordering::Release);
    }

    /// Calls `f` with every class heap of `node` that may hold anything: the used ones of
    /// partition 0 and of active partitions.
    pub(super) fn for_each_class_heap(
        &self,
        node: NodeId,
        mut f: impl FnMut(Partition, SizeClass, &ClassHeap),
    ) {
        for_each_used(&self.node(node).used, |class| {
            f(Partition::DEFAULT, class, self.class(node, class))
        });
        if self.partitions.count == 0 {
            return;
        }
        for (word_index, word) in self.active_words(node).iter().enumerate() {
            let mut active = word.load(Ordering::Acquire);
            while active != 0 {
                let part = Partition((word_index * 64 + active.trailing_zeros() as usize) as u16);
                active &= active - 1;
                self.for_each_class_heap_of(node, part, |class, class_heap| {
                    f(part, class, class_heap)
                });
            }
        }
    }

    /// The partition of the bag holding the small object at `address` (0 for anything that is
    /// not in a bag). Stable while the object is out: a bag keeps its partition until it goes
    /// back to the region, which needs all its objects back.
    pub(crate) fn partition_of(&self, address: usize) -> Partition {
        let owned = self.arena.is_owned(address);
        if self.partitions.count == 0 && !owned {
            return Partition::DEFAULT;
        }
        let Some(at) = self.arena.bag_at(address) else {
            return Partition::DEFAULT;
        };
        let bag = self.arena.map().meta(at.first);
        // SAFETY: the tag says the unit heads a bag; its partition is written when the bag is
        // carved, before any of its objects is handed out (volatile: only a misuse racing the
        // bag's reuse could change it, and then it is refused below, as the checks that follow
        // refuse the object).
        let part = unsafe { core::ptr::addr_of!((*bag).role.bag.partition).read_volatile() };
        if !self.is_partition(part) {
            return Partition::DEFAULT;
        }
        Partition(part)
    }

    /// True when `raw` (a bag's partition field) names a partition that exists: a call-site
    /// partition, or a first-class heap whose slot is in use.
    pub(super) fn is_partition(&self, raw: u16) -> bool {
        (raw as usize) < self.partitions.count.max(1) || self.is_owned_partition(raw)
    }

    /// The call-site partitions' share of a statistics snapshot: totals and the top partitions
    /// by live bytes.
    pub(super) fn collect_partition_stats(&self, stats: &mut Stats) {
        stats.partitions = self.partitions.count;
        stats.tiering = self.tiering_on();
        (stats.bags_moved_far, stats.bags_moved_near) = self.bags_moved();
        (stats.bag_moves_partly, stats.bags_awaiting_retry) = self.moves_partly();
        for part in 0..self.partitions.count {
            let part = Partition(part as u16);
            let Some(info) = self.partition_info(part) else {
                break;
            };
            let mut figures = PartitionStats {
                partition: part.index(),
                site: info.site.load(Ordering::Relaxed),
                reclaimed: info.reclaimed.load(Ordering::Relaxed),
                picked: info.picked.load(Ordering::Relaxed),
                cold: info.cold.load(Ordering::Relaxed),
                ..PartitionStats::default()
            };
            let mut live: i64 = 0;
            for node in self.nodes() {
                self.for_each_class_heap_of(node, part, |class, class_heap| {
                    let allocs = class_heap.allocs.load(Ordering::Relaxed) as i64;
                    let frees = class_heap.frees.load(Ordering::Relaxed) as i64;
                    live += (allocs - frees) * class.size() as i64;
                    figures.bags += class_heap.bags.load(Ordering::Relaxed);
                });
            }
            figures.live = live.max(0) as usize;
            stats.bags_reclaimed += figures.reclaimed;
            stats.bags_picked += figures.picked;
            if figures.cold {
                stats.cold_partitions += 1;
                stats.cold_live += figures.live;
            }
            if figures.bags != 0 || figures.reclaimed != 0 {
                stats.partitions_used += 1;
                stats.offer_partition(figures);
            }
        }
    }

    /// Calls `f` with every class heap of (`node`, `part`) that may hold anything.
    fn for_each_class_heap_of(
        &self,
        node: NodeId,
        part: Partition,
        mut f: impl FnMut(SizeClass, &ClassHeap),
    ) {
        if part.0 == 0 {
            return for_each_used(&self.node(node).used, |class| {
                f(class, self.class(node, class))
            });
        }
        let heap = self.partition_heap(node, part);
        for_each_used(&heap.used, |class| f(class, &heap.classes[class.index()]));
    }

    /// The classes of the default partition in use on `node` (see `NodeHeap::used`), each
    /// passed to `f`.
    pub(super) fn for_each_used_class(&self, node: NodeId, f: impl FnMut(SizeClass)) {
        for_each_used(&self.node(node).used, f)
    }

    /// Takes the activation lock (the first lock of `lock_all`).
    pub(super) fn lock_activation(&self) {
        self.partitions.activation.acquire();
    }

    pub(super) fn unlock_activation(&self) {
        self.partitions.activation.release();
    }
}

/// Where class `class` sits in a set of classes held as two words (the `used` and `rings_used`
/// bits): bit `c % 64` of word `c / 64`.
#[inline]
pub(super) fn class_bit(class: SizeClass) -> (usize, u64) {
    (class.index() / 64, 1 << (class.index() % 64))
}

/// Calls `f` with each class whose bit `used` sets (bit `c` of word `c / 64`).
fn for_each_used(used: &[AtomicU64; 2], mut f: impl FnMut(SizeClass)) {
    for (half, word) in used.iter().enumerate() {
        let mut bits = word.load(Ordering::Acquire);
        while bits != 0 {
            let class = half * 64 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            f(SizeClass(class as u8));
        }
    }
}

/// `site`'s partition among `count` (0 or 1: partition 0): Fibonacci hashing, so call sites a
/// few bytes apart land in unrelated partitions, then a multiply-shift into `0 ..< count`
/// (no division).
#[inline(always)]
pub(crate) fn partition_of_site(site: usize, count: usize) -> Partition {
    let hash = (site as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    Partition(((hash * count as u64) >> 32) as u16)
}

/// What the free path of a thread heap with partitions needs to find a small object's class
/// and partition without a call: its home region's tags (as [`HomeView`]) and bag descriptors.
#[derive(Clone, Copy)]
pub(crate) struct PartitionView {
    home: HomeView,
    /// The descriptor of the region's first unit.
    metas: *const UnitMeta,
    /// P: a descriptor that says more (only a misuse racing the bag's reuse could) is refused.
    count: usize,
}

impl PartitionView {
    /// A view no address matches.
    pub(crate) const NONE: PartitionView = PartitionView {
        home: HomeView::NONE,
        metas: core::ptr::null(),
        count: 0,
    };

    /// The class and partition of `object` if it is a small object of the home region at an
    /// object boundary; `None`, touching nothing else, for anything else. Three loads: the
    /// unit's tag, the class's magic, the bag's partition.
    #[inline(always)]
    pub(crate) fn small_object(&self, object: *const u8) -> Option<(SizeClass, Partition)> {
        let (class, first) = self.home.bag_object(object, SizeClass::start_magic)?;
        // SAFETY: unit `first` of the region heads a bag, whose descriptor is mapped; its
        // partition is constant while the object is out (volatile: only a misuse races it).
        let part = unsafe {
            core::ptr::addr_of!((*self.metas.add(first)).role.bag.partition).read_volatile()
        };
        if part as usize >= self.count {
            return None;
        }
        Some((class, Partition(part)))
    }
}

impl NodeHeaps {
    /// The partition view of `node`'s region (no address matches with partitions off or in
    /// secure mode, whose frees take the checked paths).
    /// With `count` partitions: the node's (0 with the mode off), or one when the thread heap
    /// runs its calls through the partition lists for the heap profile (`crate::profile`).
    pub(crate) fn partition_view(&self, node: NodeId, count: usize) -> PartitionView {
        if count == 0 || self.arena.is_secure() {
            return PartitionView::NONE;
        }
        let map = self.arena.map();
        let first = map.unit_of(self.arena.region_start(node.index()));
        PartitionView {
            home: self.home_view_of_region(node),
            // SAFETY: the region's units are units of the arena, so their descriptors are in
            // the array.
            metas: unsafe { map.metas().add(first) },
            count,
        }
    }
}

const _: () = assert!(MAX_PARTITIONS == crate::os::options::MAX_CALLSITE_PARTITIONS);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::tests::test_arena;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// Three threads that each take a few objects of a (node, partition, class) that `pick`
    /// draws from a random word, and give them back, until `stop` is set.
    fn take_and_release_at_random(
        heaps: &'static NodeHeaps,
        stop: &Arc<AtomicBool>,
        pick: fn(u64) -> (NodeId, Partition, SizeClass),
    ) -> Vec<std::thread::JoinHandle<()>> {
        (0..3)
            .map(|worker| {
                let stop = Arc::clone(stop);
                std::thread::spawn(move || {
                    let mut state = 0x9E37_79B9u64 + worker;
                    while !stop.load(Ordering::Relaxed) {
                        crate::arena::tests::xorshift(&mut state);
                        let (node, part, class) = pick(state);
                        if let Some(batch) = heaps.take_from_bags(node, part, class, 4) {
                            heaps.release(node, part, class, batch);
                        }
                    }
                })
            })
            .collect()
    }

    /// Plays `fork` over and over (at least 300 times, until `done` or 20 s): `lock_all`, then
    /// `check` with every lock held, then `unlock_all`; then stops and joins `workers`.
    fn play_forks(
        heaps: &NodeHeaps,
        stop: Arc<AtomicBool>,
        workers: Vec<std::thread::JoinHandle<()>>,
        done: impl Fn() -> bool,
        check: impl Fn(),
    ) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut rounds = 0;
        while (rounds < 300 || !done()) && std::time::Instant::now() < deadline {
            heaps.lock_all();
            check();
            heaps.unlock_all();
            rounds += 1;
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            worker.join().unwrap();
        }
    }

    /// Threads bring classes of the default partition into use while another thread plays
    /// `fork` over and over: after each `lock_all`, every class heap in use is locked by it,
    /// and no other one is held by anyone (none was locked before its bit was set).
    #[test]
    fn lock_all_holds_every_default_class_lock_in_use_and_no_other_is_held() {
        let heaps = NodeHeaps::create(test_arena(2, 1 << 30, 0)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let workers = take_and_release_at_random(heaps, &stop, |state| {
            let class = SizeClass(((state >> 16) % NUM_CLASSES as u64) as u8);
            (
                NodeId((state >> 32) as usize % 2),
                Partition::DEFAULT,
                class,
            )
        });
        let used = || -> usize {
            let mut count = 0;
            for node in heaps.nodes() {
                heaps.for_each_used_class(node, |_| count += 1);
            }
            count
        };
        let all = 2 * NUM_CLASSES;
        play_forks(
            heaps,
            stop,
            workers,
            || used() == all,
            || {
                for node in heaps.nodes() {
                    let mut in_use = [false; NUM_CLASSES];
                    heaps.for_each_used_class(node, |class| in_use[class.index()] = true);
                    for (index, &in_use) in in_use.iter().enumerate() {
                        let lock = &heaps.class(node, SizeClass(index as u8)).lock;
                        match lock.try_lock() {
                            None => {
                                assert!(in_use, "class {index} unused but held across lock_all")
                            }
                            Some(_guard) => {
                                assert!(!in_use, "class {index} in use, lock_all missed it")
                            }
                        }
                    }
                }
            },
        );
        assert_eq!(used(), all, "every class came into use on both nodes");
    }

    /// Threads bring class heaps of new partitions into use while another thread plays `fork`
    /// over and over: every `lock_all` must find every class heap in use locked by itself (none
    /// left to a thread mid-activation), and nothing deadlocks.
    #[test]
    fn lock_all_holds_every_class_lock_a_thread_could_hold_while_partitions_come_into_use() {
        let heaps = NodeHeaps::create_with(test_arena(2, 1 << 30, 0), 512).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let workers = take_and_release_at_random(heaps, &stop, |state| {
            let part = Partition((state % 512) as u16);
            let class = SizeClass((state >> 16) as u8 % 24);
            (NodeId((state >> 32) as usize % 2), part, class)
        });
        let used = || -> usize {
            heaps
                .nodes()
                .map(|node| {
                    let mut count = 0;
                    heaps.for_each_class_heap(node, |part, _, _| count += (part.0 != 0) as usize);
                    count
                })
                .sum()
        };
        play_forks(
            heaps,
            stop,
            workers,
            || used() >= 600,
            || {
                for node in heaps.nodes() {
                    heaps.for_each_class_heap(node, |_, _, class_heap| {
                        assert!(
                            class_heap.lock.try_lock().is_none(),
                            "a class lock lock_all missed"
                        );
                    });
                }
            },
        );
        assert!(used() >= 600, "only {} class heaps came into use", used());
    }
}
