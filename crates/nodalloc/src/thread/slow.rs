//! The thread heap's slow paths: a refill from the node heap, the drain of a list's oldest
//! batch, parking for classes threads do not cache, and frees that leave the home node (the
//! per-node outboxes). All `#[cold]` or reached only from cold paths.

use super::{HeapState, ThreadHeap};
use crate::ds::{next_of, set_next};
use crate::node::{report, Batch, Misuse, NodeHeaps, NodeId, Partition, DENSE_OBJECT_MAX};
use crate::size_class::SizeClass;
use core::ptr::null_mut;

impl ThreadHeap {
    /// An object of `class` whose first `bytes` bytes read as zero (`calloc`, `alloc_zeroed`).
    /// For classes that span pages (the sparse pool), a cache miss refills as `malloc`'s does
    /// (the node's ring, then objects freed into the bags, then the rest of a bag as the
    /// class's run of untouched objects): an object of a run carved from untouched memory
    /// needs only its link word cleared, so a program that callocs big blocks and touches
    /// their heads pays for the pages it touches. Null when no memory is left.
    pub fn alloc_zeroed(&mut self, class: SizeClass, bytes: usize) -> *mut u8 {
        debug_assert!(bytes <= class.size());
        // An answer left by an earlier allocation (one whose caller did not ask) is not this
        // object's.
        self.untouched = false;
        let mut object = self.alloc_cached(class);
        let mut clear = bytes;
        let lean = object.is_null() && self.lean_counts();
        if object.is_null() && (lean || self.counts_allocations()) {
            self.caller.size = bytes;
            let due = if lean {
                self.lean_due(class)
            } else {
                self.count_allocation(class.size())
            };
            if due {
                object = self.alloc_sampled(class);
                if lean {
                    self.lean_sampled(class);
                }
                if !object.is_null() {
                    // SAFETY: a block of at least `class.size() >= bytes` bytes, the caller's.
                    unsafe { self::clear(object, bytes, self.secure) };
                }
                return object;
            }
            if !lean {
                // Counted: `alloc_slow` below must not count it again.
                self.pass_count(false);
            }
        }
        if object.is_null()
            && class.size() > DENSE_OBJECT_MAX
            && self.state == HeapState::Active
            && !self.secure
            && self.far.is_none()
        {
            // The class's run first (untouched objects a `malloc` of the class left): nothing
            // was written into them, so one from a bag that read as zero still does.
            object = self.take_from_run(class);
        }
        if object.is_null() {
            object = if lean {
                self.alloc_uncounted(class)
            } else {
                self.alloc_slow(class)
            };
        } else {
            // Served above: the count passed on is this allocation's, not the next one's.
            self.sample_state = super::SampleState::Idle;
        }
        if lean {
            self.lean_served(class);
        }
        // An object of the class's run (above, or the one the refill just made) from a bag
        // that read as zero reads as zero but for its link word.
        if self.took_untouched() {
            clear = bytes.min(2 * core::mem::size_of::<usize>());
        }
        if !object.is_null() {
            // SAFETY: the object holds `class.size() >= bytes` bytes and is the caller's now.
            unsafe { self::clear(object, clear, self.secure) };
        }
        object
    }

    /// The C face's miss path after [`Self::partition_hit`] missed for the same `class` (the
    /// call site entered there): when that hit could pop (partitions on, the thread where the
    /// heap last saw it), the site's list was empty and this refills without popping it again;
    /// otherwise [`Self::alloc_slow`] (which follows a move first, then pops the partition).
    pub fn alloc_after_partition_hit(&mut self, class: SizeClass) -> *mut u8 {
        if self.lean_counts() {
            return self.alloc_lean(class);
        }
        if self.counts_allocations() && self.count_allocation(class.size()) {
            return self.alloc_sampled(class);
        }
        if self.part_fast && !self.moved() {
            self.untouched = false;
            // The class lists stay empty with partitions on (frees go to the partitions'
            // lists): nothing else to pop.
            return self.alloc_refill(class);
        }
        self.alloc_uncounted(class)
    }

    /// The refill path: a batch from the node heap (or a direct allocation once retired).
    /// First a move of the thread is followed (the fast path refused to pop after one; the
    /// list keeps its objects if the thread's node is the same), then, with call-site
    /// partitions, the partition cache's pop for the current partition.
    #[inline(never)]
    pub fn alloc_slow(&mut self, class: SizeClass) -> *mut u8 {
        if self.lean_counts() {
            return self.alloc_lean(class);
        }
        if self.counts_allocations() && self.count_allocation(class.size()) {
            self.untouched = false;
            return self.alloc_sampled(class);
        }
        self.alloc_uncounted(class)
    }

