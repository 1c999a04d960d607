//! Runs: the untouched rest of a bag of the sparse pool, which a thread takes in one refill and
//! hands out one object at a time (see [`NodeHeaps::take_untouched`]), and gives back with
//! [`NodeHeaps::return_run`] when it flushes its caches.

use super::bags::is_full;
use super::*;

/// Consecutive objects of one bag, never touched: `left` of them from `next` on, address order.
/// The bag counts them as out (carved and live) while a thread holds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub next: *mut u8,
    pub left: u32,
    /// The bag's memory read as zero when the run was taken.
    pub zeroed: bool,
}

impl Run {
    /// No object.
    pub const EMPTY: Run = Run {
        next: core::ptr::null_mut(),
        left: 0,
        zeroed: false,
    };

    /// The next object, `size` bytes (its class's), taken from the run; null when it is empty.
    #[inline]
    pub fn take(&mut self, size: usize) -> *mut u8 {
        if self.left == 0 {
            return core::ptr::null_mut();
        }
        let object = self.next;
        self.left -= 1;
        self.next = object.wrapping_add(size);
        object
    }
}

impl NodeHeaps {
    /// Takes back the objects of `run` (of `class`) that its thread did not hand out. A run is
    /// the end of its bag, so the bag's carve simply steps back over it: the objects are as
    /// untouched as before the run was taken, and a bag that has nothing else out goes back to
    /// its region. An object of the run whose free bit is set was freed before it was ever
    /// handed out (a `free` of an address the program computed): reported, not given out twice.
    pub fn return_run(&self, class: SizeClass, run: Run) {
        if run.left == 0 {
            return;
        }
        let address = run.next as usize;
        let left = run.left as usize;
        let size = class.size();
        let capacity = class.capacity() as u16;
        let map = self.arena.map();
        let (Some(node), Some(at)) = (
            self.arena.origin_of(address),
            self.arena.bag_at(address).filter(|at| at.class == class),
        ) else {
            report(run.next, Misuse::InvalidPointer)
        };
        let node = NodeId(node);
        let part = self.partition_of(address);
        let class_heap = self.class_in(node, part, class);
        let guard = class_heap.lock_counted(&self.node(node).ops);
        let bag = map.meta(at.first);
        let bits = map.free_bits(at.start);
        let first = (address - at.start) / size;
        if let Some(index) = (first..first + left).find(|&index| bits.test(index)) {
            drop(guard);
            report((at.start + index * size) as *mut u8, Misuse::InvalidPointer);
        }
        // SAFETY: the class lock is held and the tag says `bag` is a bag of this class, of the
        // partition its descriptor names.
        unsafe {
            let was_full = is_full(bag, capacity);
            if usize::from((*bag).role.bag.carved) == first + left {
                (*bag).role.bag.carved = first as u16;
            } else {
                // The run did not end the carve (never so today): its objects go back as free
                // ones, by their bits.
                debug_assert!(false, "a run that does not end its bag's carve");
                bits.set_range(first, first + left, true);
                (*bag).role.bag.listed += left as u16;
            }
            (*bag).role.bag.live -= left as u16;
            class_heap.out_of_bags.fetch_sub(left, Ordering::Relaxed);
            self.settle_returned(node, part, class, class_heap, bag, was_full);
        }
    }
}
