//! The **sweep**: whole free pages inside bags that are still in use go back to the OS.
//!
//! A bag returns to its region only when its last object does. After a program frees most of
//! its objects at random, nearly every bag keeps a few survivors, and the freed objects between
//! them would stay resident for as long as the bags live. The sweep finds the parts of a bag that
//! hold no live object and gives them back with `MADV_DONTNEED`.
//!
//! A bag is cut into at most 64 **granules** (a page, or more for bags above 256 KiB). A granule
//! can be released when every object overlapping it is free and carved. The objects that
//! *start* in a released granule have their free bits cleared, so no refill hands one out
//! (writing its link would fault the page back in); bit `g` of the bag's `released` mask
//! records that they are free. When the bag runs out of listed and uncarved objects,
//! [`NodeHeaps::restore_granule`] sets the bits of the lowest released granule's objects again.
//! An object that starts before a released granule and reaches into it stays listed: when it
//! is handed out, its tail reads as zero, as any recycled memory may.
//!
//! Only quiet bags are swept: no object came back to the bag for ten upkeep periods
//! ([`quiet_time`], 1 s by default) while the program still holds the class, or for one once
//! it drained it (at most an eighth of its bags' objects out, [`drained`]). So a bag under churn
//! is not emptied and refaulted on every pass, nor one a program left over a short pause.
//! `purge` sweeps every bag. Secure mode, which carves in a random order, does not sweep.
//!
//! **The quiet time stretches with demand**, per class, as a pool's decommit delay does
//! (`arena/region/decommit.rs`, `Stretch`): when a quarter of what a round of sweeps released
//! is listed again (`restore_granule`, whose objects then fault their pages back in) within
//! the stretched time, the program only paused between two rounds of the same work (a
//! benchmark's repetitions, a server's bursts), and the class's bags must then stay quiet
//! twice that pause (at most 10 s) before the next sweep. A later round that waited the whole
//! stretched time unused halves it again once it releases a quarter of what the stretching
//! round did (smaller rounds halve that measure). mimalloc-bench's rptest released 9–10 MiB of
//! granules between its bursts, 1 184 `madvise` calls, and faulted them in again in the next
//! burst (docs/JOURNAL.md, "Thirty-sixth round"). `purge` still sweeps every bag at once.
//!
//! The sweep also gives back the spans of the classes' spares (empty bags kept for a class's
//! next new bag, `bags.rs`) emptied before the pass fell due, and `purge` every spare.
//!
//! Layer: part of the node heap; calls `arena`.

use super::{NodeHeaps, NodeId, Partition};
use crate::arena::pagemap::UnitMeta;
use crate::arena::region::Stretch;
use crate::os::{self, PAGE_SIZE};
use crate::size_class::SizeClass;
use core::ops::Range;
use core::sync::atomic::Ordering;

/// Free objects (of the bags it looks at) an upkeep pass may cover per node before it leaves
/// the rest for the next pass. It holds a class lock and runs on the slow path of whichever
/// thread is due; it reads bits, not objects, but releasing granules is a system call each.
const PASS_BUDGET: usize = 1 << 15;

/// Upkeep periods the bags of a class the program still holds must have been quiet before the
/// sweep releases their free pages, unless the class's stretch asks for longer.
const QUIET_PERIODS: u64 = 10;

/// How long the bags of a class the program still holds must have been quiet before they are
/// swept (the class's stretch may lengthen it): ten upkeep periods, 1 s at the default decommit
/// delay, 10 ms at the shortest. The free pages of bags in use are memory no peer gives back
/// at all; released one period after a burst, they were faulted in again by the next burst of a
/// program that paused for longer than that, and the first pause of every such program paid
/// it before the stretch could learn (docs/JOURNAL.md, "Thirty-seventh round").
pub(crate) fn quiet_time(delay_ns: u64) -> u64 {
    QUIET_PERIODS * super::upkeep::upkeep_period(delay_ns)
}

