//! Confirming a suspected double free beyond the freeing thread's own cache.
//!
//! A face that suspects a double free (the C face finds its freed mark on the block) first walks
//! the thread's cache; an object freed once and then handed on (a drain or a park sent it to the
//! node heap) is found here instead: in the class's transfer ring, or free in its bag (its free
//! bit set, or its granule released), or beyond what its bag ever carved (a pointer no allocation returned). Objects in another thread's
//! cache stay out of reach: their lists are that thread's alone.
//!
//! Only suspicions come here (rare in a correct program), so the cost of a walk does not matter;
//! what matters is that it is safe. The ring's batches are taken out whole (then ours alone),
//! walked and given back; the bag is read under its class lock.

use super::*;

impl NodeHeaps {
    /// The misuse a free of `object` (of `class`, from `node`'s region) would be, if the node
    /// heap can tell: a double free when the object waits in the class's ring or on its bag's
    /// free list, an invalid pointer when its bag never carved it. None when it is none of
    /// these (live as far as the node heap knows, or in some thread's cache).
    pub(crate) fn find_freed(
        &self,
        node: NodeId,
        class: SizeClass,
        object: *mut u8,
    ) -> Option<Misuse> {
        let part = self.partition_of(object as usize);
        if self.ring_holds(node, part, class, object) {
            return Some(Misuse::DoubleFree);
        }
        self.bag_holds(node, part, class, object)
    }

    /// True when `object` is in one of the batches waiting in the class's rings.
    fn ring_holds(&self, node: NodeId, part: Partition, class: SizeClass, object: *mut u8) -> bool {
        self.every_ring_shard_of(node, part, class)
            .any(|(_, ring)| self.shard_holds(node, part, class, ring, object))
    }

    /// True when `object` is in one of the batches waiting in `ring`. The batches are popped
    /// (each is then ours), walked, and released again: into a ring, or into the bags if other
    /// threads filled the rings meanwhile.
    fn shard_holds(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        ring: &RingShard,
        object: *mut u8,
    ) -> bool {
        let empty = Batch {
            head: null_mut(),
            tail: null_mut(),
            count: 0,
        };
        let mut taken = [empty; RING_SLOTS];
        let mut count = 0;
        while count < RING_SLOTS {
            let Some(batch) = ring.pop(&self.node(node).ops) else {
                break;
            };
            taken[count] = batch;
            count += 1;
        }
        let mut found = false;
        for batch in &taken[..count] {
            let mut cursor = batch.head;
            let mut left = batch.count;
            while !cursor.is_null() && left > 0 && !found {
                found = cursor == object;
                // SAFETY: the batch was popped from the ring, so its chain of free objects of
                // `class` is ours until we release it.
                cursor = unsafe { self.arena.read_link(cursor, Expect::Class(class)) };
                left -= 1;
            }
        }
        for batch in taken.into_iter().take(count) {
            self.release(node, part, class, batch);
        }
        found
    }

    /// [`Self::find_freed`] on the bag of `object`: under the class lock, a double free when
    /// the object is free in the bag (its bit set, or in a released granule), an invalid
    /// pointer when the bag never carved it (outside secure mode, where bags carve in order).
    fn bag_holds(
        &self,
        node: NodeId,
        part: Partition,
        class: SizeClass,
        object: *mut u8,
    ) -> Option<Misuse> {
        let address = object as usize;
        let map = self.arena.map();
        let size = class.size();
        let class_heap = self.class_in(node, part, class);
        let _guard = class_heap.lock_counted(&self.node(node).ops);
        let at = self.arena.bag_at(address)?;
        if at.class != class {
            return None;
        }
        if (address - at.start) % size != 0 {
            return Some(Misuse::InvalidPointer);
        }
        let bag = map.meta(at.first);
        // SAFETY: the class lock is held and the tag says `bag` is a bag of this class; a bag
        // of another partition is read under the wrong lock only when the program misuses it,
        // and then only its fields are read, never written.
        unsafe {
            if (*bag).role.bag.partition != part.0 {
                return None;
            }
            if !self.arena.is_secure()
                && (address - at.start) / size >= (*bag).role.bag.carved as usize
            {
                return Some(Misuse::InvalidPointer);
            }
            let offset = address - at.start;
            if map.free_bits(at.start).test(offset / size)
                || super::sweep::starts_released(class, (*bag).role.bag.sweep.released, offset)
            {
                return Some(Misuse::DoubleFree);
            }
        }
        None
    }
}
