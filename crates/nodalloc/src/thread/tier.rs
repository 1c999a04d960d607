//! Far scopes: while a thread is in one, every allocation it makes comes from its far node
//! (the Rust face's `nodalloc::tier(Tier::Far)`). The fast paths stay as they are: the scope
//! shuts them by emptying the arena range the pop checks its head against (`arena_words` = 0,
//! which no head passes) and closing the partition lists' (`part_fast`), so every allocation
//! reaches [`ThreadHeap::alloc_slow`], which serves it from the far node's bags. Frees are
//! untouched: an object goes back to its origin as always. Leaving the scope reopens the range;
//! the objects the thread cached meanwhile are still there. `attach` opens the paths through
//! the same [`ThreadHeap::set_fast_paths`].

use super::{HeapState, ThreadHeap};
use crate::node::{NodeId, Partition};
use crate::size_class::SizeClass;

impl ThreadHeap {
    /// Sends the thread's allocations to `far` (a far node) from now on, or home again with
    /// `None`; returns the previous choice, for the scope's end.
    pub fn enter_far(&mut self, far: Option<NodeId>) -> Option<NodeId> {
        let previous = core::mem::replace(&mut self.far, far);
        self.set_fast_paths();
        previous
    }

    /// Opens the fast paths of an attached heap outside a far scope, and shuts them otherwise:
    /// the arena range the pops check their heads against (`arena_words`, empty when shut) and
    /// the partition lists' (`part_fast`, with partitions on and secure mode off).
    pub(super) fn set_fast_paths(&mut self) {
        let open = self.far.is_none() && self.state == HeapState::Active;
        self.arena_words = match self.heaps() {
            Some(heaps) if open => heaps.arena_range().1 >> 3,
            _ => 0,
        };
        self.part_fast = open && self.partitions != 0 && !self.secure;
    }

    /// The node this thread's allocations come from now: the far scope's node, else home.
    pub fn allocation_node(&self) -> NodeId {
        self.far.unwrap_or(self.node)
    }

    /// In a far scope: an object of `class` from the far node's bags (no thread cache: the
    /// near caches stay as they are for the scope's end); `None` outside one.
    pub(super) fn alloc_far(&mut self, class: SizeClass) -> Option<*mut u8> {
        let far = self.far?;
        if !self.run_attach_hook() {
            return Some(core::ptr::null_mut());
        }
        Some(match self.heaps() {
            Some(heaps) => heaps.alloc_single(far, Partition::DEFAULT, class),
            None => core::ptr::null_mut(),
        })
    }
}
