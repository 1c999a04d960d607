//! Call-site partitions, the thread side. With the mode on (`NODALLOC_CALLSITE=P`), the class
//! lists of [`ThreadHeap`] stay empty and the home view matches nothing (as in secure mode), so
//! both fast paths miss to here, where lists are kept per (partition, class) in a
//! **partition cache**: 128 sets of two lists, found by hashing the pair, one set per probe.
//! A hit pops or pushes with no lock and no atomic, as the class lists do; a pair that finds
//! no list in its set takes the set's older list's place, whose objects go back to their class
//! heap first (one release).
//!
//! The partition of an allocation is the thread's current one: the C face sets it from the
//! call site ([`ThreadHeap::enter_call_site`]) and the Rust face from its scopes
//! ([`ThreadHeap::enter_scope`]). A free finds the object's partition from its bag.
//!
//! The fast pop and push look at the set's newer list only; a pair in the older one takes the
//! general path once, which makes it the newer. The cache lives in its own mapping, made on the
//! first partitioned call and unmapped when the heap retires. Lists adapt their limits as class
//! lists do (`adapt.rs`; an evicted list goes back to its base). Secure mode keeps its checks
//! (the general paths only): the lists' links are encoded, and every object is marked in the
//! allocation bitmap while the program holds it.

use super::adapt::{resize_list, want_after_cut, want_after_refill};
use super::cache::FreeList;
use super::ThreadHeap;
use crate::ds::{next_of, set_next};
use crate::node::{partition_of_site, report, NodeHeaps, NodeId, Partition};
use crate::os;
use crate::size_class::{SizeClass, NUM_CLASSES};
use core::ptr::null_mut;

/// Lists in a partition cache: sets of two.
const SLOTS: usize = 256;
const SET_BITS: u32 = 7;

/// A thread's lists of (partition, class) pairs.
pub(super) struct PartitionCache {
    /// Per slot, the key of the pair whose list it holds ([`key_of`]), 0 for none.
    keys: [u32; SLOTS],
    /// Per slot, the list's cuts since its last refill and whether it was cut since its
    /// limit was reset (the adaptive limits, `adapt.rs`).
    cuts: [u8; SLOTS],
    lists: [FreeList; SLOTS],
}

const _: () = assert!(SLOTS == 2 << SET_BITS);

/// The partition of scope `id` among `partitions` (0 with the mode off).
pub(super) fn scope_partition(id: usize, partitions: usize) -> Partition {
    match partitions {
        0 => Partition::DEFAULT,
        count => Partition((id % count) as u16),
    }
}

/// A pair's key: never 0.
fn key_of(part: Partition, class: SizeClass) -> u32 {
    (part.index() * NUM_CLASSES + class.index()) as u32 + 1
}

fn pair_of(key: u32) -> (Partition, SizeClass) {
    let index = (key - 1) as usize;
    (
        Partition((index / NUM_CLASSES) as u16),
        SizeClass((index % NUM_CLASSES) as u8),
    )
}

/// The first slot of `key`'s set.
fn set_of(key: u32) -> usize {
    ((key.wrapping_mul(0x9E37_79B9) >> (32 - SET_BITS)) as usize) * 2
}

/// Frees into a partition list that count as one operation of the partition for automatic
/// tiering (about a batch, as a refill or a return moves).
const FREES_PER_ACTIVITY: u32 = 64;

impl ThreadHeap {
    /// The C face: the next allocations of this thread come from the call site `site` (a return
    /// address; 0 for none known). Nothing happens with the mode off.
    #[inline]
    pub fn enter_call_site(&mut self, site: usize) {
        self.call_site = site;
    }

    /// The Rust face: the next allocations of this thread go to partition `id` (modulo P);
    /// returns the scope it replaces. Nothing happens with the mode off.
    pub fn enter_scope(&mut self, id: usize) -> usize {
        self.call_site = 0;
        self.scope_part = scope_partition(id, self.partitions);
        core::mem::replace(&mut self.scope, id)
    }

    /// True with call-site partitions on (once attached).
    pub fn is_partitioned(&self) -> bool {
        self.partitions != 0
    }

