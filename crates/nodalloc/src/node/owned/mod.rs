//! First-class heaps, the node side: a heap a program creates, allocates from, and drops whole.
//!
//! A heap is a partition of its own (its number has [`OWNED_BIT`] set) on one node, with a
//! class heap per size class and a list of large blocks, in a **record** of the owned table.
//! Its spans come from its node's **owned pool** alone (`arena`'s third pool), which the
//! thread caches' fast paths never look at: a heap's block freed through any path (`free`,
//! `dealloc`, another thread) takes a slow path that finds the heap from the block's bag (its
//! partition) or its large descriptor (`LargeState::owner`), and goes back to it under the
//! heap's class lock. No thread ever caches a heap's object, so dropping a heap needs nobody's
//! help: every bag and large block it holds is on one of its lists (partial bags, full bags,
//! large blocks), and goes back to the region list by list, in time proportional to its spans.
//!
//! In front of each class heap, a **front list** of free objects under a lock of its own
//! (`Front`): an allocation pops it, a free pushes it, and only a refill (a batch carved or
//! taken from the bags) or an overflow (a batch returned) takes the class lock, so an
//! allocation costs one uncontended lock, as a thread cache's miss would not. The front list
//! belongs to the heap, not to a thread, so a drop simply forgets it. Secure mode keeps the
//! direct path (one object from or to its bag, the allocation bitmap checked each time).
//!
//! Each heap has its own [`CommitBudget`]: a bag or large block is charged to it before its
//! span is taken and uncharged when the span goes back, so a heap's limit holds exactly, and
//! the process-wide limit (charged by the region) still holds over all heaps.
//!
//! A handle ([`OwnedId`]) carries its record's generation, bumped by every drop: a handle used
//! after its heap was dropped (a second drop, an allocation) is refused with an abort naming
//! the heap, whatever became of the record since.
//!
//! Locks: the table lock orders creation and drop against `fork` (`lock_all` takes it after
//! the activation lock, then the class and large locks of every heap not free); a drop holds
//! it only to change the heap's state, never with a class lock held.

use super::partition::PartitionInfo;
use super::*;
use crate::arena::region::CommitBudget;
use crate::size_class::class_of;
use core::sync::atomic::AtomicPtr;

mod cache;
mod front;
mod large;
mod stats;
pub use cache::OwnedCache;
use front::Front;

/// The bit that marks a partition number as a first-class heap's.
pub(crate) const OWNED_BIT: u16 = 0x8000;

/// The most first-class heaps alive at once.
pub const MAX_OWNED: usize = 1024;

/// Bytes of a heap's name kept for the statistics.
pub const NAME_BYTES: usize = 40;

const _: () = assert!(MAX_OWNED <= OWNED_BIT as usize);
const _: () = assert!(super::partition::MAX_PARTITIONS < OWNED_BIT as usize);

/// States of a table slot (the low byte of its word; the generation is the high 32 bits).
const FREE: u64 = 0;
const LIVE: u64 = 1;
const DROPPING: u64 = 2;

/// A first-class heap as its owner names it: its slot and the generation it was created in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwnedId {
    pub(crate) index: u16,
    pub(crate) generation: u32,
}

impl OwnedId {
    /// Its slot in the table, `0 ..< MAX_OWNED` (reused once the heap is dropped).
    pub fn index(self) -> usize {
        self.index as usize
    }

    /// Its slot's generation when it was created.
    pub fn generation(self) -> u32 {
        self.generation
    }

    /// The handle of slot `index` in `generation` (a C handle decoded; checked when used).
    pub fn from_parts(index: u16, generation: u32) -> OwnedId {
        OwnedId { index, generation }
    }

    pub(crate) fn partition(self) -> Partition {
        Partition(OWNED_BIT | self.index)
    }
}

impl Partition {
    /// True for a first-class heap's partition.
    #[inline]
    pub(crate) fn is_owned(self) -> bool {
        self.0 & OWNED_BIT != 0
    }

    /// The table slot of a first-class heap's partition.
    fn owned_index(self) -> usize {
        (self.0 & !OWNED_BIT) as usize
    }
}