    /// [`Self::alloc_slow`] for a request of `size` bytes, which the heap profile records
    /// when it samples the allocation (the Rust face's miss path).
    #[inline(never)]
    pub fn alloc_slow_asked(&mut self, class: SizeClass, size: usize) -> *mut u8 {
        self.caller.size = size;
        self.alloc_slow(class)
    }

    /// [`Self::alloc_slow`] in the heap profile's lean mode (`profile.rs`): the sample when
    /// the class's budget is down to this allocation, else the refill path, counted.
    #[cold]
    #[inline(never)]
    fn alloc_lean(&mut self, class: SizeClass) -> *mut u8 {
        if self.lean_due(class) {
            self.untouched = false;
            let object = self.alloc_sampled(class);
            self.lean_sampled(class);
            return object;
        }
        let object = self.alloc_uncounted(class);
        self.lean_served(class);
        object
    }

    /// [`Self::alloc_slow`] for an allocation the heap profile has counted already.
    pub(super) fn alloc_uncounted(&mut self, class: SizeClass) -> *mut u8 {
        self.untouched = false;
        if let Some(object) = self.alloc_far(class) {
            return object;
        }
        if self.state == HeapState::Active {
            if self.moved() {
                self.follow_move();
            }
            // The fast path may have refused the pop for the move alone (the thread may even
            // be back on the CPU it left by now).
            let object = self.pop_if_any(class);
            if !object.is_null() {
                return object;
            }
            if self.lean_unstash(class) {
                let object = self.pop_if_any(class);
                debug_assert!(!object.is_null());
                return object;
            }
        }
        let object = self.partition_pop_current(class);
        if !object.is_null() {
            return object;
        }
        self.alloc_refill(class)
    }

    #[cold]
    #[inline(never)]
    fn alloc_refill(&mut self, class: SizeClass) -> *mut u8 {
        let list = &self.lists[class.index()];
        if !list.head.is_null() {
            // The pop refused a head outside the arena: the link of the block it handed out
            // last.
            super::corrupted_list(self, list.aux, list.head);
        }
        if self.state == HeapState::Fresh && !self.run_attach_hook() {
            return null_mut();
        }
        let Some(heaps) = self.heaps() else {
            return null_mut();
        };
        if self.state == HeapState::Retired {
            return heaps.alloc_single(self.node, self.current_partition(), class);
        }
        if self.partitions != 0 {
            return self.partition_alloc(heaps, class);
        }
        if self.secure {
            return self.secure_alloc(heaps, class);
        }
        if class.size() > DENSE_OBJECT_MAX {
            return self.refill_sparse(heaps, class);
        }
        if !self.refill(heaps, class) {
            return null_mut();
        }
        let object = self.pop_if_any(class);
        debug_assert!(!object.is_null());
        object
    }

    /// [`Self::refill`] and the pop, for a class of the sparse pool: the class's run first;
    /// when the node's ring is empty and its bags hold no free object either, the rest of a bag
    /// becomes the run, handed out one object at a time as it is, untouched
    /// (`NodeHeaps::take_untouched`: no page fault inside `malloc` for a page the program has
    /// not touched yet), and the list stays empty (no longer fresh). Other nodes' bags as a
    /// refill takes them.
    fn refill_sparse(&mut self, heaps: &'static NodeHeaps, class: SizeClass) -> *mut u8 {
        let object = self.take_from_run(class);
        if !object.is_null() {
            return object;
        }
        if !self.lists[class.index()].is_configured() {
            self.configure_list(class);
        }
        self.refill_duties(heaps);
        self.publish(class);
        let want = self.refill_want(Partition::DEFAULT, class);
        let taken = match heaps.ring_refill(self.node, Partition::DEFAULT, class) {
            Some(batch) => Some(Ok(batch)),
            None => heaps.take_untouched(self.node, Partition::DEFAULT, class, want),
        };
        let batch = match taken {
            Some(Ok(batch)) => batch,
            Some(Err(run)) => {
                self.lists[class.index()].install(Batch::EMPTY, false);
                self.limit_after_refill(class);
                self.runs[class.index()] = run;
                let object = self.take_from_run(class);
                debug_assert!(!object.is_null());
                return object;
            }
            // The node has nothing left (its ring and bags were just tried): other nodes',
            // nearest first.
            None => match heaps.steal(self.node, Partition::DEFAULT, class, want) {
                Some(batch) => {
                    self.foreign = true;
                    batch
                }
                None => return null_mut(),
            },
        };
        self.lists[class.index()].install(batch, false);
        self.limit_after_refill(class);
        let object = self.pop_if_any(class);
        debug_assert!(!object.is_null());
        object
    }

