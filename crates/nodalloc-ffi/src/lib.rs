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
//! thread-exit destructors) from the node heaps directly (see `plain.rs`).
//!
//! The library's shape: this file and its siblings (`aligned.rs`, `cxx.rs`, `glibc.rs`,
//! `extras.rs`, `threads.rs`, `tiers.rs`) hold the exported symbols and their call-site stubs;
//! their hits are one call each into the core's thread cache (`ThreadHeap::malloc_hit`,
//! `free_hit`), which applies this library's double-free screen; `plain.rs` is the path they
//! share once a hit misses (the thread's heap and its
//! life, allocation and free through the core, errno); `secure/` is secure mode's layer, which
//! the entries ask first and which calls only the plain path; `screen.rs` is the double-free
//! screen of `free`, `foreign.rs` the pointers from before nodalloc started.
#![deny(missing_docs)]
// No Rust standard library on x86_64: the library links libc alone (its thread-locals are TLS
// symbols of its own, `tls.rs`; a panic reports and aborts, from the core crate's handler).
#![cfg_attr(all(target_arch = "x86_64", not(test)), no_std)]

mod aligned;
mod callsite;
mod copy;
mod cxx;
mod extras;
mod foreign;
mod glibc;
mod heaps;
mod plain;
mod screen;
mod secure;
mod threads;
mod tiers;
mod tls;
mod tokens;

use aligned::allocate_aligned;
use callsite::entry_stub;
use core::ffi::c_void;
use core::ptr::null_mut;
use nodalloc_core::raw::{self, class_of_malloc, Caller, Pointer, ThreadHeap};
use plain::{
    allocate_at, current_heap, free_core, handed_out, heap, live, malloc_at, set_errno, span_at,
    usable, MALLOC_ALIGN,
};

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
    copy::resolve();
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

/// The cache's hit for the entry points that allocate a block of `size` at the default
/// alignment (`calloc`, the aligned ones at 16 or less, C++'s plain `new`): a block with its
/// screen word cleared, or null for them to take their call-site stub (a miss, a size above
/// 1 KiB, secure mode and call-site partitions, whose caches stay empty).
#[inline(always)]
pub(crate) fn pop_small(size: usize) -> *mut u8 {
    // SAFETY: the slot holds this thread's heap or the detached one.
    unsafe { ThreadHeap::small_hit(tls::get(), size) }
}

/// [`pop_small`] at an alignment `align` (a power of two): `malloc`'s class at 16 or less;
/// above, the class `raw::alloc` takes for the request, every object of which starts at a
/// multiple of `align` (its size is one), when the request rounded up to `align` is at most
/// 1 KiB. Null for a miss, as [`pop_small`]'s, and for every other request.
#[inline(always)]
pub(crate) fn pop_aligned(align: usize, size: usize) -> *mut u8 {
    debug_assert!(align.is_power_of_two());
    if align <= plain::MALLOC_ALIGN {
        return pop_small(size);
    }
    let heap = tls::get();
    // SAFETY: either kind of heap may be read; only its lookup tables are.
    match unsafe { &*heap }.slots().slot_of_small(size, align) {
        // SAFETY: the slot holds this thread's heap or the detached one.
        Some(slot) => unsafe { ThreadHeap::class_hit(heap, slot) },
        // Past the tables (a request above 1 KiB once rounded): the caller's stub; a call to
        // the general lookup here would cost every hit a stack frame.
        None => core::ptr::null_mut(),
    }
}

/// # Safety
/// C's `malloc`.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    // SAFETY: the slot holds this thread's heap or the detached one; the miss stub passes its
    // arguments on, reached by tail jumps, so it reads `malloc`'s caller.
    unsafe { ThreadHeap::malloc_hit(tls::get(), size, nodalloc_malloc_miss) as *mut c_void }
}

entry_stub!(fn nodalloc_malloc_miss(size: usize, heap: *mut c_void) -> *mut u8
    => malloc_slow, site: "rdx", frame: "rcx");

