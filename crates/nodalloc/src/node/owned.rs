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

    fn partition(self) -> Partition {
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

/// A heap's free objects of one class, in front of its class heap (see the module docs):
/// linked in the arena's encoding, at most two batches, under `lock`. The counts of blocks
/// handed to and taken back from the program are written under the lock (loads and stores,
/// no read-modify-write), read by the statistics.
#[repr(C, align(64))]
struct Front {
    lock: SpinLock,
    head: UnsafeCell<*mut u8>,
    /// Objects on the list: written under the lock, read without it by a flush that skips
    /// empty lists.
    count: AtomicUsize,
    allocs: AtomicU64,
    frees: AtomicU64,
}

impl Front {
    /// Adds one to `counter` (the front lock held: no other writer).
    fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
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

/// Notes that heap `record` has an object on a front list (a store only when the flag is clear:
/// the line stays shared while it is set).
#[inline]
fn note_fronted(record: &OwnedRecord) {
    if !record.fronted.load(Ordering::Relaxed) {
        record.fronted.store(true, Ordering::Relaxed);
    }
}

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
        let record = self.live_record(id, "an allocation");
        let node = NodeId(record.node.load(Ordering::Relaxed));
        let part = id.partition();
        let Some(class) = class_of(size, align) else {
            return self.owned_alloc_large(record, part, node, size, align, zero);
        };
        let Some((object, zeroed)) = self.owned_pop(record, node, part, class) else {
            return null_mut();
        };
        if zero {
            if zeroed {
                // SAFETY: a fresh object of `class` (at least 8 bytes), ours: only its link
                // word was written.
                unsafe { (object as *mut usize).write(0) };
            } else {
                // SAFETY: an object of `class`, at least `size` bytes, ours.
                unsafe { object.write_bytes(0, size) };
            }
        }
        object
    }

    /// One object of `class` of heap `part`, and whether it reads as zero but for its first
    /// word: the front list's head, or the head of a batch taken from the bags (the rest goes
    /// on the front list). Secure mode takes one object from the bags each time.
    fn owned_pop(
        &self,
        record: &OwnedRecord,
        node: NodeId,
        part: Partition,
        class: SizeClass,
    ) -> Option<(*mut u8, bool)> {
        if self.arena.is_secure() {
            return self.alloc_single_zeroed(node, part, class);
        }
        let front = &record.fronts[class.index()];
        let _guard = front.lock.lock();
        // SAFETY: the front lock owns the list.
        let head = unsafe { &mut *front.head.get() };
        let count = front.count.load(Ordering::Relaxed);
        let mut zeroed = false;
        let object = if head.is_null() {
            // Near its limit a heap refills one object at a time: a batch would pin bags the
            // limit may need for another class (and flushing batches back and forth on every
            // refusal made a heap at its limit 20 times slower).
            let want = if self.owned_near_limit(record) {
                1
            } else {
                class.batch()
            };
            let batch = self.take_from_node_bags(node, part, class, want, &mut zeroed, None)?;
            // SAFETY: the batch's objects are ours, linked through their first words.
            *head = unsafe { self.arena.read_link(batch.head, Expect::Class(class)) };
            front.count.store(batch.count - 1, Ordering::Relaxed);
            if batch.count > 1 {
                note_fronted(record);
            }
            batch.head
        } else {
            let object = *head;
            // SAFETY: a free object of the front list (front lock held), linked as above.
            *head = unsafe { self.arena.read_link(object, Expect::Class(class)) };
            front.count.store(count - 1, Ordering::Relaxed);
            object
        };
        Front::bump(&front.allocs);
        Some((object, zeroed))
    }

    /// Takes back a small block of a heap (its class `class` from the free's caller, checked
    /// against its bag), or reports the misuse: onto its heap's front list, whose overflow goes
    /// back to the bags (secure mode: straight to its bag, checked by the allocation bitmap).
    ///
    /// # Safety
    /// `object` is a live object of `class` of `origin`'s owned pool that the caller gives up.
    pub(crate) unsafe fn owned_free_small(
        &self,
        origin: NodeId,
        class: SizeClass,
        object: *mut u8,
    ) {
        if self.arena.is_secure() {
            // SAFETY: forwarded contract (checked by the bitmap).
            return unsafe { self.free_single(origin, class, object) };
        }
        match self.small_class_at(object as usize) {
            Ok(Some(found)) if found == class => {}
            Ok(_) => report(object, Misuse::InvalidPointer),
            Err(misuse) => report(object, misuse),
        }
        let part = self.partition_of(object as usize);
        if !part.is_owned() {
            report(object, Misuse::InvalidPointer);
        }
        let record = self.owned.record(part.owned_index());
        if self.owned_near_limit(record) {
            // Near its limit a heap keeps no free objects in front: back to the bag at once.
            // SAFETY: the object is ours; a chain of one.
            unsafe { self.arena.write_link(object, null_mut()) };
            let node = NodeId(record.node.load(Ordering::Relaxed));
            if let Err((object, misuse)) = self.return_to_bags(node, class, object, true) {
                report(object, misuse);
            }
            return;
        }
        let front = &record.fronts[class.index()];
        let guard = front.lock.lock();
        // SAFETY: the front lock owns the list.
        let head = unsafe { &mut *front.head.get() };
        // SAFETY: the object is ours now, at least 8 bytes.
        unsafe { self.arena.write_link(object, *head) };
        *head = object;
        let count = front.count.load(Ordering::Relaxed) + 1;
        front.count.store(count, Ordering::Relaxed);
        Front::bump(&front.frees);
        note_fronted(record);
        if count <= 2 * class.batch() {
            return;
        }
        // The overflow: a batch's worth goes back to the bags, the rest stays.
        let chain = *head;
        let mut last = chain;
        for _ in 1..class.batch() {
            // SAFETY: a free object of the list (front lock held).
            last = unsafe { self.arena.read_link(last, Expect::Class(class)) };
        }
        // SAFETY: as above; the chain ends at `last`.
        unsafe {
            *head = self.arena.read_link(last, Expect::Class(class));
            self.arena.write_link(last, null_mut());
        }
        front.count.store(count - class.batch(), Ordering::Relaxed);
        drop(guard);
        let node = NodeId(record.node.load(Ordering::Relaxed));
        if let Err((object, misuse)) = self.return_to_bags(node, class, chain, false) {
            report(object, misuse);
        }
    }

    fn owned_alloc_large(
        &self,
        record: &OwnedRecord,
        part: Partition,
        node: NodeId,
        size: usize,
        align: usize,
        zero: bool,
    ) -> *mut u8 {
        let secure = self.arena.is_secure();
        let Some((usable, units)) = self.large_layout(size) else {
            return null_mut();
        };
        let align_units = (align >> UNIT_SHIFT).max(1);
        let bytes = units << UNIT_SHIFT;
        if units > self.arena.pool_bytes(crate::arena::Pool::Owned) >> UNIT_SHIFT
            || !self.owned_charge(record, part, bytes, None)
        {
            return null_mut();
        }
        let Some(address) =
            self.arena
                .alloc_owned_span(node.index(), units, align_units, SpanUse::Large)
        else {
            record.budget.uncharge(bytes);
            return null_mut();
        };
        if secure {
            // SAFETY: the span was just handed to us, whole and without a guard.
            unsafe { self.arena.guard_large(address, usable, units) };
        }
        let map = self.arena.map();
        let meta = map.meta(map.unit_of(address));
        // SAFETY: the span was just handed to us: its descriptor is ours, and its links are
        // free while it is a large block (the region uses them for free spans only).
        let zeroed = unsafe {
            (*meta).role.large.owner = part.0;
            (*meta).role.large.zeroed
        };
        {
            let _large = record.large_lock.lock();
            // SAFETY: the large lock owns the list; the block is on no list.
            unsafe { bags::push_front(&mut *record.large.get(), meta) };
        }
        record.large_blocks.fetch_add(1, Ordering::Relaxed);
        record.large_bytes.fetch_add(bytes, Ordering::Relaxed);
        record.large_allocs.fetch_add(1, Ordering::Relaxed);
        if zero && !zeroed {
            // SAFETY: the block holds at least `size` writable bytes, ours.
            unsafe { (address as *mut u8).write_bytes(0, size) };
        }
        address as *mut u8
    }

    /// Frees the large block of a heap at `address` (a live large span of `units` units of
    /// the owned pool, checked by the caller).
    pub(super) fn owned_free_large(&self, address: usize, units: usize) {
        let map = self.arena.map();
        let meta = map.meta(map.unit_of(address));
        // SAFETY: the caller found a live large span here, which the program gives up.
        let owner = Partition(unsafe { (*meta).role.large.owner });
        if !owner.is_owned() || owner.owned_index() >= MAX_OWNED || !self.owned.is_mapped() {
            report(address as *mut u8, Misuse::InvalidPointer);
        }
        let record = self.owned.record(owner.owned_index());
        {
            let _large = record.large_lock.lock();
            // SAFETY: a live large block of this heap is on its list (large lock held).
            unsafe { bags::unlink(&mut *record.large.get(), meta) };
        }
        let bytes = units << UNIT_SHIFT;
        record.large_blocks.fetch_sub(1, Ordering::Relaxed);
        record.large_bytes.fetch_sub(bytes, Ordering::Relaxed);
        record.large_frees.fetch_add(1, Ordering::Relaxed);
        if self.arena.is_secure() {
            // SAFETY: a live large span of `units` units that the caller gives up.
            unsafe { self.arena.unguard_large(address, units) };
        }
        // SAFETY: as above; nothing of it is the program's any more.
        unsafe { self.arena.free_span(address, units) };
        record.budget.uncharge(bytes);
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

    /// True when heap `record` has a limit and holds within a sixteenth of it (at least four
    /// bags' worth, at most 4 MiB: about what full front lists of many classes keep): its front
    /// lists then stay empty.
    #[inline]
    fn owned_near_limit(&self, record: &OwnedRecord) -> bool {
        let limit = record.budget.limit();
        limit != 0 && record.budget.charged() + (limit / 16).clamp(4 * UNIT, 4 << 20) >= limit
    }

    /// Charges `bytes` to heap `part`'s limit. When the limit refuses, the objects its front
    /// lists keep go back to their bags first (bags that fall empty give their bytes back) and
    /// the charge is tried again: a heap whose blocks were freed has its whole limit again.
    /// `locked`: the class whose class lock the caller holds (its front list is left alone).
    fn owned_charge(
        &self,
        record: &OwnedRecord,
        part: Partition,
        bytes: usize,
        locked: Option<SizeClass>,
    ) -> bool {
        if record.budget.try_charge(bytes) {
            return true;
        }
        if record.budget.limit() == 0 || !record.fronted.swap(false, Ordering::Relaxed) {
            return false;
        }
        self.owned_flush_fronts(record, part, locked);
        record.budget.try_charge(bytes)
    }

    /// Returns every front list of heap `part` to its bags. With `skip`, the caller holds that
    /// class's front and class locks (a refill): its list is left alone, and the others are
    /// taken only if their front lock is free (a refill of another class that holds its front
    /// lock may be flushing this one: neither waits for the other).
    fn owned_flush_fronts(&self, record: &OwnedRecord, part: Partition, skip: Option<SizeClass>) {
        let node = NodeId(record.node.load(Ordering::Relaxed));
        for index in 0..NUM_CLASSES {
            let class = SizeClass(index as u8);
            if skip == Some(class) || !self.owned_class_used(part, class) {
                continue;
            }
            let front = &record.fronts[index];
            if front.count.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let chain = {
                let _front = match skip {
                    Some(_) => match front.lock.try_lock() {
                        Some(guard) => guard,
                        None => continue,
                    },
                    None => front.lock.lock(),
                };
                front.count.store(0, Ordering::Relaxed);
                // SAFETY: the front lock owns the list; the chain taken is ours.
                unsafe { core::mem::replace(&mut *front.head.get(), null_mut()) }
            };
            if !chain.is_null() {
                if let Err((object, misuse)) = self.return_to_bags(node, class, chain, false) {
                    report(object, misuse);
                }
            }
        }
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
        record.used[class.index() / 64].fetch_or(1 << (class.index() % 64), Ordering::Release);
    }

    /// True when `class` is marked used in heap `part`.
    pub(super) fn owned_class_used(&self, part: Partition, class: SizeClass) -> bool {
        let record = self.owned.record(part.owned_index());
        record.used[class.index() / 64].load(Ordering::Acquire) & 1 << (class.index() % 64) != 0
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
                        (*bag).next = null_mut();
                        (*bag).prev = null_mut();
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

    /// What heap `id` holds.
    pub(crate) fn owned_stats(&self, id: OwnedId) -> OwnedStats {
        let record = self.live_record(id, "a statistics read");
        self.owned_figures(id, record)
    }

    /// What heap `id`, whose record is `record`, holds (no check of the handle).
    fn owned_figures(&self, id: OwnedId, record: &OwnedRecord) -> OwnedStats {
        let part = id.partition();
        let mut stats = OwnedStats {
            node: record.node.load(Ordering::Relaxed),
            limit: record.budget.limit(),
            committed: record.budget.charged(),
            peak: record.budget.peak(),
            large_blocks: record.large_blocks.load(Ordering::Relaxed),
            large_bytes: record.large_bytes.load(Ordering::Relaxed),
            ..OwnedStats::default()
        };
        stats.live = stats.large_bytes;
        stats.blocks = stats.large_blocks;
        stats.allocs = record.large_allocs.load(Ordering::Relaxed);
        stats.frees = record.large_frees.load(Ordering::Relaxed);
        for index in 0..NUM_CLASSES {
            let class = SizeClass(index as u8);
            if !self.owned_class_used(part, class) {
                continue;
            }
            let class_heap = &record.classes[index];
            let front = &record.fronts[index];
            let allocs =
                class_heap.allocs.load(Ordering::Relaxed) + front.allocs.load(Ordering::Relaxed);
            let frees =
                class_heap.frees.load(Ordering::Relaxed) + front.frees.load(Ordering::Relaxed);
            let out = allocs.saturating_sub(frees) as usize;
            stats.blocks += out;
            stats.live += out * class.size();
            stats.allocs += allocs;
            stats.frees += frees;
            stats.bags += class_heap.bags.load(Ordering::Relaxed);
        }
        stats
    }

    /// Heap `id`'s name as it was given (cut to [`NAME_BYTES`]), copied into `out`; its length.
    pub(crate) fn owned_name(&self, id: OwnedId, out: &mut [u8; NAME_BYTES]) -> usize {
        let record = self.live_record(id, "a name read");
        // SAFETY: the name is written once, before the slot goes live.
        *out = unsafe { *record.name.get() };
        record.name_len.load(Ordering::Relaxed)
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

    /// Offers every live heap to the statistics' list of heaps.
    pub(crate) fn collect_owned_stats(&self, stats: &mut crate::stats::Stats) {
        let owned = &self.owned;
        if !owned.is_mapped() {
            return;
        }
        for index in 0..MAX_OWNED {
            let word = owned.slot(index).load(Ordering::Acquire);
            if word & 0xff != LIVE {
                continue;
            }
            let id = OwnedId {
                index: index as u16,
                generation: (word >> 32) as u32,
            };
            // A heap dropped meanwhile is skipped, not reported: the statistics only look.
            let record = owned.record(index);
            let figures = self.owned_figures(id, record);
            let mut line = crate::stats::HeapLine {
                index,
                generation: id.generation,
                node: figures.node,
                live: figures.live,
                committed: figures.committed,
                limit: figures.limit,
                ..Default::default()
            };
            line.name_len = record.name_len.load(Ordering::Relaxed).min(NAME_BYTES);
            // SAFETY: the name is written before the slot goes live, and only then.
            line.name = unsafe { *record.name.get() };
            if owned.slot(index).load(Ordering::Acquire) == word {
                stats.offer_heap(line);
            }
        }
    }

    /// Heaps alive now, and created and dropped so far.
    pub(crate) fn owned_counts(&self) -> (usize, u64, u64) {
        let owned = &self.owned;
        (
            owned.live.load(Ordering::Relaxed),
            owned.created.load(Ordering::Relaxed),
            owned.dropped.load(Ordering::Relaxed),
        )
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

/// A thread's own cache of one heap's free objects (`nodalloc::LocalHeap`): per class, a list
/// that only the owning thread touches, with no lock. Refills take a batch from the heap's
/// front list or bags (under the front lock); an overflow gives a batch back. Objects in the
/// cache count as the program's in the heap's statistics until they are given back; the
/// cache's owner subtracts them ([`OwnedCache::cached`]). The heap's drop forgets the cache
/// with everything else.
pub struct OwnedCache {
    heads: [*mut u8; NUM_CLASSES],
    counts: [u32; NUM_CLASSES],
}

impl OwnedCache {
    /// An empty cache.
    pub const fn new() -> OwnedCache {
        OwnedCache {
            heads: [null_mut(); NUM_CLASSES],
            counts: [0; NUM_CLASSES],
        }
    }

    /// Objects cached, and their bytes.
    pub fn cached(&self) -> (usize, usize) {
        self.counts
            .iter()
            .enumerate()
            .fold((0, 0), |(count, bytes), (class, &n)| {
                let n = n as usize;
                (count + n, bytes + n * SizeClass(class as u8).size())
            })
    }
}

impl Default for OwnedCache {
    fn default() -> OwnedCache {
        OwnedCache::new()
    }
}

impl NodeHeaps {
    /// [`Self::owned_alloc`] through `cache` (heap `id`'s, owned by the calling thread): a
    /// small block pops the cache's list, refilled by a batch when empty.
    #[inline]
    pub(crate) fn cached_alloc(
        &self,
        cache: &mut OwnedCache,
        id: OwnedId,
        size: usize,
        align: usize,
    ) -> *mut u8 {
        let class = match class_of(size, align) {
            Some(class) if !self.arena.is_secure() => class,
            _ => return self.owned_alloc(id, size, align, false),
        };
        let index = class.index();
        if cache.heads[index].is_null() && !self.cache_refill(cache, id, class) {
            return null_mut();
        }
        let object = cache.heads[index];
        // SAFETY: a free object of the cache (this thread's alone), linked in the arena's
        // encoding.
        cache.heads[index] = unsafe { self.arena.read_link(object, Expect::Class(class)) };
        cache.counts[index] -= 1;
        object
    }

    /// Fills `cache`'s list of `class` with a batch of heap `id`'s (its front list whole, or a
    /// batch of its bags). When the heap's limit refuses, the cache gives everything back
    /// first and tries again. False when the heap has no room.
    #[cold]
    #[inline(never)]
    fn cache_refill(&self, cache: &mut OwnedCache, id: OwnedId, class: SizeClass) -> bool {
        let record = self.live_record(id, "an allocation");
        let node = NodeId(record.node.load(Ordering::Relaxed));
        let part = id.partition();
        for attempt in 0..2 {
            let front = &record.fronts[class.index()];
            let guard = front.lock.lock();
            // SAFETY: the front lock owns the list.
            let head = unsafe { &mut *front.head.get() };
            let taken = if head.is_null() {
                let mut zeroed = false;
                self.take_from_node_bags(node, part, class, class.batch(), &mut zeroed, None)
                    .map(|batch| (batch.head, batch.count))
            } else {
                Some((
                    core::mem::replace(head, null_mut()),
                    front.count.swap(0, Ordering::Relaxed),
                ))
            };
            if let Some((chain, taken)) = taken {
                front.allocs.store(
                    front.allocs.load(Ordering::Relaxed) + taken as u64,
                    Ordering::Relaxed,
                );
                cache.heads[class.index()] = chain;
                cache.counts[class.index()] = taken as u32;
                return true;
            }
            drop(guard);
            if attempt == 0 {
                self.cache_flush(cache, id);
            }
        }
        false
    }

    /// Gives a small block of heap `id` of `class` (the caller knows both: it allocated it)
    /// back to `cache`; an overflow returns a batch to the heap.
    ///
    /// # Safety
    /// `object` is a live object of `class` of heap `id`, which the caller gives up.
    #[inline]
    pub(crate) unsafe fn cached_free(
        &self,
        cache: &mut OwnedCache,
        id: OwnedId,
        class: SizeClass,
        object: *mut u8,
    ) {
        if self.arena.is_secure() {
            let origin = NodeId(self.owned.record(id.index()).node.load(Ordering::Relaxed));
            // SAFETY: forwarded contract.
            return unsafe { self.owned_free_small(origin, class, object) };
        }
        let index = class.index();
        // SAFETY: the object is ours now, at least 8 bytes.
        unsafe { self.arena.write_link(object, cache.heads[index]) };
        cache.heads[index] = object;
        cache.counts[index] += 1;
        if cache.counts[index] as usize > 2 * class.batch() {
            self.cache_give_back(cache, id, class);
        }
    }

    /// Returns the whole list of `class` of `cache` to heap `id`'s bags.
    #[cold]
    #[inline(never)]
    fn cache_give_back(&self, cache: &mut OwnedCache, id: OwnedId, class: SizeClass) {
        let index = class.index();
        let chain = core::mem::replace(&mut cache.heads[index], null_mut());
        let count = core::mem::replace(&mut cache.counts[index], 0);
        if chain.is_null() {
            return;
        }
        let record = self.live_record(id, "a free");
        let front = &record.fronts[index];
        {
            let _front = front.lock.lock();
            front.frees.store(
                front.frees.load(Ordering::Relaxed) + count as u64,
                Ordering::Relaxed,
            );
        }
        let node = NodeId(record.node.load(Ordering::Relaxed));
        if let Err((object, misuse)) = self.return_to_bags(node, class, chain, false) {
            report(object, misuse);
        }
    }

    /// Returns everything `cache` holds to heap `id`'s bags.
    pub(crate) fn cache_flush(&self, cache: &mut OwnedCache, id: OwnedId) {
        for index in 0..NUM_CLASSES {
            if !cache.heads[index].is_null() {
                self.cache_give_back(cache, id, SizeClass(index as u8));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::tests::test_arena;

    fn free(heaps: &NodeHeaps, object: *mut u8) {
        let address = object as usize;
        let origin = heaps.origin_of(address).unwrap();
        match heaps.small_class_at(address).unwrap() {
            // SAFETY: a live block of a heap, given up here.
            Some(class) => unsafe { heaps.owned_free_small(origin, class, object) },
            None => heaps.free_large(address),
        }
    }

    /// A drop gives back every span the heap held: partial bags, full bags (every object out)
    /// and large blocks; the slot is reused by the next heap under a new generation.
    #[test]
    fn a_drop_gives_back_every_span_of_the_heap() {
        let heaps = NodeHeaps::create(test_arena(2, 1 << 30, 0)).unwrap();
        let before = heaps.arena.usage(1).active;
        let id = heaps.owned_create(NodeId(1), 0, b"test").unwrap();
        let mut blocks = Vec::new();
        for i in 0..20_000 {
            let size = 16 + (i % 7) * 100;
            let p = heaps.owned_alloc(id, size, 8, false);
            assert!(!p.is_null());
            assert!(heaps.is_owned(p as usize));
            assert_eq!(heaps.origin_of(p as usize), Some(NodeId(1)));
            assert_eq!(heaps.owned_of(p as usize), Some(id));
            blocks.push(p);
        }
        let large = heaps.owned_alloc(id, 3 << 20, 4096, true);
        assert!(!large.is_null() && heaps.owned_of(large as usize) == Some(id));
        // Some blocks back, so the heap has partial bags as well as full ones.
        for &p in blocks.iter().step_by(3) {
            free(heaps, p);
        }
        let stats = heaps.owned_stats(id);
        assert_eq!(stats.blocks, 20_000 - 20_000usize.div_ceil(3) + 1);
        assert_eq!(stats.large_blocks, 1);
        assert!(heaps.arena.usage(1).active >= before + stats.committed);
        heaps.owned_drop(id);
        assert_eq!(
            heaps.arena.usage(1).active,
            before,
            "spans left after the drop"
        );
        let again = heaps.owned_create(NodeId(0), 0, b"").unwrap();
        assert_eq!(again.index, id.index);
        assert_ne!(again.generation, id.generation);
        assert_eq!(heaps.owned_of(blocks[1] as usize), None);
        heaps.owned_drop(again);
    }

    /// Shared spans spill into the owned pool once the shared pools are full (a small region):
    /// their blocks are no heap's (told by the owner, not the pool), go back as any block does,
    /// and a heap's block beside them is still its heap's.
    #[test]
    fn shared_spans_spilled_into_the_owned_pool_are_no_heaps() {
        let heaps = NodeHeaps::create(test_arena(1, 64 << 20, 0)).unwrap();
        let id = heaps.owned_create(NodeId(0), 0, b"beside").unwrap();
        let heap_block = heaps.owned_alloc(id, 100, 8, false);
        assert!(heaps.is_owned(heap_block as usize));
        let mut larges = Vec::new();
        let spilled = loop {
            let p = heaps.alloc_large(NodeId(0), 2 << 20, 8);
            assert!(!p.is_null(), "the region filled before a span spilled");
            larges.push(p);
            if heaps.arena.is_owned(p as usize) {
                break p;
            }
        };
        assert!(!heaps.is_owned(spilled as usize));
        assert_eq!(heaps.owned_of(spilled as usize), None);
        assert_eq!(heaps.owned_of(heap_block as usize), Some(id));
        for p in larges {
            heaps.free_large(p as usize);
        }
        free(heaps, heap_block);
        assert_eq!(heaps.owned_stats(id).blocks, 0);
        heaps.owned_drop(id);
    }

    /// A heap's limit is exact, counts large and small blocks, refuses past it, and is whole
    /// again once the blocks come back (its front lists flushed when the limit refuses).
    #[test]
    fn a_limit_is_exact_and_recovers() {
        let heaps = NodeHeaps::create(test_arena(1, 1 << 30, 0)).unwrap();
        const LIMIT: usize = 2 << 20;
        let id = heaps.owned_create(NodeId(0), LIMIT, b"bounded").unwrap();
        let mut blocks = Vec::new();
        let mut refused = 0;
        for i in 0..100_000 {
            let size = if i % 50 == 0 {
                300 << 10
            } else {
                24 + i % 3000
            };
            let p = heaps.owned_alloc(id, size, 8, false);
            if p.is_null() {
                refused += 1;
                if refused > 100 {
                    break;
                }
                continue;
            }
            blocks.push(p);
        }
        let stats = heaps.owned_stats(id);
        assert!(refused > 100);
        assert!(
            stats.peak <= LIMIT && stats.committed > LIMIT / 2,
            "{stats:?}"
        );
        for p in blocks {
            free(heaps, p);
        }
        let whole = heaps.owned_alloc(id, LIMIT - UNIT, UNIT, false);
        assert!(!whole.is_null(), "{:?}", heaps.owned_stats(id));
        assert!(heaps.owned_stats(id).peak <= LIMIT);
        heaps.owned_drop(id);
        assert_eq!(
            heaps.owned_create(NodeId(0), UNIT - 1, b""),
            Err(OwnedRefusal::LimitTooSmall)
        );
        assert_eq!(
            heaps.owned_create(NodeId(5), 0, b""),
            Err(OwnedRefusal::NoSuchNode)
        );
    }

    /// Threads allocate from and free into one heap with a limit, every block checked by the
    /// thread that frees it (another thread than the allocating one half of the time).
    #[test]
    fn threads_share_a_heap_within_its_limit() {
        let heaps = NodeHeaps::create(test_arena(1, 1 << 30, 0)).unwrap();
        const LIMIT: usize = 8 << 20;
        let id = heaps.owned_create(NodeId(0), LIMIT, b"shared").unwrap();
        let (sender, receiver) = std::sync::mpsc::channel::<(usize, usize, u8)>();
        let receiver = std::sync::Arc::new(std::sync::Mutex::new(receiver));
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let sender = sender.clone();
                let receiver = std::sync::Arc::clone(&receiver);
                std::thread::spawn(move || {
                    let mut state = 0x9E37_79B9u64 + t;
                    let mut mine = Vec::new();
                    for round in 0..20_000u32 {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        let size = 8 + (state % 2000) as usize;
                        let p = heaps.owned_alloc(id, size, 8, false);
                        if !p.is_null() {
                            let fill = (round % 251) as u8;
                            // SAFETY: `size` writable bytes.
                            unsafe { p.write_bytes(fill, size) };
                            if state % 2 == 0 {
                                mine.push((p as usize, size, fill));
                            } else {
                                sender.send((p as usize, size, fill)).unwrap();
                            }
                        }
                        let theirs = receiver.lock().unwrap().try_recv().ok();
                        for (p, size, fill) in theirs
                            .into_iter()
                            .chain((mine.len() > 64).then(|| mine.swap_remove(0)))
                        {
                            // SAFETY: a live block of `size` bytes.
                            let bytes =
                                unsafe { core::slice::from_raw_parts(p as *const u8, size) };
                            assert!(bytes.iter().all(|&b| b == fill), "a block was overwritten");
                            free(heaps, p as *mut u8);
                        }
                    }
                    mine
                })
            })
            .collect();
        drop(sender);
        for worker in workers {
            for (p, _, _) in worker.join().unwrap() {
                free(heaps, p as *mut u8);
            }
        }
        while let Ok((p, _, _)) = receiver.lock().unwrap().try_recv() {
            free(heaps, p as *mut u8);
        }
        let stats = heaps.owned_stats(id);
        assert_eq!(stats.blocks, 0, "{stats:?}");
        assert!(stats.peak <= LIMIT, "{stats:?}");
        assert_eq!(stats.allocs, stats.frees);
        heaps.owned_drop(id);
    }
}
