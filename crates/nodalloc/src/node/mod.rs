//! The middle layer: one **node heap** per node, shared by that node's threads.
//!
//! Per size class a node heap has a [`TransferRing`] of batches (threads hand whole batches to
//! each other with one CAS), and under it the **central bag lists**: the bags of this node's
//! region that still have free or never-carved objects, behind the class lock. Batches are broken
//! up into bags only when the ring overflows or underflows. A bag that falls empty goes back to
//! the region (and eventually to the OS); whole free pages inside bags still in use go back to
//! the OS through the sweep (`node/sweep.rs`).
//!
//! Each node heap also has a remote-free [`Inbox`]: threads of other nodes push chains of this
//! node's objects there; a thread of this node sorts them back into bags on its slow path. So an
//! object always returns to its origin node and is never reused by another node's thread.
//!
//! A bag always belongs to the node heap of the region that holds it. When a node's region is
//! exhausted, a thread of that node takes objects from the nearest other node heap (a steal),
//! and frees them later through that node's inbox; stolen objects it still caches go back to
//! their own node when its lists are cut or flushed ([`NodeHeaps::release_by_origin`]).
//!
//! With call-site partitions (`partition.rs`), each (node, partition, class) has a class heap of
//! its own, and a bag records the partition it belongs to.
//!
//! Every link between free objects is written and read through the arena
//! ([`Arena::write_link`], [`Arena::read_link`]), which encodes and checks it in secure mode.
//! Secure mode also randomises the carving order of new bags, keeps the allocation bitmap for
//! objects handed out without a thread cache, and puts a guard after every large object.
//!
//! Layer: calls `arena`; used by `thread` and the faces.

use crate::arena::pagemap::{Kind, UnitMeta};
use crate::arena::region::{SpanUse, Stretch};
use crate::arena::secure::{carve_order, guarded_layout, Expect, Refusal};
use crate::arena::Arena;
pub(crate) use crate::arena::{region::DecommitPolicy, ArenaConfig};
use crate::ds::inbox::Inbox;
use crate::ds::ring::{TransferRing, RING_SLOTS};
use crate::ds::spinlock::{SpinGuard, SpinLock};
use crate::os::topology::Topology;
use crate::os::{self, cpuset::MAX_CPUS, topology::MAX_NODES};
use crate::size_class::{SizeClass, NUM_CLASSES, UNIT, UNIT_SHIFT};
use core::cell::UnsafeCell;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

mod bags;
pub(crate) mod copies;
mod front;
mod large;
mod owned;
mod partition;
mod prepare;
mod runs;
mod shards;
mod spares;
mod stats;
mod suspect;
mod sweep;
mod tiering;
mod upkeep;

/// Checks the canary at `at` (its first or last word) of the large object at `start` that the
/// calling thread keeps (`thread/large.rs`), aborting with a report that names it.
pub(crate) use crate::arena::region::check_canary as check_kept_canary;
pub(crate) use crate::ds::ring::Batch;
pub(crate) use bags::CARVE_MARK;
pub(crate) use front::{HomeView, DENSE_OBJECT_MAX, GUARD_BURST};
#[cfg(test)]
pub(crate) use large::KEEP_LARGE_MIN_REGION;
use owned::Owned;
pub use owned::{OwnedCache, OwnedId, OwnedRefusal, OwnedStats, NAME_BYTES};
pub use partition::Partition;
use partition::Partitions;
pub(crate) use partition::{partition_of_site, PartitionView};
pub use runs::Run;
use shards::RingShard;
pub(crate) use upkeep::upkeep_period;

/// A heap block as `raw::block_containing` finds it from an address inside it.
#[derive(Clone, Copy, Debug)]
pub struct BlockAt {
    /// Its first byte.
    pub start: *mut u8,
    /// The bytes of its slot: its class's size, or its span's.
    pub bytes: usize,
    /// Whether the program may hold it (in secure mode, a bag's object only while the
    /// allocation bitmap says so; otherwise always).
    pub held: bool,
    /// A large block (a span of its own) rather than a bag's object.
    pub large: bool,
}

/// How far [`NodeHeaps::block_containing`] looks back through a large block's units for its
/// head (2 MiB): past that, the address is deep inside a big block, where the checks that ask
/// (secure mode's copies) leave the guard page behind the block to catch a linear overflow.
pub const BLOCK_SEARCH_UNITS: usize = 64;

