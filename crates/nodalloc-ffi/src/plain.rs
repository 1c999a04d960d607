//! The plain path of the C library: the thread's heap and its life (created on the first slow
//! path, retired at thread exit), allocation and free as the core knows them, `errno`. The entry
//! points (`lib.rs` and its siblings) call it after their fast paths miss; secure mode's layer
//! (`secure/`) wraps it and is called before it, never from it.

use crate::{callsite, foreign, screen, tls};
use core::ffi::{c_int, c_void};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicUsize, Ordering};
use nodalloc_core::raw::{self, class_of_malloc, Pointer, ThreadHeap};

/// malloc's alignment on x86_64 and aarch64 glibc (`MALLOC_ALIGNMENT`).
pub(crate) const MALLOC_ALIGN: usize = 16;

static EXIT_KEY: AtomicUsize = AtomicUsize::new(usize::MAX);

pub(crate) fn current_heap() -> *mut ThreadHeap {
    heap().map_or(null_mut(), |heap| heap as *mut ThreadHeap)
}

/// The calling thread's heap, if it has a live one.
#[inline(always)]
pub(crate) fn heap() -> Option<&'static mut ThreadHeap> {
    live(tls::get())
}

/// `heap` (the slot's value) as the thread's own heap, or `None` for the detached one.
#[inline(always)]
pub(crate) fn live(heap: *mut ThreadHeap) -> Option<&'static mut ThreadHeap> {
    if tls::is_detached(heap) {
        None
    } else {
        // SAFETY: a slot value other than the detached heap is this thread's pooled heap, used
        // by no one else.
        Some(unsafe { &mut *heap })
    }
}

/// The heap for a slow path: creates the thread's heap on its first call.
#[cold]
#[inline(never)]
pub(crate) fn heap_or_create() -> Option<&'static mut ThreadHeap> {
    heap_or_create_with(raw::BindBase::Current)
}

/// As [`heap_or_create`]; `base` says what the thread's binding starts from: the process's
/// start-up mask when its mask is known to be the one nodalloc set on its creator, none when
/// the program chose it.
pub(crate) fn heap_or_create_with(base: raw::BindBase) -> Option<&'static mut ThreadHeap> {
    if let Some(heap) = heap() {
        return Some(heap);
    }
    if tls::is_retired() {
        return None;
    }
    foreign::remember_startup_mappings();
    let heap = raw::take_heap()?;
    heap.set_bind_base(base);
    // Attaching may re-enter malloc (binding, the first instance creation registering hooks);
    // those nested calls run without a heap, on the detached path.
    heap.run_attach_hook();
    if !tls::is_detached(tls::get()) {
        // A nested call created a heap meanwhile: keep that one.
        raw::recycle_heap(heap);
        return heap_or_create();
    }
    tls::set(heap);
    register_exit(heap);
    Some(heap)
}

fn register_exit(heap: *mut ThreadHeap) {
    let mut key = EXIT_KEY.load(Ordering::Acquire);
    if key == usize::MAX {
        let mut new_key: libc::pthread_key_t = 0;
        // SAFETY: pthread_key_create writes a key; the destructor lives for the process.
        if unsafe { libc::pthread_key_create(&mut new_key, Some(thread_exit)) } != 0 {
            return;
        }
        key = match EXIT_KEY.compare_exchange(
            usize::MAX,
            new_key as usize,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => new_key as usize,
            Err(existing) => {
                // SAFETY: the key we made is unused.
                unsafe { libc::pthread_key_delete(new_key) };
                existing
            }
        };
    }
    // SAFETY: `key` is live; the value is this thread's heap.
    unsafe { libc::pthread_setspecific(key as libc::pthread_key_t, heap as *const c_void) };
}

/// What a thread's exit runs before its heap retires, if a layer above set it (secure mode's
/// quarantine flush, which frees through this path): a `fn()` stored as its address, 0 for none.
static BEFORE_RETIRE: AtomicUsize = AtomicUsize::new(0);

/// Has every thread's exit run `hook` before its heap retires (see [`BEFORE_RETIRE`]).
pub(crate) fn run_before_retire(hook: fn()) {
    BEFORE_RETIRE.store(hook as usize, Ordering::Release);
}

extern "C" fn thread_exit(heap: *mut c_void) {
    if heap.is_null() || tls::get() != heap as *mut ThreadHeap {
        return;
    }
    let hook = BEFORE_RETIRE.load(Ordering::Acquire);
    if hook != 0 {
        // SAFETY: a non-zero value is a `fn()` that `run_before_retire` stored.
        let hook: fn() = unsafe { core::mem::transmute::<usize, fn()>(hook) };
        hook();
    }
    tls::retire();
    // SAFETY: the slot held this heap, which only this (exiting) thread used; the thread is now
    // retired, so it never touches the heap again.
    raw::recycle_heap(unsafe { &mut *(heap as *mut ThreadHeap) });
}

