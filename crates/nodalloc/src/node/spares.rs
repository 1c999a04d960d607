//! Spares: empty bags a class keeps for its next new bag instead of giving their spans back to
//! the region at once (`NODALLOC_SPARES`, a byte budget a node). A class whose bags hold a
//! handful of objects each gave a span back and carved a new one every few batches whenever
//! another thread's frees came back in bulk; a spare is the class's next new bag, as it is.
//! Spares go back to the region at the sweep's next pass (`sweep.rs`), at any purge, when
//! another class needs a new span (`reclaim_spares`), and when the regions refuse a large
//! block's span (`give_back_spares`, before the refusal reaches the program). A class's new bag
//! takes its own spares first and reclaims at least a bag's bytes of the others'; a bag the
//! region refuses after that reclaim (spans freed apart may not merge) reclaims every other
//! class's spare whose lock is free and is tried once more.

use super::bags::{push_front, unlink};
use super::*;

/// Puts `bag`, empty and on no list, at the front of the class heap's spares.
///
/// # Safety
/// The class lock of `class_heap` is held, and `bag` is one of its bags that
/// [`NodeHeaps::keeps_as_spare`] let it keep (counted in its node's spare bytes).
pub(super) unsafe fn keep_spare(class_heap: &ClassHeap, bag: *mut UnitMeta) {
    // SAFETY: forwarded contract: the list and the bag are ours under the lock.
    unsafe {
        let oldest = &mut *class_heap.oldest_spare.get();
        if oldest.is_null() {
            *oldest = bag;
        }
        push_front(&mut *class_heap.spares.get(), bag);
    }
    class_heap.spare_count.fetch_add(1, Ordering::Relaxed);
}

