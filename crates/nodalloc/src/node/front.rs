//! What the thread layer needs from below, in the node layer's terms: the view of a home
//! region the free fast path compares against, links in the arena's encoding, secure mode's
//! allocation bitmap, and the counters thread heaps publish. The thread layer reaches the arena
//! only through these.

use super::{Misuse, NodeHeaps, NodeId, Partition};
use crate::arena::secure::Expect;
use crate::size_class::{SizeClass, UNIT, UNIT_SHIFT};
use core::sync::atomic::{AtomicU32, Ordering};

/// A page-map tag, read on the C face's free fast path.
pub(crate) use crate::arena::pagemap::Tag;
/// Spans the region's hold guards in a burst: a thread sends no more frees of a held class
/// to it per upkeep period.
pub(crate) use crate::arena::region::GUARD_BURST;
/// Objects of classes above this size span pages (the sparse pool): `calloc` of them can skip
/// clearing memory that was never touched.
pub(crate) use crate::arena::DENSE_OBJECT_MAX;

/// Where a node's small objects live, cached in a thread heap so its free fast paths need no
/// pointer chase: `(p - region_base) >> UNIT_SHIFT < region_units` for an address of the node's
/// region, and then the page map's tag of `p`'s unit is `region_tags[(p - region_base) >> UNIT_SHIFT]`,
/// readable for every unit of the region (zero, a unit that is no bag, where nothing was ever
/// written), so the C face's `free` needs no frontier check.
#[derive(Clone, Copy)]
pub(crate) struct HomeView {
    pub(crate) region_base: usize,
    /// Units in the region: `(p - region_base) >> UNIT_SHIFT` below it is a unit of the region.
    pub(crate) region_units: usize,
    /// The region's bytes (`region_units` units): a face that needs no unit (the Rust face
    /// knows the class) compares `p - region_base` with it, without the shift.
    pub(crate) region_bytes: usize,
    /// The tag of the region's first unit.
    pub(crate) region_tags: *const AtomicU32,
}

impl HomeView {
    /// A view no address matches (secure mode, a retired or detached heap).
    pub(crate) const NONE: HomeView = HomeView {
        region_base: 0,
        region_units: 0,
        region_bytes: 0,
        region_tags: core::ptr::null(),
    };

    /// The class of `object` and the region-relative unit that heads its bag, if it is a small
    /// object of the region at an object boundary (`magic` gives a class's
    /// [`SizeClass::start_magic`], from wherever the caller keeps it); `None`, touching nothing
    /// else, for anything else. One load besides the view and `magic`: the unit's tag.
    #[inline(always)]
    pub(crate) fn bag_object(
        &self,
        object: *const u8,
        magic: impl FnOnce(SizeClass) -> u64,
    ) -> Option<(SizeClass, usize)> {
        self.bag_object_where(object, magic, Tag::is_bag)
    }

    /// [`Self::bag_object`] for a free that must leave objects of units holding a heap-profile
    /// sample to the general path (`profile/in_bag.rs`): lean mode's push.
    #[inline(always)]
    pub(crate) fn bag_object_unsampled(
        &self,
        object: *const u8,
        magic: impl FnOnce(SizeClass) -> u64,
    ) -> Option<(SizeClass, usize)> {
        self.bag_object_where(object, magic, Tag::is_unsampled_bag)
    }

    #[inline(always)]
    fn bag_object_where(
        &self,
        object: *const u8,
        magic: impl FnOnce(SizeClass) -> u64,
        takes: impl FnOnce(Tag) -> bool,
    ) -> Option<(SizeClass, usize)> {
        let from_region = (object as usize).wrapping_sub(self.region_base);
        let unit = from_region >> UNIT_SHIFT;
        if unit >= self.region_units {
            return None;
        }
        // SAFETY: a unit of the region (`NONE` has no units), whose tag is readable whether or
        // not anything was ever written there.
        let tag = Tag(unsafe { &*self.region_tags.add(unit) }.load(Ordering::Relaxed));
        if !takes(tag) {
            return None;
        }
        let class = tag.class();
        // The offset in the bag: in the unit, plus the unit's from the bag's start.
        let in_bag = (from_region & (UNIT - 1)) + tag.offset_bytes();
        if !crate::size_class::is_multiple(in_bag, magic(class)) {
            return None;
        }
        Some((class, unit - tag.offset_units()))
    }
}

