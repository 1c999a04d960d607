//! A thread's own cache of one first-class heap's free objects (`nodalloc::LocalHeap`).

use super::*;

/// A thread's own cache of one heap's free objects (`nodalloc::LocalHeap`): per class, a list
/// that only the owning thread touches, with no lock. Refills take a batch from the heap's
/// front list or bags (under the front lock); an overflow gives a batch back. Objects in the
/// cache count as the program's in the heap's statistics until they are given back; the
/// cache's owner subtracts them ([`OwnedCache::cached`]). The heap's drop forgets the cache
/// with everything else.
pub struct OwnedCache {
    heads: [*mut u8; NUM_CLASSES],
    counts: [u32; NUM_CLASSES],
}

impl OwnedCache {
    /// An empty cache.
    pub const fn new() -> OwnedCache {
        OwnedCache {
            heads: [null_mut(); NUM_CLASSES],
            counts: [0; NUM_CLASSES],
        }
    }

    /// Objects cached, and their bytes.
    pub fn cached(&self) -> (usize, usize) {
        self.counts
            .iter()
            .enumerate()
            .fold((0, 0), |(count, bytes), (class, &n)| {
                let n = n as usize;
                (count + n, bytes + n * SizeClass(class as u8).size())
            })
    }
}

impl Default for OwnedCache {
    fn default() -> OwnedCache {
        OwnedCache::new()
    }
}

impl NodeHeaps {
    /// [`Self::owned_alloc`] through `cache` (heap `id`'s, owned by the calling thread): a
    /// small block pops the cache's list, refilled by a batch when empty.
    #[inline]
    pub(crate) fn cached_alloc(
        &self,
        cache: &mut OwnedCache,
        id: OwnedId,
        size: usize,
        align: usize,
    ) -> *mut u8 {
        let class = match class_of(size, align) {
            Some(class) if !self.arena.is_secure() => class,
            _ => return self.owned_alloc(id, size, align, false),
        };
        let index = class.index();
        if cache.heads[index].is_null() && !self.cache_refill(cache, id, class) {
            return null_mut();
        }
        let object = cache.heads[index];
        // SAFETY: a free object of the cache (this thread's alone), linked in the arena's
        // encoding.
        cache.heads[index] = unsafe { self.arena.read_link(object, Expect::Class(class)) };
        cache.counts[index] -= 1;
        object
    }

    /// Fills `cache`'s list of `class` with a batch of heap `id`'s (its front list whole, or a
    /// batch of its bags). When the heap's limit refuses, the cache gives everything back
    /// first and tries again. False when the heap has no room.
    #[cold]
    #[inline(never)]
    fn cache_refill(&self, cache: &mut OwnedCache, id: OwnedId, class: SizeClass) -> bool {
        let record = self.live_record(id, "an allocation");
        let node = NodeId(record.node.load(Ordering::Relaxed));
        let part = id.partition();
        for attempt in 0..2 {
            let front = &record.fronts[class.index()];
            let guard = front.lock.lock();
            // SAFETY: the front lock owns the list.
            let head = unsafe { &mut *front.head.get() };
            let taken = if head.is_null() {
                let mut zeroed = false;
                self.take_from_node_bags(node, part, class, class.batch(), &mut zeroed, None)
                    .map(|batch| (batch.head, batch.count))
            } else {
                Some((
                    core::mem::replace(head, null_mut()),
                    front.count.swap(0, Ordering::Relaxed),
                ))
            };
            if let Some((chain, taken)) = taken {
                Front::add(&front.allocs, taken as u64);
                cache.heads[class.index()] = chain;
                cache.counts[class.index()] = taken as u32;
                return true;
            }
            drop(guard);
            if attempt == 0 {
                self.cache_flush(cache, id);
            }
        }
        false
    }

    /// Gives a small block of heap `id` of `class` (the caller knows both: it allocated it)
    /// back to `cache`; an overflow returns a batch to the heap.
    ///
    /// # Safety
    /// `object` is a live object of `class` of heap `id`, which the caller gives up.
    #[inline]
    pub(crate) unsafe fn cached_free(
        &self,
        cache: &mut OwnedCache,
        id: OwnedId,
        class: SizeClass,
        object: *mut u8,
    ) {
        if self.arena.is_secure() {
            let origin = NodeId(self.owned.record(id.index()).node.load(Ordering::Relaxed));
            // SAFETY: forwarded contract.
            return unsafe { self.owned_free_small(origin, class, object) };
        }
        let index = class.index();
        // SAFETY: the object is ours now, at least 8 bytes.
        unsafe { self.arena.write_link(object, cache.heads[index]) };
        cache.heads[index] = object;
        cache.counts[index] += 1;
        if cache.counts[index] as usize > 2 * class.batch() {
            self.cache_give_back(cache, id, class);
        }
    }

    /// Returns the whole list of `class` of `cache` to heap `id`'s bags.
    #[cold]
    #[inline(never)]
    fn cache_give_back(&self, cache: &mut OwnedCache, id: OwnedId, class: SizeClass) {
        let index = class.index();
        let chain = core::mem::replace(&mut cache.heads[index], null_mut());
        let count = core::mem::replace(&mut cache.counts[index], 0);
        if chain.is_null() {
            return;
        }
        let record = self.live_record(id, "a free");
        let front = &record.fronts[index];
        {
            let _front = front.lock.lock();
            Front::add(&front.frees, count as u64);
        }
        let node = NodeId(record.node.load(Ordering::Relaxed));
        if let Err((object, misuse)) = self.return_to_bags(node, class, chain, false) {
            report(object, misuse);
        }
    }

    /// Returns everything `cache` holds to heap `id`'s bags.
    pub(crate) fn cache_flush(&self, cache: &mut OwnedCache, id: OwnedId) {
        for index in 0..NUM_CLASSES {
            if !cache.heads[index].is_null() {
                self.cache_give_back(cache, id, SizeClass(index as u8));
            }
        }
    }
}