/// A `malloc` of `size` that the cache's hit did not serve (`heap` is the slot's value, maybe
/// detached), called from `site`. The class is looked up again rather than passed: the hit
/// then keeps no register for it. With call-site partitions and the return address as the
/// call site, the core's partition hit is tried here (it pops the site's list once);
/// everything else goes on to [`malloc_miss`] (a tail call, so this part keeps no stack
/// frame).
#[inline(never)]
pub(crate) extern "C" fn malloc_slow(
    size: usize,
    heap: *mut c_void,
    site: usize,
    frame: usize,
) -> *mut u8 {
    let direct = callsite::is_direct();
    if direct {
        if let (Some(heap), Some(class)) = (live(heap as *mut ThreadHeap), class_of_malloc(size)) {
            heap.enter_caller(Caller {
                ret: site,
                frame,
                size,
            });
            let p = heap.partition_hit(class, site);
            if !p.is_null() {
                screen::clear_mark(p);
                return p;
            }
        }
    }
    malloc_miss(size, heap, site, frame, direct)
}

/// [`malloc_slow`] past the partition hit (`tried`: it was tried there): secure mode to its
/// layer, a small class to the core's partition hit (with a call site found by a walk) and
/// then its miss path (which refills without popping the partition again), the rest (large
/// sizes, a thread without a heap) to [`allocate_at`].
#[cold]
#[inline(never)]
extern "C" fn malloc_miss(
    size: usize,
    heap: *mut c_void,
    site: usize,
    frame: usize,
    tried: bool,
) -> *mut u8 {
    if secure::on() {
        return secure::alloc(size, MALLOC_ALIGN, secure::Kind::Malloc, site, frame) as *mut u8;
    }
    if let (Some(heap), Some(class)) = (live(heap as *mut ThreadHeap), class_of_malloc(size)) {
        if !tried {
            heap.enter_caller(Caller {
                ret: site,
                frame,
                size,
            });
            let p = heap.partition_hit(class, callsite::resolve(site, frame));
            if !p.is_null() {
                return handed_out(p) as *mut u8;
            }
        }
        let p = heap.alloc_after_partition_hit(class);
        if heap.took_untouched() {
            // Never written since its span was carved: no mark to clear, and a write would
            // fault its page in here rather than where the program touches it.
            return p;
        }
        return handed_out(p) as *mut u8;
    }
    allocate_at(size, MALLOC_ALIGN, site, frame) as *mut u8
}

/// # Safety
/// C's `free`: `ptr` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { free_inline(ptr) }
}

/// `free`'s body, for the entry points that free as it does (the `delete` operators): inlined,
/// so that they jump to no exported symbol (a call through the GOT).
///
/// # Safety
/// C's `free`: `ptr` is null or a live block from this allocator.
#[inline(always)]
pub(crate) unsafe fn free_inline(ptr: *mut c_void) {
    // Null is no block of any home region (which never starts at address 0): the slow path
    // sorts it out, and the fast path has no test of its own for it.
    // SAFETY: the slot holds this thread's heap or the detached one; the caller gives the
    // block up.
    if unsafe { ThreadHeap::free_hit(tls::get(), ptr as *mut u8, screen::SCREEN) } {
        return;
    }
    // SAFETY: forwarded contract.
    unsafe { free_slow(ptr as *mut u8) }
}

/// A `free` the home fast path did not take (null among them). In the heap profile's lean
/// mode a small block of the heap's node goes to its list here; everything else goes on to
/// [`free_slower`].
#[inline(never)]
unsafe extern "C" fn free_slow(ptr: *mut u8) {
    if ptr.is_null() {
        return;
    }
    if let Some(heap) = heap() {
        if let Some(class) = heap.lean_class_of(ptr) {
            // The heap profile's lean mode: the free fast path's push (which follows no move
            // either: the pops do), then the list's budget.
            // SAFETY: a small block of this heap's node, which the caller gives up.
            unsafe { heap.free_screened(ptr, class.slot(), screen::SCREEN) };
            return heap.lean_enforce(class);
        }
    }
    // SAFETY: forwarded contract.
    unsafe { free_slower(ptr) }
}