/// Whether the program drained `class` on this node: the objects out of its bags (held by the
/// program or sitting in caches) fill at most an eighth of its bags (spares aside). A program
/// that paused mid-work still holds its working set; one that drained a class holds what its
/// caches and a few survivors pin, one object in each of many bags, whose pages the sweep
/// gives back after one period (a drained program's RSS falls within a few hundred ms).
fn drained(class: SizeClass, class_heap: &super::ClassHeap) -> bool {
    let bags = class_heap
        .bags
        .load(Ordering::Relaxed)
        .saturating_sub(class_heap.spare_count.load(Ordering::Relaxed));
    let out = class_heap.out_of_bags.load(Ordering::Relaxed);
    out.saturating_mul(8) <= bags.saturating_mul(class.capacity())
}

/// How a class's bags are cut into granules: a page each, or the power of two that cuts the
/// bag into at most 64; the last one ends with the bag.
struct Granules {
    size: usize,
    bag_bytes: usize,
    count: usize,
}

impl Granules {
    fn of(class: SizeClass) -> Granules {
        let bag_bytes = class.bag_bytes();
        let size = (bag_bytes / 64).next_power_of_two().max(PAGE_SIZE);
        Granules {
            size,
            bag_bytes,
            count: bag_bytes.div_ceil(size),
        }
    }

    /// The bytes granules `first..end` cover, as offsets from the bag's start.
    fn span(&self, first: usize, end: usize) -> Range<usize> {
        first * self.size..(end * self.size).min(self.bag_bytes)
    }

    /// The objects that start in granule `g` of a bag that carved `carved`, as an index range.
    fn starting_in(&self, g: usize, size: usize, carved: usize) -> (usize, usize) {
        let bytes = self.span(g, g + 1);
        let first = bytes.start.div_ceil(size).min(carved);
        (first, bytes.end.div_ceil(size).min(carved))
    }

    /// True when the byte at `offset` lies in one of the granules whose bits `mask` sets.
    fn holds(&self, mask: u64, offset: usize) -> bool {
        mask & (1 << (offset / self.size)) != 0
    }

    /// Bytes of the granules whose bits `mask` sets.
    fn bytes(&self, mask: u64) -> usize {
        (0..self.count)
            .filter(|&g| mask & (1 << g) != 0)
            .map(|g| self.span(g, g + 1).len())
            .sum()
    }
}

/// True when the object at `offset` of a bag of `class` starts in one of the granules that
/// `released` marks (it is free, and its free bit clear).
pub(super) fn starts_released(class: SizeClass, released: u64, offset: usize) -> bool {
    released != 0 && Granules::of(class).holds(released, offset)
}

impl NodeHeaps {
    /// Sweeps `node`'s bags that have been quiet since the pass before the one due at `due`
    /// (every bag with free space, when `force`). Class by class, under each class lock.
    pub(super) fn sweep_node(&self, node: NodeId, due: u64, force: bool) {
        if self.arena.is_secure() {
            return;
        }
        let mut budget = PASS_BUDGET;
        let period = super::upkeep::upkeep_period(self.arena.decommit.delay_ns);
        let paused = quiet_time(self.arena.decommit.delay_ns);
        self.for_each_class_heap(node, |part, class, class_heap| {
            if !force && !class_heap.to_sweep.load(Ordering::Relaxed) {
                return;
            }
            let _guard = class_heap.lock_counted(&self.node(node).ops);
            class_heap.to_sweep.store(false, Ordering::Relaxed);
            // SAFETY: the class lock is held for the rest of this iteration.
            let mut stretch = unsafe { self.sweep_stretch(node, part, class) };
            // How long the class's bags must have been quiet: one period for a drained class,
            // the quiet time for one the program still holds, or longer if the stretch says
            // so; less the period a bag's stamp (the deadline of the pass after its last
            // return) already counts.
            let wait = if drained(class, class_heap) {
                period
            } else {
                paused
            };
            let extra = stretch.as_ref().map_or(wait, |s| s.delay(period).max(wait)) - period;
            // SAFETY: the class lock is held for the rest of this iteration.
            let mut bag = unsafe { *class_heap.partial.get() };
            let mut waiting = false;
            while !bag.is_null() {
                // SAFETY: the class lock is held and `bag` is on this class's partial list.
                unsafe {
                    let returned_at = (*bag).role.bag.sweep.returned_at;
                    let quiet = returned_at != 0 && returned_at.saturating_add(extra) < due;
                    if budget > 0 && (force || quiet) {
                        let (walked, released) = self.sweep_bag(node, class, bag);
                        budget = budget.saturating_sub(walked);
                        if let Some(stretch) = stretch.as_mut().filter(|_| released != 0 && !force)
                        {
                            // A round of releases by age: the evidence `restore_granule`
                            // weighs.
                            stretch.decommitted(period, due, returned_at, released);
                        }
                    } else if returned_at != 0 {
                        waiting = true;
                        if budget == 0 {
                            break;
                        }
                    }
                    bag = (*bag).next;
                }
            }
            // Spares untouched since the pass before (emptied before this pass fell due), or all
            // of them when forced, give their spans back: one pass sooner than a bag's free
            // pages, since the region still holds a spare's span for its decommit delay.
            // SAFETY: the class lock is held.
            waiting |= unsafe { self.release_spares(node, class, class_heap, due, force) };
            if waiting {
                class_heap.to_sweep.store(true, Ordering::Relaxed);
            }
        });
    }

