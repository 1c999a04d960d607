//! The door for faces other than `GlobalAlloc`: the C library (`libnodalloc.so`) and the CLI.
//!
//! The C library keeps its own initial-exec thread-local pointer to a pooled [`ThreadHeap`] and
//! frees without a size, so it needs pointer classification, paths for threads without a heap,
//! and the extras of its header; everything C-specific (errno, the double-free screen, foreign
//! pointers) stays in that crate. Not a stable API: it exists for the project's own faces.

use crate::instance::{self, Instance};
use crate::size_class::class_of;
use core::ptr::null_mut;

pub use crate::bind::BindBase;
pub use crate::instance::background::PthreadCreate;
pub use crate::instance::Pointer;
pub use crate::node::Misuse as PointerMisuse;
pub use crate::node::{BlockAt, NodeId, OwnedId, OwnedRefusal, OwnedStats, Partition, NAME_BYTES};
pub use crate::os::cpuset::CpuSet;
pub use crate::os::options::{parse_size, switch_in_env};
pub use crate::os::{
    copy_unchecked, fill_unchecked, mapping_of, mix, process_secret, read_file, read_file_uninit,
    thread_affinity,
};
pub use crate::size_class::{class_of_malloc, ClassSlot, SizeClass};
pub use crate::thread::{Caller, MallocMiss, Screen, ThreadHeap};

/// True when heap profiling is on (`crate::profile`).
pub fn profile_on() -> bool {
    crate::profile::is_on()
}

/// Writes the heap profile to `path` without allocating: `Err(errno)` when it cannot.
pub fn profile_dump(path: &core::ffi::CStr) -> Result<(), i32> {
    crate::profile::dump_to(path)
}

/// A fresh pooled thread heap (it binds its thread and attaches at its first slow path).
pub fn take_heap() -> Option<&'static mut ThreadHeap> {
    instance::take_pooled_heap()
}

/// Returns a thread's heap at thread exit; the thread must not use it afterwards.
pub fn recycle_heap(heap: &'static mut ThreadHeap) {
    instance::recycle_heap(heap)
}

/// [`crate::purge`] for a face with thread heaps of its own: flushes `heap` (the calling
/// thread's, `None` for a thread without one), then returns every cached free object to its
/// bags and every free page to the OS.
pub fn purge(heap: Option<&mut ThreadHeap>) {
    if let Some(instance) = Instance::existing() {
        instance.purge(heap);
    }
}

/// Classifies `ptr`, or names the misuse (inside the heap but not a live object's start).
pub fn classify(ptr: *const u8) -> Result<Pointer, PointerMisuse> {
    match Instance::existing() {
        Some(instance) => instance.classify(ptr),
        None => Ok(Pointer::Foreign),
    }
}

/// Aborts naming the pointer (`free(): invalid pointer 0x…` or `free(): double free of 0x…`).
pub fn report_misuse(ptr: *const u8, misuse: PointerMisuse) -> ! {
    instance::report_misuse(ptr, misuse)
}

/// Allocates `size` bytes at `align` for a thread whose heap is `heap` (or `None` for a thread
/// without one: early start-up, or after its heap was retired). Null when no memory is left.
pub fn alloc(heap: Option<&mut ThreadHeap>, size: usize, align: usize) -> *mut u8 {
    let Some(instance) = Instance::get() else {
        return null_mut();
    };
    match (class_of(size, align), heap) {
        (Some(class), Some(heap)) if !heap.is_retired() => {
            let object = heap.alloc_cached(class);
            if object.is_null() {
                heap.alloc_slow(class)
            } else {
                object
            }
        }
        (Some(class), _) => instance.alloc_single(None, class),
        (None, heap) => instance.alloc_large(heap, size, align),
    }
}

/// Allocates `size` bytes at `align` as a large block, a span of its own, whatever its size:
/// for a block that `realloc` keeps growing, which a span lets grow in place into the units
/// after it, where an object of a class moves to the next class at every step and leaves a
/// freed object in each class it passed through. Null when no memory is left.
pub fn alloc_span(heap: Option<&mut ThreadHeap>, size: usize, align: usize) -> *mut u8 {
    match Instance::get() {
        Some(instance) => instance.alloc_large(heap, size, align),
        None => null_mut(),
    }
}

