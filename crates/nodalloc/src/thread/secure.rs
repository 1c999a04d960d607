//! Secure mode's thread-heap paths: lists whose links are encoded and checked, every object
//! marked in the allocation bitmap while the program holds it, and a free refused (the process
//! aborts naming the pointer) when its bit is clear.

use super::ThreadHeap;
use crate::node::{report, NodeHeaps, NodeId};
use crate::size_class::SizeClass;
use core::ptr::null_mut;

impl ThreadHeap {
    /// Secure mode's allocation: pops the class's encoded list (refilling it first when empty),
    /// checking the link, and marks the object as the program's.
    pub(super) fn secure_alloc(&mut self, heaps: &'static NodeHeaps, class: SizeClass) -> *mut u8 {
        if self.lists[class.index()].aux.is_null() && !self.refill(heaps, class) {
            return null_mut();
        }
        let list = &mut self.lists[class.index()];
        let object = list.aux;
        // SAFETY: cached objects are free, ours, and linked through their first word.
        list.aux = unsafe { heaps.read_link(object, class) };
        list.popped(object);
        heaps.note_allocated(object);
        object
    }

    /// Secure mode's free: the object must be one of `class` that the program holds (its bit in
    /// the allocation bitmap is set), else the process aborts naming it. Then as `free`: the home
    /// list, or the outbox of the object's node.
    ///
    /// # Safety
    /// As for [`Self::free`] (what is checked here is reported rather than trusted).
    pub(super) unsafe fn secure_free(
        &mut self,
        heaps: &'static NodeHeaps,
        origin: NodeId,
        object: *mut u8,
        class: SizeClass,
    ) {
        if let Err(misuse) = heaps.note_freed(object, class) {
            report(object, misuse);
        }
        if origin != self.node {
            // SAFETY: forwarded contract.
            return unsafe { self.send_to_outbox(heaps, origin, object) };
        }
        let list = &mut self.lists[class.index()];
        // SAFETY: the object is ours now and at least 8 bytes (every class is).
        unsafe { heaps.write_link(object, list.aux) };
        if list.push_secure(object) {
            self.free_threshold(class);
        }
    }
}