/// Bytes of objects a class's transfer ring may hold per node at first. More would keep bags
/// alive (and memory committed) for objects nobody asked for; less would send producer/consumer
/// pairs to the bag lock too often.
const RING_BYTES: usize = 128 << 10;

/// The most bytes a ring's budget grows to (see [`ClassHeap::raise_ring_budget`]): while
/// threads that free more than they allocate overflow the ring and others take from it, every
/// refused batch would go to the bags object by object under the class lock, and come back out
/// of them the same way (a third of all objects in a producer/consumer run at the base budget).
/// 4 MiB, about what tcmalloc's transfer cache can hold of a 4 KiB class: a thread that allocates a
/// thousand such objects and frees them again parks the overflow of its list here, where at
/// 1 MiB three quarters of them went to their bags, the bags back to the pool and out again.
const RING_BYTES_MAX: usize = 4 << 20;

/// The most bytes the grown budgets of one node's rings may add to their base budgets together.
/// One class's flow may grow its ring to [`RING_BYTES_MAX`]; many classes' flows at once (a
/// program of mixed sizes on many threads) share this, so what rings park stays a bounded
/// part of the heap (the soak test's many classes grew their rings by 15–20 MiB without it,
/// docs/JOURNAL.md, "Fifteenth round: rings for big bursts").
pub(crate) const NODE_RING_GROWN_BYTES: usize = 8 << 20;

/// Adds `bytes` to `counter`, one of a node's budgets of grown caches, if the sum stays within
/// `cap`; true when it did. Threads race on the counter: an addition that went over is taken back,
/// so the counter never settles above `cap`.
pub(crate) fn charge_within(counter: &AtomicUsize, bytes: usize, cap: usize) -> bool {
    if counter.fetch_add(bytes, Ordering::Relaxed) + bytes > cap {
        counter.fetch_sub(bytes, Ordering::Relaxed);
        return false;
    }
    true
}

/// Objects of `class` a transfer ring holds at its base budget: [`RING_BYTES`] of them, and at
/// least two of the class's batches (for classes whose batch alone comes near the budget).
pub(crate) fn ring_objects(class: SizeClass) -> usize {
    (RING_BYTES / class.size()).max(2 * class.batch())
}

/// The most objects of `class` a ring's grown budget allows ([`RING_BYTES_MAX`]), and no more
/// than its slots hold in whole batches.
pub(crate) fn ring_objects_max(class: SizeClass) -> usize {
    (RING_BYTES_MAX / class.size())
        .min(RING_SLOTS * class.batch())
        .max(ring_objects(class))
}

/// Per class, per node: the central bag lists. Its transfer ring (shard 0 of a sharded node,
/// see `shards.rs`) sits beside it, in its container's `rings`: a ring spans a page, and with
/// it inside, every class heap came into use on a page of its own (a fault each at a process's
/// start, and a page copied on write after a `fork` for each lock its handlers release).
/// Aligned to a cache line, so that two classes' locks and counters share none.
#[repr(align(64))]
pub struct ClassHeap {
    lock: SpinLock,
    /// Bags with a free or uncarved object, linked through their descriptors (class lock).
    partial: UnsafeCell<*mut UnitMeta>,
    /// Empty bags kept for the class's next new bag instead of a span from the region
    /// (`spares.rs`), newest first, linked through their descriptors (class lock); the
    /// sweep gives their spans back once they have been quiet for an upkeep pass.
    spares: UnsafeCell<*mut UnitMeta>,
    /// The oldest of `spares`, its last (class lock): a reclaim gives it back without walking
    /// the list.
    oldest_spare: UnsafeCell<*mut UnitMeta>,
    /// How many bags `spares` holds (written under the class lock; counted in `bags` too).
    spare_count: AtomicUsize,
    /// Objects handed to (and returned by) programs, as published by thread heaps.
    pub allocs: AtomicU64,
    pub frees: AtomicU64,
    /// Bags currently carved for this class on this node.
    pub bags: AtomicUsize,
    /// Objects taken out of this node's bags and not yet returned: held by the program, or
    /// cached (thread caches, the ring, inboxes). Written under the class lock.
    pub out_of_bags: AtomicUsize,
    /// Set when objects come back to the bags, cleared by a sweep that leaves no bag waiting:
    /// upkeep skips (and does not even lock) classes with nothing to sweep.
    to_sweep: AtomicBool,
    /// Prepared bags (`prepare.rs`): bags a thread started (new, or prepared) so far, the part
    /// of that the maintenance thread has seen, until when it prepares, prepared bags on the
    /// partial list that no thread took from yet, how many it keeps waiting, and the span it
    /// is linking (class lock).
    started_bags: AtomicU64,
    prepare_seen: AtomicU64,
    prepare_until: AtomicU64,
    prepared_waiting: AtomicUsize,
    prepare_target: AtomicUsize,
    preparing: UnsafeCell<usize>,
}

