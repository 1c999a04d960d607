//! The front: a **thread heap** per thread, touched by its thread only, so its fast paths use no
//! atomic and no lock.
//!
//! Per size class a [`FreeList`]: a singly linked list of free objects with its count, its tail
//! (the least recently freed object) and an `nth` marker. When a push brings the count to
//! `batch + 1`, `nth` is set to the head: exactly `batch` objects lie behind it, the least
//! recently used ones. When the count reaches the cache limit (two batches), the part behind
//! `nth` goes to the node heap in one splice, without walking the list (NUMAlloc's LRU drain).
//! A pop that brings the count down to `batch` has consumed `nth`, so the marker is re-armed.
//!
//! **Secure mode** keeps the fast paths out of play rather than slowing them: the list heads they
//! read stay null and the home-region check of `free` never matches, so every call reaches a
//! slow path, which keeps the objects in `secure_head` lists whose links are encoded and checked
//! by the arena, marks each object in the allocation bitmap when it is handed out, and refuses a
//! free whose bit is clear (a double free). With secure mode off, nothing on a fast path changes.
//!
//! Frees of another node's objects go to a per-node **outbox** and travel to that node's inbox
//! as one chain. At thread exit everything cached goes home; afterwards the heap is *retired*
//! and serves any late call (from other thread-local destructors) directly from the node heaps.

use crate::arena::pagemap::Tag;
use crate::arena::secure::Expect;
use crate::arena::{Pool, DENSE_OBJECT_MAX};
use crate::ds::ring::Batch;
use crate::ds::{next_of, set_next};
use crate::node::{report, Misuse, NodeHeaps};
use crate::os::topology::MAX_NODES;
use crate::size_class::UNIT_SHIFT;
use crate::size_class::{SizeClass, NUM_CLASSES};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Written into the second word of an object freed through `free_unsized`, to spot double
/// frees cheaply. Any value works (a match is confirmed before anything is reported); this one
/// is unlikely as program data.
const FREED_MARK: usize = 0x6e6f_6461_6c6c_6f63 ^ 0x5a5a_5a5a_5a5a_5a5a;

/// Remote frees gathered per node before the chain is handed over.
const OUTBOX_FLUSH: usize = 64;

#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct FreeList {
    head: *mut u8,
    tail: *mut u8,
    nth: *mut u8,
    count: u32,
    /// The count at which a push must take the slow path: `rest` (arm `nth`) or the limit.
    mark: u32,
    /// `mark` while `nth` is unarmed: `batch + 1`, or 1 for a class threads do not cache (its
    /// every free takes the slow path).
    rest: u32,
    batch: u32,
    limit: u32,
    /// Objects handed out and taken back since the counts were last published.
    allocs: u32,
    frees: u32,
    /// Secure mode: the list's head (links encoded), while `head` stays null for the fast path.
    secure_head: *mut u8,
}

impl FreeList {
    /// Empties the list (unarmed, as after a refill of nothing) and returns what it held:
    /// the `secure_head` chain in secure mode, else the `head` chain.
    fn take_all(&mut self, secure: bool) -> Batch {
        let batch = Batch {
            head: if secure { self.secure_head } else { self.head },
            tail: self.tail,
            count: self.count as usize,
        };
        self.head = null_mut();
        self.secure_head = null_mut();
        self.tail = null_mut();
        self.nth = null_mut();
        self.count = 0;
        self.mark = self.rest;
        batch
    }

    const EMPTY: FreeList = FreeList {
        head: null_mut(),
        tail: null_mut(),
        nth: null_mut(),
        count: 0,
        mark: 0,
        rest: 0,
        batch: 0,
        limit: 0,
        allocs: 0,
        frees: 0,
        secure_head: null_mut(),
    };
}

