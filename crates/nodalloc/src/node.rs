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
//! and frees them later through that node's inbox.
//!
//! Every link between free objects is written and read through the arena
//! ([`Arena::write_link`], [`Arena::read_link`]), which encodes and checks it in secure mode.
//! Secure mode also randomises the carving order of new bags, keeps the allocation bitmap for
//! objects handed out without a thread cache, and puts a guard after every large object.
//!
//! Layer: calls `arena`; used by `thread` and the faces.

use crate::arena::pagemap::{Kind, UnitMeta};
use crate::arena::region::{SpanUse, BAG_ZEROED};
use crate::arena::secure::{carve_order, guarded_layout, Expect, Refusal};
use crate::arena::Arena;
use crate::ds::inbox::Inbox;
use crate::ds::ring::{Batch, TransferRing, RING_SLOTS};
use crate::ds::spinlock::SpinLock;
use crate::os::{self, topology::MAX_NODES};
use crate::size_class::{SizeClass, NUM_CLASSES, UNIT, UNIT_SHIFT};
use core::cell::UnsafeCell;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

mod sweep;

/// Bytes of objects a class's transfer ring may hold per node. More would keep bags alive (and
/// memory committed) for objects nobody asked for; less would send producer/consumer pairs to the
/// bag lock too often.
const RING_BYTES: usize = 128 << 10;

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
    /// Set by every ring push and pop, cleared by maintenance: a ring left untouched for a whole
    /// maintenance period is drained into its bags so idle batches stop pinning memory.
    ring_touched: AtomicBool,
    /// Set when objects come back to the bags, cleared by a sweep that leaves no bag waiting:
    /// upkeep skips (and does not even lock) classes with nothing to sweep.
    to_sweep: AtomicBool,
}

impl ClassHeap {
    fn ring_pop(&self) -> Option<Batch> {
        let batch = self.ring.pop()?;
        self.in_ring.fetch_sub(batch.count, Ordering::Relaxed);
        Some(batch)
    }

    fn ring_push(&self, batch: Batch, cap: usize) -> Result<(), Batch> {
        let count = batch.count;
        self.ring.push(batch, cap)?;
        self.in_ring.fetch_add(count, Ordering::Relaxed);
        Ok(())
    }
}

/// One node's heap.
pub struct NodeHeap {
    inbox: Inbox,
    /// Monotonic ns before which no maintenance pass runs on this node.
    next_maintenance: AtomicU64,
    /// Objects that arrived from other nodes' threads.
    pub remote_frees: AtomicU64,
    /// Batches or objects this node's threads took from other nodes' heaps.
    pub steals: AtomicU64,
    pub large_allocs: AtomicU64,
    pub large_frees: AtomicU64,
    pub large_bytes: AtomicUsize,
    /// Bytes of granules inside live bags currently given back to the OS by the sweep.
    pub released_in_bags: AtomicUsize,
    classes: [ClassHeap; NUM_CLASSES],
}

// SAFETY: the UnsafeCell fields are only touched with the class lock held.
unsafe impl Sync for NodeHeap {}

/// The middle layer of one allocator instance: the arena and its node heaps.
pub struct NodeHeaps {
    pub arena: &'static Arena,
    heaps: *const NodeHeap,
}

// SAFETY: node heaps are Sync and live as long as the arena; the pointer is never written.
unsafe impl Sync for NodeHeaps {}
// SAFETY: as for Sync.
unsafe impl Send for NodeHeaps {}

