//! `libnodalloc.so` (and `libnodalloc.a`): nodalloc as the `malloc` of any Linux program.
//!
//! Exports every `malloc`-family function with glibc's semantics plus the `nodalloc_*` extras of
//! `include/nodalloc.h`. The face only translates: sizes and alignments are checked and mapped
//! to the core crate's operations, errors become `errno`.
//!
//! Each thread's heap pointer lives in an initial-exec TLS slot (see `tls.rs`): one `fs`-relative
//! load, no `__tls_get_addr` call. A thread without a heap points at a shared detached heap on
//! which every fast path misses; the slow path then creates the thread's heap on its first
//! call, or, once the thread has retired its heap at exit, serves later calls (from other
//! thread-exit destructors) from the node heaps directly.
#![deny(missing_docs)]

mod aligned;
mod callsite;
mod cxx;
mod extras;
mod foreign;
mod glibc;
mod screen;
mod secure;
mod threads;
mod tls;

use aligned::allocate_aligned;
use callsite::entry_stub;
use core::ffi::{c_int, c_void};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicUsize, Ordering};
use nodalloc_core::raw::{self, class_of_malloc, ClassSlot, Pointer, ThreadHeap};

/// malloc's alignment on x86_64 and aarch64 glibc (`MALLOC_ALIGNMENT`).
const MALLOC_ALIGN: usize = 16;

static EXIT_KEY: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Runs when the library is loaded, before the program's own constructors and `main`.
#[used]
#[link_section = ".init_array"]
static LOAD: extern "C" fn() = on_load;

/// Lets `stats()` find this face's thread heap. With `NODALLOC_STATS=1`, starts the allocator
/// now, so its exit report is registered before any of the program's exit handlers (it then
/// runs after them), and gives the report a duplicate of stderr, because programs such as
/// coreutils close fd 2 in their own exit handlers. A process that never allocates still
/// reports.
extern "C" fn on_load() {
    raw::set_current_heap_hook(current_heap);
    // The option's own grammar, read before the allocator starts (which reads it again).
    if raw::switch_in_env(c"NODALLOC_STATS") == Some(true) {
        // SAFETY: dup of our own stderr; F_DUPFD_CLOEXEC keeps it out of exec'd programs.
        let fd = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) };
        if fd >= 0 {
            raw::set_stats_fd(fd);
        }
        raw::start();
    }
}

fn current_heap() -> *mut ThreadHeap {
    heap().map_or(null_mut(), |heap| heap as *mut ThreadHeap)
}

/// The calling thread's heap, if it has a live one.
#[inline(always)]
fn heap() -> Option<&'static mut ThreadHeap> {
    live(tls::get())
}

/// `heap` (the slot's value) as the thread's own heap, or `None` for the detached one.
#[inline(always)]
fn live(heap: *mut ThreadHeap) -> Option<&'static mut ThreadHeap> {
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
fn heap_or_create() -> Option<&'static mut ThreadHeap> {
    heap_or_create_with(raw::BindBase::Current)
}

/// As [`heap_or_create`]; `base` says what the thread's binding starts from: the process's
/// start-up mask when its mask is known to be the one nodalloc set on its creator, none when
/// the program chose it.
fn heap_or_create_with(base: raw::BindBase) -> Option<&'static mut ThreadHeap> {
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

extern "C" fn thread_exit(heap: *mut c_void) {
    if heap.is_null() || tls::get() != heap as *mut ThreadHeap {
        return;
    }
    if secure::on() {
        secure::flush_thread();
    }
    tls::retire();
    // SAFETY: the slot held this heap, which only this (exiting) thread used; the thread is now
    // retired, so it never touches the heap again.
    raw::recycle_heap(unsafe { &mut *(heap as *mut ThreadHeap) });
}

fn set_errno(value: c_int) {
    // SAFETY: __errno_location is the calling thread's errno slot.
    unsafe { *libc::__errno_location() = value };
}

/// Allocation at `align` (a power of two, at least 16), with errno on failure. The slow paths
/// the fast ones call are `extern "C"`: they cannot unwind, so `malloc` and `free` need no
/// landing pad around the calls, keep no stack frame, and tail-call them.
extern "C" fn allocate(size: usize, align: usize) -> *mut c_void {
    if secure::on() {
        return secure::alloc(size, align, secure::Kind::Malloc, 0, 0);
    }
    handed_out(raw::alloc(heap_or_create(), size, align))
}