impl ClassHeap {
    /// Takes the class lock, counted in `ops` (the node heap's that owns this class heap).
    fn lock_counted<'a>(&'a self, ops: &SharedOps) -> SpinGuard<'a> {
        let (guard, waited) = self.lock.lock_noting_wait();
        ops.class_locks.fetch_add(1, Ordering::Relaxed);
        if waited {
            ops.contended_locks.fetch_add(1, Ordering::Relaxed);
        }
        guard
    }
}

/// Counts of one node heap's operations on structures its threads share (issue 32): how often
/// a design makes threads meet, which can be compared between designs even on a machine with
/// too few CPUs for the meetings to cost much time. Relaxed increments (nothing is ordered by
/// them), made on slow paths only, one per operation or one per batch; read by the statistics
/// ([`crate::stats::SharedOpCounts`] documents each). Kept together, after the node heap's hot
/// fields, on lines of their own: they are written by every thread of the node that takes a
/// slow path, and should not make the inbox's line bounce with them.
#[repr(align(64))]
pub struct SharedOps {
    pub class_locks: AtomicU64,
    pub contended_locks: AtomicU64,
    pub ring_pushes: AtomicU64,
    pub ring_pops: AtomicU64,
    pub ring_retries: AtomicU64,
    pub inbox_pushes: AtomicU64,
    pub inbox_takes: AtomicU64,
    pub bag_objects_taken: AtomicU64,
    pub bag_objects_reused: AtomicU64,
    pub bag_objects_returned: AtomicU64,
    pub heaps_attached: AtomicU64,
    pub heaps_retired: AtomicU64,
}

impl SharedOps {
    /// The counts as the statistics show them; `span_locks` is the region's count (the arena
    /// keeps it).
    pub(crate) fn counts(&self, span_locks: u64) -> crate::stats::SharedOpCounts {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        crate::stats::SharedOpCounts {
            class_locks: load(&self.class_locks),
            contended_locks: load(&self.contended_locks),
            span_locks,
            ring_pushes: load(&self.ring_pushes),
            ring_pops: load(&self.ring_pops),
            ring_retries: load(&self.ring_retries),
            inbox_pushes: load(&self.inbox_pushes),
            inbox_takes: load(&self.inbox_takes),
            bag_objects_taken: load(&self.bag_objects_taken),
            bag_objects_reused: load(&self.bag_objects_reused),
            bag_objects_returned: load(&self.bag_objects_returned),
            heaps_attached: load(&self.heaps_attached),
            heaps_retired: load(&self.heaps_retired),
        }
    }

    /// Adds a ring operation's retries (most are none: no write then).
    #[inline]
    fn count_ring_retries(&self, retries: u64) {
        if retries != 0 {
            self.ring_retries.fetch_add(retries, Ordering::Relaxed);
        }
    }
}