    /// The next object of `class`'s run (see [`Self::refill_sparse`]), counted as the list's
    /// allocation, and noted untouched when its bag's memory read as zero; null when the run
    /// is empty.
    #[inline]
    pub(super) fn take_from_run(&mut self, class: SizeClass) -> *mut u8 {
        let run = &mut self.runs[class.index()];
        let object = run.take(class.size());
        if !object.is_null() {
            self.untouched = run.zeroed;
            self.lists[class.index()].count_handed_out();
        }
        object
    }

    /// The upkeep due on a refill, then a batch from the node heap installed as the class's
    /// (empty) list. False when none was left.
    pub(super) fn refill(&mut self, heaps: &'static NodeHeaps, class: SizeClass) -> bool {
        if !self.lists[class.index()].is_configured() {
            self.configure_list(class);
        }
        self.refill_duties(heaps);
        self.publish(class);
        let Some(batch) = self.take_refill(heaps, Partition::DEFAULT, class) else {
            return false;
        };
        let secure = self.secure;
        self.lists[class.index()].install(batch, secure);
        self.limit_after_refill(class);
        true
    }

    /// A batch from the node heap for (`part`, `class`), noting when it was stolen from another
    /// node.
    pub(super) fn take_refill(
        &mut self,
        heaps: &'static NodeHeaps,
        part: Partition,
        class: SizeClass,
    ) -> Option<Batch> {
        let want = self.refill_want(part, class);
        heaps.note_activity(part);
        let batch = heaps
            .ring_refill(self.node, part, class)
            .or_else(|| heaps.take_from_bags(self.node, part, class, want))?;
        if heaps.origin_of(batch.head as usize) != Some(self.node) {
            self.foreign = true;
        }
        Some(batch)
    }

    /// Objects a refill of (`part`, `class`) takes from the bags: a list whose limit grew takes
    /// half of it (see `FreeList::refill_size`), at least a batch (an uncached class's list has
    /// no limit); a partition takes a batch.
    fn refill_want(&self, part: Partition, class: SizeClass) -> usize {
        if part == Partition::DEFAULT {
            let list = &self.lists[class.index()];
            if list.is_fresh() {
                // The thread's first refill of the class: a page's worth of objects (four at
                // least, a batch at most), not a whole batch. A program that takes a few objects of many classes
                // (most of them) touches a page of each, not a bag of each; one that keeps
                // allocating refills again, at the full size.
                return (crate::os::PAGE_SIZE / class.size())
                    .max(4)
                    .min(class.batch());
            }
            list.refill_size().max(class.batch())
        } else {
            class.batch()
        }
    }

    /// Gives a batch of this heap's cached objects back to the node heap: into the ring (or
    /// straight into the bags with `to_bags`), each object to its own node's heap when some
    /// list may hold stolen objects.
    pub(super) fn give_back(
        &mut self,
        heaps: &'static NodeHeaps,
        part: Partition,
        class: SizeClass,
        batch: Batch,
        to_bags: bool,
    ) {
        if batch.count == 0 {
            return;
        }
        heaps.note_activity(part);
        if self.foreign {
            return heaps.release_by_origin(part, class, batch, to_bags);
        }
        if !to_bags {
            return heaps.release(self.node, part, class, batch);
        }
        if let Err((object, misuse)) = heaps.return_to_bags(self.node, class, batch.head, false) {
            report(object, misuse);
        }
    }

    /// What every refill does first: follow the thread's CPU, send the outboxes, sort the
    /// node's inbox, and the upkeep due.
    pub(super) fn refill_duties(&mut self, heaps: &'static NodeHeaps) {
        // A large block was about to be refused for want of a hole: every cached object goes
        // back to its bags, so the spans the big classes' objects hold can merge.
        let pressure = heaps.pressure_epoch();
        if pressure != self.pressure_seen {
            self.pressure_seen = pressure;
            self.flush();
        }
        self.check_home();
        self.flush_outboxes();
        heaps.drain_inbox(self.node);
        self.upkeep();
    }