/// [`allocate`] for a call from `site` (with the caller's `frame` pointer; see `callsite.rs`),
/// without secure mode's trailer (its callers add it).
fn allocate_at(size: usize, align: usize, site: usize, frame: usize) -> *mut c_void {
    let mut heap = heap_or_create();
    if let Some(heap) = heap.as_deref_mut() {
        heap.enter_call_site(callsite::resolve(site, frame));
    }
    handed_out(raw::alloc(heap, size, align))
}

/// `malloc` for a call from `site`, for the entry points that allocate a block of their own
/// (`realloc`, the aligned ones): the block goes to their caller's partition.
fn malloc_at(size: usize, site: usize, frame: usize) -> *mut c_void {
    match (class_of_malloc(size), heap_or_create()) {
        (Some(class), Some(heap)) => {
            heap.enter_call_site(callsite::resolve(site, frame));
            let p = heap.alloc_cached(class);
            handed_out(if p.is_null() {
                heap.alloc_slow(class)
            } else {
                p
            })
        }
        _ => allocate(size, MALLOC_ALIGN),
    }
}

/// What every allocation path returns: ENOMEM for null, else the block with its double-free
/// mark cleared.
fn handed_out(p: *mut u8) -> *mut c_void {
    if p.is_null() {
        set_errno(libc::ENOMEM);
    } else {
        screen::clear_mark(p);
    }
    p as *mut c_void
}

/// `malloc`'s fast path for the entry points that allocate a block of `size` at the default
/// alignment (`calloc`, the aligned ones at 16 or less, C++'s plain `new`): a block of the
/// thread's cache with its double-free mark cleared, or null for them to take their call-site
/// stub (a miss, a size above the one-load lookup, secure mode and call-site partitions, whose
/// caches stay empty).
#[inline(always)]
pub(crate) fn pop_small(size: usize) -> *mut u8 {
    let heap = tls::get();
    // SAFETY: the slot holds this thread's heap or the detached one, both readable; the
    // reference ends with the lookup.
    match unsafe { &*heap }.slots().slot_of_small_malloc(size) {
        // SAFETY: the slot holds this thread's heap or the detached one.
        Some(class) => unsafe { pop_class(heap, class) },
        None => null_mut(),
    }
}

/// A block of `class` from the cache of `heap` with its double-free mark cleared, or null:
/// the pop of every allocation fast path of this face.
///
/// # Safety
/// `heap` is the thread's slot's value (its own heap or the detached one).
#[inline(always)]
unsafe fn pop_class(heap: *mut ThreadHeap, class: ClassSlot) -> *mut u8 {
    // SAFETY: the slot holds this thread's heap or the detached one.
    let p = unsafe { ThreadHeap::pop_cached(heap, class) };
    if !p.is_null() {
        screen::clear_mark(p);
    }
    p
}

/// # Safety
/// C's `malloc`.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    let heap = tls::get();
    // SAFETY: the slot holds this thread's heap or the detached one, both readable; the
    // reference ends with the lookup.
    match unsafe { &*heap }.slots().slot_of_small_malloc(size) {
        // SAFETY: forwarded contract.
        Some(class) => unsafe { malloc_class(heap, size, class) },
        None => malloc_medium(size),
    }
}

/// `malloc` of a size that is not small enough for the one-load class lookup: the same fast
/// path out of line, so `malloc` of small sizes has no branch to join.
#[inline(never)]
extern "C" fn malloc_medium(size: usize) -> *mut c_void {
    match class_of_malloc(size) {
        // SAFETY: `malloc`'s contract.
        Some(class) => unsafe { malloc_class(tls::get(), size, class.slot()) },
        None => allocate(size, MALLOC_ALIGN),
    }
}

/// The fast path of a `malloc` of `size`, whose class is `class`, on `heap` (the slot's value).
///
/// # Safety
/// C's `malloc`; `heap` is the thread's slot's value.
#[inline(always)]
unsafe fn malloc_class(heap: *mut ThreadHeap, size: usize, class: ClassSlot) -> *mut c_void {
    // SAFETY: forwarded contract.
    let p = unsafe { pop_class(heap, class) };
    if !p.is_null() {
        return p as *mut c_void;
    }
    // SAFETY: the stub passes its arguments on; a tail jump, so it reads `malloc`'s caller.
    unsafe { nodalloc_malloc_miss(size, heap as *mut c_void) }
}

entry_stub!(fn nodalloc_malloc_miss(size: usize, heap: *mut c_void) -> *mut c_void
    => malloc_slow, site: "rdx", frame: "rcx");