pub(crate) fn set_errno(value: c_int) {
    // SAFETY: __errno_location is the calling thread's errno slot.
    unsafe { *libc::__errno_location() = value };
}

/// An allocation at `align` for a call from `site` (with the caller's `frame` pointer; see `callsite.rs`),
/// without secure mode's trailer (its callers add it).
pub(crate) fn allocate_at(size: usize, align: usize, site: usize, frame: usize) -> *mut c_void {
    handed_out(raw::alloc(entered_heap(size, site, frame), size, align))
}

/// [`allocate_at`] as a large block whatever `size` is (`realloc`'s growing blocks, see
/// [`raw::alloc_span`]).
pub(crate) fn span_at(size: usize, site: usize, frame: usize) -> *mut c_void {
    handed_out(raw::alloc_span(
        entered_heap(size, site, frame),
        size,
        MALLOC_ALIGN,
    ))
}

/// The thread's heap (created if need be) with the call site and the caller of an allocation
/// of `size` from `site` entered.
fn entered_heap(size: usize, site: usize, frame: usize) -> Option<&'static mut ThreadHeap> {
    let heap = heap_or_create()?;
    heap.enter_call_site(callsite::resolve(site, frame));
    heap.enter_caller(nodalloc_core::raw::Caller {
        ret: site,
        frame,
        size,
    });
    Some(heap)
}

/// `malloc` for a call from `site`, for the entry points that allocate a block of their own
/// (`realloc`, the aligned ones): the block goes to their caller's partition.
pub(crate) fn malloc_at(size: usize, site: usize, frame: usize) -> *mut c_void {
    match (class_of_malloc(size), heap_or_create()) {
        (Some(class), Some(heap)) => {
            heap.enter_call_site(callsite::resolve(site, frame));
            heap.enter_caller(nodalloc_core::raw::Caller {
                ret: site,
                frame,
                size,
            });
            let p = heap.alloc_cached(class);
            handed_out(if p.is_null() {
                heap.alloc_slow(class)
            } else {
                p
            })
        }
        _ => allocate_at(size, MALLOC_ALIGN, site, frame),
    }
}

/// What every allocation path returns: ENOMEM for null, else the block with its double-free
/// mark cleared.
pub(crate) fn handed_out(p: *mut u8) -> *mut c_void {
    if p.is_null() {
        set_errno(libc::ENOMEM);
    } else {
        screen::clear_mark(p);
    }
    p as *mut c_void
}

/// `free` of a block as the core knows it: by its class, to the thread's cache or the node heap
/// (secure mode's layer calls it for blocks leaving its quarantine).
///
/// # Safety
/// C's `free`: `ptr` is not null.
pub(crate) unsafe fn free_core(ptr: *mut u8) {
    match raw::classify(ptr) {
        Ok(Pointer::Foreign) => foreign::free(ptr),
        // SAFETY: a live nodalloc block the caller gives up, of this class and node.
        Ok(Pointer::Small { class, origin }) => unsafe {
            screen::free_classified(heap_or_create(), ptr, class, origin)
        },
        Ok(Pointer::Large { .. }) => raw::free_large(heap_or_create(), ptr),
        // SAFETY: a live block of a heap, which the caller gives up.
        Ok(Pointer::Owned { .. }) => unsafe { raw::free_owned(ptr) },
        Err(misuse) => raw::report_misuse(ptr, misuse),
    }
}

/// Usable bytes of a live block, aborting on a pointer nodalloc did not hand out.
pub(crate) fn usable(ptr: *mut u8) -> Option<usize> {
    usable_and_size_kind(ptr).map(|(bytes, _)| bytes)
}

/// [`usable`], and whether the block is a large one (whole pages of a span of its own) rather
/// than an object of a size class; `None` for a block from before nodalloc started.
pub(crate) fn usable_and_size_kind(ptr: *mut u8) -> Option<(usize, bool)> {
    match raw::classify(ptr) {
        Ok(Pointer::Small { class, .. }) => Some((class.usable(), false)),
        Ok(Pointer::Large { bytes }) => Some((bytes, true)),
        Ok(Pointer::Owned { bytes, large }) => Some((bytes, large)),
        Ok(Pointer::Foreign) => None,
        Err(misuse) => raw::report_misuse(ptr, misuse),
    }
}