    /// The C face's hit in the partition cache, after its thread cache missed: enters `site`
    /// (the allocation's call site) and, with partitions on and the thread where the heap last
    /// saw it, pops the list of (`site`'s partition, `class`): once per miss, the pop
    /// [`Self::alloc_after_partition_hit`] then does not repeat. Null when the list is empty,
    /// not in the cache, or the pop could not be tried. No lock, no atomic.
    #[inline(always)]
    pub fn partition_hit(&mut self, class: SizeClass, site: usize) -> *mut u8 {
        self.enter_call_site(site);
        if !self.part_fast || self.parts.is_null() || self.moved() {
            return null_mut();
        }
        // Counted here for the heap profile; the miss path that follows serves the sample.
        if self.sampler.take(class.size()) {
            self.pass_count(true);
            return null_mut();
        }
        let object = self.pop_in(self.current_partition(), class);
        if object.is_null() {
            self.pass_count(false);
        }
        object
    }

    /// The partition cache's pop in the current partition (the last call site entered, or the
    /// scope): the object at the head of the list of (that partition, `class`), or null when
    /// that list is not in the cache or is empty, or the fast paths are closed. No lock, no
    /// atomic; once per miss, from [`ThreadHeap::alloc_slow`].
    #[inline(always)]
    pub(super) fn partition_pop_current(&mut self, class: SizeClass) -> *mut u8 {
        if !self.part_fast || self.parts.is_null() {
            return null_mut();
        }
        self.pop_in(self.current_partition(), class)
    }

    /// The pop of the partition cache's list of (`part`, `class`) if it is its set's newer one,
    /// or null. The cache must be mapped.
    #[inline(always)]
    fn pop_in(&mut self, part: Partition, class: SizeClass) -> *mut u8 {
        let key = key_of(part, class);
        let set = set_of(key);
        // SAFETY: the callers checked that the cache is mapped; only this thread touches it.
        let cache = unsafe { &mut *self.parts };
        if cache.keys[set] != key {
            return null_mut();
        }
        let list = &mut cache.lists[set];
        let object = list.head;
        if !object.is_null() {
            // SAFETY: cached objects are free, ours, and linked through their first word.
            list.head = unsafe { next_of(object) };
            list.popped(object);
        }
        object
    }

    /// The class and partition of `object` when it is a small object of the home region that a
    /// free may push with [`ThreadHeap::partition_push`] (the fast paths are open); `None`,
    /// touching nothing, for anything else, which [`ThreadHeap::free`] sorts out.
    #[inline]
    pub fn partition_class_of(&self, object: *const u8) -> Option<(SizeClass, Partition)> {
        if !self.part_fast {
            return None;
        }
        self.part_view.small_object(object)
    }

    /// Pushes a freed object onto the list of its (`part`, `class`), which
    /// [`ThreadHeap::partition_class_of`] found; through the general path when that list is
    /// not in the cache.
    ///
    /// # Safety
    /// `object` is a live object of `class` and `part`, of this heap's node, that the caller
    /// gives up.
    #[inline]
    pub unsafe fn partition_push(&mut self, object: *mut u8, class: SizeClass, part: Partition) {
        let key = key_of(part, class);
        let set = set_of(key);
        if !self.parts.is_null() {
            // SAFETY: the cache is mapped (checked above) and only this thread touches it.
            let cache = unsafe { &mut *self.parts };
            if cache.keys[set] == key {
                let list = &mut cache.lists[set];
                // SAFETY: the object is ours now and at least 8 bytes (every class is).
                unsafe { set_next(object, list.head) };
                if list.push(object) {
                    self.partition_mark_cold(set);
                } else if list.frees_since_publish() % FREES_PER_ACTIVITY == 0 {
                    self.partition_busy(set);
                }
                return;
            }
        }
        // SAFETY: forwarded contract.
        unsafe { self.partition_push_slow(object, class) }
    }

    /// Counts [`FREES_PER_ACTIVITY`] frees into slot `index` as one operation of its partition
    /// for automatic tiering: a site whose objects churn inside the thread's list never
    /// refills, yet it is busy.
    #[cold]
    #[inline(never)]
    fn partition_busy(&mut self, index: usize) {
        if let (Some(heaps), false) = (self.heaps(), self.parts.is_null()) {
            // SAFETY: the cache is mapped (checked) and only this thread touches it.
            let key = unsafe { (*self.parts).keys[index] };
            heaps.note_activity(pair_of(key).0);
        }
    }