/// [`free_slow`] past lean mode's push (in a function of its own, so that the push saves no
/// registers for the paths here). With call-site partitions, a small block of the heap's node
/// goes to its partition's list (no stack frame: every call is a tail call); everything else
/// goes on to [`free_general`].
#[inline(never)]
unsafe extern "C" fn free_slower(ptr: *mut u8) {
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
    // A heap-profile sample that stayed in its bag (lean mode's push refused its unit).
    raw::forget_sample(ptr);
    if raw::is_owned(ptr) {
        // A first-class heap's block goes back to its heap (secure mode's layer never saw
        // it: the core's checks apply).
        // SAFETY: forwarded contract.
        return unsafe { raw::free_owned(ptr) };
    }
    if secure::on() {
        // SAFETY: forwarded contract.
        return unsafe { secure::free(ptr as *mut c_void, secure::Kind::Malloc, None) };
    }
    // SAFETY: forwarded contract.
    unsafe { free_core(ptr) }
}

/// # Safety
/// C's `calloc`.
#[no_mangle]
pub unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    if let Some(p) = calloc_hit(count, size) {
        return p;
    }
    // SAFETY: the stub passes its arguments on; a tail jump, so it reads our caller.
    unsafe { nodalloc_calloc_entry(count, size) }
}

/// `calloc`'s hit: a block of the thread's cache for `count × size` bytes, zeroed, if it has
/// one.
#[inline(always)]
pub(crate) fn calloc_hit(count: usize, size: usize) -> Option<*mut c_void> {
    let total = count.checked_mul(size)?;
    let p = pop_small(total);
    if p.is_null() {
        return None;
    }
    // SAFETY: a block of the thread's cache, of a class of at least `total` and 16 bytes (the
    // mark's word is cleared with the rest).
    unsafe { p.write_bytes(0, total.max(16)) };
    Some(p as *mut c_void)
}

entry_stub!(fn nodalloc_calloc_entry(count: usize, size: usize) -> *mut c_void
    => calloc_at, site: "rdx", frame: "rcx");

pub(crate) extern "C" fn calloc_at(
    count: usize,
    size: usize,
    site: usize,
    frame: usize,
) -> *mut c_void {
    if secure::on() {
        return secure::calloc(count, size, site, frame);
    }
    let Some(total) = count.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return null_mut();
    };
    if let (Some(class), Some(heap)) = (class_of_malloc(total), heap()) {
        heap.enter_call_site(callsite::resolve(site, frame));
        heap.enter_caller(Caller {
            ret: site,
            frame,
            size: total,
        });
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

/// # Safety
/// C's `realloc`.
#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: C's `realloc`: `ptr` is null or a live block the caller gives up if a new one
    // comes back.
    if let Some(p) = unsafe { realloc_hit(ptr, size) } {
        return p;
    }
    // SAFETY: as for `calloc`.
    unsafe { nodalloc_realloc_entry(ptr, size) }
}

/// `realloc`'s hit: a small block of the thread's own node, resized within the small classes.
/// It stays where it is when its class serves the new size; otherwise it is copied into a block
/// of the thread's cache and goes onto its list, as `free`'s hit puts it. `None` for the stub to
/// take: null, a size of 0 or above the classes, a block growing into a span of its own
/// ([`grows_into_span`]), large and foreign blocks, other nodes' blocks, an empty list, and
/// secure mode, call-site partitions and the heap profile's lean mode, whose caches or home
/// ranges stay empty.
///
/// # Safety
/// As for `realloc`.
#[inline(always)]
unsafe fn realloc_hit(ptr: *mut c_void, size: usize) -> Option<*mut c_void> {
    let heap = tls::get();
    // SAFETY: the slot holds this thread's heap or the detached one (which matches no block).
    let class = unsafe { &*heap }.home_class_of(ptr as *const u8)?;
    if size == 0 {
        return None;
    }
    let new_class = class_of_malloc(size)?.slot();
    if new_class == class {
        return Some(ptr);
    }
    if grows_into_span(class.class().size(), size) {
        return None;
    }
    // SAFETY: as above.
    let new = unsafe { ThreadHeap::class_hit(heap, new_class) };
    if new.is_null() {
        return None;
    }
    // SAFETY: `ptr` is a block of `class` of the heap's node (the heap is the thread's own:
    // the detached heap matched nothing), which the caller gives up; `new` is a distinct block
    // of at least `size` bytes, now the caller's. The push screens `ptr` as `free`'s does.
    unsafe {
        core::ptr::copy_nonoverlapping(ptr as *const u8, new, class.class().size().min(size));
        (*heap).free_screened(ptr as *mut u8, class, screen::SCREEN);
    }
    Some(new as *mut c_void)
}

