//! Thread heaps for faces that keep their own thread-local pointer (the C library): mapped
//! sixteen at a time, recycled when a thread exits, so waves of short threads reuse the same
//! few heaps, and the caches they filled (see [`recycle`]). A heap not yet handed out is never
//! written, so it costs no resident page, and a new one is written only up to its lists
//! ([`ThreadHeap::init`]): its thread makes resident the lists of the classes it uses.
//!
//! The pool's lock is a spin lock held for a few instructions; the instance's fork handlers
//! hold it across `fork` ([`lock`], [`unlock`]).

use super::{HeapState, ThreadHeap};
use crate::ds::spinlock::SpinLock;
use crate::os;
use crate::size_class::SizeClass;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

/// The free heaps, linked by `pool_next`, and the newest mapping's heaps not yet handed out.
struct PoolState {
    free: *mut ThreadHeap,
    fresh: *mut ThreadHeap,
    fresh_left: usize,
}

struct Pool(UnsafeCell<PoolState>);

// SAFETY: the state is only touched with POOL_LOCK held.
unsafe impl Sync for Pool {}

static POOL: Pool = Pool(UnsafeCell::new(PoolState {
    free: core::ptr::null_mut(),
    fresh: core::ptr::null_mut(),
    fresh_left: 0,
}));
static POOL_LOCK: SpinLock = SpinLock::new();

/// Heaps mapped at once when the pool is empty (a heap is about 16 KiB).
const HEAPS_PER_MAPPING: usize = 16;

/// Bytes from one heap of a mapping to the next: whole pages, so that each heap starts a page.
/// A new heap writes its first fields and class tables, and the lists of the classes its
/// thread uses (see [`ThreadHeap::init`]): one page for a thread that uses a few small
/// classes, where a heap straddling pages made two of it.
const HEAP_STRIDE: usize = core::mem::size_of::<ThreadHeap>().next_multiple_of(os::PAGE_SIZE);

/// A fresh heap that attaches through `attach_hook` on its first slow path. `None` if no
/// memory can be mapped.
pub(crate) fn take(attach_hook: fn(&mut ThreadHeap) -> bool) -> Option<&'static mut ThreadHeap> {
    let _guard = POOL_LOCK.lock();
    // SAFETY: POOL_LOCK is held.
    let pool = unsafe { &mut *POOL.0.get() };
    let heap = if !pool.free.is_null() {
        let heap = pool.free;
        // SAFETY: `heap` is a pooled, initialised heap that no thread uses.
        pool.free = unsafe { (*heap).pool_next };
        heap
    } else {
        if pool.fresh_left == 0 {
            let bytes = HEAPS_PER_MAPPING * HEAP_STRIDE;
            pool.fresh = os::reserve(bytes)? as *mut ThreadHeap;
            pool.fresh_left = HEAPS_PER_MAPPING;
        }
        let heap = pool.fresh;
        // SAFETY: `fresh_left` heaps remain in the mapping from `fresh` on, a stride apart
        // (page-aligned, so aligned for a heap) and never written (the mapping reads as zero
        // bits); this one is initialised before anyone sees it.
        unsafe {
            pool.fresh = heap.byte_add(HEAP_STRIDE);
            ThreadHeap::init(heap, Some(attach_hook));
        }
        pool.fresh_left -= 1;
        heap
    };
    // SAFETY: `heap` is initialised and no thread uses it.
    unsafe {
        (*heap).pool_next = core::ptr::null_mut();
        (*heap).pooled = true;
        Some(&mut *heap)
    }
}

/// Returns a pooled heap to the pool at its thread's exit, fresh again. Its caches stay in it
/// where they may ([`ThreadHeap::can_keep_caches`]): the next thread to start takes the most
/// recently returned heap and, homed on the same node, starts with the objects the last one
/// cached, as a CPU's cache outlives the threads that run on it; waves of short threads then
/// pass their objects on without a round trip through the node heap. Kept caches that no
/// thread takes within an upkeep period go home ([`drop_stale`]). Otherwise the heap is retired
/// (its caches go home). True when the heap was active (its thread counted as live). The
/// caller's thread must never touch it again.
pub(crate) fn recycle(
    heap: &'static mut ThreadHeap,
    attach_hook: fn(&mut ThreadHeap) -> bool,
) -> bool {
    let was_active = heap.state == HeapState::Active;
    let keep = park(heap);
    if !keep {
        heap.retire();
    }
    heap.attach_hook = Some(attach_hook);
    push(heap, !keep);
    was_active
}

