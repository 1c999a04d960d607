//! The thread's kept large objects: the last few large objects of its home node that the
//! thread freed, handed out again by its next large allocations of about their size without
//! going through the region (whose span lists cost some 1 100 instructions a pair). A program
//! that allocates and frees a buffer of the same size in a loop then pays a few dozen.
//!
//! Bounded by [`KEPT_LARGE`] objects and [`KEPT_LARGE_BYTES`] bytes; given back to the region
//! at an upkeep that finds them unused since the previous one, and at every flush (purge,
//! re-homing, thread exit). Never in secure mode (guards), under a hard limit (no memory waits
//! for demand there), for a first-class heap's or an interleaved object, or for another node's
//! (`NodeHeaps::keep_large` decides). A kept object is marked in the page map, so a second
//! free of it is refused as a double free.

use super::ThreadHeap;
use crate::size_class::UNIT_SHIFT;

/// Objects a thread keeps at most.
pub(crate) const KEPT_LARGE: usize = 4;
/// Bytes of objects a thread keeps at most (a larger object is freed as usual).
pub(crate) const KEPT_LARGE_BYTES: usize = 8 << 20;

/// A thread's kept large objects, oldest first.
pub(crate) struct KeptLarge {
    /// Address and units of each, the first `len` entries.
    spans: [(usize, usize); KEPT_LARGE],
    len: usize,
    /// Bytes of the kept objects.
    bytes: usize,
    /// An object was kept or taken since the last upkeep.
    used: bool,
    /// Units of the thread's last large allocation: only an object of about that size is kept
    /// (a thread that frees what others allocated, or a buffer it outgrew, keeps nothing).
    wanted: usize,
    /// Objects kept (and their bytes) and handed out again (and theirs) since the thread
    /// last counted them on its node (`NodeHeaps::count_kept_large`): one count an upkeep
    /// instead of atomic ones at each free and allocation.
    frees: u64,
    freed: usize,
    allocs: u64,
    reused: usize,
}

impl KeptLarge {
    pub(crate) const EMPTY: KeptLarge = KeptLarge {
        spans: [(0, 0); KEPT_LARGE],
        len: 0,
        bytes: 0,
        used: false,
        wanted: 0,
        frees: 0,
        freed: 0,
        allocs: 0,
        reused: 0,
    };

    /// The index of the kept object that best fits `units` units at `align_units`: the
    /// smallest of [`about`] `units`.
    fn best_fit(&self, units: usize, align_units: usize) -> Option<usize> {
        let fits = about(units);
        let mut best: Option<usize> = None;
        for (index, &(address, kept)) in self.spans[..self.len].iter().enumerate() {
            let aligned = (address >> UNIT_SHIFT) % align_units == 0;
            let better = match best {
                None => true,
                Some(b) => kept < self.spans[b].1,
            };
            if fits.contains(&kept) && aligned && better {
                best = Some(index);
            }
        }
        best
    }

    /// Takes the entry at `index` out, keeping the others in order.
    fn remove(&mut self, index: usize) -> (usize, usize) {
        let span = self.spans[index];
        self.spans.copy_within(index + 1..self.len, index);
        self.len -= 1;
        self.bytes -= span.1 << UNIT_SHIFT;
        span
    }
}

/// The sizes, in units, of about `units`: at least that, at most an eighth more. An object of
/// that size serves an allocation of `units`, and one the thread frees is kept when its last
/// large allocation was of `units`.
fn about(units: usize) -> core::ops::RangeInclusive<usize> {
    units..=units + units / 8
}