entry_stub!(fn nodalloc_realloc_entry(ptr: *mut c_void, size: usize) -> *mut c_void
    => realloc_at, site: "rdx", frame: "rcx");

/// The size from which a block that `realloc` grows from half of it or more becomes a span of
/// its own (a large block) instead of an object of the next size class: one unit (32 KiB), so
/// a span costs at most twice the address space of the request and, like an object, the pages
/// the program touches. A span grows in place into the free units after it, as a buffer that
/// keeps growing needs (a string built piece by piece, a list appended to), and goes back to
/// its region whole when freed. Through the classes, every step copied the block to the next
/// class and left the freed one cached there: buffers grown an eighth at a time from 1 KiB to
/// 4 MiB took 1.8× glibc's time at 2.3× its peak RSS, and python3 building a JSON text left
/// free objects in each of twenty classes of 16–256 KiB (docs/JOURNAL.md, "Thirty-second
/// round"). A block that was small is left to the classes: a program that resizes small blocks
/// to random sizes (the C suite's mstress) kept 10 % more memory in freed spans than in its
/// classes' caches.
const GROWING_SPAN_MIN: usize = 32 << 10;

/// True when `realloc` of a block of `old` bytes to `size` bytes makes it a span (see
/// [`GROWING_SPAN_MIN`]).
#[inline(always)]
fn grows_into_span(old: usize, size: usize) -> bool {
    size >= GROWING_SPAN_MIN && size > old && old >= GROWING_SPAN_MIN / 2
}

/// # Safety
/// C's `realloc`, called from `site`.
pub(crate) unsafe extern "C" fn realloc_at(
    ptr: *mut c_void,
    size: usize,
    site: usize,
    frame: usize,
) -> *mut c_void {
    if raw::is_owned(ptr as *const u8) && size != 0 {
        // A first-class heap's block stays in its heap (secure mode's layer never saw it).
        return heaps::realloc_owned(ptr as *mut u8, size);
    }
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
            if size >= GROWING_SPAN_MIN || class_of_malloc(size).is_none() {
                // The caller, for the heap profile (to which a resize is an allocation).
                let mut heap = heap();
                if let Some(heap) = heap.as_deref_mut() {
                    heap.enter_caller(Caller {
                        ret: site,
                        frame,
                        size,
                    });
                }
                if raw::resize_large_in_place(heap, old, size) {
                    return ptr;
                }
            }
            bytes
        }
        Ok(Pointer::Owned { bytes, .. }) => bytes,
        Ok(Pointer::Foreign) => foreign::readable_bytes(old),
        Err(misuse) => raw::report_misuse(old, misuse),
    };
    let new = if grows_into_span(copy_bytes, size) {
        span_at(size, site, frame)
    } else {
        malloc_at(size, site, frame)
    };
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
/// glibc's `malloc_usable_size`.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    // The hit: a small block of the thread's own node, sized by its class as `free`'s and
    // `realloc`'s hits find it (region, tag, object start). Programs that keep their own count
    // of the bytes they hold ask this at every allocation and free (redis's `zmalloc`); the
    // general classification below costs them more than `malloc` does. Secure mode, call-site
    // partitions and lean profiling keep the home view empty, and null matches nothing: all go
    // to [`usable_size_miss`].
    let heap = tls::get();
    // SAFETY: the slot holds this thread's heap or the detached one (which matches no block).
    if let Some(class) = unsafe { &*heap }.home_class_of(ptr as *const u8) {
        return class.class().usable();
    }
    usable_size_miss(ptr)
}

/// `malloc_usable_size` of any block its hit did not size: null, large, foreign and other
/// nodes' blocks, secure mode's. Out of line, so the hit saves no register.
#[cold]
#[inline(never)]
fn usable_size_miss(ptr: *mut c_void) -> usize {
    if ptr.is_null() {
        return 0;
    }
    if secure::on() && !raw::is_owned(ptr as *const u8) {
        return secure::usable(ptr);
    }
    // A block from before nodalloc started has no size we know: report 0 (and abort, naming the
    // pointer, for anything that is no block at all).
    usable(ptr as *mut u8).unwrap_or_else(|| {
        foreign::readable_bytes(ptr as *mut u8);
        0
    })
}