#[derive(Clone, Copy)]
struct Outbox {
    head: *mut u8,
    tail: *mut u8,
    count: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum HeapState {
    /// No allocation yet: the first slow path binds the thread and attaches the heap.
    Fresh,
    Active,
    /// Flushed at thread exit; late calls bypass the caches.
    Retired,
}

pub struct ThreadHeap {
    /// Start of the home region and its shift: `(p - region_base) >> region_shift == 0` means
    /// "an object of my node", one subtraction, shift and compare on the free fast path.
    /// Zero (never matching) until the heap is attached.
    region_base: usize,
    region_shift: u32,
    /// For `free` without a size (the C face): the arena base, its tag array and the frontiers
    /// of the home region's two pools (the sparse pool starts at `sparse_start`, above the whole
    /// dense pool), cached so the lookup is two loads away.
    arena_base: usize,
    tags: *const AtomicU32,
    home_frontier: *const AtomicUsize,
    sparse_start: usize,
    sparse_frontier: *const AtomicUsize,
    pub state: HeapState,
    /// Secure mode (the arena's): every call takes the slow paths, which check everything.
    secure: bool,
    node: usize,
    heaps: *const NodeHeaps,
    lists: [FreeList; NUM_CLASSES],
    outboxes: [Outbox; MAX_NODES],
    outbox_mask: u32,
    /// The one object of a class above `MAX_CACHED` this thread keeps (the last it freed, if
    /// not handed out again since), and its class: such classes are not cached beyond it.
    parked: *mut u8,
    parked_class: SizeClass,
    pub remote_frees: u64,
    /// Monotonic ns of the next tick (idle classes flushed, node maintenance); see `tick`.
    next_tick: u64,
    /// Input to the attach hook: bind from the process's start-up mask rather than the thread's
    /// current one (set only when the thread is known to have inherited nodalloc's own mask).
    pub bind_from_process_mask: bool,
    /// The affinity nodalloc set on this thread, if it set one (output of the attach hook).
    pub bound_mask: Option<crate::os::cpuset::CpuSet>,
    /// Taken from the pool of a face that keeps its own thread-local pointer (the C library);
    /// such heaps are retired by that face, not by the crate's exit key.
    pub pooled: bool,
    /// Link in the pool of free heaps.
    pub pool_next: *mut ThreadHeap,
    /// Several nodes: slow paths sample the CPU and the heap re-homes when the thread runs on
    /// another node (unbound and moved by the scheduler, or re-pinned by the program).
    pub follow_cpu: bool,
    /// Called on the first slow path of a fresh heap to attach it (the global face binds the
    /// thread and picks the global instance); returns false when no heap can be had.
    attach_hook: Option<fn(&mut ThreadHeap) -> bool>,
}

impl ThreadHeap {
    pub const fn new() -> ThreadHeap {
        Self::with_attach_hook(None)
    }

    pub const fn with_attach_hook(attach_hook: Option<fn(&mut ThreadHeap) -> bool>) -> ThreadHeap {
        ThreadHeap {
            attach_hook,
            region_base: 0,
            region_shift: 0,
            arena_base: 0,
            tags: core::ptr::null(),
            home_frontier: core::ptr::null(),
            sparse_start: 0,
            sparse_frontier: core::ptr::null(),
            state: HeapState::Fresh,
            secure: false,
            node: 0,
            heaps: core::ptr::null(),
            lists: [FreeList::EMPTY; NUM_CLASSES],
            outboxes: [Outbox {
                head: null_mut(),
                tail: null_mut(),
                count: 0,
            }; MAX_NODES],
            outbox_mask: 0,
            parked: null_mut(),
            parked_class: SizeClass(0),
            remote_frees: 0,
            next_tick: 0,
            bind_from_process_mask: false,
            bound_mask: None,
            pooled: false,
            pool_next: null_mut(),
            follow_cpu: false,
        }
    }

    /// Runs the attach hook once; true if the heap is attached afterwards.
    pub fn run_attach_hook(&mut self) -> bool {
        if self.state != HeapState::Fresh {
            return self.state == HeapState::Active;
        }
        match self.attach_hook {
            Some(hook) => hook(self) && self.state == HeapState::Active,
            None => false,
        }
    }

    /// Attaches the heap to an allocator instance, homed on `node`.
    pub fn attach(&mut self, heaps: &'static NodeHeaps, node: usize) {
        let arena = heaps.arena;
        self.heaps = heaps;
        self.node = node;
        self.region_base = arena.region_start(node);
        self.region_shift = arena.region_shift();
        self.arena_base = arena.base();
        self.tags = arena.map().tags();
        self.home_frontier = arena.pool(node, Pool::Dense).frontier_word();
        self.sparse_start = arena.pool(node, Pool::Sparse).start();
        self.sparse_frontier = arena.pool(node, Pool::Sparse).frontier_word();
        self.secure = arena.is_secure();
        if self.secure {
            // The fast paths' region check never matches: every free takes the slow path.
            self.region_base = 0;
            self.region_shift = 0;
        }
        for (index, list) in self.lists.iter_mut().enumerate() {
            let class = SizeClass(index as u8);
            list.batch = class.batch() as u32;
            list.limit = class.cache_limit() as u32;
            list.rest = if list.limit == 0 { 1 } else { list.batch + 1 };
            list.mark = list.rest;
        }
        self.state = HeapState::Active;
    }

    pub fn node(&self) -> usize {
        self.node
    }

    pub fn heaps(&self) -> Option<&'static NodeHeaps> {
        // SAFETY: `heaps` is null or points to a leaked ('static) NodeHeaps set by `attach`.
        unsafe { self.heaps.as_ref() }
    }

    /// The class's free list, without a bounds check on the fast paths.
    #[inline(always)]
    fn list(&mut self, class: SizeClass) -> &mut FreeList {
        debug_assert!(class.index() < NUM_CLASSES);
        // SAFETY: a SizeClass is always below NUM_CLASSES (its invariant), the array's length.
        unsafe { self.lists.get_unchecked_mut(class.index()) }
    }