    /// Releases the granules of `bag` that hold no live object, and clears the free bits of the
    /// objects that start in them. Returns how many objects were listed (the work's measure)
    /// and the bytes released.
    ///
    /// # Safety
    /// The class lock is held and `bag` is a live bag of `class` on `node` (not secure mode).
    unsafe fn sweep_bag(
        &self,
        node: NodeId,
        class: SizeClass,
        bag: *mut UnitMeta,
    ) -> (usize, usize) {
        let map = self.arena.map();
        let start = map.address_of(map.unit_of_meta(bag));
        let size = class.size();
        let granules = Granules::of(class);
        let granule = granules.size;
        // SAFETY: the caller holds the class lock that owns `bag`, a live bag.
        let bag = unsafe { &mut (*bag).role.bag };
        bag.sweep.returned_at = 0;
        let carved = bag.carved as usize;
        let released = bag.sweep.released;
        // Not even one granule's worth of free objects, or so many live ones that a granule
        // is unlikely to be free of them (a granule of `k` objects, a share `l` of them live,
        // is wholly free with a chance of about e^(-k l)): leave the bag for a sparser day.
        let per_granule = (granule / size).max(1);
        if (carved - bag.live as usize) * size < granule
            || bag.live as usize * per_granule > 4 * carved
        {
            return (0, 0);
        }
        // Which carved objects are free in the bag: their bits.
        let count = bag.listed as usize;
        let bits = map.free_bits(start);
        let starts_released = |index: usize, mask: u64| granules.holds(mask, index * size);
        let is_free = |index: usize| bits.test(index) || starts_released(index, released);
        let mut newly = 0u64;
        for g in 0..granules.count {
            if released & (1 << g) != 0 {
                continue;
            }
            let bytes = granules.span(g, g + 1);
            let first = bytes.start / size;
            let last = ((bytes.end - 1) / size).min(class.capacity() - 1);
            // Granules with an uncarved object (or only tail waste) were never touched by an
            // object handed out; releasing them would also let `restore_granule` list objects
            // that were never carved.
            if first > last || last >= carved {
                continue;
            }
            // The objects starting in it are free by their bits, and one starting before it
            // by its bit or its own granule's release.
            let own = bytes.start.div_ceil(size);
            if (first == own || is_free(first)) && bits.all_set(own, last + 1) {
                newly |= 1 << g;
            }
        }
        if newly == 0 {
            return (count, 0);
        }
        // The objects that start in the granules about to go are free, but not to be handed
        // out (their pages are not there): their bits are cleared.
        for g in 0..granules.count {
            if newly & (1 << g) != 0 {
                let (first, end) = granules.starting_in(g, size, carved);
                let cleared = bits.set_range(first, end, false);
                debug_assert_eq!(cleared, end - first);
                bag.listed -= cleared as u16;
            }
        }
        bag.sweep.released = released | newly;
        let mut g = 0;
        while g < granules.count {
            if newly & (1 << g) == 0 {
                g += 1;
                continue;
            }
            let run = g;
            while g < granules.count && newly & (1 << g) != 0 {
                g += 1;
            }
            let bytes = granules.span(run, g);
            // SAFETY: page-aligned granules of a live bag whose every overlapping object is
            // free and no longer listed or reachable (see above).
            unsafe { self.arena.release_in_use(start + bytes.start, bytes.len()) };
        }
        let released = granules.bytes(newly);
        self.node(node)
            .released_in_bags
            .fetch_add(released, Ordering::Relaxed);
        (count, released)
    }