/// One node's heap. In declaration order (`repr(C)`): the hot fields first, then the
/// statistics' [`SharedOps`] on lines of their own, then the class heaps.
#[repr(C)]
pub struct NodeHeap {
    inbox: Inbox,
    /// Monotonic ns before which no upkeep pass runs on this node.
    next_upkeep: AtomicU64,
    /// Objects that arrived from other nodes' threads.
    pub remote_frees: AtomicU64,
    /// Batches or objects this node's threads took from other nodes' heaps.
    pub steals: AtomicU64,
    pub large_allocs: AtomicU64,
    pub large_frees: AtomicU64,
    pub large_bytes: AtomicUsize,
    /// Bytes of live large blocks whose pages are interleaved with the far nodes.
    pub interleaved_bytes: AtomicUsize,
    /// Bytes of granules inside live bags currently given back to the OS by the sweep.
    pub released_in_bags: AtomicUsize,
    /// Bytes of the empty bags the class heaps keep as spares (at most the decommit policy's
    /// `spare_bytes`).
    pub spare_bytes: AtomicUsize,
    /// Bytes the grown cache limits of this node's threads add to their base limits (bounded
    /// by `thread::NODE_GROWN_BYTES`).
    pub grown_cache_bytes: AtomicUsize,
    /// Bytes the grown budgets of this node's rings add to their base budgets (bounded by
    /// [`NODE_RING_GROWN_BYTES`]).
    pub ring_grown_bytes: AtomicUsize,
    /// Bags the maintenance thread carved ahead of demand (`prepare.rs`), and the bytes of
    /// those still waiting for a thread.
    pub bags_prepared: AtomicU64,
    pub prepared_bytes: AtomicUsize,
    /// Operations on the shared structures, for the statistics.
    pub ops: SharedOps,
    /// Bit `c` of word `c / 64`: class `c` of the default partition is in use on this node
    /// (set under the activation lock, before its class lock is first taken; see
    /// `NodeHeaps::activate`). Only these class heaps are walked, and `fork`'s handlers lock
    /// only these: each class heap spans a page of its own (its ring), and every lock written
    /// around a `fork` is a page copied on write in the parent and in the child.
    used: [AtomicU64; 2],
    /// Bit `c` of word `c / 64`: a batch of class `c` of the default partition went into one of
    /// its rings on this node (set by [`NodeHeaps::release`], never cleared). Until then
    /// refills, upkeep and the statistics skip the class's rings: a ring spans a page of its
    /// own, and looking into every class's empty ring cost a program a page fault and a page of
    /// resident memory for each class it used.
    rings_used: [AtomicU64; 2],
    classes: [ClassHeap; NUM_CLASSES],
    /// The class heaps' transfer rings (shard 0), by class.
    rings: [RingShard; NUM_CLASSES],
    /// By class, how long the default partition's bags must have been quiet before the sweep
    /// releases their free pages, stretched when the pages it released are listed again soon
    /// after (`sweep.rs`; under the class lock of `classes[c]`; zero bits: not stretched).
    /// Kept out of the class heaps, which fill their two cache lines.
    sweep_stretch: [UnsafeCell<Stretch>; NUM_CLASSES],
}

// SAFETY: the UnsafeCell fields are only touched with the class lock held.
unsafe impl Sync for NodeHeap {}

/// The middle layer of one allocator instance: the arena and its node heaps.
pub struct NodeHeaps {
    /// The back layer: only the node layer calls it (the layers above use the methods below).
    arena: &'static Arena,
    heaps: *const NodeHeap,
    /// Call-site partitions (`partition.rs`); none with the mode off.
    partitions: Partitions,
    /// First-class heaps (`owned/`).
    owned: Owned,
    /// Ring shards per class of each node's default partition (`shards.rs`), the rings past
    /// the class heaps' own (`nodes × (shards − 1) × NUM_CLASSES`), and the shard of each CPU
    /// (`MAX_CPUS` bytes; null with one shard).
    shards: usize,
    extra_rings: *const RingShard,
    cpu_shards: *const u8,
}

// SAFETY: node heaps are Sync and live as long as the arena; the pointer is never written.
unsafe impl Sync for NodeHeaps {}
// SAFETY: as for Sync.
unsafe impl Send for NodeHeaps {}

/// A usable NUMA node, as the allocator numbers them: a dense index from 0 to the node count,
/// in the topology's order. Never the kernel's node number (`NodeInfo::os_id`) nor a CPU, which
/// the platform layer's plain integers are; a `NodeId` only comes from the topology's answers
/// or from an index checked against the node count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
#[repr(transparent)]
pub struct NodeId(pub(crate) usize);

impl NodeId {
    /// The dense index, for per-node arrays and the public API.
    #[inline(always)]
    pub fn index(self) -> usize {
        self.0
    }
}

