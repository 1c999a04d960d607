//! Thread heaps for faces that keep their own thread-local pointer (the C library): mapped
//! sixteen at a time, recycled when a thread exits, so waves of short threads reuse the same
//! few heaps. A heap not yet handed out is never written, so it costs no resident page.
//!
//! The pool's lock is a spin lock held for a few instructions; the instance's fork handlers
//! hold it across `fork` ([`lock`], [`unlock`]).

use super::{HeapState, ThreadHeap};
use crate::ds::spinlock::SpinLock;
use crate::os;
use core::cell::UnsafeCell;

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

/// Heaps mapped at once when the pool is empty (a 7.9 KiB heap each).
const HEAPS_PER_MAPPING: usize = 16;

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
            let bytes = HEAPS_PER_MAPPING * core::mem::size_of::<ThreadHeap>();
            pool.fresh = os::reserve(bytes)? as *mut ThreadHeap;
            pool.fresh_left = HEAPS_PER_MAPPING;
        }
        let heap = pool.fresh;
        // SAFETY: `fresh_left` heaps remain in the mapping from `fresh` on; this one is written
        // before anyone sees it.
        unsafe {
            pool.fresh = heap.add(1);
            heap.write(ThreadHeap::with_attach_hook(Some(attach_hook)));
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

/// Retires a pooled heap (its caches go home) and returns it to the pool, fresh again. True
/// when the heap was active (its thread counted as live). The caller's thread must never touch
/// it again.
pub(crate) fn recycle(
    heap: &'static mut ThreadHeap,
    attach_hook: fn(&mut ThreadHeap) -> bool,
) -> bool {
    let was_active = heap.state == HeapState::Active;
    heap.retire();
    let heap: *mut ThreadHeap = heap;
    let _guard = POOL_LOCK.lock();
    // SAFETY: POOL_LOCK is held; the heap is empty (retired) and no longer used by its thread.
    unsafe {
        heap.write(ThreadHeap::with_attach_hook(Some(attach_hook)));
        let pool = &mut *POOL.0.get();
        (*heap).pool_next = pool.free;
        pool.free = heap;
    }
    was_active
}

/// Takes the pool's lock (fork `prepare`).
pub(crate) fn lock() {
    POOL_LOCK.acquire();
}

/// Releases the pool's lock (fork `parent` and `child`).
pub(crate) fn unlock() {
    POOL_LOCK.release();
}