/// Leaves the caches of `heap`, whose thread exits, in it for the next thread, if it may keep
/// them and the bound on such heaps allows (see [`recycle`]); true if it did.
pub(crate) fn park(heap: &mut ThreadHeap) -> bool {
    if !heap.can_keep_caches() || !reserve_kept(heap) {
        return false;
    }
    heap.park_caches(os::monotonic_ns());
    true
}

/// Heaps in the pool that keep caches (see [`recycle`]).
static KEPT: AtomicUsize = AtomicUsize::new(0);

/// Heaps that may keep caches at once, per CPU the process may run on.
const KEPT_PER_CPU: usize = 4;

/// Counts one more heap keeping caches if fewer than [`KEPT_PER_CPU`] per CPU the process may
/// run on do: a few threads' worth per CPU, as per-CPU caches would hold them for threads that
/// outnumber the cores. Without a bound, the 32 threads of each wave of mimalloc's stress
/// test kept a fifth more memory; with one heap per CPU, waves of 8 threads on 2 CPUs lost half
/// of what keeping gained (docs/JOURNAL.md, issue 32).
fn reserve_kept(heap: &ThreadHeap) -> bool {
    let cpus = heap
        .heaps()
        .map_or(0, |heaps| heaps.topology().process_cpus().count());
    if KEPT.fetch_add(1, Ordering::Relaxed) < KEPT_PER_CPU * cpus.max(1) {
        return true;
    }
    KEPT.fetch_sub(1, Ordering::Relaxed);
    false
}

/// A heap stopped keeping caches (taken by a thread, or its caches went home).
pub(super) fn release_kept() {
    KEPT.fetch_sub(1, Ordering::Relaxed);
}

/// Puts `heap` on the pool's free list, written over with a fresh heap (of the same attach
/// hook) first with `fresh`: in place, touching only the pages its last thread wrote
/// ([`ThreadHeap::reset`]).
fn push(heap: *mut ThreadHeap, fresh: bool) {
    let _guard = POOL_LOCK.lock();
    // SAFETY: POOL_LOCK is held; the heap is initialised and no longer used by any thread.
    unsafe {
        if fresh {
            ThreadHeap::reset(heap, (*heap).attach_hook);
        }
        let pool = &mut *POOL.0.get();
        (*heap).pool_next = pool.free;
        pool.free = heap;
    }
}

/// Takes a pooled heap whose kept caches were left at or before `before` off the free list.
fn take_stale(before: u64) -> Option<&'static mut ThreadHeap> {
    let _guard = POOL_LOCK.lock();
    // SAFETY: POOL_LOCK is held; pooled heaps are initialised and used by no thread.
    unsafe {
        let pool = &mut *POOL.0.get();
        let mut link: *mut *mut ThreadHeap = &mut pool.free;
        while !(*link).is_null() {
            let heap = *link;
            let kept = (*heap).kept_since();
            if kept != 0 && kept <= before {
                *link = (*heap).pool_next;
                (*heap).pool_next = core::ptr::null_mut();
                return Some(&mut *heap);
            }
            link = &mut (*heap).pool_next;
        }
    }
    None
}

/// True when `object` is in the cache of `class` that an exited thread left in a pooled heap:
/// a double free of a block that thread freed (before caches were kept, its exit sent the block
/// to its bag, where a second free was caught). Walks the kept heaps' lists under the pool's
/// lock, which keeps them from being taken meanwhile; for suspicions only.
pub(crate) fn kept_holds(class: SizeClass, object: *mut u8) -> bool {
    if KEPT.load(Ordering::Relaxed) == 0 {
        return false;
    }
    let _guard = POOL_LOCK.lock();
    // SAFETY: POOL_LOCK is held; heaps on the free list are initialised and no thread uses
    // them until one takes it off the list under the lock.
    unsafe {
        let mut heap = (*POOL.0.get()).free;
        while !heap.is_null() {
            if (*heap).kept_since() != 0 && (*heap).holds(class, object) {
                return true;
            }
            heap = (*heap).pool_next;
        }
    }
    false
}

/// Sends home the caches that exited threads left in pooled heaps at or before `before`
/// (`u64::MAX`: all of them), one heap at a time, outside the pool's lock. The maintenance
/// thread's passes, every thread's upkeep and `purge` call it.
pub(crate) fn drop_stale(before: u64) {
    while let Some(heap) = take_stale(before) {
        heap.drop_kept_caches();
        push(heap, true);
    }
}

/// Takes the pool's lock (fork `prepare`).
pub(crate) fn lock() {
    POOL_LOCK.acquire();
}

/// Releases the pool's lock (fork `parent` and `child`).
pub(crate) fn unlock() {
    POOL_LOCK.release();
}