/// Why a pointer was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misuse {
    /// Not the start of a live object nodalloc handed out.
    InvalidPointer,
    /// An object already free.
    DoubleFree,
}

impl From<Refusal> for Misuse {
    fn from(refusal: Refusal) -> Misuse {
        match refusal {
            Refusal::NotAnObject => Misuse::InvalidPointer,
            Refusal::NotAllocated => Misuse::DoubleFree,
        }
    }
}

impl NodeHeaps {
    /// Reserves the arena for `topology` (which it copies) and builds its node heaps: the
    /// instance's start-up. `None` if the address space or the mapping cannot be had.
    /// `partitions` call-site partitions (0: the mode is off).
    pub(crate) fn start(
        topology: &Topology,
        config: &ArenaConfig,
        partitions: usize,
        ring_shards: usize,
    ) -> Option<&'static NodeHeaps> {
        let arena = Arena::create(topology, config)?;
        copies::publish(arena.map());
        NodeHeaps::create_sharded(arena, partitions, ring_shards)
    }

    /// The machine as the arena saw it.
    pub(crate) fn topology(&self) -> &'static Topology {
        &self.arena.topology
    }

    /// Sets the hard limit on committed bytes (0: none).
    pub(crate) fn set_limit(&self, bytes: usize) {
        self.arena.budget().set_limit(bytes);
    }

    /// Sets the hard limit on bytes committed in tier `far` (false: near; 0: none).
    pub(crate) fn set_tier_limit(&self, far: bool, bytes: usize) {
        self.arena.tier_budget(far).set_limit(bytes);
    }

    /// Sets whether requests stay in their tier when it is full (`NODALLOC_TIER_FULL=fail`).
    pub(crate) fn set_tier_bound(&self, bound: bool) {
        self.arena.set_tier_bound(bound);
    }

    /// True when requests stay in their tier (`NODALLOC_TIER_FULL=fail`).
    pub(crate) fn tier_bound(&self) -> bool {
        self.arena.tier_bound()
    }

    /// True under a hard limit on committed bytes (the arena's or a tier's): memory kept ahead
    /// of demand anywhere is memory an allocation the limit refuses could not get back.
    pub(crate) fn is_limited(&self) -> bool {
        self.arena.budget().limit() != 0 || self.arena.tier_limited()
    }

    /// Decommits every free span now, whatever the delay (after [`Self::flush_all`]).
    pub(crate) fn purge(&self) {
        self.arena.purge(true);
    }

    /// Decommits the free spans the decommit policy says are due, every node.
    pub(crate) fn purge_due(&self) {
        self.arena.purge(false);
    }

    /// Leaves the decommits frees make to a maintenance thread (`on`), or not: see
    /// [`Arena::defer_releases`].
    pub(crate) fn defer_releases(&self, on: bool) {
        self.arena.defer_releases(on);
    }

    /// The maintenance thread's preparation step over every pool and class; true while some
    /// pool has recent demand (see [`Arena::prepare_all`] and [`Self::prepare_bags`]).
    pub(crate) fn prepare_memory(&self, now: u64) -> bool {
        self.arena.prepare_all(now) | self.prepare_bags(now)
    }

    /// Bytes given back to the OS so far, every pool.
    pub(crate) fn decommitted_total(&self) -> usize {
        self.arena.decommitted_total()
    }

    /// Chunks populated ahead of demand so far, every pool.
    pub(crate) fn prepared_chunks(&self) -> usize {
        self.arena.prepared_chunks()
    }

    /// In a forked child: finishes what the parent's maintenance thread left half done (spans
    /// and bags it was preparing) and makes the child's threads do their own releases.
    pub(crate) fn recover_after_fork(&self) {
        self.arena.recover_after_fork();
        self.recover_prepared_after_fork();
    }

    /// The start of the small object whose bytes hold `address`, if the address is in a bag
    /// and past an object start (see [`crate::raw::object_before`]); `None` for an address
    /// at an object start or outside every bag.
    pub(crate) fn object_before(&self, address: usize) -> Option<*mut u8> {
        let at = self.arena.bag_at(address)?;
        if !at.class.is_object_start(address - at.start) {
            return None;
        }
        at.object_before(address).map(|before| before as *mut u8)
    }

    /// The block whose space holds `address`: the object of a bag it lies in, or the large
    /// block whose first [`BLOCK_SEARCH_UNITS`] units hold it. `None` outside the heap's blocks
    /// (or deeper in a large block).
    pub(crate) fn block_containing(&self, address: usize) -> Option<BlockAt> {
        let arena = self.arena;
        let tag = arena.tag_checked(address)?;
        if let Some(at) = arena.bag_with_tag(address, tag) {
            let size = at.class.size();
            let index = (address - at.start) / size;
            if index >= at.class.capacity() {
                return None;
            }
            let start = at.start + index * size;
            let held = !arena.is_secure() || arena.map().is_allocated(start);
            return Some(BlockAt {
                start: start as *mut u8,
                bytes: size,
                held,
                large: false,
            });
        }
        let map = arena.map();
        let mut unit = map.unit_of(address);
        for _ in 0..BLOCK_SEARCH_UNITS {
            match arena.tag_checked(map.address_of(unit))?.kind() {
                Kind::Large => {
                    // SAFETY: a large span's first unit records its length.
                    let units = unsafe { (*map.meta(unit)).units };
                    return Some(BlockAt {
                        start: map.address_of(unit) as *mut u8,
                        bytes: units << UNIT_SHIFT,
                        held: true,
                        large: true,
                    });
                }
                Kind::LargeBody if unit > 0 => unit -= 1,
                _ => return None,
            }
        }
        None
    }

    /// Whether an object of `class` is a span of its own that its region holds at its free
    /// (see `arena::region::hold`): threads then cache none of it.
    pub fn held_at_free(&self, class: SizeClass) -> bool {
        self.arena.held_at_free(class)
    }

    /// The back layer, for the tests of the layers above.
    #[cfg(test)]
    pub(crate) fn arena(&self) -> &'static Arena {
        self.arena
    }

    /// The class of the small object starting at `address`; `None` for an address the page
    /// map does not give to a bag (a large object, or nothing), the misuse for an address
    /// inside a bag that is not an object's start.
    pub(crate) fn small_class_at(&self, address: usize) -> Result<Option<SizeClass>, Misuse> {
        let tag = self
            .arena
            .tag_checked(address)
            .ok_or(Misuse::InvalidPointer)?;
        let Some(at) = self.arena.bag_with_tag(address, tag) else {
            return Ok(None);
        };
        if !at.class.is_object_start(address - at.start) {
            return Err(Misuse::InvalidPointer);
        }
        Ok(Some(at.class))
    }

    /// Builds the node heaps of `arena` in a fresh mapping. `None` if the mapping fails.
    #[cfg(test)]
    pub fn create(arena: &'static Arena) -> Option<&'static NodeHeaps> {
        NodeHeaps::create_with(arena, 0)
    }

    /// As [`Self::create`], with `partitions` call-site partitions (0: the mode is off).
    #[cfg(test)]
    pub fn create_with(arena: &'static Arena, partitions: usize) -> Option<&'static NodeHeaps> {
        NodeHeaps::create_sharded(arena, partitions, 0)
    }

    /// As [`Self::create_with`], with `ring_shards` ring shards per class (0: one per
    /// [`shards::CPUS_PER_SHARD`] CPUs of the largest node; see `shards.rs`).
    pub fn create_sharded(
        arena: &'static Arena,
        partitions: usize,
        ring_shards: usize,
    ) -> Option<&'static NodeHeaps> {
        let nodes = arena.node_count();
        let partitions = Partitions::reserve(partitions, nodes)?;
        let shards = shards::shard_count(&arena.topology, ring_shards);
        let heaps_offset = core::mem::size_of::<NodeHeaps>().next_multiple_of(64);
        let rings_offset = heaps_offset + nodes * core::mem::size_of::<NodeHeap>();
        let extra_rings = nodes * (shards - 1) * NUM_CLASSES;
        let cpus_offset = rings_offset + extra_rings * core::mem::size_of::<RingShard>();
        let cpu_bytes = if shards > 1 { MAX_CPUS } else { 0 };
        let memory = os::reserve(cpus_offset + cpu_bytes)?;
        let this = memory as *mut NodeHeaps;
        // SAFETY: a fresh zeroed mapping of that size, exclusively ours; all-zero is a valid
        // NodeHeap and RingShard (empty rings and inbox, unlocked locks, empty lists, zero
        // counters), so only the pages of classes in use are ever touched. The CPU table is
        // written here, before the heaps are shared.
        unsafe {
            let heaps = memory.add(heaps_offset) as *const NodeHeap;
            let cpu_shards = if shards > 1 {
                let table = core::slice::from_raw_parts_mut(memory.add(cpus_offset), MAX_CPUS);
                shards::fill_cpu_shards(&arena.topology, shards, table);
                table.as_ptr()
            } else {
                null_mut()
            };
            this.write(NodeHeaps {
                arena,
                heaps,
                partitions,
                owned: Owned::new(),
                shards,
                extra_rings: memory.add(rings_offset) as *const RingShard,
                cpu_shards,
            });
            Some(&*this)
        }
    }

    /// Every usable node, in order.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = NodeId> {
        (0..self.arena.node_count()).map(NodeId)
    }

    #[inline(always)]
    pub fn node(&self, node: NodeId) -> &NodeHeap {
        debug_assert!(node.index() < self.arena.node_count());
        // SAFETY: `heaps` holds `node_count` node heaps (see `create`).
        unsafe { &*self.heaps.add(node.index()) }
    }

    #[inline(always)]
    pub fn class(&self, node: NodeId, class: SizeClass) -> &ClassHeap {
        &self.node(node).classes[class.index()]
    }

    /// Counts a thread heap homed on `node` at its thread's start (statistics).
    pub(crate) fn count_heap_attached(&self, node: NodeId) {
        self.node(node)
            .ops
            .heaps_attached
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a thread heap of `node` retired at its thread's exit (statistics).
    pub(crate) fn count_heap_retired(&self, node: NodeId) {
        self.node(node)
            .ops
            .heaps_retired
            .fetch_add(1, Ordering::Relaxed);
    }
}