    #[cold]
    #[inline(never)]
    fn partition_mark_cold(&mut self, index: usize) {
        if let Some(heaps) = self.heaps() {
            self.partition_mark(heaps, index);
        }
    }

    /// # Safety
    /// As for [`ThreadHeap::partition_push`].
    #[cold]
    #[inline(never)]
    unsafe fn partition_push_slow(&mut self, object: *mut u8, class: SizeClass) {
        let Some(heaps) = self.heaps() else {
            return;
        };
        let node = self.node;
        // SAFETY: forwarded contract.
        unsafe { self.partition_free(heaps, node, object, class) }
    }

    /// The partition of the next allocation: the call site's, else the scope's (partition 0
    /// with the mode off, where both are).
    #[inline(always)]
    pub(super) fn current_partition(&self) -> Partition {
        if self.call_site != 0 {
            partition_of_site(self.call_site, self.partitions)
        } else {
            self.scope_part
        }
    }

    fn cache(&mut self) -> Option<&mut PartitionCache> {
        if self.parts.is_null() {
            self.parts =
                os::reserve(core::mem::size_of::<PartitionCache>())? as *mut PartitionCache;
        }
        // SAFETY: a mapping of one PartitionCache that only this heap's thread touches; all-zero
        // bytes are a valid cache (no keys, empty lists).
        Some(unsafe { &mut *self.parts })
    }

    /// The slot holding the list of (`part`, `class`), making room in its set if needed. `None`
    /// when the cache cannot be mapped.
    fn slot(
        &mut self,
        heaps: &'static NodeHeaps,
        part: Partition,
        class: SizeClass,
    ) -> Option<usize> {
        let key = key_of(part, class);
        let set = set_of(key);
        let cache = self.cache()?;
        if cache.keys[set] == key {
            return Some(set);
        }
        if cache.keys[set + 1] != key {
            // The older list leaves; the newer one becomes the older.
            self.evict(heaps, set + 1, false);
            let cache = self.cache()?;
            cache.keys[set + 1] = key;
            cache.lists[set + 1].configure(class);
            heaps.note_site(part, self.call_site);
        }
        let cache = self.cache()?;
        cache.keys.swap(set, set + 1);
        cache.cuts.swap(set, set + 1);
        cache.lists.swap(set, set + 1);
        Some(set)
    }

    /// Empties slot `index` into its pair's class heap (after publishing its counts) and frees
    /// the slot: into the ring when `to_bags` is false (the objects may be wanted again soon),
    /// else straight into the bags.
    fn evict(&mut self, heaps: &'static NodeHeaps, index: usize, to_bags: bool) {
        let node = self.node;
        let secure = self.secure;
        if self.parts.is_null() {
            return;
        }
        // SAFETY: the cache is mapped (checked above) and only this thread touches it; the
        // reference is not borrowed from `self`, so `self.grown_bytes` can be lent beside it.
        let cache = unsafe { &mut *self.parts };
        let key = core::mem::replace(&mut cache.keys[index], 0);
        if key == 0 {
            return;
        }
        let (part, class) = pair_of(key);
        let list = &mut cache.lists[index];
        let (allocs, frees) = list.take_counts();
        heaps.publish_counts(node, part, class, allocs, frees);
        let batch = list.take_all(secure);
        cache.cuts[index] = 0;
        resize_list(
            &mut self.grown_bytes,
            Some(heaps),
            node,
            list,
            class,
            class.cache_limit(),
        );
        self.give_back(heaps, part, class, batch, to_bags);
    }