    /// Lists again (sets the free bits of) the objects that start in `bag`'s lowest released
    /// granule (the bag has no listed or uncarved object left), and notes it as released
    /// memory taken back in the class's sweep stretch.
    ///
    /// # Safety
    /// The class lock of (`node`, `part`, `class`) is held and `bag` is a live bag of it
    /// starting at `start`, with a released granule.
    pub(super) unsafe fn restore_granule(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        bag: *mut UnitMeta,
        start: usize,
    ) {
        let size = class.size();
        let granules = Granules::of(class);
        // SAFETY: the caller holds the class lock that owns `bag`, a live bag.
        let bag = unsafe { &mut (*bag).role.bag };
        let released = bag.sweep.released;
        debug_assert!(released != 0 && bag.listed == 0);
        let g = released.trailing_zeros() as usize;
        bag.sweep.released = released & !(1 << g);
        let bytes = granules.span(g, g + 1);
        let (first, end) = granules.starting_in(g, size, bag.carved as usize);
        let set = self
            .arena
            .map()
            .free_bits(start)
            .set_range(first, end, true);
        debug_assert_eq!(set, end - first);
        bag.listed += set as u16;
        // The release cleared the marks their frees wrote: written again, so that a free of
        // one of them before it is handed out again is still screened.
        let mark = self.screen_mark(class);
        if mark != 0 {
            // SAFETY: as above, and each object holds its screen word (`screen_mark` is 0 for a
            // class too small).
            unsafe { super::bags::mark_objects(start, size, first, end, mark) };
        }
        self.node(node)
            .released_in_bags
            .fetch_sub(bytes.len(), Ordering::Relaxed);
        // SAFETY: the class lock is held (forwarded contract).
        if let Some(stretch) = unsafe { self.sweep_stretch(node, part, class) } {
            if stretch.watching() {
                stretch.retaken_after_pause(os::monotonic_ns(), bytes.len());
            }
        }
    }

    /// The sweep stretch of (`node`, `part`, `class`): the default partition's (other
    /// partitions' bags wait the unstretched time: one period once drained, else the quiet
    /// time).
    ///
    /// # Safety
    /// The class lock of (`node`, `part`, `class`) is held for as long as the result lives,
    /// and no other reference to the stretch is.
    #[allow(clippy::mut_from_ref)]
    unsafe fn sweep_stretch(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
    ) -> Option<&mut Stretch> {
        if part != Partition::DEFAULT {
            return None;
        }
        let cell = &self.node(node).sweep_stretch[class.index()];
        // SAFETY: the cell is guarded by that class lock, which the caller holds (contract).
        Some(unsafe { &mut *cell.get() })
    }

    /// Accounts for the released granules of a bag that goes back to its region.
    ///
    /// # Safety
    /// The class lock is held and `bag` is a bag of `class` whose last object just came back.
    pub(super) unsafe fn forget_released(
        &self,
        node: NodeId,
        class: SizeClass,
        bag: *mut UnitMeta,
    ) {
        // SAFETY: the caller holds the class lock of this live bag.
        let released = unsafe { (*bag).role.bag.sweep.released };
        if released != 0 {
            self.node(node)
                .released_in_bags
                .fetch_sub(Granules::of(class).bytes(released), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
pub(super) mod tests;
