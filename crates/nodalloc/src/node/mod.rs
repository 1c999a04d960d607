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
use crate::arena::region::SpanUse;
use crate::arena::secure::{carve_order, guarded_layout, Expect, Refusal};
use crate::arena::Arena;
pub(crate) use crate::arena::{region::DecommitPolicy, ArenaConfig};
use crate::ds::inbox::Inbox;
use crate::ds::ring::{TransferRing, RING_SLOTS};
use crate::ds::spinlock::{SpinGuard, SpinLock};
use crate::os::topology::Topology;
use crate::os::{self, topology::MAX_NODES};
use crate::size_class::{SizeClass, NUM_CLASSES, UNIT, UNIT_SHIFT};
use core::cell::UnsafeCell;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

mod bags;
mod front;
mod large;
mod partition;
mod prepare;
mod stats;
mod suspect;
mod sweep;
mod upkeep;

pub(crate) use crate::ds::ring::Batch;
pub(crate) use front::{HomeView, DENSE_OBJECT_MAX};
pub use partition::Partition;
use partition::Partitions;
pub(crate) use partition::{partition_of_site, PartitionView};
pub(crate) use upkeep::upkeep_period;

/// Bytes of objects a class's transfer ring may hold per node at first. More would keep bags
/// alive (and memory committed) for objects nobody asked for; less would send producer/consumer
/// pairs to the bag lock too often.
const RING_BYTES: usize = 128 << 10;

/// The most bytes a ring's budget grows to (see [`ClassHeap::raise_ring_budget`]): while
/// threads that free more than they allocate overflow the ring and others take from it, every
/// refused batch would go to the bags object by object under the class lock, and come back out
/// of them the same way (a third of all objects in a producer/consumer run at the base budget).
const RING_BYTES_MAX: usize = 1 << 20;

/// Objects of `class` a transfer ring holds at its base budget: [`RING_BYTES`] of them, and at
/// least two of the class's batches (for classes whose batch alone comes near the budget).
pub(crate) fn ring_objects(class: SizeClass) -> usize {
    (RING_BYTES / class.size()).max(2 * class.batch())
}

/// The most objects of `class` a ring's grown budget allows ([`RING_BYTES_MAX`]).
pub(crate) fn ring_objects_max(class: SizeClass) -> usize {
    (RING_BYTES_MAX / class.size()).max(ring_objects(class))
}

/// Per class, per node: the transfer ring and the central bag lists.
pub struct ClassHeap {
    ring: TransferRing,
    lock: SpinLock,
    /// Bags with a free or uncarved object, linked through their descriptors (class lock).
    partial: UnsafeCell<*mut UnitMeta>,
    /// Objects handed to (and returned by) programs, as published by thread heaps.
    pub allocs: AtomicU64,
    pub frees: AtomicU64,
    /// Bags currently carved for this class on this node.
    pub bags: AtomicUsize,
    /// Objects taken out of this node's bags and not yet returned: held by the program, or
    /// cached (thread caches, the ring, inboxes). Written under the class lock.
    pub out_of_bags: AtomicUsize,
    /// Objects in the transfer ring (updated after each push and pop, so a hint).
    pub in_ring: AtomicUsize,
    /// Set by every ring push and pop, cleared by upkeep: a ring left untouched for a whole
    /// upkeep period is drained into its bags so idle batches stop pinning memory.
    ring_touched: AtomicBool,
    /// The ring's grown budget in objects (0: the base, [`ring_objects`]), a pop since the
    /// budget last grew (someone takes what the ring holds), and a refused push since the last
    /// upkeep pass (see [`ClassHeap::raise_ring_budget`] and [`ClassHeap::decay_ring_budget`]).
    ring_budget: AtomicUsize,
    ring_popped: AtomicBool,
    ring_refused: AtomicBool,
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

    /// The ring's oldest batch, counted in `ops` (the owning node heap's).
    fn ring_pop(&self, ops: &SharedOps) -> Option<Batch> {
        let mut retries = 0;
        let batch = self.ring.pop_counting_retries(&mut retries);
        ops.count_ring_retries(retries);
        let batch = batch?;
        if !self.ring_popped.load(Ordering::Relaxed) {
            self.ring_popped.store(true, Ordering::Relaxed);
        }
        ops.ring_pops.fetch_add(1, Ordering::Relaxed);
        self.in_ring.fetch_sub(batch.count, Ordering::Relaxed);
        Some(batch)
    }