    /// An allocation of `class` in the current partition (the heap is attached and active).
    pub(super) fn partition_alloc(
        &mut self,
        heaps: &'static NodeHeaps,
        class: SizeClass,
    ) -> *mut u8 {
        let part = self.current_partition();
        if class.cache_limit() == 0 {
            heaps.note_site(part, self.call_site);
            self.upkeep();
            return self.alloc_single_in(heaps, part, class);
        }
        let Some(mut index) = self.slot(heaps, part, class) else {
            return heaps.alloc_single(self.node, part, class);
        };
        let secure = self.secure;
        if self.partition_list(index).len() == 0 {
            // As a class list's refill: the duties first (they may re-home the heap, which
            // empties the cache), then a batch.
            self.refill_duties(heaps);
            index = match self.slot(heaps, part, class) {
                Some(index) => index,
                None => return heaps.alloc_single(self.node, part, class),
            };
            // A cold partition (automatic tiering): objects of the far node's bags, uncached,
            // while the list is empty.
            let object = self.cold_object(heaps, part, class);
            if !object.is_null() {
                return object;
            }
            let Some(batch) = self.take_refill(heaps, part, class) else {
                return null_mut();
            };
            self.partition_list(index).install(batch, secure);
            self.partition_limit_after_refill(heaps, index, class);
        }
        let list = self.partition_list(index);
        let object = if secure {
            let object = list.aux;
            // SAFETY: cached objects are free, ours, and linked through their first word.
            list.aux = unsafe { heaps.read_link(object, class) };
            object
        } else {
            let object = list.head;
            // SAFETY: as above.
            list.head = unsafe { next_of(object) };
            object
        };
        list.popped(object);
        if secure {
            heaps.note_allocated(object);
        }
        object
    }

    /// One object of `class` in `part`, uncached: from the far node's bags while the partition
    /// is cold, else from the thread's node's.
    fn alloc_single_in(
        &mut self,
        heaps: &'static NodeHeaps,
        part: Partition,
        class: SizeClass,
    ) -> *mut u8 {
        let object = self.cold_object(heaps, part, class);
        if !object.is_null() {
            return object;
        }
        heaps.alloc_single(self.node, part, class)
    }

    /// An object of `class` from the far node's bags of `part` while the partition is cold
    /// (counted as its activity); null when it is not cold, or the far node has none.
    fn cold_object(&self, heaps: &'static NodeHeaps, part: Partition, class: SizeClass) -> *mut u8 {
        match heaps.cold_source(self.node, part) {
            Some(far) => {
                heaps.note_activity(part);
                heaps.alloc_single(far, part, class)
            }
            None => null_mut(),
        }
    }

    /// [`ThreadHeap::limit_after_refill`] for slot `index`, just refilled.
    fn partition_limit_after_refill(
        &mut self,
        heaps: &'static NodeHeaps,
        index: usize,
        class: SizeClass,
    ) {
        let node = self.node;
        // SAFETY: `index` came from `slot`, which mapped the cache; only this thread touches it.
        let cache = unsafe { &mut *self.parts };
        let list = &mut cache.lists[index];
        let want = want_after_refill(list, &mut cache.cuts[index], class);
        resize_list(&mut self.grown_bytes, Some(heaps), node, list, class, want);
    }

    fn partition_list(&mut self, index: usize) -> &mut FreeList {
        debug_assert!(!self.parts.is_null() && index < SLOTS);
        // SAFETY: `index` came from `slot`, which mapped the cache.
        unsafe { &mut (*self.parts).lists[index] }
    }

    /// A free with partitions on: to the list of the object's (partition, class), or to its
    /// node's outbox.
    ///
    /// # Safety
    /// As for [`ThreadHeap::free`]; `origin` is the object's node.
    pub(super) unsafe fn partition_free(
        &mut self,
        heaps: &'static NodeHeaps,
        origin: NodeId,
        object: *mut u8,
        class: SizeClass,
    ) {
        if class.cache_limit() == 0 {
            // SAFETY: forwarded contract (checked in secure mode).
            unsafe { heaps.free_single(origin, class, object) };
            return self.upkeep();
        }
        let secure = self.secure;
        let home = origin == self.node;
        let slot = if home {
            let part = heaps.partition_of(object as usize);
            match self.slot(heaps, part, class) {
                Some(index) => Some(index),
                // SAFETY: forwarded contract (checked there in secure mode).
                None => return unsafe { heaps.free_single(origin, class, object) },
            }
        } else {
            None
        };
        if secure {
            if let Err(misuse) = heaps.note_freed(object, class) {
                report(object, misuse);
            }
        }
        let Some(index) = slot else {
            // SAFETY: forwarded contract.
            return unsafe { self.send_to_outbox(heaps, origin, object) };
        };
        let list = self.partition_list(index);
        let full = if secure {
            // SAFETY: the object is ours now and at least 8 bytes (every class is).
            unsafe { heaps.write_link(object, list.aux) };
            list.push_secure(object)
        } else {
            // SAFETY: as above.
            unsafe { set_next(object, list.head) };
            list.push(object)
        };
        if full {
            self.partition_mark(heaps, index);
        }
    }