/// Why a pointer was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misuse {
    InvalidPointer,
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
    /// Builds the node heaps of `arena` in a fresh mapping. `None` if the mapping fails.
    pub fn create(arena: &'static Arena) -> Option<&'static NodeHeaps> {
        let nodes = arena.node_count();
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
            this.write(NodeHeaps { arena, heaps });
            Some(&*this)
        }
    }

    #[inline(always)]
    pub fn node(&self, node: usize) -> &NodeHeap {
        debug_assert!(node < self.arena.node_count());
        // SAFETY: `heaps` holds `node_count` node heaps (see `create`).
        unsafe { &*self.heaps.add(node) }
    }

    #[inline(always)]
    pub fn class(&self, node: usize, class: SizeClass) -> &ClassHeap {
        &self.node(node).classes[class.index()]
    }

    /// A batch of free objects of `class` for a thread of `node`: from the ring, else carved from
    /// the node's bags, else (own region exhausted) stolen from the nearest node that has some.
    pub fn refill(&self, node: usize, class: SizeClass) -> Option<Batch> {
        let heap = self.class(node, class);
        if let Some(batch) = heap.ring_pop() {
            heap.ring_touched.store(true, Ordering::Relaxed);
            return Some(batch);
        }
        self.take_from_bags(node, class, class.batch())
    }

    /// Up to `want` objects from bags, own node first, then other nodes nearest first.
    pub fn take_from_bags(&self, node: usize, class: SizeClass, want: usize) -> Option<Batch> {
        if let Some(batch) = self.take_from_node_bags(node, class, want, &mut false) {
            return Some(batch);
        }
        let mut order = [0u8; MAX_NODES];
        let count = self.arena.topology.nearest_nodes(node, &mut order);
        for &other in &order[..count] {
            let other = other as usize;
            let stolen = self
                .class(other, class)
                .ring_pop()
                .or_else(|| self.take_from_node_bags(other, class, want, &mut false));
            if stolen.is_some() {
                self.node(node).steals.fetch_add(1, Ordering::Relaxed);
                return stolen;
            }
        }
        None
    }

    /// Objects from `node`'s own bags, carving a new bag from its own region if needed.
    /// `head_zeroed` is set when the batch's head was carved from a bag whose memory read as
    /// zero (so the object is zero but for its link word).
    fn take_from_node_bags(
        &self,
        node: usize,
        class: SizeClass,
        want: usize,
        head_zeroed: &mut bool,
    ) -> Option<Batch> {
        let heap = self.class(node, class);
        let arena = self.arena;
        let map = arena.map();
        let size = class.size();
        let capacity = class.capacity() as u32;
        let secure = arena.is_secure();
        let _guard = heap.lock.lock();
        // SAFETY: the class lock is held for the rest of this function.
        let partial = unsafe { &mut *heap.partial.get() };
        let mut batch = Batch {
            head: null_mut(),
            tail: null_mut(),
            count: 0,
        };
        while batch.count < want {
            if partial.is_null() {
                let Some(address) =
                    arena.alloc_span_on(node, class.bag_units(), 1, SpanUse::Bag(class))
                else {
                    break;
                };
                heap.bags.fetch_add(1, Ordering::Relaxed);
                *partial = map.meta(map.unit_of(address));
                if secure {
                    // SAFETY: the class lock is held and the bag is new, on no list but ours.
                    unsafe { (**partial).freed_at = arena.bag_seed() };
                }
            }
            let bag = *partial;
            let start = map.address_of(map.unit_of_meta(bag));
            // SAFETY: the class lock is held and `bag` is one of this class's bags.
            unsafe {
                while batch.count < want {
                    *head_zeroed = false;
                    let object = if !(*bag).free.is_null() {
                        let object = (*bag).free;
                        (*bag).free = arena.read_link(object, Expect::Class(class));
                        object
                    } else if (*bag).carved < capacity {
                        *head_zeroed = !secure && (*bag).freed_at == BAG_ZEROED;
                        let index = if secure {
                            carve_order((*bag).carved, capacity, (*bag).freed_at)
                        } else {
                            (*bag).carved
                        };
                        let object = (start + index as usize * size) as *mut u8;
                        (*bag).carved += 1;
                        object
                    } else if (*bag).aside.sweep.released != 0 {
                        self.restore_granule(node, class, bag, start);
                        continue;
                    } else {
                        break;
                    };
                    (*bag).live += 1;
                    arena.write_link(object, batch.head);
                    if batch.tail.is_null() {
                        batch.tail = object;
                    }
                    batch.head = object;
                    batch.count += 1;
                }
                if is_full(bag, capacity) {
                    unlink(partial, bag);
                }
            }
        }
        heap.out_of_bags.fetch_add(batch.count, Ordering::Relaxed);
        if batch.count == 0 {
            None
        } else {
            Some(batch)
        }
    }

    /// One object of `class` for the program, straight from the bags (a thread without a cache:
    /// retired, detached, or `alloc_on_node`). Null when no memory is left.
    pub fn alloc_single(&self, node: usize, class: SizeClass) -> *mut u8 {
        let Some(batch) = self.take_from_bags(node, class, 1) else {
            return null_mut();
        };
        self.hand_out_single(node, class, batch.head)
    }

    /// Counts one object taken straight from the bags as the program's (and marks it in the
    /// allocation bitmap in secure mode).
    fn hand_out_single(&self, node: usize, class: SizeClass, object: *mut u8) -> *mut u8 {
        self.class(node, class)
            .allocs
            .fetch_add(1, Ordering::Relaxed);
        if self.arena.is_secure() {
            self.arena.note_allocated(object);
        }
        object
    }

    /// One object of `class` for `calloc`, straight from `node`'s own bags, and whether it is
    /// known to read as zero but for its first word (carved for the first time from a bag whose
    /// memory was untouched). `None` when the node's bags and region are exhausted.
    pub fn alloc_single_zeroed(&self, node: usize, class: SizeClass) -> Option<(*mut u8, bool)> {
        let mut zeroed = false;
        let batch = self.take_from_node_bags(node, class, 1, &mut zeroed)?;
        Some((self.hand_out_single(node, class, batch.head), zeroed))
    }

    /// Takes back one object of `class` from `origin`'s region that the program frees without a
    /// thread cache, or reports the misuse.
    ///
    /// # Safety
    /// `object` must be a live object of `class` that the caller gives up (checked, and
    /// reported, in secure mode).
    pub unsafe fn free_single(&self, origin: usize, class: SizeClass, object: *mut u8) {
        if self.arena.is_secure() {
            if let Err(refusal) = self.arena.note_freed(object, class) {
                report(object, refusal.into());
            }
        }
        self.class(origin, class)
            .frees
            .fetch_add(1, Ordering::Relaxed);
        // SAFETY: the object is ours now; make it a one-object chain.
        unsafe { self.arena.write_link(object, null_mut()) };
        if let Err((object, misuse)) = self.return_to_bags(origin, class, object) {
            report(object, misuse);
        }
    }

    /// Takes back a batch a thread of `node` drained: into the ring if it has room, else into
    /// the bags. Every object must be of `class` and from `node`'s region.
    pub fn release(&self, node: usize, class: SizeClass, batch: Batch) {
        let heap = self.class(node, class);
        let cap = (RING_BYTES / (class.batch() * class.size())).clamp(2, RING_SLOTS);
        heap.ring_touched.store(true, Ordering::Relaxed);
        if let Err(batch) = heap.ring_push(batch, cap) {
            if let Err((object, misuse)) = self.return_to_bags(node, class, batch.head) {
                report(object, misuse);
            }
        }
    }

    /// Returns a null-terminated chain of `class` objects of `node`'s region to their bags,
    /// releasing bags that fall empty. Stops at the first object that is not a live object of
    /// this class (an invalid or double free) and reports it.
    pub fn return_to_bags(
        &self,
        node: usize,
        class: SizeClass,
        chain: *mut u8,
    ) -> Result<(), (*mut u8, Misuse)> {
        let heap = self.class(node, class);
        let map = self.arena.map();
        let size = class.size();
        let capacity = class.capacity() as u32;
        // The node's next maintenance deadline dates the returns for the sweep.
        let stamp = self
            .node(node)
            .next_maintenance
            .load(Ordering::Relaxed)
            .max(1);
        let _guard = heap.lock.lock();
        // SAFETY: the class lock is held for the rest of this function.
        let partial = unsafe { &mut *heap.partial.get() };
        let mut object = chain;
        while !object.is_null() {
            // SAFETY: chains given to us are linked through first words of free objects.
            let next = unsafe { self.arena.read_link(object, Expect::Class(class)) };
            let address = object as usize;
            if self.arena.origin_of(address) != Some(node) {
                return Err((object, Misuse::InvalidPointer));
            }
            let Some(tag) = self.arena.tag_checked(address) else {
                return Err((object, Misuse::InvalidPointer));
            };
            if !tag.is_bag() || tag.class() != class {
                return Err((object, Misuse::InvalidPointer));
            }
            let first = map.unit_of(address) - tag.offset_units();
            let start = map.address_of(first);
            if (address - start) % size != 0 {
                return Err((object, Misuse::InvalidPointer));
            }
            let bag = map.meta(first);
            // SAFETY: the class lock is held and the tag says `bag` is a bag of this class.
            unsafe {
                // Secure mode carves in a random order, so the count says nothing about which
                // objects were carved (and the allocation bitmap vouched for this one).
                if !self.arena.is_secure() && (address - start) / size >= (*bag).carved as usize {
                    return Err((object, Misuse::InvalidPointer));
                }
                if (*bag).live == 0 {
                    return Err((object, Misuse::DoubleFree));
                }
                let was_full = is_full(bag, capacity);
                self.arena.write_link(object, (*bag).free);
                (*bag).free = object;
                (*bag).live -= 1;
                (*bag).aside.sweep.returned_at = stamp;
                heap.out_of_bags.fetch_sub(1, Ordering::Relaxed);
                if (*bag).live == 0 {
                    if !was_full {
                        unlink(partial, bag);
                    }
                    heap.bags.fetch_sub(1, Ordering::Relaxed);
                    self.forget_released(node, class, bag);
                    // SAFETY: no object of the bag is out any more.
                    self.arena.free_span(start, (*bag).units);
                } else if was_full {
                    push_front(partial, bag);
                }
            }
            object = next;
        }
        heap.to_sweep.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Hands a chain of objects of `origin`'s region to that node's inbox.
    ///
    /// # Safety
    /// A well-formed chain of freed objects from `origin`'s region, owned by the caller.
    pub unsafe fn send_remote(&self, origin: usize, head: *mut u8, tail: *mut u8, count: usize) {
        let heap = self.node(origin);
        heap.remote_frees.fetch_add(count as u64, Ordering::Relaxed);
        let arena = self.arena;
        // SAFETY: forwarded contract; the link written is `tail`'s, in the arena's encoding.
        unsafe {
            heap.inbox
                .push_chain_with(head, tail, |tail, next| arena.write_link(tail, next))
        };
    }

    /// Sorts `node`'s inbox back into its bags. Cheap when the inbox is empty.
    pub fn drain_inbox(&self, node: usize) {
        let heap = self.node(node);
        if heap.inbox.is_empty_hint() {
            return;
        }
        let mut object = heap.inbox.take_all();
        // Group by class so each class lock is taken once.
        let mut chains = [null_mut::<u8>(); NUM_CLASSES];
        while !object.is_null() {
            // SAFETY: inbox chains are linked through first words of freed objects.
            let next = unsafe { self.arena.read_link(object, Expect::Node(node)) };
            let tag = match self.arena.tag_checked(object as usize) {
                Some(tag) if tag.is_bag() => tag,
                _ => report(object, Misuse::InvalidPointer),
            };
            let class = tag.class().index();
            // SAFETY: as above; we own the object now.
            unsafe { self.arena.write_link(object, chains[class]) };
            chains[class] = object;
            object = next;
        }
        for (class, &chain) in chains.iter().enumerate() {
            if !chain.is_null() {
                if let Err((object, misuse)) =
                    self.return_to_bags(node, SizeClass(class as u8), chain)
                {
                    report(object, misuse);
                }
            }
        }
    }

    /// Periodic upkeep of `node`, run from thread slow paths at most once per decommit delay:
    /// drains rings nobody touched since the last pass, sorts the inbox, and lets the region
    /// decommit what is due. One thread runs it at a time; the others skip.
    ///
    /// A node whose own threads have not run it for a whole extra period (a node without CPUs,
    /// or one whose threads are gone) is maintained by whichever thread notices, so objects
    /// freed to its inbox do not stay there forever.
    pub fn maintain(&self, node: usize, now: u64) {
        let period = maintenance_period(self.arena.decay.delay_ns);
        self.maintain_node(node, now, 0);
        for other in 0..self.arena.node_count() {
            if other != node {
                self.maintain_node(other, now, period);
            }
        }
    }

    /// Maintains `node` if it is due by more than `grace` ns.
    fn maintain_node(&self, node: usize, now: u64, grace: u64) {
        let heap = self.node(node);
        let due = heap.next_maintenance.load(Ordering::Relaxed);
        if now < due.saturating_add(grace) {
            return;
        }
        let next = now + maintenance_period(self.arena.decay.delay_ns);
        if heap
            .next_maintenance
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        self.drain_inbox(node);
        for class in 0..NUM_CLASSES {
            let class = SizeClass(class as u8);
            let central = self.class(node, class);
            if central.ring.len_hint() == 0 {
                continue;
            }
            if central.ring_touched.swap(false, Ordering::Relaxed) {
                continue;
            }
            while let Some(batch) = central.ring_pop() {
                if let Err((object, misuse)) = self.return_to_bags(node, class, batch.head) {
                    report(object, misuse);
                }
            }
        }
        self.sweep_node(node, due, false);
        self.arena.purge_node(node, false);
    }

    /// Empties every ring and inbox of every node into the bags and sweeps every bag (for
    /// `purge`).
    pub fn flush_all(&self) {
        for node in 0..self.arena.node_count() {
            self.drain_inbox(node);
            for class in 0..NUM_CLASSES {
                let class = SizeClass(class as u8);
                while let Some(batch) = self.class(node, class).ring_pop() {
                    if let Err((object, misuse)) = self.return_to_bags(node, class, batch.head) {
                        report(object, misuse);
                    }
                }
            }
            self.sweep_node(node, u64::MAX, true);
        }
    }

    /// A large object (a span of whole units) for `node`, spilling to the nearest node when
    /// its region is exhausted. Null when no region can serve.
    pub fn alloc_large(&self, node: usize, size: usize, align: usize) -> *mut u8 {
        // Heuristic overcommit refuses one request larger than RAM plus swap; so do we, or a
        // program probing with a huge malloc would get memory it can never touch.
        let topology = &self.arena.topology;
        if topology.overcommit_mode() == crate::os::topology::OvercommitMode::Heuristic
            && topology.memory_total() > 0
            && size as u64 > topology.memory_total()
        {
            return null_mut();
        }
        // Zero bytes at a large alignment still need a unique address: one unit. Secure mode
        // adds at least a page of guard after the usable bytes.
        let secure = self.arena.is_secure();
        let layout = if secure {
            guarded_layout(size)
        } else {
            size.max(1)
                .checked_add(UNIT - 1)
                .map(|s| (0, s >> UNIT_SHIFT))
        };
        let Some((usable, units)) = layout else {
            return null_mut();
        };
        let align_units = (align >> UNIT_SHIFT).max(1);
        if units > self.arena.pool_bytes() >> UNIT_SHIFT || align_units > units.max(1) << 20 {
            return null_mut();
        }
        match self
            .arena
            .alloc_span(node, units, align_units, SpanUse::Large)
        {
            Some((address, from)) => {
                if secure {
                    // SAFETY: the span was just handed to us, whole and without a guard. A
                    // refused guard (the kernel's mapping limit) leaves the span unguarded.
                    unsafe { self.arena.guard_large(address, usable, units) };
                }
                let heap = self.node(from);
                heap.large_allocs.fetch_add(1, Ordering::Relaxed);
                heap.large_bytes
                    .fetch_add(units << UNIT_SHIFT, Ordering::Relaxed);
                address as *mut u8
            }
            None => null_mut(),
        }
    }

    /// True when the large object at `address`, just allocated, is known to read as zero.
    ///
    /// # Safety
    /// `address` must be a large object the caller has just received from `alloc_large`.
    pub unsafe fn large_is_zeroed(&self, address: usize) -> bool {
        let map = self.arena.map();
        // SAFETY: the caller owns the live span, whose descriptor nobody else writes.
        unsafe { (*map.meta(map.unit_of(address))).live == crate::arena::region::ZEROED }
    }

    /// Bytes usable in the large object at `address`, or the misuse if it is not one.
    pub fn large_units(&self, address: usize) -> Result<usize, Misuse> {
        let map = self.arena.map();
        if address & (UNIT - 1) != 0 {
            return Err(Misuse::InvalidPointer);
        }
        let Some(tag) = self.arena.tag_checked(address) else {
            return Err(Misuse::InvalidPointer);
        };
        match tag.kind() {
            // SAFETY: a Large tag means the unit heads a live large span whose descriptor holds
            // its length; the caller owns the object, so nobody frees it concurrently.
            Kind::Large => Ok(unsafe { (*map.meta(map.unit_of(address))).units }),
            Kind::Free | Kind::FreeTail | Kind::Unused => Err(Misuse::DoubleFree),
            _ => Err(Misuse::InvalidPointer),
        }
    }

    /// Bytes the program may use in the large object at `address` (its span, less the guard in
    /// secure mode), or the misuse if it is not one.
    pub fn large_usable(&self, address: usize) -> Result<usize, Misuse> {
        let units = self.large_units(address)?;
        // SAFETY: `address` heads a live large span of `units` units (checked above) that the
        // caller owns.
        Ok(unsafe { self.arena.large_usable(address, units) })
    }

    /// Frees a large object, or reports misuse.
    pub fn free_large(&self, address: usize) {
        match self.large_units(address) {
            Ok(units) => {
                if self.arena.is_secure() {
                    // SAFETY: a live large span of `units` units that the caller gives up.
                    unsafe { self.arena.unguard_large(address, units) };
                }
                let node = self
                    .arena
                    .origin_of(address)
                    .expect("checked by large_units");
                let heap = self.node(node);
                heap.large_frees.fetch_add(1, Ordering::Relaxed);
                heap.large_bytes
                    .fetch_sub(units << UNIT_SHIFT, Ordering::Relaxed);
                // SAFETY: `address` heads a live large span of `units` units that the caller
                // gives up.
                unsafe { self.arena.free_span(address, units) };
            }
            Err(misuse) => report(address as *mut u8, misuse),
        }
    }

    /// Resizes a large object in place (growing into free space after it, or shrinking).
    /// Returns false, changing nothing, if it cannot.
    pub fn resize_large_in_place(&self, address: usize, new_size: usize) -> bool {
        let Ok(units) = self.large_units(address) else {
            return false;
        };
        if self.arena.is_secure() {
            return self.resize_guarded_in_place(address, units, new_size);
        }
        let Some(new_units) = new_size
            .max(1)
            .checked_add(UNIT - 1)
            .map(|s| s >> UNIT_SHIFT)
        else {
            return false;
        };
        self.resize_span(address, units, new_units)
    }

    /// Resizes the live large span at `address` from `units` to `new_units` in place (shrink,
    /// or grow into free units after it), keeping the node's large-byte count. False when it
    /// cannot grow there.
    fn resize_span(&self, address: usize, units: usize, new_units: usize) -> bool {
        let node = self
            .arena
            .origin_of(address)
            .expect("checked by large_units");
        let region = self.arena.pool_of(address);
        let heap = self.node(node);
        if new_units < units {
            region.shrink(
                self.arena.map(),
                address,
                units,
                new_units,
                self.arena.decay,
            );
            heap.large_bytes
                .fetch_sub((units - new_units) << UNIT_SHIFT, Ordering::Relaxed);
            true
        } else if new_units > units {
            let grown = new_units <= self.arena.pool_bytes() >> UNIT_SHIFT
                && region.grow(self.arena.map(), address, units, new_units);
            if grown {
                heap.large_bytes
                    .fetch_add((new_units - units) << UNIT_SHIFT, Ordering::Relaxed);
            }
            grown
        } else {
            true
        }
    }

    /// [`Self::resize_large_in_place`] in secure mode: the guard comes off, the span is resized
    /// as usual, and a new guard goes on after the new usable end (or the old one back on when
    /// the span cannot grow).
    fn resize_guarded_in_place(&self, address: usize, units: usize, new_size: usize) -> bool {
        let Some((new_usable, new_units)) = guarded_layout(new_size) else {
            return false;
        };
        // SAFETY: `address` heads a live large span of `units` units (checked by the caller)
        // that the caller owns.
        let old_usable = unsafe { self.arena.large_usable(address, units) };
        if new_units == units && new_usable == old_usable {
            return true;
        }
        // SAFETY: as above.
        unsafe { self.arena.unguard_large(address, units) };
        let resized = self.resize_span(address, units, new_units);
        let (usable, units) = if resized {
            (new_usable, new_units)
        } else {
            (old_usable, units)
        };
        if usable < units << UNIT_SHIFT {
            // SAFETY: the span is ours, live, of `units` units, and has no guard now.
            unsafe { self.arena.guard_large(address, usable, units) };
        }
        resized
    }

    /// Bytes usable at `address` (the class size or the span length), for any live object.
    pub fn usable_size(&self, address: usize) -> Result<usize, Misuse> {
        let Some(tag) = self.arena.tag_checked(address) else {
            return Err(Misuse::InvalidPointer);
        };
        let map = self.arena.map();
        if tag.is_bag() {
            let start = map.address_of(map.unit_of(address) - tag.offset_units());
            let size = tag.class().size();
            if (address - start) % size != 0 {
                return Err(Misuse::InvalidPointer);
            }
            return Ok(size);
        }
        self.large_usable(address)
    }

    /// Takes every lock of the instance, node heaps first, then span locks (fork `prepare`).
    /// The order matches the only nesting the allocator has: class lock, then span lock.
    pub fn lock_all(&self) {
        for node in 0..self.arena.node_count() {
            for class in &self.node(node).classes {
                class.lock.acquire();
            }
        }
        self.arena.lock_all();
    }

    pub fn unlock_all(&self) {
        self.arena.unlock_all();
        for node in 0..self.arena.node_count() {
            for class in &self.node(node).classes {
                class.lock.release();
            }
        }
    }
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

/// # Safety
/// The class lock owning the list is held and `bag` is on it.
unsafe fn unlink(list: &mut *mut UnitMeta, bag: *mut UnitMeta) {
    // SAFETY: forwarded contract; links are only touched under that lock.
    unsafe {
        if (*bag).prev.is_null() {
            *list = (*bag).next;
        } else {
            (*(*bag).prev).next = (*bag).next;
        }
        if !(*bag).next.is_null() {
            (*(*bag).next).prev = (*bag).prev;
        }
        (*bag).next = null_mut();
        (*bag).prev = null_mut();
    }
}

/// # Safety
/// The class lock owning the list is held and `bag` is on no list.
unsafe fn push_front(list: &mut *mut UnitMeta, bag: *mut UnitMeta) {
    // SAFETY: forwarded contract.
    unsafe {
        (*bag).prev = null_mut();
        (*bag).next = *list;
        if !(*list).is_null() {
            (**list).prev = bag;
        }
        *list = bag;
    }
}

/// True when `bag` has nothing left to hand out: no free object listed, none uncarved and none
/// in a released granule. Full bags are on no list.
///
/// # Safety
/// The class lock owning `bag` is held.
unsafe fn is_full(bag: *mut UnitMeta, capacity: u32) -> bool {
    // SAFETY: forwarded contract.
    unsafe {
        (*bag).free.is_null() && (*bag).carved == capacity && (*bag).aside.sweep.released == 0
    }
}

/// How often a node's upkeep runs: every decommit delay, but at least every 100 ms (idle caches
/// go back to their bags on this beat) and at most every millisecond.
pub(crate) fn maintenance_period(delay_ns: u64) -> u64 {
    delay_ns.clamp(1_000_000, 100_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::tests::test_arena;
    use crate::ds::{next_of, set_next};
    use crate::size_class::class_of;
    use std::sync::atomic::AtomicU8;

    /// The protection of the page holding `address`, from `/proc/self/maps` (`rw-p`, `---p`).
    fn protection(address: usize) -> String {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let (range, rest) = line.split_once(' ').unwrap();
            let (start, end) = range.split_once('-').unwrap();
            let start = usize::from_str_radix(start, 16).unwrap();
            let end = usize::from_str_radix(end, 16).unwrap();
            if (start..end).contains(&address) {
                return rest[..4].to_string();
            }
        }
        panic!("{address:#x} is not mapped");
    }

    #[test]
    fn secure_large_objects_end_at_a_guard_that_follows_resizes_and_goes_with_the_free() {
        let heaps = NodeHeaps::create(crate::arena::tests::test_arena_secure(1, false)).unwrap();
        let page = crate::os::PAGE_SIZE;
        let size = (300 << 10) + 100;
        let p = heaps.alloc_large(0, size, 8) as usize;
        let usable = heaps.large_usable(p).unwrap();
        assert_eq!(usable, (300 << 10) + page);
        assert_eq!(protection(p + usable - 1), "rw-p");
        assert_eq!(protection(p + usable), "---p");
        assert_eq!(heaps.usable_size(p), Ok(usable));
        // Grow (at the frontier, so in place), shrink by a unit, move the guard within the same
        // units, shrink by many.
        for new_size in [
            2 << 20,
            (2 << 20) - 3 * page,
            (2 << 20) - 5 * page,
            100 << 10,
        ] {
            assert!(
                heaps.resize_large_in_place(p, new_size),
                "resize to {new_size}"
            );
            let usable = heaps.large_usable(p).unwrap();
            assert_eq!(usable, new_size.next_multiple_of(page));
            // SAFETY: the object is ours and `usable` bytes long.
            unsafe { (p as *mut u8).write_bytes(1, usable) };
            assert_eq!(
                protection(p + usable),
                "---p",
                "after a resize to {new_size}"
            );
        }
        let units = heaps.large_units(p).unwrap();
        heaps.free_large(p);
        assert_eq!(protection(p + (units << UNIT_SHIFT) - 1), "rw-p");
        // The span is reused whole by the next request, guard and all in its new place.
        let q = heaps.alloc_large(0, units << UNIT_SHIFT, 8) as usize;
        assert_eq!(protection(q + heaps.large_usable(q).unwrap()), "---p");
        assert_eq!(heaps.arena.budget.charged.load(Ordering::Relaxed), {
            heaps.arena.usage(0).committed
        });
    }

    #[test]
    fn only_first_carves_from_untouched_bags_are_known_zero() {
        // Retain budget unlimited: freed bags stay dirty (committed, contents kept).
        let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
        let class = class_of(100_000, 8).unwrap();
        let (first, zeroed) = heaps.alloc_single_zeroed(0, class).unwrap();
        assert!(zeroed, "a fresh bag's first object");
        // SAFETY: the object is ours, `class.size()` bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(first, class.size()) };
        assert!(bytes[8..].iter().all(|&b| b == 0));
        bytes.fill(0xA5);
        // Freed back into its bag's free list, then handed out again: not known zero.
        // SAFETY: a live object of `class` from node 0, given up.
        unsafe { heaps.free_single(0, class, first) };
        let mut seen = Vec::new();
        loop {
            let (object, zeroed) = heaps.alloc_single_zeroed(0, class).unwrap();
            seen.push(object);
            if object == first {
                assert!(!zeroed, "a reused object was reported zero");
                break;
            }
            assert!(seen.len() < 64, "the freed object never came back");
        }
        for object in seen {
            // SAFETY: each was handed out above and is given up once.
            unsafe { heaps.free_single(0, class, object) };
        }
        // The bag falls empty, goes back to the pool dirty, and a new bag over the same memory
        // is not known zero either.
        let (again, zeroed) = heaps.alloc_single_zeroed(0, class).unwrap();
        // SAFETY: as above.
        if unsafe { *again.add(8) } == 0xA5 {
            assert!(!zeroed, "a bag over dirty memory was reported zero");
        }
    }

    #[test]
    fn secure_bags_carve_in_a_random_order_and_hand_each_object_out_once() {
        let heaps = NodeHeaps::create(crate::arena::tests::test_arena_secure(1, false)).unwrap();
        let class = class_of(256, 8).unwrap();
        let batch = heaps.take_from_bags(0, class, class.capacity()).unwrap();
        let mut objects = Vec::new();
        let mut object = batch.head;
        while !object.is_null() {
            objects.push(object as usize);
            // SAFETY: walking the batch we were handed (links are encoded in secure mode).
            object = unsafe { heaps.arena.read_link(object, Expect::Class(class)) };
        }
        assert_eq!(objects.len(), class.capacity());
        let ascending = objects.windows(2).filter(|w| w[1] == w[0] + 256).count();
        let descending = objects.windows(2).filter(|w| w[0] == w[1] + 256).count();
        assert!(
            ascending + descending < 16,
            "{ascending} + {descending} neighbours"
        );
        let mut sorted = objects.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), objects.len(), "an object was carved twice");
        heaps.return_to_bags(0, class, batch.head).unwrap();
        assert_eq!(heaps.class(0, class).bags.load(Ordering::Relaxed), 0);
    }

    /// Bag hand-over under contention: four threads take batches of `class` from the same
    /// node's bags and return them (through the ring and straight to the bags) in random order,
    /// so bags are carved, fill, empty and go back to the region concurrently; with `sweep`, a
    /// fifth thread sweeps every bag in a loop meanwhile. Every object handed out is marked in a
    /// shared table and filled with its owner's byte, checked before it goes back: a second
    /// hand-out of a live object, a loss, or a live object changed (a page released under it)
    /// fails the test.
    pub(in crate::node) fn hand_over_under_contention(class: SizeClass, sweep: bool) {
        let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
        let size = class.size();
        let base = heaps.arena.base();
        let slots = (64usize << 20) / size;
        let owners: &'static [AtomicU8] = Box::leak((0..slots).map(|_| AtomicU8::new(0)).collect());
        let slot_of = move |object: *mut u8| (object as usize - base) / size;
        let done: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let sweeper = sweep.then(|| {
            std::thread::spawn(move || {
                let mut sweeps = 0u64;
                while !done.load(Ordering::Relaxed) {
                    heaps.flush_all();
                    sweeps += 1;
                }
                sweeps
            })
        });
        let rounds = ((4 << 20) / size).clamp(2000, 20_000);
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                std::thread::spawn(move || {
                    let byte = t as u8 + 1;
                    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ t;
                    let mut held: Vec<*mut u8> = Vec::new();
                    for round in 0..rounds {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        if rng % 3 != 0 || held.is_empty() {
                            let want = 1 + (rng % 100) as usize;
                            let batch = heaps.take_from_bags(0, class, want).expect("memory");
                            let mut object = batch.head;
                            let mut count = 0;
                            while !object.is_null() {
                                let previous = owners[slot_of(object)].swap(1, Ordering::Relaxed);
                                assert_eq!(previous, 0, "object {object:p} handed out twice");
                                held.push(object);
                                // SAFETY: walking a batch we own.
                                let next = unsafe { next_of(object) };
                                // SAFETY: the object is ours, `size` bytes.
                                unsafe { object.write_bytes(byte, size) };
                                object = next;
                                count += 1;
                            }
                            assert_eq!(count, batch.count);
                        } else {
                            let give = 1 + (rng as usize / 7) % held.len();
                            let mut chain: *mut u8 = null_mut();
                            let mut tail: *mut u8 = null_mut();
                            for _ in 0..give {
                                let index = (rng as usize / 3) % held.len();
                                let object = held.swap_remove(index);
                                // SAFETY: a live object of ours, `size` bytes.
                                let bytes = unsafe { std::slice::from_raw_parts(object, size) };
                                assert!(
                                    bytes.iter().all(|&b| b == byte),
                                    "object {object:p} changed while live"
                                );
                                owners[slot_of(object)].store(0, Ordering::Relaxed);
                                // SAFETY: we own the object; link it into our chain.
                                unsafe { set_next(object, chain) };
                                if tail.is_null() {
                                    tail = object;
                                }
                                chain = object;
                            }
                            if round % 2 == 0 {
                                heaps.release(
                                    0,
                                    class,
                                    Batch {
                                        head: chain,
                                        tail,
                                        count: give,
                                    },
                                );
                            } else {
                                heaps
                                    .return_to_bags(0, class, chain)
                                    .expect("valid objects");
                            }
                        }
                    }
                    for &object in &held {
                        owners[slot_of(object)].store(0, Ordering::Relaxed);
                        // SAFETY: we own the object; a one-object chain.
                        unsafe { set_next(object, null_mut()) };
                        heaps
                            .return_to_bags(0, class, object)
                            .expect("valid objects");
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        if let Some(sweeper) = sweeper {
            assert!(sweeper.join().unwrap() > 0);
        }
        heaps.flush_all();
        assert_eq!(
            heaps.class(0, class).bags.load(Ordering::Relaxed),
            0,
            "a bag was lost or kept"
        );
        assert_eq!(heaps.node(0).released_in_bags.load(Ordering::Relaxed), 0);
        assert_eq!(heaps.arena.usage(0).active, 0);
    }

    #[test]
    fn bags_hand_objects_to_one_owner_at_a_time_under_contention() {
        hand_over_under_contention(class_of(96, 8).unwrap(), false);
    }
}