    /// A push reached its list's threshold: arms `nth`, or drains the least recently used batch to
    /// the node heap.
    #[cold]
    #[inline(never)]
    pub(super) fn free_threshold(&mut self, class: SizeClass) {
        let Some(heaps) = self.heaps() else { return };
        let secure = self.secure;
        let list = &mut self.lists[class.index()];
        if !list.is_configured() && !list.configure_at_push(class, secure) {
            return;
        }
        if list.is_uncached() {
            return self.park(heaps, class);
        }
        if list.is_fresh() {
            return self.first_free(heaps, class);
        }
        let cut = list.arm_or_cut(
            secure,
            // SAFETY: `nth` is a cached object of this class, ours.
            |nth| unsafe { heaps.read_link(nth, class) },
            // SAFETY: as above; cutting the list after `nth`.
            |nth, next| unsafe { heaps.write_link(nth, next) },
        );
        let Some(batch) = cut else { return };
        self.limit_after_cut(class);
        self.publish(class);
        self.give_back(heaps, Partition::DEFAULT, class, batch, false);
        // Upkeep last: it may re-home the heap, and the batch belongs to the node it left.
        self.upkeep();
    }

    /// The first free into a list the thread has not refilled since its heap attached. The
    /// object came from another thread (this one has taken none of its class yet): handed out
    /// again at the thread's next allocation, it would make the thread's hot object a neighbour
    /// of that thread's in one cache line (passive false sharing, Hoard's cache-scratch). So the
    /// list first takes a batch of its own, and the freed object goes behind it, handed out
    /// last. Without a batch (no memory left) the object stays the list's only one.
    fn first_free(&mut self, heaps: &'static NodeHeaps, class: SizeClass) {
        let freed = self.lists[class.index()].take_all(false);
        let Some(batch) = self.take_refill(heaps, Partition::DEFAULT, class) else {
            return self.lists[class.index()].install(freed, false);
        };
        let list = &mut self.lists[class.index()];
        list.install(batch, false);
        list.append(freed);
        self.limit_after_refill(class);
    }

    /// A free of a class threads do not cache (above `MAX_CACHED`) has just pushed its object:
    /// that object stays as the thread's one parked object (so an immediate second free of it
    /// is still found in the cache, and a thread that frees and re-allocates one big size
    /// keeps its fast path), and the object parked before it, if still there, goes to the node
    /// heap. Secure mode parks nothing (its bitmap catches double frees).
    ///
    /// Nor does a class whose object is a span of its own as big as the spans the region holds
    /// at their free (256 KiB, `arena::region::hold`), for the first [`HOLDS_PER_UPKEEP`] such
    /// frees of each upkeep period: its object goes straight back to its bag, so the span is
    /// held, inaccessible, and the next allocation gets another, as glibc's `mmap`ed blocks
    /// behave. Past them (a loop that frees and allocates such blocks), it parks.
    ///
    /// [`HOLDS_PER_UPKEEP`]: super::HOLDS_PER_UPKEEP
    fn park(&mut self, heaps: &'static NodeHeaps, class: SizeClass) {
        let held = heaps.held_at_free(class) && self.holds_left > 0;
        if held {
            self.holds_left -= 1;
        }
        let list = &mut self.lists[class.index()];
        let kept = if self.secure || held {
            null_mut()
        } else {
            list.head
        };
        // Everything in the list but `kept`: the older object when the previous park was of
        // this class too (the list holds at most two then), or the whole list in secure mode.
        let leaving = if kept.is_null() {
            Some((class, list.take_all(self.secure)))
        } else if list.len() > 1 {
            // SAFETY: `kept` is a cached object of this list, linked through its first word.
            let rest = unsafe { next_of(kept) };
            // SAFETY: as above; `kept` becomes the whole list.
            unsafe { set_next(kept, null_mut()) };
            Some((class, list.keep_only_head(rest)))
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
            debug_assert_eq!(list.len(), 1);
            Some((previous_class, list.take_all(false)))
        } else {
            None
        };
        for (leaving_class, batch) in [leaving, stale].into_iter().flatten() {
            self.publish(leaving_class);
            // The freed object of a held class goes to its bag (and its span to the hold).
            let to_bags = held && leaving_class == class;
            self.give_back(heaps, Partition::DEFAULT, leaving_class, batch, to_bags);
        }
        // Upkeep last, as in `free_threshold`.
        self.upkeep();
    }