/// A `malloc` of `size` (a small class) that missed the cache of `heap` (the slot's value,
/// maybe detached), called from `site`. The class is looked up again rather than passed: the
/// fast path then keeps no register for it. With call-site partitions, the partition cache's
/// pop is tried first; everything else goes on to [`malloc_miss`] (a tail call, so this part
/// keeps no stack frame).
#[inline(never)]
extern "C" fn malloc_slow(
    size: usize,
    heap: *mut c_void,
    site: usize,
    frame: usize,
) -> *mut c_void {
    if callsite::is_direct() {
        if let (Some(heap), Some(class)) = (live(heap as *mut ThreadHeap), class_of_malloc(size)) {
            let p = heap.partition_pop(class, site);
            if !p.is_null() {
                screen::clear_mark(p);
                return p as *mut c_void;
            }
        }
    }
    malloc_miss(size, heap, site, frame)
}

#[cold]
#[inline(never)]
extern "C" fn malloc_miss(
    size: usize,
    heap: *mut c_void,
    site: usize,
    frame: usize,
) -> *mut c_void {
    if secure::on() {
        return secure::alloc(size, MALLOC_ALIGN, secure::Kind::Malloc, site, frame);
    }
    match (live(heap as *mut ThreadHeap), class_of_malloc(size)) {
        (Some(heap), Some(class)) => {
            let site = callsite::resolve(site, frame);
            let p = heap.partition_pop(class, site);
            if !p.is_null() {
                screen::clear_mark(p);
                return p as *mut c_void;
            }
            heap.enter_call_site(site);
            let p = heap.alloc_slow(class);
            if heap.took_untouched() {
                // Never written since its span was carved: no mark to clear, and a write
                // would fault its page in here rather than where the program touches it.
                return p as *mut c_void;
            }
            handed_out(p)
        }
        _ => allocate_at(size, MALLOC_ALIGN, site, frame),
    }
}

/// # Safety
/// C's `free`: `ptr` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    // Null is no block of any home region (which never starts at address 0): the slow path
    // sorts it out, and the fast path has no test of its own for it.
    // SAFETY: the slot holds this thread's heap or the detached one; the caller gives the
    // block up.
    if unsafe { screen::free_home(tls::get(), ptr as *mut u8) } {
        return;
    }
    // SAFETY: forwarded contract.
    unsafe { free_slow(ptr as *mut u8) }
}

/// A `free` the home fast path did not take (null among them). With call-site partitions, a
/// small block of the heap's node goes to its partition's list here (no stack frame: every
/// call is a tail call); everything else goes on to [`free_general`].
#[inline(never)]
unsafe extern "C" fn free_slow(ptr: *mut u8) {
    if ptr.is_null() {
        return;
    }
    if let Some(heap) = heap() {
        heap.check_moved();
        if let Some((class, part)) = heap.partition_class_of(ptr) {
            // SAFETY: a small block of this heap's node, which the caller gives up.
            return unsafe { screen::free_partitioned(heap, ptr, class, part) };
        }
    }
    // SAFETY: forwarded contract.
    unsafe { free_general(ptr) }
}

#[cold]
#[inline(never)]
unsafe extern "C" fn free_general(ptr: *mut u8) {
    if secure::on() {
        // SAFETY: forwarded contract.
        return unsafe { secure::free(ptr as *mut c_void, secure::Kind::Malloc, None) };
    }
    // SAFETY: forwarded contract.
    unsafe { free_core(ptr) }
}

/// `free` of a block as the core knows it: by its class, to the thread's cache or the node heap
/// (secure mode's layer calls it for blocks leaving its quarantine).
///
/// # Safety
/// C's `free`: `ptr` is not null.
unsafe fn free_core(ptr: *mut u8) {
    match raw::classify(ptr) {
        Ok(Pointer::Foreign) => foreign::free(ptr),
        // SAFETY: a live nodalloc block the caller gives up, of this class and node.
        Ok(Pointer::Small { class, origin }) => unsafe {
            screen::free_classified(heap_or_create(), ptr, class, origin)
        },
        Ok(Pointer::Large { .. }) => raw::free_large(heap_or_create(), ptr),
        Err(misuse) => raw::report_misuse(ptr, misuse),
    }
}

/// # Safety
/// C's `calloc`.
#[no_mangle]
pub unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    if let Some(total) = count.checked_mul(size) {
        let p = pop_small(total);
        if !p.is_null() {
            // SAFETY: a block of the thread's cache, of a class of at least `total` and 16
            // bytes (the mark's word is cleared with the rest).
            unsafe { p.write_bytes(0, total.max(16)) };
            return p as *mut c_void;
        }
    }
    // SAFETY: the stub passes its arguments on; a tail jump, so it reads our caller.
    unsafe { nodalloc_calloc_entry(count, size) }
}

entry_stub!(fn nodalloc_calloc_entry(count: usize, size: usize) -> *mut c_void
    => calloc_at, site: "rdx", frame: "rcx");

