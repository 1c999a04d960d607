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
pub(super) mod tests {
    use super::*;
    use crate::arena::tests::test_arena;
    use crate::ds::{next_of, set_next};
    use crate::node::{upkeep_period, Misuse, Partition};
    use crate::size_class::class_of;
    use core::ptr::null_mut;
    use std::collections::HashSet;

    /// Whether the page holding `address` is resident.
    fn resident(address: usize) -> bool {
        let page = address & !(PAGE_SIZE - 1);
        let mut vec = 0u8;
        // SAFETY: `page` is page aligned inside a mapping of ours; one byte of output.
        let result = unsafe { libc::mincore(page as *mut libc::c_void, PAGE_SIZE, &mut vec) };
        assert_eq!(result, 0);
        vec & 1 != 0
    }

    /// Every object of `class` node 0's region can hold, taken a bag at a time, until the
    /// region refuses a bag.
    pub(in crate::node) fn take_all(heaps: &NodeHeaps, class: SizeClass) -> Vec<*mut u8> {
        let mut objects = Vec::new();
        while let Some(batch) =
            heaps.take_from_bags(NodeId(0), Partition::DEFAULT, class, class.capacity())
        {
            let mut object = batch.head;
            while !object.is_null() {
                objects.push(object);
                // SAFETY: walking a batch the test holds.
                object = unsafe { next_of(object) };
            }
        }
        objects
    }

    /// Takes `count` objects of `class` from node 0's bags as a vector.
    pub(in crate::node) fn take(heaps: &NodeHeaps, class: SizeClass, count: usize) -> Vec<*mut u8> {
        let batch = heaps
            .take_from_bags(NodeId(0), Partition::DEFAULT, class, count)
            .expect("memory");
        let mut objects = Vec::new();
        let mut object = batch.head;
        while !object.is_null() {
            objects.push(object);
            // SAFETY: walking a batch we own.
            object = unsafe { next_of(object) };
        }
        objects
    }

    /// Gives `objects` back to their bags as one chain.
    pub(in crate::node) fn give_back(heaps: &NodeHeaps, class: SizeClass, objects: &[*mut u8]) {
        let mut chain = null_mut();
        for &object in objects {
            // SAFETY: we own the object; link it into our chain.
            unsafe { set_next(object, chain) };
            chain = object;
        }
        heaps
            .return_to_bags(NodeId(0), class, chain, false)
            .expect("valid objects");
    }

    /// The bag the sweep tests use: every object carved and written, then all but every
    /// `keep_every`-th object freed. Returns the kept objects and the freed ones.
    fn sparse_bag(
        heaps: &NodeHeaps,
        class: SizeClass,
        keep_every: usize,
    ) -> (Vec<*mut u8>, Vec<*mut u8>) {
        let mut objects = take(heaps, class, class.capacity());
        assert_eq!(objects.len(), class.capacity());
        objects.sort();
        for &object in &objects {
            // SAFETY: the object is ours, `class.size()` bytes.
            unsafe { core::ptr::write_bytes(object, 0xA5, class.size()) };
        }
        let (kept, freed): (Vec<_>, Vec<_>) = objects
            .iter()
            .enumerate()
            .partition(|(index, _)| index % keep_every == 0);
        let kept: Vec<_> = kept.into_iter().map(|(_, &object)| object).collect();
        let freed: Vec<_> = freed.into_iter().map(|(_, &object)| object).collect();
        give_back(heaps, class, &freed);
        (kept, freed)
    }

    fn intact(object: *mut u8, size: usize) -> bool {
        // SAFETY: a live object of ours, `size` bytes.
        unsafe { std::slice::from_raw_parts(object, size) }
            .iter()
            .all(|&b| b == 0xA5)
    }