/// Has every object of the bags created (small objects) or carved (big ones) from now on carry
/// `mark` in its second word until it is handed out, as a freed block of the C face does (its
/// double-free screen, see `node::bags::CARVE_MARK`); 0 turns it off. Not in secure mode,
/// which carves without it.
pub fn mark_carved_objects(mark: usize) {
    crate::node::CARVE_MARK.store(mark, core::sync::atomic::Ordering::Relaxed);
}

/// True when a large object just returned by [`alloc`] is known to read as zero.
pub fn large_is_zeroed(ptr: *const u8) -> bool {
    match Instance::existing() {
        // SAFETY: the caller just received `ptr` as a large object (checked to be in the heap).
        Some(instance) if instance.origin_of(ptr as usize).is_some() => unsafe {
            instance.large_is_zeroed(ptr as usize)
        },
        _ => false,
    }
}

/// A free of `ptr` is starting: if it is a heap-profile sample that stayed in its bag, its share
/// leaves the profile's live counts. Cheap and safe for any pointer (one load with profiling
/// off); the C face's general free path calls it first.
#[inline]
pub fn forget_sample(ptr: *const u8) {
    crate::profile::in_bag::forget(ptr as usize)
}

/// True when `ptr` lies in the memory of first-class heaps: a heap's block (or a misuse),
/// which [`free_owned`] gives back to its heap.
pub fn is_owned(ptr: *const u8) -> bool {
    Instance::existing().is_some_and(|instance| instance.owned().is_owned(ptr as usize))
}

/// Frees any live block nodalloc handed out (a global heap's or a first-class heap's) through
/// the general path, or aborts naming a pointer that is none (null is ignored).
///
/// # Safety
/// `ptr` is null or a live block the caller gives up (a pointer that is no block is reported,
/// but one freed already may be taken for the block carved there since).
#[cfg(feature = "std")]
pub unsafe fn free_any(ptr: *mut u8) {
    if ptr.is_null() {
        return;
    }
    let Some(instance) = Instance::existing() else {
        report_misuse(ptr, PointerMisuse::InvalidPointer);
    };
    match instance.classify(ptr) {
        Ok(Pointer::Owned { .. }) => instance.free_owned(ptr),
        Ok(Pointer::Small { class, origin }) => crate::instance::with_heap(|heap| {
            // SAFETY: a live small block of `class` and `origin` the caller gives up.
            unsafe { free_small(Some(heap), ptr, class, origin) }
        }),
        Ok(Pointer::Large { .. }) => {
            crate::instance::with_heap(|heap| instance.free_large(Some(heap), ptr))
        }
        Ok(Pointer::Foreign) => report_misuse(ptr, PointerMisuse::InvalidPointer),
        Err(misuse) => report_misuse(ptr, misuse),
    }
}

/// Frees a block [`is_owned`] placed in the memory of first-class heaps back to its heap, or
/// aborts naming a pointer that is no block there. The C face's path for such blocks: unlike
/// [`free_any`], it never reaches the crate face's thread heap, so a library that links this
/// and not `free_any` keeps that heap's initial image out of its TLS block (which glibc copies
/// into every thread the program creates).
///
/// # Safety
/// `ptr` is a live block of a first-class heap that the caller gives up.
pub unsafe fn free_owned(ptr: *mut u8) {
    match Instance::existing() {
        Some(instance) => instance.free_owned(ptr),
        None => report_misuse(ptr, PointerMisuse::InvalidPointer),
    }
}

/// Frees what [`classify`] found to be a large object, then runs `heap`'s upkeep.
pub fn free_large(heap: Option<&mut ThreadHeap>, ptr: *mut u8) {
    if let Some(instance) = Instance::existing() {
        instance.free_large(heap, ptr);
    }
}