    /// Pops a cached object, or null when the list is empty (then call [`Self::alloc_slow`]).
    #[inline(always)]
    pub fn alloc_cached(&mut self, class: SizeClass) -> *mut u8 {
        let list = self.list(class);
        let object = list.head;
        if !object.is_null() {
            // SAFETY: cached objects are free, ours, and linked through their first word.
            list.head = unsafe { next_of(object) };
            list.count -= 1;
            list.allocs = list.allocs.wrapping_add(1);
            // Popping the object `nth` pointed to re-arms the marker for the next push.
            if list.count == list.batch {
                list.mark = list.rest;
            }
        }
        object
    }

    /// An object of `class` whose first `bytes` bytes read as zero (`calloc`, `alloc_zeroed`).
    /// For classes that span pages (the sparse pool), a cache miss takes one object straight
    /// from the bags: if it is carved there for the first time from untouched memory, only its
    /// link word needs clearing, so a program that callocs big blocks and touches their heads
    /// pays for the pages it touches. Null when no memory is left.
    pub fn alloc_zeroed(&mut self, class: SizeClass, bytes: usize) -> *mut u8 {
        debug_assert!(bytes <= class.size());
        let mut object = self.alloc_cached(class);
        let mut clear = bytes;
        if object.is_null()
            && class.size() > DENSE_OBJECT_MAX
            && self.state == HeapState::Active
            && !self.secure
        {
            if let Some((fresh, zeroed)) = self
                .heaps()
                .and_then(|heaps| heaps.alloc_single_zeroed(self.node, class))
            {
                object = fresh;
                if zeroed {
                    clear = bytes.min(2 * core::mem::size_of::<usize>());
                }
            }
        }
        if object.is_null() {
            object = self.alloc_slow(class);
        }
        if !object.is_null() {
            // SAFETY: the object holds `class.size() >= bytes` bytes and is the caller's now.
            unsafe { object.write_bytes(0, clear) };
        }
        object
    }

    /// The refill path: a batch from the node heap (or a direct allocation once retired).
    #[cold]
    #[inline(never)]
    pub fn alloc_slow(&mut self, class: SizeClass) -> *mut u8 {
        if self.state == HeapState::Fresh && !self.run_attach_hook() {
            return null_mut();
        }
        let Some(heaps) = self.heaps() else {
            return null_mut();
        };
        if self.state == HeapState::Retired {
            return heaps.alloc_single(self.node, class);
        }
        if self.secure {
            return self.secure_alloc(heaps, class);
        }
        if !self.refill(heaps, class) {
            return null_mut();
        }
        let object = self.alloc_cached(class);
        debug_assert!(!object.is_null());
        object
    }

    /// The upkeep due on a refill, then a batch from the node heap installed as the class's
    /// (empty) list: in `head`, or in `secure_head` in secure mode. False when none was left.
    fn refill(&mut self, heaps: &'static NodeHeaps, class: SizeClass) -> bool {
        self.check_home();
        self.flush_outboxes();
        heaps.drain_inbox(self.node);
        self.tick();
        self.publish(class);
        let Some(batch) = heaps.refill(self.node, class) else {
            return false;
        };
        let secure = self.secure;
        let list = &mut self.lists[class.index()];
        debug_assert!(list.head.is_null() && list.secure_head.is_null() && list.count == 0);
        if secure {
            list.secure_head = batch.head;
        } else {
            list.head = batch.head;
        }
        list.tail = batch.tail;
        list.count = batch.count as u32;
        list.nth = null_mut();
        list.mark = list.rest;
        true
    }

    /// Secure mode's allocation: pops the class's encoded list (refilling it first when empty),
    /// checking the link, and marks the object as the program's.
    fn secure_alloc(&mut self, heaps: &'static NodeHeaps, class: SizeClass) -> *mut u8 {
        if self.lists[class.index()].secure_head.is_null() && !self.refill(heaps, class) {
            return null_mut();
        }
        let list = &mut self.lists[class.index()];
        let object = list.secure_head;
        // SAFETY: cached objects are free, ours, and linked through their first word.
        list.secure_head = unsafe { heaps.arena.read_link(object, Expect::Class(class)) };
        list.count -= 1;
        list.allocs = list.allocs.wrapping_add(1);
        if list.count == list.batch {
            list.mark = list.rest;
        }
        heaps.arena.note_allocated(object);
        object
    }

    /// Secure mode's free: the object must be one of `class` that the program holds (its bit in
    /// the allocation bitmap is set), else the process aborts naming it. Then as `free`: the home
    /// list, or the outbox of the object's node.
    ///
    /// # Safety
    /// As for [`Self::free`] (what is checked here is reported rather than trusted).
    unsafe fn secure_free(
        &mut self,
        heaps: &'static NodeHeaps,
        origin: usize,
        object: *mut u8,
        class: SizeClass,
    ) {
        if let Err(refusal) = heaps.arena.note_freed(object, class) {
            report(object, refusal.into());
        }
        if origin != self.node {
            // SAFETY: forwarded contract.
            return unsafe { self.send_to_outbox(heaps, origin, object, class) };
        }
        let list = &mut self.lists[class.index()];
        // SAFETY: the object is ours now and at least 8 bytes (every class is).
        unsafe { heaps.arena.write_link(object, list.secure_head) };
        if list.count == 0 {
            list.tail = object;
        }
        list.secure_head = object;
        list.count += 1;
        list.frees = list.frees.wrapping_add(1);
        if list.count >= list.mark {
            self.free_mark(class);
        }
    }