    #[test]
    fn a_sweep_gives_back_the_free_pages_of_a_sparse_bag_and_hands_each_object_out_again() {
        for (size, keep_every) in [(8192, 3), (5000, 4), (256, 40), (1024, 9), (100_000, 2)] {
            let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
            let class = class_of(size, 8).unwrap();
            let (kept, freed) = sparse_bag(heaps, class, keep_every);
            let pages_of = |objects: &[*mut u8]| -> HashSet<usize> {
                let mut pages = HashSet::new();
                for &object in objects {
                    let start = object as usize;
                    let mut page = start & !(PAGE_SIZE - 1);
                    while page < start + class.size() {
                        pages.insert(page);
                        page += PAGE_SIZE;
                    }
                }
                pages
            };
            let live_pages = pages_of(&kept);
            let free_pages: Vec<_> = pages_of(&freed).difference(&live_pages).copied().collect();
            assert!(!free_pages.is_empty());
            assert!(free_pages.iter().all(|&page| resident(page)));

            heaps.flush_all();
            let released = heaps
                .node(NodeId(0))
                .released_in_bags
                .load(Ordering::Relaxed);
            let gone = free_pages.iter().filter(|&&page| !resident(page)).count();
            assert!(
                gone * 2 >= free_pages.len(),
                "{size} B: {gone} of {} wholly free pages released",
                free_pages.len()
            );
            assert!(
                released >= gone * PAGE_SIZE,
                "{size} B: {released} bytes counted"
            );
            for &object in &kept {
                assert!(
                    intact(object, class.size()),
                    "{size} B: a kept object lost data"
                );
            }
            // A second free of an object whose granule went back to the OS (its bit is clear)
            // is still a double free.
            let gone_object = *freed
                .iter()
                .find(|&&object| !resident(object as usize))
                .expect("an object in a released granule");
            // SAFETY: a chain of one, as a program's second free makes it.
            unsafe { set_next(gone_object, null_mut()) };
            assert!(matches!(
                heaps.return_to_bags(NodeId(0), class, gone_object, false),
                Err((object, Misuse::DoubleFree)) if object == gone_object
            ));

            // Every freed object comes back exactly once, none of the kept ones, and the
            // released granules are listed again on the way.
            let again = take(heaps, class, freed.len() + 1);
            let again_set: HashSet<_> = again.iter().copied().collect();
            assert_eq!(
                again_set.len(),
                again.len(),
                "{size} B: an object handed out twice"
            );
            let freed_set: HashSet<_> = freed.iter().copied().collect();
            let from_bag = again_set.intersection(&freed_set).count();
            assert_eq!(from_bag, freed.len(), "{size} B: a freed object was lost");
            assert!(
                kept.iter().all(|object| !again_set.contains(object)),
                "{size} B: a live object was handed out"
            );
            assert_eq!(
                heaps
                    .node(NodeId(0))
                    .released_in_bags
                    .load(Ordering::Relaxed),
                0
            );
            give_back(heaps, class, &again);
            give_back(heaps, class, &kept);
            assert_eq!(
                heaps.class(NodeId(0), class).bags.load(Ordering::Relaxed),
                0
            );
        }
    }

    #[test]
    fn only_bags_quiet_for_the_whole_quiet_time_are_swept() {
        let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
        let class = class_of(8192, 8).unwrap();
        let stamp = heaps
            .node(NodeId(0))
            .next_upkeep
            .load(Ordering::Relaxed)
            .max(1);
        let (kept, _) = sparse_bag(heaps, class, 4);
        let released = || {
            heaps
                .node(NodeId(0))
                .released_in_bags
                .load(Ordering::Relaxed)
        };
        // The stamp is the deadline of the pass after the returns, a period after them.
        let delay = heaps.arena.decommit.delay_ns;
        let wait = quiet_time(delay) - upkeep_period(delay);
        assert!(wait >= upkeep_period(delay));
        // The pass whose deadline the returns saw, and the last one within the quiet time:
        // not quiet yet.
        for due in [stamp, stamp + wait] {
            heaps.sweep_node(NodeId(0), due, false);
            assert_eq!(
                released(),
                0,
                "a bag swept {} ns after its objects came back",
                due - stamp
            );
        }
        // The next pass: quiet for the whole quiet time.
        heaps.sweep_node(NodeId(0), stamp + wait + 1, false);
        assert!(released() > 0, "a quiet bag was not swept");
        // Swept once, the bag is left alone until an object comes back.
        let before = released();
        let again = take(heaps, class, 1);
        heaps.sweep_node(NodeId(0), stamp + wait + 2, false);
        assert!(released() <= before);
        give_back(heaps, class, &again);
        for &object in &kept {
            assert!(intact(object, class.size()));
        }
        let all = take(heaps, class, class.capacity());
        give_back(heaps, class, &all);
        give_back(heaps, class, &kept);
        assert_eq!(
            heaps.class(NodeId(0), class).bags.load(Ordering::Relaxed),
            0
        );
        assert_eq!(released(), 0);
    }

