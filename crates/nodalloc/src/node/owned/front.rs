//! The front lists of first-class heaps: a short list of free objects per class under a lock
//! of its own, in front of the heap's class heap (see the module docs of `owned`), and what
//! the heap's limit does with them.

use super::*;

/// A heap's free objects of one class, in front of its class heap (see the module docs):
/// linked in the arena's encoding, at most two batches, under `lock`. The counts of blocks
/// handed to and taken back from the program are written under the lock (loads and stores,
/// no read-modify-write), read by the statistics.
#[repr(C, align(64))]
pub(super) struct Front {
    pub(super) lock: SpinLock,
    pub(super) head: UnsafeCell<*mut u8>,
    /// Objects on the list: written under the lock, read without it by a flush that skips
    /// empty lists.
    pub(super) count: AtomicUsize,
    pub(super) allocs: AtomicU64,
    pub(super) frees: AtomicU64,
}

impl Front {
    /// Adds `n` to `counter` (the front lock held: no other writer).
    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }
}

/// Notes that heap `record` has an object on a front list (a store only when the flag is clear:
/// the line stays shared while it is set).
#[inline]
fn note_fronted(record: &OwnedRecord) {
    if !record.fronted.load(Ordering::Relaxed) {
        record.fronted.store(true, Ordering::Relaxed);
    }
}

impl NodeHeaps {
    /// One object of `class` of heap `part`, and whether it reads as zero but for its first
    /// word: the front list's head, or the head of a batch taken from the bags (the rest goes
    /// on the front list). Secure mode takes one object from the bags each time.
    pub(super) fn owned_pop(
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
        Front::add(&front.allocs, 1);
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
        Front::add(&front.frees, 1);
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
    pub(super) fn owned_charge(
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
}