    /// A push reached slot `index`'s threshold: arms its marker, or releases its oldest objects.
    #[cold]
    fn partition_mark(&mut self, heaps: &'static NodeHeaps, index: usize) {
        let secure = self.secure;
        let node = self.node;
        if self.parts.is_null() {
            return;
        }
        // SAFETY: the cache is mapped (checked above) and only this thread touches it; the
        // reference is not borrowed from `self`, so `self.grown_bytes` can be lent beside it.
        let cache = unsafe { &mut *self.parts };
        let (part, class) = pair_of(cache.keys[index]);
        let list = &mut cache.lists[index];
        let cut = list.arm_or_cut(
            secure,
            // SAFETY: `nth` is a cached object of this class, ours.
            |nth| unsafe { heaps.read_link(nth, class) },
            // SAFETY: as above; cutting the list after `nth`.
            |nth, next| unsafe { heaps.write_link(nth, next) },
        );
        let Some(batch) = cut else { return };
        if let Some(want) = want_after_cut(list, &mut cache.cuts[index], class) {
            resize_list(&mut self.grown_bytes, Some(heaps), node, list, class, want);
        }
        let (allocs, frees) = list.take_counts();
        heaps.publish_counts(node, part, class, allocs, frees);
        self.give_back(heaps, part, class, batch, false);
        // Upkeep last: it may re-home the heap, and the batch belongs to the node it left.
        self.upkeep();
    }

    /// True when `object` is in this thread's list of its (partition, class).
    pub(super) fn partition_holds(&self, class: SizeClass, object: *mut u8) -> bool {
        let Some(heaps) = self.heaps() else {
            return false;
        };
        if self.parts.is_null() {
            return false;
        }
        let key = key_of(heaps.partition_of(object as usize), class);
        let set = set_of(key);
        // SAFETY: the cache is mapped (checked above) and only this thread touches it.
        let cache = unsafe { &*self.parts };
        for index in [set, set + 1] {
            if cache.keys[index] == key {
                let mut cursor = cache.lists[index].head;
                while !cursor.is_null() {
                    if cursor == object {
                        return true;
                    }
                    // SAFETY: walking our own free list.
                    cursor = unsafe { next_of(cursor) };
                }
            }
        }
        false
    }

    /// Publishes every list's counts (before a statistics snapshot); with `idle_only`, also
    /// returns the objects of lists nothing used since the last pass (upkeep).
    pub(super) fn partition_upkeep(&mut self, heaps: &'static NodeHeaps, return_idle: bool) {
        if self.parts.is_null() {
            return;
        }
        let node = self.node;
        for index in 0..SLOTS {
            // SAFETY: the cache is mapped (checked above) and only this thread touches it.
            let cache = unsafe { &mut *self.parts };
            let key = cache.keys[index];
            if key == 0 {
                continue;
            }
            let list = &mut cache.lists[index];
            if return_idle && list.is_idle() && list.len() > 0 {
                self.evict(heaps, index, true);
                continue;
            }
            let (part, class) = pair_of(key);
            let (allocs, frees) = list.take_counts();
            if allocs != 0 || frees != 0 {
                heaps.publish_counts(node, part, class, allocs, frees);
            }
        }
    }

    /// Returns every list's objects to their bags (flush, re-homing, retirement).
    pub(super) fn partition_flush(&mut self, heaps: &'static NodeHeaps) {
        if self.parts.is_null() {
            return;
        }
        for index in 0..SLOTS {
            self.evict(heaps, index, true);
        }
    }

    /// Unmaps the cache (emptied by a flush first): the heap retires.
    pub(super) fn drop_partition_cache(&mut self) {
        if self.parts.is_null() {
            return;
        }
        // SAFETY: the cache's own mapping; the flush emptied it and nothing points into it.
        unsafe {
            os::unmap(
                self.parts as *mut u8,
                core::mem::size_of::<PartitionCache>(),
            )
        };
        self.parts = null_mut();
    }
}

#[cfg(test)]
pub(super) fn cache_keys_in_use(heap: &ThreadHeap) -> usize {
    if heap.parts.is_null() {
        return 0;
    }
    // SAFETY: the cache is mapped (checked above); the test's thread owns the heap.
    unsafe { (*heap.parts).keys.iter().filter(|&&key| key != 0).count() }
}
