//! The double-free screen of the C face: `free` cannot be told a size, so a second `free` of
//! a block still in the thread's cache would link it in twice. Every cached block carries
//! [`FREED_MARK`] in its second word (every block of this face is at least 16 bytes); a `free`
//! that finds the mark suspects a double free and confirms it with a bounded walk of the cache
//! (the mark alone may be program data). Every allocation clears the mark on the way out.
//!
//! The core's hit paths apply the screen ([`SCREEN`], handed to `ThreadHeap::free_hit`, whose
//! pops clear the mark): one load, one compare and one store on the free hit, one store on the
//! malloc hit. This file keeps the screen's judgement ([`free_marked`]) and its slow-path
//! forms (classified frees, call-site partitions' lists, the slow paths' allocations).

use nodalloc_core::raw::{self, NodeId, Partition, PointerMisuse, Screen, SizeClass, ThreadHeap};

/// Written into the second word of a block this face frees. Any value works (a match is
/// confirmed before anything is reported); this one is unlikely as program data, and
/// sign-extended from 32 bits, so the compare and the store take it as an immediate (no
/// 64-bit constant to load first).
pub(crate) const FREED_MARK: usize = 0xFFFF_FFFF_9E37_79B9;

/// Clears the mark of a block being handed out, so freeing it once more is not a suspicion.
#[inline(always)]
pub(crate) fn clear_mark(p: *mut u8) {
    // SAFETY: `p` is a block of this face just handed out, the caller's.
    unsafe { Screen::clear(p) };
}

/// The screen as the core's hit paths apply it ([`ThreadHeap::free_hit`]).
pub(crate) const SCREEN: Screen = Screen {
    mark: FREED_MARK,
    on_marked: free_marked,
};

/// A small block of `origin` that the slow path classified: screened and cached when the heap
/// caches that node's blocks, else freed through the core (other nodes, secure mode, a heap
/// not attached or retired).
///
/// # Safety
/// `ptr` is a live block of `class` from `origin`'s region that the caller gives up.
pub(crate) unsafe fn free_classified(
    heap: Option<&mut ThreadHeap>,
    ptr: *mut u8,
    class: SizeClass,
    origin: NodeId,
) {
    match heap {
        // SAFETY: forwarded contract; a block of this heap's node.
        Some(heap) if heap.caches_node(origin) => {
            // SAFETY: forwarded contract; a block of this heap's node.
            unsafe { heap.free_screened(ptr, class.slot(), SCREEN) };
            // The heap profile's lean mode frees here (its lists are kept under budget).
            heap.lean_enforce(class);
        }
        // SAFETY: forwarded contract.
        Some(heap) if heap.partitions_node(origin) => unsafe {
            screen_partitioned(heap, ptr, class)
        },
        // SAFETY: forwarded contract.
        heap => unsafe { raw::free_small(heap, ptr, class, origin) },
    }
}

/// The screen for a heap with call-site partitions, whose lists the core keeps (the
/// block goes to the list of its partition).
///
/// # Safety
/// As for [`ThreadHeap::free_screened`].
#[cold]
unsafe fn screen_partitioned(heap: &mut ThreadHeap, ptr: *mut u8, class: SizeClass) {
    // SAFETY: forwarded contract.
    unsafe { screen(heap, ptr, class) };
    // SAFETY: forwarded contract.
    unsafe { heap.free(ptr, class) };
}

/// The free path of a heap with call-site partitions for a small block of its node, whose
/// class and partition [`ThreadHeap::partition_class_of`] found: screened, then pushed onto
/// its partition's list.
///
/// # Safety
/// As for [`ThreadHeap::free_screened`], and `part` is the block's partition.
#[inline(always)]
pub(crate) unsafe fn free_partitioned(
    heap: &mut ThreadHeap,
    ptr: *mut u8,
    class: SizeClass,
    part: Partition,
) {
    // SAFETY: a block of this face, which the caller gives up.
    if !unsafe { SCREEN.mark(ptr) } {
        // SAFETY: forwarded contract (a tail call: the fast path keeps no frame).
        return unsafe { free_marked_partitioned(heap, ptr, class, part) };
    }
    // SAFETY: forwarded contract.
    unsafe { heap.partition_push(ptr, class, part) };
}

/// [`free_marked`] for [`free_partitioned`].
///
/// # Safety
/// As for [`free_partitioned`].
#[cold]
#[inline(never)]
unsafe fn free_marked_partitioned(
    heap: &mut ThreadHeap,
    ptr: *mut u8,
    class: SizeClass,
    part: Partition,
) {
    if let Some(misuse) = heap.find_freed(class, ptr) {
        raw::report_misuse(ptr, misuse);
    }
    // SAFETY: forwarded contract; the mark is already in place.
    unsafe { heap.partition_push(ptr, class, part) };
}

/// Reports a double free of a block still in the heap's cache, and marks the block as freed.
///
/// # Safety
/// `ptr` is a small block of at least 16 bytes, 8-aligned, that the caller gives up.
#[inline(always)]
unsafe fn screen(heap: &ThreadHeap, ptr: *mut u8, class: SizeClass) {
    // SAFETY: contract above.
    if !unsafe { SCREEN.mark(ptr) } {
        if let Some(misuse) = heap.find_freed(class, ptr) {
            raw::report_misuse(ptr, misuse);
        }
    }
}

/// A block that carries the mark: a double free if it is in the cache (reported), else
/// program data that looked like the mark (freed as usual). The class is looked up again
/// rather than passed: the fast path then keeps no register for it. The block comes first, in
/// the register it arrived in at `free`.
///
/// # Safety
/// As for [`ThreadHeap::free_screened`].
#[cold]
#[inline(never)]
unsafe extern "C" fn free_marked(ptr: *mut u8, heap: &mut ThreadHeap) {
    let class = match raw::classify(ptr) {
        Ok(raw::Pointer::Small { class, .. }) => class,
        Ok(_) => raw::report_misuse(ptr, PointerMisuse::InvalidPointer),
        Err(misuse) => raw::report_misuse(ptr, misuse),
    };
    if let Some(misuse) = heap.find_freed(class, ptr) {
        raw::report_misuse(ptr, misuse);
    }
    // SAFETY: forwarded contract; the mark is already in place.
    unsafe { heap.free_local(ptr, class) };
}
