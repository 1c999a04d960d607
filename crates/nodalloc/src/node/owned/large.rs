//! Large blocks of first-class heaps: spans of the heap's node's owned pool, charged to the
//! heap's limit and kept on its list of large blocks for its drop.

use super::*;

impl NodeHeaps {
    pub(super) fn owned_alloc_large(
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
            unsafe { crate::os::fill_unchecked(address as *mut u8, 0, size) };
        }
        address as *mut u8
    }

    /// Frees the large block of a heap at `address` (a live large span of `units` units of
    /// the owned pool, checked by the caller).
    pub(in crate::node) fn owned_free_large(&self, address: usize, units: usize) {
        let map = self.arena.map();
        let meta = map.meta(map.unit_of(address));
        // SAFETY: the caller found a live large span here, which the program gives up.
        let owner = Partition(unsafe { (*meta).role.large.owner });
        if !owner.is_owned() || owner.owned_index() >= MAX_OWNED || !self.owned.is_mapped() {
            report(address as *mut u8, Misuse::InvalidPointer);
        }
        let record = self.owned.record(owner.owned_index());
        // A heap-profile sample (`ThreadHeap::sample_owned`) leaves the live counts.
        self.forget_sample(address);
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
}