/// Frees a small object of `origin` without the thread's cache (no heap, or not this node's).
///
/// # Safety
/// `ptr` must be a live object of `class` from `origin`'s region that the caller gives up.
pub unsafe fn free_small(
    heap: Option<&mut ThreadHeap>,
    ptr: *mut u8,
    class: SizeClass,
    origin: NodeId,
) {
    match heap {
        // SAFETY: forwarded contract.
        Some(heap) if !heap.is_retired() => unsafe { heap.free(ptr, class) },
        _ => {
            if let Some(instance) = Instance::existing() {
                // SAFETY: forwarded contract.
                unsafe { instance.free_single(origin, class, ptr) }
            }
        }
    }
}

/// Resizes a large object in place; false (nothing changed) if it cannot. `heap` is the
/// calling thread's, if it has one: the heap profile counts the resize there as an allocation
/// of `new_size` (with the caller it entered).
pub fn resize_large_in_place(heap: Option<&mut ThreadHeap>, ptr: *mut u8, new_size: usize) -> bool {
    Instance::existing().is_some_and(|instance| instance.resize_large_in_place(heap, ptr, new_size))
}

/// Allocates on a chosen node (see [`crate::NodAlloc::alloc_on_node`]).
pub fn alloc_on_node(size: usize, align: usize, node: usize) -> *mut u8 {
    match core::alloc::Layout::from_size_align(size, align) {
        Ok(layout) => crate::NodAlloc::new().alloc_on_node(layout, node),
        Err(_) => null_mut(),
    }
}

/// The node far-memory requests of the thread owning `heap` go to (see
/// [`crate::far_node`]); `None` without far memory or before the allocator started.
pub fn far_node(heap: Option<&ThreadHeap>) -> Option<usize> {
    Instance::existing()?
        .far_node_for(heap)
        .map(|node| node.index())
}

/// True when a request never leaves its memory tier (`NODALLOC_TIER_FULL=fail`): a far request
/// the far tier cannot serve fails rather than coming near.
pub fn tier_bound() -> bool {
    Instance::existing().is_some_and(|instance| instance.tier_bound())
}

/// Tells `stats()` how to find the calling thread's heap (the face's own thread-local), so the
/// caller's counters are published before a snapshot. `hook` returns null when it has none.
pub fn set_current_heap_hook(hook: fn() -> *mut ThreadHeap) {
    instance::set_current_heap_hook(hook)
}

/// Sends the `NODALLOC_STATS=1` exit report to `fd` instead of 2.
pub fn set_stats_fd(fd: i32) {
    instance::set_stats_fd(fd)
}

/// Starts the allocator now (reading the options), rather than at the first allocation.
pub fn start() -> bool {
    Instance::get().is_some()
}

/// The number of usable nodes (starting the allocator if needed).
pub fn node_count() -> usize {
    Instance::get().map_or(0, |instance| instance.node_count())
}

/// `NODALLOC_CALLSITE_DEPTH`: how many frames up from `malloc` the C library's call site is
/// (1 before the allocator started).
pub fn callsite_depth() -> usize {
    instance::callsite_depth()
}

/// The call-site partition of the small block at `ptr` (`None` with partitions off, or for
/// anything but a small block of this allocator).
pub fn partition_of(ptr: *const u8) -> Option<usize> {
    Instance::existing()?.partition_of(ptr)
}

/// The first call site recorded for `partition` (0 for none).
pub fn partition_site(partition: usize) -> usize {
    Instance::existing().map_or(0, |instance| instance.partition_site(partition))
}

/// Aborts: the C++ operator `name` found no memory and no C++ runtime after this library to
/// run the new-handlers and throw `std::bad_alloc`.
pub fn fatal_out_of_memory(name: &core::ffi::CStr) -> ! {
    crate::os::fatal(|w| {
        w.str("out of memory in ")
            .bytes(name.to_bytes())
            .str(", and no C++ runtime to throw std::bad_alloc");
    })
}

/// Aborts with `nodalloc: <what> 0x…` naming `ptr`: a misuse the face found (secure mode's
/// checks of a block's trailer and fill).
pub fn report_corruption(what: &str, ptr: *const u8) -> ! {
    crate::os::fatal(|w| {
        w.str(what).str(" ").hex(ptr as usize);
    })
}