    /// Pushes an object of `class` freed by this thread. Objects of other nodes (and anything
    /// outside the home region) take the slow path.
    ///
    /// # Safety
    /// `object` must be a live object of `class` that the caller gives up.
    #[inline(always)]
    pub unsafe fn free(&mut self, object: *mut u8, class: SizeClass) {
        if (object as usize).wrapping_sub(self.region_base) >> self.region_shift != 0 {
            // SAFETY: forwarded contract.
            return unsafe { self.free_slow(object, class) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.push_local(object, class) }
    }

    /// Frees an object of unknown size if it is a small object of this thread's node, found
    /// through the page map (the C face's `free`). Returns false, touching nothing, for anything
    /// else (other nodes, large objects, foreign or invalid pointers): the caller's slow path
    /// sorts those out.
    ///
    /// # Safety
    /// If `object` is a small object of this node, the caller must own it and give it up.
    #[inline(always)]
    pub unsafe fn free_unsized(&mut self, object: *mut u8) -> bool {
        let address = object as usize;
        if address.wrapping_sub(self.region_base) >> self.region_shift != 0 {
            return false;
        }
        // SAFETY: attached (the region check passed), so both frontiers point into the arena.
        if address >= unsafe { &*self.home_frontier }.load(Ordering::Acquire)
            && (address < self.sparse_start
                // SAFETY: as above.
                || address >= unsafe { &*self.sparse_frontier }.load(Ordering::Acquire))
        {
            // Past the dense pool's frontier and outside the sparse pool's reached part.
            return false;
        }
        let unit = (address - self.arena_base) >> UNIT_SHIFT;
        // SAFETY: the address is below its pool's frontier, so its tag exists and is committed.
        let tag = Tag(unsafe { &*self.tags.add(unit) }.load(Ordering::Relaxed));
        if !tag.is_bag() {
            return false;
        }
        let class = tag.class();
        let bag_start = self.arena_base + ((unit - tag.offset_units()) << UNIT_SHIFT);
        if !class.is_object_start(address - bag_start) {
            return false;
        }
        // SAFETY: a small object of this node at an object boundary, given up by the caller.
        unsafe { self.screen_and_push(object, class) };
        true
    }

    /// Frees a small object of unknown size that the caller has classified (the C face's slow
    /// path: other nodes' objects, or a thread whose first call is this `free`, before it had a
    /// heap for the fast path). An object of this node gets the same double-free screen as on
    /// the fast path.
    ///
    /// # Safety
    /// `object` must be a live object of `class` from `origin`'s region that the caller gives
    /// up, at least 16 bytes (a C-face object).
    pub unsafe fn free_classified(&mut self, object: *mut u8, class: SizeClass, origin: usize) {
        if self.state == HeapState::Active && !self.secure && origin == self.node {
            // SAFETY: forwarded contract; an object of this node.
            unsafe { self.screen_and_push(object, class) }
        } else {
            // SAFETY: forwarded contract.
            unsafe { self.free(object, class) }
        }
    }

    /// The C face's double-free screen, then the push.
    ///
    /// # Safety
    /// `object` is a live small object of `class` and of this node, at least 16 bytes, that
    /// the caller gives up.
    #[inline(always)]
    unsafe fn screen_and_push(&mut self, object: *mut u8, class: SizeClass) {
        // Double-free screen (the C face's objects are at least 16 bytes): a cached object
        // carries FREED_MARK in its second word. Finding the mark is only a suspicion (the
        // program may have stored those bytes); a cold path searches the cache to confirm.
        let mark = object.wrapping_add(8) as *mut usize;
        // SAFETY: objects of every C-face class are at least 16 bytes, 8-aligned, and ours.
        if unsafe { *mark } == FREED_MARK {
            // SAFETY: forwarded contract (a tail call: the fast path keeps no registers).
            return unsafe { self.free_marked(object, class) };
        }
        // SAFETY: as above.
        unsafe { *mark = FREED_MARK };
        // SAFETY: a small object of this node at an object boundary, given up by the caller.
        unsafe { self.push_local(object, class) };
    }

    /// `free_unsized` of an object that carries FREED_MARK: a double free if the object is in
    /// the cache (reported), else program data that looked like the mark (freed as usual).
    ///
    /// # Safety
    /// As for the end of [`Self::free_unsized`].
    #[cold]
    #[inline(never)]
    unsafe fn free_marked(&mut self, object: *mut u8, class: SizeClass) {
        if self.is_cached(class, object) {
            report(object, Misuse::DoubleFree);
        }
        // SAFETY: forwarded contract; the mark is already in place.
        unsafe { self.push_local(object, class) };
    }

    /// True when `object` is in this thread's cache of `class` (a bounded walk: two batches).
    #[cold]
    fn is_cached(&self, class: SizeClass, object: *mut u8) -> bool {
        let mut cursor = self.lists[class.index()].head;
        while !cursor.is_null() {
            if cursor == object {
                return true;
            }
            // SAFETY: walking our own free list.
            cursor = unsafe { next_of(cursor) };
        }
        false
    }

    /// # Safety
    /// As for [`Self::free`], and the object is of this thread's node.
    #[inline(always)]
    unsafe fn push_local(&mut self, object: *mut u8, class: SizeClass) {
        let list = self.list(class);
        // SAFETY: the object is ours now and at least 8 bytes (every class is).
        unsafe { set_next(object, list.head) };
        if list.count == 0 {
            list.tail = object;
        }
        list.head = object;
        list.count += 1;
        list.frees = list.frees.wrapping_add(1);
        if list.count >= list.mark {
            self.free_mark(class);
        }
    }

    /// Arms `nth`, or drains the least recently used batch to the node heap.
    #[cold]
    #[inline(never)]
    fn free_mark(&mut self, class: SizeClass) {
        let Some(heaps) = self.heaps() else { return };
        let secure = self.secure;
        let list = &mut self.lists[class.index()];
        if list.limit == 0 {
            return self.park(heaps, class);
        }
        if list.mark == list.batch + 1 && list.count == list.batch + 1 {
            list.nth = if secure { list.secure_head } else { list.head };
            list.mark = list.limit;
        }
        if list.count < list.limit {
            return;
        }
        debug_assert!(!list.nth.is_null());
        let nth = list.nth;
        // SAFETY: `nth` is a cached object with exactly `batch` objects behind it (see module docs).
        let batch = Batch {
            head: unsafe { heaps.arena.read_link(nth, Expect::Class(class)) },
            tail: list.tail,
            count: list.batch as usize,
        };
        // SAFETY: as above; cutting the list after `nth`.
        unsafe { heaps.arena.write_link(nth, null_mut()) };
        list.tail = nth;
        list.count -= list.batch;
        list.nth = null_mut();
        list.mark = list.rest;
        self.publish(class);
        heaps.release(self.node, class, batch);
        // Upkeep last: it may re-home the heap, and the batch belongs to the node it left.
        self.tick();
    }

    /// A free of a class threads do not cache (above `MAX_CACHED`) has just pushed its object:
    /// that object stays as the thread's one parked object (so an immediate second free of it
    /// is still found in the cache, and a thread that frees and re-allocates one big size
    /// keeps its fast path), and the object parked before it, if still there, goes to the node
    /// heap. Secure mode parks nothing (its bitmap catches double frees).
    fn park(&mut self, heaps: &'static NodeHeaps, class: SizeClass) {
        let list = &mut self.lists[class.index()];
        let kept = if self.secure { null_mut() } else { list.head };
        // Everything in the list but `kept`: the older object when the previous park was of
        // this class too (the list holds at most two then), or the whole list in secure mode.
        let leaving = if kept.is_null() {
            Some((class, list.take_all(self.secure)))
        } else if list.count > 1 {
            // SAFETY: `kept` is a cached object of this list, linked through its first word.
            let rest = unsafe { next_of(kept) };
            let batch = Batch {
                head: rest,
                tail: list.tail,
                count: list.count as usize - 1,
            };
            // SAFETY: as above; `kept` becomes the whole list.
            unsafe { set_next(kept, null_mut()) };
            list.tail = kept;
            list.count = 1;
            Some((class, batch))
        } else {
            None
        };
        // The previous park of another class, if the thread has not allocated it since.
        let previous = core::mem::replace(&mut self.parked, kept);
        let previous_class = core::mem::replace(&mut self.parked_class, class);
        let stale = if !previous.is_null()
            && previous_class != class
            && self.lists[previous_class.index()].head == previous
        {
            let list = &mut self.lists[previous_class.index()];
            debug_assert_eq!(list.count, 1);
            Some((previous_class, list.take_all(false)))
        } else {
            None
        };
        for (class, batch) in [leaving, stale].into_iter().flatten() {
            self.publish(class);
            heaps.release(self.node, class, batch);
        }
        // Upkeep last, as in `free_mark`.
        self.tick();
    }

    /// # Safety
    /// As for [`Self::free`].
    #[cold]
    #[inline(never)]
    pub unsafe fn free_slow(&mut self, object: *mut u8, class: SizeClass) {
        if self.state == HeapState::Fresh {
            if !self.run_attach_hook() {
                report(object, Misuse::InvalidPointer);
            }
            // SAFETY: forwarded contract; the heap is attached now, so this cannot loop.
            return unsafe { self.free(object, class) };
        }
        let Some(heaps) = self.heaps() else {
            report(object, Misuse::InvalidPointer)
        };
        let Some(origin) = heaps.arena.origin_of(object as usize) else {
            report(object, Misuse::InvalidPointer)
        };
        if self.state == HeapState::Retired {
            // SAFETY: forwarded contract.
            return unsafe { heaps.free_single(origin, class, object) };
        }
        if self.secure {
            // SAFETY: forwarded contract.
            return unsafe { self.secure_free(heaps, origin, object, class) };
        }
        if origin == self.node {
            // The region check of `free` is this very test, so this is unreachable once
            // attached; pushing locally keeps the object even if that ever changed.
            // SAFETY: forwarded contract.
            return unsafe { self.push_local(object, class) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.send_to_outbox(heaps, origin, object, class) }
    }

    /// Queues a freed object of another node for that node's inbox.
    ///
    /// # Safety
    /// As for [`Self::free`], and `origin` is the object's node, not this heap's.
    unsafe fn send_to_outbox(
        &mut self,
        heaps: &'static NodeHeaps,
        origin: usize,
        object: *mut u8,
        class: SizeClass,
    ) {
        heaps
            .class(origin, class)
            .frees
            .fetch_add(1, Ordering::Relaxed);
        self.remote_frees += 1;
        let outbox = &mut self.outboxes[origin];
        // SAFETY: the object is ours now.
        unsafe { heaps.arena.write_link(object, outbox.head) };
        if outbox.count == 0 {
            outbox.tail = object;
        }
        outbox.head = object;
        outbox.count += 1;
        self.outbox_mask |= 1 << origin;
        if outbox.count >= OUTBOX_FLUSH {
            self.flush_outbox(origin);
        }
    }

    fn flush_outbox(&mut self, origin: usize) {
        let outbox = self.outboxes[origin];
        self.outboxes[origin] = Outbox {
            head: null_mut(),
            tail: null_mut(),
            count: 0,
        };
        self.outbox_mask &= !(1 << origin);
        if outbox.count > 0 {
            if let Some(heaps) = self.heaps() {
                // SAFETY: the outbox is a well-formed chain of freed objects of `origin`.
                unsafe { heaps.send_remote(origin, outbox.head, outbox.tail, outbox.count) };
            }
        }
    }

    pub fn flush_outboxes(&mut self) {
        while self.outbox_mask != 0 {
            let origin = self.outbox_mask.trailing_zeros() as usize;
            self.flush_outbox(origin);
        }
    }

    /// Runs at most once per decommit delay, from slow paths: returns the caches of classes
    /// this thread has not used since the previous tick (so a phase's leftovers do not pin bags
    /// forever), then lets the node heap do its own upkeep.
    pub fn tick(&mut self) {
        let Some(heaps) = self.heaps() else { return };
        if self.state != HeapState::Active {
            return;
        }
        let now = crate::os::monotonic_ns();
        if now < self.next_tick {
            return;
        }
        self.next_tick = now + crate::node::maintenance_period(heaps.arena.decay.delay_ns);
        for index in 0..NUM_CLASSES {
            let list = &self.lists[index];
            if list.allocs == 0 && list.frees == 0 && list.count > 0 {
                self.return_list(heaps, index);
            }
        }
        self.publish_all();
        self.flush_outboxes();
        heaps.maintain(self.node, now);
        self.check_home();
    }

    /// Re-homes the heap if the thread now runs on another node (see `follow_cpu`). Cheap: one
    /// `sched_getcpu` (a vDSO or rseq read).
    pub fn check_home(&mut self) {
        if self.follow_cpu && self.state == HeapState::Active {
            if let Some(heaps) = self.heaps() {
                self.rehome(heaps);
            }
        }
    }

    /// Moves the heap to the node of the CPU the thread runs on now, returning every cached
    /// object to its old node first (objects never change node). A thread nodalloc bound only
    /// runs outside its home when the program re-pinned it; from then on the mask is the
    /// program's, not nodalloc's.
    fn rehome(&mut self, heaps: &'static NodeHeaps) {
        let Some(cpu) = crate::os::current_cpu() else {
            return;
        };
        let node = heaps.arena.topology.node_of_cpu(cpu);
        if node != self.node && node < heaps.arena.node_count() {
            self.flush();
            self.attach(heaps, node);
            self.bound_mask = None;
        }
    }

    /// Publishes the class's alloc/free counts to its node heap's statistics.
    fn publish(&mut self, class: SizeClass) {
        let heaps = self.heaps();
        let list = &mut self.lists[class.index()];
        if list.allocs == 0 && list.frees == 0 {
            return;
        }
        if let Some(heaps) = heaps {
            let central = heaps.class(self.node, class);
            central
                .allocs
                .fetch_add(list.allocs as u64, Ordering::Relaxed);
            central
                .frees
                .fetch_add(list.frees as u64, Ordering::Relaxed);
        }
        list.allocs = 0;
        list.frees = 0;
    }

    pub fn publish_all(&mut self) {
        for class in 0..NUM_CLASSES {
            self.publish(SizeClass(class as u8));
        }
    }

    /// Returns every cached object to its bags and every outbox to its node; the heap stays
    /// usable (used by `purge` and by re-homing).
    pub fn flush(&mut self) {
        self.publish_all();
        self.flush_outboxes();
        let Some(heaps) = self.heaps() else { return };
        for index in 0..NUM_CLASSES {
            self.return_list(heaps, index);
        }
    }

    /// Empties one class's list into its bags.
    fn return_list(&mut self, heaps: &NodeHeaps, index: usize) {
        let chain = self.lists[index].take_all(self.secure).head;
        if !chain.is_null() {
            if let Err((object, misuse)) =
                heaps.return_to_bags(self.node, SizeClass(index as u8), chain)
            {
                report(object, misuse);
            }
        }
    }

    /// Thread exit: flush everything and serve later calls without caching.
    pub fn retire(&mut self) {
        if self.state == HeapState::Active {
            self.flush();
            self.state = HeapState::Retired;
            // Every free now fails the region check and takes the slow path.
            self.region_base = 0;
            self.region_shift = 0;
        }
    }

    /// Objects currently cached, per class (for tests and diagnostics).
    pub fn cached(&self, class: SizeClass) -> usize {
        self.lists[class.index()].count as usize
    }
}

impl Default for ThreadHeap {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::tests::test_arena;
    use crate::size_class::class_of;

    fn allocate(heap: &mut ThreadHeap, class: SizeClass) -> *mut u8 {
        let p = heap.alloc_cached(class);
        if p.is_null() {
            heap.alloc_slow(class)
        } else {
            p
        }
    }

    /// One step of a xorshift generator, for the random operation sequences below.
    fn xorshift(state: &mut u64) {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
    }

    fn heaps(nodes: usize) -> &'static NodeHeaps {
        NodeHeaps::create(test_arena(nodes, 64 << 20, 0)).unwrap()
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
            .arena
            .topology
            .node_of_cpu(crate::os::current_cpu().unwrap());
        let away = 1 - here;
        for size in [64, 128 << 10] {
            let class = class_of(size, 8).unwrap();
            // Frees before upkeep is due: up to one below the drain (or one parked object).
            let quiet = class.cache_limit().saturating_sub(1).max(1);
            let want = quiet + 2 * class.batch().max(1) + 2;
            let mut heap = Box::new(ThreadHeap::new());
            heap.attach(heaps, away);
            heap.follow_cpu = true;
            heap.next_tick = u64::MAX;
            let mut objects = Vec::new();
            while objects.len() < want {
                let batch = heaps
                    .take_from_bags(away, class, want - objects.len())
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
                    heap.next_tick = 0;
                }
                // SAFETY: each object is live, of `class`, and freed once.
                unsafe { heap.free(object, class) };
            }
            assert_eq!(
                heap.node(),
                here,
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
        crate::os::set_thread_affinity(heaps.arena.topology.process_cpus()).unwrap();
    }

    #[test]
    fn cache_stays_within_its_limit_and_drains_the_oldest_batch() {
        let heaps = heaps(1);
        let mut heap = Box::new(ThreadHeap::new());
        heap.attach(heaps, 0);
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

    #[test]
    fn nth_marker_survives_pops_below_the_batch() {
        let heaps = heaps(1);
        let mut heap = Box::new(ThreadHeap::new());
        heap.attach(heaps, 0);
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
                let mut object = heap.alloc_cached(class);
                if object.is_null() {
                    object = heap.alloc_slow(class);
                }
                assert!(!live.contains(&object), "an object was handed out twice");
                live.push(object);
            }
            let list = &heap.lists[class.index()];
            assert!(list.count as usize <= 2 * batch);
        }
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
        assert_eq!(walked, list.count as usize);
        if walked > 0 {
            assert_eq!(last, list.tail);
        }
    }

    #[test]
    fn remote_frees_go_home_and_are_never_reused_by_the_freeing_node() {
        let heaps = heaps(2);
        let mut home = Box::new(ThreadHeap::new());
        let mut remote = Box::new(ThreadHeap::new());
        home.attach(heaps, 0);
        remote.attach(heaps, 1);
        let class = class_of(128, 8).unwrap();
        let objects: Vec<*mut u8> = (0..1000)
            .map(|_| {
                let p = home.alloc_cached(class);
                if p.is_null() {
                    home.alloc_slow(class)
                } else {
                    p
                }
            })
            .collect();
        for &object in &objects {
            assert_eq!(heaps.arena.origin_of(object as usize), Some(0));
            // SAFETY: allocated above, freed once, by the other node's thread.
            unsafe { remote.free(object, class) };
        }
        remote.flush_outboxes();
        assert_eq!(remote.remote_frees, 1000);
        assert_eq!(heaps.node(0).remote_frees.load(Ordering::Relaxed), 1000);
        // Node 1's thread allocates: it must never get one of node 0's objects back.
        for _ in 0..2000 {
            let mut p = remote.alloc_cached(class);
            if p.is_null() {
                p = remote.alloc_slow(class);
            }
            assert_eq!(heaps.arena.origin_of(p as usize), Some(1));
            assert!(!objects.contains(&p));
        }
        // Node 0's thread gets them back (after its inbox is sorted on its slow path).
        let mut reused = 0;
        for _ in 0..3000 {
            let mut p = home.alloc_cached(class);
            if p.is_null() {
                p = home.alloc_slow(class);
            }
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
        let batch = heaps.take_from_bags(1, class, 32).unwrap();
        let mut objects = Vec::new();
        let mut object = batch.head;
        while !object.is_null() {
            objects.push(object);
            // SAFETY: walking the batch we were handed.
            object = unsafe { next_of(object) };
        }
        assert_eq!(heaps.class(1, class).bags.load(Ordering::Relaxed), 1);
        let mut heap = Box::new(ThreadHeap::new());
        heap.attach(heaps, 0);
        for &object in &objects {
            // SAFETY: each object is live and freed once.
            unsafe { heap.free(object, class) };
        }
        heap.flush_outboxes();
        // Node 1's maintenance is overdue after two periods (1 ms each in test arenas).
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_millis(3));
            heap.tick();
        }
        assert_eq!(
            heaps.class(1, class).bags.load(Ordering::Relaxed),
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
        let mut home = Box::new(ThreadHeap::new());
        let mut remote = Box::new(ThreadHeap::new());
        home.attach(heaps, 0);
        remote.attach(heaps, 1);
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
        assert_eq!(remote.remote_frees, sent as u64);
        heaps.drain_inbox(0);
        let mut reused = 0;
        for _ in 0..4 * sent {
            let object = home.alloc_slow(class);
            assert_eq!(heaps.arena.origin_of(object as usize), Some(0));
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
        let mut heap = Box::new(ThreadHeap::new());
        heap.attach(heaps, 0);
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
        assert_eq!(heaps.class(0, class).bags.load(Ordering::Relaxed), 0);
    }

    /// Classes above `MAX_CACHED`: a thread keeps only the last such object it freed (its
    /// "parked" object); the one parked before goes to the node's ring, where any thread of
    /// the node finds it. The statistics say where the bytes sit.
    #[test]
    fn big_classes_park_one_object_per_thread_and_the_statistics_show_where_bytes_sit() {
        use crate::size_class::MAX_CACHED;
        use crate::stats::Stats;
        let heaps = heaps(1);
        let mut first = Box::new(ThreadHeap::new());
        let mut second = Box::new(ThreadHeap::new());
        first.attach(heaps, 0);
        second.attach(heaps, 0);

        let small = class_of(64, 8).unwrap();
        let p = allocate(&mut first, small);
        first.publish_all();
        let figures = Stats::collect(heaps, 2).classes()[small.index()];
        assert_eq!(figures.bags, 1);
        assert_eq!(figures.cached, (small.batch() - 1) * 64);
        assert_eq!(figures.free_in_bags, small.bag_bytes() - small.batch() * 64);
        assert_eq!(figures.in_rings, 0);
        // SAFETY: allocated above, freed once.
        unsafe { first.free(p, small) };
        first.flush();
        let figures = Stats::collect(heaps, 2).classes()[small.index()];
        assert_eq!(
            (figures.bags, figures.cached, figures.free_in_bags),
            (0, 0, 0)
        );

        let big = class_of(MAX_CACHED + 1, 8).unwrap();
        let other = class_of(4 * MAX_CACHED, 8).unwrap();
        assert_eq!(big.cache_limit(), 0);
        assert_ne!(big, other);
        let a = allocate(&mut first, big);
        let b = allocate(&mut first, big);
        assert!(!a.is_null() && !b.is_null() && a != b);
        // SAFETY: allocated above, freed once each.
        unsafe {
            first.free(a, big);
            first.free(b, big);
        }
        assert_eq!(first.cached(big), 1, "only the last freed object stays");
        let figures = Stats::collect(heaps, 2).classes()[big.index()];
        assert_eq!(figures.in_rings, big.size());
        assert_eq!(figures.cached, 2 * big.size());
        // The other thread of the node gets the one that left; this thread its parked one.
        let bags = figures.bags;
        assert_eq!(allocate(&mut second, big), a);
        assert_eq!(
            first.alloc_cached(big),
            b,
            "the parked object is a fast-path hit"
        );
        assert_eq!(Stats::collect(heaps, 2).classes()[big.index()].bags, bags);
        // Parking an object of another big class sends the previous one to the ring.
        let c = allocate(&mut first, other);
        // SAFETY: allocated above, freed once each.
        unsafe {
            first.free(b, big);
            first.free(c, other);
        }
        assert_eq!((first.cached(big), first.cached(other)), (0, 1));
        assert_eq!(allocate(&mut second, big), b);
        // SAFETY: allocated above, freed once.
        unsafe { second.free(a, big) };
    }
}