    /// Pushes `batch` if the ring has a slot and would hold at most `max_objects` objects with
    /// it (see [`ring_objects`]); gives the batch back otherwise. Counted in `ops` (the owning
    /// node heap's).
    fn ring_push(&self, batch: Batch, max_objects: usize, ops: &SharedOps) -> Result<(), Batch> {
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

    /// The objects of `class` the ring may hold now: its base budget, or more once grown.
    fn ring_budget(&self, class: SizeClass) -> usize {
        self.ring_budget
            .load(Ordering::Relaxed)
            .max(ring_objects(class))
    }

    /// After a push that `budget` (the ring's budget of `class`) refused: doubles the budget,
    /// up to [`ring_objects_max`], if a thread took a batch from the ring since it last grew
    /// (a flow from threads that free to threads that allocate, which the ring should carry
    /// rather than the bags); the new budget, or `None` when it stays. Every refusal also keeps
    /// the budget from shrinking at the next upkeep pass. Races between threads only make a
    /// step more or less; the budget stays within its bounds.
    fn raise_ring_budget(&self, class: SizeClass, budget: usize) -> Option<usize> {
        if !self.ring_refused.load(Ordering::Relaxed) {
            self.ring_refused.store(true, Ordering::Relaxed);
        }
        let max = ring_objects_max(class);
        if budget >= max || !self.ring_popped.swap(false, Ordering::Relaxed) {
            return None;
        }
        let raised = (budget * 2).min(max);
        self.ring_budget.store(raised, Ordering::Relaxed);
        Some(raised)
    }

    /// The upkeep pass's step for the ring's budget: halved (back to the base at most) unless
    /// a push was refused since the last pass, so memory the flow needed stops being kept a few
    /// periods after the flow ends. A ring holding more than its new budget drains by its pops.
    fn decay_ring_budget(&self, class: SizeClass) {
        if self.ring_refused.swap(false, Ordering::Relaxed) {
            return;
        }
        let budget = self.ring_budget.load(Ordering::Relaxed);
        if budget == 0 {
            return;
        }
        let halved = budget / 2;
        let next = if halved <= ring_objects(class) {
            0
        } else {
            halved
        };
        self.ring_budget.store(next, Ordering::Relaxed);
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
    /// Bytes of granules inside live bags currently given back to the OS by the sweep.
    pub released_in_bags: AtomicUsize,
    /// Bytes the grown cache limits of this node's threads add to their base limits (bounded
    /// by `thread::NODE_GROWN_BYTES`).
    pub grown_cache_bytes: AtomicUsize,
    /// Bags the maintenance thread carved ahead of demand (`prepare.rs`), and the bytes of
    /// those still waiting for a thread.
    pub bags_prepared: AtomicU64,
    pub prepared_bytes: AtomicUsize,
    /// Operations on the shared structures, for the statistics.
    pub ops: SharedOps,
    classes: [ClassHeap; NUM_CLASSES],
}

// SAFETY: the UnsafeCell fields are only touched with the class lock held.
unsafe impl Sync for NodeHeap {}

/// The middle layer of one allocator instance: the arena and its node heaps.
pub struct NodeHeaps {
    pub arena: &'static Arena,
    heaps: *const NodeHeap,
    /// Call-site partitions (`partition.rs`); none with the mode off.
    partitions: Partitions,
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
    ) -> Option<&'static NodeHeaps> {
        NodeHeaps::create_with(Arena::create(topology, config)?, partitions)
    }

    /// The machine as the arena saw it.
    pub(crate) fn topology(&self) -> &'static Topology {
        &self.arena.topology
    }

    /// Sets the hard limit on committed bytes (0: none).
    pub(crate) fn set_limit(&self, bytes: usize) {
        self.arena.budget.limit.store(bytes, Ordering::Relaxed);
    }

    /// True under a hard limit on committed bytes: memory kept ahead of demand anywhere is
    /// memory an allocation the limit refuses could not get back.
    pub(crate) fn is_limited(&self) -> bool {
        self.arena.budget.limit.load(Ordering::Relaxed) != 0
    }

    /// Decommits every free span now, whatever the delay (after [`Self::flush_all`]).
    pub(crate) fn purge(&self) {
        self.arena.purge(true);
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
    pub fn create_with(arena: &'static Arena, partitions: usize) -> Option<&'static NodeHeaps> {
        let nodes = arena.node_count();
        let partitions = Partitions::reserve(partitions, nodes)?;
        let bytes =
            core::mem::size_of::<NodeHeaps>() + 64 + nodes * core::mem::size_of::<NodeHeap>();
        let memory = os::reserve(bytes)?;
        let this = memory as *mut NodeHeaps;
        let heaps_offset = (core::mem::size_of::<NodeHeaps>() + 63) & !63;
        // SAFETY: a fresh zeroed mapping of `bytes`, exclusively ours; all-zero is a valid
        // NodeHeap (empty rings and inbox, unlocked locks, empty lists, zero counters), so only
        // the pages of classes in use are ever touched.
        unsafe {
            let heaps = memory.add(heaps_offset) as *const NodeHeap;
            this.write(NodeHeaps {
                arena,
                heaps,
                partitions,
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
mod tests;