/// True when the environment turns the C library's bound on copies on
/// (`NODALLOC_CHECK_COPIES=1`), read without starting the allocator.
pub fn copy_checks_requested() -> bool {
    crate::os::options::copy_checks_from_env()
}

/// True when secure mode is on: the environment's choice, read without starting the allocator
/// (which reads the same variable when it starts).
pub fn secure_requested() -> bool {
    crate::os::options::secure_from_env()
}

/// The heap block whose space holds `ptr` (a bag's object, or a large block within its first
/// 2 MiB): its start, its slot's bytes, and whether the program may hold it (in secure mode, a
/// small object only while the allocation bitmap says so); `None` for an address outside them.
/// For checks of a write's bounds (secure mode's `memcpy`).
pub fn block_containing(ptr: *const u8) -> Option<BlockAt> {
    Instance::existing()?.block_containing(ptr as usize)
}

/// The start of the object that a write of `n` bytes at `dst` runs out of, when `dst` lies in
/// an object of a size class and the write goes past the object's usable bytes; `None`
/// otherwise (outside the heap, large blocks, before the allocator started). No call, a range
/// test outside the heap: the C library's `memcpy` asks it on every call when bounded.
#[inline(always)]
pub fn copy_overrun(dst: *const u8, n: usize) -> Option<*mut u8> {
    crate::node::copies::overrun_object(dst as usize, n).map(|start| start as *mut u8)
}

/// The object just before the small object at `ptr` in its bag; `None` for the first object of
/// a bag, or when `ptr` is no small object.
pub fn object_before(ptr: *const u8) -> Option<*mut u8> {
    Instance::existing()?.object_before(ptr as usize)
}

/// Starts the maintenance thread (`NODALLOC_BACKGROUND=1`) with `create` if none runs; for a
/// face at a safe point (outside any allocator call). True when one runs afterwards.
pub fn start_background(create: PthreadCreate) -> bool {
    Instance::get().is_some() && instance::background::start(create)
}

/// Creates a first-class heap (see [`crate::Heap`]) on `node`, with a limit of `limit` bytes
/// (0: none) and the name `name`. The face names the node: the calling thread's is the one its
/// own thread heap was bound to.
pub fn heap_new(node: usize, limit: usize, name: &[u8]) -> Result<OwnedId, OwnedRefusal> {
    let instance = Instance::get().ok_or(OwnedRefusal::NoMemory)?;
    instance.owned().owned_create(NodeId(node), limit, name)
}

/// A block of `size` bytes at `align` from heap `id` (zeroed when `zero`); null when the heap
/// has no room. Aborts, naming the heap, for a handle whose heap was destroyed.
pub fn heap_alloc(id: OwnedId, size: usize, align: usize, zero: bool) -> *mut u8 {
    match Instance::existing() {
        Some(instance) => instance.owned().owned_alloc(id, size, align, zero),
        None => null_mut(),
    }
}

/// Destroys heap `id` and every block it holds. Aborts, naming the heap, if it was destroyed
/// already.
pub fn heap_destroy(id: OwnedId) {
    match Instance::existing() {
        Some(instance) => instance.owned().owned_drop(id),
        None => crate::instance::report_misuse(null_mut(), PointerMisuse::InvalidPointer),
    }
}

/// What heap `id` holds.
pub fn heap_stats(id: OwnedId) -> OwnedStats {
    match Instance::existing() {
        Some(instance) => instance.owned().owned_stats(id),
        None => OwnedStats::default(),
    }
}

/// The heap holding the live block `ptr`, if a first-class heap does.
pub fn heap_of(ptr: *const u8) -> Option<OwnedId> {
    Instance::existing()?.owned().owned_of(ptr as usize)
}

/// Heap `id`'s name (cut to [`NAME_BYTES`]) and its length.
pub fn heap_name(id: OwnedId) -> ([u8; NAME_BYTES], usize) {
    let mut name = [0u8; NAME_BYTES];
    let len = match Instance::existing() {
        Some(instance) => instance.owned().owned_name(id, &mut name),
        None => 0,
    };
    (name, len)
}