    /// A class whose bags hold one object in sixteen (what idle caches pin after the program
    /// freed the rest) is swept after one period; one that holds a quarter waits the quiet
    /// time.
    #[test]
    fn a_drained_class_is_swept_after_one_period() {
        let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
        let node = heaps.node(NodeId(0));
        let stamp = node.next_upkeep.load(Ordering::Relaxed).max(1);
        let released = || node.released_in_bags.load(Ordering::Relaxed);
        let held = class_of(8192, 8).unwrap();
        let (held_kept, _) = sparse_bag(heaps, held, 4);
        heaps.sweep_node(NodeId(0), stamp + 1, false);
        assert_eq!(
            released(),
            0,
            "a class the program holds was swept after one period"
        );
        let drained = class_of(1024, 8).unwrap();
        let (drained_kept, _) = sparse_bag(heaps, drained, 16);
        heaps.sweep_node(NodeId(0), stamp + 2, false);
        assert!(released() > 0, "a drained class waited");
        for (class, kept) in [(held, held_kept), (drained, drained_kept)] {
            for &object in &kept {
                assert!(intact(object, class.size()));
            }
            let all = take(heaps, class, class.capacity());
            give_back(heaps, class, &all);
            give_back(heaps, class, &kept);
        }
        assert_eq!(released(), 0);
    }

    #[test]
    fn a_class_whose_released_pages_come_back_after_a_pause_waits_out_twice_the_pause() {
        let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
        let class = class_of(8192, 8).unwrap();
        let node = heaps.node(NodeId(0));
        let released = || node.released_in_bags.load(Ordering::Relaxed);
        const SECOND: u64 = 1_000_000_000;
        let delay = heaps.arena.decommit.delay_ns;
        let wait = quiet_time(delay) - upkeep_period(delay);
        // The objects came back 1.5 s ago; the next pass sweeps them.
        let then = os::monotonic_ns() - 3 * SECOND / 2;
        node.next_upkeep.store(then, Ordering::Relaxed);
        let (kept, freed) = sparse_bag(heaps, class, 4);
        heaps.sweep_node(NodeId(0), then + wait + 1, false);
        assert!(released() > 0, "a quiet bag was not swept");
        // Now, after the pause, the program takes every freed object again: the released
        // granules are listed again and fault back in.
        let again = take(heaps, class, freed.len() + 1);
        assert_eq!(released(), 0);
        let now = os::monotonic_ns();
        node.next_upkeep.store(now, Ordering::Relaxed);
        give_back(heaps, class, &again);
        // The quiet time no longer does: the class waits twice the pause (3 s or more).
        heaps.sweep_node(NodeId(0), now + wait + 1, false);
        heaps.sweep_node(NodeId(0), now + 2 * SECOND, false);
        assert_eq!(released(), 0, "swept within the pause the program showed");
        heaps.sweep_node(NodeId(0), now + 9 * SECOND, false);
        assert!(released() > 0, "the stretched wait never ended");
        // A class whose releases nobody takes back keeps the quiet time (another class, whose
        // stretch is its own).
        let other = class_of(16384, 8).unwrap();
        node.next_upkeep.store(now, Ordering::Relaxed);
        let before = released();
        let (other_kept, _) = sparse_bag(heaps, other, 4);
        heaps.sweep_node(NodeId(0), now + wait + 1, false);
        assert!(released() > before, "a class without evidence waited");
        for &object in &kept {
            assert!(intact(object, class.size()));
        }
        let all = take(heaps, class, class.capacity());
        give_back(heaps, class, &all);
        give_back(heaps, class, &kept);
        let all = take(heaps, other, other.capacity());
        give_back(heaps, other, &all);
        give_back(heaps, other, &other_kept);
        assert_eq!(released(), 0);
    }

    #[test]
    fn the_busiest_bags_are_not_swept() {
        let heaps = NodeHeaps::create(test_arena(1, 64 << 20, usize::MAX)).unwrap();
        // 64-byte objects, one in eight kept: a page of 64 holds 8 live ones on average.
        let class = class_of(64, 8).unwrap();
        let (kept, _) = sparse_bag(heaps, class, 8);
        heaps.flush_all();
        assert_eq!(
            heaps
                .node(NodeId(0))
                .released_in_bags
                .load(Ordering::Relaxed),
            0
        );
        let all = take(heaps, class, class.capacity() - kept.len());
        give_back(heaps, class, &all);
        give_back(heaps, class, &kept);
        assert_eq!(
            heaps.class(NodeId(0), class).bags.load(Ordering::Relaxed),
            0
        );
    }

    /// Sweeps under contention: bags of a page-spanning class and of a small one are carved,
    /// filled, emptied and swept concurrently; no live object may change or be handed out twice.
    #[test]
    fn sweeps_never_touch_live_objects_under_contention() {
        for size in [6000, 512] {
            crate::node::tests::hand_over_under_contention(class_of(size, 8).unwrap(), true);
        }
    }
}
