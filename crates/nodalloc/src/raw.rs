//! The operations a face other than `GlobalAlloc` needs: the C library (`libnodalloc.so`)
//! keeps its own initial-exec thread-local pointer to a pooled [`ThreadHeap`] and frees without
//! a size, so it needs pointer classification, detached paths for threads without a heap, and
//! the extras of its header. Not a stable API: it exists for the project's own faces.

use crate::global::{existing_instance, instance};
use crate::node::{report, Misuse, NodeHeaps};
use crate::size_class::{class_of, SizeClass};
use core::ptr::null_mut;
use core::sync::atomic::Ordering;

pub use crate::node::Misuse as PointerMisuse;
pub use crate::thread::{HeapState, ThreadHeap};

/// A fresh pooled thread heap (it binds its thread and attaches at its first slow path).
pub fn take_heap() -> Option<&'static mut ThreadHeap> {
    crate::global::take_pooled_heap()
}

/// Returns a thread's heap at thread exit; the thread must not use it afterwards.
pub fn recycle_heap(heap: &'static mut ThreadHeap) {
    crate::global::recycle_heap(heap)
}

/// What a pointer is, for `free` and `malloc_usable_size` without a size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pointer {
    /// A small object (at an object boundary) of `origin`'s region.
    Small { class: SizeClass, origin: usize },
    /// A large object of `bytes` usable bytes.
    Large { bytes: usize },
    /// Not in nodalloc's heap at all (or nodalloc has not started).
    Foreign,
}

/// Classifies `ptr`, or names the misuse (inside the heap but not a live object's start).
pub fn classify(ptr: *const u8) -> Result<Pointer, Misuse> {
    let Some(heaps) = existing_instance() else {
        return Ok(Pointer::Foreign);
    };
    let address = ptr as usize;
    let Some(origin) = heaps.arena.origin_of(address) else {
        return Ok(Pointer::Foreign);
    };
    let tag = heaps
        .arena
        .tag_checked(address)
        .ok_or(Misuse::InvalidPointer)?;
    if tag.is_bag() {
        let map = heaps.arena.map();
        let start = map.address_of(map.unit_of(address) - tag.offset_units());
        if !tag.class().is_object_start(address - start) {
            return Err(Misuse::InvalidPointer);
        }
        return Ok(Pointer::Small {
            class: tag.class(),
            origin,
        });
    }
    heaps
        .large_usable(address)
        .map(|bytes| Pointer::Large { bytes })
}

/// Aborts naming the pointer (`free(): invalid pointer 0x…` or `double free of 0x…`).
pub fn report_misuse(ptr: *const u8, misuse: Misuse) -> ! {
    report(ptr as *mut u8, misuse)
}

/// Allocates `size` bytes at `align` for a thread whose heap is `heap` (or `None` for a thread
/// without one: early start-up, or after its heap was retired). Null when no memory is left.
pub fn alloc(heap: Option<&mut ThreadHeap>, size: usize, align: usize) -> *mut u8 {
    let Some(heaps) = instance() else {
        return null_mut();
    };
    match (class_of(size, align), heap) {
        (Some(class), Some(heap)) if heap.state != HeapState::Retired => {
            let object = heap.alloc_cached(class);
            if object.is_null() {
                heap.alloc_slow(class)
            } else {
                object
            }
        }
        (Some(class), _) => heaps.alloc_single(current_node_hint(heaps), class),
        (None, Some(heap)) if heap.state != HeapState::Retired => {
            heap.run_attach_hook();
            heap.check_home();
            heap.tick();
            heaps.alloc_large(heap.node(), size, align)
        }
        (None, _) => heaps.alloc_large(current_node_hint(heaps), size, align),
    }
}

fn current_node_hint(heaps: &NodeHeaps) -> usize {
    crate::os::current_cpu()
        .map(|cpu| heaps.arena.topology.node_of_cpu(cpu))
        .unwrap_or(0)
}

/// True when a large object just returned by [`alloc`] is known to read as zero.
pub fn large_is_zeroed(ptr: *const u8) -> bool {
    match existing_instance() {
        // SAFETY: the caller just received `ptr` as a large object.
        Some(heaps) if heaps.arena.contains(ptr as usize) => unsafe {
            heaps.large_is_zeroed(ptr as usize)
        },
        Some(_) => false,
        None => false,
    }
}

/// Frees what [`classify`] found to be a small object or a large one.
///
/// # Safety
/// `ptr` must be a live object of nodalloc that the caller gives up, classified as `kind`.
pub unsafe fn free_classified(heap: Option<&mut ThreadHeap>, ptr: *mut u8, kind: Pointer) {
    let Some(heaps) = existing_instance() else {
        return;
    };
    match kind {
        Pointer::Small { class, origin } => match heap {
            // SAFETY: forwarded contract.
            Some(heap) if heap.state == HeapState::Active || heap.state == HeapState::Fresh => unsafe {
                heap.free_classified(ptr, class, origin)
            },
            // SAFETY: forwarded contract.
            _ => unsafe { heaps.free_single(origin, class, ptr) },
        },
        Pointer::Large { .. } => {
            heaps.free_large(ptr as usize);
            if let Some(heap) = heap {
                heap.tick();
            }
        }
        Pointer::Foreign => {}
    }
}

/// Resizes a large object in place; false (nothing changed) if it cannot.
pub fn resize_large_in_place(ptr: *mut u8, new_size: usize) -> bool {
    existing_instance().is_some_and(|heaps| heaps.resize_large_in_place(ptr as usize, new_size))
}

/// Allocates on a chosen node (see [`crate::NodAlloc::alloc_on_node`]).
pub fn alloc_on_node(size: usize, align: usize, node: usize) -> *mut u8 {
    match core::alloc::Layout::from_size_align(size, align) {
        Ok(layout) => crate::NodAlloc::new().alloc_on_node(layout, node),
        Err(_) => null_mut(),
    }
}

/// Tells `stats()` how to find the calling thread's heap (the face's own thread-local), so the
/// caller's counters are published before a snapshot. `hook` returns null when it has none.
pub fn set_current_heap_hook(hook: fn() -> *mut ThreadHeap) {
    crate::global::CURRENT_HEAP_HOOK.store(hook as usize, Ordering::Release);
}

/// Sends the `NODALLOC_STATS=1` exit report to `fd` instead of 2.
pub fn set_stats_fd(fd: i32) {
    crate::global::STATS_FD.store(fd, Ordering::Relaxed);
}

/// Starts the allocator now (reading the options), rather than at the first allocation.
pub fn start() -> bool {
    instance().is_some()
}

/// The number of usable nodes (starting the allocator if needed).
pub fn node_count() -> usize {
    instance().map_or(0, |heaps| heaps.arena.node_count())
}