impl NodeHeaps {
    /// Takes every lock of the instance, node heaps first, then span locks (fork `prepare`).
    /// The order matches the only nesting the allocator has: class lock, then span lock.
    /// The partitions' activation lock comes first: with it held, no class heap comes into use,
    /// so every class lock a thread could hold is one taken here.
    pub fn lock_all(&self) {
        self.lock_activation();
        self.lock_owned();
        for node in self.nodes() {
            self.for_each_class_heap(node, |_, _, class_heap| class_heap.lock.acquire());
        }
        self.arena.lock_all();
    }

    pub fn unlock_all(&self) {
        self.arena.unlock_all();
        for node in self.nodes() {
            self.for_each_class_heap(node, |_, _, class_heap| class_heap.lock.release());
        }
        self.unlock_owned();
        self.unlock_activation();
    }
}

/// Aborts naming a freed block whose link (its first word, which held `stored`) leads nowhere
/// a free list can: a write after free, or an overflow from the block before it, which the
/// message names too (found in `arena`'s page map) when there is one.
#[cold]
#[inline(never)]
pub(crate) fn report_damaged_link(arena: &Arena, block: *mut u8, stored: usize) -> ! {
    let before = arena
        .bag_at(block as usize)
        .and_then(|at| at.object_before(block as usize));
    os::fatal(|w| {
        w.str("corrupted free list: freed block ")
            .hex(block as usize)
            .str(" held ")
            .hex(stored)
            .str(" as its link, which no free list holds (written after free");
        match before {
            Some(before) => w.str(", or overflowed into from the block at ").hex(before),
            None => w.str(", or overflowed into"),
        };
        w.str(")");
    })
}

/// Aborts with a message naming the pointer: continuing would corrupt the heap.
#[cold]
pub fn report(object: *mut u8, misuse: Misuse) -> ! {
    os::fatal(|w| {
        match misuse {
            Misuse::InvalidPointer => w.str("free(): invalid pointer "),
            Misuse::DoubleFree => w.str("free(): double free of "),
        };
        w.hex(object as usize);
    })
}

#[cfg(test)]
mod ring_tests;
#[cfg(test)]
mod spare_tests;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod tier_tests;

// A class heap without its ring fits in two cache lines: a node's 105 fill four pages.
const _: () = assert!(core::mem::size_of::<ClassHeap>() <= 128);