impl ThreadHeap {
    /// A kept large object for an allocation of `units` units at `align_units` on `node`,
    /// counted as allocated; null when none fits.
    pub(crate) fn take_kept_large(
        &mut self,
        node: crate::node::NodeId,
        units: usize,
        align_units: usize,
    ) -> *mut u8 {
        self.kept_large.wanted = units;
        if self.kept_large.len == 0 || node != self.node {
            return core::ptr::null_mut();
        }
        let Some(heaps) = self.heaps() else {
            return core::ptr::null_mut();
        };
        let Some(index) = self.kept_large.best_fit(units, align_units) else {
            return core::ptr::null_mut();
        };
        let (address, kept) = self.kept_large.remove(index);
        let counts = &mut self.kept_large;
        counts.used = true;
        counts.allocs += 1;
        counts.reused += kept << UNIT_SHIFT;
        // SAFETY: the object was kept by this thread and leaves its list here.
        unsafe { heaps.reuse_large(address, kept) };
        address as *mut u8
    }

    /// The free of the large object `object`: kept for the thread's next large allocations
    /// when it may be (true), else left to the caller to free (false). Aborts naming the
    /// object when it is no live large object.
    pub(crate) fn keep_large(&mut self, object: *mut u8) -> bool {
        if self.state != super::HeapState::Active {
            return false;
        }
        let Some(heaps) = self.heaps() else {
            return false;
        };
        // Only an object of about the size the thread allocates last, and within the budget.
        let wanted = about(self.kept_large.wanted);
        let most = (*wanted.end()).min(KEPT_LARGE_BYTES >> UNIT_SHIFT);
        let Some(units) = heaps.keep_large(object as usize, self.node, *wanted.start()..=most)
        else {
            return false;
        };
        let bytes = units << UNIT_SHIFT;
        self.kept_large.frees += 1;
        self.kept_large.freed += bytes;
        let kept = &mut self.kept_large;
        // A write past the end of the object before one this thread keeps, or before the
        // start of the object after it, shows in its canaries: checked as a neighbour is kept
        // (as the region checks its free neighbours when it merges a span).
        let (start, end) = (object as usize, object as usize + bytes);
        for &(other, other_units) in &kept.spans[..kept.len] {
            if other == end {
                crate::node::check_kept_canary(other, other);
            } else if other + (other_units << UNIT_SHIFT) == start {
                crate::node::check_kept_canary(other, start - 8);
            }
        }
        while kept.len == KEPT_LARGE || kept.bytes + bytes > KEPT_LARGE_BYTES {
            let (old, old_units) = kept.remove(0);
            // SAFETY: kept by this thread, out of its list now.
            unsafe { heaps.release_kept_large(old, old_units) };
        }
        kept.spans[kept.len] = (object as usize, units);
        kept.len += 1;
        kept.bytes += bytes;
        kept.used = true;
        true
    }

    /// Gives every kept large object back to its region.
    pub(crate) fn release_kept_large(&mut self) {
        if self.kept_large.len == 0 {
            return;
        }
        let Some(heaps) = self.heaps() else {
            return;
        };
        let kept = &mut self.kept_large;
        while kept.len > 0 {
            let (address, units) = kept.remove(kept.len - 1);
            // SAFETY: kept by this thread, out of its list now.
            unsafe { heaps.release_kept_large(address, units) };
        }
        kept.used = false;
    }

    /// Counts the objects kept and handed out again since the last count on the node.
    pub(super) fn publish_kept_large(&mut self) {
        let heaps = self.heaps();
        let kept = &mut self.kept_large;
        if kept.frees == 0 && kept.allocs == 0 {
            return;
        }
        if let Some(heaps) = heaps {
            heaps.count_kept_large(self.node, kept.frees, kept.allocs, kept.freed, kept.reused);
        }
        (kept.frees, kept.freed, kept.allocs, kept.reused) = (0, 0, 0, 0);
    }

    /// At an upkeep: the kept objects go back when none was kept or taken since the last one.
    pub(super) fn kept_large_upkeep(&mut self) {
        if !self.kept_large.used {
            self.release_kept_large();
        }
        self.kept_large.used = false;
    }

    /// Objects and bytes the thread keeps.
    #[cfg(test)]
    pub(crate) fn kept_large(&self) -> (usize, usize) {
        (self.kept_large.len, self.kept_large.bytes)
    }
}