extern "C" fn calloc_at(count: usize, size: usize, site: usize, frame: usize) -> *mut c_void {
    if secure::on() {
        return secure::calloc(count, size, site, frame);
    }
    let Some(total) = count.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return null_mut();
    };
    if let (Some(class), Some(heap)) = (class_of_malloc(total), heap()) {
        heap.enter_call_site(callsite::resolve(site, frame));
        // Zeroed as far as asked (which covers the double-free mark's word: every C-face class
        // is at least 16 bytes and `total` may be less, so clear it too).
        let p = heap.alloc_zeroed(class, total);
        return handed_out(p);
    }
    let p = malloc_at(total, site, frame);
    let fresh =
        !p.is_null() && class_of_malloc(total).is_none() && raw::large_is_zeroed(p as *const u8);
    if !p.is_null() && !fresh {
        // SAFETY: `p` holds at least `total` bytes.
        unsafe { (p as *mut u8).write_bytes(0, total) };
    }
    p
}

/// Usable bytes of a live block, aborting on a pointer nodalloc did not hand out.
fn usable(ptr: *mut u8) -> Option<usize> {
    match raw::classify(ptr) {
        Ok(Pointer::Small { class, .. }) => Some(class.size()),
        Ok(Pointer::Large { bytes }) => Some(bytes),
        Ok(Pointer::Foreign) => None,
        Err(misuse) => raw::report_misuse(ptr, misuse),
    }
}

/// # Safety
/// C's `realloc`.
#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: as for `calloc`.
    unsafe { nodalloc_realloc_entry(ptr, size) }
}

entry_stub!(fn nodalloc_realloc_entry(ptr: *mut c_void, size: usize) -> *mut c_void
    => realloc_at, site: "rdx", frame: "rcx");

/// # Safety
/// C's `realloc`, called from `site`.
unsafe extern "C" fn realloc_at(
    ptr: *mut c_void,
    size: usize,
    site: usize,
    frame: usize,
) -> *mut c_void {
    if secure::on() {
        // SAFETY: forwarded contract.
        return unsafe { secure::realloc(ptr, size, site, frame) };
    }
    if ptr.is_null() {
        return malloc_at(size, site, frame);
    }
    if size == 0 {
        // glibc frees and returns NULL.
        // SAFETY: forwarded contract.
        unsafe { free(ptr) };
        return null_mut();
    }
    let old = ptr as *mut u8;
    let copy_bytes = match raw::classify(old) {
        Ok(Pointer::Small { class, .. }) => {
            if class_of_malloc(size) == Some(class) {
                return ptr;
            }
            class.size()
        }
        Ok(Pointer::Large { bytes }) => {
            if class_of_malloc(size).is_none() && raw::resize_large_in_place(old, size) {
                return ptr;
            }
            bytes
        }
        Ok(Pointer::Foreign) => foreign::readable_bytes(old),
        Err(misuse) => raw::report_misuse(old, misuse),
    };
    let new = malloc_at(size, site, frame);
    if new.is_null() {
        return null_mut();
    }
    // SAFETY: both blocks are live and distinct; the old one holds `copy_bytes` readable bytes.
    unsafe {
        core::ptr::copy_nonoverlapping(old, new as *mut u8, copy_bytes.min(size));
        free(ptr);
    }
    new
}

/// # Safety
/// glibc's `reallocarray`.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, count: usize, size: usize) -> *mut c_void {
    // SAFETY: as for `calloc`.
    unsafe { nodalloc_reallocarray_entry(ptr, count, size) }
}

entry_stub!(fn nodalloc_reallocarray_entry(ptr: *mut c_void, count: usize, size: usize)
    -> *mut c_void => reallocarray_at, site: "rcx", frame: "r8");

/// # Safety
/// glibc's `reallocarray`, called from `site`.
unsafe extern "C" fn reallocarray_at(
    ptr: *mut c_void,
    count: usize,
    size: usize,
    site: usize,
    frame: usize,
) -> *mut c_void {
    match count.checked_mul(size) {
        // SAFETY: forwarded contract.
        Some(total) => unsafe { realloc_at(ptr, total, site, frame) },
        None => {
            set_errno(libc::ENOMEM);
            null_mut()
        }
    }
}

/// # Safety
/// glibc's `malloc_usable_size`.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    if ptr.is_null() {
        return 0;
    }
    if secure::on() {
        return secure::usable(ptr);
    }
    // A block from before nodalloc started has no size we know: report 0 (and abort, naming the
    // pointer, for anything that is no block at all).
    usable(ptr as *mut u8).unwrap_or_else(|| {
        foreign::readable_bytes(ptr as *mut u8);
        0
    })
}
