//! A test-and-test-and-set lock for the allocator's short critical sections (central bag lists,
//! span pools). It cannot allocate, is valid when zeroed, and is held only for bounded work.
//!
//! Fork safety is the caller's business: the global arena's `pthread_atfork` handlers take every
//! lock before `fork` and release them in parent and child, so a child never inherits a lock
//! that a vanished thread held.

use crate::sync::{spin_hint, yield_thread, AtomicBool, Ordering};

/// Spins before yielding the CPU. Critical sections are a few hundred instructions, so a waiter
/// that has spun this long is most likely waiting on a preempted holder.
const SPINS_BEFORE_YIELD: u32 = 64;

pub struct SpinLock {
    locked: AtomicBool,
}

impl Default for SpinLock {
    fn default() -> Self {
        Self::new()
    }
}

impl SpinLock {
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
        }
    }

    #[cfg(loom)]
    pub fn new() -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
        }
    }

    #[inline]
    pub fn lock(&self) -> SpinGuard<'_> {
        self.acquire();
        SpinGuard { lock: self }
    }

    /// Takes the lock without a guard; pair with [`SpinLock::release`]. Used by the fork handlers,
    /// which hold locks across a function boundary.
    pub fn acquire(&self) {
        loop {
            // Acquire: what the previous holder wrote inside the section is visible to us.
            if !self.locked.swap(true, Ordering::Acquire) {
                return;
            }
            // Wait with plain loads so waiters do not bounce the cache line. (Under loom a
            // relaxed load may legally re-read a stale value forever, so the model retries the
            // swap instead, after yielding.)
            #[cfg(not(loom))]
            {
                let mut spins = 0;
                while self.locked.load(Ordering::Relaxed) {
                    spins += 1;
                    if spins < SPINS_BEFORE_YIELD {
                        spin_hint();
                    } else {
                        yield_thread();
                    }
                }
            }
            #[cfg(loom)]
            {
                let _ = (spin_hint, SPINS_BEFORE_YIELD);
                yield_thread();
            }
        }
    }

    /// Releases a lock taken with [`SpinLock::acquire`] (or left held across `fork`).
    pub fn release(&self) {
        // Release: our writes inside the section happen-before the next holder's reads.
        self.locked.store(false, Ordering::Release);
    }

    #[cfg(any(test, loom))]
    pub fn try_lock(&self) -> Option<SpinGuard<'_>> {
        if self.locked.swap(true, Ordering::Acquire) {
            None
        } else {
            Some(SpinGuard { lock: self })
        }
    }
}

pub struct SpinGuard<'a> {
    lock: &'a SpinLock,
}

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        self.lock.release();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn lock_gives_mutual_exclusion_under_contention() {
        struct Shared {
            lock: SpinLock,
            value: core::cell::UnsafeCell<u64>,
        }
        // SAFETY: `value` is only touched while `lock` is held.
        unsafe impl Sync for Shared {}
        let shared = Arc::new(Shared {
            lock: SpinLock::new(),
            value: 0.into(),
        });
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let _guard = shared.lock.lock();
                        // SAFETY: the lock is held, so no other thread touches `value`.
                        unsafe { *shared.value.get() += 1 };
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let _guard = shared.lock.lock();
        // SAFETY: the lock is held and all writers have joined.
        assert_eq!(unsafe { *shared.value.get() }, 80_000);
    }

    #[test]
    fn try_lock_fails_while_held() {
        let lock = SpinLock::new();
        let guard = lock.lock();
        assert!(lock.try_lock().is_none());
        drop(guard);
        assert!(lock.try_lock().is_some());
    }
}