/// Why a heap could not be created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnedRefusal {
    /// No such node.
    NoSuchNode,
    /// A limit below one bag (32 KiB): nothing could ever be allocated.
    LimitTooSmall,
    /// 1024 heaps (`MAX_OWNED`) are alive already.
    TooMany,
    /// The table's memory could not be mapped.
    NoMemory,
}

/// What a heap holds, as `NodeHeaps::owned_stats` reads it.
#[derive(Clone, Copy, Debug, Default)]
pub struct OwnedStats {
    /// Its node (dense index).
    pub node: usize,
    /// Its limit in bytes, 0 for none.
    pub limit: usize,
    /// Bytes of the spans it holds now (bags and large blocks): what its limit counts.
    pub committed: usize,
    /// The most it ever held at once.
    pub peak: usize,
    /// Bytes of its blocks the program holds (small blocks at their class size, large blocks
    /// at their span size).
    pub live: usize,
    /// Blocks the program holds.
    pub blocks: usize,
    /// Bags it holds.
    pub bags: usize,
    /// Large blocks it holds.
    pub large_blocks: usize,
    /// Bytes of its large blocks.
    pub large_bytes: usize,
    /// Blocks allocated from it since it was created (or last reset).
    pub allocs: u64,
    /// Blocks freed back to it since it was created (or last reset).
    pub frees: u64,
}

/// One heap's state in the owned table. All-zero is a free, empty record.
#[repr(C, align(64))]
struct OwnedRecord {
    node: AtomicUsize,
    budget: CommitBudget,
    name_len: AtomicUsize,
    name: UnsafeCell<[u8; NAME_BYTES]>,
    /// Its large blocks, linked through their descriptors' `next`/`prev` (large lock).
    large_lock: SpinLock,
    large: UnsafeCell<*mut UnitMeta>,
    large_blocks: AtomicUsize,
    large_bytes: AtomicUsize,
    large_allocs: AtomicU64,
    large_frees: AtomicU64,
    info: PartitionInfo,
    /// Bit `c` of word `c / 64`: class `c` has been used (set under the activation lock).
    used: [AtomicU64; 2],
    /// Per class, its bags with nothing left to hand out (class lock), so a drop finds them.
    full: [UnsafeCell<*mut UnitMeta>; NUM_CLASSES],
    /// Per class, the front list (see [`Front`]).
    fronts: [Front; NUM_CLASSES],
    /// Set when an object is left on a front list, cleared by a flush before it looks: a heap
    /// at its limit whose front lists stay empty refuses without looking at them.
    fronted: AtomicBool,
    classes: [ClassHeap; NUM_CLASSES],
    /// The class heaps' transfer rings, by class.
    rings: [RingShard; NUM_CLASSES],
}

/// The owned table: a word per slot (generation and state), then the records, in one
/// `MAP_NORESERVE` mapping made when the first heap is created.
pub(super) struct Owned {
    lock: SpinLock,
    slots: AtomicPtr<AtomicU64>,
    records: AtomicPtr<OwnedRecord>,
    /// Heaps alive now, created and dropped so far.
    live: AtomicUsize,
    created: AtomicU64,
    dropped: AtomicU64,
}