impl NodeHeaps {
    /// The view of `node`'s region for a thread heap homed there (never matching in secure
    /// mode, whose frees all take the checked slow path, nor with call-site partitions, whose
    /// frees need the object's partition).
    pub(crate) fn home_view(&self, node: NodeId) -> HomeView {
        if self.arena.is_secure() || self.partitions() != 0 {
            return HomeView::NONE;
        }
        self.home_view_of_region(node)
    }

    /// The view of `node`'s region, whatever the mode: its shared pools, not the owned pool
    /// of first-class heaps, whose blocks go back to their heap through the slow paths.
    pub(super) fn home_view_of_region(&self, node: NodeId) -> HomeView {
        let arena = self.arena;
        let region_base = arena.region_start(node.index());
        let map = arena.map();
        let region_units = arena.shared_bytes() >> UNIT_SHIFT;
        HomeView {
            region_base,
            region_units,
            region_bytes: region_units << UNIT_SHIFT,
            // SAFETY: the region's units are units of the arena, so their tags are in the array.
            region_tags: unsafe { map.tags().add(map.unit_of(region_base)) },
        }
    }

    /// Secure mode: links encoded and checked, objects tracked in the allocation bitmap.
    #[inline]
    pub(crate) fn is_secure(&self) -> bool {
        self.arena.is_secure()
    }

    /// Usable nodes.
    #[inline]
    pub(crate) fn node_count(&self) -> usize {
        self.arena.node_count()
    }

    /// The node of `cpu` (node 0 for a CPU the topology does not know).
    pub(crate) fn node_of_cpu(&self, cpu: usize) -> NodeId {
        NodeId(self.arena.topology.node_of_cpu(cpu))
    }

    /// The node whose region holds `address`, if any.
    #[inline]
    pub(crate) fn origin_of(&self, address: usize) -> Option<NodeId> {
        self.arena.origin_of(address).map(NodeId)
    }

    /// The link of a free object of `class`, checked in secure mode.
    ///
    /// # Safety
    /// `object` is a free object of `class` that the caller owns.
    #[inline]
    pub(crate) unsafe fn read_link(&self, object: *mut u8, class: SizeClass) -> *mut u8 {
        // SAFETY: forwarded contract.
        unsafe { self.arena.read_link(object, Expect::Class(class)) }
    }

    /// Sets the link of a free object the caller owns (encoded in secure mode).
    ///
    /// # Safety
    /// `object` is a free object of at least one word that the caller owns.
    #[inline]
    pub(crate) unsafe fn write_link(&self, object: *mut u8, next: *mut u8) {
        // SAFETY: forwarded contract.
        unsafe { self.arena.write_link(object, next) }
    }

    /// Secure mode: marks `object` as the program's in the allocation bitmap.
    pub(crate) fn note_allocated(&self, object: *mut u8) {
        self.arena.note_allocated(object)
    }

    /// Secure mode: clears `object`'s bit, or names the misuse (not an object of `class`, or
    /// not allocated: a double free).
    pub(crate) fn note_freed(&self, object: *mut u8, class: SizeClass) -> Result<(), Misuse> {
        self.arena.note_freed(object, class).map_err(Misuse::from)
    }

    /// The arena's range, as `(first address, bytes)`: every node's region.
    pub(crate) fn arena_range(&self) -> (usize, usize) {
        self.arena.range()
    }

    /// True while a maintenance thread makes the decommits frees would make.
    pub(crate) fn releases_deferred(&self) -> bool {
        self.arena.releases_deferred()
    }

    /// Aborts with a message naming `block`, whose link (stored as `stored`) was overwritten.
    pub(crate) fn report_damaged_link(&self, block: *mut u8, stored: usize) -> ! {
        super::report_damaged_link(self.arena, block, stored)
    }

    /// How often a thread runs its upkeep (the decommit delay, clamped).
    pub(crate) fn upkeep_period(&self) -> u64 {
        super::upkeep_period(self.arena.decommit.delay_ns)
    }

    /// Adds a thread's published counts of `class` in `part` on `node`.
    pub(crate) fn publish_counts(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        allocs: u32,
        frees: u32,
    ) {
        let class_heap = self.class_in(node, part, class);
        class_heap
            .allocs
            .fetch_add(allocs as u64, Ordering::Relaxed);
        class_heap.frees.fetch_add(frees as u64, Ordering::Relaxed);
    }
}