    /// A free that failed the home-region check: the heap is not attached yet, retired, in
    /// secure mode, or the object belongs to another node.
    ///
    /// # Safety
    /// As for [`Self::free`].
    #[cold]
    #[inline(never)]
    pub unsafe fn free_slow(&mut self, object: *mut u8, class: SizeClass) {
        if self.lean_class_of(object) == Some(class) {
            // The heap profile's lean mode: the push the fast path would have made (which
            // follows no move either: the pops do).
            // SAFETY: forwarded contract; a small object of this heap's node.
            unsafe { self.free_local(object, class) };
            return self.lean_enforce(class);
        }
        // A heap-profile sample that stayed in its bag (lean mode refused its unit above).
        crate::profile::in_bag::forget(object as usize);
        self.check_moved();
        if let Some((found, part)) = self.partition_class_of(object) {
            if found == class {
                // SAFETY: forwarded contract; a small object of this heap's node.
                return unsafe { self.partition_push(object, class, part) };
            }
        }
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
        let Some(origin) = heaps.origin_of(object as usize) else {
            report(object, Misuse::InvalidPointer)
        };
        if crate::profile::is_on() && heaps.large_units(object as usize).is_ok() {
            // A heap-profile sample: a small allocation served as a large block of its own
            // (`thread/profile.rs`), which the Rust face frees by its layout's class.
            return heaps.free_large(object as usize);
        }
        if heaps.is_owned(object as usize) {
            // A first-class heap's block goes back to its heap (found from the bag), never
            // into this thread's caches.
            // SAFETY: forwarded contract.
            return unsafe { heaps.owned_free_small(origin, class, object) };
        }
        if self.state == HeapState::Retired {
            // SAFETY: forwarded contract.
            return unsafe { heaps.free_single(origin, class, object) };
        }
        if self.partitions != 0 {
            // SAFETY: forwarded contract.
            return unsafe { self.partition_free(heaps, origin, object, class) };
        }
        if self.secure {
            // SAFETY: forwarded contract.
            return unsafe { self.secure_free(heaps, origin, object, class) };
        }
        if origin == self.node {
            // The region check of `free` is this very test, so this is unreachable once
            // attached but in the heap profile's lean mode (whose home view is empty, so that
            // its lists are kept under their budgets here).
            // SAFETY: forwarded contract.
            unsafe { self.free_local(object, class) };
            return self.lean_enforce(class);
        }
        // SAFETY: forwarded contract.
        unsafe { self.send_to_outbox(heaps, origin, object) }
    }

    /// Queues a freed object of another node for that node's inbox.
    ///
    /// # Safety
    /// As for [`Self::free`], and `origin` is the object's node, not this heap's.
    pub(super) unsafe fn send_to_outbox(
        &mut self,
        heaps: &'static NodeHeaps,
        origin: NodeId,
        object: *mut u8,
    ) {
        // Counted as a free when its node sorts it out of the inbox, once per class and batch
        // (not here: an atomic add on a line every thread freeing to that node shares).
        // SAFETY: the object is ours now.
        let full = self.outboxes[origin.index()].push(object, |object, next| unsafe {
            heaps.write_link(object, next)
        });
        self.outbox_mask |= 1 << origin.index();
        if full {
            self.flush_outbox(origin);
        }
    }

    fn flush_outbox(&mut self, origin: NodeId) {
        self.outbox_mask &= !(1 << origin.index());
        if let Some(chain) = self.outboxes[origin.index()].take() {
            if let Some(heaps) = self.heaps() {
                // SAFETY: the outbox is a well-formed chain of freed objects of `origin`.
                unsafe { heaps.send_remote(origin, chain.head, chain.tail, chain.count) };
            }
        }
    }

    /// Hands every outbox's chain to its node.
    pub(crate) fn flush_outboxes(&mut self) {
        while self.outbox_mask != 0 {
            let origin = NodeId(self.outbox_mask.trailing_zeros() as usize);
            self.flush_outbox(origin);
        }
    }
}

/// Zeroes `bytes` at `object` for an allocation that asked for zeroed memory; in secure mode
/// without the `memset` symbol (see [`crate::os::fill_unchecked`]).
///
/// # Safety
/// `[object, object + bytes)` is writable and the caller's.
#[inline]
unsafe fn clear(object: *mut u8, bytes: usize, secure: bool) {
    if secure {
        // SAFETY: forwarded contract.
        unsafe { crate::os::fill_unchecked(object, 0, bytes) };
    } else {
        // SAFETY: forwarded contract.
        unsafe { object.write_bytes(0, bytes) };
    }
}