impl Owned {
    pub(super) const fn new() -> Owned {
        Owned {
            lock: SpinLock::new(),
            slots: AtomicPtr::new(null_mut()),
            records: AtomicPtr::new(null_mut()),
            live: AtomicUsize::new(0),
            created: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Maps the table if it is not yet (table lock held). False if the mapping fails.
    fn ensure_mapped(&self) -> bool {
        if !self.records.load(Ordering::Acquire).is_null() {
            return true;
        }
        let slots_bytes = (MAX_OWNED * 8).next_multiple_of(64);
        let bytes = slots_bytes + MAX_OWNED * core::mem::size_of::<OwnedRecord>();
        let Some(memory) = os::reserve(bytes) else {
            return false;
        };
        // Records are read piecemeal: huge pages would only inflate RSS.
        os::advise(memory, bytes, libc::MADV_NOHUGEPAGE);
        self.slots
            .store(memory as *mut AtomicU64, Ordering::Release);
        // SAFETY: inside the fresh mapping, at a multiple of 64.
        let records = unsafe { memory.add(slots_bytes) } as *mut OwnedRecord;
        self.records.store(records, Ordering::Release);
        true
    }

    /// The word of slot `index` (the table is mapped: some heap was created).
    fn slot(&self, index: usize) -> &AtomicU64 {
        debug_assert!(index < MAX_OWNED);
        let slots = self.slots.load(Ordering::Acquire);
        os::invariant(!slots.is_null(), "a heap looked up before any was created");
        // SAFETY: the table holds MAX_OWNED slot words; all-zero is a valid AtomicU64.
        unsafe { &*slots.add(index) }
    }

    fn record(&self, index: usize) -> &OwnedRecord {
        debug_assert!(index < MAX_OWNED);
        let records = self.records.load(Ordering::Acquire);
        os::invariant(
            !records.is_null(),
            "a heap looked up before any was created",
        );
        // SAFETY: the table holds MAX_OWNED records; all-zero is a valid record.
        unsafe { &*records.add(index) }
    }

    fn is_mapped(&self) -> bool {
        !self.records.load(Ordering::Acquire).is_null()
    }
}

// SAFETY: the UnsafeCell fields are only touched under the locks their comments name.
unsafe impl Sync for OwnedRecord {}

/// The word of a live slot of `generation`.
fn live_word(generation: u32) -> u64 {
    (generation as u64) << 32 | LIVE
}

/// Aborts naming a heap handle used after its heap was dropped (or never created).
#[cold]
#[inline(never)]
fn report_stale(id: OwnedId, what: &str) -> ! {
    os::fatal(|w| {
        w.str(what)
            .str(" of heap ")
            .decimal(id.index as u64)
            .str(".")
            .decimal(id.generation as u64)
            .str(", which was dropped (or never created)");
    })
}

impl NodeHeaps {
    /// Creates a first-class heap on `node` with a limit of `limit` bytes (0: none) and the
    /// name `name` (cut to [`NAME_BYTES`]).
    pub(crate) fn owned_create(
        &self,
        node: NodeId,
        limit: usize,
        name: &[u8],
    ) -> Result<OwnedId, OwnedRefusal> {
        if node.index() >= self.arena.node_count() {
            return Err(OwnedRefusal::NoSuchNode);
        }
        if limit != 0 && limit < UNIT {
            return Err(OwnedRefusal::LimitTooSmall);
        }
        let owned = &self.owned;
        let _guard = owned.lock.lock();
        if !owned.ensure_mapped() {
            return Err(OwnedRefusal::NoMemory);
        }
        let Some(index) =
            (0..MAX_OWNED).find(|&index| owned.slot(index).load(Ordering::Relaxed) & 0xff == FREE)
        else {
            return Err(OwnedRefusal::TooMany);
        };
        let record = owned.record(index);
        // SAFETY: the slot is free, so nothing refers to its record (a stale handle is refused
        // before it reads the record); all-zero is a free, empty record.
        unsafe { (record as *const OwnedRecord as *mut OwnedRecord).write_bytes(0, 1) };
        record.node.store(node.index(), Ordering::Relaxed);
        record.budget.set_limit(limit);
        let len = name.len().min(NAME_BYTES);
        // SAFETY: as above: the record is ours until its slot says it is live.
        unsafe { (&mut *record.name.get())[..len].copy_from_slice(&name[..len]) };
        record.name_len.store(len, Ordering::Relaxed);
        let generation = (owned.slot(index).load(Ordering::Relaxed) >> 32) as u32;
        owned
            .slot(index)
            .store(live_word(generation), Ordering::Release);
        owned.live.fetch_add(1, Ordering::Relaxed);
        owned.created.fetch_add(1, Ordering::Relaxed);
        Ok(OwnedId {
            index: index as u16,
            generation,
        })
    }

    /// The record of a live heap, or an abort naming the handle (`what` was tried with it).
    fn live_record(&self, id: OwnedId, what: &str) -> &OwnedRecord {
        let owned = &self.owned;
        if !owned.is_mapped()
            || id.index() >= MAX_OWNED
            || owned.slot(id.index()).load(Ordering::Acquire) != live_word(id.generation)
        {
            report_stale(id, what);
        }
        owned.record(id.index())
    }

    /// A block of `size` bytes at `align` from heap `id` (zeroed when `zero`), or null when the
    /// heap's limit, the process's, or its node's owned pool has no room for it.
    pub(crate) fn owned_alloc(
        &self,
        id: OwnedId,
        size: usize,
        align: usize,
        zero: bool,
    ) -> *mut u8 {
        let Some(class) = class_of(size, align) else {
            return self.owned_alloc_large_block(id, size, align, zero);
        };
        let record = self.live_record(id, "an allocation");
        let node = NodeId(record.node.load(Ordering::Relaxed));
        let Some((object, zeroed)) = self.owned_pop(record, node, id.partition(), class) else {
            return null_mut();
        };
        if zero {
            if zeroed {
                // SAFETY: a fresh object of `class` (at least 8 bytes), ours: only its link
                // word was written.
                unsafe { (object as *mut usize).write(0) };
            } else {
                // SAFETY: an object of `class`, at least `size` bytes, ours.
                unsafe { crate::os::fill_unchecked(object, 0, size) };
            }
        }
        object
    }

    /// A large block of heap `id` for `size` bytes, however small (a heap-profile sample that
    /// cannot stay in its bag: `ThreadHeap::sample_owned`); null when the heap has no room.
    pub(crate) fn owned_alloc_large_block(
        &self,
        id: OwnedId,
        size: usize,
        align: usize,
        zero: bool,
    ) -> *mut u8 {
        let record = self.live_record(id, "an allocation");
        let node = NodeId(record.node.load(Ordering::Relaxed));
        self.owned_alloc_large(record, id.partition(), node, size, align, zero)
    }

    /// A span for a new bag of `class` of heap `part`, charged to its limit; `None` when the
    /// limit or the node's owned pool has no room.
    pub(super) fn owned_bag_span(&self, part: Partition, class: SizeClass) -> Option<usize> {
        let record = self.owned.record(part.owned_index());
        let bytes = class.bag_bytes();
        if !self.owned_charge(record, part, bytes, Some(class)) {
            return None;
        }
        let node = record.node.load(Ordering::Relaxed);
        let span = self
            .arena
            .alloc_owned_span(node, class.bag_units(), 1, SpanUse::Bag(class));
        if span.is_none() {
            record.budget.uncharge(bytes);
        }
        span
    }

    /// Gives a heap's empty bag of `units` units at `start` back to the region, and its bytes
    /// back to the heap's limit.
    ///
    /// # Safety
    /// No object of the bag is out; the caller holds its class lock and took it off its list.
    pub(super) unsafe fn owned_free_bag(&self, part: Partition, start: usize, units: usize) {
        // SAFETY: forwarded contract.
        unsafe { self.arena.free_span(start, units) };
        self.owned
            .record(part.owned_index())
            .budget
            .uncharge(units << UNIT_SHIFT);
    }

    /// The list of `class`'s full bags of heap `part` (`None` for any other partition).
    ///
    /// # Safety
    /// The class lock of (`part`, `class`) is held for as long as the list is used.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn full_list(
        &self,
        part: Partition,
        class: SizeClass,
    ) -> Option<&mut *mut UnitMeta> {
        if !part.is_owned() {
            return None;
        }
        let record = self.owned.record(part.owned_index());
        // SAFETY: forwarded contract: the class lock owns the list.
        Some(unsafe { &mut *record.full[class.index()].get() })
    }

    /// The class heap of `class` of heap `part`.
    pub(super) fn owned_class(&self, part: Partition, class: SizeClass) -> &ClassHeap {
        &self.owned.record(part.owned_index()).classes[class.index()]
    }

    /// The transfer ring of heap `part`'s class heap of `class`.
    pub(super) fn owned_ring(&self, part: Partition, class: SizeClass) -> &RingShard {
        &self.owned.record(part.owned_index()).rings[class.index()]
    }

    /// The record of heap `part` (for `partition_info`).
    pub(super) fn owned_info(&self, part: Partition) -> Option<&PartitionInfo> {
        (part.owned_index() < MAX_OWNED && self.owned.is_mapped())
            .then(|| &self.owned.record(part.owned_index()).info)
    }

    /// True when `raw` names a heap's partition whose slot is in use (live or being dropped).
    pub(super) fn is_owned_partition(&self, raw: u16) -> bool {
        let part = Partition(raw);
        part.is_owned()
            && part.owned_index() < MAX_OWNED
            && self.owned.is_mapped()
            && self.owned.slot(part.owned_index()).load(Ordering::Acquire) & 0xff != FREE
    }

    /// Marks `class` used in heap `part` (activation lock held by the caller).
    pub(super) fn owned_activate(&self, part: Partition, class: SizeClass) {
        let record = self.owned.record(part.owned_index());
        let (word, bit) = super::partition::class_bit(class);
        record.used[word].fetch_or(bit, Ordering::Release);
    }

    /// True when `class` is marked used in heap `part`.
    pub(super) fn owned_class_used(&self, part: Partition, class: SizeClass) -> bool {
        let record = self.owned.record(part.owned_index());
        let (word, bit) = super::partition::class_bit(class);
        record.used[word].load(Ordering::Acquire) & bit != 0
    }

    /// Drops heap `id`: every block it holds goes back to the region, and its handle (and
    /// every copy of it) is refused from now on. Aborts, naming the heap, if it was dropped
    /// already.
    pub(crate) fn owned_drop(&self, id: OwnedId) {
        let owned = &self.owned;
        {
            let _guard = owned.lock.lock();
            let record_ok = owned.is_mapped()
                && id.index() < MAX_OWNED
                && owned
                    .slot(id.index())
                    .compare_exchange(
                        live_word(id.generation),
                        (id.generation as u64) << 32 | DROPPING,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_ok();
            if !record_ok {
                drop(_guard);
                report_stale(id, "a drop");
            }
        }
        self.owned_release_all(id.partition());
        let _guard = owned.lock.lock();
        let next = id.generation.wrapping_add(1);
        owned
            .slot(id.index())
            .store((next as u64) << 32 | FREE, Ordering::Release);
        owned.live.fetch_sub(1, Ordering::Relaxed);
        owned.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Empties heap `id` and keeps it: every block it holds goes back to the region.
    pub(crate) fn owned_reset(&self, id: OwnedId) {
        self.live_record(id, "a reset");
        self.owned_release_all(id.partition());
    }

    /// Gives every bag and large block of heap `part` back to the region, class by class.
    fn owned_release_all(&self, part: Partition) {
        let record = self.owned.record(part.owned_index());
        let map = self.arena.map();
        let secure = self.arena.is_secure();
        for index in 0..NUM_CLASSES {
            let class = SizeClass(index as u8);
            if !self.owned_class_used(part, class) {
                continue;
            }
            let front = &record.fronts[index];
            {
                let _front = front.lock.lock();
                // SAFETY: the front lock owns the list; its objects go with their bags below.
                unsafe { *front.head.get() = null_mut() };
                front.count.store(0, Ordering::Relaxed);
                front
                    .frees
                    .store(front.allocs.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            let class_heap = &record.classes[index];
            let _guard = class_heap.lock.lock();
            // SAFETY: the class lock owns both lists and every bag on them.
            let lists = unsafe {
                [
                    &mut *class_heap.partial.get(),
                    &mut *record.full[index].get(),
                ]
            };
            for list in lists {
                let mut bag = core::mem::replace(list, null_mut());
                while !bag.is_null() {
                    // SAFETY: a bag of this heap on one of its lists (class lock held): its
                    // descriptor is ours, and no object of it is handed out again once the
                    // heap goes (its objects are the program's to drop with it).
                    unsafe {
                        let next = (*bag).next;
                        let units = (*bag).units;
                        let start = map.address_of(map.unit_of_meta(bag));
                        if secure {
                            map.clear_allocated_range(start, units << UNIT_SHIFT);
                        }
                        map.free_bits(start).clear(class.capacity());
                        (*bag).next = null_mut();
                        (*bag).prev = null_mut();
                        // Its objects leave the heap profile's live counts with it.
                        crate::profile::in_bag::forget_units(start, units);
                        self.owned_free_bag(part, start, units);
                        bag = next;
                    }
                }
            }
            class_heap.bags.store(0, Ordering::Relaxed);
            class_heap.out_of_bags.store(0, Ordering::Relaxed);
            class_heap
                .frees
                .store(class_heap.allocs.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        let _large = record.large_lock.lock();
        // SAFETY: the large lock owns the list and every block on it.
        let mut block = core::mem::replace(unsafe { &mut *record.large.get() }, null_mut());
        while !block.is_null() {
            // SAFETY: a large block of this heap on its list (large lock held).
            unsafe {
                let next = (*block).next;
                let units = (*block).units;
                let start = map.address_of(map.unit_of_meta(block));
                (*block).next = null_mut();
                (*block).prev = null_mut();
                self.forget_sample(start);
                if secure {
                    self.arena.unguard_large(start, units);
                }
                self.arena.free_span(start, units);
                record.budget.uncharge(units << UNIT_SHIFT);
                record.large_frees.fetch_add(1, Ordering::Relaxed);
                block = next;
            }
        }
        record.large_blocks.store(0, Ordering::Relaxed);
        record.large_bytes.store(0, Ordering::Relaxed);
    }

    /// The partition that owns the bag or large block at `address` in a node's owned pool
    /// (a heap's, or the default partition's for a span the shared pools spilled there), or
    /// `None` when the address is in no bag or large block of the owned pool.
    fn owner_in_owned_pool(&self, address: usize) -> Option<Partition> {
        if !self.arena.is_owned(address) {
            return None;
        }
        let tag = self.arena.tag_checked(address)?;
        let map = self.arena.map();
        let raw = if let Some(at) = self.arena.bag_with_tag(address, tag) {
            // SAFETY: the tag says the unit heads a bag; volatile, as `partition_of` reads it.
            unsafe { core::ptr::addr_of!((*map.meta(at.first)).role.bag.partition).read_volatile() }
        } else if tag.kind() == Kind::Large {
            // SAFETY: a live large span's descriptor; its owner is constant while it lives.
            unsafe {
                core::ptr::addr_of!((*map.meta(map.unit_of(address))).role.large.owner)
                    .read_volatile()
            }
        } else {
            return None;
        };
        Some(Partition(raw))
    }

    /// The heap that holds the block at `address` (a live block of the program's), if a
    /// first-class heap does.
    pub(crate) fn owned_of(&self, address: usize) -> Option<OwnedId> {
        if !self.owned.is_mapped() {
            return None;
        }
        let part = self.owner_in_owned_pool(address)?;
        if !part.is_owned() || part.owned_index() >= MAX_OWNED {
            return None;
        }
        let word = self.owned.slot(part.owned_index()).load(Ordering::Acquire);
        (word & 0xff == LIVE).then_some(OwnedId {
            index: part.owned_index() as u16,
            generation: (word >> 32) as u32,
        })
    }

    /// True when `address` is in a bag or large block of a first-class heap (live, or a misuse
    /// of one), which goes back to its heap, never into a thread's cache. Reads the page map
    /// only for an address of an owned pool.
    #[inline]
    pub(crate) fn is_owned(&self, address: usize) -> bool {
        self.arena.is_owned(address)
            && self
                .owner_in_owned_pool(address)
                .is_some_and(|part| part.is_owned())
    }

    /// `lock_all`'s share: the table lock, then the class and large locks of every heap whose
    /// slot is in use (the activation lock is held, so no class comes into use meanwhile).
    pub(super) fn lock_owned(&self) {
        let owned = &self.owned;
        owned.lock.acquire();
        self.for_each_owned_lock(|lock| lock.acquire());
    }

    pub(super) fn unlock_owned(&self) {
        self.for_each_owned_lock(|lock| lock.release());
        self.owned.lock.release();
    }

    fn for_each_owned_lock(&self, mut f: impl FnMut(&SpinLock)) {
        let owned = &self.owned;
        if !owned.is_mapped() {
            return;
        }
        for index in 0..MAX_OWNED {
            if owned.slot(index).load(Ordering::Acquire) & 0xff == FREE {
                continue;
            }
            let record = owned.record(index);
            let part = Partition(OWNED_BIT | index as u16);
            for class in 0..NUM_CLASSES {
                if self.owned_class_used(part, SizeClass(class as u8)) {
                    f(&record.fronts[class].lock);
                    f(&record.classes[class].lock);
                }
            }
            f(&record.large_lock);
        }
    }
}

#[cfg(test)]
mod tests;