impl NodeHeaps {
    /// True when an empty bag of (`part`, `class`) on `node`, just taken off its list, is kept
    /// on the class heap's spares (counted in the node's `spare_bytes`) instead of going back
    /// to its region. A class whose bags hold a handful of objects each (the sparse classes)
    /// gave a span back and carved a new one every few batches whenever another thread's frees
    /// came back in bulk: two threads sharing one CPU in the C suite's xthread took 100 span
    /// locks per 1 000 allocations (the region's free list, its decommit, a new bag's page-map
    /// tags and marks). A spare is the class's next new bag, as it is; the sweep gives its span
    /// back at the next upkeep pass, and a purge at once. Only the default
    /// partition's bags outside secure mode, of more than one object (a bag of one object is
    /// the object's span: see `held_at_free`), whose pages did not move to another node, up to
    /// the policy's `spare_bytes` a node (`NODALLOC_SPARES`); none while a commit limit is set
    /// (`NODALLOC_LIMIT`, a tier's), where a free must make room for any allocation at once.
    ///
    /// # Safety
    /// The class lock of (`node`, `part`, `class`) is held, and `bag` is one of its bags, on no
    /// list, with no object out.
    pub(super) unsafe fn keeps_as_spare(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        bag: *mut UnitMeta,
    ) -> bool {
        if part != Partition::DEFAULT
            || self.arena.is_secure()
            || self.arena.budget().limit() != 0
            || self.arena.tier_limited()
            || class.capacity() == 1
            // SAFETY: forwarded contract: the lock is held, so the bag is ours.
            || unsafe { (*bag).role.bag.moved || (*bag).role.bag.unsettled }
        {
            return false;
        }
        let bytes = class.bag_bytes();
        self.node(node)
            .spare_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |spare| {
                (spare + bytes <= self.arena.decommit.spare_bytes).then_some(spare + bytes)
            })
            .is_ok()
    }

    /// Takes a spare of the class heap (see [`Self::keeps_as_spare`]) off its list: the
    /// newest, or the oldest when `oldest`; null when there is none.
    ///
    /// # Safety
    /// The class lock of `class_heap` (of `node`, `class`) is held.
    pub(super) unsafe fn take_spare(
        &self,
        node: NodeId,
        class: SizeClass,
        class_heap: &ClassHeap,
        oldest: bool,
    ) -> *mut UnitMeta {
        // SAFETY: forwarded contract: the list is ours under the lock.
        unsafe {
            let bag = if oldest {
                *class_heap.oldest_spare.get()
            } else {
                *class_heap.spares.get()
            };
            if !bag.is_null() {
                self.unlist_spare(node, class, class_heap, bag);
            }
            bag
        }
    }

    /// Takes `bag` off the class heap's spares.
    ///
    /// # Safety
    /// The class lock of `class_heap` (of `node`, `class`) is held, and `bag` is one of its
    /// spares.
    pub(super) unsafe fn unlist_spare(
        &self,
        node: NodeId,
        class: SizeClass,
        class_heap: &ClassHeap,
        bag: *mut UnitMeta,
    ) {
        // SAFETY: forwarded contract.
        unsafe {
            let oldest = &mut *class_heap.oldest_spare.get();
            if *oldest == bag {
                *oldest = (*bag).prev;
            }
            unlink(&mut *class_heap.spares.get(), bag);
            class_heap.spare_count.fetch_sub(1, Ordering::Relaxed);
        }
        self.node(node)
            .spare_bytes
            .fetch_sub(class.bag_bytes(), Ordering::Relaxed);
    }

    /// Gives other classes' spares on `node` back to the region, each class's oldest first,
    /// until `bytes` have gone or none is left: called before `class` takes a new span, so a
    /// program that freed one class's objects and moves on to another finds the spans in the
    /// region. The caller holds `class`'s lock, so a class whose lock is busy is skipped.
    /// Returns the bytes given back.
    pub(super) fn reclaim_spares(&self, node: NodeId, class: SizeClass, bytes: usize) -> usize {
        let mut reclaimed = 0;
        for index in 0..NUM_CLASSES {
            let other = SizeClass(index as u8);
            let class_heap = self.class(node, other);
            if other == class || class_heap.spare_count.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let Some(_guard) = class_heap.lock.try_lock() else {
                continue;
            };
            self.node(node)
                .ops
                .class_locks
                .fetch_add(1, Ordering::Relaxed);
            while reclaimed < bytes {
                // SAFETY: the class lock of `other` is held.
                let spare = unsafe { self.take_spare(node, other, class_heap, true) };
                if spare.is_null() {
                    break;
                }
                // SAFETY: as above; a spare taken off the list is on none, with no object out.
                unsafe { self.release_bag(node, Partition::DEFAULT, other, class_heap, spare) };
                reclaimed += other.bag_bytes();
            }
            if reclaimed >= bytes {
                break;
            }
        }
        reclaimed
    }

    /// Gives every spare of `node`'s `class_heap` (of `class`) that fell empty before `due`
    /// (all when `force`) back to its region; true when some stay.
    ///
    /// # Safety
    /// The class lock of `class_heap` is held.
    pub(super) unsafe fn release_spares(
        &self,
        node: NodeId,
        class: SizeClass,
        class_heap: &ClassHeap,
        due: u64,
        force: bool,
    ) -> bool {
        let mut waiting = false;
        // SAFETY: forwarded contract; the spares are bags of this class heap, on no other list
        // and with no object out.
        unsafe {
            let mut bag = *class_heap.spares.get();
            while !bag.is_null() {
                let next = (*bag).next;
                if force || (*bag).role.bag.sweep.returned_at <= due {
                    self.unlist_spare(node, class, class_heap, bag);
                    self.release_bag(node, Partition::DEFAULT, class, class_heap, bag);
                } else {
                    waiting = true;
                }
                bag = next;
            }
        }
        waiting
    }

    /// Gives every spare of every node back to its region, taking each class lock in turn (the
    /// caller holds none): a region refused a span, and the spares may hold what it needs.
    /// True when some spare went back (so a second try may succeed).
    pub(super) fn give_back_spares(&self) -> bool {
        let mut released = false;
        for node in self.nodes() {
            if self.node(node).spare_bytes.load(Ordering::Relaxed) == 0 {
                continue;
            }
            for index in 0..NUM_CLASSES {
                let class = SizeClass(index as u8);
                let class_heap = self.class(node, class);
                if class_heap.spare_count.load(Ordering::Relaxed) == 0 {
                    continue;
                }
                let _guard = class_heap.lock_counted(&self.node(node).ops);
                released |= class_heap.spare_count.load(Ordering::Relaxed) != 0;
                // SAFETY: the class lock is held.
                unsafe { self.release_spares(node, class, class_heap, 0, true) };
            }
        }
        released
    }
}
